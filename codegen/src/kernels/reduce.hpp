#pragma once
// A reduction of its own (kernels/reduce.cpp): sum, mean, product, maximum, minimum,
// argmax and argmin over some dimensions, a loop nest of its own. (A sum that a fused
// loop accumulates as it goes is that loop's: LoopSpec::Sum.) Needs no LLVM.
#include <vector>

#include "reel/ir/tape.hpp"

namespace reel::codegen {

struct ReduceStep {
  Var out;
  Var in;
  // `in` is a strided read (of a float source in memory), read by the reduction from its
  // source at its offset and strides rather than copied first.
  bool strided = false;
};

// The kernel: params {in, out}; for each kept index, the reduced ones combined by
// op (accumulated in double), then scaled.
struct ReduceSpec {
  std::vector<int64_t> kept, kept_in, kept_out, reduced, reduced_in;
  int64_t out_numel = 0;
  double scale = 1;
  kernels::ReduceOp op = kernels::ReduceOp::sum;
  bool index = false;  // out (i64) is the position of the first element picked (Primitive::reduce_index)
};

// A loop accumulates a sum over leading dimensions in an array of doubles on the stack
// of at most this many elements; a larger one is a reduction step of its own.
constexpr int64_t kMaxColumnSums = 4096;

// A sum (or mean) to one number, which a loop can accumulate as it goes.
bool is_full_reduction(const Tape& t, Var v);
// A sum (or mean) over leading dimensions that keeps the trailing ones whole (sum_to of a
// broadcast bias's gradient, a column count), of at most kMaxColumnSums results: a loop
// over the input accumulates it in an array, a sum per result, as it goes.
bool is_leading_sum(const Tape& t, Var v);
// A sum in f64 over trailing dimensions that keeps the leading ones whole (row sums: a
// matrix-vector product written as a sum of products, a softmax's denominators): a loop
// over the input adds each element into its result in the output as it goes, and the
// compiler keeps a row's total in registers. Any number of results.
bool is_trailing_sum(const Tape& t, Var v);

}  // namespace reel::codegen
