#pragma once
// Concurrent steps: runs of plan steps that run at the same time, each on a thread of
// the pool (the scheduler makes each run one ConcurrentArgs step). Needs no LLVM.
#include <vector>

#include "plan.hpp"

namespace reel::codegen {

// Steps that run at the same time, each on a thread of the pool: runs of consecutive
// steps (loops, reductions, transposes, placements, matrix products: none that may
// throw; StepRow::cost) touching no byte another of the run writes, of which at least
// two are worth a thread of their own but too small to be cut into chunks (a kernel of
// chunk_elements / 2 to 2 chunk_elements elements, a product of 2^17 to 2^19
// multiply-adds, which CBLAS runs whole). Needs plan.slots' offsets (plan_memory). None
// for chunk_elements 0.
std::vector<std::vector<int>> concurrent_groups(const Tape& tape, const Plan& plan, int64_t chunk_elements);

}  // namespace reel::codegen
