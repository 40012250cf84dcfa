// Gradients of every primitive against central finite differences (f64, random
// points, through the interpreter), broadcasting pairs, second derivatives, and the
// closed-form examples from Tracker.jl and Yota.jl.
#include <algorithm>
#include <cmath>
#include <limits>

#include "test_util.hpp"

using namespace reel;
using test::check_gradient;
using test::Fn;

namespace {

// Weights a non-scalar result by fixed random numbers before summing, so every
// output element has a different adjoint.
Tensor weighted_sum(const Tensor& y, uint64_t seed) { return sum(y * randn(y.shape(), seed)); }

Tensor positive(const Shape& s, uint64_t seed) { return rand(s, seed) + 0.5; }

}  // namespace

TEST_CASE("unary primitives: gradients match finite differences") {
  const Tensor x = randn({3, 4}, 1);
  const Tensor px = positive({3, 4}, 2);
  struct Case {
    const char* name;
    Tensor (*f)(const Tensor&);
    bool needs_positive;
  };
  const Case cases[] = {
      {"neg", neg, false},   {"exp", exp, false},   {"log", log, true},
      {"sin", sin, false},   {"cos", cos, false},   {"tanh", tanh, false},
      {"sigmoid", sigmoid, false}, {"sqrt", sqrt, true}, {"square", square, false},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const Fn fn = [&](const std::vector<Tensor>& a) { return weighted_sum(c.f(a[0]), 7); };
    check_gradient(fn, {c.needs_positive ? px : x}, c.name);
  }
  for (double p : {2.0, 2.5, -1.5, 0.5}) {
    CAPTURE(p);
    const Fn fn = [&](const std::vector<Tensor>& a) { return weighted_sum(pow(a[0], p), 7); };
    check_gradient(fn, {px}, "pow");
  }
}

TEST_CASE("binary primitives: gradients with broadcasting, in both orders") {
  const Shape big{3, 4};
  const std::vector<Shape> smalls{{3, 4}, {4}, {3, 1}, {1, 4}, {}};
  using BinFn = Tensor (*)(const Tensor&, const Tensor&);
  const std::pair<const char*, BinFn> ops[] = {{"add", add}, {"sub", sub}, {"mul", mul}, {"div", div}};
  for (const auto& [name, op] : ops) {
    for (const Shape& small : smalls) {
      for (bool reversed : {false, true}) {
        const std::string what = fmt::format("{} {} {} {}", name, shape_str(reversed ? small : big),
                                             shape_str(reversed ? big : small), reversed ? "(reversed)" : "");
        CAPTURE(what);
        Tensor a = positive(big, 3), b = positive(small, 4);
        if (reversed) std::swap(a, b);
        const Fn fn = [&, op = op](const std::vector<Tensor>& t) { return weighted_sum(op(t[0], t[1]), 9); };
        const auto g = check_gradient(fn, {a, b}, what);
        CHECK(g[0].shape() == a.shape());
        CHECK(g[1].shape() == b.shape());
      }
    }
  }
}

TEST_CASE("tensor-double arithmetic: gradients") {
  const Tensor x = positive({5}, 5);
  const Fn fns[] = {
      [](const std::vector<Tensor>& a) { return sum(a[0] * 3.0 + 1.0); },
      [](const std::vector<Tensor>& a) { return sum(2.0 - a[0] / 4.0); },
      [](const std::vector<Tensor>& a) { return sum(1.0 / a[0] - (a[0] - 2.0) * (0.5 + a[0])); },
      [](const std::vector<Tensor>& a) { return sum(-a[0] * a[0]); },
  };
  int i = 0;
  for (const Fn& fn : fns) check_gradient(fn, {x}, fmt::format("scalar case {}", i++));
}

TEST_CASE("reductions: gradients") {
  const Tensor x = randn({3, 4}, 6);
  check_gradient([](const std::vector<Tensor>& a) { return sum(a[0]); }, {x}, "sum");
  check_gradient([](const std::vector<Tensor>& a) { return mean(a[0]); }, {x}, "mean");
  check_gradient([](const std::vector<Tensor>& a) { return weighted_sum(sum(a[0], 0), 3); }, {x},
                 "sum axis 0");
  check_gradient([](const std::vector<Tensor>& a) { return weighted_sum(sum(a[0], 1), 3); }, {x},
                 "sum axis 1");
  check_gradient([](const std::vector<Tensor>& a) { return weighted_sum(sum(a[0], -1), 3); }, {x},
                 "sum axis -1");
  check_gradient([](const std::vector<Tensor>& a) { return weighted_sum(sum_to(a[0], {1, 4}), 3); },
                 {x}, "sum_to [1,4]");
  check_gradient([](const std::vector<Tensor>& a) { return weighted_sum(sum_to(a[0], {4}), 3); },
                 {x}, "sum_to [4]");
  check_gradient([](const std::vector<Tensor>& a) { return weighted_sum(sum_to(a[0], {3, 1}), 3); },
                 {x}, "sum_to [3,1]");
}

TEST_CASE("shape and linear-algebra primitives: gradients") {
  const Tensor a = randn({3, 4}, 7), b = randn({4, 2}, 8), v = randn({4}, 9);
  check_gradient([](const std::vector<Tensor>& t) { return weighted_sum(matmul(t[0], t[1]), 1); },
                 {a, b}, "matmul 2-D");
  check_gradient([](const std::vector<Tensor>& t) { return weighted_sum(matmul(t[0], t[1]), 1); },
                 {a, v}, "matmul matrix-vector");
  check_gradient([](const std::vector<Tensor>& t) { return weighted_sum(transpose(t[0]), 1); }, {a},
                 "transpose");
  check_gradient([](const std::vector<Tensor>& t) { return weighted_sum(reshape(t[0], {2, 6}), 1); },
                 {a}, "reshape");
  check_gradient(
      [](const std::vector<Tensor>& t) { return weighted_sum(broadcast_to(t[0], {3, 4}), 1); },
      {v}, "broadcast_to [4] -> [3,4]");
  check_gradient(
      [](const std::vector<Tensor>& t) { return weighted_sum(broadcast_to(t[0], {3, 4}), 1); },
      {randn({3, 1}, 10)}, "broadcast_to [3,1] -> [3,4]");
}

TEST_CASE("a variable used several times accumulates its adjoints") {
  const Fn fn = [](const std::vector<Tensor>& t) {
    const Tensor& x = t[0];
    return sum(x * x * sin(x) + exp(x) / (x + 3.0));
  };
  check_gradient(fn, {randn({6}, 11)}, "reuse");
}

TEST_CASE("inputs the output does not depend on get zero gradients of their shape") {
  const Tensor x = randn({3}, 1), y = randn({2, 2}, 2);
  auto g = grad([](const Tensor& a, const Tensor&) { return sum(exp(a)); }, x, y);
  CHECK(g.grads[1].shape() == Shape{2, 2});
  CHECK(g.grads[1].values() == std::vector<double>(4, 0.0));
  test::check_close(g.grads[0], exp(x), 1e-15, 0, "d/dx sum(exp(x))");
}

TEST_CASE("second derivative: differentiating a gradient tape") {
  // f(x) = exp(sin(x)) * x, a scalar function of a 0-d x.
  const Fn f = [](const std::vector<Tensor>& t) { return exp(sin(t[0])) * t[0]; };
  const Tensor x = scalar(0.7);
  const Tape forward = test::trace_list(f, {x});
  const Tape first = grad_tape(forward);
  const Tape df = dce(select_outputs(first, {1}));  // x -> f'(x), a scalar
  const Tape second = grad_tape(df);                // x -> (f'(x), f''(x))
  const auto out = test::run_checked(second, {x});
  const double h = 1e-4, x0 = 0.7;
  auto fv = [](double v) { return std::exp(std::sin(v)) * v; };
  const double fd2 = (fv(x0 + h) - 2 * fv(x0) + fv(x0 - h)) / (h * h);
  const double d1 = std::exp(std::sin(x0)) * (1 + x0 * std::cos(x0));
  CHECK(out[0].item() == doctest::Approx(d1).epsilon(1e-12));
  CHECK(out[1].item() == doctest::Approx(fd2).epsilon(1e-6));
}

