// GradBench's llsq: a linear least-squares objective and its gradient.
#include "evals.hpp"

#include <memory>
#include <vector>

namespace gradbench::evals {

namespace {

// t_i = -1 + 2i/(n-1), s_i = sign(t_i); 1/2 sum_i (s_i - sum_j x_j t_i^j)^2. The powers
// of t depend on n alone: constants of the trace for each n.
Tensor llsq(const Tensor& x, int64_t n) {
  const int64_t m = x.shape().at(0);
  std::vector<double> t(static_cast<std::size_t>(n)), s(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    t[static_cast<std::size_t>(i)] = n == 1 ? -1.0 : -1.0 + static_cast<double>(i) * 2.0 / static_cast<double>(n - 1);
    const double ti = t[static_cast<std::size_t>(i)];
    s[static_cast<std::size_t>(i)] = ti > 0 ? 1.0 : ti < 0 ? -1.0 : 0.0;
  }
  std::vector<double> powers(static_cast<std::size_t>(n * m));
  for (int64_t i = 0; i < n; ++i) {
    double p = 1;
    for (int64_t j = 0; j < m; ++j, p *= t[static_cast<std::size_t>(i)]) powers[static_cast<std::size_t>(i * m + j)] = p;
  }
  const Tensor V = reel::tensor(powers, {n, m}), S = reel::tensor(s, {n});
  return 0.5 * reel::sum(reel::square(S - reel::matmul(V, x)));
}

}  // namespace

// x, then n (the number of points).
TensorAndCount llsq_input(const json& input) {
  Tensor x = input_tensor(input, "x");
  return {x, integer(input, "llsq", "n", 2, 10'000'000, " (the most points this tool takes)")};
}

Functions llsq_functions() { return primal_and_gradient(llsq_input, llsq, scalar_json, llsq); }

}  // namespace gradbench::evals
