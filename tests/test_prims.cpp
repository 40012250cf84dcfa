#include "test_prims.hpp"

#include <cmath>
#include <mutex>
#include <reel/elementwise.hpp>
#include <reel/reel.hpp>

namespace reel::test {

namespace {

Tensor call2(const char* name, const Tensor& a, const Tensor& b, Attrs attrs = {}) {
  const std::vector<Tensor> args{a, b};
  return reel::apply(name, args, std::move(attrs));
}

// y[i] = sum_k x[i + k - pad] w[k] (zero outside x): length n + 2 pad - K + 1.
template <class F>
Tensor loops(int64_t n, F f) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = f(i);
  return tensor(v);
}
double at(const std::vector<double>& v, int64_t i) {
  return i >= 0 && i < static_cast<int64_t>(v.size()) ? v[static_cast<std::size_t>(i)] : 0.0;
}

void define_conv1d() {
  const std::vector<AttrSpec> pad{{"pad", AttrKind::integer}};
  // d/dx: dx[j] = sum_k dy[j - k + pad] w[k].
  define_primitive({.name = "conv1d_data_grad", .arity = 2, .attrs = pad,
                    .type = [](std::span<const VarType> in, const Attrs& a) {
                      return VarType{in[0].dtype, {in[0].shape[0] - 2 * a.integer("pad") + in[1].shape[0] - 1}};
                    },
                    .eager = [](std::span<const Tensor> in, const Attrs& a) {
                      const auto dy = in[0].values(), w = in[1].values();
                      const int64_t p = a.integer("pad"), K = static_cast<int64_t>(w.size());
                      return loops(static_cast<int64_t>(dy.size()) - 2 * p + K - 1, [&](int64_t j) {
                        double s = 0;
                        for (int64_t k = 0; k < K; ++k) s += at(dy, j - k + p) * w[static_cast<std::size_t>(k)];
                        return s;
                      });
                    }});
  // d/dw: dw[k] = sum_i dy[i] x[i + k - pad].
  define_primitive({.name = "conv1d_filter_grad", .arity = 2, .attrs = {{"pad", AttrKind::integer}, {"k", AttrKind::integer}},
                    .type = [](std::span<const VarType> in, const Attrs& a) {
                      return VarType{in[0].dtype, {a.integer("k")}};
                    },
                    .eager = [](std::span<const Tensor> in, const Attrs& a) {
                      const auto x = in[0].values(), dy = in[1].values();
                      const int64_t p = a.integer("pad");
                      return loops(a.integer("k"), [&](int64_t k) {
                        double s = 0;
                        for (int64_t i = 0; i < static_cast<int64_t>(dy.size()); ++i) s += dy[static_cast<std::size_t>(i)] * at(x, i + k - p);
                        return s;
                      });
                    }});
  define_primitive({.name = "conv1d", .arity = 2, .attrs = pad,
                    .type = [](std::span<const VarType> in, const Attrs& a) {
                      if (in[0].shape.size() != 1 || in[1].shape.size() != 1)
                        throw Error("conv1d: expected 1-d x and w");
                      return VarType{in[0].dtype, {in[0].shape[0] + 2 * a.integer("pad") - in[1].shape[0] + 1}};
                    },
                    .eager = [](std::span<const Tensor> in, const Attrs& a) {
                      const auto x = in[0].values(), w = in[1].values();
                      const int64_t p = a.integer("pad"), K = static_cast<int64_t>(w.size());
                      return loops(static_cast<int64_t>(x.size()) + 2 * p - K + 1, [&](int64_t i) {
                        double s = 0;
                        for (int64_t k = 0; k < K; ++k) s += at(x, i + k - p) * w[static_cast<std::size_t>(k)];
                        return s;
                      });
                    },
                    .vjp = [](const std::vector<Tensor>& x, const Tensor&, const Tensor& dy, const Attrs& a) {
                      const int64_t p = a.integer("pad"), K = x[1].shape()[0];
                      return std::vector<Tensor>{call2("conv1d_data_grad", dy, x[1], {{"pad", p}}),
                                                 call2("conv1d_filter_grad", x[0], dy, {{"pad", p}, {"k", K}})};
                    }});
}


// sincos(x) = (sin x, cos x): one call, two results, each rule giving one value per
// result. sincos_old is the same primitive in the older spelling of the rules
// (infer_results, eager_results, tangent_results), still accepted.
Primitive sincos_definition(const char* name) {
  return {
      .name = name,
      .infer = [](std::span<const VarType> in, const Attrs&) { return std::vector<VarType>{in[0], in[0]}; },
      .eager = [](std::span<const Tensor> in, const Attrs&) {
        return std::vector<Tensor>{kernels::map_unary(in[0], [](const auto& e, auto x) { return e.sin(x); }),
                                   kernels::map_unary(in[0], [](const auto& e, auto x) { return e.cos(x); })};
      },
      // x's adjoint: ds * cos x - dc * sin x, either term absent when its result is unused.
      .adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
        const Var s = a.outs[0], c = a.outs[1], ds = a.douts[0], dc = a.douts[1];
        const Var from_s = ds == kNoVar ? kNoVar : b.mul(ds, c);
        const Var from_c = dc == kNoVar ? kNoVar : b.mul(dc, s);
        return std::vector<Var>{from_c == kNoVar ? from_s : from_s == kNoVar ? b.neg(from_c) : b.sub(from_s, from_c)};
      },
      .results = 2,
      .tangent = [](TapeBuilder& b, const TangentArgs& a) {
        const Var t = a.tangents[0];
        return std::vector<Var>{b.mul(t, a.outs[1]), b.neg(b.mul(t, a.outs[0]))};
      },
      .structure = Structure::opaque,
  };
}

