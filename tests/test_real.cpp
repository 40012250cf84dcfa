// reel::Real: templated scalar code, the same with double and with Real; traced through
// every entry point of the API; branches as guards, select without one.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "reel/reel.hpp"
#include "test_util.hpp"

using namespace reel;

namespace {

// Templated code as a peer's user writes it: unqualified math (argument-dependent
// lookup), std:: spellings, std::max, compound assignment, integers mixed in.
template <class T>
T mixed(const std::vector<T>& x) {
  T s = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const T xi = x[i];
    s += exp(xi) * std::max(xi, T(0.25)) / static_cast<double>(1 + i);
    s -= 0.5 * sin(xi) * cos(2 * xi);
    s *= 1.0 + 0.1 * tanh(xi);
  }
  s = s + std::sqrt(s * s + 1) + log1p(fabs(x[0])) + pow(x[1] * x[1] + 1, 1.5) + hypot(x[0], x[1]);
  s += atan(x[2]) + erf(x[2]) + lgamma(x[1] + 3) + std::fmax(x[0], x[2]) + std::min(x[0], x[1]);
  return s;
}

template <class T>
T branchy(const std::vector<T>& x) {
  T s = x[0] * x[1];
  if (x[0] > 0) s = s + exp(x[0]);  // a branch on a traced value: a guard
  else s = s - x[0] * x[0];
  return s;
}

std::vector<double> finite_differences(const std::function<double(const std::vector<double>&)>& f,
                                       std::vector<double> x, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    x[i] = xi + h;
    const double up = f(x);
    x[i] = xi - h;
    const double down = f(x);
    x[i] = xi;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

std::vector<double> values_of(const std::vector<Real>& xs) {
  std::vector<double> v;
  for (const Real& x : xs) v.push_back(x.value());
  return v;
}

const std::vector<double> kX{0.3, -0.7, 1.1};

struct Particle {
  Real mass;
  std::vector<Real> position;
  int id = 0;
};
REEL_FIELDS(Particle, mass, position, id)

}  // namespace

TEST_CASE("reel::Real: outside a trace, templated code gives double's results") {
  const std::vector<Real> xr(kX.begin(), kX.end());
  CHECK(mixed(xr).value() == mixed(kX));
  CHECK(branchy(xr).value() == branchy(kX));
  const Real a = 2, b = 0.5f, c = true;
  CHECK((a * b + c).value() == 2.0);
  CHECK(-a < b);
  CHECK(a != b);
  CHECK(a == 2);
  CHECK(2 == a);
  CHECK_FALSE(a.traced());
  CHECK(double(a) == 2.0);
}

TEST_CASE("reel::Real: the <cmath> functions, by ADL and as std::, equal double's") {
  for (double v : {-2.5, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.5, 100.0}) {
    const Real x = v;
    CAPTURE(v);
    const auto same = [](const Real& r, double d) {
      if (std::isnan(d)) CHECK(std::isnan(r.value()));
      else CHECK(r.value() == d);
    };
    same(exp(x), std::exp(v)), same(std::log(x), std::log(v)), same(log1p(x), std::log1p(v));
    same(expm1(x), std::expm1(v)), same(log2(x), std::log2(v)), same(std::log10(x), std::log10(v));
    same(sqrt(x), std::sqrt(v)), same(cbrt(x), std::cbrt(v)), same(sin(x), std::sin(v));
    same(cos(x), std::cos(v)), same(tan(x), std::tan(v)), same(asin(x), std::asin(v)), same(acos(x), std::acos(v));
    same(atan(x), std::atan(v)), same(sinh(x), std::sinh(v)), same(cosh(x), std::cosh(v));
    same(tanh(x), std::tanh(v)), same(abs(x), std::fabs(v)), same(std::fabs(x), std::fabs(v));
    same(erf(x), std::erf(v)), same(lgamma(x), std::lgamma(v)), same(floor(x), std::floor(v));
    same(ceil(x), std::ceil(v)), same(std::round(x), std::round(v));
    same(pow(x, 3), std::pow(v, 3)), same(pow(x, 0.5), std::pow(v, 0.5));
    same(atan2(x, Real(0.75)), std::atan2(v, 0.75)), same(copysign(Real(1.5), x), std::copysign(1.5, v));
    same(hypot(x, Real(3)), std::hypot(v, 3.0)), same(std::max(x, Real(0.7)), std::max(v, 0.7));
    same(std::min(x, Real(0.7)), std::min(v, 0.7)), same(fmax(x, Real(NAN)), std::fmax(v, NAN));
    same(fmin(Real(NAN), x), std::fmin(NAN, v));
  }
  CHECK(std::isnan(std::max(Real(NAN), Real(1)).value()));  // maximum: a NaN operand gives NaN
}

