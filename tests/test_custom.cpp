// User-defined primitives with their own derivatives (define_primitive), the seeds'
// examples in C++: Tracker's minus, Zygote's add rrule, Yota's logistic @diffrule, a
// 1-D convolution whose derivative rules are two more primitives receiving `pad`.
#include <cmath>
#include <limits>

#include "test_prims.hpp"
#include "test_util.hpp"

using namespace reel;

namespace {

Tensor call2(const char* name, const Tensor& a, const Tensor& b, Attrs attrs = {}) {
  const std::vector<Tensor> args{a, b};
  return reel::apply(name, args, std::move(attrs));
}

}  // namespace

TEST_CASE("Tracker's minus with a custom gradient") {
  define_primitive({.name = "minus", .arity = 2,
                    .eager = [](std::span<const Tensor> x, const Attrs&) { return x[0] - x[1]; },
                    .vjp = [](const std::vector<Tensor>&, const Tensor&, const Tensor& dout, const Attrs&) {
                      return std::vector<Tensor>{dout, -dout};
                    }});
  const Tensor a = tensor({6, 5, 4}), b = tensor({1, 2, 3});
  auto f = [](const Tensor& x, const Tensor& y) { return sum(call2("minus", x, y)); };
  const auto g = grad(f, a, b);
  CHECK(g.grads[0].values() == std::vector<double>{1, 1, 1});
  CHECK(g.grads[1].values() == std::vector<double>{-1, -1, -1});
  const Tape t = trace(f, a, b);
  CHECK(to_string(t).find("minus(%1, %2)") != std::string::npos);
  // The eager function's own operations (a sub) are not recorded: one call only.
  CHECK(to_string(t) == "inp %1::f64[3]\ninp %2::f64[3]\n%3 = minus(%1, %2)::f64[3]\n%4 = sum(%3)::f64[]\nout %4");
  test::run_checked(t, {a, b});             // compiled (an eager call in the schedule) and text
  test::run_checked(grad_tape(t), {a, b});  // the gradient tape too
  CHECK(plan_text(t).find("call %3 = minus(%1, %2) (eager)") != std::string::npos);
  const auto sg = simplegrad(f, a, b)(b, a);
  CHECK(sg[0].item() == -9);
  CHECK(sg[2].values() == std::vector<double>{-1, -1, -1});
}

TEST_CASE("Zygote's add rrule and Yota's logistic diffrule") {
  define_primitive({.name = "my_add", .arity = 2,
                    .eager = [](std::span<const Tensor> x, const Attrs&) { return x[0] + x[1]; },
                    .vjp = [](const std::vector<Tensor>&, const Tensor&, const Tensor& dout, const Attrs&) {
                      return std::vector<Tensor>{dout, dout};
                    }});
  const Tensor x = randn({4}, 1), y = randn({4}, 2);
  const auto g = grad([](const Tensor& a, const Tensor& b) { return sum(call2("my_add", a, b) * a); }, x, y);
  test::check_close(g.grads[0], x * 2.0 + y, 1e-15, 0, "d/da sum((a+b)*a)");
  test::check_close(g.grads[1], x, 1e-15, 0, "d/db sum((a+b)*a)");

  define_primitive({.name = "logistic",
                    .eager = [](std::span<const Tensor> x, const Attrs&) { return 1.0 / (1.0 + exp(-x[0])); },
                    .vjp = [](const std::vector<Tensor>&, const Tensor& y, const Tensor& dy, const Attrs&) {
                      return std::vector<Tensor>{dy * y * (1.0 - y)};
                    },
                    .jvp = [](const std::vector<Tensor>&, const Tensor& y, const std::vector<Tensor>& t, const Attrs&) {
                      return t[0] * y * (1.0 - y);
                    }});
  auto logistic = [](const Tensor& v) { return reel::apply("logistic", std::vector<Tensor>{v}); };
  const Tensor z = randn({5}, 3);
  auto L = [&](const Tensor& v) { return sum(logistic(v)); };
  const Tape gt = grad_tape(trace(L, z));
  const auto custom = test::run_checked(gt, {z});
  const auto builtin = grad([](const Tensor& v) { return sum(sigmoid(v)); }, z);
  test::check_close(custom[1], builtin.grads[0], 1e-14, 1e-15, "logistic vs sigmoid gradient");
  test::check_close(simplegrad(L, z)(z)[1], builtin.grads[0], 1e-14, 1e-15, "compiled logistic gradient");
  // Second derivative: the gradient tape is ordinary, so it differentiates again.
  auto dL = [&](const Tensor& v) { return sum(grad(L, v).grads[0]); };
  const auto second = grad(dL, z);
  const auto fd = test::finite_diff([&](const std::vector<Tensor>& a) { return dL(a[0]); }, {z});
  test::check_close(second.grads[0], fd[0], 1e-6, 1e-7, "second derivative of logistic");
  // Its forward rule: jvp equals the built-in sigmoid's.
  const Tensor u = randn({5}, 4);
  test::check_close(jvp(logistic, {z}, {u}).tangent, jvp([](const Tensor& v) { return sigmoid(v); }, {z}, {u}).tangent,
                    1e-14, 1e-15, "jvp of logistic");
}

