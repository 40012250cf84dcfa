// Layout primitives: slice (and its transpose, unslice), place, permute and concat (any
// number of arguments); gather, scatter_add and index_update, which index with i64
// values, are in prims_gather.cpp. Composites built on them (index, take, stack,
// squeeze, expand_dims, tril/triu, tril_from_vector) are in tracer/src/ops.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "batching.hpp"
#include "prims_index.hpp"

namespace reel::prims {

namespace {

// slice / unslice geometry: along `axis`, elements start, start + step, ... (count m).
struct Strided {
  int64_t axis, start, step, count;
};

Strided slice_geometry(const VarType& x, const Attrs& a) {
  const int64_t axis = checked_axis("slice", a.integer("axis"), x.shape.size(), x);
  const int64_t n = x.shape[static_cast<std::size_t>(axis)];
  const int64_t start = a.integer("start"), stop = a.integer("stop"), step = a.has("step") ? a.integer("step") : 1;
  if (step < 1) throw Error(fmt::format("slice: expected a step >= 1, got {}", step));
  if (start < 0 || stop < start || stop > n)
    throw Error(fmt::format("slice: expected 0 <= start <= stop <= {} on axis {} of {}, got start {} and stop {}", n,
                            axis, type_str(x), start, stop));
  return {axis, start, step, stop == start ? 0 : (stop - start - 1) / step + 1};  // no overflow for huge steps
}

// Copies between a tensor of shape `full` and one of `part`, which is `full` with the
// strided elements `g` along g.axis: into part (slice) or into zeros of full (unslice).
Tensor strided_copy(const Tensor& src, const Shape& full, const Strided& g, bool to_part) {
  Shape part = full;
  part[static_cast<std::size_t>(g.axis)] = g.count;
  const auto ax = static_cast<std::size_t>(g.axis);
  const int64_t outer = product(full, 0, ax), inner = product(full, ax + 1, full.size()), n = full[ax];
  Tensor out(src.dtype(), to_part ? part : full);
  if (!to_part && out.nbytes() > 0) std::memset(out.mutable_raw(), 0, out.nbytes());
  by_dtype(src.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* in = src.data<T>();
    T* o = out.mutable_data<T>();
    for (int64_t i = 0; i < outer; ++i)
      for (int64_t j = 0; j < g.count; ++j) {
        const int64_t f = (i * n + g.start + j * g.step) * inner, p = (i * g.count + j) * inner;
        for (int64_t k = 0; k < inner; ++k) {
          if (to_part) o[p + k] = in[f + k];
          else o[f + k] = in[p + k];
        }
      }
  });
  return out;
}

// The slice of `size` elements that takes g's elements back (its last element + 1 as stop).
Attrs slice_attrs(const Strided& g) {
  return {{"axis", g.axis}, {"start", g.start}, {"stop", g.start + (g.count - 1) * g.step + 1}, {"step", g.step}};
}


// The tangent rule of a primitive linear in all its arguments together (concat, place):
// the same call on the tangents, zeros where none.
std::function<Results<Var>(TapeBuilder&, const TangentArgs&)> on_tangents(Handle prim) {
  return [prim](TapeBuilder& b, const TangentArgs& a) -> Results<Var> {
    std::vector<Var> parts;
    for (std::size_t i = 0; i < a.args.size(); ++i)
      parts.push_back(a.tangents[i] != kNoVar ? a.tangents[i] : zeros_of(b, b.type(a.args[i])));
    return b.call(prim(), parts, a.attrs);
  };
}

// The batching rule of a primitive of any number of arguments along `axis` (concat,
// place): every argument batched (shared ones broadcast), the axis behind the batch.
Results<Var> batch_all_along_axis(TapeBuilder& b, const BatchArgs& a, const Primitive& prim) {
  std::vector<Var> parts;
  for (std::size_t i = 0; i < a.args.size(); ++i) parts.push_back(batched_arg(b, a, i));
  return b.call(prim, parts, with_attr(a.attrs, "axis", axis_behind_batch(a.attrs, "axis", a.types[0].shape.size())));
}

// The batching rule of a primitive of one argument along `axis`: the same call, the axis
// behind the batch (slice, unslice).
Results<Var> batch_along_axis(TapeBuilder& b, const BatchArgs& a, const Primitive& prim) {
  const int64_t axis = axis_behind_batch(a.attrs, "axis", a.types[0].shape.size());
  return b.call(prim, {a.args[0]}, with_attr(a.attrs, "axis", axis));
}

// slice(x, axis, start, stop, step): x's elements start, start + step, ... < stop
// along axis (0 <= start <= stop <= n; reel::slice normalizes Python-style bounds).
Primitive slice_p() {
  return {
      .name = "slice",
      .attrs = {{"axis", AttrKind::axis}, {"start", AttrKind::integer}, {"stop", AttrKind::integer},
                {"step", AttrKind::integer, true}},
      .infer = [](std::span<const VarType> in, const Attrs& a) {
        const Strided g = slice_geometry(in[0], a);
        Shape s = in[0].shape;
        s[static_cast<std::size_t>(g.axis)] = g.count;
        return VarType{in[0].dtype, s};
      },
      .eager = [](std::span<const Tensor> in, const Attrs& a) {
        return strided_copy(in[0], in[0].shape(), slice_geometry({in[0].dtype(), in[0].shape()}, a), true);
      },
      .adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
        const VarType x = b.type(a.args[0]);
        const Strided g = slice_geometry(x, a.attrs);
        return std::vector<Var>{b.call(prims::unslice(), {a.dout}, {{"axis", g.axis}, {"start", g.start}, {"step", g.step},
                                                             {"size", x.shape[static_cast<std::size_t>(g.axis)]}})};
      },
      .any_dtype = true,
      .linear = true,
      .structure = Structure::opaque,
      .batch = [](TapeBuilder& b, const BatchArgs& a) { return batch_along_axis(b, a, prims::slice()); },
      .lowering = {
          // Compiled: the result's element i is x's at start along the axis + strides . i.
          .strided_read = [](const VarType& x, const Attrs& a) {
            const Strided g = slice_geometry(x, a);
            StridedMap m{0, contiguous_strides(x.shape)};
            const auto ax = static_cast<std::size_t>(g.axis);
            m.offset = g.start * m.strides[ax];
            m.strides[ax] *= g.step;
            return m;
          },
      },
  };
}

