#include "reel/function_primitive.hpp"

#include <fmt/format.h>

#include "reel/ir/builder.hpp"
#include "reel/passes.hpp"
#include "reel/trace.hpp"

namespace reel {

const Primitive& define_function_primitive(const std::string& name, int arity,
                                           std::function<Tensor(const std::vector<Tensor>&)> f,
                                           std::function<VarType(std::span<const VarType>, const Attrs&)> type) {
  if (!f) throw Error(fmt::format("define_function_primitive: '{}' has no function", name));
  Primitive p;
  p.name = name;
  p.arity = arity;
  p.structure = Structure::opaque;
  if (type) {
    p.infer = std::move(type);
  } else {
    p.infer = [name](std::span<const VarType> in, const Attrs&) {
      if (in.empty()) throw Error(fmt::format("{}: expected at least one argument", name));
      return in[0];
    };
  }
  // The value: f itself (reel::apply runs eager functions with no trace active, so
  // nothing inside f is recorded).
  p.eager = [f](std::span<const Tensor> in, const Attrs&) { return f(std::vector<Tensor>(in.begin(), in.end())); };
  // The rules (reverse, forward, batching): f traced on placeholders, then the pass's
  // own transformation of that tape, inlined. `out` is recomputed inside the inlined
  // tape (CSE does not see it).
  auto traced = [f](const TapeBuilder& b, std::span<const Var> args) {
    return detail::trace_on_zeros(b, args, [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in)}; });
  };
  p.adjoint = [traced, name](TapeBuilder& b, const AdjointArgs& a) {
    const Tape body = traced(b, a.args);
    if (body.type(body.outputs[0]) != b.type(a.dout))
      throw Error(fmt::format("{}: the function returned {}, its type rule says {}", name,
                              type_str(body.type(body.outputs[0])), type_str(b.type(a.dout))));
    const Tape g = vjp_tape(body);  // inputs: args, seed; outputs: value, grads
    std::vector<Var> in(a.args.begin(), a.args.end());
    in.push_back(a.dout);
    const std::vector<Var> out = b.inline_tape(g, in);
    std::vector<Var> grads(out.begin() + 1, out.end());
    for (std::size_t i = 0; i < grads.size(); ++i)
      if (!a.needs[i]) grads[i] = kNoVar;
    return grads;
  };
  p.tangent = [traced](TapeBuilder& b, const TangentArgs& a) {
    const Tape body = traced(b, a.args);
    const Tape j = jvp_tape(body);  // inputs: args, tangents; outputs: value, tangent
    std::vector<Var> in(a.args.begin(), a.args.end());
    for (std::size_t i = 0; i < a.tangents.size(); ++i)
      in.push_back(a.tangents[i] != kNoVar ? a.tangents[i]
                                           : b.broadcast_to(b.scalar(0.0, b.type(a.args[i]).dtype),
                                                            b.type(a.args[i]).shape));
    return b.inline_tape(j, in)[1];
  };
  // Batching: f traced on the unbatched arguments' types, batched by the pass, inlined.
  p.batch = [traced](TapeBuilder& b, const BatchArgs& a) {
    TapeBuilder types;
    std::vector<Var> vars;
    for (const VarType& t : a.types) vars.push_back(types.input(t));
    return b.inline_tape(vmap_tape(traced(types, vars), a.batched, a.size), a.args)[0];
  };
  return register_primitive(std::move(p));
}

}  // namespace reel
