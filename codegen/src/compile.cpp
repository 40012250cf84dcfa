#include "reel/compile.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "jit.hpp"
#include "kernel.hpp"
#include "kernel_cache.hpp"
#include "memory_plan.hpp"
#include "plan.hpp"
#include "reel/blas.hpp"
#include "reel/passes.hpp"

namespace reel {

using StepFn = codegen::KernelFn;

struct CompiledFunction::Impl {
  Tape tape;
  CompileOptions options;
  std::vector<VarType> input_types;
  std::vector<VarType> output_types;
  Tensor constant_pool;  // every constant, each at a 64-byte-aligned offset
  std::vector<int64_t> refs;
  struct Call {
    StepFn fn;
    const int64_t* refs;
  };
  std::vector<Call> calls;  // the schedule
  codegen::DriverFn driver = nullptr;  // runs `calls` in order, when chosen
  bool has_extern = false;             // some step calls an eager function
  std::vector<codegen::KernelSpec> kernels;
  std::vector<codegen::ExternCall> externs;  // never resized after compile: steps point in
  std::vector<std::shared_ptr<void>> code;  // keeps the kernels' code alive
  int kernels_compiled = 0;
  int64_t workspace_bytes = 0, workspace_lower_bound = 0;
  mutable std::once_flag ir_once;
  mutable std::string ir;
};

namespace {

// The steps that are not kernels: C++ functions of the same signature.
template <class T>
T* at(void* const* bases, const int64_t* ref) {
  return reinterpret_cast<T*>(static_cast<char*>(bases[ref[0]]) + ref[1]);
}
template <class T>
void gemm_step(void* const* bases, const int64_t* r) {
  // refs: a, b, c, trans_a, trans_b, m, n, k, lda, ldb, ldc
  if constexpr (std::is_same_v<T, double>)
    reel_rt_gemm_f64(static_cast<int32_t>(r[6]), static_cast<int32_t>(r[7]), r[8], r[9], r[10],
                     at<double>(bases, r), r[11], at<double>(bases, r + 2), r[12], at<double>(bases, r + 4), r[13]);
  else
    reel_rt_gemm_f32(static_cast<int32_t>(r[6]), static_cast<int32_t>(r[7]), r[8], r[9], r[10],
                     at<float>(bases, r), r[11], at<float>(bases, r + 2), r[12], at<float>(bases, r + 4), r[13]);
}
template <class T>
void gemv_step(void* const* bases, const int64_t* r) {
  // refs: a, x, y, trans_a, rows, cols
  if constexpr (std::is_same_v<T, double>)
    reel_rt_gemv_f64(static_cast<int32_t>(r[6]), r[7], r[8], at<double>(bases, r), at<double>(bases, r + 2),
                     at<double>(bases, r + 4));
  else
    reel_rt_gemv_f32(static_cast<int32_t>(r[6]), r[7], r[8], at<float>(bases, r), at<float>(bases, r + 2),
                     at<float>(bases, r + 4));
}
void copy_step(void* const* bases, const int64_t* r) {
  // refs: from, to, bytes
  if (r[4] > 0) std::memcpy(at<char>(bases, r + 2), at<char>(bases, r), static_cast<std::size_t>(r[4]));
}

// refs: n, n argument refs, k, k result refs, then the ExternCall's address.
void extern_step(void* const* bases, const int64_t* r) {
  const int64_t n = r[0], k = r[1 + 2 * n];
  const int64_t* result_refs = r + 2 + 2 * n;
  const auto& call = *reinterpret_cast<const codegen::ExternCall*>(result_refs[2 * k]);
  // The eager function gets tensors of its own (copies), which it may keep: views of
  // the workspace would change under it after the call.
  std::vector<Tensor> args;
  args.reserve(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const VarType& t = call.args[static_cast<std::size_t>(i)];
    args.emplace_back(t.dtype, t.shape);
    if (args.back().nbytes() > 0)
      std::memcpy(args.back().mutable_raw(), at<void>(bases, r + 1 + 2 * i), args.back().nbytes());
  }
  std::vector<Tensor> outs;
  try {
    outs = call.prim->eager(args, call.attrs);
  } catch (const GuardFailure& e) {  // name the guard
    throw GuardFailure(fmt::format("compiled {}: {}", call.label, e.what()));
  }
  check_result_count(*call.prim, "the eager function", outs.size());
  for (int64_t i = 0; i < k; ++i) {
    const Tensor& out = outs[static_cast<std::size_t>(i)];
    const VarType& want = call.outs[static_cast<std::size_t>(i)];
    if (!out.defined() || out.dtype() != want.dtype || out.shape() != want.shape)
      throw Error(fmt::format("{}: the eager function made {}{}, the type rule says {}", call.prim->name,
                              out.defined() ? type_str(out.dtype(), out.shape()) : "undefined",
                              k > 1 ? fmt::format(" for result {}", i + 1) : "", type_str(want)));
  }
  for (int64_t i = 0; i < k; ++i) {
    const Tensor& out = outs[static_cast<std::size_t>(i)];
    if (out.nbytes() > 0) std::memcpy(at<void>(bases, result_refs + 2 * i), out.raw(), out.nbytes());
  }
}

// refs: the indices' ref, count, axis length, axis, 1 for scatter_add (else gather).
void check_indices_step(void* const* bases, const int64_t* r) {
  const auto* idx = at<const int64_t>(bases, r);
  const int64_t count = r[2], n = r[3];
  for (int64_t i = 0; i < count; ++i)
    if (idx[i] < 0 || idx[i] >= n)
      throw Error(fmt::format("{}: index {} (element {} of the indices) is out of range for axis {} of length {}",
                              r[5] ? "scatter_add" : "gather", idx[i], i, r[4], n));
}

// refs: the condition's ref, expected (0/1), then the ExternCall's address (its label).
template <class T>
void guard_step(void* const* bases, const int64_t* r) {
  const double v = static_cast<double>(*at<const T>(bases, r));
  const bool truth = v != 0.0, expected = r[2] != 0;
  if (truth != expected) {
    const auto& call = *reinterpret_cast<const codegen::ExternCall*>(r[3]);
    throw GuardFailure(fmt::format("compiled {}: guard: the tape was traced with this condition {}, here it is {} "
                                   "(value {}); trace the other path (reel::jit and reel::simplegrad(f) do)",
                                   call.label, expected ? "true" : "false", truth ? "true" : "false", v));
  }
}

StepFn step_fn(const codegen::ScheduledStep& s) {
  const bool f64 = s.dtype == DType::f64;
  switch (s.kind) {
    case codegen::StepKind::gemm: return f64 ? &gemm_step<double> : &gemm_step<float>;
    case codegen::StepKind::gemv: return f64 ? &gemv_step<double> : &gemv_step<float>;
    case codegen::StepKind::copy: return &copy_step;
    case codegen::StepKind::external: return &extern_step;
    case codegen::StepKind::check_indices: return &check_indices_step;
    case codegen::StepKind::guard:
      return s.dtype == DType::f64 ? &guard_step<double> : s.dtype == DType::f32 ? &guard_step<float> : &guard_step<int64_t>;
    case codegen::StepKind::kernel: break;
  }
  return nullptr;
}

struct Planned {
  Tape tape;
  codegen::Plan plan;
  codegen::MemoryPlan memory;
  codegen::Schedule schedule;
};

// Everything before LLVM: passes, plan, memory plan, schedule.
Planned plan_tape(const Tape& input, const CompileOptions& options) {
  verify(input);
  Planned p;
  p.tape = PassPipeline({"simplify", "cse", "dce"}).run(input);
  p.plan = codegen::make_plan(p.tape);
  p.memory = codegen::plan_memory(p.tape, p.plan, options.reuse_memory);
  p.schedule = codegen::make_schedule(p.tape, p.plan);
  return p;
}

std::string ir_text(const std::vector<codegen::KernelSpec>& kernels, const CompileOptions& options) {
  const codegen::KernelsIr ir = codegen::kernels_ir(kernels, options.vector_math);
  return fmt::format("; ---- before optimisation ----\n{}\n; ---- after optimisation ----\n{}", ir.before,
                     ir.after);
}

// Whether to run the schedule through a generated driver. Measured (bench/: "a loop
// over its steps vs a generated driver", four runs): driver/loop 0.92-1.05 up to 600
// steps with no consistent winner, 1.01-1.20 at 6,000 steps, and 1 ms (1 step) to
// 670 ms (6,000 steps) more compile. So `automatic` is the loop, at every size
// (docs/codegen.md).
bool use_driver(CompileOptions::Runner runner) { return runner == CompileOptions::Runner::driver; }

// Growing, 64-byte-aligned scratch buffers, reused across calls: one per thread and
// nesting depth, since a call may run an eager function (an external step) that calls
// another compiled function on the same thread, which must not write over (or
// reallocate) the outer call's workspace.
struct WorkspaceStack {
  struct Buffer {
    void* data = nullptr;
    int64_t size = 0;
  };
  std::vector<Buffer> buffers;
  std::size_t depth = 0;
  ~WorkspaceStack() {
    for (Buffer& b : buffers) std::free(b.data);
  }
};
thread_local WorkspaceStack t_workspaces;

// Holds this thread's workspace at the current depth for one call. A call that needs
// no workspace touches nothing; one without external steps cannot nest another call
// and does not deepen the stack.
class WorkspaceLease {
 public:
  WorkspaceLease(int64_t bytes, bool may_nest) {
    if (bytes == 0) return;
    WorkspaceStack& stack = t_workspaces;
    if (stack.buffers.size() <= stack.depth) stack.buffers.resize(stack.depth + 1);
    WorkspaceStack::Buffer& buf = stack.buffers[stack.depth];
    if (buf.size < bytes) {
      std::free(buf.data);
      buf.data = nullptr;
      buf.size = 0;
      buf.data = std::aligned_alloc(64, static_cast<std::size_t>((bytes + 63) / 64 * 64));
      if (buf.data == nullptr)
        throw Error(fmt::format("compiled function: cannot allocate a workspace of {} bytes", bytes));
      buf.size = bytes;
    }
    data_ = buf.data;
    if (may_nest) stack_ = &stack, ++stack.depth;
  }
  ~WorkspaceLease() {
    if (stack_ != nullptr) --stack_->depth;
  }
  WorkspaceLease(const WorkspaceLease&) = delete;
  WorkspaceLease& operator=(const WorkspaceLease&) = delete;
  void* data() const { return data_; }

