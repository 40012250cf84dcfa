#pragma once
// Eigen with reel::Real (include this after, or instead of, <Eigen/Core>; Debian's
// libeigen3-dev): Eigen::Matrix<reel::Real, ...> of fixed and dynamic sizes, its
// products, transpose, sum, dot, norm, Eigen::Map over Reals and the decompositions
// (inverse, LLT, ...) work as with double, traced or not. Reals and doubles mix in
// expressions (a Matrix<Real> times a double).
//
// A matrix of Reals is one leaf of the argument tree: a [rows, cols] tensor (a vector,
// with one row or one column at compile time, a [n] one), elements in row-major order
// whatever the matrix's storage order. A function of such a matrix may be given an Eigen
// matrix of doubles or a tensor for it (reel/real_args.hpp), and may return one (return
// a Matrix, `.eval()` an expression: an expression type is not a value Reel can trace).
#include <Eigen/Core>

#include <limits>

#include "reel/real.hpp"
#include "reel/real_args.hpp"

namespace Eigen {

template <>
struct NumTraits<reel::Real> : GenericNumTraits<reel::Real> {
  using Real = reel::Real;
  using NonInteger = reel::Real;
  using Nested = reel::Real;
  using Literal = reel::Real;
  enum { IsComplex = 0, IsInteger = 0, IsSigned = 1, RequireInitialization = 1, ReadCost = 1, AddCost = 3, MulCost = 3 };
  static reel::Real dummy_precision() { return NumTraits<double>::dummy_precision(); }
  static int digits10() { return NumTraits<double>::digits10(); }
};

template <class BinaryOp>
struct ScalarBinaryOpTraits<reel::Real, double, BinaryOp> {
  using ReturnType = reel::Real;
};
template <class BinaryOp>
struct ScalarBinaryOpTraits<double, reel::Real, BinaryOp> {
  using ReturnType = reel::Real;
};

}  // namespace Eigen

namespace reel {

namespace detail {

// A matrix type's tensor shape for these sizes: [n] for a vector type, else [rows, cols].
template <class M>
Shape eigen_shape(Eigen::Index rows, Eigen::Index cols) {
  if constexpr (M::IsVectorAtCompileTime) return {static_cast<int64_t>(rows * cols)};
  else return {static_cast<int64_t>(rows), static_cast<int64_t>(cols)};
}

// The sizes a tensor gives a matrix of type M; a reel::Error naming `op` where M's fixed
// sizes or the tensor's rank do not fit.
template <class M>
std::pair<Eigen::Index, Eigen::Index> eigen_sizes(const char* op, const Tensor& t) {
  Eigen::Index rows = 0, cols = 0;
  if (M::IsVectorAtCompileTime && t.rank() <= 1) {
    const Eigen::Index n = t.numel();
    rows = M::RowsAtCompileTime == 1 ? 1 : n;
    cols = M::RowsAtCompileTime == 1 ? n : 1;
  } else if (t.rank() == 2) {
    rows = t.shape()[0], cols = t.shape()[1];
  }
  const bool fits = (t.rank() == 2 || M::IsVectorAtCompileTime) && (rows > 0 || t.numel() == 0) &&
                    (M::RowsAtCompileTime == Eigen::Dynamic || M::RowsAtCompileTime == rows) &&
                    (M::ColsAtCompileTime == Eigen::Dynamic || M::ColsAtCompileTime == cols);
  if (!fits)
    throw Error(fmt::format("{}: expected a tensor of {} x {} elements{}, got {}", op,
                            M::RowsAtCompileTime == Eigen::Dynamic ? std::string("rows") : std::to_string(M::RowsAtCompileTime),
                            M::ColsAtCompileTime == Eigen::Dynamic ? std::string("cols") : std::to_string(M::ColsAtCompileTime),
                            M::IsVectorAtCompileTime ? " (or a 1-d one, for a vector)" : " (a 2-d one)",
                            type_str(t.dtype(), t.shape())));
  return {rows, cols};
}

// m's elements in row-major order (a tensor's), whatever its storage order.
template <class S, class M>
std::vector<S> row_major(const M& m) {
  std::vector<S> out;
  out.reserve(static_cast<std::size_t>(m.size()));
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j) out.push_back(m(i, j));
  return out;
}

}  // namespace detail

template <int R, int C, int O, int MR, int MC>
struct packed_leaf<Eigen::Matrix<Real, R, C, O, MR, MC>> : std::true_type {
  using M = Eigen::Matrix<Real, R, C, O, MR, MC>;
  static Tensor pack(const M& m) {
    return detail::real_tensor(detail::row_major<Real>(m), detail::eigen_shape<M>(m.rows(), m.cols()));
  }
  static void unpack(const Tensor& t, M& m) {
    const auto [rows, cols] = detail::eigen_sizes<M>("Eigen::Matrix<reel::Real>", t);
    m.resize(rows, cols);
    std::vector<Real> e = detail::real_elements(t);
    for (Eigen::Index i = 0; i < rows; ++i)
      for (Eigen::Index j = 0; j < cols; ++j) m(i, j) = std::move(e[static_cast<std::size_t>(i * cols + j)]);
  }
};

template <int R, int C, int O, int MR, int MC>
struct real_number_arg<Eigen::Matrix<double, R, C, O, MR, MC>> : std::true_type {
  using M = Eigen::Matrix<double, R, C, O, MR, MC>;
  static Tensor to_tensor(const M& m) {
    const Eigen::Index cols = m.cols();
    return detail::f64_tensor(detail::eigen_shape<M>(m.rows(), cols), [&](int64_t i) { return m(i / cols, i % cols); });
  }
  static bool refill(Tensor& t, const M& m) {
    const Eigen::Index rows = m.rows(), cols = m.cols();
    const auto fill = [&](int64_t i) { return m(i / cols, i % cols); };
    if constexpr (M::IsVectorAtCompileTime) return detail::refill_f64(t, {static_cast<int64_t>(rows * cols)}, fill);
    else return detail::refill_f64(t, {static_cast<int64_t>(rows), static_cast<int64_t>(cols)}, fill);
  }
};

}  // namespace reel
