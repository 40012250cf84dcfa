// A scan's checkpoint policies every and sqrt as the loop's form (a scan of segments
// under `checkpoint`), and the split of such a form's vjp into reverse mode's two
// halves (scan.hpp). Binomial checkpointing is the revolve primitive (prims_revolve.cpp).
#include <algorithm>
#include <optional>

#include "reel/ir/body_tape.hpp"
#include "reel/ir/prims.hpp"
#include "scan.hpp"

namespace reel::prims {

namespace {

// A plain scan (store all) of `body` with these counts and options.
Attrs scan_attrs(std::shared_ptr<const Tape> body, int64_t length, std::size_t C, std::size_t K, bool reverse,
                 std::optional<int64_t> index) {
  ScanParams p;
  p.body = std::move(body);
  p.length = length, p.C = C, p.K = K, p.reverse = reverse;
  p.has_index = index.has_value(), p.index0 = index.value_or(0);
  return p.attrs();
}

Var cast_to(TapeBuilder& b, Var x, DType dtype) { return b.call(prims::cast(), {x}, {{"dtype", dtype}}); }

// The outer scan's body for segments of k iterations: [segment,] consts, carries,
// segments of xs -> checkpoint(an inner scan of k iterations).
std::shared_ptr<const Tape> segment_body(const ScanParams& s, const std::vector<VarType>& types, int64_t k) {
  const std::shared_ptr<const Tape>& body = s.body;
  const VarType counter{DType::i64, {}};
  const std::optional<int64_t> count_from_0 = s.has_index ? std::optional<int64_t>(0) : std::nullopt;
  auto segment_type = [&](std::size_t j) { return with_leading(k, without_leading(types[s.C + s.K + j])); };
  // The inner body: [j, base,] consts, carries, slices.
  std::shared_ptr<const Tape> inner = body;
  if (s.has_index) {
    TapeBuilder ib;
    const Var j = ib.input(counter), base = ib.input(counter);
    const std::vector<VarType> body_types = body->input_types();
    std::vector<Var> in{kNoVar};  // (the body's counter, below)
    for (std::size_t i = 1; i < body_types.size(); ++i) in.push_back(ib.input(body_types[i]));
    in[0] = cast_to(ib, ib.add(cast_to(ib, j, DType::f64), cast_to(ib, base, DType::f64)), DType::i64);
    ib.set_outputs(ib.inline_tape(*body, in));
    inner = std::make_shared<const Tape>(ib.finish());
  }
  // The checkpoint's body: [base,] consts, carries, segments of xs -> the inner scan's results.
  TapeBuilder cb;
  std::vector<Var> cin;
  if (s.has_index) cin.push_back(cb.input(counter));
  for (std::size_t i = 0; i < s.C + s.K; ++i) cin.push_back(cb.input(types[i]));
  for (std::size_t j = 0; j < s.X; ++j) cin.push_back(cb.input(segment_type(j)));
  cb.set_outputs(cb.call_results(prims::scan(), cin,
                                 scan_attrs(inner, k, s.C + (s.has_index ? 1 : 0), s.K, s.reverse, count_from_0)));
  const Tape checkpointed = cb.finish();
  // The outer body: [segment,] consts, carries, segments of xs -> checkpoint(...).
  TapeBuilder ob;
  const Var segment = s.has_index ? ob.input(counter) : kNoVar;
  std::vector<Var> oin;
  for (std::size_t i = 0; i < s.C + s.K; ++i) oin.push_back(ob.input(types[i]));
  for (std::size_t j = 0; j < s.X; ++j) oin.push_back(ob.input(segment_type(j)));
  if (s.has_index) {
    const Var first = ob.add(ob.mul(cast_to(ob, segment, DType::f64), static_cast<double>(k)),
                             ob.scalar(static_cast<double>(s.index0), DType::f64));
    oin.insert(oin.begin(), cast_to(ob, first, DType::i64));
  }
  ob.set_outputs(call_tape(ob, "checkpoint", checkpointed, oin));
  return std::make_shared<const Tape>(ob.finish());
}

}  // namespace

// Checkpointing every k iterations, as jax.checkpoint of a scan of scans: the scan as
// an outer scan over the S = N / k segments whose body is a `checkpoint` of an inner
// scan of k iterations, and a scan of the N mod k iterations left (after the segments,
// or before them when reverse). Differentiated, the outer scan stores only the carries
// entering each segment; the checkpoint's adjoint recomputes its segment (storing that
// segment's residuals) and runs its adjoint. With a counter, the inner body counts
// index + s k + j from the segment's s and its own j (exact in f64 below 2^53).
Tape segmented(const ScanParams& s, const std::vector<VarType>& types) {
  const int64_t N = s.length, k = std::min(s.segment, N), S = N / k, R = N % k;
  const std::shared_ptr<const Tape>& body = s.body;
  const std::optional<int64_t> count_from_0 = s.has_index ? std::optional<int64_t>(0) : std::nullopt;
  const std::shared_ptr<const Tape> outer = segment_body(s, types, k);

  TapeBuilder e;
  std::vector<Var> in;
  for (const VarType& t : types) in.push_back(e.input(t));
  const std::vector<Var> consts(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(s.C));
  auto xs_from = [&](int64_t start, int64_t stop) {
    std::vector<Var> xs;
    for (std::size_t j = 0; j < s.X; ++j) {
      const Var x = in[s.C + s.K + j];
      xs.push_back(start == 0 && stop == N
                       ? x
                       : e.call(prims::slice(), {x}, {{"axis", int64_t{0}}, {"start", start}, {"stop", stop}}));
    }
    return xs;
  };
  auto run = [&](std::vector<Var> carry, std::vector<Var> xs, Attrs a) {
    std::vector<Var> args = consts;
    args.insert(args.end(), carry.begin(), carry.end());
    args.insert(args.end(), xs.begin(), xs.end());
    return e.call_results(prims::scan(), std::move(args), std::move(a));
  };
  auto segments = [&](std::vector<Var> carry) {
    std::vector<Var> xs = xs_from(0, S * k);
    for (std::size_t j = 0; j < s.X; ++j) {
      Shape shape = e.type(xs[j]).shape;
      shape[0] = k;
      shape.insert(shape.begin(), S);
      xs[j] = e.reshape(xs[j], shape);
    }
    std::vector<Var> r = run(std::move(carry), std::move(xs), scan_attrs(outer, S, s.C, s.K, s.reverse, count_from_0));
    for (std::size_t j = 0; j < s.Y; ++j) {
      Shape shape = e.type(r[s.K + j]).shape;
      shape.erase(shape.begin());
      shape[0] = S * k;
      r[s.K + j] = e.reshape(r[s.K + j], shape);
    }
    return r;
  };
  auto rest = [&](std::vector<Var> carry) {
    return run(std::move(carry), xs_from(S * k, N),
               scan_attrs(body, R, s.C, s.K, s.reverse,
                          s.has_index ? std::optional<int64_t>(s.index0 + S * k) : std::nullopt));
  };
  auto carries_of = [&](const std::vector<Var>& r) {
    return std::vector<Var>(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(s.K));
  };
  std::vector<Var> first(in.begin() + static_cast<std::ptrdiff_t>(s.C),
                         in.begin() + static_cast<std::ptrdiff_t>(s.C + s.K));
  std::vector<Var> main, left;
  if (!s.reverse) {
    main = segments(first);
    if (R > 0) left = rest(carries_of(main));
  } else {
    if (R > 0) left = rest(first);
    main = segments(R > 0 ? carries_of(left) : first);
  }
  std::vector<Var> outs = carries_of(!s.reverse && R > 0 ? left : main);
  for (std::size_t j = 0; j < s.Y; ++j)
    outs.push_back(R > 0 ? e.call(prims::concat(), {main[s.K + j], left[s.K + j]}, {{"axis", int64_t{0}}}) : main[s.K + j]);
  e.set_outputs(std::move(outs));
  return e.finish();
}


std::shared_ptr<const SplitVjp> split_vjp(const Tape& E, std::vector<bool> seeded, std::vector<bool> wanted,
                                          const Transforms& tr) {
  auto sp = std::make_shared<SplitVjp>();
  sp->nin = wanted.size(), sp->nout = seeded.size();
  sp->V = tr.vjp(E, Flags(seeded), Flags(wanted));
  sp->seeded = std::move(seeded), sp->wanted = std::move(wanted);
  const Tape& V = sp->V;
  // The backward part: what reads a seed (V's inputs after E's).
  std::vector<char> input_part(V.inputs().size(), 0);
  std::fill(input_part.begin() + static_cast<std::ptrdiff_t>(sp->nin), input_part.end(), 1);
  TapeParts parts = split_parts(V, input_part, 1, sp->nout);
  sp->part = std::move(parts.part);
  for (Var v = 1; v <= V.size(); ++v)
    if (parts.read[v] && V.op(v).kind != OpKind::constant) sp->residuals.push_back(v);
  return sp;
}

ForwardHalf emit_forward(TapeBuilder& b, const SplitVjp& sp, std::span<const Var> args) {
  const Tape& V = sp.V;
  std::vector<Var> map = var_map(V);
  const std::vector<Var> vin = V.inputs();
  for (std::size_t i = 0; i < sp.nin; ++i) map[vin[i]] = args[i];
  copy_ops(b, V, map, [&](Var v) { return sp.part[v] == 0 && V.op(v).kind != OpKind::input; });
  ForwardHalf half;
  for (std::size_t o = 0; o < sp.nout; ++o) half.results.push_back(map[V.outputs[o]]);
  for (Var r : sp.residuals) half.residuals.push_back(map[r]);
  return half;
}

std::vector<Var> emit_backward(TapeBuilder& b, const SplitVjp& sp, std::span<const Var> residuals,
                               std::span<const Var> douts) {
  const Tape& V = sp.V;
  std::vector<Var> map = var_map(V);
  for (std::size_t i = 0; i < sp.residuals.size(); ++i) map[sp.residuals[i]] = residuals[i];
  const std::vector<Var> vin = V.inputs();
  for (std::size_t o = 0, i = sp.nin; o < sp.nout; ++o)
    if (sp.seeded[o]) map[vin[i]] = b.or_zeros(douts[o], V.type(vin[i])), ++i;
  auto get = [&](Var x) {  // (a constant of the forward part: copied where first read)
    if (map[x] == kNoVar && V.op(x).kind == OpKind::constant) map[x] = b.constant(V.op(x).value);
    return map[x];
  };
  copy_ops(b, V, map, [&](Var v) { return sp.part[v] == 1 && V.op(v).kind != OpKind::input; }, get);
  std::vector<Var> grads(sp.nin, kNoVar);
  for (std::size_t i = 0, o = sp.nout; i < sp.nin; ++i)
    if (sp.wanted[i]) grads[i] = get(V.outputs[o++]);
  return grads;
}

}  // namespace reel::prims
