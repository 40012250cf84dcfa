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
      // Through a view of W (reshape shared W's memory, unguarded) and dot with a 1-D param.
      const double s = sum(reshape(W, {n / 2, 2}) * 1.0).item(), d = dot(W, full({n}, 1.0)).item();
      if (s / n != std::floor(s / n) || d / n != std::floor(d / n))
        throw std::runtime_error("reshape(W) or dot(W, 1) mixes two versions: " + std::to_string(s) + ", " +
                                 std::to_string(d));
      try {
        back(y);
        added[static_cast<std::size_t>(t)] += 2 * k;
      } catch (const Error& e) {
        if (std::string(e.what()).find("back: a param (f64[4096]) was updated in place after y was computed") ==
            std::string::npos)
          throw;  // (the expected error: y was computed before an assign; nothing was added)
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
  CHECK(W.values()[0] == kAssigns);
}

// Runs f(x) on a new thread and returns its result; an exception there is thrown here.
template <class F>
Tensor on_thread(F f) {
  Tensor y;
  std::exception_ptr error;
  std::thread th([&] {
    try {
      y = f();
    } catch (...) {
      error = std::current_exception();
    }
  });
  th.join();
  if (error) std::rethrow_exception(error);
  return y;
}

TEST_CASE("threads: an operation on a traced tensor on another thread is an error, not a constant") {
  // On the tracing thread, exp is recorded: the tape gives exp at new inputs.
  const Tape here = trace([](const Tensor& x) { return exp(x); }, tensor({0.0}));
  CHECK(play(here, {tensor({1.0})})[0].item() == std::exp(1.0));
  // On another thread it was not recorded: the tape returned exp(0) = 1 at every input.
  CHECK_THROWS_WITH_AS(trace([](const Tensor& x) { return on_thread([&] { return exp(x); }); }, tensor({0.0})),
                       doctest::Contains("exp: argument 1 belongs to a trace running on another thread"), Error);
}

TEST_CASE("threads: every use of a traced tensor on another thread is refused with an explanation") {
  test::register_test_primitives();
  const auto contains = [](const std::string& what) {
    return doctest::Contains(doctest::String((what + " a trace running on another thread; a traced tensor must be used "
                                                     "on the thread tracing it").c_str()));
  };
  auto compiled = compile(trace([](const Tensor& a) { return a * 2.0; }, ones({1})));
  auto cached = reel::jit([](const Tensor& a) { return a * 2.0; });
  Tensor P = param(zeros({1}));
  // Each use runs on a new thread while the traced function runs: the error is thrown
  // there, carried back and thrown by trace().
  auto refused = [&](auto use) {
    return [use](const Tensor& x) { return on_thread([&] { return use(x); }); };
  };
  const Tensor at = tensor({0.5});
  CHECK_THROWS_WITH_AS(trace(refused([](const Tensor& x) { return x * 3.0; }), at),
                       contains("mul: argument 1 belongs to"), Error);
  CHECK_THROWS_WITH_AS(trace(refused([](const Tensor& x) { return reel::apply_results("sincos", std::vector<Tensor>{x})[0]; }), at),
                       contains("sincos: argument 1 belongs to"), Error);
  CHECK_THROWS_WITH_AS(trace(refused([](const Tensor& x) { return static_cast<bool>(x) ? x : x; }), at),
                       contains("bool: the tensor belongs to"), Error);
  // grad on the other thread: of a function of the traced tensor, or capturing it.
  CHECK_THROWS_WITH_AS(
      trace(refused([](const Tensor& x) { return grad([](const Tensor& a) { return sum(a * a); }, x).value; }), at),
      contains("trace: an argument belongs to"), Error);
  CHECK_THROWS_WITH_AS(
      trace(refused([](const Tensor& x) { return grad([&](const Tensor& a) { return sum(a * x); }, ones({1})).value; }),
            at),
      contains("mul: argument 2 belongs to"), Error);
  CHECK_THROWS_WITH_AS(trace(refused([&](const Tensor& x) { return compiled({x})[0]; }), at),
                       contains("compiled function: argument 1 belongs to"), Error);
  CHECK_THROWS_WITH_AS(trace(refused([&](const Tensor& x) { return cached(x); }), at),
                       contains("jit: tensor 1 of the arguments belongs to"), Error);
  CHECK_THROWS_WITH_AS(trace(refused([](const Tensor& x) { return param(x); }), at),
                       contains("param: the values belong to"), Error);
  CHECK_THROWS_WITH_AS(trace(refused([&](const Tensor& x) { return P.assign(x); }), at),
                       contains("assign: the param or the values belong to"), Error);
  // A cached function's trace guards the values it reads: read on another thread, the
  // value would be used unguarded at other inputs.
  auto reads = reel::jit([](const Tensor& a) { return a * on_thread([&] { return scalar(a.item()); }); });
  CHECK_THROWS_WITH_AS(reads(tensor({3.0})), contains("item: the tensor belongs to"), Error);
  CHECK(P.values() == std::vector<double>{0});
}

