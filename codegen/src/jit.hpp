#pragma once
// The process's one ORC LLJIT, shared by every compiled function. Internal to codegen/.
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace reel::codegen {

class Jit {
 public:
  static Jit& get();  // created on first use, for the host CPU

  const llvm::DataLayout& data_layout() const;
  const std::string& triple() const { return triple_; }
  const std::string& cpu() const { return cpu_; }
  // What the code generated here depends on besides the IR: Reel's and LLVM's
  // versions, the target, the CPU and its features, and `vector_math`. Part of the
  // persistent code cache's key.
  std::string descriptor(bool vector_math) const;
  // How hard a module is optimised (CompileOptions::optimization). `full`: LLVM's O3
  // pipeline and aggressive instruction selection. `quick`, for kernels without loops
  // (straight_line): O1's function simplification and the code generator's fast path
  // (FastISel, the fast register allocator).
  enum class Tier { full, quick };
  // Whether a function has no loops (no back edge in its control flow).
  static bool straight_line(const llvm::Function& f);
  // Optimises a module for the host at `tier`; with vector_math, glibc's libmvec is
  // the vector math library, so loops calling exp/log/sin/cos/pow/tanh vectorize.
  void optimize(llvm::Module& module, bool vector_math, Tier tier = Tier::full);

  // Adds an optimised module; returns the addresses of `functions` and a handle whose
  // destruction frees the module's code (its ORC resource tracker).
  struct Added {
    std::vector<void*> addresses;
    std::shared_ptr<void> handle;
  };
  Added add(std::unique_ptr<llvm::Module> module, std::unique_ptr<llvm::LLVMContext> context,
            const std::vector<std::string>& functions);

  // The machine code of a module optimised at `tier`, as a relocatable object file.
  std::string emit_object(llvm::Module& module, Tier tier = Tier::full);

  // Adds an object made by emit_object (in this process or an earlier one) whose
  // symbols all start with `prefix`, and returns the addresses of `functions`. Throws
  // reel::Error if it does not link (the JIT keeps nothing of it then).
  // If the same object is already added and alive, that one is returned.
  Added add_object(const std::string& object, const std::string& prefix, const std::vector<std::string>& functions);
  // The object added under `prefix`, if its code is alive.
  std::optional<Added> live_object(const std::string& prefix);

  // Compilation holds this; LLVM's pass objects are not shared across threads.
  std::recursive_mutex& mutex() { return mutex_; }

 private:
  Jit();
  struct State;
  std::unique_ptr<State> state_;
  std::string triple_, cpu_, features_;
  std::recursive_mutex mutex_;  // recursive: freeing code (which locks it) may happen under it
};

}  // namespace reel::codegen
