#pragma once
// guard (kernels/guard.cpp): a C++ check of one element, right after its condition is
// computed. Needs no LLVM.
#include "reel/ir/tape.hpp"

namespace reel::codegen {

struct CheckStep {
  Var guard;  // its call: guard(cond, expected); its result is a view of cond
};

}  // namespace reel::codegen
