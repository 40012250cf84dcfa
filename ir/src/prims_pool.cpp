// Pooling, NCHW: max_pool2d (with max_pool2d_grad and max_pool2d_gather) and avg_pool2d
// (with avg_pool2d_grad). Batching (vmap) folds the batch into N; max_pool2d_grad and
// max_pool2d_gather broadcast an unbatched argument first.
#include <fmt/format.h>

#include <cstring>

#include "batching.hpp"
#include "prims_window.hpp"

namespace reel::prims {

namespace {

// For each output element of a pooling window over image plane (n, c): f(out index,
// window element indices (iy, ix) inside the input, or skipped when in the padding).
template <class F>
void for_each_window(const Window& g, F f) {
  for (int64_t nc = 0; nc < g.n * g.c; ++nc)
    for (int64_t y = 0; y < g.oh; ++y)
      for (int64_t x = 0; x < g.ow; ++x) f(nc, (nc * g.oh + y) * g.ow + x, y * g.sh - g.ph, x * g.sw - g.pw);
}

Window pool_window(const char* op, const Shape& x, const Attrs& a) {
  const Shape& k = a.ints("kernel");
  if (k.size() != 2) throw Error(fmt::format("{}: attribute 'kernel' must be a pair [h, w], got {}", op, shape_str(k)));
  return window(op, x, k[0], k[1], a, true);
}

const std::vector<AttrSpec> kPoolAttrs = {
    {"kernel", AttrKind::ints}, {"stride", AttrKind::ints, true}, {"padding", AttrKind::ints, true}};

// The flat input index of each output's maximum (the first, in row-major window
// order; padding never wins).
template <class T>
std::vector<int64_t> argmax_windows(const Window& g, const T* x) {
  std::vector<int64_t> at(static_cast<std::size_t>(g.n * g.c * g.oh * g.ow));
  for_each_window(g, [&](int64_t nc, int64_t o, int64_t y0, int64_t x0) {
    int64_t best = -1;
    T bv = -std::numeric_limits<T>::infinity();
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        const int64_t iy = y0 + i, ix = x0 + j;
        if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
        const int64_t k = (nc * g.h + iy) * g.w + ix;
        if (best < 0 || x[k] > bv || (x[k] != x[k] && bv == bv)) best = k, bv = x[k];
      }
    at[static_cast<std::size_t>(o)] = best;
  });
  return at;
}

// max_pool2d(x, kernel, stride = kernel, padding): the maximum of each window
// (padding never wins); the gradient goes to the first maximum of each window.
// The pooling windows of primitive `name` (Primitive::pool) in `mode`.
std::function<PoolWindow(std::span<const VarType>, const Attrs&)> pool_rule(const char* name, PoolWindow::Mode mode) {
  return [name, mode](std::span<const VarType> in, const Attrs& a) {
    const bool from_dy = mode == PoolWindow::Mode::mean_grad;
    Window g;
    if (from_dy) {
      const Shape& hw = a.ints("input_hw");
      g = pool_window(name, {in[0].shape[0], in[0].shape[1], hw[0], hw[1]}, a);
    } else {
      g = pool_window(name, in[0].shape, a);
    }
    return PoolWindow{.mode = mode, .nc = g.n * g.c, .h = g.h, .w = g.w, .oh = g.oh, .ow = g.ow, .kh = g.kh,
                      .kw = g.kw, .sh = g.sh, .sw = g.sw, .ph = g.ph, .pw = g.pw};
  };
}

Tensor max_pool_eager(std::span<const Tensor> in, const Attrs& a) {
  const Window g = pool_window("max_pool2d", in[0].shape(), a);
  Tensor y(in[0].dtype(), {g.n, g.c, g.oh, g.ow});
  by_float(in[0].dtype(), [&](auto t) {
    using T = decltype(t);
    const std::vector<int64_t> at = argmax_windows(g, in[0].data<T>());
    for (std::size_t o = 0; o < at.size(); ++o) y.mutable_data<T>()[o] = in[0].data<T>()[at[o]];
  });
  return y;
}

Primitive max_pool2d_p() {
  return {
      .name = "max_pool2d",
      .attrs = kPoolAttrs,
      .infer = [](std::span<const VarType> in, const Attrs& a) {
        const Window g = pool_window("max_pool2d", in[0].shape, a);
        return VarType{in[0].dtype, {g.n, g.c, g.oh, g.ow}};
      },
      .eager = max_pool_eager,
      .adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
        return std::vector<Var>{b.call(prims::max_pool2d_grad(), {a.args[0], a.dout}, a.attrs)};
      },
      .tangent = [](TapeBuilder& b, const TangentArgs& a) {
        return b.call(prims::max_pool2d_gather(), {a.args[0], a.tangents[0]}, a.attrs);
      },
      .structure = Structure::opaque,
      .batch = [](TapeBuilder& b, const BatchArgs& a) { return batch_into_n(b, prims::max_pool2d(), a); },
      .lowering = {
          .pool = pool_rule("max_pool2d", PoolWindow::Mode::max),
      },
  };
}

