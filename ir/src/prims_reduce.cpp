// Reductions: sum, mean, prod, max and min over all elements, one axis or a list of
// axes (negative axes count from the end), with or without keepdims; sum_to(x,
// shape), the adjoint of broadcasting; argmax and argmin (i64). The first five lower
// to one code-generation pattern: combine into a keep-dims target shape, then scale.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "batching.hpp"
#include "prims.hpp"
#include "reel/kernels.hpp"

namespace reel::prims {

namespace {

using kernels::ReduceOp;

// The reduced axes of a call: `axes` (a list), `axis` (one; sum's older spelling) or,
// without either, every axis. Negative axes count from the end; each at most once.
std::vector<bool> reduced_axes(const char* op, const VarType& x, const Attrs& a) {
  const auto rank = static_cast<int64_t>(x.shape.size());
  std::vector<bool> reduced(x.shape.size(), false);
  if (a.has("axis") && a.has("axes")) throw Error(fmt::format("{}: give axis or axes, not both", op));
  if (!a.has("axis") && !a.has("axes")) {
    reduced.assign(x.shape.size(), true);
    return reduced;
  }
  const std::vector<int64_t> axes = a.has("axis") ? std::vector<int64_t>{a.integer("axis")} : a.ints("axes");
  for (int64_t axis : axes) {
    const int64_t k = axis < 0 ? axis + rank : axis;
    if (k < 0 || k >= rank)
      throw Error(fmt::format("{}: axis {} is out of range for {}", op, axis, type_str(x)));
    if (reduced[static_cast<std::size_t>(k)])
      throw Error(fmt::format("{}: axis {} is given twice", op, axis));
    reduced[static_cast<std::size_t>(k)] = true;
  }
  return reduced;
}

// The keep-dims shape: reduced axes become 1.
Shape keep_shape(const char* op, const VarType& x, const Attrs& a) {
  const std::vector<bool> reduced = reduced_axes(op, x, a);
  Shape keep = x.shape;
  for (std::size_t d = 0; d < keep.size(); ++d)
    if (reduced[d]) keep[d] = 1;
  return keep;
}

bool keepdims(const Attrs& a) { return a.has("keepdims") && a.boolean("keepdims"); }

// The result's shape: the keep-dims shape, or without the reduced axes.
Shape result_shape(const char* op, const VarType& x, const Attrs& a) {
  const std::vector<bool> reduced = reduced_axes(op, x, a);
  if (keepdims(a)) return keep_shape(op, x, a);
  Shape out;
  for (std::size_t d = 0; d < x.shape.size(); ++d)
    if (!reduced[d]) out.push_back(x.shape[d]);
  return out;
}

int64_t reduced_count(const char* op, const VarType& x, const Attrs& a) {
  const std::vector<bool> reduced = reduced_axes(op, x, a);
  int64_t n = 1;
  for (std::size_t d = 0; d < x.shape.size(); ++d)
    if (reduced[d]) n *= x.shape[d];
  return n;
}

const std::vector<AttrSpec> kReduceAttrs = {{"axes", AttrKind::axes, true}, {"keepdims", AttrKind::boolean, true}};

// dout in the keep-dims shape, broadcast back over the input.
Var spread(TapeBuilder& b, const char* op, Var dout, const VarType& x, const Attrs& a) {
  if (b.type(dout).shape.empty()) return b.broadcast_to(dout, x.shape);  // a 0-d broadcasts as it is
  return b.broadcast_to(b.reshape(dout, keep_shape(op, x, a)), x.shape);
}

// The same reduction of v over the same axes, in keep-dims form.
Var reduce_keep(TapeBuilder& b, const Primitive& prim, Var v, const VarType& x, const Attrs& a) {
  const std::vector<bool> reduced = reduced_axes(prim.name.c_str(), x, a);
  Shape axes;
  for (std::size_t d = 0; d < reduced.size(); ++d)
    if (reduced[d]) axes.push_back(static_cast<int64_t>(d));
  return b.call(prim, {v}, {{"axes", axes}, {"keepdims", true}});
}

// A reduction primitive `name` (whose handle is `self`) combining with `op`, with the
// rules given in `p`.
Primitive reduction(const char* name, Handle self, ReduceOp op, double (*scale)(int64_t count), Primitive p) {
  p.name = name;
  p.attrs.insert(p.attrs.end(), kReduceAttrs.begin(), kReduceAttrs.end());
  p.infer = [name, op](std::span<const VarType> in, const Attrs& a) {
    if (!a.has("axis") && !a.has("axes") && (numel(in[0].shape) > 0 || op == ReduceOp::sum || op == ReduceOp::prod))
      return VarType{in[0].dtype, keepdims(a) ? Shape(in[0].shape.size(), 1) : Shape{}};  // every element
    const Shape out = result_shape(name, in[0], a);
    if ((op == ReduceOp::max || op == ReduceOp::min) && numel(out) > 0 && reduced_count(name, in[0], a) == 0)
      throw Error(fmt::format("{}: a reduction over no elements has no value (input {})", name, type_str(in[0])));
    return VarType{in[0].dtype, out};
  };
  p.eager = [name, op, scale](std::span<const Tensor> in, const Attrs& a) {
    const Tensor& x = in[0];
    if (!a.has("axis") && !a.has("axes")) {  // every element (the common case, kept cheap)
      return kernels::reduce_to(x, keepdims(a) ? Shape(x.shape().size(), 1) : Shape{}, op, scale(x.numel()));
    }
    const VarType t{x.dtype(), x.shape()};
    return kernels::reduce_to(x, keep_shape(name, t, a), op, scale(reduced_count(name, t, a)))
        .reshaped(result_shape(name, t, a));
  };
  p.structure = Structure::reduction;
  p.lowering.reduce_op = op;
  p.lowering.reduce_target = [name](const VarType& x, const Attrs& a) { return keep_shape(name, x, a); };
  p.lowering.reduce_scale = [name, scale](const VarType& x, const Attrs& a) { return scale(reduced_count(name, x, a)); };
  // Batched: the same axes, behind the batch (every axis but the batch's, without any).
  p.batch = [name, self](TapeBuilder& b, const BatchArgs& a) -> Results<Var> {
    const std::vector<bool> reduced = reduced_axes(name, a.types[0], a.attrs);
    Shape axes;
    for (std::size_t d = 0; d < reduced.size(); ++d)
      if (reduced[d]) axes.push_back(static_cast<int64_t>(d) + 1);
    return b.call(self(), {a.args[0]}, {{"axes", axes}, {"keepdims", keepdims(a.attrs)}});
  };
  return p;
}

double one(int64_t) { return 1.0; }
double inverse(int64_t n) { return 1.0 / static_cast<double>(n); }  // 1/0 = inf: a mean of nothing is NaN

// d reduction / d x as a tensor of x's shape, for prod, max and min: `w`, divided by
// `share` (keep-dims shaped) when there is one. The division is done on the reduced
// shape, before the spread: one per result instead of one per element.
struct Weighting {
  Var w;
  std::optional<Var> share;
};
using Weights = Weighting (*)(TapeBuilder& b, const Primitive& reduction, Var x, Var y, const Attrs& a);

// prod: w_i = the product of the other elements, written so that its own derivatives
// are right too (second derivatives, hvp) when some elements are 0. With P the product
// of the nonzero elements and S the sum of the zero ones (0, but it carries their
// derivative):
//   no zero:    w = P / x
//   one zero:   w = P at the zero, P / x * S elsewhere (0, with derivative P / x there)
//   two zeros:  w = P * (S - x) at a zero (the other zero), 0 elsewhere
//   more:       0
// The divisions use x with its zeros replaced by 1, so no branch divides by 0.
Weighting prod_weights(TapeBuilder& b, const Primitive& reduction, Var x, Var, const Attrs& a) {
  const VarType xt = b.type(x);
  const Var zero = constant_like(b, 0, x), one_ = constant_like(b, 1, x), two = constant_like(b, 2, x);
  const Var is_zero = b.call(prims::eq(), {x, zero});
  const Var zeros = reduce_keep(b, prims::sum(), is_zero, xt, a);
  const Var nonzero = b.call(prims::where(), {is_zero, one_, x});
  const Var p = b.broadcast_to(reduce_keep(b, reduction, nonzero, xt, a), xt.shape);  // P
  const Var zero_part = b.call(prims::where(), {is_zero, x, zero});
  const Var s = b.broadcast_to(reduce_keep(b, prims::sum(), zero_part, xt, a), xt.shape);  // S
  const Var p_over = b.div(p, nonzero);
  const Var none = p_over;
  const Var one_zero = b.call(prims::where(), {is_zero, p, b.mul(p_over, s)});
  const Var two_zeros = b.call(prims::where(), {is_zero, b.mul(p, b.sub(s, x)), zero});
  return {b.call(prims::where(), {b.call(prims::eq(), {zeros, zero}), none,
                           b.call(prims::where(), {b.call(prims::eq(), {zeros, one_}), one_zero,
                                            b.call(prims::where(), {b.call(prims::eq(), {zeros, two}), two_zeros, zero})})}),
          std::nullopt};
}

// max / min: the gradient goes to the elements equal to the result, split evenly
// among ties (the mask, shared by the count of ties).
Weighting extremum_weights(TapeBuilder& b, const Primitive& reduction, Var x, Var y, const Attrs& a) {
  const VarType xt = b.type(x);
  const Var mask =
      b.call(prims::eq(), {x, b.broadcast_to(b.reshape(y, keep_shape(reduction.name.c_str(), xt, a)), xt.shape)});
  return {mask, reduce_keep(b, prims::sum(), mask, xt, a)};
}

// prod, max, min: the adjoint and tangent through `weights`.
Primitive weighted(const char* name, Handle self, ReduceOp op, Weights weights) {
  return reduction(name, self, op, one,
                   {.adjoint = [name, self, weights](TapeBuilder& b, const AdjointArgs& a) {
                      const VarType x = b.type(a.args[0]);
                      const Weighting w = weights(b, self(), a.args[0], a.out, a.attrs);
                      Var dout = a.dout;
                      if (w.share) dout = b.div(b.reshape(dout, keep_shape(name, x, a.attrs)), *w.share);
                      return std::vector<Var>{b.mul(spread(b, name, dout, x, a.attrs), w.w)};
                    },
                    .tangent = [self, weights](TapeBuilder& b, const TangentArgs& a) {
                      const VarType x = b.type(a.args[0]);
                      const Weighting w = weights(b, self(), a.args[0], a.out, a.attrs);
                      Var t = reduce_keep(b, prims::sum(), b.mul(a.tangents[0], w.w), x, a.attrs);
                      if (w.share) t = b.div(t, *w.share);
                      return b.reshape(t, b.type(a.out).shape);
                    }});
}

// sum and mean are linear: their tangents are themselves. sum also takes `axis`, the
// older spelling of axes=[k].
Primitive sum_p() {
  return reduction("sum", prims::sum, ReduceOp::sum, one,
                   {.attrs = {{"axis", AttrKind::axis, true}},
                    .adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
                      return std::vector<Var>{spread(b, "sum", a.dout, b.type(a.args[0]), a.attrs)};
                    },
                    .linear = true});
}

Primitive mean_p() {
  return reduction("mean", prims::mean, ReduceOp::sum, inverse,
                   {.adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
                      const VarType x = b.type(a.args[0]);
                      const double scale = inverse(reduced_count("mean", x, a.attrs));
                      return std::vector<Var>{b.mul(spread(b, "mean", a.dout, x, a.attrs), scale)};
                    },
                    .linear = true});
}

