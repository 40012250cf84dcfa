// Kernels, the schedule and the memory plan: the kernel cache compiles each key once,
// buffer reuse and in-place updates never change a result, and sizes that overflow or
// empty reductions behave the same interpreted and compiled.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <sstream>

#include "test_util.hpp"

using namespace reel;

namespace {

void check_same(const std::vector<Tensor>& a, const std::vector<Tensor>& b, const std::string& what) {
  REQUIRE(a.size() == b.size());
  for (std::size_t k = 0; k < a.size(); ++k) {
    const test::Tolerance tol = test::compiled_tolerance(a[k].dtype());
    test::check_close(a[k], b[k], tol.rtol, tol.atol, fmt::format("{}: output {}", what, k));
  }
}

}  // namespace

TEST_CASE("the kernel cache compiles each key once and shares it across tapes") {
  const Tape t = trace([](const Tensor& x) { return sum(exp(x) * x); }, zeros({7}));
  const CompiledFunction first = compile(t);
  const KernelCacheStats before = kernel_cache_stats();
  const CompiledFunction second = compile(t);
  CHECK(second.kernels_compiled() == 0);
  CHECK(second.num_kernels() == first.num_kernels());
  CHECK(kernel_cache_stats().hits == before.hits + static_cast<int64_t>(first.num_kernels()));
  CHECK(kernel_cache_stats().compiled == before.compiled);
  // Another tape with a loop of the same structure reuses it too; the variable
  // numbers and the constant's value are not part of the key.
  const Tape other = trace([](const Tensor& y) { return sum(exp(y) * y); }, ones({7}));
  CHECK(compile(other).kernels_compiled() == 0);
  const Tensor x = randn({7}, 1);
  CHECK(first({x})[0].item() == second({x})[0].item());
}

TEST_CASE("distinct shapes, dtypes or operations do not share a kernel") {
  auto f = [](const Tensor& x) { return exp(x) * 2.0; };
  const CompiledFunction base = compile(trace(f, zeros({11})));
  CHECK(compile(trace(f, zeros({11}))).kernels_compiled() == 0);
  CHECK(compile(trace(f, zeros({12}))).kernels_compiled() == 1);
  CHECK(compile(trace(f, zeros({11}, DType::f32))).kernels_compiled() == 1);
  CHECK(compile(trace([](const Tensor& x) { return log(x) * 2.0; }, zeros({11}))).kernels_compiled() == 1);
  CHECK(compile(trace(f, zeros({11})), {.vector_math = false}).kernels_compiled() == 1);
  // The kernels give their own answers, not each other's.
  const Tensor x = rand({12}, 2) + 0.5;
  const Tensor y = rand({12}, 2, DType::f32) + 0.5;
  test::run_checked(trace(f, x), {x});
  test::run_checked(trace(f, y), {y});
  test::run_checked(trace([](const Tensor& v) { return log(v) * 2.0; }, x), {x});
}

TEST_CASE("a traced loop of many steps compiles a handful of kernels") {
  const test::NoReroll unrolled;  // the loops' unrolled traces are what this compiles
  const Tensor x = randn({8}, 3) * 0.5;
  const Tape g = grad_tape(trace([](const Tensor& v) { return test::sin_recurrence(v, 2000); }, x));
  REQUIRE(g.size() > 20000);
  const CompiledFunction f = compile(g);
  CAPTURE(f.num_kernels());
  CHECK(f.num_kernels() <= 40);
  CHECK(f.num_steps() > 100);
  check_same(f({x}), play(g, {x}), "2000-step sin recurrence");

  const Tensor W = randn({16, 16}, 4) * 0.25, b = randn({16}, 5), x0 = randn({16}, 6);
  const Tape r = grad_tape(trace([](const Tensor& w, const Tensor& c, const Tensor& v) {
    return test::tanh_recurrence(w, c, v, 100); }, W, b, x0));
  const CompiledFunction fr = compile(r);
  CHECK(fr.num_kernels() <= 20);
  check_same(fr({W, b, x0}), play(r, {W, b, x0}), "100-step tanh recurrence");
  // Buffers are reused: the workspace is near the most bytes alive at one step.
  CHECK(fr.workspace_bytes() <= fr.workspace_lower_bound() * 11 / 10);
  CHECK(fr.workspace_bytes() < compile(r, {.reuse_memory = false}).workspace_bytes() / 2);
}

TEST_CASE("in-place updates and reuse give the same results as separate buffers") {
  // tanh writes in place over the matmul result it is the last to read.
  const Tape chain = parse_tape(
      "inp %1::f64[4,4]\ninp %2::f64[4,4]\n%3 = matmul(%2, %1)::f64[4,4]\n%4 = tanh(%3)::f64[4,4]\n"
      "%5 = matmul(%2, %4)::f64[4,4]\n%6 = tanh(%5)::f64[4,4]\n%7 = matmul(%2, %6)::f64[4,4]\n"
      "%8 = sum(%7)::f64[]\nout %8, %6");
  CHECK(plan_text(chain).find("in place: %4 over %3") != std::string::npos);
  const std::vector<Tensor> args{randn({4, 4}, 7), randn({4, 4}, 8)};
  const auto reused = test::run_checked(chain, args);
  check_same(compile(chain, {.reuse_memory = false})(args), compile(chain)(args), "reuse on vs off");
  // A view read later keeps its buffer alive: no in-place update over %3 here.
  const Tape view = parse_tape(
      "inp %1::f64[4,4]\ninp %2::f64[4,4]\n%3 = matmul(%2, %1)::f64[4,4]\n"
      "%4 = reshape(%3, shape=[16])::f64[16]\n%5 = exp(%3)::f64[4,4]\n%6 = matmul(%2, %5)::f64[4,4]\n"
      "%7 = sum(%6)::f64[]\n%8 = sum(%4)::f64[]\n%9 = add(%7, %8)::f64[]\nout %9, %4");
  CHECK(plan_text(view).find("in place") == std::string::npos);
  test::run_checked(view, args);
  // A broadcast read (b is [4], read by a [4,4] loop) is never overwritten in place.
  const Tape bcast = parse_tape(
      "inp %1::f64[4]\ninp %2::f64[4,4]\n%3 = matmul(%2, %1)::f64[4]\n%4 = add(%2, %3)::f64[4,4]\n"
      "%5 = exp(%3)::f64[4]\n%6 = add(%4, %5)::f64[4,4]\n%7 = matmul(%6, %3)::f64[4]\nout %7");
  test::run_checked(bcast, {randn({4}, 9), randn({4, 4}, 10)});
}

TEST_CASE("sizes whose bytes overflow int64 are errors everywhere") {
  const int64_t huge = int64_t{1} << 61;
  CHECK_THROWS_WITH_AS(zeros({huge}), doctest::Contains("tensor"), Error);
  CHECK_THROWS_WITH_AS(full({huge}, 1.0), doctest::Contains("int64"), Error);
  CHECK_THROWS_WITH_AS(zeros({1 << 30, 1 << 30, 4}, DType::f32), doctest::Contains("int64"), Error);
  CHECK_THROWS_WITH_AS(broadcast_to(scalar(1.0), {huge}), doctest::Contains("broadcast_to"), Error);
  CHECK_THROWS_WITH_AS(
      trace([&](const Tensor& x) { return sum(broadcast_to(x, {huge})); }, scalar(1.0)),
      doctest::Contains("broadcast_to"), Error);
  CHECK_THROWS_WITH_AS(parse_tape("inp %1::f64[2305843009213693952]\nout %1"),
                       doctest::Contains("line 1"), Error);
  CHECK_THROWS_WITH_AS(
      parse_tape("inp %1::f64[]\n%2 = broadcast_to(%1, shape=[2305843009213693952])::f64[2305843009213693952]\n"
                 "%3 = sum(%2)::f64[]\nout %3"),
      doctest::Contains("line 2"), Error);
  // A hand-built tape with such a shape: play and compile refuse it too.
  Tape t = parse_tape("inp %1::f64[]\n%2 = broadcast_to(%1, shape=[4])::f64[4]\n%3 = sum(%2)::f64[]\nout %3");
  t.ops[1].type.shape = {huge};
  t.ops[1].attrs.set("shape", Shape{huge});
  CHECK_THROWS_AS(play(t, {scalar(1.0)}), Error);
  CHECK_THROWS_AS(compile(t), Error);
}

