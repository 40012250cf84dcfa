// The primitives that index with i64 values along an axis: gather, and its transposes
// scatter_add and index_update.
#include <fmt/format.h>

#include <cstring>

#include "batching.hpp"
#include "prims_index.hpp"

namespace reel::prims {

namespace {

// gather / scatter_add / index_update geometry: x's shape around the axis, and the
// indexed shape x[:axis] + indices.shape + x[axis+1:].
struct Indexed {
  int64_t axis, outer, n, inner, count;  // count: number of indices
  Shape shape;
};

Indexed indexed(const char* op, const VarType& x, const VarType& idx, const Attrs& a) {
  Indexed g;
  g.axis = checked_axis(op, a.has("axis") ? a.integer("axis") : 0, x.shape.size(), x);
  const auto ax = static_cast<std::size_t>(g.axis);
  g.outer = product(x.shape, 0, ax);
  g.n = x.shape[ax];
  g.inner = product(x.shape, ax + 1, x.shape.size());
  g.count = numel(idx.shape);
  g.shape.assign(x.shape.begin(), x.shape.begin() + g.axis);
  g.shape.insert(g.shape.end(), idx.shape.begin(), idx.shape.end());
  g.shape.insert(g.shape.end(), x.shape.begin() + g.axis + 1, x.shape.end());
  (void)numel(g.shape, op);  // throws if the element count overflows
  return g;
}

// The indices, checked against the axis length.
const int64_t* checked_indices(const char* op, const Tensor& idx, const Indexed& g) {
  const int64_t* p = idx.data<int64_t>();
  for (int64_t i = 0; i < g.count; ++i)
    if (p[i] < 0 || p[i] >= g.n)
      throw Error(fmt::format("{}: index {} (element {} of the indices) is out of range for axis {} of length {}",
                              op, p[i], i, g.axis, g.n));
  return p;
}

// For each (outer, index, inner) position: f(position in x, position in the indexed shape).
template <class F>
void for_each_indexed(const Indexed& g, const int64_t* idx, F f) {
  for (int64_t i = 0; i < g.outer; ++i)
    for (int64_t j = 0; j < g.count; ++j)
      for (int64_t k = 0; k < g.inner; ++k) f((i * g.n + idx[j]) * g.inner + k, (i * g.count + j) * g.inner + k);
}

void expect_values(const char* op, const VarType& x, const VarType& values, const Indexed& g) {
  if (values.dtype != x.dtype || values.shape != g.shape)
    throw Error(fmt::format("{}: expected values of type {}, got {}", op, type_str(VarType{x.dtype, g.shape}),
                            type_str(values)));
}

// scatter_add / index_update (target, indices, values): linear in target and values
// together, so the tangent is the same operation on their tangents (zeros where none).
std::function<Var(TapeBuilder&, const TangentArgs&)> indexed_tangent(Handle prim) {
  return [prim](TapeBuilder& b, const TangentArgs& a) {
    const Var target = a.tangents[0] != kNoVar ? a.tangents[0] : zeros_of(b, b.type(a.args[0]));
    const Var values = a.tangents[2] != kNoVar ? a.tangents[2] : zeros_of(b, b.type(a.args[2]));
    return b.call(prim(), {target, a.args[1], values}, a.attrs);
  };
}

// A copy of target with f(out, values, position in x, position in values) applied at
// every indexed position: the eager scatter_add (+=) and index_update (=).
template <class F>
Tensor updated_copy(const Tensor& target, const Tensor& values, const Indexed& g, const int64_t* idx, F f) {
  Tensor out(target.dtype(), target.shape());
  if (out.nbytes() > 0) std::memcpy(out.mutable_raw(), target.raw(), out.nbytes());
  by_dtype(target.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* v = values.data<T>();
    T* o = out.mutable_data<T>();
    for_each_indexed(g, idx, [&](int64_t xi, int64_t vi) { f(o[xi], v[vi]); });
  });
  return out;
}

// gather(x, indices, axis): x[..., indices, ...] along axis, with i64 indices of any
// shape (NumPy's take): result shape x[:axis] + indices.shape + x[axis+1:]. Its
// gradient is a scatter-add (duplicate indices accumulate).
Tensor gather_eager(std::span<const Tensor> in, const Attrs& a) {
  const Indexed g = indexed("gather", {in[0].dtype(), in[0].shape()}, {DType::i64, in[1].shape()}, a);
  const int64_t* idx = checked_indices("gather", in[1], g);
  Tensor out(in[0].dtype(), g.shape);
  by_dtype(in[0].dtype(), [&](auto t) {
    using T = decltype(t);
    const T* x = in[0].data<T>();
    T* o = out.mutable_data<T>();
    for_each_indexed(g, idx, [&](int64_t xi, int64_t oi) { o[oi] = x[xi]; });
  });
  return out;
}

// Batched gather: shared indices gather along the axis behind the batch; batched indices
// from a shared x land where the axis was (then moved in front); both batched, x's axis is
// folded into the batch and the indices offset into it.
Results<Var> gather_batch(TapeBuilder& b, const BatchArgs& a) {
  const Var x = a.args[0], idx = a.args[1];
  const int64_t ax = axis_behind_batch(a.attrs, "axis", a.types[0].shape.size());  // in batched x
  const auto ni = static_cast<int64_t>(a.types[1].shape.size());
  if (!a.batched[1]) return b.call(prims::gather(), {x, idx}, {{"axis", ax}});
  if (!a.batched[0]) return move_axes(b, b.call(prims::gather(), {x, idx}, {{"axis", ax - 1}}), ax - 1, 1, 0);
  const int64_t n = a.types[0].shape[static_cast<std::size_t>(ax - 1)];
  // [B, indices..., x's axes before ax, after ax] -> [B, before, indices..., after]
  const Var g = b.call(prims::gather(), {fold_into_batch(b, x, ax), offset_indices(b, idx, n)}, {{"axis", int64_t{0}}});
  return move_axes(b, g, 1, ni, ax);
}

Primitive gather_p() {
  return {
      .name = "gather",
      .arity = 2,
      .attrs = {{"axis", AttrKind::axis, true}},
      .infer = [](std::span<const VarType> in, const Attrs& a) {
        return VarType{in[0].dtype, indexed("gather", in[0], in[1], a).shape};
      },
      .eager = gather_eager,
      .adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
        const VarType x = b.type(a.args[0]);
        return std::vector<Var>{b.call(prims::scatter_add(), {zeros_of(b, x), a.args[1], a.dout}, a.attrs), kNoVar};
      },
      .any_dtype = true,
      .index_args = {1},
      .tangent = [](TapeBuilder& b, const TangentArgs& a) {
        return b.call(prims::gather(), {a.tangents[0], a.args[1]}, a.attrs);
      },
      .structure = Structure::gather,
      .batch = gather_batch,
  };
}

