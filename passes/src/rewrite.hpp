#pragma once
// Internal: the loop every rewriting pass shares.
#include <functional>

#include "reel/ir/builder.hpp"

namespace reel::passes {

// Builds a new tape from `tape` operation by operation. `step` gets the builder, the
// variable and its operation, and the operation's arguments already renamed into the
// new tape; it returns the variable that stands for it there (kNoVar if dropped).
// Outputs are renamed at the end. Checks the tape's structure first, naming `pass`.
using RewriteStep = std::function<Var(TapeBuilder&, Var, const Op&, std::vector<Var>)>;
Tape rewrite(const char* pass, const Tape& tape, const RewriteStep& step);

// The same loop for a step that takes the operation itself, its arguments renamed into
// the new tape, to append (moved: TapeBuilder::take) or drop. Given a tape to keep, each
// operation is copied first; given one to consume, each is moved out of it and renamed
// in place, so that nothing is allocated per operation (a tape of a million operations
// is millions of argument, attribute and shape lists: copying and freeing them was most
// of a cleanup pass's time).
using OpStep = std::function<Var(TapeBuilder&, Var, Op&&)>;
Tape rewrite_ops(const char* pass, const Tape& tape, const OpStep& step);
Tape rewrite_ops(const char* pass, Tape&& tape, const OpStep& step);

// The cleanup passes consuming their tape (what a pass pipeline runs on the tapes it
// made): the same results as reel::simplify, cse and dce.
Tape simplify(Tape&& tape);
Tape cse(Tape&& tape);
Tape dce(Tape&& tape);

}  // namespace reel::passes
