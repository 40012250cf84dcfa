// The tracer: what becomes an input, a constant, an output; nesting.
#include "test_util.hpp"

using namespace reel;

namespace {
Tensor free_function(const Tensor& x) { return sum(exp(x)); }
struct Functor {
  double scale;
  Tensor operator()(const Tensor& x) const { return sum(x * scale); }
};
}  // namespace

TEST_CASE("trace records inputs, calls and outputs with types") {
  const Tape t = trace(free_function, tensor({1, 2, 3}));
  CHECK(to_string(t) ==
        "inp %1::f64[3]\n"
        "%2 = exp(%1)::f64[3]\n"
        "%3 = sum(%2)::f64[]\n"
        "out %3");
  test::check_round_trip(t);
}

TEST_CASE("captured tensors and plain numbers become constants") {
  const Tensor w = tensor({2, 3});
  auto f = [&](const Tensor& x, double k) { return sum(x * w + k); };
  const Tape t = trace(f, tensor({1, 1}), 5.0);
  CHECK(t.inputs().size() == 1);
  CHECK(t.count(OpKind::constant) == 2);
  CHECK(to_string(t) ==
        "inp %1::f64[2]\n"
        "%2 = const [2, 3]::f64[2]\n"
        "%3 = mul(%1, %2)::f64[2]\n"
        "%4 = const 5::f64[]\n"
        "%5 = add(%3, %4)::f64[2]\n"
        "%6 = sum(%5)::f64[]\n"
        "out %6");
  const auto out = test::run_checked(t, {tensor({10, 100})});
  CHECK(out[0].item() == 2 * 10 + 5 + 3 * 100 + 5);
}

TEST_CASE("functors, function pointers, several outputs, an input as output") {
  const Tape t1 = trace(Functor{2.0}, tensor({1, 2}));
  CHECK(test::run_checked(t1, {tensor({3, 4})})[0].item() == 14);
  const Tape t2 = trace(&free_function, scalar(0.0));
  CHECK(test::run_checked(t2, {scalar(0.0)})[0].item() == 1);
  const Tape t3 = trace([](const Tensor& x) { return std::make_tuple(sum(x), x, x * 2.0); },
                        tensor({1, 2}));
  REQUIRE(t3.outputs.size() == 3);
  const auto out = test::run_checked(t3, {tensor({5, 6})});
  CHECK(out[0].item() == 11);
  CHECK(out[1].values() == std::vector<double>{5, 6});
  CHECK(out[2].values() == std::vector<double>{10, 12});
  const Tape t4 = trace([](const Tensor& x) { return std::vector<Tensor>{x + 1.0, -x}; }, scalar(1.0));
  CHECK(test::run_checked(t4, {scalar(2.0)})[1].item() == -2);
}

TEST_CASE("values are computed while tracing, so item() works inside f") {
  double seen = 0;
  auto f = [&](const Tensor& x) {
    const Tensor s = sum(x);
    seen = s.item();
    // A branch on a value is recorded as taken.
    return s.item() > 0 ? s * 2.0 : s * -1.0;
  };
  const Tape t = trace(f, tensor({1, 2}));
  CHECK(seen == 3);
  CHECK(test::run_checked(t, {tensor({-4, 1})})[0].item() == -6);  // the traced path
}

TEST_CASE("nested traces do not corrupt each other") {
  // Tracing a function that itself traces and computes gradients.
  auto inner = [](const Tensor& x) { return sum(sin(x) * x); };
  auto outer = [&](const Tensor& x) {
    const Tape inside = trace(inner, x);  // a separate tape of its own
    CHECK(inside.size() == 4);
    const auto g = grad(inner, x);
    return sum(g.grads[0] * g.grads[0]) + g.value;
  };
  const Tensor x = tensor({0.3, -1.2, 2.0});
  const Tape t = trace(outer, x);
  CHECK(t.inputs().size() == 1);
  const auto out = test::run_checked(t, {x});
  // d/dx sum(x sin x) = sin x + x cos x
  double want = 0;
  for (double v : x.values()) want += std::pow(std::sin(v) + v * std::cos(v), 2) + v * std::sin(v);
  CHECK(out[0].item() == doctest::Approx(want).epsilon(1e-13));
  // The outer tape is a function of its input: run it at another point.
  const Tensor y = tensor({1.0, 0.5, -0.25});
  double want_y = 0;
  for (double v : y.values()) want_y += std::pow(std::sin(v) + v * std::cos(v), 2) + v * std::sin(v);
  CHECK(test::run_checked(t, {y})[0].item() == doctest::Approx(want_y).epsilon(1e-13));
}

TEST_CASE("playing a tape inside a trace records its operations") {
  const Tape square_sum = trace([](const Tensor& x) { return sum(square(x)); }, tensor({1, 2}));
  const Tape t = trace([&](const Tensor& x) { return play(square_sum, {x * 3.0})[0]; },
                       tensor({1, 2}));
  CHECK(test::run_checked(t, {tensor({1, 1})})[0].item() == 18);
}