TEST_CASE("reductions of empty tensors agree interpreted and compiled") {
  const Tensor e = zeros({0});
  const Tape mean_tape = trace([](const Tensor& x) { return mean(x); }, e);
  CHECK(std::isnan(play(mean_tape, {e})[0].item()));
  CHECK(std::isnan(compile(mean_tape)({e})[0].item()));
  const Tape fused = trace([](const Tensor& x) { return mean(exp(x)); }, e);
  CHECK(std::isnan(compile(fused)({e})[0].item()));
  const Tensor e2 = zeros({3, 0});
  const Tape axis = trace([](const Tensor& x) { return std::make_tuple(sum(x, 1), mean(x), sum(x)); }, e2);
  const auto a = play(axis, {e2});
  const auto b = compile(axis)({e2});
  CHECK(a[0].values() == std::vector<double>{0, 0, 0});
  CHECK(b[0].values() == std::vector<double>{0, 0, 0});
  CHECK(std::isnan(a[1].item()));
  CHECK(std::isnan(b[1].item()));
  CHECK(a[2].item() == 0);
  CHECK(b[2].item() == 0);
}

TEST_CASE("play, which releases intermediates after their last use, keeps its outputs") {
  const Tensor x = rand({1 << 16}, 11);
  const Tape t = trace([](const Tensor& v) {
    Tensor y = v;
    for (int i = 0; i < 200; ++i) y = y * 0.999 + 0.001;
    return std::make_tuple(sum(y), y);
  }, x);
  const auto out = play(t, {x});
  const auto compiled = compile(t)({x});
  check_same(out, compiled, "a long chain");
  CHECK(out[1].shape() == Shape{1 << 16});
}

TEST_CASE("the schedule gives the same results run by the loop and by a generated driver") {
  using Runner = CompileOptions::Runner;
  const test::NoReroll unrolled;  // a re-rolled loop is an extern step, which the driver does not run
  const Tensor W = randn({16, 16}, 12) * 0.25, b = randn({16}, 13), x = randn({16}, 14);
  const Tape r = grad_tape(trace([](const Tensor& w, const Tensor& c, const Tensor& v) {
    return test::tanh_recurrence(w, c, v, 20); }, W, b, x));
  const CompiledFunction loop = compile(r, {.runner = Runner::loop});
  const CompiledFunction driver = compile(r, {.runner = Runner::driver});
  CHECK(!loop.uses_driver());
  CHECK(driver.uses_driver());
  CHECK(!compile(r).uses_driver());  // automatic: the loop (see docs/codegen.md)
  const auto a = loop({W, b, x});
  const auto d = driver({W, b, x});
  for (std::size_t k = 0; k < a.size(); ++k) CHECK(a[k].values() == d[k].values());
  check_same(a, play(r, {W, b, x}), "driver vs interpreter");
}

// Slices and permutations (strided_read) are loads in the loops that read them, and
// concat (strided_place) a generated loop per part: the values must not change, in
// every dtype, for steps, empty parts, chains (a slice of a slice or of a permutation),
// their gradients (unslice, concat's slices), and inside a compiled scan whose carry is
// rotated (read at shifted positions and written whole: no in-place update).
TEST_CASE("strided reads and placements agree interpreted and compiled") {
  for (DType dt : {DType::f64, DType::f32}) {
    const auto f = [](const Tensor& x) {
      const Tensor a = sin(slice(x, 0, 1, 5, 2));             // rows 1, 3: [2, 6]
      const Tensor b = slice(x, 1, 0, 6, 3) * 2.0;            // columns 0, 3: [5, 2]
      const Tensor c = exp(permute(x, {1, 0}) * 0.1);         // [6, 5]
      const Tensor d = slice(slice(x, 1, 1, 6), 0, 2, 4);     // [2, 5]
      const Tensor e = slice(permute(x, {1, 0}), 0, 2, 3);    // [1, 5]
      const Tensor joined = concat({d, e, slice(d, 0, 1, 1) * 3.0, d * d}, 0);  // [5, 5]
      const Tensor sideways = concat({b, x, b}, 1);           // [5, 10]
      return sum(a) + sum(b * b) + sum(c) + sum(joined * joined) + sum(sin(sideways));
    };
    const Tensor x = randn({5, 6}, 3, dt);
    const Tape t = trace(f, x);
    const std::vector<Tensor> primal = test::run_checked(t, {x});
    CHECK(primal.at(0).item() == doctest::Approx(f(x).item()).epsilon(1e-5));
    test::run_checked(grad_tape(t), {x});
    // The slices' adjoints (unslice) are placements too: zeros, then a loop; no eager step.
    const std::string gplan = plan_text(grad_tape(t));
    CHECK_MESSAGE(gplan.find("unslice(") != std::string::npos, gplan);
    CHECK_MESSAGE(gplan.find("zeros, then") != std::string::npos, gplan);
    CHECK_MESSAGE(gplan.find("(eager)") == std::string::npos, gplan);
    if (dt == DType::f64)
      test::check_gradient([&](const std::vector<Tensor>& v) { return f(v[0]); }, {x}, "strided reads", 1e-5, 1e-6);
    // A rotated carry: c <- concat(c[1:], c[:1]) * 1.5 + x_t.
    const Tape s = trace(
        [](const Tensor& c0, const Tensor& xs) {
          const auto [c, ys] = scan(
              [](const Tensor& c, const Tensor& xt) {
                const Tensor next = concat({slice(c, 0, 1, 4), slice(c, 0, 0, 1)}, 0) * 1.5 + xt;
                return std::pair{next, sum(slice(next, 0, 1, 3))};
              },
              c0, xs);
          return sum(c * c) + sum(ys);
        },
        randn({4}, 4, dt), randn({7, 4}, 5, dt));
    CHECK(plan_text(s).find("one kernel") != std::string::npos);
    test::run_checked(s, {randn({4}, 6, dt), randn({7, 4}, 7, dt)});
    test::run_checked(grad_tape(s), {randn({4}, 6, dt), randn({7, 4}, 7, dt)});
  }
}

// Values of one element fuse into one loop whatever their shape: a scalar trace's element
// reads (f64[1] slices, reshaped to f64[]), [1,1] values and scalars broadcast into them,
// a reshape of a member read in the loop and after it (an output), and a sum over a
// one-element member. Interpreted and compiled agree, and so does the gradient.
TEST_CASE("values of one element fuse into one loop whatever their shape") {
  const auto f = [](const Tensor& x) {
    const Tensor a = reshape(slice(x, 0, 0, 1), {});                      // f64[]
    const Tensor b = slice(x, 0, 1, 2);                                    // f64[1]
    const Tensor c = sin(a) * b + 2.0;                                     // f64[1]
    const Tensor d = reshape(c, {1, 1}) * exp(reshape(slice(x, 0, 2, 3), {}));  // f64[1,1]
    const Tensor e = reshape(d, {}) + a * a;                               // f64[]
    return std::vector<Tensor>{e, d, sum(c * c) + e * 3.0};
  };
  for (DType dt : {DType::f64, DType::f32}) {
    const Tensor x = randn({3}, 11, dt);
    const Tape t = trace(f, x);
    const std::string plan = plan_text(t);
    // One loop reads the three elements and computes every scalar; the sum, complete only
    // after its loop, is read by a second.
    std::size_t loops = 0;
    for (std::size_t at = plan.find("loop "); at != std::string::npos; at = plan.find("loop ", at + 1)) ++loops;
    CHECK_MESSAGE(loops == 2, plan);
    const std::string first = plan.substr(0, plan.find("step 1:"));
    std::size_t reads = 0;
    for (std::size_t at = first.find("= slice("); at != std::string::npos; at = first.find("= slice(", at + 1)) ++reads;
    CHECK_MESSAGE(reads == 3, plan);
    const std::vector<Tensor> out = test::run_checked(t, {x});
    const std::vector<Tensor> expected = f(x);
    for (std::size_t k = 0; k < out.size(); ++k) test::check_close(out[k], expected[k], 1e-6, 1e-6, "output");
    test::run_checked(grad_tape(trace([&](const Tensor& v) { return f(v)[2] + sum(f(v)[1]); }, x)), {x});
  }
  // A reshape that leaves the loop's iteration space and one that comes back (a tape the
  // cleanup passes have not seen, so not merged into one reshape), read in the loop and
  // summed: compiled as interpreted.
  Tape chain = parse_tape(
      "inp %1::f64[3]\n"
      "%2 = exp(%1)::f64[3]\n"
      "%3 = reshape(%2, shape=[3,1])::f64[3,1]\n"
      "%4 = reshape(%3, shape=[3])::f64[3]\n"
      "%5 = sin(%4)::f64[3]\n"
      "%6 = sum(%4, axes=[0])::f64[]\n"
      "out %5, %6");
  chain.cleaned = true;
  const Tensor x = randn({3}, 12);
  const std::vector<Tensor> interpreted = play(chain, {x}), compiled = compile(chain)({x});
  for (std::size_t k = 0; k < interpreted.size(); ++k) test::check_close(compiled[k], interpreted[k], 1e-14, 1e-14, "chain");
}