TEST_CASE("second derivative: grad of a function that calls grad (nested traces)") {
  // h(x) = sum(d/dx sum(tanh(x)^2)), whose gradient is the row sums of the Hessian.
  auto inner = [](const Tensor& x) { return sum(square(tanh(x))); };
  auto h = [&](const Tensor& x) { return sum(grad(inner, x).grads[0]); };
  const Tensor x = randn({4}, 12);
  const auto g = grad(h, x);
  const test::Fn hf = [&](const std::vector<Tensor>& t) { return h(t[0]); };
  const auto fd = test::finite_diff(hf, {x});
  test::check_close(g.grads[0], fd[0], 1e-6, 1e-7, "Hessian row sums");
  // The closed form: d/dx [2 tanh(x) (1 - tanh^2 x)] = 2 (1 - t^2)(1 - 3 t^2).
  std::vector<double> want;
  for (double v : x.values()) {
    const double t = std::tanh(v);
    want.push_back(2 * (1 - t * t) * (1 - 3 * t * t));
  }
  test::check_close(g.grads[0], tensor(want), 1e-12, 1e-14, "closed form");
}

TEST_CASE("Tracker.jl example: W*x and its vector-Jacobian product") {
  const Tensor W = tensor({1, 2, 3, 4}, {2, 2});
  const Tensor x = tensor({5, 6});
  auto f = [](const Tensor& w, const Tensor& v) { return matmul(w, v); };
  const Tape t = trace(f, W, x);
  const auto y = test::run_checked(t, {W, x});
  CHECK(y[0].values() == std::vector<double>{17, 39});
  const auto r = vjp(f, tensor({1, -1}), W, x);
  CHECK(r.value.values() == std::vector<double>{17, 39});
  CHECK(r.grads[0].shape() == Shape{2, 2});
  CHECK(r.grads[0].values() == std::vector<double>{5, 6, -5, -6});
  CHECK(r.grads[1].values() == std::vector<double>{-2, -2});
  // The seeded gradient tape runs like any other.
  const auto out = test::run_checked(vjp_tape(t), {W, x, tensor({1, -1})});
  CHECK(out[1].values() == std::vector<double>{5, 6, -5, -6});
}

TEST_CASE("Yota.jl example: L(x) = sum(sigmoid(x))") {
  auto L = [](const Tensor& x) { return sum(sigmoid(x)); };
  const Tensor x = tensor({1, 2, 3, 4, 5});
  const auto g = grad(L, x);
  double value = 0;
  std::vector<double> want;
  for (double v : x.values()) {
    const double s = 1 / (1 + std::exp(-v));
    value += s;
    want.push_back(s * (1 - s));
  }
  CHECK(g.value.item() == doctest::Approx(value).epsilon(1e-14));
  test::check_close(g.grads[0], tensor(want), 1e-14, 0, "sigmoid'");
  const auto out = test::run_checked(grad_tape(trace(L, x)), {x});
  test::check_close(out[1], tensor(want), 1e-14, 0, "grad tape");
}

TEST_CASE("Yota.jl example: loss(W, b, x) = sum(matmul(W, x) + b) has closed-form gradients") {
  auto loss = [](const Tensor& W, const Tensor& b, const Tensor& x) { return sum(matmul(W, x) + b); };
  const Tensor W = randn({128, 784}, 1), b = randn({128, 1}, 2), x = randn({784, 100}, 3);
  const auto g = grad(loss, W, b, x);
  // dW[i,j] = sum_k x[j,k]; db[i] = 100 (the batch size); dx[j,k] = sum_i W[i,j].
  const auto xv = x.values(), wv = W.values();
  std::vector<double> row_sums_x(784, 0), col_sums_w(784, 0);
  for (int j = 0; j < 784; ++j)
    for (int k = 0; k < 100; ++k) row_sums_x[j] += xv[j * 100 + k];
  for (int i = 0; i < 128; ++i)
    for (int j = 0; j < 784; ++j) col_sums_w[j] += wv[i * 784 + j];
  std::vector<double> dW, dx;
  for (int i = 0; i < 128; ++i) dW.insert(dW.end(), row_sums_x.begin(), row_sums_x.end());
  for (int j = 0; j < 784; ++j) dx.insert(dx.end(), 100, col_sums_w[j]);
  test::check_close(g.grads[0], tensor(dW, {128, 784}), 1e-10, 1e-10, "dW");
  test::check_close(g.grads[1], full({128, 1}, 100.0), 1e-12, 0, "db");
  test::check_close(g.grads[2], tensor(dx, {784, 100}), 1e-10, 1e-10, "dx");
  test::check_round_trip(grad_tape(trace(loss, W, b, x)));
}

TEST_CASE("f32 gradients agree with f64 ones") {
  auto f = [](const Tensor& x) { return sum(tanh(x) * sigmoid(x) + sqrt(square(x) + 1.0)); };
  const Tensor x64 = randn({10}, 13), x32 = randn({10}, 13, DType::f32);
  const auto g64 = grad(f, x64), g32 = grad(f, x32);
  CHECK(g32.grads[0].dtype() == DType::f32);
  test::check_close(g32.grads[0], g64.grads[0], 1e-5, 1e-6, "f32 vs f64");
}

TEST_CASE("nodiff: no gradient flows through it, and it shows on the tape") {
  // d/dx [x * nodiff(x)] = nodiff(x) = x: at 3, 3 (not 6).
  auto f = [](const Tensor& x) { return sum(x * nodiff(x)); };
  const auto g = grad(f, scalar(3.0));
  CHECK(g.value.item() == 9);
  CHECK(g.grads[0].item() == 3);
  const Tape t = trace(f, scalar(3.0));
  CHECK(to_string(t).find("nodiff(") != std::string::npos);
  const Tape gt = grad_tape(t);
  const auto out = test::run_checked(gt, {scalar(3.0)});  // interpreted, compiled, text round trip
  CHECK(out[1].item() == 3);
  CHECK(simplegrad(f, scalar(3.0))(scalar(-2.0))[1].item() == -2);
  // stop_gradient is the same operation; a function of nodiff alone has a zero gradient.
  const auto z = grad([](const Tensor& x) { return sum(exp(stop_gradient(x))); }, tensor({1, 2}));
  CHECK(z.grads[0].values() == std::vector<double>{0, 0});
  // Second derivative: d2/dx2 [x * nodiff(x)] = 0 through nodiff, d/dx of the gradient x.
  const auto h = grad([](const Tensor& x) { return grad([](const Tensor& y) { return sum(y * nodiff(y)); }, x).grads[0]; },
                      scalar(3.0));
  CHECK(h.grads[0].item() == 0);
}

