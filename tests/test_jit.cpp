// Cached functions: reel::jit(f), reel::simplegrad(f), guards taking other paths,
// plain values in the key, eviction, concurrent misses, REEL_LOG=recompiles.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "test_util.hpp"

using namespace reel;

namespace {

// Yota's example: x doubled n times, summed.
Tensor iterative(const Tensor& x, int n) {
  Tensor y = x;
  for (int i = 0; i < n; ++i) y = y * 2.0;
  return sum(y);
}

// Runs fn with standard error captured; returns what it printed.
template <class Fn>
std::string captured_stderr(Fn fn) {
  std::fflush(stderr);
  char path[] = "/tmp/reel_stderr_XXXXXX";
  const int fd = mkstemp(path);
  const int saved = dup(2);
  dup2(fd, 2);
  fn();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::remove(path);
  return ss.str();
}

}  // namespace

TEST_CASE("jit and simplegrad(f): Yota's iterative example through the compiled path, plain values in the key") {
  auto g = simplegrad(iterative, {.compile_after = 1});
  const Tensor x = tensor({1.0, 2.0, 3.0, 4.0});
  for (int n : {1, 2, 3, 2, 1, 3}) {
    CAPTURE(n);
    const auto [val, dx, dn] = g(x, n);
    const double scale = std::pow(2.0, n);
    CHECK(val.item() == 10 * scale);
    CHECK(dx.values() == std::vector<double>(4, scale));
    CHECK_FALSE(dn.defined());  // n is not a tensor
  }
  const CacheInfo info = g.cache_info();
  CHECK(info.misses == 3);
  CHECK(info.hits == 3);
  CHECK(info.entries == 3);
  CHECK(info.compilations == 3);
  CHECK(info.compile_seconds > 0);
  // The default compiles on a signature's second call: the first is interpreted.
  auto lazy = simplegrad(iterative);
  (void)lazy(x, 2);
  CHECK(lazy.cache_info().compilations == 0);
  (void)lazy(x, 2);
  (void)lazy(x, 2);
  CHECK(lazy.cache_info().compilations == 1);
  CHECK(lazy.cache_info().hits == 2);
  // jit returns what f returns: a tuple with a vector inside.
  auto jf = jit([](const Tensor& a, double s, bool flip) {
    return std::make_tuple(a * s, std::vector<Tensor>{flip ? -a : a, sum(a)});
  });
  for (int round = 0; round < 3; ++round) {
    const auto [scaled, parts] = jf(x, 0.5, true);
    CHECK(scaled.values() == std::vector<double>{0.5, 1, 1.5, 2});
    REQUIRE(parts.size() == 2);
    CHECK(parts[0].values() == std::vector<double>{-1, -2, -3, -4});
    CHECK(parts[1].item() == 10);
  }
  CHECK(std::get<0>(jf(x, 2.0, false)).values() == std::vector<double>{2, 4, 6, 8});
  CHECK(jf.cache_info().misses == 2);
  CHECK(jf.cache_info().compilations == 1);
  // A new shape is a new signature.
  CHECK(std::get<0>(jf(tensor({1.0, 2.0}), 0.5, true)).values() == std::vector<double>{0.5, 1});
  CHECK(jf.cache_info().misses == 3);
}

TEST_CASE("a branch on a value: both paths cached under one signature, right values and gradients each time") {
  auto f = [](const Tensor& x) { return sum(x) > 0.0 ? sum(x * x) : sum(-x) * 3.0; };
  auto g = simplegrad(f);
  const Tensor pos = tensor({1.0, 2.0}), neg = tensor({-1.0, -2.0});
  for (int round = 0; round < 4; ++round) {
    for (const Tensor& x : {pos, neg}) {
      const auto [val, dx] = g(x);
      const auto fd = test::finite_diff([&](const std::vector<Tensor>& a) { return f(a[0]); }, {x});
      CHECK(val.item() == f(x).item());
      test::check_close(dx, fd[0], 1e-6, 1e-8, "gradient on each path");
    }
  }
  const CacheInfo info = g.cache_info();
  CHECK(info.entries == 2);  // one signature, two paths
  CHECK(info.misses == 2);
  CHECK(info.compilations == 2);
}