TEST_CASE("a custom 1-D convolution whose derivatives are custom primitives receiving pad") {
  test::register_test_primitives();
  const Tensor x = randn({7}, 5), w = randn({3}, 6);
  for (int64_t pad : {0, 1, 2}) {
    CAPTURE(pad);
    auto f = [pad](const Tensor& a, const Tensor& b) { return sum(sin(call2("conv1d", a, b, {{"pad", pad}}))); };
    const Tape t = trace(f, x, w);
    const Tape gt = grad_tape(t);
    CHECK(to_string(gt).find(fmt::format("conv1d_data_grad(")) != std::string::npos);
    CHECK(to_string(gt).find(fmt::format("pad={}", pad)) != std::string::npos);
    const auto out = test::run_checked(gt, {x, w});  // compiled, interpreted, text round trip
    const auto fd = test::finite_diff([&](const std::vector<Tensor>& a) { return f(a[0], a[1]); }, {x, w});
    test::check_close(out[1], fd[0], 1e-6, 1e-8, "d/dx");
    test::check_close(out[2], fd[1], 1e-6, 1e-8, "d/dw");
  }
}

TEST_CASE("custom primitives: missing rules, wrong gradients, names, unknown primitives in text") {
  CHECK_THROWS_WITH_AS(define_primitive({.name = "no_eager"}), doctest::Contains("no_eager"), Error);
  define_primitive({.name = "no_rule", .eager = [](std::span<const Tensor> x, const Attrs&) { return x[0] * 2.0; }});
  CHECK_THROWS_WITH_AS(define_primitive({.name = "no_rule", .eager = [](std::span<const Tensor> x, const Attrs&) { return x[0]; }}),
                       doctest::Contains("exists already"), Error);
  CHECK_THROWS_WITH_AS(define_primitive({.name = "exp", .eager = [](std::span<const Tensor> x, const Attrs&) { return x[0]; }}),
                       doctest::Contains("'exp'"), Error);
  CHECK_THROWS_WITH_AS(define_primitive({.name = "bad name", .eager = [](std::span<const Tensor> x, const Attrs&) { return x[0]; }}),
                       doctest::Contains("bad name"), Error);
  auto f = [](const Tensor& v) { return sum(reel::apply("no_rule", std::vector<Tensor>{v})); };
  CHECK(f(tensor({1, 2})).item() == 6);
  CHECK_THROWS_WITH_AS(grad(f, tensor({1, 2})), doctest::Contains("'no_rule' has no reverse-mode"), Error);
  CHECK_THROWS_WITH_AS(jvp(f, {tensor({1, 2})}, {tensor({1, 1})}), doctest::Contains("'no_rule' has no forward-mode"), Error);
  // A rule returning a gradient of the wrong shape is named.
  define_primitive({.name = "wrong_shape", .eager = [](std::span<const Tensor> x, const Attrs&) { return x[0] * 1.0; },
                    .vjp = [](const std::vector<Tensor>&, const Tensor&, const Tensor&, const Attrs&) {
                      return std::vector<Tensor>{zeros({2})};
                    }});
  CHECK_THROWS_WITH_AS(grad([](const Tensor& v) { return sum(reel::apply("wrong_shape", std::vector<Tensor>{v})); }, scalar(1.0)),
                       doctest::Contains("wrong_shape: the vjp rule returned f64[2] for argument 1, expected f64[]"), Error);
  // Text naming a primitive that is not registered.
  CHECK_THROWS_WITH_AS(parse_tape("inp %1::f64[2]\n%2 = not_registered(%1)::f64[2]\nout %2"),
                       doctest::Contains("not_registered"), Error);
  // A registered one parses.
  CHECK(to_string(parse_tape("inp %1::f64[2]\n%2 = no_rule(%1)::f64[2]\nout %2")).find("no_rule(%1)") != std::string::npos);
}