std::vector<Var> combine_placements(TapeBuilder& b, std::vector<Var> terms);

// unslice(y, axis, start, step, size): zeros of y's shape with `size` along axis,
// holding y at start, start + step, ...: slice's transpose (its adjoint).
Strided unslice_geometry(const VarType& y, const Attrs& a) {
  const Strided g{checked_axis("unslice", a.integer("axis"), y.shape.size(), y), a.integer("start"),
                  a.integer("step"), 0};
  const int64_t m = y.shape[static_cast<std::size_t>(g.axis)], size = a.integer("size");
  if (g.step < 1) throw Error(fmt::format("unslice: expected a step >= 1, got {}", g.step));
  // start + (m - 1) step < size, written so that it cannot overflow (or divide by 0).
  const bool fits = m == 0 ? g.start <= size : g.start < size && (m - 1) <= (size - 1 - g.start) / g.step;
  if (g.start < 0 || size < 0 || !fits)
    throw Error(fmt::format("unslice: {} elements from {} by {} do not fit in {} along axis {} of {}", m, g.start,
                            g.step, size, g.axis, type_str(y)));
  return Strided{g.axis, g.start, g.step, m};
}

Primitive unslice_p() {
  return {
      .name = "unslice",
      .attrs = {{"axis", AttrKind::axis}, {"start", AttrKind::integer}, {"step", AttrKind::integer},
                {"size", AttrKind::integer}},
      .infer = [](std::span<const VarType> in, const Attrs& a) {
        const Strided g = unslice_geometry(in[0], a);
        Shape s = in[0].shape;
        s[static_cast<std::size_t>(g.axis)] = a.integer("size");
        return VarType{in[0].dtype, s};
      },
      .eager = [](std::span<const Tensor> in, const Attrs& a) {
        const Strided g = unslice_geometry({in[0].dtype(), in[0].shape()}, a);
        Shape full = in[0].shape();
        full[static_cast<std::size_t>(g.axis)] = a.integer("size");
        return strided_copy(in[0], full, g, false);
      },
      .adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
        const Strided g = unslice_geometry(b.type(a.args[0]), a.attrs);
        if (g.count == 0) return std::vector<Var>{zeros_of(b, b.type(a.args[0]))};
        return std::vector<Var>{b.call(prims::slice(), {a.dout}, slice_attrs(g))};
      },
      .any_dtype = true,
      .linear = true,
      .structure = Structure::opaque,
      .batch = [](TapeBuilder& b, const BatchArgs& a) { return batch_along_axis(b, a, prims::unslice()); },
      .combine_terms = combine_placements,
      .lowering = {
          // Compiled: zeros, then y's element i at start along the axis + strides . i (the
          // elements placed are fewer than the result's: the rest is zero).
          .strided_place = [](std::span<const VarType> in, const Attrs& a) {
            const Strided g = unslice_geometry(in[0], a);
            Shape full = in[0].shape;
            full[static_cast<std::size_t>(g.axis)] = a.integer("size");
            StridedMap m{0, contiguous_strides(full)};
            const auto ax = static_cast<std::size_t>(g.axis);
            m.offset = g.start * m.strides[ax];
            m.strides[ax] *= g.step;
            return std::vector<StridedMap>{m};
          },
      },
  };
}

