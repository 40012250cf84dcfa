// The JIT: simplegrad against finite differences, argument checking, threads,
// outputs that are not computed, IR inspection, and errors.
#include <array>
#include <thread>

#include "test_util.hpp"

using namespace reel;

namespace {

Tensor weighted_sum(const Tensor& y, uint64_t seed) { return sum(y * randn(y.shape(), seed)); }
Tensor positive(const Shape& s, uint64_t seed) { return rand(s, seed) + 0.5; }

// simplegrad's gradients against central finite differences of f.
template <class F, class... T>
void check_simplegrad(F f, const std::string& what, const T&... args) {
  CAPTURE(what);
  const auto g = simplegrad(f, args...);
  const auto out = g(args...);
  const std::vector<Tensor> list{args...};
  const test::Fn fn = [&](const std::vector<Tensor>& a) {
    if constexpr (sizeof...(T) == 1) return f(a[0]);
    else return f(a[0], a[1]);
  };
  test::check_close(out[0], fn(list), 1e-12, 1e-12, what + " value");
  const auto fd = test::finite_diff(fn, list);
  for (std::size_t k = 0; k < list.size(); ++k) {
    CHECK(out[k + 1].shape() == list[k].shape());
    test::check_close(out[k + 1], fd[k], 1e-6, 1e-7, fmt::format("{}: d/darg{}", what, k));
  }
}

}  // namespace

TEST_CASE("simplegrad: every primitive's gradient matches finite differences") {
  const Tensor x = randn({3, 4}, 1), px = positive({3, 4}, 2);
  check_simplegrad([](const Tensor& a) { return weighted_sum(-a, 3); }, "neg", x);
  check_simplegrad([](const Tensor& a) { return weighted_sum(exp(a), 3); }, "exp", x);
  check_simplegrad([](const Tensor& a) { return weighted_sum(log(a), 3); }, "log", px);
  check_simplegrad([](const Tensor& a) { return weighted_sum(sin(a), 3); }, "sin", x);
  check_simplegrad([](const Tensor& a) { return weighted_sum(cos(a), 3); }, "cos", x);
  check_simplegrad([](const Tensor& a) { return weighted_sum(tanh(a), 3); }, "tanh", x);
  check_simplegrad([](const Tensor& a) { return weighted_sum(sigmoid(a), 3); }, "sigmoid", x);
  check_simplegrad([](const Tensor& a) { return weighted_sum(sqrt(a), 3); }, "sqrt", px);
  check_simplegrad([](const Tensor& a) { return weighted_sum(square(a), 3); }, "square", x);
  check_simplegrad([](const Tensor& a) { return weighted_sum(pow(a, 2.5), 3); }, "pow 2.5", px);
  check_simplegrad([](const Tensor& a) { return weighted_sum(pow(a, -1.0), 3); }, "pow -1", px);
  check_simplegrad([](const Tensor& a) { return sum(a); }, "sum", x);
  check_simplegrad([](const Tensor& a) { return mean(a); }, "mean", x);
  check_simplegrad([](const Tensor& a) { return weighted_sum(sum(a, 0), 3); }, "sum axis 0", x);
  check_simplegrad([](const Tensor& a) { return weighted_sum(sum(a, 1), 3); }, "sum axis 1", x);
  check_simplegrad([](const Tensor& a) { return weighted_sum(sum_to(a, {3, 1}), 3); }, "sum_to", x);
  check_simplegrad([](const Tensor& a) { return weighted_sum(transpose(a), 3); }, "transpose", x);
  check_simplegrad([](const Tensor& a) { return weighted_sum(reshape(a, {6, 2}), 3); }, "reshape", x);
  check_simplegrad([](const Tensor& a) { return weighted_sum(broadcast_to(a, {2, 3, 4}), 3); },
                   "broadcast_to", x);
  const Tensor b = randn({4, 5}, 4), v = randn({4}, 5);
  check_simplegrad([](const Tensor& p, const Tensor& q) { return weighted_sum(matmul(p, q), 3); },
                   "matmul", x, b);
  check_simplegrad([](const Tensor& p, const Tensor& q) { return weighted_sum(matmul(p, q), 3); },
                   "matvec", x, v);
  check_simplegrad(
      [](const Tensor& p, const Tensor& q) { return weighted_sum(matmul(transpose(p), q), 3); },
      "matmul of a transpose", randn({4, 3}, 6), b);
  for (const Shape& s : std::vector<Shape>{{3, 4}, {4}, {3, 1}, {1, 4}, {}}) {
    const Tensor y = positive(s, 7);
    check_simplegrad([](const Tensor& p, const Tensor& q) { return weighted_sum(p + q, 3); },
                     "add " + shape_str(s), px, y);
    check_simplegrad([](const Tensor& p, const Tensor& q) { return weighted_sum(q - p, 3); },
                     "sub reversed " + shape_str(s), px, y);
    check_simplegrad([](const Tensor& p, const Tensor& q) { return weighted_sum(p * q, 3); },
                     "mul " + shape_str(s), px, y);
    check_simplegrad([](const Tensor& p, const Tensor& q) { return weighted_sum(q / p, 3); },
                     "div reversed " + shape_str(s), px, y);
  }
}