TEST_CASE("a user function recorded as one primitive, differentiated through its body") {
  define_function_primitive("softplus_sum", 2, [](const std::vector<Tensor>& a) {
    return log(1.0 + exp(a[0] * a[1])) + a[0];
  });
  auto f = [](const Tensor& x, const Tensor& y) {
    return sum(reel::apply("softplus_sum", std::vector<Tensor>{x, y}) * x);
  };
  const Tensor x = randn({4}, 11), y = randn({4}, 12);
  const Tape t = trace(f, x, y);
  CHECK(to_string(t).find("softplus_sum(%1, %2)") != std::string::npos);
  CHECK(to_string(t).find("exp(") == std::string::npos);  // recorded as one call, not traced through
  const auto out = test::run_checked(grad_tape(t), {x, y});
  const auto fd = test::finite_diff([&](const std::vector<Tensor>& a) { return f(a[0], a[1]); }, {x, y});
  test::check_close(out[1], fd[0], 1e-6, 1e-8, "d/dx");
  test::check_close(out[2], fd[1], 1e-6, 1e-8, "d/dy");
  const Tensor u = randn({4}, 13), v = randn({4}, 14);
  const auto j = jvp(f, {x, y}, {u, v});
  const double expected = sum(out[1] * u).item() + sum(out[2] * v).item();
  CHECK(j.tangent.item() == doctest::Approx(expected).epsilon(1e-10));
}

TEST_CASE("Tracker-style custom gradients: custom_vjp with a pullback") {
  auto minus = [](const Tensor& a, const Tensor& b) {
    return custom_vjp("tracker_minus", {a, b},
                      [](const std::vector<Tensor>& x) { return x[0] - x[1]; },
                      [](const std::vector<Tensor>&, const Tensor&, const Tensor& dy) {
                        return std::vector<Tensor>{dy, -dy};
                      });
  };
  const Tensor a = tensor({6, 5, 4}), b = tensor({1, 2, 3});
  CHECK(minus(a, b).values() == std::vector<double>{5, 3, 1});
  const auto g = grad([&](const Tensor& x, const Tensor& y) { return sum(minus(x, y) * minus(x, y)); }, a, b);
  CHECK(g.grads[0].values() == std::vector<double>{10, 6, 2});
  CHECK(g.grads[1].values() == std::vector<double>{-10, -6, -2});
  CHECK(to_string(trace(minus, a, b)).find("tracker_minus(%1, %2)") != std::string::npos);
}

TEST_CASE("review fixes: re-entrant compiled calls, misaligned inputs, throwing steps, impure primitives") {
  // An eager function that calls another compiled function during a compiled call
  // gets a workspace of its own (the inner call used to overwrite the outer one's).
  const CompiledFunction inner = compile(parse_tape(
      "inp %1::f64[8]\n%2 = sin(%1)::f64[8]\n%3 = reshape(%2, shape=[2,4])::f64[2,4]\n"
      "%4 = transpose(%3)::f64[4,2]\n%5 = reshape(%4, shape=[8])::f64[8]\n%6 = add(%5, %1)::f64[8]\nout %6"));
  REQUIRE(inner.workspace_bytes() > 0);
  define_primitive({.name = "via_compiled", .eager = [&inner](std::span<const Tensor> in, const Attrs&) {
                      return inner({in[0]})[0];
                    }});
  const Tape outer = parse_tape(
      "inp %1::f64[8]\n%2 = exp(%1)::f64[8]\n%3 = via_compiled(%1)::f64[8]\n%4 = mul(%3, %2)::f64[8]\nout %4");
  const Tensor x = randn({8}, 21);
  test::run_checked(outer, {x});

  // A misaligned input (a borrowed pointer 8 bytes into an aligned block) is copied.
  std::vector<double> block(24, 0.0);
  auto* base = reinterpret_cast<double*>((reinterpret_cast<std::uintptr_t>(block.data()) + 63) / 64 * 64);
  for (int i = 0; i < 8; ++i) base[1 + i] = x.values()[static_cast<std::size_t>(i)];
  const Tensor odd = Tensor::borrow(base + 1, DType::f64, {8});
  const CompiledFunction f = compile(trace([](const Tensor& v) { return exp(v) * 2.0; }, x));
  CHECK(f({odd})[0].values() == f({x})[0].values());

  // A throwing step leaves the output slots empty, not half computed.
  define_primitive({.name = "throws_on_negative", .eager = [](std::span<const Tensor> in, const Attrs&) {
                      if (in[0].values()[0] < 0) throw Error("throws_on_negative: a negative first element");
                      return in[0] * 1.0;
                    }});
  const CompiledFunction g = compile(parse_tape(
      "inp %1::f64[2]\n%2 = exp(%1)::f64[2]\n%3 = throws_on_negative(%1)::f64[2]\nout %2, %3"));
  std::vector<Tensor> out(2);
  const Tensor neg = tensor({-1, 1});
  const std::array<const Tensor*, 1> in{&neg};
  CHECK_THROWS_WITH_AS(g.run(in, out), doctest::Contains("negative first element"), Error);
  CHECK(!out[0].defined());
  CHECK(!out[1].defined());

  // CSE never merges two calls of an impure primitive.
  define_primitive({.name = "noisy", .eager = [](std::span<const Tensor> in, const Attrs&) { return in[0] * 1.0; },
                    .pure = false});
  const Tape twice = parse_tape("inp %1::f64[2]\n%2 = noisy(%1)::f64[2]\n%3 = noisy(%1)::f64[2]\n%4 = add(%2, %3)::f64[2]\nout %4");
  CHECK(cse(twice).size() == 4);
  CHECK(cse(parse_tape("inp %1::f64[2]\n%2 = exp(%1)::f64[2]\n%3 = exp(%1)::f64[2]\n%4 = add(%2, %3)::f64[2]\nout %4")).size() == 3);
}

