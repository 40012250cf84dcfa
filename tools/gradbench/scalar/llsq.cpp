// GradBench's llsq by its own C++ (gradbench/evals/llsq.hpp) with reel::Real: llsq::primal<Real>.
#include "scalar.hpp"

#include "gradbench_prelude.hpp"
namespace {
#include "gradbench/evals/llsq.hpp"
}

namespace gradbench::scalar {

namespace {

// llsq::primal<Real> of x's Reals at n points (t_i and s(t_i) are numbers: no branch is
// traced).
Real llsq_of(const std::vector<Real>& x, int64_t n) {
  return reel::output([&](Real* out) { ::llsq::primal(static_cast<std::size_t>(n), x.size(), x.data(), out); });
}

// A multiply-add per point and coefficient.
int64_t llsq_operations(const json& input) {
  const int64_t n = evals::integer(input, "llsq", "n");
  return 2 * n * (static_cast<int64_t>(evals::field(input, "x").size()) + 1);
}

}  // namespace

ScalarEval llsq_eval() {
  return {evals::primal_and_gradient(evals::llsq_input, llsq_of, real_json, llsq_of), llsq_operations};
}

}  // namespace gradbench::scalar
