#pragma once
// Kernels and the schedule. Needs no LLVM.
//
// A kernel is one loop nest of the plan (a fused elementwise loop with its sums, a
// reduction over some dimensions, or a transpose) described without the tape: its
// buffers as numbered parameters, its iteration space, and its operations numbered
// locally. Its `key` spells all of that out (operations, dtypes, shapes, strides,
// which values are stored and summed, which parameters are shared by an in-place
// update) and nothing else (no variable numbers, no addresses), so equal keys mean
// interchangeable code, and a process-wide cache compiles each key once.
//
// The schedule is the steps a compiled function runs, in order, each with its
// arguments (step_args.hpp).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "plan.hpp"
#include "steps.hpp"

namespace reel::codegen {

// An elementwise operation's element program and its text (as kernel keys spell it),
// made once per primitive and attributes in a schedule and shared by every use.
struct ElementRule {
  ElementProgram program;
  std::string text;
};

struct LoopKernel;

struct KernelSpec {
  enum class Kind { loop, reduce, transpose, gather, scatter, scan, pool };
  Kind kind = Kind::loop;
  std::vector<DType> params;  // the buffers, each distinct memory
  // Each buffer's guaranteed alignment in bytes; empty: 64 for all. A loop body's slices
  // of stacked xs and ys may be less aligned (a power of two dividing the slice's size).
  std::vector<int64_t> align;

  // loop: values are numbered loads first, then operations.
  struct Load {
    int param;
    DType dtype;
    std::vector<int64_t> strides;  // element strides over `dims`
    // A gather's indexed load (index_param >= 0): the element at strides . i +
    // idx[index_strides . i] * index_stride, idx being parameter index_param (i64, each
    // index checked before the kernel runs).
    int index_param = -1;
    std::vector<int64_t> index_strides;
    int64_t index_stride = 0;
    // Constant indices that count up by one along the innermost dimension in each of
    // `segments`: per segment, the index minus the innermost counter. The load is then
    // contiguous, strides . i + (i_last + deltas[segment]) * index_stride, and reads
    // no index (a shift, a slice, a reversal's run: not a vector gather).
    std::vector<int64_t> deltas;
    // A constant's load along the innermost dimension (strides 0 elsewhere, 1 there) that
    // is the same throughout each of `segments`: per segment, the element read.
    std::vector<int64_t> fixed;
    // Added to the element read (a strided read's start: a slice's first element).
    int64_t offset = 0;
  };
  struct Inst {
    const Primitive* prim;  // elementwise or broadcast (a copy)
    std::shared_ptr<const ElementRule> element;  // elementwise: from prim->element(attrs)
    std::vector<int> args;
    DType dtype;
  };
  struct Store {
    int value, param;
    std::vector<int64_t> strides;
    int64_t offset = 0;  // added to the element written (a part's place in a concatenation)
  };
  struct Sum {
    int value, param;
    double scale;
    DType dtype;
    // A sum over leading dimensions (column sums): `count` results, the one an element
    // adds to at strides . i (0 along the reduced dimensions). Empty: a sum of all.
    std::vector<int64_t> strides;
    int64_t count = 1;
  };
  std::vector<int64_t> dims;  // loop: coalesced iteration space
  // loop: with loads that have deltas or fixed elements, the innermost dimension in ranges, each its own
  // loop: the ranges' ends (the last is dims.back()); empty: one range.
  std::vector<int64_t> segments;
  bool empty = false;         // loop or reduce over no elements
  std::vector<Load> loads;
  std::vector<Inst> insts;
  std::vector<Store> stores;
  std::vector<Sum> sums;

  // reduce: params {in, out}; for each kept index, the reduced ones combined by
  // reduce_op (accumulated in double), then scaled.
  std::vector<int64_t> kept, kept_in, kept_out, reduced, reduced_in;
  int64_t out_numel = 0;
  double scale = 1;
  kernels::ReduceOp reduce_op = kernels::ReduceOp::sum;
  bool reduce_index = false;  // out (i64) is the position of the first element picked (Primitive::reduce_index)
  // transpose: params {in, out}, in is [rows, cols].
  int64_t rows = 0, cols = 0;
  // gather: params {x, indices (i64), out}; scatter: params {target, indices, values,
  // out} (out = target, then values added, or written with `replace`). x / target is
  // [outer, n, inner] around the axis, and `count` indices pick along n.
  int64_t outer = 0, n = 0, count = 0, inner = 0;
  bool replace = false;
  // pool: params {the primitive's arguments, out}; the windows (Primitive::pool).
  PoolWindow pool;
  // scan: the whole loop, its body's kernels inlined (see LoopKernel).
  std::shared_ptr<const LoopKernel> scan;