// Batched scatter_add and index_update: target and values batched (shared ones
// broadcast); shared indices act along the axis behind the batch; batched ones index
// the target's axis folded into the batch, offset per batch element.
std::function<Results<Var>(TapeBuilder&, const BatchArgs&)> indexed_batch(Handle prim) {
  return [prim](TapeBuilder& b, const BatchArgs& a) -> Results<Var> {
    const Var target = batched_arg(b, a, 0), values = batched_arg(b, a, 2), idx = a.args[1];
    const int64_t ax = axis_behind_batch(a.attrs, "axis", a.types[0].shape.size());  // in batched target
    if (!a.batched[1]) return b.call(prim(), {target, idx, values}, {{"axis", ax}});
    const Shape& ts = a.types[0].shape;
    const int64_t n = ts[static_cast<std::size_t>(ax - 1)];
    const auto ni = static_cast<int64_t>(a.types[1].shape.size());
    // values [B, before, indices..., after] -> [B, indices..., before, after]
    const Var r = b.call(prim(), {fold_into_batch(b, target, ax), offset_indices(b, idx, n),
                                  move_axes(b, values, ax, ni, 1)}, {{"axis", int64_t{0}}});
    // [B n, before, after] -> [B, n, before, after] -> [B, before, n, after]
    Shape s = b.type(r).shape;
    s[0] = n;
    s.insert(s.begin(), a.size);
    return move_axes(b, b.reshape(r, s), 1, 1, ax);
  };
}

