#include "reel/dispatch.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstring>

#include "reel/ir/tape.hpp"
#include "reel/trace.hpp"
#include "reel/track.hpp"
#include "trace_state.hpp"

namespace reel {

namespace {

std::vector<VarType> input_types(const Primitive& prim, std::span<const Tensor> inputs) {
  std::vector<VarType> types;
  types.reserve(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined())
      throw Error(fmt::format("{}: argument {} is an undefined tensor", prim.name, i + 1));
    types.push_back({inputs[i].dtype(), inputs[i].shape()});
    if (detail::in_foreign_trace(inputs[i]))
      throw Error(fmt::format("{}: argument {} belongs to {}", prim.name, i + 1, detail::kForeignTrace));
  }
  return types;
}

// Runs an eager function with no trace active: a primitive is recorded as one call,
// whatever its eager function does (a user's may itself use Reel operations).
template <class F>
auto untraced(F f) {
  std::vector<detail::Trace*> paused;
  paused.swap(detail::active_traces());
  const detail::TrackingPause no_tracking;
  struct Resume {
    std::vector<detail::Trace*>& paused;
    ~Resume() { paused.swap(detail::active_traces()); }
  } resume{paused};
  return f();
}

// An eager function may hand back a view of an argument (reshape and nodiff share its
// memory): of a param, whose memory W.assign overwrites, the result is a copy, made
// inside the sequence-locked read, so that it keeps its values like every tensor.
void unshare_params(std::span<const Tensor> inputs, Tensor& out) {
  if (!out.defined() || out.nbytes() == 0) return;
  const char* o = static_cast<const char*>(out.raw());
  for (const Tensor& in : inputs) {
    if (!in.is_param() || in.nbytes() == 0) continue;
    const char* p = static_cast<const char*>(in.raw());
    if (o < p + in.nbytes() && p < o + out.nbytes()) {
      Tensor copy(out.dtype(), out.shape());
      std::memcpy(copy.mutable_raw(), out.raw(), out.nbytes());
      out = std::move(copy);
      return;
    }
  }
}
void unshare_params(std::span<const Tensor> inputs, Results<Tensor>& outs) {
  for (Tensor& out : outs) unshare_params(inputs, out);
}

// Runs a primitive's eager function on inputs that may include params. A param's
// memory is written in place by W.assign, maybe on another thread while the function
// reads it: the function runs again until it has read each param at one version (a
// sequence lock, detail::ParamNode), and `versions` gets those versions for track().
// (A read that overlaps an assign is a data race by the letter of the memory model,
// which ThreadSanitizer reports; what it read is never used. Locking instead would
// make operations on a shared param wait for each other.)
template <class F>
auto run_eager(const Primitive& prim, std::span<const Tensor> inputs, std::vector<uint64_t>& versions, F eager_) {
  bool params = false;
  for (const Tensor& in : inputs) params = params || in.is_param();
  if (!params) return untraced(eager_);  // (versions stay empty: all 0)
  auto eager = [&] {
    auto out = eager_();
    unshare_params(inputs, out);
    return out;
  };
  versions.assign(inputs.size(), 0);
  constexpr int kTries = 100;
  for (int attempt = 0;; ++attempt) {
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].is_param()) versions[i] = detail::stable_version(detail::param_node(inputs[i]));
    auto out = untraced(eager);
    std::atomic_thread_fence(std::memory_order_acquire);
    std::size_t changed = inputs.size();
    for (std::size_t i = 0; i < inputs.size() && changed == inputs.size(); ++i)
      if (inputs[i].is_param() && detail::param_node(inputs[i]).version.load() != versions[i]) changed = i;
    if (changed == inputs.size()) return out;
    if (attempt + 1 == kTries)
      throw Error(fmt::format("{}: argument {} (a param, {}) was assigned on another thread each of the {} times "
                              "this operation read it; assign params between the operations that use them",
                              prim.name, changed + 1, type_str(inputs[changed].dtype(), inputs[changed].shape()),
                              kTries));
  }
}

void check_result(const Primitive& prim, Tensor& out, const VarType& want, int index) {
  if (!out.defined() || out.dtype() != want.dtype || out.shape() != want.shape)
    throw Error(fmt::format("{}: the eager function made {}{}, the type rule says {}", prim.name,
                            out.defined() ? type_str(out.dtype(), out.shape()) : "undefined",
                            index >= 0 ? fmt::format(" for result {}", index + 1) : "", type_str(want)));
  out.make_plain();  // an eager function may hand back a traced or tracked argument
}

