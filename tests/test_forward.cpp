// Forward mode: jvp tapes against closed forms, finite differences and reverse mode;
// Hessian-vector products (forward over reverse).
#include <cmath>

#include "test_util.hpp"

using namespace reel;

TEST_CASE("jvp: closed forms, compiled, and text round trip") {
  const Tensor x = tensor({0.5, -1.0, 2.0}), u = tensor({1.0, 2.0, -3.0});
  // d/dt sum(x*x)(x + t u) = 2 x . u = 1 - 4 - 12 = -15.
  const auto r = jvp([](const Tensor& v) { return sum(v * v); }, {x}, {u});
  CHECK(r.value.item() == doctest::Approx(5.25));
  CHECK(r.tangent.item() == doctest::Approx(-15));
  // Elementwise: tangent of sin(x) is cos(x) u.
  const auto s = jvp([](const Tensor& v) { return sin(v); }, {x}, {u});
  for (int i = 0; i < 3; ++i)
    CHECK(s.tangent.values()[i] == doctest::Approx(std::cos(x.values()[i]) * u.values()[i]));
  // Two arguments, broadcasting and a matmul: d(W x + b) = dW x + W dx + db.
  const Tensor W = randn({2, 3}, 1), b = randn({2}, 2), dW = randn({2, 3}, 3), db = randn({2}, 4);
  const auto m = jvp([](const Tensor& w, const Tensor& v, const Tensor& c) { return matmul(w, v) + c; },
                     {W, x, b}, {dW, u, db});
  const Tensor expected = matmul(dW, x) + matmul(W, u) + db;
  test::check_close(m.tangent, expected, 1e-12, 1e-12, "jvp of W x + b");
  // The forward-mode tape is an ordinary tape: it prints, parses and compiles.
  const Tape jt = jvp_tape(trace([](const Tensor& w, const Tensor& v) { return tanh(matmul(w, v)); }, W, x));
  test::run_checked(jt, {W, x, dW, u});
}

TEST_CASE("jvp of every primitive matches finite differences") {
  const Tensor x = randn({3, 4}, 5), px = rand({3, 4}, 6) + 0.5, u = randn({3, 4}, 7), y = randn({4}, 8);
  const std::vector<std::pair<const char*, test::Fn>> cases = {
      {"neg", [](const std::vector<Tensor>& a) { return neg(a[0]); }},
      {"exp", [](const std::vector<Tensor>& a) { return exp(a[0]); }},
      {"log", [](const std::vector<Tensor>& a) { return log(a[0] + 3.0); }},
      {"sin cos", [](const std::vector<Tensor>& a) { return sin(a[0]) * cos(a[0]); }},
      {"tanh sigmoid", [](const std::vector<Tensor>& a) { return tanh(a[0]) + sigmoid(a[0]); }},
      {"sqrt square", [](const std::vector<Tensor>& a) { return sqrt(square(a[0]) + 1.0); }},
      {"pow", [](const std::vector<Tensor>& a) { return pow(a[0] * a[0] + 1.0, 1.5); }},
      {"div sub", [&](const std::vector<Tensor>& a) { return (a[0] - y) / (square(y) + 1.0) + y / (square(a[0]) + 2.0); }},
      {"broadcast mul add", [&](const std::vector<Tensor>& a) { return a[0] * y + y; }},
      {"sum mean", [](const std::vector<Tensor>& a) { return sum(a[0], 1) * mean(a[0]) + sum(a[0]); }},
      {"sum_to", [](const std::vector<Tensor>& a) { return sum_to(a[0], {1, 4}) * sum(a[0]); }},
      {"shape ops", [](const std::vector<Tensor>& a) { return matmul(transpose(a[0]), reshape(a[0], {3, 4})) + broadcast_to(sum_to(a[0], {1, 4}), {4, 4}); }},
  };
  for (const auto& [name, fn] : cases) {
    CAPTURE(name);
    const Tape t = test::trace_list(fn, {x});
    const Tape jt = jvp_tape(t);
    const auto out = test::run_checked(jt, {x, u});
    const double h = 1e-6;
    const Tensor plus = fn({x + u * h}), minus = fn({x - u * h});
    const Tensor fd = (plus - minus) / (2 * h);
    test::check_close(out[1], fd, 1e-6, 1e-6, std::string("jvp vs finite differences: ") + name);
  }
  // No tangent flows through nodiff (finite differences would see through it).
  const auto nd = jvp([](const Tensor& a) { return a * nodiff(a); }, {x}, {u});
  test::check_close(nd.tangent, x * u, 1e-15, 0, "jvp of x * nodiff(x)");
}

TEST_CASE("jvp checks its tangents and names a primitive without a forward rule") {
  CHECK_THROWS_WITH_AS(jvp([](const Tensor& v) { return exp(v); }, {zeros({3})}, {zeros({4})}),
                       doctest::Contains("tangent 1"), Error);
  CHECK_THROWS_WITH_AS(jvp([](const Tensor& v) { return exp(v); }, {zeros({3})}, {zeros({3}, DType::f32)}),
                       doctest::Contains("f64[3]"), Error);
  Primitive opaque;
  opaque.name = "opaque";
  opaque.arity = 1;
  opaque.infer = [](std::span<const VarType> in, const Attrs&) { return in[0]; };
  const Tape t = test::tape_calling(opaque);
  CHECK_THROWS_WITH_AS(jvp_tape(t), doctest::Contains("opaque"), Error);
}

TEST_CASE("hvp: Hessian-vector products, forward over reverse") {
  // f = sum(x^3): H = diag(6x), so H v = 6 x v.
  const Tensor x = tensor({1.0, -2.0, 0.5}), v = tensor({0.5, 1.0, 2.0});
  const auto r = hvp([](const Tensor& a) { return sum(a * a * a); }, {x}, {v});
  CHECK(r.value.item() == doctest::Approx(1 - 8 + 0.125));
  CHECK(r.grads[0].values() == std::vector<double>{3, 12, 0.75});
  CHECK(r.hvp[0].values() == std::vector<double>{3, -12, 6});
  // f = sum(x * y): H = [[0, I], [I, 0]], so H (vx, vy) = (vy, vx).
  const Tensor y = tensor({3.0, 4.0, 5.0}), vy = tensor({-1.0, 0.0, 1.0});
  const auto p = hvp([](const Tensor& a, const Tensor& b) { return sum(a * b); }, {x, y}, {v, vy});
  CHECK(p.hvp[0].values() == vy.values());
  CHECK(p.hvp[1].values() == v.values());
  // Against finite differences of the gradient, for a function with a closure.
  const Tensor c = randn({3}, 9);
  auto f = [&](const Tensor& a) { return sum(tanh(a * c) * sin(a)); };
  const auto q = hvp(f, {x}, {v});
  const double h = 1e-6;
  const Tensor fd = (grad(f, x + v * h).grads[0] - grad(f, x - v * h).grads[0]) / (2 * h);
  test::check_close(q.hvp[0], fd, 1e-6, 1e-7, "hvp vs finite differences of the gradient");
}
