#pragma once
// The interpreter.
#include <vector>

#include "reel/ir/tape.hpp"

namespace reel {

// Runs `tape` on `args` (one per input, of the input's dtype and shape) and returns
// its outputs. Each call goes through reel::apply, so playing a tape inside a trace
// records its operations there.
std::vector<Tensor> play(const Tape& tape, const std::vector<Tensor>& args);

}  // namespace reel
