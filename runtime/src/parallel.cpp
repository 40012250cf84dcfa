#include "reel/parallel.hpp"

#include <fmt/format.h>
#include <tbb/blocked_range.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "exit_gate.hpp"
#include "reel/error.hpp"

// OpenBLAS's thread count, if the CBLAS linked is OpenBLAS (weak: absent otherwise).
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace reel {

namespace {

// oneTBB rather than OpenMP: one pool shared by nested and concurrent calls (a chunk
// of a kernel inside a step run concurrently, compiled functions called from several
// user threads) without oversubscribing the cores, and the cheapest dispatch measured
// here (docs/threads.md).
struct Pool {
  int threads = 1;
  std::shared_ptr<tbb::task_arena> arena;  // null with one thread
};

// Never destroyed (as the JIT and the storage cache): a thread still running compiled
// code while the process exits (a detached thread, a Python daemon thread) goes on
// using the pool after static destruction; a destroyed arena aborted in TBB (issue 33).
struct Shared {
  std::mutex mutex;
  std::shared_ptr<const Pool> pool;  // read under mutex, or through a copy
};
Shared& shared() {
  static Shared* s = new Shared();
  return *s;
}
std::atomic<int> g_threads{0};  // 0: not yet configured

// The cores this process may run on (TBB's count honours the affinity mask).
int every_core() { return std::max(1, tbb::info::default_concurrency()); }

// n threads from now on, at most one per core: more only oversubscribe the cores (and
// an arena asking TBB for more workers than its limit makes it warn on standard
// error). OpenBLAS runs on one thread: Reel cuts products into blocks on this pool
// (blas.cpp), so that one pool, not two, shares the cores.
void configure(int n) {
  n = std::clamp(n, 1, every_core());
  auto pool = std::make_shared<Pool>();
  pool->threads = n;
  if (n > 1) pool->arena = std::make_shared<tbb::task_arena>(n);
  if (openblas_set_num_threads != nullptr) openblas_set_num_threads(1);
  shared().pool = std::move(pool);
  g_threads.store(n, std::memory_order_release);
}

// REEL_NUM_THREADS (0: every core), or nothing if it is unset; a value that is not a
// count from 0 to 4096 is reported once on standard error (as the code cache's
// variables are), and every core used.
std::optional<int> from_environment() {
  const char* s = std::getenv("REEL_NUM_THREADS");
  if (s == nullptr || *s == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || errno != 0 || n < 0 || n > 4096 || !std::isdigit(static_cast<unsigned char>(*s))) {
    fmt::print(stderr, "reel: warning: REEL_NUM_THREADS=\"{}\" is not a thread count from 0 to 4096; using every core ({})\n",
               s, every_core());
    return std::nullopt;
  }
  return n == 0 ? every_core() : static_cast<int>(n);
}

std::shared_ptr<const Pool> pool() {
  Shared& s = shared();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.pool) configure(from_environment().value_or(every_core()));
  return s.pool;
}

}  // namespace

void set_num_threads(int n) {
  if (n < 0 || n > 4096)
    throw Error(fmt::format("set_num_threads: expected a thread count from 1 to 4096 (or 0 for every core), given {}", n));
  std::lock_guard<std::mutex> lock(shared().mutex);
  configure(n == 0 ? every_core() : n);
}

int num_threads() {
  const int n = g_threads.load(std::memory_order_acquire);
  return n > 0 ? n : pool()->threads;
}

namespace parallel {

int cores() {
  static const int n = every_core();
  return n;
}

void for_chunks(int64_t chunks, const std::function<void(int64_t)>& body) {
  if (chunks <= 0) return;
  std::shared_ptr<const Pool> p;
  if (chunks > 1 && num_threads() > 1) p = pool();
  if (!p || !p->arena) {
    for (int64_t c = 0; c < chunks; ++c) body(c);
    return;
  }
  const detail::ExitGate gate;  // (the pool's run; the serial one above uses neither TBB nor OpenBLAS)
  // Every chunk runs in the caller's floating-point settings (rounding, flush to zero),
  // wherever it runs: TBB's workers would otherwise keep those of whichever thread
  // first entered the arena.
  tbb::task_group_context context(tbb::task_group_context::isolated,
                                  tbb::task_group_context::default_traits | tbb::task_group_context::fp_settings);
  context.capture_fp_settings();
  // Isolated: a thread waiting for these chunks runs only these chunks (and what they
  // start), never an outer caller's other chunks: such a task could run a compiled
  // function on this thread while this one's compiled call, at the same workspace
  // depth, is still using its workspace.
  p->arena->execute([&] {
    tbb::this_task_arena::isolate([&] {
      tbb::parallel_for(
          tbb::blocked_range<int64_t>(0, chunks, 1),
          [&](const tbb::blocked_range<int64_t>& r) {
            const detail::ExitGate::Nested nested;  // (part of the caller's admitted call)
            for (int64_t c = r.begin(); c < r.end(); ++c) body(c);
          },
          tbb::simple_partitioner(), context);
    });
  });
}

}  // namespace parallel
}  // namespace reel