TEST_CASE("simplegrad: a two-layer perceptron in f64 and f32") {
  auto mlp = [](const Tensor& W1, const Tensor& W2) {
    const Tensor x = randn({6, 5}, 11, W1.dtype()), y = randn({3, 5}, 12, W1.dtype());
    const Tensor b1 = randn({4, 1}, 13, W1.dtype()), b2 = randn({3, 1}, 14, W1.dtype());
    return sum(square(matmul(W2, tanh(matmul(W1, x) + b1)) + b2 - y));
  };
  check_simplegrad(mlp, "mlp f64", randn({4, 6}, 1), randn({3, 4}, 2));
  const Tensor W1 = randn({4, 6}, 1, DType::f32), W2 = randn({3, 4}, 2, DType::f32);
  const auto g = simplegrad(mlp, W1, W2);
  const auto [val, d1, d2] = g(W1, W2);
  const auto ref = grad(mlp, W1, W2);
  CHECK(val.dtype() == DType::f32);
  test::check_close(val, ref.value, 1e-5, 1e-5, "f32 value");
  test::check_close(d1, ref.grads[0], 1e-5, 1e-5, "f32 dW1");
  test::check_close(d2, ref.grads[1], 1e-5, 1e-5, "f32 dW2");
}

TEST_CASE("simplegrad runs on new inputs of the traced shapes") {
  auto L = [](const Tensor& x) { return sum(sigmoid(x)); };
  const auto g = simplegrad(L, randn({5}, 1));
  const Tensor x = tensor({1, 2, 3, 4, 5});
  const auto [val, dx] = g(x);
  const auto ref = grad(L, x);
  CHECK(val.item() == doctest::Approx(ref.value.item()).epsilon(1e-14));
  test::check_close(dx, ref.grads[0], 1e-14, 1e-16, "dx");
}

TEST_CASE("a compiled function checks its arguments") {
  const CompiledFunction f = compile(trace(
      [](const Tensor& a, const Tensor& b) { return sum(a * b); }, zeros({3}), zeros({2, 3})));
  auto message = [&](const std::vector<Tensor>& args) {
    try {
      f(args);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message({zeros({3})}) == "compiled function: expected 2 arguments, got 1");
  CHECK(message({zeros({3}), zeros({3, 2})}) ==
        "compiled function: argument 2: expected f64[2,3], got f64[3,2]");
  CHECK(message({zeros({3}, DType::f32), zeros({2, 3})}) ==
        "compiled function: argument 1: expected f64[3], got f32[3]");
  CHECK(message({Tensor{}, zeros({2, 3})}) ==
        "compiled function: argument 1: expected f64[3], got an undefined tensor");
  const auto g = simplegrad([](const Tensor& a) { return sum(a); }, zeros({2}));
  CHECK_THROWS_WITH_AS(g(zeros({3})), "compiled function: argument 1: expected f64[2], got f64[3]",
                       Error);
}

TEST_CASE("a compiled function gives identical results from 4 threads at once") {
  auto mlp = [](const Tensor& W1, const Tensor& x) {
    return sum(square(tanh(matmul(W1, x) + 0.5)) * 3.0);
  };
  const Tensor W = randn({32, 64}, 1), x = randn({64, 16}, 2);
  const auto g = simplegrad(mlp, W, x);
  const auto want = g(W, x);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const auto got = g(W, x);
        for (int k = 0; k < 3; ++k) mismatches[t] += got[k].values() != want[k].values();
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) CHECK(mismatches[t] == 0);
}

TEST_CASE("outputs that are inputs, constants, views or repeats are copied out") {
  const Tensor c = tensor({7, 8});
  const Tape t = trace(
      [&](const Tensor& x) {
        const Tensor y = exp(x);
        return std::make_tuple(x, y, c + 0.0 * 0.0, y, reshape(y, {2, 1}), transpose(reshape(x, {1, 2})));
      },
      tensor({0.5, 1.5}));
  const auto out = test::run_checked(t, {tensor({1, 2})});
  CHECK(out[0].values() == std::vector<double>{1, 2});
  CHECK(out[4].shape() == Shape{2, 1});
  const auto compiled = compile(parse_tape("inp %1::f64[2]\n%2 = const [3, 4]::f64[2]\nout %2, %1, %1"))(
      {tensor({1, 2})});
  CHECK(compiled[0].values() == std::vector<double>{3, 4});
  CHECK(compiled[2].values() == std::vector<double>{1, 2});
}

