#include <fmt/format.h>

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

Op TapeBuilder::constant_op(const Tensor& value) {
  Op op;
  op.kind = OpKind::constant;
  op.type = {value.dtype(), value.shape()};
  op.value = value;
  op.value.clear_trace_tags();
  return op;
}

Var TapeBuilder::constant(const Tensor& value) { return push(constant_op(value)); }

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

std::vector<Var> TapeBuilder::call_results(const Primitive& prim, std::vector<Var> args, Attrs attrs) {
  if (prim.results == 1) return {call(prim, std::move(args), std::move(attrs))};  // (variadic: below)
  std::vector<VarType> types;
  for (Var a : args) types.push_back(type(a));
  std::vector<VarType> results = infer_call_results(prim, types, attrs);
  Op op;
  op.kind = OpKind::call;
  op.prim = &prim;
  op.type = results[0];
  op.args = std::move(args);
  op.attrs = std::move(attrs);
  op.results = static_cast<int32_t>(results.size());
  const Var first = push(std::move(op));
  std::vector<Var> vars{first};
  for (std::size_t i = 1; i < results.size(); ++i) {
    Op r;
    r.kind = OpKind::result;
    r.args = {first};
    r.index = static_cast<int32_t>(i);
    r.type = results[i];
    vars.push_back(push(std::move(r)));
  }
  return vars;
}

Var TapeBuilder::call(std::string_view prim, std::vector<Var> args, Attrs attrs) {
  return call(primitive(prim), std::move(args), std::move(attrs));
}

Op TapeBuilder::renamed(const Op& op, std::vector<Var> args) {
  // Every member but the arguments copied (not `Op o = op`, which copied the old
  // arguments too, one allocation per operation of every pass for nothing).
  static_assert(sizeof(Op) == 184, "a member added to Op: copy it here");
  return Op{op.kind, op.prim, std::move(args), op.attrs, op.index, op.type, op.value, op.results};
}

Var TapeBuilder::copy(const Op& op, std::vector<Var> args) { return push(renamed(op, std::move(args))); }

std::vector<Var> TapeBuilder::inline_tape(const Tape& sub, std::span<const Var> inputs) {
  check_structure("inline_tape", sub);
  std::vector<Var> map(static_cast<std::size_t>(sub.size()) + 1, kNoVar);
  std::size_t next = 0;
  for (Var v = 1; v <= sub.size(); ++v) {
    const Op& op = sub.op(v);
    if (op.kind == OpKind::input) {
      if (next >= inputs.size())
        throw Error(fmt::format("inline_tape: the tape has more than the {} inputs given", inputs.size()));
      if (type(inputs[next]) != op.type)
        throw Error(fmt::format("inline_tape: input {} is {}, the tape expects {}", next + 1,
                                type_str(type(inputs[next])), type_str(op.type)));
      map[v] = inputs[next++];
      continue;
    }
    std::vector<Var> args;
    for (Var a : op.args) args.push_back(map[a]);
    map[v] = op.kind == OpKind::constant ? constant(op.value) : copy(op, std::move(args));
  }
  if (next != inputs.size())
    throw Error(fmt::format("inline_tape: expected {} inputs, the tape has {}", inputs.size(), next));
  std::vector<Var> outs;
  for (Var o : sub.outputs) outs.push_back(map[o]);
  return outs;
}

Var TapeBuilder::reshape(Var a, Shape shape) {
  return type(a).shape == shape ? a : call(prims::reshape(), {a}, {{"shape", shape}});
}

Var TapeBuilder::broadcast_to(Var a, Shape shape) {
  return type(a).shape == shape ? a : call(prims::broadcast_to(), {a}, {{"shape", shape}});
}

Var TapeBuilder::sum_to(Var a, Shape shape) {
  return type(a).shape == shape ? a : call(prims::sum_to(), {a}, {{"shape", shape}});
}

}  // namespace reel
