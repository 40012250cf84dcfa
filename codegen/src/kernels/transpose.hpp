#pragma once
// A transpose of a matrix (kernels/transpose.cpp), unless matrix products fold it into
// their call. Needs no LLVM.
#include <cstdint>

#include "reel/ir/tape.hpp"

namespace reel::codegen {

struct TransposeStep {
  Var out;
  Var in;
};

// The kernel: params {in, out}, in is [rows, cols].
struct TransposeSpec {
  int64_t rows = 0, cols = 0;
};

}  // namespace reel::codegen
