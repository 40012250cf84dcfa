#include "reel/shape.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "reel/error.hpp"

namespace reel {

int64_t numel(const Shape& shape, const char* op) {
  // At most this many elements, so that a tensor's byte count (8 bytes an element,
  // rounded up to 64) fits in int64 wherever it is computed.
  constexpr int64_t kMaxElements = (INT64_MAX - 64) / 8;
  int64_t n = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n) || n > kMaxElements)
      throw Error(fmt::format("{}{}shape {}: expected at most {} elements (so that its bytes fit in int64), got more",
                              op ? op : "", op ? ": " : "", shape_str(shape), kMaxElements));
  return n;
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ",")); }

std::string type_str(DType dtype, const Shape& shape) {
  return fmt::format("{}{}", dtype_name(dtype), shape_str(shape));
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const std::size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      throw Error(fmt::format("{}: shapes {} and {} do not broadcast", op, shape_str(a),
                              shape_str(b)));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool broadcastable_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const std::size_t lead = to.size() - from.size();
  for (std::size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[lead + i]) return false;
  return true;
}

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

std::vector<int64_t> broadcast_strides(const Shape& shape, const Shape& target) {
  return broadcast_strides(contiguous_strides(shape), shape, target);
}

std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& strides, const Shape& shape, const Shape& target) {
  if (shape.size() > target.size() || strides.size() != shape.size())
    throw Error(fmt::format("broadcast_strides: {} (strides of rank {}) does not broadcast to {}", shape_str(shape),
                            strides.size(), shape_str(target)));
  std::vector<int64_t> out(target.size(), 0);
  const std::size_t lead = target.size() - shape.size();
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1) out[lead + d] = strides[d];
  return out;
}

}  // namespace reel
