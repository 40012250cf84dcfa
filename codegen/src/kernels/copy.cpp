// A copy of a value into an output tensor: its step and its row.
#include "kernels/copy.hpp"

#include <fmt/format.h>

#include "schedule.hpp"

namespace reel::codegen {

extern const StepRow copy_step_row{
    .index = step_index<CopyStep>,
    .schedule =
        [](Scheduler& s, const Step& step) {
          const auto& c = std::get<CopyStep>(step);
          const VarType& t = s.tape().type(c.from);
          s.add_step(CopyArgs{.from = s.ref_of(c.from),
                              .to = s.ref(c.slot),
                              .bytes = numel(t.shape) * static_cast<int64_t>(dtype_size(t.dtype))});
        },
    .accesses = [](const Tape&, const Plan&, const Step& step,
                   const AccessFn& f) { f(std::get<CopyStep>(step).from, false); },
    .cost = nullptr,
    .text =
        [](const Tape&, const Plan& p, const Step& step) {
          const auto& c = std::get<CopyStep>(step);
          return fmt::format("copy output {} = %{}", p.slots[static_cast<std::size_t>(c.slot)].index, c.from);
        },
    .scratch = nullptr};

}  // namespace reel::codegen
