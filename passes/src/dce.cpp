#include "reel/passes.hpp"
#include "rewrite.hpp"

namespace reel {

namespace {

// Which operations stay: the live ones, and the result operations of a live call (part
// of its line). Inputs are the signature; guards (effects) stay.
// `check`: a caller's tape is checked before the liveness walk reads arguments (not one
// a pass of the pipeline has just made: compact).
std::vector<bool> kept(const Tape& tape, bool check) {
  if (check) check_structure("dce", tape);
  std::vector<bool> live(static_cast<std::size_t>(tape.size()) + 1, false);
  for (Var o : tape.outputs) live[static_cast<std::size_t>(o)] = true;
  for (Var v = tape.size(); v >= 1; --v) {
    const Op& op = tape.op(v);
    if (op.kind == OpKind::input) live[static_cast<std::size_t>(v)] = true;
    if (op.kind == OpKind::call && op.prim->effect) live[static_cast<std::size_t>(v)] = true;
    if (live[static_cast<std::size_t>(v)])
      for (Var a : op.args) live[static_cast<std::size_t>(a)] = true;
  }
  for (Var v = 1; v <= tape.size(); ++v) {  // (a result comes after its call)
    const Op& op = tape.op(v);
    if (op.kind == OpKind::result && live[static_cast<std::size_t>(op.args[0])]) live[static_cast<std::size_t>(v)] = true;
  }
  return live;
}

// DCE's step. Builder: TapeBuilder, or passes::InPlace.
template <class Builder>
struct Keeper {
  std::vector<bool> keep;
  Var operator()(Builder& b, Var v, Op&& op) const {
    return keep[static_cast<std::size_t>(v)] ? b.take(std::move(op)) : kNoVar;
  }
};

}  // namespace

Tape dce(const Tape& tape) { return passes::rewrite_ops("dce", tape, Keeper<TapeBuilder>{kept(tape, true)}); }
Tape passes::dce(Tape&& tape) { return compact(std::move(tape), Keeper<InPlace>{kept(tape, false)}); }

}  // namespace reel
