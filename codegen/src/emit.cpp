#include "emit.hpp"

#include <fmt/format.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <numeric>
#include <limits>
#include <functional>
#include <unordered_map>

namespace reel::codegen {

namespace {

using llvm::IRBuilder;
using llvm::Type;
using llvm::Value;

// The element machine that emits: each operation of the list
// (runtime/include/reel/element_ops.def) as LLVM instructions of element type t, with
// NumMath's conventions op by op. An element program runs through eval_element on it.
class ElementEmitter {
 public:
  using Value = llvm::Value*;
  ElementEmitter(IRBuilder<>& b, llvm::Module& m, Type* t) : b_(b), m_(m), t_(t) {}

  Value emit(const ElementProgram& p, const std::vector<Value>& args) { return eval_element(p, *this, args); }

  // The operations whose lowering the list names, generated: Value name(operands).
#define REEL_EMIT(name, operands, ...) \
  Value name(REEL_ELEM_PARAMS_##operands(Value)) { return __VA_ARGS__; }
#define REEL_EMIT_inst(name, operands, symbol) REEL_EMIT(name, operands, b_.symbol(REEL_ELEM_ARGS_##operands))
#define REEL_EMIT_fcmp(name, operands, symbol) \
  REEL_EMIT(name, operands, flag(b_.CreateFCmp(llvm::CmpInst::FCMP_##symbol, REEL_ELEM_ARGS_##operands)))
#define REEL_EMIT_intrinsic(name, operands, symbol) \
  REEL_EMIT(name, operands, b_.CreateIntrinsic(llvm::Intrinsic::symbol, {t_}, {REEL_ELEM_ARGS_##operands}))
#define REEL_EMIT_libm(name, operands, symbol) REEL_EMIT(name, operands, libm(#symbol, {REEL_ELEM_ARGS_##operands}))
#define REEL_EMIT_custom(name, operands, symbol)
#define REEL_ELEM_OP(name, operands, eval, lowering, symbol) REEL_EMIT_##lowering(name, operands, symbol)
#include "reel/element_ops.def"
#undef REEL_EMIT
#undef REEL_EMIT_inst
#undef REEL_EMIT_fcmp
#undef REEL_EMIT_intrinsic
#undef REEL_EMIT_libm
#undef REEL_EMIT_custom

  // The operations with a `custom` lowering: written here.
  Value constant(double c) { return llvm::ConstantFP::get(t_, c); }
  Value select(Value c, Value a, Value b) { return b_.CreateSelect(b_.CreateFCmpUNE(c, constant(0)), a, b); }
  Value pow(Value x, double p) {
    if (p == 1.0) return x;
    if (p == 2.0) return b_.CreateFMul(x, x);
    if (p == 3.0) return b_.CreateFMul(b_.CreateFMul(x, x), x);
    if (p == -1.0) return b_.CreateFDiv(constant(1.0), x);
    return b_.CreateBinaryIntrinsic(llvm::Intrinsic::pow, x, constant(p));
  }

 private:
  Value flag(Value cmp) { return b_.CreateSelect(cmp, constant(1), constant(0)); }

  // A libm function without an LLVM intrinsic (tanh, log1p, expm1, erf, lgamma in LLVM 19), called
  // by name (f suffix for float), declared free of side effects so the vectorizer may
  // replace it with libmvec's vector form.
  Value libm(const char* name, llvm::ArrayRef<Value> args) {
    const bool f64 = t_->isDoubleTy();
    const std::vector<Type*> params(args.size(), t_);
    llvm::FunctionCallee fn = m_.getOrInsertFunction(f64 ? std::string(name) : std::string(name) + "f",
                                                     llvm::FunctionType::get(t_, params, false));
    if (auto* f = llvm::dyn_cast<llvm::Function>(fn.getCallee())) {
      f->setDoesNotAccessMemory();
      f->setDoesNotThrow();
      f->setWillReturn();
    }
    llvm::CallInst* call = b_.CreateCall(fn, args);
    call->setDoesNotAccessMemory();
    return call;
  }

  IRBuilder<>& b_;
  llvm::Module& m_;
  Type* t_;
};
static_assert(ElementMachine<ElementEmitter>, "ElementEmitter lacks an operation of reel/element_ops.def");

class Emitter {
 public:
  Emitter(llvm::LLVMContext& ctx, llvm::Module& m, const KernelSpec& k) : ctx_(ctx), m_(m), k_(k), b_(ctx) {}

  // void NAME(ptr bases, ptr buffers): loads each parameter's pointer
  // (bases[buffers[j].base] + buffers[j].offset, BufferRef read as 64-bit words) and calls an always-inlined body taking them as noalias parameters:
  // distinct parameters never overlap (an in-place update is one parameter), so the
  // vectorizer may reorder their loads and stores.
  void emit(const std::string& name) {
    emit_body(name);
    emit_entry(name);
  }

  // The body, `NAME_body`: internal, always inlined, taking each parameter's pointer.
  llvm::Function* emit_body(const std::string& name) {
    name_ = name;
    Type* ptr = b_.getPtrTy();
    Type* void_t = b_.getVoidTy();
    std::vector<Type*> params(k_.params.size(), ptr);
    const bool chunked = k_.chunk > 0;
    if (chunked) params.insert(params.end(), {b_.getInt64Ty(), b_.getInt64Ty(), ptr});  // begin, end, partials
    auto* body_t = llvm::FunctionType::get(void_t, params, false);
    fn_ = llvm::Function::Create(body_t, llvm::Function::InternalLinkage, name + "_body", m_);
    fn_->addFnAttr(llvm::Attribute::AlwaysInline);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    for (unsigned i = 0; i < k_.params.size(); ++i) {
      fn_->addParamAttr(i, llvm::Attribute::NoAlias);
      const uint64_t align = k_.align.empty() ? 64 : static_cast<uint64_t>(k_.align[i]);
      fn_->addParamAttr(i, llvm::Attribute::getWithAlignment(ctx_, llvm::Align(align)));
      param_.push_back(fn_->getArg(i));
    }
    if (chunked) {
      const auto n = static_cast<unsigned>(k_.params.size());
      range_begin_ = fn_->getArg(n);
      range_end_ = fn_->getArg(n + 1);
      partials_ = fn_->getArg(n + 2);
      fn_->addParamAttr(n + 2, llvm::Attribute::NoAlias);
    }
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));
    switch (k_.kind) {
      case KernelSpec::Kind::loop: emit_loop(); break;
      case KernelSpec::Kind::reduce: emit_reduce(); break;
      case KernelSpec::Kind::transpose: emit_transpose(); break;
      case KernelSpec::Kind::gather: emit_indexed(false); break;
      case KernelSpec::Kind::scatter: emit_indexed(true); break;
      case KernelSpec::Kind::pool: emit_pool(); break;
      case KernelSpec::Kind::scan: emit_scan(); break;
    }
    b_.CreateRetVoid();
    return fn_;
  }

  // `void NAME(ptr bases, ptr buffers)`: the parameters' pointers, then the body. In
  // chunks (KernelSpec::chunk), `void NAME(ptr bases, ptr buffers, i64 begin, i64 end,
  // ptr partials)` (a RangeFn).
  void emit_entry(const std::string& name) {
    Type* ptr = b_.getPtrTy();
    Type* void_t = b_.getVoidTy();
    std::vector<Type*> entry_params{ptr, ptr};
    if (k_.chunk > 0) entry_params.insert(entry_params.end(), {b_.getInt64Ty(), b_.getInt64Ty(), ptr});
    auto* entry_t = llvm::FunctionType::get(void_t, entry_params, false);
    auto* f = llvm::Function::Create(entry_t, llvm::Function::ExternalLinkage, name, m_);
    f->addFnAttr(llvm::Attribute::NoUnwind);
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", f));
    std::vector<Value*> args;
    for (std::size_t j = 0; j < k_.params.size(); ++j) {
      auto word = [&](std::size_t w) {
        Value* at = b_.CreateInBoundsGEP(b_.getInt64Ty(), f->getArg(1), b_.getInt64(kBufferRefWords * j + w));
        return b_.CreateAlignedLoad(b_.getInt64Ty(), at, llvm::Align(alignof(BufferRef)));
      };
      Value* base_index = word(kBufferRefBaseWord);
      Value* off = word(kBufferRefOffsetWord);
      Value* base = b_.CreateAlignedLoad(ptr, b_.CreateInBoundsGEP(ptr, f->getArg(0), base_index), llvm::Align(8));
      args.push_back(b_.CreateInBoundsGEP(b_.getInt8Ty(), base, off));
    }
    if (k_.chunk > 0)
      for (unsigned a = 2; a < 5; ++a) args.push_back(f->getArg(a));
    b_.CreateCall(fn_, args);
    b_.CreateRetVoid();
  }

 private:
  Type* elem(DType d) {
    return d == DType::f64 ? b_.getDoubleTy() : d == DType::i64 ? b_.getInt64Ty() : b_.getFloatTy();
  }

  Value* element_ptr(int param, DType d, Value* offset) {
    return b_.CreateInBoundsGEP(elem(d), param_[static_cast<std::size_t>(param)], offset);
  }

  Value* offset(const std::vector<Value*>& idx, const std::vector<int64_t>& strides) {
    Value* off = b_.getInt64(0);
    for (std::size_t d = 0; d < idx.size(); ++d)
      if (strides[d] != 0)
        off = b_.CreateAdd(off, b_.CreateMul(idx[d], b_.getInt64(strides[d]), "", true, true), "",
                           true, true);
    return off;
  }

  // for i0 in [0, dims[0]) ... for ik in [0, dims[k]): body(i0..ik). Every dim > 0.
  // With `segments` (ends of ranges of the innermost dimension), the innermost loop is
  // one loop per range, segment_ naming it while its body is emitted. `chunk`: i0 runs
  // over this call's chunk [begin, end) instead (never empty; not with segments on i0).
  // `short_body`: the body is a loop nest of its own that unrolls completely (a short
  // reduction per element), so this nest's innermost loop is kept scalar (below).
  void loop_nest(const std::vector<int64_t>& dims, const std::function<void(const std::vector<Value*>&)>& body,
                 const std::vector<int64_t>& segments = {}, bool chunk = false, bool short_body = false) {
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
        llvm::PHINode* i = open_counted_loop("chunk", range_begin_);
        idx.push_back(i);
        level(d + 1);
        idx.pop_back();
        close_counted_loop(i, range_end_, "done", false, static_cast<int64_t>(d) == scalar_level);
        return;
      }
      int64_t start = 0;
      for (std::size_t s = 0; s < ends.size(); start = ends[s++]) {
        segment_ = s;
        llvm::PHINode* i = open_counted_loop("loop", b_.getInt64(start));
        idx.push_back(i);
        level(d + 1);
        idx.pop_back();
        close_counted_loop(i, b_.getInt64(ends[s]), "done", innermost && ends[s] - start <= kMaxUnrolledTripCount,
                           static_cast<int64_t>(d) == scalar_level);
      }
    };
    level(0);
  }

  // A counted loop: a header block `name` whose counter (the phi returned) starts at
  // `start`; closed after its body by close_counted_loop: counter + 1, back to the
  // header while below `end`, then on in a new block `exit_name`.
  llvm::PHINode* open_counted_loop(const char* name, Value* start) {
    llvm::BasicBlock* before = b_.GetInsertBlock();
    auto* header = llvm::BasicBlock::Create(ctx_, name, fn_);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    llvm::PHINode* i = b_.CreatePHI(b_.getInt64Ty(), 2);
    i->addIncoming(start, before);
    return i;
  }
  void close_counted_loop(llvm::PHINode* i, Value* end, const char* exit_name, bool may_unroll,
                          bool scalar = false) {
    auto* exit = llvm::BasicBlock::Create(ctx_, exit_name, fn_);
    Value* next = b_.CreateAdd(i, b_.getInt64(1), "", true, true);
    i->addIncoming(next, b_.GetInsertBlock());
    auto* br = b_.CreateCondBr(b_.CreateICmpULT(next, end), i->getParent(), exit);
    if (!may_unroll || scalar) br->setMetadata(llvm::LLVMContext::MD_loop, loop_hints(!may_unroll, scalar));
    b_.SetInsertPoint(exit);
  }
  std::size_t segment_ = 0;  // the innermost range being emitted (loop_nest's segments)

  // Innermost loops this short may be unrolled completely, which lets the SLP
  // vectorizer use vector math on them. Other loops are vectorized and interleaved but
  // not unrolled further: unrolling them made compile times up to ten times longer (an
  // MLP gradient took 220 ms instead of 25 ms) for no measurable speed.
  static constexpr int64_t kMaxUnrolledTripCount = 16;

  llvm::MDNode* no_unroll() { return loop_hints(true, false); }
  // A loop ID: not unrolled, and or not vectorized (the SLP vectorizer still works within it).
  llvm::MDNode* loop_hints(bool no_unroll, bool no_vectorize) {
    std::vector<llvm::Metadata*> ops{nullptr};
    if (no_unroll) ops.push_back(llvm::MDNode::get(ctx_, llvm::MDString::get(ctx_, "llvm.loop.unroll.disable")));
    if (no_vectorize)
      ops.push_back(llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.vectorize.enable"),
                                             llvm::ConstantAsMetadata::get(b_.getFalse())}));
    llvm::MDNode* md = llvm::MDNode::getDistinct(ctx_, ops);
    md->replaceOperandWith(0, md);  // a loop ID refers to itself
    return md;
  }

  static llvm::FastMathFlags reduction_flags() {
    // Reassociation lets the vectorizer keep several partial sums (results differ
    // from a sequential sum in the last bits; see the documented tolerances). Nothing
    // else is relaxed: no FMA contraction, which would make x*x - y*y nonzero for x == y.
    llvm::FastMathFlags f;
    f.setAllowReassoc(true);
    return f;
  }

  void emit_loop() {
    std::vector<llvm::AllocaInst*> acc;
    for (const KernelSpec::Sum& s : k_.sums) acc.push_back(s.strides.empty() ? new_accumulator() : new_columns(s.count));
    if (!k_.empty) {
      loop_nest(k_.dims, [&](const std::vector<Value*>& idx) {
        std::vector<Value*> value;
        // Every load first: an in-place store may overwrite an element it reads.
        for (const auto& l : k_.loads) {
          Value* at = offset(idx, l.strides);
          if (l.offset != 0) at = b_.CreateAdd(at, b_.getInt64(l.offset), "", true, true);
          if (!l.fixed.empty()) {  // a constant's, the same throughout this range
            at = b_.getInt64(l.fixed[segment_]);
          } else if (!l.deltas.empty()) {  // a gather's, at constant indices running up in this range
            Value* j = b_.CreateAdd(idx.back(), b_.getInt64(l.deltas[segment_]), "", false, true);  // (a delta may be negative)
            at = b_.CreateAdd(at, b_.CreateMul(j, b_.getInt64(l.index_stride), "", true, true), "", true, true);
          } else if (l.index_param >= 0) {  // a gather's: at the index read, checked before the kernel
            Value* j = b_.CreateLoad(b_.getInt64Ty(), element_ptr(l.index_param, DType::i64, offset(idx, l.index_strides)));
            at = b_.CreateAdd(at, b_.CreateMul(j, b_.getInt64(l.index_stride), "", true, true), "", true, true);
          }
          value.push_back(b_.CreateLoad(elem(l.dtype), element_ptr(l.param, l.dtype, at)));
        }
        for (const auto& inst : k_.insts) {
          if (inst.prim->structure == Structure::broadcast) {
            value.push_back(value[static_cast<std::size_t>(inst.args[0])]);
            continue;
          }
          std::vector<Value*> args;
          // Elementwise primitives take their result's dtype, but for a conversion (cast
          // between f32 and f64, or from i64): its argument is converted as it is read.
          for (int a : inst.args) {
            Value* x = value[static_cast<std::size_t>(a)];
            if (x->getType()->isIntegerTy()) x = b_.CreateSIToFP(x, b_.getDoubleTy());  // (to f32 through f64, as eager)
            args.push_back(b_.CreateFPCast(x, elem(inst.dtype)));
          }
          value.push_back(ElementEmitter(b_, m_, elem(inst.dtype)).emit(inst.element->program, args));
        }
        for (const auto& st : k_.stores) {
          Value* at = offset(idx, st.strides);
          if (st.offset != 0) at = b_.CreateAdd(at, b_.getInt64(st.offset), "", true, true);
          b_.CreateStore(value[static_cast<std::size_t>(st.value)],
                         element_ptr(st.param, k_.params[static_cast<std::size_t>(st.param)], at));
        }
        for (std::size_t i = 0; i < k_.sums.size(); ++i) {
          const KernelSpec::Sum& s = k_.sums[i];
          Value* v = value[static_cast<std::size_t>(s.value)];
          if (s.strides.empty()) accumulate(acc[i], v);
          else accumulate(b_.CreateInBoundsGEP(b_.getDoubleTy(), acc[i], offset(idx, s.strides)), v, kernels::ReduceOp::sum, true);
        }
      }, k_.segments, k_.chunk > 0);
    }
    int64_t partial_at = 0;  // a chunk's partial results: each sum's, one after another (count each)
    for (std::size_t i = 0; i < k_.sums.size(); ++i) {
      const KernelSpec::Sum& s = k_.sums[i];
      if (k_.chunk > 0) {
        store_partial(acc[i], partial_at, s.count);
        partial_at += s.count;
      } else if (!s.strides.empty()) {
        loop_nest({s.count}, [&](const std::vector<Value*>& j) {
          finish_sum(b_.CreateInBoundsGEP(b_.getDoubleTy(), acc[i], j[0]), s.scale, s.param, s.dtype, j[0]);
        });
      } else {
        finish_sum(acc[i], s.scale, s.param, s.dtype, b_.getInt64(0));
      }
    }
  }

  // A chunk's partial results (ParallelKernelArgs), as accumulated: `count` doubles at
  // acc (one accumulator, or an array of column sums) to partials[at, at + count).
  void store_partial(llvm::AllocaInst* acc, int64_t at, int64_t count = 1) {
    loop_nest({count}, [&](const std::vector<Value*>& j) {
      Value* to = b_.CreateInBoundsGEP(b_.getDoubleTy(), partials_, b_.CreateAdd(j[0], b_.getInt64(at)));
      b_.CreateStore(b_.CreateLoad(b_.getDoubleTy(), b_.CreateInBoundsGEP(b_.getDoubleTy(), acc, j[0])), to);
    });
  }
  Value* range_begin_ = nullptr;  // a chunked kernel's: its outer loop's range, and where its partial sums go
  Value* range_end_ = nullptr;
  Value* partials_ = nullptr;

  // Sums to one number accumulate in double, as the interpreter's do, for f32 too: an
  // f32 sum of many terms followed by a cancellation can keep only a few good digits.
  // Reductions accumulate in double, from the operation's identity; products, maxima
  // and minima too (as the interpreter's kernels::reduce_to does).
  llvm::AllocaInst* new_accumulator(kernels::ReduceOp op = kernels::ReduceOp::sum) {
    llvm::IRBuilder<> entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
    llvm::AllocaInst* acc = entry.CreateAlloca(b_.getDoubleTy());
    b_.CreateStore(llvm::ConstantFP::get(b_.getDoubleTy(), kernels::reduce_identity(op)), acc);
    return acc;
  }
  // An array of `count` zeros in double (column sums), accumulated in order as the
  // interpreter's sum_to does, so with its bits.
  llvm::AllocaInst* new_columns(int64_t count) {
    llvm::AllocaInst* acc = nullptr;
    {
      llvm::IRBuilder<> entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
      acc = entry.CreateAlloca(llvm::ArrayType::get(b_.getDoubleTy(), static_cast<uint64_t>(count)));
    }
    loop_nest({count}, [&](const std::vector<Value*>& j) {
      b_.CreateStore(llvm::ConstantFP::get(b_.getDoubleTy(), 0.0), b_.CreateInBoundsGEP(b_.getDoubleTy(), acc, j[0]));
    });
    return acc;
  }

  // (Sums and products may be reassociated unless `in_order`.)
  void accumulate(Value* acc, Value* x, kernels::ReduceOp op = kernels::ReduceOp::sum, bool in_order = false) {
    if (!x->getType()->isDoubleTy()) x = b_.CreateFPExt(x, b_.getDoubleTy());
    Value* a = b_.CreateLoad(b_.getDoubleTy(), acc);
    Value* r = nullptr;
    switch (op) {
      case kernels::ReduceOp::sum: r = b_.CreateFAdd(a, x); break;
      case kernels::ReduceOp::prod: r = b_.CreateFMul(a, x); break;
      case kernels::ReduceOp::max: r = b_.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, a, x); break;
      case kernels::ReduceOp::min: r = b_.CreateBinaryIntrinsic(llvm::Intrinsic::minimum, a, x); break;
    }
    if (!in_order && (op == kernels::ReduceOp::sum || op == kernels::ReduceOp::prod))
      llvm::cast<llvm::Instruction>(r)->setFastMathFlags(reduction_flags());
    b_.CreateStore(r, acc);
  }
  // Scales the sum (mean: 1/n; of no elements that is 0 * inf = NaN, as interpreted)
  // and stores it at element `at` of parameter `param`.
  void finish_sum(Value* acc, double scale, int param, DType dtype, Value* at) {
    Value* total = b_.CreateLoad(b_.getDoubleTy(), acc);
    if (scale != 1.0) total = b_.CreateFMul(total, llvm::ConstantFP::get(b_.getDoubleTy(), scale));
    if (elem(dtype) != total->getType()) total = b_.CreateFPTrunc(total, elem(dtype));
    b_.CreateStore(total, element_ptr(param, dtype, at));
  }

