// Convolution and pooling, NCHW: conv2d with stride, padding and dilation, and its two
// gradients as primitives (conv2d_data_grad, conv2d_filter_grad: Yota's ∇conv_data
// and ∇conv_filter), each with rules of its own so that second derivatives work;
// max_pool2d (with max_pool2d_grad and max_pool2d_gather) and avg_pool2d (with
// avg_pool2d_grad). Convolutions go through im2col and one CBLAS gemm per image, images on
// the thread pool when their products are small (per_image_on_pool).
//
// Batching (vmap): a batch of the images (x, dy) folds into N, [B,N,...] -> [B*N,...];
// a batch of only the weights folds into their output channels (conv2d, and
// conv2d_filter_grad's dy) or input channels (conv2d_data_grad), or a batch of only x
// into conv2d_filter_grad's input channels: one call either way. A convolution with
// both arguments batched (per-example weight gradients, conv2d_filter_grad(x, dy) under
// vmap of grad) has no one-call form without B times the work: it runs one call per
// batch element (a scan). Pools fold the batch into N; max_pool2d_grad and
// max_pool2d_gather broadcast an unbatched argument first.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <memory>

#include "batching.hpp"
#include "reel/blas.hpp"
#include "reel/parallel.hpp"

#include "prims_window.hpp"

namespace reel::prims {

namespace {

std::pair<int64_t, int64_t> pair_attr(const char* op, const Attrs& a, const char* name, int64_t dflt) {
  if (!a.has(name)) return {dflt, dflt};
  const Shape& v = a.ints(name);
  if (v.size() != 2) throw Error(fmt::format("{}: attribute '{}' must be a pair [h, w], got {}", op, name, shape_str(v)));
  return {v[0], v[1]};
}

// a * b + c, or a reel::Error naming the operation if it overflows int64.
int64_t checked(const char* op, int64_t a, int64_t b, int64_t c = 0) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r) || __builtin_add_overflow(r, c, &r))
    throw Error(fmt::format("{}: the window arithmetic overflows int64 ({} * {} + {})", op, a, b, c));
  return r;
}

}  // namespace

Window window(const char* op, const Shape& x, int64_t kh, int64_t kw, const Attrs& a, bool pooling) {
  if (x.size() != 4) throw Error(fmt::format("{}: expected an input [N,C,H,W], got {}", op, shape_str(x)));
  Window g{x[0], x[1], x[2], x[3], kh, kw, 1, 1, 0, 0, 1, 1, 0, 0};
  if (pooling && !a.has("stride")) g.sh = kh, g.sw = kw;  // pooling: the stride defaults to the window
  else std::tie(g.sh, g.sw) = pair_attr(op, a, "stride", 1);
  std::tie(g.ph, g.pw) = pair_attr(op, a, "padding", 0);
  std::tie(g.dh, g.dw) = pair_attr(op, a, "dilation", 1);
  if (kh < 1 || kw < 1 || g.sh < 1 || g.sw < 1 || g.ph < 0 || g.pw < 0 || g.dh < 1 || g.dw < 1)
    throw Error(fmt::format("{}: expected a window >= 1, stride >= 1, padding >= 0 and dilation >= 1, got window "
                            "[{},{}], stride [{},{}], padding [{},{}], dilation [{},{}]",
                            op, kh, kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw));
  if (pooling && (g.ph * 2 > kh || g.pw * 2 > kw))
    throw Error(fmt::format("{}: padding [{},{}] is more than half the window [{},{}]", op, g.ph, g.pw, kh, kw));
  const int64_t span_h = checked(op, g.dh, kh - 1, 1), span_w = checked(op, g.dw, kw - 1, 1);
  const int64_t padded_h = checked(op, 2, g.ph, g.h), padded_w = checked(op, 2, g.pw, g.w);
  if (padded_h < span_h || padded_w < span_w)
    throw Error(fmt::format("{}: the window [{},{}] (dilated [{},{}]) does not fit the padded input {}x{}", op, kh, kw,
                            span_h, span_w, padded_h, padded_w));
  g.oh = (padded_h - span_h) / g.sh + 1;
  g.ow = (padded_w - span_w) / g.sw + 1;
  // Every buffer the kernels allocate: the output, and im2col's columns.
  (void)numel({g.n, g.c, g.oh, g.ow}, op);
  (void)numel({g.c, g.kh, g.kw, g.oh, g.ow}, op);
  return g;
}

