#pragma once
// reel::compile: a tape -> native code through LLVM's ORC JIT.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "reel/ir/dot.hpp"
#include "reel/ir/tape.hpp"

namespace reel {

struct CompileOptions {
  // Let loops call glibc's libmvec vector functions for exp, log, sin, cos, pow and
  // tanh. Off: one scalar libm call per element (for measuring what vector math buys).
  bool vector_math = true;
  // Let workspace buffers whose lives do not overlap share memory, and loops write in
  // place over an input they are the last to read (the memory plan). Off: every
  // buffer has memory of its own (for measuring what reuse saves).
  bool reuse_memory = true;
  // How a call runs the schedule's steps: a loop over an array of (function, refs)
  // pairs, or a generated driver function that calls them in order with both
  // addresses in its code (one more, unoptimised, LLVM function per compile).
  // `automatic` picks what the benchmark measured faster for the schedule's size.
  enum class Runner { automatic, loop, driver };
  Runner runner = Runner::automatic;
  // Threads (reel/parallel.hpp): a kernel covering at least twice this many elements
  // runs in chunks of about this many, on the thread pool. The chunks depend on the
  // kernel's size alone, never on the thread count, so results are the same on any
  // number of threads. 0: every kernel in one piece. (Smaller values exercise the
  // chunks on small programs; the default repays waking a thread.)
  int64_t chunk_elements = 32768;
  // How hard LLVM optimises the kernels (docs/codegen.md, "Optimisation tiers").
  // `full`: LLVM's O3 pipeline and aggressive instruction selection for every kernel.
  // `quick`: kernels without loops (straight-line code, as a traced scalar program
  // gives) get O1's simplification and the fast instruction selector instead, about
  // 3x less compile time for 1.1-2x slower code; kernels with loops stay `full`.
  // `automatic`: `quick` once the straight-line kernels a compile has to build pass
  // kQuickStraightLine LLVM instructions, where the compile costs more than the code
  // saves over most runs; `full` below. (A scalar operation is 4 to 8 instructions, and
  // kernels that repeat are built once: a 10^5-operation chain's gradient builds 144
  // distinct kernels, 35,000 instructions. Kernels already in memory are reused at the
  // tier they were built at, full code for any request, quick code for requests that
  // allow it.)
  enum class Optimization { automatic, full, quick };
  Optimization optimization = Optimization::automatic;
  static constexpr int64_t kQuickStraightLine = 20000;
};

// The process-wide kernel cache (see docs/codegen.md): each fused loop, reduction or
// transpose is compiled once per structural key and shared by every compiled
// function that uses it.
struct KernelCacheStats {
  int64_t compiled = 0;  // kernels not in memory when a compile needed them (built or loaded)
  int64_t hits = 0;      // kernels a compile found already compiled
  int64_t modules = 0;   // modules made for them (per compile that missed: one per optimisation tier)
  int64_t loaded = 0;    // of `compiled`, kernels whose module the disk cache supplied
  int64_t cached = 0;    // kernels whose code is alive now
};
KernelCacheStats kernel_cache_stats();

// The persistent code cache (docs/codegen.md): the kernels' optimised machine code is
// also kept on disk, so a new process compiling the same programs skips LLVM. One
// file per module, named by a hash of what was compiled (its kernels' keys, and the
// sources that turn a key into code), the options, Reel's and LLVM's versions and the host CPU and its features. A file that
// is truncated, corrupt (checksum) or holds another program is ignored and replaced;
// writes are atomic (a temporary file renamed into place); the directory is kept
// under a size bound, least recently used files removed first.
// Where: REEL_CACHE_DIR, else $XDG_CACHE_HOME/reel, else ~/.cache/reel;
// REEL_CACHE_DIR=off disables it. Bound: REEL_CACHE_MAX_MB (default 512). A bad
// value of either is reported once on stderr (then: the default bound, or no cache).
struct CodeCacheInfo {
  std::string dir;        // empty when the cache is off
  int64_t hits = 0;       // modules loaded from disk instead of compiled
  int64_t misses = 0;     // modules looked up and not found whole (then compiled)
  int64_t writes = 0;     // modules written
  int64_t rejected = 0;   // files ignored: truncated, corrupt, another program's, unlinkable,
                          // or not a regular file of this user (those are left alone)
  int64_t removed = 0;    // files removed to keep the directory under max_bytes
  int64_t bytes = 0;      // the directory's files at its last scan (this process's first write, then at
                          // least every 32nd, or set_code_cache_max_bytes), plus what it wrote since
  int64_t max_bytes = 0;  // the bound
};
CodeCacheInfo code_cache_info();
// For this process, overriding the environment: a directory, or "off" (or "") for none.
void set_code_cache_dir(const std::string& dir);
void set_code_cache_max_bytes(int64_t bytes);

class CompiledFunction;
namespace detail {
// reel::compile of a tape known to be well formed: one verified (reel::verify) by the
// caller, or made by the pass pipeline from a verified tape (grad_tape's, which
// reel::compile_grad compiles, or the cleanup passes' in reel::compile). It is not
// verified again except in a debug build: at 10^5 operations that was a tenth of a
// gradient's compile.
CompiledFunction compile_verified(Tape&& tape, const CompileOptions& options);
}  // namespace detail

// A tape compiled to native code. Call it like the tape: f(args) -> outputs. Copies
// share the code, which is freed when the last copy goes. It may be called from
// several threads at once (each thread gets its own workspace).
class CompiledFunction {
 public:
  std::vector<Tensor> operator()(const std::vector<Tensor>& args) const;
  // The same, for hot paths: arguments by pointer, and the outputs written into
  // `outputs`, which must have one element per output. No vector is allocated. A slot
  // that holds a tensor of its output's dtype and shape which nothing else shares
  // (Tensor::unshared) and which is none of the arguments' memory is written in place:
  // results kept from the previous call cost no allocation. Any other slot gets a new
  // tensor (its old one is released after the call, so an argument may be a slot). If
  // a step throws, a slot that was empty or written in place is left undefined (no
  // half-computed values stay behind); a slot that was to get a new tensor keeps its
  // old one.
  void run(std::span<const Tensor* const> args, std::span<Tensor> outputs) const;
  // The same, where outputs[k] is written in place when exactly holders[k] tensors hold
  // its memory (Tensor::unshared(holders)): the slot and copies of it that the caller
  // owns and means to overwrite (a result struct's second name for one of its tensors).
  // `holders` has one element per output.
  void run(std::span<const Tensor* const> args, std::span<Tensor> outputs, std::span<const int> holders) const;
  // The same, output k written into *outputs[k]: tensors that live in a caller's own
  // fields (a kept result struct's) are written where they are, not moved into a list
  // and back. Nothing may reassign those tensors while the call runs (code it calls:
  // calls_out); old tensors a slot gives up are released once every output is written.
  void run(std::span<const Tensor* const> args, std::span<Tensor* const> outputs, std::span<const int> holders) const;
  // Whether a call runs C++ code of its own (an eager primitive's function: a primitive
  // without a lowering), which may run anything, such as another call of the caller's
  // that reassigns the tensors `run` writes through.
  bool calls_out() const;
  std::size_t num_outputs() const;

