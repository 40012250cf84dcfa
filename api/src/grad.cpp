#include "reel/grad.hpp"

#include <fmt/format.h>

namespace reel::detail {

void check_seed(const Tape& tape, const Tensor& seed) {
  if (tape.outputs.size() != 1)
    throw Error(fmt::format("vjp: expected a function with one output, got {} outputs",
                            tape.outputs.size()));
  const VarType& out = tape.type(tape.outputs[0]);
  if (!seed.defined() || seed.dtype() != out.dtype || seed.shape() != out.shape)
    throw Error(fmt::format("vjp: the seed must have the output's type {}, got {}", type_str(out),
                            seed.defined() ? type_str(seed.dtype(), seed.shape()) : "undefined"));
}

void check_tangents(const char* op, std::span<const Tensor> args, std::span<const Tensor> tangents) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const Tensor& t = tangents[i];
    if (!t.defined() || t.dtype() != args[i].dtype() || t.shape() != args[i].shape())
      throw Error(fmt::format("{}: tangent {} must have its argument's type {}, got {}", op, i + 1,
                              type_str(args[i].dtype(), args[i].shape()),
                              t.defined() ? type_str(t.dtype(), t.shape()) : "undefined"));
  }
}

std::vector<Tensor> jvp_inputs(std::span<const Tensor> args, const std::vector<Tensor>& captured,
                               std::span<const Tensor> tangents) {
  std::vector<Tensor> in(args.begin(), args.end());
  in.insert(in.end(), captured.begin(), captured.end());
  in.insert(in.end(), tangents.begin(), tangents.end());
  for (const Tensor& c : captured) in.push_back(zeros(c.shape(), c.dtype()));
  return in;
}

Tape own_gradients(const Tape& gradient_tape, std::size_t num_args) {
  if (gradient_tape.outputs.size() == num_args + 1) return gradient_tape;
  std::vector<int> keep(num_args + 1);
  for (std::size_t i = 0; i < keep.size(); ++i) keep[i] = static_cast<int>(i);
  return dce(select_outputs(gradient_tape, keep));
}

}  // namespace reel::detail
