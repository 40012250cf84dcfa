#include "reel/custom.hpp"

#include <fmt/format.h>

#include <mutex>
#include <unordered_set>

#include "reel/ir/builder.hpp"
#include "reel/trace.hpp"

namespace reel {

namespace detail {

Tape trace_on_zeros(const TapeBuilder& b, std::span<const Var> vars,
                    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& f,
                    std::vector<bool>* defined) {
  TraceScope scope;
  std::vector<Tensor> in;
  for (Var v : vars) in.push_back(scope.input(zeros(b.type(v).shape, b.type(v).dtype)));
  const std::vector<Tensor> out = f(in);
  if (defined != nullptr) defined->clear();
  for (const Tensor& t : out) {
    if (defined != nullptr) defined->push_back(t.defined());
    if (t.defined()) scope.output(t);
  }
  return scope.finish();
}

}  // namespace detail

namespace {

// Traces `rule` on placeholders and inlines it into `b` with `vars` as its inputs:
// one variable per output of the rule, kNoVar where it returned an undefined tensor.
std::vector<Var> trace_rule(TapeBuilder& b, std::span<const Var> vars,
                            const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& rule) {
  std::vector<bool> defined;
  const Tape sub = detail::trace_on_zeros(b, vars, rule, &defined);
  const std::vector<Var> outs = b.inline_tape(sub, vars);
  std::vector<Var> result;
  std::size_t next = 0;
  for (bool d : defined) result.push_back(d ? outs[next++] : kNoVar);
  return result;
}

}  // namespace

const Primitive& define_primitive(PrimitiveDef def) {
  Primitive p;
  p.name = def.name;
  p.arity = def.arity;
  p.attrs = def.attrs;
  if (def.type) {
    p.infer = def.type;
  } else {
    p.infer = [name = def.name](std::span<const VarType> in, const Attrs&) {
      if (in.empty()) throw Error(fmt::format("{}: without a type rule the result takes the first argument's type, and there is none", name));
      return in[0];
    };
  }
  if (!def.eager) throw Error(fmt::format("define_primitive: primitive '{}' has no eager function", def.name));
  p.eager = def.eager;
  p.pure = def.pure;
  p.structure = Structure::opaque;
  if (def.vjp) {
    p.adjoint = [name = def.name, vjp = def.vjp](TapeBuilder& b, const AdjointArgs& a) {
      std::vector<Var> vars(a.args.begin(), a.args.end());
      vars.push_back(a.out);
      vars.push_back(a.dout);
      const std::size_t n = a.args.size();
      std::vector<Var> grads = trace_rule(b, vars, [&](const std::vector<Tensor>& in) {
        std::vector<Tensor> g = vjp(std::vector<Tensor>(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n)),
                                    in[n], in[n + 1], a.attrs);
        if (g.size() != n)
          throw Error(fmt::format("{}: the vjp rule returned {} gradients for {} arguments", name, g.size(), n));
        for (std::size_t i = 0; i < n; ++i)
          if (g[i].defined() && (g[i].dtype() != in[i].dtype() || g[i].shape() != in[i].shape()))
            throw Error(fmt::format("{}: the vjp rule returned {} for argument {}, expected {}", name,
                                    type_str(g[i].dtype(), g[i].shape()), i + 1,
                                    type_str(in[i].dtype(), in[i].shape())));
        return g;
      });
      for (std::size_t i = 0; i < n; ++i)
        if (!a.needs[i]) grads[i] = kNoVar;
      return grads;
    };
  }
  if (def.jvp) {
    p.tangent = [name = def.name, jvp = def.jvp](TapeBuilder& b, const TangentArgs& a) {
      // Zero tangents are passed as undefined tensors: only the others are inputs.
      std::vector<Var> vars(a.args.begin(), a.args.end());
      vars.push_back(a.out);
      for (Var t : a.tangents)
        if (t != kNoVar) vars.push_back(t);
      const std::size_t n = a.args.size();
      const std::vector<Var> out = trace_rule(b, vars, [&](const std::vector<Tensor>& in) {
        std::vector<Tensor> tangents;
        std::size_t next = n + 1;
        for (Var t : a.tangents) tangents.push_back(t != kNoVar ? in[next++] : Tensor{});
        const Tensor r = jvp(std::vector<Tensor>(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n)), in[n],
                             tangents, a.attrs);
        if (r.defined() && (r.dtype() != in[n].dtype() || r.shape() != in[n].shape()))
          throw Error(fmt::format("{}: the jvp rule returned {}, expected {}", name, type_str(r.dtype(), r.shape()),
                                  type_str(in[n].dtype(), in[n].shape())));
        return std::vector<Tensor>{r};
      });
      return out[0];
    };
  }
  if (def.batch) {
    p.batch = [name = def.name, batch = def.batch, infer = p.infer](TapeBuilder& b, const BatchArgs& a) {
      Attrs attrs = a.attrs;
      VarType want = infer(a.types, attrs)[0];
      want.shape.insert(want.shape.begin(), a.size);
      const std::vector<bool> flags(a.batched.begin(), a.batched.end());
      const std::vector<Var> out = trace_rule(b, a.args, [&](const std::vector<Tensor>& in) {
        const Tensor r = batch(in, flags, a.size, a.attrs);
        if (!r.defined() || r.dtype() != want.dtype || r.shape() != want.shape)
          throw Error(fmt::format("{}: the batch rule returned {}, expected {} (the result with the batch of {} in front)",
                                  name, r.defined() ? type_str(r.dtype(), r.shape()) : "an undefined tensor",
                                  type_str(want), a.size));
        return std::vector<Tensor>{r};
      });
      return out[0];
    };
  }
  return register_primitive(std::move(p));
}

Tensor custom_vjp(const std::string& name, const std::vector<Tensor>& args,
                  std::function<Tensor(const std::vector<Tensor>&)> forward,
                  std::function<std::vector<Tensor>(const std::vector<Tensor>&, const Tensor&, const Tensor&)> pullback) {
  static std::mutex mutex;  // two threads' first calls register once
  static std::unordered_set<std::string> mine;  // the names custom_vjp registered
  const Primitive* prim;
  {
    std::lock_guard<std::mutex> lock(mutex);
    prim = find_primitive(name);
    if (prim != nullptr && !mine.contains(name))
      throw Error(fmt::format("custom_vjp: the name '{}' is taken by a {} primitive; expected a name of its own "
                              "for this function (custom_vjp never replaces a primitive's rules)",
                              name, is_builtin(*prim) ? "built-in" : "registered"));
    if (prim == nullptr) {
      if (!forward || !pullback)
        throw Error(fmt::format("custom_vjp: '{}' needs a forward function and a pullback", name));
      prim = &define_primitive({
          .name = name,
          .arity = static_cast<int>(args.size()),
          .attrs = {},
          .type = {},
          .eager = [forward](std::span<const Tensor> in, const Attrs&) {
            return forward(std::vector<Tensor>(in.begin(), in.end()));  // apply runs it untraced
          },
          .vjp = [pullback](const std::vector<Tensor>& x, const Tensor& out, const Tensor& dout, const Attrs&) {
            return pullback(x, out, dout);
          },
          .jvp = {},
          .pure = true,
          .batch = {}});
      mine.insert(name);
    }
  }
  return reel::apply(*prim, args);
}

}  // namespace reel
