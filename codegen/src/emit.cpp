#include "emit.hpp"

#include <fmt/format.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <functional>
#include <unordered_map>

namespace reel::codegen {

namespace {

using llvm::IRBuilder;
using llvm::Type;
using llvm::Value;

// Elements of one primitive computed with LLVM instructions (ScalarEmitter's contract).
class LlvmScalar final : public ScalarEmitter {
 public:
  LlvmScalar(IRBuilder<>& b, llvm::Module& m, llvm::Type* t) : b_(b), m_(m), t_(t) {}

  ScalarEmitter::Value constant(double v) override { return llvm::ConstantFP::get(t_, v); }
  ScalarEmitter::Value add(ScalarEmitter::Value a, ScalarEmitter::Value b) override {
    return b_.CreateFAdd(v(a), v(b));
  }
  ScalarEmitter::Value sub(ScalarEmitter::Value a, ScalarEmitter::Value b) override {
    return b_.CreateFSub(v(a), v(b));
  }
  ScalarEmitter::Value mul(ScalarEmitter::Value a, ScalarEmitter::Value b) override {
    return b_.CreateFMul(v(a), v(b));
  }
  ScalarEmitter::Value div(ScalarEmitter::Value a, ScalarEmitter::Value b) override {
    return b_.CreateFDiv(v(a), v(b));
  }
  ScalarEmitter::Value neg(ScalarEmitter::Value a) override { return b_.CreateFNeg(v(a)); }
  ScalarEmitter::Value exp(ScalarEmitter::Value a) override { return intrinsic(llvm::Intrinsic::exp, a); }
  ScalarEmitter::Value log(ScalarEmitter::Value a) override { return intrinsic(llvm::Intrinsic::log, a); }
  ScalarEmitter::Value sin(ScalarEmitter::Value a) override { return intrinsic(llvm::Intrinsic::sin, a); }
  ScalarEmitter::Value cos(ScalarEmitter::Value a) override { return intrinsic(llvm::Intrinsic::cos, a); }
  ScalarEmitter::Value sqrt(ScalarEmitter::Value a) override { return intrinsic(llvm::Intrinsic::sqrt, a); }
  ScalarEmitter::Value tanh(ScalarEmitter::Value a) override {
    // No llvm.tanh intrinsic in LLVM 19: call libm's, declared free of side effects so
    // the vectorizer may replace it with libmvec's vector tanh.
    const bool f64 = t_->isDoubleTy();
    llvm::FunctionCallee fn = m_.getOrInsertFunction(f64 ? "tanh" : "tanhf", t_, t_);
    if (auto* f = llvm::dyn_cast<llvm::Function>(fn.getCallee())) {
      f->setDoesNotAccessMemory();
      f->setDoesNotThrow();
      f->setWillReturn();
    }
    llvm::CallInst* call = b_.CreateCall(fn, {v(a)});
    call->setDoesNotAccessMemory();
    return call;
  }
  ScalarEmitter::Value pow(ScalarEmitter::Value a, double p) override {
    llvm::Value* x = v(a);
    if (p == 1.0) return x;
    if (p == 2.0) return b_.CreateFMul(x, x);
    if (p == 3.0) return b_.CreateFMul(b_.CreateFMul(x, x), x);
    if (p == -1.0) return b_.CreateFDiv(llvm::ConstantFP::get(t_, 1.0), x);
    return b_.CreateBinaryIntrinsic(llvm::Intrinsic::pow, x, llvm::ConstantFP::get(t_, p));
  }

