#include "reel/ops.hpp"

#include "reel/dispatch.hpp"

namespace reel {

namespace {

Tensor call(const Primitive& p, std::initializer_list<Tensor> in, Attrs attrs = {}) {
  return apply(p, std::span<const Tensor>(in.begin(), in.size()), std::move(attrs));
}

// Each operation looks its primitive up once.
#define REEL_PRIM(name)                                   \
  static const Primitive& prim_##name = primitive(#name); \
  (void)prim_##name

Tensor with_scalar(const char* name, const Tensor& a, double b, bool scalar_first) {
  const Tensor s = scalar(b, a.defined() ? a.dtype() : DType::f64);
  const Primitive& p = primitive(name);
  return scalar_first ? call(p, {s, a}) : call(p, {a, s});
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { REEL_PRIM(add); return call(prim_add, {a, b}); }
Tensor sub(const Tensor& a, const Tensor& b) { REEL_PRIM(sub); return call(prim_sub, {a, b}); }
Tensor mul(const Tensor& a, const Tensor& b) { REEL_PRIM(mul); return call(prim_mul, {a, b}); }
Tensor div(const Tensor& a, const Tensor& b) { REEL_PRIM(div); return call(prim_div, {a, b}); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return with_scalar("add", a, b, false); }
Tensor operator-(const Tensor& a, double b) { return with_scalar("sub", a, b, false); }
Tensor operator*(const Tensor& a, double b) { return with_scalar("mul", a, b, false); }
Tensor operator/(const Tensor& a, double b) { return with_scalar("div", a, b, false); }
Tensor operator+(double a, const Tensor& b) { return with_scalar("add", b, a, true); }
Tensor operator-(double a, const Tensor& b) { return with_scalar("sub", b, a, true); }
Tensor operator*(double a, const Tensor& b) { return with_scalar("mul", b, a, true); }
Tensor operator/(double a, const Tensor& b) { return with_scalar("div", b, a, true); }
Tensor operator-(const Tensor& a) { return neg(a); }

Tensor neg(const Tensor& x) { REEL_PRIM(neg); return call(prim_neg, {x}); }
Tensor exp(const Tensor& x) { REEL_PRIM(exp); return call(prim_exp, {x}); }
Tensor log(const Tensor& x) { REEL_PRIM(log); return call(prim_log, {x}); }
Tensor sin(const Tensor& x) { REEL_PRIM(sin); return call(prim_sin, {x}); }
Tensor cos(const Tensor& x) { REEL_PRIM(cos); return call(prim_cos, {x}); }
Tensor tanh(const Tensor& x) { REEL_PRIM(tanh); return call(prim_tanh, {x}); }
Tensor sigmoid(const Tensor& x) { REEL_PRIM(sigmoid); return call(prim_sigmoid, {x}); }
Tensor nodiff(const Tensor& x) { REEL_PRIM(nodiff); return call(prim_nodiff, {x}); }
Tensor sqrt(const Tensor& x) { REEL_PRIM(sqrt); return call(prim_sqrt, {x}); }
Tensor square(const Tensor& x) { REEL_PRIM(square); return call(prim_square, {x}); }
Tensor sign(const Tensor& x) { REEL_PRIM(sign); return call(prim_sign, {x}); }
Tensor abs(const Tensor& x) { REEL_PRIM(abs); return call(prim_abs, {x}); }
Tensor pow(const Tensor& x, double p) { REEL_PRIM(pow); return call(prim_pow, {x}, {{"p", p}}); }

Tensor sum(const Tensor& x) { REEL_PRIM(sum); return call(prim_sum, {x}); }
Tensor sum(const Tensor& x, int64_t axis) {
  REEL_PRIM(sum);
  if (axis < 0 && x.defined()) axis += x.rank();  // -1 is the last axis
  return call(prim_sum, {x}, {{"axis", axis}});
}
Tensor mean(const Tensor& x) { REEL_PRIM(mean); return call(prim_mean, {x}); }
Tensor sum_to(const Tensor& x, const Shape& shape) {
  REEL_PRIM(sum_to);
  return call(prim_sum_to, {x}, {{"shape", shape}});
}

Tensor matmul(const Tensor& a, const Tensor& b) { REEL_PRIM(matmul); return call(prim_matmul, {a, b}); }
Tensor transpose(const Tensor& x) { REEL_PRIM(transpose); return call(prim_transpose, {x}); }
Tensor reshape(const Tensor& x, const Shape& shape) {
  REEL_PRIM(reshape);
  return call(prim_reshape, {x}, {{"shape", shape}});
}
Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  REEL_PRIM(broadcast_to);
  return call(prim_broadcast_to, {x}, {{"shape", shape}});
}

}  // namespace reel
