// GradBench's lstm: the ADBench LSTM loss and its gradient.
#include "evals.hpp"

#include <array>
#include <memory>
#include <utility>
#include <vector>

namespace gradbench::evals {

namespace {

// One layer's weights and biases, sliced from main_params once, outside the loop: the
// scan's body captures them as loop-invariant consts.
struct Layer {
  Tensor wf, wi, wo, wc, bf, bi, bo, bc;
};
// What runs from one character to the next: each layer's hidden state and cell, and
// the running sum of the log-likelihoods.
struct LstmCarry {
  std::vector<Tensor> h, cell;
  Tensor total;
};
REEL_FIELDS(LstmCarry, h, cell, total)

// The ADBench LSTM (specs/adbench-objectives.md): main_params [2l][4b] (weights and
// biases per layer, gates forget | input | output | cell), extra_params [3][b], state
// [2l][b], sequence [c][b]. The c - 1 steps are one reel::scan over the pairs
// (sequence[t], sequence[t + 1]), so the tape holds one step's operations, whatever c.
Tensor lstm(const Tensor& main, const Tensor& extra, const Tensor& state0, const Tensor& sequence0) {
  const Tensor state = reel::nodiff(state0), sequence = reel::nodiff(sequence0);
  const int64_t layers = main.shape().at(0) / 2, b = main.shape().at(1) / 4, c = sequence.shape().at(0);
  std::vector<Layer> L;
  LstmCarry init{{}, {}, reel::scalar(0.0)};
  for (int64_t j = 0; j < layers; ++j) {
    const Tensor w = reel::index(main, 2 * j), bias = reel::index(main, 2 * j + 1);
    auto part = [&](const Tensor& v, int64_t g) { return reel::slice(v, g * b, (g + 1) * b); };
    L.push_back({part(w, 0), part(w, 1), part(w, 2), part(w, 3), part(bias, 0), part(bias, 1), part(bias, 2), part(bias, 3)});
    init.h.push_back(reel::index(state, 2 * j));
    init.cell.push_back(reel::index(state, 2 * j + 1));
  }
  const Tensor in_w = reel::index(extra, 0), out_w = reel::index(extra, 1), out_b = reel::index(extra, 2);
  const std::pair<Tensor, Tensor> inputs{reel::slice(sequence, 0, c - 1), reel::slice(sequence, 1, c)};
  const auto step = [&](const LstmCarry& s, const std::pair<Tensor, Tensor>& in) {
    LstmCarry next = s;
    Tensor x = in.first * in_w;
    for (std::size_t j = 0; j < L.size(); ++j) {
      const Layer& p = L[j];
      const Tensor f = reel::sigmoid(x * p.wf + p.bf), i = reel::sigmoid(s.h[j] * p.wi + p.bi);
      const Tensor o = reel::sigmoid(x * p.wo + p.bo), g = reel::tanh(s.h[j] * p.wc + p.bc);
      next.cell[j] = s.cell[j] * f + i * g;
      next.h[j] = o * reel::tanh(next.cell[j]);
      x = next.h[j];
    }
    const Tensor y = x * out_w + out_b;
    const Tensor ynorm = y - reel::log(2.0 + reel::sum(reel::exp(y)));
    next.total = s.total + reel::sum(in.second * ynorm);
    return std::pair{next, reel::none};
  };
  const Tensor total = reel::scan(step, init, inputs).first.total;
  return -total / static_cast<double>((c - 1) * b);
}

struct LstmInput {
  Tensor main, extra, state, sequence;
};
std::shared_ptr<LstmInput> lstm_input(const json& input) {
  auto in = std::make_shared<LstmInput>(LstmInput{input_tensor(input, "main_params"), input_tensor(input, "extra_params"),
                                                  input_tensor(input, "state"), input_tensor(input, "sequence")});
  const int64_t b = in->extra.rank() == 2 ? in->extra.shape()[1] : -1;
  if (in->main.rank() != 2 || in->main.shape()[0] % 2 != 0 || in->main.shape()[0] == 0 ||
      in->main.shape()[1] != 4 * b || in->extra.shape()[0] != 3 || in->state.shape() != reel::Shape{in->main.shape()[0], b} ||
      in->sequence.rank() != 2 || in->sequence.shape()[1] != b || in->sequence.shape()[0] < 2)
    throw reel::Error("lstm: expected main_params [2l][4b], extra_params [3][b], state [2l][b], sequence [c >= 2][b]");
  return in;
}

Prepared lstm_objective(const json& input) {
  static const auto f = reel::jit(lstm, {.compile_after = 1});
  auto in = lstm_input(input);
  return each_run([=] { return f(in->main, in->extra, in->state, in->sequence); }, scalar_json);
}

Prepared lstm_jacobian(const json& input) {
  static const auto grad = reel::simplegrad(lstm, {.compile_after = 1});
  auto in = lstm_input(input);
  auto out = std::make_shared<std::array<Tensor, 5>>();
  return {[=] { *out = grad(in->main, in->extra, in->state, in->sequence); },
          [=] {
            json all = vector_json((*out)[1]);
            for (double v : (*out)[2].values()) all.push_back(v);
            return all;
          }};
}

}  // namespace

Functions lstm_functions() { return {{"objective", lstm_objective}, {"jacobian", lstm_jacobian}}; }

}  // namespace gradbench::evals
