#pragma once
// The order in which the planner places operations. Needs no LLVM.
#include <vector>

#include "reel/ir/tape.hpp"

namespace reel::codegen {

// The tape's order, except that an elementwise or broadcasting operation (not an
// output) waits until something else reads it, and is placed just before its first
// reader if that comes soon after (placement.cpp). folded[v]: v is a transpose folded
// into the matrix products reading it.
std::vector<Var> placement_order(const Tape& t, const std::vector<bool>& folded);

}  // namespace reel::codegen
