// Pooling windows: which eager calls run as a generated loop, their kernel, its emission
// and its row (it claims those calls from the eager step: KernelRow::claims_call).
#include "kernels/pool.hpp"

#include <fmt/format.h>

#include <limits>

#include "kernels/emitter.hpp"
#include "schedule.hpp"

namespace reel::codegen {

namespace {

using llvm::IRBuilder;
using llvm::Type;
using llvm::Value;

// A pooling primitive on floats, with one result.
bool runs_as_pool(const Tape& tape, Var v) {
  const Op& op = tape.op(v);
  if (op.kind != OpKind::call || !op.prim->lowering.pool || op.results != 1 || !is_float(op.type.dtype)) return false;
  for (Var a : op.args)
    if (!is_float(tape.type(a).dtype)) return false;
  return true;
}

// A pooling primitive's windows in a generated loop (params: its arguments, then out).
void schedule_pool(Scheduler& sch, Var out) {
  const Tape& t = sch.tape();
  const Op& op = t.op(out);
  std::vector<VarType> types;
  for (Var a : op.args) types.push_back(t.type(a));
  KernelSpec k;
  const PoolWindow window = op.prim->lowering.pool(types, op.attrs);
  k.empty = window.nc == 0;
  k.body = PoolSpec{window};
  std::vector<BufferRef> buffers;
  for (Var a : op.args) {
    k.params.push_back(t.type(a).dtype);
    buffers.push_back(sch.ref_of(a));
  }
  k.params.push_back(op.type.dtype);
  buffers.push_back(sch.ref_of(out));
  sch.add_kernel(std::move(k), std::move(buffers));
}

// Pooling windows (PoolWindow), per plane nc (the chunked dimension), per output
// element, the window's elements in row-major order, padding skipped; the scatters
// (max_grad, mean_grad) first zero their plane and add in the eager kernel's order.
void emit_pool(KernelEmitter& e) {
  IRBuilder<>& b = e.b;
  const KernelSpec& k = e.spec;
  const PoolSpec& s = k.as<PoolSpec>();
  using Mode = PoolWindow::Mode;
  const PoolWindow& w = s.window;
  const DType d = k.params[0];
  Type* t = e.elem(d);
  const int out = static_cast<int>(k.params.size()) - 1;
  const bool by_max = w.mode == Mode::max || w.mode == Mode::max_gather || w.mode == Mode::max_grad;
  const bool scatter = w.mode == Mode::max_grad || w.mode == Mode::mean_grad;
  const double scale = 1.0 / static_cast<double>(w.kh * w.kw);
  llvm::AllocaInst *best = nullptr, *best_at = nullptr, *acc = nullptr;
  {
    llvm::IRBuilder<> entry(&e.fn->getEntryBlock(), e.fn->getEntryBlock().begin());
    best = entry.CreateAlloca(t);
    best_at = entry.CreateAlloca(b.getInt64Ty());
    acc = entry.CreateAlloca(b.getDoubleTy());
  }
  auto mul = [&](Value* a, int64_t c) { return b.CreateMul(a, b.getInt64(c), "", true, true); };
  auto add = [&](Value* a, Value* c) { return b.CreateAdd(a, c, "", true, true); };
  if (w.nc == 0) return;
  e.loop_nest({w.nc}, [&](const std::vector<Value*>& p) {
    Value* plane = mul(p[0], w.h * w.w);  // the input plane's first element
    if (scatter)
      e.loop_nest({w.h * w.w}, [&](const std::vector<Value*>& i) {
        b.CreateStore(llvm::ConstantFP::get(t, 0.0), e.element_ptr(out, d, add(plane, i[0])));
      });
    if (w.oh * w.ow == 0) return;
    e.loop_nest({w.oh, w.ow}, [&](const std::vector<Value*>& o) {
      Value* at_out = add(mul(add(mul(p[0], w.oh), o[0]), w.ow), o[1]);  // the output element
      Value* y0 = b.CreateSub(mul(o[0], w.sh), b.getInt64(w.ph));
      Value* x0 = b.CreateSub(mul(o[1], w.sw), b.getInt64(w.pw));
      b.CreateStore(llvm::ConstantFP::get(t, -std::numeric_limits<double>::infinity()), best);
      b.CreateStore(b.getInt64(-1), best_at);
      b.CreateStore(llvm::ConstantFP::get(b.getDoubleTy(), 0.0), acc);
      Value* dy = w.mode == Mode::mean_grad ? b.CreateLoad(t, e.element_ptr(0, d, at_out)) : nullptr;
      e.loop_nest({w.kh, w.kw}, [&](const std::vector<Value*>& q) {
        // Signed: a window's first row or column is negative in the padding (no nuw,
        // which made -1 + 1 poison: a window whose output row or column is the only
        // one, so that its start folded to the constant -padding, read as all padding).
        Value* iy = b.CreateNSWAdd(y0, q[0]);
        Value* ix = b.CreateNSWAdd(x0, q[1]);
        Value* inside = b.CreateAnd(
            b.CreateAnd(b.CreateICmpSGE(iy, b.getInt64(0)), b.CreateICmpSLT(iy, b.getInt64(w.h))),
            b.CreateAnd(b.CreateICmpSGE(ix, b.getInt64(0)), b.CreateICmpSLT(ix, b.getInt64(w.w))));
        llvm::BasicBlock* in_bb = llvm::BasicBlock::Create(b.getContext(), "inside", e.fn);
        llvm::BasicBlock* next_bb = llvm::BasicBlock::Create(b.getContext(), "next", e.fn);
        b.CreateCondBr(inside, in_bb, next_bb);
        b.SetInsertPoint(in_bb);
        Value* k = add(plane, add(mul(iy, w.w), ix));
        if (by_max) {  // as kernels' argmax_windows: the first largest, a NaN over any number
          Value* v = b.CreateLoad(t, e.element_ptr(0, d, k));
          Value* bv = b.CreateLoad(t, best);
          Value* at = b.CreateLoad(b.getInt64Ty(), best_at);
          Value* take = b.CreateOr(b.CreateOr(b.CreateICmpSLT(at, b.getInt64(0)), b.CreateFCmpOGT(v, bv)),
                                    b.CreateAnd(b.CreateFCmpUNO(v, v), b.CreateFCmpORD(bv, bv)));
          b.CreateStore(b.CreateSelect(take, v, bv), best);
          b.CreateStore(b.CreateSelect(take, k, at), best_at);
        } else if (w.mode == Mode::mean) {  // summed in double, in order
          e.accumulate(acc, b.CreateLoad(t, e.element_ptr(0, d, k)), kernels::ReduceOp::sum, true);
        } else {  // mean_grad: o[k] += T(dy * scale)
          Value* s = b.CreateFMul(b.CreateFPExt(dy, b.getDoubleTy()), llvm::ConstantFP::get(b.getDoubleTy(), scale));
          Value* ptr = e.element_ptr(out, d, k);
          b.CreateStore(b.CreateFAdd(b.CreateLoad(t, ptr), b.CreateFPTrunc(s, t)), ptr);
        }
        b.CreateBr(next_bb);
        b.SetInsertPoint(next_bb);
      });
      // (Every window has an element inside: padding is at most half the window.)
      Value* at = b.CreateLoad(b.getInt64Ty(), best_at);
      if (w.mode == Mode::max) {
        b.CreateStore(b.CreateLoad(t, best), e.element_ptr(out, d, at_out));
      } else if (w.mode == Mode::max_gather) {  // (v has x's shape)
        b.CreateStore(b.CreateLoad(t, e.element_ptr(1, d, at)), e.element_ptr(out, d, at_out));
      } else if (w.mode == Mode::max_grad) {
        Value* ptr = e.element_ptr(out, d, at);
        b.CreateStore(b.CreateFAdd(b.CreateLoad(t, ptr), b.CreateLoad(t, e.element_ptr(1, d, at_out))), ptr);
      } else if (w.mode == Mode::mean) {
        Value* total = b.CreateFMul(b.CreateLoad(b.getDoubleTy(), acc), llvm::ConstantFP::get(b.getDoubleTy(), scale));
        b.CreateStore(b.CreateFPTrunc(total, t), e.element_ptr(out, d, at_out));
      }
    });
  }, {}, k.chunk > 0);
}

std::string pool_key(const KernelSpec& k) {
  const PoolWindow& w = k.as<PoolSpec>().window;
  return key_head(k, "pool") +
         fmt::format("; mode {} nc {} in {}x{} out {}x{} window {}x{} stride {}x{} padding {}x{}", static_cast<int>(w.mode),
                     w.nc, w.h, w.w, w.oh, w.ow, w.kh, w.kw, w.sh, w.sw, w.ph, w.pw);
}

// The planes.
SplitExtent pool_split(const KernelSpec& k) {
  const PoolWindow& w = k.as<PoolSpec>().window;
  return {w.nc, w.oh * w.ow * w.kh * w.kw};
}

}  // namespace

extern const KernelRow pool_kernel_row{.index = kernel_index<PoolSpec>,
                                       .key = pool_key,
                                       .split = pool_split,
                                       .partials = nullptr,
                                       .emit = emit_pool,
                                       .claims_call = runs_as_pool,
                                       .schedule_call = schedule_pool,
    .call_text = "windows, loop"};

}  // namespace reel::codegen