Attrs with(const Attrs& a, const char* name, AttrValue v) {
  Attrs out = a;
  out.set(name, std::move(v));
  return out;
}

namespace {

// v's axes `at` and at + 1 merged into one.
Var merge_axes(TapeBuilder& b, Var v, std::size_t at) {
  Shape s = b.type(v).shape;
  s[at] *= s[at + 1];
  s.erase(s.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  return b.reshape(v, s);
}
// The call's result `v` with the batch merged into its axis `at`: [size] + the
// unbatched result's shape (inferred from the unbatched arguments), as the batch rule
// returns it.
Var split_batch(TapeBuilder& b, Var v, std::size_t at, const Primitive& prim, const BatchArgs& a) {
  Attrs attrs = a.attrs;
  Shape s = infer_call(prim, a.types, attrs).shape;
  s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), a.size);
  return move_axes(b, b.reshape(v, s), static_cast<int64_t>(at), 1, 0);
}

}  // namespace

// Batching a window operation whose arguments all take the batch into N: the unbatched
// ones broadcast, all folded, one call, unfolded.
Results<Var> batch_into_n(TapeBuilder& b, const Primitive& prim, const BatchArgs& a) {
  std::vector<Var> args;
  for (std::size_t i = 0; i < a.args.size(); ++i)
    args.push_back(merge_axes(b, ensure_batched(b, a.args[i], a.batched[i], a.size), 0));
  return split_batch(b, b.call(prim, std::move(args), a.attrs), 0, prim, a);
}

namespace {

// The columns x of an output row whose input column x * sw + off (off = j * dw - pw, for
// window column j) lies inside [0, w): [x0, x1), possibly empty.
std::pair<int64_t, int64_t> inside(const Window& g, int64_t off) {
  const int64_t x0 = std::min(g.ow, off >= 0 ? 0 : (-off + g.sw - 1) / g.sw);
  const int64_t last = g.w - 1 - off;  // the largest x * sw allowed
  const int64_t x1 = last < 0 ? x0 : std::max(x0, std::min(g.ow, last / g.sw + 1));
  return {x0, x1};
}

// im2col of image `img` [C,H,W] into cols [C*KH*KW, OH*OW], each row `ld` elements
// apart (zeros for padding); and its transpose col2im, which adds cols back into img.
// Each output row's columns inside the image are found once (inside), so the inner
// loops are copies and adds without a test per element.
template <class T>
void im2col(const Window& g, const T* img, T* cols, int64_t ld) {
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        T* row = cols + ((c * g.kh + i) * g.kw + j) * ld;
        const int64_t off = j * g.dw - g.pw;
        const auto [x0, x1] = inside(g, off);
        for (int64_t y = 0; y < g.oh; ++y) {
          T* out = row + y * g.ow;
          const int64_t iy = y * g.sh - g.ph + i * g.dh;
          if (iy < 0 || iy >= g.h) {
            std::fill(out, out + g.ow, T(0));
            continue;
          }
          const T* line = img + (c * g.h + iy) * g.w;
          std::fill(out, out + x0, T(0));
          // (a loop, not std::copy: rows are short, and a call to memmove per row cost more)
          if (g.sw == 1)
            for (int64_t x = x0; x < x1; ++x) out[x] = line[x + off];
          else
            for (int64_t x = x0; x < x1; ++x) out[x] = line[x * g.sw + off];
          std::fill(out + x1, out + g.ow, T(0));
        }
      }
}
template <class T>
void col2im(const Window& g, const T* cols, int64_t ld, T* img) {
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        const T* row = cols + ((c * g.kh + i) * g.kw + j) * ld;
        const int64_t off = j * g.dw - g.pw;
        const auto [x0, x1] = inside(g, off);
        for (int64_t y = 0; y < g.oh; ++y) {
          const int64_t iy = y * g.sh - g.ph + i * g.dh;
          if (iy < 0 || iy >= g.h) continue;
          T* line = img + (c * g.h + iy) * g.w;
          const T* in = row + y * g.ow;
          if (g.sw == 1)
            for (int64_t x = x0; x < x1; ++x) line[x + off] += in[x];
          else
            for (int64_t x = x0; x < x1; ++x) line[x * g.sw + off] += in[x];
        }
      }
}

