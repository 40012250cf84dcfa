// gather and scatter_add: their geometry, the check of their indices, their kernel, its
// emission and their rows.
#include "kernels/indexed.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "kernels/emitter.hpp"
#include "schedule.hpp"

namespace reel::codegen {

Indexed indexed_geometry(const Tape& t, const Op& op) {
  const VarType& x = t.type(op.args[0]);
  Indexed g;
  g.axis = op.attrs.has("axis") ? op.attrs.integer("axis") : 0;
  if (g.axis < 0) g.axis += static_cast<int64_t>(x.shape.size());
  const auto axis = static_cast<std::size_t>(g.axis);
  for (std::size_t d = 0; d < axis; ++d) g.outer *= x.shape[d];
  for (std::size_t d = axis + 1; d < x.shape.size(); ++d) g.inner *= x.shape[d];
  g.n = x.shape[axis];
  g.count = numel(t.type(op.args[1]).shape);
  return g;
}

CheckIndicesArgs index_check(const Scheduler& s, Var out) {
  const Op& op = s.tape().op(out);
  const Indexed g = indexed_geometry(s.tape(), op);
  return {.indices = s.ref_of(op.args[1]), .count = g.count, .axis_length = g.n, .axis = g.axis, .prim = op.prim,
          .distinct = op.prim->lowering.replaces};
}

bool indices_in_range(const Tensor& indices, const Shape& x, const Attrs& attrs) {
  int64_t axis = attrs.has("axis") ? attrs.integer("axis") : 0;
  if (axis < 0) axis += static_cast<int64_t>(x.size());
  const int64_t n = x.at(static_cast<std::size_t>(axis));
  const int64_t* p = indices.data<int64_t>();
  return std::all_of(p, p + indices.numel(), [n](int64_t i) { return i >= 0 && i < n; });
}

namespace {

using llvm::IRBuilder;
using llvm::Value;

// A check of the indices, then the loop: params {x, indices, out} for a gather,
// {target, indices, values, out} for a scatter.
void schedule_indexed(Scheduler& sch, Var out, bool scatter) {
  const Tape& t = sch.tape();
  const Op& op = t.op(out);
  const Indexed g = indexed_geometry(t, op);
  KernelSpec k;
  k.body = IndexedSpec{.scatter = scatter, .outer = g.outer, .n = g.n, .count = g.count, .inner = g.inner,
                       .replace = scatter && op.prim->lowering.replaces};
  k.empty = g.outer * g.count * g.inner == 0;
  sch.add_step(index_check(sch, out));
  std::vector<int> slots;
  for (Var a : op.args) {
    k.params.push_back(t.type(a).dtype);
    slots.push_back(sch.plan().slot_of[a]);
  }
  k.params.push_back(op.type.dtype);
  slots.push_back(sch.plan().slot_of[out]);
  sch.add_kernel(std::move(k), slots);
}

// gather: out[i, j, t] = x[i, idx[j], t]; scatter: out = target, then
// out[i, idx[j], t] += values[i, j, t] (or = with `replace`) in the eager kernel's order. The indices were
// checked by the step before.
void emit_indexed(KernelEmitter& e) {
  IRBuilder<>& b = e.b;
  const KernelSpec& k = e.spec;
  const IndexedSpec& s = k.as<IndexedSpec>();
  const bool scatter = s.scatter;
  const int out_param = scatter ? 3 : 2, src = scatter ? 2 : 0;
  const DType d = k.params[static_cast<std::size_t>(out_param)];
  if (scatter && s.outer * s.n * s.inner > 0)
    e.loop_nest({s.outer * s.n * s.inner}, [&](const std::vector<Value*>& i) {
      b.CreateStore(b.CreateLoad(e.elem(d), e.element_ptr(0, d, i[0])), e.element_ptr(out_param, d, i[0]));
    });
  if (k.empty) return;
  e.loop_nest({s.outer, s.count, s.inner}, [&](const std::vector<Value*>& i) {
    Value* index = b.CreateLoad(b.getInt64Ty(), e.element_ptr(1, DType::i64, i[1]));
    auto flat = [&](Value* major, int64_t extent, Value* minor) {  // (major * extent + minor) * inner + i[2]
      Value* ab = b.CreateAdd(b.CreateMul(major, b.getInt64(extent), "", true, true), minor, "", true, true);
      return b.CreateAdd(b.CreateMul(ab, b.getInt64(s.inner), "", true, true), i[2], "", true, true);
    };
    Value* at_x = flat(i[0], s.n, index);        // into x / out of a scatter
    Value* at_list = flat(i[0], s.count, i[1]);  // into values / out of a gather
    if (scatter) {
      Value* p = e.element_ptr(out_param, d, at_x);
      Value* v = b.CreateLoad(e.elem(d), e.element_ptr(src, d, at_list));
      b.CreateStore(s.replace ? v : b.CreateFAdd(b.CreateLoad(e.elem(d), p), v), p);
    } else {
      b.CreateStore(b.CreateLoad(e.elem(d), e.element_ptr(src, d, at_x)), e.element_ptr(out_param, d, at_list));
    }
  });
}

std::string indexed_key(const KernelSpec& k) {
  const IndexedSpec& s = k.as<IndexedSpec>();
  return key_head(k, s.scatter ? "scatter" : "gather") +
         fmt::format("; outer {} n {} count {} inner {}{}", s.outer, s.n, s.count, s.inner, s.replace ? " replace" : "");
}

void indexed_accesses(const Tape& t, Var out, const AccessFn& f) {
  for (Var a : t.op(out).args) f(a, false);
  f(out, true);
}

std::string indexed_text(const Tape& t, Var out, const char* kind) {
  std::vector<Var> args(t.op(out).args.begin(), t.op(out).args.end());
  return fmt::format("{} %{} = {}({}) (checked indices, loop)", kind, out, t.op(out).prim->name, var_list(args));
}

}  // namespace

extern const StepRow gather_step_row{
    .index = step_index<GatherStep>,
    .schedule = [](Scheduler& s, const Step& step) { schedule_indexed(s, std::get<GatherStep>(step).out, false); },
    .accesses = [](const Tape& t, const Plan&, const Step& step,
                   const AccessFn& f) { indexed_accesses(t, std::get<GatherStep>(step).out, f); },
    .cost = nullptr,  // (index checks may throw)
    .text = [](const Tape& t, const Plan&, const Step& step) { return indexed_text(t, std::get<GatherStep>(step).out, "gather"); },
    .scratch = nullptr};
extern const StepRow scatter_step_row{
    .index = step_index<ScatterStep>,
    .schedule = [](Scheduler& s, const Step& step) { schedule_indexed(s, std::get<ScatterStep>(step).out, true); },
    .accesses = [](const Tape& t, const Plan&, const Step& step,
                   const AccessFn& f) { indexed_accesses(t, std::get<ScatterStep>(step).out, f); },
    .cost = nullptr,
    .text = [](const Tape& t, const Plan&, const Step& step) { return indexed_text(t, std::get<ScatterStep>(step).out, "scatter"); },
    .scratch = nullptr};
extern const KernelRow indexed_kernel_row{.index = kernel_index<IndexedSpec>,
                                          .key = indexed_key,
                                          .split = nullptr,
                                          .partials = nullptr,
                                          .emit = emit_indexed,
                                          .claims_call = nullptr,
                                          .schedule_call = nullptr,
    .call_text = nullptr};

}  // namespace reel::codegen
