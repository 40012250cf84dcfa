#include "reel/ops.hpp"


#include "reel/dispatch.hpp"
#include "reel/ir/prims.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

namespace reel {

namespace {

Tensor call(const Primitive& p, std::initializer_list<Tensor> in, Attrs attrs = {}) {
  return apply(p, std::span<const Tensor>(in.begin(), in.size()), std::move(attrs));
}

Tensor with_scalar(const Primitive& p, const Tensor& a, double b, bool scalar_first) {
  const Tensor s = scalar(b, a.defined() ? a.dtype() : DType::f64);
  return scalar_first ? call(p, {s, a}) : call(p, {a, s});
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return call(prims::add(), {a, b}); }
Tensor sub(const Tensor& a, const Tensor& b) { return call(prims::sub(), {a, b}); }
Tensor mul(const Tensor& a, const Tensor& b) { return call(prims::mul(), {a, b}); }
Tensor div(const Tensor& a, const Tensor& b) { return call(prims::div(), {a, b}); }

Tensor& operator+=(Tensor& x, const Tensor& y) { return x = x + y; }
Tensor& operator-=(Tensor& x, const Tensor& y) { return x = x - y; }
Tensor& operator*=(Tensor& x, const Tensor& y) { return x = x * y; }
Tensor& operator/=(Tensor& x, const Tensor& y) { return x = x / y; }
Tensor& operator+=(Tensor& x, double y) { return x = x + y; }
Tensor& operator-=(Tensor& x, double y) { return x = x - y; }
Tensor& operator*=(Tensor& x, double y) { return x = x * y; }
Tensor& operator/=(Tensor& x, double y) { return x = x / y; }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return with_scalar(prims::add(), a, b, false); }
Tensor operator-(const Tensor& a, double b) { return with_scalar(prims::sub(), a, b, false); }
Tensor operator*(const Tensor& a, double b) { return with_scalar(prims::mul(), a, b, false); }
Tensor operator/(const Tensor& a, double b) { return with_scalar(prims::div(), a, b, false); }
Tensor operator+(double a, const Tensor& b) { return with_scalar(prims::add(), b, a, true); }
Tensor operator-(double a, const Tensor& b) { return with_scalar(prims::sub(), b, a, true); }
Tensor operator*(double a, const Tensor& b) { return with_scalar(prims::mul(), b, a, true); }
Tensor operator/(double a, const Tensor& b) { return with_scalar(prims::div(), b, a, true); }
Tensor operator-(const Tensor& a) { return neg(a); }

Tensor neg(const Tensor& x) { return call(prims::neg(), {x}); }
Tensor exp(const Tensor& x) { return call(prims::exp(), {x}); }
Tensor log(const Tensor& x) { return call(prims::log(), {x}); }
Tensor sin(const Tensor& x) { return call(prims::sin(), {x}); }
Tensor cos(const Tensor& x) { return call(prims::cos(), {x}); }
Tensor tanh(const Tensor& x) { return call(prims::tanh(), {x}); }
Tensor sigmoid(const Tensor& x) { return call(prims::sigmoid(), {x}); }
Tensor nodiff(const Tensor& x) { return call(prims::nodiff(), {x}); }
Tensor sqrt(const Tensor& x) { return call(prims::sqrt(), {x}); }
Tensor square(const Tensor& x) { return call(prims::square(), {x}); }
Tensor sign(const Tensor& x) { return call(prims::sign(), {x}); }
Tensor abs(const Tensor& x) { return call(prims::abs(), {x}); }
Tensor cast(const Tensor& x, DType dtype) { return call(prims::cast(), {x}, {{"dtype", dtype}}); }
Tensor relu(const Tensor& x) { return call(prims::relu(), {x}); }
Tensor log1p(const Tensor& x) { return call(prims::log1p(), {x}); }
Tensor expm1(const Tensor& x) { return call(prims::expm1(), {x}); }
Tensor softplus(const Tensor& x) { return call(prims::softplus(), {x}); }
Tensor erf(const Tensor& x) { return call(prims::erf(), {x}); }
Tensor lgamma(const Tensor& x) { return call(prims::lgamma(), {x}); }
Tensor digamma(const Tensor& x) { return call(prims::digamma(), {x}); }
Tensor trigamma(const Tensor& x) { return call(prims::trigamma(), {x}); }
Tensor atan(const Tensor& x) { return call(prims::atan(), {x}); }
Tensor asinh(const Tensor& x) { return call(prims::asinh(), {x}); }
Tensor hypot(const Tensor& a, const Tensor& b) { return call(prims::hypot(), {a, b}); }
Tensor hypot(const Tensor& a, double b) { return with_scalar(prims::hypot(), a, b, false); }
Tensor tan(const Tensor& x) { return call(prims::tan(), {x}); }
Tensor asin(const Tensor& x) { return call(prims::asin(), {x}); }
Tensor acos(const Tensor& x) { return call(prims::acos(), {x}); }
Tensor sinh(const Tensor& x) { return call(prims::sinh(), {x}); }
Tensor cosh(const Tensor& x) { return call(prims::cosh(), {x}); }
Tensor cbrt(const Tensor& x) { return call(prims::cbrt(), {x}); }
Tensor log2(const Tensor& x) { return call(prims::log2(), {x}); }
Tensor log10(const Tensor& x) { return call(prims::log10(), {x}); }
Tensor floor(const Tensor& x) { return call(prims::floor(), {x}); }
Tensor ceil(const Tensor& x) { return call(prims::ceil(), {x}); }
Tensor round(const Tensor& x) { return call(prims::round(), {x}); }
Tensor atan2(const Tensor& y, const Tensor& x) { return call(prims::atan2(), {y, x}); }
Tensor copysign(const Tensor& x, const Tensor& y) { return call(prims::copysign(), {x, y}); }
Tensor pow(const Tensor& x, const Tensor& y) { return call(prims::powv(), {x, y}); }
Tensor maximum(const Tensor& a, const Tensor& b) { return call(prims::maximum(), {a, b}); }
Tensor minimum(const Tensor& a, const Tensor& b) { return call(prims::minimum(), {a, b}); }
Tensor maximum(const Tensor& a, double b) { return with_scalar(prims::maximum(), a, b, false); }
Tensor minimum(const Tensor& a, double b) { return with_scalar(prims::minimum(), a, b, false); }
Tensor clamp(const Tensor& x, double lo, double hi) {
  return call(prims::clamp(), {x}, {{"lo", lo}, {"hi", hi}});
}
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return call(prims::where(), {cond, a, b});
}
Tensor where(const Tensor& cond, const Tensor& a, double b) {
  return where(cond, a, scalar(b, a.defined() ? a.dtype() : DType::f64));
}
Tensor where(const Tensor& cond, double a, const Tensor& b) {
  return where(cond, scalar(a, b.defined() ? b.dtype() : DType::f64), b);
}
Tensor lt(const Tensor& a, const Tensor& b) { return call(prims::lt(), {a, b}); }
Tensor le(const Tensor& a, const Tensor& b) { return call(prims::le(), {a, b}); }
Tensor gt(const Tensor& a, const Tensor& b) { return call(prims::gt(), {a, b}); }
Tensor ge(const Tensor& a, const Tensor& b) { return call(prims::ge(), {a, b}); }
Tensor eq(const Tensor& a, const Tensor& b) { return call(prims::eq(), {a, b}); }
Tensor ne(const Tensor& a, const Tensor& b) { return call(prims::ne(), {a, b}); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, double b) { return with_scalar(prims::lt(), a, b, false); }
Tensor operator<=(const Tensor& a, double b) { return with_scalar(prims::le(), a, b, false); }
Tensor operator>(const Tensor& a, double b) { return with_scalar(prims::gt(), a, b, false); }
Tensor operator>=(const Tensor& a, double b) { return with_scalar(prims::ge(), a, b, false); }
Tensor operator==(const Tensor& a, double b) { return with_scalar(prims::eq(), a, b, false); }
Tensor operator!=(const Tensor& a, double b) { return with_scalar(prims::ne(), a, b, false); }
Tensor operator<(double a, const Tensor& b) { return with_scalar(prims::lt(), b, a, true); }
Tensor operator<=(double a, const Tensor& b) { return with_scalar(prims::le(), b, a, true); }
Tensor operator>(double a, const Tensor& b) { return with_scalar(prims::gt(), b, a, true); }
Tensor operator>=(double a, const Tensor& b) { return with_scalar(prims::ge(), b, a, true); }
Tensor operator==(double a, const Tensor& b) { return with_scalar(prims::eq(), b, a, true); }
Tensor operator!=(double a, const Tensor& b) { return with_scalar(prims::ne(), b, a, true); }
Tensor pow(const Tensor& x, double p) { return call(prims::pow(), {x}, {{"p", p}}); }

