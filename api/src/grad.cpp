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

}  // namespace reel::detail
