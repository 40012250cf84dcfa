// The C math library's functions as primitives (issue 35, for reel::Real): tan asin acos
// sinh cosh cbrt log2 log10 floor ceil round, atan2 copysign and powv (pow with a tensor
// exponent). Values against the std:: functions at ordinary and special points (±0, ±1,
// halves, negatives, ±inf, NaN) in f64 and f32, eager and compiled; gradients against
// the closed forms and finite differences, with the conventions at the edges (cbrt at 0,
// atan2 at the origin, powv at x = 0 or y = 0); forward mode against reverse; and a
// compiled chain of the new operations, fused into one kernel, against the interpreter.
// (tests/test_grad.cpp and tests/test_batch_rules.cpp also walk them with every
// registered elementwise primitive.)
#include <cmath>
#include <limits>
#include <numbers>

#include "test_util.hpp"

using namespace reel;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using TensorFn = Tensor (*)(const Tensor&);
using TensorFn2 = Tensor (*)(const Tensor&, const Tensor&);

struct Unary {
  const char* name;
  TensorFn op;
  double (*f64)(double);
  float (*f32)(float);
  double (*derivative)(double);  // the closed form
  std::vector<double> at;        // points inside the domain, for the derivatives
};

const std::vector<double> kSmooth{-0.7, -0.3, 0.2, 0.45, 0.9};
const std::vector<double> kPositive{0.2, 0.7, 1.3, 4.0, 50.0};
const std::vector<double> kSteps{-1.5, -0.5, -0.3, 0.0, 0.5, 1.0, 2.3, 2.5};  // at and between steps

const std::vector<Unary>& unaries() {
  static const std::vector<Unary> u{
      {"tan", [](const Tensor& x) { return reel::tan(x); }, [](double x) { return std::tan(x); },
       [](float x) { return std::tan(x); }, [](double x) { return 1 + std::tan(x) * std::tan(x); }, kSmooth},
      {"asin", [](const Tensor& x) { return reel::asin(x); }, [](double x) { return std::asin(x); },
       [](float x) { return std::asin(x); }, [](double x) { return 1 / std::sqrt(1 - x * x); }, kSmooth},
      {"acos", [](const Tensor& x) { return reel::acos(x); }, [](double x) { return std::acos(x); },
       [](float x) { return std::acos(x); }, [](double x) { return -1 / std::sqrt(1 - x * x); }, kSmooth},
      {"sinh", [](const Tensor& x) { return reel::sinh(x); }, [](double x) { return std::sinh(x); },
       [](float x) { return std::sinh(x); }, [](double x) { return std::cosh(x); }, kSmooth},
      {"cosh", [](const Tensor& x) { return reel::cosh(x); }, [](double x) { return std::cosh(x); },
       [](float x) { return std::cosh(x); }, [](double x) { return std::sinh(x); }, kSmooth},
      {"cbrt", [](const Tensor& x) { return reel::cbrt(x); }, [](double x) { return std::cbrt(x); },
       [](float x) { return std::cbrt(x); }, [](double x) { return 1 / (3 * std::cbrt(x) * std::cbrt(x)); }, kSmooth},
      {"log2", [](const Tensor& x) { return reel::log2(x); }, [](double x) { return std::log2(x); },
       [](float x) { return std::log2(x); }, [](double x) { return 1 / (x * std::numbers::ln2); }, kPositive},
      {"log10", [](const Tensor& x) { return reel::log10(x); }, [](double x) { return std::log10(x); },
       [](float x) { return std::log10(x); }, [](double x) { return 1 / (x * std::numbers::ln10); }, kPositive},
      {"floor", [](const Tensor& x) { return reel::floor(x); }, [](double x) { return std::floor(x); },
       [](float x) { return std::floor(x); }, [](double) { return 0.0; }, kSteps},
      {"ceil", [](const Tensor& x) { return reel::ceil(x); }, [](double x) { return std::ceil(x); },
       [](float x) { return std::ceil(x); }, [](double) { return 0.0; }, kSteps},
      {"round", [](const Tensor& x) { return reel::round(x); }, [](double x) { return std::round(x); },
       [](float x) { return std::round(x); }, [](double) { return 0.0; }, kSteps},
  };
  return u;
}