// place(y1, ..., ym, axis, starts, step, size): zeros of the arguments' shape with `size`
// along axis, holding argument i at starts[i], starts[i] + step, ... No position twice:
// the sum of several slices' gradients (unslices) in one step, which the reverse pass
// builds from them (Primitive::combine_terms).
struct Placed {
  int64_t axis, step, size;
  std::vector<Strided> parts;  // one per argument
  Shape shape;                 // the result's
};

Placed place_geometry(std::span<const VarType> in, const Attrs& a) {
  if (in.empty()) throw Error("place: expected at least one argument, got none");
  Placed p{checked_axis("place", a.integer("axis"), in[0].shape.size(), in[0]), a.integer("step"), a.integer("size"),
           {}, in[0].shape};
  const Shape& starts = a.ints("starts");
  if (starts.size() != in.size())
    throw Error(fmt::format("place: expected {} starts (one per argument), got {}", in.size(), starts.size()));
  if (p.step < 1) throw Error(fmt::format("place: expected a step >= 1, got {}", p.step));
  if (p.size < 0) throw Error(fmt::format("place: expected a size >= 0, got {}", p.size));
  const auto ax = static_cast<std::size_t>(p.axis);
  p.shape[ax] = p.size;
  (void)numel(p.shape, "place");  // throws if the element count overflows
  int64_t total = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    Shape expected = in[i].shape;
    if (expected.size() == p.shape.size()) expected[ax] = p.size;
    if (in[i].dtype != in[0].dtype || expected != p.shape)
      throw Error(fmt::format("place: argument {} is {}, expected {} with any length along axis {}", i + 1,
                              type_str(in[i]), type_str(VarType{in[0].dtype, in[0].shape}), p.axis));
    const int64_t m = in[i].shape[ax], start = starts[i];
    const bool fits = m == 0 ? start >= 0 && start <= p.size
                             : start >= 0 && start < p.size && (m - 1) <= (p.size - 1 - start) / p.step;
    if (!fits)
      throw Error(fmt::format("place: argument {}'s {} elements from {} by {} do not fit in {} along axis {}", i + 1, m,
                              start, p.step, p.size, p.axis));
    total += m;  // (each m fits in size, so no overflow)
    if (total > p.size) throw Error(fmt::format("place: the arguments' {} positions along axis {} exceed its {}", total, p.axis, p.size));
    p.parts.push_back({p.axis, start, p.step, m});
  }
  std::vector<bool> taken(static_cast<std::size_t>(p.size), false);
  for (std::size_t i = 0; i < p.parts.size(); ++i)
    for (int64_t j = 0; j < p.parts[i].count; ++j) {
      auto at = static_cast<std::size_t>(p.parts[i].start + j * p.step);
      if (taken[at])
        throw Error(fmt::format("place: argument {} goes to position {} along axis {}, which an earlier argument takes",
                                i + 1, at, p.axis));
      taken[at] = true;
    }
  return p;
}

