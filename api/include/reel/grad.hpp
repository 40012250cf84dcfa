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

// The gradient tape of a traced function, returning only the value and the gradients
// of f's own tensor arguments (not of the inputs lifted from an enclosing trace).
Tape own_gradients(const Tape& gradient_tape, std::size_t num_args);

}  // namespace detail

template <class F, class... Args>
GradResult grad(F&& f, const Args&... args) {
  const detail::Traced t = detail::trace_lifting(true, std::forward<F>(f), args...);
  std::vector<Tensor> in = detail::tensor_args(args...);
  const Tape g = detail::own_gradients(grad_tape(t.tape), in.size());
  in.insert(in.end(), t.captured.begin(), t.captured.end());
  return detail::spread_grads<Args...>(play(g, in));
}

// Vector-Jacobian product for a function with a non-scalar output: the gradients of
// sum(seed * f(args...)). `seed` has the output's dtype and shape.
template <class F, class... Args>
GradResult vjp(F&& f, const Tensor& seed, const Args&... args) {
  const detail::Traced t = detail::trace_lifting(true, std::forward<F>(f), args...);
  detail::check_seed(t.tape, seed);
  std::vector<Tensor> in = detail::tensor_args(args...);
  const Tape g = detail::own_gradients(vjp_tape(t.tape), in.size());
  in.insert(in.end(), t.captured.begin(), t.captured.end());
  in.push_back(seed);
  return detail::spread_grads<Args...>(play(g, in));
}

}  // namespace reel