struct Binary {
  const char* name;
  TensorFn2 op;
  double (*f64)(double, double);
  float (*f32)(float, float);
  // The closed-form partial derivatives by each argument, at (a, b).
  double (*da)(double, double);
  double (*db)(double, double);
  std::vector<std::pair<double, double>> at;  // where they are checked
};

const std::vector<Binary>& binaries() {
  static const std::vector<Binary> b{
      {"atan2", [](const Tensor& y, const Tensor& x) { return reel::atan2(y, x); },
       [](double y, double x) { return std::atan2(y, x); }, [](float y, float x) { return std::atan2(y, x); },
       [](double y, double x) { return x / (x * x + y * y); }, [](double y, double x) { return -y / (x * x + y * y); },
       {{0.3, 0.8}, {-0.5, 0.2}, {0.7, -1.1}, {-0.4, -0.6}, {2.0, 0.1}}},
      {"copysign", [](const Tensor& x, const Tensor& y) { return reel::copysign(x, y); },
       [](double x, double y) { return std::copysign(x, y); }, [](float x, float y) { return std::copysign(x, y); },
       [](double x, double y) { return std::copysign(1.0, x) * std::copysign(1.0, y); }, [](double, double) { return 0.0; },
       {{0.3, 0.8}, {-0.5, 0.2}, {0.7, -1.1}, {-0.4, -0.6}, {2.0, -3.0}}},
      {"powv", [](const Tensor& x, const Tensor& y) { return reel::pow(x, y); },
       [](double x, double y) { return std::pow(x, y); }, [](float x, float y) { return std::pow(x, y); },
       [](double x, double y) { return y * std::pow(x, y - 1); },
       [](double x, double y) { return std::pow(x, y) * std::log(x); },
       {{0.3, 0.8}, {1.5, -0.5}, {0.7, 2.0}, {2.0, 3.0}, {1.2, -1.7}}},
  };
  return b;
}

// Ordinary and special points: ±0, ±1 (asin, acos), halves (round), negatives (cbrt),
// a subnormal-range value (0 in f32), ±inf, NaN.
const std::vector<double> kSpecial{0.0,  -0.0, 0.5, -0.5, 1.0,   -1.0, 1.5,  -1.5, 2.5,  -2.5,
                                   3.0,  -8.0, 0.3, 1e-300, 100.0, kInf, -kInf, kNaN, 0.999, -0.999};

// The same value, bit for bit up to the NaN payload.
bool same(double x, double y) { return (std::isnan(x) && std::isnan(y)) || (x == y && std::signbit(x) == std::signbit(y)); }

// Eager results are the std:: function's exactly; compiled ones (libm or its vector
// forms, LLVM's intrinsics) within the compiled tolerance, with the same NaNs,
// infinities and signed zeros.
void check_values(const std::string& what, const Tensor& got, const std::vector<double>& want, bool exact, DType dtype) {
  CAPTURE(what);
  REQUIRE(got.dtype() == dtype);
  const std::vector<double> v = got.values();
  REQUIRE(v.size() == want.size());
  const double rtol = test::compiled_tolerance(dtype).rtol;
  for (std::size_t i = 0; i < v.size(); ++i) {
    CAPTURE(i);
    CAPTURE(want[i]);
    CAPTURE(v[i]);
    if (exact || std::isnan(want[i]) || std::isinf(want[i]) || want[i] == 0) CHECK(same(v[i], want[i]));
    else CHECK(std::abs(v[i] - want[i]) <= rtol * std::abs(want[i]));
  }
}

Tensor at_points(const std::vector<double>& v, DType dtype = DType::f64) {
  return tensor(v, {static_cast<int64_t>(v.size())}, dtype);
}

}  // namespace

