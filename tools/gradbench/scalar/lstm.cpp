// GradBench's lstm by its own C++ (gradbench/evals/lstm.hpp) with reel::Real: lstm::objective<Real>.
#include "scalar.hpp"

#include <memory>

#include "gradbench_prelude.hpp"
namespace {
#include "gradbench/evals/lstm.hpp"
}

namespace gradbench::scalar {

namespace {

// lstm::objective<Real> of main_params [2l][4b] and extra_params [3][b] (their Reals,
// row by row). The state and the sequence are not differentiated (the jacobian wants
// neither), as in the tensor mode: they are taken as tensors and read as Reals through
// reel::nodiff.
Real lstm_of(const std::vector<Real>& main, const std::vector<Real>& extra, const Tensor& state, const Tensor& sequence) {
  const auto reals = [](const Tensor& t) { return reel::real_param<std::vector<Real>>::from_tensor(reel::nodiff(t)); };
  const std::vector<Real> s = reals(state), seq = reals(sequence);
  const int b = static_cast<int>(extra.size() / 3), l = static_cast<int>(main.size()) / (8 * b),
            c = static_cast<int>(seq.size()) / b;
  return reel::output([&](Real* loss) { ::lstm::objective(l, c, b, main.data(), extra.data(), s.data(), seq.data(), loss); });
}

Prepared lstm_objective(const json& input) {
  static const auto f = reel::jit(lstm_of, evals::kJitOptions);
  auto in = evals::lstm_input(input);
  return evals::each_run([=] { return f(in->main, in->extra, in->state, in->sequence); }, real_json);
}

Prepared lstm_jacobian(const json& input) {
  static const auto grad = reel::simplegrad(lstm_of, evals::kJitOptions);
  auto in = evals::lstm_input(input);
  auto out = std::make_shared<decltype(grad(in->main, in->extra, in->state, in->sequence))>();
  return {[=] { *out = grad(in->main, in->extra, in->state, in->sequence); },
          [=] { return evals::lstm_jacobian_json((*out)[1], (*out)[2]); }};
}

// Per character after the first: per layer and hidden unit 4 gates (3 operations and a
// sigmoid or tanh of 3 or 1 each) and the cell and hidden updates (5); per unit the
// input and output weights and the log-sum-exp (8).
int64_t lstm_operations(const json& input) {
  const json& main = evals::field(input, "main_params");
  const int64_t rows = static_cast<int64_t>(main.size()), b = main.empty() ? 0 : static_cast<int64_t>(main[0].size()) / 4;
  const int64_t c = static_cast<int64_t>(evals::field(input, "sequence").size());
  return (c - 1) * b * (rows / 2 * 22 + 8);
}

}  // namespace

ScalarEval lstm_eval() { return {{{"objective", lstm_objective}, {"jacobian", lstm_jacobian}}, lstm_operations}; }

}  // namespace gradbench::scalar
