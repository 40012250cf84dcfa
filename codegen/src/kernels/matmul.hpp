#pragma once
// matmul and batch_matmul (kernels/matmul.cpp): a CBLAS call; a transpose used only by
// matrix products is folded into the call. Needs no LLVM.
#include <vector>

#include "reel/ir/tape.hpp"

namespace reel::codegen {

struct MatmulStep {
  Var out;
  Var a, b;  // after folding transposes: the matrices as stored
  bool trans_a = false, trans_b = false;
};

// Whether a strided read's result is its argument with the last two axes swapped (and
// nothing else moved): a batch of transposed matrices, which a batched matrix product
// reads as stored, transposed by CBLAS.
bool swaps_last_two(const Tape& t, const Op& op);

// Per variable: a transpose (or a swap of the last two axes) folded into the matrix
// products reading it, which nothing else reads but other such transposes, themselves
// folded (the transpose of a transpose: the matrix as stored).
std::vector<bool> folded_transposes(const Tape& t);

}  // namespace reel::codegen