TEST_CASE("reel::Real: numeric_limits, isfinite, << and fmt") {
  CHECK(std::numeric_limits<Real>::epsilon().value() == std::numeric_limits<double>::epsilon());
  CHECK(std::numeric_limits<Real>::max().value() == std::numeric_limits<double>::max());
  CHECK(std::numeric_limits<Real>::is_specialized);
  CHECK(std::isinf(std::numeric_limits<Real>::infinity()));
  CHECK(std::isnan(std::numeric_limits<Real>::quiet_NaN()));
  CHECK(std::isfinite(Real(1)));
  std::ostringstream os;
  os << Real(1.5);
  CHECK(os.str() == "1.5");
  CHECK(fmt::format("{:.3f}", Real(2.0 / 3)) == "0.667");
}

TEST_CASE("reel::Real: grad of a templated function given numbers, tensors or Reals, against finite differences") {
  const auto fd = finite_differences([](const std::vector<double>& x) { return mixed(x); }, kX);
  auto f = [](const std::vector<Real>& x) { return mixed(x); };
  // Numbers: the gradient is a tensor.
  const GradResult r = grad(f, kX);
  CHECK(r.value.item() == doctest::Approx(mixed(kX)).epsilon(1e-14));
  REQUIRE(r.grads.size() == 1);
  CHECK(r.grads[0].shape() == Shape{3});
  const auto g = r.grads[0].values();
  for (std::size_t i = 0; i < 3; ++i) CHECK(g[i] == doctest::Approx(fd[i]).epsilon(1e-6));
  // A tensor: the same.
  CHECK(grad(f, tensor(kX)).grads[0].values() == g);
  // Reals: the gradient is Reals.
  const std::vector<Real> xr(kX.begin(), kX.end());
  auto [value, grads] = withgradient(f, xr);
  CHECK(value.item() == r.value.item());
  CHECK(values_of(std::get<0>(grads)) == g);
  // A function, not a lambda.
  CHECK(grad(mixed<Real>, kX).grads[0].values() == g);
}

TEST_CASE("reel::Real: a read of an argument's element is an indexed read of its tensor") {
  const Tape t = trace([](const std::vector<Real>& x) { return x[0] * x[2]; }, kX);
  REQUIRE(t.inputs().size() == 1);
  CHECK(t.type(t.inputs()[0]).shape == Shape{3});
  const std::string text = to_string(t);
  CHECK(text.find("slice(%1, axis=0, start=2, stop=3") != std::string::npos);
}

TEST_CASE("reel::Real: compiled gradients equal interpreted ones (compile_grad, jit_grad, jit)") {
  auto f = [](const std::vector<Real>& x) { return mixed(x); };
  const std::vector<double> interpreted = grad(f, kX).grads[0].values();
  auto g = compile_grad(f, kX);
  const auto out = g(kX);
  CHECK(out[0].item() == doctest::Approx(mixed(kX)).epsilon(1e-14));
  const auto compiled = out[1].values();
  for (std::size_t i = 0; i < 3; ++i) CHECK(compiled[i] == doctest::Approx(interpreted[i]).epsilon(1e-12));
  const std::vector<double> other{0.1, 0.2, -0.4};
  const auto again = g(tensor(other))[1].values(), fresh = grad(f, other).grads[0].values();
  for (std::size_t i = 0; i < 3; ++i) CHECK(again[i] == doctest::Approx(fresh[i]).epsilon(1e-12));

  auto cached = jit_grad(f);
  const auto c = cached(kX);
  for (std::size_t i = 0; i < 3; ++i) CHECK(c[1].values()[i] == doctest::Approx(interpreted[i]).epsilon(1e-12));
  auto value = jit(f);
  CHECK(value(kX).value() == doctest::Approx(mixed(kX)).epsilon(1e-14));
  CHECK(value(other).value() == doctest::Approx(mixed(other)).epsilon(1e-14));
}