  // Each result element is summed in a register (in double, like the interpreter),
  // looping over the kept dimensions outside and the reduced ones inside.
  void emit_reduce() {
    const DType in = k_.params[0], out = k_.params[1];
    const kernels::ReduceOp op = k_.reduce_op;
    if (k_.empty) {  // a reduction of nothing: the identity (scaled: a mean is NaN)
      if (k_.out_numel == 0) return;
      loop_nest({k_.out_numel}, [&](const std::vector<Value*>& i) {
        llvm::AllocaInst* acc = new_accumulator(op);
        finish_sum(acc, k_.scale, 1, out, i[0]);
      });
      return;
    }
    if (k_.reduce_index) return emit_reduce_index();
    if (!k_.kept.empty() && !k_.reduced.empty() && k_.kept_in.back() == 1) return emit_reduce_rows();
    if (k_.kept.empty() && k_.chunk > 0) {  // a chunk of a reduction to one number: its partial result
      llvm::AllocaInst* acc = new_accumulator(op);
      loop_nest(k_.reduced, [&](const std::vector<Value*>& j) {
        accumulate(acc, b_.CreateLoad(elem(in), element_ptr(0, in, offset(j, k_.reduced_in))), op);
      }, {}, true);
      store_partial(acc, 0);
      return;
    }
    loop_nest(k_.kept, [&](const std::vector<Value*>& k) {
      Value* in_base = offset(k, k_.kept_in);
      Value* out_offset = offset(k, k_.kept_out);
      llvm::AllocaInst* acc = new_accumulator(op);
      loop_nest(k_.reduced, [&](const std::vector<Value*>& j) {
        Value* at = b_.CreateAdd(in_base, offset(j, k_.reduced_in), "", true, true);
        accumulate(acc, b_.CreateLoad(elem(in), element_ptr(0, in, at)), op);
      });
      finish_sum(acc, k_.scale, 1, out, out_offset);
    }, {}, k_.chunk > 0, unrolls_completely(k_.reduced));
  }

