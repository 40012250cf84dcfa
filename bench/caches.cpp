#include "caches.hpp"

#include <fmt/format.h>
#include <reel/reel.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <vector>

#include <unistd.h>

#include "measure.hpp"

namespace bench {

namespace {

using reel::Tensor;

Tensor iterative(const Tensor& x, int n) {  // Yota's example
  Tensor y = x;
  for (int i = 0; i < n; ++i) y = y * 2.0;
  return reel::sum(y);
}

}  // namespace

void cache_table(bool quick) {
  fmt::print("\nCached functions (reel::simplegrad(f) / reel::jit):\n");
  const Tensor a = reel::randn({5}, 1), b = reel::randn({5}, 2), c = reel::randn({5}, 3);
  auto f = [](const Tensor& x, const Tensor& y, const Tensor& z) { return reel::sum(x * y + z); };
  const auto bare = reel::simplegrad(f, a, b, c);
  const auto cached = reel::simplegrad(f);
  (void)cached(a, b, c);
  (void)cached(a, b, c);  // compiled now
  auto guarded = [](const Tensor& x, const Tensor& y, const Tensor& z) {
    return reel::sum(x) > -1e9 ? reel::sum(x * y + z) : reel::sum(x);
  };
  const auto bare_guarded = reel::simplegrad(guarded, a, b, c);
  const auto ns = median_ns<3>({[&] { bare(a, b, c); }, [&] { cached(a, b, c); }, [&] { bare_guarded(a, b, c); }});
  fmt::print("  hit, 3 arguments of f64[5]: {} vs the bare compiled call {}: +{:.0f} ns\n", human(ns[1]), human(ns[0]),
             ns[1] - ns[0]);
  fmt::print("  a guard (sum(x) > c, checked in compiled code): {} vs {} without: +{:.0f} ns\n", human(ns[2]),
             human(ns[0]), ns[2] - ns[0]);

  // Yota's iterative(x, n) with n drawn from 1..50.
  const int calls = quick ? 1000 : 10000, remade_calls = quick ? 20 : 200;
  std::mt19937 rng(7);
  std::vector<int> ns_drawn(static_cast<std::size_t>(calls));
  for (int& n : ns_drawn) n = std::uniform_int_distribution<int>(1, 50)(rng);
  const Tensor x = reel::randn({4}, 4);
  auto g = reel::simplegrad(iterative);
  auto t0 = Clock::now();
  for (int n : ns_drawn) (void)g(x, n);
  const double cached_us = seconds_since(t0) * 1e6 / calls;
  t0 = Clock::now();
  for (int n : ns_drawn) (void)reel::grad(iterative, x, n);  // re-trace and interpret every call (Yota's way)
  const double retrace_us = seconds_since(t0) * 1e6 / calls;
  t0 = Clock::now();
  for (int i = 0; i < remade_calls; ++i) {
    const int n = ns_drawn[static_cast<std::size_t>(i)];
    (void)reel::simplegrad([n](const Tensor& v) { return iterative(v, n); }, x)(x);  // trace + compile every call
  }
  const double remade_us = seconds_since(t0) * 1e6 / remade_calls;
  const reel::CacheInfo info = g.cache_info();
  fmt::print("  iterative(x, n), n random in 1..50, {} calls: cached {:.1f} us/call, re-trace + interpret {:.1f} us/call "
             "({:.1f}x), simplegrad(f, args...) re-made {:.0f} us/call ({:.0f}x); {} hits, {} misses, {} compilations, "
             "{:.0f} ms compiling\n",
             calls, cached_us, retrace_us, retrace_us / cached_us, remade_us, remade_us / cached_us, info.hits,
             info.misses, info.compilations, info.compile_seconds * 1e3);

  // A signature's first call: interpreted (compile_after = 2, the default) or compiled (1).
  double first_interp = 0, first_compiled = 0;
  for (int n = 30; n < 40; ++n) {
    auto lazy = reel::simplegrad(iterative);
    auto eager = reel::simplegrad(iterative, {.compile_after = 1});
    t0 = Clock::now();
    (void)lazy(x, n);
    first_interp += seconds_since(t0);
    t0 = Clock::now();
    (void)eager(x, n);
    first_compiled += seconds_since(t0);
  }
  fmt::print("  a signature's first call (iterative, n = 30..39): interpreted {:.0f} us, compiled {:.0f} us ({:.1f}x)\n",
             first_interp * 1e5, first_compiled * 1e5, first_compiled / first_interp);

  // Memory over many distinct signatures with a small bound.
  const int signatures = quick ? 10000 : 100000;
  auto h = reel::jit([](const Tensor& v, int n) { return v * static_cast<double>(n); }, {.max_entries = 64});
  (void)h(x, 0);
  const double before = current_rss_mb();
  for (int n = 1; n <= signatures; ++n) (void)h(x, n);
  const double after = current_rss_mb();
  fmt::print("  {} distinct signatures through one jit function (max_entries 64): RSS {:.1f} MB before, {:.1f} MB after; "
             "{} evictions\n",
             signatures, before, after, h.cache_info().evictions);
}

void tracker_rows(bool quick) {
  const int steps = quick ? 10000 : 100000;
  Tensor W = reel::param(reel::randn({8, 16}, 1) * 0.1), b = reel::param(reel::zeros({8}));
  const Tensor x = reel::randn({16}, 2), target = reel::randn({8}, 3);
  auto step = [&] {
    Tensor loss = reel::sum(reel::square(reel::matmul(W, x) + b - target));
    reel::back(loss);
    W.assign(W - 0.01 * W.grad());
    b.assign(b - 0.01 * b.grad());
    W.zero_grad();
    b.zero_grad();
    return loss;
  };
  const double first = step().item();
  for (int i = 0; i < 1000; ++i) step();  // warm: allocator caches settle
  const double before = current_rss_mb();
  const auto t0 = Clock::now();
  double last = 0;
  for (int i = 0; i < steps; ++i) last = step().item();
  const double us = seconds_since(t0) * 1e6 / steps;
  fmt::print("  Tracker: {} training steps of param/back (8x16 regression): {:.1f} us/step; RSS {:.1f} MB before, "
             "{:.1f} MB after; loss {:.3g} -> {:.3g}\n",
             steps, us, before, current_rss_mb(), first, last);
}

int compile_probe(const std::string& dir) {
  reel::set_code_cache_dir(dir);
  reel::compile(reel::trace([](const Tensor& v) { return v * 3.0; }, reel::zeros({1})));  // JIT start-up
  const int64_t h = 128, k = 784, o = 10, n = 100;
  const Tensor W1 = reel::randn({h, k}, 1) * 0.05, b1 = reel::randn({h, 1}, 2);
  const Tensor W2 = reel::randn({o, h}, 3) * 0.1, b2 = reel::randn({o, 1}, 4);
  const Tensor x = reel::randn({k, n}, 5), y = reel::randn({o, n}, 6);
  auto loss = [&](const Tensor& w1, const Tensor& c1, const Tensor& w2, const Tensor& c2) {
    return reel::sum(reel::square(reel::matmul(w2, reel::tanh(reel::matmul(w1, x) + c1)) + c2 - y));
  };
  const int64_t hits_before = reel::code_cache_info().hits;
  auto t0 = Clock::now();
  const reel::Tape g = reel::grad_tape(reel::trace(loss, W1, b1, W2, b2));
  const double trace_ms = seconds_since(t0) * 1e3;
  t0 = Clock::now();
  const reel::CompiledFunction first = reel::compile(g);
  const double first_ms = seconds_since(t0) * 1e3;
  t0 = Clock::now();
  const reel::CompiledFunction second = reel::compile(g);
  const double second_ms = seconds_since(t0) * 1e3;
  const double v1 = first({W1, b1, W2, b2})[0].item(), v2 = reel::play(g, {W1, b1, W2, b2})[0].item();
  fmt::print("{} {} {} {} {} {}\n", trace_ms, first_ms, second_ms, reel::code_cache_info().hits - hits_before,
             first.kernels_compiled(), std::abs(v1 - v2) / std::abs(v2));
  return 0;
}

void disk_cache_rows(const std::string& self) {
  struct Probe {
    double trace_ms = 0, first_ms = 0, second_ms = 0, rel_diff = 0;
    long hits = 0;
    int kernels = 0;
  };
  auto probe = [&](const std::string& dir) {
    const std::string cmd = fmt::format("'{}' --compile-probe '{}'", self, dir);
    const std::string line = run_child(cmd);
    if (line.empty()) throw std::runtime_error("failed: " + cmd);
    Probe p;
    std::sscanf(line.c_str(), "%lf %lf %lf %ld %d %lf", &p.trace_ms, &p.first_ms, &p.second_ms, &p.hits, &p.kernels,
                &p.rel_diff);
    return p;
  };
  std::vector<double> cold, memory, disk, trace;
  long disk_hits = 0;
  int kernels = 0;
  double worst = 0;
  for (int round = 0; round < 5; ++round) {
    const std::string dir = fmt::format("{}/reel-bench-cache-{}-{}", std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp",
                                        getpid(), round);
    std::system(fmt::format("rm -rf '{}'", dir).c_str());
    const Probe a = probe(dir), b = probe(dir);
    std::system(fmt::format("rm -rf '{}'", dir).c_str());
    cold.push_back(a.first_ms);
    memory.push_back(a.second_ms);
    memory.push_back(b.second_ms);
    disk.push_back(b.first_ms);
    trace.push_back(a.trace_ms);
    disk_hits += b.hits;
    kernels = a.kernels;
    worst = std::max({worst, a.rel_diff, b.rel_diff});
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  fmt::print("  MLP gradient (d, f64), reel::compile of its gradient tape ({} kernels), median of 5 fresh-process pairs:\n"
             "    cold {:.2f} ms | in-memory kernel cache {:.3f} ms ({:.0f}x faster) | disk cache, fresh process {:.2f} ms "
             "({:.1f}x faster than cold; {} of 5 loaded from disk); trace + grad_tape {:.2f} ms; max rel diff {:.1e}\n",
             kernels, median(cold), median(memory), median(cold) / median(memory), median(disk),
             median(cold) / median(disk), disk_hits, median(trace), worst);
}

}  // namespace bench