TEST_CASE("reel::Real: a branch on a traced Real is a guard; a cached function traces the other path") {
  auto f = [](const std::vector<Real>& x) { return branchy(x); };
  const Tape t = trace(f, kX);
  CHECK(to_string(t).find("guard(") != std::string::npos);
  auto g = jit_grad(f);
  for (const std::vector<double>& x : {std::vector<double>{0.5, 2.0}, std::vector<double>{-0.5, 2.0},
                                       std::vector<double>{0.25, -1.0}}) {
    CAPTURE(x[0]);
    const auto out = g(x);
    CHECK(out[0].item() == doctest::Approx(branchy(x)));
    const auto fd = finite_differences([](const std::vector<double>& v) { return branchy(v); }, x);
    CHECK(out[1].values()[0] == doctest::Approx(fd[0]).epsilon(1e-6));
    CHECK(out[1].values()[1] == doctest::Approx(fd[1]).epsilon(1e-6));
  }
  CHECK(g.cache_info().entries >= 2);
}

TEST_CASE("reel::Real: select records both sides, no guard") {
  auto f = [](const std::vector<Real>& x) { return select(gt(x[0], Real(0)), x[0] * x[1], -x[1]); };
  const Tape t = trace(f, std::vector<double>{1.0, 2.0});
  CHECK(to_string(t).find("guard") == std::string::npos);
  auto g = compile_grad(f, std::vector<double>{1.0, 2.0});
  const auto pos = g(std::vector<double>{3.0, 2.0});
  CHECK(pos[0].item() == 6.0);
  CHECK(pos[1].values() == std::vector<double>{2.0, 3.0});
  const auto neg = g(std::vector<double>{-3.0, 2.0});  // the same compiled code, the other side
  CHECK(neg[0].item() == -2.0);
  CHECK(neg[1].values() == std::vector<double>{0.0, -1.0});
  CHECK(select(Real(0), Real(1), Real(2)).value() == 2.0);
}

TEST_CASE("reel::Real: jacobian, hessian, jvp and hvp of functions of Reals") {
  // f(x) = [x0 x1, sin(x2) + x0] : R^3 -> R^2
  auto f = [](const std::vector<Real>& x) { return std::vector<Real>{x[0] * x[1], sin(x[2]) + x[0]}; };
  const std::vector<double> x{0.5, -2.0, 0.3};
  const std::vector<double> expected{-2.0, 0.5, 0.0, 1.0, 0.0, std::cos(0.3)};
  for (const Jacobian& j : {jacfwd(f, x), jacrev(f, x), jacobian(f, x)}) {
    const auto v = j.jacobian.values();
    REQUIRE(v.size() == 6);
    for (std::size_t i = 0; i < 6; ++i) CHECK(v[i] == doctest::Approx(expected[i]).epsilon(1e-14));
  }
  // h(x) = x0^2 x1 + x1^3: Hessian [[2 x1, 2 x0], [2 x0, 6 x1]]
  auto h = [](const std::vector<Real>& x) { return x[0] * x[0] * x[1] + pow(x[1], 3); };
  const auto H = hessian(h, std::vector<double>{1.5, -0.5}).hessian.values();
  CHECK(H == std::vector<double>{-1.0, 3.0, 3.0, -3.0});
  const JvpResult jv = jvp(h, {tensor({1.5, -0.5})}, {tensor({1.0, 0.0})});
  CHECK(jv.tangent.item() == doctest::Approx(2 * 1.5 * -0.5));
  const HvpResult hv = hvp(h, {tensor({1.5, -0.5})}, {tensor({0.0, 1.0})});
  CHECK(hv.hvp[0].values() == std::vector<double>{3.0, -3.0});
}