 private:
  static llvm::Value* v(ScalarEmitter::Value x) { return static_cast<llvm::Value*>(x); }
  llvm::Value* intrinsic(llvm::Intrinsic::ID id, ScalarEmitter::Value a) {
    return b_.CreateUnaryIntrinsic(id, v(a));
  }
  IRBuilder<>& b_;
  llvm::Module& m_;
  llvm::Type* t_;
};

// Removes size-1 dimensions, then merges neighbouring dimensions that every operand
// walks contiguously, so most loops come out one-dimensional.
void coalesce(std::vector<int64_t>& dims, std::vector<std::vector<int64_t>>& strides) {
  for (std::size_t d = dims.size(); d-- > 0;)
    if (dims[d] == 1) {
      dims.erase(dims.begin() + static_cast<std::ptrdiff_t>(d));
      for (auto& s : strides) s.erase(s.begin() + static_cast<std::ptrdiff_t>(d));
    }
  for (std::size_t d = dims.size(); d-- > 1;) {
    bool merge = true;
    for (const auto& s : strides) merge = merge && s[d - 1] == s[d] * dims[d];
    if (!merge) continue;
    dims[d - 1] *= dims[d];
    dims.erase(dims.begin() + static_cast<std::ptrdiff_t>(d));
    for (auto& s : strides) {
      s[d - 1] = s[d];
      s.erase(s.begin() + static_cast<std::ptrdiff_t>(d));
    }
  }
}

std::vector<int64_t> contiguous_strides(const Shape& shape) { return broadcast_strides(shape, shape); }

class Emitter {
 public:
  Emitter(llvm::LLVMContext& ctx, llvm::Module& m, const Tape& t, const Plan& p)
      : ctx_(ctx), m_(m), t_(t), p_(p), b_(ctx) {}

  void emit(const std::string& name) {
    Type* ptr = b_.getPtrTy();
    Type* void_t = b_.getVoidTy();
    // The body takes one pointer per buffer, all noalias: buffers never overlap, and
    // after inlining LLVM keeps that knowledge as alias scopes for the vectorizer.
    std::vector<Type*> params(p_.slots.size(), ptr);
    auto* body_t = llvm::FunctionType::get(void_t, params, false);
    fn_ = llvm::Function::Create(body_t, llvm::Function::InternalLinkage, name + "_body", m_);
    fn_->addFnAttr(llvm::Attribute::AlwaysInline);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    for (unsigned i = 0; i < params.size(); ++i) {
      fn_->addParamAttr(i, llvm::Attribute::NoAlias);
      fn_->addParamAttr(i, llvm::Attribute::getWithAlignment(ctx_, llvm::Align(64)));
      slot_ptr_.push_back(fn_->getArg(i));
    }
    auto* entry = llvm::BasicBlock::Create(ctx_, "entry", fn_);
    b_.SetInsertPoint(entry);
    for (const Step& step : p_.steps) std::visit([&](const auto& s) { emit_step(s); }, step);
    b_.CreateRetVoid();
    emit_entry(name, body_t);
  }

 private:
  void emit_entry(const std::string& name, llvm::FunctionType* body_t) {
    Type* ptr = b_.getPtrTy();
    auto* entry_t = llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, ptr, ptr}, false);
    auto* f = llvm::Function::Create(entry_t, llvm::Function::ExternalLinkage, name, m_);
    f->addFnAttr(llvm::Attribute::NoUnwind);
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", f));
    std::vector<Value*> args;
    for (const Slot& s : p_.slots) {
      if (s.kind == SlotKind::workspace) {
        args.push_back(b_.CreateInBoundsGEP(b_.getInt8Ty(), f->getArg(3), b_.getInt64(s.offset)));
        continue;
      }
      Value* table = f->getArg(s.kind == SlotKind::input ? 0 : s.kind == SlotKind::output ? 1 : 2);
      Value* at = b_.CreateInBoundsGEP(ptr, table, b_.getInt64(s.index));
      args.push_back(b_.CreateAlignedLoad(ptr, at, llvm::Align(8)));
    }
    b_.CreateCall(body_t, fn_, args);
    b_.CreateRetVoid();
  }

  Type* elem(DType d) { return d == DType::f64 ? b_.getDoubleTy() : b_.getFloatTy(); }
  Type* elem(Var v) { return elem(t_.type(v).dtype); }

  Value* base(Var v) {
    const int slot = p_.slot_of[v];
    if (slot < 0) throw Error(fmt::format("compile: internal error: %{} has no memory", v));
    return slot_ptr_[static_cast<std::size_t>(slot)];
  }
  Value* element_ptr(Var v, Value* offset) { return b_.CreateInBoundsGEP(elem(v), base(v), offset); }

