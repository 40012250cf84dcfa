// Shape and linear-algebra primitives: reshape, broadcast_to, transpose, matmul,
// batch_matmul.
#include <fmt/format.h>

#include "batching.hpp"
#include "prims.hpp"
#include "reel/blas.hpp"
#include "reel/elementwise.hpp"
#include "reel/kernels.hpp"

namespace reel::prims {

namespace {

Primitive reshape_p() {
  return {
      .name = "reshape",
      .attrs = {{"shape", AttrKind::shape}},
      .infer = [](std::span<const VarType> in, const Attrs& a) {
        const Shape& s = a.shape("shape");
        for (int64_t d : s)
          if (d < 0) throw Error(fmt::format("reshape: negative dimension in {}", shape_str(s)));
        if (numel(s) != numel(in[0].shape))
          throw Error(fmt::format("reshape: cannot reshape {} ({} elements) to {}", type_str(in[0]),
                                  numel(in[0].shape), shape_str(s)));
        return VarType{in[0].dtype, s};
      },
      .eager = [](std::span<const Tensor> in, const Attrs& a) { return in[0].reshaped(a.shape("shape")); },
      .adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
        return std::vector<Var>{b.reshape(a.dout, b.type(a.args[0]).shape)};
      },
      .any_dtype = true,
      .linear = true,
      .structure = Structure::view,
      .batch = [](TapeBuilder& b, const BatchArgs& a) -> Results<Var> {
        return b.reshape(a.args[0], with_batch(a.size, a.attrs.shape("shape")));
      },
  };
}

Primitive broadcast_to_p() {
  return {
      .name = "broadcast_to",
      .attrs = {{"shape", AttrKind::shape}},
      .infer = [](std::span<const VarType> in, const Attrs& a) {
        const Shape& s = a.shape("shape");
        if (!broadcastable_to(in[0].shape, s))
          throw Error(fmt::format("broadcast_to: cannot broadcast {} to {}", type_str(in[0]), shape_str(s)));
        return VarType{in[0].dtype, s};
      },
      .eager = [](std::span<const Tensor> in, const Attrs& a) { return kernels::broadcast_to(in[0], a.shape("shape")); },
      .adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
        return std::vector<Var>{b.sum_to(a.dout, b.type(a.args[0]).shape)};
      },
      .any_dtype = true,
      .linear = true,
      .structure = Structure::broadcast,
      .batch = [](TapeBuilder& b, const BatchArgs& a) -> Results<Var> {
        const Shape to = a.attrs.shape("shape");
        return b.broadcast_to(align_batched(b, a.args[0], a.size, a.types[0].shape, to.size()), with_batch(a.size, to));
      },
  };
}

Primitive transpose_p() {
  return {
      .name = "transpose",
      .infer = [](std::span<const VarType> in, const Attrs&) {
        expect_rank("transpose", in[0], 2);
        return VarType{in[0].dtype, {in[0].shape[1], in[0].shape[0]}};
      },
      .eager = [](std::span<const Tensor> in, const Attrs&) { return kernels::transpose(in[0]); },
      .adjoint = [](TapeBuilder& b, const AdjointArgs& a) { return std::vector<Var>{b.transpose(a.dout)}; },
      .any_dtype = true,
      .linear = true,
      .structure = Structure::permutation,
      .batch = [](TapeBuilder& b, const BatchArgs& a) -> Results<Var> { return permuted(b, a.args[0], {0, 2, 1}); },
  };
}

VarType matmul_type(std::span<const VarType> in, const Attrs&) {
  const Shape &a = in[0].shape, &b = in[1].shape;
  const bool ok = a.size() == 2 && (b.size() == 2 || b.size() == 1) && a[1] == b[0];
  if (!ok)
    throw Error(fmt::format("matmul: expected shapes [m,k] and [k,n] (or [m,k] and [k]), got {} and {}", shape_str(a),
                            shape_str(b)));
  expect_same_dtype("matmul", in[0], in[1]);
  return b.size() == 2 ? VarType{in[0].dtype, {a[0], b[1]}} : VarType{in[0].dtype, {a[0]}};
}

std::vector<Var> matmul_adjoint(TapeBuilder& b, const AdjointArgs& a) {
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
}

