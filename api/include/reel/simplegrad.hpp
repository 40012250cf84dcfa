#pragma once
// reel::simplegrad(f, args...): trace f once, derive and simplify its gradient tape,
// compile it, and return a function for new arguments of the same types:
//   auto g = reel::simplegrad(loss, W, b, x);
//   auto [value, dW, db, dx] = g(W2, b2, x2);
#include <array>
#include <type_traits>

#include "reel/compile.hpp"
#include "reel/passes.hpp"
#include "reel/trace.hpp"

namespace reel {

template <std::size_t N>
class GradFunction {
 public:
  explicit GradFunction(CompiledFunction compiled) : compiled_(std::move(compiled)) {}

  // The value of f and its gradient with respect to each argument.
  template <class... T>
  std::array<Tensor, N + 1> operator()(const T&... args) const {
    static_assert(sizeof...(T) == N, "simplegrad: call with as many arguments as were traced");
    static_assert((std::is_same_v<T, Tensor> && ...), "simplegrad: arguments are Tensors");
    const std::array<const Tensor*, N> in{&args...};
    std::array<Tensor, N + 1> result;
    compiled_.run(in, result);
    return result;
  }

  const Tape& tape() const { return compiled_.tape(); }  // the compiled gradient tape
  const CompiledFunction& compiled() const { return compiled_; }

 private:
  CompiledFunction compiled_;
};

template <class F, class... Args>
GradFunction<sizeof...(Args)> simplegrad(F&& f, const Args&... args) {
  static_assert((std::is_same_v<Args, Tensor> && ...),
                "simplegrad: every argument must be a Tensor (capture other values in f)");
  return GradFunction<sizeof...(Args)>(compile(grad_tape(trace(std::forward<F>(f), args...))));
}

}  // namespace reel