// Per-image work runs on the thread pool, each image's gemm a small one on its thread,
// when one image's product has at most kSmallProduct multiply-adds (the conv2d layer of
// bench/ has 442,368). Larger ones go image after image, each gemm cut into blocks on
// the pool (blas.cpp).
constexpr int64_t kSmallProduct = int64_t{1} << 20;
bool per_image_on_pool(int64_t o, int64_t k, int64_t p) {
  return o <= kSmallProduct && k <= kSmallProduct && p <= kSmallProduct && o * k * p <= kSmallProduct;
}
// conv2d_filter_grad sums the images' products: on the pool, each into a block of its own.
bool filter_grad_on_pool(const Window& g, int64_t o) {
  return per_image_on_pool(o, g.c * g.kh * g.kw, g.oh * g.ow) && g.n > 1;
}

// Images run in blocks of consecutive images: on the pool (per_image_on_pool) up to
// kImageBlocks blocks, each with columns of its own, else one block in order. The blocks
// depend on the image count alone, so the bits do not depend on the thread count, and
// compiled code's scratch is the columns of at most kImageBlocks images, whatever the batch.
constexpr int64_t kImageBlocks = 16;
int64_t image_blocks(int64_t images, bool on_pool) { return on_pool ? std::clamp<int64_t>(images, 1, kImageBlocks) : 1; }

// Runs body(n, block, cols) for every image n, in its block's order, cols the block's
// `elements` of scratch: in `scratch` (image_blocks blocks, conv_scratch), or allocated.
template <class T, class Body>
void for_each_image(int64_t images, bool on_pool, int64_t elements, T* scratch, Body&& body) {
  const int64_t blocks = image_blocks(images, on_pool);
  std::unique_ptr<T[]> own;
  if (scratch == nullptr)
    scratch = (own = std::make_unique_for_overwrite<T[]>(static_cast<std::size_t>(std::max<int64_t>(blocks * elements, 1))))
                  .get();
  auto run = [&](int64_t blk) {
    for (int64_t n = blk * images / blocks; n < (blk + 1) * images / blocks; ++n) body(n, blk, scratch + blk * elements);
  };
  if (blocks == 1) run(0);
  else parallel::for_chunks(blocks, run);
}

const std::vector<AttrSpec> kConvAttrs = {
    {"stride", AttrKind::ints, true}, {"padding", AttrKind::ints, true}, {"dilation", AttrKind::ints, true}};

// The convolution's own attributes (without input_hw / kernel_hw).
Attrs conv_only(const Attrs& a) {
  Attrs out;
  for (const char* n : {"stride", "padding", "dilation"})
    if (a.has(n)) out.set(n, a.get(n));
  return out;
}

void expect_weights(const char* op, const VarType& x, const VarType& w) {
  if (w.shape.size() != 4 || w.dtype != x.dtype || (x.shape.size() == 4 && w.shape[1] != x.shape[1]))
    throw Error(fmt::format("{}: expected weights [O,{},KH,KW] of dtype {}, got {}", op,
                            x.shape.size() == 4 ? fmt::format("{}", x.shape[1]) : std::string("C"), dtype_name(x.dtype),
                            type_str(w)));
}

