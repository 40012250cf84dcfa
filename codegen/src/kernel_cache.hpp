#pragma once
// The process-wide kernel cache: each kernel key is compiled once and its code shared
// by every compiled function that uses it, for as long as one of them lives.
// Internal to codegen/.
#include <memory>
#include <string>
#include <vector>

#include "kernel_spec.hpp"
#include "reel/compile.hpp"
#include "steps.hpp"

namespace reel::codegen {

struct KernelCode {
  StepFn fn;  // called with the kernel's buffers: a BufferRef per parameter
  std::shared_ptr<void> code;  // keeps the module holding fn alive
  bool quick = false;          // compiled at the quick tier (Jit::Tier)
};

// The code of each kernel (in order). The ones not cached are emitted into a module
// per optimisation tier (Jit::Tier, chosen by options.optimization), optimised and
// added to the JIT together; `compiled` counts them. Call with the JIT's mutex held.
std::vector<KernelCode> get_kernels(const std::vector<KernelSpec>& kernels, const CompileOptions& options,
                                    int& compiled);

// A driver for a schedule: `void driver(void* const* bases)` calling each step's
// function with its arguments, in order, both addresses written into the code. Compiled
// without optimisation (it only sequences calls). Call with the JIT's mutex held.
using DriverFn = void (*)(void* const* bases);
struct DriverCode {
  DriverFn fn;
  std::shared_ptr<void> code;
};
DriverCode make_driver(const std::vector<BoundStep>& calls);

// The kernels in a module per tier, printed before and after optimisation, for
// inspection: at the tiers `quick` says (KernelCode::quick, one per kernel), or when it
// is empty at those a compile that builds them all would choose.
struct KernelsIr {
  std::string before, after;
};
KernelsIr kernels_ir(const std::vector<KernelSpec>& kernels, const CompileOptions& options,
                     const std::vector<bool>& quick = {});

}  // namespace reel::codegen
