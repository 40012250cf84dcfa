#pragma once
// Pooling windows (kernels/pool.cpp): an eager call of a pooling primitive on floats
// (Primitive::pool) that runs as a generated loop instead of its eager function.
// Needs no LLVM.
#include "reel/ir/tape.hpp"

namespace reel::codegen {

// The kernel: params {the primitive's arguments, out}; the windows.
struct PoolSpec {
  PoolWindow window;
};

}  // namespace reel::codegen
