// Elementwise primitives of several arguments (NumPy broadcasting): add sub mul div,
// hypot, the comparisons lt le gt ge eq ne, maximum minimum, where(c, a, b), atan2(y, x),
// copysign(x, y) and powv(x, y) = x^y.
#include "prims_elementwise.hpp"

namespace reel::prims {

VarType infer_binary(const char* op, std::span<const VarType> in) {
  expect_same_dtype(op, in[0], in[1]);
  return {in[0].dtype, broadcast_shapes(in[0].shape, in[1].shape, op)};
}

Var unbroadcast(TapeBuilder& b, Var adj, Var arg) { return b.sum_to(adj, b.type(arg).shape); }
Var one_minus(TapeBuilder& b, Var y) { return b.sub(b.scalar(1.0, b.type(y).dtype), y); }
Var compare(TapeBuilder& b, const Primitive& op, Var x, double c) { return b.call(op, {x, constant_like(b, c, x)}); }

namespace {

// The sum of two tangent terms, either of which may be zero (kNoVar).
Var sum_terms(TapeBuilder& b, Var x, Var y) { return x == kNoVar ? y : y == kNoVar ? x : b.add(x, y); }

Primitive add_p() {
  return binary("add", [](auto& e, auto a, auto b) { return e.add(a, b); },
                {.adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
                   return std::vector<Var>{a.needs[0] ? unbroadcast(b, a.dout, a.args[0]) : kNoVar,
                                           a.needs[1] ? unbroadcast(b, a.dout, a.args[1]) : kNoVar};
                 },
                 .tangent = [](TapeBuilder& b, const TangentArgs& a) {
                   const Var ta = a.tangents[0], tb = a.tangents[1];
                   if (ta == kNoVar) return b.broadcast_to(tb, b.type(a.out).shape);
                   if (tb == kNoVar) return b.broadcast_to(ta, b.type(a.out).shape);
                   return b.add(ta, tb);
                 },
                 .commutative = true, .left_identity = -0.0, .right_identity = -0.0});
}

Primitive sub_p() {
  return binary("sub", [](auto& e, auto a, auto b) { return e.sub(a, b); },
                {.adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
                   return std::vector<Var>{a.needs[0] ? unbroadcast(b, a.dout, a.args[0]) : kNoVar,
                                           a.needs[1] ? unbroadcast(b, b.neg(a.dout), a.args[1]) : kNoVar};
                 },
                 .tangent = [](TapeBuilder& b, const TangentArgs& a) {
                   const Var ta = a.tangents[0], tb = a.tangents[1];
                   if (ta == kNoVar) return b.broadcast_to(b.neg(tb), b.type(a.out).shape);
                   if (tb == kNoVar) return b.broadcast_to(ta, b.type(a.out).shape);
                   return b.sub(ta, tb);
                 },
                 .right_identity = 0.0});
}

Primitive mul_p() {
  return binary("mul", [](auto& e, auto a, auto b) { return e.mul(a, b); },
                {.adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
                   return std::vector<Var>{a.needs[0] ? unbroadcast(b, b.mul(a.dout, a.args[1]), a.args[0]) : kNoVar,
                                           a.needs[1] ? unbroadcast(b, b.mul(a.dout, a.args[0]), a.args[1]) : kNoVar};
                 },
                 .tangent = [](TapeBuilder& b, const TangentArgs& a) {
                   const Var ta = a.tangents[0], tb = a.tangents[1];
                   const Var da = ta == kNoVar ? kNoVar : b.mul(ta, a.args[1]);
                   return sum_terms(b, da, tb == kNoVar ? kNoVar : b.mul(a.args[0], tb));
                 },
                 .commutative = true, .left_identity = 1.0, .right_identity = 1.0});
}

