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
Tensor cast(const Tensor& x, DType dtype) { REEL_PRIM(cast); return call(prim_cast, {x}, {{"dtype", dtype}}); }
Tensor relu(const Tensor& x) { REEL_PRIM(relu); return call(prim_relu, {x}); }
Tensor log1p(const Tensor& x) { REEL_PRIM(log1p); return call(prim_log1p, {x}); }
Tensor expm1(const Tensor& x) { REEL_PRIM(expm1); return call(prim_expm1, {x}); }
Tensor softplus(const Tensor& x) { REEL_PRIM(softplus); return call(prim_softplus, {x}); }
Tensor erf(const Tensor& x) { REEL_PRIM(erf); return call(prim_erf, {x}); }
Tensor lgamma(const Tensor& x) { REEL_PRIM(lgamma); return call(prim_lgamma, {x}); }
Tensor digamma(const Tensor& x) { REEL_PRIM(digamma); return call(prim_digamma, {x}); }
Tensor trigamma(const Tensor& x) { REEL_PRIM(trigamma); return call(prim_trigamma, {x}); }
Tensor maximum(const Tensor& a, const Tensor& b) { REEL_PRIM(maximum); return call(prim_maximum, {a, b}); }
Tensor minimum(const Tensor& a, const Tensor& b) { REEL_PRIM(minimum); return call(prim_minimum, {a, b}); }
Tensor maximum(const Tensor& a, double b) { return with_scalar("maximum", a, b, false); }
Tensor minimum(const Tensor& a, double b) { return with_scalar("minimum", a, b, false); }
Tensor clamp(const Tensor& x, double lo, double hi) {
  REEL_PRIM(clamp);
  return call(prim_clamp, {x}, {{"lo", lo}, {"hi", hi}});
}
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  REEL_PRIM(where);
  return call(prim_where, {cond, a, b});
}
Tensor where(const Tensor& cond, const Tensor& a, double b) {
  return where(cond, a, scalar(b, a.defined() ? a.dtype() : DType::f64));
}
Tensor where(const Tensor& cond, double a, const Tensor& b) {
  return where(cond, scalar(a, b.defined() ? b.dtype() : DType::f64), b);
}
Tensor lt(const Tensor& a, const Tensor& b) { REEL_PRIM(lt); return call(prim_lt, {a, b}); }
Tensor le(const Tensor& a, const Tensor& b) { REEL_PRIM(le); return call(prim_le, {a, b}); }
Tensor gt(const Tensor& a, const Tensor& b) { REEL_PRIM(gt); return call(prim_gt, {a, b}); }
Tensor ge(const Tensor& a, const Tensor& b) { REEL_PRIM(ge); return call(prim_ge, {a, b}); }
Tensor eq(const Tensor& a, const Tensor& b) { REEL_PRIM(eq); return call(prim_eq, {a, b}); }
Tensor ne(const Tensor& a, const Tensor& b) { REEL_PRIM(ne); return call(prim_ne, {a, b}); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, double b) { return with_scalar("lt", a, b, false); }
Tensor operator<=(const Tensor& a, double b) { return with_scalar("le", a, b, false); }
Tensor operator>(const Tensor& a, double b) { return with_scalar("gt", a, b, false); }
Tensor operator>=(const Tensor& a, double b) { return with_scalar("ge", a, b, false); }
Tensor operator==(const Tensor& a, double b) { return with_scalar("eq", a, b, false); }
Tensor operator!=(const Tensor& a, double b) { return with_scalar("ne", a, b, false); }
Tensor operator<(double a, const Tensor& b) { return with_scalar("lt", b, a, true); }
Tensor operator<=(double a, const Tensor& b) { return with_scalar("le", b, a, true); }
Tensor operator>(double a, const Tensor& b) { return with_scalar("gt", b, a, true); }
Tensor operator>=(double a, const Tensor& b) { return with_scalar("ge", b, a, true); }
Tensor operator==(double a, const Tensor& b) { return with_scalar("eq", b, a, true); }
Tensor operator!=(double a, const Tensor& b) { return with_scalar("ne", b, a, true); }
Tensor pow(const Tensor& x, double p) { REEL_PRIM(pow); return call(prim_pow, {x}, {{"p", p}}); }

namespace {
// Negative axes as counted from the end, so that tapes print one spelling.
Shape normalized_axes(const Tensor& x, const std::vector<int64_t>& axes) {
  Shape out;
  for (int64_t a : axes) out.push_back(a < 0 && x.defined() ? a + x.rank() : a);
  return out;
}
Tensor reduce(const char* name, const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  Attrs attrs{{"axes", normalized_axes(x, axes)}};
  if (keepdims) attrs.set("keepdims", true);
  return call(primitive(name), {x}, std::move(attrs));
}
}  // namespace

