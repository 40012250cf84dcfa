#pragma once
// Internal: a cache of large, 64-byte-aligned memory blocks for tensor storage.
#include <cstddef>

namespace reel::detail {

// Blocks of at least this many bytes go through the cache.
constexpr std::size_t kCachedBlockMin = 256 * 1024;

// A block of exactly `bytes` (a multiple of 64), reused if one is cached.
// Throws reel::Error if memory runs out.
void* take_block(std::size_t bytes);
// Returns a block; it is kept for reuse while the cache holds less than its limit.
void give_block(void* block, std::size_t bytes) noexcept;

}  // namespace reel::detail
