// A strided placement: zeros where no argument goes, then a loop kernel per argument
// copying it into its place; and its row.
#include "kernels/place.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "schedule.hpp"

namespace reel::codegen {

bool place_covers(const Tape& t, Var out) {
  int64_t placed = 0;
  for (Var a : t.op(out).args) placed += numel(t.type(a).shape);
  return placed == numel(t.type(out).shape);
}

std::vector<StridedMap> place_maps(const Tape& t, Var out) {
  const Op& op = t.op(out);
  std::vector<VarType> types;
  types.reserve(op.args.size());
  for (Var a : op.args) types.push_back(t.type(a));
  return op.prim->lowering.strided_place(types, op.attrs);
}

std::optional<std::vector<int64_t>> place_in_loop(const StridedMap& map, const Shape& shape, const Shape& loop) {
  // Up to this many elements, a loop writes a place strided along its innermost dimension
  // (a Jacobian's column of a small function): the copy it saves costs more than a
  // vector loop's contiguous stores.
  constexpr int64_t kMaxStridedElements = 64;
  if (numel(shape) != numel(loop) || numel(shape) == 0) return std::nullopt;
  std::vector<int64_t> strides(loop.size(), 0);
  std::size_t d = 0;  // the argument's next dimension
  int64_t innermost = 1;
  for (std::size_t e = 0; e < loop.size(); ++e) {
    if (loop[e] == 1) continue;
    while (d < shape.size() && shape[d] == 1) ++d;
    if (d == shape.size() || shape[d] != loop[e]) return std::nullopt;
    strides[e] = innermost = map.strides.at(d++);
  }
  if (innermost != 1 && numel(loop) > kMaxStridedElements) return std::nullopt;
  return strides;
}

namespace {

// Per argument, a loop copying it into its place in the result.
void schedule_place(Scheduler& sch, const PlaceStep& s) {
  const Tape& t = sch.tape();
  const Op& op = t.op(s.out);
  const std::vector<StridedMap> places = place_maps(t, s.out);
  if (!place_covers(t, s.out))  // (unslice) zeros where no argument goes
    sch.add_step(ZeroArgs{.to = sch.ref_of(s.out),
                          .bytes = numel(op.type.shape) * static_cast<int64_t>(dtype_size(op.type.dtype))});
  for (std::size_t i = 0; i < op.args.size(); ++i) {
    const Var a = op.args[i];
    if (numel(t.type(a).shape) == 0 || s.by_loop.at(i)) continue;
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
          const auto& s = std::get<PlaceStep>(step);
          const auto& args = t.op(s.out).args;
          for (std::size_t i = 0; i < args.size(); ++i)
            if (!s.by_loop.at(i)) f(args[i], false);
          f(s.out, true);
        },
    .cost = [](const Tape& t, const Step& step, int64_t chunk_elements) {
      return kernel_cost(numel(t.type(std::get<PlaceStep>(step).out).shape), chunk_elements);
    },
    .text =
        [](const Tape& t, const Plan&, const Step& step) {
          const auto& s = std::get<PlaceStep>(step);
          const Var out = s.out;
          std::vector<Var> args(t.op(out).args.begin(), t.op(out).args.end());
          const auto by_loop = std::count(s.by_loop.begin(), s.by_loop.end(), true);
          const std::string copies =
              by_loop == 0 ? "a loop per argument"
              : static_cast<std::size_t>(by_loop) == args.size()
                  ? "every argument written by its loop"
                  : fmt::format("{} arguments written by their loops, a loop per other", by_loop);
          return fmt::format("place %{} = {}({}) ({}{})", out, t.op(out).prim->name, var_list(args),
                             place_covers(t, out) ? "" : "zeros, then ", copies);
        },
    .scratch = nullptr};

}  // namespace reel::codegen