  Value* offset(const std::vector<Value*>& idx, const std::vector<int64_t>& strides) {
    Value* off = b_.getInt64(0);
    for (std::size_t d = 0; d < idx.size(); ++d)
      if (strides[d] != 0)
        off = b_.CreateAdd(off, b_.CreateMul(idx[d], b_.getInt64(strides[d]), "", true, true), "",
                           true, true);
    return off;
  }

  // for i0 in [0, dims[0]) ... for ik in [0, dims[k]): body(i0..ik). Every dim > 0.
  void loop_nest(const std::vector<int64_t>& dims,
                 const std::function<void(const std::vector<Value*>&)>& body) {
    std::vector<Value*> idx;
    std::function<void(std::size_t)> level = [&](std::size_t d) {
      if (d == dims.size()) {
        body(idx);
        return;
      }
      llvm::BasicBlock* before = b_.GetInsertBlock();
      auto* header = llvm::BasicBlock::Create(ctx_, "loop", fn_);
      auto* exit = llvm::BasicBlock::Create(ctx_, "done", fn_);
      b_.CreateBr(header);
      b_.SetInsertPoint(header);
      llvm::PHINode* i = b_.CreatePHI(b_.getInt64Ty(), 2);
      i->addIncoming(b_.getInt64(0), before);
      idx.push_back(i);
      level(d + 1);
      idx.pop_back();
      Value* next = b_.CreateAdd(i, b_.getInt64(1), "", true, true);
      i->addIncoming(next, b_.GetInsertBlock());
      auto* br = b_.CreateCondBr(b_.CreateICmpULT(next, b_.getInt64(dims[d])), header, exit);
      const bool innermost = d + 1 == dims.size();
      if (!innermost || dims[d] > kMaxUnrolledTripCount)
        br->setMetadata(llvm::LLVMContext::MD_loop, no_unroll());
      b_.SetInsertPoint(exit);
    };
    level(0);
  }

  // Innermost loops this short may be unrolled completely, which lets the SLP
  // vectorizer use vector math on them. Other loops are vectorized and interleaved but
  // not unrolled further: unrolling them made compile times up to ten times longer (an
  // MLP gradient took 220 ms instead of 25 ms) for no measurable speed.
  static constexpr int64_t kMaxUnrolledTripCount = 16;

