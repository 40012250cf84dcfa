#include "reel/compile.hpp"

#include <fmt/format.h>
#include <llvm/Support/raw_ostream.h>

#include <atomic>
#include <cstdlib>

#include "emit.hpp"
#include "jit.hpp"
#include "plan.hpp"
#include "reel/passes.hpp"
#include "reel/trace.hpp"

namespace reel {

using EntryFn = void (*)(const void* const*, void* const*, const void* const*, void*);

struct CompiledFunction::Impl {
  Tape tape;
  std::vector<VarType> input_types;
  std::vector<VarType> output_types;
  std::vector<Tensor> constants;
  std::vector<const void*> constant_ptrs;
  int64_t workspace_bytes = 0;
  std::string ir;
  EntryFn entry = nullptr;
  std::shared_ptr<void> code;  // frees the JIT code
};

namespace {

std::string print(const llvm::Module& m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  return os.str();
}

struct Lowered {
  Tape tape;
  codegen::Plan plan;
  std::string name;
  std::unique_ptr<llvm::LLVMContext> context;
  std::unique_ptr<llvm::Module> module;
  std::string before, after;
};

// Everything but adding to the JIT. Call with the JIT's mutex held.
Lowered lower(const Tape& input, const CompileOptions& options, bool keep_text) {
  static std::atomic<uint64_t> counter{0};
  auto& jit = codegen::Jit::get();
  Lowered l;
  verify(input);
  l.tape = PassPipeline({"simplify", "cse", "dce"}).run(input);
  l.plan = codegen::make_plan(l.tape);
  l.name = fmt::format("reel_fn_{}", counter++);
  l.context = std::make_unique<llvm::LLVMContext>();
  l.module = codegen::emit_module(*l.context, l.tape, l.plan, l.name, jit.data_layout(), jit.triple());
  if (keep_text) l.before = print(*l.module);
  jit.optimize(*l.module, options.vector_math);
  l.after = print(*l.module);
  return l;
}

// One growing, 64-byte-aligned scratch buffer per thread, reused across calls.
void* thread_workspace(int64_t bytes) {
  struct Buffer {
    void* data = nullptr;
    int64_t size = 0;
    ~Buffer() { std::free(data); }
  };
  thread_local Buffer buf;
  if (buf.size < bytes) {
    std::free(buf.data);
    buf.data = std::aligned_alloc(64, static_cast<std::size_t>((bytes + 63) / 64 * 64));
    if (buf.data == nullptr) throw Error(fmt::format("compiled function: cannot allocate {} bytes", bytes));
    buf.size = bytes;
  }
  return buf.data;
}

}  // namespace

CompiledFunction compile(const Tape& tape, const CompileOptions& options) {
  auto& jit = codegen::Jit::get();
  std::lock_guard<std::mutex> lock(jit.mutex());
  const bool dump = std::getenv("REEL_DUMP_IR") != nullptr;
  Lowered l = lower(tape, options, dump);
  if (dump)
    fmt::print(stderr, "; ---- {} before optimisation ----\n{}\n; ---- {} after optimisation ----\n{}\n",
               l.name, l.before, l.name, l.after);

  auto impl = std::make_shared<CompiledFunction::Impl>();
  for (Var o : l.tape.outputs) impl->output_types.push_back(l.tape.type(o));
  impl->input_types = l.tape.input_types();
  for (Var c : l.plan.constants) {
    impl->constants.push_back(l.tape.op(c).value);
    impl->constant_ptrs.push_back(impl->constants.back().raw());
  }
  impl->workspace_bytes = l.plan.workspace_bytes;
  impl->ir = std::move(l.after);
  auto added = jit.add(std::move(l.module), std::move(l.context), l.name);
  impl->entry = reinterpret_cast<EntryFn>(added.address);
  impl->code = std::move(added.handle);
  impl->tape = std::move(l.tape);
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
  for (std::size_t i = 0; i < args.size(); ++i)
    if (is_traced(*args[i]))
      throw Error(fmt::format(
          "compiled function: argument {} is being traced, and native code cannot be recorded "
          "on a tape; inside a traced function call reel::play(f.tape(), args) instead",
          i + 1));
  if (outputs.size() != impl.output_types.size())
    throw Error(fmt::format("compiled function: expected room for {} outputs, got {}",
                            impl.output_types.size(), outputs.size()));
  constexpr std::size_t kInline = 16;  // pointer tables on the stack for small signatures
  const void* in_small[kInline];
  void* out_small[kInline];
  std::vector<const void*> in_big;
  std::vector<void*> out_big;
  const void** in = in_small;
  void** out = out_small;
  if (args.size() > kInline) in = (in_big.resize(args.size()), in_big.data());
  if (outputs.size() > kInline) out = (out_big.resize(outputs.size()), out_big.data());

  // An output slot that already holds a tensor may hold one of the arguments
  // (x = f(x)), whose memory must outlive the call: then the new outputs are made
  // aside and handed over after it. Empty slots (the usual case) are filled directly.
  bool empty_slots = true;
  for (const Tensor& o : outputs) empty_slots = empty_slots && !o.defined();
  std::vector<Tensor> staged;
  Tensor* result = outputs.data();
  if (!empty_slots) result = (staged.resize(outputs.size()), staged.data());

  for (std::size_t i = 0; i < args.size(); ++i) in[i] = args[i]->raw();
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    result[k] = Tensor(impl.output_types[k].dtype, impl.output_types[k].shape);
    out[k] = result[k].mutable_raw();
  }
  impl.entry(in, out, impl.constant_ptrs.data(), thread_workspace(impl.workspace_bytes));
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
const std::string& CompiledFunction::llvm_ir() const { return checked().ir; }

std::string dump_ir(const Tape& tape, const CompileOptions& options) {
  auto& jit = codegen::Jit::get();
  std::lock_guard<std::mutex> lock(jit.mutex());
  Lowered l = lower(tape, options, true);
  return fmt::format("; ---- before optimisation ----\n{}\n; ---- after optimisation ----\n{}",
                     l.before, l.after);
}

std::string jit_cpu() { return codegen::Jit::get().cpu(); }

}  // namespace reel
