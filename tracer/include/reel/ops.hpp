#pragma once
// The operations users call on tensors. Each runs eagerly and, while a function is
// traced, records itself on the tape.
#include <array>
#include <vector>

#include "reel/tensor.hpp"

namespace reel {

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
// A double operand becomes a 0-d constant of the tensor's dtype.
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& a);

// In-place updates: x op= y is x = x op y for every tensor, recorded like the operation
// while tracing (x's variable then holds the result) and for params (x then holds a
// tensor computed from the param). Tensors are values: no other copy changes. To
// update a Tracker param in its own memory (Tracker's W.data .-= lr .* grad(W)), use
// W.assign(W - lr * W.grad()).
Tensor& operator+=(Tensor& x, const Tensor& y);
Tensor& operator-=(Tensor& x, const Tensor& y);
Tensor& operator*=(Tensor& x, const Tensor& y);
Tensor& operator/=(Tensor& x, const Tensor& y);
Tensor& operator+=(Tensor& x, double y);
Tensor& operator-=(Tensor& x, double y);
Tensor& operator*=(Tensor& x, double y);
Tensor& operator/=(Tensor& x, double y);

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor square(const Tensor& x);
Tensor pow(const Tensor& x, double p);
// x converted to `dtype`: between f32 and f64 gradients pass; to i64 truncates toward
// zero (NaN, infinities and out-of-range values are errors) and no gradient passes.
Tensor cast(const Tensor& x, DType dtype);
// -1, 0 or 1 by the sign of each element; no gradient flows through it.
Tensor sign(const Tensor& x);
// |x|; its gradient is sign(x), so 0 at 0.
Tensor abs(const Tensor& x);
// max(x, 0); its gradient at 0 is 0.
Tensor relu(const Tensor& x);
Tensor log1p(const Tensor& x);  // log(1 + x), accurate near 0
Tensor expm1(const Tensor& x);  // e^x - 1, accurate near 0
Tensor softplus(const Tensor& x);  // log(1 + e^x), without overflow
Tensor erf(const Tensor& x);
Tensor lgamma(const Tensor& x);   // log |Gamma(x)|; its derivative is digamma
Tensor digamma(const Tensor& x);  // its derivative is trigamma (which has none)
Tensor trigamma(const Tensor& x);
Tensor atan(const Tensor& x);   // in (-pi/2, pi/2); its derivative is 1 / (1 + x^2)
Tensor asinh(const Tensor& x);  // its derivative is 1 / sqrt(x^2 + 1)
// sqrt(a^2 + b^2) without overflow, with broadcasting; its gradient (a, b) / hypot(a, b)
// is taken as 0 at a = b = 0.
Tensor hypot(const Tensor& a, const Tensor& b);
Tensor hypot(const Tensor& a, double b);
// The C math library's functions, elementwise (f32 calls the float forms), with their
// derivatives: tan' = 1 + tan^2; asin' = 1/sqrt(1 - x^2), acos' = -asin' (+-inf at
// x = +-1, NaN outside [-1, 1]); sinh' = cosh, cosh' = sinh; cbrt (real: cbrt(-8) = -2)
// has 1/(3 cbrt(x)^2), +inf at 0; log2' = 1/(x ln 2), log10' = 1/(x ln 10).
Tensor tan(const Tensor& x);
Tensor asin(const Tensor& x);
Tensor acos(const Tensor& x);
Tensor sinh(const Tensor& x);
Tensor cosh(const Tensor& x);
Tensor cbrt(const Tensor& x);
Tensor log2(const Tensor& x);
Tensor log10(const Tensor& x);
// Rounding to an integer value: down, up, or to the nearest with halves away from zero
// (C's round: round(2.5) = 3, round(-0.5) = -0). No gradient flows through them (their
// derivative is zero wherever it exists).
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor round(const Tensor& x);
// The angle of the point (x, y) in [-pi, pi], with broadcasting, as C's atan2; its
// gradient (x, -y) / (x^2 + y^2) is taken as 0 at x = y = 0.
Tensor atan2(const Tensor& y, const Tensor& x);
// |x| with the sign bit of y, with broadcasting. d/dx = copysign(1, x) * copysign(1, y)
// (+-1, at zeros too); no gradient flows into y.
Tensor copysign(const Tensor& x, const Tensor& y);
// x^y with a tensor exponent, with broadcasting (the primitive `powv`). d/dx = y x^(y-1),
// taken as 0 where y = 0; d/dy = x^y log x, taken as 0 where x = 0 (so pow(0, y > 0)
// has gradient 0 in y, not NaN).
Tensor pow(const Tensor& x, const Tensor& y);
// Elementwise maximum / minimum with broadcasting; NaN if either is NaN. On a tie
// the gradient is split evenly between the two.
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, double b);
Tensor minimum(const Tensor& a, double b);
// min(max(x, lo), hi); gradient 1 where lo <= x <= hi (bounds included), else 0.
Tensor clamp(const Tensor& x, double lo, double hi);
// a where cond != 0, else b (the three broadcast together; cond in the same dtype).
// No gradient flows into cond.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
Tensor where(const Tensor& cond, double a, const Tensor& b);
// Comparisons: 1 where the relation holds, else 0, in the operands' dtype, with
// broadcasting; NaN compares false except with !=. No gradient flows through them.
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, double b);
Tensor operator>(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, double b);
Tensor operator==(const Tensor& a, double b);
Tensor operator!=(const Tensor& a, double b);
Tensor operator<(double a, const Tensor& b);
Tensor operator<=(double a, const Tensor& b);
Tensor operator>(double a, const Tensor& b);
Tensor operator>=(double a, const Tensor& b);
Tensor operator==(double a, const Tensor& b);
Tensor operator!=(double a, const Tensor& b);
// The value of x, through which no gradient flows (Yota's @nodiff, JAX's
// stop_gradient). It shows on the tape as a call of `nodiff`.
Tensor nodiff(const Tensor& x);
inline Tensor stop_gradient(const Tensor& x) { return nodiff(x); }

