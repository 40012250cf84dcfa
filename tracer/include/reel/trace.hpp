#pragma once
// reel::trace(f, args...): run f on tracing tensors and record a tape.
//
// Tensor arguments become the tape's inputs, in order; every other argument is passed
// to f unchanged, and tensors that f captures or makes from plain numbers become
// constants. Values are computed while tracing, so item() and values() work inside f
// (but a branch taken on a value is recorded as taken: the tape is for these shapes
// and this path). f may return a Tensor, a std::vector<Tensor>, or a tuple or pair of
// Tensors. Traces nest: tracing a function that itself traces (e.g. calls grad) keeps
// each trace's tape separate; an operation is recorded on every active trace that one
// of its inputs belongs to.
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "reel/ir/tape.hpp"

namespace reel {

namespace detail {

class Trace;

// Owns one trace while it is active on this thread.
class TraceScope {
 public:
  TraceScope();
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

  Tensor input(const Tensor& value);  // a new tape input with this value
  void output(const Tensor& value);
  Tape finish();

  template <class T>
  decltype(auto) wrap(const T& arg) {
    if constexpr (std::is_same_v<std::decay_t<T>, Tensor>) return input(arg);
    else return (arg);
  }

 private:
  Trace* trace_;
};

template <class T> struct is_tensor_tuple : std::false_type {};
template <class... T> struct is_tensor_tuple<std::tuple<T...>> : std::true_type {};
template <class A, class B> struct is_tensor_tuple<std::pair<A, B>> : std::true_type {};

template <class R>
void collect_outputs(TraceScope& scope, const R& result) {
  if constexpr (std::is_same_v<R, Tensor>) {
    scope.output(result);
  } else if constexpr (std::is_same_v<R, std::vector<Tensor>>) {
    for (const Tensor& t : result) scope.output(t);
  } else if constexpr (is_tensor_tuple<R>::value) {
    std::apply([&](const auto&... t) { (collect_outputs(scope, t), ...); }, result);
  } else {
    static_assert(std::is_same_v<R, Tensor>,
                  "reel::trace: f must return a Tensor, std::vector<Tensor>, or a tuple of them");
  }
}

}  // namespace detail

template <class F, class... Args>
Tape trace(F&& f, const Args&... args) {
  detail::TraceScope scope;
  // Braced initialisation evaluates left to right, so inputs are numbered in order.
  std::tuple<decltype(scope.wrap(args))...> wrapped{scope.wrap(args)...};
  const auto result = std::apply(std::forward<F>(f), wrapped);
  detail::collect_outputs(scope, result);
  return scope.finish();
}

}  // namespace reel