// A value a fused loop computes is written by that loop straight into its place in a
// covering placement (concat, a Jacobian's columns): the placement's step copies only
// the others. sin and cos of one value in a loop over no dimensions are one sincos
// call. Compiled as interpreted, in f64 and f32, on one thread and in chunks.
TEST_CASE("a loop writes the values it computes into their places in a concatenation") {
  auto count = [](const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  for (const std::string dt : {"f64", "f32"}) {
    const DType dtype = dt == "f64" ? DType::f64 : DType::f32;
    // Scalars of one loop (a sine of a sine and its cosine, an element read) and an input
    // of the tape, which is copied.
    const Tape scalars = parse_tape(fmt::format(
        "inp %1::{0}[3]\n"
        "%2 = slice(%1, axis=0, start=0, stop=1, step=1)::{0}[1]\n"
        "%3 = reshape(%2, shape=[])::{0}[]\n"
        "%4 = sin(%3)::{0}[]\n"
        "%5 = cos(%3)::{0}[]\n"
        "%6 = sin(%4)::{0}[]\n"
        "%7 = cos(%4)::{0}[]\n"
        "%8 = mul(%5, %7)::{0}[]\n"
        "%9 = reshape(%6, shape=[1])::{0}[1]\n"
        "%10 = reshape(%8, shape=[1])::{0}[1]\n"
        "%11 = slice(%1, axis=0, start=2, stop=3, step=1)::{0}[1]\n"
        "%12 = concat(%9, %10, %11, %1, %9, axis=0)::{0}[7]\n"
        "out %12, %5\n",
        dt));
    const std::string plan = plan_text(scalars);
    CHECK_MESSAGE(plan.find("places [%6 into %12, %8 into %12, %11 into %12, %6 into %12]") != std::string::npos, plan);
    CHECK_MESSAGE(plan.find("4 arguments written by their loops, a loop per other") != std::string::npos, plan);
    const Tensor x = randn({3}, 21, dtype);
    const std::vector<Tensor> got = test::run_checked(scalars, {x});
    const std::vector<double> v = x.values();
    const double a = std::sin(std::sin(v[0])), b = std::cos(v[0]) * std::cos(std::sin(v[0]));
    test::check_close(got[0], tensor({a, b, v[2], v[0], v[1], v[2], a}, {7}, dtype), 1e-6, 1e-6, dt + " concat");
    // Columns of a matrix from a loop over [2] (strided stores), one of them twice, and a
    // value also needed as itself (an output).
    const Tape columns = parse_tape(fmt::format(
        "inp %1::{0}[2]\n"
        "%2 = exp(%1)::{0}[2]\n"
        "%3 = mul(%2, %1)::{0}[2]\n"
        "%4 = reshape(%2, shape=[2,1])::{0}[2,1]\n"
        "%5 = reshape(%3, shape=[2,1])::{0}[2,1]\n"
        "%6 = place(%4, %5, %4, axis=1, starts=[2,1,0], step=1, size=3)::{0}[2,3]\n"
        "out %6, %2\n",
        dt));
    const std::string cplan = plan_text(columns);
    CHECK_MESSAGE(cplan.find("every argument written by its loop") != std::string::npos, cplan);
    CHECK_MESSAGE(count(cplan, "loop ") == 1, cplan);
    const Tensor y = randn({2}, 22, dtype);
    const std::vector<Tensor> cols = test::run_checked(columns, {y});
    const std::vector<double> w = y.values();
    test::check_close(cols[0], tensor({std::exp(w[0]), std::exp(w[0]) * w[0], std::exp(w[0]), std::exp(w[1]),
                                       std::exp(w[1]) * w[1], std::exp(w[1])}, {2, 3}, dtype),
                      1e-6, 1e-6, dt + " columns");
  }
  // A long loop writes a contiguous place (a concat along the rows) but not a strided one
  // (columns), which would cost its vector stores; a placement that does not cover its
  // result (unslice) is zeroed, then copied.
  const Tape long_loop = parse_tape(
      "inp %1::f64[100]\n"
      "%2 = exp(%1)::f64[100]\n"
      "%3 = concat(%2, %1, axis=0)::f64[200]\n"
      "%4 = reshape(%2, shape=[100,1])::f64[100,1]\n"
      "%5 = reshape(%1, shape=[100,1])::f64[100,1]\n"
      "%6 = place(%4, %5, axis=1, starts=[0,1], step=1, size=2)::f64[100,2]\n"
      "%7 = unslice(%2, axis=0, start=1, step=2, size=200)::f64[200]\n"
      "out %3, %6, %7\n");
  const std::string lplan = plan_text(long_loop);
  CHECK_MESSAGE(lplan.find("places [%2 into %3]") != std::string::npos, lplan);
  CHECK_MESSAGE(lplan.find("place %6 = place(%4, %5) (a loop per argument)") != std::string::npos, lplan);
  CHECK_MESSAGE(lplan.find("(zeros, then a loop per argument)") != std::string::npos, lplan);
  test::run_checked(long_loop, {randn({100}, 23)});
  // A scan whose carry is a concatenation of scalars its body's loop computes: the loop
  // reads the carry's elements and writes the new ones into their places, so the carry is
  // not updated in place. Over many steps, compiled as interpreted, and its gradient.
  const auto rotate = [](const Tensor& c0) {
    const auto [c, ys] = scan(
        [](const Tensor& c, const Tensor&) {
          const Tensor p = reshape(slice(c, 0, 0, 1), {}), q = reshape(slice(c, 0, 1, 2), {});
          const Tensor next = concat({reshape(sin(p) * q + 0.5, {1}), reshape(cos(p) - q * 0.25, {1})}, 0);
          return std::pair{next, sum(next)};
        },
        c0, zeros({25, 1}));
    return sum(c * c) + sum(ys);
  };
  const Tensor c0 = tensor({0.3, -0.7});
  const Tape r = trace(rotate, c0);
  test::run_checked(r, {c0});
  test::check_gradient([&](const std::vector<Tensor>& v) { return rotate(v[0]); }, {c0}, "rotated scalars", 1e-6, 1e-7);
}

// A strided read (a slice, a permutation) that one loop computes and later loops or a
// reduction read is read again from its source at its offset and strides, not copied:
// lse's maximum over x[1:] read x in place. Compiled as interpreted, f64 and f32.
TEST_CASE("slices read by several loops and reductions are read from their sources, not copied") {
  for (const std::string dt : {"f64", "f32"}) {
    const DType dtype = dt == "f64" ? DType::f64 : DType::f32;
    const Tape t = parse_tape(fmt::format(
        "inp %1::{0}[6]\n"
        "inp %2::{0}[3,4]\n"
        "%3 = slice(%1, axis=0, start=1, stop=6, step=1)::{0}[5]\n"
        "%4 = sum(%3, axes=[0])::{0}[]\n"
        "%5 = max(%3, axes=[0])::{0}[]\n"
        "%6 = broadcast_to(%4, shape=[5])::{0}[5]\n"
        "%7 = mul(%3, %6)::{0}[5]\n"
        "%8 = permute(%2, perm=[1,0])::{0}[4,3]\n"
        "%9 = sum(%8, axes=[0,1])::{0}[]\n"
        "%10 = max(%8, axes=[1])::{0}[4]\n"
        "%11 = broadcast_to(%9, shape=[4,3])::{0}[4,3]\n"
        "%12 = sub(%8, %11)::{0}[4,3]\n"
        "out %7, %5, %10, %12\n",
        dt));
    const std::string plan = plan_text(t);
    CHECK_MESSAGE(plan.find("strided reads [%3 again]") != std::string::npos, plan);
    CHECK_MESSAGE(plan.find("strided reads [%8 again]") != std::string::npos, plan);
    CHECK_MESSAGE(plan.find("reduce %5 = max(%3) reading %1 in place") != std::string::npos, plan);
    CHECK_MESSAGE(plan.find("reduce %10 = max(%8) reading %2 in place") != std::string::npos, plan);
    CHECK_MESSAGE(plan.find("stores [%3") == std::string::npos, plan);
    CHECK_MESSAGE(plan.find("stores [%8") == std::string::npos, plan);
    const Tensor x = randn({6}, 31, dtype), y = randn({3, 4}, 32, dtype);
    const std::vector<Tensor> got = test::run_checked(t, {x, y});
    const std::vector<double> v = x.values();
    test::check_close(got[1], tensor({*std::max_element(v.begin() + 1, v.end())}, {}, dtype), 0, 0, dt + " max of x[1:]");
  }
  // A slice read again by one member and, in the same loop, in memory by a gather or a
  // permutation: the loop reads the slice's buffer too, which must live until then.
  for (const char* text : {"inp %1::f64[9]\n"
                           "%2 = slice(%1, axis=0, start=1, stop=9, step=1)::f64[8]\n"
                           "%3 = exp(%2)::f64[8]\n"
                           "%4 = max(%3, axes=[0])::f64[]\n"
                           "%5 = broadcast_to(%4, shape=[8])::f64[8]\n"
                           "%6 = mul(%2, %5)::f64[8]\n"
                           "%7 = const [7, 6, 5, 4, 3, 2, 1, 0]::i64[8]\n"
                           "%8 = gather(%2, %7, axis=0)::f64[8]\n"
                           "%9 = add(%6, %8)::f64[8]\n"
                           "out %9\n",
                           "inp %1::f64[4,4]\n"
                           "%2 = permute(%1, perm=[1,0])::f64[4,4]\n"
                           "%3 = exp(%2)::f64[4,4]\n"
                           "%4 = max(%3, axes=[0,1])::f64[]\n"
                           "%5 = broadcast_to(%4, shape=[4,4])::f64[4,4]\n"
                           "%6 = mul(%2, %5)::f64[4,4]\n"
                           "%7 = permute(%2, perm=[1,0])::f64[4,4]\n"
                           "%8 = add(%6, %7)::f64[4,4]\n"
                           "out %8\n"}) {
    const Tape t = parse_tape(text);
    test::run_checked(t, {randn(t.type(1).shape, 33)});
  }
  // lse written with scalars (GradBench's C++: the maximum of x[0] and of x[1:]): its
  // gradient, compiled as interpreted and against finite differences.
  const auto lse = [](const std::vector<Real>& x) {
    Real a = x[0];
    for (std::size_t i = 1; i < x.size(); ++i) a = std::max(a, x[i]);
    Real s = 0;
    for (const Real& e : x) s += exp(e - a);
    return log(s) + a;
  };
  std::vector<double> x(50);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<double>(i));
  const Tape traced = trace(lse, x);
  const Tape g = grad_tape(traced);
  CHECK_MESSAGE(plan_text(g).find("reading %1 in place") != std::string::npos, plan_text(g));
  test::run_checked(g, {tensor(x)});
  test::check_gradient([&](const std::vector<Tensor>& v) { return play(traced, v)[0]; }, {tensor(x)}, "scalar lse", 1e-6,
                       1e-8);
}

