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
// The operations (ElemOp, ElementRecorder's methods, their names, NumMath and the
// code generator's translation) are generated from one list,
// runtime/include/reel/element_ops.def: adding an operation is one line there, and
// every primitive can then use it.
#include <concepts>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "reel/element_ops.hpp"
#include "reel/error.hpp"

namespace reel {

// input (a: which argument), then the list's operations in its order: operands in a,
// b, c (earlier values), the constant of `constant` and `pow` in ElemInst::value.
enum class ElemOp : uint8_t {
  input,
#define REEL_ELEM_OP(name, operands, eval, lowering, symbol) name,
#include "reel/element_ops.def"
};
inline constexpr int kElemOpCount = 1 + kElementOps;

const char* elem_op_name(ElemOp op);
// What the operation takes (input: no values, no constant).
ElemOperands elem_op_operands(ElemOp op);

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
#define REEL_ELEM_OP(name, operands, eval, lowering, symbol) \
  Value name(REEL_ELEM_PARAMS_##operands(Value)) { return push(ElemOp::name, REEL_ELEM_ARGS_##operands); }
#include "reel/element_ops.def"

  ElementProgram finish(Value result) {
    program_.result = result;
    return std::move(program_);
  }

 private:
  // By the operands' types: values (Value), a constant (double), or a value and a constant.
  Value push(ElemOp op, Value a, Value b = -1, Value c = -1) { return push({op, a, b, c}); }
  Value push(ElemOp op, double p) { return push({.op = op, .value = p}); }
  Value push(ElemOp op, Value a, double p) { return push({.op = op, .a = a, .value = p}); }
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

// An element machine: a type with every operation of the list, like NumMath<T>,
// ElementRecorder and the code generator's ElementEmitter (each is checked against it).
template <class M>
concept ElementMachine = requires(M m, typename M::Value a, typename M::Value b, typename M::Value c, double p) {
#define REEL_ELEM_OP(name, operands, eval, lowering, symbol) \
  { m.name(REEL_ELEM_ARGS_##operands) } -> std::convertible_to<typename M::Value>;
#include "reel/element_ops.def"
};

// The interpreter of element programs: runs p on machine m with arguments args (the
// values of its inputs). With a NumMath it computes the element function's value; the
// code generator runs its ElementEmitter through it. p must be well formed
// (check_element_program).
template <class M>
typename M::Value eval_element(const ElementProgram& p, M& m, const std::vector<typename M::Value>& args) {
  std::vector<typename M::Value> v;
  v.reserve(p.insts.size());
  for (const ElemInst& in : p.insts) {
    const std::size_t defined = v.size();
    auto x = [&](int32_t i) { return v.at(static_cast<std::size_t>(i)); };
    switch (in.op) {  // no default: a missing operation is a -Wswitch warning
      case ElemOp::input: v.push_back(args.at(static_cast<std::size_t>(in.a))); break;
#define REEL_ELEM_OPERANDS_a x(in.a)
#define REEL_ELEM_OPERANDS_ab x(in.a), x(in.b)
#define REEL_ELEM_OPERANDS_abc x(in.a), x(in.b), x(in.c)
#define REEL_ELEM_OPERANDS_p in.value
#define REEL_ELEM_OPERANDS_ap x(in.a), in.value
#define REEL_ELEM_OP(name, operands, eval, lowering, symbol) \
  case ElemOp::name: v.push_back(m.name(REEL_ELEM_OPERANDS_##operands)); break;
#include "reel/element_ops.def"
#undef REEL_ELEM_OPERANDS_a
#undef REEL_ELEM_OPERANDS_ab
#undef REEL_ELEM_OPERANDS_abc
#undef REEL_ELEM_OPERANDS_p
#undef REEL_ELEM_OPERANDS_ap
    }
    if (v.size() == defined)
      throw Error(fmt::format("eval_element: expected an element operation, got code {}", static_cast<int>(in.op)));
  }
  return v.at(static_cast<std::size_t>(p.result));
}

static_assert(ElementMachine<ElementRecorder>);

}  // namespace reel
