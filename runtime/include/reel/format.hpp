#pragma once
// fmt support: fmt::print("{}", tensor) prints "f64[3] [1, 2, 3]".
#include <fmt/format.h>

#include "reel/tensor.hpp"

namespace reel {
std::string to_string(const Tensor& t);
}

template <>
struct fmt::formatter<reel::Tensor> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(const reel::Tensor& t, Ctx& ctx) const {
    return fmt::formatter<std::string_view>::format(reel::to_string(t), ctx);
  }
};
