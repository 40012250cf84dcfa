#include "kernel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <unordered_map>

#include "loops.hpp"
#include "memory_plan.hpp"
#include "reel/blas.hpp"

namespace reel::codegen {

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

namespace {

int64_t product(const std::vector<int64_t>& v, std::size_t from = 0) {
  int64_t p = 1;
  for (std::size_t i = from; i < v.size(); ++i) p *= v[i];
  return p;
}

}  // namespace

SplitExtent split_extent(const KernelSpec& k) {
  if (k.empty) return {};
  switch (k.kind) {
    case KernelSpec::Kind::loop:
      if (k.dims.empty() || (k.dims.size() == 1 && !k.segments.empty())) return {};
      return {k.dims[0], product(k.dims, 1)};
    case KernelSpec::Kind::reduce:
      if (k.kept.empty() && k.reduce_index) return {};  // (positions have no partial results to combine)
      if (k.kept.empty()) return k.reduced.empty() ? SplitExtent{} : SplitExtent{k.reduced[0], product(k.reduced, 1)};
      if (!k.reduced.empty() && k.kept_in.back() == 1 && !k.reduce_index)  // by rows (emit.cpp): split the outer kept dimensions
        return k.kept.size() < 2 ? SplitExtent{} : SplitExtent{k.kept[0], product(k.kept, 1) * product(k.reduced)};
      return {k.kept[0], product(k.kept, 1) * product(k.reduced)};
    case KernelSpec::Kind::transpose: return {k.rows, k.cols};
    case KernelSpec::Kind::pool: return {k.pool.nc, k.pool.oh * k.pool.ow * k.pool.kh * k.pool.kw};
    default: return {};
  }
}

namespace {

// The chunk of a kernel (KernelSpec::chunk): 0 unless it makes at least two chunks of
// about `elements` (CompileOptions::chunk_elements; 0: none). Depends on the kernel
// alone, never on the thread count, so the partial sums, and the results, are the same
// whatever the count.
int64_t choose_chunk(const KernelSpec& k, int64_t elements) {
  // Column sums' chunks are blocks of the reduced (leading) dimension, each with a partial
  // array; should the outer dimension be a kept one (not expected), the loop runs whole.
  if (std::any_of(k.sums.begin(), k.sums.end(), [](const KernelSpec::Sum& s) { return !s.strides.empty() && s.strides[0] != 0; }))
    return 0;
  const auto [extent, inner] = split_extent(k);
  if (elements <= 0 || extent < 2 || inner <= 0 || extent > std::numeric_limits<int64_t>::max() / inner ||
      extent * inner / 2 < elements)
    return 0;
  int64_t chunk = (elements + inner - 1) / inner;
  if (inner == 1) chunk = (chunk + 63) / 64 * 64;  // whole cache lines and vectors per chunk
  return chunk < extent ? chunk : 0;
}

std::vector<int64_t> contiguous(const Shape& shape) { return broadcast_strides(shape, shape); }

std::string ints(const std::vector<int64_t>& v) { return fmt::format("[{}]", fmt::join(v, ",")); }

// The key spells out everything the generated code depends on.
std::string make_key(const KernelSpec& s) {
  std::string k;
  switch (s.kind) {
    case KernelSpec::Kind::loop: k = "loop"; break;
    case KernelSpec::Kind::reduce: k = "reduce"; break;
    case KernelSpec::Kind::transpose: k = "transpose"; break;
    case KernelSpec::Kind::gather: k = "gather"; break;
    case KernelSpec::Kind::scatter: k = "scatter"; break;
    case KernelSpec::Kind::scan: k = "scan"; break;
    case KernelSpec::Kind::pool: k = "pool"; break;
  }
  k += " (";
  for (DType d : s.params) k += fmt::format("{} ", dtype_name(d));
  k += ") dims " + ints(s.dims) + (s.empty ? " empty" : "");
  if (!s.segments.empty()) k += " segments " + ints(s.segments);
  if (!s.align.empty()) k += " align " + ints(s.align);
  for (const auto& l : s.loads) {
    k += fmt::format("; load {} {} {}", l.param, dtype_name(l.dtype), ints(l.strides));
    if (l.index_param >= 0) k += fmt::format(" at {} {} x {}", l.index_param, ints(l.index_strides), l.index_stride);
    if (!l.deltas.empty()) k += " shifted " + ints(l.deltas);
    if (!l.fixed.empty()) k += " fixed " + ints(l.fixed);
    if (l.offset != 0) k += fmt::format(" +{}", l.offset);
  }
  // An elementwise operation by its element program, not its name: primitives with
  // the same math (a user's logistic and sigmoid) share kernels.
  for (const auto& i : s.insts)
    k += i.prim->structure == Structure::elementwise
             ? fmt::format("; {} [{}]({})", dtype_name(i.dtype), i.element->text, fmt::join(i.args, ","))
             : fmt::format("; {} {}({})", dtype_name(i.dtype), i.prim->name, fmt::join(i.args, ","));
  for (const auto& st : s.stores)
    k += fmt::format("; store {} {} {}{}", st.value, st.param, ints(st.strides),
                     st.offset != 0 ? fmt::format(" +{}", st.offset) : "");
  for (const auto& su : s.sums)
    k += fmt::format("; sum {} {} {} {}", su.value, su.param, su.scale, dtype_name(su.dtype)) +
         (su.strides.empty() ? "" : fmt::format(" columns {} {}", su.count, ints(su.strides)));
  if (s.kind == KernelSpec::Kind::reduce)
    k += fmt::format("; kept {} {} {} reduced {} {} n {} scale {} op {}", ints(s.kept), ints(s.kept_in),
                     ints(s.kept_out), ints(s.reduced), ints(s.reduced_in), s.out_numel, s.scale,
                     static_cast<int>(s.reduce_op)) + (s.reduce_index ? " index" : "");
  if (s.kind == KernelSpec::Kind::transpose) k += fmt::format("; {}x{}", s.rows, s.cols);
  if (s.kind == KernelSpec::Kind::gather || s.kind == KernelSpec::Kind::scatter)
    k += fmt::format("; outer {} n {} count {} inner {}{}", s.outer, s.n, s.count, s.inner, s.replace ? " replace" : "");
  if (s.kind == KernelSpec::Kind::pool) {
    const PoolWindow& w = s.pool;
    k += fmt::format("; mode {} nc {} in {}x{} out {}x{} window {}x{} stride {}x{} padding {}x{}",
                     static_cast<int>(w.mode), w.nc, w.h, w.w, w.oh, w.ow, w.kh, w.kw, w.sh, w.sw, w.ph, w.pw);
  }
  if (s.kind == KernelSpec::Kind::scan) {
    const LoopKernel& l = *s.scan;
    std::vector<int64_t> in_place(l.in_place.begin(), l.in_place.end());
    k += fmt::format("; length {}{} index {} {}; C {} K {} X {} Y {}; carries {} in place {} xs {} ys {}", l.length,
                     l.reverse ? " reversed" : "", l.has_index, l.index0, l.C, l.K, l.X, l.Y, ints(l.carry_bytes),
                     ints(in_place), ints(l.x_bytes), ints(l.y_bytes));
    for (const KernelSpec& b : l.kernels) k += "; kernel {" + b.key + "}";
    for (const LoopKernel::Step& st : l.steps) {
      k += st.kernel >= 0  ? fmt::format("; call {}", st.kernel)
           : st.guard >= 0 ? fmt::format("; guard {} {} {}", st.guard, dtype_name(st.dtype), st.expected)
                           : fmt::format("; copy {}", st.bytes);
      for (const BufferRef& r : st.buffers) k += fmt::format(" {}+{}", r.base, r.offset);
    }
  }
  if (s.chunk > 0) k += fmt::format("; in chunks of {}", s.chunk);  // (a RangeFn)
  return k;
}

// The kernels of a compiled function and of its loops' bodies, each key once.
struct KernelTable {
  std::vector<KernelSpec> kernels;
  std::unordered_map<std::string, int> index;
  // Element rules by primitive and attributes, recorded once (a million-operation tape
  // has a few distinct ones).
  std::map<std::pair<const Primitive*, std::string>, std::shared_ptr<const ElementRule>> element_rules;
};

// Schedules one program: a compiled function's tape, or a loop's body, whose inputs and
// outputs have the given alignments (empty: 64 bytes, as a compiled function's).
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
  for (auto& l : m.loads) {
    l.param = remap(l.param);
    if (l.index_param >= 0) l.index_param = remap(l.index_param);
  }
  for (auto& st : m.stores) st.param = remap(st.param);
  for (auto& su : m.sums) su.param = remap(su.param);
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
    switch (k.kind) {
      case KernelSpec::Kind::loop:
        return std::any_of(k.stores.begin(), k.stores.end(), [&](const auto& x) { return x.param == p; }) ||
               std::any_of(k.sums.begin(), k.sums.end(), [&](const auto& x) { return x.param == p; });
      default: return static_cast<std::size_t>(p) + 1 == k.params.size();  // (a scan: not asked)
    }
  };
  std::size_t writer = lk.steps.size();
  for (std::size_t s = 0; s < lk.steps.size(); ++s) {
    const LoopKernel::Step& st = lk.steps[s];
    const int r = find(st, in), w = find(st, out);
    if (st.kernel >= 0 && kernels[static_cast<std::size_t>(st.kernel)].kind == KernelSpec::Kind::scan &&
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
      if (k.kind != KernelSpec::Kind::loop) return false;
      for (const auto& st_out : k.stores)
        if (st_out.param == w)
          for (const auto& l : k.loads)
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

class Scheduler {
 public:
  // `chunk_elements` > 0: large kernels run in chunks on the thread pool (0 within a loop
  // kernel, whose body's kernels are inlined).
  Scheduler(const Tape& t, const Plan& p, KernelTable& table, int64_t chunk_elements,
            std::vector<int64_t> input_align = {}, std::vector<int64_t> output_align = {})
      : t_(t), p_(p), table_(table), split_(chunk_elements), input_align_(std::move(input_align)),
        output_align_(std::move(output_align)) {}

  std::shared_ptr<Program> run() {
    for (Var c : p_.constants) constant_offsets_.push_back(add_constant(t_.op(c).value));
    program_->workspace_bytes = p_.workspace_bytes;
    program_->num_inputs = static_cast<std::size_t>(p_.num_inputs);
    program_->num_outputs = t_.outputs.size();
    // Independent steps worth a thread each run at the same time, each in a branch.
    const std::vector<std::vector<int>> groups = split_ > 0 ? concurrent_groups(t_, p_, split_) : std::vector<std::vector<int>>{};
    std::size_t g = 0;
    for (std::size_t i = 0; i < p_.steps.size(); ++i) {
      if (g < groups.size() && groups[g].front() == static_cast<int>(i)) {
        ConcurrentArgs c;
        for (int s : groups[g]) {
          std::vector<StepArgs> outer = std::move(program_->steps);
          program_->steps.clear();
          std::visit([&](const auto& st) { schedule(st); }, p_.steps[static_cast<std::size_t>(s)]);
          auto branch = std::make_shared<Program>();
          branch->steps = std::move(program_->steps);
          program_->steps = std::move(outer);
          c.branches.push_back(std::move(branch));
        }
        program_->steps.push_back(std::move(c));
        i = static_cast<std::size_t>(groups[g].back());
        ++g;
        continue;
      }
      std::visit([&](const auto& s) { schedule(s); }, p_.steps[i]);
    }
    program_->constant_pool = Tensor(DType::f64, {static_cast<int64_t>(pool_.size() / 8)});
    if (!pool_.empty()) std::memcpy(program_->constant_pool.mutable_raw(), pool_.data(), pool_.size());
    return std::move(program_);
  }

 private:
  // Adds a block to the constant pool, at a 64-byte-aligned offset (at least 64 bytes
  // each), and returns that offset.
  int64_t add_constant(const Tensor& value) {
    const auto at = static_cast<int64_t>(pool_.size());
    const int64_t bytes = std::max<int64_t>((static_cast<int64_t>(value.nbytes()) + 63) / 64 * 64, 64);
    pool_.resize(pool_.size() + static_cast<std::size_t>(bytes), 0);
    if (value.nbytes() > 0) std::memcpy(pool_.data() + at, value.raw(), value.nbytes());
    return at;
  }

  // Where a slot's memory is.
  BufferRef ref(int slot_index) const {
    if (slot_index < 0) throw Error("compile: internal error: a step reads a value with no memory");
    const Slot& s = p_.slots[static_cast<std::size_t>(slot_index)];
    switch (s.kind) {
      case SlotKind::workspace: return {kWorkspaceBase, s.offset};
      case SlotKind::constant: return {kConstantBase, constant_offsets_[static_cast<std::size_t>(s.index)]};
      case SlotKind::input: return {kFirstInputBase + s.index, 0};
      case SlotKind::output: return {kFirstInputBase + p_.num_inputs + s.index, 0};
    }
    throw Error("compile: internal error: a slot of no known kind");
  }
  BufferRef ref_of(Var v) const { return ref(p_.slot_of[v]); }
  // The alignment a slot's memory is guaranteed, in bytes.
  int64_t align(int slot_index) const {
    const Slot& s = p_.slots[static_cast<std::size_t>(slot_index)];
    const auto i = static_cast<std::size_t>(s.index);
    if (s.kind == SlotKind::input && i < input_align_.size()) return input_align_[i];
    if (s.kind == SlotKind::output && i < output_align_.size()) return output_align_[i];
    return 64;
  }
  TypedBuffer typed(Var v) const { return {ref_of(v), t_.type(v)}; }

  // A primitive's element rule for these attributes, recorded once per schedule (a
  // million-operation tape has a few distinct ones).
  std::shared_ptr<const ElementRule> element_rule(const Op& op) {
    std::string attrs;
    for (const auto& [name, value] : op.attrs.items()) attrs += name + '=' + attr_str(value) + ' ';
    auto& rule = table_.element_rules[{op.prim, attrs}];
    if (!rule) {
      ElementProgram program = op.prim->element(op.attrs);
      check_element_program(program, static_cast<int>(op.args.size()), op.prim->name);
      std::string text = program.str();
      rule = std::make_shared<const ElementRule>(ElementRule{std::move(program), std::move(text)});
    }
    return rule;
  }

  void add_kernel(KernelSpec spec, const std::vector<int>& param_slots) {
    std::vector<BufferRef> buffers;
    for (int slot : param_slots) {
      spec.align.push_back(align(slot));
      buffers.push_back(ref(slot));
    }
    add_kernel(std::move(spec), std::move(buffers));
  }
  // A kernel on these buffers, spec.align given (or empty).
  void add_kernel(KernelSpec spec, std::vector<BufferRef> buffers) {
    if (std::all_of(spec.align.begin(), spec.align.end(), [](int64_t a) { return a == 64; })) spec.align.clear();
    spec.chunk = choose_chunk(spec, split_);
    ParallelKernelArgs parallel;
    if (spec.chunk > 0) {
      parallel.extent = split_extent(spec).extent;
      parallel.chunk = spec.chunk;
      for (const KernelSpec::Sum& sum : spec.sums)
        parallel.sums.push_back(
            {.param = sum.param, .scale = sum.scale, .dtype = sum.dtype, .op = kernels::ReduceOp::sum, .count = sum.count});
      if (spec.kind == KernelSpec::Kind::reduce && spec.kept.empty())  // to one number
        parallel.sums.push_back({.param = 1, .scale = spec.scale, .dtype = spec.params[1], .op = spec.reduce_op});
    }
    spec.key = make_key(spec);
    auto [it, added] = table_.index.emplace(spec.key, static_cast<int>(table_.kernels.size()));
    if (added) table_.kernels.push_back(std::move(spec));
    if (parallel.chunk > 0) {
      parallel.kernel = it->second;
      parallel.buffers = std::move(buffers);
      program_->steps.push_back(std::move(parallel));
    } else {
      program_->steps.push_back(KernelArgs{.kernel = it->second, .buffers = std::move(buffers)});
    }
  }

  void schedule(const LoopStep& loop) {
    KernelSpec k;
    k.kind = KernelSpec::Kind::loop;
    std::vector<int> param_slots;
    auto param = [&](Var v) {
      const int slot = p_.slot_of[v];
      auto at = std::find(param_slots.begin(), param_slots.end(), slot);
      if (at != param_slots.end()) return static_cast<int>(at - param_slots.begin());
      param_slots.push_back(slot);
      k.params.push_back(t_.type(v).dtype);
      return static_cast<int>(param_slots.size()) - 1;
    };
    std::unordered_map<Var, int> value;  // tape variable -> local value
    // Loads first: the inputs read element for element, then the gathers' indexed loads.
    std::map<std::size_t, Var> gathered_indices;  // a gather's load -> its indices
    std::map<std::size_t, Var> constant_loads;    // a constant's load -> the constant
    std::vector<Var> plain;
    for (Var m : loop.members)
      if (!is_indexed_member(t_, m))
        for (Var a : t_.op(m).args) plain.push_back(a);
    for (Var a : loop_inputs(t_, loop)) {
      if (std::find(plain.begin(), plain.end(), a) == plain.end()) continue;
      value[a] = static_cast<int>(k.loads.size());
      if (t_.op(a).kind == OpKind::constant) constant_loads[k.loads.size()] = a;
      k.loads.push_back({param(a), t_.type(a).dtype, broadcast_strides(t_.type(a).shape, loop.shape), -1, {}, 0, {}, {}});
    }
    for (Var m : loop.members) {  // strided reads: loads at their source's offset and strides
      if (!is_strided_member(t_, m)) continue;
      const Op& op = t_.op(m);
      const Var x = op.args[0];
      const StridedMap s = op.prim->lowering.strided_read(t_.type(x), op.attrs);
      value[m] = static_cast<int>(k.loads.size());
      k.loads.push_back({param(x), t_.type(x).dtype, s.strides, -1, {}, 0, {}, {}, s.offset});
    }
    for (Var m : loop.members) {
      if (!is_gather_member(t_, m)) continue;
      const Op& op = t_.op(m);
      const Var x = op.args[0], idx = op.args[1];
      const Indexed g = indexed_geometry(op);
      // The result's dimensions: x's before the axis, the indices', x's after it.
      const std::vector<int64_t> xs = contiguous(t_.type(x).shape), is = contiguous(t_.type(idx).shape);
      const std::size_t rank = t_.type(idx).shape.size(), axis = static_cast<std::size_t>(g.axis);
      KernelSpec::Load l{param(x), t_.type(x).dtype, {}, param(idx), {}, xs[axis], {}, {}};
      for (std::size_t d = 0; d < loop.shape.size(); ++d) {
        const bool outer = d < axis, in_indices = !outer && d < axis + rank;
        l.strides.push_back(outer ? xs[d] : in_indices ? 0 : xs[d - rank + 1]);
        l.index_strides.push_back(in_indices ? is[d - axis] : 0);
      }
      value[m] = static_cast<int>(k.loads.size());
      gathered_indices[k.loads.size()] = idx;
      k.loads.push_back(std::move(l));
    }
    for (Var m : loop.members) {
      if (is_indexed_member(t_, m)) continue;
      const Op& op = t_.op(m);
      KernelSpec::Inst inst{op.prim, {}, {}, op.type.dtype};
      if (op.prim->structure == Structure::elementwise) inst.element = element_rule(op);
      for (Var a : op.args) inst.args.push_back(value.at(a));
      value[m] = static_cast<int>(k.loads.size() + k.insts.size());
      k.insts.push_back(std::move(inst));
    }
    for (Var m : loop.members)
      if (p_.stored[m]) k.stores.push_back({value.at(m), param(m), contiguous(loop.shape)});
    for (Var r : loop.reductions) {
      const Op& op = t_.op(r);
      KernelSpec::Sum sum{value.at(op.args[0]), param(r), op.prim->lowering.reduce_scale(t_.type(op.args[0]), op.attrs),
                          op.type.dtype, {}, 1};
      const Shape target = op.prim->lowering.reduce_target(t_.type(op.args[0]), op.attrs);
      if (numel(target) > 1) {  // column sums: the result's element at the kept dimensions
        sum.strides = broadcast_strides(target, loop.shape);
        sum.count = numel(target);
      }
      k.sums.push_back(std::move(sum));
    }
    k.dims = loop.shape;
    k.empty = numel(loop.shape) == 0;
    std::vector<std::vector<int64_t>> strides;
    for (const auto& l : k.loads) strides.push_back(l.strides);
    for (const auto& s : k.stores) strides.push_back(s.strides);
    for (const auto& l : k.loads)
      if (l.index_param >= 0) strides.push_back(l.index_strides);
    for (const auto& s : k.sums)
      if (!s.strides.empty()) strides.push_back(s.strides);
    coalesce(k.dims, strides);
    std::size_t next = 0;
    for (auto& l : k.loads) l.strides = strides[next++];
    for (auto& s : k.stores) s.strides = strides[next++];
    for (auto& l : k.loads)
      if (l.index_param >= 0) l.index_strides = strides[next++];
    for (auto& s : k.sums)
      if (!s.strides.empty()) s.strides = strides[next++];
    if (!k.empty) split_innermost(k, gathered_indices, constant_loads);
    for (Var g : loop.checks) program_->steps.push_back(index_check(g));
    add_kernel(std::move(k), param_slots);
  }

  void schedule(const ReduceStep& r) {
    const Op& op = t_.op(r.out);
    const VarType& in = t_.type(r.in);
    KernelSpec k;
    k.kind = KernelSpec::Kind::reduce;
    k.params = {in.dtype, op.type.dtype};
    k.out_numel = numel(op.type.shape);
    k.scale = op.prim->lowering.reduce_scale(in, op.attrs);
    k.reduce_op = op.prim->lowering.reduce_op;
    k.reduce_index = op.prim->lowering.reduce_index;
    k.empty = numel(in.shape) == 0;
    if (!k.empty) {
      const Shape target = op.prim->lowering.reduce_target(in, op.attrs);
      const std::vector<int64_t> in_strides = contiguous(in.shape);
      const std::vector<int64_t> out_strides = broadcast_strides(target, in.shape);
      std::vector<std::vector<int64_t>> kept_strides(2), reduced_strides(1);
      for (std::size_t d = 0; d < in.shape.size(); ++d) {
        if (in.shape[d] == 1) continue;
        if (out_strides[d] != 0) {
          k.kept.push_back(in.shape[d]);
          kept_strides[0].push_back(in_strides[d]);
          kept_strides[1].push_back(out_strides[d]);
        } else {
          k.reduced.push_back(in.shape[d]);
          reduced_strides[0].push_back(in_strides[d]);
        }
      }
      coalesce(k.kept, kept_strides);
      coalesce(k.reduced, reduced_strides);
      k.kept_in = kept_strides[0];
      k.kept_out = kept_strides[1];
      k.reduced_in = reduced_strides[0];
    }
    add_kernel(std::move(k), {p_.slot_of[r.in], p_.slot_of[r.out]});
  }

  void schedule(const TransposeStep& s) {
    const Shape& in = t_.type(s.in).shape;
    KernelSpec k;
    k.kind = KernelSpec::Kind::transpose;
    k.params = {t_.type(s.in).dtype, t_.type(s.out).dtype};
    k.rows = in[0];
    k.cols = in[1];
    k.empty = numel(in) == 0;
    add_kernel(std::move(k), {p_.slot_of[s.in], p_.slot_of[s.out]});
  }

  // Loads along the innermost dimension only (element strides 0 elsewhere, 1 there) of a
  // constant made of a few ranges, each regular, are read range by range, the innermost
  // loop split at the ranges' ends (kMaxSegments ranges at most, for all such loads):
  // - a gather whose constant indices run up by one in each range (a shift [0, 0, 1, ...,
  //   n-2] is two ranges, a slice one) reads contiguously, not by a vector gather;
  // - a constant that is the same throughout each range (a one-hot or a step vector, bit
  //   for bit) reads one element per range, which the optimiser takes out of the loop.
  static constexpr std::size_t kMaxSegments = 4;
  void split_innermost(KernelSpec& k, const std::map<std::size_t, Var>& gathered_indices,
                       const std::map<std::size_t, Var>& constant_loads) const {
    if (k.dims.empty()) return;
    const int64_t n = k.dims.back();
    auto innermost_only = [](const std::vector<int64_t>& s) {
      return std::all_of(s.begin(), s.end() - 1, [](int64_t x) { return x == 0; }) && s.back() == 1;
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
    for (const auto& [load, idx] : gathered_indices)
      if (t_.op(idx).kind == OpKind::constant && innermost_only(k.loads[load].index_strides)) {
        const int64_t* v = t_.op(idx).value.data<int64_t>();
        try_split(load, [v](int64_t j) { return v[j] == v[j - 1] + 1; });
      }
    for (const auto& [load, c] : constant_loads)
      if (innermost_only(k.loads[load].strides)) {
        const auto* v = static_cast<const unsigned char*>(t_.op(c).value.raw());
        const std::size_t size = dtype_size(t_.type(c).dtype);
        try_split(load, [v, size](int64_t j) {
          return std::memcmp(v + static_cast<std::size_t>(j) * size, v + static_cast<std::size_t>(j - 1) * size, size) == 0;
        });
      }
    if (split.empty()) return;
    k.segments = ends;
    for (std::size_t load : split) {
      KernelSpec::Load& l = k.loads[load];
      const int64_t* v = l.index_param >= 0 ? t_.op(gathered_indices.at(load)).value.data<int64_t>() : nullptr;
      int64_t start = 0;
      for (int64_t end : ends) {
        if (v != nullptr) l.deltas.push_back(v[start] - start);
        else l.fixed.push_back(start);
        start = end;
      }
    }
  }

  // A gather's or scatter's geometry: x (or target) is [outer, n, inner] around the
  // axis, and `count` indices pick along n.
  struct Indexed {
    int64_t axis = 0, outer = 1, n = 0, inner = 1, count = 0;
  };
  Indexed indexed_geometry(const Op& op) const {
    const VarType& x = t_.type(op.args[0]);
    Indexed g;
    g.axis = op.attrs.has("axis") ? op.attrs.integer("axis") : 0;
    if (g.axis < 0) g.axis += static_cast<int64_t>(x.shape.size());
    const auto axis = static_cast<std::size_t>(g.axis);
    for (std::size_t d = 0; d < axis; ++d) g.outer *= x.shape[d];
    for (std::size_t d = axis + 1; d < x.shape.size(); ++d) g.inner *= x.shape[d];
    g.n = x.shape[axis];
    g.count = numel(t_.type(op.args[1]).shape);
    return g;
  }
  // The check of a gather's or scatter's indices (JIT code must neither read out of
  // bounds nor throw).
  CheckIndicesArgs index_check(Var out) const {
    const Op& op = t_.op(out);
    const Indexed g = indexed_geometry(op);
    return {.indices = ref_of(op.args[1]), .count = g.count, .axis_length = g.n, .axis = g.axis, .prim = op.prim,
            .distinct = op.prim->lowering.replaces};
  }

  // A check of the indices, then the loop: params {x, indices, out} for a gather,
  // {target, indices, values, out} for a scatter.
  void schedule_indexed(Var out, KernelSpec::Kind kind) {
    const Op& op = t_.op(out);
    const Indexed g = indexed_geometry(op);
    KernelSpec k;
    k.kind = kind;
    k.outer = g.outer, k.n = g.n, k.count = g.count, k.inner = g.inner;
    k.replace = kind == KernelSpec::Kind::scatter && op.prim->lowering.replaces;
    k.empty = k.outer * k.count * k.inner == 0;
    program_->steps.push_back(index_check(out));
    std::vector<int> slots;
    for (Var a : op.args) {
      k.params.push_back(t_.type(a).dtype);
      slots.push_back(p_.slot_of[a]);
    }
    k.params.push_back(op.type.dtype);
    slots.push_back(p_.slot_of[out]);
    add_kernel(std::move(k), slots);
  }
  void schedule(const CheckStep& c) {
    const Op& op = t_.op(c.guard);
    const Var cond = op.args[0];
    program_->steps.push_back(GuardArgs{.dtype = t_.type(cond).dtype,
                                     .cond = ref_of(cond),
                                     .expected = op.attrs.boolean("expected"),
                                     .label = fmt::format("%{} = guard(%{})", c.guard, cond),
                                     .loop = op.attrs.has("loop") ? op.attrs.string("loop") : std::string()});
  }

  // A strided placement: per argument, a loop copying it into its place in the result.
  void schedule(const PlaceStep& s) {
    const Op& op = t_.op(s.out);
    std::vector<VarType> types;
    for (Var a : op.args) types.push_back(t_.type(a));
    const std::vector<StridedMap> places = op.prim->lowering.strided_place(types, op.attrs);
    if (!place_covers(t_, s.out))  // (unslice) zeros where no argument goes
      program_->steps.push_back(ZeroArgs{.to = ref_of(s.out),
                                         .bytes = numel(op.type.shape) * static_cast<int64_t>(dtype_size(op.type.dtype))});
    for (std::size_t i = 0; i < op.args.size(); ++i) {
      const Var a = op.args[i];
      if (numel(t_.type(a).shape) == 0) continue;
      KernelSpec k;
      k.kind = KernelSpec::Kind::loop;
      k.params = {t_.type(a).dtype, op.type.dtype};
      k.dims = t_.type(a).shape;
      k.loads.push_back({0, t_.type(a).dtype, contiguous(k.dims), -1, {}, 0, {}, {}});
      k.stores.push_back({0, 1, places.at(i).strides, places.at(i).offset});
      std::vector<std::vector<int64_t>> strides{k.loads[0].strides, k.stores[0].strides};
      coalesce(k.dims, strides);
      k.loads[0].strides = strides[0];
      k.stores[0].strides = strides[1];
      add_kernel(std::move(k), {p_.slot_of[a], p_.slot_of[s.out]});
    }
  }

  void schedule(const GatherStep& g) { schedule_indexed(g.out, KernelSpec::Kind::gather); }
  void schedule(const ScatterStep& s) { schedule_indexed(s.out, KernelSpec::Kind::scatter); }

  void schedule(const MatmulStep& m) {
    const Shape& as = t_.type(m.a).shape;
    const Shape& bs = t_.type(m.b).shape;
    const DType dtype = t_.type(m.out).dtype;
    if (t_.type(m.out).shape.size() > 2) return schedule_batched(m);
    if (bs.size() == 1) {
      program_->steps.push_back(GemvArgs{.dtype = dtype,
                                      .a = ref_of(m.a),
                                      .x = ref_of(m.b),
                                      .y = ref_of(m.out),
                                      .trans_a = m.trans_a,
                                      .rows = as[0],
                                      .cols = as[1]});
      return;
    }
    const int64_t N = m.trans_b ? bs[0] : bs[1];
    program_->steps.push_back(GemmArgs{.dtype = dtype,
                                    .a = ref_of(m.a),
                                    .b = ref_of(m.b),
                                    .c = ref_of(m.out),
                                    .trans_a = m.trans_a,
                                    .trans_b = m.trans_b,
                                    .m = m.trans_a ? as[1] : as[0],
                                    .n = N,
                                    .k = m.trans_a ? as[0] : as[1],
                                    .lda = as[1],
                                    .ldb = bs[1],
                                    .ldc = N});
  }

  // batch_matmul (out [..., m, n]): a gemm per batch element on the matrices where they
  // are (each argument's batch dimensions broadcast to the result's: stride 0).
  void schedule_batched(const MatmulStep& mm) {
    const Shape& as = t_.type(mm.a).shape;
    const Shape& bs = t_.type(mm.b).shape;
    const Shape& os = t_.type(mm.out).shape;
    const std::size_t r = os.size();
    BatchGemmArgs g;
    g.gemm = GemmArgs{.dtype = t_.type(mm.out).dtype,
                      .a = ref_of(mm.a),
                      .b = ref_of(mm.b),
                      .c = ref_of(mm.out),
                      .trans_a = mm.trans_a,
                      .trans_b = mm.trans_b,
                      .m = os[r - 2],
                      .n = os[r - 1],
                      .k = mm.trans_a ? as[as.size() - 2] : as.back(),
                      .lda = as.back(),
                      .ldb = bs.back(),
                      .ldc = os[r - 1]};
    // Element strides of each operand's matrices along the result's batch dimensions.
    auto batch_strides = [&](const Shape& s) {
      std::vector<int64_t> out(r - 2, 0);
      int64_t stride = s[s.size() - 2] * s.back();
      for (std::size_t i = 0; i + 2 < s.size(); ++i) {  // s's batch dims from the last
        const std::size_t d = s.size() - 3 - i, o = r - 3 - i;
        if (s[d] != 1) out[o] = stride;
        stride *= s[d];
      }
      return out;
    };
    g.batch.assign(os.begin(), os.end() - 2);
    std::vector<std::vector<int64_t>> strides{batch_strides(as), batch_strides(bs), batch_strides(os)};
    coalesce(g.batch, strides);
    g.stride_a = strides[0], g.stride_b = strides[1], g.stride_c = strides[2];
    int64_t count = 1;
    for (int64_t b : g.batch) count *= b;
    // Products too small to be cut into blocks (blas.cpp: below 2 kBlockMacs multiply-adds)
    // run on the pool, in chunks of about 2^17 multiply-adds (one product each from 2^17:
    // gmm's 100 products of 1000 x 20 x 20 had run one after another on one thread);
    // larger ones one after another, each cut into blocks on the pool.
    const int64_t macs = g.gemm.m * g.gemm.n * g.gemm.k;
    if (count > 1 && macs > 0 && static_cast<double>(macs) < 2 * blas::kBlockMacs)
      g.chunk = std::max<int64_t>(1, (int64_t{1} << 17) / macs);
    if (g.chunk >= count) g.chunk = 0;
    if (count > 0 && g.gemm.m > 0 && g.gemm.n > 0) program_->steps.push_back(std::move(g));
  }

  void schedule(const ExternStep& e) {
    const Op& op = t_.op(e.out);
    if (runs_as_pool(t_, e.out)) return schedule_pool(e.out);
    std::vector<std::string> argnames;
    for (Var a : op.args) argnames.push_back(fmt::format("%{}", a));
    ExternArgs call{.prim = op.prim,
                    .attrs = op.attrs,
                    .args = {},
                    .results = {},
                    .label = fmt::format("%{} = {}({})", e.out, op.prim->name, fmt::join(argnames, ", ")),
                    .scratch = {}};
    for (Var a : op.args) call.args.push_back(typed(a));
    for (int i = 0; i < e.results; ++i) call.results.push_back(typed(e.out + i));
    call.borrow = is_builtin(*op.prim);
    for (const auto& [name, value] : op.attrs.items())
      if (std::holds_alternative<TapeRef>(value)) call.borrow = false;
    if (e.scratch >= 0) call.has_scratch = true, call.scratch = ref(e.scratch);
    program_->steps.push_back(std::move(call));
  }

  // A pooling primitive's windows in a generated loop (params: its arguments, then out).
  void schedule_pool(Var out) {
    const Op& op = t_.op(out);
    std::vector<VarType> types;
    for (Var a : op.args) types.push_back(t_.type(a));
    KernelSpec k;
    k.kind = KernelSpec::Kind::pool;
    k.pool = op.prim->lowering.pool(types, op.attrs);
    k.empty = k.pool.nc == 0;
    std::vector<BufferRef> buffers;
    for (Var a : op.args) {
      k.params.push_back(t_.type(a).dtype);
      buffers.push_back(ref_of(a));
    }
    k.params.push_back(op.type.dtype);
    buffers.push_back(ref_of(out));
    add_kernel(std::move(k), std::move(buffers));
  }

  void schedule(const CopyStep& c) {
    const VarType& t = t_.type(c.from);
    program_->steps.push_back(CopyArgs{.from = ref_of(c.from),
                                    .to = ref(c.slot),
                                    .bytes = numel(t.shape) * static_cast<int64_t>(dtype_size(t.dtype))});
  }

  // A loop: one generated kernel (runs_as_kernel), or a step running its bodies'
  // programs, whose kernels join this table.
  void schedule(const LoopCallStep& l) {
    LoopBuffers b = loop_buffers(
        t_, p_, l, [&](int slot) { return ref(slot); }, [&](int slot) { return align(slot); });
    const LoopPlan& lp = *l.loop;
    if (runs_as_kernel(lp)) return schedule_loop_kernel(lp, b);
    if (lp.cond) b.args.cond = Scheduler(lp.cond->tape, lp.cond->plan, table_, split_, b.input_align, {64}).run();
    b.args.body = Scheduler(lp.body->tape, lp.body->plan, table_, split_, b.input_align, b.output_align).run();
    program_->steps.push_back(std::move(b.args));
  }

  void schedule_loop_kernel(const LoopPlan& lp, const LoopBuffers& b) {
    const LoopArgs& L = b.args;
    KernelTable own;  // the body's kernels are inlined, not called
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
    k.kind = KernelSpec::Kind::scan;
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
    param({kConstantBase, add_constant(body->constant_pool)}, 64);
    if (lk->has_index) param(L.counter, 64);
    if (lk->guards > 0) param(b.failure, 64);
    const bool guarded = lk->guards > 0;
    k.scan = std::move(lk);
    add_kernel(std::move(k), std::move(buffers));
    if (guarded) program_->steps.push_back(std::move(guards));
  }

  const Tape& t_;
  const Plan& p_;
  KernelTable& table_;
  const int64_t split_;  // chunk_elements
  const std::vector<int64_t> input_align_, output_align_;
  std::vector<int64_t> constant_offsets_;  // per constant: byte offset in the pool
  std::vector<unsigned char> pool_;        // the constant pool, then the loop kernels' bodies' pools
  std::shared_ptr<Program> program_ = std::make_shared<Program>();
};

}  // namespace

Schedule make_schedule(const Tape& tape, const Plan& plan, int64_t chunk_elements) {
  KernelTable table;
  std::shared_ptr<Program> program = Scheduler(tape, plan, table, chunk_elements).run();
  return {std::move(table.kernels), std::move(program)};
}

}  // namespace reel::codegen
