#pragma once
// The element function of an elementwise primitive, as data.
//
// A primitive's math is written once, as a generic function of an "element machine"
// e with the operations below (e.add(a, b), e.exp(x), ...). Its eager kernel runs that
// function with NumMath<float or double> (runtime/elementwise.hpp), which computes;
// ElementRecorder runs it once to record an ElementProgram, a small SSA list that the
// code generator (codegen/) translates into LLVM instructions. So ir/ holds the math
// and no code-generation vocabulary, and the two executions agree by construction.
//
// Adding an operation to the machine touches three places, once: ElemOp and
// ElementRecorder here, NumMath (runtime/include/reel/elementwise.hpp) and the
// translation in codegen/src/emit.cpp. Every primitive can then use it.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace reel {

enum class ElemOp : uint8_t {
  input,     // a: which argument
  constant,  // value
  add, sub, mul, div, max, min,  // a, b. max/min: IEEE maximum/minimum (NaN if either is; -0 < +0)
  lt, le, gt, ge, eq, ne,        // a, b: 1 if the comparison holds, else 0
  select,                        // a != 0 ? b : c
  neg, abs, exp, log, log1p, expm1, sin, cos, tanh, sqrt, erf, lgamma,  // a
  pow,                           // a ^ value (a constant exponent)
};

const char* elem_op_name(ElemOp op);

struct ElemInst {
  ElemOp op;
  int32_t a = -1, b = -1, c = -1;
  double value = 0;
  bool operator==(const ElemInst&) const = default;
};

struct ElementProgram {
  std::vector<ElemInst> insts;  // each defines value i; arguments refer to earlier ones
  int32_t result = -1;
  // One line of text, e.g. "x0 = input 0; x1 = exp x0; -> x1" (kernel keys, debugging).
  std::string str() const;
};

// Throws reel::Error naming `prim` if the program is malformed: an input index not
// below `arity`, an operand missing or not an earlier value, a result out of range.
// The code generator checks every program before translating it.
void check_element_program(const ElementProgram& program, int arity, const std::string& prim);

// Records what a generic element function does. Values are instruction indices.
class ElementRecorder {
 public:
  using Value = int32_t;
  Value input(int i) { return push({ElemOp::input, i}); }
  Value constant(double v) { return push({.op = ElemOp::constant, .value = v}); }
  Value add(Value a, Value b) { return push({ElemOp::add, a, b}); }
  Value sub(Value a, Value b) { return push({ElemOp::sub, a, b}); }
  Value mul(Value a, Value b) { return push({ElemOp::mul, a, b}); }
  Value div(Value a, Value b) { return push({ElemOp::div, a, b}); }
  Value max(Value a, Value b) { return push({ElemOp::max, a, b}); }
  Value min(Value a, Value b) { return push({ElemOp::min, a, b}); }
  Value lt(Value a, Value b) { return push({ElemOp::lt, a, b}); }
  Value le(Value a, Value b) { return push({ElemOp::le, a, b}); }
  Value gt(Value a, Value b) { return push({ElemOp::gt, a, b}); }
  Value ge(Value a, Value b) { return push({ElemOp::ge, a, b}); }
  Value eq(Value a, Value b) { return push({ElemOp::eq, a, b}); }
  Value ne(Value a, Value b) { return push({ElemOp::ne, a, b}); }
  Value select(Value c, Value a, Value b) { return push({ElemOp::select, c, a, b}); }
  Value neg(Value a) { return push({ElemOp::neg, a}); }
  Value abs(Value a) { return push({ElemOp::abs, a}); }
  Value exp(Value a) { return push({ElemOp::exp, a}); }
  Value log(Value a) { return push({ElemOp::log, a}); }
  Value log1p(Value a) { return push({ElemOp::log1p, a}); }
  Value expm1(Value a) { return push({ElemOp::expm1, a}); }
  Value sin(Value a) { return push({ElemOp::sin, a}); }
  Value cos(Value a) { return push({ElemOp::cos, a}); }
  Value tanh(Value a) { return push({ElemOp::tanh, a}); }
  Value sqrt(Value a) { return push({ElemOp::sqrt, a}); }
  Value erf(Value a) { return push({ElemOp::erf, a}); }
  Value lgamma(Value a) { return push({ElemOp::lgamma, a}); }
  Value pow(Value a, double p) { return push({.op = ElemOp::pow, .a = a, .value = p}); }

  ElementProgram finish(Value result) {
    program_.result = result;
    return std::move(program_);
  }

 private:
  Value push(ElemInst inst) {
    program_.insts.push_back(inst);
    return static_cast<Value>(program_.insts.size() - 1);
  }
  ElementProgram program_;
};

// Records f(e, x0, ..., x{n-1}) for an n-argument element function.
template <int N, class F>
ElementProgram record_element(F f) {
  ElementRecorder e;
  return [&]<int... I>(std::integer_sequence<int, I...>) {
    return e.finish(f(e, e.input(I)...));
  }(std::make_integer_sequence<int, N>{});
}

}  // namespace reel