// Products of matrices with batch dimensions ([..., m, k] x [..., k, n], broadcast):
// outer products (k = 1) are a broadcast mul; small matrices (m k n <= 64) a broadcast mul
// and a sum over k, which compiled code fuses (measured 1.5 to 9 times faster than a gemm
// call per matrix at those sizes, slower above); larger ones one batch_matmul.
Var matrix_products(TapeBuilder& b, Var A, Var W) {
  Shape sa = b.type(A).shape, sw = b.type(W).shape;
  const int64_t m = sa[sa.size() - 2], k = sa.back(), n = sw.back();
  if (k == 1) return b.mul(A, W);
  if (m * k * n > 64) return b.call(prims::batch_matmul(), {A, W});
  sa.push_back(1);             // [..., m, k, 1]
  sw.insert(sw.end() - 2, 1);  // [..., 1, k, n]
  const Var p = b.mul(b.reshape(A, sa), b.reshape(W, sw));
  return b.call(prims::sum(), {p}, {{"axes", Shape{static_cast<int64_t>(b.type(p).shape.size()) - 2}}});
}

// Batched: where the right-hand side is shared, the batch folds into the rows of one
// matmul ([B m, k] x W); a batched vector with a shared matrix is one matmul too (X A^T);
// otherwise matrix_products (a shared A broadcasts over W's batch).
Results<Var> matmul_batch(TapeBuilder& b, const BatchArgs& a) {
  const Var A = a.args[0], W = a.args[1];
  const int64_t m = a.types[0].shape[0], k = a.types[0].shape[1];
  const bool vector = a.types[1].shape.size() == 1;
  if (!a.batched[1]) {
    Shape out{a.size, m};
    if (!vector) out.push_back(a.types[1].shape[1]);
    return b.reshape(b.matmul(b.reshape(A, {a.size * m, k}), W), out);
  }
  if (!vector) return matrix_products(b, A, W);
  if (!a.batched[0]) return b.matmul(W, b.transpose(A));
  return b.reshape(matrix_products(b, A, b.reshape(W, {a.size, k, 1})), {a.size, m});
}

Primitive matmul_p() {
  return {
      .name = "matmul",
      .arity = 2,
      .infer = matmul_type,
      .eager = [](std::span<const Tensor> in, const Attrs&) { return kernels::matmul(in[0], in[1]); },
      .adjoint = matmul_adjoint,
      .tangent = [](TapeBuilder& b, const TangentArgs& a) {
        const Var ta = a.tangents[0], tb = a.tangents[1];
        const Var da = ta == kNoVar ? kNoVar : b.matmul(ta, a.args[1]);
        const Var db = tb == kNoVar ? kNoVar : b.matmul(a.args[0], tb);
        return da == kNoVar ? db : db == kNoVar ? da : b.add(da, db);
      },
      .structure = Structure::contraction,
      .batch = matmul_batch,
  };
}

// batch_matmul(a [..., m, k], b [..., k, n]) -> [..., m, n]: a matrix product per
// batch element, the batch dimensions broadcast together (NumPy's matmul for rank
// >= 2). One CBLAS gemm per batch element.
Shape batch_shape(const VarType& a, const VarType& b) {
  const Shape &sa = a.shape, &sb = b.shape;
  if (sa.size() < 2 || sb.size() < 2 || sa[sa.size() - 1] != sb[sb.size() - 2])
    throw Error(fmt::format("batch_matmul: expected shapes [...,m,k] and [...,k,n], got {} and {}", shape_str(sa),
                            shape_str(sb)));
  return broadcast_shapes(Shape(sa.begin(), sa.end() - 2), Shape(sb.begin(), sb.end() - 2), "batch_matmul");
}