TEST_CASE("attributes of every kind reach a custom primitive's rules and round-trip through text") {
  // scaled(x; weights, axes, flip, mode, as) = x * weights[0] (* -1 if flip), checking the rest.
  define_primitive({
      .name = "attr_kinds",
      .attrs = {{"weights", AttrKind::reals}, {"axes", AttrKind::ints}, {"flip", AttrKind::boolean},
                {"mode", AttrKind::string}, {"as", AttrKind::dtype}},
      .eager = [](std::span<const Tensor> x, const Attrs& a) {
        if (a.string("mode") != "same \"quoted\"" || a.dtype("as") != DType::f64 || a.ints("axes") != std::vector<int64_t>{-1, 0})
          throw Error("attr_kinds: attributes changed on the way");
        return x[0] * (a.reals("weights")[0] * (a.boolean("flip") ? -1.0 : 1.0));
      },
      .vjp = [](const std::vector<Tensor>&, const Tensor&, const Tensor& dy, const Attrs& a) {
        return std::vector<Tensor>{dy * (a.reals("weights")[0] * (a.boolean("flip") ? -1.0 : 1.0))};
      }});
  const Attrs attrs{{"weights", std::vector<double>{2.5, 1}}, {"axes", Shape{-1, 0}}, {"flip", true},
                    {"mode", std::string("same \"quoted\"")}, {"as", DType::f64}};
  auto f = [&](const Tensor& x) { return sum(reel::apply("attr_kinds", std::vector<Tensor>{x}, attrs)); };
  const Tape t = trace(f, tensor({1, 2}));
  const std::string text = to_string(t);
  CHECK(text.find(R"(attr_kinds(%1, weights=[2.5, 1], axes=[-1,0], flip=true, mode="same \"quoted\"", as=f64))") !=
        std::string::npos);
  test::run_checked(grad_tape(t), {tensor({1, 2})});  // text round trip, interpreted, compiled
  CHECK(grad(f, tensor({1, 2})).grads[0].values() == std::vector<double>{-2.5, -2.5});
  // Integers are accepted for a list of reals; the wrong kind is an error naming it.
  CHECK_NOTHROW(parse_tape("inp %1::f64[2]\n%2 = attr_kinds(%1, weights=[2], axes=[-1,0], flip=false, "
                           "mode=\"same \\\"quoted\\\"\", as=f64)::f64[2]\nout %2"));
  CHECK_THROWS_WITH_AS(parse_tape("inp %1::f64[2]\n%2 = attr_kinds(%1, weights=[2], axes=[-1,0], flip=1, "
                                  "mode=\"x\", as=f64)::f64[2]\nout %2"),
                       doctest::Contains("'flip' must be true or false"), Error);
  CHECK_THROWS_WITH_AS(parse_tape("inp %1::f64[2]\n%2 = attr_kinds(%1, weights=[2], axes=[0], flip=true, "
                                  "mode=\"unterminated, as=f64)::f64[2]\nout %2"),
                       doctest::Contains("unterminated string"), Error);
}

