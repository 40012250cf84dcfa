#pragma once
// Internal: what the convolutions (prims_nn.cpp) and the pools (prims_pool.cpp) share:
// the geometry of a 2-D window operation over NCHW images, and batching by folding the
// batch into N.
#include "prims.hpp"

namespace reel::prims {

// The geometry of a 2-D window operation: input [N,C,H,W], window KH x KW, output
// [N,O,OH,OW] (O: output channels of a convolution, C for pooling).
struct Window {
  int64_t n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
};

// The window of `op` over an input x [N,C,H,W], kernel kh x kw, from the attributes
// stride, padding and dilation (pooling: the stride defaults to the window, padding at
// most half of it); throws reel::Error naming op.
Window window(const char* op, const Shape& x, int64_t kh, int64_t kw, const Attrs& a, bool pooling);

template <class Body>
void by_float(DType d, Body&& body) {
  if (d == DType::f64) body(double{});
  else body(float{});
}

// a with attribute `name` set to v.
Attrs with(const Attrs& a, const char* name, AttrValue v);

// Batching a window operation whose arguments all take the batch into N: the unbatched
// ones broadcast, all folded, one call, unfolded.
Results<Var> batch_into_n(TapeBuilder& b, const Primitive& prim, const BatchArgs& a);

void add_pools(std::vector<Primitive>& table);  // prims_pool.cpp

}  // namespace reel::prims
