#pragma once
// The fused elementwise loop (kernels/loop.cpp): elementwise and broadcast operations of
// one shape in one loop nest, with the sums it accumulates, its gathers' indexed loads
// and its strided reads. Needs no LLVM.
#include <memory>
#include <string>
#include <vector>

#include "reel/ir/tape.hpp"

namespace reel::codegen {

// The plan's step: one loop over `shape`.
struct LoopStep {
  Shape shape;                  // iteration space
  std::vector<Var> members;     // elementwise/broadcast calls, gathers and strided reads, in order, one element each
  std::vector<Var> reductions;  // full or leading (column) sums of members, accumulated over the loop
  std::vector<Var> checks;      // member gathers whose indices are checked before the loop, each call
  std::vector<Var> views;       // views of members with the loop's iteration space: the member's value
  // Strided reads that are members of an earlier loop, read here again from their
  // sources (a slice read by several loops is not copied for them).
  std::vector<Var> rereads;
  // Cheap elementwise members of an earlier loop computed here again, in order, from
  // what this loop reads (a mask of a slice and a number), rather than written to
  // memory by their loop for this one (Planner::arrays_to_recompute in plan.cpp).
  std::vector<Var> recomputed;
  // What the loop computes, in order: the values computed again, then the members.
  std::vector<Var> computed() const {
    std::vector<Var> all = recomputed;
    all.insert(all.end(), members.begin(), members.end());
    return all;
  }
  // Members (or views of them) that are arguments of a covering placement, written
  // straight into their place in its result (kernels/place.hpp) rather than copied there
  // by the placement's step: the result's first element of the place, and element
  // strides over `shape`.
  struct Placed {
    Var value, out;
    int64_t offset;
    std::vector<int64_t> strides;
  };
  std::vector<Placed> placed;
};

// An elementwise operation's element program and its text (as kernel keys spell it),
// made once per primitive and attributes in a schedule and shared by every use.
struct ElementRule {
  ElementProgram program;
  std::string text;
};

// The kernel: values are numbered loads first, then operations.
struct LoopSpec {
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
    // A sum over trailing dimensions (row sums, is_trailing_sum): the results are added
    // up in the output itself, zeroed first; a chunk of the outer (kept) dimension owns
    // its rows, so no partial sums.
    bool rows = false;
  };
  std::vector<int64_t> dims;  // coalesced iteration space
  // With loads that have deltas or fixed elements, the innermost dimension in ranges,
  // each its own loop: the ranges' ends (the last is dims.back()); empty: one range.
  std::vector<int64_t> segments;
  std::vector<Load> loads;
  std::vector<Inst> insts;
  std::vector<Store> stores;
  std::vector<Sum> sums;
};

// The variables a loop reads from memory: its members' arguments that are not
// members, each once, in order of first use.
std::vector<Var> loop_inputs(const Tape& tape, const LoopStep& loop);

// Whether a loop member is a gather: an indexed load of its source (args[0], in memory
// before the loop) at its indices (args[1]), rather than an element operation.
bool is_gather_member(const Tape& tape, Var member);
// Whether a loop member is a strided read: a load of its source (args[0], in memory
// before the loop) at the primitive's strided_read offset and strides.
bool is_strided_member(const Tape& tape, Var member);
// Either: a member that reads its source at other positions than its own element's.
bool is_indexed_member(const Tape& tape, Var member);
// A strided read's offset and strides (over its result's dimensions) in its source.
StridedMap strided_map(const Tape& tape, Var read);

}  // namespace reel::codegen
