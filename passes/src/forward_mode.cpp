// The forward-mode pass: a tape -> its Jacobian-vector-product tape, built from each
// primitive's tangent rule (or, for a linear primitive, the primitive itself), so the
// result is an ordinary tape: printable, compilable, differentiable again.
#include <fmt/format.h>

#include "reel/ir/builder.hpp"
#include "reel/passes.hpp"

namespace reel {

Tape forward_mode(const Tape& f) {
  verify("jvp", f);  // a declaration edited by hand is reported as such, not by a rule
  const Var n = f.size();
  TapeBuilder b;
  b.reserve(3 * static_cast<std::size_t>(n));
  std::vector<Var> map(static_cast<std::size_t>(n) + 1, kNoVar);
  for (Var v = 1; v <= n; ++v) {
    std::vector<Var> args;
    for (Var a : f.op(v).args) args.push_back(map[a]);
    map[v] = b.copy(f.op(v), std::move(args));
  }
  // One tangent input per input, after the inputs themselves; then the tangents.
  std::vector<Var> tan(static_cast<std::size_t>(n) + 1, kNoVar);
  for (Var in : f.inputs()) {
    tan[in] = b.input(f.type(in));
    if (!is_float(f.type(in).dtype)) tan[in] = kNoVar;  // an i64 input carries no tangent
  }
  for (Var v = 1; v <= n; ++v) {
    const Op& op = f.op(v);
    if (op.kind != OpKind::call) continue;
    std::vector<Var> args, tangents;
    bool any = false;
    for (Var a : op.args) {
      args.push_back(map[a]);
      tangents.push_back(tan[a]);
      any = any || tan[a] != kNoVar;
    }
    if (!any) continue;
    if (op.prim->results == 1 && !is_float(op.type.dtype)) continue;  // an i64 result has no tangent
    // The results' variables: v, and for several results v + 1, ...; one tangent each.
    std::vector<Var> outs;
    for (int i = 0; i < op.prim->results; ++i) outs.push_back(map[v + i]);
    std::vector<Var> ts;
    if (op.prim->linear && op.args.size() == 1) {
      ts = {b.call(*op.prim, {tangents[0]}, op.attrs)};
    } else if (op.prim->tangent) {
      ts = op.prim->tangent(b, TangentArgs{args, map[v], tangents, op.attrs, outs});
      check_result_count(*op.prim, "jvp: the tangent rule", ts.size());
    } else {
      throw Error(fmt::format("jvp: primitive '{}' has no forward-mode (tangent) rule", op.prim->name));
    }
    for (std::size_t i = 0; i < ts.size(); ++i) {
      const VarType& want = f.type(v + static_cast<Var>(i));
      if (ts[i] != kNoVar && b.type(ts[i]) != want)
        throw Error(fmt::format("jvp: the tangent rule of '{}' returned {}{}, expected {}", op.prim->name,
                                type_str(b.type(ts[i])), ts.size() == 1 ? "" : fmt::format(" for result {}", i + 1),
                                type_str(want)));
      tan[v + static_cast<Var>(i)] = ts[i];
    }
  }
  std::vector<Var> outputs;
  for (Var o : f.outputs) outputs.push_back(map[o]);
  for (Var o : f.outputs) outputs.push_back(b.or_zeros(tan[o], f.type(o)));
  b.set_outputs(std::move(outputs));
  return b.finish();
}

Tape jvp_tape(const Tape& tape) { return PassPipeline({"jvp", "simplify", "cse", "dce"}).run(tape); }

}  // namespace reel