// Every elementwise primitive in the registry, without naming any: its reverse and
// forward rules against finite differences, and its eager kernel against its compiled
// element program on special values (zeros of both signs, infinities, NaN, ties), where
// the two must agree exactly on which elements are NaN. A new built-in elementwise
// primitive is covered here by being registered.
TEST_CASE("every registered elementwise primitive: gradients, tangents, eager vs compiled") {
  int checked = 0, with_rules = 0;
  for (const Primitive* p : all_primitives()) {
    // Built-ins only: in a run of every test in one process, other tests' primitives
    // (one with a malformed element program, on purpose) are registered too.
    if (!is_builtin(*p) || p->structure != Structure::elementwise || p->arity < 1 || p->arity > 3) continue;
    if (std::any_of(p->attrs.begin(), p->attrs.end(), [](const AttrSpec& s) { return !s.optional; })) continue;
    CAPTURE(p->name);
    ++checked;
    const Shape shape{3, 4};
    const auto call = [p](const std::vector<Tensor>& a) { return reel::apply(*p, std::span<const Tensor>(a), {}); };
    // nodiff is the identity whose derivative is zero by definition: finite
    // differences see through it (its own test is below).
    if (p->adjoint && p->tangent && p->name != "nodiff") {
      ++with_rules;
      std::vector<Tensor> args;
      for (int i = 0; i < p->arity; ++i)
        args.push_back(positive(shape, 20 + static_cast<uint64_t>(i)) * test::sample_scale(p->name));
      check_gradient([&](const std::vector<Tensor>& a) { return weighted_sum(call(a), 11); }, args, p->name);
      std::vector<Tensor> tangents;
      for (int i = 0; i < p->arity; ++i) tangents.push_back(randn(shape, 30 + static_cast<uint64_t>(i)));
      const Tape jt = jvp_tape(test::trace_list(call, args));
      std::vector<Tensor> jargs = args;
      jargs.insert(jargs.end(), tangents.begin(), tangents.end());
      const std::vector<Tensor> j = test::run_checked(jt, jargs);
      const double h = 1e-6;
      std::vector<Tensor> plus = args, minus = args;
      for (int i = 0; i < p->arity; ++i) plus[i] = args[i] + tangents[i] * h, minus[i] = args[i] - tangents[i] * h;
      test::check_close(j[1], (call(plus) - call(minus)) / (2 * h), 1e-6, 1e-6, p->name + ": jvp vs finite differences");
    }

    const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
    const std::vector<double> special{0.0, -0.0, 1.0, -1.0, 0.5, -2.5, inf, -inf, nan, 1e-300, 3.0, 3.0};
    for (DType dtype : {DType::f64, DType::f32}) {
      std::vector<Tensor> sargs;
      for (int i = 0; i < p->arity; ++i) {
        std::vector<double> v = special;
        std::rotate(v.begin(), v.begin() + 3 * i, v.end());
        v.back() = 3.0;  // a tie across the arguments in the last element
        sargs.push_back(tensor(v, {12}, dtype));
      }
      // The primitive on the arguments, and on abs, neg and square of them: the
      // optimiser folds operations across a fused loop (an LLVM fold of max over fabs
      // was wrong once), so compositions are checked too.
      for (const char* pre : {"", "abs", "neg", "square"}) {
        CAPTURE(pre);
        TapeBuilder b;
        std::vector<Var> in;
        for (int i = 0; i < p->arity; ++i) {
          in.push_back(b.input({dtype, {12}}));
          if (*pre) in.back() = b.call(pre, {in.back()});
        }
        b.set_outputs({b.call(*p, in)});
        const Tape t = b.finish();
        const auto eager = play(t, sargs)[0].values(), compiled = compile(t)(sargs)[0].values();
        for (std::size_t i = 0; i < eager.size(); ++i) {
          CAPTURE(i);
          CAPTURE(dtype_name(dtype));
          CHECK(std::isnan(eager[i]) == std::isnan(compiled[i]));
          if (!std::isnan(eager[i]) && !std::isinf(eager[i]))
            CHECK(std::abs(eager[i] - compiled[i]) <= 1e-6 * std::abs(eager[i]) + 1e-300);
          if (std::isinf(eager[i])) CHECK(eager[i] == compiled[i]);
          if (eager[i] == 0 && compiled[i] == 0) CHECK(std::signbit(eager[i]) == std::signbit(compiled[i]));
        }
      }
    }
  }
  CHECK(checked >= 30);
  CHECK(with_rules >= 28);
}

TEST_CASE("abs and sign: values, gradients at the kink by convention") {
  const Tensor x = tensor({-2.0, 0.0, 3.0}, {3});
  CHECK(abs(x).values() == std::vector<double>{2, 0, 3});
  CHECK(sign(x).values() == std::vector<double>{-1, 0, 1});
  const auto g = grad([](const Tensor& v) { return sum(abs(v)); }, x);
  CHECK(g.grads[0].values() == std::vector<double>{-1, 0, 1});  // abs'(0) = 0
  const auto gs = grad([](const Tensor& v) { return sum(sign(v) * v); }, x);
  CHECK(gs.grads[0].values() == std::vector<double>{-1, 0, 1});  // no gradient through sign
}

// atan, asinh and hypot (added as the proof of issue 18's primitive form): closed forms,
// gradients (reverse, forward, compiled, second order) and hypot's convention at 0.
TEST_CASE("atan, asinh, hypot: closed forms, gradients in every mode, hypot at 0") {
  const double pi = 3.14159265358979323846;
  CHECK(atan(tensor({1.0})).item() == doctest::Approx(pi / 4).epsilon(1e-15));
  CHECK(asinh(tensor({0.75})).item() == doctest::Approx(std::log(2.0)).epsilon(1e-15));  // asinh(3/4) = ln 2
  CHECK(asinh(tensor({1e300})).item() == doctest::Approx(std::log(2e300)).epsilon(1e-15));
  CHECK(hypot(tensor({3.0, 1e300}), tensor({4.0, 1e300})).values() ==
        std::vector<double>{5.0, std::hypot(1e300, 1e300)});  // no overflow
  // d atan/dx = 1/(1 + x^2), d asinh/dx = 1/sqrt(x^2 + 1): reverse, forward and compiled.
  const Tensor x = tensor({-2.0, 0.0, 0.5, 3.0});
  const auto f = [](const Tensor& v) { return sum(atan(v) + asinh(v)); };
  std::vector<double> want;
  for (double v : x.values()) want.push_back(1 / (1 + v * v) + 1 / std::sqrt(v * v + 1));
  test::check_close(grad(f, x).grads[0], tensor(want), 1e-15, 1e-15, "atan + asinh: grad");
  test::check_close(simplegrad(f, x)(x)[1], tensor(want), 1e-15, 1e-15, "atan + asinh: compiled grad");
  const Tensor ones = tensor({1.0, 1.0, 1.0, 1.0});
  test::check_close(jvp([](const Tensor& v) { return atan(v) + asinh(v); }, {x}, {ones}).tangent, tensor(want), 1e-15,
                    1e-15, "atan + asinh: jvp");
  // Second derivatives: atan'' = -2x/(1+x^2)^2, asinh'' = -x/(x^2+1)^(3/2) (through hypot's rule).
  const auto d2 = grad([](const Tensor& v) { return sum(grad([](const Tensor& u) { return sum(atan(u) + asinh(u)); }, v).grads[0]); }, x);
  std::vector<double> want2;
  for (double v : x.values()) want2.push_back(-2 * v / std::pow(1 + v * v, 2) - v / std::pow(v * v + 1, 1.5));
  test::check_close(d2.grads[0], tensor(want2), 1e-14, 1e-14, "atan + asinh: second derivative");
  // hypot: d/da = a/h, d/db = b/h, with broadcasting; 0 at a = b = 0 (not NaN).
  const auto h = [](const Tensor& a, const Tensor& b) { return sum(hypot(a, b)); };
  const auto g = grad(h, tensor({3.0, 0.0, -5.0}), tensor({4.0}));
  test::check_close(g.grads[0], tensor({0.6, 0.0, -5 / std::sqrt(41.0)}), 1e-15, 1e-15, "hypot: d/da");
  test::check_close(g.grads[1], tensor({0.8 + 1.0 + 4 / std::sqrt(41.0)}), 1e-15, 1e-15, "hypot: d/db broadcast");
  const auto g0 = simplegrad(h, tensor({0.0}), tensor({0.0}))(tensor({0.0}), tensor({0.0}));
  CHECK(g0[1].item() == 0);
  CHECK(g0[2].item() == 0);
  CHECK(jvp([](const Tensor& a) { return hypot(a, 0.0); }, {tensor({0.0})}, {tensor({1.0})}).tangent.item() == 0);
  // Finite differences with broadcasting in both orders, and f32 compiled against f64.
  check_gradient([](const std::vector<Tensor>& a) { return weighted_sum(hypot(a[0], a[1]), 3); },
                 {randn({3, 4}, 41), randn({3, 1}, 42)}, "hypot broadcast");
  check_gradient([](const std::vector<Tensor>& a) { return weighted_sum(hypot(a[1], a[0]), 3); },
                 {randn({3, 4}, 43), randn({4}, 44)}, "hypot broadcast reversed");
  const Tensor x32 = tensor({-2.0, 0.5, 3.0}, {3}, DType::f32);
  test::check_close(simplegrad([](const Tensor& v) { return sum(hypot(atan(v), asinh(v))); }, x32)(x32)[1],
                    grad([](const Tensor& v) { return sum(hypot(atan(v), asinh(v))); }, x32).grads[0], 1e-6, 1e-6,
                    "f32: compiled vs interpreted");
  CHECK_THROWS_WITH_AS(hypot(tensor({1.0, 2.0}), tensor({1.0, 2.0, 3.0})), doctest::Contains("hypot"), Error);
}

