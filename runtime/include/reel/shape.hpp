#pragma once
// Shapes and NumPy broadcasting. A Shape lists dimension sizes, outermost first;
// the empty shape is a 0-d scalar.
#include <cstdint>
#include <string>
#include <vector>

#include "reel/dtype.hpp"

namespace reel {

using Shape = std::vector<int64_t>;

// a == b, inline: the checks of a compiled call compare a few short shapes, for which
// a call to memcmp costs more than the comparison.
inline bool same_shape(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

// Throws reel::Error (naming `op` when given) if the shape has more elements than
// fit in int64 at 8 bytes each: such a tensor's byte count would overflow.
int64_t numel(const Shape& shape, const char* op = nullptr);

// "[3,4]" ("[]" for a scalar).
std::string shape_str(const Shape& shape);

// "f64[3,4]".
std::string type_str(DType dtype, const Shape& shape);

// NumPy broadcasting of two shapes; throws reel::Error naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// True if `from` broadcasts to `to` under NumPy rules.
bool broadcastable_to(const Shape& from, const Shape& to);

// Row-major element strides of a contiguous tensor of `shape` (the last dimension's is 1;
// a size-1 dimension's is that of the one after it times 1, not 0).
std::vector<int64_t> contiguous_strides(const Shape& shape);

// Row-major strides of `shape` as seen from an iteration over `target` that `shape`
// broadcasts to: size-1 and missing leading dimensions get stride 0.
std::vector<int64_t> broadcast_strides(const Shape& shape, const Shape& target);
// The same for a strided view of `shape` (`strides`, one per dimension: a slice's, a
// permutation's) broadcast to `target`. Throws reel::Error if `shape` has more
// dimensions than `target` or `strides` is not one per dimension.
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& strides, const Shape& shape, const Shape& target);

// Visits every element of `shape` in row-major order, handing `visit` its flat index
// and an offset that starts at 0 and moves by strides[d] along axis d (a broadcast
// operand's strides, or a permuted tensor's).
template <class Visit>
void for_each_strided(const Shape& shape, const std::vector<int64_t>& strides, Visit visit) {
  const std::size_t rank = shape.size();
  std::vector<int64_t> idx(rank, 0);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    visit(i, offset);
    for (std::size_t d = rank; d-- > 0;) {
      if (++idx[d] < shape[d]) {
        offset += strides[d];
        break;
      }
      offset -= strides[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}

}  // namespace reel
