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

}  // namespace reel::passes