TEST_CASE("new elementwise primitives: closed forms and the conventions at kinks") {
  const double euler_gamma = 0.57721566490153286, pi = 3.14159265358979323846;
  CHECK(lgamma(tensor({5.0, 0.5})).values()[0] == doctest::Approx(std::log(24.0)).epsilon(1e-14));
  CHECK(lgamma(tensor({5.0, 0.5})).values()[1] == doctest::Approx(0.5 * std::log(pi)).epsilon(1e-14));
  const auto dg = digamma(tensor({1.0, 0.5, 10.0, -0.5, 1e-3})).values();
  CHECK(dg[0] == doctest::Approx(-euler_gamma).epsilon(1e-13));
  CHECK(dg[1] == doctest::Approx(-euler_gamma - 2 * std::log(2.0)).epsilon(1e-13));
  CHECK(dg[2] == doctest::Approx(2.251752589066721).epsilon(1e-13));  // H_9 - gamma
  CHECK(dg[3] == doctest::Approx(0.03648997397857652).epsilon(1e-12));  // reflection
  CHECK(dg[4] == doctest::Approx(-1000.5755719318103).epsilon(1e-12));
  CHECK(trigamma(tensor({1.0})).item() == doctest::Approx(pi * pi / 6).epsilon(1e-13));
  CHECK(trigamma(tensor({-0.5})).item() == doctest::Approx(pi * pi / 2 + 4).epsilon(1e-12));
  // lgamma's gradient is digamma, also for negative non-integers (finite differences).
  check_gradient([](const std::vector<Tensor>& a) { return sum(lgamma(a[0])); }, {tensor({-0.3, -2.7, 0.2, 7.5})},
                 "lgamma at negative points");
  CHECK(erf(tensor({0.5})).item() == doctest::Approx(0.5204998778130465).epsilon(1e-14));
  CHECK(softplus(tensor({1000.0, -1000.0, 0.0})).values() == std::vector<double>{1000.0, 0.0, std::log(2.0)});
  CHECK(log1p(tensor({1e-20})).item() == 1e-20);
  CHECK(expm1(tensor({1e-20})).item() == 1e-20);

  const Tensor x = tensor({-1.0, 0.0, 2.0});
  CHECK(grad([](const Tensor& v) { return sum(relu(v)); }, x).grads[0].values() == std::vector<double>{0, 0, 1});
  // maximum: a tie splits the gradient evenly.
  const auto gm = grad([](const Tensor& a, const Tensor& b) { return sum(maximum(a, b)); }, tensor({1.0, 2.0, 3.0}),
                       tensor({3.0, 2.0, 1.0}));
  CHECK(gm.grads[0].values() == std::vector<double>{0, 0.5, 1});
  CHECK(gm.grads[1].values() == std::vector<double>{1, 0.5, 0});
  const auto gn = grad([](const Tensor& a) { return sum(minimum(a, 2.0)); }, tensor({1.0, 2.0, 3.0}));
  CHECK(gn.grads[0].values() == std::vector<double>{1, 0.5, 0});
  // clamp: gradient 1 inside, bounds included.
  CHECK(grad([](const Tensor& v) { return sum(clamp(v, 0.0, 2.0)); }, tensor({-1.0, 0.0, 1.0, 2.0, 3.0}))
            .grads[0].values() == std::vector<double>{0, 1, 1, 1, 0});
  CHECK_THROWS_WITH_AS(clamp(x, 2.0, 1.0), doctest::Contains("lo <= hi"), Error);
  // where: a's gradient where the condition holds, b's elsewhere; none into the condition.
  const auto gw = grad([](const Tensor& a, const Tensor& b) { return sum(where(a > 0.5, a * a, b * 3.0)); },
                       tensor({1.0, 0.0, 2.0}), tensor({5.0, 5.0, 5.0}));
  CHECK(gw.value.item() == 1 + 15 + 4);
  CHECK(gw.grads[0].values() == std::vector<double>{2, 0, 4});
  CHECK(gw.grads[1].values() == std::vector<double>{0, 3, 0});
  // Comparisons: 0/1 in the operands' dtype; NaN compares false except with !=.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor p = tensor({1.0, 2.0, nan}, {3}, DType::f32);
  CHECK((p < 2.0).values() == std::vector<double>{1, 0, 0});
  CHECK((p <= 2.0).values() == std::vector<double>{1, 1, 0});
  CHECK((2.0 > p).values() == std::vector<double>{1, 0, 0});
  CHECK((p >= p).values() == std::vector<double>{1, 1, 0});
  CHECK((p == 2.0).values() == std::vector<double>{0, 1, 0});
  CHECK((p != p).values() == std::vector<double>{0, 0, 1});
  CHECK((p < 2.0).dtype() == DType::f32);
  CHECK(grad([](const Tensor& v) { return sum((v > 0.0) * v); }, x).grads[0].values() == std::vector<double>{0, 0, 1});
  // pow(x, 0) has gradient 0 at 0 (was NaN), and pow(x, 1) gradient 1.
  CHECK(grad([](const Tensor& v) { return sum(pow(v, 0.0)); }, tensor({0.0, 2.0})).grads[0].values() ==
        std::vector<double>{0, 0});
  CHECK(grad([](const Tensor& v) { return sum(pow(v, 1.0)); }, tensor({0.0, 2.0})).grads[0].values() ==
        std::vector<double>{1, 1});
  CHECK(jvp([](const Tensor& v) { return pow(v, 0.0); }, {tensor({0.0})}, {tensor({1.0})}).tangent.item() == 0);
  CHECK_THROWS_WITH_AS(grad([](const Tensor& v) { return sum(trigamma(v)); }, x),
                       doctest::Contains("'trigamma' has no reverse-mode"), Error);
}