 private:
  WorkspaceStack* stack_ = nullptr;  // set when this call deepened the stack
  void* data_ = nullptr;
};

}  // namespace

CompiledFunction compile(const Tape& tape, const CompileOptions& options) {
  Planned p = plan_tape(tape, options);
  auto impl = std::make_shared<CompiledFunction::Impl>();
  impl->options = options;
  for (Var o : p.tape.outputs) impl->output_types.push_back(p.tape.type(o));
  impl->input_types = p.tape.input_types();
  impl->constant_pool = Tensor(DType::f64, {(p.schedule.constant_pool_bytes + 7) / 8});
  for (std::size_t c = 0; c < p.plan.constants.size(); ++c) {
    const Tensor& value = p.tape.op(p.plan.constants[c]).value;
    std::memcpy(static_cast<char*>(impl->constant_pool.mutable_raw()) + p.schedule.constant_offsets[c],
                value.raw(), value.nbytes());
  }
  impl->workspace_bytes = p.memory.workspace_bytes;
  impl->workspace_lower_bound = p.memory.lower_bound;

  std::vector<codegen::KernelCode> kernels;
  {
    auto& jit = codegen::Jit::get();
    std::lock_guard<std::recursive_mutex> lock(jit.mutex());
    kernels = codegen::get_kernels(p.schedule.kernels, options.vector_math, impl->kernels_compiled);
  }
  for (auto& k : kernels) impl->code.push_back(std::move(k.code));
  std::size_t total_refs = 0;
  for (const auto& s : p.schedule.steps) total_refs += s.refs.size();
  impl->refs.reserve(total_refs);
  for (const auto& s : p.schedule.steps) {
    const StepFn fn = s.kind == codegen::StepKind::kernel ? kernels[static_cast<std::size_t>(s.kernel)].fn : step_fn(s);
    impl->calls.push_back({fn, reinterpret_cast<const int64_t*>(impl->refs.size())});
    impl->refs.insert(impl->refs.end(), s.refs.begin(), s.refs.end());
  }
  impl->externs = std::move(p.schedule.externs);
  for (std::size_t i = 0; i < p.schedule.steps.size(); ++i) {
    // A check step may throw too: such schedules run through the loop (below).
    if (p.schedule.steps[i].kind == codegen::StepKind::check_indices) impl->has_extern = true;
    if (p.schedule.steps[i].kind != codegen::StepKind::external && p.schedule.steps[i].kind != codegen::StepKind::guard)
      continue;
    impl->has_extern = true;  // the last ref: the index of its call -> the call's address
    const std::size_t at = reinterpret_cast<std::size_t>(impl->calls[i].refs) + p.schedule.steps[i].refs.size() - 1;
    impl->refs[at] = reinterpret_cast<int64_t>(&impl->externs[static_cast<std::size_t>(impl->refs[at])]);
  }
  for (auto& c : impl->calls)  // offsets into refs -> pointers, now that refs is final
    c.refs = impl->refs.data() + reinterpret_cast<std::size_t>(c.refs);
  // An external step may throw, and C++ exceptions must not unwind through JIT code:
  // such schedules always run through the loop.
  if (!impl->has_extern && use_driver(options.runner)) {
    std::vector<std::pair<codegen::KernelFn, const int64_t*>> calls;
    for (const auto& c : impl->calls) calls.emplace_back(c.fn, c.refs);
    std::lock_guard<std::recursive_mutex> lock(codegen::Jit::get().mutex());
    codegen::DriverCode d = codegen::make_driver(calls);
    impl->driver = d.fn;
    impl->code.push_back(std::move(d.code));
  }
  impl->kernels = std::move(p.schedule.kernels);
  impl->tape = std::move(p.tape);
  if (std::getenv("REEL_DUMP_IR") != nullptr) {
    std::lock_guard<std::recursive_mutex> lock(codegen::Jit::get().mutex());
    fmt::print(stderr, "{}\n", ir_text(impl->kernels, options));
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
  const Impl& impl = checked();
  // The common case checked inline; on a mismatch, the shared check builds the message.
  bool ok = args.size() == impl.input_types.size();
  for (std::size_t i = 0; ok && i < args.size(); ++i)
    ok = args[i]->defined() && args[i]->dtype() == impl.input_types[i].dtype &&
         args[i]->shape() == impl.input_types[i].shape;
  if (!ok) {
    std::vector<Tensor> copies;
    for (const Tensor* a : args) copies.push_back(*a);
    check_args("compiled function", impl.input_types, copies);
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i]->is_tracked())
      throw Error(fmt::format("compiled function: argument {} is a param or computed from one, and compiled code "
                              "does not record operations for reel::back; pass reel::detach(x) (its values), or "
                              "call the function itself",
                              i + 1));
    if (detail::in_foreign_trace(*args[i]))
      throw Error(fmt::format("compiled function: argument {} belongs to {}", i + 1, detail::kForeignTrace));
    if (detail::in_active_trace(*args[i]))
      throw Error(fmt::format(
          "compiled function: argument {} is being traced, and native code cannot be recorded "
          "on a tape; inside a traced function call reel::play(f.tape(), args) instead",
          i + 1));
  }
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

