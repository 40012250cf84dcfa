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
#include "step_args.hpp"

namespace reel::codegen {

// An elementwise operation's element program and its text (as kernel keys spell it),
// made once per primitive and attributes in a schedule and shared by every use.
struct ElementRule {
  ElementProgram program;
  std::string text;
};

struct KernelSpec {
  enum class Kind { loop, reduce, transpose, gather, scatter };
  Kind kind = Kind::loop;
  std::vector<DType> params;  // the buffers, each distinct memory

  // loop: values are numbered loads first, then operations.
  struct Load {
    int param;
    DType dtype;
    std::vector<int64_t> strides;  // element strides over `dims`
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
  };
  struct Sum {
    int value, param;
    double scale;
    DType dtype;
  };
  std::vector<int64_t> dims;  // loop: coalesced iteration space
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
  // transpose: params {in, out}, in is [rows, cols].
  int64_t rows = 0, cols = 0;
  // gather: params {x, indices (i64), out}; scatter: params {target, indices, values,
  // out} (out = target, then values added). x / target is [outer, n, inner] around the
  // axis, and `count` indices pick along n.
  int64_t outer = 0, n = 0, count = 0, inner = 0;

  std::string key;
};

struct Schedule {
  std::vector<KernelSpec> kernels;  // distinct keys, in order of first use
  std::vector<StepArgs> steps;
  std::vector<int64_t> constant_offsets;  // per constant: byte offset in the pool
  int64_t constant_pool_bytes = 0;
};

// The schedule of a planned tape whose memory plan is done.
Schedule make_schedule(const Tape& tape, const Plan& plan);

// Coalesces dims: drops size-1 dimensions and merges neighbours that every stride
// vector walks contiguously.
void coalesce(std::vector<int64_t>& dims, std::vector<std::vector<int64_t>>& strides);

}  // namespace reel::codegen
