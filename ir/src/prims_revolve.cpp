// revolve: the backward half of a scan's reverse mode under binomial checkpointing
// (Griewank and Walther, "Algorithm 799: revolve", ACM TOMS 26(1), 2000), run by its
// eager rule:
//
//   %g... = revolve(consts..., carries..., xs..., bconsts..., bcarries..., bxs...)
//           {forward={...}, advance={...}, backward={...}, length=N, num_consts=C,
//            num_carry=K, num_ys=Y, num_bwd_consts=BC, num_bwd_carry=BK, snapshots=S
//            [, reverse=true][, index=I]}
//
// It computes what the store-all pair computes, `scan(consts, carries, xs) {forward}`
// (K carries, Y ys, then the residuals stacked) followed by `scan(bconsts, bcarries,
// residuals, bxs) {backward}` with reverse flipped, without stacking the residuals:
// it holds at most S snapshots of the carries (the initial ones among them) besides the
// running carries, and recomputes the rest from them, following Revolve's schedule (reel/ir/revolve.hpp: advance with the
// `advance` body, the body's carries only; turn a step by running `forward` on its
// carry, for its residuals, and then `backward`). A runtime driver rather than tape
// structure: the schedule depends on (N, S) only, and unrolled into tapes it would grow
// with N.
//
// Its derivatives (second order through a binomial scan) are those of the store-all
// pair it equals, built and differentiated in its rules (so they store all). Batching
// (vmap of a gradient through a binomial scan) is one revolve over the batched bodies,
// flagged as scan's are (carries to a fixed point; the backward body's residual inputs
// batched where the forward body's residuals are).
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <memory>

#include "batching.hpp"
#include "reel/ir/evaluate.hpp"
#include "reel/ir/loop_params.hpp"
#include "reel/ir/revolve.hpp"
#include "reel/ir/prims.hpp"

namespace reel {

namespace prims {

namespace {

std::vector<VarType> output_types(const Tape& t, std::size_t from, std::size_t to) {
  std::vector<VarType> out;
  for (std::size_t o = from; o < to; ++o) out.push_back(t.type(t.outputs[o]));
  return out;
}

Results<VarType> revolve_infer(std::span<const VarType> in, const Attrs& a) {
  const RevolveParams L = RevolveParams::read(a, in.size());
  const std::vector<VarType> f = L.forward->input_types(), bk = L.backward->input_types();
  const std::size_t c0 = L.counter();
  std::vector<VarType> want;
  for (std::size_t i = c0; i < f.size(); ++i) want.push_back(i < c0 + L.C + L.K ? f[i] : with_leading(L.length, f[i]));
  for (std::size_t i = c0; i < bk.size(); ++i) {
    if (i >= c0 + L.BC + L.BK && i < c0 + L.BC + L.BK + L.R) continue;  // the residuals: recomputed
    want.push_back(i < c0 + L.BC + L.BK ? bk[i] : with_leading(L.length, bk[i]));
  }
  if (!std::equal(want.begin(), want.end(), in.begin(), in.end()))
    throw Error(fmt::format("revolve: expected arguments {}, got {}", types_str(want), types_str(in)));
  auto expect = [](bool ok, const char* what) {
    if (!ok) throw Error(fmt::format("revolve: expected {}", what));
  };
  const VarType counter{DType::i64, {}};
  expect(!L.has_index || (f[0] == counter && bk[0] == counter), "bodies whose first input is the i64 counter");
  expect(L.advance->input_types() == f, "an advance body taking the forward body's inputs");
  const std::vector<VarType> carries(f.begin() + static_cast<std::ptrdiff_t>(c0 + L.C),
                                     f.begin() + static_cast<std::ptrdiff_t>(c0 + L.C + L.K));
  expect(output_types(*L.advance, 0, L.advance->outputs.size()) == carries,
         "an advance body giving the carries (as they enter the forward body)");
  expect(output_types(*L.forward, 0, L.K) == carries, "a forward body giving the carries first");
  expect(output_types(*L.forward, L.K + L.Y, L.forward->outputs.size()) ==
             std::vector<VarType>(bk.begin() + static_cast<std::ptrdiff_t>(c0 + L.BC + L.BK),
                                  bk.begin() + static_cast<std::ptrdiff_t>(c0 + L.BC + L.BK + L.R)),
         "a backward body taking the forward body's residuals after its carries");
  const std::vector<VarType> bcarries = output_types(*L.backward, 0, L.BK);
  expect(bcarries == std::vector<VarType>(bk.begin() + static_cast<std::ptrdiff_t>(c0 + L.BC),
                                          bk.begin() + static_cast<std::ptrdiff_t>(c0 + L.BC + L.BK)),
         "a backward body giving its carries first, as they enter it");
  std::vector<VarType> out = bcarries;
  for (const VarType& t : output_types(*L.backward, L.BK, L.backward->outputs.size()))
    out.push_back(with_leading(L.length, t));
  return out;
}

// Runs the schedule: the backward scan's carries and stacked ys, computed from the
// scan's initial carries.
class Driver {
 public:
  Driver(const RevolveParams& L, std::span<const Tensor> in) : L_(L), in_(in) {
    const std::size_t b0 = L.C + L.K + L.X;
    bcarry_.assign(in.begin() + static_cast<std::ptrdiff_t>(b0 + L.BC),
                   in.begin() + static_cast<std::ptrdiff_t>(b0 + L.BC + L.BK));
    for (std::size_t o = L.BK; o < L.backward->outputs.size(); ++o) {
      const VarType t = with_leading(L.length, L.backward->type(L.backward->outputs[o]));
      bys_.emplace_back(t.dtype, t.shape);
    }
  }

