// Threads: reel::back on shared params from several threads at once, params assigned
// while other threads use them, and operations on a traced tensor run on a thread other
// than the one tracing it.
#include <atomic>
#include <cmath>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test_prims.hpp"
#include "test_util.hpp"

using namespace reel;

namespace {

void check_values(const Tensor& t, const std::vector<double>& want, const std::string& what) {
  REQUIRE_MESSAGE(t.defined(), what, ": undefined");
  const auto v = t.values();
  REQUIRE_MESSAGE(v.size() == want.size(), what, ": ", v.size(), " values, expected ", want.size());
  for (std::size_t i = 0; i < v.size(); ++i) CHECK_MESSAGE(v[i] == want[i], what, "[", i, "] = ", v[i], ", expected ", want[i]);
}

// Runs body(t) on threads t = 0 .. n-1 at once; an exception on a thread is reported
// as a failure with its message (doctest's assertions are not made on the threads).
template <class F>
std::vector<std::string> run_threads(int n, F body) {
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  std::atomic<int> ready{0};
  for (int t = 0; t < n; ++t)
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < n) std::this_thread::yield();  // start together
      try {
        body(t);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(t)] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  return errors;
}

void check_no_errors(const std::vector<std::string>& errors) {
  for (std::size_t t = 0; t < errors.size(); ++t) CHECK_MESSAGE(errors[t].empty(), "thread ", t, ": ", errors[t]);
}

}  // namespace

TEST_CASE("threads: reel::back on shared params from 8 threads at once accumulates the exact sum") {
  constexpr int kThreads = 8;
  constexpr int kBacks = 150;
  Tensor W = param(tensor({1, 2, 3, 4}, {2, 2}));
  Tensor b = param(tensor({0.5, -0.5}));
  Tensor h = W * 2.0;  // recorded once, shared by every thread's y
  const auto errors = run_threads(kThreads, [&](int t) {
    const Tensor x = tensor({static_cast<double>(t + 1), 1.0});
    for (int i = 0; i < kBacks; ++i) {
      // y = sum(W x + b + h x): dy/dW = [x; x] + 2 [x; x], dy/db = [1, 1].
      Tensor y = sum(matmul(W, x) + b + matmul(h, x));
      back(y);
    }
  });
  check_no_errors(errors);
  // Per back on thread t: dW = 3 [t+1, 1; t+1, 1]; summed over t = 0..7, 3 * 36 and 3 * 8.
  const double n = kBacks;
  check_values(W.grad(), {n * 3 * 36, n * 3 * 8, n * 3 * 36, n * 3 * 8}, "W.grad()");
  check_values(b.grad(), {n * kThreads, n * kThreads}, "b.grad()");
}

TEST_CASE("threads: the two results of one recorded call, backed and released on two threads at once") {
  test::register_test_primitives();
  Tensor W = param(zeros({3}));
  constexpr int kRounds = 300;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<Tensor> sc = apply_results("sincos", std::vector<Tensor>{W});  // one call, two nodes
    const auto errors = run_threads(2, [&](int t) {
      const Tensor r = std::move(sc[static_cast<std::size_t>(t)]);  // this thread's node only
      back(sum(r * 1.0));
    });  // both nodes released on their threads
    check_no_errors(errors);
  }
  // d sum(sin W) = cos 0 = 1 and d sum(cos W) = -sin 0 = 0 at each element, per round.
  check_values(W.grad(), {kRounds, kRounds, kRounds}, "W.grad()");
}

TEST_CASE("threads: W.assign while other threads compute and back: values of one version, exact sums or an error") {
  // W holds k everywhere after the k-th assign; y = sum(W * W) = n k^2 and each back
  // that succeeds adds 2k to every element of W.grad(), where k is the version y was
  // computed from. Torn reads (some elements old, some new) would break both.
  constexpr int64_t n = 4096;
  constexpr int kWorkers = 3;
  constexpr int kAssigns = 300;
  Tensor W = param(full({n}, 0.0));
  std::atomic<bool> done{false};
  std::atomic<int> progress{0};  // the workers' steps
  std::atomic<int> stopped{0};   // workers that ended (by an error: the assigns need not wait for them)
  std::vector<double> added(kWorkers, 0.0);
  std::vector<int> stale(kWorkers, 0);
  const auto errors = run_threads(kWorkers + 1, [&](int t) {
    if (t == kWorkers) {  // the assigning thread
      for (int k = 1; k <= kAssigns; ++k) {
        const Tensor values = full({n}, k);
        const int seen = progress.load();
        while (progress.load() < seen + 2 && stopped.load() < kWorkers)
          std::this_thread::yield();  // the workers run between assigns
        W.assign(values);
      }
      done = true;
      return;
    }
    struct Stop {
      std::atomic<int>& stopped;
      ~Stop() { stopped.fetch_add(1); }
    } stop{stopped};
    do {
      progress.fetch_add(1);
      const Tensor y = sum(W * W);
      const double k = std::sqrt(y.item() / n);
      if (k != std::floor(k) || y.item() != n * k * k)
        throw std::runtime_error("y = " + std::to_string(y.item()) + " is not n k^2: values of two versions");
      const std::vector<double> w = W.values();
      for (double v : w)
        if (v != w[0]) throw std::runtime_error("W.values() mixes two versions");
      try {
        back(y);
        added[static_cast<std::size_t>(t)] += 2 * k;
      } catch (const Error& e) {
        if (std::string(e.what()).find("back: a param (f64[4096]) was updated in place after y was computed") ==
            std::string::npos)
          throw;
        stale[static_cast<std::size_t>(t)] += 1;
      }
    } while (!done);
  });
  check_no_errors(errors);
  double want = 0;
  for (double a : added) want += a;
  const std::vector<double> g = W.grad().values();
  for (std::size_t i = 0; i < g.size(); ++i) {
    CHECK_MESSAGE(g[i] == want, "W.grad()[", i, "] = ", g[i], ", expected ", want);
    if (g[i] != want) break;
  }
  MESSAGE("backs that saw an assign after their y: ", stale[0] + stale[1] + stale[2]);
  CHECK(W.values()[0] == kAssigns);
}
