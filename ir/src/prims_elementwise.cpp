// Elementwise primitives: add sub mul div maximum minimum and the comparisons lt le gt
// ge eq ne (NumPy broadcasting), where(c, a, b), neg exp log sin cos tanh sigmoid sqrt
// square sign abs relu log1p expm1 softplus erf lgamma digamma trigamma nodiff,
// pow(x, p), clamp(x, lo, hi).
#include <fmt/format.h>

#include "prims.hpp"
#include "reel/elementwise.hpp"
#include "reel/kernels.hpp"

namespace reel::prims {

namespace {

VarType infer_binary(const char* op, std::span<const VarType> in) {
  expect_same_dtype(op, in[0], in[1]);
  return {in[0].dtype, broadcast_shapes(in[0].shape, in[1].shape, op)};
}

// `math(e, a, b)` is the element function, written once: the eager kernel runs it
// with e = NumMath<T>, and it is recorded as the element rule (e = ElementRecorder).
template <class Math>
Primitive binary(const char* name, Math math,
                 std::function<std::vector<Var>(TapeBuilder&, const AdjointArgs&)> adjoint) {
  Primitive p;
  p.name = name;
  p.arity = 2;
  p.infer = [name](std::span<const VarType> in, const Attrs&) { return infer_binary(name, in); };
  p.eager = [math](std::span<const Tensor> in, const Attrs&) {
    return kernels::map_binary(in[0], in[1], [&](const auto& e, auto a, auto b) { return math(e, a, b); });
  };
  p.adjoint = std::move(adjoint);
  p.structure = Structure::elementwise;
  p.element = [math](const Attrs&) { return record_element<2>(math); };
  return p;
}

// Adjoint of an argument that was broadcast: sum back down to its shape.
Var unbroadcast(TapeBuilder& b, Var adj, Var arg) { return b.sum_to(adj, b.type(arg).shape); }

template <class Math>
Primitive unary(const char* name, Math math, std::function<Var(TapeBuilder&, Var x, Var y, Var dy)> adjoint) {
  Primitive p;
  p.name = name;
  p.arity = 1;
  p.infer = [](std::span<const VarType> in, const Attrs&) { return in[0]; };
  p.eager = [math](std::span<const Tensor> in, const Attrs&) {
    return kernels::map_unary(in[0], [&](const auto& e, auto x) { return math(e, x); });
  };
  p.adjoint = [adjoint](TapeBuilder& b, const AdjointArgs& a) {
    return std::vector<Var>{adjoint(b, a.args[0], a.out, a.dout)};
  };
  // An elementwise function of one argument: f'(x) * t is the adjoint rule with the
  // tangent in the place of the incoming adjoint.
  p.tangent = [adjoint](TapeBuilder& b, const TangentArgs& a) {
    return adjoint(b, a.args[0], a.out, a.tangents[0]);
  };
  p.structure = Structure::elementwise;
  p.element = [math](const Attrs&) { return record_element<1>(math); };
  return p;
}

Var one_minus(TapeBuilder& b, Var y) { return b.sub(b.scalar(1.0, b.type(y).dtype), y); }
Var constant_like(TapeBuilder& b, double v, Var like) { return b.scalar(v, b.type(like).dtype); }
// 1 where `op`(x, c) holds, else 0 (a comparison primitive; no gradient flows through it).
Var compare(TapeBuilder& b, const char* op, Var x, double c) { return b.call(op, {x, constant_like(b, c, x)}); }

// A comparison: 1 or 0 in the operands' dtype, broadcasting; no gradient, no tangent.
template <class Math>
Primitive comparison(const char* name, Math math) {
  Primitive p = binary(name, math, [](TapeBuilder&, const AdjointArgs&) { return std::vector<Var>{kNoVar, kNoVar}; });
  p.tangent = [](TapeBuilder&, const TangentArgs&) { return kNoVar; };
  return p;
}

// The weight of a's side in maximum(a, b) (greater: 1; tie: 1/2; less: 0), with `gt`,
// or in minimum with `lt`.
Var side_weight(TapeBuilder& b, const char* wins, Var x, Var y) {
  return b.add(b.call(wins, {x, y}), b.mul(b.call("eq", {x, y}), 0.5));
}

// maximum / minimum: d/da = w, d/db = 1 - w with w = side_weight (ties split evenly).
Primitive extremum(const char* name, const char* wins, bool is_max) {
  auto math = [is_max](auto& e, auto a, auto c) { return is_max ? e.max(a, c) : e.min(a, c); };
  Primitive p = binary(name, math, [wins](TapeBuilder& b, const AdjointArgs& a) {
    const Var w = side_weight(b, wins, a.args[0], a.args[1]);
    return std::vector<Var>{a.needs[0] ? unbroadcast(b, b.mul(a.dout, w), a.args[0]) : kNoVar,
                            a.needs[1] ? unbroadcast(b, b.mul(a.dout, one_minus(b, w)), a.args[1]) : kNoVar};
  });
  p.commutative = true;
  p.tangent = [wins](TapeBuilder& b, const TangentArgs& a) {
    const Var w = side_weight(b, wins, a.args[0], a.args[1]);
    const Shape shape = b.type(a.out).shape;  // a copy: building appends to the tape
    const Var ta = a.tangents[0] == kNoVar ? kNoVar : b.broadcast_to(b.mul(a.tangents[0], w), shape);
    const Var tb = a.tangents[1] == kNoVar ? kNoVar : b.broadcast_to(b.mul(a.tangents[1], one_minus(b, w)), shape);
    return ta == kNoVar ? tb : tb == kNoVar ? ta : b.add(ta, tb);
  };
  return p;
}

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

}  // namespace

void add_elementwise(std::vector<Primitive>& t) {

  t.push_back(binary(
      "add", [](auto& e, auto a, auto b) { return e.add(a, b); },
      [](TapeBuilder& b, const AdjointArgs& a) {
        return std::vector<Var>{a.needs[0] ? unbroadcast(b, a.dout, a.args[0]) : kNoVar,
                                a.needs[1] ? unbroadcast(b, a.dout, a.args[1]) : kNoVar};
      }));
  t.back().left_identity = t.back().right_identity = -0.0;
  t.back().commutative = true;
  t.back().tangent = [](TapeBuilder& b, const TangentArgs& a) {
    const Var ta = a.tangents[0], tb = a.tangents[1];
    if (ta == kNoVar) return b.broadcast_to(tb, b.type(a.out).shape);
    if (tb == kNoVar) return b.broadcast_to(ta, b.type(a.out).shape);
    return b.add(ta, tb);
  };
  t.push_back(binary(
      "sub", [](auto& e, auto a, auto b) { return e.sub(a, b); },
      [](TapeBuilder& b, const AdjointArgs& a) {
        return std::vector<Var>{
            a.needs[0] ? unbroadcast(b, a.dout, a.args[0]) : kNoVar,
            a.needs[1] ? unbroadcast(b, b.neg(a.dout), a.args[1]) : kNoVar};
      }));
  t.back().right_identity = 0.0;
  t.back().tangent = [](TapeBuilder& b, const TangentArgs& a) {
    const Var ta = a.tangents[0], tb = a.tangents[1];
    if (ta == kNoVar) return b.broadcast_to(b.neg(tb), b.type(a.out).shape);
    if (tb == kNoVar) return b.broadcast_to(ta, b.type(a.out).shape);
    return b.sub(ta, tb);
  };
  t.push_back(binary(
      "mul", [](auto& e, auto a, auto b) { return e.mul(a, b); },
      [](TapeBuilder& b, const AdjointArgs& a) {
        return std::vector<Var>{
            a.needs[0] ? unbroadcast(b, b.mul(a.dout, a.args[1]), a.args[0]) : kNoVar,
            a.needs[1] ? unbroadcast(b, b.mul(a.dout, a.args[0]), a.args[1]) : kNoVar};
      }));
  t.back().left_identity = t.back().right_identity = 1.0;
  t.back().commutative = true;
  t.back().tangent = [](TapeBuilder& b, const TangentArgs& a) {
    const Var ta = a.tangents[0], tb = a.tangents[1];
    const Var da = ta == kNoVar ? kNoVar : b.mul(ta, a.args[1]);
    const Var db = tb == kNoVar ? kNoVar : b.mul(a.args[0], tb);
    return da == kNoVar ? db : db == kNoVar ? da : b.add(da, db);
  };
  t.push_back(binary(
      "div", [](auto& e, auto a, auto b) { return e.div(a, b); },
      [](TapeBuilder& b, const AdjointArgs& a) {
        // d(a/b)/db = -(a/b)/b, reusing the forward result.
        return std::vector<Var>{
            a.needs[0] ? unbroadcast(b, b.div(a.dout, a.args[1]), a.args[0]) : kNoVar,
            a.needs[1]
                ? unbroadcast(b, b.neg(b.mul(a.dout, b.div(a.out, a.args[1]))), a.args[1])
                : kNoVar};
      }));
  t.back().right_identity = 1.0;
  t.back().tangent = [](TapeBuilder& b, const TangentArgs& a) {
    // d(a/b) = ta/b - (a/b) * tb/b, reusing the forward result.
    const Var ta = a.tangents[0], tb = a.tangents[1];
    const Var da = ta == kNoVar ? kNoVar : b.broadcast_to(b.div(ta, a.args[1]), b.type(a.out).shape);
    const Var db = tb == kNoVar ? kNoVar : b.mul(a.out, b.div(tb, a.args[1]));
    return db == kNoVar ? da : da == kNoVar ? b.neg(db) : b.sub(da, db);
  };

  t.push_back(unary(
      "neg", [](auto& e, auto x) { return e.neg(x); },
      [](TapeBuilder& b, Var, Var, Var dy) { return b.neg(dy); }));
  t.back().involution = true;
  t.push_back(unary(
      "exp", [](auto& e, auto x) { return e.exp(x); },
      [](TapeBuilder& b, Var, Var y, Var dy) { return b.mul(dy, y); }));
  t.push_back(unary(
      "log", [](auto& e, auto x) { return e.log(x); },
      [](TapeBuilder& b, Var x, Var, Var dy) { return b.div(dy, x); }));
  t.push_back(unary(
      "sin", [](auto& e, auto x) { return e.sin(x); },
      [](TapeBuilder& b, Var x, Var, Var dy) { return b.mul(dy, b.call("cos", {x})); }));
  t.push_back(unary(
      "cos", [](auto& e, auto x) { return e.cos(x); },
      [](TapeBuilder& b, Var x, Var, Var dy) { return b.neg(b.mul(dy, b.call("sin", {x}))); }));
  t.push_back(unary(
      "tanh", [](auto& e, auto x) { return e.tanh(x); },
      [](TapeBuilder& b, Var, Var y, Var dy) {
        return b.mul(dy, one_minus(b, b.call("square", {y})));
      }));
  t.push_back(unary(
      "sigmoid",
      [](auto& e, auto x) {
        return e.div(e.constant(1.0), e.add(e.constant(1.0), e.exp(e.neg(x))));
      },
      [](TapeBuilder& b, Var, Var y, Var dy) { return b.mul(dy, b.mul(y, one_minus(b, y))); }));
  t.push_back(unary(
      "sqrt", [](auto& e, auto x) { return e.sqrt(x); },
      [](TapeBuilder& b, Var, Var y, Var dy) { return b.div(dy, b.mul(y, 2.0)); }));
  t.push_back(unary(
      "square", [](auto& e, auto x) { return e.mul(x, x); },
      [](TapeBuilder& b, Var x, Var, Var dy) { return b.mul(dy, b.mul(x, 2.0)); }));

  // sign: -1, 0 or 1 (NaN for NaN, -0 and +0 give 0); its derivative is zero wherever
  // it exists, and taken as zero at 0.
  t.push_back(unary(
      "sign",
      [](auto& e, auto x) {
        return e.select(e.ne(x, x), x, e.sub(e.gt(x, e.constant(0)), e.lt(x, e.constant(0))));
      },
      [](TapeBuilder&, Var, Var, Var) { return kNoVar; }));
  // abs: the gradient at 0 is 0 (the subgradient's midpoint, as in JAX and PyTorch).
  t.push_back(unary(
      "abs", [](auto& e, auto x) { return e.abs(x); },
      [](TapeBuilder& b, Var x, Var, Var dy) { return b.mul(dy, b.call("sign", {x})); }));

  // relu: the gradient at 0 is 0.
  t.push_back(unary(
      "relu", [](auto& e, auto x) { return e.max(x, e.constant(0)); },
      [](TapeBuilder& b, Var x, Var, Var dy) { return b.mul(dy, compare(b, "gt", x, 0)); }));
  t.push_back(unary(
      "log1p", [](auto& e, auto x) { return e.log1p(x); },
      [](TapeBuilder& b, Var x, Var, Var dy) { return b.div(dy, b.add(x, constant_like(b, 1, x))); }));
  t.push_back(unary(
      "expm1", [](auto& e, auto x) { return e.expm1(x); },
      [](TapeBuilder& b, Var, Var y, Var dy) { return b.mul(dy, b.add(y, constant_like(b, 1, y))); }));
  // softplus(x) = log(1 + e^x), as max(x, 0) + log1p(e^-|x|) (no overflow); derivative sigmoid(x).
  t.push_back(unary(
      "softplus",
      [](auto& e, auto x) { return e.add(e.max(x, e.constant(0)), e.log1p(e.exp(e.neg(e.abs(x))))); },
      [](TapeBuilder& b, Var x, Var, Var dy) { return b.mul(dy, b.call("sigmoid", {x})); }));
  t.push_back(unary(
      "erf", [](auto& e, auto x) { return e.erf(x); },
      [](TapeBuilder& b, Var x, Var, Var dy) {  // 2/sqrt(pi) e^(-x^2)
        return b.mul(dy, b.mul(b.call("exp", {b.neg(b.call("square", {x}))}), 2.0 / std::sqrt(kPi)));
      }));
  t.push_back(unary(
      "lgamma", [](auto& e, auto x) { return e.lgamma(x); },
      [](TapeBuilder& b, Var x, Var, Var dy) { return b.mul(dy, b.call("digamma", {x})); }));
  t.push_back(unary(
      "digamma", [](auto& e, auto x) { return polygamma(e, x, 0); },
      [](TapeBuilder& b, Var x, Var, Var dy) { return b.mul(dy, b.call("trigamma", {x})); }));
  // trigamma: digamma's derivative. Its own derivative rules are missing on purpose
  // (a third derivative of lgamma): grad and jvp say so, naming it.
  t.push_back(unary("trigamma", [](auto& e, auto x) { return polygamma(e, x, 1); }, nullptr));
  t.back().adjoint = nullptr;
  t.back().tangent = nullptr;

  // Comparisons: 1 where the relation holds, else 0 (NaN compares false, except !=).
  t.push_back(comparison("lt", [](auto& e, auto a, auto c) { return e.lt(a, c); }));
  t.push_back(comparison("le", [](auto& e, auto a, auto c) { return e.le(a, c); }));
  t.push_back(comparison("gt", [](auto& e, auto a, auto c) { return e.gt(a, c); }));
  t.push_back(comparison("ge", [](auto& e, auto a, auto c) { return e.ge(a, c); }));
  t.push_back(comparison("eq", [](auto& e, auto a, auto c) { return e.eq(a, c); }));
  t.back().commutative = true;
  t.push_back(comparison("ne", [](auto& e, auto a, auto c) { return e.ne(a, c); }));
  t.back().commutative = true;
  // maximum / minimum: NaN if either is, +0 above -0; on a tie the gradient is split
  // evenly.
  t.push_back(extremum("maximum", "gt", true));
  t.push_back(extremum("minimum", "lt", false));

  // clamp(x, lo, hi) = min(max(x, lo), hi); gradient 1 for lo <= x <= hi (bounds
  // included), else 0.
  Primitive clamp;
  clamp.name = "clamp";
  clamp.arity = 1;
  clamp.attrs = {{"lo", AttrKind::real}, {"hi", AttrKind::real}};
  clamp.infer = [](std::span<const VarType> in, const Attrs& a) {
    if (!(a.real("lo") <= a.real("hi")))  // also NaN bounds
      throw Error(fmt::format("clamp: expected lo <= hi, got lo={} and hi={}", a.real("lo"), a.real("hi")));
    return in[0];
  };
  auto clamp_math = [](double lo, double hi) {
    return [lo, hi](auto& e, auto x) { return e.min(e.max(x, e.constant(lo)), e.constant(hi)); };
  };
  clamp.eager = [clamp_math](std::span<const Tensor> in, const Attrs& a) {
    return kernels::map_unary(in[0], clamp_math(a.real("lo"), a.real("hi")));
  };
  auto inside = [](TapeBuilder& b, Var x, const Attrs& a) {
    return b.mul(compare(b, "ge", x, a.real("lo")), compare(b, "le", x, a.real("hi")));
  };
  clamp.adjoint = [inside](TapeBuilder& b, const AdjointArgs& a) {
    return std::vector<Var>{b.mul(a.dout, inside(b, a.args[0], a.attrs))};
  };
  clamp.tangent = [inside](TapeBuilder& b, const TangentArgs& a) {
    return b.mul(a.tangents[0], inside(b, a.args[0], a.attrs));
  };
  clamp.element = [clamp_math](const Attrs& a) { return record_element<1>(clamp_math(a.real("lo"), a.real("hi"))); };
  t.push_back(std::move(clamp));

  // where(c, a, b): a where c != 0, else b; the three broadcast together. No gradient
  // flows into c; a's adjoint is dy where c holds, b's where it does not.
  Primitive where;
  where.name = "where";
  where.arity = 3;
  where.infer = [](std::span<const VarType> in, const Attrs&) {
    expect_same_dtype("where", in[0], in[1]);
    expect_same_dtype("where", in[1], in[2]);
    return VarType{in[1].dtype, broadcast_shapes(broadcast_shapes(in[0].shape, in[1].shape, "where"), in[2].shape, "where")};
  };
  auto select = [](auto& e, auto c, auto x, auto y) { return e.select(c, x, y); };
  where.eager = [select](std::span<const Tensor> in, const Attrs&) {
    return kernels::map_ternary(in[0], in[1], in[2], select);
  };
  where.adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
    const Var zero = constant_like(b, 0, a.dout);
    return std::vector<Var>{
        kNoVar,
        a.needs[1] ? unbroadcast(b, b.call("where", {a.args[0], a.dout, zero}), a.args[1]) : kNoVar,
        a.needs[2] ? unbroadcast(b, b.call("where", {a.args[0], zero, a.dout}), a.args[2]) : kNoVar};
  };
  where.tangent = [](TapeBuilder& b, const TangentArgs& a) {
    if (a.tangents[1] == kNoVar && a.tangents[2] == kNoVar) return kNoVar;
    const Var zero = constant_like(b, 0, a.out);
    const Var t = b.call("where", {a.args[0], a.tangents[1] == kNoVar ? zero : a.tangents[1],
                                   a.tangents[2] == kNoVar ? zero : a.tangents[2]});
    return b.broadcast_to(t, Shape(b.type(a.out).shape));
  };
  where.element = [select](const Attrs&) { return record_element<3>(select); };
  t.push_back(std::move(where));

