#pragma once
// Internal: the helpers that make an elementwise primitive one expression. The math is
// written once, as a generic function of an element machine `e`: the eager kernel runs
// it with e = NumMath<T>, and it is recorded as the element rule (e = ElementRecorder).
#include "prims.hpp"
#include "reel/elementwise.hpp"
#include "reel/kernels.hpp"

namespace reel::prims {

VarType infer_binary(const char* op, std::span<const VarType> in);

// A binary primitive (NumPy broadcasting): `math(e, a, b)` and the rules and
// properties given in `p` (adjoint, tangent, commutative, identities, ...).
template <class Math>
Primitive binary(const char* name, Math math, Primitive p) {
  p.name = name;
  p.arity = 2;
  p.infer = [name](std::span<const VarType> in, const Attrs&) { return infer_binary(name, in); };
  p.eager = [math](std::span<const Tensor> in, const Attrs&) {
    return kernels::map_binary(in[0], in[1], [&](const auto& e, auto a, auto b) { return math(e, a, b); });
  };
  p.structure = Structure::elementwise;
  p.element = [math](const Attrs&) { return record_element<2>(math); };
  return p;
}

// f'(x) * d, given x, y = f(x) and d.
using Derivative = Var (*)(TapeBuilder& b, Var x, Var y, Var d);

// A unary primitive: `math(e, x)`, and its derivative, which gives both the adjoint
// (d = dy) and the tangent (d = the argument's tangent); without one, neither rule.
// Properties (involution, ...) in `p`.
template <class Math>
Primitive unary(const char* name, Math math, Derivative derivative, Primitive p = {}) {
  p.name = name;
  p.arity = 1;
  p.infer = [](std::span<const VarType> in, const Attrs&) { return in[0]; };
  p.eager = [math](std::span<const Tensor> in, const Attrs&) {
    return kernels::map_unary(in[0], [&](const auto& e, auto x) { return math(e, x); });
  };
  if (derivative) {
    p.adjoint = [derivative](TapeBuilder& b, const AdjointArgs& a) {
      return std::vector<Var>{derivative(b, a.args[0], a.out, a.dout)};
    };
    p.tangent = [derivative](TapeBuilder& b, const TangentArgs& a) {
      return derivative(b, a.args[0], a.out, a.tangents[0]);
    };
  }
  p.structure = Structure::elementwise;
  p.element = [math](const Attrs&) { return record_element<1>(math); };
  return p;
}

// Adjoint of an argument that was broadcast: sum back down to its shape.
Var unbroadcast(TapeBuilder& b, Var adj, Var arg);
Var one_minus(TapeBuilder& b, Var y);
// 1 where `op`(x, c) holds, else 0 (a comparison primitive; no gradient flows through it).
Var compare(TapeBuilder& b, const Primitive& op, Var x, double c);

}  // namespace reel::prims
