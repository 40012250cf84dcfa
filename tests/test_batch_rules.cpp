// Batching (vmap) of every built-in primitive: a registry walk. Each built-in has sample
// tapes calling it (the table below; a built-in without one fails the test). For each
// non-empty subset of a sample's inputs batched (size 3, the i64 ones included), the
// tape vmap_tape makes must compute what the sample computes on each batch element's
// slices, interpreted and compiled; and where the primitive has a batching rule (or is
// elementwise: batched generically), the batched tape must not fall back to a `scan`
// over the batch.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>

#include "reel/ir/body_tape.hpp"
#include "test_util.hpp"

namespace reel {
namespace {

constexpr int64_t kBatch = 3;

// One argument of a sample, as a function of a seed (each batch element's slice has its own).
using Arg = std::function<Tensor(uint64_t seed)>;
using Args = std::function<std::vector<Tensor>(uint64_t seed)>;

Arg normal(Shape s, DType d = DType::f64) { return [s, d](uint64_t seed) { return randn(s, seed, d); }; }
Arg positive(Shape s, double scale = 1.0) { return [s, scale](uint64_t seed) { return (rand(s, seed) + 0.5) * scale; }; }
Arg fixed(Tensor t) { return [t](uint64_t) { return t; }; }
// 0/1 values (a condition of where).
Arg mask(Shape s) {
  return [s](uint64_t seed) {
    std::vector<double> v = rand(s, seed).values();
    for (double& x : v) x = x < 0.5 ? 0.0 : 1.0;
    return tensor(v, s);
  };
}
// i64 indices into an axis of length n, distinct where `distinct` (index_update).
Arg indices(Shape s, int64_t n, bool distinct = false) {
  return [s, n, distinct](uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<double> v;
    std::vector<int64_t> all(static_cast<std::size_t>(n));
    std::iota(all.begin(), all.end(), int64_t{0});
    std::shuffle(all.begin(), all.end(), rng);
    for (int64_t i = 0; i < numel(s); ++i)
      v.push_back(static_cast<double>(distinct ? all[static_cast<std::size_t>(i)] : static_cast<int64_t>(rng() % n)));
    return tensor(v, s, DType::i64);
  };
}

struct Sample {
  std::string prim;  // the primitive it samples
  std::string what;
  Tape tape;
  Args args;
};

Args args_of(std::vector<Arg> makers) {
  return [makers](uint64_t seed) {
    std::vector<Tensor> r;
    for (std::size_t i = 0; i < makers.size(); ++i) r.push_back(makers[i](seed * 10 + i));
    return r;
  };
}

// A tape of one call of `prim` on inputs of the arguments' types, returning every result.
Sample one_call(const std::string& prim, std::vector<Arg> makers, Attrs attrs = {}, std::string what = "") {
  const Args args = args_of(std::move(makers));
  TapeBuilder b;
  std::vector<Var> in;
  for (const Tensor& t : args(0)) in.push_back(b.input({t.dtype(), t.shape()}));
  b.set_outputs(b.call_results(primitive(prim), in, std::move(attrs)));
  return {prim, what.empty() ? prim : what, b.finish(), args};
}

// A traced tape (loops and what their derivatives emit), optionally its gradient tape.
Sample traced(const std::string& prim, const std::string& what, const test::Fn& fn, std::vector<Arg> makers,
              bool gradient = false) {
  const Args args = args_of(std::move(makers));
  const Tape t = test::trace_list(fn, args(0));
  return {prim, what, gradient ? grad_tape(t) : t, args};
}

Tensor scan_net(const Tensor& W, const Tensor& y0, const Tensor& xs, Checkpoint checkpoint = {}) {
  ScanOptions o;
  o.checkpoint = checkpoint;
  const auto [y, ys] = scan([&](const Tensor& y, const Tensor& x) {
    const Tensor next = tanh(matmul(W, y) + x) * 0.5 + y * 0.5;
    return std::pair{next, sin(next)};
  }, y0, xs, o);
  return y + sum(ys, 0);
}

Tensor block(const Tensor& W, const Tensor& x) { return tanh(matmul(W, x)) * 0.5 + sin(x) * x; }

std::vector<Sample> samples() {
  using S = Shape;
  const auto i64 = [](int64_t v) { return v; };
  std::vector<Sample> s = {
      one_call("clamp", {normal({3, 4})}, {{"lo", -0.5}, {"hi", 0.5}}),
      one_call("pow", {positive({3, 4})}, {{"p", 2.5}}),
      one_call("where", {mask({3, 4}), normal({3, 4}), normal({4})}),
      one_call("cast", {normal({2, 3})}, {{"dtype", DType::f32}}, "cast to f32"),
      one_call("cast", {normal({2, 3}, DType::f32)}, {{"dtype", DType::f64}}, "cast to f64"),
      one_call("cast", {[](uint64_t seed) { return randn({2, 3}, seed) * 5.0; }}, {{"dtype", DType::i64}}, "cast to i64"),
      one_call("reshape", {normal({2, 3, 4})}, {{"shape", S{6, 4}}}),
      one_call("reshape", {normal({1})}, {{"shape", S{}}}, "reshape to 0-d"),
      one_call("broadcast_to", {normal({3, 1})}, {{"shape", S{2, 3, 4}}}),
      one_call("broadcast_to", {normal({})}, {{"shape", S{2}}}, "broadcast_to from 0-d"),
      one_call("transpose", {normal({3, 4})}),
      one_call("matmul", {normal({3, 4}), normal({4, 5})}),
      one_call("matmul", {normal({3, 4}), normal({4})}, {}, "matmul matrix-vector"),
      one_call("batch_matmul", {normal({2, 3, 4}), normal({2, 4, 5})}),
      one_call("batch_matmul", {normal({2, 3, 4}), normal({4, 5})}, {}, "batch_matmul shared matrix"),
      one_call("batch_matmul", {normal({3, 4}), normal({2, 2, 4, 5})}, {}, "batch_matmul broadcast"),
      one_call("batch_matmul", {normal({2, 3, 1}), normal({2, 1, 4})}, {}, "batch_matmul outer products"),
      one_call("batch_matmul", {normal({2, 5, 6}), normal({6, 7})}, {}, "batch_matmul larger, shared matrix"),
      one_call("batch_matmul", {normal({5, 6}), normal({2, 6, 7})}, {}, "batch_matmul larger, broadcast"),
      one_call("matmul", {normal({5, 6}), normal({6, 7})}, {}, "matmul larger"),
      one_call("matmul", {normal({9, 8}), normal({8})}, {}, "matmul larger matrix-vector"),
      one_call("matmul", {normal({3, 1}), normal({1, 4})}, {}, "matmul outer product"),
      one_call("sum", {normal({3, 4})}),
      one_call("sum", {normal({2, 3, 4})}, {{"axes", S{0, 2}}, {"keepdims", true}}, "sum axes keepdims"),
      one_call("sum", {normal({2, 3})}, {{"axis", i64(-1)}}, "sum axis"),
      one_call("sum", {normal({})}, {}, "sum of 0-d"),
      one_call("mean", {normal({3, 4})}, {{"axes", S{1}}}),
      one_call("mean", {normal({3, 4})}, {{"keepdims", true}}, "mean keepdims"),
      one_call("prod", {normal({3, 4})}, {{"axes", S{0}}}),
      one_call("prod", {normal({3, 4})}),
      one_call("max", {normal({3, 4})}, {{"axes", S{1}}}),
      one_call("max", {normal({3, 4})}, {}, "max of all"),
      one_call("min", {normal({2, 3, 4})}, {{"axes", S{0, 2}}}),
      one_call("argmax", {normal({3, 4})}, {{"axis", i64(1)}}),
      one_call("argmax", {normal({3, 4})}, {}, "argmax flattened"),
      one_call("argmin", {normal({3, 4})}, {{"axis", i64(0)}}),
      one_call("sum_to", {normal({2, 3, 4})}, {{"shape", S{3, 1}}}),
      one_call("sum_to", {normal({2, 3})}, {{"shape", S{}}}, "sum_to 0-d"),
      one_call("slice", {normal({4, 5})}, {{"axis", i64(1)}, {"start", i64(1)}, {"stop", i64(5)}, {"step", i64(2)}}),
      one_call("unslice", {normal({4, 2})}, {{"axis", i64(1)}, {"start", i64(1)}, {"step", i64(2)}, {"size", i64(5)}}),
      one_call("place", {normal({4, 2}), normal({4, 1})},
               {{"axis", i64(1)}, {"starts", S{1, 2}}, {"step", i64(2)}, {"size", i64(5)}}),
      one_call("permute", {normal({2, 3, 4})}, {{"perm", S{2, 0, 1}}}),
      one_call("concat", {normal({2, 3}), normal({2, 1}), normal({2, 2})}, {{"axis", i64(1)}}),
      one_call("gather", {normal({5, 3}), indices({2, 2}, 5)}),
      one_call("gather", {normal({3, 5, 2}), indices({4}, 5)}, {{"axis", i64(1)}}, "gather axis 1"),
      one_call("gather", {normal({5, 3}), indices({}, 5)}, {}, "gather one index"),
      one_call("scatter_add", {normal({5, 3}), indices({4}, 5), normal({4, 3})}),
      one_call("scatter_add", {normal({3, 5}), indices({2, 2}, 5), normal({3, 2, 2})}, {{"axis", i64(1)}},
               "scatter_add axis 1"),
      one_call("index_update", {normal({5, 3}), indices({3}, 5, true), normal({3, 3})}),
      one_call("index_update", {normal({2, 5, 3}), indices({2}, 5, true), normal({2, 2, 3})}, {{"axis", i64(1)}},
               "index_update axis 1"),
      one_call("guard", {positive({1})}, {{"expected", true}}),
      one_call("guard", {fixed(tensor({0.0}, {1, 1}))}, {{"expected", false}}, "guard false"),
      one_call("guard", {fixed(tensor({3.0}, {}, DType::i64))}, {{"expected", true}}, "guard i64"),
      one_call("guard", {normal({1}, DType::f32)}, {{"expected", true}}, "guard f32"),
      one_call("matmul", {normal({3, 4}, DType::f32), normal({4, 5}, DType::f32)}, {}, "matmul f32"),
      one_call("max", {normal({3, 4}, DType::f32)}, {{"axes", S{0}}}, "max f32"),
      one_call("gather", {normal({5, 3}, DType::f32), indices({2}, 5)}, {}, "gather f32"),
      one_call("guard_value", {fixed(tensor({1.5, -2.0}, {2}))}, {{"values", std::vector<double>{1.5, -2.0}}}),
      one_call("conv2d", {normal({2, 2, 5, 5}), normal({3, 2, 3, 3})}),
      one_call("conv2d_data_grad", {normal({2, 3, 3, 3}), normal({3, 2, 3, 3})}, {{"input_hw", S{5, 5}}}),
      one_call("conv2d_filter_grad", {normal({2, 2, 5, 5}), normal({2, 3, 3, 3})}, {{"kernel_hw", S{3, 3}}}),
      one_call("max_pool2d", {normal({2, 2, 4, 4})}, {{"kernel", S{2, 2}}}),
      one_call("max_pool2d_grad", {normal({2, 2, 4, 4}), normal({2, 2, 2, 2})}, {{"kernel", S{2, 2}}}),
      one_call("max_pool2d_gather", {normal({2, 2, 4, 4}), normal({2, 2, 4, 4})}, {{"kernel", S{2, 2}}}),
      one_call("avg_pool2d", {normal({2, 2, 4, 4})}, {{"kernel", S{2, 2}}}),
      one_call("avg_pool2d_grad", {normal({2, 2, 2, 2})}, {{"kernel", S{2, 2}}, {"input_hw", S{4, 4}}}),
      traced("scan", "scan", [](const std::vector<Tensor>& a) { return scan_net(a[0] * 0.5, a[1], a[2]); },
             {normal({3, 3}), normal({3}), normal({4, 3})}),
      traced("while_loop", "while_loop (per-element trip counts)",
             [](const std::vector<Tensor>& a) {
               return while_loop([](const Tensor& x) { return sum(x) < 10.0; },
                                 [&](const Tensor& x) { return x * a[1] + 0.1; }, a[0]);
             },
             {positive({3}), [](uint64_t seed) { return rand({3}, seed) + 1.2; }}),
      traced("checkpoint", "checkpoint",
             [](const std::vector<Tensor>& a) {
               return checkpoint([](const Tensor& w, const Tensor& v) { return block(w, v); })(a[0], a[1]);
             },
             {normal({3, 3}), normal({3})}),
      traced("call", "call (a checkpoint's gradient)",
             [](const std::vector<Tensor>& a) {
               return sum(checkpoint([](const Tensor& w, const Tensor& v) { return block(w, v); })(a[0], a[1]));
             },
             {normal({3, 3}), normal({3})}, true),
      traced("revolve", "revolve (a binomial scan's gradient)",
             [](const std::vector<Tensor>& a) { return sum(scan_net(a[0] * 0.5, a[1], a[2], Checkpoint::binomial(2))); },
             {normal({3, 3}), normal({3}), normal({5, 3})}, true),
  };
  // Every elementwise primitive without required attributes: same shapes, and broadcast.
  for (const Primitive* p : all_primitives()) {
    if (!is_builtin(*p) || p->structure != Structure::elementwise || p->arity < 1 || p->arity > 3) continue;
    if (std::any_of(p->attrs.begin(), p->attrs.end(), [](const AttrSpec& a) { return !a.optional; })) continue;
    std::vector<Arg> same, broadcast;
    for (int i = 0; i < p->arity; ++i) {
      const double scale = test::sample_scale(p->name);
      same.push_back(positive({3, 4}, scale));
      broadcast.push_back(i == 0 ? positive({3, 4}, scale) : positive({4}, scale));
    }
    s.push_back(one_call(p->name, same));
    if (p->arity > 1) s.push_back(one_call(p->name, broadcast, {}, p->name + " broadcast"));
  }
  return s;
}

Shape with_leading(int64_t n, const Shape& s) {
  Shape r{n};
  r.insert(r.end(), s.begin(), s.end());
  return r;
}

std::vector<Tensor> with_batch(const std::vector<std::vector<Tensor>>& slices, std::size_t i) {
  std::vector<Tensor> r;
  for (const auto& s : slices) r.push_back(s[i]);
  return r;
}

void check_outputs(const std::vector<Tensor>& got, const std::vector<Tensor>& want, double tol, const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (std::size_t o = 0; o < got.size(); ++o) {
    CHECK_MESSAGE(got[o].dtype() == want[o].dtype(), what);
    const double t = want[o].dtype() == DType::f32 ? std::max(tol, 1e-5) : tol;
    test::check_close(got[o], want[o], t, t, fmt::format("{}, output {}", what, o + 1));
  }
}

// vmap_tape of the sample with each non-empty subset of its inputs batched, against the
// sample run on each batch element's slices; returns whether any batched tape holds more
// scans than the sample (a fallback to a loop over the batch).
bool check_sample(const Sample& s) {
  const std::size_t n = s.tape.inputs().size();
  const std::vector<Tensor> shared = s.args(7);
  std::vector<std::vector<Tensor>> slices;
  for (int64_t j = 0; j < kBatch; ++j) slices.push_back(s.args(100 + static_cast<uint64_t>(j)));
  const int scans = test::count_calls(s.tape, "scan", true);
  bool fell_back = false;
  for (std::size_t m = 1; m < (std::size_t{1} << n); ++m) {
    Flags flags(n);
    std::string subset;
    std::vector<Tensor> batched(n);
    for (std::size_t i = 0; i < n; ++i) {
      flags[i] = (m >> i) & 1;
      subset += flags[i] ? 'B' : '.';
      batched[i] = flags[i] ? stack(with_batch(slices, i)) : shared[i];
    }
    const std::string what = fmt::format("{} [{}]", s.what, subset);
    CAPTURE(what);
    std::vector<std::vector<Tensor>> per;
    for (int64_t j = 0; j < kBatch; ++j) {
      std::vector<Tensor> a(n);
      for (std::size_t i = 0; i < n; ++i) a[i] = flags[i] ? slices[static_cast<std::size_t>(j)][i] : shared[i];
      per.push_back(play(s.tape, a));
    }
    std::vector<Tensor> want;
    for (std::size_t o = 0; o < per[0].size(); ++o) want.push_back(stack(with_batch(per, o)));
    const Tape vt = vmap_tape(s.tape, flags, kBatch);
    test::check_round_trip(vt);
    check_outputs(play(vt, batched), want, 1e-12, what + " interpreted");
    check_outputs(compile(vt)(batched), want, 1e-11, what + " compiled");
    // (A convolution with both arguments batched runs one call per element on purpose: prims_nn.cpp.)
    const bool both_conv = s.prim.starts_with("conv2d") && m == 3;
    fell_back = fell_back || (test::count_calls(vt, "scan", true) > scans && !both_conv);
  }
  // Batches of one and of none, every input batched.
  std::vector<bool> all(n, true);
  for (int64_t size : {1, 0}) {
    CAPTURE(size);
    std::vector<Tensor> in;
    for (std::size_t i = 0; i < n; ++i)
      in.push_back(size == 1 ? reshape(slices[0][i], with_leading(1, slices[0][i].shape()))
                             : Tensor(shared[i].dtype(), with_leading(0, shared[i].shape())));
    const Tape vt = vmap_tape(s.tape, all, size);
    std::vector<Tensor> want;
    if (size == 1) {
      for (const Tensor& t : play(s.tape, slices[0])) want.push_back(reshape(t, with_leading(1, t.shape())));
    } else {
      for (Var o : s.tape.outputs) want.push_back(Tensor(s.tape.type(o).dtype, with_leading(0, s.tape.type(o).shape)));
    }
    check_outputs(play(vt, in), want, 1e-12, s.what + " interpreted");
    check_outputs(compile(vt)(in), want, 1e-11, s.what + " compiled");
  }
  return fell_back;
}

// A scalar loss of a tape's float outputs: sum over them of sum(output * weight), in f64.
Tape weighted_loss(const Tape& t, const std::vector<Tensor>& weights) {
  TapeBuilder b;
  std::vector<Var> in;
  for (Var v : t.inputs()) in.push_back(b.input(t.type(v)));
  const std::vector<Var> outs = b.inline_tape(t, in);
  Var loss = b.scalar(0.0, DType::f64);
  for (std::size_t o = 0; o < outs.size(); ++o)
    if (is_float(b.type(outs[o]).dtype)) {
      const Var term = b.call("sum", {b.mul(outs[o], b.constant(weights[o]))});
      loss = b.add(loss, b.call("cast", {term}, {{"dtype", DType::f64}}));
    }
  b.set_outputs({loss});
  return b.finish();
}

// The gradient through the batched tape (every input batched) of a weighted sum of its
// outputs, against each batch element's gradient through the sample: batched tapes are
// differentiable, with the right derivatives.
void check_sample_gradient(const Sample& s) {
  const std::size_t n = s.tape.inputs().size();
  std::vector<std::vector<Tensor>> slices;
  for (int64_t j = 0; j < kBatch; ++j) slices.push_back(s.args(100 + static_cast<uint64_t>(j)));
  std::vector<Tensor> weights, batched;
  for (std::size_t o = 0; o < s.tape.outputs.size(); ++o) {
    const VarType& t = s.tape.type(s.tape.outputs[o]);
    weights.push_back(randn(with_leading(kBatch, t.shape), 50 + o, is_float(t.dtype) ? t.dtype : DType::f64));
  }
  for (std::size_t i = 0; i < n; ++i) batched.push_back(stack(with_batch(slices, i)));
  const Tape vt = vmap_tape(s.tape, std::vector<bool>(n, true), kBatch);
  const std::vector<Tensor> got = test::run_checked(grad_tape(weighted_loss(vt, weights)), batched);
  std::vector<std::vector<Tensor>> per;
  for (int64_t j = 0; j < kBatch; ++j) {
    std::vector<Tensor> w;
    for (const Tensor& x : weights) w.push_back(index(x, j));
    per.push_back(play(grad_tape(weighted_loss(s.tape, w)), slices[static_cast<std::size_t>(j)]));
  }
  for (std::size_t i = 0; i < n; ++i)
    if (is_float(batched[i].dtype())) {
      const double tol = batched[i].dtype() == DType::f32 ? 1e-4 : 1e-10;
      test::check_close(got[i + 1], stack(with_batch(per, i + 1)), tol, tol, fmt::format("{}: gradient {}", s.what, i + 1));
    }
}

// Vector-mode forward (jvp_tape(tape, k), the forward tape batched over its tangents)
// against k single-tangent passes.
void check_sample_jvp(const Sample& s) {
  const std::vector<Tensor> args = s.args(7);
  std::vector<Tensor> stacked = args, tangents;
  std::vector<std::vector<Tensor>> per(kBatch);
  for (std::size_t i = 0; i < args.size(); ++i) {  // (an i64 input's tangents are read by nothing)
    const Shape shape = with_leading(kBatch, args[i].shape());
    const Tensor t = is_float(args[i].dtype()) ? randn(shape, 60 + i, args[i].dtype())
                                               : tensor(std::vector<double>(numel(shape), 0.0), shape, DType::i64);
    stacked.push_back(t);
    for (int64_t j = 0; j < kBatch; ++j) per[static_cast<std::size_t>(j)].push_back(index(t, j));
  }
  const std::vector<Tensor> got = test::run_checked(jvp_tape(s.tape, kBatch), stacked);
  const Tape single = jvp_tape(s.tape);
  std::vector<std::vector<Tensor>> want;
  for (const auto& tj : per) {
    std::vector<Tensor> in = args;
    in.insert(in.end(), tj.begin(), tj.end());
    want.push_back(play(single, in));
  }
  const std::size_t m = s.tape.outputs.size();
  for (std::size_t o = m; o < got.size(); ++o) {
    if (!is_float(got[o].dtype())) continue;
    const double tol = got[o].dtype() == DType::f32 ? 1e-4 : 1e-10;
    test::check_close(got[o], stack(with_batch(want, o)), tol, tol, fmt::format("{}: tangent {}", s.what, o - m + 1));
  }
}

}  // namespace

TEST_CASE("batching rules: vector-mode forward (jvp_tape with k tangents) equals k single passes") {
  int checked = 0;
  for (const Sample& s : samples()) {
    if (!primitive(s.prim).batch) continue;
    CAPTURE(s.what);
    check_sample_jvp(s);
    ++checked;
  }
  CHECK(checked >= 40);
}

TEST_CASE("batching rules: gradients through batched tapes equal each element's gradient") {
  int checked = 0;
  for (const Sample& s : samples()) {
    const Primitive& p = primitive(s.prim);
    if (!p.batch || s.tape.outputs.empty()) continue;
    // Per-element trip counts have no static trip count for reverse mode (prims_while.cpp).
    if (s.what == "while_loop (per-element trip counts)") continue;
    bool any_float = false;
    for (Var o : s.tape.outputs) any_float = any_float || is_float(s.tape.type(o).dtype);
    if (!any_float) continue;
    CAPTURE(s.what);
    check_sample_gradient(s);
    ++checked;
  }
  CHECK(checked >= 40);
}

TEST_CASE("batching rules: every built-in primitive, each subset of its arguments batched, vs a loop over slices") {
  const std::vector<Sample> all = samples();
  std::map<std::string, int> sampled;
  std::vector<std::string> loops;
  for (const Sample& s : all) {
    CAPTURE(s.what);
    REQUIRE_MESSAGE(test::count_calls(s.tape, s.prim, true) > 0, s.what, ": the sample does not call ", s.prim);
    ++sampled[s.prim];
    const Primitive& p = primitive(s.prim);
    const bool fell_back = check_sample(s);
    if (p.batch || p.structure == Structure::elementwise)
      CHECK_MESSAGE(!fell_back, s.what, ": batched by a scan over the batch although '", s.prim, "' has a rule");
    else if (fell_back)
      loops.push_back(s.prim);
  }
  for (const Primitive* p : all_primitives())
    if (is_builtin(*p)) CHECK_MESSAGE(sampled.count(p->name) > 0, "no batching sample for the built-in '", p->name, "'");
  loops.erase(std::unique(loops.begin(), loops.end()), loops.end());
  MESSAGE("batched by the scan fallback (no rule yet): ", fmt::format("{}", fmt::join(loops, ", ")));
}

TEST_CASE("batching rules: matmul with a batched left side is one matmul; a batched right side one batch_matmul") {
  const auto batch = [](Shape a, Shape b, std::vector<bool> flags) {
    TapeBuilder tb;
    const Var x = tb.input({DType::f64, a}), y = tb.input({DType::f64, b});
    tb.set_outputs({tb.matmul(x, y)});
    const Tape t = tb.finish();
    return vmap_tape(t, Flags(flags), 4);
  };
  for (Shape w : {Shape{5, 6}, Shape{5}}) {
    const Tape left = batch({3, 5}, w, {true, false});
    CHECK(test::count_calls(left, "matmul", true) == 1);
    CHECK(test::count_calls(left, "batch_matmul", true) == 0);
    CHECK(test::count_calls(left, "permute", true) + test::count_calls(left, "transpose", true) == 0);  // reshapes only
  }
  CHECK(test::count_calls(batch({3, 5}, {5}, {false, true}), "matmul", true) == 1);  // X A^T
  CHECK(test::count_calls(batch({3, 5}, {5, 6}, {false, true}), "batch_matmul", true) == 1);
  CHECK(test::count_calls(batch({3, 5}, {5, 6}, {true, true}), "batch_matmul", true) == 1);
  // Small matrices: a broadcast mul and a sum over k (compiled fused), not a gemm call each.
  for (const std::vector<bool>& flags : {std::vector<bool>{false, true}, std::vector<bool>{true, true}}) {
    const Tape small = batch({4, 4}, {4, 4}, flags);
    CHECK(test::count_calls(small, "batch_matmul", true) + test::count_calls(small, "matmul", true) == 0);
    CHECK(test::count_calls(small, "sum", true) == 1);
  }
  // Outer products (a matrix-vector product's gradient): a broadcast multiplication.
  const Tape outer = batch({3, 1}, {1, 6}, {true, true});
  CHECK(test::count_calls(outer, "batch_matmul", true) + test::count_calls(outer, "matmul", true) == 0);
  CHECK(test::count_calls(outer, "mul", true) == 1);
}

TEST_CASE("batching rules: vmap of grad (per-example gradients of a small MLP) vs a loop, without a scan") {
  const Tensor W1 = randn({6, 4}, 1) * 0.5, W2 = randn({3, 6}, 2) * 0.5, xs = randn({5, 4}, 3);
  const auto loss = [](const Tensor& w1, const Tensor& w2, const Tensor& x) {
    const Tensor h = tanh(matmul(w1, x));
    const Tensor z = matmul(w2, h);
    return sum(z) * 0.1 + max(z) - mean(square(h));
  };
  const auto per_example = [&](const Tensor& w1, const Tensor& w2, const Tensor& x) {
    return grad(loss, w1, w2, x).grads[0];
  };
  const auto batched = vmap(per_example, {none, none, 0});
  const Tensor got = batched(W1, W2, xs);
  std::vector<Tensor> want;
  for (int64_t j = 0; j < 5; ++j) want.push_back(per_example(W1, W2, index(xs, j)));
  test::check_close(got, stack(want), 1e-12, 1e-12, "vmap(grad)");
  const Tape t = trace([&](const Tensor& a, const Tensor& b, const Tensor& c) { return batched(a, b, c); }, W1, W2, xs);
  CHECK(test::count_calls(t, "scan", true) == 0);
  test::check_close(compile(t)({W1, W2, xs})[0], stack(want), 1e-11, 1e-11, "vmap(grad) compiled");
}

TEST_CASE("batching rules: a guard holds for the batch when it holds for every element") {
  const auto f = [](const Tensor& x) { return sum(x) > 0.0 ? x * 2.0 : x * -1.0; };
  const Tensor pos = rand({4, 3}, 1) + 0.1;
  test::check_close(vmap(f)(pos), pos * 2.0, 0, 0, "all positive");
  const Tensor mixed = index_update(pos, tensor({2.0}, {1}, DType::i64), reshape(tensor({-5.0, -5.0, -5.0}), {1, 3}));
  CHECK_THROWS_AS(vmap(f)(mixed), GuardFailure);
  const Tape t = trace([&](const Tensor& x) { return vmap(f)(x); }, pos);
  CHECK(test::count_calls(t, "scan", true) == 0);
  const CompiledFunction compiled = compile(t);
  test::check_close(compiled({pos})[0], pos * 2.0, 0, 0, "compiled, all positive");
  CHECK_THROWS_AS(compiled({mixed}), GuardFailure);
  // The false branch: every element must take it too.
  const Tensor neg = pos * -1.0;
  test::check_close(vmap(f)(neg), pos, 0, 0, "all negative");
  CHECK_THROWS_AS(vmap(f)(neg * tensor({1.0, 1.0, 1.0, -1.0}, {4, 1})), GuardFailure);
}

}  // namespace reel

