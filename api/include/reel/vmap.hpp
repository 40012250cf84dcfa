#pragma once
// reel::vmap (after jax.vmap and functorch.vmap): a function mapped over a batch axis of
// its arguments, computed for the whole batch at once by the batching pass.
//
//   auto f = [](const Tensor& x, const Tensor& w) { return reel::sum(reel::tanh(x * w)); };
//   auto fb = reel::vmap(f, {0, reel::none});    // x: [B, n] batched on axis 0, w: [n] shared
//   Tensor y = fb(xs, w);                        // y: [B], y[j] = f(xs[j], w)
//   auto per_example = reel::vmap([&](const Tensor& x) { return reel::grad(loss, x, W).grads[1]; });
//
// in_axes: one per argument of the call (or one number for all): the axis of that
// argument's tensors that is the batch, or reel::none for an argument shared by every
// batch element. Every tensor of a batched argument (a struct or container: each leaf) is
// batched along that axis; all batched tensors must have the same size there. Arguments
// that hold no tensors are passed to f as they are. out_axes: where the batch axis goes
// in each output leaf (one number for all, or one per leaf in walk order); default 0.
//
// How it works: f is traced once, on the first batch element (so, as with any trace, a
// branch on a value is a guard: one taken otherwise by another batch element raises
// reel::GuardFailure; and a value f reads with item() or values() is a guard that every
// element has the first one's value), the batching pass (reel::vmap_tape) rewrites its tape for the
// whole batch, and the batched tape is played on the arguments. Playing records into an
// enclosing trace, so vmap composes: grad of a vmapped function, vmap of grad (per-example
// gradients), vmap of vmap, and reel::jit / simplegrad compile and cache it. Called on
// its own it traces and batches on every call: wrap it in reel::jit for repeated calls.
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "reel/loops.hpp"
#include "reel/passes.hpp"
#include "reel/play.hpp"
#include "reel/trace.hpp"
#include "reel/tree.hpp"

namespace reel {

// A batch axis, or none (reel::none: not batched).
struct Axis {
  std::optional<int64_t> axis;
  Axis(int a) : axis(a) {}
  Axis(int64_t a) : axis(a) {}
  Axis(None) {}
  Axis(std::nullopt_t) {}
};

// One axis for every argument (or output), or one each.
struct Axes {
  std::vector<Axis> each;
  std::optional<Axis> all;
  Axes(int a) : all(Axis(a)) {}
  Axes(int64_t a) : all(Axis(a)) {}
  Axes(None) : all(Axis(none)) {}
  Axes(std::initializer_list<Axis> list) : each(list) {}
  Axes(std::vector<Axis> list) : each(std::move(list)) {}
  // The axis of item i of n; throws reel::Error naming `what` when the count differs.
  Axis at(std::size_t i, std::size_t n, const char* what) const;
};

namespace detail {

// The batch: each tensor argument's leaves with their batch axis (or none).
struct VmapInputs {
  std::vector<Tensor> leaves;             // every tensor leaf, in walk order
  std::vector<std::optional<int64_t>> axes;  // its batch axis (normalised), per leaf
  int64_t size = -1;
  // For tracing: each leaf's first batch element (or the leaf itself); to play on:
  // the batched leaves with the batch moved in front.
  std::vector<Tensor> examples, fronts;
  void add(const Tensor& t, std::optional<int64_t> axis, std::size_t argument);
  void finish();  // checks there is a batch and fills examples and fronts
};

template <class T>
void vmap_add(VmapInputs& in, const T& arg, const Axes& axes, std::size_t i, std::size_t n) {
  const Axis a = axes.at(i, n, "in_axes");
  if constexpr (may_hold_tensors<T>())
    for_each_tensor(arg, [&](const Tensor& t) { in.add(t, a.axis, i); });
}

// The traced copy of an argument: its leaves replaced by inputs holding their first
// batch element; an argument without tensors as it is.
template <class T>
decltype(auto) vmap_wrap(TraceScope& scope, const T& arg, const VmapInputs& in, std::size_t& next) {
  if constexpr (std::is_same_v<T, Tensor>) {
    return scope.input(in.examples[next++]);
  } else if constexpr (may_hold_tensors<T>()) {
    T copy = arg;
    for_each_tensor(copy, [&](Tensor& t) { t = scope.input(in.examples[next++]); });
    return copy;
  } else {
    return (arg);
  }
}

// Plays the batched tape of `body` (inputs: the leaves, then `captured`) on the batch
// and moves each output's batch axis to out_axes.
std::vector<Tensor> run_vmap(const Tape& body, const VmapInputs& in, const std::vector<Tensor>& captured,
                             const Axes& out_axes);

}  // namespace detail

template <class G>
auto vmap(G g, Axes in_axes = 0, Axes out_axes = 0) {
  // (A function of Reals takes each example's tensors as its Real types: reel/real_args.hpp.)
  using F = detail::callable_t<G>;
  return [f = detail::real_callable(std::move(g)), in_axes = std::move(in_axes),
          out_axes = std::move(out_axes)](const auto&... args) {
    constexpr std::size_t n = sizeof...(args);
    detail::VmapInputs in;
    std::size_t i = 0;
    (detail::vmap_add(in, args, in_axes, i++, n), ...);
    in.finish();
    using R = std::decay_t<std::invoke_result_t<const F&, const decltype(args)&...>>;
    static_assert(detail::is_tree<R>(),
                  "reel::vmap: f must return tensors: a Tensor, or a struct (REEL_FIELDS), std::vector, "
                  "std::array, tuple, pair or optional of them");
    std::size_t next = 0;
    // Braced initialisation evaluates left to right: the inputs are the leaves in order.
    detail::TracedCall<R> t = detail::trace_call<R>(f, [&](detail::TraceScope& scope) {
      return std::tuple<decltype(detail::vmap_wrap(scope, args, in, next))...>{
          detail::vmap_wrap(scope, args, in, next)...};
    }, /*value_guards=*/true);
    const std::vector<Tensor> out = detail::run_vmap(t.tape, in, t.captured, out_axes);
    next = 0;
    if constexpr (packed_leaf<R>::value)
      return out.at(0);  // a Real (or a container of them) per example: the batch of them as one tensor
    else
      return detail::refill(*t.like, out, next, "vmap");
  };
}

}  // namespace reel