TEST_CASE("reel::Real: Reals in REEL_FIELDS structs, std::array and std::span parameters") {
  auto energy = [](const Particle& p) {
    Real e = 0;
    for (const Real& x : p.position) e += x * x;
    return 0.5 * p.mass * e;
  };
  const Particle p{2.0, {1.0, -3.0}, 7};
  auto [value, grads] = withgradient(energy, p);
  CHECK(value.item() == 10.0);
  const Particle& dp = std::get<0>(grads);
  CHECK(dp.mass.value() == 5.0);
  CHECK(values_of(dp.position) == std::vector<double>{2.0, -6.0});
  CHECK(dp.id == 7);

  auto by_array = [](const std::array<Real, 2>& x) { return x[0] * x[1]; };
  CHECK(grad(by_array, std::array<double, 2>{3.0, 4.0}).grads[0].values() == std::vector<double>{4.0, 3.0});
  auto by_span = [](std::span<const Real> x) { return x[0] / x[1]; };
  CHECK(grad(by_span, std::vector<double>{3.0, 4.0}).grads[0].values() == std::vector<double>{0.25, -3.0 / 16});
  auto by_scalars = [](Real a, Real b) { return a * exp(b); };
  const GradResult s = grad(by_scalars, 2.0, 0.0);
  CHECK(s.grads[0].item() == 1.0);
  CHECK(s.grads[1].item() == 2.0);
}

TEST_CASE("reel::Real: functions writing through an output pointer, by reel::output and reel::outputs") {
  // The peers' form: void f(n, const T* x, T* out).
  auto peer = []<class T>(std::size_t n, const T* x, T* out) {
    for (std::size_t i = 0; i < n; ++i) out[i] = x[i] * x[i];
    out[n] = x[0] + x[n - 1];
  };
  auto f = [&](const std::vector<Real>& x) { return outputs(x.size() + 1, [&](Real* out) { peer(x.size(), x.data(), out); }); };
  const auto J = jacobian(f, std::vector<double>{2.0, 3.0}).jacobian.values();
  CHECK(J == std::vector<double>{4.0, 0.0, 0.0, 6.0, 1.0, 1.0});
  auto s = [&](const std::vector<Real>& x) { return output([&](Real* out) { *out = x[0] * x[1]; }); };
  CHECK(grad(s, std::vector<double>{2.0, 3.0}).grads[0].values() == std::vector<double>{3.0, 2.0});
}

TEST_CASE("reel::Real: reading a traced Real's value is a guard where a cache traces") {
  auto f = [](const std::vector<Real>& x) {
    const double scale = x[0].value() > 1 ? 2.0 : 3.0;  // read as a number
    return scale * x[0] * x[1];
  };
  auto g = jit(f);
  CHECK(g(std::vector<double>{2.0, 1.0}).value() == 4.0);
  CHECK(g(std::vector<double>{0.5, 1.0}).value() == 1.5);  // not the code traced at 2.0
  CHECK(g(std::vector<double>{2.0, 5.0}).value() == 20.0);
}

TEST_CASE("reel::Real: bad arguments are reel::Errors naming what was expected and given") {
  CHECK_ERROR(Real(tensor({1.0, 2.0})), "reel::Real", "one element", "f64[2]");
  CHECK_ERROR(Real(Tensor{}), "reel::Real", "undefined");
  auto by_array = [](const std::array<Real, 2>& x) { return x[0] * x[1]; };
  CHECK_ERROR(grad(by_array, tensor({1.0, 2.0, 3.0})), "std::array<reel::Real, N>", "2 elements", "f64[3]");
}

