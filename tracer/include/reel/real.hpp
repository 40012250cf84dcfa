#pragma once
// reel::Real: an f64 scalar for C++ code written once, templated on its scalar type
// (`template <class T> T f(const T* x, int n)`), as ADOL-C's adouble, CppAD's AD<double>
// and CoDiPack's RealReverse are. Outside a trace a Real is a number, and templated code
// instantiated with it computes what it computes with double. Inside a trace (reel::grad,
// reel::jit, reel::compile_grad, ...) a Real that depends on the traced arguments holds a
// traced 0-d tensor, and each operation on it is recorded on the tape like any tensor
// operation: a traced function of Reals is differentiated, compiled and cached as one of
// tensors is.
//
//   template <class T> T energy(const std::vector<T>& x) { ... }
//   auto [value, grads] = reel::withgradient(energy<reel::Real>, std::vector<double>{1, 2, 3});
//
// Arguments: a Real, std::vector, std::array or std::span of Reals, an Eigen matrix of
// Reals (reel/eigen.hpp) is one leaf of the argument tree (reel/fields.hpp): one tensor,
// whose elements the function reads as Reals (each read an indexed read of that tensor on
// the tape). A function whose parameters are such types may be given tensors, numbers,
// std::vectors or std::arrays of numbers (or Eigen matrices of doubles) for them.
//
// Branches: comparing Reals gives a bool. On traced Reals it is a branch taken on a value,
// recorded as a guard (as `if (tensor > 0.0)` is): a cached function traces the other path
// when the comparison goes the other way, and never runs the wrong one. reel::select(c, a,
// b) (CppAD's CondExp) records both sides instead, for branch-free code; std::max,
// std::min, fmax and fmin are `maximum` and `minimum`, not branches. Reading a traced
// Real's value (double(r), r.value()) reads the tensor's value, a guard where a cache
// traces (Tensor::item).
#include <cmath>
#include <concepts>
#include <cstddef>
#include <iosfwd>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>
#include <array>

#include <fmt/format.h>

#include "reel/fields.hpp"
#include "reel/tensor.hpp"

namespace reel {

class Real;

namespace detail {
// The traced side of Real's operations (tracer/src/real.cpp): each takes at least one
// traced operand and records the tensor operation.
enum class RealOp : uint8_t { add, sub, mul, div, maximum, minimum, hypot, atan2, copysign, pow, fmax, fmin };
enum class RealCmp : uint8_t { lt, le, gt, ge, eq, ne };
enum class RealFn : uint8_t {
  neg, exp, log, log1p, expm1, log2, log10, sqrt, cbrt, sin, cos, tan, asin, acos, atan, sinh, cosh, tanh,
  asinh, abs, erf, lgamma, floor, ceil, round
};
Real real_binary(RealOp op, const Real& a, const Real& b);
bool real_compare(RealCmp op, const Real& a, const Real& b);
Real real_unary(RealFn fn, const Real& x);
Real real_pow(const Real& x, double p);
Real real_select(const Real& cond, const Real& a, const Real& b);
double real_value(const Tensor& t);
std::vector<Real> real_elements(const Tensor& t);
}  // namespace detail

class Real {
 public:
  Real() = default;  // 0
  // A number (double, float, an integer, bool), implicitly, as a double would take it.
  template <class N>
    requires std::is_arithmetic_v<N>
  Real(N value) : v_(static_cast<double>(value)) {}
  // A tensor of one element (any shape, f32 or f64): traced, its operations are
  // recorded; untraced, its value. A reel::Error for another number of elements.
  explicit Real(const Tensor& t);

  // Whether this Real holds a traced tensor (it depends on an active trace's inputs).
  bool traced() const { return t_.defined(); }
  // The value. Of a traced Real: the traced tensor's value, read as Tensor::item reads
  // it (a guard on that value where a cache traces).
  double value() const { return t_.defined() ? detail::real_value(tensor()) : v_; }
  // As a number (static_cast<int>(r), double(r), ...): the value, converted as a double
  // converts. As a bool: r != 0, a comparison (a guard, traced).
  template <class N>
    requires(std::is_arithmetic_v<N> && !std::is_same_v<N, bool>)
  explicit operator N() const {
    return static_cast<N>(value());
  }
  explicit operator bool() const { return *this != Real(0); }
  // The value as a 0-d f64 tensor: the traced tensor, or a new one holding the number.
  Tensor tensor() const;