namespace {
const Tensor& defined(const char* op, const Tensor& x) {
  if (!x.defined()) throw Error(fmt::format("{}: the tensor is undefined", op));
  return x;
}
VarType type_of(const Tensor& x) { return {x.dtype(), x.shape()}; }
// An axis of x (of x with `extra` more axes: expand_dims), checked in the name of the
// operation the user called: a composite checks its axes before its steps see them.
int64_t checked_axis(const char* op, const Tensor& x, int64_t axis, int64_t extra = 0) {
  return normalize_axis(op, axis, type_of(defined(op, x)), extra);
}
// Axes go to the primitive as the caller gave them: it normalises them (negative axes
// counted from the end), so an error quotes them as given.
Tensor reduce(const Primitive& prim, const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  Attrs attrs{{"axes", Shape(axes)}};
  if (keepdims) attrs.set("keepdims", true);
  return call(prim, {x}, std::move(attrs));
}
}  // namespace

Tensor sum(const Tensor& x) { return call(prims::sum(), {x}); }
Tensor sum(const Tensor& x, int64_t axis, bool keepdims) {
  if (keepdims) return reduce(prims::sum(), x, {axis}, true);
  return call(prims::sum(), {x}, {{"axis", axis}});
}
Tensor sum(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) { return reduce(prims::sum(), x, axes, keepdims); }
Tensor mean(const Tensor& x) { return call(prims::mean(), {x}); }
Tensor mean(const Tensor& x, int64_t axis, bool keepdims) { return reduce(prims::mean(), x, {axis}, keepdims); }
Tensor mean(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) { return reduce(prims::mean(), x, axes, keepdims); }
Tensor prod(const Tensor& x) { return call(prims::prod(), {x}); }
Tensor prod(const Tensor& x, int64_t axis, bool keepdims) { return reduce(prims::prod(), x, {axis}, keepdims); }
Tensor prod(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) { return reduce(prims::prod(), x, axes, keepdims); }
Tensor max(const Tensor& x) { return call(prims::max(), {x}); }
Tensor max(const Tensor& x, int64_t axis, bool keepdims) { return reduce(prims::max(), x, {axis}, keepdims); }
Tensor max(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) { return reduce(prims::max(), x, axes, keepdims); }
Tensor min(const Tensor& x) { return call(prims::min(), {x}); }
Tensor min(const Tensor& x, int64_t axis, bool keepdims) { return reduce(prims::min(), x, {axis}, keepdims); }
Tensor min(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) { return reduce(prims::min(), x, axes, keepdims); }

