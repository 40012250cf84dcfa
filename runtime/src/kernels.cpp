#include "reel/kernels.hpp"

#include <cmath>

#include "reel/blas.hpp"

namespace reel::kernels {

namespace {

// Calls body(tag) with a T of the tensor's element type, so every kernel is written
// once for f32 and f64.
template <class Body>
decltype(auto) by_dtype(DType dtype, Body&& body) {
  if (dtype == DType::f64) return body(double{});
  return body(float{});
}

template <class T>
T apply_unary(Unary op, T x) {
  switch (op) {
    case Unary::neg: return -x;
    case Unary::exp: return std::exp(x);
    case Unary::log: return std::log(x);
    case Unary::sin: return std::sin(x);
    case Unary::cos: return std::cos(x);
    case Unary::tanh: return std::tanh(x);
    case Unary::sigmoid: return T(1) / (T(1) + std::exp(-x));
    case Unary::sqrt: return std::sqrt(x);
    case Unary::square: return x * x;
  }
  return x;
}

template <class T>
T apply_binary(Binary op, T a, T b) {
  switch (op) {
    case Binary::add: return a + b;
    case Binary::sub: return a - b;
    case Binary::mul: return a * b;
    case Binary::div: return a / b;
  }
  return a;
}

// Visits every element of `out_shape` in row-major order, handing `visit` the flat
// output index and the flat index into an operand of `in_shape` broadcast to it.
template <class Visit>
void for_each_broadcast(const Shape& out_shape, const Shape& in_shape, Visit visit) {
  const auto strides = broadcast_strides(in_shape, out_shape);
  const std::size_t rank = out_shape.size();
  std::vector<int64_t> idx(rank, 0);
  const int64_t n = numel(out_shape);
  int64_t in_off = 0;
  for (int64_t i = 0; i < n; ++i) {
    visit(i, in_off);
    for (std::size_t d = rank; d-- > 0;) {
      if (++idx[d] < out_shape[d]) {
        in_off += strides[d];
        break;
      }
      in_off -= strides[d] * (out_shape[d] - 1);
      idx[d] = 0;
    }
  }
}

}  // namespace

Tensor unary(Unary op, const Tensor& x) {
  Tensor out(x.dtype(), x.shape());
  by_dtype(x.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* in = x.data<T>();
    T* o = out.mutable_data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = apply_unary(op, in[i]);
  });
  return out;
}

Tensor pow(const Tensor& x, double p) {
  Tensor out(x.dtype(), x.shape());
  by_dtype(x.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* in = x.data<T>();
    T* o = out.mutable_data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = std::pow(in[i], static_cast<T>(p));
  });
  return out;
}

Tensor binary(Binary op, const Tensor& a, const Tensor& b) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), "binary");
  Tensor out(a.dtype(), shape);
  by_dtype(a.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* o = out.mutable_data<T>();
    const int64_t n = out.numel();
    if (a.shape() == shape && b.shape() == shape) {
      for (int64_t i = 0; i < n; ++i) o[i] = apply_binary(op, pa[i], pb[i]);
    } else if (a.shape() == shape && b.numel() == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = apply_binary(op, pa[i], pb[0]);
    } else if (b.shape() == shape && a.numel() == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = apply_binary(op, pa[0], pb[i]);
    } else {
      // General case: broadcast each operand to the output, then combine.
      std::vector<int64_t> ia(n), ib(n);
      for_each_broadcast(shape, a.shape(), [&](int64_t i, int64_t j) { ia[i] = j; });
      for_each_broadcast(shape, b.shape(), [&](int64_t i, int64_t j) { ib[i] = j; });
      for (int64_t i = 0; i < n; ++i) o[i] = apply_binary(op, pa[ia[i]], pb[ib[i]]);
    }
  });
  return out;
}

Tensor sum_all(const Tensor& x) {
  Tensor out(x.dtype(), {});
  by_dtype(x.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* in = x.data<T>();
    double acc = 0;  // accumulate in double for both dtypes
    for (int64_t i = 0; i < x.numel(); ++i) acc += in[i];
    out.mutable_data<T>()[0] = static_cast<T>(acc);
  });
  return out;
}

Tensor mean_all(const Tensor& x) {
  Tensor s = sum_all(x);
  by_dtype(x.dtype(), [&](auto t) {
    using T = decltype(t);
    s.mutable_data<T>()[0] /= static_cast<T>(x.numel());
  });
  return s;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  Tensor out(x.dtype(), shape);
  by_dtype(x.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* in = x.data<T>();
    // Iterate over x; each element lands in the output element it was broadcast from.
    // Sums accumulate in double for both dtypes, as the compiled code's do.
    std::vector<double> acc(static_cast<std::size_t>(out.numel()), 0.0);
    for_each_broadcast(x.shape(), shape, [&](int64_t i, int64_t j) { acc[j] += in[i]; });
    T* o = out.mutable_data<T>();
    for (std::size_t j = 0; j < acc.size(); ++j) o[j] = static_cast<T>(acc[j]);
  });
  return out;
}

Tensor sum_axis(const Tensor& x, int64_t axis) {
  Shape keep = x.shape();
  keep[static_cast<std::size_t>(axis)] = 1;
  Shape dropped = x.shape();
  dropped.erase(dropped.begin() + axis);
  return sum_to(x, keep).reshaped(dropped);
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  Tensor out(x.dtype(), shape);
  by_dtype(x.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* in = x.data<T>();
    T* o = out.mutable_data<T>();
    for_each_broadcast(shape, x.shape(), [&](int64_t i, int64_t j) { o[i] = in[j]; });
  });
  return out;
}

Tensor transpose(const Tensor& x) {
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  Tensor out(x.dtype(), {cols, rows});
  by_dtype(x.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* in = x.data<T>();
    T* o = out.mutable_data<T>();
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) o[j * rows + i] = in[i * cols + j];
  });
  return out;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  const int64_t m = a.shape()[0], k = a.shape()[1];
  if (b.rank() == 1) {
    Tensor out(a.dtype(), {m});
    if (a.dtype() == DType::f64)
      reel_rt_gemv_f64(0, m, k, a.data<double>(), b.data<double>(), out.mutable_data<double>());
    else
      reel_rt_gemv_f32(0, m, k, a.data<float>(), b.data<float>(), out.mutable_data<float>());
    return out;
  }
  const int64_t n = b.shape()[1];
  Tensor out(a.dtype(), {m, n});
  if (a.dtype() == DType::f64)
    reel_rt_gemm_f64(0, 0, m, n, k, a.data<double>(), k, b.data<double>(), n,
                     out.mutable_data<double>(), n);
  else
    reel_rt_gemm_f32(0, 0, m, n, k, a.data<float>(), k, b.data<float>(), n,
                     out.mutable_data<float>(), n);
  return out;
}

}  // namespace reel::kernels
