#pragma once
// The steps of a compiled function that are not generated kernels (CBLAS calls,
// copies, eager functions, index and guard checks), and the binding of every step to
// the function that runs it. Needs no LLVM. Internal to codegen/.
#include <vector>

#include "step_args.hpp"

namespace reel::codegen {

// A step ready to run: fn(bases, args). `args` points into the StepArgs it was bound
// from, which must outlive it and not move.
struct BoundStep {
  StepFn fn;
  const void* args;
};

// Binds a step: a kernel to its code (kernel_code[k] for KernelArgs{k}, called on its
// buffers), any other step to the C++ function that reads its kind of arguments.
// Throws reel::Error (an internal error) if a kernel step names no kernel or has
// another number of buffers than its kernel has parameters.
BoundStep bind_step(const StepArgs& step, const std::vector<StepFn>& kernel_code,
                    const std::vector<std::size_t>& kernel_params);

// Binds every step (bind_step) and copies the arguments of each step whose arguments
// are plain data (a kernel's buffers, gemm, gemv, copy, index checks) into `arena`, one
// after another in step order, pointing its call there: a long schedule then reads its
// arguments sequentially from one block (per-step allocations scattered over the heap
// made a 60,000-step schedule 2.3x slower). Steps holding strings or vectors (external
// calls, guards) keep pointing into `steps`. `arena` must not be resized afterwards.
std::vector<BoundStep> bind_steps(const std::vector<StepArgs>& steps, const std::vector<StepFn>& kernel_code,
                                  const std::vector<std::size_t>& kernel_params, std::vector<int64_t>& arena);

// Whether a step may throw (an eager function, an index or guard check): a schedule
// with such a step runs through the loop, since exceptions must not unwind through
// JIT code, and its calls may nest other compiled calls on the same thread.
bool may_throw(const StepArgs& step);

}  // namespace reel::codegen