// argmax / argmin(x, axis): i64 indices of the first largest / smallest element
// along axis (dropped); without axis, of the flattened x. No gradient.
VarType arg_type(const char* name, std::span<const VarType> in, const Attrs& a) {
  if (!a.has("axis")) {
    if (numel(in[0].shape) == 0) throw Error(fmt::format("{}: an empty tensor has no {}", name, name));
    return VarType{DType::i64, {}};
  }
  const std::vector<bool> reduced = reduced_axes(name, in[0], a);
  Shape out;
  for (std::size_t d = 0; d < reduced.size(); ++d) {
    if (reduced[d] && in[0].shape[d] == 0)
      throw Error(fmt::format("{}: axis {} of {} is empty", name, d, type_str(in[0])));
    if (!reduced[d]) out.push_back(in[0].shape[d]);
  }
  return VarType{DType::i64, out};
}

Primitive arg_extremum(const char* name, Handle self, bool largest) {
  return {
      .name = name,
      .attrs = {{"axis", AttrKind::axis, true}},
      .infer = [name](std::span<const VarType> in, const Attrs& a) { return arg_type(name, in, a); },
      .eager = [largest](std::span<const Tensor> in, const Attrs& a) {
        if (!a.has("axis")) return kernels::arg_extremum(in[0].reshaped({in[0].numel()}), 0, largest);
        const int64_t rank = in[0].rank(), axis = a.integer("axis");
        return kernels::arg_extremum(in[0], axis < 0 ? axis + rank : axis, largest);
      },
      .adjoint = no_adjoint(),
      .tangent = no_tangent,
      // Compiled (f32, f64): a reduction kernel keeping the position of the first extremum.
      .structure = Structure::reduction,
      // Batched: the axis behind the batch; without one, of each batch element flattened.
      .batch = [self](TapeBuilder& b, const BatchArgs& a) -> Results<Var> {
        if (a.attrs.has("axis"))
          return b.call(self(), {a.args[0]}, {{"axis", axis_behind_batch(a.attrs, "axis", a.types[0].shape.size())}});
        return b.call(self(), {b.reshape(a.args[0], {a.size, numel(a.types[0].shape)})}, {{"axis", int64_t{1}}});
      },
      .lowering = {
          .reduce_op = largest ? ReduceOp::max : ReduceOp::min,
          .reduce_target = [name](const VarType& x, const Attrs& a) {
            return a.has("axis") ? keep_shape(name, x, a) : Shape(x.shape.size(), 1);
          },
          .reduce_scale = [](const VarType&, const Attrs&) { return 1.0; },
          .reduce_index = true,
      },
  };
}

