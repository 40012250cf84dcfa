#pragma once
// Teaching Reel a derivative: user-defined primitives whose rules are ordinary Reel
// code on tensors (Yota's @diffrule, Zygote's rrule, Tracker's @grad).
//
//   reel::define_primitive({
//       .name = "minus", .arity = 2,
//       .eager = [](std::span<const Tensor> x, const Attrs&) { return x[0] - x[1]; },
//       .vjp = [](const std::vector<Tensor>& x, const Tensor& out, const Tensor& dout,
//                 const Attrs&) { return std::vector<Tensor>{dout, -dout}; }});
//   Tensor d = reel::apply("minus", std::vector<Tensor>{a, b});
//
// The primitive is recorded as one call (`%3 = minus(%1, %2)`), prints and parses
// back by name, and its derivative rules are traced into the gradient (or tangent)
// tape, so that tape stays ordinary: printable, compilable, differentiable again.
// Rules are traced once per gradient tape on placeholder values (zeros of the right
// types), so they may not branch on values. Compiled code calls the eager function
// (no fusion across it) unless the primitive has an elementwise `scalar` rule.
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "reel/dispatch.hpp"
#include "reel/ir/primitive.hpp"
#include "reel/ir/tape.hpp"

namespace reel {


struct PrimitiveDef {
  std::string name;
  int arity = 1;
  std::vector<AttrSpec> attrs;  // e.g. {{"pad", AttrKind::integer}}
  // The result's type; empty: the type of the first argument.
  std::function<VarType(std::span<const VarType>, const Attrs&)> type;
  // The value, computed on tensors (not traced: it is the primitive).
  std::function<Tensor(std::span<const Tensor>, const Attrs&)> eager;
  // Reverse mode: one gradient per argument (an undefined Tensor for none), written
  // with Reel operations. Gradients are checked against the arguments' types.
  std::function<std::vector<Tensor>(const std::vector<Tensor>& args, const Tensor& out,
                                    const Tensor& dout, const Attrs&)>
      vjp;
  // Forward mode (optional): the result's tangent from the arguments' tangents
  // (undefined where zero), written with Reel operations.
  std::function<Tensor(const std::vector<Tensor>& args, const Tensor& out,
                       const std::vector<Tensor>& tangents, const Attrs&)>
      jvp;
  // False for a primitive whose equal calls may differ (random numbers, outside
  // state): CSE then never merges two of its calls.
  bool pure = true;
  // Batching (vmap, optional): the result for a whole batch at once, written with Reel
  // operations. args[i] has a leading batch axis of `size` in front of the argument's
  // type where batched[i] (at least one is), else the argument's type; the rule returns
  // the result with a leading batch axis of `size` (row j: the primitive on the
  // arguments' rows j). Without one, vmap runs the primitive once per batch element
  // (a scan over the batch). Traced once per batched tape, like the other rules.
  std::function<Tensor(const std::vector<Tensor>& args, const std::vector<bool>& batched, int64_t size,
                       const Attrs&)>
      batch;
};

// Registers the primitive; throws reel::Error if the name is taken, or the eager
// function is missing. A rule left out is an error naming the primitive when a
// transformation needs it.
const Primitive& define_primitive(PrimitiveDef def);

// Tracker's `track` + `@grad`: applies a function computed without tracing, whose
// gradient is `pullback` (one gradient per argument, in Reel operations). The first
// call with a name registers the primitive `name` (arity from `args`); later calls
// with that name apply it (their functions must be the same: the first ones are kept).
//   Tensor y = reel::custom_vjp("minus", {a, b},
//       [](const std::vector<Tensor>& x) { return x[0] - x[1]; },
//       [](const std::vector<Tensor>&, const Tensor&, const Tensor& dy) {
//         return std::vector<Tensor>{dy, -dy}; });
Tensor custom_vjp(const std::string& name, const std::vector<Tensor>& args,
                  std::function<Tensor(const std::vector<Tensor>&)> forward,
                  std::function<std::vector<Tensor>(const std::vector<Tensor>& args, const Tensor& out,
                                                    const Tensor& dout)>
                      pullback);

namespace detail {
// The tape of f traced on placeholder inputs (zeros) of the types of `vars` in `b`:
// how derivative rules written with Reel operations become tape operations. Outputs
// f leaves undefined are skipped; `defined`, if given, says which were.
Tape trace_on_zeros(const TapeBuilder& b, std::span<const Var> vars,
                    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& f,
                    std::vector<bool>* defined = nullptr);
}  // namespace detail

// See also reel::define_function_primitive (reel/function_primitive.hpp).

}  // namespace reel
