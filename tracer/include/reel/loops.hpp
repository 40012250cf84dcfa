#pragma once
// Loops as loops (after jax.lax.scan, fori_loop and while_loop): the body is traced once
// into a tape, and the loop is one operation that runs it, so a loop costs what its body
// costs, not what its unrolled trace would. Carries, xs and ys are trees of tensors
// (reel/tree.hpp: a Tensor, a struct listed with REEL_FIELDS, std::vector, std::array,
// std::pair, std::tuple, ...).
//
//   // y_{t+1} = tanh(W y_t + x_t); h collects every y.
//   auto [y, h] = reel::scan([&](const Tensor& y, const Tensor& x) {
//     const Tensor next = reel::tanh(reel::matmul(W, y) + x);
//     return std::pair{next, next};
//   }, y0, xs);                              // xs: [T, n]; y: [n]; h: [T, n]
//
// f(carry, x) returns {new carry, y}: the new carry has the carry's structure and types;
// x is one slice of xs along their leading axis (all xs have the same length). Tensors
// f captures (W above) are the loop's loop-invariant arguments: a gradient reaches them
// (and params tracked for reel::back). The body is traced on the first slice, so
// f must do the same operations in every iteration: a branch on a value (`if (x > 0)`)
// is a guard, and an iteration that takes the other branch raises reel::GuardFailure
// (use reel::where). A value f reads from its carry or x (item(), values()) is likewise
// a guard checked at every iteration, never a constant: an iteration where it differs
// raises reel::GuardFailure (compute with tensors instead: reel::where, reel::select).
// The loop runs as long as it is asked to (10^12 iterations, as the same C++ would).
#include <cstdint>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "reel/dispatch.hpp"
#include "reel/ir/while_loop.hpp"
#include "reel/trace.hpp"
#include "reel/tree.hpp"