namespace {
// logsumexp in keep-dims form over `axes` (normalised by the caller; every axis when
// `every`). Over no elements it is -inf, the log of an empty sum, as in SciPy and PyTorch.
Tensor logsumexp_keep(const Tensor& x, const Shape& axes, bool every) {
  Shape all = axes;
  if (every)
    for (int64_t d = 0; d < x.rank(); ++d) all.push_back(d);
  Shape keep = x.shape();
  int64_t count = 1;
  for (int64_t d : all) count *= std::exchange(keep[static_cast<std::size_t>(d)], 1);
  if (count == 0) return broadcast_to(tensor({-INFINITY}, {}, x.dtype()), keep) + sum(x, all, true);
  const Tensor m = nodiff(max(x, all, true));
  // An infinite maximum (all -inf, or some +inf) shifts by 0 instead: x - m would be NaN.
  const Tensor shift = where(m - m == 0.0, m, 0.0);
  return shift + log(sum(exp(x - shift), all, true));
}
Tensor drop_axes(const Tensor& keep, const Tensor& x, const Shape& norm) {
  Shape out;
  for (int64_t d = 0; d < x.rank(); ++d)
    if (std::find(norm.begin(), norm.end(), d) == norm.end()) out.push_back(x.shape()[static_cast<std::size_t>(d)]);
  return reshape(keep, out);
}
}  // namespace

