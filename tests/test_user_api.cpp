// The seeds' user API: Tracker's param/back, gradient/withgradient, Params, structs by
// field path with update, in-place operators.
#include <cmath>
#include <map>
#include <optional>

#include "test_util.hpp"

using namespace reel;

namespace {

void check_values(const Tensor& t, const std::vector<double>& want, const std::string& what, double tol = 1e-12) {
  REQUIRE_MESSAGE(t.defined(), what, ": undefined");
  const auto v = t.values();
  REQUIRE_MESSAGE(v.size() == want.size(), what, ": ", v.size(), " values, expected ", want.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    CHECK_MESSAGE(std::abs(v[i] - want[i]) <= tol * (1 + std::abs(want[i])), what, "[", i, "] = ", v[i], ", expected ",
                  want[i]);
}

}  // namespace

TEST_CASE("Tracker: param, back with a seed, grad") {
  Tensor W = param(tensor({1, 2, 3, 4}, {2, 2}));
  Tensor x = param(tensor({5, 6}));
  Tensor y = matmul(W, x);
  check_values(y, {17, 39}, "y");
  CHECK(y.is_tracked());
  CHECK_FALSE(y.is_param());
  back(y, tensor({1, -1}));
  check_values(W.grad(), {5, 6, -5, -6}, "W.grad()");
  check_values(x.grad(), {-2, -2}, "x.grad()");
}

TEST_CASE("Tracker: sum(square(x)) + prod(slice(x, 1, 3)) at [1, 2, 3]") {
  Tensor x = param(tensor({1, 2, 3}));
  Tensor f = sum(square(x)) + prod(slice(x, 1, 3));
  CHECK(f.item() == 20);
  back(f);
  check_values(x.grad(), {2, 7, 8}, "x.grad()");
}

TEST_CASE("Tracker: gradients accumulate across back calls; zero_grad clears them") {
  Tensor x = param(tensor({1, 2, 3}));
  Tensor c = tensor({1, 1, 1});  // a plain tensor: a constant
  back(sum(x * x * c));
  back(sum(x * 3.0));
  check_values(x.grad(), {2 + 3, 4 + 3, 6 + 3}, "accumulated");
  Tensor copy = x;  // the same param
  back(sum(copy));
  check_values(x.grad(), {6, 8, 10}, "through a copy");
  x.zero_grad();
  check_values(x.grad(), {0, 0, 0}, "after zero_grad");
  CHECK_THROWS_WITH_AS(c.grad(), doctest::Contains("grad: expected a param"), Error);
  CHECK_THROWS_WITH_AS(back(sum(c)), doctest::Contains("back: y depends on no param"), Error);
  CHECK_THROWS_WITH_AS(back(x * 2.0), doctest::Contains("back: expected a one-element y"), Error);
  CHECK_THROWS_WITH_AS(back(x * 2.0, tensor({1, 2})), doctest::Contains("expected a seed of y's type f64[3]"), Error);
}

TEST_CASE("Tracker: a long recorded chain is differentiated and released without deep recursion") {
  Tensor x = param(tensor({0.5}));
  Tensor y = x;
  for (int i = 0; i < 200000; ++i) y = y * 1.0;
  back(sum(y));
  check_values(x.grad(), {1}, "d/dx");
  y = Tensor();  // 200,000 nodes released here
  CHECK(x.is_param());
}

// ---- structs -------------------------------------------------------------------

namespace userapi {

struct Linear {
  Tensor W, b;
};
REEL_FIELDS(Linear, W, b)

enum class Act { tanh, none };

struct Dense {
  Tensor weight;
  std::optional<Tensor> bias;
  Act act = Act::tanh;
  int64_t in = 0, out = 0;  // carried along
};
REEL_FIELDS(Dense, weight, bias, act, in, out)

struct Chain {
  std::vector<Dense> layers;
  std::string name = "chain";
};
REEL_FIELDS(Chain, layers, name)

Tensor apply_dense(const Dense& d, const Tensor& x) {
  Tensor y = matmul(d.weight, x);
  if (d.bias) y = y + *d.bias;
  return d.act == Act::tanh ? tanh(y) : y;
}

Tensor run_chain(const Chain& c, const Tensor& x) {
  Tensor h = x;
  for (const Dense& d : c.layers) h = apply_dense(d, h);
  return h;
}

// Flux's Chain(Dense(2 => 3, tanh), Dense(3 => 1, bias = false)).
Chain make_chain() {
  Chain c;
  c.layers.push_back({randn({3, 2}, 11) * 0.5, randn({3, 1}, 12) * 0.1, Act::tanh, 2, 3});
  c.layers.push_back({randn({1, 3}, 13) * 0.5, std::nullopt, Act::none, 3, 1});
  return c;
}

Tensor chain_loss(const Chain& c, const Tensor& x) { return sum(square(run_chain(c, x) - 0.5)); }

}  // namespace userapi

using namespace userapi;

TEST_CASE("named_tensors: field paths") {
  const Chain c = make_chain();
  const auto named = named_tensors(c);
  REQUIRE(named.size() == 3);
  CHECK(named[0].first == "layers.0.weight");
  CHECK(named[1].first == "layers.0.bias");
  CHECK(named[2].first == "layers.1.weight");
  CHECK(named[0].second.shape() == Shape{3, 2});
  std::map<std::string, Linear> blocks{{"enc", {ones({2, 2}), zeros({2})}}, {"dec", {ones({1, 2}), zeros({1})}}};
  std::vector<std::string> paths;
  for (const auto& [p, t] : named_tensors(std::pair{blocks, std::array<Tensor, 2>{ones({1}), ones({1})}})) paths.push_back(p);
  CHECK(paths == std::vector<std::string>{"0.dec.W", "0.dec.b", "0.enc.W", "0.enc.b", "1.0", "1.1"});
  CHECK(named_tensors(ones({2})).at(0).first.empty());
}

TEST_CASE("gradient of a Linear: Yota's example, and update in a 100-step loop") {
  Linear m{randn({3, 4}, 1), randn({3}, 2)};
  const Tensor x = randn({4}, 3);
  auto loss = [](const Linear& l, const Tensor& v) { return sum(square(matmul(l.W, v) + l.b - 1.0)); };
  auto [dm, dx] = gradient(loss, m, x);
  static_assert(std::is_same_v<decltype(dm), Linear>);
  static_assert(std::is_same_v<decltype(dx), Tensor>);
  // Against the closed form: r = W x + b - 1; dW = 2 r x^T, db = 2 r, dx = 2 W^T r.
  const Tensor r = matmul(m.W, x) + m.b - 1.0;
  test::check_close(dm.W, outer(r * 2.0, x), 1e-12, 1e-12, "dW");
  test::check_close(dm.b, r * 2.0, 1e-12, 1e-12, "db");
  test::check_close(dx, matmul(transpose(m.W), r) * 2.0, 1e-12, 1e-12, "dx");
  auto [val, g] = withgradient(loss, m, x);
  CHECK(val.item() == doctest::Approx(loss(m, x).item()));
  test::check_close(std::get<0>(g).W, dm.W, 0, 0, "withgradient");
  // reel::grad with a struct argument gives the same.
  auto r2 = grad(loss, m, x);
  test::check_close(std::get<0>(r2.grad).b, dm.b, 0, 0, "grad");

  double first = loss(m, x).item(), last = first;
  for (int step = 0; step < 100; ++step) {
    auto [d, unused] = gradient(loss, m, x);
    update(m, d, [](const Tensor& w, const Tensor& dw) { return w - 0.01 * dw; });
    const double now = loss(m, x).item();
    CHECK(now <= last + 1e-12);
    last = now;
  }
  CHECK(last < first * 0.05);
}

TEST_CASE("gradient of a nested Chain (std::vector of Dense, one without a bias) against finite differences") {
  const Chain c = make_chain();
  const Tensor x = randn({2, 5}, 4);
  auto [dc, dx] = gradient(chain_loss, c, x);
  CHECK(dc.name == "chain");
  CHECK(dc.layers.size() == 2);
  CHECK_FALSE(dc.layers[1].bias.has_value());
  CHECK(dc.layers[1].act == Act::none);
  CHECK(dc.layers[0].out == 3);
  // Each parameter tensor by central differences, through the path.
  const auto params = named_tensors(c);
  const auto grads = named_tensors(dc);
  REQUIRE(params.size() == grads.size());
  for (std::size_t k = 0; k < params.size(); ++k) {
    CHECK(grads[k].first == params[k].first);
    const auto base = params[k].second.values();
    std::vector<double> fd(base.size());
    for (std::size_t i = 0; i < base.size(); ++i) {
      auto at = [&](double h) {
        Chain moved = c;
        std::size_t seen = 0;
        for_each_tensor(moved, [&](Tensor& t) {
          if (seen++ != k) return;
          auto v = base;
          v[i] += h;
          t = tensor(v, t.shape());
        });
        return chain_loss(moved, x).item();
      };
      fd[i] = (at(1e-6) - at(-1e-6)) / 2e-6;
    }
    test::check_close(grads[k].second, tensor(fd, params[k].second.shape()), 1e-6, 1e-8, params[k].first);
  }
}

TEST_CASE("Params: Zygote's predict example; unused and unlisted tensors") {
  Tensor W = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = tensor({0.5, -0.5});
  Tensor unused = ones({4});
  Tensor constant = tensor({10, 20});
  const Tensor x = tensor({1, 2, 3});
  auto predict = [&](const Tensor& v) { return matmul(W, v) + b; };
  Params ps{W, b, unused};
  Grads g = gradient([&] { return sum(predict(x)); }, ps);
  check_values(g[W], {1, 2, 3, 1, 2, 3}, "g[W]");
  check_values(g[b], {1, 1}, "g[b]");
  check_values(g[unused], {0, 0, 0, 0}, "g[unused]: zeros");
  // A tensor used but not listed is a constant: it has no gradient.
  auto with = withgradient([&] { return sum(predict(x) * constant); }, Params{W, b});
  CHECK(with.value.item() == doctest::Approx(10 * (14 + 0.5) + 20 * (32 - 0.5)));
  check_values(with.grad[b], {10, 20}, "g[b] weighted");
  CHECK_THROWS_WITH_AS(with.grad[constant], doctest::Contains("not one of the 2 Params"), Error);
  // The variables are themselves again after the trace.
  CHECK(W.trace_tags().empty());
  // update(ps, g, fn) rebinds each variable.
  update(ps, g, [](const Tensor& p, const Tensor& d) { return p - d; });
  check_values(W, {0, 0, 0, 3, 3, 3}, "W after update");
  check_values(b, {-0.5, -1.5}, "b after update");
}

TEST_CASE("structs through the compiled paths: simplegrad(f, args...), reel::simplegrad(f), reel::jit") {
  const Chain c = make_chain();
  const Tensor x = randn({2, 5}, 4);
  auto [dc, dx] = gradient(chain_loss, c, x);
  auto check = [&](const auto& result, const std::string& what) {
    const auto& [dc2, dx2] = result.grad;
    const auto a = named_tensors(dc2), b = named_tensors(dc);
    REQUIRE(a.size() == b.size());
    for (std::size_t k = 0; k < a.size(); ++k) {
      CHECK(a[k].first == b[k].first);
      test::check_close(a[k].second, b[k].second, 1e-12, 1e-13, what + ": " + a[k].first);
    }
    test::check_close(dx2, dx, 1e-12, 1e-13, what + ": dx");
    CHECK(result.value.item() == doctest::Approx(chain_loss(c, x).item()).epsilon(1e-12));
  };
  const auto compiled = simplegrad(chain_loss, c, x);
  check(compiled(c, x), "simplegrad(f, args...)");
  Chain other = c;
  other.layers[0].act = Act::none;  // a plain field traced as a constant
  CHECK_THROWS_WITH_AS(compiled(other, x), doctest::Contains("differ from those traced"), Error);
  Chain longer = c;
  longer.layers.push_back(c.layers[1]);
  CHECK_THROWS_WITH_AS(compiled(longer, x), doctest::Contains("differ from those traced"), Error);

  const auto cached = reel::simplegrad(chain_loss);
  for (int i = 0; i < 3; ++i) check(cached(c, x), "reel::simplegrad(f), call " + std::to_string(i));
  CHECK(cached.cache_info().compilations == 1);
  // A changed plain field is another signature, traced anew.
  const auto with_other = cached(other, x);
  CHECK(with_other.value.item() == doctest::Approx(chain_loss(other, x).item()).epsilon(1e-12));
  CHECK(cached.cache_info().misses == 2);

  const auto forward = reel::jit([](const Chain& ch, const Tensor& v) { return run_chain(ch, v); });
  for (int i = 0; i < 3; ++i) test::check_close(forward(c, x), run_chain(c, x), 1e-12, 1e-13, "jit");
  CHECK(forward.cache_info().hits == 2);
}

TEST_CASE("in-place operators: recorded while tracing; a param is updated in its own memory") {
  auto f = [](const Tensor& x, const Tensor& y) {
    Tensor h = x;
    h += y;
    h *= x;
    h -= 1.0;
    h /= 2.0;
    h += 3.0;
    h *= y;
    h -= x;
    h /= y;
    return sum(h);  // ((x + y) x - 1) / 2 + 3) y - x) / y
  };
  const Tensor x = tensor({1, 2, 3}), y = tensor({0.5, -1.5, 2});
  auto r = grad(f, x, y);
  const auto fd = test::finite_diff([&](const std::vector<Tensor>& a) { return f(a[0], a[1]); }, {x, y});
  test::check_close(r.grads[0], fd[0], 1e-6, 1e-8, "d/dx");
  test::check_close(r.grads[1], fd[1], 1e-6, 1e-8, "d/dy");
  const Tape t = trace(f, x, y);
  CHECK(play(t, {x, y})[0].item() == doctest::Approx(f(x, y).item()));

  // On a param, x op= y rebinds too: the param itself and its other copies are untouched.
  Tensor P = param(tensor({1, 2}));
  Tensor h0 = P;
  h0 += tensor({0.5, -1.5});
  h0 *= P;
  check_values(P, {1, 2}, "P untouched by h0 += ...");
  CHECK(P.is_param());
  CHECK(h0.is_tracked());
  CHECK_FALSE(h0.is_param());
  back(sum(h0));
  check_values(P.grad(), {2 * 1 + 0.5, 2 * 2 - 1.5}, "d/dP sum((P + y) * P) = 2P + y");
}

TEST_CASE("Tracker: W.assign updates a param in its own memory; back of an older y is an error") {
  Tensor W = param(tensor({1, 2, 3}));
  Tensor alias = W;
  back(sum(W * W));
  W.assign(W - 0.5 * W.grad());  // Tracker's W.data .-= lr .* grad(W)
  check_values(W, {0, 0, 0}, "W after the update");
  check_values(alias, {0, 0, 0}, "a copy of the param sees it");
  CHECK(W.is_param());
  check_values(W.grad(), {2, 4, 6}, "the gradient is kept");
  Tensor y2 = sum(W * 3.0);
  W.assign(W + 1.0);
  CHECK_THROWS_WITH_AS(back(y2), doctest::Contains("updated in place after y was computed"), Error);
  CHECK_THROWS_WITH_AS(W.assign(ones({2})), doctest::Contains("assign: expected values of the param's type f64[3]"),
                       Error);
  Tensor plain = ones({3});
  CHECK_THROWS_WITH_AS(plain.assign(ones({3})), doctest::Contains("assign: expected a param"), Error);
  CHECK_THROWS_WITH_AS(back(argmax(W)), doctest::Contains("back: expected a floating-point y"), Error);
  CHECK_THROWS_WITH_AS(grad([](const Tensor& a) { return sum(param(a)); }, ones({2})),
                       doctest::Contains("param: the values are being traced"), Error);
  // A captured param is a constant of a trace with the value it had then.
  Tensor V = param(tensor({2}));
  auto jf = reel::jit([&](const Tensor& x) { return x * V; }, {.compile_after = 1});
  CHECK_THROWS_WITH_AS(jf(V), doctest::Contains("is a param or computed from one"), Error);
  CHECK(jf(detach(V)).item() == 4);
  V.assign(tensor({5}));
  CHECK(jf(tensor({1})).item() == 2);  // the trace's constant, in compiled code
  CHECK(play(trace([&](const Tensor& x) { return x * V; }, ones({1})), {ones({1})})[0].item() == 5);
  CHECK_THROWS_WITH_AS(compile(trace([](const Tensor& x) { return x * 2.0; }, ones({1})))({V}),
                       doctest::Contains("argument 1 is a param"), Error);
}

TEST_CASE("a std::vector<Tensor> argument is differentiated (it was silently undefined)") {
  const std::vector<Tensor> xs{tensor({1, 2}), tensor({3})};
  auto f = [](const std::vector<Tensor>& v) { return sum(v[0] * v[0]) + sum(v[1]) * 2.0; };
  auto r = grad(f, xs);
  const auto& [dxs] = r.grad;
  REQUIRE(dxs.size() == 2);
  check_values(dxs[0], {2, 4}, "d v[0]");
  check_values(dxs[1], {2}, "d v[1]");
  auto [g] = gradient(f, xs);
  check_values(g[0], {2, 4}, "gradient");
}

TEST_CASE("review fixes: Params listed twice or captured by value, Grads lookups, update structure") {
  Tensor W = tensor({1, 2});
  CHECK_THROWS_WITH_AS((Params{W, W}), doctest::Contains("listed twice"), Error);
  CHECK_THROWS_WITH_AS(gradient([W] { return sum(W * W); }, Params{W}), doctest::Contains("captured by value"), Error);
  Linear m{W, ones({1})};
  CHECK_THROWS_WITH_AS(gradient([&] { return sum(m.W * m.W); }, Params{W}), doctest::Contains("captured by value"),
                       Error);
  Grads g = gradient([&] { return sum(W * W); }, Params{W});
  check_values(g[W], {2, 4}, "g[W]");
  const Tensor copy = W;
  check_values(g[copy], {2, 4}, "g[copy of W]");
  W = tensor({7, 8});  // W's old memory is held by g, so no new tensor can take its address
  const Tensor other = tensor({0, 0});
  CHECK_THROWS_WITH_AS(g[other], doctest::Contains("not one of the 1 Params"), Error);

  struct Box {
    std::vector<Tensor> xs;
  };
  std::vector<Tensor> a{ones({3}), ones({1})}, b{ones({1}), ones({3})};
  CHECK_THROWS_WITH_AS(update(a, b, [](const Tensor& x, const Tensor& d) { return x - d; }),
                       doctest::Contains("fn must keep each tensor's type"), Error);
  std::vector<Tensor> c{ones({3})};
  CHECK_THROWS_WITH_AS(update(a, c, [](const Tensor& x, const Tensor& d) { return x - d; }),
                       doctest::Contains("expected a gradient with m's 2 tensors, got 1"), Error);
  Chain one = make_chain(), two = make_chain();
  two.layers[0].bias.reset();
  two.layers[1].bias = ones({1, 1});
  CHECK_THROWS_WITH_AS(update(one, two, [](const Tensor& x, const Tensor& d) { return x - d; }),
                       doctest::Contains("tensor 2 is layers.0.bias in m, layers.1.weight in the gradient"), Error);
}

namespace userapi {
struct SameA {
  Tensor W;
};
REEL_FIELDS(SameA, W)
struct SameB {
  Tensor W;
};
REEL_FIELDS(SameB, W)
struct WithPlain {
  Tensor W;
  std::pair<int, int> stride{1, 1};
  const char* name = nullptr;
  std::map<std::string, double> scales;
};
REEL_FIELDS(WithPlain, W, stride, name, scales)
Tensor apply_same(const SameA& a, const Tensor& x) { return a.W * x; }
Tensor apply_same(const SameB& b, const Tensor& x) { return b.W + x; }
}  // namespace userapi

TEST_CASE("review fixes: cache keys hold the struct type and every plain field") {
  auto jf = reel::jit([](const auto& s, const Tensor& x) { return apply_same(s, x); }, {.compile_after = 1});
  const Tensor x = tensor({1, 2});
  check_values(jf(SameA{tensor({2, 2})}, x), {2, 4}, "A: W * x");
  check_values(jf(SameB{tensor({2, 2})}, x), {3, 4}, "B: W + x, not A's path");
  auto jp = reel::jit([](const WithPlain& p, const Tensor& v) {
    double scale = 1;
    for (const auto& [k, s] : p.scales) scale *= s;
    return p.W * v * static_cast<double>(p.stride.first) * scale + (p.name == nullptr ? 0.0 : 1.0);
  }, {.compile_after = 1});
  WithPlain p{tensor({1, 1}), {1, 1}, nullptr, {}};
  check_values(jp(p, x), {1, 2}, "stride 1");
  p.stride = {5, 5};
  check_values(jp(p, x), {5, 10}, "stride 5: another signature");
  p.name = "named";
  check_values(jp(p, x), {6, 11}, "a name");
  p.scales["a"] = 2;
  check_values(jp(p, x), {11, 21}, "a scale");
  CHECK(jp.cache_info().misses == 4);
  // simplegrad(f, args...) checks them against the traced values.
  auto sg = simplegrad([](const WithPlain& q, const Tensor& v) { return sum(q.W * v) * q.stride.first; }, p, x);
  WithPlain q = p;
  q.stride = {2, 2};
  CHECK_THROWS_WITH_AS(sg(q, x), doctest::Contains("differ from those traced"), Error);
  // A string literal argument is a plain value again.
  auto r = grad([](const Tensor& v, const char* act) { return std::string(act) == "relu" ? sum(relu(v)) : sum(v); },
                tensor({-1, 2}), "relu");
  check_values(r.grads[0], {0, 1}, "relu");
}

namespace userapi {
struct Opaque;  // never defined: a C-style handle
struct WithHandles {
  Tensor W;
  FILE* log = nullptr;
  Opaque* impl = nullptr;
};
REEL_FIELDS(WithHandles, W, log, impl)
}  // namespace userapi

TEST_CASE("re-review fixes: nested gradients over Params, cached functions in traces of params, keys, handles") {
  // Second order through Params: d/dW sum(3 W^2) = 6 W.
  Tensor W = tensor({1, 2});
  Params ps{W};
  Grads outer = gradient(
      [&] {
        Grads inner = gradient([&] { return sum(W * W * W); }, ps);
        return sum(inner[W]);
      },
      ps);
  check_values(outer[W], {6, 12}, "second order");
  // A cached function called inside a trace of params runs inline on that trace.
  Tensor P = param(tensor({1, 2}));
  auto jf = reel::jit([](const Tensor& a) { return sum(a * a); });
  Grads g = gradient([&] { return jf(P); }, Params{P});
  check_values(g[P], {2, 4}, "jit inside gradient of a param");
  auto r = grad([&](const Tensor& a) { return jf(a); }, P);
  check_values(r.grads[0], {2, 4}, "jit inside grad of a param");
  // Keys of arguments of different types never collide, even when empty.
  auto jk = reel::jit([](const auto& o, const Tensor& x) {
    if constexpr (std::is_same_v<typename std::decay_t<decltype(o)>::value_type, int>) return x * 2.0;
    else return x * 3.0;
  }, {.compile_after = 1});
  const Tensor one = ones({1});
  CHECK(jk(std::optional<int>{}, one).item() == 2);
  CHECK(jk(std::optional<double>{}, one).item() == 3);
  CHECK(jk(std::vector<int>{}, one).item() == 2);
  CHECK(jk(std::vector<double>{}, one).item() == 3);
  auto jv = reel::jit([](const Tensor& x, const auto&... rest) { return x * static_cast<double>(sizeof...(rest)); },
                      {.compile_after = 1});
  CHECK(jv(one, std::pair<int, int>{1, 2}).item() == 1);
  CHECK(jv(one, std::tuple<int>{1}, 2).item() == 2);
  // Pointers to things holding no tensors (C handles, incomplete types) are plain fields.
  WithHandles h{tensor({1, 2}), stderr, nullptr};
  auto [dh] = gradient([](const WithHandles& m) { return sum(m.W * m.W); }, h);
  check_values(dh.W, {2, 4}, "dW");
  CHECK(dh.log == stderr);
}
