// Jacobians, Hessians and sparse Jacobians as derived tapes (reel/jacobian.hpp): a
// traced tape -> a tape that returns its outputs and then the derivative blocks.
#include "reel/jacobian.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>
#include <type_traits>

#include <unistd.h>

#include "reel/ir/builder.hpp"
#include "reel/shape.hpp"
#include "reel/ir/body_tape.hpp"

namespace reel {

namespace {

Shape cat(const Shape& a, const Shape& b) {
  Shape s = a;
  s.insert(s.end(), b.begin(), b.end());
  return s;
}

Shape front(int64_t k, const Shape& s) { return cat(Shape{k}, s); }

// Rows [start, stop) of x (x itself when that is all of them).
Var slice_rows(TapeBuilder& b, Var x, int64_t start, int64_t stop) {
  if (start == 0 && stop == b.type(x).shape.at(0)) return x;
  return b.call(prims::slice(), {x}, {{"axis", int64_t{0}}, {"start", start}, {"stop", stop}});
}

// What the tapes' inputs and outputs look like: the argument tensors (the first
// num_args inputs) and the outputs, with their offsets in the flattened concatenation
// of the floating-point ones (the Jacobian's columns and rows).
struct Layout {
  std::vector<VarType> args, outs;
  std::vector<bool> arg_float;
  std::vector<int64_t> arg_offset, out_offset;  // -1 for i64 arguments
  int64_t n = 0, m = 0;                         // columns, rows
};

Layout layout(const char* op, const Tape& f, std::size_t num_args) {
  Layout l;
  const std::vector<Var> inputs = f.inputs();
  for (std::size_t i = 0; i < num_args; ++i) {
    const VarType& t = f.type(inputs[i]);
    l.args.push_back(t);
    const bool fl = t.dtype != DType::i64;
    l.arg_float.push_back(fl);
    l.arg_offset.push_back(fl ? l.n : -1);
    if (fl) l.n += numel(t.shape);
  }
  for (std::size_t o = 0; o < f.outputs.size(); ++o) {
    const VarType& t = f.type(f.outputs[o]);
    if (t.dtype == DType::i64)
      throw Error(fmt::format("{}: expected floating-point outputs, got output {} of type {}", op, o + 1,
                              type_str(t)));
    l.outs.push_back(t);
    l.out_offset.push_back(l.m);
    l.m += numel(t.shape);
  }
  if (l.outs.empty()) throw Error(fmt::format("{}: expected a function with at least one output, got none", op));
  return l;
}

// What unpacking needs: the number of outputs, which arguments are floating point.
struct Info {
  std::size_t outputs = 0;
  std::vector<bool> arg_float;
};

std::shared_ptr<const Info> info_of(const Layout& l) {
  return std::make_shared<const Info>(Info{l.outs.size(), l.arg_float});
}

// The forward pass batched over k seed directions: f's outputs, then each output's k
// tangents ([k] + its shape). `seed(i)` is floating-point argument i's seeds ([k] + its
// shape: a constant or an input of b); i64 arguments and the captures (inputs past the
// arguments) get zero tangents.
std::vector<Var> forward_seeded(TapeBuilder& b, std::span<const Var> ins, const Tape& f, std::size_t num_args,
                                int64_t k, const std::function<Var(std::size_t)>& seed) {
  const Tape j = jvp_tape(f, k);
  std::vector<Var> jin(ins.begin(), ins.end());
  const std::vector<Var> inputs = f.inputs();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const VarType& t = f.type(inputs[i]);
    jin.push_back(i < num_args && t.dtype != DType::i64 ? seed(i)
                                                         : b.broadcast_to(b.scalar(0, t.dtype), front(k, t.shape)));
  }
  return b.inline_tape(j, jin);
}

// The bytes of memory this process may use: the machine's, or less where its control
// group (a container's) sets a lower limit (cgroup v2's memory.max, v1's
// memory.limit_in_bytes; "max" and v1's huge "no limit" number leave the machine's);
// 0 if unknown.
double memory_limit() {
  double memory = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    double limit = 0;
    if (in >> limit && limit > 0 && (memory <= 0 || limit < memory)) memory = limit;
  }
  return memory;
}

