#include "jit.hpp"

#include <fmt/format.h>
#include <llvm/Analysis/CFG.h>
#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm-c/Core.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Transforms/Scalar/EarlyCSE.h>
#include <llvm/Transforms/Scalar/SROA.h>
#include <llvm/Transforms/Scalar/SimplifyCFG.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>

#include <dlfcn.h>

#include <unordered_map>

#include "codegen_source_hash.hpp"  // generated: REEL_CODEGEN_SOURCE_HASH
#include "reel/error.hpp"

namespace reel::codegen {

namespace {

std::string message(llvm::Error e) { return llvm::toString(std::move(e)); }

template <class T>
T unwrap(llvm::Expected<T> v, const char* what) {
  if (!v) throw Error(fmt::format("compile: {}: {}", what, message(v.takeError())));
  return std::move(*v);
}

// glibc (2.35 and later) has vector forms LLVM 19's LIBMVEC_X86 table does not list:
// tanh at every width, and the AVX-512 ('e') forms of the others. Names must outlive
// the TargetLibraryInfoImpl, hence string literals.
enum class Isa { sse, avx2, avx512 };
struct VectorForm {
  const char* scalar;
  const char* vector;
  unsigned width;
  const char* abi;
  Isa isa;
};
constexpr VectorForm kLibmvecExtras[] = {
    {"tanh", "_ZGVbN2v_tanh", 2, "_ZGV_LLVM_N2v", Isa::sse},
    {"tanhf", "_ZGVbN4v_tanhf", 4, "_ZGV_LLVM_N4v", Isa::sse},
    {"tanh", "_ZGVdN4v_tanh", 4, "_ZGV_LLVM_N4v", Isa::avx2},
    {"tanhf", "_ZGVdN8v_tanhf", 8, "_ZGV_LLVM_N8v", Isa::avx2},
    {"tanh", "_ZGVeN8v_tanh", 8, "_ZGV_LLVM_N8v", Isa::avx512},
    {"tanhf", "_ZGVeN16v_tanhf", 16, "_ZGV_LLVM_N16v", Isa::avx512},
    {"llvm.exp.f64", "_ZGVeN8v_exp", 8, "_ZGV_LLVM_N8v", Isa::avx512},
    {"llvm.exp.f32", "_ZGVeN16v_expf", 16, "_ZGV_LLVM_N16v", Isa::avx512},
    {"llvm.log.f64", "_ZGVeN8v_log", 8, "_ZGV_LLVM_N8v", Isa::avx512},
    {"llvm.log.f32", "_ZGVeN16v_logf", 16, "_ZGV_LLVM_N16v", Isa::avx512},
    {"llvm.sin.f64", "_ZGVeN8v_sin", 8, "_ZGV_LLVM_N8v", Isa::avx512},
    {"llvm.sin.f32", "_ZGVeN16v_sinf", 16, "_ZGV_LLVM_N16v", Isa::avx512},
    {"llvm.cos.f64", "_ZGVeN8v_cos", 8, "_ZGV_LLVM_N8v", Isa::avx512},
    {"llvm.cos.f32", "_ZGVeN16v_cosf", 16, "_ZGV_LLVM_N16v", Isa::avx512},
    {"llvm.pow.f64", "_ZGVeN8vv_pow", 8, "_ZGV_LLVM_N8vv", Isa::avx512},
    {"llvm.pow.f32", "_ZGVeN16vv_powf", 16, "_ZGV_LLVM_N16vv", Isa::avx512},
};

void add_libmvec_extras(llvm::TargetLibraryInfoImpl& tli, bool avx2, bool avx512) {
  std::vector<llvm::VecDesc> forms;
  for (const VectorForm& f : kLibmvecExtras)
    if (f.isa == Isa::sse || (f.isa == Isa::avx2 && avx2) || (f.isa == Isa::avx512 && avx512))
      forms.emplace_back(f.scalar, f.vector, llvm::ElementCount::getFixed(f.width), false, f.abi);
  tli.addVectorizableFunctions(forms);
}

}  // namespace

struct Jit::State {
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::unique_ptr<llvm::TargetMachine> tm;  // for the optimisation pipeline's cost model
  // The quick tier's code generator: a target machine of its own, made at
  // CodeGenOptLevel::None (LLVM sets FastISel on a target machine it generates code
  // with at that level and never unsets it, so one machine cannot serve both tiers).
  std::unique_ptr<llvm::TargetMachine> quick_tm;
  bool avx2 = false, avx512 = false;
  // Each object added by add_object, by symbol prefix, until its code is freed. The
  // same object (the same IR: kernels with different keys can have equal code, e.g.
  // empty loops) is shared while it lives; added again after the last user of the
  // previous copy dropped it but before that copy's release (which waits for the
  // mutex) ran, the new add removes the old copy first, so the symbols never clash.
  struct Object {
    llvm::orc::ResourceTrackerSP tracker;
    std::weak_ptr<void> handle;  // expired: released by its last user (removal may be pending)
    std::vector<void*> addresses;
  };
  std::unordered_map<std::string, Object> objects;
};

Jit& Jit::get() {
  // Never destroyed: compiled functions may outlive static destruction order.
  static Jit* jit = new Jit();
  return *jit;
}

Jit::Jit() : state_(std::make_unique<State>()) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  // The vector math symbols (_ZGV...) the optimiser may call live in libmvec, which
  // nothing else in the process references, so load it for the JIT to resolve them.
  // RTLD_NODELETE first: LLVM's "permanent" libraries are closed by a static destructor
  // at exit, which unmapped libmvec under a thread still running compiled code (a
  // detached thread, a Python daemon thread) and crashed the exit (issue 33).
  if (dlopen("libmvec.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE) == nullptr)
    throw Error(fmt::format("compile: cannot load libmvec.so.1: {}", dlerror()));
  std::string err;
  if (llvm::sys::DynamicLibrary::LoadLibraryPermanently("libmvec.so.1", &err))
    throw Error(fmt::format("compile: cannot load libmvec.so.1: {}", err));

  auto jtmb = unwrap(llvm::orc::JITTargetMachineBuilder::detectHost(), "detecting the host CPU");
  jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  // Fixed here, as objects made by emit_object must link the same way in any process.
  jtmb.setRelocationModel(llvm::Reloc::PIC_);
  jtmb.setCodeModel(llvm::CodeModel::Small);
  for (const std::string& f : jtmb.getFeatures().getFeatures()) {
    state_->avx2 |= f == "+avx2";
    state_->avx512 |= f == "+avx512f";
  }
  cpu_ = jtmb.getCPU();
  features_ = jtmb.getFeatures().getString();
  triple_ = jtmb.getTargetTriple().str();
  state_->tm = unwrap(jtmb.createTargetMachine(), "creating the target machine");
  {
    llvm::orc::JITTargetMachineBuilder quick = jtmb;
    quick.setCodeGenOptLevel(llvm::CodeGenOptLevel::None);
    state_->quick_tm = unwrap(quick.createTargetMachine(), "creating the target machine");
  }
  state_->jit = unwrap(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(jtmb).create(),
                       "creating the JIT");

  auto& jd = state_->jit->getMainJITDylib();
  const char prefix = state_->jit->getDataLayout().getGlobalPrefix();
  jd.addGenerator(unwrap(
      llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(prefix), "process symbols"));
}

const llvm::DataLayout& Jit::data_layout() const { return state_->jit->getDataLayout(); }

bool Jit::straight_line(const llvm::Function& f) {
  llvm::SmallVector<std::pair<const llvm::BasicBlock*, const llvm::BasicBlock*>, 4> back_edges;
  llvm::FindFunctionBackedges(f, back_edges);
  return back_edges.empty();
}

void Jit::optimize(llvm::Module& module, bool vector_math, Tier tier) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = true;
  pto.SLPVectorization = true;
  pto.LoopUnrolling = true;  // kernels/emitter.cpp disables it on long loops (see there)
  llvm::PassBuilder pb(state_->tm.get(), pto);

  llvm::TargetLibraryInfoImpl tli(llvm::Triple(module.getTargetTriple()));
  // libmvec's names are x86's vector ABI; elsewhere loops keep scalar calls.
  if (vector_math && llvm::Triple(module.getTargetTriple()).getArch() == llvm::Triple::x86_64) {
    tli.addVectorizableFunctionsFromVecLib(llvm::TargetLibraryInfoImpl::LIBMVEC_X86,
                                           llvm::Triple(module.getTargetTriple()));
    add_libmvec_extras(tli, state_->avx2, state_->avx512);
  }
  fam.registerPass([&] { return llvm::TargetLibraryAnalysis(tli); });

  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  if (tier == Tier::full) {
    pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(module, mam);
    return;
  }
  // A quick-tier kernel is one function: its body was moved into its entry when it was
  // emitted (emit.hpp, merge_body), not inlined here (the always-inliner's copy of every
  // body was a tenth of a cold compile of a 10^5-operation scalar gradient).
  llvm::ModulePassManager mpm;
  // Straight-line kernels need their accumulators in registers (SROA), the values
  // computed twice computed once (EarlyCSE) and the blocks merged: O1's
  // whole function simplification pipeline cost 7% more of a 10^5-operation scalar
  // gradient's compile (farm-bench, 10 pairs) for no faster code (docs/codegen.md).
  llvm::FunctionPassManager fpm;
  fpm.addPass(llvm::SROAPass(llvm::SROAOptions::PreserveCFG));
  fpm.addPass(llvm::EarlyCSEPass());
  fpm.addPass(llvm::SimplifyCFGPass());
  mpm.addPass(llvm::createModuleToFunctionPassAdaptor(std::move(fpm)));
  mpm.run(module, mam);
}

std::string Jit::descriptor(bool vector_math) const {
  // What turns a kernel's key into machine code besides LLVM: the emitters, the element
  // operations' definitions, this file (the optimisation pipeline, the target settings,
  // libmvec's table) and the kernel cache, by a hash of their sources made at build time
  // (codegen/CMakeLists.txt); and LLVM's version as linked (a distribution update of
  // the shared library changes it without changing the headers).
  unsigned major = 0, minor = 0, patch = 0;
  LLVMGetVersion(&major, &minor, &patch);
  return fmt::format("reel {} codegen {}; llvm {} ({}.{}.{} linked); {}; cpu {}; features {}; vector math {}",
                     REEL_VERSION, REEL_CODEGEN_SOURCE_HASH, LLVM_VERSION_STRING, major, minor, patch, triple_, cpu_,
                     features_, vector_math ? 1 : 0);
}

std::string Jit::emit_object(llvm::Module& module, Tier tier) {
  if (state_->tm->Options.EnableFastISel)  // (the quick tier's setting, leaked: see State::quick_tm)
    throw Error("compile: internal error: the full tier's target machine has FastISel on");
  llvm::orc::SimpleCompiler compiler(tier == Tier::full ? *state_->tm : *state_->quick_tm);
  auto object = unwrap(compiler(module), "generating machine code");
  return std::string(object->getBuffer());
}

std::optional<Jit::Added> Jit::live_object(const std::string& prefix) {
  auto it = state_->objects.find(prefix);
  if (it == state_->objects.end()) return std::nullopt;
  std::shared_ptr<void> handle = it->second.handle.lock();
  if (handle.use_count() == 0) return std::nullopt;  // (the handle's pointer is null)
  return Added{it->second.addresses, std::move(handle)};
}

Jit::Added Jit::add_object(const std::string& object, const std::string& prefix,
                           const std::vector<std::string>& functions) {
  if (std::optional<Added> live = live_object(prefix)) return *live;
  auto& jit = *state_->jit;
  auto& objects = state_->objects;
  if (auto it = objects.find(prefix); it != objects.end()) {  // released, its removal pending
    llvm::consumeError(it->second.tracker->remove());
    objects.erase(it);
  }
  llvm::orc::ResourceTrackerSP tracker = jit.getMainJITDylib().createResourceTracker();
  auto forget = [this, tracker, prefix] {
    auto& objects = state_->objects;
    if (auto it = objects.find(prefix); it != objects.end() && it->second.tracker == tracker) {
      llvm::consumeError(tracker->remove());
      objects.erase(it);
    }
  };
  if (auto e = jit.addObjectFile(tracker, llvm::MemoryBuffer::getMemBufferCopy(object, prefix))) {
    llvm::consumeError(tracker->remove());
    throw Error(fmt::format("compile: adding an object to the JIT: {}", message(std::move(e))));
  }
  objects[prefix] = {tracker, {}, {}};
  Added added{{}, std::shared_ptr<void>(nullptr, [this, forget](void*) {
                std::lock_guard<std::recursive_mutex> lock(mutex_);
                forget();
              })};
  for (const std::string& f : functions) {
    auto address = jit.lookup(f);
    if (!address) {
      const std::string why = message(address.takeError());
      added.handle.reset();
      throw Error(fmt::format("compile: linking compiled kernel {}: {}", f, why));
    }
    added.addresses.push_back(address->toPtr<void*>());
  }
  objects[prefix].handle = added.handle;
  objects[prefix].addresses = added.addresses;
  return added;
}

Jit::Added Jit::add(std::unique_ptr<llvm::Module> module, std::unique_ptr<llvm::LLVMContext> context,
                    const std::vector<std::string>& functions) {
  auto& jit = *state_->jit;
  llvm::orc::ResourceTrackerSP tracker = jit.getMainJITDylib().createResourceTracker();
  if (auto e = jit.addIRModule(tracker, llvm::orc::ThreadSafeModule(std::move(module), std::move(context))))
    throw Error(fmt::format("compile: adding the module to the JIT: {}", message(std::move(e))));
  auto release = [this, tracker](void*) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    llvm::consumeError(tracker->remove());
  };
  Added added{{}, std::shared_ptr<void>(nullptr, release)};
  for (const std::string& f : functions)
    added.addresses.push_back(unwrap(jit.lookup(f), "looking up a compiled kernel").toPtr<void*>());
  return added;
}

}  // namespace reel::codegen