// A slice computed by one loop and read, broadcast, by a later loop of a larger shape (a
// column of a matrix multiplying each row, an element scaling a matrix) is read again
// from its source at its offset and strides, with stride 0 along the broadcast
// dimensions: not copied. Compiled as interpreted, f64 and f32.
TEST_CASE("slices broadcast into a later loop are read from their sources, not copied") {
  for (const std::string dt : {"f64", "f32"}) {
    const DType dtype = dt == "f64" ? DType::f64 : DType::f32;
    const Tape t = parse_tape(fmt::format(
        "inp %1::{0}[30,5]\n"
        "inp %2::{0}[30]\n"
        "%3 = slice(%1, axis=1, start=2, stop=3, step=1)::{0}[30,1]\n"
        "%4 = exp(%3)::{0}[30,1]\n"
        "%5 = slice(%1, axis=1, start=0, stop=1, step=1)::{0}[30,1]\n"
        "%6 = mul(%1, %5)::{0}[30,5]\n"
        "%7 = mul(%6, %3)::{0}[30,5]\n"
        "%8 = slice(%2, axis=0, start=4, stop=5, step=1)::{0}[1]\n"
        "%9 = exp(%8)::{0}[1]\n"
        "%10 = slice(%1, axis=0, start=3, stop=4, step=1)::{0}[1,5]\n"
        "%11 = sin(%10)::{0}[1,5]\n"
        "%12 = add(%7, %8)::{0}[30,5]\n"
        "%13 = mul(%12, %10)::{0}[30,5]\n"
        "out %4, %9, %11, %13\n",
        dt));
    const std::string plan = plan_text(t);
    for (const char* again : {"%3 again", "%5 again", "%8 again", "%10 again"})
      CHECK_MESSAGE(plan.find(again) != std::string::npos, again, "\n", plan);
    const std::string memory = plan.substr(plan.find("memory:"));
    for (const char* copy : {"%3]", "%3,", "%5]", "%5,", "%8]", "%8,", "%10]", "%10,"})
      CHECK_MESSAGE(memory.find(copy) == std::string::npos, copy, "\n", plan);
    test::run_checked(t, {randn({30, 5}, 34, dtype), randn({30}, 35, dtype)});
  }
}

