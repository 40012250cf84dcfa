#pragma once
#include <cstddef>
#include <string_view>

namespace reel {

// f32 and f64 carry values and gradients; i64 holds indices (arange, argmax, gather's
// indices): no gradient flows into or out of it, and only the operations that say so
// accept it (an error names the operation otherwise).
enum class DType { f32, f64, i64 };

constexpr std::string_view dtype_name(DType t) {
  return t == DType::f32 ? "f32" : t == DType::f64 ? "f64" : "i64";
}
constexpr std::size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 8; }
constexpr bool is_float(DType t) { return t != DType::i64; }

}  // namespace reel
