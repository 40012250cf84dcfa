// GradBench's ode by its own C++ (gradbench/evals/ode.hpp) with reel::Real: ode::primal<Real>.
#include "scalar.hpp"

#include "gradbench_prelude.hpp"
namespace {
#include "gradbench/evals/ode.hpp"
}

namespace gradbench::scalar {

namespace {

// ode::primal<Real>: the n values after s RK4 steps, from x's Reals.
std::vector<Real> ode_of(const std::vector<Real>& x, int64_t s) {
  return reel::outputs(x.size(), [&](Real* y) { ::ode::primal(x.size(), x.data(), static_cast<std::size_t>(s), y); });
}
// The same as one tensor: reel::jit rebuilds a std::vector<Real> result on each call
// by packing the traced result's n Reals first (n eager operations, 11 ms at n =
// 10,000), which a tensor result does not pay.
Tensor ode_values(const std::vector<Real>& x, int64_t s) { return reel::packed_leaf<std::vector<Real>>::pack(ode_of(x, s)); }
// The last of them, whose gradient GradBench's ode asks for.
Real ode_last_of(const std::vector<Real>& x, int64_t s) { return ode_of(x, s).back(); }

// Per step and element: four products of f, three updates of y_tmp (3 operations each),
// the final update (8).
int64_t ode_operations(const json& input) {
  return 21 * evals::integer(input, "ode", "s") * static_cast<int64_t>(evals::field(input, "x").size());
}

}  // namespace

ScalarEval ode_eval() {
  return {evals::primal_and_gradient(evals::ode_input, ode_values, evals::vector_json, ode_last_of), ode_operations};
}

}  // namespace gradbench::scalar