Tensor logsumexp(const Tensor& x) { return reshape(logsumexp_keep(defined("logsumexp", x), {}, true), {}); }
Tensor logsumexp(const Tensor& x, int64_t axis, bool keepdims) {
  return logsumexp(x, std::vector<int64_t>{axis}, keepdims);
}
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  const Shape norm = normalize_axes("logsumexp", axes, type_of(defined("logsumexp", x)));
  const Tensor k = logsumexp_keep(x, norm, false);
  return keepdims ? k : drop_axes(k, x, norm);
}
// softmax over an axis of length 0 is empty: max (which has no identity) is skipped.
Tensor softmax(const Tensor& x, int64_t axis) {
  const int64_t a = checked_axis("softmax", x, axis);
  if (x.numel() == 0) return x * 1.0;
  const Tensor e = exp(x - nodiff(max(x, a, true)));
  return e / sum(e, a, true);
}
Tensor log_softmax(const Tensor& x, int64_t axis) {
  const int64_t a = checked_axis("log_softmax", x, axis);
  return x - logsumexp_keep(x, {a}, false);
}
Tensor argmax(const Tensor& x) { return call(prims::argmax(), {x}); }
Tensor argmax(const Tensor& x, int64_t axis) {
  return call(prims::argmax(), {x}, {{"axis", axis}});
}
Tensor argmin(const Tensor& x) { return call(prims::argmin(), {x}); }
Tensor argmin(const Tensor& x, int64_t axis) {
  return call(prims::argmin(), {x}, {{"axis", axis}});
}
Tensor sum_to(const Tensor& x, const Shape& shape) {
  return call(prims::sum_to(), {x}, {{"shape", shape}});
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || (a.rank() == 2 && b.rank() <= 2)) return call(prims::matmul(), {a, b});
  if (a.rank() == 0 || b.rank() == 0)
    throw Error(fmt::format("matmul: expected tensors of rank 1 or more, got {} and {}", type_str(a.dtype(), a.shape()),
                            type_str(b.dtype(), b.shape())));
  const int64_t ka = a.shape().back(), kb = b.rank() == 1 ? b.shape()[0] : b.shape()[b.shape().size() - 2];
  if (ka != kb)
    throw Error(fmt::format("matmul: expected shapes [...,m,k] (or [k]) and [...,k,n] (or [k]) with the same k, got {} and {}",
                            type_str(a.dtype(), a.shape()), type_str(b.dtype(), b.shape())));
  // The batch dimensions are checked here, in the name of matmul, not by its steps.
  const Shape batch_a(a.shape().begin(), a.shape().end() - std::min<int64_t>(a.rank(), 2)),
      batch_b(b.shape().begin(), b.shape().end() - std::min<int64_t>(b.rank(), 2));
  Shape result;
  try {
    result = broadcast_shapes(batch_a, batch_b, "matmul");
  } catch (const Error&) {
    throw Error(fmt::format("matmul: the batch dimensions {} of {} and {} of {} do not broadcast", shape_str(batch_a),
                            type_str(a.dtype(), a.shape()), shape_str(batch_b), type_str(b.dtype(), b.shape())));
  }
  // And the result fits in a tensor (a's batch [2^40] and b's [2^40, 1] make 2^80 products).
  result.push_back(a.rank() == 1 ? 1 : a.shape()[a.shape().size() - 2]);
  result.push_back(b.rank() == 1 ? 1 : b.shape().back());
  try {
    (void)numel(result);
  } catch (const Error& e) {
    throw Error(fmt::format("matmul: the batch dimensions {} of {} and {} of {} broadcast to a result of {}: {}",
                            shape_str(batch_a), type_str(a.dtype(), a.shape()), shape_str(batch_b),
                            type_str(b.dtype(), b.shape()), shape_str(result), e.what()));
  }
  // A vector is a [1,k] row on the left, a [k,1] column on the right; its axis is
  // dropped from the result (NumPy's rule).
  const Tensor a2 = a.rank() == 1 ? reshape(a, {1, a.numel()}) : a;
  const Tensor b2 = b.rank() == 1 ? reshape(b, {b.numel(), 1}) : b;
  Tensor out = a2.rank() == 2 && b2.rank() == 2 ? call(prims::matmul(), {a2, b2}) : call(prims::batch_matmul(), {a2, b2});
  Shape s = out.shape();
  if (b.rank() == 1) s.pop_back();
  if (a.rank() == 1) s.erase(s.end() - (b.rank() == 1 ? 1 : 2));
  return s == out.shape() ? out : reshape(out, s);
}
Tensor dot(const Tensor& a, const Tensor& b) {
  if (a.defined() && b.defined() && (a.rank() != 1 || b.rank() != 1))
    throw Error(fmt::format("dot: expected two vectors, got {} and {}", type_str(a.dtype(), a.shape()),
                            type_str(b.dtype(), b.shape())));
  return matmul(a, b);
}
Tensor outer(const Tensor& a, const Tensor& b) {
  if (a.defined() && b.defined() && (a.rank() != 1 || b.rank() != 1))
    throw Error(fmt::format("outer: expected two vectors, got {} and {}", type_str(a.dtype(), a.shape()),
                            type_str(b.dtype(), b.shape())));
  return matmul(reshape(a, {a.numel(), 1}), reshape(b, {1, b.numel()}));
}
Tensor transpose(const Tensor& x) {
  if (!x.defined() || x.rank() == 2) return call(prims::transpose(), {x});
  if (x.rank() < 2) throw Error(fmt::format("transpose: expected a tensor of rank 2 or more, got {}", type_str(x.dtype(), x.shape())));
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < x.rank(); ++d) perm.push_back(d);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return permute(x, perm);
}
Tensor permute(const Tensor& x, const std::vector<int64_t>& perm) {
  return call(prims::permute(), {x}, {{"perm", Shape(perm)}});
}

