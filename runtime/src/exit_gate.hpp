#pragma once
// The process exiting while another thread computes (a detached thread, a Python daemon
// thread still running compiled code): OpenBLAS frees its buffers in its library
// destructor, which crashed a product running at that moment (issue 33). Every product
// (blas.cpp) and every run of chunks on the pool (parallel.cpp) passes this gate. An
// exit handler, which runs before the libraries' destructors, closes it and waits for
// the calls in flight (finite: products and chunks of kernels); a call arriving later
// never starts: its thread waits for the process to end. Never stopped: calls nested in
// an admitted one (on its thread, or on the pool's threads, which run its chunks inside
// an ExitGate::Nested) and the exiting thread's own (static destructors may compute).
// Each thread keeps its own count (no counter shared by the pool's threads).
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>
#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace reel::detail {

class ExitGate {
 public:
  // (Hot: every product passes. Only this thread writes its count, so entering and leaving
  // are plain stores; entering orders its store before its read of `closed` with a
  // compiler fence only, and close() makes that a full fence on every running thread with
  // one membarrier, the asymmetric form of the store-fence-load pairing (Dekker). Where
  // the kernel lacks membarrier, both sides take a full fence.)
  ExitGate() {
    if (t_nested > 0) return;  // a chunk of a call admitted on another thread: that thread's count covers it
    Depth* d = t_depth != nullptr ? t_depth : register_thread();
    const int was = d->depth.load(std::memory_order_relaxed);
    d->depth.store(was + 1, std::memory_order_relaxed);
    depth_ = &d->depth;
    if (was > 0) return;  // nested in this thread's own admitted call
    Shared& s = shared();
    if (s.membarrier)
      std::atomic_signal_fence(std::memory_order_seq_cst);
    else
      std::atomic_thread_fence(std::memory_order_seq_cst);
    if (s.closed.load(std::memory_order_relaxed) && s.closer.load() != std::this_thread::get_id()) {
      depth_->store(0, std::memory_order_release);
      while (true) std::this_thread::sleep_for(std::chrono::hours(1));
    }
  }
  ~ExitGate() {
    if (depth_ != nullptr) depth_->store(depth_->load(std::memory_order_relaxed) - 1, std::memory_order_release);
  }
  ExitGate(const ExitGate&) = delete;
  ExitGate& operator=(const ExitGate&) = delete;

  // A chunk of an admitted call, run on whichever thread: what it calls passes. A plain
  // per-thread count, seen by no other thread: a pool thread running its first chunk
  // takes no lock (close() holds none while it waits, either).
  class Nested {
   public:
    Nested() { ++t_nested; }
    ~Nested() { --t_nested; }
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;
  };

 private:
  struct Depth {
    std::atomic<int> depth{0};
    bool in_use = true;  // (under Shared::mutex) false: its thread ended, another may take it
  };
  struct Shared {
    std::mutex mutex;
    std::vector<Depth*> threads;  // never freed, reused after their thread ends
    std::atomic<bool> closed{false};
    std::atomic<std::thread::id> closer{};  // the thread that closed it (the one exiting)
    bool membarrier = register_membarrier();  // close() can fence every running thread
  };
  static bool register_membarrier() {
#if defined(__linux__)
    return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
#else
    return false;
#endif
  }
  // Every thread of the process runs a full fence (or, without membarrier, this one does,
  // pairing with the full fence of the entering threads).
  static void fence_all(const Shared& s) {
#if defined(__linux__)
    if (s.membarrier && syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0) return;
#endif
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  static Shared& shared() {
    static Shared* s = [] {
      std::atexit(close);
      return new Shared();  // never destroyed: threads read it after static destruction
    }();
    return *s;
  }
  // This thread's count (t_depth): a Depth of Shared::threads, taken when the thread first
  // passes the gate and handed back (not freed: close() may be reading it) when it ends.
  struct Release {
    ~Release() {
      std::lock_guard<std::mutex> lock(shared().mutex);
      t_depth->in_use = false;
    }
  };
  static Depth* register_thread() {
    Shared& s = shared();
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      for (Depth* free : s.threads)
        if (!free->in_use) {
          free->in_use = true;
          t_depth = free;
          break;
        }
      if (t_depth == nullptr) t_depth = s.threads.emplace_back(new Depth());
    }
    thread_local Release release;  // (its destructor runs when the thread ends)
    (void)release;
    return t_depth;
  }
  // Waits, without holding the mutex (a thread passing the gate for the first time takes
  // it), for every call admitted before the gate closed.
  static void close() {
    Shared& s = shared();
    s.closer.store(std::this_thread::get_id());
    s.closed.store(true);
    fence_all(s);
    std::vector<Depth*> threads;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      threads = s.threads;
    }
    for (const Depth* d : threads)
      while (d->depth.load() > 0) std::this_thread::yield();
  }

  static inline thread_local int t_nested = 0;
  static inline thread_local Depth* t_depth = nullptr;  // (constant-initialised: no wrapper on the hot path)
  std::atomic<int>* depth_ = nullptr;
};

}  // namespace reel::detail