// y = conv2d(x, w): per image, W [O, C*KH*KW] times its columns, into y (every element
// written).
void conv_forward(const Tensor& x, const Tensor& w, const Attrs& a, Tensor& y, void* scratch) {
  const Window g = window("conv2d", x.shape(), w.shape()[2], w.shape()[3], a, false);
  const int64_t o = w.shape()[0], k = g.c * g.kh * g.kw, p = g.oh * g.ow;
  if (y.numel() == 0) return;
  by_float(x.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* in = x.data<T>();
    T* out = y.mutable_data<T>();
    for_each_image<T>(g.n, per_image_on_pool(o, k, p), k * p, static_cast<T*>(scratch), [&](int64_t n, int64_t, T* cols) {
      im2col(g, in + n * g.c * g.h * g.w, cols, p);
      blas::gemm<T>(false, false, o, p, k, w.data<T>(), k, cols, p, out + n * o * p, p, T(0));
    });
  });
}

// dx = conv2d_data_grad(dy, w): per image, cols = W^T dy, then col2im, into dx.
void conv_data_grad(const Tensor& dy, const Tensor& w, const Attrs& a, Tensor& dx, void* scratch) {
  const Shape& hw = a.ints("input_hw");
  const Window g = window("conv2d_data_grad", {dy.shape()[0], w.shape()[1], hw[0], hw[1]}, w.shape()[2], w.shape()[3],
                          a, false);
  const int64_t o = w.shape()[0], k = g.c * g.kh * g.kw, p = g.oh * g.ow;
  if (dx.nbytes() > 0) std::memset(dx.mutable_raw(), 0, dx.nbytes());
  if (dx.numel() == 0 || p == 0) return;
  by_float(dy.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* d = dy.data<T>();
    T* out = dx.mutable_data<T>();
    for_each_image<T>(g.n, per_image_on_pool(o, k, p), k * p, static_cast<T*>(scratch), [&](int64_t n, int64_t, T* cols) {
      blas::gemm<T>(true, false, k, p, o, w.data<T>(), k, d + n * o * p, p, cols, p, T(0));
      col2im(g, cols, p, out + n * g.c * g.h * g.w);
    });
  });
}

// dw = conv2d_filter_grad(x, dy): the sum over images of dy [O, P] times cols^T. On the
// pool, each image's product goes to a block of its own, and the blocks are summed in
// image order afterwards: the same bits on any number of threads.
void conv_filter_grad(const Tensor& x, const Tensor& dy, const Attrs& a, Tensor& dw, void* scratch) {
  const Shape& khw = a.ints("kernel_hw");
  const Window g = window("conv2d_filter_grad", x.shape(), khw[0], khw[1], a, false);
  const int64_t o = dy.shape()[1], k = g.c * g.kh * g.kw, p = g.oh * g.ow;
  if (dw.nbytes() > 0) std::memset(dw.mutable_raw(), 0, dw.nbytes());
  if (dw.numel() == 0 || g.n == 0 || p == 0) return;
  by_float(x.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* in = x.data<T>();
    const T* d = dy.data<T>();
    T* out = dw.mutable_data<T>();
    T* cols_scratch = static_cast<T*>(scratch);
    if (!filter_grad_on_pool(g, o)) {
      for_each_image<T>(g.n, false, k * p, cols_scratch, [&](int64_t n, int64_t, T* cols) {
        im2col(g, in + n * g.c * g.h * g.w, cols, p);
        blas::gemm<T>(false, true, o, k, p, d + n * o * p, p, cols, p, out, k, T(1));
      });
      return;
    }
    // Each block of images sums its products into a block of its own (in image order),
    // and the blocks are added in block order.
    const int64_t nb = image_blocks(g.n, true);
    std::unique_ptr<T[]> own;
    T* blocks = scratch != nullptr ? cols_scratch + nb * k * p
                                   : (own = std::make_unique_for_overwrite<T[]>(static_cast<std::size_t>(nb * o * k))).get();
    for_each_image<T>(g.n, true, k * p, cols_scratch, [&](int64_t n, int64_t blk, T* cols) {
      im2col(g, in + n * g.c * g.h * g.w, cols, p);
      const bool first = n == blk * g.n / nb;
      blas::gemm<T>(false, true, o, k, p, d + n * o * p, p, cols, p, blocks + blk * o * k, k, first ? T(0) : T(1));
    });
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t i = 0; i < o * k; ++i) out[i] += blocks[b * o * k + i];
  });
}

