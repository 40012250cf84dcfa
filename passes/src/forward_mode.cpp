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
    if (op.prim->results > 1) {  // one tangent per result, for the variables v, v + 1, ...
      std::vector<Var> outs;
      for (int i = 0; i < op.prim->results; ++i) outs.push_back(map[v + i]);
      if (!op.prim->tangent_results)
        throw Error(fmt::format("jvp: primitive '{}' has {} results and no forward-mode rule for them "
                                "(tangent_results)", op.prim->name, op.prim->results));
      const std::vector<Var> ts = op.prim->tangent_results(b, TangentArgs{args, map[v], tangents, op.attrs, outs});
      if (ts.size() != outs.size())
        throw Error(fmt::format("jvp: the tangent rule of '{}' returned {} tangents for {} results",
                                op.prim->name, ts.size(), outs.size()));
      for (std::size_t i = 0; i < ts.size(); ++i) {
        const VarType& want = f.type(v + static_cast<Var>(i));
        if (ts[i] != kNoVar && b.type(ts[i]) != want)
          throw Error(fmt::format("jvp: the tangent rule of '{}' returned {} for result {}, expected {}",
                                  op.prim->name, type_str(b.type(ts[i])), i + 1, type_str(want)));
        tan[v + static_cast<Var>(i)] = ts[i];
      }
      continue;
    }
    if (op.prim->linear && op.args.size() == 1) {
      tan[v] = b.call(*op.prim, {tangents[0]}, op.attrs);
    } else if (op.prim->tangent) {
      tan[v] = op.prim->tangent(b, TangentArgs{args, map[v], tangents, op.attrs});
    } else {
      throw Error(fmt::format("jvp: primitive '{}' has no forward-mode (tangent) rule", op.prim->name));
    }
    if (tan[v] != kNoVar && b.type(tan[v]) != op.type)
      throw Error(fmt::format("jvp: the tangent rule of '{}' returned {}, expected {}", op.prim->name,
                              type_str(b.type(tan[v])), type_str(op.type)));
  }
  std::vector<Var> outputs;
  for (Var o : f.outputs) outputs.push_back(map[o]);
  for (Var o : f.outputs) outputs.push_back(b.or_zeros(tan[o], f.type(o)));
  b.set_outputs(std::move(outputs));
  return b.finish();
}

Tape jvp_tape(const Tape& tape) { return PassPipeline({"jvp", "simplify", "cse", "dce"}).run(tape); }

}  // namespace reel
