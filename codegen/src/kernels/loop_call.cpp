// A loop primitive's call: one kernel (kernels/scan.cpp) when its body allows, else a
// step running its bodies' programs, whose kernels join this schedule's list (loops.hpp
// runs it); and its row.
#include "kernels/loop_call.hpp"

#include "loops.hpp"
#include "schedule.hpp"

namespace reel::codegen {

namespace {

void schedule_loop_call(Scheduler& s, const LoopCallStep& l) {
  LoopBuffers b = loop_buffers(
      s.tape(), s.plan(), l, [&](int slot) { return s.ref(slot); }, [&](int slot) { return s.align(slot); });
  const LoopPlan& lp = *l.loop;
  if (runs_as_kernel(lp)) return schedule_scan_kernel(s, lp, b);
  if (lp.cond)
    b.args.cond = Scheduler(lp.cond->tape, lp.cond->plan, s.kernels(), s.chunk_elements(), b.input_align, {64}).run();
  b.args.body =
      Scheduler(lp.body->tape, lp.body->plan, s.kernels(), s.chunk_elements(), b.input_align, b.output_align).run();
  s.add_step(std::move(b.args));
}

}  // namespace

extern const StepRow loop_call_step_row{
    .index = step_index<LoopCallStep>,
    .schedule = [](Scheduler& s, const Step& step) { schedule_loop_call(s, std::get<LoopCallStep>(step)); },
    .accesses =
        [](const Tape& t, const Plan& p, const Step& step, const AccessFn& f) {
          const auto& l = std::get<LoopCallStep>(step);
          for (Var a : t.op(l.out).args) f(a, false);
          for (int i = 0; i < l.results; ++i)
            if (p.slot_of[l.out + i] >= 0) f(l.out + i, true);
        },
    .cost = nullptr,
    .text = [](const Tape& t, const Plan&, const Step& step) { return loop_text(t, std::get<LoopCallStep>(step)); },
    .scratch = [](const Step& step) { return std::get<LoopCallStep>(step).scratch; }};

}  // namespace reel::codegen