// Zero seeds of `shape` for one pass batched over shape[0] directions, or a reel::Error
// in `op`'s name saying how large they are when they cannot be had: jacfwd of 10^6
// input elements would batch its forward pass over 10^6 identity seeds of 10^6
// elements each (8 TB), more than any machine holds, and so would everything the pass
// computes: refused before anything is allocated.
Tensor seed_zeros(const char* op, DType dtype, const Shape& shape, const char* each) {
  double bytes = static_cast<double>(dtype_size(dtype));
  for (int64_t d : shape) bytes *= static_cast<double>(d);
  const double memory = memory_limit();
  std::string why;
  if (memory > 0 && bytes > memory) {
    why = fmt::format("more than the {:.3g} bytes of memory this process may use", memory);
  } else {
    try {
      return zeros(shape, dtype);
    } catch (const Error& e) {
      why = e.what();
    }
  }
  throw Error(fmt::format("{}: one pass batched over {} seed directions ({}) needs seeds of {} ({:.3g} bytes) "
                          "alone: {}; ask for fewer directions at once (jvp or vjp of chosen ones), or use the other "
                          "mode (jacfwd: a direction per input element, jacrev: one per output element)",
                          op, shape.at(0), each, type_str(dtype, shape), bytes, why));
}

// Seeds [k] + argument i's shape, from a k x n matrix given by its entries' value.
Tensor seeds_of(const char* op, const Layout& l, std::size_t i, int64_t k,
                const std::function<double(int64_t, int64_t)>& entry) {
  const int64_t size = numel(l.args[i].shape), off = l.arg_offset[i];
  Tensor t = seed_zeros(op, l.args[i].dtype, front(k, l.args[i].shape),
                        k == l.n ? "one per input element" : "a group of input elements each");
  auto fill = [&](auto* p) {
    for (int64_t r = 0; r < k; ++r)
      for (int64_t c = 0; c < size; ++c)
        if (const double e = entry(r, off + c); e != 0)
          p[r * size + c] = static_cast<std::remove_pointer_t<decltype(p)>>(e);
  };
  if (t.dtype() == DType::f32) fill(t.mutable_data<float>());
  else fill(t.mutable_data<double>());
  return t;
}

std::vector<Var> tape_inputs(TapeBuilder& b, const Tape& f) {
  std::vector<Var> ins;
  for (Var v : f.inputs()) ins.push_back(b.input(f.type(v)));
  return ins;
}

// jacfwd: one forward pass batched over the n identity seeds. Outputs: f's outputs, then
// the blocks [o][i] (floating-point arguments only), output-major.
Tape jacfwd_tape(const char* op, const Tape& f, const Layout& l) {
  TapeBuilder b;
  const std::vector<Var> ins = tape_inputs(b, f);
  const std::vector<Var> outs = forward_seeded(b, ins, f, l.args.size(), l.n, [&](std::size_t i) {
    return b.constant(seeds_of(op, l, i, l.n, [](int64_t r, int64_t c) { return r == c ? 1.0 : 0.0; }));
  });
  const std::size_t m = l.outs.size();
  std::vector<Var> result(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(m));
  for (std::size_t o = 0; o < m; ++o) {
    const int64_t out_size = numel(l.outs[o].shape);
    for (std::size_t i = 0; i < l.args.size(); ++i) {
      if (!l.arg_float[i]) continue;
      const int64_t size = numel(l.args[i].shape);
      // tangents [n] + out shape -> rows of argument i -> [size, out] -> [out, size].
      const Var rows = slice_rows(b, outs[m + o], l.arg_offset[i], l.arg_offset[i] + size);
      const Var t = b.transpose(b.reshape(rows, {size, out_size}));
      result.push_back(b.reshape(t, cat(l.outs[o].shape, l.args[i].shape)));
    }
  }
  b.set_outputs(std::move(result));
  return cleanup(b.finish());
}