  Real& operator+=(const Real& o) { return *this = *this + o; }
  Real& operator-=(const Real& o) { return *this = *this - o; }
  Real& operator*=(const Real& o) { return *this = *this * o; }
  Real& operator/=(const Real& o) { return *this = *this / o; }

  friend Real operator+(const Real& a) { return a; }
  friend Real operator-(const Real& a) { return a.t_.defined() ? detail::real_unary(detail::RealFn::neg, a) : Real(-a.v_); }
  friend Real operator+(const Real& a, const Real& b) { return a.both_plain(b) ? Real(a.v_ + b.v_) : detail::real_binary(detail::RealOp::add, a, b); }
  friend Real operator-(const Real& a, const Real& b) { return a.both_plain(b) ? Real(a.v_ - b.v_) : detail::real_binary(detail::RealOp::sub, a, b); }
  friend Real operator*(const Real& a, const Real& b) { return a.both_plain(b) ? Real(a.v_ * b.v_) : detail::real_binary(detail::RealOp::mul, a, b); }
  friend Real operator/(const Real& a, const Real& b) { return a.both_plain(b) ? Real(a.v_ / b.v_) : detail::real_binary(detail::RealOp::div, a, b); }

  friend bool operator<(const Real& a, const Real& b) { return a.both_plain(b) ? a.v_ < b.v_ : detail::real_compare(detail::RealCmp::lt, a, b); }
  friend bool operator<=(const Real& a, const Real& b) { return a.both_plain(b) ? a.v_ <= b.v_ : detail::real_compare(detail::RealCmp::le, a, b); }
  friend bool operator>(const Real& a, const Real& b) { return a.both_plain(b) ? a.v_ > b.v_ : detail::real_compare(detail::RealCmp::gt, a, b); }
  friend bool operator>=(const Real& a, const Real& b) { return a.both_plain(b) ? a.v_ >= b.v_ : detail::real_compare(detail::RealCmp::ge, a, b); }
  friend bool operator==(const Real& a, const Real& b) { return a.both_plain(b) ? a.v_ == b.v_ : detail::real_compare(detail::RealCmp::eq, a, b); }
  friend bool operator!=(const Real& a, const Real& b) { return a.both_plain(b) ? a.v_ != b.v_ : detail::real_compare(detail::RealCmp::ne, a, b); }

 private:
  friend double plain_value(const Real& x);
  friend std::vector<Real> detail::real_elements(const Tensor& t);
  // An element of a traced tensor, read where it is used (real_elements): `flat` is the
  // tensor as a vector, `at` the element. Each use records its own read, next to the
  // operations that use it, so a traced loop's reads advance with its iterations.
  Real(const Tensor& flat, int64_t at) : t_(flat), at_(at) {}
  bool both_plain(const Real& o) const { return !t_.defined() && !o.t_.defined(); }

