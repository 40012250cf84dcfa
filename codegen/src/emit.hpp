#pragma once
// KernelSpec -> LLVM IR: a module, each kernel (by its kind's row: kernels/table.hpp)
// and the driver calling a schedule's steps. Internal to codegen/.
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <memory>
#include <string>

#include "kernel_spec.hpp"
#include "steps.hpp"

namespace reel::codegen {

std::unique_ptr<llvm::Module> new_module(llvm::LLVMContext& context, const std::string& name,
                                         const llvm::DataLayout& layout, const std::string& triple);

// Adds `void NAME(void* const* bases, const BufferRef* buffers)` computing the kernel
// (a StepFn whose arguments are one BufferRef per kernel parameter).
void emit_kernel(llvm::Module& module, const KernelSpec& kernel, const std::string& name);

// Moves the body of a kernel emitted by emit_kernel into its entry function `entry`, in
// place of the entry's call, and removes the body function: what inlining it does,
// without copying it. The body's parameter attributes (noalias, alignment) are lost,
// which the quick tier's passes do not use (jit.cpp).
void merge_body(llvm::Function& entry);

// Adds `void NAME(void* const* bases)` calling fn(bases, args) for each step, in order.
void emit_driver(llvm::Module& module, const std::vector<BoundStep>& calls,
                 const std::string& name);

// Throws reel::Error if the module is not valid IR (an internal error).
void verify_module(const llvm::Module& module);

}  // namespace reel::codegen