namespace {
Tensor i64_constant(const std::vector<int64_t>& v, const Shape& shape) {
  Tensor t(DType::i64, shape);
  std::copy(v.begin(), v.end(), t.mutable_data<int64_t>());
  return t;
}
}  // namespace

Tensor squeeze(const Tensor& x, int64_t axis) {
  defined("squeeze", x);
  const int64_t a = checked_axis("squeeze", x, axis);
  if (x.shape()[static_cast<std::size_t>(a)] != 1)
    throw Error(fmt::format("squeeze: axis {} of {} has length {}, expected 1", axis, type_str(x.dtype(), x.shape()),
                            x.shape()[static_cast<std::size_t>(a)]));
  Shape s = x.shape();
  s.erase(s.begin() + a);
  return reshape(x, s);
}
Tensor expand_dims(const Tensor& x, int64_t axis) {
  defined("expand_dims", x);
  const int64_t a = checked_axis("expand_dims", x, axis, 1);
  Shape s = x.shape();
  s.insert(s.begin() + a, 1);
  return reshape(x, s);
}

Tensor slice(const Tensor& x, int64_t start, int64_t stop) { return slice(x, 0, start, stop, 1); }
Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t stop, int64_t step) {
  defined("slice", x);
  const int64_t a = checked_axis("slice", x, axis);
  const int64_t n = x.shape()[static_cast<std::size_t>(a)];
  auto clamp_bound = [n](int64_t v) { return std::clamp(v < 0 ? v + n : v, int64_t{0}, n); };
  start = clamp_bound(start);
  stop = std::max(start, clamp_bound(stop));
  return call(prims::slice(), {x}, {{"axis", a}, {"start", start}, {"stop", stop}, {"step", step}});
}
Tensor index(const Tensor& x, int64_t i, int64_t axis) {
  defined("index", x);
  const int64_t a = checked_axis("index", x, axis);
  const int64_t n = x.shape()[static_cast<std::size_t>(a)];
  if (i < -n || i >= n)
    throw Error(fmt::format("index: index {} is out of range for axis {} of {}", i, axis, type_str(x.dtype(), x.shape())));
  if (i < 0) i += n;
  return squeeze(slice(x, a, i, i + 1), a);
}
Tensor gather(const Tensor& x, const Tensor& indices, int64_t axis) {
  return call(prims::gather(), {x, indices}, {{"axis", axis}});
}
Tensor take(const Tensor& x, const Tensor& indices) {
  return gather(reshape(defined("take", x), {x.numel()}), indices, 0);
}
Tensor scatter_add(const Tensor& target, const Tensor& indices, const Tensor& values, int64_t axis) {
  return call(prims::scatter_add(), {target, indices, values}, {{"axis", axis}});
}
Tensor index_update(const Tensor& x, const Tensor& indices, const Tensor& values, int64_t axis) {
  return call(prims::index_update(), {x, indices, values}, {{"axis", axis}});
}
Tensor index_update(const Tensor& x, int64_t axis, int64_t start, int64_t stop, const Tensor& values) {
  defined("index_update", x);
  const int64_t a = checked_axis("index_update", x, axis);
  const int64_t n = x.shape()[static_cast<std::size_t>(a)];
  auto clamp_bound = [n](int64_t v) { return std::clamp(v < 0 ? v + n : v, int64_t{0}, n); };
  start = clamp_bound(start);
  stop = std::max(start, clamp_bound(stop));
  std::vector<int64_t> idx;
  for (int64_t i = start; i < stop; ++i) idx.push_back(i);
  return index_update(x, i64_constant(idx, {stop - start}), values, a);
}
Tensor concat(const std::vector<Tensor>& xs, int64_t axis) {
  if (xs.empty()) throw Error("concat: expected at least one tensor, got none");
  return apply(prims::concat(), xs, {{"axis", axis}});
}
Tensor stack(const std::vector<Tensor>& xs, int64_t axis) {
  if (xs.empty()) throw Error("stack: expected at least one tensor, got none");
  const int64_t a = checked_axis("stack", xs[0], axis, 1);
  std::vector<Tensor> parts;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = defined("stack", xs[i]);
    if (x.dtype() != xs[0].dtype() || x.shape() != xs[0].shape())
      throw Error(fmt::format("stack: expected every tensor of the first one's type {}, got {} as tensor {}",
                              type_str(xs[0].dtype(), xs[0].shape()), type_str(x.dtype(), x.shape()), i + 1));
    parts.push_back(expand_dims(x, a));
  }
  return concat(parts, a);
}

