#include "reel/ir/builder.hpp"

namespace reel {

Var TapeBuilder::push(Op op) {
  tape_.ops.push_back(std::move(op));
  return tape_.size();
}

Var TapeBuilder::input(const VarType& type) {
  Op op;
  op.kind = OpKind::input;
  op.type = type;
  return push(std::move(op));
}

Var TapeBuilder::constant(const Tensor& value) {
  Op op;
  op.kind = OpKind::constant;
  op.type = {value.dtype(), value.shape()};
  op.value = value;
  op.value.clear_trace_tags();
  return push(std::move(op));
}

Var TapeBuilder::scalar(double value, DType dtype) { return constant(reel::scalar(value, dtype)); }

Var TapeBuilder::call(const Primitive& prim, std::vector<Var> args, Attrs attrs) {
  std::vector<VarType> types;
  for (Var a : args) types.push_back(type(a));
  Op op;
  op.kind = OpKind::call;
  op.prim = &prim;
  op.type = infer_call(prim, types, attrs);
  op.args = std::move(args);
  op.attrs = std::move(attrs);
  return push(std::move(op));
}

Var TapeBuilder::call(std::string_view prim, std::vector<Var> args, Attrs attrs) {
  return call(primitive(prim), std::move(args), std::move(attrs));
}

Var TapeBuilder::copy(const Op& op, std::vector<Var> args) {
  Op o = op;
  o.args = std::move(args);
  return push(std::move(o));
}

Var TapeBuilder::reshape(Var a, const Shape& shape) {
  return type(a).shape == shape ? a : call("reshape", {a}, {{"shape", shape}});
}

Var TapeBuilder::broadcast_to(Var a, const Shape& shape) {
  return type(a).shape == shape ? a : call("broadcast_to", {a}, {{"shape", shape}});
}

Var TapeBuilder::sum_to(Var a, const Shape& shape) {
  return type(a).shape == shape ? a : call("sum_to", {a}, {{"shape", shape}});
}

}  // namespace reel
