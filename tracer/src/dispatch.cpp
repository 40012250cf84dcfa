#include "reel/dispatch.hpp"

#include <fmt/format.h>

#include "reel/ir/tape.hpp"
#include "trace_state.hpp"

namespace reel {

Tensor apply(const Primitive& prim, std::span<const Tensor> inputs, Attrs attrs) {
  std::vector<VarType> types;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined())
      throw Error(fmt::format("{}: argument {} is an undefined tensor", prim.name, i + 1));
    types.push_back({inputs[i].dtype(), inputs[i].shape()});
  }
  const VarType type = infer_call(prim, types, attrs);
  if (!prim.eager) throw Error(fmt::format("{}: the primitive has no eager kernel", prim.name));
  Tensor out;
  {
    // The eager function runs with no trace active: a primitive is recorded as one
    // call, whatever its eager function does (a user's may itself use Reel operations).
    std::vector<detail::Trace*> paused;
    paused.swap(detail::active_traces());
    struct Resume {
      std::vector<detail::Trace*>& paused;
      ~Resume() { paused.swap(detail::active_traces()); }
    } resume{paused};
    out = prim.eager(inputs, attrs);
  }
  if (out.dtype() != type.dtype || out.shape() != type.shape)
    throw Error(fmt::format("{}: internal error: the kernel made {}, the shape rule says {}",
                            prim.name, type_str(out.dtype(), out.shape()), type_str(type)));
  out.clear_trace_tags();
  for (detail::Trace* trace : detail::active_traces()) {
    bool traced = false;
    for (const Tensor& in : inputs) traced = traced || trace->owns(in);
    if (!traced) continue;
    std::vector<Var> args;
    for (const Tensor& in : inputs) args.push_back(trace->var_of(in));
    out.add_trace_tag({trace->id, trace->builder.call(prim, std::move(args), attrs)});
  }
  return out;
}

Tensor apply(std::string_view prim, std::span<const Tensor> inputs, Attrs attrs) {
  return apply(primitive(prim), inputs, std::move(attrs));
}

}  // namespace reel
