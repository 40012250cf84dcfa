#pragma once
// reel::compile: a tape -> native code through LLVM's ORC JIT.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "reel/ir/tape.hpp"

namespace reel {

struct CompileOptions {
  // Let loops call glibc's libmvec vector functions for exp, log, sin, cos, pow and
  // tanh. Off: one scalar libm call per element (for measuring what vector math buys).
  bool vector_math = true;
};

// A tape compiled to native code. Call it like the tape: f(args) -> outputs. Copies
// share the code, which is freed when the last copy goes. It may be called from
// several threads at once (each thread gets its own workspace).
class CompiledFunction {
 public:
  std::vector<Tensor> operator()(const std::vector<Tensor>& args) const;
  // The same, for hot paths: arguments by pointer, and newly allocated outputs written
  // into `outputs`, which must have one element per output. No vector is allocated.
  void run(std::span<const Tensor* const> args, std::span<Tensor> outputs) const;
  std::size_t num_outputs() const;

  const Tape& tape() const;            // the tape that was compiled (after simplification)
  int64_t workspace_bytes() const;     // scratch memory one call uses
  const std::string& llvm_ir() const;  // the optimised LLVM IR that was compiled

  struct Impl;

 private:
  friend CompiledFunction compile(const Tape& tape, const CompileOptions& options);
  const Impl& checked() const;  // throws reel::Error for an empty (default-made) object
  std::shared_ptr<const Impl> impl_;
};

// Simplifies the tape (simplify, cse, dce), lowers it to LLVM IR (fused loops,
// CBLAS calls, one workspace), optimises at O3 for the host CPU and JIT-compiles it.
// An operation code generation cannot handle is a reel::Error naming it.
// With the environment variable REEL_DUMP_IR set, the IR before and after
// optimisation is printed to standard error.
CompiledFunction compile(const Tape& tape, const CompileOptions& options = {});

// The LLVM IR for a tape, before and after optimisation, without compiling it.
std::string dump_ir(const Tape& tape, const CompileOptions& options = {});

// The host CPU code is generated for, e.g. "skylake-avx512".
std::string jit_cpu();

}  // namespace reel