// d(a/b)/db = -(a/b)/b, reusing the forward result, in both rules.
Primitive div_p() {
  return binary("div", [](auto& e, auto a, auto b) { return e.div(a, b); },
                {.adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
                   return std::vector<Var>{
                       a.needs[0] ? unbroadcast(b, b.div(a.dout, a.args[1]), a.args[0]) : kNoVar,
                       a.needs[1] ? unbroadcast(b, b.neg(b.mul(a.dout, b.div(a.out, a.args[1]))), a.args[1])
                                  : kNoVar};
                 },
                 .tangent = [](TapeBuilder& b, const TangentArgs& a) {
                   const Var ta = a.tangents[0], tb = a.tangents[1];
                   const Var da = ta == kNoVar ? kNoVar : b.broadcast_to(b.div(ta, a.args[1]), b.type(a.out).shape);
                   const Var db = tb == kNoVar ? kNoVar : b.mul(a.out, b.div(tb, a.args[1]));
                   return db == kNoVar ? da : da == kNoVar ? b.neg(db) : b.sub(da, db);
                 },
                 .right_identity = 1.0});
}

// hypot(a, b) = sqrt(a^2 + b^2): d/da = a / h, d/db = b / h, taken as 0 at a = b = 0
// (the quotient's denominator is h + (h == 0), so 0 / 1 there).
Var over_hypot(TapeBuilder& b, Var x, Var h) { return b.div(x, b.add(h, compare(b, prims::eq(), h, 0))); }
Primitive hypot_p() {
  return binary("hypot", [](auto& e, auto a, auto b) { return e.hypot(a, b); },
                {.adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
                   std::vector<Var> adj(2, kNoVar);
                   for (int i : {0, 1})
                     if (a.needs[i]) adj[i] = unbroadcast(b, b.mul(a.dout, over_hypot(b, a.args[i], a.out)), a.args[i]);
                   return adj;
                 },
                 .tangent = [](TapeBuilder& b, const TangentArgs& a) {
                   Var t[2] = {kNoVar, kNoVar};
                   for (int i : {0, 1})
                     if (a.tangents[i] != kNoVar) t[i] = b.mul(a.tangents[i], over_hypot(b, a.args[i], a.out));
                   return sum_terms(b, t[0], t[1]);
                 },
                 .commutative = true});
}

// atan2(y, x), the angle of the point (x, y): d/dy = x / r^2, d/dx = -y / r^2 with r =
// hypot(y, x), each divided by r twice (no overflow of x^2 + y^2), with hypot's guard:
// 0 at x = y = 0.
Var over_hypot_squared(TapeBuilder& b, Var v, Var r) { return over_hypot(b, over_hypot(b, v, r), r); }
// The partial derivative of atan2 by argument i, at (y, x) = args.
Var datan2(TapeBuilder& b, std::span<const Var> args, int i) {
  const Var r = b.call(prims::hypot(), {args[0], args[1]});
  const Var q = over_hypot_squared(b, args[1 - i], r);
  return i == 0 ? q : b.neg(q);
}
Primitive atan2_p() {
  return binary("atan2", [](auto& e, auto y, auto x) { return e.atan2(y, x); },
                {.adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
                   std::vector<Var> adj(2, kNoVar);
                   for (int i : {0, 1})
                     if (a.needs[i]) adj[i] = unbroadcast(b, b.mul(a.dout, datan2(b, a.args, i)), a.args[i]);
                   return adj;
                 },
                 .tangent = [](TapeBuilder& b, const TangentArgs& a) {
                   Var t[2] = {kNoVar, kNoVar};
                   for (int i : {0, 1})
                     if (a.tangents[i] != kNoVar) t[i] = b.mul(a.tangents[i], datan2(b, a.args, i));
                   return sum_terms(b, t[0], t[1]);
                 }});
}