TEST_CASE("reductions over axes, with keepdims: values and gradients both ways, interpreted and compiled") {
  const Tensor x = positive({2, 3, 4}, 41);
  struct Case {
    std::string name;
    std::function<Tensor(const Tensor&)> f;
  };
  const std::vector<std::vector<int64_t>> axis_sets = {{}, {0}, {-1}, {0, 2}, {-2, 0}, {1}};
  std::vector<Case> cases;
  for (const auto& axes : axis_sets)
    for (bool keep : {false, true}) {
      const std::string tag = fmt::format("[{}]{}", fmt::join(axes, ","), keep ? " keepdims" : "");
      auto all = [&axes](auto f, const Tensor& v, bool k) { return axes.empty() ? f(v, std::vector<int64_t>{0, 1, 2}, k) : f(v, axes, k); };
      cases.push_back({"sum " + tag, [=](const Tensor& v) { return all([](auto&&... a) { return sum(a...); }, v, keep); }});
      cases.push_back({"mean " + tag, [=](const Tensor& v) { return all([](auto&&... a) { return mean(a...); }, v, keep); }});
      cases.push_back({"prod " + tag, [=](const Tensor& v) { return all([](auto&&... a) { return prod(a...); }, v, keep); }});
      cases.push_back({"max " + tag, [=](const Tensor& v) { return all([](auto&&... a) { return max(a...); }, v, keep); }});
      cases.push_back({"min " + tag, [=](const Tensor& v) { return all([](auto&&... a) { return min(a...); }, v, keep); }});
      cases.push_back({"logsumexp " + tag, [=](const Tensor& v) { return all([](auto&&... a) { return logsumexp(a...); }, v, keep); }});
    }
  for (int64_t axis : {0, 1, -1}) {
    cases.push_back({fmt::format("softmax {}", axis), [=](const Tensor& v) { return softmax(v, axis); }});
    cases.push_back({fmt::format("log_softmax {}", axis), [=](const Tensor& v) { return log_softmax(v, axis); }});
  }
  for (const Case& c : cases) {
    CAPTURE(c.name);
    check_gradient([&](const std::vector<Tensor>& a) { return weighted_sum(c.f(a[0]), 5); }, {x}, c.name);
    const Tensor u = randn({2, 3, 4}, 43);
    const auto j = jvp([&](const Tensor& v) { return c.f(v); }, {x}, {u});
    const double h = 1e-6;
    test::check_close(j.tangent, (c.f(x + u * h) - c.f(x - u * h)) / (2 * h), 1e-6, 1e-7, c.name + " jvp");
  }
  // Shapes and values.
  const Tensor m = tensor({1, 5, 2, 4, 3, 6}, {2, 3});
  CHECK(sum(m, 0).values() == std::vector<double>{5, 8, 8});
  CHECK(sum(m, -1, true).shape() == Shape{2, 1});
  CHECK(mean(m, 1).values() == std::vector<double>{8.0 / 3, 13.0 / 3});
  CHECK(prod(m, std::vector<int64_t>{0, 1}).item() == 720);
  CHECK(max(m, 1).values() == std::vector<double>{5, 6});
  CHECK(min(m, 0, true).values() == std::vector<double>{1, 3, 2});
  CHECK(argmax(m, 1).values() == std::vector<double>{1, 2});
  CHECK(argmin(m).item() == 0);
  CHECK(argmax(m).dtype() == DType::i64);
  CHECK(argmax(tensor({1.0, 3.0, 3.0})).item() == 1);  // the first of ties
  CHECK(argmax(tensor({1.0, std::nan(""), 3.0})).item() == 1);
  CHECK_THROWS_WITH_AS(sum(m, 2), doctest::Contains("sum: axis 2 is out of range for f64[2,3]"), Error);
  CHECK_THROWS_WITH_AS(sum(m, std::vector<int64_t>{1, -1}), doctest::Contains("sum: axes [1,-1]: axis -1 is given twice for f64[2,3]"), Error);
  CHECK_THROWS_WITH_AS(max(zeros({0})), doctest::Contains("max: a reduction over no elements"), Error);
  CHECK(prod(zeros({0})).item() == 1);
}

TEST_CASE("prod at zeros, max and min at ties, logsumexp at extremes: the conventions") {
  // prod: with one zero the gradient there is the product of the rest; with two, 0.
  CHECK(grad([](const Tensor& v) { return prod(v); }, tensor({2.0, 0.0, 3.0})).grads[0].values() ==
        std::vector<double>{0, 6, 0});
  CHECK(grad([](const Tensor& v) { return prod(v); }, tensor({0.0, 5.0, 0.0})).grads[0].values() ==
        std::vector<double>{0, 0, 0});
  CHECK(grad([](const Tensor& v) { return prod(v); }, tensor({2.0, 4.0, 3.0})).grads[0].values() ==
        std::vector<double>{12, 6, 8});
  CHECK(jvp([](const Tensor& v) { return prod(v); }, {tensor({2.0, 0.0, 3.0})}, {tensor({1.0, 1.0, 1.0})}).tangent.item() == 6);
  // max: ties share the gradient evenly.
  CHECK(grad([](const Tensor& v) { return max(v); }, tensor({3.0, 1.0, 3.0})).grads[0].values() ==
        std::vector<double>{0.5, 0, 0.5});
  CHECK(grad([](const Tensor& v) { return sum(min(v, 1)); }, tensor({1.0, 1.0, 2.0, 0.0}, {2, 2})).grads[0].values() ==
        std::vector<double>{0.5, 0.5, 0, 1});
  // logsumexp is stable: large values, all -inf, +inf.
  const double inf = std::numeric_limits<double>::infinity();
  const auto g = grad([](const Tensor& v) { return logsumexp(v); }, tensor({1000.0, 1000.0}));
  CHECK(g.value.item() == doctest::Approx(1000 + std::log(2.0)).epsilon(1e-15));
  CHECK(g.grads[0].values() == std::vector<double>{0.5, 0.5});
  CHECK(logsumexp(tensor({-inf, -inf})).item() == -inf);
  CHECK(logsumexp(tensor({inf, 0.0})).item() == inf);
  const Tensor big = tensor({1000.0, 0.0, -1000.0}, {1, 3}, DType::f32);
  const auto sm = softmax(big).values();
  CHECK(sm[0] == 1.0);
  CHECK(sm[1] == 0.0);
  CHECK(log_softmax(big).values()[2] == -2000.0);
  // Tracker's f(x) = sum(abs2, x) + prod(x[2:end]) at [1, 2, 3], with the slice written out.
  const auto t = grad([](const Tensor& v) { return sum(square(v)) + prod(v * tensor({0.0, 1.0, 1.0}) + tensor({1.0, 0.0, 0.0})); },
                      tensor({1.0, 2.0, 3.0}));
  CHECK(t.value.item() == 20);
  CHECK(t.grads[0].values() == std::vector<double>{2, 7, 8});
}

