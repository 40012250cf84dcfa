#pragma once
// Eager kernels: plain loops (and CBLAS for matrix products) that compute one
// primitive on concrete tensors. The interpreter and the tracer run these; the JIT
// generates its own code from the same primitive table.
#include "reel/tensor.hpp"

namespace reel::kernels {

enum class Unary { neg, exp, log, sin, cos, tanh, sigmoid, sqrt, square };
enum class Binary { add, sub, mul, div };

Tensor unary(Unary op, const Tensor& x);
Tensor pow(const Tensor& x, double p);
// NumPy broadcasting; the caller has checked that the shapes broadcast.
Tensor binary(Binary op, const Tensor& a, const Tensor& b);

Tensor sum_all(const Tensor& x);             // 0-d
Tensor mean_all(const Tensor& x);            // 0-d
Tensor sum_axis(const Tensor& x, int64_t axis);  // drops `axis`
// Sums `x` down to `shape`, the inverse of broadcasting `shape` up to x's shape.
Tensor sum_to(const Tensor& x, const Shape& shape);
Tensor broadcast_to(const Tensor& x, const Shape& shape);
Tensor transpose(const Tensor& x);           // 2-D
Tensor matmul(const Tensor& a, const Tensor& b);  // [m,k]x[k,n] or [m,k]x[k]

}  // namespace reel::kernels
