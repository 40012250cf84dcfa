#include "kernel_spec.hpp"

#include <fmt/format.h>

namespace reel::codegen {

void coalesce(std::vector<int64_t>& dims, std::vector<std::vector<int64_t>>& strides) {
  for (std::size_t d = dims.size(); d-- > 0;)
    if (dims[d] == 1) {
      dims.erase(dims.begin() + static_cast<std::ptrdiff_t>(d));
      for (auto& s : strides) s.erase(s.begin() + static_cast<std::ptrdiff_t>(d));
    }
  for (std::size_t d = dims.size(); d-- > 1;) {
    bool merge = true;
    for (const auto& s : strides) merge = merge && s[d - 1] == s[d] * dims[d];
    if (!merge) continue;
    dims[d - 1] *= dims[d];
    dims.erase(dims.begin() + static_cast<std::ptrdiff_t>(d));
    for (auto& s : strides) {
      s[d - 1] = s[d];
      s.erase(s.begin() + static_cast<std::ptrdiff_t>(d));
    }
  }
}

int64_t product(const std::vector<int64_t>& v, std::size_t from) {
  int64_t p = 1;
  for (std::size_t i = from; i < v.size(); ++i) p *= v[i];
  return p;
}

std::vector<int64_t> contiguous(const Shape& shape) { return broadcast_strides(shape, shape); }

std::string ints(const std::vector<int64_t>& v) { return fmt::format("[{}]", fmt::join(v, ",")); }

SplitExtent split_extent(const KernelSpec& k) {
  const KernelRow& row = kernel_row(k);
  if (k.empty || row.split == nullptr) return {};
  return row.split(k);
}

std::string make_key(const KernelSpec& k) {
  std::string key = kernel_row(k).key(k);
  if (k.chunk > 0) key += fmt::format("; in chunks of {}", k.chunk);  // (a RangeFn)
  return key;
}

std::string key_head(const KernelSpec& k, const char* kind, const std::vector<int64_t>& dims,
                     const std::vector<int64_t>& segments) {
  std::string key = std::string(kind) + " (";
  for (DType d : k.params) key += fmt::format("{} ", dtype_name(d));
  key += ") dims " + ints(dims) + (k.empty ? " empty" : "");
  if (!segments.empty()) key += " segments " + ints(segments);
  if (!k.align.empty()) key += " align " + ints(k.align);
  return key;
}

}  // namespace reel::codegen
