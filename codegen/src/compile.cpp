#include "reel/compile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "concurrent.hpp"
#include "jit.hpp"
#include "kernel_cache.hpp"
#include "memory_plan.hpp"
#include "program.hpp"
#include "reel/parallel.hpp"
#include "reel/passes.hpp"
#include "schedule.hpp"
#include "steps.hpp"
#include "workspace.hpp"

namespace reel {

struct CompiledFunction::Impl {
  Tape tape;
  CompileOptions options;
  std::vector<VarType> input_types;
  std::vector<VarType> output_types;
  // The schedule (its steps, their bound calls, the constant pool); loops' bodies are
  // programs within its steps.
  std::shared_ptr<codegen::Program> program;
  codegen::DriverFn driver = nullptr;     // runs the program's calls in order, when chosen
  std::vector<codegen::KernelSpec> kernels;  // loops' bodies' included
  std::vector<bool> quick;                   // each kernel's code made at the quick tier
  std::vector<std::shared_ptr<void>> code;  // keeps the kernels' code alive
  int kernels_compiled = 0;
  int64_t workspace_bytes = 0, workspace_lower_bound = 0;
  mutable std::once_flag ir_once;
  mutable std::string ir;
};

namespace {

struct Planned : codegen::ProgramPlan {
  codegen::Schedule schedule;
};

void check_options(const CompileOptions& options) {
  if (options.chunk_elements < 0)
    throw Error(fmt::format("compile: CompileOptions::chunk_elements must be >= 0 (0: no chunks), given {}",
                            options.chunk_elements));
}

// Everything before LLVM: reroll and the cleanup passes (unless the tape has run them last, as
// grad_tape's and jvp_tape's have), plan, memory plan, schedule; loops' bodies alike.
Planned scheduled(codegen::ProgramPlan planned, const CompileOptions& options) {
  Planned p{std::move(planned), {}};
  p.schedule = codegen::make_schedule(p.tape, p.plan, options.chunk_elements);
  return p;
}

Planned plan_tape(const Tape& input, const CompileOptions& options) {
  check_options(options);
  return scheduled(codegen::plan_program(input, options.reuse_memory), options);
}

// (At the tiers `quick` says, or with it empty at those a compile building them all
// would choose: kernels_ir.)
std::string ir_text(const std::vector<codegen::KernelSpec>& kernels, const CompileOptions& options,
                    const std::vector<bool>& quick = {}) {
  const codegen::KernelsIr ir = codegen::kernels_ir(kernels, options, quick);
  return fmt::format("; ---- before optimisation ----\n{}\n; ---- after optimisation ----\n{}", ir.before,
                     ir.after);
}

// Whether to run the schedule through a generated driver. Measured (bench/: "a loop
// over its steps vs a generated driver", four runs): driver/loop 0.92-1.05 up to 600
// steps with no consistent winner, 1.01-1.20 at 6,000 steps, and 1 ms (1 step) to
// 670 ms (6,000 steps) more compile. So `automatic` is the loop, at every size
// (docs/codegen.md).
bool use_driver(CompileOptions::Runner runner) { return runner == CompileOptions::Runner::driver; }

// Moves the schedule's program and kernels into impl and binds each step to its code.
void bind_steps(CompiledFunction::Impl& impl, codegen::Schedule schedule, std::vector<codegen::KernelCode>& kernels) {
  std::vector<codegen::StepFn> code;
  std::vector<std::size_t> params;
  for (std::size_t k = 0; k < kernels.size(); ++k) {
    code.push_back(kernels[k].fn);
    impl.quick.push_back(kernels[k].quick);
    params.push_back(schedule.kernels[k].params.size());
    impl.code.push_back(std::move(kernels[k].code));
  }
  impl.program = std::move(schedule.program);
  codegen::bind_program(*impl.program, code, params);
  impl.kernels = std::move(schedule.kernels);
}

}  // namespace

CompiledFunction compile(const Tape& tape, const CompileOptions& options) {
  if (tape.cleaned) return compile(Tape(tape), options);
  check_options(options);  // (before the passes, as the other overload: the same errors first)
  verify(tape);
  return detail::compile_verified(cleanup_traced(tape), options);
}

CompiledFunction compile(Tape&& tape, const CompileOptions& options) {
  check_options(options);
  verify(tape);
  return detail::compile_verified(std::move(tape), options);
}

CompiledFunction detail::compile_verified(Tape&& tape, const CompileOptions& options) {
#ifndef NDEBUG
  verify("compile", tape);  // (a debug build verifies it all the same)
#endif
  // The thread pool is set up here (REEL_NUM_THREADS read), not in a call of the
  // compiled code.
  num_threads();
  check_options(options);
  Planned p = scheduled(codegen::plan_verified(std::move(tape), options.reuse_memory), options);
  auto impl = std::make_shared<CompiledFunction::Impl>();
  impl->options = options;
  for (Var o : p.tape.outputs) impl->output_types.push_back(p.tape.type(o));
  impl->input_types = p.tape.input_types();
  impl->workspace_bytes = p.memory.workspace_bytes;
  impl->workspace_lower_bound = p.memory.lower_bound;

  std::vector<codegen::KernelCode> kernels;
  {
    auto& jit = codegen::Jit::get();
    std::lock_guard<std::recursive_mutex> lock(jit.mutex());
    kernels = codegen::get_kernels(p.schedule.kernels, options, impl->kernels_compiled);
  }
  bind_steps(*impl, std::move(p.schedule), kernels);
  // A step that may throw must not unwind through JIT code: such schedules always run
  // through the loop.
  if (!impl->program->may_throw && use_driver(options.runner)) {
    std::lock_guard<std::recursive_mutex> lock(codegen::Jit::get().mutex());
    codegen::DriverCode d = codegen::make_driver(impl->program->calls);
    impl->driver = d.fn;
    impl->code.push_back(std::move(d.code));
  }
  impl->tape = std::move(p.tape);
  if (std::getenv("REEL_DUMP_IR") != nullptr) {
    std::lock_guard<std::recursive_mutex> lock(codegen::Jit::get().mutex());
    fmt::print(stderr, "{}\n", ir_text(impl->kernels, options, impl->quick));
  }
  CompiledFunction f;
  f.impl_ = std::move(impl);
  return f;
}

std::vector<Tensor> CompiledFunction::operator()(const std::vector<Tensor>& args) const {
  std::vector<const Tensor*> pointers(args.size());
  for (std::size_t i = 0; i < args.size(); ++i) pointers[i] = &args[i];
  std::vector<Tensor> outputs(num_outputs());
  run(pointers, outputs);
  return outputs;
}

void CompiledFunction::run(std::span<const Tensor* const> args, std::span<Tensor> outputs) const {
  run_steps(args, outputs, false);
}

namespace {
void check_holders(std::size_t outputs, std::size_t holders) {
  if (holders != outputs)
    throw Error(fmt::format("compiled function: expected a holder count per output ({}), got {}", outputs, holders));
}
}  // namespace

void CompiledFunction::run(std::span<const Tensor* const> args, std::span<Tensor> outputs,
                           std::span<const int> holders) const {
  check_holders(outputs.size(), holders.size());
  run_steps(args, outputs, false, holders);
}

void CompiledFunction::run(std::span<const Tensor* const> args, std::span<Tensor* const> outputs,
                           std::span<const int> holders) const {
  check_holders(outputs.size(), holders.size());
  // Each output a tensor of its own: compared pair by pair for a few, else sorted on the
  // stack (no allocation on the hot path up to kInline outputs; a Hessian of 7
  // arguments has 57).
  bool twice = false;
  if (outputs.size() <= 8) {
    for (std::size_t k = 0; k < outputs.size(); ++k)
      for (std::size_t j = k + 1; j < outputs.size(); ++j) twice |= outputs[k] == outputs[j];
  } else {
    constexpr std::size_t kInline = 64;
    const Tensor* small[kInline];
    std::vector<const Tensor*> big;
    const Tensor** sorted = small;
    if (outputs.size() > kInline) sorted = (big.resize(outputs.size()), big.data());
    std::copy(outputs.begin(), outputs.end(), sorted);
    std::sort(sorted, sorted + outputs.size());
    twice = std::adjacent_find(sorted, sorted + outputs.size()) != sorted + outputs.size();
  }
  if (std::find(outputs.begin(), outputs.end(), nullptr) != outputs.end())
    throw Error("compiled function: expected a tensor to write each output into, got a null pointer");
  if (twice)
    throw Error("compiled function: expected a different tensor for each output, got one tensor for two outputs");
  run_steps(args, outputs, false, holders);
}

// The outputs by pointer (on the stack for a few).
void CompiledFunction::run_steps(std::span<const Tensor* const> args, std::span<Tensor> outputs, bool timed,
                                 std::span<const int> holders) const {
  constexpr std::size_t kInline = 16;
  Tensor* small[kInline];
  std::vector<Tensor*> big;
  Tensor** to = small;
  if (outputs.size() > kInline) to = (big.resize(outputs.size()), big.data());
  for (std::size_t k = 0; k < outputs.size(); ++k) to[k] = &outputs[k];
  run_steps(args, std::span<Tensor* const>(to, outputs.size()), timed, holders);
}

namespace {
// The step times CompiledFunction::profile gathers (on its own thread only).
thread_local std::vector<double>* step_seconds = nullptr;
}  // namespace

std::string CompiledFunction::profile(const std::vector<Tensor>& args, int runs) const {
  const Impl& impl = checked();
  if (runs < 1) throw Error(fmt::format("profile: expected at least 1 run, got {}", runs));
  std::vector<const Tensor*> pointers;
  for (const Tensor& a : args) pointers.push_back(&a);
  std::vector<Tensor> outputs(num_outputs());
  run_steps(pointers, outputs, false);  // (checks the arguments; warms caches and the pool)
  std::vector<double> seconds;
  // (A step may itself profile another function: the outer table is restored after.)
  struct Restore {
    std::vector<double>* previous;
    ~Restore() { step_seconds = previous; }
  } restore{step_seconds};
  for (int r = 0; r < runs; ++r) {
    for (Tensor& o : outputs) o = Tensor();
    step_seconds = &seconds;
    run_steps(pointers, outputs, true);
  }
  std::vector<std::string> keys;
  for (const codegen::KernelSpec& k : impl.kernels) keys.push_back(k.key);
  double total = 0;
  for (double s : seconds) total += s;
  std::vector<std::size_t> order(seconds.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return seconds[a] > seconds[b]; });
  std::string text = fmt::format("{} steps, {:.1f} us per call (mean of {} runs, step by step)\n", seconds.size(),
                                 total / runs * 1e6, runs);
  for (std::size_t i : order)
    text += fmt::format("  step {:>4}: {:>10.1f} us {:>5.1f}%  {}\n", i, seconds[i] / runs * 1e6,
                        total > 0 ? 100 * seconds[i] / total : 0.0,
                        codegen::describe_step(impl.program->steps[i], keys));
  return text;
}