// Reductions over all elements (a 0-d result), one axis or a list of axes (negative
// axes count from the end; each at most once), dropping the reduced axes or, with
// keepdims, keeping them with size 1. Sums, products and means accumulate in double.
// Gradients: prod's is the product of the other elements, right when some are 0;
// max's and min's go to the elements equal to the result, split evenly among ties.
// max and min of no elements are errors; a mean of none is NaN, a product 1.
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, int64_t axis, bool keepdims = false);
Tensor sum(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, int64_t axis, bool keepdims = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims = false);
Tensor prod(const Tensor& x);
Tensor prod(const Tensor& x, int64_t axis, bool keepdims = false);
Tensor prod(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims = false);
Tensor max(const Tensor& x);
Tensor max(const Tensor& x, int64_t axis, bool keepdims = false);
Tensor max(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims = false);
Tensor min(const Tensor& x);
Tensor min(const Tensor& x, int64_t axis, bool keepdims = false);
Tensor min(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims = false);
// log(sum(exp(x))) in the stable form m + log(sum(exp(x - m))) with m the maximum
// (held constant for the gradient, which is then softmax(x), also stable); -inf for
// all -inf, +inf if any is +inf.
Tensor logsumexp(const Tensor& x);
Tensor logsumexp(const Tensor& x, int64_t axis, bool keepdims = false);
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims = false);
// exp(x) / sum(exp(x)) along `axis` (max-shifted), and its logarithm x - logsumexp(x).
Tensor softmax(const Tensor& x, int64_t axis = -1);
Tensor log_softmax(const Tensor& x, int64_t axis = -1);
// i64 index of the first largest (smallest) element, of the flattened x or along
// `axis` (dropped); a NaN counts as the largest (smallest). No gradient.
Tensor argmax(const Tensor& x);
Tensor argmax(const Tensor& x, int64_t axis);
Tensor argmin(const Tensor& x);
Tensor argmin(const Tensor& x, int64_t axis);
Tensor sum_to(const Tensor& x, const Shape& shape);

