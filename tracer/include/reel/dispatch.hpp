#pragma once
// The one way a primitive is applied to tensors: check types, run the eager kernel,
// and record the call on every active trace that one of the inputs belongs to.
#include <span>

#include "reel/ir/primitive.hpp"

namespace reel {

Tensor apply(const Primitive& prim, std::span<const Tensor> inputs, Attrs attrs = {});
Tensor apply(std::string_view prim, std::span<const Tensor> inputs, Attrs attrs = {});
// Any primitive, also one with several results: one tensor per result.
std::vector<Tensor> apply_results(const Primitive& prim, std::span<const Tensor> inputs, Attrs attrs = {});
std::vector<Tensor> apply_results(std::string_view prim, std::span<const Tensor> inputs, Attrs attrs = {});

namespace detail {
// What apply and apply_results both run, without a heap allocation for one result
// (the interpreter calls it for every operation).
Results<Tensor> apply_list(const Primitive& prim, std::span<const Tensor> inputs, Attrs attrs);
}  // namespace detail

}  // namespace reel
