#include "schedule.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "concurrent.hpp"

namespace reel::codegen {

namespace {

// The chunk of a kernel (KernelSpec::chunk): 0 unless it makes at least two chunks of
// about `elements` (CompileOptions::chunk_elements; 0: none). Depends on the kernel
// alone, never on the thread count, so the partial sums, and the results, are the same
// whatever the count.
int64_t choose_chunk(const KernelSpec& k, int64_t elements) {
  const auto [extent, inner] = split_extent(k);
  if (elements <= 0 || extent < 2 || inner <= 0 || extent > std::numeric_limits<int64_t>::max() / inner ||
      extent * inner / 2 < elements)
    return 0;
  int64_t chunk = (elements + inner - 1) / inner;
  if (inner == 1) chunk = (chunk + 63) / 64 * 64;  // whole cache lines and vectors per chunk
  return chunk < extent ? chunk : 0;
}

}  // namespace

std::shared_ptr<Program> Scheduler::run() {
  for (Var c : p_.constants) constant_offsets_.push_back(add_constant(t_.op(c).value));
  program_->workspace_bytes = p_.workspace_bytes;
  program_->num_inputs = static_cast<std::size_t>(p_.num_inputs);
  program_->num_outputs = t_.outputs.size();
  // Independent steps worth a thread each run at the same time, each in a branch.
  const std::vector<std::vector<int>> groups =
      split_ > 0 ? concurrent_groups(t_, p_, split_) : std::vector<std::vector<int>>{};
  std::size_t g = 0;
  for (std::size_t i = 0; i < p_.steps.size(); ++i) {
    if (g < groups.size() && groups[g].front() == static_cast<int>(i)) {
      ConcurrentArgs c;
      for (int s : groups[g]) {
        std::vector<StepArgs> outer = std::move(program_->steps);
        program_->steps.clear();
        schedule(p_.steps[static_cast<std::size_t>(s)]);
        auto branch = std::make_shared<Program>();
        branch->steps = std::move(program_->steps);
        program_->steps = std::move(outer);
        c.branches.push_back(std::move(branch));
      }
      program_->steps.push_back(std::move(c));
      i = static_cast<std::size_t>(groups[g].back());
      ++g;
      continue;
    }
    schedule(p_.steps[i]);
  }
  program_->constant_pool = Tensor(DType::f64, {static_cast<int64_t>(pool_.size() / 8)});
  if (!pool_.empty()) std::memcpy(program_->constant_pool.mutable_raw(), pool_.data(), pool_.size());
  return std::move(program_);
}

void Scheduler::schedule(const Step& step) { step_row(step).schedule(*this, step); }

int64_t Scheduler::add_constant(const Tensor& value) {
  const auto at = static_cast<int64_t>(pool_.size());
  const int64_t bytes = std::max<int64_t>((static_cast<int64_t>(value.nbytes()) + 63) / 64 * 64, 64);
  pool_.resize(pool_.size() + static_cast<std::size_t>(bytes), 0);
  if (value.nbytes() > 0) std::memcpy(pool_.data() + at, value.raw(), value.nbytes());
  return at;
}

BufferRef Scheduler::ref(int slot_index) const {
  if (slot_index < 0) throw Error("compile: internal error: a step reads a value with no memory");
  const Slot& s = p_.slots[static_cast<std::size_t>(slot_index)];
  switch (s.kind) {
    case SlotKind::workspace: return {kWorkspaceBase, s.offset};
    case SlotKind::constant: return {kConstantBase, constant_offsets_[static_cast<std::size_t>(s.index)]};
    case SlotKind::input: return {kFirstInputBase + s.index, 0};
    case SlotKind::output: return {kFirstInputBase + p_.num_inputs + s.index, 0};
  }
  throw Error("compile: internal error: a slot of no known kind");
}

int64_t Scheduler::align(int slot_index) const {
  const Slot& s = p_.slots[static_cast<std::size_t>(slot_index)];
  const auto i = static_cast<std::size_t>(s.index);
  if (s.kind == SlotKind::input && i < input_align_.size()) return input_align_[i];
  if (s.kind == SlotKind::output && i < output_align_.size()) return output_align_[i];
  return 64;
}

std::shared_ptr<const ElementRule> Scheduler::element_rule(const Op& op) {
  std::string attrs;
  for (const auto& [name, value] : op.attrs.items()) attrs += name + '=' + attr_str(value) + ' ';
  auto& rule = list_.element_rules[{op.prim, attrs}];
  if (!rule) {
    ElementProgram program = op.prim->element(op.attrs);
    check_element_program(program, static_cast<int>(op.args.size()), op.prim->name);
    std::string text = program.str();
    rule = std::make_shared<const ElementRule>(ElementRule{std::move(program), std::move(text)});
  }
  return rule;
}

void Scheduler::add_kernel(KernelSpec spec, const std::vector<int>& param_slots, const std::vector<int64_t>& offsets) {
  std::vector<BufferRef> buffers;
  for (std::size_t i = 0; i < param_slots.size(); ++i) {
    BufferRef ref_i = ref(param_slots[i]);
    int64_t a = align(param_slots[i]);
    if (i < offsets.size() && offsets[i] != 0) {
      const int64_t bytes = offsets[i] * static_cast<int64_t>(dtype_size(spec.params[i]));
      ref_i.offset += bytes;
      a = std::min(a, bytes & -bytes);  // the largest power of two dividing both
    }
    spec.align.push_back(a);
    buffers.push_back(ref_i);
  }
  add_kernel(std::move(spec), std::move(buffers));
}

void Scheduler::add_kernel(KernelSpec spec, std::vector<BufferRef> buffers) {
  if (std::all_of(spec.align.begin(), spec.align.end(), [](int64_t a) { return a == 64; })) spec.align.clear();
  spec.chunk = choose_chunk(spec, split_);
  ParallelKernelArgs parallel;
  if (spec.chunk > 0) {
    parallel.extent = split_extent(spec).extent;
    parallel.chunk = spec.chunk;
    if (const KernelRow& row = kernel_row(spec); row.partials != nullptr) row.partials(spec, parallel);
  }
  spec.key = make_key(spec);
  auto [it, added] = list_.index.emplace(spec.key, static_cast<int>(list_.kernels.size()));
  if (added) list_.kernels.push_back(std::move(spec));
  if (parallel.chunk > 0) {
    parallel.kernel = it->second;
    parallel.buffers = std::move(buffers);
    program_->steps.push_back(std::move(parallel));
  } else {
    program_->steps.push_back(KernelArgs{.kernel = it->second, .buffers = std::move(buffers)});
  }
}

Schedule make_schedule(const Tape& tape, const Plan& plan, int64_t chunk_elements) {
  KernelList list;
  std::shared_ptr<Program> program = Scheduler(tape, plan, list, chunk_elements).run();
  return {std::move(list.kernels), std::move(program)};
}

}  // namespace reel::codegen
