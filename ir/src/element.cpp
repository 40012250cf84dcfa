#include "reel/ir/element.hpp"

#include <fmt/format.h>

#include "reel/error.hpp"

namespace reel {

const char* elem_op_name(ElemOp op) {
  switch (op) {
    case ElemOp::input: return "input";
    case ElemOp::constant: return "constant";
    case ElemOp::add: return "add";
    case ElemOp::sub: return "sub";
    case ElemOp::mul: return "mul";
    case ElemOp::div: return "div";
    case ElemOp::max: return "max";
    case ElemOp::min: return "min";
    case ElemOp::lt: return "lt";
    case ElemOp::le: return "le";
    case ElemOp::gt: return "gt";
    case ElemOp::ge: return "ge";
    case ElemOp::eq: return "eq";
    case ElemOp::ne: return "ne";
    case ElemOp::select: return "select";
    case ElemOp::neg: return "neg";
    case ElemOp::abs: return "abs";
    case ElemOp::exp: return "exp";
    case ElemOp::log: return "log";
    case ElemOp::log1p: return "log1p";
    case ElemOp::expm1: return "expm1";
    case ElemOp::sin: return "sin";
    case ElemOp::cos: return "cos";
    case ElemOp::tanh: return "tanh";
    case ElemOp::sqrt: return "sqrt";
    case ElemOp::erf: return "erf";
    case ElemOp::lgamma: return "lgamma";
    case ElemOp::pow: return "pow";
  }
  return "?";
}

namespace {
int operand_count(ElemOp op) {
  switch (op) {
    case ElemOp::input:
    case ElemOp::constant: return 0;
    case ElemOp::add: case ElemOp::sub: case ElemOp::mul: case ElemOp::div: case ElemOp::max: case ElemOp::min:
    case ElemOp::lt: case ElemOp::le: case ElemOp::gt: case ElemOp::ge: case ElemOp::eq: case ElemOp::ne:
      return 2;
    case ElemOp::select: return 3;
    default: return 1;
  }
}
}  // namespace

void check_element_program(const ElementProgram& p, int arity, const std::string& prim) {
  auto fail = [&](std::size_t i, const std::string& what) {
    throw Error(fmt::format("{}: malformed element program at x{} ({}): {}", prim, i,
                            i < p.insts.size() ? elem_op_name(p.insts[i].op) : "?", what));
  };
  for (std::size_t i = 0; i < p.insts.size(); ++i) {
    const ElemInst& in = p.insts[i];
    if (in.op == ElemOp::input) {
      if (in.a < 0 || in.a >= arity) fail(i, fmt::format("expected an input below {}, got {}", arity, in.a));
      continue;
    }
    const int n = operand_count(in.op);
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
    if (in.op == ElemOp::constant || in.op == ElemOp::pow) s += fmt::format(" {}", in.value);
    s += "; ";
  }
  return s + fmt::format("-> x{}", result);
}

}  // namespace reel