  std::vector<Tensor> run() {
    std::vector<std::vector<Tensor>> slots(static_cast<std::size_t>(revolve_slots(L_.length, L_.snapshots)));
    slots[0].assign(in_.begin() + static_cast<std::ptrdiff_t>(L_.C),
                    in_.begin() + static_cast<std::ptrdiff_t>(L_.C + L_.K));
    reel::revolve(L_.length, L_.snapshots,
            {.advance = [&](int from_slot, int64_t from, int to_slot, int64_t to) {
               slots[static_cast<std::size_t>(to_slot)] = advance(from, to, slots[static_cast<std::size_t>(from_slot)]);
             },
             .turn = [&](int slot, int64_t step) { turn(step, slots[static_cast<std::size_t>(slot)]); }});
    std::vector<Tensor> out = std::move(bcarry_);
    out.insert(out.end(), bys_.begin(), bys_.end());
    return out;
  }

 private:
  const RevolveParams& L_;
  std::span<const Tensor> in_;
  std::vector<Tensor> bcarry_, bys_;

  int64_t position(int64_t step) const { return L_.reverse ? L_.length - 1 - step : step; }  // in xs and ys

  void push_counter(std::vector<Tensor>& args, int64_t k) const {
    if (!L_.has_index) return;
    Tensor counter(DType::i64, {});
    counter.mutable_data<int64_t>()[0] = L_.index0 + k;
    args.push_back(std::move(counter));
  }

  // The forward body's arguments at position k.
  std::vector<Tensor> body_args(int64_t k, const std::vector<Tensor>& carry) const {
    std::vector<Tensor> args;
    push_counter(args, k);
    args.insert(args.end(), in_.begin(), in_.begin() + static_cast<std::ptrdiff_t>(L_.C));
    args.insert(args.end(), carry.begin(), carry.end());
    for (std::size_t j = 0; j < L_.X; ++j) args.push_back(slice_at(in_[L_.C + L_.K + j], k));
    return args;
  }

  // advance: the carry before step `to`, from the carry before step `from`.
  std::vector<Tensor> advance(int64_t from, int64_t to, std::vector<Tensor> carry) const {
    for (int64_t step = from; step < to; ++step) carry = evaluate(*L_.advance, body_args(position(step), carry));
    return carry;
  }