// max_pool2d_grad(x, dy): dy added at each window's first maximum of x (linear in dy,
// no gradient for x); max_pool2d_gather(x, v): v at each window's first maximum of x
// (its transpose).
Primitive max_pool_route(bool grad) {
  const char* name = grad ? "max_pool2d_grad" : "max_pool2d_gather";
  const Handle self = grad ? prims::max_pool2d_grad : prims::max_pool2d_gather;
  const Handle other = grad ? prims::max_pool2d_gather : prims::max_pool2d_grad;
  return {
      .name = name,
      .arity = 2,
      .attrs = kPoolAttrs,
      .infer = [name, grad](std::span<const VarType> in, const Attrs& a) {
        const Window g = pool_window(name, in[0].shape, a);
        const Shape pooled{g.n, g.c, g.oh, g.ow};
        const Shape& expected = grad ? pooled : in[0].shape;
        if (in[1].dtype != in[0].dtype || in[1].shape != expected)
          throw Error(fmt::format("{}: expected a second argument of type {}, got {}", name,
                                  type_str(VarType{in[0].dtype, expected}), type_str(in[1])));
        return VarType{in[0].dtype, grad ? in[0].shape : pooled};
      },
      .eager = [name, grad](std::span<const Tensor> in, const Attrs& a) {
        const Window g = pool_window(name, in[0].shape(), a);
        Tensor out(in[0].dtype(), grad ? in[0].shape() : Shape{g.n, g.c, g.oh, g.ow});
        if (out.nbytes() > 0) std::memset(out.mutable_raw(), 0, out.nbytes());
        by_float(in[0].dtype(), [&](auto t) {
          using T = decltype(t);
          const std::vector<int64_t> at = argmax_windows(g, in[0].data<T>());
          const T* v = in[1].data<T>();
          T* o = out.mutable_data<T>();
          for (std::size_t i = 0; i < at.size(); ++i) {
            if (grad) o[at[i]] += v[i];
            else o[i] = v[at[i]];
          }
        });
        return out;
      },
      .adjoint = [other](TapeBuilder& b, const AdjointArgs& a) {
        return std::vector<Var>{kNoVar, b.call(other(), {a.args[0], a.dout}, a.attrs)};
      },
      .tangent = [self](TapeBuilder& b, const TangentArgs& a) {
        return a.tangents[1] == kNoVar ? kNoVar : b.call(self(), {a.args[0], a.tangents[1]}, a.attrs);
      },
      .structure = Structure::opaque,
      .batch = [self](TapeBuilder& b, const BatchArgs& a) { return batch_into_n(b, self(), a); },
      .lowering = {
          .pool = pool_rule(name, grad ? PoolWindow::Mode::max_grad : PoolWindow::Mode::max_gather),
      },
  };
}

// avg_pool2d(x, kernel, stride = kernel, padding): the mean of each window, padding
// counted as zeros (PyTorch's count_include_pad). Linear; avg_pool2d_grad(dy, ...,
// input_hw) is its transpose.
Window avg_pool_geometry(bool grad, const VarType& in, const Attrs& a) {
  const char* name = grad ? "avg_pool2d_grad" : "avg_pool2d";
  if (!grad) return pool_window(name, in.shape, a);
  const Shape& hw = a.ints("input_hw");
  if (in.shape.size() != 4 || hw.size() != 2)
    throw Error(fmt::format("{}: expected dy [N,C,OH,OW] and input_hw [H,W], got {} and {}", name, type_str(in),
                            shape_str(hw)));
  const Window g = pool_window(name, {in.shape[0], in.shape[1], hw[0], hw[1]}, a);
  if (g.oh != in.shape[2] || g.ow != in.shape[3])
    throw Error(fmt::format("{}: dy is {}, but an input {}x{} pools to {}x{}", name, type_str(in), hw[0], hw[1], g.oh, g.ow));
  return g;
}