// Records the call on every active trace that one of the inputs belongs to and tags
// the results with their variables.
void record(const Primitive& prim, std::span<const Tensor> inputs, const Attrs& attrs, std::span<Tensor> outs) {
  for (detail::Trace* trace : detail::active_traces()) {
    if (!trace->watched.empty())
      for (const Tensor& in : inputs)
        if (in.defined() && !reel::is_traced(in))  // (a nested trace's input is traced, not a copy)
          for (const void* w : trace->watched)
            if (in.raw() == w) throw Error(fmt::format("{}: {}", prim.name, trace->watched_why));
    bool traced = false;
    for (const Tensor& in : inputs) traced = traced || trace->owns(in);
    if (!traced) continue;
    std::vector<Var> args;
    for (const Tensor& in : inputs) args.push_back(trace->var_of(in));
    if (outs.size() == 1) {
      outs[0].add_trace_tag({trace->id, trace->builder.call(prim, std::move(args), attrs)});
    } else {
      const std::vector<Var> vars = trace->builder.call_results(prim, std::move(args), attrs);
      for (std::size_t i = 0; i < outs.size(); ++i) outs[i].add_trace_tag({trace->id, vars[i]});
    }
  }
}

// Whether record or track will record the call: an active trace owns an argument, or an
// argument is tracked for reel::back.
bool recorded(std::span<const Tensor> inputs) {
  for (const Tensor& in : inputs)
    if (in.is_tracked() && !detail::tracking_paused()) return true;
  for (detail::Trace* trace : detail::active_traces())
    for (const Tensor& in : inputs)
      if (trace->owns(in)) return true;
  return false;
}

// Records the call for reel::back when an argument is a param or computed from one.
void track(const Primitive& prim, std::span<const Tensor> inputs, const Attrs& attrs, std::span<Tensor> outs,
           std::span<const uint64_t> versions) {
  bool tracked = false;
  for (const Tensor& in : inputs) tracked = tracked || in.is_tracked();
  if (tracked && !detail::tracking_paused()) detail::track_call(prim, inputs, attrs, outs, versions);
}

}  // namespace

Results<Tensor> detail::apply_list(const Primitive& prim, std::span<const Tensor> inputs, Attrs attrs) {
  const std::vector<VarType> types = input_types(prim, inputs);
  const Results<VarType> results = infer_call_results(prim, types, attrs);
  if (!prim.eager) throw Error(fmt::format("{}: the primitive has no eager kernel", prim.name));
  std::vector<uint64_t> versions;
  // A call that will be recorded runs eager_recorded where given, which may set
  // attributes of the recorded call (a while_loop's trip count).
  const bool recording = prim.eager_recorded && recorded(inputs);
  Results<Tensor> outs = run_eager(prim, inputs, versions, [&] {
    return recording ? prim.eager_recorded(inputs, attrs) : prim.eager(inputs, attrs);
  });
  check_result_count(prim, "the eager function", outs.size());
  if (outs.size() != results.size())
    throw Error(fmt::format("{}: the eager function gave {} results, the type rule {}", prim.name, outs.size(),
                            results.size()));
  for (std::size_t i = 0; i < outs.size(); ++i)
    check_result(prim, outs[i], results[i], outs.size() == 1 ? -1 : static_cast<int>(i));
  const std::span<Tensor> out_span(outs.data(), outs.size());
  record(prim, inputs, attrs, out_span);
  track(prim, inputs, attrs, out_span, versions);
  return outs;
}

std::vector<Tensor> apply_results(const Primitive& prim, std::span<const Tensor> inputs, Attrs attrs) {
  return detail::apply_list(prim, inputs, std::move(attrs));
}

Tensor apply(const Primitive& prim, std::span<const Tensor> inputs, Attrs attrs) {
  if (prim.results != 1)
    throw Error(fmt::format("{}: the primitive has {} results; use reel::apply_results", prim.name, prim.results));
  return std::move(detail::apply_list(prim, inputs, std::move(attrs))[0]);
}

Tensor apply(std::string_view prim, std::span<const Tensor> inputs, Attrs attrs) {
  return apply(primitive(prim), inputs, std::move(attrs));
}

std::vector<Tensor> apply_results(std::string_view prim, std::span<const Tensor> inputs, Attrs attrs) {
  return apply_results(primitive(prim), inputs, std::move(attrs));
}

}  // namespace reel