// The unslice or place calls among `terms` that can be one place: the same type, axis and
// step, disjoint positions; a group of two or more becomes one place call.
std::vector<Var> combine_placements(TapeBuilder& b, std::vector<Var> terms) {
  struct Group {
    VarType type;
    int64_t axis, step;
    std::vector<Var> args;
    Shape starts;
    std::vector<bool> taken;
    std::vector<Var> calls;  // the terms it holds
  };
  std::vector<Group> groups;
  std::vector<Var> rest;
  for (std::size_t t = 0; t < terms.size(); ++t) {
    const Op& op = b.tape().op(terms[t]);
    const bool placed = op.kind == OpKind::call && (op.prim == &prims::unslice() || op.prim == &prims::place());
    if (!placed) {
      rest.push_back(terms[t]);
      continue;
    }
    const bool one = op.prim == &prims::unslice();
    const int64_t axis = checked_axis(op.prim->name.c_str(), op.attrs.integer("axis"), op.type.shape.size(), op.type);
    std::vector<Var> args = op.args;
    Shape starts = one ? Shape{op.attrs.integer("start")} : op.attrs.ints("starts");
    // The step matters only for arguments of more than one element along the axis (0: any).
    bool stepped = false;
    for (Var x : args) stepped = stepped || b.type(x).shape[static_cast<std::size_t>(axis)] > 1;
    const int64_t step = stepped ? op.attrs.integer("step") : 0;
    // The positions along the axis this term's arguments take.
    std::vector<std::size_t> positions;
    for (std::size_t i = 0; i < args.size(); ++i)
      for (int64_t j = 0; j < b.type(args[i]).shape[static_cast<std::size_t>(axis)]; ++j)
        positions.push_back(static_cast<std::size_t>(starts[i] + j * step));
    auto fits = [&](const Group& g) {
      if (g.type != op.type || g.axis != axis || (g.step != 0 && step != 0 && g.step != step)) return false;
      return std::none_of(positions.begin(), positions.end(), [&](std::size_t at) { return g.taken[at]; });
    };
    auto it = std::find_if(groups.begin(), groups.end(), fits);
    if (it == groups.end()) {
      groups.push_back({op.type, axis, step, {}, {}, std::vector<bool>(static_cast<std::size_t>(op.type.shape[static_cast<std::size_t>(axis)]), false), {}});
      it = groups.end() - 1;
    }
    if (step != 0) it->step = step;
    for (std::size_t at : positions) it->taken[at] = true;
    it->args.insert(it->args.end(), args.begin(), args.end());
    it->starts.insert(it->starts.end(), starts.begin(), starts.end());
    it->calls.push_back(terms[t]);
  }
  for (Group& g : groups) {
    if (g.calls.size() == 1) rest.push_back(g.calls[0]);
    else
      rest.push_back(b.call(prims::place(), std::move(g.args),
                            {{"axis", g.axis}, {"starts", g.starts}, {"step", std::max<int64_t>(g.step, 1)},
                             {"size", g.type.shape[static_cast<std::size_t>(g.axis)]}}));
  }
  return rest;
}

Primitive place_p() {
  return {
      .name = "place",
      .arity = kVariadic,
      .attrs = {{"axis", AttrKind::axis}, {"starts", AttrKind::ints}, {"step", AttrKind::integer},
                {"size", AttrKind::integer}},
      .infer = [](std::span<const VarType> in, const Attrs& a) { return VarType{in[0].dtype, place_geometry(in, a).shape}; },
      .eager = [](std::span<const Tensor> in, const Attrs& a) {
        std::vector<VarType> types;
        for (const Tensor& x : in) types.push_back({x.dtype(), x.shape()});
        const Placed p = place_geometry(types, a);
        const auto ax = static_cast<std::size_t>(p.axis);
        const int64_t outer = product(p.shape, 0, ax), inner = product(p.shape, ax + 1, p.shape.size());
        Tensor out(in[0].dtype(), p.shape);
        if (out.nbytes() > 0) std::memset(out.mutable_raw(), 0, out.nbytes());
        by_dtype(out.dtype(), [&](auto t) {
          using T = decltype(t);
          T* o = out.mutable_data<T>();
          for (std::size_t k = 0; k < in.size(); ++k) {
            const Strided& g = p.parts[k];
            const T* y = in[k].data<T>();
            for (int64_t i = 0; i < outer; ++i)
              for (int64_t j = 0; j < g.count; ++j)
                std::copy_n(y + (i * g.count + j) * inner, inner, o + (i * p.size + g.start + j * g.step) * inner);
          }
        });
        return out;
      },
      .adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
        std::vector<VarType> types;
        for (Var x : a.args) types.push_back(b.type(x));
        const Placed p = place_geometry(types, a.attrs);
        std::vector<Var> d(a.args.size(), kNoVar);
        for (std::size_t i = 0; i < d.size(); ++i) {
          if (!a.needs[i]) continue;
          d[i] = p.parts[i].count == 0 ? zeros_of(b, types[i]) : b.call(prims::slice(), {a.dout}, slice_attrs(p.parts[i]));
        }
        return d;
      },
      .any_dtype = true,
      .tangent = on_tangents(prims::place),
      .structure = Structure::opaque,
      .batch = [](TapeBuilder& b, const BatchArgs& a) { return batch_all_along_axis(b, a, prims::place()); },
      .combine_terms = combine_placements,
      .lowering = {
          // Compiled: zeros, then each argument at its start along the axis (as unslice).
          .strided_place = [](std::span<const VarType> in, const Attrs& a) {
            const Placed p = place_geometry(in, a);
            const std::vector<int64_t> os = contiguous_strides(p.shape);
            const auto ax = static_cast<std::size_t>(p.axis);
            std::vector<StridedMap> maps;
            for (const Strided& g : p.parts) {
              StridedMap m{g.start * os[ax], os};
              m.strides[ax] *= g.step;
              maps.push_back(std::move(m));
            }
            return maps;
          },
      },
  };
}