// jacrev: the outputs flattened into one vector of m, its vector-Jacobian tape batched
// over the m identity seeds (one reverse pass for all rows).
Tape jacrev_tape(const char* op, const Tape& f, const Layout& l) {
  const DType dt = l.outs[0].dtype;
  for (std::size_t o = 1; o < l.outs.size(); ++o)
    if (l.outs[o].dtype != dt)
      throw Error(fmt::format("{}: expected outputs of one dtype, got {} and {}", op, type_str(l.outs[0]),
                              type_str(l.outs[o])));
  // The m identity seeds first: nothing is derived for a Jacobian too large to compute.
  Tensor eye = seed_zeros(op, dt, {l.m, l.m}, "one per output element");
  for (int64_t i = 0; i < l.m; ++i) {
    if (dt == DType::f32) eye.mutable_data<float>()[i * l.m + i] = 1;
    else eye.mutable_data<double>()[i * l.m + i] = 1;
  }
  Tape flat;
  {
    TapeBuilder b;
    const std::vector<Var> ins = tape_inputs(b, f);
    const std::vector<Var> outs = b.inline_tape(f, ins);
    std::vector<Var> parts;
    for (std::size_t o = 0; o < outs.size(); ++o) parts.push_back(b.reshape(outs[o], {numel(l.outs[o].shape)}));
    b.set_outputs({parts.size() == 1 ? parts[0] : b.call(prims::concat(), parts, {{"axis", int64_t{0}}})});
    flat = b.finish();
  }
  const std::size_t num_args = l.args.size();
  const Tape v = own_gradients(vjp_tape(flat), num_args);  // [value, grads...]; inputs + seed
  const std::size_t inputs = v.inputs().size();
  Flags flags(inputs);
  for (std::size_t i = 0; i < inputs; ++i) flags[i] = i + 1 == inputs;  // the seed
  const BatchedTape r = batch_tape(v, flags, l.m);

  TapeBuilder b;
  std::vector<Var> ins = tape_inputs(b, f);
  ins.push_back(b.constant(eye));
  const std::vector<Var> outs = b.inline_tape(r.tape, ins);
  Var value = outs[0];  // [m]; batched (all rows equal) when computed with the seeds
  if (r.batched[0])  // (no output element: no row to take; the value is empty)
    value = l.m == 0 ? b.reshape(value, {0}) : b.reshape(slice_rows(b, value, 0, 1), {l.m});
  std::vector<Var> result;
  for (std::size_t o = 0; o < l.outs.size(); ++o)
    result.push_back(b.reshape(slice_rows(b, value, l.out_offset[o], l.out_offset[o] + numel(l.outs[o].shape)),
                               l.outs[o].shape));
  for (std::size_t o = 0; o < l.outs.size(); ++o) {
    const int64_t size = numel(l.outs[o].shape);
    for (std::size_t i = 0; i < num_args; ++i) {
      if (!l.arg_float[i]) continue;
      Var g = outs[1 + i];  // [m] + argument shape
      if (!r.batched[1 + i]) g = b.broadcast_to(g, front(l.m, l.args[i].shape));
      const Var rows = slice_rows(b, g, l.out_offset[o], l.out_offset[o] + size);
      result.push_back(b.reshape(rows, cat(l.outs[o].shape, l.args[i].shape)));
    }
  }
  b.set_outputs(std::move(result));
  return cleanup(b.finish());
}

std::vector<std::vector<Tensor>> unpack_blocks(std::vector<Tensor>& outs, std::size_t& next, std::size_t rows,
                                               const std::vector<bool>& arg_float) {
  std::vector<std::vector<Tensor>> blocks(rows);
  for (auto& row : blocks) {
    row.reserve(arg_float.size());
    for (bool fl : arg_float) row.push_back(fl ? std::move(outs.at(next++)) : Tensor());
  }
  return blocks;
}

}  // namespace

int64_t Sparsity::nnz() const {
  int64_t n = 0;
  for (const auto& r : row_cols) n += static_cast<int64_t>(r.size());
  return n;
}

void Sparsity::check(const char* op) const {
  if (rows < 0 || cols < 0 || static_cast<int64_t>(row_cols.size()) != rows)
    throw Error(fmt::format("{}: expected a sparsity pattern with one column list per row ({} rows), got {}", op,
                            rows, row_cols.size()));
  for (std::size_t r = 0; r < row_cols.size(); ++r)
    for (int64_t c : row_cols[r])
      if (c < 0 || c >= cols)
        throw Error(fmt::format("{}: the sparsity pattern's row {} has column {}, expected 0 <= column < {}", op, r,
                                c, cols));
}

Sparsity Sparsity::from_dense(const Tensor& matrix) {
  if (!matrix.defined() || matrix.rank() != 2)
    throw Error(fmt::format("Sparsity::from_dense: expected a 2-D tensor, got {}",
                            matrix.defined() ? type_str(matrix.dtype(), matrix.shape()) : "undefined"));
  Sparsity s{matrix.shape()[0], matrix.shape()[1], {}};
  const std::vector<double> v = matrix.values();
  s.row_cols.resize(static_cast<std::size_t>(s.rows));
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t c = 0; c < s.cols; ++c)
      if (v[static_cast<std::size_t>(r * s.cols + c)] != 0) s.row_cols[static_cast<std::size_t>(r)].push_back(c);
  return s;
}