TEST_CASE("a transpose used outside matmul is materialised, one used only by matmul is folded") {
  const Tape t = parse_tape(
      "inp %1::f64[2,3]\ninp %2::f64[2,4]\n%3 = transpose(%1)::f64[3,2]\n"
      "%4 = matmul(%3, %2)::f64[3,4]\n%5 = exp(%3)::f64[3,2]\nout %4, %5");
  test::run_checked(t, {randn({2, 3}, 1), randn({2, 4}, 2)});
  const Tape folded = parse_tape(
      "inp %1::f64[2,3]\ninp %2::f64[4,2]\n%3 = transpose(%1)::f64[3,2]\n%4 = transpose(%2)::f64[2,4]\n"
      "%5 = matmul(%3, %4)::f64[3,4]\nout %5");
  CHECK(compile(folded).workspace_bytes() == 0);
  test::run_checked(folded, {randn({2, 3}, 1), randn({4, 2}, 2)});
}

TEST_CASE("empty tensors compile") {
  const Tape t = trace([](const Tensor& x) { return std::make_tuple(sum(exp(x)), x * 2.0); }, zeros({0, 3}));
  const auto out = test::run_checked(t, {zeros({0, 3})});
  CHECK(out[0].item() == 0);
  CHECK(out[1].shape() == Shape{0, 3});
}

TEST_CASE("dump_ir shows the IR before and after optimisation, with vector math") {
  const std::string ir =
      dump_ir(grad_tape(trace([](const Tensor& x) { return sum(sigmoid(x)); }, zeros({1000}))));
  CHECK(ir.find("before optimisation") != std::string::npos);
  CHECK(ir.find("after optimisation") != std::string::npos);
  CHECK(ir.find("llvm.exp.f64") != std::string::npos);
  // libmvec's vector exp, not a scalar exp call per element.
  const std::string after = ir.substr(ir.find("after optimisation"));
  CHECK(after.find("@_ZGV") != std::string::npos);
  const Tape t = trace([](const Tensor& x) { return tanh(x); }, zeros({64}, DType::f32));
  CHECK(compile(t).llvm_ir().find("v_tanhf") != std::string::npos);
  // Without vector math: scalar calls only, and the same results.
  const CompiledFunction scalar = compile(t, {.vector_math = false});
  CHECK(scalar.llvm_ir().find("@_ZGV") == std::string::npos);
  const Tensor x = randn({64}, 3, DType::f32);
  test::check_close(scalar({x})[0], compile(t)({x})[0], 1e-6, 1e-7, "scalar vs vector tanh");
}

TEST_CASE("compiled code is freed with the last copy and compiling again works") {
  const Tape t = trace([](const Tensor& x) { return sum(x * x); }, zeros({4}));
  for (int i = 0; i < 20; ++i) {
    CompiledFunction f = compile(t);
    CompiledFunction copy = f;
    f = compile(t);
    CHECK(copy({tensor({1, 2, 3, 4})})[0].item() == 30);
    CHECK(f({tensor({1, 1, 1, 1})})[0].item() == 4);
  }
}

TEST_CASE("an operation code generation cannot handle is an error naming it") {
  Primitive mystery;
  mystery.name = "mystery";
  mystery.arity = 1;
  mystery.infer = [](std::span<const VarType> in, const Attrs&) { return in[0]; };
  mystery.structure = Structure::elementwise;  // but no element rule
  const Tape t = test::tape_calling(mystery);
  CHECK_THROWS_WITH_AS(compile(t), doctest::Contains("mystery"), Error);
}

TEST_CASE("compiled gathers and scatters are loops after an index check: bad indices are errors, not reads") {
  const Tape t = trace([](const Tensor& x, const Tensor& idx) { return sum(sin(gather(x, idx, 1))); }, randn({3, 5}, 1),
                       tensor({4, 0, 4}, {3}, DType::i64));
  const Tape g = grad_tape(t);
  const std::string plan = plan_text(g);
  CAPTURE(plan);
  CHECK(plan.find("gathers [%3 = %1 at %2] after checking the indices of [%3]") != std::string::npos);  // in sin's loop
  CHECK(plan.find("scatter %") != std::string::npos);
  CHECK(plan.find("gather(%1, %2) (eager)") == std::string::npos);
  std::size_t loops = 0;  // the gradient's scatter-add (the i64 input's zero gradient is eager)
  for (std::size_t at = plan.find("(checked indices, loop)"); at != std::string::npos;
       at = plan.find("(checked indices, loop)", at + 1))
    ++loops;
  CHECK(loops == 1);
  const CompiledFunction f = compile(g);
  const Tensor x = randn({3, 5}, 2);
  for (const auto& idx : {tensor({4, 0, 4}, {3}, DType::i64), tensor({1, 2, 3}, {3}, DType::i64)}) {
    const auto out = f({x, idx});
    const auto ref = play(g, {x, idx});
    test::check_close(out[0], ref[0], 1e-12, 1e-13, "value");
    test::check_close(out[1], ref[1], 1e-12, 1e-13, "gradient (a scatter-add of duplicates)");
  }
  CHECK_THROWS_WITH_AS(f({x, tensor({0, 5, 1}, {3}, DType::i64)}),
                       doctest::Contains("gather: index 5 (element 1 of the indices) is out of range for axis 1 of length 5"),
                       Error);
  CHECK_THROWS_WITH_AS(f({x, tensor({-1, 0, 1}, {3}, DType::i64)}), doctest::Contains("index -1"), Error);
  // f32, and a gather of a gather's result through take.
  const Tensor x32 = randn({4, 2}, 3, DType::f32);
  test::check_gradient([](const std::vector<Tensor>& a) { return sum(square(take(a[0], tensor({7, 0, 7, 3}, {2, 2}, DType::i64)))); },
                       {randn({4, 2}, 4)}, "take");
  const Tape t32 = trace([](const Tensor& v) { return gather(v, tensor({3, 3, 1}, {3}, DType::i64)); }, x32);
  test::run_checked(t32, {x32});
}