TEST_CASE("indexing and layout: values, gradients both ways, interpreted and compiled") {
  // Tracker's example, now as written: sum(abs2, x) + prod(x[2:end]).
  const auto tr = grad([](const Tensor& v) { return sum(square(v)) + prod(slice(v, 1, 3)); }, tensor({1.0, 2.0, 3.0}));
  CHECK(tr.value.item() == 20);
  CHECK(tr.grads[0].values() == std::vector<double>{2, 7, 8});

  const Tensor x = randn({3, 4, 5}, 51);
  const Tensor idx = tensor({2, 0, 2, 3}, {2, 2}, DType::i64);  // duplicates accumulate in the gradient
  const Tensor vals = randn({3, 2, 2, 5}, 52);
  struct Case {
    const char* name;
    std::function<Tensor(const std::vector<Tensor>&)> f;
    std::vector<Tensor> args;
  };
  const std::vector<Case> cases = {
      {"slice axis 1 step 2", [](const std::vector<Tensor>& a) { return slice(a[0], 1, 0, 4, 2); }, {x}},
      {"slice negative bounds", [](const std::vector<Tensor>& a) { return slice(a[0], -1, -3, 100); }, {x}},
      {"slice first axis", [](const std::vector<Tensor>& a) { return slice(a[0], 1, 3); }, {x}},
      {"index", [](const std::vector<Tensor>& a) { return index(a[0], -1, 2); }, {x}},
      {"gather axis 1", [&](const std::vector<Tensor>& a) { return gather(a[0], idx, 1); }, {x}},
      {"gather axis -1", [&](const std::vector<Tensor>& a) { return gather(a[0], idx, -1); }, {x}},
      {"take", [&](const std::vector<Tensor>& a) { return take(a[0], idx); }, {x}},
      {"scatter_add", [&](const std::vector<Tensor>& a) { return scatter_add(a[0], idx, a[1], 1); }, {x, vals}},
      {"index_update", [](const std::vector<Tensor>& a) {
         return index_update(a[0], tensor({3, 0}, {2}, DType::i64), a[1], 1); }, {x, randn({3, 2, 5}, 53)}},
      {"index_update slice", [](const std::vector<Tensor>& a) { return index_update(a[0], 2, 1, 3, a[1]); },
       {x, randn({3, 4, 2}, 54)}},
      {"concat", [](const std::vector<Tensor>& a) { return concat({a[0], a[1] * 2.0, a[0]}, 1); }, {x, randn({3, 2, 5}, 55)}},
      {"stack", [](const std::vector<Tensor>& a) { return stack({a[0], sin(a[0])}, -1); }, {x}},
      {"permute", [](const std::vector<Tensor>& a) { return permute(a[0], {2, 0, 1}); }, {x}},
      {"transpose rank 3", [](const std::vector<Tensor>& a) { return transpose(a[0]); }, {x}},
      {"squeeze expand_dims", [](const std::vector<Tensor>& a) { return squeeze(expand_dims(a[0], 1), -3); }, {x}},
      {"tril triu", [](const std::vector<Tensor>& a) { return tril(a[0], 1) + triu(a[0], -1); }, {x}},
      {"tril_from_vector", [](const std::vector<Tensor>& a) { return tril_from_vector(a[0], 4); }, {randn({10}, 56)}},
      {"tril_from_vector strict column-major", [](const std::vector<Tensor>& a) { return tril_from_vector(a[0], 4, -1, true); },
       {randn({6}, 57)}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    check_gradient([&](const std::vector<Tensor>& a) { return weighted_sum(c.f(a), 7); }, c.args, c.name);
    std::vector<Tensor> tangents, plus = c.args, minus = c.args;
    const double h = 1e-6;
    for (std::size_t i = 0; i < c.args.size(); ++i) {
      tangents.push_back(randn(c.args[i].shape(), 60 + i));
      plus[i] = c.args[i] + tangents[i] * h;
      minus[i] = c.args[i] - tangents[i] * h;
    }
    std::vector<Tensor> jargs = c.args;
    jargs.insert(jargs.end(), tangents.begin(), tangents.end());
    const auto j = test::run_checked(jvp_tape(test::trace_list(c.f, c.args)), jargs);
    test::check_close(j[1], (c.f(plus) - c.f(minus)) / (2 * h), 1e-6, 1e-7, std::string(c.name) + " jvp");
  }
  // Values.
  const Tensor m = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(slice(m, 1, 1, 3).values() == std::vector<double>{2, 3, 5, 6});
  CHECK(index(m, 1).values() == std::vector<double>{4, 5, 6});
  CHECK(gather(m, tensor({2, 2, 0}, {3}, DType::i64), 1).values() == std::vector<double>{3, 3, 1, 6, 6, 4});
  CHECK(take(m, tensor({5, 0}, {2}, DType::i64)).values() == std::vector<double>{6, 1});
  CHECK(scatter_add(zeros({3}), tensor({1, 1, 2}, {3}, DType::i64), tensor({1.0, 2.0, 3.0})).values() ==
        std::vector<double>{0, 3, 3});
  CHECK(index_update(m, 1, 0, 2, zeros({2, 2})).values() == std::vector<double>{0, 0, 3, 0, 0, 6});
  CHECK(concat({m, m}, 0).shape() == Shape{4, 3});
  CHECK(stack({m, m}).shape() == Shape{2, 2, 3});
  CHECK(permute(m, {1, 0}).values() == transpose(m).values());
  CHECK(tril(tensor({1, 2, 3, 4}, {2, 2})).values() == std::vector<double>{1, 0, 3, 4});
  CHECK(tril_from_vector(tensor({1, 2, 3}), 2).values() == std::vector<double>{1, 0, 2, 3});
  CHECK(tril_from_vector(tensor({1, 2, 3, 4, 5, 6}), 3, 0, true).values() == std::vector<double>{1, 0, 0, 2, 4, 0, 3, 5, 6});
  CHECK(tril_from_vector(tensor({7, 8, 9}), 3, -1).values() == std::vector<double>{0, 0, 0, 7, 0, 0, 8, 9, 0});
  // The gradient of a gather with duplicate indices accumulates.
  CHECK(grad([](const Tensor& v) { return sum(gather(v, tensor({0, 0, 2}, {3}, DType::i64))); }, tensor({1.0, 2.0, 3.0}))
            .grads[0].values() == std::vector<double>{2, 0, 1});
  // Errors.
  CHECK_THROWS_WITH_AS(gather(m, tensor({3}, {1}, DType::i64), 1),
                       doctest::Contains("gather: index 3 (element 0 of the indices) is out of range for axis 1 of length 3"), Error);
  CHECK_THROWS_WITH_AS(gather(m, tensor({1.0}), 1), doctest::Contains("gather: expected i64 indices for argument 2"), Error);
  CHECK_THROWS_WITH_AS(index_update(m, tensor({1, 1}, {2}, DType::i64), zeros({2, 2}), 1),
                       doctest::Contains("index 1 appears twice"), Error);
  CHECK_THROWS_WITH_AS(concat({m, zeros({2, 2})}, 0), doctest::Contains("concat: argument 2 is f64[2,2]"), Error);
  CHECK_THROWS_WITH_AS(permute(m, {0, 0}), doctest::Contains("permute: expected a permutation of 0..1"), Error);
  CHECK_THROWS_WITH_AS(slice(m, 0, 0, 1, 0), doctest::Contains("slice: expected a step >= 1, got 0"), Error);
  CHECK_THROWS_WITH_AS(squeeze(m, 0), doctest::Contains("squeeze: axis 0 of f64[2,3] has length 2"), Error);
  CHECK_THROWS_WITH_AS(tril_from_vector(tensor({1, 2}), 2), doctest::Contains("needs a vector of 3 entries"), Error);
  CHECK_THROWS_WITH_AS(index(m, 2), doctest::Contains("index: index 2 is out of range"), Error);
}

TEST_CASE("matmul in every NumPy case, dot and outer: values, gradients both ways, compiled") {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 4}, {4, 2}}, {{3, 4}, {4}}, {{4}, {4, 2}}, {{4}, {4}}, {{2, 3, 4}, {2, 4, 5}},
      {{2, 3, 4}, {4, 5}}, {{3, 4}, {2, 4, 5}}, {{2, 1, 3, 4}, {5, 4, 2}}, {{2, 3, 4}, {4}}, {{4}, {2, 4, 3}}};
  for (const auto& [sa, sb] : shapes) {
    const std::string what = fmt::format("{} x {}", shape_str(sa), shape_str(sb));
    CAPTURE(what);
    const Tensor a = randn(sa, 71), b = randn(sb, 72);
    const Fn f = [](const std::vector<Tensor>& v) { return matmul(v[0], v[1]); };
    check_gradient([&](const std::vector<Tensor>& v) { return weighted_sum(f(v), 9); }, {a, b}, what);
    const Tensor ta = randn(sa, 73), tb = randn(sb, 74);
    const auto j = test::run_checked(jvp_tape(test::trace_list(f, {a, b})), {a, b, ta, tb});
    const double h = 1e-6;
    test::check_close(j[1], (f({a + ta * h, b + tb * h}) - f({a - ta * h, b - tb * h})) / (2 * h), 1e-6, 1e-7, what + " jvp");
  }
  // Values against loops.
  const Tensor a = tensor({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}), b = tensor({1, 0, 0, 2}, {2, 2});
  CHECK(matmul(a, b).values() == std::vector<double>{1, 4, 3, 8, 5, 12, 7, 16});
  CHECK(dot(tensor({1.0, 2.0, 3.0}), tensor({4.0, 5.0, 6.0})).item() == 32);
  CHECK(outer(tensor({1.0, 2.0}), tensor({3.0, 4.0, 5.0})).values() == std::vector<double>{3, 4, 5, 6, 8, 10});
  CHECK(matmul(tensor({1.0, 1.0}), b).values() == std::vector<double>{1, 2});
  CHECK_THROWS_WITH_AS(matmul(a, zeros({3, 2})), doctest::Contains("matmul: expected shapes [...,m,k] (or [k]) and [...,k,n] (or [k]) with the same k, got f64[2,2,2] and f64[3,2]"), Error);
  CHECK_THROWS_WITH_AS(matmul(zeros({2, 2, 2}), zeros({3, 2, 2})),
                       doctest::Contains("matmul: the batch dimensions [2] of f64[2,2,2] and [3] of f64[3,2,2] do not broadcast"),
                       Error);
  CHECK_THROWS_WITH_AS(dot(a, b), doctest::Contains("dot: expected two vectors"), Error);
}

