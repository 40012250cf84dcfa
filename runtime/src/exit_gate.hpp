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

namespace reel::detail {

class ExitGate {
 public:
  ExitGate() : depth_(thread_depth().depth) {
    // (Sequentially consistent, as close() is: one of them sees the other.)
    if (depth_.fetch_add(1) == 0 && shared().closed.load() && shared().closer.load() != std::this_thread::get_id()) {
      depth_.fetch_sub(1);
      while (true) std::this_thread::sleep_for(std::chrono::hours(1));
    }
  }
  ~ExitGate() { depth_.fetch_sub(1, std::memory_order_release); }
  ExitGate(const ExitGate&) = delete;
  ExitGate& operator=(const ExitGate&) = delete;

  // A chunk of an admitted call, run on whichever thread: what it calls passes.
  class Nested {
   public:
    Nested() : depth_(thread_depth().depth) { depth_.fetch_add(1, std::memory_order_relaxed); }
    ~Nested() { depth_.fetch_sub(1, std::memory_order_relaxed); }
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;

   private:
    std::atomic<int>& depth_;
  };

 private:
  struct Depth {
    std::atomic<int> depth{0};
  };
  struct Shared {
    std::mutex mutex;
    std::vector<Depth*> threads;  // one per thread that passed the gate, while it lives
    std::atomic<bool> closed{false};
    std::atomic<std::thread::id> closer{};  // the thread that closed it (the one exiting)
  };
  static Shared& shared() {
    static Shared* s = [] {
      std::atexit(close);
      return new Shared();  // never destroyed: threads read it after static destruction
    }();
    return *s;
  }
  struct ThreadDepth : Depth {
    ThreadDepth() {
      std::lock_guard<std::mutex> lock(shared().mutex);
      shared().threads.push_back(this);
    }
    ~ThreadDepth() {
      std::lock_guard<std::mutex> lock(shared().mutex);
      std::erase(shared().threads, this);
    }
  };
  static Depth& thread_depth() {
    thread_local ThreadDepth d;
    return d;
  }
  static void close() {
    Shared& s = shared();
    s.closer.store(std::this_thread::get_id());
    s.closed.store(true);
    std::lock_guard<std::mutex> lock(s.mutex);
    for (const Depth* d : s.threads)
      while (d->depth.load() > 0) std::this_thread::yield();
  }

  std::atomic<int>& depth_;
};

}  // namespace reel::detail
