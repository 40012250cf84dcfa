#include "reel/passes.hpp"
#include "rewrite.hpp"

namespace reel {

namespace {

// Which operations stay: the live ones, and the result operations of a live call (part
// of its line). Inputs are the signature; guards (effects) stay.
std::vector<bool> kept(const Tape& tape) {
  check_structure("dce", tape);  // before the liveness walk reads arguments
  std::vector<bool> live(static_cast<std::size_t>(tape.size()) + 1, false);
  for (Var o : tape.outputs) live[static_cast<std::size_t>(o)] = true;
  for (Var v = tape.size(); v >= 1; --v) {
    const Op& op = tape.op(v);
    if (op.kind == OpKind::input) live[static_cast<std::size_t>(v)] = true;
    if (op.kind == OpKind::call && op.prim->effect) live[static_cast<std::size_t>(v)] = true;
    if (live[static_cast<std::size_t>(v)])
      for (Var a : op.args) live[static_cast<std::size_t>(a)] = true;
  }
  std::vector<bool> keep = live;
  for (Var v = 1; v <= tape.size(); ++v) {
    const Op& op = tape.op(v);
    if (op.kind == OpKind::result && live[static_cast<std::size_t>(op.args[0])]) keep[static_cast<std::size_t>(v)] = true;
  }
  return keep;
}

}  // namespace

Tape dce(const Tape& tape) {
  const std::vector<bool> keep = kept(tape);
  return passes::rewrite_ops("dce", tape, [&](TapeBuilder& b, Var v, Op&& op) {
    return keep[static_cast<std::size_t>(v)] ? b.take(std::move(op)) : kNoVar;
  });
}

Tape passes::dce(Tape&& tape) {
  const std::vector<bool> keep = kept(tape);
  return compact("dce", std::move(tape), [&](InPlace& b, Var v, Op&& op) {
    return keep[static_cast<std::size_t>(v)] ? b.take(std::move(op)) : kNoVar;
  });
}

}  // namespace reel
