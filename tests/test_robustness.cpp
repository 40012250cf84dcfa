// What hostile use found (issue 17): each case crashed, hung or answered wrongly, and
// is now a clear reel::Error or the right result. Test names carry the item number.
#include <cmath>
#include <cstdint>
#include <limits>

#include "test_util.hpp"

using namespace reel;

TEST_CASE("robustness 1: unslice with step 0 (or below) is an error, not a division by zero") {
  const std::string text = "inp %1::f64[3]\n%2 = unslice(%1, axis=0, start=1, step=0, size=8)::f64[8]\nout %2\n";
  CHECK_ERROR(parse_tape(text), "unslice", "step >= 1", "got 0");
  CHECK_ERROR(parse_tape("inp %1::f64[3]\n%2 = unslice(%1, axis=0, start=1, step=-2, size=8)::f64[8]\nout %2\n"),
              "unslice", "step >= 1", "got -2");
  CHECK_ERROR(reel::apply(primitive("unslice"), std::vector<Tensor>{zeros({3})}, {{"axis", int64_t{0}}, {"start", int64_t{1}},
                                                         {"step", int64_t{0}}, {"size", int64_t{8}}}),
              "unslice", "step >= 1", "got 0");
  CHECK_ERROR(reel::apply(primitive("slice"), std::vector<Tensor>{zeros({3})}, {{"axis", int64_t{0}}, {"start", int64_t{0}},
                                                       {"stop", int64_t{3}}, {"step", int64_t{0}}}),
              "slice", "step >= 1", "got 0");
  // The largest step is fine: one element.
  const Tensor y = reel::apply(primitive("unslice"), std::vector<Tensor>{tensor({5.0})}, {{"axis", int64_t{0}}, {"start", int64_t{2}},
                                                                 {"step", std::numeric_limits<int64_t>::max()},
                                                                 {"size", int64_t{4}}});
  CHECK(y.values() == std::vector<double>{0, 0, 5, 0});
}

TEST_CASE("robustness 2: negative axes from tape text are normalised once, so compiled code agrees with play") {
  const Tape t = parse_tape(
      "inp %1::f64[4]\ninp %2::i64[3]\n%3 = gather(%1, %2, axis=-1)::f64[3]\n%4 = sum(%3)::f64[]\nout %4\n");
  // The tape holds one spelling: every later stage reads axis=0.
  CHECK(to_string(t).find("gather(%1, %2, axis=0)") != std::string::npos);
  CHECK(t.op(3).attrs.integer("axis") == 0);
  Tensor idx(DType::i64, {3});
  idx.mutable_data<int64_t>()[0] = 3, idx.mutable_data<int64_t>()[1] = 0, idx.mutable_data<int64_t>()[2] = 3;
  const Tensor x = tensor({1.0, 10.0, 100.0, 1000.0});
  CHECK(play(t, {x, idx})[0].item() == 2001.0);
  CHECK(compile(t)({x, idx})[0].item() == 2001.0);
  const auto g = test::run_checked(grad_tape(t), {x, idx});
  CHECK(g[1].values() == std::vector<double>{1, 0, 0, 2});

  // scatter_add, index_update, concat, slice and the reductions take negative axes too.
  const Tape s = parse_tape(
      "inp %1::f64[2,3]\ninp %2::i64[2]\ninp %3::f64[2,2]\n"
      "%4 = scatter_add(%1, %2, %3, axis=-1)::f64[2,3]\n"
      "%5 = index_update(%4, %2, %3, axis=-1)::f64[2,3]\n"
      "%6 = concat(%4, %5, axis=-2)::f64[4,3]\n"
      "%7 = slice(%6, axis=-1, start=1, stop=3, step=1)::f64[4,2]\n"
      "%8 = sum(%7, axes=[-1], keepdims=true)::f64[4,1]\n"
      "%9 = max(%6, axes=[-2,-1])::f64[]\n"
      "%10 = argmax(%6, axis=-1)::i64[4]\n"
      "out %8, %9, %10\n");
  CHECK(to_string(s).find("axis=-") == std::string::npos);
  CHECK(to_string(s).find("axes=[-") == std::string::npos);
  Tensor i2(DType::i64, {2});
  i2.mutable_data<int64_t>()[0] = 2, i2.mutable_data<int64_t>()[1] = 0;
  const Tensor base = tensor({1, 2, 3, 4, 5, 6}, {2, 3}), vals = tensor({10, 20, 30, 40}, {2, 2});
  const auto out = test::run_checked(s, {base, i2, vals});
  // %4 = [[21, 2, 13], [44, 5, 36]]; %5 = [[20, 2, 10], [40, 5, 30]].
  CHECK(out[0].values() == std::vector<double>{15, 41, 12, 35});
  CHECK(out[1].item() == 44);
  CHECK(out[2].values() == std::vector<double>{0, 0, 0, 0});
}