TEST_CASE("a gather fuses into the elementwise loop that reads it: an indexed load, its indices checked before") {
  const std::size_t npos = std::string::npos;
  for (DType dt : {DType::f64, DType::f32}) {
    const Tensor x = cast(randn({3, 5, 2}, 1), dt);
    for (int64_t axis : {0, 1, 2, -1}) {
      const int64_t n = x.shape()[static_cast<std::size_t>(axis < 0 ? axis + 3 : axis)];
      auto indices = [](std::vector<double> v) { return tensor(v, {2, 2}, DType::i64); };
      // 2-D indices with a duplicate, around the other axes.
      const Tensor idx = indices({static_cast<double>(n - 1), 0, static_cast<double>(n - 1), 1});
      const Tape t = trace([&](const Tensor& v, const Tensor& i) {
        const Tensor g = gather(v, i, axis);
        return exp(g) * 0.5 + g;
      }, x, idx);
      const std::string plan = plan_text(t);
      CAPTURE(plan);
      CHECK(plan.find("gathers [%3 = %1 at %2]") != npos);
      CHECK(plan.find("after checking the indices of [%3]") != npos);
      CHECK(plan.find("(checked indices, loop)") == npos);
      test::run_checked(t, {x, idx});
      const CompiledFunction f = compile(t);
      const std::string where = fmt::format("for axis {} of length {}", axis < 0 ? axis + 3 : axis, n);
      CHECK_ERROR(f({x, indices({0, static_cast<double>(n), 0, 0})}),
                  fmt::format("gather: index {} (element 1 of the indices) is out of range {}", n, where));
      CHECK_ERROR(f({x, indices({0, 0, 0, -1})}), "gather: index -1 (element 3 of the indices)", where);
    }
  }
  // 0-d indices: the gathered axis is gone.
  const Tensor m = randn({4, 3}, 2);
  const Tape t0 = trace([](const Tensor& v, const Tensor& i) { return sin(gather(v, i, 1)) + 1.0; }, m,
                        tensor({2.0}, {}, DType::i64));
  CHECK(plan_text(t0).find("gathers [") != std::string::npos);
  test::run_checked(t0, {m, tensor({2.0}, {}, DType::i64)});
  test::run_checked(t0, {m, tensor({0.0}, {}, DType::i64)});
}