TEST_CASE("a primitive with two results: trace, text, gradients, forward mode, passes, compiled") {
  test::register_test_primitives();
  const Tensor x = randn({4}, 12);
  auto f = [](const Tensor& a) {
    const Tensor in[] = {a};
    const std::vector<Tensor> sc = reel::apply_results("sincos", in);
    return sum(sc[0] * sc[0] * 3.0 + sc[1]);  // 3 sin^2 x + cos x
  };
  const Tape t = trace(f, x);
  const std::string text = to_string(t);
  CHECK(text.find("%2, %3 = sincos(%1)::f64[4], f64[4]") != std::string::npos);
  verify(t);
  const Tape gt = grad_tape(t);
  const auto out = test::run_checked(gt, {x});  // text round trip, interpreter vs compiled
  const auto xs = x.values();
  std::vector<double> want;
  for (double v : xs) want.push_back(6 * std::sin(v) * std::cos(v) - std::sin(v));
  test::check_close(out[1], tensor(want), 1e-12, 1e-14, "d/dx of 3 sin^2 x + cos x");
  const auto fd = test::finite_diff([&](const std::vector<Tensor>& a) { return f(a[0]); }, {x});
  test::check_close(out[1], fd[0], 1e-6, 1e-8, "vs finite differences");
  // Only one result used: the other's adjoint is absent, and dce keeps the whole call.
  auto g = [](const Tensor& a) {
    const Tensor in[] = {a};
    return sum(reel::apply_results("sincos", in)[1]);
  };
  const Tape gg = grad_tape(trace(g, x));
  CHECK(to_string(gg).find("sincos(") != std::string::npos);
  std::vector<double> minus_sin;
  for (double v : xs) minus_sin.push_back(-std::sin(v));
  test::check_close(test::run_checked(gg, {x})[1], tensor(minus_sin), 1e-12, 1e-14, "d/dx cos x");
  // Forward mode and second derivatives.
  const auto j = jvp([&](const Tensor& a) { return f(a); }, {x}, {ones({4})});
  test::check_close(j.tangent, reel::sum(out[1]), 1e-12, 1e-12, "jvp with ones = sum of the gradient");
  test::run_checked(jvp_tape(t), {x, ones({4})});
  // CSE merges two equal calls, results included; dce drops an unused call whole.
  auto twice = [](const Tensor& a) {
    const Tensor in[] = {a};
    const auto s1 = reel::apply_results("sincos", in), s2 = reel::apply_results("sincos", in);
    (void)reel::apply_results("sincos", std::vector<Tensor>{a * 2.0});  // unused
    return sum(s1[0] + s2[1]);
  };
  const Tape opt = PassPipeline({"cse", "dce"}).run(trace(twice, x));
  verify(opt);
  const std::string ot = to_string(opt);
  CHECK(ot.find("sincos") == ot.rfind("sincos"));  // one call left
  test::check_close(test::run_checked(opt, {x})[0], twice(x), 1e-12, 1e-12, "after cse and dce");
  // Wrong use: apply on a two-result primitive, a line defining one variable.
  CHECK_THROWS_WITH_AS(reel::apply("sincos", std::vector<Tensor>{x}), doctest::Contains("apply_results"), Error);
  CHECK_THROWS_WITH_AS(parse_tape("inp %1::f64[2]\n%2 = sincos(%1)::f64[2]\nout %2"),
                       doctest::Contains("sincos has 2 results, the line defines 1"), Error);
  CHECK_THROWS_WITH_AS(parse_tape("inp %1::f64[2]\n%2, %3 = sincos(%1)::f64[2]\nout %2"),
                       doctest::Contains("sincos: the line defines 2 variables but declares 1 type"), Error);
  CHECK_THROWS_WITH_AS(parse_tape("inp %1::f64[2]\n%2, %4 = sincos(%1)::f64[2], f64[2]\nout %2"),
                       doctest::Contains("expected %3"), Error);
  Tape broken = t;
  broken.ops.erase(broken.ops.begin() + 2);  // the result operation %3
  broken.outputs = {2};
  CHECK_THROWS_WITH_AS(play(broken, {x}), doctest::Contains("sincos has 2 results"), Error);
  Primitive bad;
  bad.name = "two_without_rules";
  bad.results = 2;
  CHECK_THROWS_WITH_AS(register_primitive(bad), doctest::Contains("'two_without_rules' has no type rule (infer)"),
                       Error);
}

