// Issue 33, items 5 and 6: edges that crashed, threw a non-Reel exception or blamed the
// wrong operation (process exit under a running thread, nested tape text, binomial
// checkpoints, Jacobian seeds, matmul's batch, vmap's batch size). Loops' own edges are
// in test_loop_carries.cpp and test_loop_reads.cpp; the IDX reader's in test_idx.cpp.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <thread>

#include <reel/ir/revolve.hpp>

#include "child_process.hpp"
#include "test_util.hpp"

using namespace reel;

namespace {

constexpr const char* kExitChild = "REEL_TEST_EXIT_CHILD";

}  // namespace

// The process of the next test: a detached thread calls compiled functions (a small
// one, one large enough to run in chunks on the thread pool, and matrix products cut
// into blocks on it) for ever while the process returns from main and exits. It runs
// only when the variable is set.
TEST_CASE("issue 33.5 child: the process exits while a detached thread runs compiled code") {
  if (std::getenv(kExitChild) == nullptr) return;
  const Tensor small = tensor({0.5, 1.0, 2.0}), large = randn({400000}, 1), w = randn({256, 256}, 2);
  auto step = [](const Tensor& x) { return sum(tanh(x) * sin(x) + exp(x * 0.001)); };
  auto layer = [](const Tensor& m) { return sum(tanh(matmul(m, m))); };
  const CompiledFunction f = compile(trace(step, small)), g = compile(grad_tape(trace(step, large))),
                         h = compile(grad_tape(trace(layer, w)));
  static std::atomic<int64_t> calls{0};
  std::thread([f, g, h, small, large, w] {
    while (true) {
      (void)f({small});
      (void)g({large});
      (void)h({w});
      calls.fetch_add(1);
    }
  }).detach();
  while (calls.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // Returning ends the test run: main returns and static destruction begins while the
  // thread is inside compiled code.
}

TEST_CASE("issue 33.5: the process exits cleanly while a detached thread runs compiled code") {
  // A fresh process (this test binary, running only the case above): a forked copy of
  // this one would inherit a thread pool whose threads it does not have.
  for (int run = 0; run < 3; ++run) {
    CAPTURE(run);
    const std::string how = test::run_in_child(
        [] {
          setenv(kExitChild, "1", 1);
          if (std::freopen("/dev/null", "w", stdout) == nullptr) _exit(6);
          execl("/proc/self/exe", "reel_tests", "-tc=issue 33.5 child*", static_cast<char*>(nullptr));
          _exit(5);  // exec failed
        },
        120);
    CHECK(how == "exit 0");
  }
}
