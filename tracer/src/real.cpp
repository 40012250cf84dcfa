// reel::Real's traced operations: each records the tensor operation of the same name on
// 0-d f64 tensors (the untraced ones compute with double, inline in reel/real.hpp).
#include "reel/real.hpp"

#include <cmath>
#include <ostream>

#include "reel/ops.hpp"
#include "reel/trace.hpp"
#include "reel/track.hpp"
#include "trace_state.hpp"

namespace reel {

namespace {

Tensor operand(const Real& x) { return x.tensor(); }

// fmax and fmin as C's: a NaN operand is ignored (NaN only when both are).
Tensor ignoring_nan(const Tensor& a, const Tensor& b, bool larger) {
  const Tensor both = larger ? maximum(a, b) : minimum(a, b);
  return where(ne(a, a), b, where(ne(b, b), a, both));
}

}  // namespace

Real::Real(const Tensor& t) {
  if (!t.defined()) throw Error("reel::Real: expected a tensor of one element, got an undefined tensor");
  if (t.numel() != 1 || (t.dtype() != DType::f64 && t.dtype() != DType::f32))
    throw Error(fmt::format("reel::Real: expected an f32 or f64 tensor of one element, got {}",
                            type_str(t.dtype(), t.shape())));
  if (is_traced(t) || t.is_tracked()) {
    Tensor x = t.rank() == 0 ? t : reshape(t, {});
    t_ = x.dtype() == DType::f64 ? x : cast(x, DType::f64);
  } else {
    v_ = t.values()[0];
  }
}

namespace {

// The constants 0 and 1 of a trace (Trace::real_zero, real_one), recorded when it first
// unpacks a traced vector into Reals, before the traced function runs. `T s = 0; for
// (...) s += ...;` then reads a constant from before the loop rather than recording one
// in its first iteration only, which would put the re-rolled loop a step out of phase.
Tensor recorded_constant(detail::Trace& trace, double v) {
  Tensor c = scalar(v);
  const Var var = trace.builder.constant(c);
  c.add_trace_tag({trace.id, var});
  return c;
}

void record_scalar_constants(const Tensor& t) {
  const auto& traces = detail::active_traces();
  if (traces.empty() || !traces.back()->owns(t) || traces.back()->real_zero.defined()) return;
  detail::Trace& trace = *traces.back();
  trace.real_zero = recorded_constant(trace, 0.0);
  trace.real_one = recorded_constant(trace, 1.0);
}

// Element i of a vector, as a 0-d tensor (recorded where traced).
Tensor element(const Tensor& flat, int64_t i) { return reshape(slice(flat, 0, i, i + 1), {}); }

}  // namespace

Tensor Real::tensor() const {
  if (!t_.defined()) {
    if ((v_ == 0.0 && !std::signbit(v_)) || v_ == 1.0) {
      const auto& traces = detail::active_traces();
      if (!traces.empty() && traces.back()->real_zero.defined())
        return v_ == 0.0 ? traces.back()->real_zero : traces.back()->real_one;
    }
    return scalar(v_);
  }
  return at_ < 0 ? t_ : element(t_, at_);
}

namespace detail {

double real_value(const Tensor& t) { return t.item(); }

Real real_binary(RealOp op, const Real& a, const Real& b) {
  const Tensor x = operand(a), y = operand(b);
  switch (op) {
    case RealOp::add: return Real(x + y);
    case RealOp::sub: return Real(x - y);
    case RealOp::mul: return Real(x * y);
    case RealOp::div: return Real(x / y);
    case RealOp::maximum: return Real(maximum(x, y));
    case RealOp::minimum: return Real(minimum(x, y));
    case RealOp::hypot: return Real(reel::hypot(x, y));
    case RealOp::atan2: return Real(reel::atan2(x, y));
    case RealOp::copysign: return Real(reel::copysign(x, y));
    case RealOp::pow: return Real(reel::pow(x, y));
    case RealOp::fmax: return Real(ignoring_nan(x, y, true));
    case RealOp::fmin: return Real(ignoring_nan(x, y, false));
  }
  throw Error("reel::Real: unknown binary operation");
}

bool real_compare(RealCmp op, const Real& a, const Real& b) {
  const Tensor x = operand(a), y = operand(b);
  switch (op) {
    case RealCmp::lt: return static_cast<bool>(lt(x, y));
    case RealCmp::le: return static_cast<bool>(le(x, y));
    case RealCmp::gt: return static_cast<bool>(gt(x, y));
    case RealCmp::ge: return static_cast<bool>(ge(x, y));
    case RealCmp::eq: return static_cast<bool>(eq(x, y));
    case RealCmp::ne: return static_cast<bool>(ne(x, y));
  }
  throw Error("reel::Real: unknown comparison");
}

Real real_unary(RealFn fn, const Real& r) {
  const Tensor x = operand(r);
  switch (fn) {
    case RealFn::neg: return Real(-x);
    case RealFn::exp: return Real(reel::exp(x));
    case RealFn::log: return Real(reel::log(x));
    case RealFn::log1p: return Real(reel::log1p(x));
    case RealFn::expm1: return Real(reel::expm1(x));
    case RealFn::log2: return Real(reel::log2(x));
    case RealFn::log10: return Real(reel::log10(x));
    case RealFn::sqrt: return Real(reel::sqrt(x));
    case RealFn::cbrt: return Real(reel::cbrt(x));
    case RealFn::sin: return Real(reel::sin(x));
    case RealFn::cos: return Real(reel::cos(x));
    case RealFn::tan: return Real(reel::tan(x));
    case RealFn::asin: return Real(reel::asin(x));
    case RealFn::acos: return Real(reel::acos(x));
    case RealFn::atan: return Real(reel::atan(x));
    case RealFn::sinh: return Real(reel::sinh(x));
    case RealFn::cosh: return Real(reel::cosh(x));
    case RealFn::tanh: return Real(reel::tanh(x));
    case RealFn::asinh: return Real(reel::asinh(x));
    case RealFn::abs: return Real(reel::abs(x));
    case RealFn::erf: return Real(reel::erf(x));
    case RealFn::lgamma: return Real(reel::lgamma(x));
    case RealFn::floor: return Real(reel::floor(x));
    case RealFn::ceil: return Real(reel::ceil(x));
    case RealFn::round: return Real(reel::round(x));
  }
  throw Error("reel::Real: unknown function");
}

Real real_pow(const Real& x, double p) { return Real(reel::pow(operand(x), p)); }

Real real_select(const Real& cond, const Real& a, const Real& b) {
  return Real(where(operand(cond), operand(a), operand(b)));
}

std::vector<Real> real_elements(const Tensor& t) {
  if (!t.defined() || (t.dtype() != DType::f64 && t.dtype() != DType::f32))
    throw Error(fmt::format("reel::Real: expected an f32 or f64 tensor, got {}",
                            t.defined() ? type_str(t.dtype(), t.shape()) : std::string("an undefined tensor")));
  std::vector<Real> out;
  out.reserve(static_cast<std::size_t>(t.numel()));
  if (!is_traced(t) && !t.is_tracked()) {
    for (double v : t.values()) out.emplace_back(v);
    return out;
  }
  const Tensor flat = t.rank() == 1 ? t : reshape(t, {t.numel()});
  if (!is_traced(t)) {  // a tracked parameter's elements are read now (as its value is)
    for (int64_t i = 0; i < t.numel(); ++i) out.emplace_back(element(flat, i));
    return out;
  }
  const Tensor f64 = flat.dtype() == DType::f64 ? flat : cast(flat, DType::f64);
  record_scalar_constants(f64);
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(Real(f64, i));
  return out;
}

Tensor real_tensor(std::span<const Real> xs, const Shape& shape) {
  bool any_traced = false;
  for (const Real& x : xs) any_traced = any_traced || x.traced();
  if (!any_traced) {
    std::vector<double> values;
    values.reserve(xs.size());
    for (const Real& x : xs) values.push_back(plain_value(x));
    return tensor(values, shape);
  }
  std::vector<Tensor> parts;
  parts.reserve(xs.size());
  for (const Real& x : xs) parts.push_back(reshape(x.tensor(), {1}));
  const Tensor joined = parts.size() == 1 ? parts[0] : concat(parts, 0);
  return shape.size() == 1 ? joined : reshape(joined, shape);
}

void check_real_count(const char* op, const Tensor& t, std::size_t expected) {
  if (!t.defined() || static_cast<std::size_t>(t.numel()) != expected)
    throw Error(fmt::format("{}: expected a tensor of {} elements, got {}", op, expected,
                            t.defined() ? type_str(t.dtype(), t.shape()) : std::string("an undefined tensor")));
}

}  // namespace detail

// A comparison as a Real (1 or 0): of numbers computed, of traced Reals recorded.
#define REEL_REAL_COMPARISON(name, relation)                                                 \
  Real name(const Real& a, const Real& b) {                                                  \
    if (!a.traced() && !b.traced()) return Real(plain_value(a) relation plain_value(b) ? 1.0 : 0.0); \
    return Real(name(a.tensor(), b.tensor()));                                               \
  }
REEL_REAL_COMPARISON(lt, <)
REEL_REAL_COMPARISON(le, <=)
REEL_REAL_COMPARISON(gt, >)
REEL_REAL_COMPARISON(ge, >=)
REEL_REAL_COMPARISON(eq, ==)
REEL_REAL_COMPARISON(ne, !=)
#undef REEL_REAL_COMPARISON

std::ostream& operator<<(std::ostream& os, const Real& x) { return os << x.value(); }

}  // namespace reel
