// guard: the C++ check of its condition's first element, and its row.
#include "kernels/guard.hpp"

#include <fmt/format.h>

#include "schedule.hpp"

namespace reel::codegen {

namespace {

void schedule_guard(Scheduler& s, const CheckStep& c) {
  const Op& op = s.tape().op(c.guard);
  const Var cond = op.args[0];
  s.add_step(GuardArgs{.dtype = s.tape().type(cond).dtype,
                       .cond = s.ref_of(cond),
                       .expected = op.attrs.boolean("expected"),
                       .label = fmt::format("%{} = guard(%{})", c.guard, cond),
                       .loop = op.attrs.has("loop") ? op.attrs.string("loop") : std::string()});
}

}  // namespace

extern const StepRow guard_step_row{
    .index = step_index<CheckStep>,
    .schedule = [](Scheduler& s, const Step& step) { schedule_guard(s, std::get<CheckStep>(step)); },
    .accesses = [](const Tape& t, const Plan&, const Step& step,
                   const AccessFn& f) { f(t.op(std::get<CheckStep>(step).guard).args[0], false); },
    .cost = nullptr,
    .text =
        [](const Tape& t, const Plan&, const Step& step) {
          const Var g = std::get<CheckStep>(step).guard;
          return fmt::format("check %{} = guard(%{}), expected {}", g, t.op(g).args[0],
                             t.op(g).attrs.boolean("expected") ? "true" : "false");
        },
    .scratch = nullptr};

}  // namespace reel::codegen
