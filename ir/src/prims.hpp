#pragma once
// Internal: each prims_*.cpp file appends its primitives to the table.
#include <vector>

#include "reel/ir/builder.hpp"
#include "reel/ir/primitive.hpp"

namespace reel::prims {

void add_elementwise(std::vector<Primitive>& table);
void add_reductions(std::vector<Primitive>& table);
void add_shape_ops(std::vector<Primitive>& table);
void add_indexing(std::vector<Primitive>& table);
void add_nn(std::vector<Primitive>& table);
void add_control(std::vector<Primitive>& table);

// Shared checks for shape rules: they throw reel::Error naming the primitive.
void expect_same_dtype(const char* op, const VarType& a, const VarType& b);
void expect_rank(const char* op, const VarType& t, int64_t rank);

}  // namespace reel::prims
