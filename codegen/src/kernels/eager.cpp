// The eager call: a primitive's eager function called by the step (in place in its
// results' memory when it can), unless a kernel kind claims the call; and its row.
#include "kernels/eager.hpp"

#include <fmt/format.h>

#include "schedule.hpp"

namespace reel::codegen {

int64_t eager_into_scratch(const Tape& tape, Var v) {
  const Op& op = tape.op(v);
  if (op.kind != OpKind::call || !op.prim->lowering.eager_into || !op.prim->lowering.scratch_bytes || !is_builtin(*op.prim)) return 0;
  std::vector<VarType> types;
  for (Var a : op.args) types.push_back(tape.type(a));
  return op.prim->lowering.scratch_bytes(types, op.attrs);
}

namespace {

void schedule_eager(Scheduler& s, const ExternStep& e) {
  const Op& op = s.tape().op(e.out);
  if (const KernelRow* kind = kernel_for_call(s.tape(), e.out)) return kind->schedule_call(s, e.out);
  std::vector<std::string> argnames;
  for (Var a : op.args) argnames.push_back(fmt::format("%{}", a));
  ExternArgs call{.prim = op.prim,
                  .attrs = op.attrs,
                  .args = {},
                  .results = {},
                  .label = fmt::format("%{} = {}({})", e.out, op.prim->name, fmt::join(argnames, ", ")),
                  .scratch = {}};
  for (Var a : op.args) call.args.push_back(s.typed(a));
  for (int i = 0; i < e.results; ++i) call.results.push_back(s.typed(e.out + i));
  call.borrow = is_builtin(*op.prim);
  for (const auto& [name, value] : op.attrs.items())
    if (std::holds_alternative<TapeRef>(value)) call.borrow = false;
  if (e.scratch >= 0) call.has_scratch = true, call.scratch = s.ref(e.scratch);
  s.add_step(std::move(call));
}

std::string eager_text(const Tape& t, const Plan&, const Step& step) {
  const auto& e = std::get<ExternStep>(step);
  std::vector<Var> args(t.op(e.out).args.begin(), t.op(e.out).args.end());
  std::vector<Var> outs;
  for (int i = 0; i < e.results; ++i) outs.push_back(e.out + i);
  const KernelRow* kind = kernel_for_call(t, e.out);
  return fmt::format("call {} = {}({}) ({})", var_list(outs), t.op(e.out).prim->name, var_list(args),
                     kind != nullptr ? kind->call_text : "eager");
}

}  // namespace

extern const StepRow eager_step_row{
    .index = step_index<ExternStep>,
    .schedule = [](Scheduler& s, const Step& step) { schedule_eager(s, std::get<ExternStep>(step)); },
    .accesses =
        [](const Tape& t, const Plan&, const Step& step, const AccessFn& f) {
          const auto& e = std::get<ExternStep>(step);
          for (Var a : t.op(e.out).args) f(a, false);
          for (int i = 0; i < e.results; ++i) f(e.out + i, true);
        },
    .cost = nullptr,  // (may throw)
    .text = eager_text,
    .scratch = [](const Step& step) { return std::get<ExternStep>(step).scratch; }};

}  // namespace reel::codegen
