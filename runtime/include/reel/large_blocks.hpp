#pragma once
// An allocator for arrays that may grow to tens or hundreds of megabytes (a traced
// tape's operations): a block of at least kLargeBlockMin bytes is mapped on its own,
// aligned to 2 MB and marked for transparent huge pages (MADV_HUGEPAGE), so that filling
// it costs one page fault per 2 MB instead of one per 4 KB. Page faults were a third of
// the time of tracing a scalar program of millions of operations here (a vector that
// doubles touches twice its final size in fresh pages). A freed block is unmapped, not
// kept for reuse (kept, the blocks of a tape's growth that no later tape asks for again
// held hundreds of megabytes). Smaller blocks come from operator new. Where the kernel
// gives no huge pages the block is an ordinary mapping; where its huge-page setting
// compacts memory on such a fault (defrag "madvise"), a fault on fragmented memory may
// wait for that. Under AddressSanitizer every block comes from operator new.
#include <cstddef>
#include <new>

namespace reel::detail {

constexpr std::size_t kLargeBlockMin = std::size_t{4} << 20;
// Whether this is an AddressSanitizer build (gcc's macro, clang's feature test): the
// runtime's own block reuse (mapped tape arrays, the small-tensor pool) is then off,
// so that ASan sees every free and catches a use after it.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif
inline constexpr bool kMapLargeBlocks = !kAddressSanitizer;

void* map_large_block(std::size_t bytes);  // throws std::bad_alloc
void unmap_large_block(void* p, std::size_t bytes) noexcept;

// An allocator of T over a source of blocks by byte count: Blocks::take(bytes) (may
// throw std::bad_alloc) and Blocks::give(p, bytes), given the same count.
template <class T, class Blocks>
struct BlockAllocator {
  using value_type = T;
  BlockAllocator() = default;
  template <class U>
  BlockAllocator(const BlockAllocator<U, Blocks>&) {}
  T* allocate(std::size_t n) {
    if (n > std::size_t(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(Blocks::take(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept { Blocks::give(p, n * sizeof(T)); }
  friend bool operator==(BlockAllocator, BlockAllocator) { return true; }
};

// Blocks of at least kLargeBlockMin bytes mapped, smaller ones from operator new.
struct LargeBlocks {
  static bool mapped(std::size_t bytes) { return kMapLargeBlocks && bytes >= kLargeBlockMin; }
  static void* take(std::size_t bytes) { return mapped(bytes) ? map_large_block(bytes) : ::operator new(bytes); }
  static void give(void* p, std::size_t bytes) noexcept {
    if (mapped(bytes)) unmap_large_block(p, bytes);
    else ::operator delete(p);
  }
};
template <class T>
using LargeBlockAllocator = BlockAllocator<T, LargeBlocks>;

}  // namespace reel::detail
