#pragma once
// Internal: a cache of large, 64-byte-aligned memory blocks for tensor storage, and a
// per-thread pool of small ones.
#include <cstddef>

#include "reel/large_blocks.hpp"

namespace reel::detail {

// Blocks of at least this many bytes go through the cache.
constexpr std::size_t kCachedBlockMin = 256 * 1024;

// A block of exactly `bytes` (a multiple of 64), reused if one is cached.
// Throws reel::Error if memory runs out.
void* take_block(std::size_t bytes);
// Returns a block; it is kept for reuse while the cache holds less than its limit.
void give_block(void* block, std::size_t bytes) noexcept;

// Small blocks (at most kSmallBlockMax bytes) are kept, when freed, on the freeing
// thread's list for their size (in 64-byte steps, a few per size) and reused by that
// thread: the small tensors of every call (a cached function's arguments and results,
// the interpreter's values) then cost no malloc. Throws std::bad_alloc.
constexpr std::size_t kSmallBlockMax = 1024;
void* take_small(std::size_t bytes);
void give_small(void* block, std::size_t bytes) noexcept;

// An allocator over take_small/give_small (for std::allocate_shared).
struct SmallBlocks {
  static void* take(std::size_t bytes) { return take_small(bytes); }
  static void give(void* p, std::size_t bytes) noexcept { give_small(p, bytes); }
};
template <class T>
using SmallBlockAllocator = BlockAllocator<T, SmallBlocks>;

}  // namespace reel::detail