TEST_CASE("grad of a closure over an enclosing trace's tensor keeps the dependence") {
  // h(x) = d/dy sum(y * x) = x, for any y: the inner function captures x.
  const Tensor y0 = tensor({5, 6, 7}), x0 = tensor({1, 2, 3});
  auto h = [&](const Tensor& x) { return grad([&](const Tensor& y) { return sum(y * x); }, y0).grads[0]; };
  const auto at = test::run_checked(trace(h, x0), {tensor({10, 20, 30})});
  CHECK(at[0].values() == std::vector<double>{10, 20, 30});
  CHECK(grad([&](const Tensor& x) { return sum(h(x)); }, x0).grads[0].values() ==
        std::vector<double>{1, 1, 1});
  // k(x) = d/dy sum(y*y*x) at y = x is 2x^2, so d/dx sum(k) = 4x.
  auto k = [&](const Tensor& x) {
    return grad([&](const Tensor& y) { return sum(y * y * x); }, x).grads[0];
  };
  CHECK(grad([&](const Tensor& x) { return sum(k(x)); }, x0).grads[0].values() ==
        std::vector<double>{4, 8, 12});
  // vjp too: d/dx of seed . (d/dy (y*x)) = seed.
  auto v = [&](const Tensor& x) {
    return sum(vjp([&](const Tensor& y) { return y * x; }, tensor({1, -1, 2}), y0).grads[0] * x);
  };
  CHECK(grad(v, x0).grads[0].values() == std::vector<double>{2, -4, 12});
}

TEST_CASE("a compiled function refuses tensors that are being traced") {
  const CompiledFunction f = compile(trace([](const Tensor& a) { return sum(a); }, zeros({2})));
  CHECK_THROWS_WITH_AS(trace([&](const Tensor& a) { return f({a})[0]; }, zeros({2})),
                       doctest::Contains("argument 1 is being traced"), Error);
  // A traced param too: the trace is the reason (its play would be recorded for both).
  const Tensor W = param(tensor({1, 2}));
  CHECK_THROWS_WITH_AS(trace([&](const Tensor& a) { return f({a})[0]; }, W),
                       doctest::Contains("argument 1 is being traced"), Error);
  // Outside a trace the same tensor is fine.
  CHECK(f({tensor({1, 2})})[0].item() == 3);
}

TEST_CASE("a tensor's trace tags and track node change on that copy only") {
  const Tensor W = param(tensor({1, 2}));
  (void)trace(
      [&](const Tensor& a) {
        Tensor untagged = a;
        untagged.clear_trace_tags();
        CHECK(is_traced(a));
        CHECK(!is_traced(untagged));
        const Tensor both = a * W;  // traced, and tracked for reel::back
        Tensor untracked = both;
        untracked.set_track_node(nullptr);
        CHECK(both.is_tracked());
        CHECK(!untracked.is_tracked());
        CHECK(is_traced(untracked));
        Tensor plain = both;
        plain.make_plain();
        CHECK((!is_traced(plain) && !plain.is_tracked() && is_traced(both) && both.is_tracked()));
        CHECK(plain.values() == both.values());
        return sum(both);
      },
      zeros({2}));
}

TEST_CASE("branches on values record guards: play and compiled code refuse the other path") {
  auto f = [](const Tensor& x) { return sum(x) > 0.0 ? sum(x * x) : sum(-x); };
  const Tape t = trace(f, scalar(3.0));
  const std::string text = to_string(t);
  CAPTURE(text);
  CHECK(text.find("guard(%4, expected=true)") != std::string::npos);
  CHECK(to_string(parse_tape(text)) == text);
  // The gradient tape keeps the guard (dce keeps effects), and so does every pass.
  const Tape g = grad_tape(t);
  CHECK(to_string(g).find("guard(") != std::string::npos);
  const CompiledFunction cg = compile(g);
  const auto at3 = cg({scalar(3.0)});
  CHECK(at3[0].item() == 9);
  CHECK(at3[1].item() == 6);
  // At -2 the traced path is wrong: an error naming the guard, never value 4 and gradient -4.
  CHECK_THROWS_WITH_AS(cg({scalar(-2.0)}), doctest::Contains("guard(%"), GuardFailure);
  CHECK_THROWS_WITH_AS(cg({scalar(-2.0)}), doctest::Contains("traced with this condition true, here it is false"),
                       GuardFailure);
  CHECK_THROWS_WITH_AS(play(g, {scalar(-2.0)}), doctest::Contains("play: %"), GuardFailure);
  CHECK_THROWS_AS(compile(t)({scalar(-2.0)}), Error);
  // The other path traced on its own is right there.
  const auto other = grad(f, scalar(-2.0));
  CHECK(other.value.item() == 2);
  CHECK(other.grads[0].item() == -1);
  // Conversions to bool outside tracing record nothing; a tensor of several elements is an error.
  CHECK(static_cast<bool>(scalar(0.5)));
  CHECK_FALSE(static_cast<bool>(scalar(0.0)));
  CHECK_THROWS_WITH_AS(static_cast<bool>(zeros({2})), doctest::Contains("bool: expected a tensor with one element, got f64[2]"),
                       Error);
}
