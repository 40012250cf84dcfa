// scan: a loop whose body is a tape (after jax.lax.scan). The body runs once per
// iteration on the loop-invariant consts, the carries and one slice of each xs, and
// gives the next carries and one slice of each ys:
//
//   %r... = scan(consts..., carries..., xs...) {body={...}, length=N, num_consts=C,
//            num_carry=K[, reverse=true][, index=I]}
//
// Results: the K final carries, then each y stacked on a new leading axis of N.
// `reverse` runs k = N-1 .. 0; with `index`, the body's first input is an i64 counter
// holding I + k. Its reverse mode is in two halves (adjoint_forward): the forward scan
// also stacks the residuals the body's adjoint reads, and a reversed scan runs the
// adjoint; forward mode is one scan over the body's jvp; batching (vmap) is one scan
// over the batched body (scan_batch). Its layout: reel::ScanParams (loop_params.hpp).
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>

#include "batching.hpp"
#include "reel/ir/evaluate.hpp"
#include "reel/ir/prims.hpp"
#include "scan.hpp"

namespace reel::prims {

VarType without_leading(const VarType& t) { return {t.dtype, Shape(t.shape.begin() + 1, t.shape.end())}; }
VarType with_leading(int64_t n, const VarType& t) {
  Shape s{n};
  s.insert(s.end(), t.shape.begin(), t.shape.end());
  return {t.dtype, s};
}

// Slice k of x along its leading axis (a copy), and its inverse.
Tensor slice_at(const Tensor& x, int64_t k) {
  Tensor out(x.dtype(), without_leading({x.dtype(), x.shape()}).shape);
  if (out.nbytes() > 0)
    std::memcpy(out.mutable_raw(), static_cast<const char*>(x.raw()) + static_cast<std::size_t>(k) * out.nbytes(),
                out.nbytes());
  return out;
}
void store_at(Tensor& stack, int64_t k, const Tensor& slice) {
  if (slice.nbytes() > 0)
    std::memcpy(static_cast<char*>(stack.mutable_raw()) + static_cast<std::size_t>(k) * slice.nbytes(), slice.raw(),
                slice.nbytes());
}

namespace {

Results<VarType> scan_infer(std::span<const VarType> in, const Attrs& a) {
  const ScanParams s = ScanParams::read(a, in.size());
  std::vector<VarType> want;
  if (s.has_index) want.push_back({DType::i64, {}});
  for (std::size_t i = 0; i < s.C + s.K; ++i) want.push_back(in[i]);
  for (std::size_t j = 0; j < s.X; ++j) {
    const VarType& x = in[s.C + s.K + j];
    if (x.shape.empty() || x.shape[0] != s.length)
      throw Error(fmt::format("scan: xs {} is {}, expected a leading axis of the length {}", j + 1, type_str(x),
                              s.length));
    want.push_back(without_leading(x));
  }
  const std::vector<VarType> got = s.body->input_types();
  if (got != want)
    throw Error(fmt::format("scan: expected a body taking {}{}{}, got one taking {}", types_str(want),
                            s.has_index ? " (the counter, " : " (", "consts, carries, slices of xs)", types_str(got)));
  std::vector<VarType> out;
  for (std::size_t i = 0; i < s.K; ++i) out.push_back(s.body->type(s.body->outputs[i]));
  check_carries("scan", in.subspan(s.C, s.K), out);
  for (std::size_t j = 0; j < s.Y; ++j) out.push_back(with_leading(s.length, s.body->type(s.body->outputs[s.K + j])));
  return out;
}

Results<Tensor> scan_eager(std::span<const Tensor> in, const Attrs& a) {
  const ScanParams s = ScanParams::read(a, in.size());
  std::vector<Tensor> carry(in.begin() + static_cast<std::ptrdiff_t>(s.C),
                            in.begin() + static_cast<std::ptrdiff_t>(s.C + s.K));
  std::vector<Tensor> ys;
  for (std::size_t j = 0; j < s.Y; ++j) {
    const VarType t = with_leading(s.length, s.body->type(s.body->outputs[s.K + j]));
    ys.emplace_back(t.dtype, t.shape);
  }
  std::vector<Tensor> args;
  for (int64_t i = 0; i < s.length; ++i) {
    const int64_t k = s.reverse ? s.length - 1 - i : i;
    args.clear();
    if (s.has_index) {
      Tensor counter(DType::i64, {});
      counter.mutable_data<int64_t>()[0] = s.index0 + k;
      args.push_back(std::move(counter));
    }
    args.insert(args.end(), in.begin(), in.begin() + static_cast<std::ptrdiff_t>(s.C));
    args.insert(args.end(), carry.begin(), carry.end());
    for (std::size_t j = 0; j < s.X; ++j) args.push_back(slice_at(in[s.C + s.K + j], k));
    std::vector<Tensor> outs;
    try {
      outs = evaluate(*s.body, args);
    } catch (const GuardFailure& e) {  // (a guard in the body, or a value it read: checked every iteration)
      throw GuardFailure(fmt::format("scan, iteration {}: {}", k, e.what()));
    }
    for (std::size_t c = 0; c < s.K; ++c) carry[c] = std::move(outs[c]);
    for (std::size_t j = 0; j < s.Y; ++j) store_at(ys[j], k, outs[s.K + j]);
  }
  carry.insert(carry.end(), ys.begin(), ys.end());
  return carry;
}

}  // namespace

Attrs with_body(const ScanParams& s, const Attrs& a, Tape body, std::size_t num_consts, std::size_t num_carry,
                bool flip) {
  ScanParams p = s;
  p.body = std::make_shared<const Tape>(std::move(body));
  p.C = num_consts, p.K = num_carry;
  if (flip) p.reverse = !s.reverse;
  return p.attrs(a);
}

namespace {

// Forward mode: one scan over the body's jvp, the tangents of the active consts,
// carries and xs riding along as consts, carries and xs of their own.
Results<Var> scan_tangent(TapeBuilder& b, const TangentArgs& a) {
  const ScanParams s = ScanParams::read(a.attrs, a.args.size());
  const Tape& body = *s.body;
  const std::vector<Var> inputs = body.inputs();
  std::vector<bool> active(inputs.size(), false);
  for (std::size_t i = 0; i < s.C + s.K + s.X; ++i)
    active[s.first_const() + i] = a.tangents[i] != kNoVar && is_float(b.type(a.args[i]).dtype);
  // A carry is active if its new value depends on an active input.
  carries_fixed_point(body, Flow::forward, active, s.first_carry(), s.K,
                      [&](std::size_t c) { return is_float(b.type(a.args[s.C + c]).dtype); });
  const Tape J = a.transforms->jvp(body, Flags(active));
  // The new body's inputs: [counter], consts, their tangents, carries, theirs, xs, theirs.
  TapeBuilder k;
  std::vector<Var> jin(J.inputs().size(), kNoVar);  // J's inputs: the body's, then tangents of the active
  std::vector<std::size_t> tangent_pos(inputs.size(), 0);
  for (std::size_t i = 0, t = inputs.size(); i < inputs.size(); ++i)
    if (active[i]) tangent_pos[i] = t++;
  std::vector<Var> args;
  auto group = [&](std::size_t from, std::size_t count, std::size_t arg0, bool zeros_for_missing) {
    for (std::size_t i = from; i < from + count; ++i) {
      jin[i] = k.input(J.type(J.inputs()[i]));
      args.push_back(a.args[arg0 + i - from]);
    }
    for (std::size_t i = from; i < from + count; ++i)
      if (active[i]) {
        jin[tangent_pos[i]] = k.input(J.type(J.inputs()[tangent_pos[i]]));
        const Var t = a.tangents[arg0 + i - from];
        args.push_back(zeros_for_missing ? b.or_zeros(t, b.type(a.args[arg0 + i - from])) : t);
      }
  };
  if (s.has_index) jin[0] = k.input({DType::i64, {}});
  std::size_t nactive_c = 0, nactive_k = 0;
  for (std::size_t i = 0; i < s.C; ++i) nactive_c += active[s.first_const() + i];
  for (std::size_t c = 0; c < s.K; ++c) nactive_k += active[s.first_carry() + c];
  group(s.first_const(), s.C, 0, false);
  group(s.first_carry(), s.K, s.C, true);
  group(s.first_x(), s.X, s.C + s.K, false);
  const std::vector<Var> jout = k.inline_tape(J, jin);
  const std::size_t nout = body.outputs.size();
  std::vector<Var> outs(jout.begin(), jout.begin() + static_cast<std::ptrdiff_t>(s.K));
  for (std::size_t c = 0; c < s.K; ++c)
    if (active[s.first_carry() + c]) outs.push_back(jout[nout + c]);
  for (std::size_t y = s.K; y < nout; ++y) outs.push_back(jout[y]);
  for (std::size_t y = s.K; y < nout; ++y) outs.push_back(jout[nout + y]);
  k.set_outputs(std::move(outs));
  const std::vector<Var> res = b.call_results(prims::scan(), std::move(args),
                                              with_body(s, a.attrs, a.transforms->cleanup(k.finish()), s.C + nactive_c,
                                                        s.K + nactive_k));
  std::vector<Var> tangents(nout, kNoVar);
  for (std::size_t c = 0, q = s.K; c < s.K; ++c) {
    a.same_outs[c] = res[c];
    if (active[s.first_carry() + c]) tangents[c] = res[q++];
  }
  for (std::size_t y = 0; y < s.Y; ++y) {
    a.same_outs[s.K + y] = res[s.K + nactive_k + y];
    tangents[s.K + y] = res[s.K + nactive_k + s.Y + y];
  }
  return tangents;
}

// Batching: one scan over the batched body. Its batched consts and xs carry the batch
// (xs behind the length axis: [length, size, ...], so that each iteration's slice has it
// in front); a carry is batched if it starts batched or its next value depends on a
// batched input (a fixed point: it then starts batched, broadcast); a y is batched if it
// depends on one. The rest stays unbatched inside the loop and is broadcast after it.
Results<Var> scan_batch(TapeBuilder& b, const BatchArgs& a) {
  const ScanParams s = ScanParams::read(a.attrs, a.args.size());
  const Tape& body = *s.body;
  std::vector<bool> in(body.inputs().size(), false);
  for (std::size_t i = 0; i < s.C + s.K + s.X; ++i) in[s.first_const() + i] = a.batched[i];
  const std::vector<bool> out = batch_carries(body, in, s.first_carry(), s.K);
  std::vector<Var> args(a.args.begin(), a.args.end());
  for (std::size_t c = 0; c < s.K; ++c)
    if (in[s.first_carry() + c]) args[s.C + c] = ensure_batched(b, args[s.C + c], a.batched[s.C + c], a.size);
  for (std::size_t j = 0; j < s.X; ++j)
    if (a.batched[s.C + s.K + j]) args[s.C + s.K + j] = move_axes(b, args[s.C + s.K + j], 0, 1, 1);
  std::vector<Var> res = b.call_results(
      prims::scan(), std::move(args),
      with_body(s, a.attrs, batch_loop_body(body, in, out, a.size, *a.transforms), s.C, s.K));
  for (std::size_t c = 0; c < s.K; ++c) res[c] = ensure_batched(b, res[c], out[c], a.size);
  for (std::size_t j = 0; j < s.Y; ++j)
    res[s.K + j] = out[s.K + j] ? move_axes(b, res[s.K + j], 1, 1, 0) : ensure_batched(b, res[s.K + j], false, a.size);
  return res;
}

Primitive scan_p() {
  return {
      .name = "scan",
      .arity = kVariadic,
      .attrs = {{"body", AttrKind::tape},
                {"length", AttrKind::integer},
                {"num_consts", AttrKind::integer},
                {"num_carry", AttrKind::integer},
                {"reverse", AttrKind::boolean, true},
                {"index", AttrKind::integer, true},
                {"checkpoint", AttrKind::string, true},
                {"checkpoint_arg", AttrKind::integer, true}},
      .infer = scan_infer,
      .eager = scan_eager,
      .adjoint = scan_adjoint,
      .any_dtype = true,
      .results = kVariadic,
      .tangent = scan_tangent,
      .structure = Structure::loop,
      .adjoint_forward = scan_forward,
      .batch = scan_batch,
  };
}

}  // namespace

void add_loops(std::vector<Primitive>& t) {
  t.insert(t.end(), {scan_p()});
  add_revolve(t);
}

}  // namespace reel::prims

namespace reel {

Results<Var> batch_by_scan(TapeBuilder& b, const Primitive& p, const BatchArgs& a) {
  TapeBuilder body;
  std::vector<Var> consts, xs, inner(a.args.size(), kNoVar);
  for (std::size_t i = 0; i < a.args.size(); ++i)
    if (!a.batched[i]) consts.push_back(a.args[i]), inner[i] = body.input(a.types[i]);
  for (std::size_t i = 0; i < a.args.size(); ++i)
    if (a.batched[i]) xs.push_back(a.args[i]), inner[i] = body.input(a.types[i]);
  body.set_outputs(body.call_results(p, inner, a.attrs));
  std::vector<Var> args = consts;
  args.insert(args.end(), xs.begin(), xs.end());
  ScanParams scan;
  scan.body = std::make_shared<const Tape>(body.finish());
  scan.length = a.size, scan.C = consts.size();
  Attrs attrs = scan.attrs();
  return b.call_results(prims::scan(), std::move(args), std::move(attrs));
}

}  // namespace reel
