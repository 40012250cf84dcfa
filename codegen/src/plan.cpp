#include "plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <optional>

#include "loops.hpp"
#include "placement.hpp"

namespace reel::codegen {

namespace {

// How deep a value computed again in a later loop may reach through others computed
// again, and how many element operations each may have (Planner::arrays_to_recompute).
constexpr int kRecomputeDepth = 3;
constexpr std::size_t kRecomputeInsts = 4;

// Element operations a loop computes again rather than store: machine instructions of a
// cycle or a few (additions, products, comparisons), not a division or a call.
bool elem_op_is_cheap(ElemOp op) {
  if (op == ElemOp::input || op == ElemOp::constant) return true;
  if (op == ElemOp::div) return false;
  switch (op) {
#define REEL_CHEAP_inst true
#define REEL_CHEAP_fcmp true
#define REEL_CHEAP_intrinsic false
#define REEL_CHEAP_libm false
#define REEL_CHEAP_custom false
#define REEL_ELEM_OP(name, operands, eval, lowering, symbol) \
  case ElemOp::name:                                          \
    return REEL_CHEAP_##lowering;
#include "reel/element_ops.def"
#undef REEL_CHEAP_inst
#undef REEL_CHEAP_fcmp
#undef REEL_CHEAP_intrinsic
#undef REEL_CHEAP_libm
#undef REEL_CHEAP_custom
    default:
      return false;
  }
}

class Planner {
 public:
  Planner(const Tape& t, bool reuse_memory)
      : t_(t), n_(t.size()), reuse_memory_(reuse_memory), loop_of_(n_ + 1, -1), view_src_(n_ + 1, kNoVar),
        needs_memory_(n_ + 1, false), used_(n_ + 1, false), output_(n_ + 1, false) {}

  Plan run() {
    folded_ = folded_transposes(t_);
    find_used();
    for (Var v : placement_order(t_, folded_)) place(v);
    close_loop();
    assign_slots();
    return std::move(plan_);
  }

 private:
  // The variable whose memory v's elements are in (through reshapes).
  Var storage_of(Var v) const {
    while (view_src_[v] != kNoVar) v = view_src_[v];
    return v;
  }

  // Whether something reads each variable (a `result` operation does not read its call).
  void find_used() {
    for (Var o : t_.outputs) used_[o] = output_[o] = true;
    for (Var v = 1; v <= n_; ++v)
      if (t_.op(v).kind == OpKind::call)
        for (Var a : t_.op(v).args) used_[a] = true;
  }

  // Computed element by element in the open loop (reductions finish after it).
  bool is_member(Var v) const {
    return current_ >= 0 && loop_of_[v] == current_ &&
           t_.op(v).prim->structure != Structure::reduction;
  }

  // Whether the open loop's column sums and v's together fit in kMaxColumnSums doubles.
  bool column_sums_fit(Var v) const {
    if (current_ < 0) return false;
    int64_t total = numel(t_.type(v).shape);
    for (Var r : current_loop().reductions)
      if (numel(t_.type(r).shape) > 1 && !is_trailing_sum(t_, r)) total += numel(t_.type(r).shape);
    return total <= kMaxColumnSums;
  }

  // Can the current loop read `arg` (as a register or from memory written before it)?
  bool loop_can_read(Var arg) const {
    return current_ < 0 || is_member(arg) || loop_of_[storage_of(arg)] != current_;
  }

  // Generated loops compute in f32 or f64; an operation on i64 values (other than a
  // view) calls its eager function.
  // (Index arguments are i64 by definition: gathers and scatters read them as such.)
  // An elementwise operation with a float result may read i64 values (a cast from i64:
  // the emitter converts them as it reads them).
  bool touches_i64(const Op& op) const {
    if (!is_float(op.type.dtype) && !op.prim->lowering.reduce_index) return true;  // (argmax: float in, i64 out)
    if (op.prim->structure == Structure::elementwise) return false;
    for (std::size_t i = 0; i < op.args.size(); ++i) {
      if (!op.prim->is_index_arg(i) && !is_float(t_.type(op.args[i]).dtype)) return true;
    }
    return false;
  }

