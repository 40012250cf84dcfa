#include "reel/ir/element.hpp"

#include <fmt/format.h>

#include <iterator>

#include "reel/elementwise.hpp"
#include "reel/error.hpp"

namespace reel {

namespace {

struct ElemOpInfo {
  ElemOp op;
  const char* name;
  ElemOperands operands;
};

// Indexed by ElemOp, generated from the list in its order.
constexpr ElemOpInfo kInfo[] = {
    {ElemOp::input, "input", {0, false}},
#define REEL_ELEM_OP(name, operands, eval, lowering, symbol) {ElemOp::name, #name, elem_operands::operands},
#include "reel/element_ops.def"
};
static_assert(std::size(kInfo) == kElemOpCount);
static_assert([] {
  for (std::size_t i = 0; i < std::size(kInfo); ++i)
    if (kInfo[i].op != static_cast<ElemOp>(i)) return false;
  return true;
}(), "kInfo must be in ElemOp's order");

// Both eager arithmetic and recording have every operation of the list.
static_assert(ElementMachine<const NumMath<float>> && ElementMachine<const NumMath<double>>);

bool known(ElemOp op) { return static_cast<std::size_t>(op) < std::size(kInfo); }

}  // namespace

const char* elem_op_name(ElemOp op) { return known(op) ? kInfo[static_cast<std::size_t>(op)].name : "?"; }

ElemOperands elem_op_operands(ElemOp op) {
  if (!known(op))
    throw Error(fmt::format("elem_op_operands: expected an element operation, got code {}", static_cast<int>(op)));
  return kInfo[static_cast<std::size_t>(op)].operands;
}

void check_element_program(const ElementProgram& p, int arity, const std::string& prim) {
  auto fail = [&](std::size_t i, const std::string& what) {
    throw Error(fmt::format("{}: malformed element program at x{} ({}): {}", prim, i,
                            i < p.insts.size() ? elem_op_name(p.insts[i].op) : "?", what));
  };
  for (std::size_t i = 0; i < p.insts.size(); ++i) {
    const ElemInst& in = p.insts[i];
    if (!known(in.op)) fail(i, fmt::format("expected an element operation, got code {}", static_cast<int>(in.op)));
    if (in.op == ElemOp::input) {
      if (in.a < 0 || in.a >= arity) fail(i, fmt::format("expected an input below {}, got {}", arity, in.a));
      continue;
    }
    const int n = elem_op_operands(in.op).values;
    const int32_t operands[] = {in.a, in.b, in.c};
    for (int k = 0; k < 3; ++k) {
      const int32_t x = operands[k];
      if (k < n && (x < 0 || static_cast<std::size_t>(x) >= i))
        fail(i, fmt::format("operand {} must be an earlier value x0..x{}, got {}", k + 1,
                            static_cast<int64_t>(i) - 1, x));
      if (k >= n && x != -1) fail(i, fmt::format("expected {} operand{}, got more", n, n == 1 ? "" : "s"));
    }
  }
  if (p.result < 0 || static_cast<std::size_t>(p.result) >= p.insts.size())
    throw Error(fmt::format("{}: malformed element program: expected a result among x0..x{}, got {}", prim,
                            static_cast<int64_t>(p.insts.size()) - 1, p.result));
}

std::string ElementProgram::str() const {
  std::string s;
  for (std::size_t i = 0; i < insts.size(); ++i) {
    const ElemInst& in = insts[i];
    s += fmt::format("x{} = {}", i, elem_op_name(in.op));
    if (in.op == ElemOp::input) s += fmt::format(" {}", in.a);
    else
      for (int32_t arg : {in.a, in.b, in.c})
        if (arg >= 0) s += fmt::format(" x{}", arg);
    if (elem_op_operands(in.op).constant) s += fmt::format(" {}", in.value);
    s += "; ";
  }
  return s + fmt::format("-> x{}", result);
}

}  // namespace reel