TEST_CASE("a fused gather with constant indices: checked once when compiled, out of range a step that reports it") {
  // In range: no check at all. The shifted read also keeps the memory plan from writing
  // the loop's result over the gathered source (read at other elements, not element for
  // element), which dies in that loop. Indices running up by one in a few ranges (the
  // shift: [0] and [0, 4]; [2, 4] and [0, 2]) are contiguous loads in a loop split at
  // the ranges' ends (merged: 1, 3, 6); a reversal (six ranges) stays a vector gather.
  const Tape t = parse_tape(
      "inp %1::f64[2,6]\n"
      "%2 = const [0, 0, 1, 2, 3, 4]::i64[6]\n"
      "%3 = exp(%1)::f64[2,6]\n"
      "%4 = gather(%3, %2, axis=1)::f64[2,6]\n"
      "%5 = add(%4, %3)::f64[2,6]\n"
      "%6 = const [5, 4, 3, 2, 1, 0]::i64[6]\n"
      "%7 = gather(%3, %6, axis=1)::f64[2,6]\n"
      "%8 = mul(%5, %7)::f64[2,6]\n"
      "%9 = const [2, 3, 4, 0, 1, 2]::i64[6]\n"
      "%10 = gather(%1, %9, axis=1)::f64[2,6]\n"
      "%11 = add(%8, %10)::f64[2,6]\n"
      "%12 = sum(%11, axes=[1])::f64[2]\n"
      "out %12\n");
  const std::string plan = plan_text(t);
  CAPTURE(plan);
  CHECK(plan.find("gathers [%4 = %3 at %2, %7 = %3 at %6, %10 = %1 at %9]") != std::string::npos);
  CHECK(plan.find("checking the indices") == std::string::npos);
  CHECK(plan.find("in place") == std::string::npos);
  test::run_checked(t, {randn({2, 6}, 3)});
  // Constants the same throughout a few ranges of the innermost dimension (a step
  // vector: ranges [0, 1), [1, 4), [4, 6); a vector of one value) read one element per
  // range; a constant that varies across the outer dimension is read element by element.
  for (const char* dt : {"f64", "f32"}) {
    const Tape c = parse_tape(fmt::format(
        "inp %1::{0}[3,6]\n"
        "%2 = const [1, 0, 0, 0, 2.5, 2.5]::{0}[6]\n"
        "%3 = mul(%1, %2)::{0}[3,6]\n"
        "%4 = const [1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3]::{0}[3,6]\n"
        "%5 = add(%3, %4)::{0}[3,6]\n"
        "%6 = const [5, 5, 5, 5, 5, 5]::{0}[6]\n"
        "%7 = sub(%5, %6)::{0}[3,6]\n"
        "out %7\n",
        dt));
    const Tensor x = cast(randn({3, 6}, 5), std::string(dt) == "f64" ? DType::f64 : DType::f32);
    const std::vector<Tensor> r = test::run_checked(c, {x});
    CHECK(r[0].values()[7] == doctest::Approx(x.values()[7] * 0 + 2 - 5));
  }
  // Out of range (element 2 is 6): the gather stays a checked step, and each call
  // reports the bad index, as the interpreter does.
  const Tape bad = parse_tape(
      "inp %1::f64[6]\n"
      "%2 = const [0, 1, 6]::i64[3]\n"
      "%3 = gather(%1, %2, axis=0)::f64[3]\n"
      "%4 = mul(%3, %3)::f64[3]\n"
      "out %4\n");
  CHECK(plan_text(bad).find("gather %3 = gather(%1, %2) (checked indices, loop)") != std::string::npos);
  const CompiledFunction f = compile(bad);
  for (int call = 0; call < 2; ++call)
    CHECK_ERROR(f({randn({6}, 4)}), "gather: index 6 (element 2 of the indices) is out of range for axis 0 of length 6");
  CHECK_ERROR(play(bad, {randn({6}, 4)}), "gather: index 6 (element 2 of the indices)");
}

TEST_CASE("compile runs the cleanup passes only on a tape that has not run them last") {
  const Tensor x = tensor({0.5, 1.5, -2.0});
  // x * 1 and a dead exp: what simplify and dce remove.
  const Tape raw = trace(
      [](const Tensor& v) {
        (void)exp(v);
        return sum(sin(v) * 1.0);
      },
      x);
  CHECK_FALSE(raw.cleaned);
  CHECK_FALSE(parse_tape(to_string(raw)).cleaned);
  const CompiledFunction f = compile(raw);
  CHECK(to_string(f.tape()) == to_string(cleanup(raw)));
  CHECK(f.tape().size() < raw.size());
  test::check_close(f({x})[0], play(raw, {x})[0], 1e-12, 1e-12, "raw tape, cleaned by compile");

  const Tape g = grad_tape(raw);
  CHECK(g.cleaned);
  CHECK(jvp_tape(raw).cleaned);
  CHECK(PassPipeline({"grad", "dce", "simplify", "cse", "dce"}).run(raw).cleaned);
  CHECK_FALSE(PassPipeline({"grad", "simplify"}).run(raw).cleaned);
  CHECK_FALSE(select_outputs(g, {0}).cleaned);  // fewer outputs: maybe dead code
  const CompiledFunction fg = compile(g);
  CHECK(to_string(fg.tape()) == to_string(g));  // compiled as grad_tape left it
  const auto want = play(g, {x}), got = fg({x});
  for (std::size_t i = 0; i < want.size(); ++i) test::check_close(got[i], want[i], 1e-12, 1e-12, "gradient");

  // A stale mark (the raw tape claimed clean) costs optimisation, not correctness.
  Tape stale = raw;
  stale.cleaned = true;
  const CompiledFunction fs = compile(stale);
  CHECK(fs.tape().size() == raw.size());
  test::check_close(fs({x})[0], play(raw, {x})[0], 1e-12, 1e-12, "stale mark");
}