// A cheap elementwise value of one loop (a few additions, products, comparisons of
// what a later loop reads anyway) is computed again by the later loop that reads it
// rather than written to memory for it: the mask of where x[1:] equals its maximum,
// summed by one pass and read by the next (lse's derivative through its maximum). Not
// an exp (a call), nor a value whose arguments would then have to be stored. Compiled
// as interpreted, f64 and f32; and the scalar lse's gradient against finite differences.
TEST_CASE("cheap values of one loop are computed again by the later loop that reads them") {
  for (const std::string dt : {"f64", "f32"}) {
    const DType dtype = dt == "f64" ? DType::f64 : DType::f32;
    const Tape t = parse_tape(fmt::format(
        "inp %1::{0}[200]\n"
        "inp %2::{0}[199]\n"
        "%3 = slice(%1, axis=0, start=1, stop=200, step=1)::{0}[199]\n"
        "%4 = max(%3, axes=[0])::{0}[]\n"
        "%5 = broadcast_to(%4, shape=[199])::{0}[199]\n"
        "%6 = eq(%3, %5)::{0}[199]\n"
        "%7 = sum(%6, axes=[0])::{0}[]\n"
        "%8 = exp(%3)::{0}[199]\n"
        "%9 = sum(%8, axes=[0])::{0}[]\n"
        "%10 = exp(%2)::{0}[199]\n"
        "%11 = add(%10, %3)::{0}[199]\n"
        "%12 = sum(%11, axes=[0])::{0}[]\n"
        "%13 = div(%7, %9)::{0}[]\n"
        "%14 = broadcast_to(%13, shape=[199])::{0}[199]\n"
        "%15 = mul(%14, %6)::{0}[199]\n"
        "%16 = mul(%15, %8)::{0}[199]\n"
        "%17 = broadcast_to(%12, shape=[199])::{0}[199]\n"
        "%18 = mul(%17, %11)::{0}[199]\n"
        "out %16, %18\n",
        dt));
    const std::string plan = plan_text(t);
    CHECK_MESSAGE(plan.find("computes again [%5, %6]") != std::string::npos, plan);
    const std::string memory = plan.substr(plan.find("memory:"));
    CHECK_MESSAGE(memory.find("%6") == std::string::npos, plan);   // (the mask is not stored)
    CHECK_MESSAGE(memory.find("%8]") != std::string::npos, plan);  // (an exp is stored, not computed again)
    // (exp(%2) + x[1:] is stored: computing it again would store the exp instead.)
    CHECK_MESSAGE(memory.find("%11") != std::string::npos, plan);
    CHECK_MESSAGE(memory.find("%10") == std::string::npos, plan);
    test::run_checked(t, {randn({200}, 36, dtype), randn({199}, 37, dtype)});
    // Ties: the mask has several ones.
    test::run_checked(t, {zeros({200}, dtype), randn({199}, 38, dtype)});
  }
  // Found by review: a value that reads more arrays than the one it saves is stored (a
  // product of sums of eight inputs), and a value in memory anyway is read, not computed
  // again, so a chain (x - mean(x), again and again, each step an output) is not
  // computed again back to its start by every loop.
  const std::string fan = "inp %1::f64[300]\ninp %2::f64[300]\ninp %3::f64[300]\ninp %4::f64[300]\n"
                    "%5 = add(%1, %2)::f64[300]\n%6 = add(%3, %4)::f64[300]\n%7 = mul(%5, %6)::f64[300]\n"
                    "%8 = sum(%7, axes=[0])::f64[]\n%9 = broadcast_to(%8, shape=[300])::f64[300]\n"
                    "%10 = mul(%7, %9)::f64[300]\nout %10\n";
  // (Each step in memory as read by a broadcast, or as an output.)
  std::string chains[2];
  for (int outputs = 0; outputs < 2; ++outputs) {
    std::string chain = "inp %1::f64[64]\n", outs;
    Var a = 1, v = 1;
    for (int k = 0; k < 12; ++k) {
      chain += fmt::format("%{} = mean(%{}, axes=[0])::f64[]\n", v + 1, a);
      chain += fmt::format("%{} = broadcast_to(%{}, shape=[64])::f64[64]\n", v + 2, v + 1);
      chain += fmt::format("%{} = broadcast_to(%{}, shape=[2,64])::f64[2,64]\n", v + 3, a);
      chain += fmt::format("%{} = sub(%{}, %{})::f64[64]\n", v + 4, a, v + 2);
      outs += fmt::format("%{}, ", outputs ? v + 4 : v + 3);
      a = v + 4;
      v += 4;
    }
    chains[outputs] = chain + fmt::format("out {}%{}\n", outs, a);
  }
  for (const std::string& text : {fan, chains[0], chains[1]}) {
    const Tape t = parse_tape(text);
    CHECK_MESSAGE(plan_text(t).find("computes again") == std::string::npos, plan_text(t));
    std::vector<Tensor> args;
    for (Var i = 1; i <= t.size() && t.op(i).kind == OpKind::input; ++i) args.push_back(randn(t.type(i).shape, 40 + i));
    test::run_checked(t, args);
  }
}

// A cast between f32 and f64, or from i64, converts inside the loop that reads it (no
// eager step); one to i64 calls cast_eager, which checks the range (an error compiled too).
TEST_CASE("casts to floats compile into loops; casts to i64 keep their range check") {
  const auto f = [](const Tensor& x, const Tensor& y) {
    const Tensor wide = cast(x, DType::f64) * y;                  // f32 -> f64
    const Tensor narrow = cast(exp(wide * 0.5), DType::f32) + x;  // f64 -> f32
    return sum(cast(narrow, DType::f64) * wide);
  };
  const Tensor x = randn({4, 5}, 11, DType::f32), y = randn({4, 5}, 12, DType::f64);
  const Tape t = trace(f, x, y);
  const std::vector<Tensor> out = test::run_checked(t, {x, y});
  CHECK(out.at(0).item() == doctest::Approx(f(x, y).item()).epsilon(1e-6));
  const std::string plan = plan_text(t);
  CHECK_MESSAGE(plan.find("(eager)") == std::string::npos, plan);
  const Tape g = grad_tape(t);
  CHECK_MESSAGE(plan_text(g).find("(eager)") == std::string::npos, plan_text(g));
  // The gradients against the same math in f64 throughout (f32 rounding apart).
  const std::vector<Tensor> grads = test::run_checked(g, {x, y});
  const Tensor x64 = cast(x, DType::f64);
  const std::vector<Tensor> want = test::run_checked(
      grad_tape(trace([](const Tensor& a, const Tensor& b) { return sum((exp(a * b * 0.5) + a) * (a * b)); }, x64, y)),
      {x64, y});
  test::check_close(cast(grads.at(1), DType::f64), want.at(1), 1e-4, 1e-4, "d/dx");
  test::check_close(grads.at(2), want.at(2), 1e-4, 1e-4, "d/dy");

  // From i64 (argmax's positions): converted in the loop, through f64 as cast_eager does.
  const Tensor big = tensor({3.0, -7.0, 16777217.0, 9007199254740993.0}, {4}, DType::i64);
  for (DType to : {DType::f64, DType::f32}) {
    const Tape from_int = trace([to](const Tensor& v) { return cast(v, to) * 2.0; }, big);
    CHECK_MESSAGE(plan_text(from_int).find("(eager)") == std::string::npos, plan_text(from_int));
    test::check_same_bits(compile(from_int)({big}).at(0), play(from_int, {big}).at(0), "cast from i64");
  }
  const Tape to_int = trace([](const Tensor& v) { return cast(v * 2.0, DType::i64); }, y);
  CHECK(plan_text(to_int).find("cast(") != std::string::npos);
  const CompiledFunction c = compile(to_int);
  CHECK(max_abs_diff(c({y}).at(0), cast(y * 2.0, DType::i64)) == 0);
  CHECK_THROWS_WITH_AS(c({full({4, 5}, 1e300)}), doctest::Contains("has no i64 value"), Error);
}

// index_update is a scatter that writes instead of adding: compiled, a check of the
// indices (in range and distinct, the interpreter's errors) and a generated loop.
TEST_CASE("index_update compiles to a checked generated loop") {
  for (DType dt : {DType::f64, DType::f32}) {
    const Tensor x = randn({3, 5, 4}, 21, dt), v = randn({3, 2, 4}, 22, dt);
    const Tensor idx = tensor({4, 1}, {2}, DType::i64);
    const Tensor v2 = randn({3, 5, 2}, 23, dt);
    // Along axis 1 of [3, 5, 4], and the slice form (constant indices) along axis 2.
    const Tape t = trace([&](const Tensor& a, const Tensor& i, const Tensor& b) {
      return sum(square(index_update(a * 2.0, i, sin(b), 1))) + sum(index_update(a, 2, 1, 3, v2 * v2));
    }, x, idx, v);
    const std::string plan = plan_text(t);
    CHECK_MESSAGE(plan.find("= index_update(") != std::string::npos, plan);
    CHECK_MESSAGE(plan.find("(eager)") == std::string::npos, plan);
    test::run_checked(t, {x, idx, v});
    const Tape g = grad_tape(t);  // (the i64 indices' zero gradient is an eager broadcast)
    std::istringstream lines(plan_text(g));
    int scatters = 0;
    for (std::string line; std::getline(lines, line);) {
      if (line.find("(eager)") != std::string::npos) CHECK_MESSAGE(line.find("broadcast_to") != std::string::npos, line);
      scatters += line.find("= index_update(") != std::string::npos && line.find("(checked indices, loop)") != std::string::npos;
    }
    CHECK(scatters == 4);  // the two updates recomputed forward, and two adjoints
    test::run_checked(g, {x, idx, v});
    const CompiledFunction c = compile(t);
    CHECK_THROWS_WITH_AS(c({x, tensor({1, 1}, {2}, DType::i64), v}),
                         doctest::Contains("index_update: index 1 appears twice; expected distinct indices"), Error);
    CHECK_THROWS_WITH_AS(c({x, tensor({0, 5}, {2}, DType::i64), v}),
                         doctest::Contains("index_update: index 5 (element 1 of the indices) is out of range for axis 1 of length 5"),
                         Error);
  }
}