  const Tape& tape() const;            // the tape that was compiled (after cleanup)
  int64_t workspace_bytes() const;     // scratch memory one call uses (after reuse)
  int64_t workspace_lower_bound() const;  // the most bytes alive at one step
  std::size_t num_steps() const;       // steps of the schedule (kernel, CBLAS and copy calls)
  bool uses_driver() const;            // runs its steps through a generated driver
  std::size_t num_kernels() const;     // distinct kernels the schedule calls
  int kernels_compiled() const;        // of those, how many were not in memory (built, or loaded from disk)
  // The optimised LLVM IR of the kernels this function calls; built when first asked.
  const std::string& llvm_ir() const;
  // Where the time goes: runs the function `runs` times (after one untimed call) step by
  // step, timing each step of the schedule, and returns a table, slowest first: each
  // step's number (as num_steps counts them: a fused loop is one, a placement its zeroing
  // and a copy loop per argument, a loop's or independent steps' inner steps count in
  // theirs), its mean time, its share of the total, and what it is (a kernel with its
  // iteration space, a gemm with m x n x k, a copy, an eager call, a loop). Outputs are
  // discarded. Not to be called while another thread calls the same function.
  std::string profile(const std::vector<Tensor>& args, int runs = 20) const;

  struct Impl;

 private:
  friend CompiledFunction detail::compile_verified(Tape&& tape, const CompileOptions& options);
  const Impl& checked() const;  // throws reel::Error for an empty (default-made) object
  void run_steps(std::span<const Tensor* const> args, std::span<Tensor> outputs, bool timed,
                 std::span<const int> holders = {}) const;
  void run_steps(std::span<const Tensor* const> args, std::span<Tensor* const> outputs, bool timed,
                 std::span<const int> holders = {}) const;
  std::shared_ptr<const Impl> impl_;
};

// Simplifies the tape (simplify, cse, dce: reel::cleanup) unless it is marked
// `cleaned` (grad_tape, vjp_tape and jvp_tape end with those passes), plans it (fused loops, CBLAS calls, a
// memory plan over one workspace), and turns it into a schedule of steps whose
// kernels come from the kernel cache; the kernels not yet cached are optimised at O3
// for the host CPU and JIT-compiled together.
// An operation code generation cannot handle is a reel::Error naming it.
// With the environment variable REEL_DUMP_IR set, the IR before and after
// optimisation is printed to standard error.
CompiledFunction compile(const Tape& tape, const CompileOptions& options = {});
// The same, taking the tape: a cleaned one becomes the function's tape without a copy
// (reel::compile_grad's gradient tape: a copy of a million operations is 200 MB).
CompiledFunction compile(Tape&& tape, const CompileOptions& options = {});

// The LLVM IR of a tape's kernels, before and after optimisation, without compiling.
std::string dump_ir(const Tape& tape, const CompileOptions& options = {});

// The schedule and memory plan compile() would make for a tape, as text: each step,
// and each workspace buffer's offset, size and live range, with the total and the
// liveness lower bound. Needs no JIT.
std::string plan_text(const Tape& tape, const CompileOptions& options = {});

// The tape as compile() plans it (after the cleanup passes, so its variables are
// those plan_text names), as Graphviz DOT (reel::to_dot), each fused loop (one
// kernel) drawn in a box labelled with its step and iteration space.
std::string plan_dot(const Tape& tape, const CompileOptions& options = {}, DotOptions dot = {});

// The host CPU code is generated for, e.g. "skylake-avx512".
std::string jit_cpu();

}  // namespace reel
