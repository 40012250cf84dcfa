#pragma once
// Internal: each prims_*.cpp file defines its primitives, one named definition each
// (`Primitive exp_p()`), and lists them in its builder, which appends them to the
// table. The registry passes every one through register_primitive's checks.
#include <string>
#include <utility>
#include <vector>

#include "reel/ir/body_tape.hpp"
#include "reel/ir/builder.hpp"
#include "reel/ir/primitive.hpp"

namespace reel::prims {

void add_binary(std::vector<Primitive>& table);
void add_unary(std::vector<Primitive>& table);
void add_reductions(std::vector<Primitive>& table);
void add_shape_ops(std::vector<Primitive>& table);
void add_indexing(std::vector<Primitive>& table);
void add_nn(std::vector<Primitive>& table);
void add_control(std::vector<Primitive>& table);
void add_loops(std::vector<Primitive>& table);
void add_while(std::vector<Primitive>& table);
void add_calls(std::vector<Primitive>& table);  // call, checkpoint (prims_call.cpp)

// Shared checks for shape rules: they throw reel::Error naming the primitive.
void expect_same_dtype(const char* op, const VarType& a, const VarType& b);
void expect_rank(const char* op, const VarType& t, int64_t rank);

// A rule that gives no gradient to any of `n` arguments, and a tangent rule whose
// tangent is zero (argmax, comparisons, guards, ...).
std::function<std::vector<Var>(TapeBuilder&, const AdjointArgs&)> no_adjoint(std::size_t n = 1);
Var no_tangent(TapeBuilder&, const TangentArgs&);

Var constant_like(TapeBuilder& b, double v, Var like);
// Zeros of type t.
Var zeros_of(TapeBuilder& b, const VarType& t);

// Loops (prims_scan.cpp): a type without / with a leading axis of n; slice k of x along
// its leading axis (a copy), and slice written into a stack at k.
VarType without_leading(const VarType& t);
VarType with_leading(int64_t n, const VarType& t);
Tensor slice_at(const Tensor& x, int64_t k);
void store_at(Tensor& stack, int64_t k, const Tensor& slice);
void add_revolve(std::vector<Primitive>& table);  // prims_revolve.cpp

// Batching loops (loop_batching.cpp; dependences: reel/ir/body_tape.hpp). batch_loop_body:
// `body` with the inputs where in[i] carrying a leading batch axis of `size`, and the
// outputs where out[o] batched (through transforms.batch); the other outputs, which
// must depend on no batched input, stay as they are. Cleaned up.
Tape batch_loop_body(const Tape& body, const std::vector<bool>& in, const std::vector<bool>& out, int64_t size,
                     const Transforms& transforms);
// A loop body's batching flags: `in` (per body input) holds the carries at [first,
// first + K), whose next values are the body's outputs [0, K). A carry is batched if it
// starts batched or its next value depends on a batched input (to a fixed point: `in`
// is updated). Returns the outputs' flags: a carry's as its input's, any other output's
// whether it depends on a batched input.
std::vector<bool> batch_carries(const Tape& body, std::vector<bool>& in, std::size_t first, std::size_t K);
// v batched ([size] + its type) if it is not already (flag false): a broadcast.
Var ensure_batched(TapeBuilder& b, Var v, bool batched, int64_t size);

// "(f64[3], i64[])": a list of types, for errors.
std::string types_str(std::span<const VarType> types);
// The tape without the inputs nothing reads, and the positions of the inputs kept.
std::pair<Tape, std::vector<std::size_t>> without_unread_inputs(const Tape& tape);
// A call of `prim` (call, checkpoint) running `body` on args; its results. A body
// without inputs is inlined (a call takes at least one argument).
std::vector<Var> call_tape(TapeBuilder& b, std::string_view prim, const Tape& body, std::vector<Var> args);


// The derivatives of a call through a tape E that computes the same (the call's
// arguments -> its results): a body, or a store-all equivalent (prims_call.cpp).
// call_vjp: E's vjp with the call's seeded results (an adjoint flows, a float) and the
// arguments that want a gradient (a float), and its operands: the call's arguments,
// then the seeded results' adjoints. V is empty (no operations) when nothing flows.
struct CallVjp {
  Tape V;
  std::vector<Var> operands;
  std::vector<bool> wanted;
};
CallVjp call_vjp(TapeBuilder& b, const AdjointArgs& a, const Tape& E);
// call_jvp: E's jvp with the arguments that have a tangent (a float) active, and its
// operands: the arguments, then those tangents. call_tangents: from the variables of J's
// results, the call's results again (TangentArgs::same_outs) and their tangents.
struct CallJvp {
  Tape J;
  std::vector<Var> operands;
};
CallJvp call_jvp(TapeBuilder& b, const TangentArgs& a, const Tape& E);
Results<Var> call_tangents(const TangentArgs& a, const Tape& E, std::span<const Var> res);

}  // namespace reel::prims