  double v_ = 0;
  Tensor t_;         // defined only when traced
  int64_t at_ = -1;  // >= 0: t_ is a traced vector and this Real is its element at_
};

// The number of an untraced Real (for the eager fast paths below).
inline double plain_value(const Real& x) { return x.v_; }

// <cmath>, found by argument-dependent lookup (and as std:: overloads below). Each
// untraced call computes with double; a traced one records the primitive of that name
// (floor, ceil and round have derivative zero).
#define REEL_REAL_UNARY(name, fn, eager)                                                   \
  inline Real name(const Real& x) {                                                        \
    return x.traced() ? detail::real_unary(detail::RealFn::fn, x) : Real(eager(plain_value(x))); \
  }
REEL_REAL_UNARY(exp, exp, std::exp)
REEL_REAL_UNARY(log, log, std::log)
REEL_REAL_UNARY(log1p, log1p, std::log1p)
REEL_REAL_UNARY(expm1, expm1, std::expm1)
REEL_REAL_UNARY(log2, log2, std::log2)
REEL_REAL_UNARY(log10, log10, std::log10)
REEL_REAL_UNARY(sqrt, sqrt, std::sqrt)
REEL_REAL_UNARY(cbrt, cbrt, std::cbrt)
REEL_REAL_UNARY(sin, sin, std::sin)
REEL_REAL_UNARY(cos, cos, std::cos)
REEL_REAL_UNARY(tan, tan, std::tan)
REEL_REAL_UNARY(asin, asin, std::asin)
REEL_REAL_UNARY(acos, acos, std::acos)
REEL_REAL_UNARY(atan, atan, std::atan)
REEL_REAL_UNARY(sinh, sinh, std::sinh)
REEL_REAL_UNARY(cosh, cosh, std::cosh)
REEL_REAL_UNARY(tanh, tanh, std::tanh)
REEL_REAL_UNARY(asinh, asinh, std::asinh)
REEL_REAL_UNARY(abs, abs, std::fabs)
REEL_REAL_UNARY(fabs, abs, std::fabs)
REEL_REAL_UNARY(erf, erf, std::erf)
REEL_REAL_UNARY(lgamma, lgamma, std::lgamma)
REEL_REAL_UNARY(floor, floor, std::floor)
REEL_REAL_UNARY(ceil, ceil, std::ceil)
REEL_REAL_UNARY(round, round, std::round)
#undef REEL_REAL_UNARY

#define REEL_REAL_BINARY(name, op, eager)                                                     \
  inline Real name(const Real& a, const Real& b) {                                            \
    return a.traced() || b.traced() ? detail::real_binary(detail::RealOp::op, a, b)           \
                                    : Real(eager(plain_value(a), plain_value(b)));            \
  }
REEL_REAL_BINARY(hypot, hypot, std::hypot)
REEL_REAL_BINARY(atan2, atan2, std::atan2)
REEL_REAL_BINARY(copysign, copysign, std::copysign)
REEL_REAL_BINARY(fmax, fmax, std::fmax)
REEL_REAL_BINARY(fmin, fmin, std::fmin)
#undef REEL_REAL_BINARY

// max and min as the maximum and minimum primitives (a NaN operand gives NaN), never a
// branch; fmax and fmin ignore a NaN operand as C's do.
inline Real max(const Real& a, const Real& b) {
  if (a.traced() || b.traced()) return detail::real_binary(detail::RealOp::maximum, a, b);
  const double x = plain_value(a), y = plain_value(b);
  return x != x || y != y ? Real(x + y) : Real(x < y ? y : x);
}
inline Real min(const Real& a, const Real& b) {
  if (a.traced() || b.traced()) return detail::real_binary(detail::RealOp::minimum, a, b);
  const double x = plain_value(a), y = plain_value(b);
  return x != x || y != y ? Real(x + y) : Real(y < x ? y : x);
}

// pow with a constant exponent (the `pow` primitive), or a traced Real one (`powv`: its
// gradient in y is 0 where x = 0, in x 0 where y = 0).
inline Real pow(const Real& x, double p) { return x.traced() ? detail::real_pow(x, p) : Real(std::pow(plain_value(x), p)); }
template <std::integral I>
Real pow(const Real& x, I p) { return pow(x, static_cast<double>(p)); }
inline Real pow(const Real& x, const Real& y) {
  if (!y.traced()) return pow(x, plain_value(y));
  return detail::real_binary(detail::RealOp::pow, x, y);
}
inline Real pow(double x, const Real& y) { return pow(Real(x), y); }

// cond ? a : b with both sides recorded (CppAD's CondExp): no branch, no guard. cond is
// true where it is nonzero (a comparison of Reals in select form: reel::lt(a, b), ...).
inline Real select(const Real& cond, const Real& a, const Real& b) {
  if (!cond.traced() && !a.traced() && !b.traced()) return plain_value(cond) != 0 ? a : b;
  return detail::real_select(cond, a, b);
}
// Comparisons as Reals (1 or 0), recorded without a branch: for select.
Real lt(const Real& a, const Real& b);
Real le(const Real& a, const Real& b);
Real gt(const Real& a, const Real& b);
Real ge(const Real& a, const Real& b);
Real eq(const Real& a, const Real& b);
Real ne(const Real& a, const Real& b);

// Tests of the value, as comparisons: of a traced Real a branch (a guard on the answer,
// not on the value).
inline bool isnan(const Real& x) { return x.traced() ? x != x : std::isnan(plain_value(x)); }
inline bool isinf(const Real& x) {
  return x.traced() ? abs(x) == std::numeric_limits<double>::infinity() : std::isinf(plain_value(x));
}
inline bool isfinite(const Real& x) {
  return x.traced() ? abs(x) < std::numeric_limits<double>::infinity() : std::isfinite(plain_value(x));
}
inline bool signbit(const Real& x) { return x.traced() ? copysign(Real(1), x) < 0 : std::signbit(plain_value(x)); }

std::ostream& operator<<(std::ostream& os, const Real& x);

// Functions written against an output pointer, the peers' form (`void f(const T* x,
// T* out)`), as functions returning their outputs: reel::outputs(m, g) makes m Reals
// (zeros), calls g(pointer to the first) and returns them; reel::output(g) the same
// for one.
//   auto f = [&](const std::vector<reel::Real>& x) {
//     return reel::output([&](reel::Real* out) { lse::primal(x.size(), x.data(), out); });
//   };
template <class G>
std::vector<Real> outputs(std::size_t m, G&& g) {
  std::vector<Real> out(m);
  std::forward<G>(g)(out.data());
  return out;
}
template <class G>
Real output(G&& g) {
  Real out;
  std::forward<G>(g)(&out);
  return out;
}

namespace detail {
// A traced 0-d tensor per element of t (indexed reads of t, in row-major order), or the
// values of an untraced t.
std::vector<Real> real_elements(const Tensor& t);
// One tensor of `shape` holding xs in row-major order: recorded (stacked) where any is
// traced, else made from their values.
Tensor real_tensor(std::span<const Real> xs, const Shape& shape);
// Throws reel::Error naming `op` unless t has `expected` elements.
void check_real_count(const char* op, const Tensor& t, std::size_t expected);
}  // namespace detail

// Reals in the argument tree (reel/fields.hpp): a Real is a 0-d tensor; a vector or an
// array of them a 1-d tensor.
template <>
struct packed_leaf<Real> : std::true_type {
  static Tensor pack(const Real& x) { return x.tensor(); }
  static void unpack(const Tensor& t, Real& x) { x = Real(t); }
};
template <class A>
struct packed_leaf<std::vector<Real, A>> : std::true_type {
  static Tensor pack(const std::vector<Real, A>& x) {
    return detail::real_tensor(x, {static_cast<int64_t>(x.size())});
  }
  static void unpack(const Tensor& t, std::vector<Real, A>& x) {  // (its size is the tensor's)
    std::vector<Real> e = detail::real_elements(t);
    x.assign(e.begin(), e.end());
  }
};
template <std::size_t N>
struct packed_leaf<std::array<Real, N>> : std::true_type {
  static Tensor pack(const std::array<Real, N>& x) { return detail::real_tensor(x, {static_cast<int64_t>(N)}); }
  static void unpack(const Tensor& t, std::array<Real, N>& x) {
    detail::check_real_count("std::array<reel::Real, N>", t, N);
    std::vector<Real> e = detail::real_elements(t);
    for (std::size_t i = 0; i < N; ++i) x[i] = std::move(e[i]);
  }
};

}  // namespace reel

