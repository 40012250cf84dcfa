#pragma once
// Plan -> LLVM IR. Internal to codegen/.
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <memory>
#include <string>

#include "plan.hpp"

namespace reel::codegen {

// A module defining
//   void NAME(const void* const* inputs, void* const* outputs,
//             const void* const* constants, void* workspace)
// which computes the tape's outputs into the given buffers.
std::unique_ptr<llvm::Module> emit_module(llvm::LLVMContext& context, const Tape& tape,
                                          const Plan& plan, const std::string& name,
                                          const llvm::DataLayout& layout,
                                          const std::string& triple);

}  // namespace reel::codegen