void define_sincos() {
  register_primitive(sincos_definition("sincos"));
  // The older spelling as a designated initialiser in the field order it was written
  // against (the fields keep that order, so such code still compiles).
  const Primitive one = sincos_definition("sincos_old");
  register_primitive({
      .name = "sincos_old",
      .adjoint = one.adjoint,
      .results = 2,
      .infer_results = [infer = one.infer](std::span<const VarType> in, const Attrs& a) { return infer(in, a); },
      .eager_results = [eager = one.eager](std::span<const Tensor> in, const Attrs& a) { return eager(in, a); },
      .tangent_results = [tangent = one.tangent](TapeBuilder& b, const TangentArgs& a) { return tangent(b, a); },
      .structure = Structure::opaque,
  });
}

// call_body(x, body={tape}): the tape attribute `body`, a function of one tensor to
// one tensor, applied to x. Its derivative rules differentiate the body and inline
// the result, so its gradient tape holds no call at all: the shape of what structured
// loops will need.
void define_call_body() {
  Primitive p;
  p.name = "call_body";
  p.arity = 1;
  p.attrs = {{"body", AttrKind::tape}};
  p.structure = Structure::opaque;
  p.infer = [](std::span<const VarType> in, const Attrs& a) {
    const Tape& body = a.tape("body");
    const std::vector<VarType> inputs = body.input_types();
    if (inputs.size() != 1 || body.outputs.size() != 1 || inputs[0] != in[0])
      throw Error(fmt::format("call_body: expected a body with one input of type {} and one output, got {} "
                              "inputs and {} outputs", type_str(in[0]), inputs.size(), body.outputs.size()));
    return body.type(body.outputs[0]);
  };
  p.eager = [](std::span<const Tensor> in, const Attrs& a) {
    return play(a.tape("body"), std::vector<Tensor>(in.begin(), in.end()))[0];
  };
  p.adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
    const Var in[] = {a.args[0], a.dout};
    return std::vector<Var>{b.inline_tape(vjp_tape(a.attrs.tape("body")), in)[1]};
  };
  p.tangent = [](TapeBuilder& b, const TangentArgs& a) {
    const Var in[] = {a.args[0], a.tangents[0]};
    return b.inline_tape(jvp_tape(a.attrs.tape("body")), in)[1];
  };
  register_primitive(std::move(p));
}

}  // namespace

void register_test_primitives() {
  static std::once_flag once;
  std::call_once(once, [] {
    define_conv1d();
    define_sincos();
    define_call_body();
  });
}

}  // namespace reel::test
