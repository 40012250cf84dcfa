#pragma once
// reel::grad and reel::vjp: value and gradients of a traced function, computed by
// playing the simplified gradient tape through the interpreter (one-off gradients
// are cheapest that way; reel::simplegrad compiles for gradients asked for again).
#include <array>
#include <type_traits>
#include <vector>

#include "reel/passes.hpp"
#include "reel/play.hpp"
#include "reel/trace.hpp"

namespace reel {

struct GradResult {
  Tensor value;               // f's output
  std::vector<Tensor> grads;  // one per argument of f; undefined for non-tensor arguments
};

namespace detail {

template <class... Args>
std::vector<Tensor> tensor_args(const Args&... args) {
  std::vector<Tensor> out;
  auto add = [&](const auto& a) {
    if constexpr (std::is_same_v<std::decay_t<decltype(a)>, Tensor>) out.push_back(a);
  };
  (add(args), ...);
  return out;
}

// outs = [value, gradient of each tensor argument]; spread over all arguments.
template <class... Args>
GradResult spread_grads(const std::vector<Tensor>& outs) {
  constexpr std::array<bool, sizeof...(Args)> is_tensor{std::is_same_v<Args, Tensor>...};
  GradResult r{outs.at(0), {}};
  std::size_t next = 1;
  for (bool t : is_tensor) r.grads.push_back(t ? outs.at(next++) : Tensor{});
  return r;
}

void check_seed(const Tape& tape, const Tensor& seed);

}  // namespace detail

template <class F, class... Args>
GradResult grad(F&& f, const Args&... args) {
  const Tape g = grad_tape(trace(std::forward<F>(f), args...));
  return detail::spread_grads<Args...>(play(g, detail::tensor_args(args...)));
}

// Vector-Jacobian product for a function with a non-scalar output: the gradients of
// sum(seed * f(args...)). `seed` has the output's dtype and shape.
template <class F, class... Args>
GradResult vjp(F&& f, const Tensor& seed, const Args&... args) {
  const Tape t = trace(std::forward<F>(f), args...);
  detail::check_seed(t, seed);
  std::vector<Tensor> in = detail::tensor_args(args...);
  in.push_back(seed);
  return detail::spread_grads<Args...>(play(vjp_tape(t), in));
}

}  // namespace reel
