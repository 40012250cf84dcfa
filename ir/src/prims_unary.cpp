// Elementwise primitives of one argument: neg exp log sin cos tanh sigmoid sqrt square
// sign abs relu log1p expm1 softplus erf lgamma digamma trigamma atan asinh tan asin acos
// sinh cosh cbrt log2 log10 floor ceil round, and with attributes
// pow(x, p), clamp(x, lo, hi); nodiff (stop_gradient) and cast(x, dtype).
#include <fmt/format.h>

#include <numbers>

#include "prims_elementwise.hpp"

namespace reel::prims {

namespace {

// digamma (psi) and trigamma (psi'), written with element operations only, so the
// eager kernel and compiled code compute them the same way: for x < 1/2 reflect
// (psi(x) = psi(1 - x) - pi cot(pi x), psi'(x) = pi^2 / sin^2(pi x) - psi'(1 - x)),
// shift up by ten (psi(z) = psi(z + 10) - sum 1/(z + k), psi'(z) = psi'(z + 10) +
// sum 1/(z + k)^2), then the asymptotic series at y >= 10.5 (truncation error below
// 2e-14).
constexpr double kPi = 3.14159265358979323846;
// c0 + r (c1 + r (c2 + ...)).
template <class E, class V>
V horner(E& e, V r, std::initializer_list<double> coeffs) {
  const double* c = coeffs.end();
  V acc = e.constant(*--c);
  while (c != coeffs.begin()) acc = e.add(e.constant(*--c), e.mul(r, acc));
  return acc;
}
template <class E, class V>
V polygamma(E& e, V x, int order) {
  auto c = [&](double v) { return e.constant(v); };
  const V reflect = e.lt(x, c(0.5));
  V y = e.select(reflect, e.sub(c(1), x), x);
  V acc = c(0);
  for (int k = 0; k < 10; ++k) {
    acc = e.add(acc, order == 0 ? e.div(c(1), y) : e.div(c(1), e.mul(y, y)));
    y = e.add(y, c(1));
  }
  const V inv = e.div(c(1), y), r = e.mul(inv, inv);
  V psi;
  if (order == 0) {
    // ln y - 1/(2y) - (r/12 - r^2/120 + r^3/252 - r^4/240 + r^5/132), r = 1/y^2
    const V s = e.mul(r, horner(e, r, {1.0 / 12, -1.0 / 120, 1.0 / 252, -1.0 / 240, 1.0 / 132}));
    psi = e.sub(e.sub(e.sub(e.log(y), e.mul(c(0.5), inv)), s), acc);
  } else {
    // 1/y + 1/(2y^2) + 1/(6y^3) - 1/(30y^5) + 1/(42y^7) - 1/(30y^9) + 5/(66y^11)
    const V s = e.mul(e.mul(r, inv), horner(e, r, {1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66}));
    psi = e.add(e.add(e.add(inv, e.mul(c(0.5), r)), s), acc);
  }
  const V px = e.mul(c(kPi), x), sn = e.sin(px);
  const V reflected = order == 0 ? e.sub(psi, e.div(e.mul(c(kPi), e.cos(px)), sn))
                                 : e.sub(e.div(c(kPi * kPi), e.mul(sn, sn)), psi);
  return e.select(reflect, reflected, psi);
}

// One line per primitive: its math, then f'(x) * d from x, y = f(x) and d.
Primitive neg_p() {
  return unary("neg", [](auto& e, auto x) { return e.neg(x); },
               [](TapeBuilder& b, Var, Var, Var d) { return b.neg(d); }, {.linear = true, .involution = true});
}
Primitive exp_p() {
  return unary("exp", [](auto& e, auto x) { return e.exp(x); }, [](TapeBuilder& b, Var, Var y, Var d) { return b.mul(d, y); });
}
Primitive log_p() {
  return unary("log", [](auto& e, auto x) { return e.log(x); }, [](TapeBuilder& b, Var x, Var, Var d) { return b.div(d, x); });
}
Primitive sin_p() {
  return unary("sin", [](auto& e, auto x) { return e.sin(x); },
               [](TapeBuilder& b, Var x, Var, Var d) { return b.mul(d, b.call(prims::cos(), {x})); });
}
Primitive cos_p() {
  return unary("cos", [](auto& e, auto x) { return e.cos(x); },
               [](TapeBuilder& b, Var x, Var, Var d) { return b.neg(b.mul(d, b.call(prims::sin(), {x}))); });
}
Primitive tanh_p() {
  return unary("tanh", [](auto& e, auto x) { return e.tanh(x); },
               [](TapeBuilder& b, Var, Var y, Var d) { return b.mul(d, one_minus(b, b.call(prims::square(), {y}))); });
}
Primitive sigmoid_p() {
  return unary("sigmoid", [](auto& e, auto x) { return e.div(e.constant(1.0), e.add(e.constant(1.0), e.exp(e.neg(x)))); },
               [](TapeBuilder& b, Var, Var y, Var d) { return b.mul(d, b.mul(y, one_minus(b, y))); });
}
Primitive sqrt_p() {
  return unary("sqrt", [](auto& e, auto x) { return e.sqrt(x); },
               [](TapeBuilder& b, Var, Var y, Var d) { return b.div(d, b.mul(y, 2.0)); });
}
Primitive square_p() {
  return unary("square", [](auto& e, auto x) { return e.mul(x, x); },
               [](TapeBuilder& b, Var x, Var, Var d) { return b.mul(d, b.mul(x, 2.0)); });
}
// sign: -1, 0 or 1 (NaN for NaN, -0 and +0 give 0); its derivative is zero wherever
// it exists, and taken as zero at 0.
Primitive sign_p() {
  return unary("sign",
               [](auto& e, auto x) {
                 return e.select(e.ne(x, x), x, e.sub(e.gt(x, e.constant(0)), e.lt(x, e.constant(0))));
               },
               [](TapeBuilder&, Var, Var, Var) { return kNoVar; });
}
// abs: the gradient at 0 is 0 (the subgradient's midpoint, as in JAX and PyTorch).
Primitive abs_p() {
  return unary("abs", [](auto& e, auto x) { return e.abs(x); },
               [](TapeBuilder& b, Var x, Var, Var d) { return b.mul(d, b.call(prims::sign(), {x})); });
}
// relu: the gradient at 0 is 0.
Primitive relu_p() {
  return unary("relu", [](auto& e, auto x) { return e.max(x, e.constant(0)); },
               [](TapeBuilder& b, Var x, Var, Var d) { return b.mul(d, compare(b, prims::gt(), x, 0)); });
}
Primitive log1p_p() {
  return unary("log1p", [](auto& e, auto x) { return e.log1p(x); },
               [](TapeBuilder& b, Var x, Var, Var d) { return b.div(d, b.add(x, constant_like(b, 1, x))); });
}
Primitive expm1_p() {
  return unary("expm1", [](auto& e, auto x) { return e.expm1(x); },
               [](TapeBuilder& b, Var, Var y, Var d) { return b.mul(d, b.add(y, constant_like(b, 1, y))); });
}
// softplus(x) = log(1 + e^x), as max(x, 0) + log1p(e^-|x|) (no overflow); derivative sigmoid(x).
Primitive softplus_p() {
  return unary("softplus", [](auto& e, auto x) { return e.add(e.max(x, e.constant(0)), e.log1p(e.exp(e.neg(e.abs(x))))); },
               [](TapeBuilder& b, Var x, Var, Var d) { return b.mul(d, b.call(prims::sigmoid(), {x})); });
}
// erf' = 2/sqrt(pi) e^(-x^2)
Primitive erf_p() {
  return unary("erf", [](auto& e, auto x) { return e.erf(x); }, [](TapeBuilder& b, Var x, Var, Var d) {
    return b.mul(d, b.mul(b.call(prims::exp(), {b.neg(b.call(prims::square(), {x}))}), 2.0 / std::sqrt(kPi)));
  });
}
Primitive lgamma_p() {
  return unary("lgamma", [](auto& e, auto x) { return e.lgamma(x); },
               [](TapeBuilder& b, Var x, Var, Var d) { return b.mul(d, b.call(prims::digamma(), {x})); });
}
Primitive digamma_p() {
  return unary("digamma", [](auto& e, auto x) { return polygamma(e, x, 0); },
               [](TapeBuilder& b, Var x, Var, Var d) { return b.mul(d, b.call(prims::trigamma(), {x})); });
}
// atan' = 1 / (1 + x^2)
Primitive atan_p() {
  return unary("atan", [](auto& e, auto x) { return e.atan(x); },
               [](TapeBuilder& b, Var x, Var, Var d) { return b.div(d, b.add(b.call(prims::square(), {x}), constant_like(b, 1, x))); });
}
// asinh' = 1 / sqrt(x^2 + 1), as 1 / hypot(x, 1): no overflow for large |x|.
Primitive asinh_p() {
  return unary("asinh", [](auto& e, auto x) { return e.asinh(x); },
               [](TapeBuilder& b, Var x, Var, Var d) { return b.div(d, b.call(prims::hypot(), {x, constant_like(b, 1, x)})); });
}
// tan' = 1 + tan^2, from the result.
Primitive tan_p() {
  return unary("tan", [](auto& e, auto x) { return e.tan(x); },
               [](TapeBuilder& b, Var, Var y, Var d) {
                 return b.mul(d, b.add(b.call(prims::square(), {y}), constant_like(b, 1, y)));
               });
}
// d / sqrt(1 - x^2), with 1 - x^2 as (1 - x)(1 + x): exact factors, so accurate as |x|
// nears 1.
Var over_sqrt_one_minus_square(TapeBuilder& b, Var d, Var x) {
  return b.div(d, b.call(prims::sqrt(), {b.mul(one_minus(b, x), b.add(x, constant_like(b, 1, x)))}));
}
// asin' = 1 / sqrt(1 - x^2), acos' = -asin'; +-inf at x = +-1, NaN outside [-1, 1].
Primitive asin_p() {
  return unary("asin", [](auto& e, auto x) { return e.asin(x); },
               [](TapeBuilder& b, Var x, Var, Var d) { return over_sqrt_one_minus_square(b, d, x); });
}
Primitive acos_p() {
  return unary("acos", [](auto& e, auto x) { return e.acos(x); },
               [](TapeBuilder& b, Var x, Var, Var d) { return b.neg(over_sqrt_one_minus_square(b, d, x)); });
}
Primitive sinh_p() {
  return unary("sinh", [](auto& e, auto x) { return e.sinh(x); },
               [](TapeBuilder& b, Var x, Var, Var d) { return b.mul(d, b.call(prims::cosh(), {x})); });
}
Primitive cosh_p() {
  return unary("cosh", [](auto& e, auto x) { return e.cosh(x); },
               [](TapeBuilder& b, Var x, Var, Var d) { return b.mul(d, b.call(prims::sinh(), {x})); });
}
// cbrt' = 1 / (3 cbrt(x)^2), from the result: +inf at 0 (the tangent is vertical).
Primitive cbrt_p() {
  return unary("cbrt", [](auto& e, auto x) { return e.cbrt(x); },
               [](TapeBuilder& b, Var, Var y, Var d) { return b.div(d, b.mul(b.call(prims::square(), {y}), 3.0)); });
}
// log2' = 1 / (x ln 2), log10' = 1 / (x ln 10).
Primitive log2_p() {
  return unary("log2", [](auto& e, auto x) { return e.log2(x); },
               [](TapeBuilder& b, Var x, Var, Var d) { return b.div(d, b.mul(x, std::numbers::ln2)); });
}
Primitive log10_p() {
  return unary("log10", [](auto& e, auto x) { return e.log10(x); },
               [](TapeBuilder& b, Var x, Var, Var d) { return b.div(d, b.mul(x, std::numbers::ln10)); });
}
// floor, ceil and round (halves away from zero, as C's round): piecewise constant, so
// their derivative is zero wherever it exists, and taken as zero at the steps (as sign's).
Var no_derivative(TapeBuilder&, Var, Var, Var) { return kNoVar; }
Primitive floor_p() { return unary("floor", [](auto& e, auto x) { return e.floor(x); }, no_derivative); }
Primitive ceil_p() { return unary("ceil", [](auto& e, auto x) { return e.ceil(x); }, no_derivative); }
Primitive round_p() { return unary("round", [](auto& e, auto x) { return e.round(x); }, no_derivative); }
// trigamma: digamma's derivative. Its own derivative rules are missing on purpose
// (a third derivative of lgamma): grad and jvp say so, naming it.
Primitive trigamma_p() { return unary("trigamma", [](auto& e, auto x) { return polygamma(e, x, 1); }, nullptr); }

// clamp(x, lo, hi) = min(max(x, lo), hi); gradient 1 for lo <= x <= hi (bounds
// included), else 0.
auto clamp_math(const Attrs& a) {
  return [lo = a.real("lo"), hi = a.real("hi")](auto& e, auto x) {
    return e.min(e.max(x, e.constant(lo)), e.constant(hi));
  };
}
Var clamp_inside(TapeBuilder& b, Var x, const Attrs& a) {
  return b.mul(compare(b, prims::ge(), x, a.real("lo")), compare(b, prims::le(), x, a.real("hi")));
}
Primitive clamp_p() {
  return {
      .name = "clamp",
      .attrs = {{"lo", AttrKind::real}, {"hi", AttrKind::real}},
      .infer = [](std::span<const VarType> in, const Attrs& a) {
        if (!(a.real("lo") <= a.real("hi")))  // also NaN bounds
          throw Error(fmt::format("clamp: expected lo <= hi, got lo={} and hi={}", a.real("lo"), a.real("hi")));
        return in[0];
      },
      .eager = [](std::span<const Tensor> in, const Attrs& a) { return kernels::map_unary(in[0], clamp_math(a)); },
      .adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
        return std::vector<Var>{b.mul(a.dout, clamp_inside(b, a.args[0], a.attrs))};
      },
      .tangent = [](TapeBuilder& b, const TangentArgs& a) {
        return b.mul(a.tangents[0], clamp_inside(b, a.args[0], a.attrs));
      },
      .element = [](const Attrs& a) { return record_element<1>(clamp_math(a)); },
  };
}

// pow(x, p), p a constant. d/dx x^p = p x^(p-1): zero for p = 0 (not 0 * x^-1, which
// is NaN at 0), and 1 for p = 1 (no pow call).
auto pow_math(const Attrs& a) {
  return [p = a.real("p")](auto& e, auto x) { return e.pow(x, p); };
}
Var dpow(TapeBuilder& b, Var x, Var d, double p) {
  if (p == 0.0) return kNoVar;
  if (p == 1.0) return d;
  return b.mul(d, b.mul(b.call(prims::pow(), {x}, {{"p", p - 1.0}}), p));
}
Primitive pow_p() {
  return {
      .name = "pow",
      .attrs = {{"p", AttrKind::real}},
      .infer = [](std::span<const VarType> in, const Attrs&) { return in[0]; },
      .eager = [](std::span<const Tensor> in, const Attrs& a) { return kernels::map_unary(in[0], pow_math(a)); },
      .adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
        return std::vector<Var>{dpow(b, a.args[0], a.dout, a.attrs.real("p"))};
      },
      .tangent = [](TapeBuilder& b, const TangentArgs& a) {
        return dpow(b, a.args[0], a.tangents[0], a.attrs.real("p"));
      },
      .element = [](const Attrs& a) { return record_element<1>(pow_math(a)); },
  };
}