  // An output slot that already holds a tensor may hold one of the arguments
  // (x = f(x)), whose memory must outlive the call: then the new outputs are made
  // aside and handed over after it. Empty slots (the usual case) are filled directly.
  bool empty_slots = true;
  for (const Tensor& o : outputs) empty_slots = empty_slots && !o.defined();
  std::vector<Tensor> staged;
  Tensor* result = outputs.data();
  if (!empty_slots) result = (staged.resize(outputs.size()), staged.data());

  const WorkspaceLease workspace(impl.workspace_bytes, impl.has_extern);
  bases[codegen::kWorkspaceBase] = workspace.data();
  bases[codegen::kConstantBase] = const_cast<void*>(impl.constant_pool.raw());
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
    result[k] = Tensor(impl.output_types[k].dtype, impl.output_types[k].shape);
    bases[codegen::kFirstInputBase + args.size() + k] = result[k].mutable_raw();
  }
  if (impl.driver != nullptr) {
    impl.driver(bases);
  } else {
    try {
      for (const Impl::Call& c : impl.calls) c.fn(bases, c.refs);
    } catch (...) {  // an external step threw: leave no half-computed outputs behind
      for (std::size_t k = 0; k < outputs.size(); ++k) result[k] = Tensor();
      throw;
    }
  }
  if (!empty_slots)
    for (std::size_t k = 0; k < outputs.size(); ++k) outputs[k] = std::move(staged[k]);
}

