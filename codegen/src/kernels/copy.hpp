#pragma once
// A copy of a value into an output tensor (kernels/copy.cpp): an output that is an
// input, a constant, a view or a repeat. Needs no LLVM.
#include "reel/ir/tape.hpp"

namespace reel::codegen {

struct CopyStep {
  int slot;  // an output's slot
  Var from;
};

}  // namespace reel::codegen
