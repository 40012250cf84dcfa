#pragma once
// A user function recorded as one primitive (Yota's choice of what the tracer records).
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "reel/custom.hpp"

namespace reel {

// Yota's choice of what the tracer records: registers a function of `arity` tensors
// as one primitive, recorded as one call instead of traced through. Its value is f
// run without tracing; its reverse, forward and batching (vmap) rules are f's own,
// derived by tracing f when a gradient, tangent or batched tape is built (so f must not
// branch on values, and must return one tensor of the first argument's type unless
// `type` is given).
const Primitive& define_function_primitive(
    const std::string& name, int arity, std::function<Tensor(const std::vector<Tensor>&)> f,
    std::function<VarType(std::span<const VarType>, const Attrs&)> type = {});

}  // namespace reel
