#include "plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>

#include "loops.hpp"

namespace reel::codegen {

namespace {

// A sum (or mean) to one number, which a loop can accumulate as it goes.
bool is_full_reduction(const Tape& t, Var v) {
  const Op& op = t.op(v);
  if (op.prim->lowering.reduce_op != kernels::ReduceOp::sum || op.prim->lowering.reduce_index) return false;
  const Shape target = op.prim->lowering.reduce_target(t.type(op.args[0]), op.attrs);
  return numel(target) == 1;
}

// A sum (or mean) over leading dimensions that keeps the trailing ones whole (sum_to of a
// broadcast bias's gradient, a column count), of at most kMaxColumnSums results: a loop
// over the input accumulates it in an array, a sum per result, as it goes.
bool is_leading_sum(const Tape& t, Var v) {
  const Op& op = t.op(v);
  if (op.prim->lowering.reduce_op != kernels::ReduceOp::sum || op.prim->lowering.reduce_index) return false;
  const Shape& in = t.type(op.args[0]).shape;
  Shape target = op.prim->lowering.reduce_target(t.type(op.args[0]), op.attrs);
  if (target.size() > in.size() || numel(target) <= 1 || numel(target) > kMaxColumnSums) return false;
  target.insert(target.begin(), in.size() - target.size(), 1);  // (sum_to's: aligned to the right)
  std::size_t d = 0;
  while (d < in.size() && target[d] == 1 && in[d] != 1) ++d;  // the reduced leading dimensions
  if (d == 0) return false;
  for (; d < in.size(); ++d)
    if (target[d] != in[d]) return false;
  return true;
}

class Planner {
 public:
  Planner(const Tape& t, bool reuse_memory)
      : t_(t), n_(t.size()), reuse_memory_(reuse_memory), loop_of_(n_ + 1, -1), view_src_(n_ + 1, kNoVar),
        folded_(n_ + 1, false), needs_memory_(n_ + 1, false), used_(n_ + 1, false) {}

  Plan run() {
    find_folded_transposes();
    find_used();
    for (Var v : placement_order()) place(v);
    close_loop();
    assign_slots();
    return std::move(plan_);
  }

 private:
  // The order in which operations are placed: the tape's, except that an elementwise or
  // broadcasting operation (not an output) waits until something else reads it, and is
  // placed just before its first reader if that comes within kMaxWait operations. A
  // loop then holds an operation together with its readers although the tape computes
  // something of another shape in between (kmeans: -2 P C^T of [n, k], then |C|^2 of
  // [k], then the sum of both, was two passes over [n, k]). The operations are pure, so
  // the results are the same.
  static constexpr Var kMaxWait = 16;
  std::vector<Var> placement_order() const {
    std::vector<bool> output(n_ + 1, false), waiting(n_ + 1, false), placed(n_ + 1, false);
    for (Var o : t_.outputs) output[o] = true;
    std::vector<Var> order;
    order.reserve(static_cast<std::size_t>(n_));
    std::vector<std::pair<Var, std::size_t>> stack;  // (variable, next argument to look at)
    auto emit = [&](Var root) {  // root after its waiting arguments, depth first, without recursion
      stack.emplace_back(root, 0);
      while (!stack.empty()) {
        auto& [v, next] = stack.back();
        const Op& op = t_.op(v);
        if (op.kind == OpKind::call && next < op.args.size()) {
          const Var a = op.args[next++];
          if (waiting[a] && !placed[a]) stack.emplace_back(a, 0);
          continue;
        }
        if (!placed[v]) placed[v] = true, order.push_back(v);
        stack.pop_back();
      }
    };
    std::size_t oldest = 0;  // waiting[queue[oldest..]] may still wait
    std::vector<Var> queue;
    auto expire = [&](Var v, Var wait) {
      for (; oldest < queue.size() && queue[oldest] + wait <= v; ++oldest)
        if (!placed[queue[oldest]]) emit(queue[oldest]);
    };
    for (Var v = 1; v <= n_; ++v) {
      // An operation waits at most kMaxWait operations: a reader far away (a gradient's
      // backward half reading a forward value) would keep its arguments alive as long.
      // It is placed when it has waited that long, after an operation that ends a loop
      // anyway (not a reduction, which a loop may accumulate, a view, a transpose folded
      // into a product or a strided read), so that it does not cut the open loop in two;
      // or after 4 kMaxWait operations.
      expire(v, 4 * kMaxWait);
      const Op& op = t_.op(v);
      // Operations of one shape keep the tape's order among themselves: one waits only
      // while operations of other shapes come (which would end its loop anyway).
      if (op.kind == OpKind::call)
        for (std::size_t q = oldest; q < queue.size(); ++q)
          if (!placed[queue[q]] && t_.type(queue[q]).shape == op.type.shape) emit(queue[q]);
      const bool deferred = op.kind == OpKind::call && op.results == 1 && !output[v] && op.prim->pure && !op.prim->effect &&
                            (op.prim->structure == Structure::elementwise || op.prim->structure == Structure::broadcast);
      if (deferred) {
        waiting[v] = true, queue.push_back(v);
        continue;
      }
      emit(v);
      if (op.kind != OpKind::call) continue;
      const bool joins_loop = op.prim->structure == Structure::reduction || op.prim->structure == Structure::view ||
                              folded_[v] || op.prim->lowering.strided_read;
      if (!joins_loop) expire(v, kMaxWait);
    }
    for (Var v = 1; v <= n_; ++v)
      if (waiting[v] && !placed[v]) emit(v);  // (read by nothing: placed at the end)
    return order;
  }