namespace reel {

TEST_CASE("batching rules: batched indices out of range are still errors naming the operation") {
  for (const std::string prim : {"gather", "scatter_add", "index_update"}) {
    CAPTURE(prim);
    const bool gather = prim == "gather";
    TapeBuilder b;
    const Var x = b.input({DType::f64, {2, 4, 3}}), idx = b.input({DType::i64, {2, 2}});
    std::vector<Var> args{x, idx};
    if (!gather) args.push_back(b.input({DType::f64, {2, 2, 4, 3}}));
    b.set_outputs({b.call(prim, args)});
    const Tape t = b.finish();
    const Tape vt = vmap_tape(t, Flags(args.size(), true), 2);
    for (double bad : {2.0, -1.0}) {  // per element an axis of 2: 2 would be the next element's 0
      CAPTURE(bad);
      std::vector<Tensor> in{randn({2, 2, 4, 3}, 1), tensor({0, 1, 1, 0, 1, bad, 0, 0}, {2, 2, 2}, DType::i64)};
      if (!gather) in.push_back(randn({2, 2, 2, 4, 3}, 2));
      CHECK_ERROR(play(vt, in), prim, "out of range");
      CHECK_ERROR(compile(vt)(in), prim, "out of range");
    }
  }
}

}  // namespace reel
