#include "reel/parallel.hpp"

#include <fmt/format.h>
#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_invoke.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

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

std::mutex g_mutex;
std::shared_ptr<const Pool> g_pool;  // read under g_mutex, or through a copy
// More threads than cores: TBB's pool is allowed to grow to them.
std::unique_ptr<tbb::global_control> g_allowed;
std::atomic<int> g_threads{0};       // 0: not yet configured

int every_core() { return std::max(1, tbb::info::default_concurrency()); }

void configure(int n) {
  g_allowed.reset();
  if (n > every_core())
    g_allowed = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                      static_cast<std::size_t>(n));
  auto pool = std::make_shared<Pool>();
  pool->threads = n;
  if (n > 1) pool->arena = std::make_shared<tbb::task_arena>(n);
  if (openblas_set_num_threads != nullptr) openblas_set_num_threads(n);
  g_pool = std::move(pool);
  g_threads.store(n, std::memory_order_release);
}

// REEL_NUM_THREADS, or every core if it is unset; a value that is not a count from 1
// to 4096 is reported once on standard error (as the code cache's variables are), and
// every core used.
int from_environment() {
  const char* s = std::getenv("REEL_NUM_THREADS");
  if (s == nullptr || *s == '\0') return every_core();
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || errno != 0 || n < 1 || n > 4096 || !std::isdigit(static_cast<unsigned char>(*s))) {
    fmt::print(stderr, "reel: warning: REEL_NUM_THREADS=\"{}\" is not a thread count from 1 to 4096; using every core ({})\n",
               s, every_core());
    return every_core();
  }
  return static_cast<int>(n);
}

std::shared_ptr<const Pool> pool() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_pool) configure(from_environment());
  return g_pool;
}

}  // namespace

void set_num_threads(int n) {
  if (n < 0) throw Error(fmt::format("set_num_threads: expected a thread count >= 1 (or 0 for every core), given {}", n));
  std::lock_guard<std::mutex> lock(g_mutex);
  configure(n == 0 ? every_core() : n);
}

int num_threads() {
  const int n = g_threads.load(std::memory_order_acquire);
  return n > 0 ? n : pool()->threads;
}

namespace parallel {

void for_chunks(int64_t chunks, const std::function<void(int64_t)>& body) {
  if (chunks <= 0) return;
  std::shared_ptr<const Pool> p;
  if (chunks > 1 && num_threads() > 1) p = pool();
  if (!p || !p->arena) {
    for (int64_t c = 0; c < chunks; ++c) body(c);
    return;
  }
  p->arena->execute([&] {
    tbb::parallel_for(
        tbb::blocked_range<int64_t>(0, chunks, 1),
        [&](const tbb::blocked_range<int64_t>& r) {
          for (int64_t c = r.begin(); c < r.end(); ++c) body(c);
        },
        tbb::simple_partitioner());
  });
}

void invoke(const std::function<void()>& a, const std::function<void()>& b) {
  std::shared_ptr<const Pool> p;
  if (num_threads() > 1) p = pool();
  if (!p || !p->arena) {
    a();
    b();
    return;
  }
  p->arena->execute([&] { tbb::parallel_invoke(a, b); });
}

}  // namespace parallel
}  // namespace reel
