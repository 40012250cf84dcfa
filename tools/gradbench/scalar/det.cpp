// GradBench's det by its own C++ (gradbench/evals/det.hpp) with reel::Real: det::primal<Real>,
// the expansion by minors as written there (ell! products, no minor computed once).
#include "scalar.hpp"

#include <algorithm>

#include "gradbench_prelude.hpp"
namespace {
#include "gradbench/evals/det.hpp"
}

namespace gradbench::scalar {

namespace {

Real det_of(const std::vector<Real>& A, int64_t ell) {
  return reel::output([&](Real* out) { ::det::primal(static_cast<std::size_t>(ell), A.data(), out); });
}

// A product and a sum for each of the sum over m <= ell of ell!/(m-1)! minors' terms.
int64_t det_operations(const json& input) {
  const int64_t ell = evals::integer(input, "det", "ell", 1, 20);
  double terms = 0, product = 1;  // ell (ell-1) ... (ell-m+1), for m = 1, 2, ... (20! is past int64 twice)
  for (int64_t m = 1; m <= ell; ++m) terms += (product *= static_cast<double>(ell - m + 1));
  return static_cast<int64_t>(std::min(2 * terms, 1e18));
}

}  // namespace

ScalarEval det_eval() {
  return {evals::primal_and_gradient(evals::det_input, det_of, real_json, det_of), det_operations};
}

}  // namespace gradbench::scalar
