#include "reel/dispatch.hpp"

#include <fmt/format.h>

#include "reel/ir/tape.hpp"
#include "trace_state.hpp"

namespace reel {

std::vector<Tensor> apply_results(const Primitive& prim, std::span<const Tensor> inputs, Attrs attrs) {
  std::vector<VarType> types;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined())
      throw Error(fmt::format("{}: argument {} is an undefined tensor", prim.name, i + 1));
    types.push_back({inputs[i].dtype(), inputs[i].shape()});
  }
  const std::vector<VarType> results = infer_call_results(prim, types, attrs);
  const bool multi = prim.results > 1;
  if (multi ? !prim.eager_results : !prim.eager)
    throw Error(fmt::format("{}: the primitive has no eager kernel", prim.name));
  std::vector<Tensor> outs;
  {
    // The eager function runs with no trace active: a primitive is recorded as one
    // call, whatever its eager function does (a user's may itself use Reel operations).
    std::vector<detail::Trace*> paused;
    paused.swap(detail::active_traces());
    struct Resume {
      std::vector<detail::Trace*>& paused;
      ~Resume() { paused.swap(detail::active_traces()); }
    } resume{paused};
    if (multi) outs = prim.eager_results(inputs, attrs);
    else outs.push_back(prim.eager(inputs, attrs));
  }
  if (outs.size() != results.size())
    throw Error(fmt::format("{}: the eager function made {} results, the primitive has {}", prim.name,
                            outs.size(), results.size()));
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i].defined() || outs[i].dtype() != results[i].dtype || outs[i].shape() != results[i].shape)
      throw Error(fmt::format("{}: the eager function made {}{}, the type rule says {}", prim.name,
                              outs[i].defined() ? type_str(outs[i].dtype(), outs[i].shape()) : "undefined",
                              multi ? fmt::format(" for result {}", i + 1) : "", type_str(results[i])));
    outs[i].clear_trace_tags();
  }
  for (detail::Trace* trace : detail::active_traces()) {
    bool traced = false;
    for (const Tensor& in : inputs) traced = traced || trace->owns(in);
    if (!traced) continue;
    std::vector<Var> args;
    for (const Tensor& in : inputs) args.push_back(trace->var_of(in));
    const std::vector<Var> vars = trace->builder.call_results(prim, std::move(args), attrs);
    for (std::size_t i = 0; i < outs.size(); ++i) outs[i].add_trace_tag({trace->id, vars[i]});
  }
  return outs;
}

Tensor apply(const Primitive& prim, std::span<const Tensor> inputs, Attrs attrs) {
  if (prim.results != 1)
    throw Error(fmt::format("{}: the primitive has {} results; use reel::apply_results", prim.name, prim.results));
  return std::move(apply_results(prim, inputs, std::move(attrs))[0]);
}

Tensor apply(std::string_view prim, std::span<const Tensor> inputs, Attrs attrs) {
  return apply(primitive(prim), inputs, std::move(attrs));
}

std::vector<Tensor> apply_results(std::string_view prim, std::span<const Tensor> inputs, Attrs attrs) {
  return apply_results(primitive(prim), inputs, std::move(attrs));
}

}  // namespace reel
