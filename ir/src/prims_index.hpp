#pragma once
// Internal: what the layout primitives (prims_index.cpp) and the indexed ones
// (prims_gather.cpp) share.
#include <fmt/format.h>

#include "prims.hpp"

namespace reel::prims {

template <class Body>
inline void by_dtype(DType d, Body&& body) {
  if (d == DType::f64) body(double{});
  else if (d == DType::f32) body(float{});
  else body(int64_t{});
}

inline int64_t product(const Shape& s, std::size_t from, std::size_t to) {
  int64_t n = 1;
  for (std::size_t d = from; d < to; ++d) n *= s[d];
  return n;
}

// An axis of a tensor of `rank` dimensions; negative counts from the end.
inline int64_t checked_axis(const char* op, int64_t axis, std::size_t rank, const VarType& x) {
  const auto r = static_cast<int64_t>(rank);
  const int64_t a = axis < 0 ? axis + r : axis;
  if (a < 0 || a >= r) throw Error(fmt::format("{}: axis {} is out of range for {}", op, axis, type_str(x)));
  return a;
}

void add_gathers(std::vector<Primitive>& table);  // gather, scatter_add, index_update (prims_gather.cpp)

}  // namespace reel::prims
