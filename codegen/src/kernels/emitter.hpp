#pragma once
// What every kind's emission shares (LLVM): the kernel's two functions (the entry that
// loads each parameter's pointer from the BufferRef array, and the always-inlined body
// taking them as noalias parameters), counted loops and loop nests, element pointers,
// and accumulators in double. The body itself is the kind's (KernelRow::emit, called
// by emit_body). Internal to codegen/.
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <functional>
#include <string>
#include <vector>

#include "kernel_spec.hpp"

namespace reel::codegen {

class KernelEmitter {
 public:
  using Value = llvm::Value;
  KernelEmitter(llvm::LLVMContext& context, llvm::Module& m, const KernelSpec& k)
      : ctx(context), module(m), spec(k), b(context) {}

  // void NAME(ptr bases, ptr buffers): loads each parameter's pointer
  // (bases[buffers[j].base] + buffers[j].offset, BufferRef read as 64-bit words) and
  // calls an always-inlined body taking them as noalias parameters: distinct parameters
  // never overlap (an in-place update is one parameter), so the vectorizer may reorder
  // their loads and stores.
  void emit(const std::string& kernel_name);
  // The body, `NAME_body`: internal, always inlined, taking each parameter's pointer.
  llvm::Function* emit_body(const std::string& kernel_name);

  llvm::Type* elem(DType d);
  Value* element_ptr(int param, DType d, Value* offset);
  Value* offset(const std::vector<Value*>& idx, const std::vector<int64_t>& strides);

  // for i0 in [0, dims[0]) ... for ik in [0, dims[k]): body(i0..ik). Every dim > 0.
  // With `segments` (ends of ranges of the innermost dimension), the innermost loop is
  // one loop per range, `segment` naming it while its body is emitted. `chunk`: i0 runs
  // over this call's chunk [begin, end) instead (never empty; not with segments on i0).
  // `short_body`: the body is a loop nest of its own that unrolls completely (a short
  // reduction per element), so this nest's innermost loop is kept scalar.
  void loop_nest(const std::vector<int64_t>& dims, const std::function<void(const std::vector<Value*>&)>& body,
                 const std::vector<int64_t>& segments = {}, bool chunk = false, bool short_body = false);
  // A counted loop: a header block `name` whose counter (the phi returned) starts at
  // `start`; closed after its body by close_counted_loop: counter + 1, back to the
  // header while below `end`, then on in a new block `exit_name`. `interleave`: an
  // innermost loop long enough to keep kInterleave vector iterations in flight.
  llvm::PHINode* open_counted_loop(const char* loop_name, Value* start);
  void close_counted_loop(llvm::PHINode* i, Value* end, const char* exit_name, bool may_unroll, bool scalar = false,
                          bool interleave = false);

  // Innermost loops this short may be unrolled completely, which lets the SLP
  // vectorizer use vector math on them. Other loops are vectorized and interleaved but
  // not unrolled further: unrolling them made compile times up to ten times longer (an
  // MLP gradient took 220 ms instead of 25 ms) for no measurable speed.
  static constexpr int64_t kMaxUnrolledTripCount = 16;
  // Vector iterations in flight in a long innermost loop (llvm.loop.interleave.count),
  // one of at least kInterleavedTripCount iterations (a shorter one would leave most of
  // them to the scalar remainder).
  static constexpr int kInterleave = 4;
  static constexpr int64_t kInterleavedTripCount = 64;
  // Whether a loop nest over dims is one short loop, which the optimiser unrolls completely.
  static bool unrolls_completely(const std::vector<int64_t>& dims) {
    return dims.size() == 1 && dims[0] <= kMaxUnrolledTripCount;
  }

  // Sums to one number accumulate in double, as the interpreter's do, for f32 too: an
  // f32 sum of many terms followed by a cancellation can keep only a few good digits.
  // Reductions accumulate in double, from the operation's identity; products, maxima
  // and minima too (as the interpreter's kernels::reduce_to does).
  llvm::AllocaInst* new_accumulator(kernels::ReduceOp op = kernels::ReduceOp::sum);
  // An array of `count` zeros in double (column sums), accumulated in order as the
  // interpreter's sum_to does, so with its bits.
  llvm::AllocaInst* new_columns(int64_t count);
  // An alloca of `type` in the entry block (uninitialised).
  llvm::AllocaInst* entry_alloca(llvm::Type* type);
  // (Sums and products may be reassociated unless `in_order`.)
  void accumulate(Value* acc, Value* x, kernels::ReduceOp op = kernels::ReduceOp::sum, bool in_order = false);
  // Scales the sum (mean: 1/n; of no elements that is 0 * inf = NaN, as interpreted)
  // and stores it at element `at` of parameter `param`.
  void finish_sum(Value* acc, double scale, int param, DType dtype, Value* at);
  // A chunk's partial results (ParallelKernelArgs), as accumulated: `count` doubles at
  // acc (one accumulator, or an array of column sums) to partials[at, at + count).
  void store_partial(llvm::AllocaInst* acc, int64_t at, int64_t count = 1);

  llvm::LLVMContext& ctx;
  llvm::Module& module;
  const KernelSpec& spec;
  llvm::IRBuilder<> b;
  llvm::Function* fn = nullptr;  // the body
  std::string name;
  std::vector<Value*> param;  // the body's parameters' pointers
  Value* range_begin = nullptr;  // a chunked kernel's: its outer loop's range, and where its partial sums go
  Value* range_end = nullptr;
  Value* partials = nullptr;
  std::size_t segment = 0;  // the innermost range being emitted (loop_nest's segments)

 private:
  // `void NAME(ptr bases, ptr buffers)`: the parameters' pointers, then the body. In
  // chunks (KernelSpec::chunk), `void NAME(ptr bases, ptr buffers, i64 begin, i64 end,
  // ptr partials)` (a RangeFn).
  void emit_entry(const std::string& kernel_name);
  // A loop ID: not unrolled, and or not vectorized (the SLP vectorizer still works within it);
  // a vectorized one not unrolled interleaves kInterleave vector iterations if `interleave`.
  llvm::MDNode* loop_hints(bool no_unroll, bool no_vectorize, bool interleave);
};

}  // namespace reel::codegen
