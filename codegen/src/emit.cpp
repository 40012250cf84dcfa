#include "emit.hpp"

#include <fmt/format.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include "kernels/emitter.hpp"

namespace reel::codegen {

using llvm::IRBuilder;
using llvm::Type;

std::unique_ptr<llvm::Module> new_module(llvm::LLVMContext& context, const std::string& name,
                                         const llvm::DataLayout& layout, const std::string& triple) {
  auto module = std::make_unique<llvm::Module>(name, context);
  module->setDataLayout(layout);
  module->setTargetTriple(triple);
  return module;
}

void emit_kernel(llvm::Module& module, const KernelSpec& kernel, const std::string& name) {
  KernelEmitter(module.getContext(), module, kernel).emit(name);
}

void merge_body(llvm::Function& entry) {
  // The entry's one block: the buffers' addresses, the call of the body, `ret void`.
  llvm::BasicBlock& head = entry.getEntryBlock();
  llvm::CallInst* call = nullptr;
  for (llvm::Instruction& i : head)
    if (auto* c = llvm::dyn_cast<llvm::CallInst>(&i)) call = c;
  llvm::Function* body = call != nullptr ? call->getCalledFunction() : nullptr;
  if (body == nullptr || body->isDeclaration() || !body->hasOneUse() || !body->getReturnType()->isVoidTy() ||
      call->getNextNode() != head.getTerminator())
    throw Error(fmt::format("compile: internal error: kernel {} is not an entry calling its body", entry.getName().str()));
  for (unsigned a = 0; a < call->arg_size(); ++a) body->getArg(a)->replaceAllUsesWith(call->getArgOperand(a));
  // The addresses go first in the body's entry block, which becomes the function's
  // (its allocas stay in the entry block, where SROA looks for them).
  llvm::BasicBlock& first = body->getEntryBlock();
  llvm::Instruction* anchor = &*first.getFirstInsertionPt();
  while (&head.front() != call) head.front().moveBefore(anchor);
  entry.splice(entry.end(), body);
  head.eraseFromParent();  // the call and `ret void`
  body->eraseFromParent();
}

void emit_driver(llvm::Module& module, const std::vector<BoundStep>& calls,
                 const std::string& name) {
  llvm::LLVMContext& ctx = module.getContext();
  IRBuilder<> b(ctx);
  Type* ptr = b.getPtrTy();
  auto* step_t = llvm::FunctionType::get(b.getVoidTy(), {ptr, ptr}, false);
  auto* f = llvm::Function::Create(llvm::FunctionType::get(b.getVoidTy(), {ptr}, false),
                                   llvm::Function::ExternalLinkage, name, module);
  f->addFnAttr(llvm::Attribute::NoUnwind);
  b.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", f));
  auto address = [&](const void* p) {
    return b.CreateIntToPtr(b.getInt64(reinterpret_cast<uint64_t>(p)), ptr);
  };
  for (const BoundStep& s : calls)
    b.CreateCall(step_t, address(reinterpret_cast<const void*>(s.fn)), {f->getArg(0), address(s.args)});
  b.CreateRetVoid();
}

void verify_module(const llvm::Module& module) {
  std::string problems;
  llvm::raw_string_ostream os(problems);
  if (llvm::verifyModule(module, &os))
    throw Error(fmt::format("compile: internal error: invalid LLVM IR: {}", os.str()));
}

}  // namespace reel::codegen
