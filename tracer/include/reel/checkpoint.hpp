#pragma once
// Rematerialisation (Zygote's `checkpointed`, Tracker's `checkpoint`, jax.checkpoint):
// reel::checkpoint(f) is f, except that reverse mode recomputes f's forward computation
// in the backward pass instead of keeping its intermediate values.
//
//   auto block = reel::checkpoint([&](const Tensor& x) { return reel::tanh(reel::matmul(W, x)) + x; });
//   Tensor y = block(block(x0));   // a gradient keeps x0 and block(x0), not each block's tanh
//
// Each call of the returned function traces f into a tape (its body) and records one
// `checkpoint(args...) {body=...}` operation; called on untraced tensors it computes f.
// f takes and returns trees of tensors (reel/tree.hpp: a Tensor, a REEL_FIELDS struct,
// std::vector, std::pair, std::tuple, ...; other arguments are passed on as they are and
// become part of the body). Tensors f captures become arguments of the call (gradients
// reach them, also params tracked for reel::back). The gradient tape keeps only the
// call's arguments from its forward part to its backward part, where a `call` of the
// body's vector-Jacobian product computes the body again and its gradients. Forward
// mode gives a checkpoint of the body's jvp; second order works (grad of grad, hvp).
// As in a loop body, f is traced on the values of the call: a branch on a value inside
// f is a guard.
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "reel/trace.hpp"
#include "reel/tree.hpp"

namespace reel {

namespace detail {

// Records (or, untraced, runs) checkpoint(args..., captured...) {body} and returns its results.
std::vector<Tensor> run_checkpoint(Tape body, const std::vector<Tensor>& args, const std::vector<Tensor>& captured);

template <class T>
void append_leaves(std::vector<Tensor>& out, const T& x) {
  if constexpr (may_hold_tensors<T>()) for_each_tensor(x, [&](const Tensor& t) { out.push_back(t); });
}

}  // namespace detail

template <class F>
auto checkpoint(F f) {
  return [f = std::move(f)](const auto&... args) {
    using R = std::decay_t<std::invoke_result_t<const F&, const decltype(args)&...>>;
    static_assert(detail::is_tree<R>(),
                  "reel::checkpoint: f must return tensors: a Tensor, or a struct (REEL_FIELDS), std::vector, "
                  "std::array, tuple, pair or optional of them");
    // Braced initialisation evaluates left to right: the inputs are the leaves in order.
    detail::TracedCall<R> t = detail::trace_call<R>(
        f, [&](detail::TraceScope& scope) { return std::tuple<decltype(scope.wrap(args))...>{scope.wrap(args)...}; });
    std::vector<Tensor> leaves;
    (detail::append_leaves(leaves, args), ...);
    const std::vector<Tensor> out = detail::run_checkpoint(std::move(t.tape), leaves, t.captured);
    std::size_t next = 0;
    return detail::refill(*t.like, out, next, "checkpoint");
  };
}

}  // namespace reel