void CompiledFunction::run_steps(std::span<const Tensor* const> args, std::span<Tensor* const> outputs, bool timed,
                                 std::span<const int> holders) const {
  const Impl& impl = checked();
  // The common case checked inline; on a mismatch, the shared check builds the message.
  bool ok = args.size() == impl.input_types.size();
  for (std::size_t i = 0; ok && i < args.size(); ++i)
    ok = args[i]->defined() && args[i]->dtype() == impl.input_types[i].dtype &&
         same_shape(args[i]->shape(), impl.input_types[i].shape);
  if (!ok) {
    std::vector<Tensor> copies;
    for (const Tensor* a : args) copies.push_back(*a);
    check_args("compiled function", impl.input_types, copies);
  }
  detail::check_unrecorded_args(args, detail::Unrecorded::compiled);
  if (outputs.size() != impl.output_types.size())
    throw Error(fmt::format("compiled function: expected room for {} outputs, got {}",
                            impl.output_types.size(), outputs.size()));
  // The bases table: workspace, constant pool, inputs, outputs. On the stack for
  // small signatures; no other allocation than the outputs' memory.
  const std::size_t num_bases = codegen::kFirstInputBase + args.size() + outputs.size();
  constexpr std::size_t kInline = 32;
  void* small[kInline];
  std::vector<void*> big;
  void** bases = small;
  if (num_bases > kInline) bases = (big.resize(num_bases), big.data());

  // Empty slots (the usual case) are filled directly. A slot that holds a tensor of the
  // right type which nothing else shares, and that is none of the arguments, is
  // written in place (a caller's kept results). Any other filled slot may hold one of
  // the arguments (x = f(x)), whose memory must outlive the call: its new output is
  // made aside and handed over after it.
  const auto reusable = [&](std::size_t k) {
    const Tensor& o = *outputs[k];
    const VarType& type = impl.output_types[k];
    if (!o.defined() || o.dtype() != type.dtype || !same_shape(o.shape(), type.shape) ||
        !o.unshared(holders.empty() ? 1 : holders[k]))
      return false;
    const auto* lo = static_cast<const unsigned char*>(o.raw());
    for (const Tensor* a : args) {
      const auto* alo = static_cast<const unsigned char*>(a->raw());
      if (alo < lo + o.nbytes() && lo < alo + a->nbytes()) return false;
    }
    return true;
  };
  bool direct = true;  // every slot empty or reused
  for (std::size_t k = 0; direct && k < outputs.size(); ++k)
    direct = !outputs[k]->defined() || reusable(k);
  std::vector<Tensor> staged;
  auto result = [&](std::size_t k) -> Tensor& { return direct ? *outputs[k] : staged[k]; };
  if (!direct) {
    staged.resize(outputs.size());
    for (std::size_t k = 0; k < outputs.size(); ++k)
      if (reusable(k)) staged[k] = std::move(*outputs[k]);
  }

  const codegen::Program& program = *impl.program;
  const codegen::WorkspaceLease workspace(impl.workspace_bytes, program.may_throw);
  bases[codegen::kWorkspaceBase] = workspace.data();
  bases[codegen::kConstantBase] = const_cast<void*>(program.constant_pool.raw());
  // Kernels may assume 64-byte-aligned buffers; a tensor made by Tensor::borrow need
  // not be one, and is then copied (the only case that copies an argument).
  std::vector<Tensor> aligned;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const void* p = args[i]->raw();
    if (reinterpret_cast<std::uintptr_t>(p) % 64 != 0) {
      if (aligned.empty()) aligned.reserve(args.size());
      aligned.emplace_back(args[i]->dtype(), args[i]->shape());
      if (args[i]->nbytes() > 0) std::memcpy(aligned.back().mutable_raw(), p, args[i]->nbytes());
      p = aligned.back().raw();
    }
    bases[codegen::kFirstInputBase + i] = const_cast<void*>(p);
  }
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    Tensor& r = result(k);
    if (!r.defined()) r = Tensor(impl.output_types[k].dtype, impl.output_types[k].shape);
    bases[codegen::kFirstInputBase + args.size() + k] = r.mutable_raw();
  }
  if (impl.driver != nullptr && !timed) {
    impl.driver(bases);
  } else {
    try {
      if (timed) {
        std::vector<double>& seconds = *step_seconds;  // (a nested profile may reset the pointer)
        program.run_timed(bases, seconds);
      }
      else program.run(bases);
    } catch (...) {  // an external step threw: leave no half-computed outputs behind
      for (std::size_t k = 0; k < outputs.size(); ++k) result(k) = Tensor();
      throw;
    }
  }
  // (Swapped, so the slots' old tensors go with `staged`, once every slot is written.)
  if (!direct)
    for (std::size_t k = 0; k < outputs.size(); ++k) std::swap(*outputs[k], staged[k]);
}

