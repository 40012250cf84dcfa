#pragma once
// The schedule: the steps a compiled function runs, in order, each with its arguments
// (step_args.hpp), and the kernels they call. Each plan step is scheduled by its kind's
// row (kernels/table.hpp) through the Scheduler, which holds what all kinds share: the
// buffers of the plan's slots, the constant pool, and the list of kernels, each key
// once. Needs no LLVM.
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernel_spec.hpp"
#include "plan.hpp"
#include "steps.hpp"

namespace reel::codegen {

struct Schedule {
  std::vector<KernelSpec> kernels;  // distinct keys, in order of first use, loops' bodies' included
  std::shared_ptr<Program> program;  // its steps (not yet bound), constant pool and workspace size
};

// The schedule of a planned tape whose memory plan is done; the steps of its loops'
// bodies (their own programs) call kernels of the same list.
// Kernels of at least 2 * chunk_elements elements run in chunks (KernelSpec::chunk);
// chunk_elements 0: none.
Schedule make_schedule(const Tape& tape, const Plan& plan, int64_t chunk_elements);

// The kernels of a compiled function and of its loops' bodies, each key once.
struct KernelList {
  std::vector<KernelSpec> kernels;
  std::unordered_map<std::string, int> index;
  // Element rules by primitive and attributes, recorded once (a million-operation tape
  // has a few distinct ones).
  std::map<std::pair<const Primitive*, std::string>, std::shared_ptr<const ElementRule>> element_rules;
};

// Schedules one program: a compiled function's tape, or a loop's body, whose inputs and
// outputs have the given alignments (empty: 64 bytes, as a compiled function's).
class Scheduler {
 public:
  // `chunk_elements` > 0: large kernels run in chunks on the thread pool (0 within a loop
  // kernel, whose body's kernels are inlined).
  Scheduler(const Tape& t, const Plan& p, KernelList& list, int64_t chunk_elements,
            std::vector<int64_t> input_align = {}, std::vector<int64_t> output_align = {})
      : t_(t), p_(p), list_(list), split_(chunk_elements), input_align_(std::move(input_align)),
        output_align_(std::move(output_align)) {}

  std::shared_ptr<Program> run();

  const Tape& tape() const { return t_; }
  const Plan& plan() const { return p_; }
  KernelList& kernels() { return list_; }
  int64_t chunk_elements() const { return split_; }

  // Adds a block to the constant pool, at a 64-byte-aligned offset (at least 64 bytes
  // each), and returns that offset.
  int64_t add_constant(const Tensor& value);
  // Where a slot's memory is.
  BufferRef ref(int slot_index) const;
  BufferRef ref_of(Var v) const { return ref(p_.slot_of[v]); }
  // The alignment a slot's memory is guaranteed, in bytes.
  int64_t align(int slot_index) const;
  TypedBuffer typed(Var v) const { return {ref_of(v), t_.type(v)}; }
  // A primitive's element rule for these attributes, recorded once per schedule (a
  // million-operation tape has a few distinct ones).
  std::shared_ptr<const ElementRule> element_rule(const Op& op);

  // A step of a kernel on the buffers of these slots (their alignments its own).
  // `offsets` (optional): each parameter's first element in its slot (its pointer and
  // alignment move with it).
  void add_kernel(KernelSpec spec, const std::vector<int>& param_slots, const std::vector<int64_t>& offsets = {});
  // A kernel on these buffers, spec.align given (or empty).
  void add_kernel(KernelSpec spec, std::vector<BufferRef> buffers);
  void add_step(StepArgs step) { program_->steps.push_back(std::move(step)); }
  // A number per variable of the tape for the step being scheduled to use, all -1
  // between steps (the step puts back what it set): a fused loop numbers its values here
  // (a map per loop was a tenth of scheduling a scalar gradient's thousands of loops).
  std::vector<int>& var_scratch() {
    if (scratch_.empty()) scratch_.assign(static_cast<std::size_t>(t_.size()) + 1, -1);
    return scratch_;
  }

 private:
  void schedule(const Step& step);

  const Tape& t_;
  const Plan& p_;
  KernelList& list_;
  const int64_t split_;  // chunk_elements
  const std::vector<int64_t> input_align_, output_align_;
  std::vector<int64_t> constant_offsets_;  // per constant: byte offset in the pool
  std::vector<unsigned char> pool_;        // the constant pool, then the loop kernels' bodies' pools
  std::shared_ptr<Program> program_ = std::make_shared<Program>();
  std::vector<int> scratch_;  // var_scratch
};

}  // namespace reel::codegen
