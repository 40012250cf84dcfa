// GradBench's lse by its own C++ (gradbench/evals/lse.hpp) with reel::Real: lse::primal<Real>.
#include "scalar.hpp"

#include <memory>

#include "gradbench_prelude.hpp"
namespace {
#include "gradbench/evals/lse.hpp"
}

namespace gradbench::scalar {

namespace {

// lse::primal<Real> of x's Reals (its max is std::max: the maximum primitive, no branch).
Real lse_of(const std::vector<Real>& x) {
  return reel::output([&](Real* out) { ::lse::primal(x.size(), x.data(), out); });
}

Prepared lse_primal(const json& input) {
  static const auto f = reel::jit(lse_of, evals::kJitOptions);
  auto x = std::make_shared<const Tensor>(evals::input_tensor(input, "x"));
  return evals::each_run([=] { return f(*x); }, real_json);
}

Prepared lse_gradient(const json& input) {
  static const auto g = reel::simplegrad(lse_of, evals::kJitOptions);
  auto x = std::make_shared<const Tensor>(evals::input_tensor(input, "x"));
  return evals::each_run([=] { return g(*x)[1]; }, evals::vector_json);
}

// A maximum, a subtraction, an exp and an addition per element.
int64_t lse_operations(const json& input) { return 4 * static_cast<int64_t>(evals::field(input, "x").size()); }

}  // namespace

ScalarEval lse_eval() { return {{{"primal", lse_primal}, {"gradient", lse_gradient}}, lse_operations}; }

}  // namespace gradbench::scalar
