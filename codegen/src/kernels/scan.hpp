#pragma once
// A scan run as one generated kernel (kernels/scan.cpp): a loop call whose body's steps
// are all kernels, copies or guards (runs_as_kernel, loops.hpp). Needs no LLVM.
#include <memory>

namespace reel::codegen {

struct LoopKernel;  // kernels/scan.cpp
struct LoopPlan;    // loops.hpp
struct LoopBuffers;
class Scheduler;

// The kernel: the whole loop, its body's kernels inlined.
struct ScanSpec {
  std::shared_ptr<const LoopKernel> loop;
};

// A loop call that runs as a kernel (runs_as_kernel): one kernel step, and a step
// reporting a failed guard after it if its body has guards.
void schedule_scan_kernel(Scheduler& s, const LoopPlan& loop, const LoopBuffers& buffers);

}  // namespace reel::codegen