  llvm::MDNode* no_unroll() {
    llvm::Metadata* disable = llvm::MDNode::get(ctx_, llvm::MDString::get(ctx_, "llvm.loop.unroll.disable"));
    llvm::MDNode* md = llvm::MDNode::getDistinct(ctx_, {nullptr, disable});
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

  void emit_step(const LoopStep& loop) {
    std::vector<Var> external;  // variables the loop reads from memory
    auto is_member = [&](Var v) {
      return std::find(loop.members.begin(), loop.members.end(), v) != loop.members.end();
    };
    auto is_immediate = [&](Var v) {
      return t_.op(v).kind == OpKind::constant && t_.type(v).shape.empty();
    };
    for (Var m : loop.members)
      for (Var a : t_.op(m).args)
        if (!is_member(a) && !is_immediate(a) &&
            std::find(external.begin(), external.end(), a) == external.end())
          external.push_back(a);

    std::vector<int64_t> dims = loop.shape;
    std::vector<std::vector<int64_t>> strides;
    for (Var a : external) strides.push_back(broadcast_strides(t_.type(a).shape, loop.shape));
    strides.push_back(contiguous_strides(loop.shape));  // the loop's own stores
    coalesce(dims, strides);

    std::vector<llvm::AllocaInst*> acc;
    for (std::size_t i = 0; i < loop.reductions.size(); ++i) acc.push_back(new_accumulator());

    if (numel(loop.shape) > 0) {
      loop_nest(dims, [&](const std::vector<Value*>& idx) {
        std::unordered_map<Var, Value*> value;
        auto get = [&](Var a) -> Value* {
          if (auto it = value.find(a); it != value.end()) return it->second;
          Value* v;
          if (is_immediate(a)) {
            v = llvm::ConstantFP::get(elem(a), t_.op(a).value.item());
          } else {
            const auto k = std::find(external.begin(), external.end(), a) - external.begin();
            v = b_.CreateLoad(elem(a), element_ptr(a, offset(idx, strides[k])));
          }
          return value[a] = v;
        };
        Value* own = nullptr;  // this element's offset in the loop's own shape
        for (Var m : loop.members) {
          const Op& op = t_.op(m);
          if (op.prim->lowering == Lowering::broadcast) {
            value[m] = get(op.args[0]);
          } else {
            std::vector<ScalarEmitter::Value> args;
            for (Var a : op.args) args.push_back(get(a));
            LlvmScalar s(b_, m_, elem(m));
            value[m] = static_cast<Value*>(op.prim->scalar(s, args, op.attrs));
          }
          if (p_.stored[m]) {
            if (own == nullptr) own = offset(idx, strides.back());
            b_.CreateStore(value[m], element_ptr(m, own));
          }
        }
        for (std::size_t i = 0; i < loop.reductions.size(); ++i)
          accumulate(acc[i], value.at(t_.op(loop.reductions[i]).args[0]));
      });
    }
    for (std::size_t i = 0; i < loop.reductions.size(); ++i) finish_sum(acc[i], loop.reductions[i]);
  }

  // Sums to one number accumulate in double, as the interpreter's do, for f32 too: an
  // f32 sum of many terms followed by a cancellation can keep only a few good digits.
  llvm::AllocaInst* new_accumulator() {
    llvm::IRBuilder<> entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
    llvm::AllocaInst* acc = entry.CreateAlloca(b_.getDoubleTy());
    b_.CreateStore(llvm::ConstantFP::get(b_.getDoubleTy(), 0.0), acc);
    return acc;
  }
  void accumulate(llvm::AllocaInst* acc, Value* x) {
    if (!x->getType()->isDoubleTy()) x = b_.CreateFPExt(x, b_.getDoubleTy());
    Value* sum = b_.CreateFAdd(b_.CreateLoad(b_.getDoubleTy(), acc), x);
    llvm::cast<llvm::Instruction>(sum)->setFastMathFlags(reduction_flags());
    b_.CreateStore(sum, acc);
  }
  // Scales the sum (mean: 1/n) and stores it as element `at` of reduction r.
  void finish_sum(llvm::AllocaInst* acc, Var r, Value* at = nullptr) {
    const Op& op = t_.op(r);
    Value* total = b_.CreateLoad(b_.getDoubleTy(), acc);
    const double scale = op.prim->reduce_scale(t_.type(op.args[0]));
    if (scale != 1.0) total = b_.CreateFMul(total, llvm::ConstantFP::get(b_.getDoubleTy(), scale));
    if (elem(r) != total->getType()) total = b_.CreateFPTrunc(total, elem(r));
    b_.CreateStore(total, at ? element_ptr(r, at) : base(r));
  }

  // Each result element is summed in a register (in double, like the interpreter),
  // looping over the kept dimensions outside and the reduced ones inside.
  void emit_step(const ReduceStep& r) {
    const Op& op = t_.op(r.out);
    const VarType in = t_.type(r.in);
    Type* T = elem(r.out);
    const int64_t out_n = numel(t_.type(r.out).shape);
    if (numel(in.shape) == 0) {  // a sum of nothing
      b_.CreateMemSet(base(r.out), b_.getInt8(0), out_n * static_cast<int64_t>(dtype_size(in.dtype)),
                      llvm::MaybeAlign(64));
      return;
    }
    const Shape target = op.prim->reduce_target(in, op.attrs);
    const std::vector<int64_t> in_strides = contiguous_strides(in.shape);
    const std::vector<int64_t> out_strides = broadcast_strides(target, in.shape);
    std::vector<int64_t> kept, reduced;
    std::vector<std::vector<int64_t>> kept_strides(2), reduced_strides(1);
    for (std::size_t d = 0; d < in.shape.size(); ++d) {
      if (in.shape[d] == 1) continue;
      if (out_strides[d] != 0) {
        kept.push_back(in.shape[d]);
        kept_strides[0].push_back(in_strides[d]);
        kept_strides[1].push_back(out_strides[d]);
      } else {
        reduced.push_back(in.shape[d]);
        reduced_strides[0].push_back(in_strides[d]);
      }
    }
    coalesce(kept, kept_strides);
    coalesce(reduced, reduced_strides);
    loop_nest(kept, [&](const std::vector<Value*>& k) {
      Value* in_base = offset(k, kept_strides[0]);
      Value* out_offset = offset(k, kept_strides[1]);
      llvm::AllocaInst* acc = new_accumulator();
      loop_nest(reduced, [&](const std::vector<Value*>& j) {
        Value* at = b_.CreateAdd(in_base, offset(j, reduced_strides[0]), "", true, true);
        accumulate(acc, b_.CreateLoad(T, element_ptr(r.in, at)));
      });
      finish_sum(acc, r.out, out_offset);
    });
  }

  void emit_step(const MatmulStep& m) {
    const bool f64 = t_.type(m.out).dtype == DType::f64;
    const Shape& as = t_.type(m.a).shape;
    const Shape& bs = t_.type(m.b).shape;
    Type* i32 = b_.getInt32Ty();
    Type* i64 = b_.getInt64Ty();
    Type* ptr = b_.getPtrTy();
    auto i = [&](int64_t v) { return b_.getInt64(v); };
    if (bs.size() == 1) {
      auto callee = m_.getOrInsertFunction(f64 ? "reel_rt_gemv_f64" : "reel_rt_gemv_f32",
                                           b_.getVoidTy(), i32, i64, i64, ptr, ptr, ptr);
      b_.CreateCall(callee, {b_.getInt32(m.trans_a), i(as[0]), i(as[1]), base(m.a), base(m.b),
                             base(m.out)});
      return;
    }
    const int64_t M = m.trans_a ? as[1] : as[0];
    const int64_t K = m.trans_a ? as[0] : as[1];
    const int64_t N = m.trans_b ? bs[0] : bs[1];
    auto callee = m_.getOrInsertFunction(f64 ? "reel_rt_gemm_f64" : "reel_rt_gemm_f32",
                                         b_.getVoidTy(), i32, i32, i64, i64, i64, ptr, i64, ptr,
                                         i64, ptr, i64);
    b_.CreateCall(callee, {b_.getInt32(m.trans_a), b_.getInt32(m.trans_b), i(M), i(N), i(K),
                           base(m.a), i(as[1]), base(m.b), i(bs[1]), base(m.out), i(N)});
  }

  void emit_step(const TransposeStep& s) {
    const Shape& in = t_.type(s.in).shape;  // [rows, cols]
    if (numel(in) == 0) return;
    Type* T = elem(s.out);
    loop_nest({in[0], in[1]}, [&](const std::vector<Value*>& idx) {
      Value* x = b_.CreateLoad(T, element_ptr(s.in, offset(idx, {in[1], 1})));
      b_.CreateStore(x, element_ptr(s.out, offset(idx, {1, in[0]})));
    });
  }

  void emit_step(const CopyStep& c) {
    const VarType& t = t_.type(c.from);
    const int64_t bytes = numel(t.shape) * static_cast<int64_t>(dtype_size(t.dtype));
    b_.CreateMemCpy(slot_ptr_[static_cast<std::size_t>(c.slot)], llvm::MaybeAlign(64), base(c.from),
                    llvm::MaybeAlign(64), bytes);
  }

  llvm::LLVMContext& ctx_;
  llvm::Module& m_;
  const Tape& t_;
  const Plan& p_;
  IRBuilder<> b_;
  llvm::Function* fn_ = nullptr;
  std::vector<Value*> slot_ptr_;
};

}  // namespace

std::unique_ptr<llvm::Module> emit_module(llvm::LLVMContext& context, const Tape& tape,
                                          const Plan& plan, const std::string& name,
                                          const llvm::DataLayout& layout,
                                          const std::string& triple) {
  auto module = std::make_unique<llvm::Module>(name, context);
  module->setDataLayout(layout);
  module->setTargetTriple(triple);
  Emitter(context, *module, tape, plan).emit(name);
  std::string problems;
  llvm::raw_string_ostream os(problems);
  if (llvm::verifyModule(*module, &os))
    throw Error(fmt::format("compile: internal error: invalid LLVM IR: {}", os.str()));
  return module;
}

}  // namespace reel::codegen