  // > 0: a large kernel, run in chunks of this many iterations of its outer loop on the
  // thread pool (ParallelKernelArgs): emitted as a RangeFn, its sums (and a reduction
  // to one number) written as partial results. The outer loop is a loop's dims[0], a
  // reduction's kept[0] (its outer kept dimensions' first, reducing rows; its reduced[0]
  // when it keeps none) or a transpose's rows (split_extent).
  int64_t chunk = 0;

  std::string key;
};

// A scan whose body's steps are all kernels (or copies, or such scans) runs as one
// kernel: the iteration loop is generated code that computes each iteration's buffers
// and calls the body's kernels, inlined. Its parameters, in order: the consts, the
// carries' initial values, results and temporaries, the stacked xs and ys, the body's
// workspace, the body's constants, and the counter (with `has_index`). The body's
// steps name their buffers as the body's program does, on its bases {workspace,
// constants, inputs ([counter], consts, carries, slices of xs), outputs (carries, slices
// of ys)}; the length, the strides and those offsets are part of the key.
struct LoopKernel {
  int64_t length = 0;
  bool reverse = false, has_index = false;
  int64_t index0 = 0;
  std::size_t C = 0, K = 0, X = 0, Y = 0;
  std::vector<int64_t> carry_bytes, x_bytes, y_bytes;  // a carry; a slice of each xs and ys
  // Per carry: updated in place in its result (copied there from its initial value
  // first) rather than alternating with its temporary. Its pointer is then the same in
  // every iteration, so the optimiser keeps the carry in registers from one iteration
  // to the next. The body's steps then name its input only.
  std::vector<bool> in_place;
  std::vector<KernelSpec> kernels;  // the body's, each key once
  struct Step {
    int kernel = -1;  // into kernels; -1: a copy of `bytes` from buffers[0] to buffers[1], or a guard
    std::vector<BufferRef> buffers;
    int64_t bytes = 0;
    // guard >= 0: guard number `guard`, which checks that the first element of
    // buffers[0] (of `dtype`) is nonzero iff `expected`; if not, the kernel records the
    // failure in its last parameter and returns (LoopGuardArgs).
    int guard = -1;
    DType dtype = DType::f64;
    bool expected = true;
  };
  std::vector<Step> steps;
  int guards = 0;  // guard steps; with any, a last parameter holds the failure record
  std::size_t num_params() const { return C + 3 * K + X + Y + 2 + (has_index ? 1 : 0) + (guards > 0 ? 1 : 0); }
};

struct Schedule {
  std::vector<KernelSpec> kernels;  // distinct keys, in order of first use, loops' bodies' included
  std::shared_ptr<Program> program;  // its steps (not yet bound), constant pool and workspace size
};

// The schedule of a planned tape whose memory plan is done; the steps of its loops'
// bodies (their own programs) call kernels of the same list.
// Kernels of at least 2 * chunk_elements elements run in chunks (KernelSpec::chunk);
// chunk_elements 0: none.
Schedule make_schedule(const Tape& tape, const Plan& plan, int64_t chunk_elements);

// The extent of the loop a kernel's chunks split and the elements one iteration of it
// covers; {0, 0} if the kernel cannot be split (a scan, a gather or scatter kernel, a
// loop over one segmented dimension, a row reduction keeping one dimension only).
struct SplitExtent {
  int64_t extent = 0, inner = 0;
};
SplitExtent split_extent(const KernelSpec& kernel);

// Coalesces dims: drops size-1 dimensions and merges neighbours that every stride
// vector walks contiguously.
void coalesce(std::vector<int64_t>& dims, std::vector<std::vector<int64_t>>& strides);

}  // namespace reel::codegen