TEST_CASE("batched matrix products compile to gemms on the matrices where they are, transposes folded in") {
  struct Case {
    Shape a, b;
    bool ta, tb;  // the argument given transposed (its last two axes swapped), as a gradient does
  };
  for (const Case& c : {Case{{3, 4, 5}, {3, 5, 2}, false, false}, Case{{3, 5, 4}, {3, 5, 2}, true, false},
                        Case{{3, 4, 5}, {3, 2, 5}, false, true}, Case{{2, 1, 4, 5}, {3, 2, 5}, false, true},
                        Case{{4, 5}, {6, 5, 3}, false, false}, Case{{2, 3, 5, 4}, {5, 1}, true, false},
                        Case{{40, 9, 7}, {40, 7, 8}, false, false}}) {
    const std::string what = fmt::format("{}{} x {}{}", shape_str(c.a), c.ta ? "^T" : "", shape_str(c.b), c.tb ? "^T" : "");
    CAPTURE(what);
    for (DType dtype : {DType::f64, DType::f32}) {
      const Tensor a = randn(c.a, 101, dtype), b = randn(c.b, 102, dtype);
      auto f = [&](const Tensor& x, const Tensor& y) {
        const Tensor l = c.ta ? transpose(x) : x, r = c.tb ? transpose(y) : y;
        return sum(sin(matmul(l, r)));
      };
      const Tape forward = trace(f, a, b);
      const Tape g = grad_tape(forward);
      test::run_checked(forward, {a, b});
      const std::vector<Tensor> got = test::run_checked(g, {a, b});
      if (dtype == DType::f64) {
        const auto fd = test::finite_diff([&](const std::vector<Tensor>& v) { return f(v[0], v[1]); }, {a, b});
        test::check_close(got[1], fd[0], 1e-6, 1e-7, what + ": da");
        test::check_close(got[2], fd[1], 1e-6, 1e-7, what + ": db");
      }
      // No eager product and no copy of a transposed argument: gemms, flags set. (A
      // transposed argument's gradient is transposed back once, into its output.)
      const std::string plan = plan_text(g);
      CHECK_MESSAGE(plan.find("batch_matmul") == std::string::npos, plan);
      int permutes = 0;
      for (std::size_t at = plan.find("permute("); at != std::string::npos; at = plan.find("permute(", at + 1)) ++permutes;
      CHECK_MESSAGE(permutes == (c.ta ? 1 : 0) + (c.tb ? 1 : 0), plan);
      CHECK_MESSAGE(plan.find("^T") != std::string::npos, plan);
    }
  }
}

using test::cosine;
using test::scalar_chain;
using test::sine;

TEST_CASE("optimisation tiers: straight-line kernels compiled quick compute what full ones do, and the cache keeps them apart") {
  using O = CompileOptions::Optimization;
  const Tape t = scalar_chain(300, sine);
  const std::vector<Tensor> x{rand({101}, 6)};
  const std::vector<Tensor> want = play(t, x);
  const CompiledFunction full = compile(t, {.optimization = O::full});
  const CompiledFunction quick = compile(t, {.optimization = O::quick});
  for (const CompiledFunction* f : {&full, &quick}) {
    const std::vector<Tensor> got = (*f)(x);
    for (std::size_t k = 0; k < want.size(); ++k) test::check_close(got[k], want[k], 1e-12, 1e-12, "compiled vs played");
  }
  // Code made at the full tier serves a quick request (nothing compiled again; its IR
  // shows the tier its code was made at) ...
  CHECK(quick.kernels_compiled() == 0);
  CHECK(full.llvm_ir().find("; ---- quick tier") == std::string::npos);
  CHECK(quick.llvm_ir().find("; ---- quick tier") == std::string::npos);
  // ... and quick code never serves a request for full optimisation.
  const Tape other = scalar_chain(300, cosine);
  const CompiledFunction quick2 = compile(other, {.optimization = O::quick});
  const CompiledFunction full2 = compile(other, {.optimization = O::full});
  CHECK(quick2.kernels_compiled() > 0);
  CHECK(full2.kernels_compiled() == quick2.kernels_compiled());
  CHECK(quick2.llvm_ir().find("; ---- quick tier") != std::string::npos);
  CHECK(full2.llvm_ir().find("; ---- quick tier") == std::string::npos);
  // dump_ir shows what a compile that builds every kernel would make.
  CHECK(dump_ir(t, {.optimization = O::quick}).find("; ---- quick tier") != std::string::npos);
  test::check_close(quick2(x)[1], full2(x)[1], 1e-12, 1e-12, "quick vs full gradient");
  test::check_close(quick2(x)[1], play(other, x)[1], 1e-12, 1e-12, "quick vs played gradient");
  // A kernel with a loop stays at the full tier under `quick`.
  const Tape loop = trace([](const Tensor& v) { return sum(exp(v)); }, zeros({1000}));
  const std::string ir = compile(loop, {.optimization = O::quick}).llvm_ir();
  CHECK(ir.find("; ---- full tier") != std::string::npos);
  CHECK(ir.find("@_ZGV") != std::string::npos);  // vectorised, with libmvec's exp
}

