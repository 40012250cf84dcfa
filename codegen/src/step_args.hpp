#pragma once
// The arguments of each kind of schedule step, declared once: the scheduler
// (schedule.cpp and the kinds of kernels/) fills them in by field name and the steps (steps.cpp, and kernels
// through BufferRef) read them by field name. Needs no LLVM. Internal to codegen/.
//
// Every step of a compiled function has one signature,
//   void step(void* const* bases, const void* args)
// where bases = {workspace, constant pool, inputs..., outputs...} for this call, and
// args, fixed at compile time, points at the step's argument struct below: for a
// kernel an array of BufferRef (one per kernel parameter), for a C++ step its
// XxxArgs. steps.cpp pairs each struct with the function that reads it, so a step
// cannot get another kind's arguments.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "reel/ir/tape.hpp"

namespace reel::codegen {

// Base indices of the `bases` table.
constexpr int64_t kWorkspaceBase = 0, kConstantBase = 1, kFirstInputBase = 2;

// A buffer of a step: bases[base] + offset bytes.
struct BufferRef {
  int64_t base = 0;
  int64_t offset = 0;
};
// Generated kernels read an array of BufferRef as consecutive 64-bit integers (kernels/emitter.cpp
// indexes it with these constants), so this layout is part of their ABI.
static_assert(std::is_standard_layout_v<BufferRef> && std::is_trivially_copyable_v<BufferRef>);
static_assert(sizeof(BufferRef) == 2 * sizeof(int64_t) && alignof(BufferRef) == alignof(int64_t));
constexpr std::size_t kBufferRefWords = sizeof(BufferRef) / sizeof(int64_t);
constexpr std::size_t kBufferRefBaseWord = offsetof(BufferRef, base) / sizeof(int64_t);
constexpr std::size_t kBufferRefOffsetWord = offsetof(BufferRef, offset) / sizeof(int64_t);
static_assert(kBufferRefBaseWord == 0 && kBufferRefOffsetWord == 1);

// A generated kernel of Schedule::kernels, on its parameters' buffers (in order).
struct KernelArgs {
  int kernel = -1;
  std::vector<BufferRef> buffers;
};

// A large kernel (KernelSpec::chunk > 0) run in chunks of its outer dimension on the
// thread pool: code(bases, buffers, begin, end, partials) computes outer iterations
// [begin, end) and writes each of its sums' partial results (in double, unscaled) to
// partials, one after another (a sum of all: one; column sums: `count`). The step then
// combines each result's partials in chunk order, scales it and stores it. The chunks depend on the kernel's size only, so the result does
// not depend on how many threads ran them.
using RangeFn = void (*)(void* const* bases, const BufferRef* buffers, int64_t begin, int64_t end, double* partials);
struct ParallelKernelArgs {
  int kernel = -1;
  std::vector<BufferRef> buffers;
  int64_t extent = 0, chunk = 0;  // the outer dimension, and the iterations of one chunk
  struct Sum {
    int param = 0;  // the buffer it is stored in (its first element)
    double scale = 1;
    DType dtype = DType::f64;
    kernels::ReduceOp op = kernels::ReduceOp::sum;
    int64_t count = 1;  // results (column sums: one per kept element; partials one after another)
  };
  std::vector<Sum> sums;
  RangeFn code = nullptr;  // the kernel's code, set when bound
};

// C = op(A) op(B) through CBLAS (row major), transposes folded into the flags.
struct GemmArgs {
  DType dtype = DType::f64;  // f32 or f64
  BufferRef a, b, c;
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
};

// A batch of products C_i = op(A_i) op(B_i) (batch_matmul): the batch index runs over
// `batch` (row-major), and each matrix starts at its base plus the batch index dotted
// with its element strides (0 along a broadcast dimension). No copies: transposed
// operands (a swap of the last two axes) are read as stored, through the flags.
struct BatchGemmArgs {
  GemmArgs gemm;  // one product's shape, leading dimensions and flags; a, b, c: the first matrices
  std::vector<int64_t> batch, stride_a, stride_b, stride_c;
  // Small products run on the thread pool, in chunks of this many batch elements; 0: one
  // after another (each cut into blocks on the pool if large: blas.cpp).
  int64_t chunk = 0;
};

// y = op(A) x through CBLAS; A is [rows, cols] as stored.
struct GemvArgs {
  DType dtype = DType::f64;
  BufferRef a, x, y;
  bool trans_a = false;
  int64_t rows = 0, cols = 0;
};

// An output that is a view or a repeat of another value, copied at the end.
struct CopyArgs {
  BufferRef from, to;
  int64_t bytes = 0;
};

// Zeros over `bytes` (the part of a placement's result no argument covers).
struct ZeroArgs {
  BufferRef to;
  int64_t bytes = 0;
};

// A buffer with the type it holds.
struct TypedBuffer {
  BufferRef ref;
  VarType type;
};

// A primitive's eager function called on the step's buffers (copied into tensors), its
// results copied back; `label` ("%7 = slice(%6)") names it in errors.
struct ExternArgs {
  const Primitive* prim = nullptr;
  Attrs attrs;
  std::vector<TypedBuffer> args;
  std::vector<TypedBuffer> results;  // one per result of the primitive
  std::string label;
  // A user's eager function gets tensors of its own (copies), which it may keep: views
  // of the workspace would change under it after the call. Reel's own keep nothing, so
  // they read the workspace where it is (an 80 MB argmin argument is not copied), unless
  // they run tapes (revolve, a loop run eagerly): those pass their arguments on to the
  // tapes' operations, a user's primitive among them. Decided when scheduling.
  bool borrow = false;
  // Where borrow allows and the primitive has eager_into: results written in place, with
  // its scratch (Primitive::scratch_bytes) here, if it asks for any.
  bool has_scratch = false;
  BufferRef scratch;
};

// Before a gather or scatter kernel: throws reel::Error for an index out of range (JIT
// code must not read out of bounds, nor throw).
struct CheckIndicesArgs {
  BufferRef indices;  // i64
  int64_t count = 0, axis_length = 0, axis = 0;
  const Primitive* prim = nullptr;  // the gather's or scatter's (its name is the error's)
  bool distinct = false;            // no index twice (a scatter that replaces)
};

// A guard: throws reel::GuardFailure if the first element of `cond` is not `expected`.
struct GuardArgs {
  DType dtype = DType::f64;
  BufferRef cond;
  bool expected = true;
  std::string label;  // "%7 = guard(%6)"
  std::string loop;   // the call's `loop` (empty: not in a loop body)
};

// A loop primitive's call run natively (loops.hpp): its body (and a while loop's cond) is
// a Program of its own, run once per iteration on a table of bases the step fills in:
// the consts, this iteration's carries and slices of the xs as inputs, the next
// carries and this iteration's slots of the stacked ys as outputs.
struct Program;  // steps.hpp
enum class LoopKind { scan, while_loop, call };
struct LoopArgs {
  LoopKind kind = LoopKind::scan;
  std::shared_ptr<Program> body, cond;
  int64_t length = 0;  // scan: iterations
  bool reverse = false;
  bool has_index = false;  // scan: the body's first input is the i64 counter index0 + k
  int64_t index0 = 0;
  int64_t max_trips = -1;  // while_loop: a reel::Error when cond still holds after this many (-1: no limit)
  // In the step's scratch (the parent's workspace): the bodies' workspace, the tables of
  // their bases, the counter and cond's result.
  BufferRef workspace, body_bases, cond_bases, counter, cond_out;
  DType cond_dtype = DType::f64;
  std::vector<BufferRef> consts;  // call: its arguments
  // A carry's buffers: its initial value (read once), and two that iterations write in
  // turn, the result and a temporary, chosen so that the last iteration writes the result.
  struct Carry {
    BufferRef init, result, temp;
    int64_t bytes = 0;
  };
  std::vector<Carry> carries;
  // Stacked along the leading axis: iteration k's slice at base + k * bytes.
  struct Stacked {
    BufferRef base;
    int64_t bytes = 0;
  };
  std::vector<Stacked> xs, ys;     // ys: those the body computes (results something reads)
  std::vector<BufferRef> results;  // call: its results
  std::string label;               // "%3, %4 = scan(%1, %2)"
};

// After a loop kernel whose body has guards: the kernel stops at the first guard that
// fails and records {iteration + 1, which guard, the value} (three 8-byte words, i64,
// i64, f64; the first 0 when none failed), and this step throws reel::GuardFailure
// naming the guard (JIT code must not throw).
struct LoopGuardArgs {
  BufferRef failure;
  std::vector<GuardArgs> guards;  // (their `cond` unused)
  std::string label;              // the loop, as LoopArgs::label
};

// Independent steps run at the same time (concurrent_groups in concurrent.hpp): each
// branch's steps in order on a thread of the pool, on the caller's bases.
struct ConcurrentArgs {
  std::vector<std::shared_ptr<Program>> branches;
};

using StepArgs = std::variant<KernelArgs, ParallelKernelArgs, GemmArgs, BatchGemmArgs, GemvArgs, CopyArgs, ZeroArgs,
                              ExternArgs, CheckIndicesArgs, GuardArgs, LoopArgs, LoopGuardArgs, ConcurrentArgs>;

// The signature of every step (see above).
using StepFn = void (*)(void* const* bases, const void* args);

}  // namespace reel::codegen
