// Algebraic simplification of the identities the reverse pass produces most: a seed of
// ones multiplied in (x * 1 -> x), double negation. Only exact IEEE identities (x + 0
// is not one: -0 + 0 is +0), and only where the kept operand already has the result's
// type, so no broadcast is lost.
#include <cmath>

#include "reel/passes.hpp"
#include "rewrite.hpp"

namespace reel {

namespace {

// True if v is a constant whose every element is `value` (with its sign, so that
// +0 and -0 differ), or a broadcast of one.
bool is_filled_with(const Tape& t, Var v, double value) {
  const Op* op = &t.op(v);
  while (op->kind == OpKind::call && op->prim->structure == Structure::broadcast) op = &t.op(op->args[0]);
  if (op->kind != OpKind::constant) return false;
  for (double x : op->value.values())
    if (x != value || std::signbit(x) != std::signbit(value)) return false;
  return true;
}

// The simpler variable equal to `op` (with arguments `a` in the new tape), or kNoVar.
// Reads the primitives' properties (identity elements, involution), not their names.
Var simpler(const Tape& t, const Op& op, const std::vector<Var>& a) {
  if (op.kind != OpKind::call || op.results != 1) return kNoVar;
  const Primitive& p = *op.prim;
  auto same_type = [&](Var v) { return t.type(v) == op.type; };
  if (a.size() == 2) {
    if (p.left_identity && is_filled_with(t, a[0], *p.left_identity) && same_type(a[1])) return a[1];
    if (p.right_identity && is_filled_with(t, a[1], *p.right_identity) && same_type(a[0])) return a[0];
  } else if (a.size() == 1 && p.involution) {
    const Op& inner = t.op(a[0]);
    if (inner.kind == OpKind::call && inner.prim == op.prim) return inner.args[0];
  }
  return kNoVar;
}

}  // namespace

Tape simplify(const Tape& tape) {
  return passes::rewrite("simplify", tape, [](TapeBuilder& b, Var, const Op& op, std::vector<Var> args) {
    const Var s = simpler(b.tape(), op, args);
    return s != kNoVar ? s : b.copy(op, std::move(args));
  });
}

}  // namespace reel
