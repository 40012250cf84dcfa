// guard(cond, expected[, loop]): the branch a trace took (in the body of the loop `loop`
// names, if given). Recorded when a traced one-element
// tensor is converted to bool (`if (reel::sum(x) > 0.0)`); running the tape where the
// condition's truth differs throws reel::GuardFailure instead of computing the other
// branch's values with this branch's operations.
#include <fmt/format.h>

#include "batching.hpp"
#include "prims.hpp"
#include "reel/ir/guards.hpp"

namespace reel {

namespace {

// Why a check in a loop body failed, and what to write instead.
std::string loop_body_advice(std::string_view loop) {
  return fmt::format("a loop body is traced once and runs for every iteration, so what it reads or branches on is "
                     "checked at every iteration, never traced again; compute with tensor operations instead "
                     "(reel::where or reel::select{})",
                     loop == "while_loop" ? "; a condition to stop on belongs in while_loop's cond"
                                          : "; a loop that stops on a value is a while_loop, whose cond may read it");
}

std::string value_guard_failure(const Attrs& a, std::size_t i, double want, double got) {
  if (!a.has("loop"))
    return fmt::format("guard_value: the tape was traced with element {} = {} (read with item() or values()), here it "
                       "is {}", i, want, got);
  const std::string loop = a.string("loop");
  return fmt::format("guard_value: {}'s body read a traced value with item() or values() (element {} = {} when the "
                     "body was traced), and here it is {}: {}", loop, i, want, got, loop_body_advice(loop));
}

}  // namespace

std::string branch_guard_failure(bool expected, double value, std::string_view loop) {
  const char *was = expected ? "true" : "false", *is = expected ? "false" : "true";
  if (loop.empty())
    return fmt::format("guard: the tape was traced with this condition {}, here it is {} (value {}); trace the other "
                       "path (reel::jit and reel::simplegrad(f) do)", was, is, value);
  return fmt::format("guard: {}'s body branched on a traced value: the condition was {} when the body was traced, "
                     "here it is {} (value {}); {}", loop, was, is, value, loop_body_advice(loop));
}

}  // namespace reel

namespace reel::prims {

namespace {

// Batched: the guard holds when it holds for every batch element, so one guard checks
// that no element differs from `expected` (how many are zero, or nonzero); the call's
// result is the batched condition, through which (as through a guard) no gradient flows.
Results<Var> guard_batch(TapeBuilder& b, const BatchArgs& a) {
  Var cond = a.args[0];
  if (!is_float(b.type(cond).dtype)) cond = b.call(prims::cast(), {cond}, {{"dtype", DType::f64}});
  const bool expected = a.attrs.boolean("expected");
  const Var zero = b.scalar(0.0, b.type(cond).dtype);
  const Var differs = b.call(prims::sum(), {b.call(expected ? prims::eq() : prims::ne(), {cond, zero})});
  Attrs attrs{{"expected", true}};
  if (a.attrs.has("loop")) attrs.set("loop", a.attrs.string("loop"));
  b.call(prims::guard(), {b.call(prims::eq(), {differs, b.scalar(0.0, b.type(differs).dtype)})}, std::move(attrs));
  return b.call(prims::nodiff(), {a.args[0]});
}

Primitive guard_p() {
  return {
      .name = "guard",
      .attrs = {{"expected", AttrKind::boolean}, {"loop", AttrKind::string, true}},
      .infer = [](std::span<const VarType> in, const Attrs&) {
        if (numel(in[0].shape) != 1)
          throw Error(fmt::format("guard: expected a condition with one element, got {}", type_str(in[0])));
        return in[0];
      },
      .eager = [](std::span<const Tensor> in, const Attrs& a) {
        const double v = in[0].item();
        const bool truth = v != 0.0, expected = a.boolean("expected");
        if (truth != expected)
          throw GuardFailure(branch_guard_failure(expected, v, a.has("loop") ? a.string("loop") : std::string()));
        return in[0];
      },
      .adjoint = no_adjoint(),
      .any_dtype = true,
      .tangent = no_tangent,
      .structure = Structure::check,
      .effect = true,
      .batch = guard_batch,
  };
}

// guard_value(x, values[, loop]): x's values read while tracing for a cache (item(),
// values()), or in a loop body (`loop` names the loop: scan, fori_loop, while_loop; its
// body is traced once, so what it reads is checked at every iteration); running the
// tape where they differ throws reel::GuardFailure.
Primitive guard_value_p() {
  return {
      .name = "guard_value",
      .attrs = {{"values", AttrKind::reals}, {"loop", AttrKind::string, true}},
      .infer = [](std::span<const VarType> in, const Attrs& a) {
        if (static_cast<int64_t>(a.reals("values").size()) != numel(in[0].shape))
          throw Error(fmt::format("guard_value: expected {} values for {}, got {}", numel(in[0].shape),
                                  type_str(in[0]), a.reals("values").size()));
        return in[0];
      },
      .eager = [](std::span<const Tensor> in, const Attrs& a) {
        const std::vector<double> want = a.reals("values"), got = in[0].values();
        for (std::size_t i = 0; i < want.size(); ++i) {
          const bool same = want[i] == got[i] || (want[i] != want[i] && got[i] != got[i]);  // NaN matches NaN
          if (!same) throw GuardFailure(value_guard_failure(a, i, want[i], got[i]));
        }
        return in[0];
      },
      .adjoint = no_adjoint(),
      .any_dtype = true,
      .tangent = no_tangent,
      .structure = Structure::opaque,
      .effect = true,
      // Batched: every batch element holds the values read (no gradient flows, as above).
      .batch = [](TapeBuilder& b, const BatchArgs& a) -> Results<Var> {
        const std::vector<double> one = a.attrs.reals("values");
        std::vector<double> all;
        for (int64_t j = 0; j < a.size; ++j) all.insert(all.end(), one.begin(), one.end());
        Attrs attrs = a.attrs;
        attrs.set("values", all);
        b.call(prims::guard_value(), {a.args[0]}, std::move(attrs));
        return b.call(prims::nodiff(), {a.args[0]});
      },
  };
}

}  // namespace

void add_control(std::vector<Primitive>& t) { t.insert(t.end(), {guard_p(), guard_value_p()}); }

}  // namespace reel::prims
