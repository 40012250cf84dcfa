#pragma once
#include <cstddef>
#include <string_view>

namespace reel {

enum class DType { f32, f64 };

constexpr std::string_view dtype_name(DType t) { return t == DType::f32 ? "f32" : "f64"; }
constexpr std::size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 8; }

}  // namespace reel