TEST_CASE("one rule form for several results; the older spellings still work; counts are checked") {
  test::register_test_primitives();
  const Tensor x = randn({3}, 21);
  // sincos_old (infer_results, eager_results, tangent_results) behaves as sincos (infer,
  // eager and tangent giving lists): values, gradients, forward mode, compiled.
  auto with = [](const char* name) {
    return [name](const Tensor& a) {
      const auto sc = reel::apply_results(name, std::vector<Tensor>{a});
      return sum(sc[0] * sc[1] + sc[1]);
    };
  };
  const Tape t_new = trace(with("sincos"), x), t_old = trace(with("sincos_old"), x);
  const Primitive& old = primitive("sincos_old");
  CHECK(old.infer);
  CHECK(old.eager);
  CHECK(old.tangent);
  CHECK_FALSE(old.infer_results);  // moved into the one form at registration
  const auto g_new = test::run_checked(grad_tape(t_new), {x}), g_old = test::run_checked(grad_tape(t_old), {x});
  test::check_close(g_old[0], g_new[0], 0, 0, "sincos_old value");
  test::check_close(g_old[1], g_new[1], 0, 0, "sincos_old gradient");
  const auto fd = test::finite_diff([&](const std::vector<Tensor>& a) { return with("sincos")(a[0]); }, {x});
  test::check_close(g_new[1], fd[0], 1e-6, 1e-8, "sincos gradient vs finite differences");
  test::check_close(jvp(with("sincos_old"), {x}, {ones({3})}).tangent, reel::sum(g_new[1]), 1e-12, 1e-12,
                    "sincos_old jvp");
  test::run_checked(jvp_tape(t_old), {x, ones({3})});

  // A one-result primitive's rules may return one value or a list of one.
  Primitive listed;
  listed.name = "listed_double";
  listed.infer = [](std::span<const VarType> in, const Attrs&) { return std::vector<VarType>{in[0]}; };
  listed.eager = [](std::span<const Tensor> in, const Attrs&) { return std::vector<Tensor>{in[0] * 2.0}; };
  listed.adjoint = [](TapeBuilder& b, const AdjointArgs& a) { return std::vector<Var>{b.mul(a.dout, 2.0)}; };
  listed.tangent = [](TapeBuilder& b, const TangentArgs& a) { return std::vector<Var>{b.mul(a.tangents[0], 2.0)}; };
  register_primitive(listed);
  auto twice = [](const Tensor& a) { return sum(reel::apply("listed_double", std::vector<Tensor>{a}) * a); };
  const auto g = test::run_checked(grad_tape(trace(twice, x)), {x});
  test::check_close(g[1], x * 4.0, 1e-15, 0, "d/dx 2x^2");
  test::check_close(jvp(twice, {x}, {ones({3})}).tangent, reel::sum(x * 4.0), 1e-12, 1e-12, "jvp of 2x^2");

  // A rule giving a count other than `results`: an error naming the rule, the
  // primitive, what it gave and what was expected, wherever the rule runs.
  Primitive counts;
  counts.name = "wrong_counts";
  counts.results = 2;
  counts.structure = Structure::opaque;
  counts.infer = [](std::span<const VarType> in, const Attrs& a) {
    if (a.has("short")) return std::vector<VarType>{in[0]};
    return std::vector<VarType>{in[0], in[0]};
  };
  counts.attrs = {{"short", AttrKind::boolean, true}};
  counts.eager = [](std::span<const Tensor> in, const Attrs&) { return std::vector<Tensor>{in[0], in[0], in[0]}; };
  counts.tangent = [](TapeBuilder&, const TangentArgs& a) { return std::vector<Var>{a.tangents[0]}; };
  const Primitive& wrong = register_primitive(counts);
  CHECK_THROWS_WITH_AS(reel::apply_results(wrong, std::vector<Tensor>{x}, {{"short", true}}),
                       doctest::Contains("the type rule (infer) of 'wrong_counts' gave 1 value, expected 2 (one per "
                                         "result)"),
                       Error);
  CHECK_THROWS_WITH_AS(reel::apply_results(wrong, std::vector<Tensor>{x}),
                       doctest::Contains("the eager function of 'wrong_counts' gave 3 values, expected 2"), Error);
  TapeBuilder b;
  const Var in = b.input({DType::f64, {3}});
  const std::vector<Var> outs = b.call_results(wrong, {in}, {});
  b.set_outputs({outs[0], outs[1]});
  const Tape t = b.finish();
  CHECK_THROWS_WITH_AS(jvp_tape(t), doctest::Contains("jvp: the tangent rule of 'wrong_counts' gave 1 value, expected 2"),
                       Error);
  CHECK_THROWS_WITH_AS(compile(t)(std::vector<Tensor>{x}),
                       doctest::Contains("the eager function of 'wrong_counts' gave 3 values, expected 2"), Error);
}