TEST_CASE("math primitives: values equal the std:: functions, eager and compiled, in f64 and f32") {
  for (const Unary& u : unaries()) {
    CAPTURE(u.name);
    for (DType dtype : {DType::f64, DType::f32}) {
      const Tensor x = at_points(kSpecial, dtype);
      std::vector<double> want;
      for (double p : kSpecial)
        want.push_back(dtype == DType::f64 ? u.f64(p) : static_cast<double>(u.f32(static_cast<float>(p))));
      check_values(fmt::format("{} eager {}", u.name, dtype_name(dtype)), u.op(x), want, true, dtype);
      const Tape t = trace(u.op, x);
      CHECK(test::count_calls(t, u.name) == 1);
      check_values(fmt::format("{} compiled {}", u.name, dtype_name(dtype)), compile(t)(std::vector<Tensor>{x})[0], want,
                   false, dtype);
    }
  }
  // Every pair of special points.
  const std::vector<double> q{0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 2.0, 3.0, kInf, -kInf, kNaN};
  std::vector<double> a, b;
  for (double s : q)
    for (double t : q) a.push_back(s), b.push_back(t);
  for (const Binary& op : binaries()) {
    CAPTURE(op.name);
    for (DType dtype : {DType::f64, DType::f32}) {
      const Tensor ta = at_points(a, dtype), tb = at_points(b, dtype);
      std::vector<double> want;
      for (std::size_t i = 0; i < a.size(); ++i)
        want.push_back(dtype == DType::f64 ? op.f64(a[i], b[i])
                                           : static_cast<double>(op.f32(static_cast<float>(a[i]), static_cast<float>(b[i]))));
      check_values(fmt::format("{} eager {}", op.name, dtype_name(dtype)), op.op(ta, tb), want, true, dtype);
      const Tape t = trace(op.op, ta, tb);
      CHECK(test::count_calls(t, op.name) == 1);
      check_values(fmt::format("{} compiled {}", op.name, dtype_name(dtype)),
                   compile(t)(std::vector<Tensor>{ta, tb})[0], want, false, dtype);
    }
  }
}

TEST_CASE("math primitives: closed forms at known points") {
  const double pi = std::numbers::pi;
  CHECK(reel::round(at_points({2.5, -2.5, 0.5, -0.5, 1.49999})).values() == std::vector<double>{3, -3, 1, -1, 1});
  CHECK(std::signbit(reel::round(at_points({-0.4})).item()));  // -0, as C's round
  CHECK(reel::floor(at_points({-1.5, 1.5, -0.0})).values() == std::vector<double>{-2, 1, 0});
  CHECK(std::signbit(reel::floor(at_points({-0.0})).item()));
  CHECK(reel::ceil(at_points({-1.5, 1.5})).values() == std::vector<double>{-1, 2});
  test::check_close(reel::cbrt(at_points({-8.0, 27.0})), at_points({-2, 3}), 1e-15, 0, "cbrt");  // libm's, to 1 ulp
  CHECK(reel::log2(at_points({8.0, 0.25})).values() == std::vector<double>{3, -2});
  CHECK(reel::log10(at_points({1000.0, 0.01})).values() == std::vector<double>{3, -2});
  CHECK(reel::asin(at_points({1.0})).item() == doctest::Approx(pi / 2).epsilon(1e-15));
  CHECK(reel::acos(at_points({-1.0})).item() == doctest::Approx(pi).epsilon(1e-15));
  CHECK(std::isnan(reel::asin(at_points({1.5})).item()));
  CHECK(reel::atan2(at_points({0.0, -0.0, 1.0}), at_points({-1.0, -1.0, 0.0})).values() ==
        std::vector<double>{pi, -pi, pi / 2});
  CHECK(reel::copysign(at_points({3.0, -2.0}), at_points({-0.0, 5.0})).values() == std::vector<double>{-3, 2});
  CHECK(reel::pow(at_points({2.0, 9.0, 0.0}), at_points({10.0, 0.5, 0.0})).values() == std::vector<double>{1024, 3, 1});
  // sinh and cosh at ln 2: (2 - 1/2)/2 and (2 + 1/2)/2.
  CHECK(reel::sinh(at_points({std::numbers::ln2})).item() == doctest::Approx(0.75).epsilon(1e-15));
  CHECK(reel::cosh(at_points({std::numbers::ln2})).item() == doctest::Approx(1.25).epsilon(1e-15));
  // pow with broadcasting: a scalar base over tensor exponents, and the reverse.
  CHECK(reel::pow(scalar(2.0), at_points({0, 1, 3})).values() == std::vector<double>{1, 2, 8});
  CHECK(reel::pow(at_points({1, 2, 3}), scalar(2.0)).values() == std::vector<double>{1, 4, 9});
}

