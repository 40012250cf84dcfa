#pragma once
// Tracker's tracked parameters: `Tensor W = reel::param(values)`. Operations on params
// (outside any trace) are recorded as they run: each result refers to a node holding
// the operation and its arguments, so reel::back(y) (api/, reel/tracker.hpp) can
// rebuild the tape y came from, differentiate it and accumulate the gradients into
// the params. Nodes are reference-counted: what was recorded is released when no
// tensor refers to it any more.
#include <memory>
#include <span>
#include <vector>

#include "reel/ir/primitive.hpp"
#include "reel/tensor.hpp"

namespace reel {

// A param: a copy of `values` (f32 or f64) whose operations are recorded. Copies of
// the returned tensor are the same param (they share its gradient).
Tensor param(const Tensor& values);
Tensor param(const std::vector<double>& values, const Shape& shape, DType dtype = DType::f64);

// The same values (and memory), not tracked: operations on the result are not
// recorded for reel::back (Tracker's data(x)). It does not stop gradients inside
// reel::grad and other traces: that is reel::nodiff (reel::stop_gradient).
Tensor detach(const Tensor& x);

namespace detail {

// One recorded call: its primitive, attributes and arguments (their values, and
// through their nodes what they were computed from).
struct TrackedCall {
  const Primitive* prim = nullptr;
  Attrs attrs;
  std::vector<Tensor> args;
  std::vector<uint64_t> versions;  // each param argument's version when recorded
  std::size_t results = 1;
};

// The node of result `index` of a recorded call.
struct OpNode : TrackNode {
  std::shared_ptr<TrackedCall> call;
  std::size_t index = 0;
  ~OpNode() override;  // releases long chains without deep recursion
};

// Records a call whose arguments include tracked tensors: tags its results. versions:
// each param argument's version its values were read at (0 for other arguments; empty
// when no argument is a param).
void track_call(const Primitive& prim, std::span<const Tensor> inputs, const Attrs& attrs, std::span<Tensor> outs,
                std::span<const uint64_t> versions);

// Whether recording for params is paused on this thread (inside a primitive's eager
// function, whose inner operations are not the call's), and a scope pausing it.
bool tracking_paused();
struct TrackingPause {
  TrackingPause();
  ~TrackingPause();
  TrackingPause(const TrackingPause&) = delete;
  TrackingPause& operator=(const TrackingPause&) = delete;
};

}  // namespace detail

}  // namespace reel