// The std:: spellings, for code that writes std::exp(x), std::max(a, b), ... They are
// the same functions as reel's (using-declarations), so `using std::sqrt; sqrt(x)` (as
// Eigen writes it) finds one function, not two.
namespace std {
using reel::abs;
using reel::acos;
using reel::asin;
using reel::asinh;
using reel::atan;
using reel::atan2;
using reel::cbrt;
using reel::ceil;
using reel::copysign;
using reel::cos;
using reel::cosh;
using reel::erf;
using reel::exp;
using reel::expm1;
using reel::fabs;
using reel::floor;
using reel::fmax;
using reel::fmin;
using reel::hypot;
using reel::isfinite;
using reel::isinf;
using reel::isnan;
using reel::lgamma;
using reel::log;
using reel::log10;
using reel::log1p;
using reel::log2;
using reel::max;
using reel::min;
using reel::pow;
using reel::round;
using reel::signbit;
using reel::sin;
using reel::sinh;
using reel::sqrt;
using reel::tan;
using reel::tanh;

// A Real's limits are double's, as Reals.
template <>
class numeric_limits<reel::Real> : public numeric_limits<double> {
 public:
  static reel::Real min() noexcept { return numeric_limits<double>::min(); }
  static reel::Real max() noexcept { return numeric_limits<double>::max(); }
  static reel::Real lowest() noexcept { return numeric_limits<double>::lowest(); }
  static reel::Real epsilon() noexcept { return numeric_limits<double>::epsilon(); }
  static reel::Real round_error() noexcept { return numeric_limits<double>::round_error(); }
  static reel::Real infinity() noexcept { return numeric_limits<double>::infinity(); }
  static reel::Real quiet_NaN() noexcept { return numeric_limits<double>::quiet_NaN(); }
  static reel::Real signaling_NaN() noexcept { return numeric_limits<double>::signaling_NaN(); }
  static reel::Real denorm_min() noexcept { return numeric_limits<double>::denorm_min(); }
};
}  // namespace std

// fmt: a Real formats as its value, with double's format specifications.
template <>
struct fmt::formatter<reel::Real> : fmt::formatter<double> {
  template <class Ctx>
  auto format(const reel::Real& x, Ctx& ctx) const {
    return fmt::formatter<double>::format(x.value(), ctx);
  }
};