// argmax and argmin are reductions keeping a position: compiled, a generated loop that
// picks as the eager kernel does (the first extremum; the first NaN wins; ties).
TEST_CASE("argmax and argmin compile to reductions that agree with the interpreter") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  std::vector<double> v = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4};
  v[7] = nan, v[13] = -inf, v[20] = inf, v[22] = nan;
  for (DType dt : {DType::f64, DType::f32}) {
    const Tensor x = tensor(v, {2, 3, 4}, dt);
    const Tape t = trace(
        [](const Tensor& a) {
          std::vector<Tensor> r;
          for (int64_t axis : {0, 1, 2, -1}) r.push_back(argmax(a, axis)), r.push_back(argmin(a, axis));
          r.push_back(argmax(a)), r.push_back(argmin(a));
          r.push_back(argmax(abs(a) * 2.0, 1));  // of a fused loop's result
          return r;
        },
        x);
    const std::string plan = plan_text(t);
    CHECK_MESSAGE(plan.find("(eager)") == std::string::npos, plan);
    const std::vector<Tensor> got = test::run_checked(t, {x});
    const std::vector<Tensor> want = play(t, {x});
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK(got[i].dtype() == DType::i64);
      CHECK(got[i].values() == want[i].values());
    }
    const Tensor no_nan = tensor({2, 7, 7, 1, 0, 1}, {2, 3}, dt);  // ties: the first
    const CompiledFunction c = compile(t);
    CHECK(c({reshape(concat({no_nan, no_nan, no_nan, no_nan}, 1), {2, 3, 4})}).at(8).values() == std::vector<double>{1});
    // No elements kept: [0, 3] along axis 1.
    const Tape e = trace([](const Tensor& a) { return argmax(a, 1); }, zeros({0, 3}, dt));
    CHECK(compile(e)({zeros({0, 3}, dt)}).at(0).shape() == Shape{0});
  }
}

// Pooling and its gradients run their windows in generated loops (Primitive::pool), in
// the eager kernels' order: the same bits, with ties, NaN, infinities and padding.
TEST_CASE("pooling compiles to generated loops that agree bit for bit with the interpreter") {
  for (DType dt : {DType::f64, DType::f32}) {
    std::vector<double> v = randn({2, 3, 6, 5}, 31).values();
    for (std::size_t i = 60; i < 70; ++i) v[i] = 1.5;  // ties
    const Tensor x = tensor(v, {2, 3, 6, 5}, dt);
    v[3] = std::numeric_limits<double>::quiet_NaN(), v[40] = std::numeric_limits<double>::infinity();
    const Tensor special = tensor(v, {2, 3, 6, 5}, dt);
    for (const auto& [k, st, pad] : std::vector<std::array<int64_t, 3>>{{2, 2, 0}, {3, 1, 1}, {3, 2, 1}}) {
      const std::string what = fmt::format("kernel {} stride {} padding {}", k, st, pad);
      CAPTURE(what);
      const Pool2dOptions o{.stride = {st, st}, .padding = {pad, pad}};
      // No reduction after the pooling: a NaN's sign would then depend on the order of a sum.
      const Tape t = trace([&](const Tensor& a) { return max_pool2d(a * 1.5, {k, k}, o) + avg_pool2d(a, {k, k}, o); }, x);
      const Tensor y = play(t, {x}).at(0);
      for (const Tape& tape : {t, vjp_tape(t), jvp_tape(t)}) {
        const std::string plan = plan_text(tape);
        CHECK_MESSAGE(plan.find("(eager)") == std::string::npos, plan);
      }
      CHECK(plan_text(vjp_tape(t)).find("max_pool2d_grad(") != std::string::npos);
      CHECK(plan_text(vjp_tape(t)).find("avg_pool2d_grad(") != std::string::npos);
      CHECK(plan_text(jvp_tape(t)).find("max_pool2d_gather(") != std::string::npos);
      const Tensor dy = randn(y.shape(), 33, dt), dx = randn(x.shape(), 32, dt);
      test::run_checked(t, {x});
      test::run_checked(vjp_tape(t), {x, dy});
      test::run_checked(jvp_tape(t), {x, dx});
      // A NaN is every window's maximum it is in (the first one, if several), infinity
      // the largest number (run_checked compares values, which NaNs never match).
      for (const auto& [tape, args] : std::vector<std::pair<Tape, std::vector<Tensor>>>{
               {t, {special}}, {vjp_tape(t), {special, dy}}, {jvp_tape(t), {special, dx}}}) {
        const std::vector<Tensor> want = play(tape, args), got = compile(tape)(args);
        for (std::size_t i = 0; i < want.size(); ++i) test::check_same_bits(got.at(i), want[i], what + " with NaN");
      }
    }
  }
}

// A sum over leading dimensions (sum_to of a broadcast's gradient, sum or mean over axis
// 0) of a loop member is accumulated by that loop in an array of doubles, in the
// interpreter's order: the same bits, and no pass of its own over the input.
TEST_CASE("column sums are accumulated by the loop that computes their input") {
  for (DType dt : {DType::f64, DType::f32}) {
    const Tensor x = randn({300, 7, 5}, 41, dt), b = randn({7, 5}, 42, dt);
    const Tape t = trace(
        [](const Tensor& a, const Tensor& c) {
          const Tensor y = a * 1.5 + c;  // (exact operations: the interpreter's bits)
          return std::vector<Tensor>{sum(y, 0), mean(y * y, 0), sum_to(a * 0.1, {5}), sum(y)};
        },
        x, b);
    const std::string plan = plan_text(t);
    CHECK_MESSAGE(plan.find("reduce") == std::string::npos, plan);
    const std::vector<Tensor> want = play(t, {x, b}), got = compile(t)({x, b});
    for (std::size_t i = 0; i < 3; ++i) test::check_same_bits(got.at(i), want[i], "column sums");
    test::run_checked(t, {x, b});
    // The gradient of a broadcast bias: its sum_to joins the loop of the gradient.
    const Tape g = grad_tape(trace([](const Tensor& a, const Tensor& c) { return sum(sin(a + c)); }, x, b));
    CHECK_MESSAGE(plan_text(g).find("sum_to") == std::string::npos, plan_text(g));
    test::run_checked(g, {x, b});
    // No rows: zeros (a mean: NaN), as interpreted.
    const Tensor none = zeros({0, 3}, dt);
    const Tape e = trace([](const Tensor& a) { return std::vector<Tensor>{sum(a * 2.0, 0), mean(a * 2.0, 0)}; }, none);
    const std::vector<Tensor> eg = compile(e)({none});
    CHECK(eg.at(0).values() == std::vector<double>{0, 0, 0});
    for (double m : eg.at(1).values()) CHECK(std::isnan(m));
  }
  // More results than the loop's array holds: a reduction step of its own.
  const Tensor wide = randn({3, 5000}, 43);
  const Tape w = trace([](const Tensor& a) { return sum(exp(a), 0); }, wide);
  CHECK(plan_text(w).find("reduce") != std::string::npos);
  test::run_checked(w, {wide});
}

