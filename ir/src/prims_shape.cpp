// Shape and linear-algebra primitives: reshape, broadcast_to, transpose, matmul.
#include <fmt/format.h>

#include "prims.hpp"
#include "reel/kernels.hpp"

namespace reel::prims {

void add_shape_ops(std::vector<Primitive>& t) {
  Primitive reshape;
  reshape.name = "reshape";
  reshape.arity = 1;
  reshape.attrs = {{"shape", AttrKind::shape}};
  reshape.infer = [](std::span<const VarType> in, const Attrs& a) {
    const Shape& s = a.shape("shape");
    for (int64_t d : s)
      if (d < 0) throw Error(fmt::format("reshape: negative dimension in {}", shape_str(s)));
    if (numel(s) != numel(in[0].shape))
      throw Error(fmt::format("reshape: cannot reshape {} ({} elements) to {}", type_str(in[0]),
                              numel(in[0].shape), shape_str(s)));
    return VarType{in[0].dtype, s};
  };
  reshape.eager = [](std::span<const Tensor> in, const Attrs& a) {
    return in[0].reshaped(a.shape("shape"));
  };
  reshape.adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
    return std::vector<Var>{b.reshape(a.dout, b.type(a.args[0]).shape)};
  };
  reshape.structure = Structure::view;
  reshape.any_dtype = true;
  reshape.linear = true;
  t.push_back(std::move(reshape));

  Primitive bcast;
  bcast.name = "broadcast_to";
  bcast.arity = 1;
  bcast.attrs = {{"shape", AttrKind::shape}};
  bcast.infer = [](std::span<const VarType> in, const Attrs& a) {
    const Shape& s = a.shape("shape");
    if (!broadcastable_to(in[0].shape, s))
      throw Error(fmt::format("broadcast_to: cannot broadcast {} to {}", type_str(in[0]),
                              shape_str(s)));
    return VarType{in[0].dtype, s};
  };
  bcast.eager = [](std::span<const Tensor> in, const Attrs& a) {
    return kernels::broadcast_to(in[0], a.shape("shape"));
  };
  bcast.adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
    return std::vector<Var>{b.sum_to(a.dout, b.type(a.args[0]).shape)};
  };
  bcast.structure = Structure::broadcast;
  bcast.any_dtype = true;
  bcast.linear = true;
  t.push_back(std::move(bcast));

  Primitive tr;
  tr.name = "transpose";
  tr.arity = 1;
  tr.infer = [](std::span<const VarType> in, const Attrs&) {
    expect_rank("transpose", in[0], 2);
    return VarType{in[0].dtype, {in[0].shape[1], in[0].shape[0]}};
  };
  tr.eager = [](std::span<const Tensor> in, const Attrs&) { return kernels::transpose(in[0]); };
  tr.adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
    return std::vector<Var>{b.transpose(a.dout)};
  };
  tr.structure = Structure::permutation;
  tr.any_dtype = true;
  tr.linear = true;
  t.push_back(std::move(tr));

  Primitive mm;
  mm.name = "matmul";
  mm.arity = 2;
  mm.infer = [](std::span<const VarType> in, const Attrs&) {
    const Shape &a = in[0].shape, &b = in[1].shape;
    const bool ok = a.size() == 2 && (b.size() == 2 || b.size() == 1) && a[1] == b[0];
    if (!ok)
      throw Error(fmt::format(
          "matmul: expected shapes [m,k] and [k,n] (or [m,k] and [k]), got {} and {}",
          shape_str(a), shape_str(b)));
    expect_same_dtype("matmul", in[0], in[1]);
    return b.size() == 2 ? VarType{in[0].dtype, {a[0], b[1]}} : VarType{in[0].dtype, {a[0]}};
  };
  mm.eager = [](std::span<const Tensor> in, const Attrs&) {
    return kernels::matmul(in[0], in[1]);
  };
  mm.adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
    const Var A = a.args[0], B = a.args[1];
    std::vector<Var> out(2, kNoVar);
    if (b.type(B).shape.size() == 1) {
      // y = A x: dA = dy x^T (an outer product), dx = A^T dy.
      const int64_t m = b.type(A).shape[0], k = b.type(A).shape[1];
      if (a.needs[0]) out[0] = b.matmul(b.reshape(a.dout, {m, 1}), b.reshape(B, {1, k}));
      if (a.needs[1]) out[1] = b.matmul(b.transpose(A), a.dout);
    } else {
      if (a.needs[0]) out[0] = b.matmul(a.dout, b.transpose(B));
      if (a.needs[1]) out[1] = b.matmul(b.transpose(A), a.dout);
    }
    return out;
  };
  mm.tangent = [](TapeBuilder& b, const TangentArgs& a) {
    const Var ta = a.tangents[0], tb = a.tangents[1];
    const Var da = ta == kNoVar ? kNoVar : b.matmul(ta, a.args[1]);
    const Var db = tb == kNoVar ? kNoVar : b.matmul(a.args[0], tb);
    return da == kNoVar ? db : db == kNoVar ? da : b.add(da, db);
  };
  mm.structure = Structure::contraction;
  t.push_back(std::move(mm));
}

}  // namespace reel::prims