const CompiledFunction::Impl& CompiledFunction::checked() const {
  if (!impl_) throw Error("compiled function: this CompiledFunction is empty (not made by reel::compile)");
  return *impl_;
}

std::size_t CompiledFunction::num_outputs() const { return checked().output_types.size(); }
const Tape& CompiledFunction::tape() const { return checked().tape; }
int64_t CompiledFunction::workspace_bytes() const { return checked().workspace_bytes; }
int64_t CompiledFunction::workspace_lower_bound() const { return checked().workspace_lower_bound; }
std::size_t CompiledFunction::num_steps() const { return checked().program->calls.size(); }
bool CompiledFunction::uses_driver() const { return checked().driver != nullptr; }
bool CompiledFunction::calls_out() const { return checked().program->calls_out; }
std::size_t CompiledFunction::num_kernels() const { return checked().kernels.size(); }
int CompiledFunction::kernels_compiled() const { return checked().kernels_compiled; }
const std::string& CompiledFunction::llvm_ir() const {
  const Impl& impl = checked();
  std::call_once(impl.ir_once, [&] {
    std::lock_guard<std::recursive_mutex> lock(codegen::Jit::get().mutex());
    impl.ir = codegen::kernels_ir(impl.kernels, impl.options, impl.quick).after;
  });
  return impl.ir;
}

