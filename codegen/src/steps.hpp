#pragma once
// The steps of a compiled function that are not generated kernels (CBLAS calls,
// copies, eager functions, index and guard checks), and the binding of every step to
// the function that runs it. Needs no LLVM. Internal to codegen/.
#include <string>
#include <vector>

#include "step_args.hpp"

namespace reel::codegen {

// The memory a BufferRef names in this call's bases.
template <class T>
T* at(void* const* bases, const BufferRef& ref) {
  return reinterpret_cast<T*>(static_cast<char*>(bases[ref.base]) + ref.offset);
}

// The first element of a buffer of `dtype`, as a double (a guard's or a while loop's condition).
double first_element(void* const* bases, DType dtype, const BufferRef& ref);

// A step ready to run: fn(bases, args). `args` points into the StepArgs it was bound
// from, which must outlive it and not move.
struct BoundStep {
  StepFn fn;
  const void* args;
};

// Binds a step: a kernel to its code (kernel_code[k] for KernelArgs{k}, called on its
// buffers), any other step to the C++ function that reads its kind of arguments.
// A kernel run in chunks gets its code (ParallelKernelArgs::code).
// Throws reel::Error (an internal error) if a kernel step names no kernel or has
// another number of buffers than its kernel has parameters.
BoundStep bind_step(StepArgs& step, const std::vector<StepFn>& kernel_code,
                    const std::vector<std::size_t>& kernel_params);

// Binds every step (bind_step) and copies the arguments of each step whose arguments
// are plain data (a kernel's buffers, gemm, gemv, copy, index checks) into `arena`, one
// after another in step order, pointing its call there: a long schedule then reads its
// arguments sequentially from one block (per-step allocations scattered over the heap
// made a 60,000-step schedule 2.3x slower). Steps holding strings or vectors (external
// calls, guards) keep pointing into `steps`. `arena` must not be resized afterwards.
std::vector<BoundStep> bind_steps(std::vector<StepArgs>& steps, const std::vector<StepFn>& kernel_code,
                                  const std::vector<std::size_t>& kernel_params, std::vector<int64_t>& arena);

// A schedule ready to run: its steps, bound, with the constants they read. A compiled
// function runs one on bases {workspace, constant pool, inputs..., outputs...}; a loop's
// step runs its body's once per iteration on a table of bases of its own.
struct Program {
  std::vector<StepArgs> steps;    // never resized once bound: calls point in
  std::vector<int64_t> arena;     // the plain-data steps' arguments, in step order (bind_steps)
  std::vector<BoundStep> calls;   // each step bound to its function
  Tensor constant_pool;           // every constant, each at a 64-byte-aligned offset
  int64_t workspace_bytes = 0;
  std::size_t num_inputs = 0, num_outputs = 0;
  bool may_throw = false;         // some step may throw (and may nest another compiled call)
  bool calls_out = false;         // some step calls a C++ function (an eager primitive's)

  // Runs the steps in order.
  void run(void* const* bases) const {
    for (const BoundStep& c : calls) c.fn(bases, c.args);
  }
  // The same, adding each step's time in seconds to seconds[i] (one per step).
  void run_timed(void* const* bases, std::vector<double>& seconds) const;
};

// What a step is, in a few words (CompiledFunction::profile): "kernel 3 (loop f64 [100,45])",
// "gemm f64 1000 x 10 x 10", "copy 800 bytes", "eager softmax", "scan %3 = scan(%1)".
std::string describe_step(const StepArgs& step, const std::vector<std::string>& kernel_keys);

// Binds a program's steps (bind_steps), and first those of the loops' bodies within,
// and sets may_throw and calls_out.
void bind_program(Program& program, const std::vector<StepFn>& kernel_code,
                  const std::vector<std::size_t>& kernel_params);

// Whether a step may throw (an eager function, an index or guard check): a schedule
// with such a step runs through the loop, since exceptions must not unwind through
// JIT code, and its calls may nest other compiled calls on the same thread. A loop's
// step may if a step of its bodies may.
bool may_throw(const StepArgs& step);
// Whether a step calls a C++ function outside the compiled code (an eager primitive's),
// which may run anything, another call of the same cached function included. A loop's
// step does if a step of its bodies does.
bool calls_out(const StepArgs& step);

}  // namespace reel::codegen