  void place(Var v) {
    const Op& op = t_.op(v);
    if (op.kind != OpKind::call) return;
    if (folded_[v]) return;  // a transpose read only by matrix products, which transpose as they read
    const Structure structure = touches_i64(op) && op.prim->structure != Structure::view &&
                                        op.prim->structure != Structure::loop
                                    ? Structure::opaque
                                    : op.prim->structure;
    // (A strided read or placement of i64 values calls its eager function.)
    if (op.prim->lowering.strided_read && !touches_i64(op)) return fuse_strided(v);
    if (op.prim->lowering.strided_place && !touches_i64(op)) return place_strided(v);
    switch (structure) {
      case Structure::view:
        view_src_[v] = op.args[0];
        if (output_[v]) output_[storage_of(v)] = true;  // (an output's memory is written: in_memory)
        // A reshape of a member (or of such a view) that keeps the loop's iteration space
        // (an element read's f64[1] -> f64[]) is the member's value: its consumers join
        // the loop.
        if (is_member(op.args[0]) && has_loop_shape(op.type.shape, current_loop().shape)) {
          current_loop().views.push_back(v);
          loop_of_[v] = current_;
        }
        return;
      case Structure::elementwise:
      case Structure::broadcast: {
        if (op.prim->structure == Structure::elementwise && !op.prim->element)
          throw Error(fmt::format("compile: primitive '{}' has no code-generation rule", op.prim->name));
        bool fits = open_loop_takes(op.type.shape);
        for (Var a : op.args) fits = fits && loop_can_read(a);
        if (!fits) open_loop(loop_shape(op.type.shape));
        join(v);
        for (Var a : op.args) read_in_loop(a);
        return;
      }
      case Structure::reduction: {
        const Var in = op.args[0];
        if ((is_full_reduction(t_, v) || (is_leading_sum(t_, v) && column_sums_fit(v)) || is_trailing_sum(t_, v)) &&
            is_member(in)) {
          current_loop().reductions.push_back(v);
          loop_of_[v] = current_;
          needs_memory_[v] = true;  // written after the loop (row sums: as it goes)
          return;
        }
        close_loop();
        const bool strided = is_strided_read(in);
        need(strided ? t_.op(in).args[0] : in);
        needs_memory_[v] = true;
        plan_.steps.push_back(ReduceStep{v, in, strided});
        return;
      }
      case Structure::contraction: {
        close_loop();
        MatmulStep m{v, op.args[0], op.args[1]};
        for (; folded_[m.a]; m.trans_a = !m.trans_a) m.a = t_.op(m.a).args[0];
        for (; folded_[m.b]; m.trans_b = !m.trans_b) m.b = t_.op(m.b).args[0];
        need(m.a);
        need(m.b);
        needs_memory_[v] = true;
        plan_.steps.push_back(m);
        return;
      }
      case Structure::gather:
        if (fuse_gather(v)) return;
        [[fallthrough]];
      case Structure::scatter:
        close_loop();
        for (Var a : op.args) need(a);
        needs_memory_[v] = true;
        if (structure == Structure::gather) plan_.steps.push_back(GatherStep{v});
        else plan_.steps.push_back(ScatterStep{v});
        return;
      case Structure::check:
        close_loop();
        need(op.args[0]);
        view_src_[v] = op.args[0];  // a guard's result is its condition
        plan_.steps.push_back(CheckStep{v});
        return;
      case Structure::loop:
        if (std::shared_ptr<const LoopPlan> loop = plan_loop(t_, v, used_, reuse_memory_)) {
          close_loop();
          for (Var a : op.args) need(a);
          for (int i = 0; i < op.results; ++i)
            if (loop_result_stored(*loop, i)) needs_memory_[v + i] = true;
          plan_.steps.push_back(LoopCallStep{v, op.results, std::move(loop)});
          return;
        }
        [[fallthrough]];  // a form the loop step does not run: its eager function
      case Structure::opaque:
        close_loop();
        for (Var a : op.args) need(a);
        for (int i = 0; i < op.results; ++i) needs_memory_[v + i] = true;
        plan_.steps.push_back(ExternStep{v, op.results});
        return;
      case Structure::permutation:
        close_loop();
        need(op.args[0]);
        needs_memory_[v] = true;
        plan_.steps.push_back(TransposeStep{v, op.args[0]});
        return;
    }
    throw Error(fmt::format("compile: primitive '{}' has no code generation", op.prim->name));
  }