std::string dump_ir(const Tape& tape, const CompileOptions& options) {
  const Planned p = plan_tape(tape, options);
  std::lock_guard<std::recursive_mutex> lock(codegen::Jit::get().mutex());
  return ir_text(p.schedule.kernels, options);
}

std::string plan_text(const Tape& tape, const CompileOptions& options) {
  const Planned p = plan_tape(tape, options);
  std::string text = codegen::plan_text(p.tape, p.plan, p.memory);
  std::string chunks;
  for (const codegen::StepArgs& s : p.schedule.program->steps)
    if (const auto* k = std::get_if<codegen::ParallelKernelArgs>(&s)) {
      const std::string& key = p.schedule.kernels[static_cast<std::size_t>(k->kernel)].key;
      chunks += fmt::format("  {} kernel {}: {} outer iterations in {} chunks of {}\n", key.substr(0, key.find(' ')),
                            k->kernel, k->extent, (k->extent + k->chunk - 1) / k->chunk, k->chunk);
    }
  if (!chunks.empty()) text += "threads: kernels run in chunks on the thread pool\n" + chunks;
  const std::vector<std::vector<int>> groups = codegen::concurrent_groups(p.tape, p.plan, options.chunk_elements);
  if (!groups.empty()) text += "threads: independent steps run at the same time\n";
  for (const std::vector<int>& g : groups) text += fmt::format("  steps {}\n", fmt::join(g, ", "));
  return text;
}

std::string plan_dot(const Tape& tape, const CompileOptions& options, DotOptions dot) {
  const Planned p = plan_tape(tape, options);
  for (std::size_t s = 0; s < p.plan.steps.size(); ++s)
    if (const auto* loop = std::get_if<codegen::LoopStep>(&p.plan.steps[s]))
      dot.clusters.push_back({fmt::format("step {}: loop {} over {}", s, dtype_name(p.tape.type(loop->members[0]).dtype),
                                          shape_str(loop->shape)),
                              [&] {
                                std::vector<Var> vars = loop->members;
                                vars.insert(vars.end(), loop->reductions.begin(), loop->reductions.end());
                                return vars;
                              }()});
  return to_dot(p.tape, dot);
}

std::string jit_cpu() { return codegen::Jit::get().cpu(); }

}  // namespace reel
