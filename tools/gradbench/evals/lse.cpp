// GradBench's lse: log-sum-exp of a vector and its gradient.
#include "evals.hpp"

#include <memory>

namespace gradbench::evals {

namespace {

Tensor lse(const Tensor& x) { return reel::logsumexp(x); }

Prepared lse_primal(const json& input) {
  static const auto f = reel::jit(lse, kJitOptions);
  auto x = std::make_shared<Tensor>(input_tensor(input, "x"));
  return each_run([=] { return f(*x); }, scalar_json);
}

Prepared lse_gradient(const json& input) {
  static const auto g = reel::simplegrad(lse, kJitOptions);
  auto x = std::make_shared<Tensor>(input_tensor(input, "x"));
  return each_run([=] { return g(*x)[1]; }, vector_json);
}

}  // namespace

Functions lse_functions() { return {{"primal", lse_primal}, {"gradient", lse_gradient}}; }

}  // namespace gradbench::evals