TEST_CASE("robustness 3: an axis below -rank or at rank is an error quoting the axis given, in every operation") {
  const Tensor m = ones({2, 3});
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  Tensor idx(DType::i64, {1});
  idx.mutable_data<int64_t>()[0] = 0;
  for (int64_t axis : {int64_t{-3}, int64_t{-4}, int64_t{2}, kMin, kMax}) {
    CAPTURE(axis);
    const std::string given = fmt::format("axis {} is out of range for f64[2,3]", axis);
    CHECK_ERROR(sum(m, axis), "sum: ", given);
    CHECK_ERROR(sum(m, axis, true), "sum: ", given);
    CHECK_ERROR(sum(m, std::vector<int64_t>{0, axis}), "sum: ", given);
    CHECK_ERROR(mean(m, axis), "mean: ", given);
    CHECK_ERROR(prod(m, axis), "prod: ", given);
    CHECK_ERROR(max(m, axis), "max: ", given);
    CHECK_ERROR(min(m, axis), "min: ", given);
    CHECK_ERROR(argmax(m, axis), "argmax: ", given);
    CHECK_ERROR(argmin(m, axis), "argmin: ", given);
    CHECK_ERROR(softmax(m, axis), "softmax: ", given);
    CHECK_ERROR(log_softmax(m, axis), "log_softmax: ", given);
    CHECK_ERROR(logsumexp(m, axis), "logsumexp: ", given);
    CHECK_ERROR(gather(m, idx, axis), "gather: ", given);
    CHECK_ERROR(scatter_add(m, idx, ones({2, 1}), axis), "scatter_add: ", given);
    CHECK_ERROR(index_update(m, idx, ones({2, 1}), axis), "index_update: ", given);
    CHECK_ERROR(concat({m, m}, axis), "concat: ", given);
    CHECK_ERROR(slice(m, axis, 0, 1), "slice: ", given);
    CHECK_ERROR(squeeze(m, axis), "squeeze: ", given);
  }
  // Each message starts with the function the user called (softmax's has no "max: ").
  try {
    (void)softmax(m, -3);
  } catch (const Error& e) {
    CHECK(std::string(e.what()).rfind("softmax: axis -3 is out of range for f64[2,3] (expected -2 <= axis < 2)", 0) == 0);
  }
  // -1 and -2 are the last and first axes, as 1 and 0.
  const Tensor x = tensor({1, 5, 3, 4, 2, 6}, {2, 3});
  CHECK(sum(x, -1).values() == sum(x, 1).values());
  CHECK(sum(x, -2).values() == sum(x, 0).values());
  CHECK(max(x, -2, true).values() == std::vector<double>{4, 5, 6});
  CHECK(argmax(x, -1).values() == std::vector<double>{1, 2});
  CHECK(argmin(x, -2).values() == std::vector<double>{0, 1, 0});
  test::check_close(softmax(x, -1), softmax(x, 1), 0, 0, "softmax -1");
  test::check_close(logsumexp(x, -2), logsumexp(x, 0), 0, 0, "logsumexp -2");
  // And a tape traced with them prints the normalised axis, which compiled code reads.
  const Tape t = trace([](const Tensor& a) { return sum(softmax(a, -1) * prod(a, -2, true)); }, x);
  CHECK(to_string(t).find("axes=[-") == std::string::npos);
  test::run_checked(grad_tape(t), {x});
}

