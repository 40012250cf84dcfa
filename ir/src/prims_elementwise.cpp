// Elementwise primitives: add sub mul div (NumPy broadcasting), neg exp log sin cos
// tanh sigmoid sqrt square sign abs nodiff, pow(x, p).
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

  // sign: -1, 0 or 1 (NaN for NaN); its derivative is zero wherever it exists, and
  // taken as zero at 0.
  t.push_back(unary(
      "sign", [](auto& e, auto x) { return e.sub(e.gt(x, e.constant(0)), e.lt(x, e.constant(0))); },
      [](TapeBuilder&, Var, Var, Var) { return kNoVar; }));
  // abs: the gradient at 0 is 0 (the subgradient's midpoint, as in JAX and PyTorch).
  t.push_back(unary(
      "abs", [](auto& e, auto x) { return e.abs(x); },
      [](TapeBuilder& b, Var x, Var, Var dy) { return b.mul(dy, b.call("sign", {x})); }));

  // nodiff (stop_gradient): the value of x, through which no gradient flows.
  Primitive nodiff;
  nodiff.name = "nodiff";
  nodiff.arity = 1;
  nodiff.infer = [](std::span<const VarType> in, const Attrs&) { return in[0]; };
  nodiff.eager = [](std::span<const Tensor> in, const Attrs&) { return in[0]; };  // tensors are immutable
  nodiff.adjoint = [](TapeBuilder&, const AdjointArgs&) { return std::vector<Var>{kNoVar}; };
  nodiff.tangent = [](TapeBuilder&, const TangentArgs&) { return kNoVar; };
  nodiff.structure = Structure::elementwise;
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
  pow.adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
    const double p = a.attrs.real("p");
    const Var dpow = b.mul(b.call("pow", {a.args[0]}, {{"p", p - 1.0}}), p);
    return std::vector<Var>{b.mul(a.dout, dpow)};
  };
  pow.tangent = [](TapeBuilder& b, const TangentArgs& a) {
    const double p = a.attrs.real("p");
    return b.mul(a.tangents[0], b.mul(b.call("pow", {a.args[0]}, {{"p", p - 1.0}}), p));
  };
  pow.structure = Structure::elementwise;
  pow.element = [](const Attrs& a) {
    const double p = a.real("p");
    return record_element<1>([p](auto& e, auto x) { return e.pow(x, p); });
  };
  t.push_back(std::move(pow));
}

}  // namespace reel::prims
