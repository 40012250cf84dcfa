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
#include "reel/ir/revolve.hpp"

namespace reel {

namespace prims {

namespace {

struct RevolveLayout {
  int64_t length = 0, snapshots = 0, index0 = 0;
  std::size_t C = 0, K = 0, X = 0, Y = 0, R = 0, BC = 0, BK = 0, BX = 0;
  bool reverse = false, has_index = false;
  const Tape *forward = nullptr, *advance = nullptr, *backward = nullptr;
  std::size_t counter() const { return has_index ? 1 : 0; }  // the counter input, first if present
  std::size_t nargs() const { return C + K + X + BC + BK + BX; }
};

RevolveLayout revolve_layout(const Attrs& a, std::size_t nargs) {
  RevolveLayout L;
  L.forward = &a.tape("forward"), L.advance = &a.tape("advance"), L.backward = &a.tape("backward");
  auto count = [&](const char* name) {
    const int64_t v = a.integer(name);
    if (v < 0) throw Error(fmt::format("revolve: expected {} >= 0, got {}", name, v));
    return static_cast<std::size_t>(v);
  };
  L.length = a.integer("length"), L.snapshots = a.integer("snapshots");
  if (L.length < 0) throw Error(fmt::format("revolve: expected a length >= 0, got {}", L.length));
  if (L.snapshots < 1) throw Error(fmt::format("revolve: expected snapshots >= 1, got {}", L.snapshots));
  L.C = count("num_consts"), L.K = count("num_carry"), L.Y = count("num_ys");
  L.BC = count("num_bwd_consts"), L.BK = count("num_bwd_carry");
  L.reverse = a.has("reverse") && a.boolean("reverse");
  L.has_index = a.has("index");
  if (L.has_index) L.index0 = a.integer("index");
  const std::size_t fin = L.forward->inputs().size(), fout = L.forward->outputs.size();
  const std::size_t bin = L.backward->inputs().size(), bout = L.backward->outputs.size();
  if (fin < L.counter() + L.C + L.K || fout < L.K + L.Y)
    throw Error(fmt::format("revolve: expected a forward body with at least {} inputs and {} outputs, got {} and {}",
                            L.counter() + L.C + L.K, L.K + L.Y, fin, fout));
  L.X = fin - L.counter() - L.C - L.K, L.R = fout - L.K - L.Y;
  if (bin < L.counter() + L.BC + L.BK + L.R || bout < L.BK)
    throw Error(fmt::format("revolve: expected a backward body with at least {} inputs and {} outputs, got {} and {}",
                            L.counter() + L.BC + L.BK + L.R, L.BK, bin, bout));
  L.BX = bin - L.counter() - L.BC - L.BK - L.R;
  if (nargs != L.nargs())
    throw Error(fmt::format("revolve: expected {} arguments for its bodies, got {}", L.nargs(), nargs));
  return L;
}

std::vector<VarType> output_types(const Tape& t, std::size_t from, std::size_t to) {
  std::vector<VarType> out;
  for (std::size_t o = from; o < to; ++o) out.push_back(t.type(t.outputs[o]));
  return out;
}

Results<VarType> revolve_infer(std::span<const VarType> in, const Attrs& a) {
  const RevolveLayout L = revolve_layout(a, in.size());
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
  Driver(const RevolveLayout& L, std::span<const Tensor> in) : L_(L), in_(in) {
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
  const RevolveLayout& L_;
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
  const RevolveLayout L = revolve_layout(a, in.size());
  return Driver(L, in).run();
}

// The store-all pair of scans the call equals, as a tape of the call's arguments.
Tape store_all(const RevolveLayout& L, std::span<const VarType> types, const Attrs& a) {
  TapeBuilder e;
  std::vector<Var> in;
  for (const VarType& t : types) in.push_back(e.input(t));
  auto attrs = [&](const char* body, std::size_t consts, std::size_t carries, bool reverse) {
    Attrs out{{"body", a.get(body)},
              {"length", L.length},
              {"num_consts", static_cast<int64_t>(consts)},
              {"num_carry", static_cast<int64_t>(carries)}};
    if (reverse) out.set("reverse", true);
    if (L.has_index) out.set("index", L.index0);
    return out;
  };
  const auto split = in.begin() + static_cast<std::ptrdiff_t>(L.C + L.K + L.X);
  const std::vector<Var> fwd =
      e.call_results(primitive("scan"), std::vector<Var>(in.begin(), split), attrs("forward", L.C, L.K, L.reverse));
  std::vector<Var> args(split, split + static_cast<std::ptrdiff_t>(L.BC + L.BK));
  args.insert(args.end(), fwd.begin() + static_cast<std::ptrdiff_t>(L.K + L.Y), fwd.end());
  args.insert(args.end(), split + static_cast<std::ptrdiff_t>(L.BC + L.BK), in.end());
  e.set_outputs(e.call_results(primitive("scan"), std::move(args), attrs("backward", L.BC, L.BK, !L.reverse)));
  return e.finish();
}

Tape store_all_of(TapeBuilder& b, std::span<const Var> args, const Attrs& a) {
  std::vector<VarType> types;
  for (Var v : args) types.push_back(b.type(v));
  return store_all(revolve_layout(a, args.size()), types, a);
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
  const RevolveLayout L = revolve_layout(a.attrs, a.args.size());
  const std::size_t c0 = L.counter(), b0 = L.C + L.K + L.X;
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
  auto tape = [](Tape t) { return TapeRef{std::make_shared<const Tape>(std::move(t))}; };
  Attrs attrs = a.attrs;
  attrs.set("forward", tape(batch_loop_body(*L.forward, fin, fout, a.size, tr)));
  const std::vector<bool> carry_flags(fout.begin(), fout.begin() + static_cast<std::ptrdiff_t>(L.K));
  attrs.set("advance", tape(batch_loop_body(*L.advance, fin, carry_flags, a.size, tr)));
  attrs.set("backward", tape(batch_loop_body(*L.backward, bin, bout, a.size, tr)));
  std::vector<Var> res = b.call_results(primitive("revolve"), std::move(args), std::move(attrs));
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

}  // namespace prims

namespace {

// beta(c, t) = C(c + t, t): the most steps c snapshots reverse advancing each at most t
// times; with it, what reversing l steps needs: t, beta(c, t - 2), beta(c, t - 1) and
// beta(c, t), beta(c - 1, t - 1) and beta(c - 1, t) (128-bit: beta(c, t - 1) < l <= 2^63
// before each step, times at most c + 1).
struct Binomials {
  using W = __int128;
  int64_t t = 0;
  W before2 = 0, before = 0, beta = 1, fewer_before = 0, fewer = 1;
  Binomials(int64_t l, int64_t c) {
    while (beta < l) {
      ++t;
      before2 = before, before = beta, beta = beta * (c + t) / t;
      fewer_before = fewer, fewer = fewer * (c - 1 + t) / t;
    }
  }
};

// Reverses steps [a, b) from the state in slot s (holding the state before a), with c
// snapshots, slot s's among them: keep the state after m steps in slot s + 1, reverse
// [a + m, b) with c - 1, then [a, a + m) with c again (restore).
void reverse(int64_t a, int64_t b, int s, int64_t c, int work, const RevolveActions& act) {
  while (b > a) {
    if (b - a == 1) return act.turn(s, a);
    if (c == 1) {  // nothing more to keep: each step from a again
      for (int64_t i = b - 1; i > a; --i) act.advance(s, a, work, i), act.turn(work, i);
      return act.turn(s, a);
    }
    const int64_t m = revolve_split(b - a, c);
    act.advance(s, a, s + 1, a + m);
    reverse(a + m, b, s + 1, c - 1, work, act);
    b = a + m;
  }
}

}  // namespace

// The optimal splits m are (Griewank; checked against dynamic programming in
// tests/test_checkpoint.cpp) max(1, beta(c, t - 2), l - beta(c - 1, t)) <= m <=
// min(l - 1, beta(c, t - 1), l - beta(c - 1, t - 1)).
int64_t revolve_split(int64_t l, int64_t c) {
  if (l < 2 || c < 2) throw Error(fmt::format("revolve: expected >= 2 steps and snapshots to split, got {} and {}", l, c));
  const Binomials k(l, c);
  const auto hi = std::min<Binomials::W>({l - 1, k.before, l - k.fewer_before});
  const auto lo = std::max<Binomials::W>({1, k.before2, l - k.fewer});
  if (lo > hi) throw Error(fmt::format("revolve: no split of {} steps with {} snapshots (internal error)", l, c));
  return static_cast<int64_t>(hi);
}

int64_t revolve_advances(int64_t l, int64_t c) {
  if (l < 0 || c < 1) throw Error(fmt::format("revolve: expected steps >= 0 and snapshots >= 1, got {} and {}", l, c));
  using W = Binomials::W;
  if (l <= 1) return 0;
  const W total = c == 1 ? W(l) * (l - 1) / 2 : [&] {
    const Binomials k(l, c);
    W b = 1;  // beta(c + 1, t - 1)
    for (int64_t i = 1; i < k.t; ++i) b = b * (c + 1 + i) / i;
    return W(k.t) * l - b;
  }();
  return total > W(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(total);
}

// With c >= l - 1 snapshots for l steps every split is m = 1 (beta(c, 1) = c + 1 >= l),
// and so again one level down: the schedule keeps every state, and more snapshots
// than steps are never used.
int64_t revolve_slots(int64_t steps, int64_t snapshots) {
  if (steps < 0 || snapshots < 1)
    throw Error(fmt::format("revolve: expected steps >= 0 and snapshots >= 1, got {} and {}", steps, snapshots));
  return std::min(snapshots, std::max<int64_t>(steps, 1)) + 1;  // and the working slot
}

void revolve(int64_t steps, int64_t snapshots, const RevolveActions& actions) {
  const int64_t used = revolve_slots(steps, snapshots) - 1;
  if (used > std::numeric_limits<int>::max() - 1)
    throw Error(fmt::format("revolve: expected fewer than 2^31 snapshots in use, got {} for {} steps", used, steps));
  reverse(0, steps, 0, used, static_cast<int>(used), actions);
}

namespace prims {

void add_revolve(std::vector<Primitive>& t) { t.insert(t.end(), {revolve_p()}); }

}  // namespace prims

}  // namespace reel
