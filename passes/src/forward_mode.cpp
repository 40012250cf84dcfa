// The forward-mode pass: a tape -> its Jacobian-vector-product tape, built from each
// primitive's tangent rule (or, for a linear primitive, the primitive itself), so the
// result is an ordinary tape: printable, compilable, differentiable again.
#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "reel/ir/builder.hpp"
#include "reel/passes.hpp"
#include "reel/ir/body_tape.hpp"
#include "transforms.hpp"

namespace reel {

namespace {

// f's inputs, then a tangent input per input where `active` (an i64 input's carries no
// tangent); f's outputs, then each output's tangent (zeros where none). Each call's
// tangent is built right after its copy, so a rule that recomputes the call's results
// (TangentArgs::same_outs) replaces them for every later reader.
Tape forward(const Tape& f, std::span<const bool> active) {
  const Var n = f.size();
  TapeBuilder b;
  b.reserve(3 * static_cast<std::size_t>(n));
  std::vector<Var> map(static_cast<std::size_t>(n) + 1, kNoVar), tan(static_cast<std::size_t>(n) + 1, kNoVar);
  const std::vector<Var> inputs = f.inputs();
  for (Var in : inputs) map[in] = b.copy(f.op(in), {});
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!active[i]) continue;
    tan[inputs[i]] = b.input(f.type(inputs[i]));
    if (!is_float(f.type(inputs[i]).dtype)) tan[inputs[i]] = kNoVar;
  }
  for (Var v = 1; v <= n; ++v) {
    const Op& op = f.op(v);
    if (op.kind == OpKind::input || op.kind == OpKind::result) continue;  // (results: with their call)
    std::vector<Var> args, tangents;
    bool any = false;
    for (Var a : op.args) {
      args.push_back(map[a]);
      tangents.push_back(tan[a]);
      any = any || tan[a] != kNoVar;
    }
    map[v] = b.copy(op, args);
    if (op.kind != OpKind::call) continue;
    for (Var r = v + 1; r < v + op.results; ++r) map[r] = b.copy(f.op(r), {map[v]});
    if (!any) continue;
    if (op.results == 1 && !is_float(op.type.dtype)) continue;  // an i64 result has no tangent
    // The results' variables: v, and for several results v + 1, ...; one tangent each.
    std::vector<Var> outs;
    for (int i = 0; i < op.results; ++i) outs.push_back(map[v + i]);
    std::vector<Var> ts, same(static_cast<std::size_t>(op.results), kNoVar);
    if (op.prim->linear && op.args.size() == 1) {
      ts = {b.call(*op.prim, {tangents[0]}, op.attrs)};
    } else if (op.prim->tangent) {
      TangentArgs a{args, map[v], tangents, op.attrs, outs};
      a.transforms = &detail::pass_transforms();
      a.same_outs = same;
      ts = op.prim->tangent(b, a);
      check_result_count(*op.prim, "jvp: the tangent rule", ts.size());
      if (ts.size() != outs.size())
        throw Error(fmt::format("jvp: the tangent rule of '{}' gave {} tangents for {} results", op.prim->name,
                                ts.size(), outs.size()));
    } else {
      throw Error(fmt::format("jvp: primitive '{}' has no forward-mode (tangent) rule", op.prim->name));
    }
    for (std::size_t i = 0; i < ts.size(); ++i) {
      const Var r = v + static_cast<Var>(i);
      const VarType& want = f.type(r);
      if (ts[i] != kNoVar && b.type(ts[i]) != want)
        throw Error(fmt::format("jvp: the tangent rule of '{}' returned {}{}, expected {}", op.prim->name,
                                type_str(b.type(ts[i])), ts.size() == 1 ? "" : fmt::format(" for result {}", i + 1),
                                type_str(want)));
      tan[r] = ts[i];
      if (same[i] != kNoVar) {
        if (b.type(same[i]) != want)
          throw Error(fmt::format("jvp: the tangent rule of '{}' recomputed result {} as {}, expected {}",
                                  op.prim->name, i + 1, type_str(b.type(same[i])), type_str(want)));
        map[r] = same[i];
      }
    }
  }
  std::vector<Var> outputs;
  for (Var o : f.outputs) outputs.push_back(map[o]);
  for (Var o : f.outputs) outputs.push_back(b.or_zeros(tan[o], f.type(o)));
  b.set_outputs(std::move(outputs));
  return b.finish();
}

}  // namespace

Tape forward_mode(const Tape& f) {
  verify("jvp", f);  // a declaration edited by hand is reported as such, not by a rule
  const std::size_t inputs = f.inputs().size();
  return forward(f, Flags(inputs, true));
}

Tape jvp_body(const Tape& body, std::span<const bool> active) {
  verify("jvp", body);
  if (active.size() != body.inputs().size())
    throw Error(fmt::format("jvp: expected {} input flags, got {}", body.inputs().size(), active.size()));
  return cleanup(forward(body, active));
}

Tape jvp_tape(const Tape& tape) { return derivative_pipeline("jvp", tape); }

const Transforms& detail::pass_transforms() {
  static const Transforms t{&vjp_body, &jvp_body, &cleanup, &batch_body};
  return t;
}

}  // namespace reel
