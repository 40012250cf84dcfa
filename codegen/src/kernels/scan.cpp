// A scan run as one generated kernel: its LoopKernel (the body's kernels and steps, the
// carries updated in place where safe), its scheduling from a loop call's buffers, its
// emission (the iteration loop calling the body's kernels, inlined) and its row.
#include "kernels/scan.hpp"

#include <fmt/format.h>
#include <llvm/IR/MDBuilder.h>

#include <algorithm>
#include <map>

#include "kernels/emitter.hpp"
#include "loops.hpp"
#include "schedule.hpp"

namespace reel::codegen {

// A scan whose body's steps are all kernels (or copies, or such scans) runs as one
// kernel: the iteration loop is generated code that computes each iteration's buffers
// and calls the body's kernels, inlined. Its parameters, in order: the consts, the
// carries' initial values, results and temporaries, the stacked xs and ys, the body's
// workspace, the body's constants, and the counter (with `has_index`). The body's
// steps name their buffers as the body's program does, on its bases {workspace,
// constants, inputs ([counter], consts, carries, slices of xs), outputs (carries, slices
// of ys)}; the length, the strides and those offsets are part of the key.
struct LoopKernel {
  int64_t length = 0;
  bool reverse = false, has_index = false;
  int64_t index0 = 0;
  std::size_t C = 0, K = 0, X = 0, Y = 0;
  std::vector<int64_t> carry_bytes, x_bytes, y_bytes;  // a carry; a slice of each xs and ys
  // Per carry: updated in place in its result (copied there from its initial value
  // first) rather than alternating with its temporary. Its pointer is then the same in
  // every iteration, so the optimiser keeps the carry in registers from one iteration
  // to the next. The body's steps then name its input only.
  std::vector<bool> in_place;
  std::vector<KernelSpec> kernels;  // the body's, each key once
  struct Step {
    int kernel = -1;  // into kernels; -1: a copy of `bytes` from buffers[0] to buffers[1], or a guard
    std::vector<BufferRef> buffers;
    int64_t bytes = 0;
    // guard >= 0: guard number `guard`, which checks that the first element of
    // buffers[0] (of `dtype`) is nonzero iff `expected`; if not, the kernel records the
    // failure in its last parameter and returns (LoopGuardArgs).
    int guard = -1;
    DType dtype = DType::f64;
    bool expected = true;
  };
  std::vector<Step> steps;
  int guards = 0;  // guard steps; with any, a last parameter holds the failure record
  std::size_t num_params() const { return C + 3 * K + X + Y + 2 + (has_index ? 1 : 0) + (guards > 0 ? 1 : 0); }
};

namespace {

using llvm::IRBuilder;
using llvm::Value;

// ---- Scheduling

// The loop kernel `k` with parameter `drop` made the same buffer as `keep` (an in-place
// update: every element is loaded before it is stored).
KernelSpec merge_params(const KernelSpec& k, int keep, int drop) {
  KernelSpec m = k;
  auto remap = [&](int p) { return p == drop ? keep : p > drop ? p - 1 : p; };
  m.params.erase(m.params.begin() + drop);
  if (!m.align.empty()) {
    m.align[static_cast<std::size_t>(keep)] =
        std::min(m.align[static_cast<std::size_t>(keep)], m.align[static_cast<std::size_t>(drop)]);
    m.align.erase(m.align.begin() + drop);
  }
  LoopSpec s = k.as<LoopSpec>();
  for (auto& l : s.loads) {
    l.param = remap(l.param);
    if (l.index_param >= 0) l.index_param = remap(l.index_param);
  }
  for (auto& st : s.stores) st.param = remap(st.param);
  for (auto& su : s.sums) su.param = remap(su.param);
  m.body = std::move(s);
  m.key = make_key(m);
  return m;
}

// Whether carry c of a loop kernel can be updated in place: the body writes its new
// value once and reads the old one only before, or in the same elementwise loop element
// for element. If so, rewrites the body's steps to name the input's buffer only (a
// copy of the input to the output is dropped, a loop doing both gets one parameter for
// them) and returns true.
bool update_in_place(LoopKernel& lk, std::vector<KernelSpec>& kernels, std::size_t c) {
  const int64_t in = kFirstInputBase + (lk.has_index ? 1 : 0) + static_cast<int64_t>(lk.C + c);
  const int64_t out = kFirstInputBase + (lk.has_index ? 1 : 0) + static_cast<int64_t>(lk.C + lk.K + lk.X + c);
  auto find = [](const LoopKernel::Step& st, int64_t base) {
    for (std::size_t p = 0; p < st.buffers.size(); ++p)
      if (st.buffers[p].base == base) return static_cast<int>(p);
    return -1;
  };
  auto written = [&](const LoopKernel::Step& st, int p) {
    if (p < 0) return false;
    if (st.kernel < 0) return st.guard < 0 && p == 1;
    const KernelSpec& k = kernels[static_cast<std::size_t>(st.kernel)];
    if (const auto* s = std::get_if<LoopSpec>(&k.body))
      return std::any_of(s->stores.begin(), s->stores.end(), [&](const auto& x) { return x.param == p; }) ||
             std::any_of(s->sums.begin(), s->sums.end(), [&](const auto& x) { return x.param == p; });
    return static_cast<std::size_t>(p) + 1 == k.params.size();  // (a scan: not asked)
  };
  // A step with two parameters in the carry's input or output (elements at different
  // offsets: a loop writing a carry's elements into their places, reading others) is
  // left alone: merging one pair would leave noalias pointers to the same memory.
  auto several = [](const LoopKernel::Step& st, int64_t base) {
    return std::count_if(st.buffers.begin(), st.buffers.end(), [&](const BufferRef& b) { return b.base == base; }) > 1;
  };
  std::size_t writer = lk.steps.size();
  for (std::size_t s = 0; s < lk.steps.size(); ++s) {
    const LoopKernel::Step& st = lk.steps[s];
    if (st.kernel >= 0 && (several(st, in) || several(st, out))) return false;
    const int r = find(st, in), w = find(st, out);
    if (st.kernel >= 0 && std::holds_alternative<ScanSpec>(kernels[static_cast<std::size_t>(st.kernel)].body) &&
        (r >= 0 || w >= 0))
      return false;
    if (written(st, w)) {
      if (writer < lk.steps.size()) return false;
      writer = s;
    }
    if (r < 0) continue;
    if (writer < s) return false;  // the old value read after the new one is written
    if (writer == s && st.kernel >= 0) {  // read and written by one loop: element for element only
      const KernelSpec& k = kernels[static_cast<std::size_t>(st.kernel)];
      const auto* s = std::get_if<LoopSpec>(&k.body);
      if (s == nullptr) return false;
      // (Row sums zero their results before the loop reads anything.)
      if (std::any_of(s->sums.begin(), s->sums.end(), [&](const auto& x) { return x.rows && x.param == w; }))
        return false;
      for (const auto& st_out : s->stores)
        if (st_out.param == w)
          for (const auto& l : s->loads)
            if (l.param == r && (l.strides != st_out.strides || l.offset != st_out.offset || l.index_param >= 0))
              return false;
    }
  }
  // Safe: rewrite.
  std::vector<LoopKernel::Step> steps;
  std::map<int, int> merged;  // kernel -> its version with the two parameters merged
  for (LoopKernel::Step st : lk.steps) {
    const int r = find(st, in), w = find(st, out);
    if (st.kernel < 0 && st.guard < 0 && r == 0 && w == 1) continue;  // the carry passed on as it is
    if (st.kernel >= 0 && r >= 0 && w >= 0) {
      auto [it, added] = merged.emplace(st.kernel, 0);
      if (added) {
        KernelSpec m = merge_params(kernels[static_cast<std::size_t>(st.kernel)], r, w);
        auto same = std::find_if(kernels.begin(), kernels.end(), [&](const KernelSpec& k) { return k.key == m.key; });
        it->second = static_cast<int>(same - kernels.begin());
        if (same == kernels.end()) kernels.push_back(std::move(m));
      }
      st.kernel = it->second;
      st.buffers.erase(st.buffers.begin() + w);
    }
    for (BufferRef& b : st.buffers)
      if (b.base == out) b.base = in;
    steps.push_back(std::move(st));
  }
  lk.steps = std::move(steps);
  return true;
}
void schedule_loop_kernel_impl(Scheduler& sch, const LoopPlan& lp, const LoopBuffers& b) {
  const LoopArgs& L = b.args;
  KernelList own;  // the body's kernels are inlined, not called
  const std::shared_ptr<Program> body =
      Scheduler(lp.body->tape, lp.body->plan, own, 0, b.input_align, b.output_align).run();
  auto lk = std::make_shared<LoopKernel>();
  lk->length = L.length;
  lk->reverse = L.reverse;
  lk->has_index = L.has_index;
  lk->index0 = L.index0;
  lk->C = L.consts.size(), lk->K = L.carries.size(), lk->X = L.xs.size(), lk->Y = L.ys.size();
  for (const LoopArgs::Carry& c : L.carries) lk->carry_bytes.push_back(c.bytes);
  for (const LoopArgs::Stacked& x : L.xs) lk->x_bytes.push_back(x.bytes);
  for (const LoopArgs::Stacked& y : L.ys) lk->y_bytes.push_back(y.bytes);
  lk->kernels = std::move(own.kernels);
  LoopGuardArgs guards{.failure = b.failure, .guards = {}, .label = L.label};
  for (const StepArgs& s : body->steps) {
    if (const auto* k = std::get_if<KernelArgs>(&s)) {
      lk->steps.push_back({.kernel = k->kernel, .buffers = k->buffers});
    } else if (const auto* c = std::get_if<CopyArgs>(&s)) {
      lk->steps.push_back({.kernel = -1, .buffers = {c->from, c->to}, .bytes = c->bytes});
    } else if (const auto* g = std::get_if<GuardArgs>(&s)) {
      lk->steps.push_back({.kernel = -1, .buffers = {g->cond}, .guard = lk->guards++, .dtype = g->dtype,
                           .expected = g->expected});
      guards.guards.push_back(*g);
    } else {
      throw Error("compile: internal error: a loop kernel's body has a step that is not a kernel");
    }
  }
  for (std::size_t c = 0; c < lk->K; ++c) lk->in_place.push_back(update_in_place(*lk, lk->kernels, c));
  KernelSpec k;
  std::vector<BufferRef> buffers;
  auto param = [&](const BufferRef& r, int64_t a) {
    buffers.push_back(r);
    k.align.push_back(a);
    k.params.push_back(DType::f64);  // (bytes, as the body's kernels read them)
  };
  for (std::size_t i = 0; i < lk->C; ++i) param(L.consts[i], b.consts_align[i]);
  for (std::size_t c = 0; c < lk->K; ++c) param(L.carries[c].init, b.init_align[c]);
  for (std::size_t c = 0; c < lk->K; ++c) param(L.carries[c].result, b.result_align[c]);
  for (std::size_t c = 0; c < lk->K; ++c) param(L.carries[c].temp, 64);
  for (std::size_t j = 0; j < lk->X; ++j) param(L.xs[j].base, b.xs_align[j]);
  for (std::size_t j = 0; j < lk->Y; ++j) param(L.ys[j].base, b.ys_align[j]);
  param(L.workspace, 64);
  param({kConstantBase, sch.add_constant(body->constant_pool)}, 64);
  if (lk->has_index) param(L.counter, 64);
  if (lk->guards > 0) param(b.failure, 64);
  const bool guarded = lk->guards > 0;
  k.body = ScanSpec{std::move(lk)};
  sch.add_kernel(std::move(k), std::move(buffers));
  if (guarded) sch.add_step(std::move(guards));
}

// ---- Emission

// A guard in a loop kernel: if the first element of `cond` is not nonzero iff
// expected, records {k + 1, the guard's number, the value} at `failure` and returns.
void emit_loop_guard(KernelEmitter& e, const LoopKernel::Step& st, Value* cond, Value* k, Value* failure) {
  IRBuilder<>& b = e.b;
  Value* v = b.CreateLoad(e.elem(st.dtype), cond);
  Value* value = st.dtype == DType::i64   ? b.CreateSIToFP(v, b.getDoubleTy())
                 : st.dtype == DType::f32 ? b.CreateFPExt(v, b.getDoubleTy())
                                          : v;
  Value* truth = b.CreateFCmpUNE(value, llvm::ConstantFP::get(b.getDoubleTy(), 0.0));
  auto* fail = llvm::BasicBlock::Create(e.ctx, "guard_failed", e.fn);
  auto* pass = llvm::BasicBlock::Create(e.ctx, "guard_held", e.fn);
  llvm::MDBuilder weights(e.ctx);
  b.CreateCondBr(st.expected ? truth : b.CreateNot(truth), pass, fail, weights.createLikelyBranchWeights());
  b.SetInsertPoint(fail);
  b.CreateStore(b.CreateAdd(k, b.getInt64(1)), failure);
  b.CreateStore(b.getInt64(st.guard), b.CreateConstInBoundsGEP1_64(b.getInt64Ty(), failure, 1));
  b.CreateStore(value, b.CreateConstInBoundsGEP1_64(b.getInt64Ty(), failure, 2));
  b.CreateRetVoid();
  b.SetInsertPoint(pass);
}

// A scan (LoopKernel): for i in [0, length), k = i (or length - 1 - i reversed): the
// body's buffers for iteration k, then its steps: its kernels' bodies called (and
// inlined by the optimiser) on them, or copies. The carries alternate between the
// results and the temporaries, the last iteration writing the results.
void emit_scan(KernelEmitter& e) {
  IRBuilder<>& b = e.b;
  const ScanSpec& s = e.spec.as<ScanSpec>();
  const LoopKernel& L = *s.loop;
  std::vector<llvm::Function*> sub;
  for (std::size_t i = 0; i < L.kernels.size(); ++i)
    sub.push_back(KernelEmitter(e.ctx, e.module, L.kernels[i]).emit_body(fmt::format("{}_{}", e.name, i)));
  const std::size_t init = L.C, result = init + L.K, temp = result + L.K, xs = temp + L.K, ys = xs + L.X,
                    workspace = ys + L.Y, pool = workspace + 1, counter = pool + 1,
                    failure = counter + (L.has_index ? 1 : 0);
  if (L.guards > 0) b.CreateStore(b.getInt64(0), e.param[failure]);
  auto memcpy = [&](Value* to, Value* from, int64_t bytes) {
    if (bytes > 0) b.CreateMemCpy(to, llvm::MaybeAlign(1), from, llvm::MaybeAlign(1), b.getInt64(bytes));
  };
  for (std::size_t c = 0; c < L.K; ++c)
    if (L.length == 0 || L.in_place[c]) memcpy(e.param[result + c], e.param[init + c], L.carry_bytes[c]);
  if (L.length == 0) return;
  llvm::PHINode* i = e.open_counted_loop("iteration", b.getInt64(0));
  const int64_t n = L.length;
  Value* last_minus_i = b.CreateSub(b.getInt64(n - 1), i, "", true, true);
  Value* k = L.reverse ? last_minus_i : i;
  // Iteration i writes the results if n - 1 - i is even, else the temporaries, and
  // reads what iteration i - 1 wrote (the initial carries first). Written as a
  // function of i rather than a phi of the last pointer: seeing that the pointer is
  // the one just stored to, the optimiser forwarded part of the carry through
  // registers and reloaded the rest, a shuffle chain and a store-forwarding stall per
  // iteration (a 512-bit store read back in pieces) that made a small body 3x slower.
  Value* to_result = b.CreateICmpEQ(b.CreateAnd(last_minus_i, b.getInt64(1)), b.getInt64(0));
  Value* first = b.CreateICmpEQ(i, b.getInt64(0));
  // The body's bases: workspace, constants, inputs, outputs.
  std::vector<Value*> base{e.param[workspace], e.param[pool]};
  if (L.has_index) {
    b.CreateStore(b.CreateAdd(k, b.getInt64(L.index0)), e.param[counter]);
    base.push_back(e.param[counter]);
  }
  for (std::size_t c = 0; c < L.C; ++c) base.push_back(e.param[c]);
  for (std::size_t c = 0; c < L.K; ++c)
    base.push_back(L.in_place[c] ? e.param[result + c]
                                 : b.CreateSelect(first, e.param[init + c],
                                                   b.CreateSelect(to_result, e.param[temp + c], e.param[result + c])));
  auto slice = [&](Value* stack, int64_t bytes) {
    return b.CreateInBoundsGEP(b.getInt8Ty(), stack, b.CreateMul(k, b.getInt64(bytes), "", true, true));
  };
  for (std::size_t j = 0; j < L.X; ++j) base.push_back(slice(e.param[xs + j], L.x_bytes[j]));
  for (std::size_t c = 0; c < L.K; ++c)
    base.push_back(L.in_place[c] ? e.param[result + c]
                                 : b.CreateSelect(to_result, e.param[result + c], e.param[temp + c]));
  for (std::size_t j = 0; j < L.Y; ++j) base.push_back(slice(e.param[ys + j], L.y_bytes[j]));
  auto buffer = [&](const BufferRef& r) {
    return b.CreateInBoundsGEP(b.getInt8Ty(), base.at(static_cast<std::size_t>(r.base)), b.getInt64(r.offset));
  };
  for (const LoopKernel::Step& st : L.steps) {
    if (st.guard >= 0) {
      emit_loop_guard(e, st, buffer(st.buffers[0]), k, e.param[failure]);
      continue;
    }
    if (st.kernel < 0) {
      memcpy(buffer(st.buffers[1]), buffer(st.buffers[0]), st.bytes);
      continue;
    }
    std::vector<Value*> args;
    for (const BufferRef& r : st.buffers) args.push_back(buffer(r));
    b.CreateCall(sub[static_cast<std::size_t>(st.kernel)], args);
  }
  e.close_counted_loop(i, b.getInt64(n), "iterations_done", false);
}
std::string scan_key(const KernelSpec& k) {
  const LoopKernel& l = *k.as<ScanSpec>().loop;
  std::vector<int64_t> in_place(l.in_place.begin(), l.in_place.end());
  std::string key = key_head(k, "scan");
  key += fmt::format("; length {}{} index {} {}; C {} K {} X {} Y {}; carries {} in place {} xs {} ys {}", l.length,
                     l.reverse ? " reversed" : "", l.has_index, l.index0, l.C, l.K, l.X, l.Y, ints(l.carry_bytes),
                     ints(in_place), ints(l.x_bytes), ints(l.y_bytes));
  for (const KernelSpec& b : l.kernels) key += "; kernel {" + b.key + "}";
  for (const LoopKernel::Step& st : l.steps) {
    key += st.kernel >= 0  ? fmt::format("; call {}", st.kernel)
           : st.guard >= 0 ? fmt::format("; guard {} {} {}", st.guard, dtype_name(st.dtype), st.expected)
                           : fmt::format("; copy {}", st.bytes);
    for (const BufferRef& r : st.buffers) key += fmt::format(" {}+{}", r.base, r.offset);
  }
  return key;
}

}  // namespace

void schedule_scan_kernel(Scheduler& s, const LoopPlan& loop, const LoopBuffers& buffers) {
  schedule_loop_kernel_impl(s, loop, buffers);
}

extern const KernelRow scan_kernel_row{.index = kernel_index<ScanSpec>,
                                       .key = scan_key,
                                       .split = nullptr,
                                       .partials = nullptr,
                                       .emit = emit_scan,
                                       .claims_call = nullptr,
                                       .schedule_call = nullptr,
    .call_text = nullptr};

}  // namespace reel::codegen
