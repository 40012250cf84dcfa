#pragma once
// The eager call (kernels/eager.cpp): a primitive without generated code, whose eager
// function the step calls, unless a kernel kind runs the call (KernelRow::claims_call).
// Needs no LLVM.
#include <cstdint>

#include "reel/ir/tape.hpp"

namespace reel::codegen {

struct ExternStep {
  Var out;
  int results = 1;  // a primitive with several results writes out, out + 1, ...
  int scratch = -1;  // the workspace slot of its eager_into's scratch (Primitive::scratch_bytes), or -1
};

// The workspace bytes an eager step's eager_into asks for (Primitive::scratch_bytes), or 0:
// none, or a call that does not run in place (not a built-in, or one that runs tapes).
int64_t eager_into_scratch(const Tape& tape, Var v);

}  // namespace reel::codegen