Tensor sum(const Tensor& x) { REEL_PRIM(sum); return call(prim_sum, {x}); }
Tensor sum(const Tensor& x, int64_t axis, bool keepdims) {
  REEL_PRIM(sum);
  if (keepdims) return reduce("sum", x, {axis}, true);
  if (axis < 0 && x.defined()) axis += x.rank();  // -1 is the last axis
  return call(prim_sum, {x}, {{"axis", axis}});
}
Tensor sum(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) { return reduce("sum", x, axes, keepdims); }
Tensor mean(const Tensor& x) { REEL_PRIM(mean); return call(prim_mean, {x}); }
Tensor mean(const Tensor& x, int64_t axis, bool keepdims) { return reduce("mean", x, {axis}, keepdims); }
Tensor mean(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) { return reduce("mean", x, axes, keepdims); }
Tensor prod(const Tensor& x) { REEL_PRIM(prod); return call(prim_prod, {x}); }
Tensor prod(const Tensor& x, int64_t axis, bool keepdims) { return reduce("prod", x, {axis}, keepdims); }
Tensor prod(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) { return reduce("prod", x, axes, keepdims); }
Tensor max(const Tensor& x) { REEL_PRIM(max); return call(prim_max, {x}); }
Tensor max(const Tensor& x, int64_t axis, bool keepdims) { return reduce("max", x, {axis}, keepdims); }
Tensor max(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) { return reduce("max", x, axes, keepdims); }
Tensor min(const Tensor& x) { REEL_PRIM(min); return call(prim_min, {x}); }
Tensor min(const Tensor& x, int64_t axis, bool keepdims) { return reduce("min", x, {axis}, keepdims); }
Tensor min(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) { return reduce("min", x, axes, keepdims); }

namespace {
// logsumexp in keep-dims form over `axes` (all when empty).
Tensor logsumexp_keep(const Tensor& x, const std::vector<int64_t>& axes) {
  std::vector<int64_t> all = axes;
  if (all.empty())
    for (int64_t d = 0; d < (x.defined() ? x.rank() : 0); ++d) all.push_back(d);
  const Tensor m = nodiff(max(x, all, true));
  // An infinite maximum (all -inf, or some +inf) shifts by 0 instead: x - m would be NaN.
  const Tensor shift = where(m - m == 0.0, m, 0.0);
  return shift + log(sum(exp(x - shift), all, true));
}
Tensor drop_axes(const Tensor& keep, const Tensor& x, const std::vector<int64_t>& axes) {
  if (axes.empty()) return reshape(keep, {});
  Shape out;
  const Shape norm = normalized_axes(x, axes);
  for (int64_t d = 0; d < x.rank(); ++d)
    if (std::find(norm.begin(), norm.end(), d) == norm.end()) out.push_back(x.shape()[static_cast<std::size_t>(d)]);
  return reshape(keep, out);
}
}  // namespace

Tensor logsumexp(const Tensor& x) { return drop_axes(logsumexp_keep(x, {}), x, {}); }
Tensor logsumexp(const Tensor& x, int64_t axis, bool keepdims) {
  return logsumexp(x, std::vector<int64_t>{axis}, keepdims);
}
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  const Tensor k = logsumexp_keep(x, axes);
  return keepdims ? k : drop_axes(k, x, axes);
}
Tensor softmax(const Tensor& x, int64_t axis) {
  const Tensor e = exp(x - nodiff(max(x, axis, true)));
  return e / sum(e, axis, true);
}
Tensor log_softmax(const Tensor& x, int64_t axis) { return x - logsumexp(x, axis, true); }
Tensor argmax(const Tensor& x) { REEL_PRIM(argmax); return call(prim_argmax, {x}); }
Tensor argmax(const Tensor& x, int64_t axis) {
  REEL_PRIM(argmax);
  return call(prim_argmax, {x}, {{"axis", axis < 0 && x.defined() ? axis + x.rank() : axis}});
}
Tensor argmin(const Tensor& x) { REEL_PRIM(argmin); return call(prim_argmin, {x}); }
Tensor argmin(const Tensor& x, int64_t axis) {
  REEL_PRIM(argmin);
  return call(prim_argmin, {x}, {{"axis", axis < 0 && x.defined() ? axis + x.rank() : axis}});
}
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
