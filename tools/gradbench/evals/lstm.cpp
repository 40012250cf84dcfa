// GradBench's lstm: the ADBench LSTM loss and its gradient.
#include "evals.hpp"

#include <array>
#include <memory>
#include <utility>
#include <vector>

namespace gradbench::evals {

namespace {

// Every layer's weights or biases of one gate, stacked: [l][b] each, sliced from
// main_params once, outside the loops.
struct Gates {
  Tensor wf, wi, wo, wc, bf, bi, bo, bc;
};
REEL_FIELDS(Gates, wf, wi, wo, wc, bf, bi, bo, bc)
// What one layer reads: its gates and its state (h and cell); the inner scan's xs.
struct Layer {
  Gates gates;
  Tensor h, cell;
};
REEL_FIELDS(Layer, gates, h, cell)
// What runs from one character to the next: every layer's h and cell ([l][b] each)
// and the running sum of the log-likelihoods.
struct LstmCarry {
  Tensor h, cell, total;
};
REEL_FIELDS(LstmCarry, h, cell, total)

// The ADBench LSTM (specs/adbench-objectives.md): main_params [2l][4b] (weights and
// biases per layer, gates forget | input | output | cell), extra_params [3][b], state
// [2l][b], sequence [c][b]. Two loops: the c - 1 steps are a reel::scan over the pairs
// (sequence[t], sequence[t + 1]), and in each step the l layers are a scan over the
// stacked gates and states, carrying each layer's output to the next. So the tape
// holds one layer's operations whatever l and c, and compiles in the same time.
Tensor lstm(const Tensor& main, const Tensor& extra, const Tensor& state0, const Tensor& sequence0) {
  const Tensor sequence = reel::nodiff(sequence0);
  const int64_t layers = main.shape().at(0) / 2, b = main.shape().at(1) / 4, c = sequence.shape().at(0);
  const Tensor params = reel::reshape(main, {layers, 2, 4 * b}), state = reel::reshape(reel::nodiff(state0), {layers, 2, b});
  // Gate g of the weights (wb = 0) or biases (wb = 1) of every layer: [l][b].
  auto gate = [&](int64_t wb, int64_t g) { return reel::slice(reel::index(params, wb, 1), 1, g * b, (g + 1) * b); };
  const Gates gates{gate(0, 0), gate(0, 1), gate(0, 2), gate(0, 3), gate(1, 0), gate(1, 1), gate(1, 2), gate(1, 3)};
  const Tensor in_w = reel::index(extra, 0), out_w = reel::index(extra, 1), out_b = reel::index(extra, 2);
  // One layer: its input x (the carry: the layer below's h) -> its h, and its new state.
  const auto layer = [](const Tensor& x, const Layer& p) {
    const Gates& w = p.gates;
    const Tensor f = reel::sigmoid(x * w.wf + w.bf), i = reel::sigmoid(p.h * w.wi + w.bi);
    const Tensor o = reel::sigmoid(x * w.wo + w.bo), g = reel::tanh(p.h * w.wc + w.bc);
    const Tensor cell = p.cell * f + i * g;
    const Tensor h = o * reel::tanh(cell);
    return std::pair{h, std::pair{h, cell}};
  };
  const auto step = [&](const LstmCarry& s, const std::pair<Tensor, Tensor>& in) {
    const auto [x, state] = reel::scan(layer, in.first * in_w, Layer{gates, s.h, s.cell});
    const Tensor y = x * out_w + out_b;
    const Tensor ynorm = y - reel::log(2.0 + reel::sum(reel::exp(y)));
    return std::pair{LstmCarry{state.first, state.second, s.total + reel::sum(in.second * ynorm)}, reel::none};
  };
  const LstmCarry init{reel::index(state, 0, 1), reel::index(state, 1, 1), reel::scalar(0.0)};
  const std::pair<Tensor, Tensor> inputs{reel::slice(sequence, 0, c - 1), reel::slice(sequence, 1, c)};
  const Tensor total = reel::scan(step, init, inputs).first.total;
  return -total / static_cast<double>((c - 1) * b);
}

}  // namespace

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

json lstm_jacobian_json(const Tensor& main, const Tensor& extra) {
  json all = vector_json(main);
  for (double v : extra.values()) all.push_back(v);
  return all;
}

namespace {

Prepared lstm_objective(const json& input) {
  static const auto f = reel::jit(lstm, kJitOptions);
  auto in = lstm_input(input);
  return each_run([=] { return f(in->main, in->extra, in->state, in->sequence); }, scalar_json);
}

Prepared lstm_jacobian(const json& input) {
  static const auto grad = reel::simplegrad(lstm, kJitOptions);
  auto in = lstm_input(input);
  auto out = std::make_shared<std::array<Tensor, 5>>();
  return {[=] { *out = grad(in->main, in->extra, in->state, in->sequence); },
          [=] { return lstm_jacobian_json((*out)[1], (*out)[2]); }};
}

}  // namespace

Functions lstm_functions() { return {{"objective", lstm_objective}, {"jacobian", lstm_jacobian}}; }

}  // namespace gradbench::evals
