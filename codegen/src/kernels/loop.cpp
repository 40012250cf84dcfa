// The fused elementwise loop: its scheduling into a LoopSpec (loads, element programs,
// stores, sums; ranges of the innermost dimension), its emission, and its row.
#include "kernels/loop.hpp"

#include <fmt/compile.h>
#include <fmt/format.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/Intrinsics.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <unordered_map>

#include "kernels/emitter.hpp"
#include "kernels/reduce.hpp"
#include "schedule.hpp"

namespace reel::codegen {

namespace {

using llvm::IRBuilder;
using llvm::Type;
using llvm::Value;

// ---- Scheduling

// Each tape variable's local value in a loop, numbered in the scheduler's scratch
// (Scheduler::var_scratch), which it leaves as it found it.
class LocalValues {
 public:
  explicit LocalValues(std::vector<int>& scratch) : s_(scratch) {}
  LocalValues(const LocalValues&) = delete;
  LocalValues& operator=(const LocalValues&) = delete;
  ~LocalValues() {
    for (Var v : set_) s_[static_cast<std::size_t>(v)] = -1;
  }
  void set(Var v, int value) {
    int& x = s_[static_cast<std::size_t>(v)];
    if (x < 0) set_.push_back(v);
    x = value;
  }
  bool contains(Var v) const { return s_[static_cast<std::size_t>(v)] >= 0; }
  int at(Var v) const {
    const int x = s_[static_cast<std::size_t>(v)];
    if (x < 0) throw Error(fmt::format("compile: internal error: %{} has no value in its loop", v));
    return x;
  }