// scatter_add(target, indices, values, axis): target with values added at the
// indexed positions (duplicates accumulate).
Primitive scatter_add_p() {
  return {
      .name = "scatter_add",
      .arity = 3,
      .attrs = {{"axis", AttrKind::axis, true}},
      .infer = [](std::span<const VarType> in, const Attrs& a) {
        expect_values("scatter_add", in[0], in[2], indexed("scatter_add", in[0], in[1], a));
        return in[0];
      },
      .eager = [](std::span<const Tensor> in, const Attrs& a) {
        const Indexed g = indexed("scatter_add", {in[0].dtype(), in[0].shape()}, {DType::i64, in[1].shape()}, a);
        const int64_t* idx = checked_indices("scatter_add", in[1], g);
        return updated_copy(in[0], in[2], g, idx, [](auto& o, auto v) { o += v; });
      },
      .adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
        return std::vector<Var>{a.needs[0] ? a.dout : kNoVar, kNoVar,
                                a.needs[2] ? b.call(prims::gather(), {a.dout, a.args[1]}, a.attrs) : kNoVar};
      },
      .index_args = {1},
      .tangent = indexed_tangent(prims::scatter_add),
      .structure = Structure::scatter,
      .batch = indexed_batch(prims::scatter_add),
  };
}

// index_update(x, indices, values, axis): a functional setindex!: x with the indexed
// positions replaced by values (indices must be distinct). The gradient flows to x
// outside those positions and to values.
Tensor index_update_eager(std::span<const Tensor> in, const Attrs& a) {
  const Indexed g = indexed("index_update", {in[0].dtype(), in[0].shape()}, {DType::i64, in[1].shape()}, a);
  const int64_t* idx = checked_indices("index_update", in[1], g);
  std::vector<bool> seen(static_cast<std::size_t>(g.n), false);
  for (int64_t j = 0; j < g.count; ++j) {
    if (seen[static_cast<std::size_t>(idx[j])])
      throw Error(fmt::format("index_update: index {} appears twice; expected distinct indices", idx[j]));
    seen[static_cast<std::size_t>(idx[j])] = true;
  }
  return updated_copy(in[0], in[2], g, idx, [](auto& o, auto v) { o = v; });
}

Primitive index_update_p() {
  return {
      .name = "index_update",
      .arity = 3,
      .attrs = {{"axis", AttrKind::axis, true}},
      .infer = [](std::span<const VarType> in, const Attrs& a) {
        expect_values("index_update", in[0], in[2], indexed("index_update", in[0], in[1], a));
        return in[0];
      },
      .eager = index_update_eager,
      .adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
        return std::vector<Var>{
            a.needs[0] ? b.call(prims::index_update(), {a.dout, a.args[1], zeros_of(b, b.type(a.args[2]))}, a.attrs) : kNoVar,
            kNoVar, a.needs[2] ? b.call(prims::gather(), {a.dout, a.args[1]}, a.attrs) : kNoVar};
      },
      .any_dtype = true,
      .index_args = {1},
      .tangent = indexed_tangent(prims::index_update),
      .structure = Structure::scatter,  // (f32 and f64 compile to a generated loop; i64 calls index_update_eager)
      .batch = indexed_batch(prims::index_update),
      .lowering = {
          .replaces = true,
      },
  };
}

}  // namespace

void add_gathers(std::vector<Primitive>& t) { t.insert(t.end(), {gather_p(), scatter_add_p(), index_update_p()}); }

}  // namespace reel::prims
