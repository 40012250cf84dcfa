// reel/tree.hpp: one walk flattens and rebuilds arguments, results and gradients
// (JAX's tree_flatten / tree_unflatten), and what uses it: trace outputs, jit results.
#include <array>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "test_util.hpp"

using namespace reel;

namespace treetest {

enum class Kind { relu, tanh };
struct Layer {
  Tensor W;
  std::optional<Tensor> b;
  Kind kind = Kind::relu;
  int width = 0;
};
REEL_FIELDS(Layer, W, b, kind, width)
struct Model {
  std::vector<Layer> layers;
  std::map<std::string, Tensor> extra;
  std::tuple<Tensor, std::pair<std::array<Tensor, 2>, std::string>> misc;
};
REEL_FIELDS(Model, layers, extra, misc)

Model make_model() {
  Model m;
  m.layers.push_back({tensor({1, 2}), tensor({3}), Kind::tanh, 2});
  m.layers.push_back({tensor({4, 5, 6}, {3, 1}), std::nullopt, Kind::relu, 3});
  m.extra = {{"scale", tensor({7})}, {"alpha", tensor({8, 9})}};
  m.misc = {tensor({10}), {{tensor({11}), tensor({12, 13})}, "name"}};
  return m;
}

std::vector<double> all_values(const std::vector<Tensor>& ts) {
  std::vector<double> out;
  for (const Tensor& t : ts)
    for (double v : t.values()) out.push_back(v);
  return out;
}

// A result with a struct, a vector and a plain field: what jit and trace rebuild.
struct Stats {
  Tensor mean;
  std::vector<Tensor> parts;
  int count = 0;
};
REEL_FIELDS(Stats, mean, parts, count)

Stats stats(const Tensor& x) {
  return {mean(x), {sum(x), sum(x * x)}, 2};
}

}  // namespace treetest

using namespace treetest;

TEST_CASE("tree_flatten and tree_unflatten: a nested struct round trip, leaves in field-path order") {
  const Model m = make_model();
  auto [leaves, def] = tree_flatten(m);
  REQUIRE(def.num_leaves() == 8);
  REQUIRE(leaves.size() == 8);
  // Walk order is the order of the field paths (map keys sorted).
  const auto named = named_tensors(m);
  for (std::size_t i = 0; i < leaves.size(); ++i) CHECK(leaves[i].values() == named[i].second.values());
  CHECK(all_values(leaves) == std::vector<double>{1, 2, 3, 4, 5, 6, 8, 9, 7, 10, 11, 12, 13});
  // New leaves: every value doubled.
  std::vector<Tensor> doubled;
  for (const Tensor& t : leaves) doubled.push_back(t * 2.0);
  const Model m2 = tree_unflatten(def, doubled);
  REQUIRE(m2.layers.size() == 2);
  CHECK(m2.layers[0].W.values() == std::vector<double>{2, 4});
  CHECK(m2.layers[0].b->values() == std::vector<double>{6});
  CHECK(m2.layers[0].kind == Kind::tanh);
  CHECK(m2.layers[0].width == 2);
  CHECK(m2.layers[1].W.shape() == Shape{3, 1});
  CHECK_FALSE(m2.layers[1].b.has_value());
  CHECK(m2.layers[1].width == 3);
  CHECK(m2.extra.at("alpha").values() == std::vector<double>{16, 18});
  CHECK(m2.extra.at("scale").values() == std::vector<double>{14});
  CHECK(std::get<0>(m2.misc).values() == std::vector<double>{20});
  CHECK(std::get<1>(m2.misc).first[1].values() == std::vector<double>{24, 26});
  CHECK(std::get<1>(m2.misc).second == "name");
  // Flattening the rebuilt tree gives the new leaves back.
  CHECK(all_values(tree_leaves(m2)) == all_values(doubled));
  // The structure keeps no tensor of the value it was made from.
  for (const Tensor& t : tree_leaves(def.unflatten(leaves))) CHECK(t.defined());
  // A lone tensor, a vector, a tuple.
  auto [one, one_def] = tree_flatten(tensor({5}));
  CHECK(tree_unflatten(one_def, one).values() == std::vector<double>{5});
  const std::tuple<Tensor, std::vector<Tensor>> tv{tensor({1}), {tensor({2}), tensor({3})}};
  auto [tl, tdef] = tree_flatten(tv);
  const auto tv2 = tree_unflatten(tdef, tl);
  CHECK(std::get<1>(tv2).size() == 2);
  CHECK(std::get<1>(tv2)[1].values() == std::vector<double>{3});
}