// permute(x, perm): result axis i is x's axis perm[i].
VarType permute_type(std::span<const VarType> in, const Attrs& a) {
  const Shape& perm = a.ints("perm");
  std::vector<bool> seen(in[0].shape.size(), false);
  bool ok = perm.size() == in[0].shape.size();
  if (!ok && in[0].shape.empty())
    throw Error(fmt::format("permute: expected an empty permutation for {}, got {}", type_str(in[0]), shape_str(perm)));
  for (int64_t p : perm) {
    ok = ok && p >= 0 && p < static_cast<int64_t>(seen.size()) && !seen[static_cast<std::size_t>(p)];
    if (ok) seen[static_cast<std::size_t>(p)] = true;
  }
  if (!ok)
    throw Error(fmt::format("permute: expected a permutation of 0..{} for {}, got {}", in[0].shape.size() - 1,
                            type_str(in[0]), shape_str(perm)));
  Shape s;
  for (int64_t p : perm) s.push_back(in[0].shape[static_cast<std::size_t>(p)]);
  return VarType{in[0].dtype, s};
}

// The result's axis d steps through x's axis perm[d]: x's stride for each result axis.
StridedMap permute_map(const Shape& x, const Shape& perm) {
  const std::vector<int64_t> xs = contiguous_strides(x);
  StridedMap m;
  for (int64_t p : perm) m.strides.push_back(xs.at(static_cast<std::size_t>(p)));
  return m;
}

Tensor permute_eager(std::span<const Tensor> in, const Attrs& a) {
  const Shape& perm = a.ints("perm");
  const Shape& xs = in[0].shape();
  Shape os;
  for (int64_t p : perm) os.push_back(xs[static_cast<std::size_t>(p)]);
  Tensor out(in[0].dtype(), os);
  const std::vector<int64_t> stride = permute_map(xs, perm).strides;
  by_dtype(in[0].dtype(), [&](auto t) {
    using T = decltype(t);
    const T* src = in[0].data<T>();
    T* o = out.mutable_data<T>();
    for_each_strided(os, stride, [&](int64_t i, int64_t from) { o[i] = src[from]; });
  });
  return out;
}

Primitive permute_p() {
  return {
      .name = "permute",
      .attrs = {{"perm", AttrKind::ints}},
      .infer = permute_type,
      .eager = permute_eager,
      .adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
        const Shape& perm = a.attrs.ints("perm");
        Shape inverse(perm.size());
        for (std::size_t i = 0; i < perm.size(); ++i) inverse[static_cast<std::size_t>(perm[i])] = static_cast<int64_t>(i);
        return std::vector<Var>{b.call(prims::permute(), {a.dout}, {{"perm", inverse}})};
      },
      .any_dtype = true,
      .linear = true,
      .structure = Structure::opaque,
      .batch = [](TapeBuilder& b, const BatchArgs& a) -> Results<Var> {
        Shape perm{0};
        for (int64_t p : a.attrs.ints("perm")) perm.push_back(p + 1);
        return b.call(prims::permute(), {a.args[0]}, {{"perm", perm}});
      },
      .lowering = {
          // Compiled: a load at permute_map's strides.
          .strided_read = [](const VarType& x, const Attrs& a) { return permute_map(x.shape, a.ints("perm")); },
      },
  };
}

