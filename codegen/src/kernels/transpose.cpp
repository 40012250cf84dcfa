// A transpose of a matrix: its kernel (rows by columns), its emission and its rows.
#include "kernels/transpose.hpp"

#include <fmt/format.h>

#include "kernels/emitter.hpp"
#include "schedule.hpp"

namespace reel::codegen {

namespace {

using llvm::IRBuilder;
using llvm::Value;

void schedule_transpose(Scheduler& sch, const TransposeStep& st) {
  const Tape& t = sch.tape();
  const Shape& in = t.type(st.in).shape;
  KernelSpec k;
  k.params = {t.type(st.in).dtype, t.type(st.out).dtype};
  k.body = TransposeSpec{.rows = in[0], .cols = in[1]};
  k.empty = numel(in) == 0;
  sch.add_kernel(std::move(k), {sch.plan().slot_of[st.in], sch.plan().slot_of[st.out]});
}

void emit_transpose(KernelEmitter& e) {
  IRBuilder<>& b = e.b;
  const KernelSpec& k = e.spec;
  const TransposeSpec& s = k.as<TransposeSpec>();
  if (k.empty) return;
  const DType d = k.params[0];
  e.loop_nest({s.rows, s.cols}, [&](const std::vector<Value*>& idx) {
    Value* x = b.CreateLoad(e.elem(d), e.element_ptr(0, d, e.offset(idx, {s.cols, 1})));
    b.CreateStore(x, e.element_ptr(1, d, e.offset(idx, {1, s.rows})));
  }, {}, k.chunk > 0);
}

}  // namespace

extern const StepRow transpose_step_row{
    .index = step_index<TransposeStep>,
    .schedule = [](Scheduler& s, const Step& step) { schedule_transpose(s, std::get<TransposeStep>(step)); },
    .accesses =
        [](const Tape&, const Plan&, const Step& step, const AccessFn& f) {
          f(std::get<TransposeStep>(step).in, false);
          f(std::get<TransposeStep>(step).out, true);
        },
    .cost = [](const Tape& t, const Step& step, int64_t chunk_elements) {
      return kernel_cost(numel(t.type(std::get<TransposeStep>(step).out).shape), chunk_elements);
    },
    .text =
        [](const Tape&, const Plan&, const Step& step) {
          return fmt::format("transpose %{} = %{}^T", std::get<TransposeStep>(step).out, std::get<TransposeStep>(step).in);
        },
    .scratch = nullptr};
extern const KernelRow transpose_kernel_row{
    .index = kernel_index<TransposeSpec>,
    .key =
        [](const KernelSpec& k) {
          return key_head(k, "transpose") + fmt::format("; {}x{}", k.as<TransposeSpec>().rows, k.as<TransposeSpec>().cols);
        },
    .split = [](const KernelSpec& k) { return SplitExtent{k.as<TransposeSpec>().rows, k.as<TransposeSpec>().cols}; },
    .partials = nullptr,
    .emit = emit_transpose,
    .claims_call = nullptr,
    .schedule_call = nullptr,
    .call_text = nullptr};

}  // namespace reel::codegen
