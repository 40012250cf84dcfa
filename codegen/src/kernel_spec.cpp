#include "kernel_spec.hpp"

#include <fmt/compile.h>
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

std::string ints(const std::vector<int64_t>& v) {
  std::string s;
  append_ints(s, v);
  return s;
}

void append_ints(std::string& to, const std::vector<int64_t>& v) {
  to.push_back('[');
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) to.push_back(',');
    fmt::format_to(std::back_inserter(to), FMT_COMPILE("{}"), v[i]);
  }
  to.push_back(']');
}

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
  for (DType d : k.params) key.append(dtype_name(d)).push_back(' ');
  key += ") dims ";
  append_ints(key, dims);
  if (k.empty) key += " empty";
  if (!segments.empty()) append_ints(key += " segments ", segments);
  if (!k.align.empty()) append_ints(key += " align ", k.align);
  return key;
}

}  // namespace reel::codegen