// copysign(x, y): |x| with y's sign bit. d/dx = copysign(1, x) copysign(1, y) (the sign
// bits, so +-1 also at zeros); d/dy = 0 (only y's sign bit is read).
Var dcopysign(TapeBuilder& b, Var x, Var y) {
  const Var one = constant_like(b, 1, x);
  return b.mul(b.call(prims::copysign(), {one, x}), b.call(prims::copysign(), {one, y}));
}
Primitive copysign_p() {
  return binary("copysign", [](auto& e, auto x, auto y) { return e.copysign(x, y); },
                {.adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
                   if (!a.needs[0]) return std::vector<Var>{kNoVar, kNoVar};
                   return std::vector<Var>{unbroadcast(b, b.mul(a.dout, dcopysign(b, a.args[0], a.args[1])), a.args[0]),
                                           kNoVar};
                 },
                 .tangent = [](TapeBuilder& b, const TangentArgs& a) {
                   if (a.tangents[0] == kNoVar) return kNoVar;
                   return b.mul(a.tangents[0], dcopysign(b, a.args[0], a.args[1]));
                 }});
}

// powv(x, y) = x^y, both tensors. d/dx = y x^(y-1), taken as 0 where y = 0 (not
// 0 * x^-1, NaN at x = 0); d/dy = x^y log x, taken as 0 where x = 0 (not 0 * -inf, so
// powv(0, y > 0) has gradient 0 in y).
Var zero_where_zero(TapeBuilder& b, Var at, Var v) {
  return b.call(prims::where(), {compare(b, prims::eq(), at, 0), constant_like(b, 0, v), v});
}
Var dpowv(TapeBuilder& b, Var x, Var y, Var out, int i) {
  if (i == 0) return zero_where_zero(b, y, b.mul(y, b.call(prims::powv(), {x, b.sub(y, constant_like(b, 1, y))})));
  return zero_where_zero(b, x, b.mul(out, b.call(prims::log(), {x})));
}
Primitive powv_p() {
  return binary("powv", [](auto& e, auto x, auto y) { return e.powv(x, y); },
                {.adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
                   std::vector<Var> adj(2, kNoVar);
                   for (int i : {0, 1})
                     if (a.needs[i])
                       adj[i] = unbroadcast(b, b.mul(a.dout, dpowv(b, a.args[0], a.args[1], a.out, i)), a.args[i]);
                   return adj;
                 },
                 .tangent = [](TapeBuilder& b, const TangentArgs& a) {
                   Var t[2] = {kNoVar, kNoVar};
                   for (int i : {0, 1})
                     if (a.tangents[i] != kNoVar) t[i] = b.mul(a.tangents[i], dpowv(b, a.args[0], a.args[1], a.out, i));
                   return sum_terms(b, t[0], t[1]);
                 }});
}

// A comparison: 1 where the relation holds, else 0, in the operands' dtype (NaN
// compares false, except !=); no gradient, no tangent.
template <class Math>
Primitive comparison(const char* name, Math math, bool commutative = false) {
  return binary(name, math, {.adjoint = no_adjoint(2), .tangent = no_tangent, .commutative = commutative});
}

// The weight of a's side in maximum(a, b) (greater: 1; tie: 1/2; less: 0), with `gt`,
// or in minimum with `lt`.
Var side_weight(TapeBuilder& b, Handle wins, Var x, Var y) {
  return b.add(b.call(wins(), {x, y}), b.mul(b.call(prims::eq(), {x, y}), 0.5));
}

