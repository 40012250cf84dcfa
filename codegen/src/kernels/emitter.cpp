#include "kernels/emitter.hpp"

#include <llvm/IR/Intrinsics.h>

namespace reel::codegen {

using llvm::Type;
using llvm::Value;

namespace {

llvm::FastMathFlags reduction_flags() {
  // Reassociation lets the vectorizer keep several partial sums (results differ
  // from a sequential sum in the last bits; see the documented tolerances). Nothing
  // else is relaxed: no FMA contraction, which would make x*x - y*y nonzero for x == y.
  llvm::FastMathFlags f;
  f.setAllowReassoc(true);
  return f;
}

}  // namespace

void KernelEmitter::emit(const std::string& kernel_name) {
  emit_body(kernel_name);
  emit_entry(kernel_name);
}

llvm::Function* KernelEmitter::emit_body(const std::string& kernel_name) {
  name = kernel_name;
  Type* ptr = b.getPtrTy();
  Type* void_t = b.getVoidTy();
  std::vector<Type*> params(spec.params.size(), ptr);
  const bool chunked = spec.chunk > 0;
  if (chunked) params.insert(params.end(), {b.getInt64Ty(), b.getInt64Ty(), ptr});  // begin, end, partials
  auto* body_t = llvm::FunctionType::get(void_t, params, false);
  fn = llvm::Function::Create(body_t, llvm::Function::InternalLinkage, kernel_name + "_body", module);
  fn->addFnAttr(llvm::Attribute::AlwaysInline);
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  for (unsigned i = 0; i < spec.params.size(); ++i) {
    fn->addParamAttr(i, llvm::Attribute::NoAlias);
    const uint64_t align = spec.align.empty() ? 64 : static_cast<uint64_t>(spec.align[i]);
    fn->addParamAttr(i, llvm::Attribute::getWithAlignment(ctx, llvm::Align(align)));
    param.push_back(fn->getArg(i));
  }
  if (chunked) {
    const auto n = static_cast<unsigned>(spec.params.size());
    range_begin = fn->getArg(n);
    range_end = fn->getArg(n + 1);
    partials = fn->getArg(n + 2);
    fn->addParamAttr(n + 2, llvm::Attribute::NoAlias);
  }
  b.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", fn));
  kernel_row(spec).emit(*this);
  b.CreateRetVoid();
  return fn;
}

void KernelEmitter::emit_entry(const std::string& kernel_name) {
  Type* ptr = b.getPtrTy();
  Type* void_t = b.getVoidTy();
  std::vector<Type*> entry_params{ptr, ptr};
  if (spec.chunk > 0) entry_params.insert(entry_params.end(), {b.getInt64Ty(), b.getInt64Ty(), ptr});
  auto* entry_t = llvm::FunctionType::get(void_t, entry_params, false);
  auto* f = llvm::Function::Create(entry_t, llvm::Function::ExternalLinkage, kernel_name, module);
  f->addFnAttr(llvm::Attribute::NoUnwind);
  b.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", f));
  std::vector<Value*> args;
  for (std::size_t j = 0; j < spec.params.size(); ++j) {
    auto word = [&](std::size_t w) {
      Value* at = b.CreateInBoundsGEP(b.getInt64Ty(), f->getArg(1), b.getInt64(kBufferRefWords * j + w));
      return b.CreateAlignedLoad(b.getInt64Ty(), at, llvm::Align(alignof(BufferRef)));
    };
    Value* base_index = word(kBufferRefBaseWord);
    Value* off = word(kBufferRefOffsetWord);
    Value* base = b.CreateAlignedLoad(ptr, b.CreateInBoundsGEP(ptr, f->getArg(0), base_index), llvm::Align(8));
    args.push_back(b.CreateInBoundsGEP(b.getInt8Ty(), base, off));
  }
  if (spec.chunk > 0)
    for (unsigned a = 2; a < 5; ++a) args.push_back(f->getArg(a));
  b.CreateCall(fn, args);
  b.CreateRetVoid();
}

Type* KernelEmitter::elem(DType d) {
  return d == DType::f64 ? b.getDoubleTy() : d == DType::i64 ? b.getInt64Ty() : b.getFloatTy();
}

Value* KernelEmitter::element_ptr(int p, DType d, Value* at) {
  return b.CreateInBoundsGEP(elem(d), param[static_cast<std::size_t>(p)], at);
}

Value* KernelEmitter::offset(const std::vector<Value*>& idx, const std::vector<int64_t>& strides) {
  Value* off = b.getInt64(0);
  for (std::size_t d = 0; d < idx.size(); ++d)
    if (strides[d] != 0)
      off = b.CreateAdd(off, b.CreateMul(idx[d], b.getInt64(strides[d]), "", true, true), "", true, true);
  return off;
}

void KernelEmitter::loop_nest(const std::vector<int64_t>& dims,
                              const std::function<void(const std::vector<Value*>&)>& body,
                              const std::vector<int64_t>& segments, bool chunk, bool short_body) {
  std::vector<Value*> idx;
  // An innermost loop short enough to unroll leaves the loop around it innermost, and
  // the loop vectorizer would then vectorize that one across rows: gathers and scatters
  // at the row stride (a [100, 1000, 10] loop ran at a third of memory speed). It is
  // kept scalar instead, and the SLP vectorizer turns the unrolled row into vectors.
  // scalar_level: the level kept scalar, -1 for none.
  int64_t scalar_level = -1;
  if (short_body) {
    scalar_level = static_cast<int64_t>(dims.size()) - 1;
  } else if (dims.size() >= 2) {
    bool short_rows = true;
    int64_t from = 0;
    for (int64_t end : segments.empty() ? std::vector<int64_t>{dims.back()} : segments)
      short_rows = short_rows && end - from <= kMaxUnrolledTripCount, from = end;
    if (short_rows) scalar_level = static_cast<int64_t>(dims.size()) - 2;
  }
  std::function<void(std::size_t)> level = [&](std::size_t d) {
    if (d == dims.size()) {
      body(idx);
      return;
    }
    const bool innermost = d + 1 == dims.size();
    const std::vector<int64_t> ends = innermost && !segments.empty() ? segments : std::vector<int64_t>{dims[d]};
    if (chunk && d == 0) {
      llvm::PHINode* i = open_counted_loop("chunk", range_begin);
      idx.push_back(i);
      level(d + 1);
      idx.pop_back();
      close_counted_loop(i, range_end, "done", false, static_cast<int64_t>(d) == scalar_level, dims.size() == 1);
      return;
    }
    int64_t start = 0;
    for (std::size_t s = 0; s < ends.size(); start = ends[s++]) {
      segment = s;
      llvm::PHINode* i = open_counted_loop("loop", b.getInt64(start));
      idx.push_back(i);
      level(d + 1);
      idx.pop_back();
      close_counted_loop(i, b.getInt64(ends[s]), "done", innermost && ends[s] - start <= kMaxUnrolledTripCount,
                         static_cast<int64_t>(d) == scalar_level, innermost && ends[s] - start >= kInterleavedTripCount);
    }
  };
  level(0);
}

llvm::PHINode* KernelEmitter::open_counted_loop(const char* loop_name, Value* start) {
  llvm::BasicBlock* before = b.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(ctx, loop_name, fn);
  b.CreateBr(header);
  b.SetInsertPoint(header);
  llvm::PHINode* i = b.CreatePHI(b.getInt64Ty(), 2);
  i->addIncoming(start, before);
  return i;
}

void KernelEmitter::close_counted_loop(llvm::PHINode* i, Value* end, const char* exit_name, bool may_unroll,
                                       bool scalar, bool interleave) {
  auto* exit = llvm::BasicBlock::Create(ctx, exit_name, fn);
  Value* next = b.CreateAdd(i, b.getInt64(1), "", true, true);
  i->addIncoming(next, b.GetInsertBlock());
  auto* br = b.CreateCondBr(b.CreateICmpULT(next, end), i->getParent(), exit);
  if (!may_unroll || scalar)
    br->setMetadata(llvm::LLVMContext::MD_loop, loop_hints(!may_unroll, scalar, interleave));
  b.SetInsertPoint(exit);
}

llvm::MDNode* KernelEmitter::loop_hints(bool no_unroll, bool no_vectorize, bool interleave) {
  std::vector<llvm::Metadata*> ops{nullptr};
  if (no_unroll) ops.push_back(llvm::MDNode::get(ctx, llvm::MDString::get(ctx, "llvm.loop.unroll.disable")));
  if (no_vectorize)
    ops.push_back(llvm::MDNode::get(ctx, {llvm::MDString::get(ctx, "llvm.loop.vectorize.enable"),
                                          llvm::ConstantAsMetadata::get(b.getFalse())}));
  else if (no_unroll && interleave)
    // LLVM reads unroll.disable as "interleave once" too: a reduction would then keep one
    // vector accumulator and wait on each add's latency. Four vectors in flight hide it.
    ops.push_back(llvm::MDNode::get(ctx, {llvm::MDString::get(ctx, "llvm.loop.interleave.count"),
                                          llvm::ConstantAsMetadata::get(b.getInt32(kInterleave))}));
  llvm::MDNode* md = llvm::MDNode::getDistinct(ctx, ops);
  md->replaceOperandWith(0, md);  // a loop ID refers to itself
  return md;
}

void KernelEmitter::store_partial(llvm::AllocaInst* acc, int64_t at, int64_t count) {
  loop_nest({count}, [&](const std::vector<Value*>& j) {
    Value* to = b.CreateInBoundsGEP(b.getDoubleTy(), partials, b.CreateAdd(j[0], b.getInt64(at)));
    b.CreateStore(b.CreateLoad(b.getDoubleTy(), b.CreateInBoundsGEP(b.getDoubleTy(), acc, j[0])), to);
  });
}

llvm::AllocaInst* KernelEmitter::entry_alloca(Type* type) {
  llvm::IRBuilder<> entry(&fn->getEntryBlock(), fn->getEntryBlock().begin());
  return entry.CreateAlloca(type);
}

llvm::AllocaInst* KernelEmitter::new_accumulator(kernels::ReduceOp op) {
  llvm::AllocaInst* acc = entry_alloca(b.getDoubleTy());
  b.CreateStore(llvm::ConstantFP::get(b.getDoubleTy(), kernels::reduce_identity(op)), acc);
  return acc;
}

llvm::AllocaInst* KernelEmitter::new_columns(int64_t count) {
  llvm::AllocaInst* acc = entry_alloca(llvm::ArrayType::get(b.getDoubleTy(), static_cast<uint64_t>(count)));
  loop_nest({count}, [&](const std::vector<Value*>& j) {
    b.CreateStore(llvm::ConstantFP::get(b.getDoubleTy(), 0.0), b.CreateInBoundsGEP(b.getDoubleTy(), acc, j[0]));
  });
  return acc;
}

void KernelEmitter::accumulate(Value* acc, Value* x, kernels::ReduceOp op, bool in_order) {
  if (!x->getType()->isDoubleTy()) x = b.CreateFPExt(x, b.getDoubleTy());
  Value* a = b.CreateLoad(b.getDoubleTy(), acc);
  Value* r = nullptr;
  switch (op) {
    case kernels::ReduceOp::sum: r = b.CreateFAdd(a, x); break;
    case kernels::ReduceOp::prod: r = b.CreateFMul(a, x); break;
    case kernels::ReduceOp::max: r = b.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, a, x); break;
    case kernels::ReduceOp::min: r = b.CreateBinaryIntrinsic(llvm::Intrinsic::minimum, a, x); break;
  }
  if (!in_order && (op == kernels::ReduceOp::sum || op == kernels::ReduceOp::prod))
    llvm::cast<llvm::Instruction>(r)->setFastMathFlags(reduction_flags());
  b.CreateStore(r, acc);
}

void KernelEmitter::finish_sum(Value* acc, double scale, int p, DType dtype, Value* at) {
  Value* total = b.CreateLoad(b.getDoubleTy(), acc);
  if (scale != 1.0) total = b.CreateFMul(total, llvm::ConstantFP::get(b.getDoubleTy(), scale));
  if (elem(dtype) != total->getType()) total = b.CreateFPTrunc(total, elem(dtype));
  b.CreateStore(total, element_ptr(p, dtype, at));
}

}  // namespace reel::codegen