namespace {
// conv2d by its definition, for checking values.
std::vector<double> naive_conv(const Tensor& x, const Tensor& w, int64_t s, int64_t p, int64_t d) {
  const auto xv = x.values(), wv = w.values();
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t O = w.shape()[0], KH = w.shape()[2], KW = w.shape()[3];
  const int64_t OH = (H + 2 * p - d * (KH - 1) - 1) / s + 1, OW = (W + 2 * p - d * (KW - 1) - 1) / s + 1;
  std::vector<double> y;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double acc = 0;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t u = 0; u < KH; ++u)
              for (int64_t v = 0; v < KW; ++v) {
                const int64_t yy = i * s - p + u * d, xx = j * s - p + v * d;
                if (yy >= 0 && yy < H && xx >= 0 && xx < W)
                  acc += xv[static_cast<std::size_t>(((n * C + c) * H + yy) * W + xx)] *
                         wv[static_cast<std::size_t>(((o * C + c) * KH + u) * KW + v)];
              }
          y.push_back(acc);
        }
  return y;
}
}  // namespace

TEST_CASE("convolution's gradients are its adjoints, images on the thread pool and one after another") {
  // <conv(x, w), r> is linear in x and in w: its gradients dx, dw satisfy
  // <dx, u> = <conv(u, w), r> and <dw, v> = <conv(x, v), r>. Small products run each
  // image on the pool; [2,16,40,40] * [32,16,3,3] (7.4M multiply-adds per image) runs the
  // images in order, each gemm cut into blocks on the pool. Both agree with the
  // definition, and give the same bits on one thread and on two.
  struct Case {
    Shape x, w;
    int64_t s, p, d;
  };
  for (const Case& c : {Case{{5, 3, 9, 8}, {4, 3, 3, 2}, 1, 1, 1}, Case{{3, 2, 11, 7}, {3, 2, 2, 3}, 2, 2, 2},
                        Case{{2, 16, 40, 40}, {32, 16, 3, 3}, 1, 1, 1}, Case{{2, 16, 33, 35}, {32, 16, 3, 3}, 2, 0, 1}}) {
    const std::string what = fmt::format("x {} w {} stride {} padding {} dilation {}", shape_str(c.x), shape_str(c.w), c.s, c.p, c.d);
    CAPTURE(what);
    const Conv2dOptions o{.stride = {c.s, c.s}, .padding = {c.p, c.p}, .dilation = {c.d, c.d}};
    const Tensor x = randn(c.x, 91), w = randn(c.w, 92), u = randn(c.x, 93), v = randn(c.w, 94);
    const Tensor y = conv2d(x, w, o);
    test::check_close(y, tensor(naive_conv(x, w, c.s, c.p, c.d), y.shape()), 1e-12, 1e-11, what + ": values");
    const Tensor r = randn(y.shape(), 95);
    auto loss = [&](const Tensor& a, const Tensor& b) { return sum(conv2d(a, b, o) * r); };
    for (int threads : {2, 1}) {
      set_num_threads(threads);
      const auto g = grad(loss, x, w);
      const double lhs_x = sum(g.grads[0] * u).item(), rhs_x = sum(conv2d(u, w, o) * r).item();
      const double lhs_w = sum(g.grads[1] * v).item(), rhs_w = sum(conv2d(x, v, o) * r).item();
      CHECK_MESSAGE(std::abs(lhs_x - rhs_x) <= 1e-10 * (1 + std::abs(rhs_x)), what, ": <dx, u> ", lhs_x, " vs ", rhs_x);
      CHECK_MESSAGE(std::abs(lhs_w - rhs_w) <= 1e-10 * (1 + std::abs(rhs_w)), what, ": <dw, v> ", lhs_w, " vs ", rhs_w);
    }
    set_num_threads(0);
    const Tape gt = grad_tape(trace(loss, x, w));
    const CompiledFunction f = compile(gt);
    set_num_threads(1);
    const auto one = f({x, w});
    set_num_threads(2);
    const auto two = f({x, w});
    set_num_threads(0);
    for (std::size_t k = 0; k < one.size(); ++k) test::check_same_bits(two[k], one[k], fmt::format("{}: output {}", what, k));
  }
}