  // The variable whose memory v's elements are in (through reshapes).
  Var storage_of(Var v) const {
    while (view_src_[v] != kNoVar) v = view_src_[v];
    return v;
  }

  // A transpose (or a swap of the last two axes) is folded into the matrix products
  // reading it if nothing else reads it but other such transposes, themselves folded
  // (the transpose of a transpose: the matrix as stored). Decided from the last
  // variable back, so a transpose's readers are decided before it.
  void find_folded_transposes() {
    std::vector<std::vector<Var>> readers(n_ + 1);
    for (Var v = 1; v <= n_; ++v)
      if (t_.op(v).kind == OpKind::call)
        for (Var a : t_.op(v).args) readers[a].push_back(v);
    std::vector<bool> output(n_ + 1, false);
    for (Var o : t_.outputs) output[o] = true;
    for (Var v = n_; v >= 1; --v) {
      const Op& op = t_.op(v);
      if (op.kind != OpKind::call || output[v] || !is_float(op.type.dtype) ||
          (op.prim->structure != Structure::permutation && !swaps_last_two(op)))
        continue;
      bool only_products = true;
      for (Var r : readers[v])
        only_products = only_products && (t_.op(r).prim->structure == Structure::contraction || folded_[r]);
      folded_[v] = only_products;
    }
  }

  // A strided read whose result is its argument with the last two axes swapped (and
  // nothing else moved): a batch of transposed matrices, which a batched matrix product
  // reads as stored, transposed by CBLAS.
  bool swaps_last_two(const Op& op) const {
    if (!op.prim->lowering.strided_read || op.args.size() != 1) return false;
    const Shape& in = t_.type(op.args[0]).shape;
    const std::size_t r = in.size();
    if (r < 2 || op.type.shape.size() != r) return false;
    const StridedMap map = op.prim->lowering.strided_read(t_.type(op.args[0]), op.attrs);
    if (map.offset != 0 || map.strides.size() != r) return false;
    const std::vector<int64_t> contiguous = broadcast_strides(in, in);
    for (std::size_t d = 0; d + 2 < r; ++d)
      if (op.type.shape[d] != in[d] || (in[d] != 1 && map.strides[d] != contiguous[d])) return false;
    return op.type.shape[r - 2] == in[r - 1] && op.type.shape[r - 1] == in[r - 2] &&
           (in[r - 1] == 1 || map.strides[r - 2] == 1) && (in[r - 2] == 1 || map.strides[r - 1] == in[r - 1]);
  }

