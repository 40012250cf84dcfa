// A reduction of its own: its planning helpers, its scheduling into a ReduceSpec (kept
// and reduced dimensions, coalesced), its emission (per kept element; by rows when the
// innermost dimension is kept; argmax/argmin in two passes), and its rows.
#include "kernels/reduce.hpp"

#include <fmt/format.h>
#include <llvm/IR/Intrinsics.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>
#include <utility>

#include "kernels/emitter.hpp"
#include "kernels/loop.hpp"
#include "schedule.hpp"

namespace reel::codegen {

bool is_full_reduction(const Tape& t, Var v) {
  const Op& op = t.op(v);
  if (op.prim->lowering.reduce_op != kernels::ReduceOp::sum || op.prim->lowering.reduce_index) return false;
  const Shape target = op.prim->lowering.reduce_target(t.type(op.args[0]), op.attrs);
  return numel(target) == 1;
}

namespace {

// A sum (or mean) of v's input to more than one result: the input's shape and the
// result's in keep-dims form, aligned to the input's rank (sum_to's are aligned to the
// right). Nothing for another reduction.
std::optional<std::pair<Shape, Shape>> partial_sum_shapes(const Tape& t, Var v) {
  const Op& op = t.op(v);
  if (op.prim->lowering.reduce_op != kernels::ReduceOp::sum || op.prim->lowering.reduce_index) return std::nullopt;
  const Shape& in = t.type(op.args[0]).shape;
  Shape target = op.prim->lowering.reduce_target(t.type(op.args[0]), op.attrs);
  if (target.size() > in.size() || numel(target) <= 1) return std::nullopt;
  target.insert(target.begin(), in.size() - target.size(), 1);
  return std::pair{in, std::move(target)};
}

}  // namespace

bool is_leading_sum(const Tape& t, Var v) {
  const auto shapes = partial_sum_shapes(t, v);
  if (!shapes || numel(shapes->second) > kMaxColumnSums) return false;
  const auto& [in, target] = *shapes;
  std::size_t d = 0;
  while (d < in.size() && target[d] == 1 && in[d] != 1) ++d;  // the reduced leading dimensions
  if (d == 0) return false;
  for (; d < in.size(); ++d)
    if (target[d] != in[d]) return false;
  return true;
}

bool is_trailing_sum(const Tape& t, Var v) {
  const auto shapes = partial_sum_shapes(t, v);
  if (!shapes || t.op(v).type.dtype != DType::f64) return false;
  const auto& [in, target] = *shapes;
  // (A sum of no elements is a reduction step's: the loop would not run.)
  if (numel(target) == numel(in) || numel(in) == 0) return false;
  std::size_t d = 0;
  while (d < in.size() && (target[d] == in[d] || in[d] == 1)) ++d;  // the kept leading dimensions
  if (d == 0 || in[0] == 1) return false;
  for (; d < in.size(); ++d)
    if (target[d] != 1) return false;
  return true;
}

namespace {

using llvm::IRBuilder;
using llvm::Type;
using llvm::Value;

// The variable whose memory a reduction reads: its input, or the source of a strided read.
Var read_of(const Tape& t, const ReduceStep& r) { return r.strided ? t.op(r.in).args[0] : r.in; }

void schedule_reduce(Scheduler& sch, const ReduceStep& r) {
  const Tape& t = sch.tape();
  const Op& op = t.op(r.out);
  const VarType& in = t.type(r.in);
  StridedMap read{0, contiguous(in.shape)};
  if (r.strided) read = strided_map(t, r.in);
  KernelSpec k;
  ReduceSpec s;
  k.params = {in.dtype, op.type.dtype};
  s.out_numel = numel(op.type.shape);
  s.scale = op.prim->lowering.reduce_scale(in, op.attrs);
  s.op = op.prim->lowering.reduce_op;
  s.index = op.prim->lowering.reduce_index;
  k.empty = numel(in.shape) == 0;
  if (!k.empty) {
    const Shape target = op.prim->lowering.reduce_target(in, op.attrs);
    const std::vector<int64_t>& in_strides = read.strides;
    const std::vector<int64_t> out_strides = broadcast_strides(target, in.shape);
    std::vector<std::vector<int64_t>> kept_strides(2), reduced_strides(1);
    for (std::size_t d = 0; d < in.shape.size(); ++d) {
      if (in.shape[d] == 1) continue;
      if (out_strides[d] != 0) {
        s.kept.push_back(in.shape[d]);
        kept_strides[0].push_back(in_strides[d]);
        kept_strides[1].push_back(out_strides[d]);
      } else {
        s.reduced.push_back(in.shape[d]);
        reduced_strides[0].push_back(in_strides[d]);
      }
    }
    coalesce(s.kept, kept_strides);
    coalesce(s.reduced, reduced_strides);
    s.kept_in = kept_strides[0];
    s.kept_out = kept_strides[1];
    s.reduced_in = reduced_strides[0];
  }
  k.body = std::move(s);
  // (A strided read's offset moves the pointer, so that reductions of different slices
  // share a kernel.)
  sch.add_kernel(std::move(k), {sch.plan().slot_of[read_of(t, r)], sch.plan().slot_of[r.out]}, {read.offset, 0});
}

// What both reduction emitters read first: the spec, its reduction, the input's and
// the result's dtypes and the combining operation.
struct ReduceView {
  const KernelSpec& k;
  const ReduceSpec& s;
  DType in, out;
  kernels::ReduceOp op;
  explicit ReduceView(const KernelSpec& spec)
      : k(spec), s(spec.as<ReduceSpec>()), in(spec.params[0]), out(spec.params[1]), op(s.op) {}
};

// A reduction that keeps the input's innermost dimension (a sum over rows: sum_to of a
// bias's gradient, a column count) would read down the columns. Instead blocks of
// kReduceBlock kept elements are reduced together, a row segment at a time, into an
// array of accumulators: contiguous reads, vectorised across the block. Each element
// combines its reduced ones in order (in double, not reassociated), so the results are
// the interpreter's, bit for bit.
constexpr int64_t kReduceBlock = 1024;
void emit_reduce_rows(KernelEmitter& e) {
  IRBuilder<>& b = e.b;
  const auto& [k, s, in, out, op] = ReduceView(e.spec);
  const std::vector<int64_t> outer(s.kept.begin(), s.kept.end() - 1);
  const std::vector<int64_t> outer_in(s.kept_in.begin(), s.kept_in.end() - 1);
  const std::vector<int64_t> outer_out(s.kept_out.begin(), s.kept_out.end() - 1);
  const int64_t n = s.kept.back(), out_stride = s.kept_out.back();
  llvm::AllocaInst* acc = nullptr;
  {
    llvm::IRBuilder<> entry(&e.fn->getEntryBlock(), e.fn->getEntryBlock().begin());
    acc = entry.CreateAlloca(llvm::ArrayType::get(b.getDoubleTy(), static_cast<uint64_t>(std::min(n, kReduceBlock))));
  }
  auto slot = [&](Value* t) { return b.CreateInBoundsGEP(b.getDoubleTy(), acc, t); };
  // The block of `len` kept elements from b0 (in the innermost dimension).
  auto block = [&](Value* in_base, Value* out_base, Value* b0, int64_t len) {
    e.loop_nest({len}, [&](const std::vector<Value*>& t) {
      b.CreateStore(llvm::ConstantFP::get(b.getDoubleTy(), kernels::reduce_identity(op)), slot(t[0]));
    });
    e.loop_nest(s.reduced, [&](const std::vector<Value*>& j) {
      Value* row = b.CreateAdd(b.CreateAdd(in_base, e.offset(j, s.reduced_in), "", true, true), b0, "", true, true);
      e.loop_nest({len}, [&](const std::vector<Value*>& t) {
        Value* at = b.CreateAdd(row, t[0], "", true, true);
        e.accumulate(slot(t[0]), b.CreateLoad(e.elem(in), e.element_ptr(0, in, at)), op, true);
      });
    });
    e.loop_nest({len}, [&](const std::vector<Value*>& t) {
      Value* element = b.CreateMul(b.CreateAdd(b0, t[0], "", true, true), b.getInt64(out_stride), "", true, true);
      e.finish_sum(slot(t[0]), s.scale, 1, out, b.CreateAdd(out_base, element, "", true, true));
    });
  };
  auto rows = [&](const std::vector<Value*>& k) {
    Value* in_base = e.offset(k, outer_in);
    Value* out_base = e.offset(k, outer_out);
    const int64_t full = n / kReduceBlock, rest = n % kReduceBlock;
    if (full > 0)
      e.loop_nest({full}, [&](const std::vector<Value*>& blk) {
        block(in_base, out_base, b.CreateMul(blk[0], b.getInt64(kReduceBlock), "", true, true), kReduceBlock);
      });
    if (rest > 0) block(in_base, out_base, b.getInt64(full * kReduceBlock), rest);
  };
  if (outer.empty()) rows({});
  else e.loop_nest(outer, rows, {}, k.chunk > 0);
}

// argmax / argmin (reduce_index): per kept element, the position among the reduced
// ones of the first largest (smallest), the first NaN winning, as the eager
// kernels::arg_extremum decides. Two passes that vectorise (one element after another
// with the best so far carried took 4 ns an element): the extremum (llvm.maximum /
// minimum: NaN if any is), then the least position holding it (a NaN: any NaN; equal
// zeros of either sign count as the same, as the eager comparison has them).
void emit_reduce_index(KernelEmitter& e) {
  IRBuilder<>& b = e.b;
  const KernelSpec& k = e.spec;
  const ReduceSpec& s = k.as<ReduceSpec>();
  const DType in = k.params[0];
  const bool largest = s.op == kernels::ReduceOp::max;
  Type* t = e.elem(in);
  llvm::AllocaInst *best = nullptr, *best_at = nullptr;
  {
    llvm::IRBuilder<> entry(&e.fn->getEntryBlock(), e.fn->getEntryBlock().begin());
    best = entry.CreateAlloca(t);
    best_at = entry.CreateAlloca(b.getInt64Ty());
  }
  const double start = largest ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  std::vector<int64_t> kept = s.kept, kept_in = s.kept_in, kept_out = s.kept_out;
  if (kept.empty()) kept = {1}, kept_in = {0}, kept_out = {0};
  const int64_t n = std::accumulate(s.reduced.begin(), s.reduced.end(), int64_t{1}, std::multiplies<>());
  std::vector<int64_t> position(s.reduced.size(), 1);  // row-major among the reduced elements
  for (std::size_t d = s.reduced.size(); d-- > 1;) position[d - 1] = position[d] * s.reduced[d];
  e.loop_nest(kept, [&](const std::vector<Value*>& k) {
    Value* in_base = e.offset(k, kept_in);
    auto element = [&](const std::vector<Value*>& j) {
      return b.CreateLoad(t, e.element_ptr(0, in, b.CreateAdd(in_base, e.offset(j, s.reduced_in), "", true, true)));
    };
    b.CreateStore(llvm::ConstantFP::get(t, start), best);
    e.loop_nest(s.reduced, [&](const std::vector<Value*>& j) {
      Value* m = b.CreateBinaryIntrinsic(largest ? llvm::Intrinsic::maximum : llvm::Intrinsic::minimum,
                                          b.CreateLoad(t, best), element(j));
      b.CreateStore(m, best);
    });
    Value* m = b.CreateLoad(t, best);
    Value* m_nan = b.CreateFCmpUNO(m, m);
    b.CreateStore(b.getInt64(n), best_at);
    e.loop_nest(s.reduced, [&](const std::vector<Value*>& j) {
      Value* v = element(j);
      Value* hit = b.CreateSelect(m_nan, b.CreateFCmpUNO(v, v), b.CreateFCmpOEQ(v, m));
      Value* at = e.offset(j, position);
      Value* least = b.CreateLoad(b.getInt64Ty(), best_at);
      b.CreateStore(b.CreateSelect(hit, b.CreateBinaryIntrinsic(llvm::Intrinsic::umin, least, at), least), best_at);
    });
    b.CreateStore(b.CreateLoad(b.getInt64Ty(), best_at), e.element_ptr(1, DType::i64, e.offset(k, kept_out)));
  }, {}, k.chunk > 0, e.unrolls_completely(s.reduced));
}

// Each result element is summed in a register (in double, like the interpreter),
// looping over the kept dimensions outside and the reduced ones inside.
void emit_reduce(KernelEmitter& e) {
  IRBuilder<>& b = e.b;
  const auto& [k, s, in, out, op] = ReduceView(e.spec);
  if (k.empty) {  // a reduction of nothing: the identity (scaled: a mean is NaN)
    if (s.out_numel == 0) return;
    e.loop_nest({s.out_numel}, [&](const std::vector<Value*>& i) {
      llvm::AllocaInst* acc = e.new_accumulator(op);
      e.finish_sum(acc, s.scale, 1, out, i[0]);
    });
    return;
  }
  if (s.index) return emit_reduce_index(e);
  if (!s.kept.empty() && !s.reduced.empty() && s.kept_in.back() == 1) return emit_reduce_rows(e);
  if (s.kept.empty() && k.chunk > 0) {  // a chunk of a reduction to one number: its partial result
    llvm::AllocaInst* acc = e.new_accumulator(op);
    e.loop_nest(s.reduced, [&](const std::vector<Value*>& j) {
      e.accumulate(acc, b.CreateLoad(e.elem(in), e.element_ptr(0, in, e.offset(j, s.reduced_in))), op);
    }, {}, true);
    e.store_partial(acc, 0);
    return;
  }
  e.loop_nest(s.kept, [&](const std::vector<Value*>& k) {
    Value* in_base = e.offset(k, s.kept_in);
    Value* out_offset = e.offset(k, s.kept_out);
    llvm::AllocaInst* acc = e.new_accumulator(op);
    e.loop_nest(s.reduced, [&](const std::vector<Value*>& j) {
      Value* at = b.CreateAdd(in_base, e.offset(j, s.reduced_in), "", true, true);
      e.accumulate(acc, b.CreateLoad(e.elem(in), e.element_ptr(0, in, at)), op);
    });
    e.finish_sum(acc, s.scale, 1, out, out_offset);
  }, {}, k.chunk > 0, e.unrolls_completely(s.reduced));
}
std::string reduce_key(const KernelSpec& k) {
  const ReduceSpec& s = k.as<ReduceSpec>();
  return key_head(k, "reduce") +
         fmt::format("; kept {} {} {} reduced {} {} n {} scale {} op {}", ints(s.kept), ints(s.kept_in), ints(s.kept_out),
                     ints(s.reduced), ints(s.reduced_in), s.out_numel, s.scale, static_cast<int>(s.op)) +
         (s.index ? " index" : "");
}

// The outer kept dimension (its outer kept dimensions' first, reducing rows; its
// reduced[0] when it keeps none).
SplitExtent reduce_split(const KernelSpec& k) {
  const ReduceSpec& s = k.as<ReduceSpec>();
  if (s.kept.empty() && s.index) return {};  // (positions have no partial results to combine)
  if (s.kept.empty()) return s.reduced.empty() ? SplitExtent{} : SplitExtent{s.reduced[0], product(s.reduced, 1)};
  if (!s.reduced.empty() && s.kept_in.back() == 1 && !s.index)  // by rows: split the outer kept dimensions
    return s.kept.size() < 2 ? SplitExtent{} : SplitExtent{s.kept[0], product(s.kept, 1) * product(s.reduced)};
  return {s.kept[0], product(s.kept, 1) * product(s.reduced)};
}

void reduce_partials(const KernelSpec& k, ParallelKernelArgs& parallel) {
  const ReduceSpec& s = k.as<ReduceSpec>();
  if (s.kept.empty())  // to one number
    parallel.sums.push_back({.param = 1, .scale = s.scale, .dtype = k.params[1], .op = s.op});
}

}  // namespace

extern const StepRow reduce_step_row{
    .index = step_index<ReduceStep>,
    .schedule = [](Scheduler& s, const Step& step) { schedule_reduce(s, std::get<ReduceStep>(step)); },
    .accesses =
        [](const Tape& t, const Plan&, const Step& step, const AccessFn& f) {
          f(read_of(t, std::get<ReduceStep>(step)), false);
          f(std::get<ReduceStep>(step).out, true);
        },
    .cost = [](const Tape& t, const Step& step, int64_t chunk_elements) {
      return kernel_cost(numel(t.type(std::get<ReduceStep>(step).in).shape), chunk_elements);
    },
    .text =
        [](const Tape& t, const Plan&, const Step& step) {
          const auto& r = std::get<ReduceStep>(step);
          return fmt::format("reduce %{} = {}(%{}){}", r.out, t.op(r.out).prim->name, r.in,
                             r.strided ? fmt::format(" reading %{} in place", read_of(t, r)) : "");
        },
    .scratch = nullptr};
extern const KernelRow reduce_kernel_row{.index = kernel_index<ReduceSpec>,
                                         .key = reduce_key,
                                         .split = reduce_split,
                                         .partials = reduce_partials,
                                         .emit = emit_reduce,
                                         .claims_call = nullptr,
                                         .schedule_call = nullptr,
    .call_text = nullptr};

}  // namespace reel::codegen