  // cast(x, dtype): f32 <-> f64 rounds as C++ does and passes gradients back (cast to
  // the argument's dtype); to i64 truncates toward zero (NaN, infinities and values
  // out of range are errors) and, like from i64, passes no gradient.
  Primitive cast;
  cast.name = "cast";
  cast.arity = 1;
  cast.attrs = {{"dtype", AttrKind::dtype}};
  cast.any_dtype = true;
  cast.structure = Structure::opaque;
  cast.infer = [](std::span<const VarType> in, const Attrs& a) { return VarType{a.dtype("dtype"), in[0].shape}; };
  cast.eager = [](std::span<const Tensor> in, const Attrs& a) {
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
  };
  auto float_pair = [](TapeBuilder& b, Var x, const Attrs& a) {
    return is_float(b.type(x).dtype) && is_float(a.dtype("dtype"));
  };
  cast.adjoint = [float_pair](TapeBuilder& b, const AdjointArgs& a) {
    if (!float_pair(b, a.args[0], a.attrs)) return std::vector<Var>{kNoVar};
    return std::vector<Var>{b.call("cast", {a.dout}, {{"dtype", b.type(a.args[0]).dtype}})};
  };
  cast.tangent = [float_pair](TapeBuilder& b, const TangentArgs& a) {
    if (!float_pair(b, a.args[0], a.attrs)) return kNoVar;
    return b.call("cast", {a.tangents[0]}, a.attrs);
  };
  t.push_back(std::move(cast));

