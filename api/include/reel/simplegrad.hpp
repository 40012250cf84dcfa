#pragma once
// reel::compile_grad(f, args...): trace f once at these arguments, derive and simplify
// its gradient tape, compile it at once, and return a function for new arguments of
// the same types:
//   auto g = reel::compile_grad(loss, W, b, x);
//   auto [value, dW, db, dx] = g(W2, b2, x2);
// Its old spelling reel::simplegrad(f, args...) keeps working. (reel::jit_grad(f), old
// spelling reel::simplegrad(f) or simplegrad(f, JitOptions), in reel/jit.hpp, is the
// cache: it traces each signature and path when it first sees it.)
#include <array>
#include <type_traits>

#include "reel/compile.hpp"
#include "reel/grad.hpp"
#include "reel/jit.hpp"
#include "reel/passes.hpp"
#include "reel/trace.hpp"

namespace reel {

namespace detail {
// The compiled gradient tape of a traced function. The traced tape is dropped before
// compiling (its memory back for the compiler's: at 10^6 traced operations, 0.2 GB of
// peak memory).
CompiledFunction compile_gradient(Tape traced);
}  // namespace detail

template <std::size_t N>
class GradFunction {
 public:
  explicit GradFunction(CompiledFunction compiled) : compiled_(std::move(compiled)) {}

  // The value of f and its gradient with respect to each argument.
  template <class... T>
  std::array<Tensor, N + 1> operator()(const T&... args) const {
    static_assert(sizeof...(T) == N, "simplegrad: call with as many arguments as were traced");
    static_assert(((std::is_same_v<T, Tensor> || real_number_arg<T>::value) && ...),
                  "simplegrad: arguments are Tensors (or, for a function of Reals, numbers)");
    if constexpr (!(std::is_same_v<T, Tensor> && ...)) {
      return (*this)(detail::as_tensor(args)...);  // numbers given for a function of Reals
    } else {
      const std::array<const Tensor*, N> in{&args...};
      std::array<Tensor, N + 1> result;
      compiled_.run(in, result);
      return result;
    }
  }

  const Tape& tape() const { return compiled_.tape(); }  // the compiled gradient tape
  const CompiledFunction& compiled() const { return compiled_; }

 private:
  CompiledFunction compiled_;
};

// compile_grad(f, args...) with struct or container arguments (REEL_FIELDS): g(args...)
// returns what reel::withgradient returns ({value, tuple of each argument's gradient
// of its own type}). The arguments' tensors must have the traced types, and their
// plain fields (numbers, enums, strings) the traced values, which are constants of
// the compiled code (a reel::Error otherwise: reel::jit_grad(f) retraces instead).
template <class... Args>
class StructGradFunction {
 public:
  StructGradFunction(CompiledFunction compiled, std::string key)
      : compiled_(std::move(compiled)), key_(std::move(key)) {}

  auto operator()(const Args&... args) const {
    CacheKey key;
    detail::make_key(key, args...);
    if (key.view() != key_)
      throw Error(fmt::format("simplegrad: the arguments' structure, tensor types or plain values differ from those "
                              "traced ({}); reel::jit_grad(f) (reel::simplegrad(f)) traces each signature",
                              fmt::join(detail::describe_args(args...), "; ")));
    const auto tensors = detail::tensor_pointers(args...);
    std::vector<Tensor> outs(tensors.size() + 1);
    compiled_.run(tensors, outs);
    return detail::gradients_of(outs, args...);
  }

  const Tape& tape() const { return compiled_.tape(); }
  const CompiledFunction& compiled() const { return compiled_; }

 private:
  CompiledFunction compiled_;
  std::string key_;
};

template <class F, class... Args>
auto compile_grad(F&& f, const Args&... args) {
  if constexpr (detail::takes_reals<F>()) {
    return detail::with_real_args(
        std::forward<F>(f), [](auto g, const auto&... a) { return compile_grad(std::move(g), a...); }, args...);
  } else {
    if constexpr ((std::is_same_v<Args, Tensor> && ...)) {
      return GradFunction<sizeof...(Args)>(detail::compile_gradient(trace(std::forward<F>(f), args...)));
    } else {
      static_assert((detail::may_hold_tensors<Args>() && ...),
                    "simplegrad: every argument must be a Tensor or a struct or container of them (REEL_FIELDS); "
                    "capture other values in f, or use reel::jit_grad(f), which keys on them");
      CacheKey key;
      detail::make_key(key, args...);
      return StructGradFunction<Args...>(detail::compile_gradient(trace(std::forward<F>(f), args...)),
                                         std::string(key.view()));
    }
  }
}

// The old spelling of compile_grad.
template <class F, class... Args>
auto simplegrad(F&& f, const Args&... args) {
  return compile_grad(std::forward<F>(f), args...);
}

}  // namespace reel