namespace {
// 1 where keep(i, j) on the last two axes of x's shape, else 0; a constant.
template <class Keep>
Tensor triangle(const char* op, const Tensor& x, Keep keep) {
  defined(op, x);
  if (x.rank() < 2) throw Error(fmt::format("{}: expected a tensor of rank 2 or more, got {}", op, type_str(x.dtype(), x.shape())));
  const int64_t rows = x.shape()[x.shape().size() - 2], cols = x.shape().back();
  std::vector<double> mask(static_cast<std::size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) mask[static_cast<std::size_t>(i * cols + j)] = keep(i, j) ? 1.0 : 0.0;
  return where(tensor(mask, {rows, cols}, x.dtype()), x, 0.0);  // 0 outside, even where x is inf or NaN
}
}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Conv2dOptions& o) {
  return call(prims::conv2d(), {x, w},
              {{"stride", Shape{o.stride[0], o.stride[1]}},
               {"padding", Shape{o.padding[0], o.padding[1]}},
               {"dilation", Shape{o.dilation[0], o.dilation[1]}}});
}
Tensor conv1d(const Tensor& x, const Tensor& w, const Conv1dOptions& o) {
  defined("conv1d", x);
  defined("conv1d", w);
  if (x.rank() != 3 || w.rank() != 3)
    throw Error(fmt::format("conv1d: expected x [N,C,L] and w [O,C,K], got {} and {}", type_str(x.dtype(), x.shape()),
                            type_str(w.dtype(), w.shape())));
  // conv2d over [N,C,1,L] checks the rest; its complaint is given in conv1d's name, with
  // conv1d's arguments.
  try {
    const Tensor y = conv2d(expand_dims(x, 2), expand_dims(w, 2),
                            {.stride = {1, o.stride}, .padding = {0, o.padding}, .dilation = {1, o.dilation}});
    return squeeze(y, 2);
  } catch (const Error& e) {
    throw Error(fmt::format("conv1d: x {} and w {} with stride {}, padding {}, dilation {}: {}",
                            type_str(x.dtype(), x.shape()), type_str(w.dtype(), w.shape()), o.stride, o.padding,
                            o.dilation, e.what()));
  }
}
namespace {
Attrs pool_attrs(std::array<int64_t, 2> kernel, const Pool2dOptions& o) {
  const std::array<int64_t, 2> stride = o.stride[0] == 0 && o.stride[1] == 0 ? kernel : o.stride;
  return {{"kernel", Shape{kernel[0], kernel[1]}}, {"stride", Shape{stride[0], stride[1]}},
          {"padding", Shape{o.padding[0], o.padding[1]}}};
}
}  // namespace
Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, const Pool2dOptions& o) {
  return call(prims::max_pool2d(), {x}, pool_attrs(kernel, o));
}
Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, const Pool2dOptions& o) {
  return call(prims::avg_pool2d(), {x}, pool_attrs(kernel, o));
}