namespace reel {

// How reverse mode keeps a scan's per-iteration values (residuals) for the backward
// pass: all of them (none), or only every k-th carry, recomputing the iterations
// between them (every), with k = sqrt(length) (sqrt), or Revolve's binomial schedule
// for a number of snapshots (binomial).
struct Checkpoint {
  enum class Kind { none, every, sqrt, binomial };
  Kind kind = Kind::none;
  int64_t arg = 0;  // every: k; binomial: the number of snapshots
  static Checkpoint every(int64_t k) { return {Kind::every, k}; }
  static Checkpoint sqrt() { return {Kind::sqrt, 0}; }
  static Checkpoint binomial(int64_t snapshots) { return {Kind::binomial, snapshots}; }
};

struct ScanOptions {
  int64_t length = -1;   // the number of iterations: needed when there are no xs
  bool reverse = false;  // iterate from the last slice of xs to the first (ys likewise)
  Checkpoint checkpoint = {};
};

// An empty tree: xs of a scan without xs (give ScanOptions::length), or f's y when it
// has none (f returns {carry, reel::none}).
using None = std::tuple<>;
inline constexpr None none{};

// A while_loop's options. max_trips: the most iterations the loop may run; one more
// (cond still true after max_trips) is a reel::Error naming while_loop and max_trips,
// traced, compiled and under grad alike (a runaway loop stops instead of running until
// killed). None: no limit, as a C++ while.
struct WhileOptions {
  std::optional<int64_t> max_trips;
};

namespace detail {

// Slice k of x along its leading axis (zeros of the slice's shape when x has none).
Tensor leading_slice(const Tensor& x, int64_t k);
// The loop length: xs' common leading axis, or options.length; a reel::Error naming op.
int64_t scan_length(const char* op, const std::vector<Tensor>& xs, int64_t length);
// fori_loop's trip count hi - lo (0 if hi <= lo); a reel::Error if it overflows int64.
int64_t fori_length(int64_t lo, int64_t hi);
// Runs the scan of a traced body whose inputs are [counter], carries, x slices, then
// the captured tensors; returns the final carries and the stacked ys.
std::vector<Tensor> run_scan(const Tape& traced, const std::vector<Tensor>& captured,
                             const std::vector<Tensor>& carries, const std::vector<Tensor>& xs, int64_t length,
                             const ScanOptions& options, bool has_index, int64_t index0);

// Runs the while_loop of traced cond and body tapes, whose inputs are the carries, then
// their captured tensors; returns the final carries. Where the loop is recorded (an
// argument is traced, or tracked for reel::back) the call records its trip count for
// reverse mode (the call's `trips`).
std::vector<Tensor> run_while(const Traced& cond, const Traced& body, const std::vector<Tensor>& carries,
                              const WhileOptions& options);
// WhileOptions::max_trips checked: none is -1, a negative one a reel::Error.
int64_t max_trips_of(const WhileOptions& options);

template <class T>
void check_carry_leaves(const char* op, std::size_t expected, const T& got) {
  const std::size_t n = count_leaves(got);
  if (n != expected)
    throw Error(std::string(op) + ": the body returned a carry of " + std::to_string(n) + " tensors, expected " +
                std::to_string(expected) + " (the initial carry's)");
}

[[noreturn]] void undefined_leaf(const char* op, const char* who, const char* what, std::size_t leaf, std::size_t of);
// Every leaf of `r` (what `who` of the loop `op` returned: its "new carry", "y", ...)
// is a defined tensor.
template <class T>
void check_defined_leaves(const char* op, const char* who, const char* what, const T& r) {
  std::size_t n = 0, bad = 0;
  for_each_tensor(r, [&](const Tensor& t) {
    ++n;
    if (!t.defined() && bad == 0) bad = n;
  });
  if (bad != 0) undefined_leaf(op, who, what, bad, n);
}

// f traced on `init`'s tensors as inputs (a loop's cond or body, `who`); f's result is
// the output, of expect_leaves tensors unless 0. Values f reads become guards naming op.
template <class F, class Carry>
Traced trace_on_carry(F& f, const Carry& init, const char* op, const char* who, std::size_t expect_leaves) {
  TraceScope scope(/*lift_captures=*/true, /*value_guards=*/true);
  scope.lift_tracked();
  scope.loop_body(op);
  Carry c = init;
  for_each_tensor(c, [&](Tensor& t) { t = scope.input(t); });
  const auto r = f(std::as_const(c));
  if (expect_leaves > 0) check_carry_leaves(op, expect_leaves, r);
  check_defined_leaves(op, who, expect_leaves > 0 ? "new carry" : "result", r);
  scope.output_tree(r);
  std::vector<Tensor> captured = scope.captured();
  const bool read = scope.values_read() > 0;
  return {scope.finish(), std::move(captured), read};
}

// Whether a while_loop goes on after cond gave `go` (one element, nonzero; a branch
// on it where it is traced, as `while (go)` would be).
bool while_goes_on(const Tensor& go);
// The body's new carry, checked against the carry it got (the same types).
void check_while_carry(const std::vector<Tensor>& carry, const std::vector<Tensor>& next);

// A while_loop whose cond reads a value of the carry (item(), values(), a branch): the
// loop as the C++ loop it is, each iteration's cond and body called on the carry and
// recorded where the loop is traced (reel::jit then guards each value read).
template <class Cond, class Body, class Carry>
Carry run_while_as_cpp(Cond& cond, Body& body, const Carry& init, int64_t max_trips) {
  Carry carry = init;
  std::vector<Tensor> leaves = tree_leaves(carry);
  for (int64_t n = 0;; ++n) {
    const auto go = [&] {
      const GuardValueReads guarded;  // (a plain trace too re-checks what cond reads)
      return cond(std::as_const(carry));
    }();
    check_defined_leaves("while_loop", "cond", "result", go);
    if (!while_goes_on(go)) return carry;
    if (n == max_trips) throw_max_trips(max_trips);
    const auto next = body(std::as_const(carry));
    check_carry_leaves("while_loop", leaves.size(), next);
    check_defined_leaves("while_loop", "the body", "new carry", next);
    std::vector<Tensor> next_leaves = tree_leaves(next);
    check_while_carry(leaves, next_leaves);
    std::size_t at = 0;
    carry = refill(init, next_leaves, at, "while_loop");
    leaves = std::move(next_leaves);
  }
}

}  // namespace detail

template <class F, class Carry, class Xs>
auto scan(F&& f, const Carry& init, const Xs& xs, const ScanOptions& options = {}) {
  static_assert(detail::is_tree<Carry>(), "reel::scan: the carry must hold tensors (a Tensor, a REEL_FIELDS struct, ...)");
  using R = std::decay_t<std::invoke_result_t<F&, const Carry&, const Xs&>>;
  using Y = std::decay_t<std::tuple_element_t<1, R>>;
  const std::vector<Tensor> carry_leaves = tree_leaves(init);
  const std::vector<Tensor> x_leaves = tensors_of(xs);
  const int64_t n = detail::scan_length("scan", x_leaves, options.length);
  Tape body;
  std::vector<Tensor> captured;
  std::optional<Y> y_like;
  {
    detail::TraceScope scope(/*lift_captures=*/true, /*value_guards=*/true);
    scope.lift_tracked();
    scope.loop_body("scan");
    Carry c = init;
    for_each_tensor(c, [&](Tensor& t) { t = scope.input(t); });
    Xs x = xs;
    for_each_tensor(x, [&](Tensor& t) { t = scope.input(detail::leading_slice(t, 0)); });
    const R r = f(std::as_const(c), std::as_const(x));
    detail::check_carry_leaves("scan", carry_leaves.size(), std::get<0>(r));
    detail::check_defined_leaves("scan", "the body", "new carry", std::get<0>(r));
    detail::check_defined_leaves("scan", "the body", "y", std::get<1>(r));
    for_each_tensor(std::get<0>(r), [&](const Tensor& t) { scope.output(t); });
    for_each_tensor(std::get<1>(r), [&](const Tensor& t) { scope.output(t); });
    y_like = std::get<1>(r);
    captured = scope.captured();
    body = scope.finish();
  }
  const std::vector<Tensor> out =
      detail::run_scan(body, captured, carry_leaves, x_leaves, n, options, false, 0);
  std::size_t next = 0;
  Carry carry = detail::refill(init, out, next, "scan");
  Y ys = *y_like;
  if constexpr (detail::is_tree<Y>()) ys = detail::refill(*y_like, out, next, "scan");
  return std::pair<Carry, Y>{std::move(carry), std::move(ys)};
}

// for (i = lo; i < hi; ++i) carry = body(i, carry): i is a 0-d i64 tensor (index with
// it: reel::gather(x, i) is x[i]; or reel::cast it to a float). No iteration when hi <= lo;
// more than INT64_MAX iterations (hi - lo overflows) is a reel::Error. Reading i's value
// (i.item()) is a guard that fails on the next iteration: compute with the tensor i.
template <class F, class Carry>
Carry fori_loop(int64_t lo, int64_t hi, F&& body, const Carry& init, const ScanOptions& options = {}) {
  static_assert(detail::is_tree<Carry>(), "reel::fori_loop: the carry must hold tensors");
  const std::vector<Tensor> carry_leaves = tree_leaves(init);
  const int64_t n = detail::fori_length(lo, hi);
  Tape traced;
  std::vector<Tensor> captured;
  {
    detail::TraceScope scope(/*lift_captures=*/true, /*value_guards=*/true);
    scope.lift_tracked();
    scope.loop_body("fori_loop");
    Tensor counter(DType::i64, {});
    counter.mutable_data<int64_t>()[0] = lo;
    const Tensor i = scope.input(counter);
    Carry c = init;
    for_each_tensor(c, [&](Tensor& t) { t = scope.input(t); });
    const auto next = body(i, std::as_const(c));
    detail::check_carry_leaves("fori_loop", carry_leaves.size(), next);
    detail::check_defined_leaves("fori_loop", "the body", "new carry", next);
    for_each_tensor(next, [&](const Tensor& t) { scope.output(t); });
    captured = scope.captured();
    traced = scope.finish();
  }
  ScanOptions o = options;
  o.length = n;
  const std::vector<Tensor> out = detail::run_scan(traced, captured, carry_leaves, {}, n, o, true, lo);
  std::size_t next = 0;
  return detail::refill(init, out, next, "fori_loop");
}

// while (cond(carry)) carry = body(carry): cond returns a tensor of one element (nonzero:
// go on), body a carry of the carry's structure and types; tensors they capture are the
// loop's consts (like scan's). Both are traced once, on init. The loop runs until cond
// is false, and so does a traced or compiled copy of it (reel::jit). Reverse mode
// (reel::grad, reel::back, reel::jit_grad) is for the trip count seen when the loop was
// traced or recorded for back: gradient code run where the loop takes another count
// raises reel::GuardFailure, and reel::jit_grad (reel::simplegrad(f)) traces that
// path anew. Forward mode takes any count. A loop inside a scan's body is traced in
// the first iteration: its gradient holds where every iteration runs it as often.
// A value the body reads from the carry (item(), values()) is a guard checked at every
// iteration (reel::GuardFailure where it differs: compute with tensors, or test in
// cond). A cond that reads one (`x.item() < 10`, a branch on the carry) cannot be a
// tape: the loop then runs as the C++ loop it is, `while (cond(c)) c = body(c)`, each
// iteration recorded where it is traced, and the values cond reads become guards there
// (a traced or compiled copy re-checks them on every call; reel::jit traces a call
// that reads others anew). options.max_trips bounds the iterations.
template <class Cond, class Body, class Carry>
Carry while_loop(Cond&& cond, Body&& body, const Carry& init, const WhileOptions& options = {}) {
  static_assert(detail::is_tree<Carry>(), "reel::while_loop: the carry must hold tensors");
  static_assert(std::is_same_v<std::decay_t<std::invoke_result_t<Cond&, const Carry&>>, Tensor>,
                "reel::while_loop: cond must return a Tensor (of one element)");
  const int64_t max_trips = detail::max_trips_of(options);
  const std::vector<Tensor> carry_leaves = tree_leaves(init);
  const detail::Traced c = detail::trace_on_carry(cond, init, "while_loop", "cond", 0);
  if (c.read_values) return detail::run_while_as_cpp(cond, body, init, max_trips);
  const detail::Traced b = detail::trace_on_carry(body, init, "while_loop", "the body", carry_leaves.size());
  const std::vector<Tensor> out = detail::run_while(c, b, carry_leaves, options);
  std::size_t next = 0;
  return detail::refill(init, out, next, "while_loop");
}

}  // namespace reel
