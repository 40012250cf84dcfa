#pragma once
// Shapes and NumPy broadcasting. A Shape lists dimension sizes, outermost first;
// the empty shape is a 0-d scalar.
#include <cstdint>
#include <string>
#include <vector>

#include "reel/dtype.hpp"

namespace reel {

using Shape = std::vector<int64_t>;

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

// Row-major strides of `shape` as seen from an iteration over `target` that `shape`
// broadcasts to: size-1 and missing leading dimensions get stride 0.
std::vector<int64_t> broadcast_strides(const Shape& shape, const Shape& target);

}  // namespace reel