TEST_CASE("math primitives: gradients against the closed forms and finite differences, forward against reverse") {
  for (const Unary& u : unaries()) {
    CAPTURE(u.name);
    const Tensor x = at_points(u.at);
    const auto g = grad([&](const Tensor& v) { return sum(u.op(v)); }, x);
    std::vector<double> want;
    for (double p : u.at) want.push_back(u.derivative(p));
    test::check_close(g.grads[0], at_points(want), 1e-13, 1e-15, fmt::format("{}: grad vs closed form", u.name));
    // Forward mode along random directions: the tangent is f'(x) * t, elementwise.
    const Tensor t = randn(x.shape(), 5);
    const auto j = jvp([&](const Tensor& v) { return u.op(v); }, {x}, {t});
    test::check_close(j.tangent, g.grads[0] * t, 1e-14, 1e-15, fmt::format("{}: jvp vs grad", u.name));
    // Interpreted, compiled and text round trip of the gradient tape (check_gradient's
    // run_checked), and finite differences away from the steps.
    const bool piecewise_constant = u.derivative(1.0) == 0.0;  // floor, ceil, round
    if (!piecewise_constant)
      test::check_gradient([&](const std::vector<Tensor>& a) { return sum(u.op(a[0]) * randn(a[0].shape(), 3)); }, {x},
                           u.name);
    else
      CHECK(g.grads[0].values() == std::vector<double>(u.at.size(), 0.0));  // zero, also at the steps
  }
  for (const Binary& op : binaries()) {
    CAPTURE(op.name);
    std::vector<double> a, b, wa, wb;
    for (const auto& [p, q] : op.at) a.push_back(p), b.push_back(q), wa.push_back(op.da(p, q)), wb.push_back(op.db(p, q));
    const Tensor ta = at_points(a), tb = at_points(b);
    const auto g = grad([&](const Tensor& x, const Tensor& y) { return sum(op.op(x, y)); }, ta, tb);
    test::check_close(g.grads[0], at_points(wa), 1e-13, 1e-15, fmt::format("{}: d/da vs closed form", op.name));
    test::check_close(g.grads[1], at_points(wb), 1e-13, 1e-15, fmt::format("{}: d/db vs closed form", op.name));
    const Tensor sa = randn(ta.shape(), 6), sb = randn(tb.shape(), 7);
    const auto j = jvp([&](const Tensor& x, const Tensor& y) { return op.op(x, y); }, {ta, tb}, {sa, sb});
    test::check_close(j.tangent, g.grads[0] * sa + g.grads[1] * sb, 1e-14, 1e-15, fmt::format("{}: jvp vs grad", op.name));
    test::check_gradient([&](const std::vector<Tensor>& v) { return sum(op.op(v[0], v[1]) * randn(v[0].shape(), 3)); },
                         {ta, tb}, op.name);
    // Broadcasting: a [2, 5] against a [5] (and the reverse), summed back to each shape.
    const Tensor big = concat({reshape(ta, {1, 5}), reshape(ta * 0.5 + 0.1, {1, 5})}, 0);  // no zeros, bases > 0
    test::check_gradient([&](const std::vector<Tensor>& v) { return sum(op.op(v[0], v[1]) * randn({2, 5}, 4)); }, {big, tb},
                         fmt::format("{} broadcast", op.name));
    test::check_gradient([&](const std::vector<Tensor>& v) { return sum(op.op(v[1], v[0]) * randn({2, 5}, 4)); }, {tb, big},
                         fmt::format("{} broadcast reversed", op.name));
  }
}