// The gradient of x[0] and x[1:] read apart beside a use of all of x (scalar code's
// loops: lse's `A = x[0]; A = max(A, x[i])`): the reverse pass adds each piece of the
// slices' gradient to the slice of the other's where it goes, and places the sums, so no
// full-size placement is added afterwards; the loop computing a piece does the adding.
TEST_CASE("a gradient's placed pieces are added into the slices of its other terms") {
  const Tensor x = randn({2000}, 52);
  const Tape t = trace(
      [](const Tensor& a) {
        return sum(sin(a)) + sum(square(slice(a, 0, 1, 2000))) * 0.5 + sum(slice(a, 0, 0, 1)) * 3.0;
      },
      x);
  const Tape g = grad_tape(t);
  const Op& last = g.op(g.outputs.at(1));
  REQUIRE(last.kind == OpKind::call);
  CHECK_MESSAGE(last.prim->lowering.strided_place, to_string(g));
  const std::string plan = plan_text(g);
  CHECK_MESSAGE(plan.find("(every argument written by its loop)") != std::string::npos, plan);
  // The piece over x[1:] is added and placed by the loop that computes it.
  bool piece_placed = false;
  std::istringstream lines(plan);
  for (std::string line; std::getline(lines, line);)
    piece_placed = piece_placed ||
                   (line.find("loop f64 over [1999]") != std::string::npos && line.find("places [") != std::string::npos);
  CHECK_MESSAGE(piece_placed, plan);
  std::vector<double> want = x.values();
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = std::cos(want[i]) + (i == 0 ? 3.0 : want[i]);
  test::check_close(compile(g)({x}).at(1), tensor(want, {2000}), 1e-12, 1e-12, "gradient");
  test::run_checked(g, {x});
  // Pieces that do not cover the result (an unslice) are added as before.
  const Tape u = grad_tape(trace([](const Tensor& a) { return sum(sin(a)) + sum(slice(a, 0, 1, 1000)); }, x));
  test::run_checked(u, {x});
  // Pieces that are one value's broadcast are its broadcast, added in one loop (found by
  // review: adding them piece by piece made cos(x) a stored value).
  const Tensor m = randn({4, 6}, 53), w = randn({4}, 54);
  const Tape b = grad_tape(trace(
      [&](const Tensor& a) {
        return sum(sum(slice(a, 1, 0, 1), std::vector<int64_t>{1}) * w) +
               sum(sum(slice(a, 1, 1, 6), std::vector<int64_t>{1}) * w) + sum(sin(a));
      },
      m));
  CHECK_MESSAGE(to_string(b).find("place(") == std::string::npos, to_string(b));
  test::run_checked(b, {m});
  // Many pieces (each element read apart) stay one placement, added once.
  const Tape many = grad_tape(trace(
      [](const Tensor& a) {
        Tensor s = sum(sin(a));
        for (int64_t i = 0; i < 6; ++i) s = s + slice(a, 0, i, i + 1) * static_cast<double>(i + 1);
        return sum(s);
      },
      randn({6}, 55)));
  CHECK_MESSAGE(to_string(many).find("add(") != std::string::npos, to_string(many));
  test::run_checked(many, {randn({6}, 55)});
}

// A placement's piece joins the loop of the strided read just before it, but another
// operation after a strided read still waits for its reader: a loop then holds it with
// that reader across a reduction of another shape (found by review).
TEST_CASE("an operation after a strided read waits for its reader unless a placement reads it") {
  const Tape k = parse_tape(
      "inp %1::f64[100,8]\ninp %2::f64[8,8]\n%3 = slice(%1, axis=0, start=0, stop=50, step=1)::f64[50,8]\n"
      "%4 = mul(%3, %3)::f64[50,8]\n%5 = sum(%2, axes=[0])::f64[8]\n%6 = add(%4, %5)::f64[50,8]\nout %6");
  const std::string plan = plan_text(k);
  CHECK_MESSAGE(plan.find("computes [%4, %6] stores [%6]") != std::string::npos, plan);
  test::run_checked(k, {randn({100, 8}, 56), randn({8, 8}, 57)});
}

// A sum over trailing dimensions (row sums: a matrix-vector product written as a sum of
// products, a mean over the last axis) of an f64 loop member is added up by that loop in
// the result itself, each row's total in registers: no pass of its own, no product
// stored. Reassociated, as a reduction step's over rows is: close to the interpreter's.
TEST_CASE("row sums are accumulated by the loop that computes their input") {
  const Tensor x = randn({300, 7, 5}, 44), v = randn({5}, 45), m = randn({300, 7}, 46);
  const Tape t = trace(
      [](const Tensor& a, const Tensor& b, const Tensor& c) {
        const Tensor y = a * b;
        return std::vector<Tensor>{sum(y, std::vector<int64_t>{2}), sum(y, std::vector<int64_t>{1, 2}),
                                   mean(exp(a), std::vector<int64_t>{2}, true), sum(sin(c), 1)};
      },
      x, v, m);
  const std::string plan = plan_text(t);
  CHECK_MESSAGE(plan.find("reduce") == std::string::npos, plan);
  CHECK_MESSAGE(plan.find("stores []") != std::string::npos, plan);  // (the products are not stored)
  test::run_checked(t, {x, v, m});
  const std::vector<Tensor> want = play(t, {x, v, m}), got = compile(t)({x, v, m});
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(max_abs_diff(got.at(i), want[i]) < 1e-12);
  // A matrix-vector product and its gradient (a sum over rows, then one over columns),
  // against the product itself.
  const Tensor P = randn({50, 30}, 47), w = randn({30}, 48);
  const Tape g = grad_tape(trace([&](const Tensor& a) { return sum(square(sum(a * P, std::vector<int64_t>{1}))); }, w));
  CHECK_MESSAGE(plan_text(g).find("reduce") == std::string::npos, plan_text(g));
  const Tensor r = matmul(P, w);
  const Tensor want_grad = matmul(transpose(P), r * 2.0);
  CHECK(max_abs_diff(compile(g)({w}).at(1), want_grad) < 1e-11);
  test::run_checked(g, {w});
  // A scan whose carry is such a row sum (a matrix-vector product per step): the loop
  // zeroes its result before reading the old carry, so the carry is not updated in place
  // (found by review: W^3 h came out as zeros).
  const Tensor W = randn({4, 4}, 50), h = randn({4}, 51);
  const Tape s = trace(
      [&](const Tensor& h0) {
        return scan([&](const Tensor& c, const None&) { return std::pair{sum(W * c, std::vector<int64_t>{1}), none}; },
                    h0, none, {.length = 3})
            .first;
      },
      h);
  CHECK(max_abs_diff(compile(s)({h}).at(0), matmul(W, matmul(W, matmul(W, h)))) < 1e-12);
  test::run_checked(s, {h});
  // Rows of no elements: zeros, and a mean of none NaN, as interpreted (a reduction step).
  const Tensor empty = zeros({3, 0});
  const Tape e = trace([](const Tensor& a) { return std::vector<Tensor>{sum(exp(a), 1), mean(exp(a), 1)}; }, empty);
  const std::vector<Tensor> eg = compile(e)({empty});
  CHECK(eg.at(0).values() == std::vector<double>{0, 0, 0});
  for (double x : eg.at(1).values()) CHECK(std::isnan(x));
  // f32 results and reductions of something other than a loop member keep their own step.
  const Tensor xf = randn({40, 9}, 49, DType::f32);
  CHECK(plan_text(trace([](const Tensor& a) { return sum(a * 2.0, 1); }, xf)).find("reduce") != std::string::npos);
  CHECK(plan_text(trace([](const Tensor& a) { return sum(a, 1); }, m)).find("reduce") != std::string::npos);
}

// A reduction that keeps the innermost dimension (over rows) is compiled as blocks of
// accumulators read row by row (kernels/reduce.cpp, 1024 per block): every element combines its
// reduced ones in the interpreter's order, so the results are the interpreter's, bit
// for bit, across block boundaries (n = 1024, 2500) and with kept outer dimensions.
TEST_CASE("reductions over rows agree bit for bit interpreted and compiled") {
  struct Case {
    Shape shape;
    std::vector<int64_t> axes;
  };
  const std::vector<Case> cases{{{7, 5}, {0}}, {{300, 1024}, {0}}, {{40, 2500}, {0}}, {{3, 50, 1100}, {1}},
                                {{4, 6, 3, 9}, {1, 2}}, {{5, 1, 7}, {0}}};
  for (DType dt : {DType::f64, DType::f32})
    for (const Case& c : cases) {
      const Tensor x = randn(c.shape, 11, dt) * 0.5 + 1.0;
      const Tape t = trace(
          [&](const Tensor& v) {
            return std::vector<Tensor>{sum(v, c.axes), mean(v, c.axes, true), prod(v, c.axes), max(v, c.axes),
                                       min(v, c.axes)};
          },
          x);
      const std::vector<Tensor> want = play(t, {x}), got = compile(t)({x});
      REQUIRE(want.size() == got.size());
      for (std::size_t k = 0; k < want.size(); ++k)
        CHECK_MESSAGE(max_abs_diff(want[k], got[k]) == 0.0, shape_str(c.shape), " reduction ", k, " ", dtype_name(dt));
    }
}

