#include "reel/passes.hpp"
#include "rewrite.hpp"

namespace reel {

Tape dce(const Tape& tape) {
  check_structure("dce", tape);  // before the liveness walk reads arguments
  std::vector<bool> live(tape.size() + 1, false);
  for (Var o : tape.outputs) live[o] = true;
  for (Var v = tape.size(); v >= 1; --v) {
    const Op& op = tape.op(v);
    if (op.kind == OpKind::input) live[v] = true;  // inputs are the signature
    if (op.kind == OpKind::call && op.prim->effect) live[v] = true;  // guards stay
    if (live[v])
      for (Var a : op.args) live[a] = true;
  }
  return passes::rewrite("dce", tape, [&](TapeBuilder& b, Var v, const Op& op, std::vector<Var> args) {
    // A live call keeps all its result operations: they are part of its line.
    const bool keep = live[v] || (op.kind == OpKind::result && live[op.args[0]]);
    return keep ? b.copy(op, std::move(args)) : kNoVar;
  });
}

}  // namespace reel