// concat(x1, ..., xk, axis): joined along axis; the others' dimensions agree.
VarType concat_type(std::span<const VarType> in, const Attrs& a) {
  const int64_t axis = checked_axis("concat", a.integer("axis"), in[0].shape.size(), in[0]);
  Shape s = in[0].shape;
  for (std::size_t i = 1; i < in.size(); ++i) {
    Shape other = in[i].shape;
    bool ok = in[i].dtype == in[0].dtype && other.size() == s.size();
    if (ok) {
      other[static_cast<std::size_t>(axis)] = s[static_cast<std::size_t>(axis)];
      ok = other == s;
    }
    if (!ok)
      throw Error(fmt::format("concat: argument {} is {}, which does not join {} along axis {}", i + 1,
                              type_str(in[i]), type_str(in[0]), axis));
    s[static_cast<std::size_t>(axis)] += in[i].shape[static_cast<std::size_t>(axis)];
  }
  return VarType{in[0].dtype, s};
}

Tensor concat_eager(std::span<const Tensor> in, const Attrs& a) {
  const VarType first{in[0].dtype(), in[0].shape()};
  const auto axis = static_cast<std::size_t>(checked_axis("concat", a.integer("axis"), in[0].shape().size(), first));
  Shape s = in[0].shape();
  s[axis] = 0;
  for (const Tensor& x : in) s[axis] += x.shape()[axis];
  Tensor out(in[0].dtype(), s);
  const int64_t outer = product(s, 0, axis), inner = product(s, axis + 1, s.size());
  const std::size_t elem = dtype_size(in[0].dtype());
  int64_t offset = 0;
  for (const Tensor& x : in) {
    const int64_t n = x.shape()[axis];
    for (int64_t i = 0; i < outer && n * inner > 0; ++i)
      std::memcpy(static_cast<char*>(out.mutable_raw()) + static_cast<std::size_t>((i * s[axis] + offset) * inner) * elem,
                  static_cast<const char*>(x.raw()) + static_cast<std::size_t>(i * n * inner) * elem,
                  static_cast<std::size_t>(n * inner) * elem);
    offset += n;
  }
  return out;
}

std::vector<Var> concat_adjoint(TapeBuilder& b, const AdjointArgs& a) {
  const auto axis = static_cast<std::size_t>(
      checked_axis("concat", a.attrs.integer("axis"), b.type(a.args[0]).shape.size(), b.type(a.args[0])));
  std::vector<Var> d;
  int64_t offset = 0;
  for (std::size_t i = 0; i < a.args.size(); ++i) {
    const int64_t n = b.type(a.args[i]).shape[axis];
    d.push_back(a.needs[i] ? b.call(prims::slice(), {a.dout}, {{"axis", static_cast<int64_t>(axis)}, {"start", offset},
                                                      {"stop", offset + n}, {"step", int64_t{1}}})
                           : kNoVar);
    offset += n;
  }
  return d;
}

Primitive concat_p() {
  return {
      .name = "concat",
      .arity = kVariadic,
      .attrs = {{"axis", AttrKind::axis}},
      .infer = concat_type,
      .eager = concat_eager,
      .adjoint = concat_adjoint,
      .any_dtype = true,
      .tangent = on_tangents(prims::concat),
      .structure = Structure::opaque,
      .batch = [](TapeBuilder& b, const BatchArgs& a) { return batch_all_along_axis(b, a, prims::concat()); },
      .lowering = {
          // Compiled: each part copied to its offset along the axis, in the result's strides.
          .strided_place = [](std::span<const VarType> in, const Attrs& a) {
            const VarType out = concat_type(in, a);
            const auto axis = static_cast<std::size_t>(checked_axis("concat", a.integer("axis"), out.shape.size(), out));
            const std::vector<int64_t> os = contiguous_strides(out.shape);
            std::vector<StridedMap> parts;
            int64_t at = 0;
            for (const VarType& x : in) {
              parts.push_back({at * os[axis], os});
              at += x.shape[axis];
            }
            return parts;
          },
      },
  };
}


}  // namespace

void add_indexing(std::vector<Primitive>& t) {
  t.insert(t.end(), {slice_p(), unslice_p(), place_p(), permute_p(), concat_p()});
  add_gathers(t);
}

}  // namespace reel::prims
