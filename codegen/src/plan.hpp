#pragma once
// The lowering plan: which operations run in which loop or call, and where every
// value lives. It is decided here, without LLVM, and emitted by emit.cpp.
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
//   same way, as a load at the source's offset and strides.
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

#include "reel/ir/tape.hpp"

namespace reel::codegen {

enum class SlotKind { input, constant, output, workspace };

struct Slot {
  SlotKind kind;
  int index = 0;       // input, constant or output number
  int64_t offset = 0;  // workspace: byte offset (set by plan_memory)
  int64_t bytes = 0;   // workspace: size
};

// Operations fused into one loop at most; see the comment above.
constexpr std::size_t kMaxLoopMembers = 32;
// A loop accumulates a sum over leading dimensions in an array of doubles on the stack
// of at most this many elements; a larger one is a reduction step of its own.
constexpr int64_t kMaxColumnSums = 4096;

struct LoopStep {
  Shape shape;                  // iteration space
  std::vector<Var> members;     // elementwise/broadcast calls, gathers and strided reads, in order, one element each
  std::vector<Var> reductions;  // full or leading (column) sums of members, accumulated over the loop
  std::vector<Var> checks;      // member gathers whose indices are checked before the loop, each call
};
struct ReduceStep {
  Var out;
  Var in;
};
struct MatmulStep {
  Var out;
  Var a, b;  // after folding transposes: the matrices as stored
  bool trans_a = false, trans_b = false;
};
struct TransposeStep {
  Var out;
  Var in;
};
struct CopyStep {
  int slot;  // an output's slot
  Var from;
};
struct ExternStep {  // a primitive without generated code: its eager function is called
  Var out;
  int results = 1;  // a primitive with several results writes out, out + 1, ...
  int scratch = -1;  // the workspace slot of its eager_into's scratch (Primitive::scratch_bytes), or -1
};
// gather / scatter_add: a generated loop, after a check that every index is in range.
// (A gather of a float source joins an elementwise loop as an indexed load instead, unless
// its indices are a constant with an index out of range: see the planner.)
struct GatherStep {
  Var out;  // its call: (x, indices) or (target, indices, values), attribute axis
};
struct ScatterStep {
  Var out;
};
// guard: a C++ check of one element, right after its condition is computed.
struct CheckStep {
  Var guard;  // its call: guard(cond, expected); its result is a view of cond
};
// A loop primitive's call (Structure::loop: scan, while_loop, call, checkpoint): one step
// that runs its body's own compiled schedule natively, once per iteration (loops.hpp).
struct LoopPlan;
struct LoopCallStep {
  Var out;  // the call; its results are out, out + 1, ...
  int results = 1;
  std::shared_ptr<const LoopPlan> loop;  // its bodies, planned
  int scratch = -1;  // the workspace slot of its carries' second buffers, counter and bodies' workspace
};
// A strided placement (concat, unslice): each argument copied into its place in `out`
// by a generated loop (Primitive::strided_place), after zeros where none goes.
struct PlaceStep {
  Var out;
};
// Whether a placement's arguments cover its result (concat); otherwise (unslice) the
// rest is zeroed first.
bool place_covers(const Tape& t, Var out);

using Step = std::variant<LoopStep, ReduceStep, MatmulStep, TransposeStep, CopyStep, ExternStep, GatherStep, ScatterStep,
                          CheckStep, LoopCallStep, PlaceStep>;

struct Plan {
  std::vector<Slot> slots;
  std::vector<int> slot_of;     // per variable: its slot, or -1 (not in memory)
  std::vector<bool> stored;     // per variable: a loop member written to its slot
  std::vector<Step> steps;
  int64_t workspace_bytes = 0;  // set by plan_memory
  int num_inputs = 0;
  std::vector<Var> constants;   // constant variables, in constants-table order
};

// The variables a loop reads from memory: its members' arguments that are not
// members, each once, in order of first use.
std::vector<Var> loop_inputs(const Tape& tape, const LoopStep& loop);

// Whether a loop member is a gather: an indexed load of its source (args[0], in memory
// before the loop) at its indices (args[1]), rather than an element operation.
bool is_gather_member(const Tape& tape, Var member);
// An eager step (ExternStep) of a pooling primitive on floats, which the schedule runs
// as a generated loop (Primitive::pool) instead of calling the eager function.
bool runs_as_pool(const Tape& tape, Var v);
// The workspace bytes an eager step's eager_into asks for (Primitive::scratch_bytes), or 0:
// none, or a call that does not run in place (not a built-in, or one that runs tapes).
int64_t eager_into_scratch(const Tape& tape, Var v);
// Whether a loop member is a strided read: a load of its source (args[0], in memory
// before the loop) at the primitive's strided_read offset and strides.
bool is_strided_member(const Tape& tape, Var member);
// Either: a member that reads its source at other positions than its own element's.
bool is_indexed_member(const Tape& tape, Var member);

// Throws reel::Error naming an operation that code generation cannot handle. A loop's
// bodies are planned (cleanup, plan, memory plan) as programs of their own, with
// `reuse_memory` as given.
Plan make_plan(const Tape& tape, bool reuse_memory = true);

}  // namespace reel::codegen
