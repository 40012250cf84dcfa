#pragma once
// Internal: the loop every rewriting pass shares.
#include <functional>
#include <optional>
#include <vector>

#include "reel/ir/builder.hpp"

namespace reel::passes {

// Builds a new tape from `tape` operation by operation. `step` gets the builder, the
// variable and its operation, and the operation's arguments already renamed into the
// new tape; it returns the variable that stands for it there (kNoVar if dropped).
// Outputs are renamed at the end. Checks the tape's structure first, naming `pass`.
using RewriteStep = std::function<Var(TapeBuilder&, Var, const Op&, std::vector<Var>)>;
Tape rewrite(const char* pass, const Tape& tape, const RewriteStep& step);

// The same loop for a step that takes a copy of the operation itself, its arguments
// renamed into the new tape, to append (moved: TapeBuilder::take) or drop: a step
// written once for this and for `compact` below, which consumes its tape.
using OpStep = std::function<Var(TapeBuilder&, Var, Op&&)>;
Tape rewrite_ops(const char* pass, const Tape& tape, const OpStep& step);

// A consumed tape compacted in place, for a pass that puts at most one operation in the
// place of each (cse, dce, simplify): each operation is moved out, renamed in place, and
// what the pass keeps moves to the front of the same array. Nothing is allocated per
// operation (a tape of a million operations is millions of argument, attribute and shape
// lists: copying and freeing them was most of a cleanup pass's time), and the pass takes
// no new memory (a new array for a million operations is 200 MB of fresh
// pages, whose zeroing by the kernel was a quarter of a 10^6-operation gradient's
// compile). Offers the TapeBuilder calls such a pass makes: take, constant, copy, pop
// and tape (whose operations are valid up to the last one taken).
class InPlace {
 public:
  Var take(Op op);
  Var constant(const Tensor& value) { return take(TapeBuilder::constant_op(value)); }
  Var copy(const Op& op, std::vector<Var> args);
  void pop() { --count_; }
  const Tape& tape() const { return t_; }

 private:
  friend Tape compact(Tape&& tape, const std::function<Var(InPlace&, Var, Op&&)>& step);
  explicit InPlace(Tape& t) : t_(t) {}
  Tape& t_;
  Var count_ = 0;  // operations taken
  Var next_ = 1;   // the operation being rewritten (take may write below it only)
};
// rewrite_ops on a tape to consume, in place: `step` gets each operation with its
// arguments renamed and takes (keeps) it or one in its place, or stands another
// variable for it. The tape is one a pass has just made, so well formed: it is not
// checked (check_structure) again.
using CompactStep = std::function<Var(InPlace&, Var, Op&&)>;
Tape compact(Tape&& tape, const CompactStep& step);

// The types of a strided placement's pieces `a` (op's arguments, renamed or not) if
// they cover its result (placements put no element twice), else nothing.
std::optional<std::vector<VarType>> covering_pieces(const Tape& t, const Op& op, const std::vector<Var>& a);

// Whether simplify replaces the strided placement `op` (of tape t's variables) by the
// tensor its pieces were read from or by the broadcast they all are.
bool simpler_placement(const Tape& t, const Op& op);

// The cleanup passes consuming their tape (what a pass pipeline runs on the tapes it
// made, and only on those: compact does not check them): the same results as
// reel::simplify, cse and dce.
Tape simplify(Tape&& tape);
Tape cse(Tape&& tape);
Tape dce(Tape&& tape);

}  // namespace reel::passes
