// Reductions: sum(x), sum(x, axis=k), mean(x), and sum_to(x, shape=s), the adjoint of
// broadcasting. All lower to one code-generation pattern: sum into a keep-dims
// target shape, then scale.
#include <fmt/format.h>

#include "prims.hpp"
#include "reel/kernels.hpp"

namespace reel::prims {

namespace {

Shape ones_like_rank(const Shape& s) { return Shape(s.size(), 1); }

int64_t checked_axis(const VarType& x, const Attrs& a) {
  const int64_t axis = a.integer("axis");
  const auto rank = static_cast<int64_t>(x.shape.size());
  if (axis < 0 || axis >= rank)
    throw Error(fmt::format("sum: axis {} is out of range for {}", axis, type_str(x)));
  return axis;
}

}  // namespace

void add_reductions(std::vector<Primitive>& t) {
  Primitive sum;
  sum.name = "sum";
  sum.arity = 1;
  sum.attrs = {{"axis", AttrKind::integer, /*optional=*/true}};
  sum.infer = [](std::span<const VarType> in, const Attrs& a) {
    if (!a.has("axis")) return VarType{in[0].dtype, {}};
    Shape s = in[0].shape;
    s.erase(s.begin() + checked_axis(in[0], a));
    return VarType{in[0].dtype, s};
  };
  sum.eager = [](std::span<const Tensor> in, const Attrs& a) {
    return a.has("axis") ? kernels::sum_axis(in[0], a.integer("axis")) : kernels::sum_all(in[0]);
  };
  sum.adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
    const VarType x = b.type(a.args[0]);  // a copy: building may move the tape
    Var d = a.dout;
    if (a.attrs.has("axis")) {
      Shape keep = x.shape;
      keep[static_cast<std::size_t>(a.attrs.integer("axis"))] = 1;
      d = b.reshape(d, keep);
    }
    return std::vector<Var>{b.broadcast_to(d, x.shape)};
  };
  sum.structure = Structure::reduction;
  sum.reduce_target = [](const VarType& x, const Attrs& a) {
    if (!a.has("axis")) return ones_like_rank(x.shape);
    Shape keep = x.shape;
    keep[static_cast<std::size_t>(a.integer("axis"))] = 1;
    return keep;
  };
  sum.reduce_scale = [](const VarType&) { return 1.0; };
  sum.linear = true;
  t.push_back(std::move(sum));

  Primitive mean;
  mean.name = "mean";
  mean.arity = 1;
  mean.infer = [](std::span<const VarType> in, const Attrs&) { return VarType{in[0].dtype, {}}; };
  mean.eager = [](std::span<const Tensor> in, const Attrs&) { return kernels::mean_all(in[0]); };
  mean.adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
    const VarType x = b.type(a.args[0]);  // a copy: building may move the tape
    const double scale = 1.0 / static_cast<double>(numel(x.shape));
    return std::vector<Var>{b.broadcast_to(b.mul(a.dout, scale), x.shape)};
  };
  mean.structure = Structure::reduction;
  mean.reduce_target = [](const VarType& x, const Attrs&) { return ones_like_rank(x.shape); };
  mean.reduce_scale = [](const VarType& x) { return 1.0 / static_cast<double>(numel(x.shape)); };
  mean.linear = true;
  t.push_back(std::move(mean));

  Primitive sum_to;
  sum_to.name = "sum_to";
  sum_to.arity = 1;
  sum_to.attrs = {{"shape", AttrKind::shape}};
  sum_to.infer = [](std::span<const VarType> in, const Attrs& a) {
    const Shape& s = a.shape("shape");
    if (!broadcastable_to(s, in[0].shape))
      throw Error(fmt::format("sum_to: cannot sum {} down to {}", type_str(in[0]), shape_str(s)));
    return VarType{in[0].dtype, s};
  };
  sum_to.eager = [](std::span<const Tensor> in, const Attrs& a) {
    return kernels::sum_to(in[0], a.shape("shape"));
  };
  sum_to.adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
    return std::vector<Var>{b.broadcast_to(a.dout, b.type(a.args[0]).shape)};
  };
  sum_to.structure = Structure::reduction;
  sum_to.reduce_target = [](const VarType&, const Attrs& a) { return a.shape("shape"); };
  sum_to.reduce_scale = [](const VarType&) { return 1.0; };
  sum_to.linear = true;
  t.push_back(std::move(sum_to));
}

}  // namespace reel::prims
