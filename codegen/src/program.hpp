#pragma once
// A tape planned down to its memory, before LLVM: the cleanup passes (unless the tape
// has run them last), the lowering plan and the memory plan. A compiled function's
// tape is one, and so is each body of a loop it calls (loops.hpp), planned the same
// way and run by the loop's step on buffers it binds per iteration. Internal to codegen/.
#include "memory_plan.hpp"

namespace reel::codegen {

struct ProgramPlan {
  Tape tape;  // as planned: cleaned up
  Plan plan;
  MemoryPlan memory;
};

// Throws reel::Error for a malformed tape or an operation code generation cannot handle.
ProgramPlan plan_program(const Tape& tape, bool reuse_memory);
// The same for a tape known to be well formed (detail::compile_verified), not verified
// again; a cleaned one is moved, not copied.
ProgramPlan plan_verified(Tape&& tape, bool reuse_memory);

}  // namespace reel::codegen
