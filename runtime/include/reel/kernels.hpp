#pragma once
#include <limits>
// Eager kernels: plain loops (and CBLAS for matrix products) that compute one
// primitive on concrete tensors. The interpreter and the tracer run these; the JIT
// generates its own code from the same primitive table.
#include "reel/tensor.hpp"

namespace reel::kernels {

// Elementwise primitives have no kernel of their own here: their math is written once,
// in their primitive's entry, and run by map_unary / map_binary (reel/elementwise.hpp).

Tensor sum_all(const Tensor& x);             // 0-d
Tensor mean_all(const Tensor& x);            // 0-d
Tensor sum_axis(const Tensor& x, int64_t axis);  // drops `axis`
// Sums `x` down to `shape`, the inverse of broadcasting `shape` up to x's shape.
Tensor sum_to(const Tensor& x, const Shape& shape);

// How a reduction combines elements: sum (from 0), product (from 1), IEEE maximum
// (from -inf) or minimum (from +inf; NaN if any element is NaN). Every one
// accumulates in double, as compiled code does.
enum class ReduceOp { sum, prod, max, min };
// Where a reduction starts: 0, 1, -inf or +inf (also what it gives for no elements).
constexpr double reduce_identity(ReduceOp op) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  return op == ReduceOp::sum ? 0.0 : op == ReduceOp::prod ? 1.0 : op == ReduceOp::max ? -inf : inf;
}
// a combined with v as the reduction `op` does (the partial results of a reduction's
// chunks, combined in order).
double reduce_combine(ReduceOp op, double a, double v);
// x reduced into `keep`, a shape that broadcasts to x's (reduced axes are 1), then
// multiplied by `scale`.
Tensor reduce_to(const Tensor& x, const Shape& keep, ReduceOp op, double scale = 1.0);
// The index (i64) of the first largest (smallest) element along `axis`, which is
// dropped; a NaN counts as larger (smaller) than everything, like NumPy.
Tensor arg_extremum(const Tensor& x, int64_t axis, bool largest);
Tensor broadcast_to(const Tensor& x, const Shape& shape);
Tensor transpose(const Tensor& x);           // 2-D
Tensor matmul(const Tensor& a, const Tensor& b);  // [m,k]x[k,n] or [m,k]x[k]

}  // namespace reel::kernels
