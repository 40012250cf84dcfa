#pragma once
// The memory-planning pass: where each workspace buffer of a Plan lives.
//
// Each workspace slot's live range is the steps from the first that writes it to the
// last that reads it (reads through reshape views count for the viewed buffer).
// Buffers whose ranges do not overlap may share memory. Offsets are assigned greedily
// by decreasing size, each buffer at the lowest 64-byte-aligned offset that no
// overlapping buffer already occupies (the heuristic of XLA's buffer assignment and
// TVM's static memory planner); on large plans, where that is quadratic, a linear scan
// over the steps with a best-fit free list is used instead.
//
// Before that, a loop may write a stored value in place over one of its inputs: a
// workspace buffer of the same size and shape that the loop reads element for element
// and that nothing reads after it. The two then share a slot, which the kernel sees
// as one buffer (it loads an element before it stores the new one).
//
// Needs no LLVM.
#include <string>
#include <vector>

#include "plan.hpp"

namespace reel::codegen {

struct BufferLife {
  int slot;
  int64_t bytes;   // rounded up to 64
  int first, last; // steps
};

struct MemoryPlan {
  std::vector<BufferLife> buffers;  // one per workspace slot still in use
  std::vector<std::pair<Var, Var>> in_place;  // (value, the input it overwrites)
  int64_t workspace_bytes = 0;
  int64_t lower_bound = 0;  // the largest total of bytes alive at one step
  bool reuse = true;
};

// Assigns plan.slots[*].offset and plan.workspace_bytes. With reuse off, every buffer
// gets its own offset (for comparison).
MemoryPlan plan_memory(const Tape& tape, Plan& plan, bool reuse = true);

// The schedule and the memory plan as text (reel-opt --print-plan).
std::string plan_text(const Tape& tape, const Plan& plan, const MemoryPlan& memory);

}  // namespace reel::codegen