TEST_CASE("eviction, concurrent misses, and REEL_LOG=recompiles") {
  auto g = simplegrad(iterative, {.max_entries = 2});
  const Tensor x = ones({3});
  for (int n = 1; n <= 5; ++n) (void)g(x, n);
  CHECK(g.cache_info().evictions == 3);
  CHECK(g.cache_info().entries == 2);
  CHECK(g(x, 1)[0].item() == 6);  // evicted: traced again, still right

  // Eight threads missing one signature at once trace it once.
  auto h = jit([](const Tensor& a) { return sin(a) * 2.0; }, {.compile_after = 1});
  std::vector<std::thread> threads;
  std::vector<double> got(8);
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] { got[static_cast<std::size_t>(i)] = h(tensor({0.5})).item(); });
  for (auto& t : threads) t.join();
  for (double v : got) CHECK(v == doctest::Approx(2 * std::sin(0.5)).epsilon(1e-15));
  CHECK(h.cache_info().entries == 1);
  CHECK(h.cache_info().compilations == 1);

  // Each miss says why.
  setenv("REEL_LOG", "recompiles", 1);
  auto k = jit([](const Tensor& a, int n) { return a * static_cast<double>(n); });
  auto b = jit([](const Tensor& a) { return sum(a) > 0.0 ? a : -a; });
  const std::string log = captured_stderr([&] {
    (void)k(ones({2}), 1);
    (void)k(ones({3}), 1);
    (void)k(ones({3}), 4);
    (void)b(ones({2}));
    (void)b(-ones({2}));
  });
  unsetenv("REEL_LOG");
  CHECK(log.find("reel: jit miss: first call") != std::string::npos);
  CHECK(log.find("argument 1: new shape or dtype tensor f64[3] (cached: tensor f64[2])") != std::string::npos);
  CHECK(log.find("argument 2: new value integer i32 4 (cached: integer i32 1)") != std::string::npos);
  CHECK(log.find("a guard failed on each of the 1 path cached for this signature") != std::string::npos);
  CHECK(log.find("traced with this condition true, here it is false") != std::string::npos);
  CHECK_THROWS_WITH_AS(jit([](const Tensor& a) { return a; }, {.compile_after = 0})(ones({1})),
                       doctest::Contains("jit: expected compile_after >= 1, got 0"), Error);
}

TEST_CASE("a value read with item() while tracing for the cache guards that value") {
  auto f = [](const Tensor& x) { return x * x.item(); };  // uses the value as a constant
  auto jf = jit(f, {.compile_after = 1});
  CHECK(jf(scalar(2.0)).item() == 4);
  CHECK(jf(scalar(2.0)).item() == 4);  // a hit
  CHECK(jf(scalar(3.0)).item() == 9);  // not the stale 3 * 2: the value guard fails, a new path
  CHECK(jf(scalar(2.0)).item() == 4);
  const CacheInfo info = jf.cache_info();
  CHECK(info.misses == 2);
  CHECK(info.hits == 2);
  CHECK(info.entries == 2);
  // The guard shows on the tape and prints and parses; a plain trace records none.
  const Tape t = trace(f, scalar(2.0));
  CHECK(to_string(t).find("guard_value") == std::string::npos);
  auto g = simplegrad([](const Tensor& x) { return x * x.item(); });
  CHECK(g(scalar(2.0))[1].item() == 2);  // d/dx (x * 2): the read value is a constant
  CHECK(g(scalar(5.0))[1].item() == 5);
}

TEST_CASE("a cached function may call itself (recursion through the cache does not deadlock)") {
  std::function<Tensor(const Tensor&, int)> self;
  auto jf = jit([&self](const Tensor& x, int n) { return n == 0 ? x : self(x, n - 1) * 2.0; });
  self = [&jf](const Tensor& x, int n) { return jf(x, n); };
  CHECK(jf(ones({2}), 3).values() == std::vector<double>{8, 8});
  CHECK(jf(ones({2}), 3).values() == std::vector<double>{8, 8});
}

namespace {
enum class Color { red, green };
enum class Size { small, large };
}  // namespace