TEST_CASE("robustness 4: custom_vjp with a built-in's name (or a registered primitive's) is an error") {
  const Tensor x = tensor({0.5, 1.0});
  auto forward = [](const std::vector<Tensor>& a) { return a[0] * 2.0; };
  auto pullback = [](const std::vector<Tensor>&, const Tensor&, const Tensor& dy) { return std::vector<Tensor>{dy * 2.0}; };
  CHECK_ERROR(custom_vjp("sin", {x}, forward, pullback), "custom_vjp", "'sin'", "built-in", "name of its own");
  CHECK_ERROR(custom_vjp("exp", {x}, {}, {}), "custom_vjp", "'exp'", "built-in");
  define_primitive({.name = "robust_defined", .eager = [](std::span<const Tensor> in, const Attrs&) { return in[0]; }});
  CHECK_ERROR(custom_vjp("robust_defined", {x}, forward, pullback), "custom_vjp", "'robust_defined'", "registered");
  // A name of its own works, and again (the first functions are kept, as documented).
  for (int i = 0; i < 2; ++i) {
    const auto g = grad([&](const Tensor& a) { return sum(custom_vjp("robust_twice", {a}, forward, pullback)); }, x);
    CHECK(g.value.item() == 3.0);
    CHECK(g.grads[0].values() == std::vector<double>{2, 2});
  }
}

TEST_CASE("robustness 7: errors name the function the user called, with full types") {
  CHECK_ERROR(softmax(ones({2, 3}), 5), "softmax: axis 5 is out of range for f64[2,3]");
  CHECK_ERROR(log_softmax(ones({2, 3}), 5), "log_softmax: axis 5 is out of range for f64[2,3]");
  CHECK_ERROR(logsumexp(ones({2, 3}), std::vector<int64_t>{1, -1}), "logsumexp: axes [1,-1]: axis -1 is given twice");
  CHECK_ERROR(matmul(zeros({2, 3, 4}), zeros({3, 4, 5})),
              "matmul: the batch dimensions [2] of f64[2,3,4] and [3] of f64[3,4,5] do not broadcast");
  CHECK_ERROR(matmul(zeros({2, 3, 4}), zeros({3, 5})), "matmul", "f64[2,3,4] and f64[3,5]");

  CHECK_ERROR(conv1d(ones({1, 1, 3}), ones({1, 1, 5})), "conv1d: x f64[1,1,3] and w f64[1,1,5]", "does not fit");
  CHECK_ERROR(stack({ones({2, 3}), ones({3, 2})}, 0), "stack: expected every tensor of the first one's type f64[2,3]",
              "got f64[3,2] as tensor 2");
  CHECK_ERROR(stack({ones({2, 3}), ones({2, 3})}, 3), "stack: axis 3 is out of range for f64[2,3] (expected -3 <= axis < 3)");
  CHECK(stack({tensor({1.0, 2.0}), tensor({3.0, 4.0})}, -1).values() == std::vector<double>{1, 3, 2, 4});
  // n * n overflowing int64 had given a negative entry count.
  CHECK_ERROR(tril_from_vector(tensor({1.0, 2.0, 3.0}), 3037000500, 0, false), "tril_from_vector",
              "expected at most");
  CHECK(tril_from_vector(tensor({1.0, 2.0, 3.0}), 2, 0, false).values() == std::vector<double>{1, 0, 2, 3});

  // logsumexp over no elements is -inf (the log of an empty sum), as in SciPy and PyTorch;
  // softmax over an empty axis is empty.
  CHECK(logsumexp(zeros({0})).item() == -INFINITY);
  const Tensor l = logsumexp(zeros({2, 0}), 1);
  CHECK(l.shape() == Shape{2});
  CHECK(l.values() == std::vector<double>{-INFINITY, -INFINITY});
  CHECK(logsumexp(zeros({0, 3}), 1).shape() == Shape{0});
  CHECK(softmax(zeros({2, 0}), 1).shape() == Shape{2, 0});
  CHECK(log_softmax(zeros({0, 3}), 1).shape() == Shape{0, 3});
  const auto g = grad([](const Tensor& a) { return logsumexp(a); }, zeros({0}));
  CHECK(g.value.item() == -INFINITY);
  CHECK(g.grads[0].shape() == Shape{0});

  // A user's type rule that returns a negative or oversized dimension.
  define_primitive({.name = "robust_bad_type",
                    .type = [](std::span<const VarType> in, const Attrs&) { return VarType{in[0].dtype, {-1, 3}}; },
                    .eager = [](std::span<const Tensor> in, const Attrs&) { return in[0]; }});
  CHECK_ERROR(reel::apply("robust_bad_type", std::vector<Tensor>{ones({3})}), "robust_bad_type",
              "the type rule returned an invalid type [-1,3]");
  define_primitive({.name = "robust_huge_type",
                    .type = [](std::span<const VarType> in, const Attrs&) {
                      return VarType{in[0].dtype, {int64_t{1} << 40, int64_t{1} << 40}};
                    },
                    .eager = [](std::span<const Tensor> in, const Attrs&) { return in[0]; }});
  CHECK_ERROR(reel::apply("robust_huge_type", std::vector<Tensor>{ones({3})}), "robust_huge_type",
              "the type rule returned an invalid type");

  // A declaration edited by hand: grad_tape and jvp_tape report it, not a rule's complaint.
  Tape t = trace([](const Tensor& a) { return sum(sigmoid(a)); }, ones({5}));
  t.ops[1].type.shape = {4};
  CHECK_ERROR(grad_tape(t), "grad: %2: the tape declares f64[4]", "sigmoid", "gives f64[5]");
  CHECK_ERROR(jvp_tape(t), "jvp: %2: the tape declares f64[4]", "sigmoid", "gives f64[5]");
  CHECK_ERROR(compile(t), "%2: the tape declares f64[4]");
  // An attribute set around TapeBuilder (a raw negative axis) is refused before compiling.
  Tape raw = parse_tape("inp %1::f64[4]\n%2 = sum(%1, axes=[0])::f64[]\nout %2\n");
  raw.ops[1].attrs = Attrs{{"axes", Shape{-1}}};
  CHECK_ERROR(compile(raw), "%2", "not in their checked form", "axes=[-1]", "axes=[0]");
  try {
    (void)grad_tape(t);
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("adjoint rule") == std::string::npos);
  }
}