// nodiff (stop_gradient): the value of x, through which no gradient flows.
Primitive nodiff_p() {
  return {
      .name = "nodiff",
      .infer = [](std::span<const VarType> in, const Attrs&) { return in[0]; },
      .eager = [](std::span<const Tensor> in, const Attrs&) { return in[0]; },  // tensors are immutable
      .adjoint = no_adjoint(),
      .any_dtype = true,
      .tangent = no_tangent,
      .element = [](const Attrs&) { return record_element<1>([](auto&, auto x) { return x; }); },
  };
}

// cast(x, dtype): f32 <-> f64 rounds as C++ does and passes gradients back (cast to
// the argument's dtype); to i64 truncates toward zero (NaN, infinities and values
// out of range are errors) and, like from i64, passes no gradient.
Tensor cast_eager(std::span<const Tensor> in, const Attrs& a) {
  const DType to = a.dtype("dtype");
  const Tensor& x = in[0];
  if (to == x.dtype()) return x;
  if (to != DType::i64) return tensor(x.values(), x.shape(), to);  // i64 -> float exact up to 2^53
  Tensor out(DType::i64, x.shape());
  const std::vector<double> v = x.values();
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!(v[i] >= -9223372036854775808.0 && v[i] < 9223372036854775808.0))  // [-2^63, 2^63)
      throw Error(fmt::format("cast: element {} of {} is {}, which has no i64 value", i, type_str(x.dtype(), x.shape()), v[i]));
    out.mutable_data<int64_t>()[i] = static_cast<int64_t>(v[i]);
  }
  return out;
}
bool float_pair(TapeBuilder& b, Var x, const Attrs& a) { return is_float(b.type(x).dtype) && is_float(a.dtype("dtype")); }
Primitive cast_p() {
  return {
      .name = "cast",
      .attrs = {{"dtype", AttrKind::dtype}},
      .infer = [](std::span<const VarType> in, const Attrs& a) { return VarType{a.dtype("dtype"), in[0].shape}; },
      .eager = cast_eager,
      .adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
        if (!float_pair(b, a.args[0], a.attrs)) return std::vector<Var>{kNoVar};
        return std::vector<Var>{b.call(prims::cast(), {a.dout}, {{"dtype", b.type(a.args[0]).dtype}})};
      },
      .any_dtype = true,
      .tangent = [](TapeBuilder& b, const TangentArgs& a) {
        if (!float_pair(b, a.args[0], a.attrs)) return kNoVar;
        return b.call(prims::cast(), {a.tangents[0]}, a.attrs);
      },
      // Between f32 and f64 a generated loop converts as it reads (the element function is
      // the identity; the code generator converts an argument of another float dtype).
      // Casts from or to i64 call cast_eager (to i64 checks the range).
      .structure = Structure::elementwise,
      .element = [](const Attrs&) { return record_element<1>([](auto&, auto x) { return x; }); },
      .batch = [](TapeBuilder& b, const BatchArgs& a) -> Results<Var> { return b.call(prims::cast(), {a.args[0]}, a.attrs); },
  };
}

}  // namespace

void add_unary(std::vector<Primitive>& t) {
  t.insert(t.end(), {neg_p(), exp_p(), log_p(), sin_p(), cos_p(), tanh_p(), sigmoid_p(), sqrt_p(), square_p(),
                     sign_p(), abs_p(), relu_p(), log1p_p(), expm1_p(), softplus_p(), erf_p(), lgamma_p(),
                     digamma_p(), trigamma_p(), atan_p(), asinh_p(), clamp_p(), nodiff_p(), cast_p(), pow_p(),
                     tan_p(), asin_p(), acos_p(), sinh_p(), cosh_p(), cbrt_p(), log2_p(), log10_p(), floor_p(),
                     ceil_p(), round_p()});
}

}  // namespace reel::prims
