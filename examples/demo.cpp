// The README's example: trace L(x) = sum(sigmoid(x)), print its tape and gradient
// tape, and the gradient values, interpreted and compiled to native code.
#include <fmt/core.h>
#include <reel/reel.hpp>

using reel::Tensor;

Tensor L(const Tensor& x) { return reel::sum(reel::sigmoid(x)); }

int main() {
  Tensor x = reel::tensor({1.0, 2.0, 3.0, 4.0, 5.0});
  reel::Tape tape = reel::trace(L, x);
  fmt::print("Traced tape of L(x) = sum(sigmoid(x)):\n{}\n\n", tape);
  reel::Tape again = reel::parse_tape(fmt::format("{}", tape));
  std::vector<Tensor> out = reel::play(tape, {x});
  fmt::print("play(tape, x) = {}\n\n", out[0]);
  auto g = reel::grad(L, x);
  fmt::print("Gradient tape:\n{}\n\n", reel::grad_tape(tape));
  fmt::print("L(x)  = {}\ndL/dx = {}\n\n", g.value, g.grads[0]);

  auto compiled = reel::simplegrad(L, x);  // the same gradient tape, as native code
  auto [value, dx] = compiled(reel::tensor({-1.0, 0.0, 1.0, 2.0, 3.0}));
  fmt::print("compiled, at x = [-1, 0, 1, 2, 3]:\nL(x)  = {}\ndL/dx = {}\n", value, dx);
}