Tensor tril(const Tensor& x, int64_t k) { return triangle("tril", x, [k](int64_t i, int64_t j) { return j - i <= k; }); }
Tensor triu(const Tensor& x, int64_t k) { return triangle("triu", x, [k](int64_t i, int64_t j) { return j - i >= k; }); }

Tensor tril_from_vector(const Tensor& v, int64_t n, int64_t k, bool column_major) {
  defined("tril_from_vector", v);
  if (k != 0 && k != -1) throw Error(fmt::format("tril_from_vector: expected k = 0 or -1, got {}", k));
  if (n < 0) throw Error(fmt::format("tril_from_vector: expected n >= 0, got {}", n));
  (void)numel({n, n}, "tril_from_vector");  // n * n (and so the entries) fits
  const int64_t entries = k == 0 ? n * (n + 1) / 2 : n * (n - 1) / 2;
  if (v.rank() != 1 || v.numel() != entries)
    throw Error(fmt::format("tril_from_vector: a {}x{} {} triangle needs a vector of {} entries, got {}", n, n,
                            k == 0 ? "lower" : "strictly lower", entries, type_str(v.dtype(), v.shape())));
  // Position in v of each (i, j) in the triangle, else `entries` (an appended 0).
  std::vector<int64_t> where_from(static_cast<std::size_t>(n * n), entries);
  int64_t next = 0;
  if (column_major) {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = j - k; i < n; ++i) where_from[static_cast<std::size_t>(i * n + j)] = next++;
  } else {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j <= i + k; ++j) where_from[static_cast<std::size_t>(i * n + j)] = next++;
  }
  const Tensor padded = concat({v, zeros({1}, v.dtype())}, 0);
  return reshape(gather(padded, i64_constant(where_from, {n * n}), 0), {n, n});
}
Tensor reshape(const Tensor& x, const Shape& shape) {
  return call(prims::reshape(), {x}, {{"shape", shape}});
}
Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  return call(prims::broadcast_to(), {x}, {{"shape", shape}});
}

}  // namespace reel
