#pragma once
// The interpreter.
#include <vector>

#include "reel/ir/tape.hpp"

namespace reel {

// Runs `tape` on `args` (one per input, of the input's dtype and shape) and returns
// its outputs. Each call goes through reel::apply, so playing a tape inside a trace
// records its operations there.
std::vector<Tensor> play(const Tape& tape, const std::vector<Tensor>& args);

// Throws reel::Error naming `op`, the argument, and the expected and given types
// if `args` do not match the tape's inputs.
void check_args(const char* op, const Tape& tape, const std::vector<Tensor>& args);

}  // namespace reel
