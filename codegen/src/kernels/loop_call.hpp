#pragma once
// A loop primitive's call (Structure::loop: scan, while_loop, call, checkpoint;
// kernels/loop_call.cpp): one step that runs its body's own compiled schedule natively,
// once per iteration (loops.hpp), or one kernel (kernels/scan.cpp). Needs no LLVM.
#include <memory>

#include "reel/ir/tape.hpp"

namespace reel::codegen {

struct LoopPlan;  // loops.hpp
struct LoopCallStep {
  Var out;  // the call; its results are out, out + 1, ...
  int results = 1;
  std::shared_ptr<const LoopPlan> loop;  // its bodies, planned
  int scratch = -1;  // the workspace slot of its carries' second buffers, counter and bodies' workspace
};

}  // namespace reel::codegen
