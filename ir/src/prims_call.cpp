// call and checkpoint: a function call whose body is a tape.
//
//   %r... = checkpoint(args...) {body={...}}
//   %r... = call(args...) {body={...}}
//
// Both compute body(args), one result per output of the body. Passes do not look into
// either (nothing inlines them), so CSE cannot merge what a body computes with the
// operations around the call. Their derivatives recompute instead of storing (Zygote's
// `checkpointed`, jax.checkpoint): the adjoint of either is a `call` of the body's
// vector-Jacobian product (its gradients only) on the call's arguments and its
// results' adjoints, so a gradient tape keeps only the arguments from its forward part
// to its backward part, and the body's forward computation runs again inside that
// call. A `checkpoint` is what reel::checkpoint records; a `call` is what its adjoint
// emits. The tangent of either is the same primitive over the body's jvp (primal and
// tangents together), so a reverse pass over a forward one still recomputes. Batching
// (vmap) is the same primitive over the batched body (every result batched).
#include <fmt/format.h>

#include "prims.hpp"
#include "reel/ir/evaluate.hpp"
#include "reel/ir/loop_params.hpp"

namespace reel::prims {

std::string types_str(std::span<const VarType> types) {
  std::vector<std::string> v;
  for (const VarType& t : types) v.push_back(type_str(t));
  return fmt::format("({})", fmt::join(v, ", "));
}

std::pair<Tape, std::vector<std::size_t>> without_unread_inputs(const Tape& tape) {
  std::vector<bool> read(static_cast<std::size_t>(tape.size()) + 1, false);
  for (const Op& op : tape.ops)
    for (Var a : op.args) read[a] = true;
  for (Var o : tape.outputs) read[o] = true;
  TapeBuilder b;
  std::vector<Var> map = var_map(tape);
  std::vector<std::size_t> kept;
  std::size_t position = 0;
  copy_ops(b, tape, map, [&](Var v) {
    if (tape.op(v).kind != OpKind::input) return true;
    if (read[v]) map[v] = b.input(tape.op(v).type), kept.push_back(position);  // (an input read stays one)
    ++position;
    return false;
  });
  std::vector<Var> outs;
  for (Var o : tape.outputs) outs.push_back(map[o]);
  b.set_outputs(std::move(outs));
  Tape out = b.finish();
  out.cleaned = tape.cleaned;
  return {std::move(out), std::move(kept)};
}

std::vector<Var> call_tape(TapeBuilder& b, std::string_view prim, const Tape& body, std::vector<Var> args) {
  if (args.empty()) return b.inline_tape(body, {});  // (a call takes at least one argument)
  return b.call_results(primitive(prim), std::move(args), CallParams{std::make_shared<const Tape>(body)}.attrs());
}

CallVjp call_vjp(TapeBuilder& b, const AdjointArgs& a, const Tape& E) {
  const std::size_t nin = a.args.size(), nout = E.outputs.size();
  Flags seeded(nout), wanted(nin);
  bool any_seed = false, any_wanted = false;
  CallVjp v;
  v.operands.assign(a.args.begin(), a.args.end());
  for (std::size_t o = 0; o < nout; ++o)
    if ((seeded[o] = a.douts[o] != kNoVar && is_float(E.type(E.outputs[o]).dtype)))
      any_seed = true, v.operands.push_back(a.douts[o]);
  for (std::size_t i = 0; i < nin; ++i) {
    wanted[i] = a.needs[i] && is_float(b.type(a.args[i]).dtype);
    any_wanted |= wanted[i];
    v.wanted.push_back(wanted[i]);
  }
  if (any_seed && any_wanted)
    v.V = a.transforms->vjp(E, seeded, wanted);
  return v;
}

CallJvp call_jvp(TapeBuilder& b, const TangentArgs& a, const Tape& E) {
  const std::size_t nin = a.args.size();
  Flags active(nin);
  CallJvp j;
  j.operands.assign(a.args.begin(), a.args.end());
  for (std::size_t i = 0; i < nin; ++i)
    if ((active[i] = a.tangents[i] != kNoVar && is_float(b.type(a.args[i]).dtype)))
      j.operands.push_back(a.tangents[i]);
  j.J = a.transforms->jvp(E, active);
  return j;
}

Results<Var> call_tangents(const TangentArgs& a, const Tape& E, std::span<const Var> res) {
  const std::size_t nout = E.outputs.size();
  std::vector<Var> tangents(nout, kNoVar);
  for (std::size_t o = 0; o < nout; ++o) {
    a.same_outs[o] = res[o];
    if (is_float(E.type(E.outputs[o]).dtype)) tangents[o] = res[nout + o];
  }
  return tangents;
}

namespace {

Results<VarType> call_infer(const char* name, std::span<const VarType> in, const Attrs& a) {
  const Tape& body = *CallParams::read(a).body;
  if (body.outputs.empty()) throw Error(fmt::format("{}: expected a body with at least one output, got none", name));
  const std::vector<VarType> want = body.input_types();
  if (!std::equal(want.begin(), want.end(), in.begin(), in.end()))
    throw Error(fmt::format("{}: expected arguments {} (the body's inputs), got {}", name, types_str(want),
                            types_str(in)));
  std::vector<VarType> out;
  for (Var o : body.outputs) out.push_back(body.type(o));
  return out;
}

Results<Tensor> call_eager(std::span<const Tensor> in, const Attrs& a) {
  return evaluate(*CallParams::read(a).body, std::vector<Tensor>(in.begin(), in.end()));
}

// The adjoint of call and checkpoint: a call of the body's gradients, recomputing its forward.
std::vector<Var> call_adjoint(TapeBuilder& b, const AdjointArgs& a) {
  const Tape& body = *CallParams::read(a.attrs).body;
  const CallVjp v = call_vjp(b, a, body);
  std::vector<Var> grads(a.args.size(), kNoVar);
  if (v.V.size() == 0) return grads;
  const std::size_t nout = body.outputs.size();
  std::vector<int> gradient_outputs;
  for (std::size_t o = nout; o < v.V.outputs.size(); ++o) gradient_outputs.push_back(static_cast<int>(o));
  const auto [G, kept] = without_unread_inputs(a.transforms->cleanup(select_outputs(v.V, gradient_outputs)));
  std::vector<Var> args;
  for (std::size_t p : kept) args.push_back(v.operands[p]);
  const std::vector<Var> outs = call_tape(b, "call", G, std::move(args));
  for (std::size_t i = 0, q = 0; i < a.args.size(); ++i)
    if (v.wanted[i]) grads[i] = outs[q++];
  return grads;
}

// The tangent: the same primitive over the body's jvp, giving the results again.
std::function<Results<Var>(TapeBuilder&, const TangentArgs&)> call_tangent(const char* name) {
  return [name](TapeBuilder& b, const TangentArgs& a) -> Results<Var> {
    const Tape& body = *CallParams::read(a.attrs).body;
    CallJvp j = call_jvp(b, a, body);
    const std::vector<Var> res = call_tape(b, name, j.J, std::move(j.operands));
    return call_tangents(a, body, res);
  };
}

// Batching: the same primitive over the body batched with the same flags.
std::function<Results<Var>(TapeBuilder&, const BatchArgs&)> call_batch(const char* name) {
  return [name](TapeBuilder& b, const BatchArgs& a) -> Results<Var> {
    const Tape B = a.transforms->batch(*CallParams::read(a.attrs).body, a.batched, a.size);
    return call_tape(b, name, B, std::vector<Var>(a.args.begin(), a.args.end()));
  };
}

Primitive call_like(const char* name) {
  return {
      .name = name,
      .arity = kVariadic,
      .attrs = {{"body", AttrKind::tape}},
      .infer = [name](std::span<const VarType> in, const Attrs& a) { return call_infer(name, in, a); },
      .eager = call_eager,
      .adjoint = call_adjoint,
      .any_dtype = true,
      .results = kVariadic,
      .tangent = call_tangent(name),
      .structure = Structure::loop,
      .batch = call_batch(name),
  };
}

Primitive call_p() { return call_like("call"); }
Primitive checkpoint_p() { return call_like("checkpoint"); }

}  // namespace

void add_calls(std::vector<Primitive>& t) { t.insert(t.end(), {call_p(), checkpoint_p()}); }

}  // namespace reel::prims
