#pragma once
// reel::grad and reel::vjp: value and gradients of a traced function, computed by
// playing the simplified gradient tape through the interpreter (one-off gradients
// are cheapest that way; reel::simplegrad compiles for gradients asked for again).
#include <array>
#include <functional>
#include <span>
#include <tuple>
#include <utility>
#include <type_traits>
#include <vector>

#include "reel/passes.hpp"
#include "reel/play.hpp"
#include "reel/trace.hpp"
#include "reel/track.hpp"
#include "reel/tree.hpp"

namespace reel {

struct GradResult {
  Tensor value;               // f's output
  std::vector<Tensor> grads;  // one per argument of f; undefined for non-tensor arguments
};

namespace detail {

// Every tensor of the arguments (in structs and containers too), in walk order: the
// traced tape's inputs.
// (Detached: playing a gradient tape records nothing for reel::back, even when an
// argument is a param.)
template <class... Args>
std::vector<Tensor> tensor_args(const Args&... args) {
  std::vector<Tensor> out;
  (for_each_tensor(args, [&](const Tensor& t) { out.push_back(detach(t)); }), ...);
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

// Throws reel::Error naming `op` unless each tangent has its argument's dtype and shape.
void check_tangents(const char* op, std::span<const Tensor> args, std::span<const Tensor> tangents);

// Inputs of a forward-mode tape of a traced function: its arguments, the lifted
// captures, the tangents, and zero tangents for the captures (k of them stacked when
// k >= 0: vector mode).
std::vector<Tensor> jvp_inputs(std::span<const Tensor> args, const std::vector<Tensor>& captured,
                               std::span<const Tensor> tangents, int64_t k = -1);

template <class F, std::size_t N, std::size_t... I>
Traced trace_array(F&& f, const Tensor (&args)[N], std::index_sequence<I...>) {
  return trace_lifting(true, std::forward<F>(f), args[I]...);
}

}  // namespace detail

// The steps of the one-off derivatives of a traced function (reel::trace with its
// captures lifted: detail::Traced), shared by the templates below and by front doors
// that trace functions of their own (the Python binding).

// A function of tensors traced for a front door whose arguments are not C++ values (the
// Python binding): f gets tensors traced as the tape's inputs (with `inputs`' values,
// in order) and returns the tensors that become its outputs. lift_captures and
// value_guards as detail::TraceScope's.
struct TracedTensors {
  Tape tape;
  std::vector<Tensor> captured;  // values of the lifted inputs, in order
};
TracedTensors trace_tensors(std::span<const Tensor> inputs,
                            const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& f,
                            bool lift_captures, bool value_guards);

// A vjp's seed must have the traced function's one output's dtype and shape (a
// reel::Error otherwise).
void check_seed(const Tape& tape, const Tensor& seed);

// reel::jvp's tangents: -1 when each has its argument's dtype and shape; k when each is
// k tangents stacked on a new leading axis ([k] + the argument's shape). Anything else
// is a reel::Error naming `op`.
int64_t tangent_count(const char* op, std::span<const Tensor> args, std::span<const Tensor> tangents);

// A gradient tape of a traced function (grad_tape, vjp_tape) returning only the value
// and the gradients of f's own num_args tensor arguments (not of the inputs lifted from
// an enclosing trace).
Tape own_gradients(const Tape& gradient_tape, std::size_t num_args);

// The one-off gradient recipe: own_gradients of `gradient_tape` played on f's own
// tensor arguments (detached: playing records nothing for reel::back), the captures
// lifted from an enclosing trace (detached here), then `extra` inputs (a vjp's seed).
// [value, gradient of each argument tensor].
std::vector<Tensor> play_gradient(const Tape& gradient_tape, std::vector<Tensor> args, std::span<const Tensor> captured,
                                  std::span<const Tensor> extra = {});

// Forward mode on a traced function: its forward-mode tape (k < 0: jvp_tape(tape);
// else jvp_tape(tape, k), k directions) played on its arguments, captures and tangents
// (tangent_count's k). [every output, every output's tangent].
std::vector<Tensor> play_forward(const Tape& tape, std::span<const Tensor> args, const std::vector<Tensor>& captured,
                                 std::span<const Tensor> tangents, int64_t k);

// The gradient of an argument that holds no tensors.
struct NoGradient {};

template <class T>
using gradient_type = std::conditional_t<detail::may_hold_tensors<T>(), T, NoGradient>;

// The value of f and the gradients of its arguments (Yota's GradientResult).
template <class... G>
struct WithGradient {
  Tensor value;
  std::tuple<G...> grad;
};

namespace detail {

// An argument's gradient: the argument rebuilt (reel/tree.hpp) with the gradients
// grads[next], grads[next + 1], ... as its leaves.
template <class T>
gradient_type<T> gradient_like(const T& arg, std::span<const Tensor> grads, std::size_t& next) {
  if constexpr (may_hold_tensors<T>()) return refill(arg, grads, next, "gradient");
  else return NoGradient{};
}

// outs = [value, the gradients of all arguments' leaves, in walk order].
template <class... A>
WithGradient<gradient_type<A>...> gradients_of(std::span<const Tensor> outs, const A&... args) {
  const std::size_t leaves = (std::size_t{0} + ... + count_leaves(args));
  if (outs.size() != leaves + 1) throw_leaf_count("gradient", leaves + 1, outs.size());
  std::size_t next = 1;
  // Braced initialisation evaluates left to right, in walk order.
  return {outs[0], std::tuple<gradient_type<A>...>{gradient_like(args, outs, next)...}};
}

template <class... A>
constexpr bool only_tensors_and_plain() {
  return ((std::is_same_v<A, Tensor> || !may_hold_tensors<A>()) && ...);
}

}  // namespace detail

// With tensor and plain arguments: a GradResult (.value, .grads: one tensor per
// argument, undefined for plain ones). With a struct or container argument
// (reel/fields.hpp): what reel::withgradient returns (.value, .grad: a tuple with
// each argument's gradient of its own type).
template <class F, class... Args>
auto grad(F&& f, const Args&... args) {
  if constexpr (detail::takes_reals<F>()) {
    return detail::with_real_args(
        std::forward<F>(f), [](auto g, const auto&... a) { return grad(std::move(g), a...); }, args...);
  } else {
    static_assert(sizeof...(Args) > 0,
                  "reel::grad(f): f has no arguments, so there is nothing to differentiate; to differentiate tensors f "
                  "captures, list them: reel::gradient(f, reel::Params{W, b})");
    const detail::Traced t = detail::trace_lifting(true, std::forward<F>(f), args...);
    const std::vector<Tensor> outs = play_gradient(grad_tape(t.tape), detail::tensor_args(args...), t.captured);
    if constexpr (detail::only_tensors_and_plain<Args...>())
      return detail::spread_grads<Args...>(outs);
    else
      return detail::gradients_of(outs, args...);
  }
}

// Vector-Jacobian product for a function with a non-scalar output: the gradients of
// sum(seed * f(args...)). `seed` has the output's dtype and shape.
template <class F, class... Args>
GradResult vjp(F&& f, const Tensor& seed, const Args&... args) {
  if constexpr (detail::takes_reals<F>()) {
    return detail::with_real_args(
        std::forward<F>(f), [&](auto g, const auto&... a) { return vjp(std::move(g), seed, a...); }, args...);
  } else {
    const detail::Traced t = detail::trace_lifting(true, std::forward<F>(f), args...);
    check_seed(t.tape, seed);
    return detail::spread_grads<Args...>(
        play_gradient(vjp_tape(t.tape), detail::tensor_args(args...), t.captured, std::span<const Tensor>(&seed, 1)));
  }
}

struct JvpResult {
  Tensor value;                   // f's output (its first, if it has several)
  Tensor tangent;                 // its directional derivative along the tangents
  std::vector<Tensor> values;     // every output
  std::vector<Tensor> tangents;   // every output's directional derivative
};

// Forward mode: the value of f(args...) and its directional derivative J(args) * t,
// through the forward-mode tape (jvp_tape), played by the interpreter:
//   auto r = reel::jvp(f, {x, y}, {tx, ty});   // r.value, r.tangent
// Each tangent has its argument's dtype and shape. Vector mode: when every tangent has
// one more leading axis of the same length k ([k] + its argument's shape: k directions),
// all k directional derivatives come from one pass (jvp_tape(tape, k): the forward tape
// batched over the directions), and each output's tangent is [k] + its shape.
template <class F, std::size_t N>
JvpResult jvp(F&& f, const Tensor (&args)[N], const Tensor (&tangents)[N]) {
  if constexpr (detail::takes_reals<F>()) {
    return jvp(detail::RealParams<std::decay_t<F>>{std::forward<F>(f)}, args, tangents);
  } else {
    const int64_t k = tangent_count("jvp", args, tangents);
    const detail::Traced t = detail::trace_array(std::forward<F>(f), args, std::make_index_sequence<N>{});
    const std::vector<Tensor> out = play_forward(t.tape, args, t.captured, tangents, k);
    JvpResult r;
    const std::size_t m = out.size() / 2;
    r.values.assign(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(m));
    r.tangents.assign(out.begin() + static_cast<std::ptrdiff_t>(m), out.end());
    if (m > 0) r.value = r.values[0], r.tangent = r.tangents[0];
    return r;
  }
}

struct HvpResult {
  Tensor value;               // f's output (a scalar)
  std::vector<Tensor> grads;  // its gradient, one per argument
  std::vector<Tensor> hvp;    // the Hessian times v, one per argument
};

// Hessian-vector product of a scalar-valued f, forward over reverse: the forward-mode
// tape of the gradient tape, along v. With k vectors stacked on a new leading axis
// ([k] + each argument's shape, as for reel::jvp) all k products come from one pass,
// each hvp entry [k] + its argument's shape.
template <class F, std::size_t N>
HvpResult hvp(F&& f, const Tensor (&args)[N], const Tensor (&v)[N]) {
  if constexpr (detail::takes_reals<F>()) {
    return hvp(detail::RealParams<std::decay_t<F>>{std::forward<F>(f)}, args, v);
  } else {
    const int64_t k = tangent_count("hvp", args, v);
    const detail::Traced t = detail::trace_array(std::forward<F>(f), args, std::make_index_sequence<N>{});
    const std::vector<Tensor> out = play_forward(own_gradients(grad_tape(t.tape), N), args, t.captured, v, k);
    HvpResult r{out.at(0), {}, {}};
    for (std::size_t i = 0; i < N; ++i) {
      r.grads.push_back(out.at(1 + i));
      r.hvp.push_back(out.at(N + 2 + i));  // after [value, grads..., d value]
    }
    return r;
  }
}

}  // namespace reel