  // nodiff (stop_gradient): the value of x, through which no gradient flows.
  Primitive nodiff;
  nodiff.name = "nodiff";
  nodiff.arity = 1;
  nodiff.infer = [](std::span<const VarType> in, const Attrs&) { return in[0]; };
  nodiff.eager = [](std::span<const Tensor> in, const Attrs&) { return in[0]; };  // tensors are immutable
  nodiff.adjoint = [](TapeBuilder&, const AdjointArgs&) { return std::vector<Var>{kNoVar}; };
  nodiff.tangent = [](TapeBuilder&, const TangentArgs&) { return kNoVar; };
  nodiff.structure = Structure::elementwise;
  nodiff.any_dtype = true;
  nodiff.element = [](const Attrs&) { return record_element<1>([](auto&, auto x) { return x; }); };
  t.push_back(std::move(nodiff));

  Primitive pow;
  pow.name = "pow";
  pow.arity = 1;
  pow.attrs = {{"p", AttrKind::real}};
  pow.infer = [](std::span<const VarType> in, const Attrs&) { return in[0]; };
  pow.eager = [](std::span<const Tensor> in, const Attrs& a) {
    const double p = a.real("p");
    return kernels::map_unary(in[0], [p](const auto& e, auto x) { return e.pow(x, p); });
  };
  // d/dx x^p = p x^(p-1): zero for p = 0 (not 0 * x^-1, which is NaN at 0), and 1 for
  // p = 1 (no pow call).
  auto dpow = [](TapeBuilder& b, Var x, Var d, double p) {
    if (p == 0.0) return kNoVar;
    if (p == 1.0) return d;
    return b.mul(d, b.mul(b.call("pow", {x}, {{"p", p - 1.0}}), p));
  };
  pow.adjoint = [dpow](TapeBuilder& b, const AdjointArgs& a) {
    return std::vector<Var>{dpow(b, a.args[0], a.dout, a.attrs.real("p"))};
  };
  pow.tangent = [dpow](TapeBuilder& b, const TangentArgs& a) {
    return dpow(b, a.args[0], a.tangents[0], a.attrs.real("p"));
  };
  pow.structure = Structure::elementwise;
  pow.element = [](const Attrs& a) {
    const double p = a.real("p");
    return record_element<1>([p](auto& e, auto x) { return e.pow(x, p); });
  };
  t.push_back(std::move(pow));
}

}  // namespace reel::prims