TEST_CASE("threads: what is not another thread's live trace keeps working on other threads") {
  test::register_test_primitives();
  // A value that escaped a finished trace is a plain tensor, on any thread, even while
  // the thread that traced it runs another trace (the other thread then looks it up).
  Tensor escaped;
  (void)trace([&](const Tensor& x) {
    escaped = x * 2.0;
    return x;
  }, tensor({1.0}));
  const Tape outer = trace(
      [&](const Tensor& z) {
        CHECK(on_thread([&] { return exp(escaped); }).item() == std::exp(2.0));
        // Another thread's own tensors and traces: no business of this trace.
        CHECK(on_thread([] { return exp(tensor({0.0})); }).item() == 1.0);
        const Tensor g = on_thread([] { return grad([](const Tensor& a) { return sum(a * a); }, tensor({3.0})).grads[0]; });
        CHECK(g.item() == 6.0);
        // A plain trace does not guard values read with item(): read on another thread,
        // the value is a constant, as on the tracing thread.
        const double v = on_thread([&] { return scalar(z.item()); }).item();
        return z * v;
      },
      tensor({3.0}));
  CHECK(play(outer, {tensor({2.0})})[0].item() == 6.0);  // z * 3, the constant read
  // Traces on several threads at once, each recording its own.
  std::vector<double> got(4, 0.0);
  const auto errors = run_threads(4, [&](int t) {
    const Tape tape = trace([](const Tensor& x) { return exp(x) * x; }, tensor({static_cast<double>(t)}));
    got[static_cast<std::size_t>(t)] = play(tape, {tensor({1.0})})[0].item();
  });
  check_no_errors(errors);
  for (double g : got) CHECK(g == std::exp(1.0));
}

TEST_CASE("threads: review fixes: views of a param keep their values, nested guards, foreign captures") {
  // reshape and nodiff of a param had shared its memory: W.assign changed them after
  // they were made (and other threads' reads of them were not guarded).
  Tensor W = param(tensor({1.0, 2.0, 3.0, 4.0}));
  const Tensor r = reshape(W, {2, 2}), nd = nodiff(W), e = expand_dims(W, 0);
  W.assign(tensor({5.0, 6.0, 7.0, 8.0}));
  check_values(r, {1, 2, 3, 4}, "reshape(W) after assign");
  check_values(nd, {1, 2, 3, 4}, "nodiff(W) after assign");
  check_values(e, {1, 2, 3, 4}, "expand_dims(W) after assign");
  check_values(reshape(W, {2, 2}), {5, 6, 7, 8}, "reshape(W) of the new values");
  // A gradient through the view still reaches W.
  back(sum(reshape(W, {2, 2}) * tensor({1.0, 2.0, 3.0, 4.0}, {2, 2})));
  check_values(W.grad(), {1, 2, 3, 4}, "W.grad() through reshape");

  // A value read on another thread from a tensor of two traces, a plain one (tagged
  // first) and a cached function's, had escaped the guard a cached function needs.
  CHECK_THROWS_WITH_AS(trace([](const Tensor& x) {
                         auto inner = jit(
                             [&](const Tensor& a) {
                               const Tensor y = a * x;
                               const double v = on_thread([&] { return scalar(y.item()); }).item();
                               return a * v;
                             },
                             {.compile_after = 1});
                         return inner(tensor({2.0})) + x;
                       }, tensor({3.0})),
                       doctest::Contains("item: the tensor belongs to a trace running on another thread"), Error);

  // A tensor of another thread's live trace, returned by (or captured in) a trace on
  // this thread, had become a constant of the other trace's value.
  CHECK_THROWS_WITH_AS(trace([](const Tensor& x) {
                         return on_thread([&] {
                           const Tape b = trace([&](const Tensor&) { return x; }, ones({1}));
                           return play(b, {ones({1})})[0];
                         });
                       }, tensor({3.0})),
                       doctest::Contains("trace: a tensor the traced function returns or captures belongs to a trace "
                                         "running on another thread"),
                       Error);
}
