#include "reel/large_blocks.hpp"

#include <sys/mman.h>

#include <cstdint>

namespace reel::detail {

namespace {
constexpr std::size_t kHugePage = std::size_t{2} << 20;
std::size_t rounded(std::size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }
}  // namespace

void* map_large_block(std::size_t bytes) {
  const std::size_t size = rounded(bytes);
  // Mapped with a huge page to spare, then trimmed to a 2 MB boundary at both ends.
  void* raw = ::mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) ::munmap(raw, aligned - start);
  const std::uintptr_t end = aligned + size, raw_end = start + size + kHugePage;
  if (raw_end > end) ::munmap(reinterpret_cast<void*>(end), raw_end - end);
  void* p = reinterpret_cast<void*>(aligned);
  ::madvise(p, size, MADV_HUGEPAGE);  // (advice: where refused, ordinary pages)
  return p;
}

void unmap_large_block(void* p, std::size_t bytes) noexcept { ::munmap(p, rounded(bytes)); }

}  // namespace reel::detail