// Built-in eager steps read compiled code's workspace in place, but not those that run
// tapes (revolve here): they hand their arguments on to the tapes' operations, and a
// user's eager function may keep what it gets (found by review: kept tensors changed
// when the compiled function ran again).
namespace {
std::vector<Tensor>& kept_by_user_primitive() {
  static std::vector<Tensor> kept;
  return kept;
}
}  // namespace

TEST_CASE("a user's eager function inside a compiled revolve keeps copies, not workspace views") {
  static const bool once = [] {
    define_primitive({.name = "test_keep_argument",
                      .eager = [](std::span<const Tensor> x, const Attrs&) {
                        kept_by_user_primitive().push_back(x[0]);
                        return x[0] * 1.0;
                      },
                      .vjp = [](const std::vector<Tensor>&, const Tensor&, const Tensor& dout, const Attrs&) {
                        return std::vector<Tensor>{dout};
                      }});
    return true;
  }();
  (void)once;
  auto f = [](const Tensor& w0, const Tensor& x0) {
    const Tensor w = exp(w0 * 0.5);  // computed: in the workspace
    const auto [y, ys] = scan(
        [&](const Tensor& c, const None&) {
          return std::pair{sin(reel::apply("test_keep_argument", std::vector<Tensor>{c})) * w, none};
        },
        sin(x0) * 1.5, none, {.length = 6, .checkpoint = Checkpoint::binomial(2)});
    return sum(y);
  };
  const Tensor w0 = randn({4}, 1), x0 = randn({4}, 2);
  const Tape g = grad_tape(trace(f, w0, x0));
  REQUIRE(test::count_calls(g, "revolve") == 1);
  const CompiledFunction cg = compile(g);
  kept_by_user_primitive().clear();
  (void)cg({w0, x0});
  REQUIRE(!kept_by_user_primitive().empty());
  std::vector<std::vector<double>> before;
  for (const Tensor& k : kept_by_user_primitive()) before.push_back(k.values());
  const std::vector<Tensor> kept = kept_by_user_primitive();
  (void)cg({w0 * 3.0, x0 * -2.0});  // the same workspace, other values
  int changed = 0;
  for (std::size_t i = 0; i < kept.size(); ++i) changed += kept[i].values() != before[i];
  CHECK_MESSAGE(changed == 0, changed, " of ", kept.size(), " kept tensors changed after another call");
  kept_by_user_primitive().clear();
}

TEST_CASE("short rows (an innermost length up to 16) agree with the interpreter in loops and reductions") {
  // Such rows are unrolled and the loop around them kept scalar (kernels/emitter.cpp): the same
  // values as before, element by element.
  for (int64_t d : {1, 2, 3, 7, 10, 16, 17}) {
    const Tensor x = randn({37, d}, 1), mu = randn({9, d}, 2);
    const Tape t = trace(
        [](const Tensor& a, const Tensor& m) {
          const Tensor c = expand_dims(a, 0) - expand_dims(m, 1);  // [9, 37, d]
          return std::vector<Tensor>{c * 2.0, sum(square(c), 2), max(c, std::vector<int64_t>{2}), argmax(c, 2)};
        },
        x, mu);
    const std::vector<Tensor> want = play(t, {x, mu}), got = compile(t)({x, mu});
    REQUIRE(want.size() == got.size());
    for (std::size_t k = 0; k < want.size(); ++k) {
      if (k == 1) {
        const test::Tolerance tol = test::compiled_tolerance(DType::f64);
        test::check_close(got[k], want[k], tol.rtol, tol.atol, fmt::format("d = {}: sum of squares", d));
      } else {
        test::check_same_bits(got[k], want[k], fmt::format("d = {}: output {}", d, k));
      }
    }
  }
}

TEST_CASE("a product with a small transposed right factor agrees with the interpreter and the definition") {
  // A [m, k] times B^T for a small B [n, k] is computed as A times a transposed copy of B
  // (blas.cpp); here batched, as gmm's Q (x - mu).
  const Tensor a = randn({3, 50, 6}, 3), q = randn({3, 5, 6}, 4);
  const Tape t = trace([](const Tensor& x, const Tensor& w) { return matmul(x, transpose(w)); }, a, q);
  const Tensor got = compile(t)({a, q})[0], eager = play(t, {a, q})[0];
  const auto av = a.values(), qv = q.values(), gv = got.values(), ev = eager.values();
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = 0; i < 50; ++i)
      for (int64_t j = 0; j < 5; ++j) {
        double s = 0;
        for (int64_t l = 0; l < 6; ++l)
          s += av[static_cast<std::size_t>((b * 50 + i) * 6 + l)] * qv[static_cast<std::size_t>((b * 5 + j) * 6 + l)];
        const auto at = static_cast<std::size_t>((b * 50 + i) * 5 + j);
        CHECK(gv[at] == doctest::Approx(s).epsilon(1e-12));
        CHECK(ev[at] == doctest::Approx(s).epsilon(1e-12));
      }
}

TEST_CASE("profile times each step of a compiled function") {
  const Tensor x = randn({64, 32}, 5), w = randn({32, 16}, 6);
  const Tape g = grad_tape(trace([](const Tensor& a, const Tensor& b) { return sum(tanh(matmul(a, b))); }, x, w));
  const CompiledFunction f = compile(g);
  const std::string p = f.profile({x, w}, 3);
  CAPTURE(p);
  CHECK(p.find(fmt::format("{} steps,", f.num_steps())) == 0);
  CHECK(p.find("us per call (mean of 3 runs") != std::string::npos);
  CHECK(p.find("gemm f64") != std::string::npos);
  int rows = 0;
  for (std::size_t at = p.find("\n  step "); at != std::string::npos; at = p.find("\n  step ", at + 1)) ++rows;
  CHECK(rows == static_cast<int>(f.num_steps()));
  CHECK_ERROR(f.profile({x, w}, 0), "profile", "at least 1 run", "got 0");
  CHECK_ERROR(f.profile({x}), "compiled function", "expected 2");
  // Profiling leaves the function as it was.
  check_same(f({x, w}), play(g, {x, w}), "after profile");
}

TEST_CASE("convolutions write their results into the workspace, with their columns in it") {
  // Small images run on the pool (a block of columns each), large ones one after another
  // (one block); both agree bit for bit with the interpreter, which allocates its own.
  struct Case {
    Shape x, w;
  };
  for (const Case& c : {Case{{4, 3, 9, 9}, {5, 3, 3, 3}}, Case{{2, 8, 40, 40}, {32, 8, 3, 3}}})
    for (DType dt : {DType::f64, DType::f32}) {
      const Tensor x = randn(c.x, 1, dt), w = randn(c.w, 2, dt) * 0.2;
      const Tape g = grad_tape(trace(
          [](const Tensor& a, const Tensor& b) { return sum(square(conv2d(a, b, {.padding = {1, 1}}))); }, x, w));
      const std::string plan = plan_text(g);
      CAPTURE(plan);
      CHECK(plan.find("scratch of step") != std::string::npos);
      const std::vector<Tensor> want = play(g, {x, w}), got = compile(g)({x, w});
      const test::Tolerance tol = test::compiled_tolerance(dt);  // (the loss: a sum, reassociated)
      test::check_close(got[0], want[0], tol.rtol, tol.atol, "the loss");
      for (std::size_t k = 1; k < want.size(); ++k)
        test::check_same_bits(got[k], want[k], fmt::format("{} {}: gradient {}", shape_str(c.x), dtype_name(dt), k));
    }
}