TEST_CASE("math primitives: derivative conventions at the edges") {
  const auto d = [](TensorFn f, std::vector<double> at) {
    return grad([f](const Tensor& v) { return sum(f(v)); }, at_points(at)).grads[0].values();
  };
  // cbrt's tangent is vertical at 0; asin and acos are infinitely steep at ±1.
  CHECK(d([](const Tensor& x) { return reel::cbrt(x); }, {0.0, -8.0}) == std::vector<double>{kInf, 1.0 / 12});
  CHECK(d([](const Tensor& x) { return reel::asin(x); }, {1.0, -1.0}) == std::vector<double>{kInf, kInf});
  CHECK(d([](const Tensor& x) { return reel::acos(x); }, {1.0, -1.0}) == std::vector<double>{-kInf, -kInf});
  // floor, ceil, round: zero at and between the steps, in both modes.
  for (TensorFn f : {TensorFn([](const Tensor& x) { return reel::floor(x); }), TensorFn([](const Tensor& x) { return reel::ceil(x); }),
                     TensorFn([](const Tensor& x) { return reel::round(x); })}) {
    CHECK(d(f, {0.5, 1.0, -2.5}) == std::vector<double>{0, 0, 0});
    const Tensor x = at_points({0.5, 1.0, -2.5});
    const auto j = jvp([f](const Tensor& v) { return f(v) + v; }, {x}, {at_points({1, 2, 3})});
    CHECK(j.tangent.values() == std::vector<double>{1, 2, 3});  // only through + v
  }
  // atan2 at the origin: 0 for both (hypot's guard), not NaN; and in forward mode.
  const auto g = grad([](const Tensor& y, const Tensor& x) { return sum(reel::atan2(y, x)); }, at_points({0.0, 3.0}),
                      at_points({0.0, 4.0}));
  test::check_close(g.grads[0], at_points({0.0, 4.0 / 25}), 1e-15, 0, "atan2: d/dy at the origin and (4, 3)");
  test::check_close(g.grads[1], at_points({0.0, -3.0 / 25}), 1e-15, 0, "atan2: d/dx at the origin and (4, 3)");
  CHECK(jvp([](const Tensor& y, const Tensor& x) { return reel::atan2(y, x); }, {scalar(0.0), scalar(0.0)},
            {scalar(1.0), scalar(1.0)})
            .tangent.item() == 0);
  // atan2 far out: no overflow of x^2 + y^2.
  const auto far = grad([](const Tensor& y, const Tensor& x) { return sum(reel::atan2(y, x)); }, scalar(3e200), scalar(4e200));
  CHECK(far.grads[0].item() == doctest::Approx(4.0 / 25 * 1e-200).epsilon(1e-14));
  CHECK(far.grads[1].item() == doctest::Approx(-3.0 / 25 * 1e-200).epsilon(1e-14));
  // copysign: d/dx is ±1 by both sign bits (at x = ±0 too), nothing flows into y.
  const auto c = grad([](const Tensor& x, const Tensor& y) { return sum(reel::copysign(x, y)); },
                      at_points({0.0, -0.0, 2.0, -2.0}), at_points({1.0, 1.0, -0.0, -3.0}));
  CHECK(c.grads[0].values() == std::vector<double>{1, -1, -1, 1});
  CHECK(c.grads[1].values() == std::vector<double>{0, 0, 0, 0});
  // powv at x = 0: the gradient in y is 0 (not 0 * -inf); in x, y x^(y-1).
  const auto p = grad([](const Tensor& x, const Tensor& y) { return sum(reel::pow(x, y)); }, at_points({0.0, 0.0, 2.0}),
                      at_points({2.0, 1.0, 0.0}));
  CHECK(p.grads[0].values() == std::vector<double>{0, 1, 0});  // y = 0: 0, not 0 * 2^-1
  CHECK(p.grads[1].values() == std::vector<double>{0, 0, std::log(2.0)});
  const auto pt = jvp([](const Tensor& x, const Tensor& y) { return reel::pow(x, y); }, {at_points({0.0, 0.0}), at_points({2.0, 0.0})},
                      {at_points({1.0, 1.0}), at_points({1.0, 1.0})});
  CHECK(pt.tangent.values() == std::vector<double>{0, 0});
  // Second derivatives through the rules: tan'' = 2 tan (1 + tan^2), sinh'' = sinh, powv's d2/dy2 = x^y log^2 x.
  const Tensor x = at_points({0.3, -0.6});
  const auto tan2 = grad([](const Tensor& v) { return sum(grad([](const Tensor& u) { return sum(reel::tan(u)); }, v).grads[0]); }, x);
  std::vector<double> want;
  for (double v : {0.3, -0.6}) want.push_back(2 * std::tan(v) * (1 + std::tan(v) * std::tan(v)));
  test::check_close(tan2.grads[0], at_points(want), 1e-13, 1e-15, "tan''");
  const auto pyy = grad(
      [](const Tensor& y) { return sum(grad([](const Tensor& e) { return sum(reel::pow(scalar(3.0), e)); }, y).grads[0]); },
      at_points({0.5, 2.0}));
  test::check_close(pyy.grads[0], at_points({std::pow(3.0, 0.5) * std::log(3.0) * std::log(3.0), 9 * std::log(3.0) * std::log(3.0)}),
                    1e-13, 1e-15, "powv d2/dy2");
}

