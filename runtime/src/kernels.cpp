#include "reel/kernels.hpp"

#include "reel/elementwise.hpp"

#include <cmath>
#include <limits>

#include "reel/blas.hpp"

namespace reel::kernels {

namespace {

// Calls body(tag) with a T of the tensor's element type, so every kernel is written
// once for f32 and f64 (and i64, for the layout kernels that copy any element).
template <class Body>
decltype(auto) by_dtype(DType dtype, Body&& body) {
  if (dtype == DType::f64) return body(double{});
  if (dtype == DType::i64) return body(int64_t{});
  return body(float{});
}

// Visits every element of `out_shape` in row-major order, handing `visit` the flat
// output index and the flat index into an operand of `in_shape` broadcast to it.
template <class Visit>
void for_each_broadcast(const Shape& out_shape, const Shape& in_shape, Visit visit) {
  for_each_strided(out_shape, broadcast_strides(in_shape, out_shape), visit);
}

}  // namespace

std::vector<int64_t> broadcast_index(const Shape& out_shape, const Shape& in_shape) {
  std::vector<int64_t> index(static_cast<std::size_t>(numel(out_shape)));
  for_each_broadcast(out_shape, in_shape, [&](int64_t i, int64_t j) { index[static_cast<std::size_t>(i)] = j; });
  return index;
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

namespace {
template <ReduceOp op>
inline void combine(double& a, double v) {
  const NumMath<double> e;
  if constexpr (op == ReduceOp::sum) a += v;
  else if constexpr (op == ReduceOp::prod) a *= v;
  else if constexpr (op == ReduceOp::max) a = e.max(a, v);
  else a = e.min(a, v);
}

// Combines x into acc (n numbers, one per element of keep); a plain loop when n is 1.
template <ReduceOp op, class T>
void reduce_into(const Tensor& x, const Shape& keep, double* acc, int64_t n) {
  const T* in = x.data<T>();
  if (n == 1) {
    double a = acc[0];
    for (int64_t i = 0; i < x.numel(); ++i) combine<op>(a, static_cast<double>(in[i]));
    acc[0] = a;
    return;
  }
  for_each_broadcast(x.shape(), keep, [&](int64_t i, int64_t j) { combine<op>(acc[j], static_cast<double>(in[i])); });
}
}  // namespace

double reduce_combine(ReduceOp op, double a, double v) {
  switch (op) {
    case ReduceOp::sum: combine<ReduceOp::sum>(a, v); break;
    case ReduceOp::prod: combine<ReduceOp::prod>(a, v); break;
    case ReduceOp::max: combine<ReduceOp::max>(a, v); break;
    case ReduceOp::min: combine<ReduceOp::min>(a, v); break;
  }
  return a;
}

Tensor reduce_to(const Tensor& x, const Shape& keep, ReduceOp op, double scale) {
  Tensor out(x.dtype(), keep);
  const int64_t n = out.numel();
  // One number (the common full reduction) needs no accumulator vector.
  double one = reduce_identity(op);
  std::vector<double> many(n == 1 ? 0 : static_cast<std::size_t>(n), reduce_identity(op));
  double* acc = n == 1 ? &one : many.data();
  by_dtype(x.dtype(), [&](auto t) {
    using T = decltype(t);
    switch (op) {
      case ReduceOp::sum: reduce_into<ReduceOp::sum, T>(x, keep, acc, n); break;
      case ReduceOp::prod: reduce_into<ReduceOp::prod, T>(x, keep, acc, n); break;
      case ReduceOp::max: reduce_into<ReduceOp::max, T>(x, keep, acc, n); break;
      case ReduceOp::min: reduce_into<ReduceOp::min, T>(x, keep, acc, n); break;
    }
    T* o = out.mutable_data<T>();
    for (int64_t j = 0; j < n; ++j) o[j] = static_cast<T>(scale == 1.0 ? acc[j] : acc[j] * scale);
  });
  return out;
}

Tensor arg_extremum(const Tensor& x, int64_t axis, bool largest) {
  const Shape& s = x.shape();
  const auto ax = static_cast<std::size_t>(axis);
  int64_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < ax; ++d) outer *= s[d];
  for (std::size_t d = ax + 1; d < s.size(); ++d) inner *= s[d];
  const int64_t n = s[ax];
  Shape out_shape = s;
  out_shape.erase(out_shape.begin() + axis);
  Tensor out(DType::i64, out_shape);
  int64_t* o = out.mutable_data<int64_t>();
  by_dtype(x.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* in = x.data<T>();
    for (int64_t i = 0; i < outer; ++i)
      for (int64_t k = 0; k < inner; ++k) {
        int64_t best = 0;
        for (int64_t j = 0; j < n; ++j) {
          const T v = in[(i * n + j) * inner + k], b = in[(i * n + best) * inner + k];
          if (b != b) break;  // the first NaN wins
          if (v != v || (largest ? v > b : v < b)) best = j;
          if (v != v) break;
        }
        o[i * inner + k] = best;
      }
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
