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

}  // namespace detail

void release_cached_memory() {
  detail::Cache& c = detail::cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  for (auto& [bytes, p] : c.free) std::free(p);
  c.free.clear();
  c.bytes = 0;
}

}  // namespace reel