TEST_CASE("reel::Real: each math function's derivative, at ordinary and special points, against its closed form") {
  struct Case {
    const char* name;
    Real (*f)(const Real&);
    double (*d)(double);
    std::vector<double> at;
  };
  static constexpr double pi = 3.14159265358979323846;
  const std::vector<Case> cases{
      {"exp", [](const Real& x) { return exp(x); }, [](double x) { return std::exp(x); }, {-1, 0, 2}},
      {"log", [](const Real& x) { return log(x); }, [](double x) { return 1 / x; }, {0.5, 1, 3}},
      {"log1p", [](const Real& x) { return log1p(x); }, [](double x) { return 1 / (1 + x); }, {-0.5, 0, 2}},
      {"expm1", [](const Real& x) { return expm1(x); }, [](double x) { return std::exp(x); }, {-1, 0, 1}},
      {"log2", [](const Real& x) { return log2(x); }, [](double x) { return 1 / (x * std::log(2.0)); }, {0.5, 1, 8}},
      {"log10", [](const Real& x) { return log10(x); }, [](double x) { return 1 / (x * std::log(10.0)); }, {0.1, 1, 100}},
      {"sqrt", [](const Real& x) { return sqrt(x); }, [](double x) { return 0.5 / std::sqrt(x); }, {0.25, 1, 4}},
      {"cbrt", [](const Real& x) { return cbrt(x); }, [](double x) { return 1 / (3 * std::cbrt(x) * std::cbrt(x)); }, {-8, 0, 1}},
      {"sin", [](const Real& x) { return sin(x); }, [](double x) { return std::cos(x); }, {0, pi / 2, 2}},
      {"cos", [](const Real& x) { return cos(x); }, [](double x) { return -std::sin(x); }, {0, pi / 2, 2}},
      {"tan", [](const Real& x) { return tan(x); }, [](double x) { return 1 + std::tan(x) * std::tan(x); }, {0, 0.5, -1}},
      {"asin", [](const Real& x) { return asin(x); }, [](double x) { return 1 / std::sqrt(1 - x * x); }, {0, 0.5, 1}},
      {"acos", [](const Real& x) { return acos(x); }, [](double x) { return -1 / std::sqrt(1 - x * x); }, {-1, 0, 0.5}},
      {"atan", [](const Real& x) { return atan(x); }, [](double x) { return 1 / (1 + x * x); }, {-2, 0, 1}},
      {"sinh", [](const Real& x) { return sinh(x); }, [](double x) { return std::cosh(x); }, {-1, 0, 2}},
      {"cosh", [](const Real& x) { return cosh(x); }, [](double x) { return std::sinh(x); }, {-1, 0, 2}},
      {"tanh", [](const Real& x) { return tanh(x); }, [](double x) { return 1 - std::tanh(x) * std::tanh(x); }, {-1, 0, 2}},
      {"abs", [](const Real& x) { return abs(x); }, [](double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }, {-2, 0, 3}},
      {"erf", [](const Real& x) { return erf(x); }, [](double x) { return 2 / std::sqrt(pi) * std::exp(-x * x); }, {-1, 0, 0.5}},
      {"floor", [](const Real& x) { return floor(x); }, [](double) { return 0.0; }, {-1.5, 0, 2}},
      {"ceil", [](const Real& x) { return ceil(x); }, [](double) { return 0.0; }, {-1.5, 0, 2}},
      {"round", [](const Real& x) { return round(x); }, [](double) { return 0.0; }, {-1.5, 0.5, 2}},
      {"pow 3", [](const Real& x) { return pow(x, 3); }, [](double x) { return 3 * x * x; }, {-2, 0, 1.5}},
      {"x^x", [](const Real& x) { return pow(x, x); }, [](double x) { return std::pow(x, x) * (std::log(x) + 1); }, {0.5, 1, 2}},
  };
  for (const Case& c : cases) {
    auto f = [&](Real x) { return c.f(x); };
    auto g = jit_grad(f);
    for (double x : c.at) {
      CAPTURE(c.name);
      CAPTURE(x);
      const double expected = c.d(x);
      const double interpreted = grad(f, x).grads[0].item();
      const double compiled = g(x)[1].item();
      if (std::isinf(expected)) {
        CHECK(interpreted == expected);
        CHECK(compiled == expected);
      } else {
        CHECK(interpreted == doctest::Approx(expected).epsilon(1e-13));
        CHECK(compiled == doctest::Approx(expected).epsilon(1e-13));
      }
    }
  }
  // Two arguments: atan2, copysign, hypot, fmax, pow with a Real exponent.
  auto two = [](Real y, Real x) { return atan2(y, x) + copysign(y, x) * hypot(x, y) + fmax(x, y) + pow(x, y); };
  const GradResult r = grad(two, 0.5, 2.0);
  const double y = 0.5, x = 2.0, h = std::hypot(x, y);
  CHECK(r.grads[0].item() == doctest::Approx(x / (h * h) + h + y * y / h + std::pow(x, y) * std::log(x)));
  CHECK(r.grads[1].item() == doctest::Approx(-y / (h * h) + y * x / h + 1 + y * std::pow(x, y - 1)));
}