  // A strided placement: a step copying its arguments into their places, except those
  // a fused loop computes, which that loop writes there itself if the arguments cover
  // the result (else the step zeroes it first, after the loops).
  void place_strided(Var v) {
    close_loop();
    const Op& op = t_.op(v);
    PlaceStep step{v, std::vector<bool>(op.args.size(), false)};
    std::vector<StridedMap> maps;
    if (place_covers(t_, v)) maps = place_maps(t_, v);
    for (std::size_t i = 0; i < op.args.size(); ++i) {
      const Var a = op.args[i], m = storage_of(a);
      const int loop = loop_of_[m];
      if (!maps.empty() && loop >= 0 && t_.op(m).prim->structure != Structure::reduction) {
        LoopStep& l = std::get<LoopStep>(plan_.steps[static_cast<std::size_t>(loop)]);
        if (auto strides = place_in_loop(maps[i], t_.type(a).shape, l.shape)) {
          l.placed.push_back({m, v, maps[i].offset, std::move(*strides)});
          step.by_loop[i] = true;
          continue;
        }
      }
      need(a);
    }
    needs_memory_[v] = true;
    plan_.steps.push_back(std::move(step));
  }

  // A gather joins the open loop (or opens one) as an indexed load of its source, which
  // must be in memory before the loop: no kernel and no buffer of its own, and its
  // consumers read it in a register. Constant indices are checked here, once; a constant
  // with an index out of range keeps the gather a step of its own, so that each call
  // reports the error as the interpreter does. Other indices are checked before the
  // loop, each call.
  bool fuse_gather(Var v) {
    const Op& op = t_.op(v);
    const Var x = op.args[0], idx = op.args[1];
    const Op& indices = t_.op(idx);
    const bool constant = indices.kind == OpKind::constant;
    if (constant && !indices_in_range(indices.value, t_.type(x).shape, op.attrs)) return false;
    join_reading_memory(v, {x, idx});
    if (!constant) current_loop().checks.push_back(v);
    return true;
  }
  // A strided read joins the open loop (or opens one) as a load of its source at the
  // primitive's offset and strides; the source must be in memory before the loop.
  void fuse_strided(Var v) { join_reading_memory(v, {t_.op(v).args[0]}); }
  // Joins v to the open loop if it has v's shape, room, and computes none of `sources`
  // (which v reads at other positions than its own element's, so from memory written
  // before the loop); else opens a loop. The sources are kept in memory.
  void join_reading_memory(Var v, std::initializer_list<Var> sources) {
    bool fits = open_loop_takes(t_.op(v).type.shape);
    for (Var s : sources) fits = fits && loop_of_[storage_of(s)] != current_;
    if (!fits) open_loop(loop_shape(t_.op(v).type.shape));
    join(v);
    for (Var s : sources) need(s);
  }
  // The open loop (current_ >= 0).
  LoopStep& current_loop() { return std::get<LoopStep>(plan_.steps[current_]); }
  const LoopStep& current_loop() const { return std::get<LoopStep>(plan_.steps[current_]); }
  // Whether a value of this shape may join the open loop by its iteration space and room
  // (what it reads is the caller's to check).
  bool open_loop_takes(const Shape& shape) const {
    return current_ >= 0 && has_loop_shape(shape, current_loop().shape) && current_loop().members.size() < kMaxLoopMembers;
  }
  void open_loop(const Shape& shape) {
    plan_.steps.push_back(LoopStep{shape, {}, {}, {}, {}, {}, {}, {}});
    current_ = static_cast<int>(plan_.steps.size()) - 1;
  }
  void close_loop() { current_ = -1; }
  void join(Var v) {
    current_loop().members.push_back(v);
    loop_of_[v] = current_;
  }
  // A loop member's argument: a register if it is a member, else read from memory.
  // Constants, 0-d ones included, are read from the constants table rather than
  // written into the code, so that loops differing only in a constant's value (a
  // time step, a learning rate) share one kernel.
  // A strided read computed by another loop is read again from its source, at its
  // offset and strides (broadcast to the loop's shape: a row's slice read by a loop over
  // a matrix): no copy of it is needed.
  void read_in_loop(Var a) {
    if (is_member(a) || has(current_loop().recomputed, a)) return;
    if (const std::optional<int> arrays = arrays_to_recompute(a, kRecomputeDepth); arrays && *arrays <= 1)
      return recompute(a);
    read_from_memory(a);
  }
  void read_from_memory(Var a) {
    // (Its source is in memory before the read's own loop, so before this one.)
    if (is_strided_read(a)) {
      auto& rereads = current_loop().rereads;
      if (std::find(rereads.begin(), rereads.end(), a) == rereads.end()) rereads.push_back(a);
      need(t_.op(a).args[0]);
      return;
    }
    need(a);
  }
  // Whether v's value is in memory whatever this loop does: not computed by a loop
  // (an input, a constant, a reduction step's), an output, or needed in memory by some
  // reader so far.
  bool in_memory(Var v) const {
    const Var m = storage_of(v);
    return loop_of_[m] < 0 || needs_memory_[m] || output_[m];
  }
  // A member `a` of an earlier loop that is not in memory may be computed again by the
  // open loop (same iteration space, not a loop over one element) instead of being
  // written to memory for it, if its element program is a few additions, products and
  // comparisons (no division, no call) of values that the loop has (its members,
  // numbers), reads (strided reads again from their sources, values in memory) or can
  // compute again the same way, `depth` deep: returns how many arrays (values of more
  // than one element in memory) that reads, or nothing. It is computed again when that
  // is at most one, the one it saves: the mask of where a slice equals its maximum,
  // summed by one pass and read by the next, is not written out and read back.
  std::optional<int> arrays_to_recompute(Var a, int depth) const {
    // (In a loop over one element a value is one number, as cheap to read as to
    // compute; straight-line code would compute its past again and again.)
    if (depth == 0 || current_loop().shape.empty() || loop_of_[a] < 0 || loop_of_[a] == current_ || in_memory(a) ||
        !has_loop_shape(t_.type(a).shape, current_loop().shape))
      return std::nullopt;
    const Op& op = t_.op(a);
    if (op.kind != OpKind::call || op.results != 1 || !is_cheap(op)) return std::nullopt;
    int arrays = 0;
    for (Var x : op.args) {
      // (Never a value of this loop: values computed again come before its members.)
      if (loop_of_[storage_of(x)] == current_) return std::nullopt;
      if (has(current_loop().recomputed, x) || numel(t_.type(x).shape) == 1) continue;
      if (is_strided_read(x) || in_memory(x)) {
        ++arrays;
        continue;
      }
      const std::optional<int> more = arrays_to_recompute(x, depth - 1);
      if (!more) return std::nullopt;
      arrays += *more;
    }
    return arrays;
  }
  // Computes `a` again in the open loop, as arrays_to_recompute found it can.
  void recompute(Var a) {
    for (Var x : t_.op(a).args) {
      if (has(current_loop().recomputed, x)) continue;
      if (numel(t_.type(x).shape) == 1 || is_strided_read(x) || in_memory(x)) read_from_memory(x);
      else recompute(x);
    }
    current_loop().recomputed.push_back(a);
  }
  bool is_cheap(const Op& op) const {
    if (op.prim->structure == Structure::broadcast) return true;
    if (op.prim->structure != Structure::elementwise || !op.prim->element || !is_float(op.type.dtype)) return false;
    const ElementProgram program = op.prim->element(op.attrs);
    return program.insts.size() <= kRecomputeInsts &&
           std::all_of(program.insts.begin(), program.insts.end(), [](const ElemInst& i) { return elem_op_is_cheap(i.op); });
  }
  static bool has(const std::vector<Var>& vs, Var v) { return std::find(vs.begin(), vs.end(), v) != vs.end(); }
  // A strided read that a loop computes (its source is a float tensor in memory).
  bool is_strided_read(Var v) const {
    return loop_of_[v] >= 0 && is_strided_member(t_, v);
  }
  void need(Var v) { needs_memory_[storage_of(v)] = true; }

