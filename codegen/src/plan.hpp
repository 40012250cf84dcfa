#pragma once
// The lowering plan: which operations run in which loop or call, and where every
// value lives. It is decided here, without LLVM; each step is one of the kinds of
// kernels/table.hpp, whose files schedule and emit it.
//
// - Elementwise and broadcast operations of one output shape that follow each other
//   on the tape are fused into one loop nest, of at most kMaxLoopMembers operations
//   (a longer run is cut into several loops, so that a traced loop of many steps
//   repeats a few kernels instead of making one huge one); full reductions (sum,
//   mean) of a fused value accumulate in the same loop. A fused value is written to
//   memory only if something outside its loop reads it. A gather of a float source in
//   memory joins a loop too, as an indexed load (its indices checked before the loop,
//   or, a constant's, when planning). A strided read (a slice, a permutation: a
//   primitive with strided_read) of an f32 or f64 source in memory joins a loop the
//   same way, as a load at the source's offset and strides. Values of one element fuse
//   whatever their shape ([1], [], [1,1]: loop_shape).
// - A strided placement (concat: strided_place) copies each argument into its place in
//   the result with a generated loop.
// - matmul is a CBLAS call; a transpose used only by matmuls is folded into the call.
// - reshape is a view: the same memory, another shape.
// - Values that must be in memory live in the caller's inputs, the constants table,
//   the output tensors (a computed output is written straight into its tensor), or
//   one workspace. Workspace offsets are assigned afterwards by the memory plan
//   (memory_plan.hpp), which lets buffers whose lives do not overlap share memory.
#include <memory>
#include <variant>
#include <vector>

#include "kernels/table.hpp"
#include "reel/ir/tape.hpp"

namespace reel::codegen {

enum class SlotKind { input, constant, output, workspace };

struct Slot {
  SlotKind kind;
  int index = 0;       // input, constant or output number
  int64_t offset = 0;  // workspace: byte offset (set by plan_memory)
  int64_t bytes = 0;   // workspace: size
};

// The iteration space of a loop that computes values of this shape: a tensor of one
// element is iterated as a 0-d one, so that the element reads of a scalar trace (f64[1]
// slices) and the scalars that use them ([]) fuse into one loop.
inline Shape loop_shape(const Shape& shape) { return numel(shape) == 1 ? Shape{} : shape; }
// Whether `shape`'s loop_shape is `loop` (without making it: planning asks once per
// operation and more).
inline bool has_loop_shape(const Shape& shape, const Shape& loop) {
  return numel(shape) == 1 ? loop.empty() : shape == loop;
}

// Operations fused into one loop at most; see the comment above.
constexpr std::size_t kMaxLoopMembers = 32;

struct Plan {
  std::vector<Slot> slots;
  std::vector<int> slot_of;     // per variable: its slot, or -1 (not in memory)
  std::vector<bool> stored;     // per variable: a loop member written to its slot
  std::vector<Step> steps;
  int64_t workspace_bytes = 0;  // set by plan_memory
  int num_inputs = 0;
  std::vector<Var> constants;   // constant variables, in constants-table order
};

// Throws reel::Error naming an operation that code generation cannot handle. A loop's
// bodies are planned (cleanup, plan, memory plan) as programs of their own, with
// `reuse_memory` as given.
Plan make_plan(const Tape& tape, bool reuse_memory = true);

}  // namespace reel::codegen