TEST_CASE("reel::Real: cached and compiled functions given Reals, containers of them and structs") {
  auto f = [](const std::vector<Real>& x) { return x[0] * x[1]; };
  auto g = jit_grad(f);
  for (int round = 0; round < 2; ++round) {  // a miss, then a hit
    auto [value, grads] = g(std::vector<Real>{3.0, 4.0});
    CHECK(value.item() == 12.0);
    CHECK(values_of(std::get<0>(grads)) == std::vector<double>{4.0, 3.0});
  }
  auto c = compile_grad(f, std::vector<Real>{3.0, 4.0});
  auto [cv, cg] = c(std::vector<Real>{5.0, 4.0});
  CHECK(cv.item() == 20.0);
  CHECK(values_of(std::get<0>(cg)) == std::vector<double>{4.0, 5.0});
  auto energy = [](const Particle& p) { return p.mass * p.position[0] * p.position[1]; };
  auto ge = jit_grad(energy);
  for (int round = 0; round < 2; ++round) {
    auto [value, grads] = ge(Particle{2.0, {3.0, 4.0}, 1});
    CHECK(value.item() == 24.0);
    CHECK(std::get<0>(grads).mass.value() == 12.0);
    CHECK(values_of(std::get<0>(grads).position) == std::vector<double>{8.0, 6.0});
  }
  auto arr = jit_grad([](const std::array<Real, 2>& x) { return x[0] / x[1]; });
  CHECK(std::get<0>(arr(std::array<Real, 2>{1.0, 2.0}).grad)[1].value() == -0.25);
}

TEST_CASE("reel::Real: generic code's spellings: using std::sqrt, std::pow with unsigned exponents, conversions") {
  auto generic = [](const Real& x) {
    using std::sqrt;
    using std::max;
    using std::abs;
    Real r = sqrt(x) + max(x, Real(1)) + abs(x) + std::pow(x, 2u) + std::pow(x, std::size_t(3)) + std::pow(x, 2L);
    const int truncated = static_cast<int>(floor(x));
    if (r) r += truncated;
    if (!r) r = 0;
    return r;
  };
  const double x = 2.25;
  const double expected = std::sqrt(x) + std::max(x, 1.0) + x + x * x + x * x * x + x * x + 2;
  CHECK(generic(Real(x)).value() == doctest::Approx(expected));
  CHECK(grad(generic, x).value.item() == doctest::Approx(expected));
  int calls = 0;
  auto counting = [calls](const Real& y) mutable {  // a mutable lambda
    ++calls;
    return y * y;
  };
  CHECK(grad(counting, 3.0).grads[0].item() == 6.0);
}

TEST_CASE("reel::Real: isnan, isfinite and signbit are comparisons, not reads of the value") {
  auto f = [](const Real& x) { return std::isfinite(x) && !std::signbit(x) ? x * x : Real(0); };
  auto g = jit(f);
  for (double v : {1.0, 2.0, 3.0, 4.0}) CHECK(g(v).value() == v * v);
  CHECK(g.cache_info().entries == 1);  // one path for every finite positive value
  CHECK(g(-1.0).value() == 0.0);
  CHECK(g(INFINITY).value() == 0.0);
  auto h = [](const Real& x) { return std::isnan(x) ? Real(0) : x * x; };
  auto c = compile_grad(h, 2.0);
  CHECK(c(3.0)[0].item() == 9.0);
  CHECK_THROWS_AS(c(NAN), Error);  // the compiled path is for non-NaN x: a guard, not a silent answer
}

TEST_CASE("reel::Real: integer tensors are refused") {
  auto f = [](const std::vector<Real>& x) { return x[0] * x[1]; };
  const Tensor ints = tensor({1.0, 2.0}, {2}, DType::i64);
  CHECK_ERROR(grad(f, ints), "reel::Real", "f32 or f64", "i64[2]");
  CHECK_ERROR(Real(tensor({1.0}, {}, DType::i64)), "reel::Real", "f32 or f64", "i64[]");
}

TEST_CASE("reel::Real: vmap of a function of Reals over the rows of a tensor") {
  auto f = [](const std::vector<Real>& x) { return x[0] * sin(x[1]) + exp(x[2]); };
  const Tensor X = tensor({0.5, 1.0, -1.0, 2.0, 0.25, 0.0, -1.5, 3.0, 1.0}, {3, 3});
  const Tensor y = vmap(f)(X);
  REQUIRE(y.shape() == Shape{3});
  const auto v = X.values();
  for (std::size_t r = 0; r < 3; ++r)
    CHECK(y.values()[r] == doctest::Approx(v[3 * r] * std::sin(v[3 * r + 1]) + std::exp(v[3 * r + 2])).epsilon(1e-14));
}