TEST_CASE("every built-in primitive passes register_primitive's checks") {
  int builtins = 0;
  for (const Primitive* p : all_primitives()) {
    if (!is_builtin(*p)) continue;
    ++builtins;
    CAPTURE(p->name);
    CHECK_NOTHROW(check_primitive(*p, true));
    // Only the built-in structures need the built-in flag: the others pass as a user's.
    if (p->structure == Structure::elementwise || p->structure == Structure::opaque)
      CHECK_NOTHROW(check_primitive(*p));
    else
      CHECK_THROWS_WITH_AS(check_primitive(*p), doctest::Contains("only the elementwise"), Error);
  }
  CHECK(builtins >= 69);  // as many as the builders list
  CHECK(is_builtin(primitive("exp")));
  CHECK(is_builtin(primitive("sum_to")));
  test::register_test_primitives();
  CHECK_FALSE(is_builtin(primitive("sincos")));
}

TEST_CASE("check_primitive accepts what register_primitive accepts, and checks the name first") {
  // The plainest user primitive: elementwise by default without an element rule (made
  // opaque on registration), and one in the older spellings of several results.
  const Primitive plain{
      .name = "check_plain",
      .infer = [](std::span<const VarType> in, const Attrs&) { return in[0]; },
      .eager = [](std::span<const Tensor> in, const Attrs&) { return in[0]; },
  };
  CHECK_NOTHROW(check_primitive(plain));
  const Primitive old{
      .name = "check_old",
      .results = 2,
      .infer_results = [](std::span<const VarType> in, const Attrs&) { return std::vector<VarType>{in[0], in[0]}; },
      .eager_results = [](std::span<const Tensor> in, const Attrs&) { return std::vector<Tensor>{in[0], in[0]}; },
  };
  CHECK_NOTHROW(check_primitive(old));
  CHECK(primitive(register_primitive(old).name).results == 2);
  CHECK(apply_results(primitive("check_old"), std::vector<Tensor>{scalar(2.0)})[1].item() == 2);
  // check_primitive registers nothing.
  CHECK(find_primitive("check_plain") == nullptr);
  Primitive both = old;
  both.infer = [](std::span<const VarType> in, const Attrs&) { return std::vector<VarType>{in[0], in[0]}; };
  CHECK_THROWS_WITH_AS(check_primitive(both), doctest::Contains("gives both infer and infer_results"), Error);
  both.name = "";  // the name is checked before anything else
  CHECK_THROWS_WITH_AS(check_primitive(both), doctest::Contains("expected a name of letters"), Error);
}

TEST_CASE("a tape as an attribute: printed, parsed, differentiated through its primitive's rules") {
  test::register_test_primitives();
  const Tape body = trace([](const Tensor& v) { return sin(v) * v; }, zeros({3}));
  const Tensor x = randn({3}, 13);
  auto f = [&](const Tensor& a) {
    const Tensor in[] = {a};
    const Attrs attrs{{"body", TapeRef{std::make_shared<const Tape>(body)}}};
    return sum(reel::apply("call_body", in, attrs) * reel::apply("call_body", in, attrs));
  };
  const Tape t = trace(f, x);
  const std::string text = to_string(t);
  CHECK(text.find("call_body(%1, body={inp %1::f64[3]; %2 = sin(%1)::f64[3]; %3 = mul(%2, %1)::f64[3]; out %3})") !=
        std::string::npos);
  CHECK(to_string(parse_tape(text)) == text);
  // Equal bodies (by text) are equal attributes: cse merges the two calls.
  const std::string merged = to_string(cse(parse_tape(text)));
  CHECK(merged.find("call_body") == merged.rfind("call_body"));
  const Tape gt = grad_tape(t);
  const auto out = test::run_checked(gt, {x});
  const auto fd = test::finite_diff([&](const std::vector<Tensor>& a) { return f(a[0]); }, {x});
  test::check_close(out[1], fd[0], 1e-6, 1e-8, "gradient through a tape attribute");
  const auto j = jvp(f, {x}, {ones({3})});
  test::check_close(j.tangent, reel::sum(out[1]), 1e-12, 1e-12, "jvp through a tape attribute");
  // Errors: malformed nested text, a body of the wrong type, a number for a tape.
  CHECK_THROWS_WITH_AS(parse_tape("inp %1::f64[3]\n%2 = call_body(%1, body={inp %1::f64[3]; out %9})::f64[3]\nout %2"),
                       doctest::Contains("in a tape attribute"), Error);
  CHECK_THROWS_WITH_AS(parse_tape("inp %1::f64[2]\n%2 = call_body(%1, body={inp %1::f64[3]; out %1})::f64[3]\nout %2"),
                       doctest::Contains("one input of type f64[2]"), Error);
  CHECK_THROWS_WITH_AS(parse_tape("inp %1::f64[3]\n%2 = call_body(%1, body=1)::f64[3]\nout %2"),
                       doctest::Contains("must be a tape"), Error);
  CHECK_THROWS_WITH_AS(parse_tape("inp %1::f64[3]\n%2 = call_body(%1, body={inp %1::f64[3]; out %1)::f64[3]\nout %2"),
                       doctest::Contains("unterminated tape attribute"), Error);
}

