#pragma once
// Loops compiled as loops. A call of a loop primitive (Structure::loop) is one step of
// the schedule: its body (and a while loop's cond) is planned and scheduled as a
// program of its own (program.hpp: cleanup, fused kernels, memory plan), whose kernels
// join the compiled function's (deduplicated, cached like any other), and the step runs
// that program once per iteration on a table of bases it fills in. Nested loops are
// steps of their bodies' programs. Internal to codegen/.
//
// Which loop a call is, from its primitive (reel::loop_form), its layout from its
// attributes read as reel::ScanParams / reel::WhileParams (reel/ir/loop_params.hpp):
//   while_loop(consts..., init...): while cond(consts, carries), carries = body(consts, carries)
//   scan(consts..., init..., xs...): docs/tape-format.md
//   call / checkpoint(args...) (any other loop primitive): body(args)
// A loop call of another form, or whose body's signature is not the one its form
// says, runs its eager function (an external step).
//
// Memory: the loop's results are ordinary values of the parent's memory plan (the
// stacked ys, residual stacks of a gradient included). Its step also has a scratch
// buffer in the parent's workspace, alive during the step only: a second buffer per
// carry, the bodies' workspace (cond and body run in turn, so they share it), the
// counter, cond's result and the bodies' tables of bases. Nothing is allocated per
// call or per iteration. Iterations alternate the carry buffers (the result and the
// temporary), so a body never writes a buffer it reads; a scan of known length starts
// on the one that makes its last iteration write the result. xs slices are read and
// ys slices written in place at k * slice bytes into the stacked buffers (the body's
// kernels are told the slices' alignment, a power of two dividing the slice size).
// A y nothing reads is dropped from the body before it is planned.
#include <functional>
#include <memory>
#include <vector>

#include "program.hpp"
#include "steps.hpp"

namespace reel::codegen {

struct LoopPlan {
  LoopKind kind = LoopKind::scan;
  int64_t length = 0;  // scan
  bool reverse = false, has_index = false;
  int64_t index0 = 0;
  int64_t max_trips = -1;  // while_loop: its attribute max_trips, or -1 (none)
  std::size_t num_consts = 0, num_carry = 0, num_xs = 0;
  // scan: per y (call: per result), whether something reads it; the others were dropped
  // from the body.
  std::vector<bool> kept;
  std::shared_ptr<const ProgramPlan> body, cond;
  // The scratch buffer's layout: byte offsets, each 64-aligned (the bodies' workspace at 0).
  std::vector<int64_t> temps;  // per carry: its temporary (none for a call, or a scan of length < 2)
  int64_t counter = 0, cond_out = 0, body_bases = 0, cond_bases = 0;
  int64_t failure = 0;  // a loop kernel's guard failure record (with guards in the body)
  int64_t scratch_bytes = 0;
};

// The plan of the loop call at variable v (its bodies planned recursively, with
// `reuse_memory`), or nullptr if it is not one of the forms above. used[r]: whether
// something reads variable r or it is an output.
std::shared_ptr<const LoopPlan> plan_loop(const Tape& tape, Var v, const std::vector<bool>& used, bool reuse_memory);

// Whether result i of the loop call has memory (is written by the step).
bool loop_result_stored(const LoopPlan& loop, int i);

// Whether the loop runs as one generated kernel (a LoopKernel, kernels/scan.cpp): a scan
// whose body's steps are all kernels, copies, guards or such scans (without guards of
// their own: a kernel stops at a failing guard, its caller would not), and not too many
// (one function is optimised as a whole). Other loops run through run_loop.
bool runs_as_kernel(const LoopPlan& loop);
// Whether its body has guards (then a loop kernel records a failure in the scratch).
bool has_guards(const LoopPlan& loop);

// The step's buffers (LoopArgs without its bodies' programs) and their guaranteed
// alignments. ref(slot) and align(slot) give the parent program's memory.
struct LoopBuffers {
  LoopArgs args;
  BufferRef failure;  // a loop kernel's guard failure record
  std::vector<int64_t> consts_align, init_align, result_align, xs_align, ys_align;  // as stored
  std::vector<int64_t> input_align, output_align;  // of the body's inputs and outputs, per iteration
};
LoopBuffers loop_buffers(const Tape& tape, const Plan& plan, const LoopCallStep& step,
                         const std::function<BufferRef(int slot)>& ref, const std::function<int64_t(int slot)>& align);

// The step: runs the loop. A guard failing (or another reel::Error) in a body is
// raised again naming the loop call and the iteration.
void run_loop(void* const* bases, const LoopArgs& loop);

// The plan of a loop call as text, for plan_text: its form and its bodies' programs.
std::string loop_text(const Tape& tape, const LoopCallStep& step);

}  // namespace reel::codegen