TEST_CASE("optimisation tiers: `automatic` is full for small straight-line code and quick past kQuickStraightLine") {
  const std::vector<Tensor> x{rand({101}, 6)};
  const CompiledFunction small = compile(scalar_chain(50, sine));
  CHECK(small.llvm_ir().find("; ---- quick tier") == std::string::npos);
  const Tape big_tape = scalar_chain(4000, sine);
  const CompiledFunction big = compile(big_tape);
  CHECK(big.llvm_ir().find("; ---- quick tier") != std::string::npos);
  // Both tiers in one compile: the gradient's scatter into x's 101 elements is a loop,
  // made at the full tier beside the quick straight-line kernels (which keep the module
  // all were emitted into, and have their bodies merged into their entries).
  CHECK(big.llvm_ir().find("; ---- full tier") != std::string::npos);
  const std::string ir = big.llvm_ir();
  const std::size_t quick_from = ir.find("; ---- quick tier");
  const std::size_t quick_to = ir.find("; ---- full tier", quick_from);
  CHECK(ir.substr(quick_from, quick_to - quick_from).find("_body") == std::string::npos);
  const Tensor g = big(x)[1];
  test::check_close(g, play(big_tape, x)[1], 1e-11, 1e-12, "automatic (quick) vs played gradient");
  double largest = 0;
  for (double d : g.values()) largest = std::max(largest, std::abs(d));
  CHECK(largest > 0.1);  // (a gradient that is not all zeros)
}

TEST_CASE("compile taking its tape: a cleaned tape kept without a copy, the same function as from a copy") {
  const Tape traced = trace([](const Tensor& x) { return sum(exp(x) * sin(x * 2.0)); }, zeros({7}));
  const Tape g = grad_tape(traced);
  REQUIRE(g.cleaned);
  const CompiledFunction copied = compile(g);
  Tape moved_from = g;
  const Op* const ops = moved_from.ops.data();
  const CompiledFunction moved = compile(std::move(moved_from));
  CHECK(moved.tape().ops.data() == ops);  // the same array: not copied
  CHECK(to_string(moved.tape()) == to_string(copied.tape()));
  const Tensor x = tensor({0.1, -0.4, 0.9, 1.3, -2.0, 0.0, 0.5});
  const std::vector<Tensor> a = moved({x}), b = copied({x});
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].values() == b[i].values());
  // A tape not cleaned is cleaned first, either way.
  const CompiledFunction from_traced = compile(Tape(traced));
  CHECK(from_traced.tape().cleaned);
  CHECK(from_traced({x})[0].item() == doctest::Approx(copied({x})[0].item()).epsilon(1e-14));
}

TEST_CASE("a compiled function writes into output slots nothing else holds, and only into those") {
  const CompiledFunction f =
      compile(trace([](const Tensor& a) { return std::vector<Tensor>{a * 2.0, sum(a)}; }, zeros({3})));
  const Tensor x = tensor({1.0, 2.0, 3.0});
  const Tensor* args[1] = {&x};
  Tensor out[2];
  f.run(args, out);
  CHECK(out[0].values() == std::vector<double>{2, 4, 6});
  CHECK(out[1].item() == 6.0);
  CHECK(out[0].unshared());
  // Kept results of the right type, held only here: written in place.
  const void* const kept0 = out[0].raw();
  const void* const kept1 = out[1].raw();
  const Tensor x2 = tensor({-1.0, 0.5, 4.0});
  const Tensor* args2[1] = {&x2};
  f.run(args2, out);
  CHECK(out[0].raw() == kept0);
  CHECK(out[1].raw() == kept1);
  CHECK(out[0].values() == std::vector<double>{-2, 1, 8});
  CHECK(out[1].item() == 3.5);
  // A copy held elsewhere keeps its values: that slot gets a new tensor.
  const Tensor copy = out[0];
  CHECK_FALSE(out[0].unshared());
  f.run(args, out);
  CHECK(out[0].raw() != copy.raw());
  CHECK(copy.values() == std::vector<double>{-2, 1, 8});
  CHECK(out[0].values() == std::vector<double>{2, 4, 6});
  // A slot of another shape or dtype, a borrowed or adopted tensor, a slot that is the
  // argument: new tensors, the old ones untouched.
  double outside[3] = {7, 7, 7};
  out[0] = Tensor::borrow(outside, DType::f64, {3});
  CHECK_FALSE(out[0].unshared());
  out[1] = zeros({1});
  f.run(args2, out);
  CHECK(outside[0] == 7.0);
  CHECK(out[0].values() == std::vector<double>{-2, 1, 8});
  CHECK(out[1].shape() == Shape{});
  out[0] = Tensor::adopt(std::make_shared<std::array<double, 3>>(std::array<double, 3>{5, 5, 5}), DType::f64, {3});
  CHECK_FALSE(out[0].unshared());
  f.run(args, out);
  CHECK(out[0].values() == std::vector<double>{2, 4, 6});
  Tensor self = tensor({1.0, 1.0, 1.0});
  const Tensor* self_arg[1] = {&self};
  Tensor slots[2] = {};
  std::swap(slots[0], self);
  self_arg[0] = &slots[0];
  f.run(self_arg, slots);  // x = f(x): the argument's memory outlives the call
  CHECK(slots[0].values() == std::vector<double>{2, 2, 2});
  CHECK(slots[1].item() == 3.0);
}