TEST_CASE("a '#' inside a string attribute is not a comment") {
  define_primitive({.name = "tagged", .arity = 1, .attrs = {{"tag", AttrKind::string}}, .type = {},
                    .eager = [](std::span<const Tensor> x, const Attrs&) { return x[0]; }});
  const std::string text = "inp %1::f64[2]\n%2 = tagged(%1, tag=\"a#b \\\"#\\\" ;{\")::f64[2]  # a comment\nout %2";
  const Tape t = parse_tape(text);
  CHECK(t.op(2).attrs.string("tag") == "a#b \"#\" ;{");
  CHECK(to_string(parse_tape(to_string(t))) == to_string(t));
}

TEST_CASE("review fixes: nested tape attributes are capped, element programs and rule sets are checked") {
  test::register_test_primitives();
  // 300 levels of call_body: an error, not a stack overflow (256 parse: issue 33).
  auto wrap = [](const std::string& body, const char* sep) {
    return fmt::format("inp %1::f64[3]{0}%2 = call_body(%1, body={{{1}}})::f64[3]{0}out %2", sep, body);
  };
  std::string deep = "inp %1::f64[3]; out %1";
  for (int i = 0; i < 300; ++i) deep = wrap(deep, "; ");
  CHECK_THROWS_WITH_AS(parse_tape(wrap(deep, "\n")), doctest::Contains("nested at most 256 deep"), Error);
  // A few levels parse, print and play.
  std::string body = "inp %1::f64[3]; %2 = sin(%1)::f64[3]; out %2";
  for (int i = 0; i < 3; ++i) body = wrap(body, "; ");
  const Tape nested = parse_tape(wrap(body, "\n"));
  CHECK(to_string(parse_tape(to_string(nested))) == to_string(nested));
  const Tensor x = tensor({0.5, 1.0, 2.0});
  test::check_close(play(nested, {x})[0], sin(x), 0, 0, "three nested bodies");
  CHECK_THROWS_WITH_AS(parse_tape("inp %1::f64[3]\n%2 = pow(%1, p={})::f64[3]\nout %2"),
                       doctest::Contains("pow: attribute 'p' does not take a tape"), Error);

  // sign(NaN) is NaN, so abs's gradient does not hide a NaN input.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(std::isnan(sign(tensor({nan})).item()));
  CHECK(std::isnan(grad([](const Tensor& v) { return sum(abs(v)); }, tensor({nan})).grads[0].item()));

  // A malformed element program is an error naming the primitive when compiled.
  Primitive bad;
  bad.name = "bad_element";
  bad.infer = [](std::span<const VarType> in, const Attrs&) { return in[0]; };
  bad.eager = [](std::span<const Tensor> in, const Attrs&) { return in[0]; };
  bad.element = [](const Attrs&) {
    ElementProgram p;
    p.insts = {{ElemOp::input, 0}, {ElemOp::add, 0, 7}};
    p.result = 1;
    return p;
  };
  const Primitive& registered = register_primitive(bad);
  CHECK_THROWS_WITH_AS(compile(test::tape_calling(registered)),
                       doctest::Contains("bad_element: malformed element program at x1 (add): operand 2"), Error);
  // A rule given both in its one form and in its older spelling.
  Primitive two;
  two.name = "two_with_both_spellings";
  two.results = 2;
  two.infer_results = [](std::span<const VarType> in, const Attrs&) { return std::vector<VarType>{in[0], in[0]}; };
  two.eager_results = [](std::span<const Tensor> in, const Attrs&) { return std::vector<Tensor>{in[0], in[0]}; };
  two.tangent = [](TapeBuilder&, const TangentArgs&) { return std::vector<Var>{kNoVar, kNoVar}; };
  two.tangent_results = [](TapeBuilder&, const TangentArgs&) { return std::vector<Var>{}; };
  CHECK_THROWS_WITH_AS(register_primitive(two),
                       doctest::Contains("'two_with_both_spellings' gives both tangent and tangent_results"), Error);
  Primitive one;
  one.name = "one_with_both_spellings";
  one.infer = bad.infer;
  one.eager = bad.eager;
  one.eager_results = two.eager_results;
  CHECK_THROWS_WITH_AS(register_primitive(one), doctest::Contains("gives both eager and eager_results"), Error);
}
