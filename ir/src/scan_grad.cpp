// Reverse mode of scan, in two halves (Primitive::adjoint_forward and adjoint): the
// forward scan also stacks the residuals the body's adjoint reads, and a reversed scan
// runs the adjoint (store); the policies every and sqrt split the vjp of the loop in
// segments (scan_checkpoint.cpp); binomial runs the revolve driver as its backward
// half (prims_revolve.cpp), which recomputes the residuals.
#include <memory>

#include "reel/ir/body_tape.hpp"
#include "reel/ir/prims.hpp"
#include "scan.hpp"

namespace reel::prims {

namespace {

// Reverse mode of a scan: what both halves derive from the body.
struct ScanGrad {
  ScanParams s;
  std::vector<bool> seeded;     // per body output: carries (their adjoint flows on) and ys
  std::vector<bool> wanted;     // per body input
  Tape forward;                 // the body, also giving the residuals
  Tape backward;                // the body's adjoint
  std::vector<Var> residuals;   // vjp variables stacked by the forward scan
  std::vector<Var> hoisted;     // loop-invariant vjp variables the backward reads
  Tape hoist;                   // consts -> hoisted
  std::vector<std::size_t> consts_read, xs_read;  // which consts and xs the backward reads
  std::size_t seeded_carries = 0, seeded_ys = 0, wanted_consts = 0, wanted_xs = 0;
};

// The parts of the body's vjp: loop-invariant (consts and constants only), per
// iteration (counter, carries, xs) or backward (reads a seed).
enum Part : char { inv, fwd, bwd };

// Which body outputs are seeded and which inputs want a gradient.
void seed_and_want(ScanGrad& g, std::span<const Var> args, const TapeBuilder& b, std::span<const bool> needs,
                   std::span<const bool> results_needed) {
  const ScanParams& s = g.s;
  const Tape& body = *s.body;
  auto is_float_output = [&](std::size_t o) { return is_float(body.type(body.outputs[o]).dtype); };
  g.seeded.assign(body.outputs.size(), false);
  for (std::size_t o = 0; o < body.outputs.size(); ++o) g.seeded[o] = results_needed[o] && is_float_output(o);
  // A carry whose input reaches a seeded output has an adjoint in the iteration before.
  carries_fixed_point(body, Flow::backward, g.seeded, s.first_carry(), s.K, is_float_output);
  g.wanted.assign(body.inputs().size(), false);
  for (std::size_t i = 0; i < s.C; ++i) g.wanted[s.first_const() + i] = needs[i] && is_float(b.type(args[i]).dtype);
  for (std::size_t c = 0; c < s.K; ++c) g.wanted[s.first_carry() + c] = g.seeded[c];
  for (std::size_t j = 0; j < s.X; ++j)
    g.wanted[s.first_x() + j] = needs[s.C + s.K + j] && is_float(b.type(args[s.C + s.K + j]).dtype);
  for (std::size_t o = 0; o < body.outputs.size(); ++o) (o < s.K ? g.seeded_carries : g.seeded_ys) += g.seeded[o];
  for (std::size_t i = 0; i < s.C; ++i) g.wanted_consts += g.wanted[s.first_const() + i];
  for (std::size_t j = 0; j < s.X; ++j) g.wanted_xs += g.wanted[s.first_x() + j];
}

// V's parts, and where each value the backward part reads of the others comes from:
// consts and xs (read again), constants (copied), hoisted invariants, residuals (stacked).
TapeParts sort_reads(ScanGrad& g, const Tape& V) {
  const ScanParams& s = g.s;
  const std::size_t ninputs = s.body->inputs().size();
  const std::vector<Var> vin = V.inputs();
  std::vector<char> input_part(vin.size());
  for (std::size_t i = 0; i < vin.size(); ++i)
    input_part[i] = i >= ninputs ? bwd : (i >= s.first_const() && i < s.first_carry()) ? inv : fwd;
  TapeParts p = split_parts(V, input_part, bwd, s.body->outputs.size());
  std::vector<int> input_pos(static_cast<std::size_t>(V.size()) + 1, -1);
  for (std::size_t i = 0; i < vin.size(); ++i) input_pos[vin[i]] = static_cast<int>(i);
  for (Var v = 1; v <= V.size(); ++v) {
    if (!p.read[v]) continue;
    const int pos = input_pos[v];
    const auto at = static_cast<std::size_t>(pos);
    if (pos >= 0 && at >= s.first_const() && at < s.first_carry())
      g.consts_read.push_back(at - s.first_const());
    else if (pos >= 0 && at >= s.first_x() && at < ninputs)
      g.xs_read.push_back(at - s.first_x());
    else if (pos == 0 && s.has_index)
      continue;  // the backward scan counts too
    else if (p.part[v] == inv && V.op(v).kind == OpKind::constant)
      continue;  // copied into the backward body, where code generation folds it
    else if (p.part[v] == inv)
      g.hoisted.push_back(v);
    else
      g.residuals.push_back(v);
  }
  return p;
}

// The forward body: the body's inputs; its outputs, then the residuals. And the hoist:
// consts -> the hoisted loop invariants.
void forward_and_hoist(ScanGrad& g, const Tape& V, const TapeParts& p, const Transforms& tr) {
  const std::size_t nout = g.s.body->outputs.size();
  TapeBuilder f;
  std::vector<Var> map = var_map(V);
  copy_ops(f, V, map, [&](Var v) { return p.part[v] != bwd; });
  std::vector<Var> outs;
  for (std::size_t o = 0; o < nout; ++o) outs.push_back(map[V.outputs[o]]);
  for (Var v : g.residuals) outs.push_back(map[v]);
  f.set_outputs(std::move(outs));
  g.forward = tr.cleanup(f.finish());
  TapeBuilder h;
  map = var_map(V);
  copy_ops(h, V, map, [&](Var v) { return p.part[v] == inv; });
  outs.clear();
  for (Var v : g.hoisted) outs.push_back(map[v]);
  h.set_outputs(std::move(outs));
  g.hoist = h.finish();  // (not cleaned: its inputs are the consts, in order)
}

// The backward body: [counter], consts read, hoisted; carry adjoints, const
// accumulators; residuals, xs read, ys' adjoints -> carry adjoints, accumulators; xs'
// adjoints.
void backward_body(ScanGrad& g, const Tape& V, const TapeParts& p, const Transforms& tr) {
  const ScanParams& s = g.s;
  const std::size_t ninputs = s.body->inputs().size(), nout = s.body->outputs.size();
  const std::vector<Var> vin = V.inputs();
  TapeBuilder k;
  std::vector<Var> map = var_map(V);
  if (s.has_index) map[vin[0]] = k.input({DType::i64, {}});
  for (std::size_t c : g.consts_read) map[vin[s.first_const() + c]] = k.input(V.type(vin[s.first_const() + c]));
  for (Var v : g.hoisted) map[v] = k.input(V.type(v));
  for (Var v = 1; v <= V.size(); ++v)
    if (p.read[v] && p.part[v] == inv && V.op(v).kind == OpKind::constant) map[v] = k.constant(V.op(v).value);
  // Seeds: V's inputs after the body's, one per seeded output in order.
  std::vector<Var> seed_of(nout, kNoVar);
  for (std::size_t o = 0, i = ninputs; o < nout; ++o)
    if (g.seeded[o]) seed_of[o] = vin[i++];
  for (std::size_t c = 0; c < s.K; ++c)
    if (g.seeded[c]) map[seed_of[c]] = k.input(V.type(seed_of[c]));
  std::vector<Var> acc;
  for (std::size_t i = 0; i < s.C; ++i)
    if (g.wanted[s.first_const() + i]) acc.push_back(k.input(V.type(vin[s.first_const() + i])));
  for (Var v : g.residuals) map[v] = k.input(V.type(v));
  for (std::size_t j : g.xs_read) map[vin[s.first_x() + j]] = k.input(V.type(vin[s.first_x() + j]));
  for (std::size_t o = s.K; o < nout; ++o)
    if (g.seeded[o]) map[seed_of[o]] = k.input(V.type(seed_of[o]));
  copy_ops(k, V, map, [&](Var v) { return p.part[v] == bwd && V.op(v).kind != OpKind::input; });
  // V's gradient outputs, in input order: wanted consts, carries, xs.
  std::vector<Var> grad_of(ninputs, kNoVar);
  for (std::size_t i = 0, o = nout; i < ninputs; ++i)
    if (g.wanted[i]) grad_of[i] = map[V.outputs[o++]];
  std::vector<Var> outs;
  for (std::size_t c = 0; c < s.K; ++c)
    if (g.seeded[c]) outs.push_back(grad_of[s.first_carry() + c]);
  for (std::size_t i = 0, q = 0; i < s.C; ++i)
    if (g.wanted[s.first_const() + i]) outs.push_back(k.add(acc[q++], grad_of[s.first_const() + i]));
  for (std::size_t j = 0; j < s.X; ++j)
    if (g.wanted[s.first_x() + j]) outs.push_back(grad_of[s.first_x() + j]);
  k.set_outputs(std::move(outs));
  g.backward = tr.cleanup(k.finish());
}

std::shared_ptr<const ScanGrad> scan_grad(std::span<const Var> args, const TapeBuilder& b, const Attrs& a,
                                          std::span<const bool> needs, std::span<const bool> results_needed,
                                          const Transforms& tr) {
  auto g = std::make_shared<ScanGrad>();
  g->s = ScanParams::read(a, args.size());
  seed_and_want(*g, args, b, needs, results_needed);
  const Tape V = tr.vjp(*g->s.body, Flags(g->seeded), Flags(g->wanted));
  const TapeParts p = sort_reads(*g, V);
  forward_and_hoist(*g, V, p, tr);
  backward_body(*g, V, p, tr);
  return g;
}

// What a scan's forward half hands its adjoint: the store-all derivation (store, and
// binomial, whose driver recomputes the residuals), or the split vjp of the segmented
// scan (every, sqrt).
struct ScanHalf {
  std::shared_ptr<const ScanGrad> grad;
  std::shared_ptr<const SplitVjp> split;
};

bool revolving(const ScanParams& s) { return s.policy == CheckpointPolicy::binomial && s.length > 1; }
// every and sqrt: the loop in segments (scan_checkpoint.cpp).
bool segmenting(const ScanParams& s) {
  return (s.policy == CheckpointPolicy::every || s.policy == CheckpointPolicy::sqrt) && s.length > 0;
}

}  // namespace

ForwardHalf scan_forward(TapeBuilder& b, const ForwardArgs& a) {
  const ScanParams s = ScanParams::read(a.attrs, a.args.size());
  auto state = std::make_shared<ScanHalf>();
  ForwardHalf half;
  if (segmenting(s)) {
    std::vector<bool> seeded, wanted;
    std::vector<VarType> types;
    for (std::size_t o = 0; o < s.K + s.Y; ++o)
      seeded.push_back(a.results_needed[o] && is_float(s.body->type(s.body->outputs[o]).dtype));
    for (std::size_t i = 0; i < a.args.size(); ++i) {
      types.push_back(b.type(a.args[i]));
      wanted.push_back(a.needs[i] && is_float(types.back().dtype));
    }
    state->split = split_vjp(segmented(s, types), std::move(seeded), std::move(wanted), *a.transforms);
    half = emit_forward(b, *state->split, a.args);
  } else {
    state->grad = scan_grad(a.args, b, a.attrs, a.needs, a.results_needed, *a.transforms);
    // binomial: the plain scan, its residuals recomputed by the backward half's driver.
    const std::vector<Var> outs =
        b.call_results(prims::scan(), std::vector<Var>(a.args.begin(), a.args.end()),
                       revolving(s) ? a.attrs : with_body(s, a.attrs, state->grad->forward, s.C, s.K));
    half.results.assign(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(s.K + s.Y));
    half.residuals.assign(outs.begin() + static_cast<std::ptrdiff_t>(s.K + s.Y), outs.end());
  }
  half.state = state;
  return half;
}

namespace {

// The backward half under binomial checkpointing: the revolve driver (prims_revolve.cpp)
// in place of the backward scan, recomputing the residuals from the scan's arguments.
std::vector<Var> revolve_call(TapeBuilder& b, const AdjointArgs& a, const ScanGrad& g,
                              const std::vector<Var>& backward_args, std::size_t nconsts, std::size_t ncarry) {
  if (!a.residuals.empty())
    throw Error("grad: scan's binomial adjoint expects a forward half without residuals (internal error)");
  const ScanParams& s = g.s;
  // The scan's arguments, then the backward scan's without the residuals (the forward
  // half gave none).
  std::vector<Var> args(a.args.begin(), a.args.end());
  args.insert(args.end(), backward_args.begin(), backward_args.end());
  std::vector<int> carries;
  for (std::size_t c = 0; c < s.K; ++c) carries.push_back(static_cast<int>(c));
  RevolveParams r;
  r.forward = std::make_shared<const Tape>(g.forward);
  r.advance = std::make_shared<const Tape>(a.transforms->cleanup(select_outputs(g.forward, carries)));
  r.backward = std::make_shared<const Tape>(g.backward);
  r.length = s.length, r.snapshots = s.snapshots;
  r.C = s.C, r.K = s.K, r.Y = s.Y, r.BC = nconsts, r.BK = ncarry;
  r.reverse = s.reverse, r.has_index = s.has_index, r.index0 = s.index0;
  Attrs attrs = r.attrs();
  return b.call_results(prims::revolve(), std::move(args), std::move(attrs));
}

}  // namespace

std::vector<Var> scan_adjoint(TapeBuilder& b, const AdjointArgs& a) {
  if (!a.state)
    throw Error("grad: scan's adjoint needs its forward half (reverse_mode runs it; call the adjoint through it)");
  const auto& state = *std::static_pointer_cast<const ScanHalf>(a.state);
  std::vector<Var> grads;
  if (state.split) {
    grads = emit_backward(b, *state.split, a.residuals, a.douts);
    for (std::size_t i = 0; i < a.args.size(); ++i)
      if (!a.needs[i]) grads[i] = kNoVar;
    return grads;
  }
  const ScanGrad& g = *state.grad;
  const ScanParams& s = g.s;
  grads.assign(a.args.size(), kNoVar);
  const std::size_t K2 = g.seeded_carries + g.wanted_consts;
  if (K2 + g.wanted_xs == 0) return grads;
  const std::vector<Var> consts(a.args.begin(), a.args.begin() + static_cast<std::ptrdiff_t>(s.C));
  const std::vector<Var> hoisted = b.inline_tape(g.hoist, consts);
  std::vector<Var> args;
  for (std::size_t c : g.consts_read) args.push_back(a.args[c]);
  args.insert(args.end(), hoisted.begin(), hoisted.end());
  const std::size_t nconsts = args.size();
  const Tape& body = *s.body;
  for (std::size_t c = 0; c < s.K; ++c)
    if (g.seeded[c]) args.push_back(b.or_zeros(a.douts[c], body.type(body.outputs[c])));
  for (std::size_t i = 0; i < s.C; ++i)
    if (g.wanted[s.first_const() + i]) args.push_back(zeros_of(b, b.type(a.args[i])));
  args.insert(args.end(), a.residuals.begin(), a.residuals.end());
  for (std::size_t j : g.xs_read) args.push_back(a.args[s.C + s.K + j]);
  for (std::size_t o = s.K; o < body.outputs.size(); ++o)
    if (g.seeded[o]) args.push_back(b.or_zeros(a.douts[o], with_leading(s.length, body.type(body.outputs[o]))));
  const std::vector<Var> outs =
      revolving(s) ? revolve_call(b, a, g, args, nconsts, K2)
                   : b.call_results(prims::scan(), std::move(args), with_body(s, a.attrs, g.backward, nconsts, K2, true));
  std::size_t q = 0;
  for (std::size_t c = 0; c < s.K; ++c)
    if (g.seeded[c]) grads[s.C + c] = outs[q++];
  for (std::size_t i = 0; i < s.C; ++i)
    if (g.wanted[s.first_const() + i]) grads[i] = outs[q++];
  for (std::size_t j = 0; j < s.X; ++j)
    if (g.wanted[s.first_x() + j]) grads[s.C + s.K + j] = outs[q++];
  for (std::size_t i = 0; i < a.args.size(); ++i)
    if (!a.needs[i]) grads[i] = kNoVar;
  return grads;
}

}  // namespace reel::prims