TEST_CASE("a compiled function writes in place into a slot whose other holders the caller counts") {
  const CompiledFunction f = compile(trace([](const Tensor& a) { return a * 2.0; }, zeros({3})));
  const Tensor x = tensor({1.0, 2.0, 3.0});
  const Tensor* args[1] = {&x};
  Tensor out[1];
  f.run(args, out);
  Tensor alias = out[0];  // the caller's second name for its slot
  CHECK(alias.same_storage(out[0]));
  CHECK(out[0].unshared(2));
  CHECK_FALSE(out[0].unshared());
  const void* const kept = out[0].raw();
  const Tensor x2 = tensor({-1.0, 0.5, 4.0});
  const Tensor* args2[1] = {&x2};
  const int two[1] = {2};
  f.run(args2, out, two);  // two holders, both counted: written in place, seen through both
  CHECK(out[0].raw() == kept);
  CHECK(alias.values() == std::vector<double>{-2, 1, 8});
  const int one[1] = {1};
  f.run(args, out, one);  // one counted, two hold it: a new tensor, the alias untouched
  CHECK(out[0].raw() != kept);
  CHECK(alias.values() == std::vector<double>{-2, 1, 8});
  CHECK(out[0].values() == std::vector<double>{2, 4, 6});
  CHECK_FALSE(alias.same_storage(out[0]));
  CHECK(out[0].reshaped({3, 1}).same_storage(out[0]));
  const int none[2] = {1, 1};
  CHECK_THROWS_WITH_AS(f.run(args, out, std::span<const int>(none)), doctest::Contains("a holder count per output (1), got 2"),
                       Error);
}

TEST_CASE("a compiled function writes its outputs through pointers to the caller's tensors") {
  const CompiledFunction f = compile(trace(
      [](const Tensor& a) { return std::vector<Tensor>{a * 2.0, sum(a)}; }, zeros({3})));
  const Tensor x = tensor({1.0, 2.0, 3.0});
  const Tensor* args[1] = {&x};
  struct Fields {
    Tensor twice, total;
  } r;
  Tensor* const to[2] = {&r.twice, &r.total};
  const int one[2] = {1, 1};
  f.run(args, to, one);
  CHECK(r.twice.values() == std::vector<double>{2, 4, 6});
  CHECK(r.total.item() == 6.0);
  const void* const kept = r.twice.raw();
  const Tensor x2 = tensor({-1.0, 0.5, 4.0});
  const Tensor* args2[1] = {&x2};
  f.run(args2, to, one);  // written where it is
  CHECK(r.twice.raw() == kept);
  CHECK(r.twice.values() == std::vector<double>{-2, 1, 8});
  CHECK(r.total.item() == 3.5);
  const std::vector<Tensor> plain = f({x2});
  CHECK(plain[0].values() == r.twice.values());
  Tensor* const twice[2] = {&r.twice, &r.twice};
  CHECK_THROWS_WITH_AS(f.run(args, twice, one), doctest::Contains("one tensor for two outputs"), Error);
  Tensor* const null[2] = {&r.twice, nullptr};
  CHECK_THROWS_WITH_AS(f.run(args, null, one), doctest::Contains("got a null pointer"), Error);
  const int three[3] = {1, 1, 1};
  CHECK_THROWS_WITH_AS(f.run(args, to, std::span<const int>(three)), doctest::Contains("a holder count per output (2), got 3"),
                       Error);
  // An argument that is one of the outputs' tensors (x = f(x)) is read whole first.
  Tensor y = tensor({1.0, 2.0, 3.0});
  Tensor s;
  const Tensor* self[1] = {&y};
  Tensor* const into_y[2] = {&y, &s};
  f.run(self, into_y, one);
  CHECK(y.values() == std::vector<double>{2, 4, 6});
  CHECK(s.item() == 6.0);
}

TEST_CASE("Tensor::unshared: only a plain tensor holding memory of its own alone") {
  Tensor t = zeros({4});
  CHECK(t.unshared());
  {
    const Tensor copy = t;
    CHECK_FALSE(t.unshared());
  }
  CHECK(t.unshared());
  CHECK_FALSE(Tensor().unshared());
  CHECK_FALSE(t.reshaped({2, 2}).unshared());
  const Tensor p = param(zeros({2}));
  CHECK_FALSE(p.unshared());
}
