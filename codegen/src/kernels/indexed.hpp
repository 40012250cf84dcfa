#pragma once
// gather and scatter_add (kernels/indexed.cpp): a generated loop, after a check that
// every index is in range. (A gather of a float source joins an elementwise loop as an
// indexed load instead, unless its indices are a constant with an index out of range:
// see the planner.) Needs no LLVM.
#include <cstdint>

#include "reel/ir/tape.hpp"
#include "step_args.hpp"

namespace reel::codegen {

struct GatherStep {
  Var out;  // its call: (x, indices) or (target, indices, values), attribute axis
};
struct ScatterStep {
  Var out;
};

// The kernel: params {x, indices (i64), out} for a gather; {target, indices, values,
// out} for a scatter (out = target, then values added, or written with `replace`). x /
// target is [outer, n, inner] around the axis, and `count` indices pick along n.
struct IndexedSpec {
  bool scatter = false;
  int64_t outer = 0, n = 0, count = 0, inner = 0;
  bool replace = false;
};

// A gather's or scatter's geometry: x (or target) is [outer, n, inner] around the
// axis, and `count` indices pick along n.
struct Indexed {
  int64_t axis = 0, outer = 1, n = 0, inner = 1, count = 0;
};
Indexed indexed_geometry(const Tape& t, const Op& op);

class Scheduler;
// The check of a gather's or scatter's indices, a step before its kernel (JIT code must
// neither read out of bounds nor throw).
CheckIndicesArgs index_check(const Scheduler& s, Var out);

// Whether every constant index is in range along the axis of x.
bool indices_in_range(const Tensor& indices, const Shape& x, const Attrs& attrs);

}  // namespace reel::codegen
