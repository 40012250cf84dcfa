#pragma once
// TapeBuilder appends operations to a tape, inferring each result's type through the
// primitive table. Adjoint rules and passes build tapes with it, which is what makes
// a gradient tape an ordinary tape.
#include "reel/ir/prims.hpp"
#include "reel/ir/tape.hpp"

namespace reel {

class TapeBuilder {
 public:
  TapeBuilder() = default;
  void reserve(std::size_t ops) { tape_.ops.reserve(ops); }
  // Removes the last operation (which nothing may refer to yet).
  void pop() { tape_.ops.pop_back(); }
  Var input(const VarType& type);
  Var constant(const Tensor& value);
  static Op constant_op(const Tensor& value);  // the operation `constant` appends
  Var scalar(double value, DType dtype);  // 0-d constant
  Var call(const Primitive& prim, std::vector<Var> args, Attrs attrs = {});
  Var call(std::string_view prim, std::vector<Var> args, Attrs attrs = {});
  // A call of any primitive: its results' variables (one for most primitives; a
  // primitive with several appends the call and its `result` operations).
  std::vector<Var> call_results(const Primitive& prim, std::vector<Var> args, Attrs attrs = {});
  // Copies an op of another tape, with its arguments renamed.
  Var copy(const Op& op, std::vector<Var> args);
  static Op renamed(const Op& op, std::vector<Var> args);  // the operation `copy` appends
  // Appends an op of another tape whose arguments are already renamed into this one,
  // moved rather than copied (passes/src/rewrite.hpp).
  Var take(Op op) { return push(std::move(op)); }

  // Appends the operations of `sub` with its inputs replaced by `inputs` (in order; as
  // many as sub has); returns the variables of sub's outputs.
  std::vector<Var> inline_tape(const Tape& sub, std::span<const Var> inputs);

  // Shorthands used by adjoint rules.
  Var add(Var a, Var b) { return call(prims::add(), {a, b}); }
  Var sub(Var a, Var b) { return call(prims::sub(), {a, b}); }
  Var mul(Var a, Var b) { return call(prims::mul(), {a, b}); }
  Var div(Var a, Var b) { return call(prims::div(), {a, b}); }
  Var neg(Var a) { return call(prims::neg(), {a}); }
  Var mul(Var a, double c) { return mul(a, scalar(c, type(a).dtype)); }
  Var transpose(Var a) { return call(prims::transpose(), {a}); }
  Var matmul(Var a, Var b) { return call(prims::matmul(), {a, b}); }
  // The shape is taken by value: a caller may pass b.type(v).shape, a reference into
  // the tape that another argument's evaluation (appending an operation) can move.
  Var reshape(Var a, Shape shape);         // no-op if the shape is already right
  Var broadcast_to(Var a, Shape shape);    // no-op if the shape is already right
  Var sum_to(Var a, Shape shape);          // no-op if the shape is already right
  // `v`, or zeros of type `t` where v is kNoVar (a derivative that is zero).
  Var or_zeros(Var v, VarType t) {
    return v != kNoVar ? v : broadcast_to(scalar(0.0, t.dtype), t.shape);
  }

  // The reference is valid only until the next op is added.
  const VarType& type(Var v) const { return tape_.type(v); }
  void set_outputs(std::vector<Var> outputs) { tape_.outputs = std::move(outputs); }
  const Tape& tape() const { return tape_; }
  Tape finish() { return std::move(tape_); }

 private:
  Var push(Op op);
  Tape tape_;
};

}  // namespace reel
