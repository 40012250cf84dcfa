// The kernel table: one row per kind of plan step and per kind of generated kernel,
// each defined in its kind's file, listed here in the order of their variants
// (Step, KernelBody: table.hpp).
#include "kernels/table.hpp"

#include <fmt/format.h>

#include "kernel_spec.hpp"

namespace reel::codegen {

extern const StepRow loop_step_row, reduce_step_row, matmul_step_row, transpose_step_row, copy_step_row, eager_step_row,
    gather_step_row, scatter_step_row, guard_step_row, loop_call_step_row, place_step_row;
extern const KernelRow loop_kernel_row, reduce_kernel_row, transpose_kernel_row, indexed_kernel_row, pool_kernel_row,
    scan_kernel_row;

namespace {

const StepRow* const kStepRows[] = {&loop_step_row,   &reduce_step_row,  &matmul_step_row,  &transpose_step_row,
                                    &copy_step_row,   &eager_step_row,   &gather_step_row,  &scatter_step_row,
                                    &guard_step_row,  &loop_call_step_row, &place_step_row};
const KernelRow* const kKernelRows[] = {&loop_kernel_row, &reduce_kernel_row, &transpose_kernel_row,
                                        &indexed_kernel_row, &pool_kernel_row, &scan_kernel_row};
static_assert(std::size(kStepRows) == std::variant_size_v<Step>, "a Step alternative without its row, or a row too many");
static_assert(std::size(kKernelRows) == std::variant_size_v<KernelBody>,
              "a KernelBody alternative without its row, or a row too many");

// Each row at its alternative's place (checked once, when first asked).
template <class Row, std::size_t N>
const Row* const* checked(const Row* const (&rows)[N], const char* what) {
  for (std::size_t i = 0; i < N; ++i)
    if (rows[i]->index != i) throw Error(fmt::format("compile: internal error: {} row {} is out of place", what, i));
  return rows;
}

}  // namespace

const StepRow& step_row(const Step& step) {
  static const StepRow* const* rows = checked(kStepRows, "step");
  return *rows[step.index()];
}

const KernelRow& kernel_row(const KernelSpec& k) {
  static const KernelRow* const* rows = checked(kKernelRows, "kernel");
  return *rows[k.body.index()];
}

const KernelRow* kernel_for_call(const Tape& t, Var v) {
  for (const KernelRow* row : kKernelRows)
    if (row->claims_call != nullptr && row->claims_call(t, v)) return row;
  return nullptr;
}

std::string var_list(const std::vector<Var>& vs) {
  std::string s;
  for (Var v : vs) s += fmt::format("{}%{}", s.empty() ? "" : ", ", v);
  return s;
}

}  // namespace reel::codegen