TEST_CASE("tree_unflatten: leaves that do not fit the structure are a reel::Error naming it") {
  const Model m = make_model();
  auto [leaves, def] = tree_flatten(m);
  std::vector<Tensor> fewer(leaves.begin(), leaves.end() - 1);
  CHECK_ERROR(tree_unflatten(def, fewer), "tree_unflatten", "expected 8 tensors", "got 7");
  leaves.push_back(tensor({0}));
  CHECK_ERROR(tree_unflatten(def, leaves), "tree_unflatten", "expected 8 tensors", "got 9");
  CHECK_ERROR(tree_unflatten(def, std::vector<Tensor>{}), "tree_unflatten", "expected 8 tensors", "got 0");
}

TEST_CASE("trace and jit: a struct result's leaves are the outputs, rebuilt on every hit") {
  const Tape tape = trace(stats, tensor({1, 2, 3}));
  CHECK(tape.outputs.size() == 3);  // mean, then the parts in order
  auto jf = jit(stats);
  for (int call = 0; call < 4; ++call) {  // a miss, an interpreted hit, compiled hits
    const Tensor x = tensor({1.0 + call, 2, 4}, {3});
    const Stats s = jf(x);
    const Stats want = stats(x);
    CHECK(s.mean.values() == want.mean.values());
    REQUIRE(s.parts.size() == 2);
    CHECK(s.parts[0].values() == want.parts[0].values());
    CHECK(s.parts[1].values() == want.parts[1].values());
    CHECK(s.count == 2);
  }
  const CacheInfo info = jf.cache_info();
  CHECK(info.misses == 1);
  CHECK(info.hits == 3);
  CHECK(info.compilations == 1);
  // A nested tuple with a vector whose length depends on a plain argument (part of the key).
  auto split = jit([](const Tensor& x, int n) {
    std::vector<Tensor> v;
    for (int i = 0; i < n; ++i) v.push_back(x * double(i + 1));
    return std::make_tuple(sum(x), v);
  });
  for (int n : {1, 3, 1, 3, 3}) {
    const auto [s, v] = split(tensor({1, 2}), n);
    CHECK(s.item() == 3);
    REQUIRE(v.size() == std::size_t(n));
    CHECK(v.back().values() == std::vector<double>{double(n), 2.0 * n});
  }
}

TEST_CASE("jit_grad and compile_grad: the new names give what simplegrad gave") {
  auto f = [](const Tensor& x, const Tensor& y) { return sum(x * x * y); };
  const Tensor x = tensor({1, 2}), y = tensor({3, 4});
  const auto cached_old = simplegrad(f)(x, y);
  const auto cached_new = jit_grad(f)(x, y);
  const auto compiled_old = simplegrad(f, x, y)(x, y);
  const auto compiled_new = compile_grad(f, x, y)(x, y);
  for (const auto* r : {&cached_old, &cached_new, &compiled_old, &compiled_new}) {
    CHECK((*r)[0].item() == 1 * 3 + 4 * 4);
    CHECK((*r)[1].values() == std::vector<double>{2 * 1 * 3, 2 * 2 * 4});  // 2xy
    CHECK((*r)[2].values() == std::vector<double>{1, 4});                 // x^2
  }
  const auto with_options = simplegrad(f, JitOptions{.compile_after = 1});
  CHECK(with_options(x, y)[2].values() == std::vector<double>{1, 4});
  CHECK(with_options.cache_info().compilations == 1);
}