Colouring colour_columns(const Sparsity& p) {
  p.check("colour_columns");
  const auto n = static_cast<std::size_t>(p.cols);
  std::vector<std::vector<int64_t>> col_rows(n);
  for (std::size_t r = 0; r < p.row_cols.size(); ++r)
    for (int64_t c : p.row_cols[r]) col_rows[static_cast<std::size_t>(c)].push_back(static_cast<int64_t>(r));
  // Largest first: a column's degree approximated by the nonzeros of its rows.
  std::vector<int64_t> degree(n, 0), order(n);
  for (std::size_t c = 0; c < n; ++c)
    for (int64_t r : col_rows[c]) degree[c] += static_cast<int64_t>(p.row_cols[static_cast<std::size_t>(r)].size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return degree[static_cast<std::size_t>(a)] > degree[static_cast<std::size_t>(b)];
  });
  Colouring out;
  out.colour.assign(n, -1);
  std::vector<int64_t> stamp;  // stamp[colour] == column + 1: used by a neighbour of column
  for (int64_t c : order) {
    for (int64_t r : col_rows[static_cast<std::size_t>(c)])
      for (int64_t other : p.row_cols[static_cast<std::size_t>(r)]) {
        const int64_t k = out.colour[static_cast<std::size_t>(other)];
        if (k >= 0) stamp[static_cast<std::size_t>(k)] = c + 1;
      }
    int64_t k = 0;
    while (k < out.count && stamp[static_cast<std::size_t>(k)] == c + 1) ++k;
    if (k == out.count) ++out.count, stamp.push_back(0);
    out.colour[static_cast<std::size_t>(c)] = k;
  }
  return out;
}

Tensor SparseJacobian::dense() const {
  if (!pattern || !nonzeros.defined())
    throw Error("SparseJacobian::dense: expected a sparse Jacobian from reel::sparse_jacobian, got an empty one (no pattern)");
  std::vector<double> d(static_cast<std::size_t>(pattern->rows * pattern->cols), 0.0);
  const std::vector<double> nz = nonzeros.values();
  std::size_t next = 0;
  for (int64_t r = 0; r < pattern->rows; ++r)
    for (int64_t c : pattern->row_cols[static_cast<std::size_t>(r)])
      d[static_cast<std::size_t>(r * pattern->cols + c)] = nz.at(next++);
  return tensor(d, {pattern->rows, pattern->cols}, nonzeros.dtype());
}