TEST_CASE("convolution and pooling: values, gradients both ways and second derivatives, compiled") {
  const Tensor x = randn({2, 3, 7, 6}, 81), w = randn({4, 3, 3, 2}, 82);
  for (const auto& [s, p, d] : std::vector<std::array<int64_t, 3>>{{1, 0, 1}, {1, 1, 1}, {2, 1, 1}, {1, 2, 2}, {3, 0, 1}}) {
    const std::string what = fmt::format("conv2d stride {} padding {} dilation {}", s, p, d);
    CAPTURE(what);
    const Conv2dOptions o{.stride = {s, s}, .padding = {p, p}, .dilation = {d, d}};
    const Tensor y = conv2d(x, w, o);
    test::check_close(y, tensor(naive_conv(x, w, s, p, d), y.shape()), 1e-12, 1e-12, what);
    const Fn f = [o](const std::vector<Tensor>& a) { return conv2d(a[0], a[1], o); };
    check_gradient([&](const std::vector<Tensor>& a) { return weighted_sum(f(a), 3); }, {x, w}, what);
    const Tensor tx = randn(x.shape(), 83), tw = randn(w.shape(), 84);
    const auto j = test::run_checked(jvp_tape(test::trace_list(f, {x, w})), {x, w, tx, tw});
    const double h = 1e-6;
    test::check_close(j[1], (f({x + tx * h, w + tw * h}) - f({x - tx * h, w - tw * h})) / (2 * h), 1e-6, 1e-7, what + " jvp");
    // Second derivatives: the gradient's own gradient, through data_grad and filter_grad.
    const Fn gsum = [o](const std::vector<Tensor>& a) {
      const auto g = grad([o](const Tensor& xx, const Tensor& ww) { return sum(square(conv2d(xx, ww, o))); }, a[0], a[1]);
      return sum(sin(g.grads[0])) + sum(sin(g.grads[1]));
    };
    check_gradient(gsum, {x, w}, what + " second derivative", 1e-5, 1e-6);
  }
  // conv1d through conv2d.
  const Tensor x1 = randn({2, 3, 9}, 85), w1 = randn({2, 3, 4}, 86);
  check_gradient([](const std::vector<Tensor>& a) { return weighted_sum(conv1d(a[0], a[1], {.stride = 2, .padding = 1}), 4); },
                 {x1, w1}, "conv1d");
  CHECK(conv1d(x1, w1, {.padding = 1, .dilation = 2}).shape() == Shape{2, 2, 5});
  // Pooling.
  const Tensor px = randn({2, 3, 6, 5}, 87);
  for (const auto& [k, s, p] : std::vector<std::array<int64_t, 3>>{{2, 2, 0}, {3, 1, 1}, {3, 2, 1}}) {
    const std::string what = fmt::format("pool kernel {} stride {} padding {}", k, s, p);
    CAPTURE(what);
    const Pool2dOptions o{.stride = {s, s}, .padding = {p, p}};
    for (bool use_max : {true, false}) {
      const Fn f = [=](const std::vector<Tensor>& a) { return use_max ? max_pool2d(a[0], {k, k}, o) : avg_pool2d(a[0], {k, k}, o); };
      check_gradient([&](const std::vector<Tensor>& a) { return weighted_sum(f(a), 5); }, {px}, what);
      const Tensor t = randn(px.shape(), 88);
      const auto j = test::run_checked(jvp_tape(test::trace_list(f, {px})), {px, t});
      const double h = 1e-6;
      test::check_close(j[1], (f({px + t * h}) - f({px - t * h})) / (2 * h), 1e-6, 1e-7, what + " jvp");
    }
  }
  const Tensor img = tensor({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {1, 1, 4, 4});
  CHECK(max_pool2d(img, {2, 2}).values() == std::vector<double>{6, 8, 14, 16});
  CHECK(avg_pool2d(img, {2, 2}).values() == std::vector<double>{3.5, 5.5, 11.5, 13.5});
  CHECK(max_pool2d(img, {3, 3}, {.stride = {1, 1}, .padding = {1, 1}}).values()[0] == 6);
  // Ties: the first maximum of the window gets the gradient.
  CHECK(grad([](const Tensor& v) { return sum(max_pool2d(v, {2, 2})); }, ones({1, 1, 2, 2})).grads[0].values() ==
        std::vector<double>{1, 0, 0, 0});
  CHECK_THROWS_WITH_AS(conv2d(x, randn({4, 2, 3, 3}, 1)), doctest::Contains("conv2d: expected weights [O,3,KH,KW]"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, randn({4, 3, 9, 3}, 1)), doctest::Contains("does not fit the padded input 7x6"), Error);
  CHECK_THROWS_WITH_AS(max_pool2d(px, {2, 2}, {.padding = {2, 2}}), doctest::Contains("more than half the window"), Error);
  CHECK_THROWS_WITH_AS(conv2d(zeros({3, 4}), w), doctest::Contains("conv2d: expected an input [N,C,H,W], got [3,4]"), Error);
}

TEST_CASE("a small CNN trains on synthetic data, its gradient checked against finite differences") {
  // conv2d -> relu -> max_pool2d -> matmul -> log_softmax, cross-entropy; two classes
  // told apart by where a bright square sits in an 8x8 image.
  const int64_t n = 16;
  std::vector<double> images(static_cast<std::size_t>(n * 64), 0.0), onehot(static_cast<std::size_t>(n * 2), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t cls = i % 2, r0 = cls ? 5 : 1, c0 = (i / 2) % 4;
    for (int64_t r = r0; r < r0 + 2; ++r)
      for (int64_t c = c0; c < c0 + 2; ++c) images[static_cast<std::size_t>(i * 64 + r * 8 + c)] = 1.0;
    onehot[static_cast<std::size_t>(i * 2 + cls)] = 1.0;
  }
  const Tensor x = tensor(images, {n, 1, 8, 8}) + randn({n, 1, 8, 8}, 91) * 0.05;
  const Tensor y = tensor(onehot, {n, 2});
  auto loss = [&](const Tensor& w1, const Tensor& b1, const Tensor& w2) {
    const Tensor h = max_pool2d(relu(conv2d(x, w1, {.padding = {1, 1}}) + b1), {2, 2});  // [n,4,4,4]
    const Tensor logits = matmul(reshape(h, {n, 64}), w2);                                 // [n,2]
    return -sum(log_softmax(logits, 1) * y) / static_cast<double>(n);
  };
  Tensor w1 = randn({4, 1, 3, 3}, 92) * 0.5, b1 = zeros({1, 4, 1, 1}), w2 = randn({64, 2}, 93) * 0.1;
  // The compiled gradient agrees with finite differences at the start.
  auto g = simplegrad(loss, w1, b1, w2);
  const auto first = g(w1, b1, w2);
  const auto fd = test::finite_diff([&](const std::vector<Tensor>& a) { return loss(a[0], a[1], a[2]); }, {w1, b1, w2});
  for (int k = 0; k < 3; ++k) test::check_close(first[1 + k], fd[k], 1e-5, 1e-7, fmt::format("CNN gradient {}", k));
  const double initial = first[0].item();
  double last = initial;
  for (int step = 0; step < 60; ++step) {
    const auto r = g(w1, b1, w2);
    last = r[0].item();
    w1 = w1 - r[1] * 0.5;
    b1 = b1 - r[2] * 0.5;
    w2 = w2 - r[3] * 0.5;
  }
  MESSAGE("CNN loss ", initial, " -> ", last);
  CHECK(last < 0.5 * initial);
  CHECK(last < 0.2);
}

TEST_CASE("review fixes: prod's second derivatives at zeros, huge steps, pooling strides, window overflow, tril of inf") {
  // Hessian-vector products of prod at points with zero, one and two zeros.
  const auto hess = [](const std::vector<double>& p) {  // exact Hessian of x0 x1 x2
    return std::vector<std::vector<double>>{{0, p[2], p[1]}, {p[2], 0, p[0]}, {p[1], p[0], 0}};
  };
  for (const std::vector<double>& p : {std::vector<double>{0, 2, 3}, {0, 0, 3}, {2, 0, 0}, {1, 2, 3}, {0, 0, 0}}) {
    CAPTURE(fmt::format("{}", fmt::join(p, ",")));
    for (int k = 0; k < 3; ++k) {
      std::vector<double> e(3, 0.0);
      e[static_cast<std::size_t>(k)] = 1.0;
      const auto h = hvp([](const Tensor& v) { return prod(v); }, {tensor(p)}, {tensor(e)});
      std::vector<double> want;
      for (int i = 0; i < 3; ++i) want.push_back(hess(p)[static_cast<std::size_t>(i)][static_cast<std::size_t>(k)]);
      CHECK(h.hvp[0].values() == want);
      // Reverse over reverse agrees.
      const auto g2 = grad([k](const Tensor& v) {
        return index(grad([](const Tensor& u) { return prod(u); }, v).grads[0], k);
      }, tensor(p));
      CHECK(g2.grads[0].values() == want);
    }
  }
  // Huge steps: no overflow, an error or the right count.
  CHECK_THROWS_WITH_AS(play(parse_tape("inp %1::f64[3]\n%2 = unslice(%1, axis=0, start=0, step=4611686018444165120, size=5)::f64[5]\nout %2"),
                            {zeros({3})}),
                       doctest::Contains("unslice: 3 elements from 0 by 4611686018444165120 do not fit in 5"), Error);
  CHECK(slice(tensor({1.0, 2.0, 3.0, 4.0, 5.0}), 0, 0, 5, INT64_MAX).values() == std::vector<double>{1});
  // Pooling strides are validated, not taken for "unset".
  CHECK_THROWS_WITH_AS(parse_tape("inp %1::f64[1,1,6,6]\n%2 = max_pool2d(%1, kernel=[2,2], stride=[-1,5])::f64[1,1,3,1]\nout %2"),
                       doctest::Contains("stride >= 1"), Error);
  // Window arithmetic that overflows is an error naming the operation.
  CHECK_THROWS_WITH_AS(conv2d(zeros({1, 1, 3, 3}), zeros({1, 1, 3, 3}), {.dilation = {int64_t{1} << 62, 1}}),
                       doctest::Contains("conv2d: the window arithmetic overflows"), Error);
  CHECK_THROWS_WITH_AS(conv2d(zeros({0, 1, 3, 3}), zeros({1, 1, 3, 3}), {.padding = {int64_t{1} << 40, int64_t{1} << 40}}),
                       doctest::Contains("conv2d"), Error);
  // tril/triu give 0 outside the triangle, also where x is inf or NaN.
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(tril(tensor({1, inf, 2, 3}, {2, 2})).values() == std::vector<double>{1, 0, 2, 3});
  // cast reaches -2^63; clamp refuses NaN bounds; logsumexp over no axes reduces none, like sum.
  CHECK(cast(tensor({-9223372036854775808.0}), DType::i64).data<int64_t>()[0] == INT64_MIN);
  CHECK_THROWS_WITH_AS(clamp(zeros({2}), std::nan(""), 1.0), doctest::Contains("clamp: expected lo <= hi"), Error);
  CHECK(logsumexp(tensor({1.0, 2.0}), std::vector<int64_t>{}).values() == std::vector<double>{1, 2});
  CHECK_THROWS_WITH_AS(permute(scalar(1.0), {0}), doctest::Contains("permute: expected an empty permutation"), Error);
}
