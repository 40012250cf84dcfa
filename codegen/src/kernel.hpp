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
// Every step of a compiled function has one signature,
//   void step(void* const* bases, const int64_t* refs)
// where bases = {workspace, constant pool, inputs..., outputs...} for this call and
// refs, fixed at compile time, name each buffer as a pair (base index, byte offset),
// followed by the step's other integers (a CBLAS call's sizes, a copy's length).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "plan.hpp"

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

// The signature of every step (see above).
using KernelFn = void (*)(void* const* bases, const int64_t* refs);

// What a step runs.
// check_indices: a C++ step before a gather or scatter kernel that throws reel::Error
// for an index out of range (JIT code must not read out of bounds, nor throw).
// guard: a C++ step checking one element of a guard's condition (refs: its ref,
// expected, then the index of an ExternCall whose label names it).
enum class StepKind { kernel, gemm, gemv, copy, external, check_indices, guard };

// An external step: a primitive's eager function called on the step's buffers.
struct ExternCall {
  const Primitive* prim;
  Attrs attrs;
  std::vector<VarType> args;
  std::vector<VarType> outs;  // one per result
  std::string label;          // "%7 = guard(%6)", for errors
};

struct ScheduledStep {
  StepKind kind;
  DType dtype = DType::f64;  // gemm, gemv
  int kernel = -1;           // kernel: index into Schedule::kernels
  std::vector<int64_t> refs;
};

struct Schedule {
  std::vector<KernelSpec> kernels;  // distinct keys, in order of first use
  std::vector<ScheduledStep> steps;
  std::vector<ExternCall> externs;  // external steps' calls; their refs end with the index
  std::vector<int64_t> constant_offsets;  // per constant: byte offset in the pool
  int64_t constant_pool_bytes = 0;
};

// Base indices of the `bases` table.
constexpr int64_t kWorkspaceBase = 0, kConstantBase = 1, kFirstInputBase = 2;

// The schedule of a planned tape whose memory plan is done.
Schedule make_schedule(const Tape& tape, const Plan& plan);

// Coalesces dims: drops size-1 dimensions and merges neighbours that every stride
// vector walks contiguously.
void coalesce(std::vector<int64_t>& dims, std::vector<std::vector<int64_t>>& strides);

}  // namespace reel::codegen
