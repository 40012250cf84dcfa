#pragma once
// Elementwise math written once. A primitive's element function is a generic callable
// f(e, x...) over an "element machine" e (the operations of reel::ElementRecorder,
// ir/element.hpp). The eager kernels pass NumMath<T>, plain arithmetic on float or
// double, through map_unary, map_binary and map_ternary; the code generator records the same
// function once as an ElementProgram and translates that into LLVM instructions. So a
// primitive's math has one definition for both, and both must agree op by op: the
// operations and their NaN and tie conventions are one list, reel/element_ops.def.
#include <cmath>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "reel/element_ops.hpp"
#include "reel/error.hpp"
#include "reel/tensor.hpp"

namespace reel {

// The element machine that computes: each operation of reel/element_ops.def on float
// or double, as its `eval` column says.
template <class T>
struct NumMath {
  using Value = T;
#define REEL_ELEM_OP(name, operands, eval, lowering, symbol) \
  T name(REEL_ELEM_PARAMS_##operands(T)) const { return eval; }
#include "reel/element_ops.def"
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