namespace detail {

Derived JacobianDerivation::derive(const Tape& f, std::size_t num_args, std::span<const Tensor>) const {
  const char* op = mode == JacobianMode::forward ? "jacfwd" : mode == JacobianMode::reverse ? "jacrev" : "jacobian";
  const Layout l = layout(op, f, num_args);
  const bool forward = mode == JacobianMode::forward || (mode == JacobianMode::automatic && l.n <= l.m);
  return {forward ? jacfwd_tape(op, f, l) : jacrev_tape(op, f, l), info_of(l)};
}

Jacobian JacobianDerivation::unpack(std::vector<Tensor> outs, const void* info) const {
  const Info& in = *static_cast<const Info*>(info);
  Jacobian j;
  std::size_t next = in.outputs;
  j.blocks = unpack_blocks(outs, next, in.outputs, in.arg_float);
  outs.resize(in.outputs);  // (the blocks moved out: the rest are f's outputs, kept in their vector)
  j.values = std::move(outs);
  j.value = j.values[0];
  if (!j.blocks[0].empty()) j.jacobian = j.blocks[0][0];
  return j;
}

namespace {

// Where the defined tensors of a kept result's blocks are, row by row (an i64
// argument's block is undefined and has no output).
void block_slots(std::vector<std::vector<Tensor>>& blocks, std::vector<Tensor*>& slots) {
  for (auto& row : blocks)
    for (Tensor& b : row)
      if (b.defined()) slots.push_back(&b);
}

// Whether blocks have this derivation's `rows` rows (those of rows_float, or all for
// null) and a column per argument, defined exactly where it has outputs: where take
// found them, a hit wrote its outputs in their order.
bool blocks_fit(const std::vector<std::vector<Tensor>>& blocks, std::size_t rows, const std::vector<bool>* rows_float,
                const std::vector<bool>& arg_float) {
  if (blocks.size() != rows) return false;
  for (std::size_t r = 0; r < rows; ++r) {
    if (blocks[r].size() != arg_float.size()) return false;
    for (std::size_t a = 0; a < arg_float.size(); ++a)
      if (blocks[r][a].defined() != ((rows_float == nullptr || (*rows_float)[r]) && arg_float[a])) return false;
  }
  return true;
}

// The outputs a hit wrote through the slots, in their order (for unpack, when the
// kept result's structure is not the hit's).
std::vector<Tensor> gathered(const Recycle& kept) {
  std::vector<Tensor> outs;
  for (Tensor* t : kept.slots) outs.push_back(std::move(*t));
  return outs;
}

// Whether t is one of the tensors of `list` (of `blocks`).
bool in_list(const std::vector<Tensor>& list, const Tensor* t) {
  return !list.empty() && t >= list.data() && t < list.data() + list.size();
}
bool in_blocks(const std::vector<std::vector<Tensor>>& blocks, const Tensor* t) {
  return std::any_of(blocks.begin(), blocks.end(), [&](const std::vector<Tensor>& row) { return in_list(row, t); });
}

// How many of a kept result's tensors hold the memory of t, one of its slots: t and
// those of the result's second names for its tensors (value, jacobian) that are copies
// of it. Counted rather than dropped: a copy dropped and made again after the call
// costs two atomic reference counts, the call's run writes in place with these.
int holders_of(const Tensor& t, std::initializer_list<const Tensor*> names) {
  int n = 1;
  for (const Tensor* c : names) n += t.defined() && c->same_storage(t);
  return n;
}
// The holders of the slots of `kept` from `first` on.
void slot_holders(Recycle& kept, std::size_t first, std::initializer_list<const Tensor*> names) {
  for (std::size_t k = first; k < kept.slots.size(); ++k) kept.holders.push_back(holders_of(*kept.slots[k], names));
}

// A result's second name for t made a copy of it again, unless it still is one (t was
// written in place).
void name_again(Tensor& name, const Tensor& t) {
  if (name.defined() && name.same_storage(t) && name.dtype() == t.dtype() && same_shape(name.shape(), t.shape())) return;
  name = t;
}

}  // namespace

bool JacobianDerivation::holds(const Jacobian& r, const Tensor* t) const {
  return t == &r.value || t == &r.jacobian || in_list(r.values, t) || in_blocks(r.blocks, t);
}

bool HessianDerivation::holds(const Hessian& r, const Tensor* t) const {
  return t == &r.value || t == &r.hessian || in_list(r.grads, t) || in_blocks(r.blocks, t);
}

void JacobianDerivation::take(Jacobian& r, Recycle& kept) const {
  const std::size_t first = kept.slots.size();
  for (Tensor& v : r.values) kept.slots.push_back(&v);
  block_slots(r.blocks, kept.slots);
  slot_holders(kept, first, {&r.value, &r.jacobian});
}

void JacobianDerivation::put(Jacobian& r, Recycle& kept, const void* info) const {
  const Info& in = *static_cast<const Info*>(info);
  if (r.values.size() != in.outputs || !blocks_fit(r.blocks, in.outputs, nullptr, in.arg_float)) {
    r = unpack(gathered(kept), info);
    return;
  }
  name_again(r.value, r.values[0]);
  if (r.blocks[0].empty()) r.jacobian = Tensor();
  else name_again(r.jacobian, r.blocks[0][0]);
}

// Forward over reverse: the gradient tape's forward pass batched over the n identity
// seeds; the value's tangent (the gradient again) is dropped.
Derived HessianDerivation::derive(const Tape& f, std::size_t num_args, std::span<const Tensor>) const {
  const Layout l = layout("hessian", f, num_args);
  if (l.outs.size() != 1 || !l.outs[0].shape.empty())
    throw Error(fmt::format("hessian: expected a function with one scalar (0-d) output, got {}",
                            l.outs.size() == 1 ? type_str(l.outs[0]) : fmt::format("{} outputs", l.outs.size())));
  const Tape g = own_gradients(grad_tape(f), num_args);  // [value, gradient of each argument]
  std::vector<int> keep{0};
  for (std::size_t i = 0; i < num_args; ++i)
    if (l.arg_float[i]) keep.push_back(static_cast<int>(1 + i));
  const Tape gf = select_outputs(g, keep);
  const Layout lg = layout("hessian", gf, num_args);
  const Tape j = jacfwd_tape("hessian", gf, lg);  // [value, grads, blocks of the value, blocks of the grads]
  const std::size_t floats = keep.size() - 1;
  std::vector<int> out;
  for (std::size_t i = 0; i < keep.size(); ++i) out.push_back(static_cast<int>(i));
  for (std::size_t b = 0; b < floats * floats; ++b) out.push_back(static_cast<int>(keep.size() + floats + b));
  return {dce(select_outputs(j, out)), info_of(l)};
}

Hessian HessianDerivation::unpack(std::vector<Tensor> outs, const void* info) const {
  const Info& in = *static_cast<const Info*>(info);
  Hessian h;
  h.value = outs.at(0);
  std::size_t next = 1;
  for (bool fl : in.arg_float) h.grads.push_back(fl ? outs.at(next++) : Tensor());
  std::vector<bool> rows_float;
  std::vector<std::vector<Tensor>> rows;
  for (bool fl : in.arg_float) {
    if (!fl) {
      rows.emplace_back(in.arg_float.size());
      continue;
    }
    auto one = unpack_blocks(outs, next, 1, in.arg_float);
    rows.push_back(std::move(one[0]));
  }
  h.blocks = std::move(rows);
  if (!h.blocks.empty()) h.hessian = h.blocks[0][0];
  return h;
}

void HessianDerivation::take(Hessian& r, Recycle& kept) const {
  const std::size_t first = kept.slots.size();
  if (r.value.defined()) kept.slots.push_back(&r.value);
  for (Tensor& g : r.grads)
    if (g.defined()) kept.slots.push_back(&g);
  block_slots(r.blocks, kept.slots);
  slot_holders(kept, first, {&r.hessian});
}

void HessianDerivation::put(Hessian& r, Recycle& kept, const void* info) const {
  const Info& in = *static_cast<const Info*>(info);
  bool fits = r.value.defined() && r.grads.size() == in.arg_float.size() &&
              blocks_fit(r.blocks, in.arg_float.size(), &in.arg_float, in.arg_float);
  for (std::size_t a = 0; fits && a < in.arg_float.size(); ++a) fits = r.grads[a].defined() == in.arg_float[a];
  if (!fits) {
    r = unpack(gathered(kept), info);
    return;
  }
  if (r.blocks.empty()) r.hessian = Tensor();
  else name_again(r.hessian, r.blocks[0][0]);
}

// NaN seeds: column j's tangent direction is NaN at j and 0 elsewhere; an entry is a
// nonzero where its tangent comes out NaN (see reel/jacobian.hpp for what that means).
// The columns go through in chunks of at most kDetectChunk directions (the seeds are
// inputs of one tape; the last chunk is padded with zero directions), so that memory
// stays bounded for many columns.
constexpr int64_t kDetectChunk = 256;

Sparsity detect_sparsity(const Tape& f, std::size_t num_args, std::span<const Tensor> inputs) {
  const Layout l = layout("detect_sparsity", f, num_args);
  const int64_t k = std::min(l.n, kDetectChunk);
  Sparsity s{l.m, l.n, std::vector<std::vector<int64_t>>(static_cast<std::size_t>(l.m))};
  if (k == 0) return s;
  TapeBuilder b;
  const std::vector<Var> ins = tape_inputs(b, f);
  std::vector<Var> seed_ins(num_args, kNoVar);
  for (std::size_t i = 0; i < num_args; ++i)
    if (l.arg_float[i]) seed_ins[i] = b.input({l.args[i].dtype, front(k, l.args[i].shape)});
  std::vector<Var> outs = forward_seeded(b, ins, f, num_args, k, [&](std::size_t i) { return seed_ins[i]; });
  outs.erase(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(l.outs.size()));
  b.set_outputs(std::move(outs));
  const Tape t = cleanup(b.finish());
  std::vector<Tensor> args;
  for (const Tensor& x : inputs) args.push_back(detach(x));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int64_t start = 0; start < l.n; start += k) {
    std::vector<Tensor> in = args;
    for (std::size_t i = 0; i < num_args; ++i)
      if (l.arg_float[i])
        in.push_back(seeds_of("detect_sparsity", l, i, k, [&](int64_t r, int64_t c) { return start + r == c ? nan : 0.0; }));
    const std::vector<Tensor> tangents = play(t, in);
    for (std::size_t o = 0; o < tangents.size(); ++o) {
      const std::vector<double> v = tangents[o].values();  // [k] + output shape
      const int64_t size = numel(l.outs[o].shape);
      for (int64_t e = 0; e < size; ++e)
        for (int64_t r = 0; r < k && start + r < l.n; ++r)
          if (std::isnan(v[static_cast<std::size_t>(r * size + e)]))
            s.row_cols[static_cast<std::size_t>(l.out_offset[o] + e)].push_back(start + r);
    }
  }
  return s;
}