// A convolution's eager function from its into-form (Primitive::eager_into): the result
// allocated, of the type rule's type, and its columns too.
using ConvInto = void (*)(const Tensor&, const Tensor&, const Attrs&, Tensor&, void*);
template <ConvInto into>
Tensor conv_eager(std::span<const Tensor> in, const Attrs& a, VarType (*type)(std::span<const VarType>, const Attrs&)) {
  const std::array<VarType, 2> types{VarType{in[0].dtype(), in[0].shape()}, VarType{in[1].dtype(), in[1].shape()}};
  const VarType t = type(types, a);
  Tensor out(t.dtype, t.shape);
  into(in[0], in[1], a, out, nullptr);
  return out;
}
template <ConvInto into>
void conv_eager_into(std::span<const Tensor> in, const Attrs& a, std::span<Tensor> out, void* scratch) {
  into(in[0], in[1], a, out[0], scratch);
}

// The scratch a convolution's im2col columns need in compiled code (Primitive::scratch_bytes):
// a block per block of images (image_blocks); conv2d_filter_grad on the pool also each
// block's sum of products. `op` names the primitive; in: its arguments' types.
int64_t conv_scratch(const char* op, std::span<const VarType> in, const Attrs& a) {
  const std::string_view name = op;
  Shape x, w;
  int64_t o = 0;
  if (name == "conv2d") x = in[0].shape, w = in[1].shape, o = w[0];
  else if (name == "conv2d_data_grad") {
    const Shape& hw = a.ints("input_hw");
    x = {in[0].shape[0], in[1].shape[1], hw[0], hw[1]}, w = in[1].shape, o = w[0];
  } else {
    const Shape& khw = a.ints("kernel_hw");
    x = in[0].shape, w = {in[1].shape[1], in[0].shape[1], khw[0], khw[1]}, o = in[1].shape[1];
  }
  const Window g = window(op, x, w[2], w[3], a, false);
  const int64_t k = g.c * g.kh * g.kw, p = g.oh * g.ow;
  const bool on_pool = name == "conv2d_filter_grad" ? filter_grad_on_pool(g, o) : per_image_on_pool(o, k, p);
  const int64_t blocks = image_blocks(g.n, on_pool);
  const int64_t elements = numel({blocks, k * p}, op) + (name == "conv2d_filter_grad" && on_pool ? blocks * o * k : 0);
  return numel({elements, static_cast<int64_t>(dtype_size(in[0].dtype))}, op);
}

VarType conv_type(const char* op, const Shape& x, const VarType& w, const Attrs& a, DType dtype) {
  const Window g = window(op, x, w.shape[2], w.shape[3], a, false);
  return VarType{dtype, {g.n, w.shape[0], g.oh, g.ow}};
}

// The tangent rule of a primitive f bilinear in its two arguments:
// f(ta, b) + f(a, tb), a term dropped where its tangent is zero.
std::function<Var(TapeBuilder&, const TangentArgs&)> bilinear_tangent(Handle f) {
  return [f](TapeBuilder& b, const TangentArgs& a) {
    const Var d1 = a.tangents[0] == kNoVar ? kNoVar : b.call(f(), {a.tangents[0], a.args[1]}, a.attrs);
    const Var d2 = a.tangents[1] == kNoVar ? kNoVar : b.call(f(), {a.args[0], a.tangents[1]}, a.attrs);
    return d1 == kNoVar ? d2 : d2 == kNoVar ? d1 : b.add(d1, d2);
  };
}