TEST_CASE("math primitives: a chain of them compiles into one kernel that matches the interpreter") {
  // Every new operation in one elementwise function of two tensors.
  const auto chain = [](const Tensor& x, const Tensor& y) {
    const Tensor s = reel::atan2(reel::sinh(x), reel::cosh(y)) + reel::cbrt(reel::tan(x)) * reel::log2(y);
    const Tensor r = reel::copysign(reel::floor(x * 3.0) + reel::ceil(y) - reel::round(x * 5.0), x - 0.1);
    return s + r * 0.01 + reel::pow(y, x) + reel::asin(x * 0.5) - reel::acos(x * 0.25) + reel::log10(y);
  };
  for (DType dtype : {DType::f64, DType::f32}) {
    CAPTURE(dtype_name(dtype));
    const Tensor x = cast(rand({64}, 8) * 1.6 - 0.8, dtype), y = cast(rand({64}, 9) + 0.5, dtype);
    const Tape t = trace(chain, x, y);
    const CompiledFunction f = compile(t);
    CHECK(f.num_kernels() == 1);
    CHECK(f.num_steps() == 1);
    // Each as a libm call (or its vector form, named after it) or an LLVM intrinsic.
    for (const char* name : {"tan", "asin", "acos", "sinh", "cosh", "cbrt", "atan2", "floor", "ceil", "round", "copysign",
                             "log2", "log10", "pow"}) {
      CAPTURE(name);
      CHECK(f.llvm_ir().find(name) != std::string::npos);
    }
    const test::Tolerance tol = test::compiled_tolerance(dtype);
    test::check_close(f(std::vector<Tensor>{x, y})[0], chain(x, y), tol.rtol, tol.atol, "chain: compiled vs eager");
    // The gradient: compiled (compile_grad) against interpreted (grad), and forward mode.
    const auto loss = [chain](const Tensor& a, const Tensor& b) { return sum(chain(a, b)); };
    const auto g = grad(loss, x, y);
    const auto cg = compile_grad(loss, x, y)(x, y);
    const double gtol = dtype == DType::f64 ? 1e-12 : 1e-4;
    test::check_close(cg[1], g.grads[0], gtol, gtol, "chain: compiled d/dx vs interpreted");
    test::check_close(cg[2], g.grads[1], gtol, gtol, "chain: compiled d/dy vs interpreted");
    const Tensor tx = cast(randn({64}, 10), dtype), ty = cast(randn({64}, 11), dtype);
    const auto j = jvp(loss, {x, y}, {tx, ty});
    test::check_close(j.tangent, sum(g.grads[0] * tx + g.grads[1] * ty), gtol, gtol, "chain: jvp vs grad");
    // The cached jit of the same function agrees too.
    test::check_close(jit(chain)(x, y), chain(x, y), tol.rtol, tol.atol, "chain: jit vs eager");
  }
  // In f64, also against finite differences, at points away from the steps of floor(3x),
  // round(5x), ceil(y) and copysign's x - 0.1.
  test::check_gradient([&](const std::vector<Tensor>& a) { return sum(chain(a[0], a[1])); },
                       {at_points({0.13, -0.37, 0.52, -0.21, 0.31, 0.61}), at_points({0.7, 1.1, 0.9, 1.3, 0.6, 1.45})},
                       "chain");
}

TEST_CASE("math primitives: bad operands are errors naming the operation") {
  CHECK_ERROR(reel::atan2(at_points({1, 2}), at_points({1, 2, 3})), "atan2");
  CHECK_ERROR(reel::copysign(at_points({1, 2}), at_points({1, 2}, DType::f32)), "copysign");
  CHECK_ERROR(reel::pow(at_points({1, 2}), at_points({1, 2, 3})), "powv");
  CHECK_ERROR(reel::tan(Tensor()), "tan");
}