 private:
  std::vector<int>& s_;
  std::vector<Var> set_;
};

// The loads of a loop: the inputs read element for element, then the strided reads, then
// the gathers' indexed loads; `value` numbers each tape variable's local value.
struct LoopLoads {
  explicit LoopLoads(std::vector<int>& scratch) : value(scratch) {}
  // Each parameter's slot and the element its pointer starts at: 0, or a strided read's
  // offset (its own parameter, so that reads of different elements share a kernel).
  std::vector<int> param_slots;
  std::vector<int64_t> param_offsets;
  LocalValues value;                            // tape variable -> local value
  std::map<std::size_t, Var> gathered_indices;  // a gather's load -> its indices
  std::map<std::size_t, Var> constant_loads;    // a constant's load -> the constant
  std::vector<int> placed_params;               // per LoopStep::placed: its parameter
};

void add_loads(const Tape& t, const Plan& p, const LoopStep& loop, KernelSpec& k, LoopSpec& s, LoopLoads& ls) {
  auto param = [&](Var v, int64_t offset = 0) {
    const int slot = p.slot_of[v];
    for (std::size_t i = 0; i < ls.param_slots.size(); ++i)
      if (ls.param_slots[i] == slot && ls.param_offsets[i] == offset) return static_cast<int>(i);
    ls.param_slots.push_back(slot);
    ls.param_offsets.push_back(offset);
    k.params.push_back(t.type(v).dtype);
    return static_cast<int>(ls.param_slots.size()) - 1;
  };
  // Slots the loop writes: a read of one of them keeps the one parameter (a pointer of
  // its own would alias the stores through a noalias one).
  std::vector<int> written;
  for (Var m : loop.members)
    if (p.stored[m]) written.push_back(p.slot_of[m]);
  for (Var r : loop.reductions) written.push_back(p.slot_of[r]);
  std::vector<Var> plain;
  for (Var m : loop.computed())
    if (!is_indexed_member(t, m))
      for (Var a : t.op(m).args) plain.push_back(a);
  for (Var a : loop_inputs(t, loop)) {
    // (A strided read read again, which a gather may also read in memory, is loaded
    // from its source below.)
    if (std::find(plain.begin(), plain.end(), a) == plain.end() ||
        std::find(loop.rereads.begin(), loop.rereads.end(), a) != loop.rereads.end())
      continue;
    ls.value.set(a, static_cast<int>(s.loads.size()));
    if (t.op(a).kind == OpKind::constant) ls.constant_loads[s.loads.size()] = a;
    // (A loop of one element iterates over nothing: loop_shape.)
    const std::vector<int64_t> strides =
        loop.shape.empty() ? std::vector<int64_t>{} : broadcast_strides(t.type(a).shape, loop.shape);
    s.loads.push_back({param(a), t.type(a).dtype, strides, -1, {}, 0, {}, {}});
  }
  // Strided reads, members or read again: loads at their source's offset and strides (a
  // read again, broadcast to the loop's shape).
  std::vector<Var> strided;
  for (Var m : loop.members)
    if (is_strided_member(t, m)) strided.push_back(m);
  strided.insert(strided.end(), loop.rereads.begin(), loop.rereads.end());
  for (Var m : strided) {
    const Var x = t.op(m).args[0];
    StridedMap sm = strided_map(t, m);
    if (loop.shape.empty()) sm.strides.clear();
    else if (t.type(m).shape != loop.shape) sm.strides = broadcast_strides(sm.strides, t.type(m).shape, loop.shape);
    ls.value.set(m, static_cast<int>(s.loads.size()));
    if (sm.offset > 0 && std::find(written.begin(), written.end(), p.slot_of[x]) == written.end())
      s.loads.push_back({param(x, sm.offset), t.type(x).dtype, sm.strides, -1, {}, 0, {}, {}, 0});
    else
      s.loads.push_back({param(x), t.type(x).dtype, sm.strides, -1, {}, 0, {}, {}, sm.offset});
  }
  for (Var m : loop.members) {
    if (!is_gather_member(t, m)) continue;
    const Op& op = t.op(m);
    const Var x = op.args[0], idx = op.args[1];
    const Indexed g = indexed_geometry(t, op);
    // The result's dimensions: x's before the axis, the indices', x's after it.
    const std::vector<int64_t> xs = contiguous(t.type(x).shape), is = contiguous(t.type(idx).shape);
    const std::size_t rank = t.type(idx).shape.size(), axis = static_cast<std::size_t>(g.axis);
    LoopSpec::Load l{param(x), t.type(x).dtype, {}, param(idx), {}, xs[axis], {}, {}};
    for (std::size_t d = 0; d < loop.shape.size(); ++d) {
      const bool outer = d < axis, in_indices = !outer && d < axis + rank;
      l.strides.push_back(outer ? xs[d] : in_indices ? 0 : xs[d - rank + 1]);
      l.index_strides.push_back(in_indices ? is[d - axis] : 0);
    }
    ls.value.set(m, static_cast<int>(s.loads.size()));
    ls.gathered_indices[s.loads.size()] = idx;
    s.loads.push_back(std::move(l));
  }
  for (Var m : loop.members)
    if (p.stored[m]) param(m);
  for (Var r : loop.reductions) param(r);
  // Places in a placement's result: the place's first element moves the pointer (a
  // runtime argument), so loops differing only in where they write share a kernel.
  for (const LoopStep::Placed& pl : loop.placed) ls.placed_params.push_back(param(pl.out, pl.offset));
}

// The slot's parameter among the loop's (every stored value and sum has one: add_loads).
int param_of(const Plan& p, const LoopLoads& ls, Var v) {
  for (std::size_t i = 0; i < ls.param_slots.size(); ++i)
    if (ls.param_slots[i] == p.slot_of[v] && ls.param_offsets[i] == 0) return static_cast<int>(i);
  throw Error(fmt::format("compile: internal error: %{} has no parameter in its loop", v));
}

// Coalesces the loop's dimensions with every stride vector it has.
void coalesce_loop(LoopSpec& s) {
  std::vector<std::vector<int64_t>> strides;
  for (const auto& l : s.loads) strides.push_back(l.strides);
  for (const auto& st : s.stores) strides.push_back(st.strides);
  for (const auto& l : s.loads)
    if (l.index_param >= 0) strides.push_back(l.index_strides);
  for (const auto& su : s.sums)
    if (!su.strides.empty()) strides.push_back(su.strides);
  coalesce(s.dims, strides);
  std::size_t next = 0;
  for (auto& l : s.loads) l.strides = strides[next++];
  for (auto& st : s.stores) st.strides = strides[next++];
  for (auto& l : s.loads)
    if (l.index_param >= 0) l.index_strides = strides[next++];
  for (auto& su : s.sums)
    if (!su.strides.empty()) su.strides = strides[next++];
}

// Loads along the innermost dimension only (element strides 0 elsewhere, 1 there) of a
// constant made of a few ranges, each regular, are read range by range, the innermost
// loop split at the ranges' ends (kMaxSegments ranges at most, for all such loads):
// - a gather whose constant indices run up by one in each range (a shift [0, 0, 1, ...,
//   n-2] is two ranges, a slice one) reads contiguously, not by a vector gather;
// - a constant that is the same throughout each range (a one-hot or a step vector, bit
//   for bit) reads one element per range, which the optimiser takes out of the loop.
constexpr std::size_t kMaxSegments = 4;
void split_innermost(const Tape& t, LoopSpec& s, const LoopLoads& ls) {
  if (s.dims.empty()) return;
  const int64_t n = s.dims.back();
  auto innermost_only = [](const std::vector<int64_t>& st) {
    return std::all_of(st.begin(), st.end() - 1, [](int64_t x) { return x == 0; }) && st.back() == 1;
  };
  std::vector<int64_t> ends;  // the accepted loads' ranges' ends, merged
  std::vector<std::size_t> split;
  auto try_split = [&](std::size_t load, const std::function<bool(int64_t)>& continues) {
    std::vector<int64_t> mine = ends;
    for (int64_t j = 1; j <= n; ++j)
      if (j == n || !continues(j)) mine.push_back(j);
    std::sort(mine.begin(), mine.end());
    mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
    if (mine.size() > kMaxSegments) return;
    ends = std::move(mine);
    split.push_back(load);
  };
  for (const auto& [load, idx] : ls.gathered_indices)
    if (t.op(idx).kind == OpKind::constant && innermost_only(s.loads[load].index_strides)) {
      const int64_t* v = t.op(idx).value.data<int64_t>();
      try_split(load, [v](int64_t j) { return v[j] == v[j - 1] + 1; });
    }
  for (const auto& [load, c] : ls.constant_loads)
    if (innermost_only(s.loads[load].strides)) {
      const auto* v = static_cast<const unsigned char*>(t.op(c).value.raw());
      const std::size_t size = dtype_size(t.type(c).dtype);
      try_split(load, [v, size](int64_t j) {
        return std::memcmp(v + static_cast<std::size_t>(j) * size, v + static_cast<std::size_t>(j - 1) * size, size) == 0;
      });
    }
  if (split.empty()) return;
  s.segments = ends;
  for (std::size_t load : split) {
    LoopSpec::Load& l = s.loads[load];
    const int64_t* v = l.index_param >= 0 ? t.op(ls.gathered_indices.at(load)).value.data<int64_t>() : nullptr;
    int64_t start = 0;
    for (int64_t end : ends) {
      if (v != nullptr) l.deltas.push_back(v[start] - start);
      else l.fixed.push_back(start);
      start = end;
    }
  }
}

void schedule_loop(Scheduler& sch, const LoopStep& loop) {
  const Tape& t = sch.tape();
  const Plan& p = sch.plan();
  // A loop that writes nothing (its strided reads all read again where they are used)
  // and checks no indices is no step at all.
  if (loop.reductions.empty() && loop.placed.empty() && loop.checks.empty() &&
      std::none_of(loop.members.begin(), loop.members.end(), [&](Var m) { return p.stored[m]; }))
    return;
  KernelSpec k;
  LoopSpec s;
  LoopLoads ls(sch.var_scratch());
  add_loads(t, p, loop, k, s, ls);
  // A value in the loop: a member's, or a view's (its member's).
  auto value_of = [&](Var a) {
    while (!ls.value.contains(a) && std::find(loop.views.begin(), loop.views.end(), a) != loop.views.end())
      a = t.op(a).args[0];
    return ls.value.at(a);
  };
  // (Values computed again come first: they read only what the loop loads.)
  for (Var m : loop.computed()) {
    if (is_indexed_member(t, m)) continue;
    const Op& op = t.op(m);
    LoopSpec::Inst inst{op.prim, {}, {}, op.type.dtype};
    if (op.prim->structure == Structure::elementwise) inst.element = sch.element_rule(op);
    for (Var a : op.args) inst.args.push_back(value_of(a));
    ls.value.set(m, static_cast<int>(s.loads.size() + s.insts.size()));
    s.insts.push_back(std::move(inst));
  }
  for (Var m : loop.members)
    if (p.stored[m]) s.stores.push_back({ls.value.at(m), param_of(p, ls, m), contiguous(loop.shape)});
  for (std::size_t i = 0; i < loop.placed.size(); ++i)
    s.stores.push_back({value_of(loop.placed[i].value), ls.placed_params[i], loop.placed[i].strides});
  for (Var r : loop.reductions) {
    const Op& op = t.op(r);
    LoopSpec::Sum sum{value_of(op.args[0]), param_of(p, ls, r), op.prim->lowering.reduce_scale(t.type(op.args[0]), op.attrs),
                      op.type.dtype, {}, 1};
    const Shape target = op.prim->lowering.reduce_target(t.type(op.args[0]), op.attrs);
    if (numel(target) > 1) {  // column or row sums: the result's element at the kept dimensions
      sum.strides = broadcast_strides(target, loop.shape);
      sum.count = numel(target);
      sum.rows = is_trailing_sum(t, r);
    }
    s.sums.push_back(std::move(sum));
  }
  s.dims = loop.shape;
  k.empty = numel(loop.shape) == 0;
  coalesce_loop(s);
  if (!k.empty) split_innermost(t, s, ls);
  for (Var g : loop.checks) sch.add_step(index_check(sch, g));
  k.body = std::move(s);
  sch.add_kernel(std::move(k), ls.param_slots, ls.param_offsets);
}

// ---- Emission

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

// sin(x) and cos(x) of one x, computed in one block of a kernel over no dimensions: one
// call of libm's sincos, which costs about what one of them does (a rotation's sine and
// cosine, everywhere in kinematics). Not in a loop over elements, where the vectorizer
// replaces each call with libmvec's vector form, which has no sincos. `values` (the
// kernel's values so far) are updated.
void fuse_sincos(KernelEmitter& e, llvm::BasicBlock& block, std::vector<Value*>& values) {
  llvm::Module& m = e.module;
  struct Pair {
    Value* x;
    llvm::CallInst *sin = nullptr, *cos = nullptr;  // the first of each
  };
  std::vector<Pair> pairs;  // in order of first use
  for (llvm::Instruction& i : block)
    if (auto* call = llvm::dyn_cast<llvm::IntrinsicInst>(&i)) {
      const bool sin = call->getIntrinsicID() == llvm::Intrinsic::sin, cos = call->getIntrinsicID() == llvm::Intrinsic::cos;
      if (!sin && !cos) continue;
      Value* x = call->getArgOperand(0);
      auto p = std::find_if(pairs.begin(), pairs.end(), [&](const Pair& q) { return q.x == x; });
      if (p == pairs.end()) p = pairs.insert(pairs.end(), Pair{x});
      if (sin && p->sin == nullptr) p->sin = call;
      if (cos && p->cos == nullptr) p->cos = call;
    }
  for (std::size_t k = 0; k < pairs.size(); ++k) {
    const auto [x, s, c] = pairs[k];
    if (s == nullptr || c == nullptr) continue;
    Type* t = x->getType();
    llvm::PointerType* ptr = llvm::PointerType::getUnqual(m.getContext());
    llvm::FunctionCallee fn = m.getOrInsertFunction(
        t->isDoubleTy() ? "sincos" : "sincosf",
        llvm::FunctionType::get(llvm::Type::getVoidTy(m.getContext()), {t, ptr, ptr}, false));
    if (auto* f = llvm::dyn_cast<llvm::Function>(fn.getCallee())) {
      f->setOnlyAccessesArgMemory();
      f->setOnlyWritesMemory();
      f->setDoesNotThrow();
      f->setWillReturn();
    }
    llvm::AllocaInst* sin_at = e.entry_alloca(t);
    llvm::AllocaInst* cos_at = e.entry_alloca(t);
    IRBuilder<> b(s->comesBefore(c) ? s : c);
    b.CreateCall(fn, {x, sin_at, cos_at});
    Value* sin = b.CreateLoad(t, sin_at);
    Value* cos = b.CreateLoad(t, cos_at);
    for (auto [old, now] : {std::pair{s, sin}, std::pair{c, cos}}) {
      old->replaceAllUsesWith(now);
      std::replace(values.begin(), values.end(), static_cast<Value*>(old), now);
      for (std::size_t later = k + 1; later < pairs.size(); ++later)
        if (pairs[later].x == old) pairs[later].x = now;  // (the sine of a sine)
      old->eraseFromParent();
    }
  }
}

// A row sum's kept (leading) dimensions and their strides into its result.
std::pair<std::vector<int64_t>, std::vector<int64_t>> kept_rows(const LoopSpec& s, const LoopSpec::Sum& su) {
  std::size_t kept = su.strides.size();
  while (kept > 0 && su.strides[kept - 1] == 0) --kept;
  return {std::vector<int64_t>(s.dims.begin(), s.dims.begin() + static_cast<std::ptrdiff_t>(kept)),
          std::vector<int64_t>(su.strides.begin(), su.strides.begin() + static_cast<std::ptrdiff_t>(kept))};
}

// Each result of a row sum (of this chunk's rows) set to f(its value).
void over_rows(KernelEmitter& e, const LoopSpec& s, const LoopSpec::Sum& su, const std::function<Value*(Value*)>& f) {
  const auto [dims, strides] = kept_rows(s, su);
  e.loop_nest(dims, [&](const std::vector<Value*>& j) {
    Value* at = e.element_ptr(su.param, DType::f64, e.offset(j, strides));
    e.b.CreateStore(f(e.b.CreateLoad(e.b.getDoubleTy(), at)), at);
  }, {}, e.spec.chunk > 0);
}

void emit_loop(KernelEmitter& e) {
  IRBuilder<>& b = e.b;
  const KernelSpec& k = e.spec;
  const LoopSpec& s = k.as<LoopSpec>();
  std::vector<llvm::AllocaInst*> acc;
  for (const LoopSpec::Sum& su : s.sums) {
    acc.push_back(su.rows ? nullptr : su.strides.empty() ? e.new_accumulator() : e.new_columns(su.count));
    if (su.rows && !k.empty) over_rows(e, s, su, [&](Value*) { return llvm::ConstantFP::get(b.getDoubleTy(), 0.0); });
  }
  if (!k.empty) {
    e.loop_nest(s.dims, [&](const std::vector<Value*>& idx) {
      std::vector<Value*> value;
      // Every load first: an in-place store may overwrite an element it reads.
      for (const auto& l : s.loads) {
        Value* at = e.offset(idx, l.strides);
        if (l.offset != 0) at = b.CreateAdd(at, b.getInt64(l.offset), "", true, true);
        if (!l.fixed.empty()) {  // a constant's, the same throughout this range
          at = b.getInt64(l.fixed[e.segment]);
        } else if (!l.deltas.empty()) {  // a gather's, at constant indices running up in this range
          Value* j = b.CreateAdd(idx.back(), b.getInt64(l.deltas[e.segment]), "", false, true);  // (a delta may be negative)
          at = b.CreateAdd(at, b.CreateMul(j, b.getInt64(l.index_stride), "", true, true), "", true, true);
        } else if (l.index_param >= 0) {  // a gather's: at the index read, checked before the kernel
          Value* j = b.CreateLoad(b.getInt64Ty(), e.element_ptr(l.index_param, DType::i64, e.offset(idx, l.index_strides)));
          at = b.CreateAdd(at, b.CreateMul(j, b.getInt64(l.index_stride), "", true, true), "", true, true);
        }
        value.push_back(b.CreateLoad(e.elem(l.dtype), e.element_ptr(l.param, l.dtype, at)));
      }
      for (const auto& inst : s.insts) {
        if (inst.prim->structure == Structure::broadcast) {
          value.push_back(value[static_cast<std::size_t>(inst.args[0])]);
          continue;
        }
        std::vector<Value*> args;
        // Elementwise primitives take their result's dtype, but for a conversion (cast
        // between f32 and f64, or from i64): its argument is converted as it is read.
        for (int a : inst.args) {
          Value* x = value[static_cast<std::size_t>(a)];
          if (x->getType()->isIntegerTy()) x = b.CreateSIToFP(x, b.getDoubleTy());  // (to f32 through f64, as eager)
          args.push_back(b.CreateFPCast(x, e.elem(inst.dtype)));
        }
        value.push_back(ElementEmitter(b, e.module, e.elem(inst.dtype)).emit(inst.element->program, args));
      }
      if (s.dims.empty()) fuse_sincos(e, *b.GetInsertBlock(), value);
      for (const auto& st : s.stores) {
        Value* at = e.offset(idx, st.strides);
        if (st.offset != 0) at = b.CreateAdd(at, b.getInt64(st.offset), "", true, true);
        b.CreateStore(value[static_cast<std::size_t>(st.value)],
                      e.element_ptr(st.param, k.params[static_cast<std::size_t>(st.param)], at));
      }
      for (std::size_t i = 0; i < s.sums.size(); ++i) {
        const LoopSpec::Sum& su = s.sums[i];
        Value* v = value[static_cast<std::size_t>(su.value)];
        if (su.strides.empty()) e.accumulate(acc[i], v);
        else if (su.rows) e.accumulate(e.element_ptr(su.param, DType::f64, e.offset(idx, su.strides)), v);
        else e.accumulate(b.CreateInBoundsGEP(b.getDoubleTy(), acc[i], e.offset(idx, su.strides)), v, kernels::ReduceOp::sum, true);
      }
    }, s.segments, k.chunk > 0);
  }
  int64_t partial_at = 0;  // a chunk's partial results: each sum's, one after another (count each)
  for (std::size_t i = 0; i < s.sums.size(); ++i) {
    const LoopSpec::Sum& su = s.sums[i];
    if (su.rows) {
      if (su.scale != 1.0 && !k.empty)
        over_rows(e, s, su, [&](Value* x) { return b.CreateFMul(x, llvm::ConstantFP::get(b.getDoubleTy(), su.scale)); });
    } else if (k.chunk > 0) {
      e.store_partial(acc[i], partial_at, su.count);
      partial_at += su.count;
    } else if (!su.strides.empty()) {
      e.loop_nest({su.count}, [&](const std::vector<Value*>& j) {
        e.finish_sum(b.CreateInBoundsGEP(b.getDoubleTy(), acc[i], j[0]), su.scale, su.param, su.dtype, j[0]);
      });
    } else {
      e.finish_sum(acc[i], su.scale, su.param, su.dtype, b.getInt64(0));
    }
  }
}

// ---- The kernel's row

std::string loop_key(const KernelSpec& k) {
  const LoopSpec& s = k.as<LoopSpec>();
  std::string key = key_head(k, "loop", s.dims, s.segments);
  // (Formatted in place with compiled formats: a scalar trace makes thousands of these
  // keys, and parsing the formats was a quarter of scheduling one.)
  auto out = std::back_inserter(key);
  for (const auto& l : s.loads) {
    fmt::format_to(out, FMT_COMPILE("; load {} {} "), l.param, dtype_name(l.dtype));
    append_ints(key, l.strides);
    if (l.index_param >= 0) {
      fmt::format_to(out, FMT_COMPILE(" at {} "), l.index_param);
      append_ints(key, l.index_strides);
      fmt::format_to(out, FMT_COMPILE(" x {}"), l.index_stride);
    }
    if (!l.deltas.empty()) append_ints(key += " shifted ", l.deltas);
    if (!l.fixed.empty()) append_ints(key += " fixed ", l.fixed);
    if (l.offset != 0) fmt::format_to(out, FMT_COMPILE(" +{}"), l.offset);
  }
  // An elementwise operation by its element program, not its name: primitives with
  // the same math (a user's logistic and sigmoid) share kernels.
  for (const auto& i : s.insts) {
    key.append("; ").append(dtype_name(i.dtype)).push_back(' ');
    if (i.prim->structure == Structure::elementwise) key.append("[").append(i.element->text).push_back(']');
    else key.append(i.prim->name);
    key.push_back('(');
    for (std::size_t a = 0; a < i.args.size(); ++a) fmt::format_to(out, FMT_COMPILE("{}{}"), a > 0 ? "," : "", i.args[a]);
    key.push_back(')');
  }
  for (const auto& st : s.stores) {
    fmt::format_to(out, FMT_COMPILE("; store {} {} "), st.value, st.param);
    append_ints(key, st.strides);
    if (st.offset != 0) fmt::format_to(out, FMT_COMPILE(" +{}"), st.offset);
  }
  for (const auto& su : s.sums) {
    fmt::format_to(out, FMT_COMPILE("; sum {} {} {} {}"), su.value, su.param, su.scale, dtype_name(su.dtype));
    if (!su.strides.empty()) {
      fmt::format_to(out, FMT_COMPILE(" {} {} "), su.rows ? "rows" : "columns", su.count);
      append_ints(key, su.strides);
    }
  }
  return key;
}

// The outer dimension, unless it is the only one and segmented. Column sums' chunks
// would be blocks of the reduced (leading) dimension, each with a partial array; should
// the outer dimension be a kept one (not expected), the loop runs whole. Row sums' chunks
// are blocks of their rows.
SplitExtent loop_split(const KernelSpec& k) {
  const LoopSpec& s = k.as<LoopSpec>();
  if (std::any_of(s.sums.begin(), s.sums.end(),
                  [](const LoopSpec::Sum& su) { return !su.rows && !su.strides.empty() && su.strides[0] != 0; }))
    return {};
  if (s.dims.empty() || (s.dims.size() == 1 && !s.segments.empty())) return {};
  return {s.dims[0], product(s.dims, 1)};
}

void loop_partials(const KernelSpec& k, ParallelKernelArgs& parallel) {
  for (const LoopSpec::Sum& sum : k.as<LoopSpec>().sums)
    if (!sum.rows)  // (a chunk's rows are its own)
      parallel.sums.push_back(
        {.param = sum.param, .scale = sum.scale, .dtype = sum.dtype, .op = kernels::ReduceOp::sum, .count = sum.count});
}

// ---- The step's row

void loop_accesses(const Tape& t, const Plan& p, const Step& step, const AccessFn& f) {
  const auto& loop = std::get<LoopStep>(step);
  for (Var a : loop_inputs(t, loop)) f(a, false);
  for (Var m : loop.members)
    if (p.stored[m]) f(m, true);
  for (Var r : loop.reductions) f(r, true);
  for (const LoopStep::Placed& pl : loop.placed) f(pl.out, true);
}

StepCost loop_cost(const Tape&, const Step& step, int64_t chunk_elements) {
  const auto& loop = std::get<LoopStep>(step);
  if (!loop.checks.empty()) return {};  // (index checks may throw)
  return kernel_cost(numel(loop.shape), chunk_elements);
}

std::string loop_text(const Tape& t, const Plan& p, const Step& step) {
  const auto& loop = std::get<LoopStep>(step);
  const std::vector<Var> reads = loop_inputs(t, loop);
  std::vector<Var> stores;
  for (Var m : loop.members)
    if (p.stored[m]) stores.push_back(m);
  std::string out = fmt::format("loop {} over {}: reads [{}] computes [{}] stores [{}]",
                                dtype_name(t.type(loop.members[0]).dtype), shape_str(loop.shape), var_list(reads),
                                var_list(loop.members), var_list(stores));
  if (!loop.recomputed.empty()) out += fmt::format(" computes again [{}]", var_list(loop.recomputed));
  if (!loop.reductions.empty()) out += fmt::format(" sums [{}]", var_list(loop.reductions));
  if (!loop.placed.empty()) {
    std::vector<std::string> placed;
    for (const LoopStep::Placed& pl : loop.placed) placed.push_back(fmt::format("%{} into %{}", pl.value, pl.out));
    out += fmt::format(" places [{}]", fmt::join(placed, ", "));
  }
  std::vector<std::string> gathers;
  for (Var m : loop.members)
    if (is_gather_member(t, m)) gathers.push_back(fmt::format("%{} = %{} at %{}", m, t.op(m).args[0], t.op(m).args[1]));
  if (!gathers.empty()) out += fmt::format(" gathers [{}]", fmt::join(gathers, ", "));
  std::vector<std::string> strided;
  for (Var m : loop.members)
    if (is_strided_member(t, m)) strided.push_back(fmt::format("%{} = {}(%{})", m, t.op(m).prim->name, t.op(m).args[0]));
  for (Var m : loop.rereads) strided.push_back(fmt::format("%{} again", m));
  if (!strided.empty()) out += fmt::format(" strided reads [{}]", fmt::join(strided, ", "));
  if (!loop.checks.empty()) out += fmt::format(" after checking the indices of [{}]", var_list(loop.checks));
  return out;
}

}  // namespace

extern const StepRow loop_step_row{
    .index = step_index<LoopStep>,
    .schedule = [](Scheduler& s, const Step& step) { schedule_loop(s, std::get<LoopStep>(step)); },
    .accesses = loop_accesses,
    .cost = loop_cost,
    .text = loop_text,
    .scratch = nullptr};
extern const KernelRow loop_kernel_row{.index = kernel_index<LoopSpec>,
                                       .key = loop_key,
                                       .split = loop_split,
                                       .partials = loop_partials,
                                       .emit = emit_loop,
                                       .claims_call = nullptr,
                                       .schedule_call = nullptr,
    .call_text = nullptr};

std::vector<Var> loop_inputs(const Tape& tape, const LoopStep& loop) {
  auto has = [](const std::vector<Var>& vs, Var v) { return std::find(vs.begin(), vs.end(), v) != vs.end(); };
  std::vector<Var> inputs;
  const std::vector<Var> computed = loop.computed();
  for (Var m : computed) {
    // A strided read read again is read from its source, by the members that take it as
    // a value; a gather or a strided read of it reads it in memory.
    const bool indexed = is_indexed_member(tape, m);
    for (Var a : tape.op(m).args) {
      const Var read = !indexed && has(loop.rereads, a) ? tape.op(a).args[0] : a;
      if (!has(computed, a) && !has(loop.views, a) && !has(inputs, read)) inputs.push_back(read);
    }
  }
  return inputs;
}

StridedMap strided_map(const Tape& tape, Var read) {
  const Op& op = tape.op(read);
  return op.prim->lowering.strided_read(tape.type(op.args[0]), op.attrs);
}

bool is_gather_member(const Tape& tape, Var member) { return tape.op(member).prim->structure == Structure::gather; }
bool is_strided_member(const Tape& tape, Var member) {
  const Op& op = tape.op(member);
  return op.kind == OpKind::call && op.prim->lowering.strided_read;
}
bool is_indexed_member(const Tape& tape, Var member) {
  return is_gather_member(tape, member) || is_strided_member(tape, member);
}

}  // namespace reel::codegen