  // firsturn / youturn: step `step` forward with its residuals, then its adjoint.
  void turn(int64_t step, const std::vector<Tensor>& carry) {
    const int64_t k = position(step);
    std::vector<Tensor> outs = evaluate(*L_.forward, body_args(k, carry));
    std::vector<Tensor> args;
    push_counter(args, k);
    const std::size_t b0 = L_.C + L_.K + L_.X;
    args.insert(args.end(), in_.begin() + static_cast<std::ptrdiff_t>(b0),
                in_.begin() + static_cast<std::ptrdiff_t>(b0 + L_.BC));
    args.insert(args.end(), bcarry_.begin(), bcarry_.end());
    args.insert(args.end(), std::make_move_iterator(outs.begin() + static_cast<std::ptrdiff_t>(L_.K + L_.Y)),
                std::make_move_iterator(outs.end()));
    for (std::size_t j = 0; j < L_.BX; ++j) args.push_back(slice_at(in_[b0 + L_.BC + L_.BK + j], k));
    std::vector<Tensor> r = evaluate(*L_.backward, args);
    for (std::size_t c = 0; c < L_.BK; ++c) bcarry_[c] = std::move(r[c]);
    for (std::size_t j = 0; j < bys_.size(); ++j) store_at(bys_[j], k, r[L_.BK + j]);
  }
};

Results<Tensor> revolve_eager(std::span<const Tensor> in, const Attrs& a) {
  const RevolveParams L = RevolveParams::read(a, in.size());
  return Driver(L, in).run();
}

// The store-all pair of scans the call equals, as a tape of the call's arguments.
Tape store_all(const RevolveParams& L, std::span<const VarType> types) {
  TapeBuilder e;
  std::vector<Var> in;
  for (const VarType& t : types) in.push_back(e.input(t));
  // The forward scan, or the backward one (reverse flipped) over the backward body.
  auto attrs = [&](bool backward) {
    ScanParams p;
    p.body = backward ? L.backward : L.forward;
    p.length = L.length;
    p.C = backward ? L.BC : L.C, p.K = backward ? L.BK : L.K;
    p.reverse = L.reverse != backward, p.has_index = L.has_index, p.index0 = L.index0;
    return p.attrs();
  };
  const auto split = in.begin() + static_cast<std::ptrdiff_t>(L.C + L.K + L.X);
  const std::vector<Var> fwd =
      e.call_results(prims::scan(), std::vector<Var>(in.begin(), split), attrs(false));
  std::vector<Var> args(split, split + static_cast<std::ptrdiff_t>(L.BC + L.BK));
  args.insert(args.end(), fwd.begin() + static_cast<std::ptrdiff_t>(L.K + L.Y), fwd.end());
  args.insert(args.end(), split + static_cast<std::ptrdiff_t>(L.BC + L.BK), in.end());
  e.set_outputs(e.call_results(prims::scan(), std::move(args), attrs(true)));
  return e.finish();
}

Tape store_all_of(TapeBuilder& b, std::span<const Var> args, const Attrs& a) {
  std::vector<VarType> types;
  for (Var v : args) types.push_back(b.type(v));
  return store_all(RevolveParams::read(a, args.size()), types);
}

std::vector<Var> revolve_adjoint(TapeBuilder& b, const AdjointArgs& a) {
  const Tape E = store_all_of(b, a.args, a.attrs);
  const CallVjp v = call_vjp(b, a, E);
  std::vector<Var> grads(a.args.size(), kNoVar);
  if (v.V.size() == 0) return grads;
  const std::vector<Var> outs = b.inline_tape(v.V, v.operands);
  for (std::size_t i = 0, q = E.outputs.size(); i < a.args.size(); ++i)
    if (v.wanted[i]) grads[i] = outs[q++];
  return grads;
}

Results<Var> revolve_tangent(TapeBuilder& b, const TangentArgs& a) {
  const Tape E = store_all_of(b, a.args, a.attrs);
  const CallJvp j = call_jvp(b, a, E);
  return call_tangents(a, E, b.inline_tape(j.J, j.operands));
}

Results<Var> revolve_batch(TapeBuilder& b, const BatchArgs& a) {
  const RevolveParams L = RevolveParams::read(a.attrs, a.args.size());
  const std::size_t c0 = L.counter(), b0 = L.backward_consts().first;
  std::vector<bool> fin(L.forward->inputs().size(), false), bin(L.backward->inputs().size(), false);
  for (std::size_t i = 0; i < L.C + L.K + L.X; ++i) fin[c0 + i] = a.batched[i];
  const std::vector<bool> fout = batch_carries(*L.forward, fin, c0 + L.C, L.K);
  for (std::size_t i = 0; i < L.BC + L.BK; ++i) bin[c0 + i] = a.batched[b0 + i];
  for (std::size_t r = 0; r < L.R; ++r) bin[c0 + L.BC + L.BK + r] = fout[L.K + L.Y + r];
  for (std::size_t j = 0; j < L.BX; ++j) bin[c0 + L.BC + L.BK + L.R + j] = a.batched[b0 + L.BC + L.BK + j];
  const std::vector<bool> bout = batch_carries(*L.backward, bin, c0 + L.BC, L.BK);
  std::vector<Var> args(a.args.begin(), a.args.end());
  // Carries batched where their flags say; xs with the batch behind the length axis.
  auto carries = [&](std::size_t arg0, std::size_t in0, std::size_t n, const std::vector<bool>& in) {
    for (std::size_t c = 0; c < n; ++c)
      if (in[in0 + c]) args[arg0 + c] = ensure_batched(b, args[arg0 + c], a.batched[arg0 + c], a.size);
  };
  auto xs = [&](std::size_t arg0, std::size_t n) {
    for (std::size_t j = 0; j < n; ++j)
      if (a.batched[arg0 + j]) args[arg0 + j] = move_axes(b, args[arg0 + j], 0, 1, 1);
  };
  carries(L.C, c0 + L.C, L.K, fin);
  xs(L.C + L.K, L.X);
  carries(b0 + L.BC, c0 + L.BC, L.BK, bin);
  xs(b0 + L.BC + L.BK, L.BX);
  const Transforms& tr = *a.transforms;
  RevolveParams batched = L;
  batched.forward = std::make_shared<const Tape>(batch_loop_body(*L.forward, fin, fout, a.size, tr));
  const std::vector<bool> carry_flags(fout.begin(), fout.begin() + static_cast<std::ptrdiff_t>(L.K));
  batched.advance = std::make_shared<const Tape>(batch_loop_body(*L.advance, fin, carry_flags, a.size, tr));
  batched.backward = std::make_shared<const Tape>(batch_loop_body(*L.backward, bin, bout, a.size, tr));
  Attrs attrs = batched.attrs(a.attrs);
  std::vector<Var> res = b.call_results(prims::revolve(), std::move(args), std::move(attrs));
  for (std::size_t c = 0; c < L.BK; ++c) res[c] = ensure_batched(b, res[c], bout[c], a.size);
  for (std::size_t y = L.BK; y < res.size(); ++y)
    res[y] = bout[y] ? move_axes(b, res[y], 1, 1, 0) : ensure_batched(b, res[y], false, a.size);
  return res;
}

Primitive revolve_p() {
  return {
      .name = "revolve",
      .arity = kVariadic,
      .attrs = {{"forward", AttrKind::tape},
                {"advance", AttrKind::tape},
                {"backward", AttrKind::tape},
                {"length", AttrKind::integer},
                {"num_consts", AttrKind::integer},
                {"num_carry", AttrKind::integer},
                {"num_ys", AttrKind::integer},
                {"num_bwd_consts", AttrKind::integer},
                {"num_bwd_carry", AttrKind::integer},
                {"snapshots", AttrKind::integer},
                {"reverse", AttrKind::boolean, true},
                {"index", AttrKind::integer, true}},
      .infer = revolve_infer,
      .eager = revolve_eager,
      .adjoint = revolve_adjoint,
      .any_dtype = true,
      .results = kVariadic,
      .tangent = revolve_tangent,
      .structure = Structure::opaque,  // (compiled code calls the driver; its tapes are not one `body`)
      .batch = revolve_batch,
  };
}

}  // namespace

void add_revolve(std::vector<Primitive>& t) { t.insert(t.end(), {revolve_p()}); }

}  // namespace prims

}  // namespace reel