  // Whether a loop nest over dims is one short loop, which the optimiser unrolls completely.
  static bool unrolls_completely(const std::vector<int64_t>& dims) {
    return dims.size() == 1 && dims[0] <= kMaxUnrolledTripCount;
  }

  // argmax / argmin (reduce_index): per kept element, the position among the reduced
  // ones of the first largest (smallest), the first NaN winning, as the eager
  // kernels::arg_extremum decides. Two passes that vectorise (one element after another
  // with the best so far carried took 4 ns an element): the extremum (llvm.maximum /
  // minimum: NaN if any is), then the least position holding it (a NaN: any NaN; equal
  // zeros of either sign count as the same, as the eager comparison has them).
  void emit_reduce_index() {
    const DType in = k_.params[0];
    const bool largest = k_.reduce_op == kernels::ReduceOp::max;
    Type* t = elem(in);
    llvm::AllocaInst *best = nullptr, *best_at = nullptr;
    {
      llvm::IRBuilder<> entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
      best = entry.CreateAlloca(t);
      best_at = entry.CreateAlloca(b_.getInt64Ty());
    }
    const double start = largest ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    std::vector<int64_t> kept = k_.kept, kept_in = k_.kept_in, kept_out = k_.kept_out;
    if (kept.empty()) kept = {1}, kept_in = {0}, kept_out = {0};
    const int64_t n = std::accumulate(k_.reduced.begin(), k_.reduced.end(), int64_t{1}, std::multiplies<>());
    std::vector<int64_t> position(k_.reduced.size(), 1);  // row-major among the reduced elements
    for (std::size_t d = k_.reduced.size(); d-- > 1;) position[d - 1] = position[d] * k_.reduced[d];
    loop_nest(kept, [&](const std::vector<Value*>& k) {
      Value* in_base = offset(k, kept_in);
      auto element = [&](const std::vector<Value*>& j) {
        return b_.CreateLoad(t, element_ptr(0, in, b_.CreateAdd(in_base, offset(j, k_.reduced_in), "", true, true)));
      };
      b_.CreateStore(llvm::ConstantFP::get(t, start), best);
      loop_nest(k_.reduced, [&](const std::vector<Value*>& j) {
        Value* m = b_.CreateBinaryIntrinsic(largest ? llvm::Intrinsic::maximum : llvm::Intrinsic::minimum,
                                            b_.CreateLoad(t, best), element(j));
        b_.CreateStore(m, best);
      });
      Value* m = b_.CreateLoad(t, best);
      Value* m_nan = b_.CreateFCmpUNO(m, m);
      b_.CreateStore(b_.getInt64(n), best_at);
      loop_nest(k_.reduced, [&](const std::vector<Value*>& j) {
        Value* v = element(j);
        Value* hit = b_.CreateSelect(m_nan, b_.CreateFCmpUNO(v, v), b_.CreateFCmpOEQ(v, m));
        Value* at = offset(j, position);
        Value* least = b_.CreateLoad(b_.getInt64Ty(), best_at);
        b_.CreateStore(b_.CreateSelect(hit, b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, least, at), least), best_at);
      });
      b_.CreateStore(b_.CreateLoad(b_.getInt64Ty(), best_at), element_ptr(1, DType::i64, offset(k, kept_out)));
    }, {}, k_.chunk > 0, unrolls_completely(k_.reduced));
  }