namespace {
struct SparseInfo {
  std::size_t outputs = 0;
  std::shared_ptr<const Sparsity> pattern;
  int64_t colours = 0;
};
}  // namespace

// One forward pass batched over the colours' seeds ([p, n]: 1 where a column has that
// colour), then a gather of each nonzero from its column's colour: J[r, c] = T[colour(c), r].
Derived SparseDerivation::derive(const Tape& f, std::size_t num_args, std::span<const Tensor> inputs) const {
  const Layout l = layout("sparse_jacobian", f, num_args);
  const std::shared_ptr<const Sparsity> shared =
      pattern ? pattern : std::make_shared<const Sparsity>(detect_sparsity(f, num_args, inputs));
  const Sparsity& p = *shared;
  p.check("sparse_jacobian");
  if (p.rows != l.m || p.cols != l.n)
    throw Error(fmt::format("sparse_jacobian: expected a sparsity pattern of {} rows (output elements) and {} columns "
                            "(floating-point argument elements), got {} x {}",
                            l.m, l.n, p.rows, p.cols));
  const DType dt = l.outs[0].dtype;
  for (const VarType& t : l.outs)
    if (t.dtype != dt)
      throw Error(fmt::format("sparse_jacobian: expected outputs of one dtype, got {} and {}", type_str(l.outs[0]),
                              type_str(t)));
  const Colouring c = colour_columns(p);
  const int64_t k = c.count;
  TapeBuilder b;
  const std::vector<Var> ins = tape_inputs(b, f);
  std::vector<Var> result;
  if (k == 0) {  // no nonzeros
    result = b.inline_tape(f, ins);
    result.push_back(b.constant(zeros({0}, dt)));
  } else {
    const std::vector<Var> outs = forward_seeded(b, ins, f, num_args, k, [&](std::size_t i) {
      return b.constant(seeds_of("sparse_jacobian", l, i, k, [&](int64_t r, int64_t col) {
        return c.colour[static_cast<std::size_t>(col)] == r ? 1.0 : 0.0;
      }));
    });
    const std::size_t m = l.outs.size();
    result.assign(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(m));
    std::vector<Var> parts;
    for (std::size_t o = 0; o < m; ++o) parts.push_back(b.reshape(outs[m + o], {k, numel(l.outs[o].shape)}));
    const Var compressed = parts.size() == 1 ? parts[0] : b.call(prims::concat(), parts, {{"axis", int64_t{1}}});
    std::vector<double> idx;
    for (int64_t r = 0; r < p.rows; ++r)
      for (int64_t col : p.row_cols[static_cast<std::size_t>(r)])
        idx.push_back(static_cast<double>(c.colour[static_cast<std::size_t>(col)] * l.m + r));
    const Var flat = b.reshape(compressed, {k * l.m});
    result.push_back(b.call(prims::gather(), {flat, b.constant(tensor(idx, {static_cast<int64_t>(idx.size())}, DType::i64))},
                            {{"axis", int64_t{0}}}));
  }
  b.set_outputs(std::move(result));
  return {cleanup(b.finish()), std::make_shared<const SparseInfo>(SparseInfo{l.outs.size(), shared, k})};
}

SparseJacobian SparseDerivation::unpack(std::vector<Tensor> outs, const void* info) const {
  const SparseInfo& in = *static_cast<const SparseInfo*>(info);
  SparseJacobian j;
  j.nonzeros = std::move(outs.back());
  outs.pop_back();
  j.values = std::move(outs);
  j.pattern = in.pattern;
  j.colours = in.colours;
  return j;
}

}  // namespace detail

}  // namespace reel
