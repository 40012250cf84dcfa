// The reverse-mode pass: forward tape -> gradient tape, built from each primitive's
// adjoint rule, so the result is an ordinary tape that can be differentiated again.
#include <fmt/format.h>

#include <memory>

#include "reel/ir/builder.hpp"
#include "reel/passes.hpp"

namespace reel {

namespace {

Tape reverse(const Tape& f, bool seeded) {
  const char* op = seeded ? "vjp" : "grad";
  verify(op, f);  // a declaration edited by hand is reported as such, not by a rule
  if (f.outputs.size() != 1)
    throw Error(fmt::format("{}: expected a function with one output, got {} outputs", op,
                            f.outputs.size()));
  const Var y = f.outputs[0];
  if (!seeded && !f.type(y).shape.empty())
    throw Error(fmt::format(
        "grad: the output must be a scalar (0-d tensor), got {}; use reel::vjp with a seed "
        "of the output's shape for a non-scalar output",
        type_str(f.type(y))));

  const Var n = f.size();
  // needed[v]: v depends on an input (active) and the output depends on v (useful).
  std::vector<bool> active(n + 1, false), useful(n + 1, false), needed(n + 1, false);
  for (Var v = 1; v <= n; ++v) {
    const Op& o = f.op(v);
    active[v] = o.kind == OpKind::input;
    for (Var a : o.args) active[v] = active[v] || active[a];
    active[v] = active[v] && is_float(o.type.dtype);  // no gradient flows through i64 values
  }
  useful[y] = true;
  for (Var v = n; v >= 1; --v)
    if (useful[v])
      for (Var a : f.op(v).args) useful[a] = true;
  for (Var v = 1; v <= n; ++v) needed[v] = active[v] && useful[v];
  // A result operation passes its adjoint to its call (below); its call's rule needs
  // to run if any result's does.
  for (Var v = n; v >= 1; --v)
    if (f.op(v).kind == OpKind::result && needed[v]) needed[f.op(v).args[0]] = true;

  TapeBuilder b;
  b.reserve(3 * static_cast<std::size_t>(n));  // the forward copy and about two ops per adjoint
  std::vector<Var> map(n + 1, kNoVar);
  for (Var v = 1; v <= n; ++v) {
    std::vector<Var> args;
    for (Var a : f.op(v).args) args.push_back(map[a]);
    map[v] = b.copy(f.op(v), std::move(args));
  }
  const VarType& yt = f.type(y);
  std::vector<Var> adj(n + 1, kNoVar);
  adj[y] = seeded ? b.input(yt) : b.scalar(1.0, yt.dtype);

  for (Var v = n; v >= 1; --v) {
    const Op& o = f.op(v);
    if (o.kind != OpKind::call || !needed[v]) continue;
    // The results' variables and adjoints: v, and for several results v + 1, ...
    const int k = o.prim->results;
    std::vector<Var> outs, douts;
    bool any = false;
    for (int i = 0; i < k; ++i) {
      outs.push_back(map[v + i]);
      douts.push_back(adj[v + i]);
      any = any || adj[v + i] != kNoVar;
    }
    if (!any) continue;
    std::vector<Var> args;
    auto needs = std::make_unique<bool[]>(o.args.size());
    for (std::size_t i = 0; i < o.args.size(); ++i) {
      args.push_back(map[o.args[i]]);
      needs[i] = needed[o.args[i]];
    }
    if (!o.prim->adjoint)
      throw Error(fmt::format("{}: primitive '{}' has no reverse-mode (adjoint) rule", op, o.prim->name));
    const std::vector<Var> d = o.prim->adjoint(
        b, AdjointArgs{args, map[v], adj[v], o.attrs, std::span<const bool>(needs.get(), o.args.size()), outs, douts});
    if (d.size() != o.args.size())
      throw Error(fmt::format("{}: the adjoint rule of '{}' returned {} gradients for {} arguments", op,
                              o.prim->name, d.size(), o.args.size()));
    for (std::size_t i = 0; i < o.args.size(); ++i) {
      if (!needs[i] || d[i] == kNoVar) continue;
      if (b.type(d[i]) != f.type(o.args[i]))
        throw Error(fmt::format("{}: the adjoint rule of '{}' returned {} for argument {}, expected {}", op,
                                o.prim->name, type_str(b.type(d[i])), i + 1, type_str(f.type(o.args[i]))));
      Var& a = adj[o.args[i]];
      a = a == kNoVar ? d[i] : b.add(a, d[i]);  // a variable used twice sums its adjoints
    }
  }

  std::vector<Var> outputs{map[y]};
  for (Var in : f.inputs()) outputs.push_back(b.or_zeros(adj[in], f.type(in)));
  b.set_outputs(std::move(outputs));
  return b.finish();
}

}  // namespace

Tape reverse_mode(const Tape& tape) { return reverse(tape, false); }
Tape reverse_mode_seeded(const Tape& tape) { return reverse(tape, true); }

Tape grad_tape(const Tape& tape) { return PassPipeline({"grad", "simplify", "cse", "dce"}).run(tape); }
Tape vjp_tape(const Tape& tape) { return PassPipeline({"vjp", "simplify", "cse", "dce"}).run(tape); }

}  // namespace reel