  // Pooling windows (PoolWindow), per plane nc (the chunked dimension), per output
  // element, the window's elements in row-major order, padding skipped; the scatters
  // (max_grad, mean_grad) first zero their plane and add in the eager kernel's order.
  void emit_pool() {
    using Mode = PoolWindow::Mode;
    const PoolWindow& w = k_.pool;
    const DType d = k_.params[0];
    Type* t = elem(d);
    const int out = static_cast<int>(k_.params.size()) - 1;
    const bool by_max = w.mode == Mode::max || w.mode == Mode::max_gather || w.mode == Mode::max_grad;
    const bool scatter = w.mode == Mode::max_grad || w.mode == Mode::mean_grad;
    const double scale = 1.0 / static_cast<double>(w.kh * w.kw);
    llvm::AllocaInst *best = nullptr, *best_at = nullptr, *acc = nullptr;
    {
      llvm::IRBuilder<> entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
      best = entry.CreateAlloca(t);
      best_at = entry.CreateAlloca(b_.getInt64Ty());
      acc = entry.CreateAlloca(b_.getDoubleTy());
    }
    auto mul = [&](Value* a, int64_t c) { return b_.CreateMul(a, b_.getInt64(c), "", true, true); };
    auto add = [&](Value* a, Value* c) { return b_.CreateAdd(a, c, "", true, true); };
    if (w.nc == 0) return;
    loop_nest({w.nc}, [&](const std::vector<Value*>& p) {
      Value* plane = mul(p[0], w.h * w.w);  // the input plane's first element
      if (scatter)
        loop_nest({w.h * w.w}, [&](const std::vector<Value*>& i) {
          b_.CreateStore(llvm::ConstantFP::get(t, 0.0), element_ptr(out, d, add(plane, i[0])));
        });
      if (w.oh * w.ow == 0) return;
      loop_nest({w.oh, w.ow}, [&](const std::vector<Value*>& o) {
        Value* at_out = add(mul(add(mul(p[0], w.oh), o[0]), w.ow), o[1]);  // the output element
        Value* y0 = b_.CreateSub(mul(o[0], w.sh), b_.getInt64(w.ph));
        Value* x0 = b_.CreateSub(mul(o[1], w.sw), b_.getInt64(w.pw));
        b_.CreateStore(llvm::ConstantFP::get(t, -std::numeric_limits<double>::infinity()), best);
        b_.CreateStore(b_.getInt64(-1), best_at);
        b_.CreateStore(llvm::ConstantFP::get(b_.getDoubleTy(), 0.0), acc);
        Value* dy = w.mode == Mode::mean_grad ? b_.CreateLoad(t, element_ptr(0, d, at_out)) : nullptr;
        loop_nest({w.kh, w.kw}, [&](const std::vector<Value*>& q) {
          // Signed: a window's first row or column is negative in the padding (no nuw,
          // which made -1 + 1 poison: a window whose output row or column is the only
          // one, so that its start folded to the constant -padding, read as all padding).
          Value* iy = b_.CreateNSWAdd(y0, q[0]);
          Value* ix = b_.CreateNSWAdd(x0, q[1]);
          Value* inside = b_.CreateAnd(
              b_.CreateAnd(b_.CreateICmpSGE(iy, b_.getInt64(0)), b_.CreateICmpSLT(iy, b_.getInt64(w.h))),
              b_.CreateAnd(b_.CreateICmpSGE(ix, b_.getInt64(0)), b_.CreateICmpSLT(ix, b_.getInt64(w.w))));
          llvm::BasicBlock* in_bb = llvm::BasicBlock::Create(b_.getContext(), "inside", fn_);
          llvm::BasicBlock* next_bb = llvm::BasicBlock::Create(b_.getContext(), "next", fn_);
          b_.CreateCondBr(inside, in_bb, next_bb);
          b_.SetInsertPoint(in_bb);
          Value* k = add(plane, add(mul(iy, w.w), ix));
          if (by_max) {  // as kernels' argmax_windows: the first largest, a NaN over any number
            Value* v = b_.CreateLoad(t, element_ptr(0, d, k));
            Value* bv = b_.CreateLoad(t, best);
            Value* at = b_.CreateLoad(b_.getInt64Ty(), best_at);
            Value* take = b_.CreateOr(b_.CreateOr(b_.CreateICmpSLT(at, b_.getInt64(0)), b_.CreateFCmpOGT(v, bv)),
                                      b_.CreateAnd(b_.CreateFCmpUNO(v, v), b_.CreateFCmpORD(bv, bv)));
            b_.CreateStore(b_.CreateSelect(take, v, bv), best);
            b_.CreateStore(b_.CreateSelect(take, k, at), best_at);
          } else if (w.mode == Mode::mean) {  // summed in double, in order
            accumulate(acc, b_.CreateLoad(t, element_ptr(0, d, k)), kernels::ReduceOp::sum, true);
          } else {  // mean_grad: o[k] += T(dy * scale)
            Value* s = b_.CreateFMul(b_.CreateFPExt(dy, b_.getDoubleTy()), llvm::ConstantFP::get(b_.getDoubleTy(), scale));
            Value* ptr = element_ptr(out, d, k);
            b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(t, ptr), b_.CreateFPTrunc(s, t)), ptr);
          }
          b_.CreateBr(next_bb);
          b_.SetInsertPoint(next_bb);
        });
        // (Every window has an element inside: padding is at most half the window.)
        Value* at = b_.CreateLoad(b_.getInt64Ty(), best_at);
        if (w.mode == Mode::max) {
          b_.CreateStore(b_.CreateLoad(t, best), element_ptr(out, d, at_out));
        } else if (w.mode == Mode::max_gather) {  // (v has x's shape)
          b_.CreateStore(b_.CreateLoad(t, element_ptr(1, d, at)), element_ptr(out, d, at_out));
        } else if (w.mode == Mode::max_grad) {
          Value* ptr = element_ptr(out, d, at);
          b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(t, ptr), b_.CreateLoad(t, element_ptr(1, d, at_out))), ptr);
        } else if (w.mode == Mode::mean) {
          Value* total = b_.CreateFMul(b_.CreateLoad(b_.getDoubleTy(), acc), llvm::ConstantFP::get(b_.getDoubleTy(), scale));
          b_.CreateStore(b_.CreateFPTrunc(total, t), element_ptr(out, d, at_out));
        }
      });
    }, {}, k_.chunk > 0);
  }

  // A reduction that keeps the input's innermost dimension (a sum over rows: sum_to of a
  // bias's gradient, a column count) would read down the columns above. Instead blocks
  // of kReduceBlock kept elements are reduced together, a row segment at a time, into
  // an array of accumulators: contiguous reads, vectorised across the block. Each
  // element combines its reduced ones in order (in double, not reassociated), so the
  // results are the interpreter's, bit for bit.
  static constexpr int64_t kReduceBlock = 1024;
  void emit_reduce_rows() {
    const DType in = k_.params[0], out = k_.params[1];
    const kernels::ReduceOp op = k_.reduce_op;
    const std::vector<int64_t> outer(k_.kept.begin(), k_.kept.end() - 1);
    const std::vector<int64_t> outer_in(k_.kept_in.begin(), k_.kept_in.end() - 1);
    const std::vector<int64_t> outer_out(k_.kept_out.begin(), k_.kept_out.end() - 1);
    const int64_t n = k_.kept.back(), out_stride = k_.kept_out.back();
    llvm::AllocaInst* acc = nullptr;
    {
      llvm::IRBuilder<> entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
      acc = entry.CreateAlloca(llvm::ArrayType::get(b_.getDoubleTy(), static_cast<uint64_t>(std::min(n, kReduceBlock))));
    }
    auto slot = [&](Value* t) { return b_.CreateInBoundsGEP(b_.getDoubleTy(), acc, t); };
    // The block of `len` kept elements from b0 (in the innermost dimension).
    auto block = [&](Value* in_base, Value* out_base, Value* b0, int64_t len) {
      loop_nest({len}, [&](const std::vector<Value*>& t) {
        b_.CreateStore(llvm::ConstantFP::get(b_.getDoubleTy(), kernels::reduce_identity(op)), slot(t[0]));
      });
      loop_nest(k_.reduced, [&](const std::vector<Value*>& j) {
        Value* row = b_.CreateAdd(b_.CreateAdd(in_base, offset(j, k_.reduced_in), "", true, true), b0, "", true, true);
        loop_nest({len}, [&](const std::vector<Value*>& t) {
          Value* at = b_.CreateAdd(row, t[0], "", true, true);
          accumulate(slot(t[0]), b_.CreateLoad(elem(in), element_ptr(0, in, at)), op, true);
        });
      });
      loop_nest({len}, [&](const std::vector<Value*>& t) {
        Value* e = b_.CreateMul(b_.CreateAdd(b0, t[0], "", true, true), b_.getInt64(out_stride), "", true, true);
        finish_sum(slot(t[0]), k_.scale, 1, out, b_.CreateAdd(out_base, e, "", true, true));
      });
    };
    auto rows = [&](const std::vector<Value*>& k) {
      Value* in_base = offset(k, outer_in);
      Value* out_base = offset(k, outer_out);
      const int64_t full = n / kReduceBlock, rest = n % kReduceBlock;
      if (full > 0)
        loop_nest({full}, [&](const std::vector<Value*>& blk) {
          block(in_base, out_base, b_.CreateMul(blk[0], b_.getInt64(kReduceBlock), "", true, true), kReduceBlock);
        });
      if (rest > 0) block(in_base, out_base, b_.getInt64(full * kReduceBlock), rest);
    };
    if (outer.empty()) rows({});
    else loop_nest(outer, rows, {}, k_.chunk > 0);
  }

  // gather: out[i, j, t] = x[i, idx[j], t]; scatter: out = target, then
  // out[i, idx[j], t] += values[i, j, t] (or = with `replace`) in the eager kernel's order. The indices were
  // checked by the step before.
  void emit_indexed(bool scatter) {
    const int out_param = scatter ? 3 : 2, src = scatter ? 2 : 0;
    const DType d = k_.params[static_cast<std::size_t>(out_param)];
    if (scatter && k_.outer * k_.n * k_.inner > 0)
      loop_nest({k_.outer * k_.n * k_.inner}, [&](const std::vector<Value*>& i) {
        b_.CreateStore(b_.CreateLoad(elem(d), element_ptr(0, d, i[0])), element_ptr(out_param, d, i[0]));
      });
    if (k_.empty) return;
    loop_nest({k_.outer, k_.count, k_.inner}, [&](const std::vector<Value*>& i) {
      Value* index = b_.CreateLoad(b_.getInt64Ty(), element_ptr(1, DType::i64, i[1]));
      auto flat = [&](Value* a, int64_t extent, Value* b) {  // (a * extent + b) * inner + i[2]
        Value* ab = b_.CreateAdd(b_.CreateMul(a, b_.getInt64(extent), "", true, true), b, "", true, true);
        return b_.CreateAdd(b_.CreateMul(ab, b_.getInt64(k_.inner), "", true, true), i[2], "", true, true);
      };
      Value* at_x = flat(i[0], k_.n, index);        // into x / out of a scatter
      Value* at_list = flat(i[0], k_.count, i[1]);  // into values / out of a gather
      if (scatter) {
        Value* p = element_ptr(out_param, d, at_x);
        Value* v = b_.CreateLoad(elem(d), element_ptr(src, d, at_list));
        b_.CreateStore(k_.replace ? v : b_.CreateFAdd(b_.CreateLoad(elem(d), p), v), p);
      } else {
        b_.CreateStore(b_.CreateLoad(elem(d), element_ptr(src, d, at_x)), element_ptr(out_param, d, at_list));
      }
    });
  }

  // A scan (LoopKernel): for i in [0, length), k = i (or length - 1 - i reversed): the
  // body's buffers for iteration k, then its steps: its kernels' bodies called (and
  // inlined by the optimiser) on them, or copies. The carries alternate between the
  // results and the temporaries, the last iteration writing the results.
  void emit_scan() {
    const LoopKernel& L = *k_.scan;
    std::vector<llvm::Function*> sub;
    for (std::size_t i = 0; i < L.kernels.size(); ++i)
      sub.push_back(Emitter(ctx_, m_, L.kernels[i]).emit_body(fmt::format("{}_{}", name_, i)));
    const std::size_t init = L.C, result = init + L.K, temp = result + L.K, xs = temp + L.K, ys = xs + L.X,
                      workspace = ys + L.Y, pool = workspace + 1, counter = pool + 1,
                      failure = counter + (L.has_index ? 1 : 0);
    if (L.guards > 0) b_.CreateStore(b_.getInt64(0), param_[failure]);
    auto memcpy = [&](Value* to, Value* from, int64_t bytes) {
      if (bytes > 0) b_.CreateMemCpy(to, llvm::MaybeAlign(1), from, llvm::MaybeAlign(1), b_.getInt64(bytes));
    };
    for (std::size_t c = 0; c < L.K; ++c)
      if (L.length == 0 || L.in_place[c]) memcpy(param_[result + c], param_[init + c], L.carry_bytes[c]);
    if (L.length == 0) return;
    llvm::PHINode* i = open_counted_loop("iteration", b_.getInt64(0));
    const int64_t n = L.length;
    Value* last_minus_i = b_.CreateSub(b_.getInt64(n - 1), i, "", true, true);
    Value* k = L.reverse ? last_minus_i : i;
    // Iteration i writes the results if n - 1 - i is even, else the temporaries, and
    // reads what iteration i - 1 wrote (the initial carries first). Written as a
    // function of i rather than a phi of the last pointer: seeing that the pointer is
    // the one just stored to, the optimiser forwarded part of the carry through
    // registers and reloaded the rest, a shuffle chain and a store-forwarding stall per
    // iteration (a 512-bit store read back in pieces) that made a small body 3x slower.
    Value* to_result = b_.CreateICmpEQ(b_.CreateAnd(last_minus_i, b_.getInt64(1)), b_.getInt64(0));
    Value* first = b_.CreateICmpEQ(i, b_.getInt64(0));
    // The body's bases: workspace, constants, inputs, outputs.
    std::vector<Value*> base{param_[workspace], param_[pool]};
    if (L.has_index) {
      b_.CreateStore(b_.CreateAdd(k, b_.getInt64(L.index0)), param_[counter]);
      base.push_back(param_[counter]);
    }
    for (std::size_t c = 0; c < L.C; ++c) base.push_back(param_[c]);
    for (std::size_t c = 0; c < L.K; ++c)
      base.push_back(L.in_place[c] ? param_[result + c]
                                   : b_.CreateSelect(first, param_[init + c],
                                                     b_.CreateSelect(to_result, param_[temp + c], param_[result + c])));
    auto slice = [&](Value* stack, int64_t bytes) {
      return b_.CreateInBoundsGEP(b_.getInt8Ty(), stack, b_.CreateMul(k, b_.getInt64(bytes), "", true, true));
    };
    for (std::size_t j = 0; j < L.X; ++j) base.push_back(slice(param_[xs + j], L.x_bytes[j]));
    for (std::size_t c = 0; c < L.K; ++c)
      base.push_back(L.in_place[c] ? param_[result + c]
                                   : b_.CreateSelect(to_result, param_[result + c], param_[temp + c]));
    for (std::size_t j = 0; j < L.Y; ++j) base.push_back(slice(param_[ys + j], L.y_bytes[j]));
    auto buffer = [&](const BufferRef& r) {
      return b_.CreateInBoundsGEP(b_.getInt8Ty(), base.at(static_cast<std::size_t>(r.base)), b_.getInt64(r.offset));
    };
    for (const LoopKernel::Step& st : L.steps) {
      if (st.guard >= 0) {
        emit_loop_guard(st, buffer(st.buffers[0]), k, param_[failure]);
        continue;
      }
      if (st.kernel < 0) {
        memcpy(buffer(st.buffers[1]), buffer(st.buffers[0]), st.bytes);
        continue;
      }
      std::vector<Value*> args;
      for (const BufferRef& r : st.buffers) args.push_back(buffer(r));
      b_.CreateCall(sub[static_cast<std::size_t>(st.kernel)], args);
    }
    close_counted_loop(i, b_.getInt64(n), "iterations_done", false);
  }

  // A guard in a loop kernel: if the first element of `cond` is not nonzero iff
  // expected, records {k + 1, the guard's number, the value} at `failure` and returns.
  void emit_loop_guard(const LoopKernel::Step& st, Value* cond, Value* k, Value* failure) {
    Value* v = b_.CreateLoad(elem(st.dtype), cond);
    Value* value = st.dtype == DType::i64   ? b_.CreateSIToFP(v, b_.getDoubleTy())
                   : st.dtype == DType::f32 ? b_.CreateFPExt(v, b_.getDoubleTy())
                                            : v;
    Value* truth = b_.CreateFCmpUNE(value, llvm::ConstantFP::get(b_.getDoubleTy(), 0.0));
    auto* fail = llvm::BasicBlock::Create(ctx_, "guard_failed", fn_);
    auto* pass = llvm::BasicBlock::Create(ctx_, "guard_held", fn_);
    llvm::MDBuilder weights(ctx_);
    b_.CreateCondBr(st.expected ? truth : b_.CreateNot(truth), pass, fail, weights.createLikelyBranchWeights());
    b_.SetInsertPoint(fail);
    b_.CreateStore(b_.CreateAdd(k, b_.getInt64(1)), failure);
    b_.CreateStore(b_.getInt64(st.guard), b_.CreateConstInBoundsGEP1_64(b_.getInt64Ty(), failure, 1));
    b_.CreateStore(value, b_.CreateConstInBoundsGEP1_64(b_.getInt64Ty(), failure, 2));
    b_.CreateRetVoid();
    b_.SetInsertPoint(pass);
  }

  void emit_transpose() {
    if (k_.empty) return;
    const DType d = k_.params[0];
    loop_nest({k_.rows, k_.cols}, [&](const std::vector<Value*>& idx) {
      Value* x = b_.CreateLoad(elem(d), element_ptr(0, d, offset(idx, {k_.cols, 1})));
      b_.CreateStore(x, element_ptr(1, d, offset(idx, {1, k_.rows})));
    }, {}, k_.chunk > 0);
  }

  llvm::LLVMContext& ctx_;
  llvm::Module& m_;
  const KernelSpec& k_;
  IRBuilder<> b_;
  llvm::Function* fn_ = nullptr;
  std::string name_;
  std::vector<Value*> param_;
};

}  // namespace

std::unique_ptr<llvm::Module> new_module(llvm::LLVMContext& context, const std::string& name,
                                         const llvm::DataLayout& layout, const std::string& triple) {
  auto module = std::make_unique<llvm::Module>(name, context);
  module->setDataLayout(layout);
  module->setTargetTriple(triple);
  return module;
}

void emit_kernel(llvm::Module& module, const KernelSpec& kernel, const std::string& name) {
  Emitter(module.getContext(), module, kernel).emit(name);
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