// The three convolutions, one argument batched: its batch moves next to the axis
// `into[i]` of it (N or a channel axis) and merges with it, and the call's result has
// it merged into its axis `out[i]`, which splits back. Both batched: one call per element.
Results<Var> batch_conv(TapeBuilder& b, const Primitive& prim, const BatchArgs& a, std::array<std::size_t, 2> into,
                        std::array<std::size_t, 2> out) {
  if (a.batched[0] && a.batched[1]) return batch_by_scan(b, prim, a);
  const std::size_t i = a.batched[0] ? 0 : 1;
  std::vector<Var> args(a.args.begin(), a.args.end());
  args[i] = merge_axes(b, move_axes(b, args[i], 0, 1, static_cast<int64_t>(into[i])), into[i]);
  return split_batch(b, b.call(prim, std::move(args), a.attrs), out[i], prim, a);
}

// conv2d(x [N,C,H,W], w [O,C,KH,KW], stride, padding, dilation) -> [N,O,OH,OW].
VarType conv2d_type(std::span<const VarType> in, const Attrs& a) {
  expect_weights("conv2d", in[0], in[1]);
  return conv_type("conv2d", in[0].shape, in[1], a, in[0].dtype);
}

Primitive conv2d_p() {
  return {
      .name = "conv2d",
      .arity = 2,
      .attrs = kConvAttrs,
      .infer = conv2d_type,
      .eager = [](std::span<const Tensor> in, const Attrs& a) { return conv_eager<conv_forward>(in, a, conv2d_type); },
      .adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
        const Shape x = b.type(a.args[0]).shape, w = b.type(a.args[1]).shape;
        return std::vector<Var>{
            a.needs[0] ? b.call(prims::conv2d_data_grad(), {a.dout, a.args[1]}, with(a.attrs, "input_hw", Shape{x[2], x[3]}))
                       : kNoVar,
            a.needs[1] ? b.call(prims::conv2d_filter_grad(), {a.args[0], a.dout}, with(a.attrs, "kernel_hw", Shape{w[2], w[3]}))
                       : kNoVar};
      },
      .tangent = bilinear_tangent(prims::conv2d),
      .structure = Structure::opaque,
      .batch = [](TapeBuilder& b, const BatchArgs& a) { return batch_conv(b, prims::conv2d(), a, {0, 0}, {0, 1}); },
      .lowering = {
          .eager_into = conv_eager_into<conv_forward>,
          .scratch_bytes = [](std::span<const VarType> in, const Attrs& a) { return conv_scratch("conv2d", in, a); },
      },
  };
}

// conv2d_data_grad(dy, w, ..., input_hw): the gradient of conv2d with respect to x
// (bilinear in dy and w; <data_grad(dy, w), z> = <dy, conv2d(z, w)>).
VarType data_grad_type(std::span<const VarType> in, const Attrs& a) {
  const Shape& hw = a.ints("input_hw");
  if (in[0].shape.size() != 4 || hw.size() != 2)
    throw Error(fmt::format("conv2d_data_grad: expected dy [N,O,OH,OW] and input_hw [H,W], got {} and {}",
                            type_str(in[0]), shape_str(hw)));
  if (in[1].shape.size() != 4 || in[1].dtype != in[0].dtype || in[1].shape[0] != in[0].shape[1])
    throw Error(fmt::format("conv2d_data_grad: expected weights [{},C,KH,KW], got {}", in[0].shape[1], type_str(in[1])));
  const Shape x{in[0].shape[0], in[1].shape[1], hw[0], hw[1]};
  const VarType y = conv_type("conv2d_data_grad", x, in[1], a, in[0].dtype);
  if (y.shape != in[0].shape)
    throw Error(fmt::format("conv2d_data_grad: dy is {}, but an input {} gives {}", type_str(in[0]), shape_str(x),
                            shape_str(y.shape)));
  return VarType{in[0].dtype, x};
}