Tensor batch_matmul_eager(std::span<const Tensor> in, const Attrs&) {
  const Tensor &a = in[0], &b = in[1];
  const Shape batch = batch_shape({a.dtype(), a.shape()}, {b.dtype(), b.shape()});
  const int64_t m = a.shape()[a.shape().size() - 2], k = a.shape().back(), n = b.shape().back();
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor out(a.dtype(), out_shape);
  const int64_t count = numel(batch);
  // Which matrix of a and of b each batch element uses (their batch shapes broadcast).
  const std::vector<int64_t> ia = kernels::broadcast_index(batch, Shape(a.shape().begin(), a.shape().end() - 2)),
                             ib = kernels::broadcast_index(batch, Shape(b.shape().begin(), b.shape().end() - 2));
  for (int64_t i = 0; i < count && m * n > 0; ++i) {
    const auto s = static_cast<std::size_t>(i);
    if (a.dtype() == DType::f64)
      reel_rt_gemm_f64(0, 0, m, n, k, a.data<double>() + ia[s] * m * k, k, b.data<double>() + ib[s] * k * n, n,
                       out.mutable_data<double>() + i * m * n, n);
    else
      reel_rt_gemm_f32(0, 0, m, n, k, a.data<float>() + ia[s] * m * k, k, b.data<float>() + ib[s] * k * n, n,
                       out.mutable_data<float>() + i * m * n, n);
  }
  return out;
}

// The last two axes swapped, for any rank.
Var swap_last(TapeBuilder& b, Var x) {
  const std::size_t rank = b.type(x).shape.size();
  if (rank == 2) return b.transpose(x);
  Shape perm;
  for (std::size_t d = 0; d < rank; ++d) perm.push_back(static_cast<int64_t>(d));
  std::swap(perm[rank - 1], perm[rank - 2]);
  return b.call(prims::permute(), {x}, {{"perm", perm}});
}

// Batched: the batch becomes one more (leading) batch dimension of the batched arguments,
// and a shared matrix W (no batch dimensions) takes every row of A in one matmul.
Results<Var> batch_matmul_batch(TapeBuilder& b, const BatchArgs& a) {
  const Shape &sa = a.types[0].shape, &sw = a.types[1].shape;
  if (!a.batched[1] && sw.size() == 2) {
    Shape out = with_batch(a.size, sa);
    out.back() = 1;
    const int64_t rows = numel(out);
    out.back() = sw[1];
    return b.reshape(b.matmul(b.reshape(a.args[0], {rows, sa.back()}), a.args[1]), out);
  }
  const std::size_t rank = std::max(sa.size(), sw.size());
  std::vector<Var> args;
  for (std::size_t i = 0; i < 2; ++i)
    args.push_back(a.batched[i] ? align_batched(b, a.args[i], a.size, a.types[i].shape, rank) : a.args[i]);
  return matrix_products(b, args[0], args[1]);
}

Primitive batch_matmul_p() {
  return {
      .name = "batch_matmul",
      .arity = 2,
      .infer = [](std::span<const VarType> in, const Attrs&) {
        expect_same_dtype("batch_matmul", in[0], in[1]);
        Shape out = batch_shape(in[0], in[1]);
        out.push_back(in[0].shape[in[0].shape.size() - 2]);
        out.push_back(in[1].shape.back());
        return VarType{in[0].dtype, out};
      },
      .eager = batch_matmul_eager,
      .adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
        const Var A = a.args[0], B = a.args[1];
        std::vector<Var> out(2, kNoVar);
        // Summed back over the batch dimensions each argument was broadcast along.
        if (a.needs[0]) out[0] = b.sum_to(b.call(prims::batch_matmul(), {a.dout, swap_last(b, B)}), b.type(A).shape);
        if (a.needs[1]) out[1] = b.sum_to(b.call(prims::batch_matmul(), {swap_last(b, A), a.dout}), b.type(B).shape);
        return out;
      },
      .tangent = [](TapeBuilder& b, const TangentArgs& a) {
        const Var ta = a.tangents[0], tb = a.tangents[1];
        const Shape out = b.type(a.out).shape;
        const Var da = ta == kNoVar ? kNoVar : b.broadcast_to(b.call(prims::batch_matmul(), {ta, a.args[1]}), out);
        const Var db = tb == kNoVar ? kNoVar : b.broadcast_to(b.call(prims::batch_matmul(), {a.args[0], tb}), out);
        return da == kNoVar ? db : db == kNoVar ? da : b.add(da, db);
      },
      .structure = Structure::contraction,  // compiled: a gemm per batch element, in place (BatchGemmArgs)
      .batch = batch_matmul_batch,
  };
}

}  // namespace

void add_shape_ops(std::vector<Primitive>& t) {
  t.insert(t.end(), {reshape_p(), broadcast_to_p(), transpose_p(), matmul_p(), batch_matmul_p()});
}

}  // namespace reel::prims
