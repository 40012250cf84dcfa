// guard(cond, expected): the branch a trace took. Recorded when a traced one-element
// tensor is converted to bool (`if (reel::sum(x) > 0.0)`); running the tape where the
// condition's truth differs throws reel::GuardFailure instead of computing the other
// branch's values with this branch's operations.
#include <fmt/format.h>

#include "prims.hpp"

namespace reel::prims {

void add_control(std::vector<Primitive>& t) {
  Primitive guard;
  guard.name = "guard";
  guard.arity = 1;
  guard.attrs = {{"expected", AttrKind::boolean}};
  guard.any_dtype = true;
  guard.effect = true;
  guard.structure = Structure::opaque;
  guard.infer = [](std::span<const VarType> in, const Attrs&) {
    if (numel(in[0].shape) != 1)
      throw Error(fmt::format("guard: expected a condition with one element, got {}", type_str(in[0])));
    return in[0];
  };
  guard.eager = [](std::span<const Tensor> in, const Attrs& a) {
    const double v = in[0].item();
    const bool truth = v != 0.0, expected = a.boolean("expected");
    if (truth != expected)
      throw GuardFailure(fmt::format("guard: the tape was traced with this condition {}, here it is {} (value {}); "
                                     "trace the other path (reel::jit and reel::simplegrad(f) do)",
                                     expected ? "true" : "false", truth ? "true" : "false", v));
    return in[0];
  };
  guard.adjoint = [](TapeBuilder&, const AdjointArgs&) { return std::vector<Var>{kNoVar}; };
  guard.tangent = [](TapeBuilder&, const TangentArgs&) { return kNoVar; };
  t.push_back(std::move(guard));
}

}  // namespace reel::prims