Primitive conv2d_data_grad_p() {
  std::vector<AttrSpec> attrs = kConvAttrs;
  attrs.push_back({"input_hw", AttrKind::shape});
  return {
      .name = "conv2d_data_grad",
      .arity = 2,
      .attrs = attrs,
      .infer = data_grad_type,
      .eager = [](std::span<const Tensor> in, const Attrs& a) { return conv_eager<conv_data_grad>(in, a, data_grad_type); },
      .adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
        const Shape w = b.type(a.args[1]).shape;
        const Attrs c = conv_only(a.attrs);
        return std::vector<Var>{
            a.needs[0] ? b.call(prims::conv2d(), {a.dout, a.args[1]}, c) : kNoVar,
            a.needs[1] ? b.call(prims::conv2d_filter_grad(), {a.dout, a.args[0]}, with(c, "kernel_hw", Shape{w[2], w[3]}))
                       : kNoVar};
      },
      .tangent = bilinear_tangent(prims::conv2d_data_grad),
      .structure = Structure::opaque,
      .batch = [](TapeBuilder& b, const BatchArgs& a) { return batch_conv(b, prims::conv2d_data_grad(), a, {0, 1}, {0, 1}); },
      .lowering = {
          .eager_into = conv_eager_into<conv_data_grad>,
          .scratch_bytes = [](std::span<const VarType> in, const Attrs& a) { return conv_scratch("conv2d_data_grad", in, a); },
      },
  };
}

// conv2d_filter_grad(x, dy, ..., kernel_hw): the gradient of conv2d with respect to
// w (bilinear; <filter_grad(x, dy), v> = <dy, conv2d(x, v)>).
VarType filter_grad_type(std::span<const VarType> in, const Attrs& a) {
  const Shape& khw = a.ints("kernel_hw");
  if (in[0].shape.size() != 4 || in[1].shape.size() != 4 || khw.size() != 2 || in[0].dtype != in[1].dtype)
    throw Error(fmt::format("conv2d_filter_grad: expected x [N,C,H,W], dy [N,O,OH,OW] of one dtype and kernel_hw "
                            "[KH,KW], got {}, {} and {}", type_str(in[0]), type_str(in[1]), shape_str(khw)));
  const VarType w{in[0].dtype, {in[1].shape[1], in[0].shape[1], khw[0], khw[1]}};
  const VarType y = conv_type("conv2d_filter_grad", in[0].shape, w, a, in[0].dtype);
  if (y.shape != in[1].shape)
    throw Error(fmt::format("conv2d_filter_grad: dy is {}, but x {} and kernel {} give {}", type_str(in[1]),
                            type_str(in[0]), shape_str(khw), shape_str(y.shape)));
  return w;
}

Primitive conv2d_filter_grad_p() {
  std::vector<AttrSpec> attrs = kConvAttrs;
  attrs.push_back({"kernel_hw", AttrKind::shape});
  return {
      .name = "conv2d_filter_grad",
      .arity = 2,
      .attrs = attrs,
      .infer = filter_grad_type,
      .eager = [](std::span<const Tensor> in, const Attrs& a) { return conv_eager<conv_filter_grad>(in, a, filter_grad_type); },
      .adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
        const Shape x = b.type(a.args[0]).shape;
        const Attrs c = conv_only(a.attrs);
        return std::vector<Var>{
            a.needs[0] ? b.call(prims::conv2d_data_grad(), {a.args[1], a.dout}, with(c, "input_hw", Shape{x[2], x[3]}))
                       : kNoVar,
            a.needs[1] ? b.call(prims::conv2d(), {a.args[0], a.dout}, c) : kNoVar};
      },
      .tangent = bilinear_tangent(prims::conv2d_filter_grad),
      .structure = Structure::opaque,
      .batch = [](TapeBuilder& b, const BatchArgs& a) { return batch_conv(b, prims::conv2d_filter_grad(), a, {1, 1}, {1, 0}); },
      .lowering = {
          .eager_into = conv_eager_into<conv_filter_grad>,
          .scratch_bytes = [](std::span<const VarType> in, const Attrs& a) { return conv_scratch("conv2d_filter_grad", in, a); },
      },
  };
}

}  // namespace

void add_nn(std::vector<Primitive>& t) {
  t.insert(t.end(), {conv2d_p(), conv2d_data_grad_p(), conv2d_filter_grad_p()});
  add_pools(t);
}

}  // namespace reel::prims
