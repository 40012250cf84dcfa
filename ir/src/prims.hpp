#pragma once
// Internal: each prims_*.cpp file defines its primitives, one named definition each
// (`Primitive exp_p()`), and lists them in its builder, which appends them to the
// table. The registry passes every one through register_primitive's checks.
#include <vector>

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

}  // namespace reel::prims