TEST_CASE("review fixes: cached functions inside other traces, typed keys, bounded paths") {
  // A jit function called inside another trace runs as it is, so the outer trace
  // records it (no stale constant, no compiled call on traced tensors).
  auto inner = jit([](const Tensor& a) { return a * 2.0; });
  auto outer = jit([&inner](const Tensor& a) { return inner(a) + 1.0; });
  CHECK(outer(scalar(1.0)).item() == 3);
  CHECK(outer(scalar(5.0)).item() == 11);
  CHECK(outer(scalar(7.0)).item() == 15);
  auto sq = jit([](const Tensor& a) { return a * a; });
  for (int i = 0; i < 3; ++i) CHECK(grad([&sq](const Tensor& x) { return sum(sq(x)); }, scalar(3.0)).grads[0].item() == 6);
  std::function<Tensor(const Tensor&, int)> self;
  auto rec = jit([&self](const Tensor& x, int n) { return n == 0 ? x : self(x, n - 1) * 2.0; });
  self = [&rec](const Tensor& x, int n) { return rec(x, n); };
  CHECK(rec(scalar(1.0), 2).item() == 4);
  CHECK(rec(scalar(3.0), 2).item() == 12);
  auto g = simplegrad([](const Tensor& x) { return sum(x * x * x); });
  for (int i = 0; i < 3; ++i) {
    const auto h = grad([&g](const Tensor& x) { return g(x)[1]; }, scalar(2.0));  // second derivative 6x
    CHECK(h.value.item() == 12);
    CHECK(h.grads[0].item() == 12);
  }
  // The key has the argument's type: 0.1f and 0.1, two enums with equal values, int and long.
  auto scaled = jit([](const Tensor& x, auto s) { return x * static_cast<double>(s); });
  CHECK(scaled(scalar(1.0), 0.1f).item() == static_cast<double>(0.1f));
  CHECK(scaled(scalar(1.0), 0.1).item() == 0.1);
  auto colored = jit([](const Tensor& x, auto c) { return x + static_cast<double>(static_cast<int>(c)) + (std::is_same_v<decltype(c), Size> ? 1.0 : 0.0); });
  CHECK(colored(scalar(1.0), Color::green).item() == 2);
  CHECK(colored(scalar(1.0), Size::large).item() == 3);
  // Paths per signature are bounded, and a path whose guard fails is not compiled for it.
  auto valued = jit([](const Tensor& x) { return x * x.item(); }, {.max_paths = 3});
  for (int i = 1; i <= 50; ++i) CHECK(valued(scalar(static_cast<double>(i))).item() == i * i);
  const CacheInfo info = valued.cache_info();
  CHECK(info.entries == 3);
  CHECK(info.evictions == 47);
  CHECK(info.compilations == 0);
  CHECK(valued(scalar(50.0)).item() == 2500);  // the newest path is kept and tried first
  CHECK(valued.cache_info().hits == 1);
}

TEST_CASE("review fixes: equal code under different kernel keys is shared, not freed under its user") {
  // Loops over no elements compile to the same empty function whatever they compute.
  auto f = jit([](const Tensor& a) { return exp(a) * 2.0; }, {.compile_after = 1});
  const Tensor empty = zeros({0, 4});
  for (int i = 0; i < 3; ++i) CHECK(f(empty).numel() == 0);
  {
    auto g = jit([](const Tensor& a) { return sin(a) + 1.0; }, {.compile_after = 1});
    for (int i = 0; i < 3; ++i) CHECK(g(empty).numel() == 0);
  }  // g's code goes; f's is the same object, still in use
  for (int i = 0; i < 3; ++i) CHECK(f(empty).shape() == Shape{0, 4});
  test::check_close(f(ones({2})), full({2}, 2 * std::exp(1.0)), 1e-12, 1e-13, "f still right");
}

TEST_CASE("review fixes: keys of different argument types never collide") {
  auto jf = jit([](const Tensor& x, auto a, auto b) { return x * static_cast<double>(a) + static_cast<double>(b); },
                {.compile_after = 1});
  const Tensor x = ones({1});
  CHECK(jf(x, int16_t{1}, int64_t{0x69} << 40).item() == doctest::Approx(1.0 + static_cast<double>(int64_t{0x69} << 40)));
  CHECK(jf(x, int64_t{6881281}, int16_t{0}).item() == 6881281.0);
  CHECK(jf(x, 1.5f, 0.0).item() == 1.5);
  CHECK(jf(x, 1.5, 0.0f).item() == 1.5);
  CHECK(jf.cache_info().misses == 4);
  // Equal long doubles are one signature.
  auto jl = jit([](const Tensor& v, long double s) { return v * static_cast<double>(s); });
  for (int i = 0; i < 5; ++i) (void)jl(x, 2.5L);
  CHECK(jl.cache_info().misses == 1);
  // A miss whose text shows no difference still says something.
  setenv("REEL_LOG", "recompiles", 1);
  auto jn = jit([](const Tensor& v, double s) { return v * 0.0 * s; });
  const std::string log = captured_stderr([&] {
    (void)jn(x, std::nan("1"));
    (void)jn(x, std::nan("2"));
  });
  unsetenv("REEL_LOG");
  CHECK(log.find("whose difference its text does not show") != std::string::npos);
}