// NumPy's matmul: [m,k]x[k,n] -> [m,n], [m,k]x[k] -> [m], [k]x[k,n] -> [n], [k]x[k]
// -> [], and batches [...,m,k]x[...,k,n] -> [...,m,n] with the batch dimensions
// broadcast; CBLAS under every case (gemm, gemv; one gemm per batch element).
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor dot(const Tensor& a, const Tensor& b);    // two vectors -> 0-d
Tensor outer(const Tensor& a, const Tensor& b);  // [m], [n] -> [m,n]
// The last two axes swapped (a 2-D transpose, or a batch of them); rank >= 2.
Tensor transpose(const Tensor& x);
// Result axis i is x's axis perm[i] (a permutation of 0..rank-1).
Tensor permute(const Tensor& x, const std::vector<int64_t>& perm);
// Drops axis (which must have length 1) / inserts a length-1 axis before position
// axis (negative axes count from the end of the result).
Tensor squeeze(const Tensor& x, int64_t axis);
Tensor expand_dims(const Tensor& x, int64_t axis);

// Slices, Python-style bounds: negative start/stop count from the end, and both are
// clamped to [0, n]; step >= 1. slice(x, start, stop) is on the first axis, so Julia's
// x[2:end] is slice(x, 1, n). Gradients flow back into the sliced positions.
Tensor slice(const Tensor& x, int64_t start, int64_t stop);
Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t stop, int64_t step = 1);
// x[i] along axis (dropped); negative i counts from the end.
Tensor index(const Tensor& x, int64_t i, int64_t axis = 0);
// NumPy's take along axis with i64 indices of any shape: result shape x[:axis] +
// indices.shape + x[axis+1:]. Indices out of [0, n) are errors. The gradient is a
// scatter-add, so duplicate indices accumulate.
Tensor gather(const Tensor& x, const Tensor& indices, int64_t axis = 0);
// gather on the flattened x.
Tensor take(const Tensor& x, const Tensor& indices);
// target with values added at the indexed positions along axis (duplicates accumulate);
// values has gather's result shape.
Tensor scatter_add(const Tensor& target, const Tensor& indices, const Tensor& values, int64_t axis = 0);
// A functional setindex!: x with the indexed positions along axis replaced by values
// (distinct indices), or the slice [start, stop) of axis. Gradients flow to x outside
// those positions and to values.
Tensor index_update(const Tensor& x, const Tensor& indices, const Tensor& values, int64_t axis = 0);
Tensor index_update(const Tensor& x, int64_t axis, int64_t start, int64_t stop, const Tensor& values);
// Convolution (cross-correlation, as in deep learning) in NCHW: x [N,C,H,W], w
// [O,C,KH,KW] -> [N,O,OH,OW] with OH = (H + 2 padding - dilation (KH - 1) - 1) / stride
// + 1. Its gradients are the primitives conv2d_data_grad and conv2d_filter_grad (im2col
// and one CBLAS gemm per image), which have gradients too.
struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
};
Tensor conv2d(const Tensor& x, const Tensor& w, const Conv2dOptions& options = {});
// x [N,C,L], w [O,C,K] -> [N,O,OL], through conv2d.
struct Conv1dOptions {
  int64_t stride = 1, padding = 0, dilation = 1;
};
Tensor conv1d(const Tensor& x, const Tensor& w, const Conv1dOptions& options = {});
// Pooling over kernel windows of x [N,C,H,W]; the stride defaults to the kernel, the
// padding (at most half the window) to 0. max_pool2d ignores padding and sends the
// gradient to each window's first maximum; avg_pool2d counts padding as zeros.
struct Pool2dOptions {
  std::array<int64_t, 2> stride{0, 0}, padding{0, 0};  // stride {0, 0}: the kernel
};
Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, const Pool2dOptions& options = {});
Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, const Pool2dOptions& options = {});
// Joined along an existing axis / stacked along a new one.
Tensor concat(const std::vector<Tensor>& xs, int64_t axis = 0);
Tensor stack(const std::vector<Tensor>& xs, int64_t axis = 0);
// The lower (upper) triangle of the last two axes: elements with j - i <= k (>= k)
// kept, the others 0.
Tensor tril(const Tensor& x, int64_t k = 0);
Tensor triu(const Tensor& x, int64_t k = 0);
// An n x n lower-triangular matrix from the vector of its entries: the diagonal and
// below (k = 0, n(n+1)/2 entries) or strictly below (k = -1, n(n-1)/2 entries), filled
// row by row or, with column_major, column by column (GMM's Q from icf); 0 elsewhere.
Tensor tril_from_vector(const Tensor& v, int64_t n, int64_t k = 0, bool column_major = false);
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor broadcast_to(const Tensor& x, const Shape& shape);

}  // namespace reel
