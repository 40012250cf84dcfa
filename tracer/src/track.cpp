#include "reel/track.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace reel {

Tensor param(const Tensor& values) {
  if (!values.defined()) throw Error("param: expected a tensor, got an undefined one");
  if (values.dtype() != DType::f32 && values.dtype() != DType::f64)
    throw Error(fmt::format("param: expected f32 or f64 values, got {}", type_str(values.dtype(), values.shape())));
  if (detail::in_foreign_trace(values))
    throw Error(fmt::format("param: the values belong to {}", detail::kForeignTrace));
  if (detail::in_active_trace(values))
    throw Error("param: the values are being traced; make params outside the traced function (a param made from "
                "traced values would cut it off from the trace)");
  Tensor p(values.dtype(), values.shape());
  std::unique_lock<std::mutex> lock;  // another param's memory: W.assign may be writing it
  if (values.is_param()) lock = std::unique_lock<std::mutex>(detail::param_node(values).mutex);
  if (p.nbytes() > 0) std::memcpy(p.mutable_raw(), values.raw(), p.nbytes());
  p.set_track_node(std::make_shared<detail::ParamNode>());
  return p;
}

Tensor param(const std::vector<double>& values, const Shape& shape, DType dtype) {
  return param(tensor(values, shape, dtype));
}

Tensor detach(const Tensor& x) {
  Tensor d = x;
  d.set_track_node(nullptr);
  return d;
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
  // released one at a time by the outermost destructor, which owns the queue (a
  // thread_local pointer to it, trivially destructible, so nodes released while the
  // thread or the process ends never touch a destroyed queue).
  thread_local std::vector<std::shared_ptr<TrackNode>>* queue = nullptr;
  std::vector<std::shared_ptr<TrackNode>> own;
  const bool outermost = queue == nullptr;
  if (outermost) queue = &own;
  if (call != nullptr && call.use_count() == 1) {
    // The other nodes of the call (results of one call) are gone: on other threads
    // too, whose reads of the arguments happened before they let go (acquire).
    std::atomic_thread_fence(std::memory_order_acquire);
    for (Tensor& a : call->args)
      if (a.is_tracked()) {
        queue->push_back(a.track_node());
        a.set_track_node(nullptr);
      }
  }
  call.reset();
  if (!outermost) return;
  while (!own.empty()) {
    std::shared_ptr<TrackNode> n = std::move(own.back());
    own.pop_back();
    n.reset();  // may queue more
  }
  queue = nullptr;
}

void track_call(const Primitive& prim, std::span<const Tensor> inputs, const Attrs& attrs, std::span<Tensor> outs,
                std::span<const uint64_t> versions) {
  auto call = std::make_shared<TrackedCall>();
  call->prim = &prim;
  call->attrs = attrs;
  call->results = outs.size();
  call->args.reserve(inputs.size());
  for (const Tensor& in : inputs) {
    call->args.push_back(in);
    call->args.back().clear_trace_tags();
  }
  if (versions.empty()) call->versions.assign(inputs.size(), 0);
  else call->versions.assign(versions.begin(), versions.end());
  for (std::size_t i = 0; i < outs.size(); ++i) {
    auto node = std::make_shared<OpNode>();
    node->call = call;
    node->index = i;
    outs[i].set_track_node(std::move(node));
  }
}

}  // namespace detail

}  // namespace reel
