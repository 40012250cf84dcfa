#include "reel/track.hpp"

#include <fmt/format.h>

#include <cstring>

namespace reel {

Tensor param(const Tensor& values) {
  if (!values.defined()) throw Error("param: expected a tensor, got an undefined one");
  if (values.dtype() != DType::f32 && values.dtype() != DType::f64)
    throw Error(fmt::format("param: expected f32 or f64 values, got {}", type_str(values.dtype(), values.shape())));
  Tensor p(values.dtype(), values.shape());
  if (p.nbytes() > 0) std::memcpy(p.mutable_raw(), values.raw(), p.nbytes());
  auto leaf = std::make_shared<detail::TrackNode>();
  leaf->param = true;
  p.set_track_node(std::move(leaf));
  return p;
}

Tensor param(const std::vector<double>& values, const Shape& shape, DType dtype) {
  return param(tensor(values, shape, dtype));
}

namespace detail {

namespace {
thread_local int t_paused = 0;
}

bool tracking_paused() { return t_paused > 0; }
TrackingPause::TrackingPause() { ++t_paused; }
TrackingPause::~TrackingPause() { --t_paused; }

OpNode::~OpNode() {
  // A chain of nodes (a loop of 100,000 steps) would be released by as many nested
  // destructors: instead, the nodes this one alone keeps alive are queued and
  // released one at a time by the outermost destructor.
  thread_local std::vector<std::shared_ptr<TrackNode>> pending;
  thread_local bool draining = false;
  if (call != nullptr && call.use_count() == 1)
    for (Tensor& a : call->args)
      if (a.is_tracked()) {
        pending.push_back(a.track_node());
        a.set_track_node(nullptr);
      }
  call.reset();
  if (draining) return;
  draining = true;
  while (!pending.empty()) {
    std::shared_ptr<TrackNode> n = std::move(pending.back());
    pending.pop_back();
    n.reset();  // may queue more
  }
  draining = false;
}

void track_call(const Primitive& prim, std::span<const Tensor> inputs, const Attrs& attrs, std::span<Tensor> outs) {
  auto call = std::make_shared<TrackedCall>();
  call->prim = &prim;
  call->attrs = attrs;
  call->results = outs.size();
  call->args.reserve(inputs.size());
  for (const Tensor& in : inputs) {
    call->args.push_back(in);
    call->args.back().clear_trace_tags();
    call->versions.push_back(in.is_param() ? in.track_node()->version : 0);
  }
  for (std::size_t i = 0; i < outs.size(); ++i) {
    auto node = std::make_shared<OpNode>();
    node->call = call;
    node->index = i;
    outs[i].set_track_node(std::move(node));
  }
}

}  // namespace detail

}  // namespace reel