// maximum / minimum: NaN if either is, +0 above -0; d/da = w, d/db = 1 - w with w =
// side_weight (ties split evenly).
Primitive extremum(const char* name, Handle wins, bool is_max) {
  auto math = [is_max](auto& e, auto a, auto c) { return is_max ? e.max(a, c) : e.min(a, c); };
  return binary(
      name, math,
      {.adjoint = [wins](TapeBuilder& b, const AdjointArgs& a) {
         const Var w = side_weight(b, wins, a.args[0], a.args[1]);
         return std::vector<Var>{a.needs[0] ? unbroadcast(b, b.mul(a.dout, w), a.args[0]) : kNoVar,
                                 a.needs[1] ? unbroadcast(b, b.mul(a.dout, one_minus(b, w)), a.args[1]) : kNoVar};
       },
       .tangent = [wins](TapeBuilder& b, const TangentArgs& a) {
         const Var w = side_weight(b, wins, a.args[0], a.args[1]);
         const Shape shape = b.type(a.out).shape;  // a copy: building appends to the tape
         const Var ta = a.tangents[0] == kNoVar ? kNoVar : b.broadcast_to(b.mul(a.tangents[0], w), shape);
         return sum_terms(b, ta, a.tangents[1] == kNoVar ? kNoVar
                                                         : b.broadcast_to(b.mul(a.tangents[1], one_minus(b, w)), shape));
       },
       .commutative = true});
}

// where(c, a, b): a where c != 0, else b; the three broadcast together. No gradient
// flows into c; a's adjoint is dy where c holds, b's where it does not.
Primitive where_p() {
  auto select = [](auto& e, auto c, auto x, auto y) { return e.select(c, x, y); };
  return {
      .name = "where",
      .arity = 3,
      .infer = [](std::span<const VarType> in, const Attrs&) {
        expect_same_dtype("where", in[0], in[1]);
        expect_same_dtype("where", in[1], in[2]);
        return VarType{in[1].dtype,
                       broadcast_shapes(broadcast_shapes(in[0].shape, in[1].shape, "where"), in[2].shape, "where")};
      },
      .eager = [select](std::span<const Tensor> in, const Attrs&) {
        return kernels::map_ternary(in[0], in[1], in[2], select);
      },
      .adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
        const Var zero = constant_like(b, 0, a.dout);
        return std::vector<Var>{
            kNoVar, a.needs[1] ? unbroadcast(b, b.call(prims::where(), {a.args[0], a.dout, zero}), a.args[1]) : kNoVar,
            a.needs[2] ? unbroadcast(b, b.call(prims::where(), {a.args[0], zero, a.dout}), a.args[2]) : kNoVar};
      },
      .tangent = [](TapeBuilder& b, const TangentArgs& a) {
        if (a.tangents[1] == kNoVar && a.tangents[2] == kNoVar) return kNoVar;
        const Var zero = constant_like(b, 0, a.out);
        const Var t = b.call(prims::where(), {a.args[0], a.tangents[1] == kNoVar ? zero : a.tangents[1],
                                       a.tangents[2] == kNoVar ? zero : a.tangents[2]});
        return b.broadcast_to(t, Shape(b.type(a.out).shape));
      },
      .element = [select](const Attrs&) { return record_element<3>(select); },
  };
}

}  // namespace

namespace {

Primitive lt_p() { return comparison("lt", [](auto& e, auto a, auto c) { return e.lt(a, c); }); }
Primitive le_p() { return comparison("le", [](auto& e, auto a, auto c) { return e.le(a, c); }); }
Primitive gt_p() { return comparison("gt", [](auto& e, auto a, auto c) { return e.gt(a, c); }); }
Primitive ge_p() { return comparison("ge", [](auto& e, auto a, auto c) { return e.ge(a, c); }); }
Primitive eq_p() { return comparison("eq", [](auto& e, auto a, auto c) { return e.eq(a, c); }, true); }
Primitive ne_p() { return comparison("ne", [](auto& e, auto a, auto c) { return e.ne(a, c); }, true); }
Primitive maximum_p() { return extremum("maximum", prims::gt, true); }
Primitive minimum_p() { return extremum("minimum", prims::lt, false); }

}  // namespace

void add_binary(std::vector<Primitive>& t) {
  t.insert(t.end(), {add_p(), sub_p(), mul_p(), div_p(), hypot_p(), lt_p(), le_p(), gt_p(), ge_p(), eq_p(), ne_p(),
                     maximum_p(), minimum_p(), where_p(), atan2_p(), copysign_p(), powv_p()});
}

}  // namespace reel::prims