// sum_to(x, shape): the adjoint of broadcasting.
Primitive sum_to_p() {
  return {
      .name = "sum_to",
      .attrs = {{"shape", AttrKind::shape}},
      .infer = [](std::span<const VarType> in, const Attrs& a) {
        const Shape& s = a.shape("shape");
        if (!broadcastable_to(s, in[0].shape))
          throw Error(fmt::format("sum_to: cannot sum {} down to {}", type_str(in[0]), shape_str(s)));
        return VarType{in[0].dtype, s};
      },
      .eager = [](std::span<const Tensor> in, const Attrs& a) { return kernels::sum_to(in[0], a.shape("shape")); },
      .adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
        return std::vector<Var>{b.broadcast_to(a.dout, b.type(a.args[0]).shape)};
      },
      .linear = true,
      .structure = Structure::reduction,
      // Batched: summed to [B, 1, ..., 1] + shape (the batch kept), then the ones dropped.
      .batch = [](TapeBuilder& b, const BatchArgs& a) -> Results<Var> {
        const Shape to = a.attrs.shape("shape");
        Shape keep{a.size};
        keep.insert(keep.end(), a.types[0].shape.size() - to.size(), 1);
        keep.insert(keep.end(), to.begin(), to.end());
        return b.reshape(b.sum_to(a.args[0], keep), with_batch(a.size, to));
      },
      .lowering = {
          .reduce_target = [](const VarType&, const Attrs& a) { return a.shape("shape"); },
          .reduce_scale = [](const VarType&, const Attrs&) { return 1.0; },
      },
  };
}

Primitive prod_p() { return weighted("prod", prims::prod, ReduceOp::prod, prod_weights); }
Primitive max_p() { return weighted("max", prims::max, ReduceOp::max, extremum_weights); }
Primitive min_p() { return weighted("min", prims::min, ReduceOp::min, extremum_weights); }
Primitive argmax_p() { return arg_extremum("argmax", prims::argmax, true); }
Primitive argmin_p() { return arg_extremum("argmin", prims::argmin, false); }

}  // namespace

void add_reductions(std::vector<Primitive>& t) {
  t.insert(t.end(), {sum_p(), mean_p(), prod_p(), max_p(), min_p(), argmax_p(), argmin_p(), sum_to_p()});
}

}  // namespace reel::prims