TEST_CASE("robustness: from review: NaN attributes pass verify, axis attributes need an argument") {
  // verify compared attributes with ==, and NaN != NaN: every tape with a NaN attribute
  // was refused by grad, jvp and compile.
  const Tensor x = tensor({0.5, 2.0});
  const auto g = grad([](const Tensor& a) { return sum(pow(a, NAN)); }, x);
  CHECK(std::isnan(g.value.item()));
  const Tape t = trace([](const Tensor& a) { return sum(pow(a, NAN)); }, x);
  verify(t);
  CHECK(std::isnan(compile(grad_tape(t))({x})[1].values()[0]));
  (void)jvp_tape(t);
  // A cached function's guard on a NaN value read with item() (guard_value, values=[nan]).
  auto f = jit([](const Tensor& a) { return a * (std::isnan(a.item()) ? 2.0 : 3.0); }, {.compile_after = 1});
  for (int i = 0; i < 3; ++i) CHECK(std::isnan(f(tensor({NAN})).item()));
  CHECK(f(tensor({1.0})).item() == 3.0);

  Primitive p;
  p.name = "robust_axis_no_args";
  p.arity = 0;
  p.attrs = {{"axis", AttrKind::axis}};
  p.infer = [](std::span<const VarType>, const Attrs&) { return VarType{DType::f64, {}}; };
  p.eager = [](std::span<const Tensor>, const Attrs&) { return scalar(0.0); };
  CHECK_ERROR(register_primitive(p), "register_primitive", "robust_axis_no_args", "axis attribute 'axis'",
              "takes no arguments");
}
