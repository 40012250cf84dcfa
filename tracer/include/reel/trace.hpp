#pragma once
// reel::trace(f, args...): run f on tracing tensors and record a tape.
//
// Tensor arguments become the tape's inputs, in order; every other argument is passed
// to f unchanged, and tensors that f captures or makes from plain numbers become
// constants (reel::grad and reel::vjp instead make tensors captured from an enclosing
// trace extra inputs, so nested derivatives see through closures). Values are computed
// while tracing, so item() and values() work inside f (but a branch taken on a value
// is recorded as taken: the tape is for these shapes and this path). f may return any
// tree of tensors (reel/tree.hpp): a Tensor, a std::vector<Tensor>, a tuple or pair of
// them, a struct listed with REEL_FIELDS; its leaves are the outputs. Traces nest: tracing a
// function that itself traces (e.g. calls grad) keeps each trace's tape separate; an
// operation is recorded on every active trace that one of its inputs belongs to.
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "reel/fields.hpp"
#include "reel/tree.hpp"
#include "reel/real_args.hpp"
#include "reel/ir/tape.hpp"

namespace reel {

namespace detail {

class Trace;

// Owns one trace while it is active on this thread. With lift_captures, tensors that
// f captures from an enclosing active trace become extra inputs of the tape (after
// f's own), listed by captured(), instead of constants: differentiating such a tape
// and playing it on those tensors keeps the enclosing trace's dependence on them.
class TraceScope {
 public:
  // value_guards: values read with item() or values() become guards on those values
  // (traces made for a cache, which must not reuse code traced with another value, and
  // loop bodies, which run for every iteration: loop_body).
  explicit TraceScope(bool lift_captures = false, bool value_guards = false);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

  Tensor input(const Tensor& value);  // a new tape input with this value
  // An operation on an untraced tensor sharing `value`'s memory is then a reel::Error
  // (`why` says what to do): for reel::Params, whose copies would get no gradient.
  void forbid_untraced_copies(const Tensor& value, std::string why);
  void output(const Tensor& value);
  // The leaves of f's result (a tree, reel/tree.hpp) become outputs, in walk order.
  template <class R>
  void output_tree(const R& result) {
    static_assert(is_tree<R>(),
                  "reel::trace: f must return tensors: a Tensor, or a struct (REEL_FIELDS), std::vector, std::array, "
                  "tuple, pair or optional of them");
    for_each_tensor(result, [&](const Tensor& t) { output(t); });
  }
  Tape finish();
  const std::vector<Tensor>& captured() const;
  // A loop body's trace: tensors tracked for reel::back (params) that f captures become
  // lifted inputs too, so that the loop's call carries their gradient.
  void lift_tracked();
  // A loop body's trace (op: "scan", "fori_loop", "while_loop"), made with value_guards:
  // its guards on values read name the loop, whose every iteration checks them.
  void loop_body(const char* op);
  // How many times f read the values of this trace's tensors (item(), values(), a
  // branch on one): a while_loop's cond that reads one runs as the C++ loop it is.
  int64_t values_read() const;

  // A tensor argument becomes an input; a struct or container of tensors (listed
  // with REEL_FIELDS, reel/fields.hpp) a copy whose tensors are inputs, in walk order;
  // anything else is passed on as it is.
  template <class T>
  decltype(auto) wrap(const T& arg) {
    if constexpr (std::is_same_v<std::decay_t<T>, Tensor>) {
      return input(arg);
    } else if constexpr (may_hold_tensors<T>()) {
      T copy = arg;
      for_each_tensor(copy, [&](Tensor& t) { t = input(t); });
      return copy;
    } else {
      return (arg);
    }
  }

 private:
  Trace* trace_;
};

// While it lives, values read on this thread (item(), values()) become guards on every
// trace that records them, not only on traces made for a cache (value_guards): a
// while_loop whose cond reads one runs as C++, and a tape of it must re-check them.
class GuardValueReads {
 public:
  GuardValueReads();
  ~GuardValueReads();
  GuardValueReads(const GuardValueReads&) = delete;
  GuardValueReads& operator=(const GuardValueReads&) = delete;
};

struct Traced {
  Tape tape;
  std::vector<Tensor> captured;  // values of the lifted inputs, in order
  bool read_values = false;      // f read values of its inputs (TraceScope::values_read)
};

// A traced call of f (a loop body, a checkpoint, a vmapped function): its tape, the
// tensors lifted into it (its captures and the tracked params it reads), and f's result
// as traced (its structure, to refill with the call's results).
template <class R>
struct TracedCall {
  Tape tape;
  std::vector<Tensor> captured;
  std::optional<R> like;
};

// Traces f on the arguments wrap(scope) makes (a tuple of the wrapped arguments, the
// tensors among them inputs of `scope`, in order), lifting captures and tracked params.
// value_guards: values f reads (item(), values()) become guards on those values (a
// function traced on one element and run on others: reel::vmap).
template <class R, class F, class Wrap>
TracedCall<R> trace_call(const F& f, Wrap&& wrap, bool value_guards = false) {
  TracedCall<R> t;
  TraceScope scope(/*lift_captures=*/true, value_guards);
  scope.lift_tracked();
  auto wrapped = wrap(scope);
  t.like.emplace(std::apply(f, wrapped));
  scope.output_tree(*t.like);
  t.captured = scope.captured();
  t.tape = scope.finish();
  return t;
}

template <class F, class... Args>
Traced trace_lifting(bool lift_captures, F&& f, const Args&... args) {
  TraceScope scope(lift_captures);
  // Braced initialisation evaluates left to right, so inputs are numbered in order.
  std::tuple<decltype(scope.wrap(args))...> wrapped{scope.wrap(args)...};
  const auto result = std::apply(std::forward<F>(f), wrapped);
  scope.output_tree(result);
  std::vector<Tensor> captured = scope.captured();
  const bool read = scope.values_read() > 0;
  return {scope.finish(), std::move(captured), read};
}

}  // namespace detail

template <class F, class... Args>
Tape trace(F&& f, const Args&... args) {
  if constexpr (detail::takes_reals<F>()) {
    return detail::with_real_args(
        std::forward<F>(f), [](auto g, const auto&... a) { return trace(std::move(g), a...); }, args...);
  } else {
    return detail::trace_lifting(false, std::forward<F>(f), args...).tape;
  }
}

// True if an active trace on this thread is recording `t` (it is an input of a traced
// function or computed from one).
bool is_traced(const Tensor& t);

}  // namespace reel