  // Whether something reads each variable (a `result` operation does not read its call).
  void find_used() {
    for (Var o : t_.outputs) used_[o] = true;
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
    for (Var r : std::get<LoopStep>(plan_.steps[current_]).reductions)
      if (numel(t_.type(r).shape) > 1) total += numel(t_.type(r).shape);
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
    if (op.prim->lowering.strided_place && !touches_i64(op)) {
      close_loop();
      for (Var a : op.args) need(a);
      needs_memory_[v] = true;
      plan_.steps.push_back(PlaceStep{v});
      return;
    }
    switch (structure) {
      case Structure::view: view_src_[v] = op.args[0]; return;
      case Structure::elementwise:
      case Structure::broadcast: {
        if (op.prim->structure == Structure::elementwise && !op.prim->element)
          throw Error(fmt::format("compile: primitive '{}' has no code-generation rule", op.prim->name));
        bool fits = current_ >= 0 &&
                    std::get<LoopStep>(plan_.steps[current_]).shape == op.type.shape &&
                    std::get<LoopStep>(plan_.steps[current_]).members.size() < kMaxLoopMembers;
        for (Var a : op.args) fits = fits && loop_can_read(a);
        if (!fits) open_loop(op.type.shape);
        join(v);
        for (Var a : op.args) read_in_loop(a);
        return;
      }
      case Structure::reduction: {
        const Var in = op.args[0];
        if ((is_full_reduction(t_, v) || (is_leading_sum(t_, v) && column_sums_fit(v))) && is_member(in)) {
          std::get<LoopStep>(plan_.steps[current_]).reductions.push_back(v);
          loop_of_[v] = current_;
          needs_memory_[v] = true;  // written after the loop
          return;
        }
        close_loop();
        need(in);
        needs_memory_[v] = true;
        plan_.steps.push_back(ReduceStep{v, in});
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
    if (!constant) std::get<LoopStep>(plan_.steps[current_]).checks.push_back(v);
    return true;
  }
  // A strided read joins the open loop (or opens one) as a load of its source at the
  // primitive's offset and strides; the source must be in memory before the loop.
  void fuse_strided(Var v) { join_reading_memory(v, {t_.op(v).args[0]}); }
  // Joins v to the open loop if it has v's shape, room, and computes none of `sources`
  // (which v reads at other positions than its own element's, so from memory written
  // before the loop); else opens a loop. The sources are kept in memory.
  void join_reading_memory(Var v, std::initializer_list<Var> sources) {
    bool fits = current_ >= 0 && std::get<LoopStep>(plan_.steps[current_]).shape == t_.op(v).type.shape &&
                std::get<LoopStep>(plan_.steps[current_]).members.size() < kMaxLoopMembers;
    for (Var s : sources) fits = fits && loop_of_[storage_of(s)] != current_;
    if (!fits) open_loop(t_.op(v).type.shape);
    join(v);
    for (Var s : sources) need(s);
  }
  static bool indices_in_range(const Tensor& indices, const Shape& x, const Attrs& attrs) {
    int64_t axis = attrs.has("axis") ? attrs.integer("axis") : 0;
    if (axis < 0) axis += static_cast<int64_t>(x.size());
    const int64_t n = x.at(static_cast<std::size_t>(axis));
    const int64_t* p = indices.data<int64_t>();
    return std::all_of(p, p + indices.numel(), [n](int64_t i) { return i >= 0 && i < n; });
  }

  void open_loop(const Shape& shape) {
    plan_.steps.push_back(LoopStep{shape, {}, {}, {}});
    current_ = static_cast<int>(plan_.steps.size()) - 1;
  }
  void close_loop() { current_ = -1; }
  void join(Var v) {
    std::get<LoopStep>(plan_.steps[current_]).members.push_back(v);
    loop_of_[v] = current_;
  }
  // A loop member's argument: a register if it is a member, else read from memory.
  // Constants, 0-d ones included, are read from the constants table rather than
  // written into the code, so that loops differing only in a constant's value (a
  // time step, a learning rate) share one kernel.
  void read_in_loop(Var a) {
    if (is_member(a)) return;
    need(a);
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
};

}  // namespace

Plan make_plan(const Tape& tape, bool reuse_memory) { return Planner(tape, reuse_memory).run(); }

bool is_gather_member(const Tape& tape, Var member) { return tape.op(member).prim->structure == Structure::gather; }

bool runs_as_pool(const Tape& tape, Var v) {
  const Op& op = tape.op(v);
  if (op.kind != OpKind::call || !op.prim->lowering.pool || op.results != 1 || !is_float(op.type.dtype)) return false;
  for (Var a : op.args)
    if (!is_float(tape.type(a).dtype)) return false;
  return true;
}
int64_t eager_into_scratch(const Tape& tape, Var v) {
  const Op& op = tape.op(v);
  if (op.kind != OpKind::call || !op.prim->lowering.eager_into || !op.prim->lowering.scratch_bytes || !is_builtin(*op.prim)) return 0;
  std::vector<VarType> types;
  for (Var a : op.args) types.push_back(tape.type(a));
  return op.prim->lowering.scratch_bytes(types, op.attrs);
}
bool is_strided_member(const Tape& tape, Var member) {
  const Op& op = tape.op(member);
  return op.kind == OpKind::call && op.prim->lowering.strided_read;
}
bool is_indexed_member(const Tape& tape, Var member) {
  return is_gather_member(tape, member) || is_strided_member(tape, member);
}

std::vector<Var> loop_inputs(const Tape& tape, const LoopStep& loop) {
  auto has = [](const std::vector<Var>& vs, Var v) { return std::find(vs.begin(), vs.end(), v) != vs.end(); };
  std::vector<Var> inputs;
  for (Var m : loop.members)
    for (Var a : tape.op(m).args)
      if (!has(loop.members, a) && !has(inputs, a)) inputs.push_back(a);
  return inputs;
}

bool place_covers(const Tape& t, Var out) {
  int64_t placed = 0;
  for (Var a : t.op(out).args) placed += numel(t.type(a).shape);
  return placed == numel(t.type(out).shape);
}

}  // namespace reel::codegen
