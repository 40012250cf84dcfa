#include "reel/ir/element.hpp"

#include <fmt/format.h>

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
    case ElemOp::pow: return "pow";
  }
  return "?";
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
