// GradBench's ode: classic RK4 steps of a linear ODE, and the gradient of the last value.
#include "evals.hpp"

#include <memory>
#include <utility>
#include <vector>

namespace gradbench::evals {

namespace {

// s classic RK4 steps of y' = f(y), f(y)_0 = x_0, f(y)_i = x_i y_{i-1}, from y = 0, h = 2/s.
Tensor ode(const Tensor& x, int64_t s) {
  const int64_t n = x.shape().at(0);
  const double h = 2.0 / static_cast<double>(s);
  // f(y) = x * (y shifted down by one, with 1 first): a gather and two elementwise
  // operations, which compile to loops (a concat of slices would be a copying step).
  Tensor shift(reel::DType::i64, {n});
  for (int64_t i = 0; i < n; ++i) shift.mutable_data<int64_t>()[i] = i == 0 ? 0 : i - 1;
  std::vector<double> first(static_cast<std::size_t>(n), 0.0), rest(static_cast<std::size_t>(n), 1.0);
  first[0] = 1.0, rest[0] = 0.0;
  const Tensor e0 = reel::tensor(first, {n}), mask = reel::tensor(rest, {n});
  auto f = [&](const Tensor& y) { return x * (reel::gather(y, shift) * mask + e0); };
  // The s steps are one loop (reel::fori_loop): the tape holds one step, whatever s.
  // Its gradient keeps each step's residuals (some 8 n values), unless s n is past
  // GradBench's largest (10^7): then it keeps every sqrt(s)-th y and recomputes the rest.
  const reel::ScanOptions options{.checkpoint = s * n > 20'000'000 ? reel::Checkpoint::sqrt() : reel::Checkpoint{}};
  return reel::fori_loop(0, s, [&](const Tensor&, const Tensor& y) {
    const Tensor k1 = f(y);
    const Tensor k2 = f(y + (h / 2) * k1);
    const Tensor k3 = f(y + (h / 2) * k2);
    const Tensor k4 = f(y + h * k3);
    return y + (h / 6) * (k1 + 2.0 * k2 + 2.0 * k3 + k4);
  }, reel::zeros({n}), options);
}
Tensor ode_last(const Tensor& x, int64_t s) { return reel::index(ode(x, s), -1); }

}  // namespace

// x (at least 2 values), then s (the number of steps).
TensorAndCount ode_input(const json& input) {
  Tensor x = input_tensor(input, "x");
  if (x.numel() < 2) throw reel::Error("ode: expected at least 2 values of x");
  return {x, integer(input, "ode", "s", 1, 10'000'000, " (the most steps this tool takes)")};
}

Functions ode_functions() { return primal_and_gradient(ode_input, ode, vector_json, ode_last); }

}  // namespace gradbench::evals
