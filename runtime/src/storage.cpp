#include "storage.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "reel/error.hpp"
#include "reel/tensor.hpp"

namespace reel {

namespace detail {
namespace {

// The cache keeps at most this much freed memory.
constexpr std::size_t kCacheLimit = 256u << 20;

struct Cache {
  std::mutex mutex;
  std::unordered_multimap<std::size_t, void*> free;
  std::size_t bytes = 0;
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: tensors may be freed at exit
  return *c;
}

}  // namespace

void* take_block(std::size_t bytes) {
  {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    if (auto it = c.free.find(bytes); it != c.free.end()) {
      void* p = it->second;
      c.free.erase(it);
      c.bytes -= bytes;
      return p;
    }
  }
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) throw Error(fmt::format("tensor: cannot allocate {} bytes", bytes));
  return p;
}

void give_block(void* block, std::size_t bytes) noexcept {
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.bytes + bytes <= kCacheLimit) {
      try {
        c.free.emplace(bytes, block);
        c.bytes += bytes;
        return;
      } catch (...) {  // no room to remember it: free it
      }
    }
  }
  std::free(block);
}

namespace {

constexpr std::size_t kSmallClasses = kSmallBlockMax / 64;
constexpr int kSmallPerClass = 16;

// Trivially destructible, so still valid while the thread's other objects are
// destroyed (a tensor freed then goes to the system: `closed`).
struct SmallPool {
  void* free[kSmallClasses][kSmallPerClass];
  int count[kSmallClasses];
  bool closed;
};
thread_local constinit SmallPool small_pool{};

// Frees the pool's blocks when its thread ends.
struct SmallPoolCloser {
  ~SmallPoolCloser() {
    for (std::size_t c = 0; c < kSmallClasses; ++c)
      for (int i = 0; i < small_pool.count[c]; ++i) ::operator delete(small_pool.free[c][i]);
    small_pool = SmallPool{};
    small_pool.closed = true;
  }
};
thread_local SmallPoolCloser small_pool_closer;

std::size_t small_class(std::size_t bytes) { return (bytes + 63) / 64 - 1; }

}  // namespace

// Under AddressSanitizer blocks go straight back to the allocator, which then catches a
// use after free of a small tensor.
constexpr bool kPooled = !kAddressSanitizer;

void* take_small(std::size_t bytes) {
  const std::size_t c = small_class(bytes);
  if (kPooled && c < kSmallClasses) {
    (void)&small_pool_closer;  // (made with the thread's first block, so that it frees the pool at exit)
    if (small_pool.count[c] > 0) return small_pool.free[c][--small_pool.count[c]];
  }
  return ::operator new(c < kSmallClasses ? (c + 1) * 64 : bytes);
}

void give_small(void* block, std::size_t bytes) noexcept {
  const std::size_t c = small_class(bytes);
  if (kPooled && c < kSmallClasses && !small_pool.closed && small_pool.count[c] < kSmallPerClass) {
    (void)&small_pool_closer;
    small_pool.free[c][small_pool.count[c]++] = block;
    return;
  }
  ::operator delete(block);
}

}  // namespace detail

void release_cached_memory() {
  detail::Cache& c = detail::cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  for (auto& [bytes, p] : c.free) std::free(p);
  c.free.clear();
  c.bytes = 0;
}

}  // namespace reel