Tensor avg_pool_eager(bool grad, std::span<const Tensor> in, const Attrs& a) {
  const Window g = avg_pool_geometry(grad, {in[0].dtype(), in[0].shape()}, a);
  Tensor out(in[0].dtype(), grad ? Shape{g.n, g.c, g.h, g.w} : Shape{g.n, g.c, g.oh, g.ow});
  if (out.nbytes() > 0) std::memset(out.mutable_raw(), 0, out.nbytes());
  const double scale = 1.0 / static_cast<double>(g.kh * g.kw);
  by_float(in[0].dtype(), [&](auto t) {
    using T = decltype(t);
    const T* v = in[0].data<T>();
    T* o = out.mutable_data<T>();
    for_each_window(g, [&](int64_t nc, int64_t oi, int64_t y0, int64_t x0) {
      double acc = 0;
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t j = 0; j < g.kw; ++j) {
          const int64_t iy = y0 + i, ix = x0 + j;
          if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
          const int64_t k = (nc * g.h + iy) * g.w + ix;
          if (grad) o[k] += static_cast<T>(v[oi] * scale);
          else acc += v[k];
        }
      if (!grad) o[oi] = static_cast<T>(acc * scale);
    });
  });
  return out;
}

// The adjoint of avg_pool2d (avg_pool2d_grad) and of avg_pool2d_grad (avg_pool2d).
std::vector<Var> avg_pool_adjoint(bool grad, TapeBuilder& b, const AdjointArgs& a) {
  if (!grad) {
    const Shape x = b.type(a.args[0]).shape;
    return {b.call(prims::avg_pool2d_grad(), {a.dout}, with(a.attrs, "input_hw", Shape{x[2], x[3]}))};
  }
  Attrs pool;
  for (const char* n : {"kernel", "stride", "padding"})
    if (a.attrs.has(n)) pool.set(n, a.attrs.get(n));
  return {b.call(prims::avg_pool2d(), {a.dout}, pool)};
}

Primitive avg_pool(bool grad) {
  std::vector<AttrSpec> attrs = kPoolAttrs;
  if (grad) attrs.push_back({"input_hw", AttrKind::shape});
  return {
      .name = grad ? "avg_pool2d_grad" : "avg_pool2d",
      .attrs = attrs,
      .infer = [grad](std::span<const VarType> in, const Attrs& a) {
        const Window g = avg_pool_geometry(grad, in[0], a);
        return VarType{in[0].dtype, grad ? Shape{g.n, g.c, g.h, g.w} : Shape{g.n, g.c, g.oh, g.ow}};
      },
      .eager = [grad](std::span<const Tensor> in, const Attrs& a) { return avg_pool_eager(grad, in, a); },
      .adjoint = [grad](TapeBuilder& b, const AdjointArgs& a) { return avg_pool_adjoint(grad, b, a); },
      .linear = true,
      .structure = Structure::opaque,
      .batch = [grad](TapeBuilder& b, const BatchArgs& a) {
        return batch_into_n(b, grad ? prims::avg_pool2d_grad() : prims::avg_pool2d(), a);
      },
      .lowering = {
          .pool = pool_rule(grad ? "avg_pool2d_grad" : "avg_pool2d", grad ? PoolWindow::Mode::mean_grad : PoolWindow::Mode::mean),
      },
  };
}

Primitive max_pool2d_grad_p() { return max_pool_route(true); }
Primitive max_pool2d_gather_p() { return max_pool_route(false); }
Primitive avg_pool2d_p() { return avg_pool(false); }
Primitive avg_pool2d_grad_p() { return avg_pool(true); }

}  // namespace

void add_pools(std::vector<Primitive>& t) {
  t.insert(t.end(), {max_pool2d_p(), max_pool2d_grad_p(), max_pool2d_gather_p(), avg_pool2d_p(), avg_pool2d_grad_p()});
}

}  // namespace reel::prims