const CompiledFunction::Impl& CompiledFunction::checked() const {
  if (!impl_) throw Error("compiled function: this CompiledFunction is empty (not made by reel::compile)");
  return *impl_;
}

std::size_t CompiledFunction::num_outputs() const { return checked().output_types.size(); }
const Tape& CompiledFunction::tape() const { return checked().tape; }
int64_t CompiledFunction::workspace_bytes() const { return checked().workspace_bytes; }
int64_t CompiledFunction::workspace_lower_bound() const { return checked().workspace_lower_bound; }
std::size_t CompiledFunction::num_steps() const { return checked().calls.size(); }
bool CompiledFunction::uses_driver() const { return checked().driver != nullptr; }
std::size_t CompiledFunction::num_kernels() const { return checked().kernels.size(); }
int CompiledFunction::kernels_compiled() const { return checked().kernels_compiled; }
const std::string& CompiledFunction::llvm_ir() const {
  const Impl& impl = checked();
  std::call_once(impl.ir_once, [&] {
    std::lock_guard<std::recursive_mutex> lock(codegen::Jit::get().mutex());
    impl.ir = codegen::kernels_ir(impl.kernels, impl.options.vector_math).after;
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
  return codegen::plan_text(p.tape, p.plan, p.memory);
}

std::string jit_cpu() { return codegen::Jit::get().cpu(); }

}  // namespace reel
