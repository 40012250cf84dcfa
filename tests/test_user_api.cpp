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
