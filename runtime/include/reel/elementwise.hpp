#pragma once
// Elementwise math written once. A primitive's element function is a generic callable
// f(e, x...) over an "element machine" e (the operations of reel::ElementRecorder,
// ir/element.hpp). The eager kernels pass NumMath<T>, plain arithmetic on float or
// double, through map_unary, map_binary and map_ternary; the code generator records the same
// function once as an ElementProgram and translates that into LLVM instructions. So a
// primitive's math has one definition for both, and both must agree op by op: the
// NaN and tie conventions below are the code generator's too.
#include <cmath>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "reel/error.hpp"
#include "reel/tensor.hpp"

namespace reel {

template <class T>
struct NumMath {
  using Value = T;
  T constant(double v) const { return static_cast<T>(v); }
  T add(T a, T b) const { return a + b; }
  T sub(T a, T b) const { return a - b; }
  T mul(T a, T b) const { return a * b; }
  T div(T a, T b) const { return a / b; }
  T neg(T a) const { return -a; }
  T exp(T a) const { return std::exp(a); }
  T log(T a) const { return std::log(a); }
  T sin(T a) const { return std::sin(a); }
  T cos(T a) const { return std::cos(a); }
  T tanh(T a) const { return std::tanh(a); }
  T sqrt(T a) const { return std::sqrt(a); }
  T pow(T a, double p) const { return std::pow(a, static_cast<T>(p)); }
  // IEEE 754-2019 maximum and minimum (LLVM's llvm.maximum / llvm.minimum): NaN if
  // either is NaN, and +0 counts as greater than -0.
  T max(T a, T b) const {
    if (a != a || b != b) return a != a ? a : b;
    if (a == b) return std::signbit(a) ? b : a;
    return a > b ? a : b;
  }
  T min(T a, T b) const {
    if (a != a || b != b) return a != a ? a : b;
    if (a == b) return std::signbit(a) ? a : b;
    return a < b ? a : b;
  }
  T lt(T a, T b) const { return a < b ? T(1) : T(0); }
  T le(T a, T b) const { return a <= b ? T(1) : T(0); }
  T gt(T a, T b) const { return a > b ? T(1) : T(0); }
  T ge(T a, T b) const { return a >= b ? T(1) : T(0); }
  T eq(T a, T b) const { return a == b ? T(1) : T(0); }
  T ne(T a, T b) const { return a != b ? T(1) : T(0); }
  T select(T c, T a, T b) const { return c != T(0) ? a : b; }  // NaN counts as true
  T abs(T a) const { return std::fabs(a); }
  T log1p(T a) const { return std::log1p(a); }
  T expm1(T a) const { return std::expm1(a); }
  T erf(T a) const { return std::erf(a); }
  T lgamma(T a) const { return std::lgamma(a); }  // log |Gamma(a)|
};

namespace kernels {

// For each element of out_shape (row-major), the flat index of the element of an
// operand of in_shape broadcast to it.
std::vector<int64_t> broadcast_index(const Shape& out_shape, const Shape& in_shape);

// out[i] = f(e, x[i]) with e a NumMath of x's dtype.
template <class F>
Tensor map_unary(const Tensor& x, F f) {
  Tensor out(x.dtype(), x.shape());
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const NumMath<T> e;
    const T* in = x.data<T>();
    T* o = out.mutable_data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = f(e, in[i]);
  };
  if (x.dtype() == DType::f64) run(double{});
  else if (x.dtype() == DType::f32) run(float{});
  else throw Error(fmt::format("elementwise: expected f32 or f64, got {}", dtype_name(x.dtype())));
  return out;
}

// out = f(e, a, b) elementwise with NumPy broadcasting; the caller has checked that
// the shapes broadcast and the dtypes agree.
template <class F>
Tensor map_binary(const Tensor& a, const Tensor& b, F f) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), "binary");
  Tensor out(a.dtype(), shape);
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const NumMath<T> e;
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* o = out.mutable_data<T>();
    const int64_t n = out.numel();
    if (a.shape() == shape && b.shape() == shape) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(e, pa[i], pb[i]);
    } else if (a.shape() == shape && b.numel() == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(e, pa[i], pb[0]);
    } else if (b.shape() == shape && a.numel() == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(e, pa[0], pb[i]);
    } else {
      const std::vector<int64_t> ia = broadcast_index(shape, a.shape()), ib = broadcast_index(shape, b.shape());
      for (int64_t i = 0; i < n; ++i) o[i] = f(e, pa[ia[i]], pb[ib[i]]);
    }
  };
  if (a.dtype() == DType::f64) run(double{});
  else if (a.dtype() == DType::f32) run(float{});
  else throw Error(fmt::format("elementwise: expected f32 or f64, got {}", dtype_name(a.dtype())));
  return out;
}

// out = f(e, a, b, c) elementwise, all three broadcast to their common shape; the
// caller has checked shapes and dtypes.
template <class F>
Tensor map_ternary(const Tensor& a, const Tensor& b, const Tensor& c, F f) {
  const Shape shape =
      broadcast_shapes(broadcast_shapes(a.shape(), b.shape(), "ternary"), c.shape(), "ternary");
  Tensor out(a.dtype(), shape);
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const NumMath<T> e;
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    const T* pc = c.data<T>();
    T* o = out.mutable_data<T>();
    const std::vector<int64_t> ia = broadcast_index(shape, a.shape()), ib = broadcast_index(shape, b.shape()),
                               ic = broadcast_index(shape, c.shape());
    for (int64_t i = 0; i < out.numel(); ++i) o[i] = f(e, pa[ia[i]], pb[ib[i]], pc[ic[i]]);
  };
  if (a.dtype() == DType::f64) run(double{});
  else if (a.dtype() == DType::f32) run(float{});
  else throw Error(fmt::format("elementwise: expected f32 or f64, got {}", dtype_name(a.dtype())));
  return out;
}

}  // namespace kernels
}  // namespace reel
