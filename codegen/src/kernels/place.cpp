// A strided placement: zeros where no argument goes, then a loop kernel per argument
// copying it into its place; and its row.
#include "kernels/place.hpp"

#include <fmt/format.h>

#include "schedule.hpp"

namespace reel::codegen {

bool place_covers(const Tape& t, Var out) {
  int64_t placed = 0;
  for (Var a : t.op(out).args) placed += numel(t.type(a).shape);
  return placed == numel(t.type(out).shape);
}

namespace {

// Per argument, a loop copying it into its place in the result.
void schedule_place(Scheduler& sch, const PlaceStep& s) {
  const Tape& t = sch.tape();
  const Op& op = t.op(s.out);
  std::vector<VarType> types;
  for (Var a : op.args) types.push_back(t.type(a));
  const std::vector<StridedMap> places = op.prim->lowering.strided_place(types, op.attrs);
  if (!place_covers(t, s.out))  // (unslice) zeros where no argument goes
    sch.add_step(ZeroArgs{.to = sch.ref_of(s.out),
                          .bytes = numel(op.type.shape) * static_cast<int64_t>(dtype_size(op.type.dtype))});
  for (std::size_t i = 0; i < op.args.size(); ++i) {
    const Var a = op.args[i];
    if (numel(t.type(a).shape) == 0) continue;
    KernelSpec k;
    LoopSpec l;
    k.params = {t.type(a).dtype, op.type.dtype};
    l.dims = t.type(a).shape;
    l.loads.push_back({0, t.type(a).dtype, contiguous(l.dims), -1, {}, 0, {}, {}});
    // The place's offset moves the result's pointer (a runtime argument), so that the
    // copies into different places share one kernel.
    l.stores.push_back({0, 1, places.at(i).strides, 0});
    std::vector<std::vector<int64_t>> strides{l.loads[0].strides, l.stores[0].strides};
    coalesce(l.dims, strides);
    l.loads[0].strides = strides[0];
    l.stores[0].strides = strides[1];
    k.body = std::move(l);
    sch.add_kernel(std::move(k), {sch.plan().slot_of[a], sch.plan().slot_of[s.out]}, {0, places.at(i).offset});
  }
}

}  // namespace

extern const StepRow place_step_row{
    .index = step_index<PlaceStep>,
    .schedule = [](Scheduler& s, const Step& step) { schedule_place(s, std::get<PlaceStep>(step)); },
    .accesses =
        [](const Tape& t, const Plan&, const Step& step, const AccessFn& f) {
          const Var out = std::get<PlaceStep>(step).out;
          for (Var a : t.op(out).args) f(a, false);
          f(out, true);
        },
    .cost = [](const Tape& t, const Step& step, int64_t chunk_elements) {
      return kernel_cost(numel(t.type(std::get<PlaceStep>(step).out).shape), chunk_elements);
    },
    .text =
        [](const Tape& t, const Plan&, const Step& step) {
          const Var out = std::get<PlaceStep>(step).out;
          std::vector<Var> args(t.op(out).args.begin(), t.op(out).args.end());
          return fmt::format("place %{} = {}({}) ({}a loop per argument)", out, t.op(out).prim->name, var_list(args),
                             place_covers(t, out) ? "" : "zeros, then ");
        },
    .scratch = nullptr};

}  // namespace reel::codegen
