#pragma once
// KernelSpec -> LLVM IR. Internal to codegen/.
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <memory>
#include <string>

#include "kernel.hpp"

namespace reel::codegen {


std::unique_ptr<llvm::Module> new_module(llvm::LLVMContext& context, const std::string& name,
                                         const llvm::DataLayout& layout, const std::string& triple);

// Adds `void NAME(void* const* bases, const int64_t* refs)` computing the kernel.
void emit_kernel(llvm::Module& module, const KernelSpec& kernel, const std::string& name);

// Adds `void NAME(void* const* bases)` calling fn(bases, refs) for each pair, in order.
void emit_driver(llvm::Module& module, const std::vector<std::pair<KernelFn, const int64_t*>>& calls,
                 const std::string& name);

// Throws reel::Error if the module is not valid IR (an internal error).
void verify_module(const llvm::Module& module);

}  // namespace reel::codegen
