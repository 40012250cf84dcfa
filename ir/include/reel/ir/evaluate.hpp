#pragma once
// The interpreter's loop, without the tracer: runs a tape by calling each primitive's
// eager rule. reel::play (tracer/) runs the same loop through the dispatcher, so that
// playing a tape inside a trace records it; the loop primitives' eager rules run their
// bodies with reel::evaluate, which records nothing.
#include <functional>
#include <vector>

#include "reel/ir/tape.hpp"

namespace reel {

// Runs `tape` on `args` (one per input, of the input's dtype and shape, else a
// reel::Error naming `op`) and returns its outputs; each intermediate is released
// after its last use. `call` computes one call's results from its arguments.
using CallRule = std::function<Results<Tensor>(const Op& call, std::span<const Tensor> args)>;
std::vector<Tensor> run_tape(const char* op, const Tape& tape, const std::vector<Tensor>& args,
                             const CallRule& call);

// run_tape with each primitive's eager rule, its results checked against the tape's
// types (a reel::Error naming the primitive otherwise).
std::vector<Tensor> evaluate(const Tape& tape, const std::vector<Tensor>& args);

}  // namespace reel