  void assign_slots() {
    plan_.slot_of.assign(n_ + 1, -1);
    plan_.stored.assign(n_ + 1, false);
    auto add_slot = [&](Slot s) {
      plan_.slots.push_back(s);
      return static_cast<int>(plan_.slots.size()) - 1;
    };
    for (Var v = 1; v <= n_; ++v) {
      const Op& op = t_.op(v);
      if (op.kind == OpKind::input) plan_.slot_of[v] = add_slot({SlotKind::input, plan_.num_inputs++});
      if (op.kind == OpKind::constant) {
        plan_.slot_of[v] =
            add_slot({SlotKind::constant, static_cast<int>(plan_.constants.size())});
        plan_.constants.push_back(v);
      }
    }
    // A computed output is written straight into its tensor; anything else that is an
    // output (an input, a constant, a view, a repeat) is copied there at the end.
    for (std::size_t k = 0; k < t_.outputs.size(); ++k) {
      const Var v = t_.outputs[k];
      const Op& op = t_.op(v);
      const bool computed =
          (op.kind == OpKind::call || op.kind == OpKind::result) && view_src_[v] == kNoVar && !folded_[v];
      if (computed && plan_.slot_of[v] < 0) {
        plan_.slot_of[v] = add_slot({SlotKind::output, static_cast<int>(k)});
        needs_memory_[v] = true;
      } else {
        need(v);
        const int slot = add_slot({SlotKind::output, static_cast<int>(k)});
        plan_.steps.push_back(CopyStep{slot, v});
      }
    }
    for (Var v = 1; v <= n_; ++v) {
      if (!needs_memory_[v] || plan_.slot_of[v] >= 0) continue;
      if (folded_[v])
        throw Error(fmt::format("compile: internal error: folded transpose %{} is needed", v));
      const int64_t bytes = numel(t_.type(v).shape) * static_cast<int64_t>(dtype_size(t_.type(v).dtype));
      plan_.slot_of[v] = add_slot({SlotKind::workspace, 0, 0, bytes});
    }
    for (Step& step : plan_.steps) {
      if (auto* loop = std::get_if<LoopCallStep>(&step))
        loop->scratch = add_slot({SlotKind::workspace, 0, 0, loop->loop->scratch_bytes});
      if (auto* e = std::get_if<ExternStep>(&step))
        if (const int64_t bytes = eager_into_scratch(t_, e->out); bytes > 0)
          e->scratch = add_slot({SlotKind::workspace, 0, 0, bytes});
    }
    for (Var v = 1; v <= n_; ++v) {
      if (view_src_[v] != kNoVar) plan_.slot_of[v] = plan_.slot_of[storage_of(v)];
      plan_.stored[v] = loop_of_[v] >= 0 && needs_memory_[v] &&
                        t_.op(v).prim->structure != Structure::reduction;
    }
  }

  const Tape& t_;
  const Var n_;
  const bool reuse_memory_;  // for loops' bodies
  Plan plan_;
  int current_ = -1;            // index of the open loop step, or -1
  std::vector<int> loop_of_;    // per variable: the loop step computing it, or -1
  std::vector<Var> view_src_;   // per variable: the reshaped variable, for views
  std::vector<bool> folded_;    // transposes (and swaps of the last two axes) folded into matrix products
  std::vector<bool> needs_memory_;
  std::vector<bool> used_;
  std::vector<bool> output_;  // outputs, and the storage of outputs that are views
};

}  // namespace

Plan make_plan(const Tape& tape, bool reuse_memory) { return Planner(tape, reuse_memory).run(); }

}  // namespace reel::codegen
