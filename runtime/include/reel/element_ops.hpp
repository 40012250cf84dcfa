#pragma once
// The vocabulary of the element machine (the e in a primitive's element function
// f(e, x...), see reel/elementwise.hpp and reel/ir/element.hpp) is the one list in
// reel/element_ops.def. Each line REEL_ELEM_OP(name, operands, eval, lowering, symbol):
//
//   name      the machine's method (e.exp(a)) and the enumerator ElemOp::name.
//   operands  what the method takes: a, ab, abc (one, two or three values), p (a constant
//             double: `constant`) or ap (a value and a constant: `pow`).
//   eval      NumMath<T>'s result: an expression of those operands, T float or double.
//   lowering  how codegen/src/kernels/loop.cpp translates it to LLVM, with `symbol` as plain
//   symbol    text (only codegen/ reads these two columns; nothing here includes LLVM):
//               inst       the IRBuilder method `symbol` on the operands (CreateFAdd)
//               fcmp       1.0 if the predicate FCMP_`symbol` holds (OLT), else 0.0
//               intrinsic  llvm.`symbol`, overloaded on the element type (exp)
//               libm       a call of libm's `symbol` (with an f suffix for float),
//                          declared free of side effects so it may be vectorized
//               custom     written by hand in ElementEmitter (symbol left empty)
//
// Adding an operation is one line there (plus, for a `custom` lowering, its method in
// ElementEmitter; a missing one fails to compile). The macros below spell the operand
// forms for the generated code.
#include <cmath>

// The parameters of a machine method whose values have type V.
#define REEL_ELEM_PARAMS_a(V) V a
#define REEL_ELEM_PARAMS_ab(V) V a, V b
#define REEL_ELEM_PARAMS_abc(V) V a, V b, V c
#define REEL_ELEM_PARAMS_p(V) double p
#define REEL_ELEM_PARAMS_ap(V) V a, double p
// The same parameters passed on as arguments.
#define REEL_ELEM_ARGS_a a
#define REEL_ELEM_ARGS_ab a, b
#define REEL_ELEM_ARGS_abc a, b, c
#define REEL_ELEM_ARGS_p p
#define REEL_ELEM_ARGS_ap a, p

namespace reel {

// How many values an operation takes and whether it takes a constant (ElemInst::value).
struct ElemOperands {
  int values;
  bool constant;
};
namespace elem_operands {
inline constexpr ElemOperands a{1, false}, ab{2, false}, abc{3, false}, p{0, true}, ap{1, true};
}  // namespace elem_operands

// The number of lines in the list.
inline constexpr int kElementOps = 0
#define REEL_ELEM_OP(name, operands, eval, lowering, symbol) +1
#include "reel/element_ops.def"
    ;

// IEEE 754-2019 maximum and minimum (LLVM's llvm.maximum / llvm.minimum): NaN if
// either is NaN, and +0 counts as greater than -0.
template <class T>
T ieee_maximum(T a, T b) {
  if (a != a || b != b) return a != a ? a : b;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}
template <class T>
T ieee_minimum(T a, T b) {
  if (a != a || b != b) return a != a ? a : b;
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

}  // namespace reel
