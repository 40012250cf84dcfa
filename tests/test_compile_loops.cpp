// Compiled loops (codegen/src/loops.hpp): a loop call is one step running its body's
// compiled program, or one generated kernel (a scan whose body is kernels only). Each
// case checks compiled code against the interpreter (reel::play, which runs the loop's
// eager rule) and, where it is written in C++, against the same loop unrolled: f32 and
// f64, consts, several carries, xs and ys (slices of every alignment), reverse, the
// counter, nested loops, guards failing in an iteration, zero-length loops, bodies
// whose outputs alias their inputs, constants or each other, and gradient tapes.
#include <reel/loops.hpp>

#include <unistd.h>

#include <filesystem>
#include <thread>

#include "test_util.hpp"

using namespace reel;

namespace {

// Whether compiled code runs every loop of the tape natively (none through its eager
// function), as plan_text shows.
bool runs_natively(const Tape& t) {
  const std::string plan = plan_text(t);
  for (std::size_t at = 0; at < plan.size();) {
    const std::size_t end = std::min(plan.find('\n', at), plan.size());
    const std::string line = plan.substr(at, end - at);
    for (const char* loop : {"scan(", "while_loop(", "call(", "checkpoint("})
      if (line.find(loop) != std::string::npos && line.find("(eager)") != std::string::npos) return false;
    at = end + 1;
  }
  return true;
}

// Compiled equals played, output for output; returns the compiled outputs.
std::vector<Tensor> check_compiled(const Tape& t, const std::vector<Tensor>& args, const std::string& what) {
  CHECK_MESSAGE(runs_natively(t), what, ": a loop runs through its eager function:\n", plan_text(t));
  const std::vector<Tensor> played = play(t, args);
  const std::vector<Tensor> compiled = compile(t)(args);
  REQUIRE(played.size() == compiled.size());
  for (std::size_t i = 0; i < played.size(); ++i) {
    const auto tol = test::compiled_tolerance(played[i].dtype());
    test::check_close(compiled[i], played[i], tol.rtol, tol.atol, fmt::format("{}: output {}", what, i));
  }
  return compiled;
}

void check_all_close(const std::vector<Tensor>& a, const std::vector<Tensor>& b, DType dt, const std::string& what) {
  REQUIRE(a.size() == b.size());
  const double tol = dt == DType::f64 ? 1e-11 : 2e-5;
  for (std::size_t i = 0; i < a.size(); ++i) test::check_close(a[i], b[i], tol, tol, fmt::format("{} {}", what, i));
}

// Two carries (a vector and a scalar), a const, two xs (a 3-wide slice: 12 or 24
// bytes, so slices are 4- or 8-byte aligned) and two ys (one of 5 elements).
struct Carry {
  Tensor h, s;
};
REEL_FIELDS(Carry, h, s)

Carry cell(const Tensor& W, const Carry& c, const Tensor& u, const Tensor& v) {
  const Tensor h = tanh(c.h * W + u) * 0.5 + c.h * 0.4 + sum(v) * 0.1;
  return {h, c.s * 0.9 + sum(h * h) * 0.01};
}
Tensor y5(const Carry& c) { return concat({c.h, expand_dims(sin(c.s), 0)}, 0); }  // [5]

std::vector<Tensor> rolled(const Tensor& W, const Tensor& h0, const Tensor& s0, const Tensor& us, const Tensor& vs,
                           bool reverse) {
  const auto [c, ys] = scan(
      [&](const Carry& c, const std::pair<Tensor, Tensor>& x) {
        const Carry next = cell(W, c, x.first, x.second);
        return std::pair{next, std::pair{y5(next), next.s * 2.0}};
      },
      Carry{h0, s0}, std::pair{us, vs}, {.reverse = reverse});
  return {c.h, c.s, ys.first, ys.second};
}

std::vector<Tensor> unrolled(const Tensor& W, const Tensor& h0, const Tensor& s0, const Tensor& us, const Tensor& vs,
                             bool reverse) {
  Carry c{h0, s0};
  const int64_t n = us.shape()[0];
  std::vector<Tensor> a(static_cast<std::size_t>(n)), b(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = reverse ? n - 1 - i : i;
    c = cell(W, c, index(us, k), index(vs, k));
    a[static_cast<std::size_t>(k)] = y5(c);
    b[static_cast<std::size_t>(k)] = c.s * 2.0;
  }
  return {c.h, c.s, stack(a), stack(b)};
}

Tape parsed(const std::string& text) {
  const Tape t = parse_tape(text);
  verify(t);
  return t;
}

}  // namespace

TEST_CASE("compiled scan: equals the interpreter and the unrolled loop (consts, carries, xs, ys, reverse; f32, f64)") {
  for (DType dt : {DType::f64, DType::f32}) {
    const Tensor W = cast(randn({4}, 1), dt), h0 = cast(randn({4}, 2), dt), s0 = cast(randn({}, 3), dt);
    const Tensor us = cast(randn({7, 4}, 4), dt), vs = cast(randn({7, 3}, 5), dt);
    for (bool reverse : {false, true}) {
      const std::string what = fmt::format("{} reverse={}", dtype_name(dt), reverse);
      const std::vector<Tensor> args{W, h0, s0, us, vs};
      const Tape t = trace(
          [reverse](const Tensor& w, const Tensor& h, const Tensor& s, const Tensor& u, const Tensor& v) {
            return rolled(w, h, s, u, v, reverse);
          },
          W, h0, s0, us, vs);
      const std::vector<Tensor> got = check_compiled(t, args, what);
      check_all_close(got, unrolled(W, h0, s0, us, vs, reverse), dt, what + " vs unrolled");
    }
  }
}

TEST_CASE("compiled scan: slices of xs and ys at every alignment their size allows") {
  // Rows of 17 and 9 elements: slices 4- or 8-byte aligned, which the body's kernels are
  // told. Through a loop kernel, and through the step (a matmul in the body).
  for (DType dt : {DType::f64, DType::f32})
    for (int64_t width : {17, 9, 16})
      for (bool step : {false, true}) {
        const Tensor x0 = cast(randn({width}, 1), dt), xs = cast(randn({6, width}, 2), dt);
        const Tensor M = cast(randn({width, width}, 3) * 0.1, dt);
        const Tape t = trace([step](const Tensor& m, const Tensor& c0, const Tensor& xs0) {
          const auto [c, ys] = scan([&](const Tensor& c, const Tensor& x) {
            const Tensor next = c * 0.5 + x * x + (step ? matmul(m, x) : x);
            return std::pair{next, std::pair{next * 2.0 + x, exp(x)}};
          }, c0, xs0);
          return std::vector<Tensor>{c, ys.first, ys.second};
        }, M, x0, xs);
        check_compiled(t, {M, x0, xs}, fmt::format("{} width {} step {}", dtype_name(dt), width, step));
      }
}

TEST_CASE("compiled scan: the loop is one step, whatever the trip count, and its kernels are shared") {
  auto program = [](int64_t n) {
    return trace([n](const Tensor& x) {
      return sum(scan([](const Tensor& c, const None&) { return std::pair{sin(c) * 1.01 + square(c) * 0.001, none}; },
                      x, none, {.length = n}).first);
    }, randn({8}, 1));
  };
  const Tape small = grad_tape(program(10)), large = grad_tape(program(100000));
  const CompiledFunction a = compile(small), b = compile(large);
  CHECK(a.num_steps() == b.num_steps());
  CHECK(a.num_kernels() == b.num_kernels());
  // The workspace grows by the two residual stacks (cos x and 2x, stacked by the forward
  // scan for the backward one) and nothing else.
  CHECK(b.workspace_bytes() - a.workspace_bytes() == (100000 - 10) * 2 * 8 * 8);
  // The same loop again: every kernel from the cache.
  const CompiledFunction again = compile(small);
  CHECK(again.kernels_compiled() == 0);
  test::check_close(a({randn({8}, 2)})[1], play(small, {randn({8}, 2)})[1], 1e-12, 1e-13, "gradient");
}

TEST_CASE("compiled scan: loop kernels are cached on disk like any other") {
  namespace fs = std::filesystem;
  const CodeCacheInfo before = code_cache_info();
  const fs::path dir = fs::temp_directory_path() / fmt::format("reel-test-cache-{}-loops", ::getpid());
  fs::remove_all(dir);
  set_code_cache_dir(dir.string());
  // A size no other test compiles, so that the memory cache cannot answer.
  const Tape t = grad_tape(trace([](const Tensor& x, const Tensor& xs) {
    return sum(scan([](const Tensor& c, const Tensor& x) { return std::pair{tanh(c * x) + c * 0.25, exp(c)}; }, x, xs)
                   .second);
  }, randn({1003}, 1), randn({4, 1003}, 2)));
  const std::vector<Tensor> args{randn({1003}, 3), randn({4, 1003}, 4)};
  const std::vector<Tensor> want = play(t, args);
  const CodeCacheInfo c0 = code_cache_info();
  check_all_close(compile(t)(args), want, DType::f64, "first compile");  // its code is freed at once
  CHECK(code_cache_info().writes == c0.writes + 1);
  const KernelCacheStats k0 = kernel_cache_stats();
  const CompiledFunction again = compile(t);
  CHECK(code_cache_info().hits == c0.hits + 1);
  CHECK(kernel_cache_stats().loaded == k0.loaded + again.kernels_compiled());
  check_all_close(again(args), want, DType::f64, "loaded from disk");
  set_code_cache_dir(before.dir.empty() ? "off" : before.dir);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST_CASE("compiled scan: gathers in the body fuse into its loops (GradBench's ode's RK4 step)") {
  for (DType dt : {DType::f64, DType::f32}) {
    const int64_t n = 7;
    const Tensor x = cast(randn({n}, 1), dt);
    std::vector<double> shift(n), first(n, 0.0), rest(n, 1.0);
    for (int64_t i = 0; i < n; ++i) shift[static_cast<std::size_t>(i)] = static_cast<double>(i == 0 ? 0 : i - 1);
    first[0] = 1.0, rest[0] = 0.0;
    const Tensor e0 = cast(tensor(first, {n}), dt), mask = cast(tensor(rest, {n}), dt);
    // f(y) = x * (y shifted by one, 1 first); with the shift a constant (checked when
    // compiled) or an input (checked each iteration, so the body runs through its step).
    auto rk4 = [&](const Tensor& xv, const Tensor& by, int steps) {
      auto f = [&](const Tensor& y) { return xv * (gather(y, by) * mask + e0); };
      const double h = 0.1;
      return fori_loop(0, steps, [&](const Tensor&, const Tensor& y) {
        const Tensor k1 = f(y), k2 = f(y + (h / 2) * k1), k3 = f(y + (h / 2) * k2), k4 = f(y + h * k3);
        return y + (h / 6) * (k1 + 2.0 * k2 + 2.0 * k3 + k4);
      }, zeros({n}, dt));
    };
    const Tensor by = tensor(shift, {n}, DType::i64);
    const Tape constant = trace([&](const Tensor& xv) { return rk4(xv, by, 5); }, x);
    const std::string plan = plan_text(constant);
    CAPTURE(plan);
    CHECK(plan.find("one kernel") != std::string::npos);
    CHECK(plan.find("gathers [") != std::string::npos);
    CHECK(plan.find("checked indices") == std::string::npos);
    CHECK(plan.find("checking the indices") == std::string::npos);
    const std::vector<Tensor> a = check_compiled(constant, {x}, "ode, constant shift");
    const Tape input = trace([&](const Tensor& xv, const Tensor& b) { return rk4(xv, b, 5); }, x, by);
    CHECK(plan_text(input).find("after checking the indices of") != std::string::npos);
    check_all_close(check_compiled(input, {x, by}, "ode, shift as an input"), a, dt, "shift as an input vs constant");
    std::vector<double> bad = shift;
    bad[3] = static_cast<double>(n);
    CHECK_ERROR(compile(input)({x, tensor(bad, {n}, DType::i64)}), "iteration 0",
                fmt::format("gather: index {} (element 3 of the indices) is out of range for axis 0 of length {}", n, n));
  }
}

TEST_CASE("compiled scan: bodies that run through the step (matmul, gathers, the counter, casts) and nested scans") {
  for (DType dt : {DType::f64, DType::f32}) {
    const Tensor M = cast(randn({5, 5}, 1) * 0.3, dt), table = cast(randn({12, 5}, 2), dt), x0 = cast(randn({5}, 3), dt);
    // matmul (CBLAS) and the counter indexing a table (a checked gather) and cast.
    auto f = [&](const Tensor& m, const Tensor& tb, const Tensor& x) {
      return fori_loop(2, 9, [&](const Tensor& i, const Tensor& c) {
        return tanh(matmul(m, c)) + gather(tb, i) * 0.1 + cast(i, dt) * 0.01;
      }, x);
    };
    auto u = [&](const Tensor& m, const Tensor& tb, const Tensor& x) {
      Tensor c = x;
      for (int64_t i = 2; i < 9; ++i) c = tanh(matmul(m, c)) + index(tb, i) * 0.1 + static_cast<double>(i) * 0.01;
      return c;
    };
    const Tape t = trace(f, M, table, x0);
    check_all_close(check_compiled(t, {M, table, x0}, "fori_loop"), {u(M, table, x0)}, dt, "fori_loop vs unrolled");
    // A scan of scans: kernels inside kernels, and a step's body holding a loop kernel.
    auto nested = [](const Tensor& m, const Tensor& x, bool with_matmul) {
      return scan([&](const Tensor& c, const None&) {
        const Tensor inner = scan([](const Tensor& y, const None&) { return std::pair{sin(y) * 0.9 + y * 0.2, y * 2.0}; },
                                  c, none, {.length = 3}).first;
        const Tensor next = with_matmul ? tanh(matmul(m, inner)) : inner * 0.5 + 0.1;
        return std::pair{next, sum(next)};
      }, x, none, {.length = 4});
    };
    auto nested_u = [](const Tensor& m, const Tensor& x, bool with_matmul) {
      Tensor c = x;
      std::vector<Tensor> ys;
      for (int i = 0; i < 4; ++i) {
        Tensor y = c;
        for (int k = 0; k < 3; ++k) y = sin(y) * 0.9 + y * 0.2;
        c = with_matmul ? tanh(matmul(m, y)) : y * 0.5 + 0.1;
        ys.push_back(sum(c));
      }
      return std::pair{c, stack(ys)};
    };
    for (bool with_matmul : {false, true}) {
      const std::string what = fmt::format("nested {} matmul={}", dtype_name(dt), with_matmul);
      const Tape tn = trace([&](const Tensor& m, const Tensor& x) {
        const auto [c, ys] = nested(m, x, with_matmul);
        return std::vector<Tensor>{c, ys};
      }, M, x0);
      const auto [c, ys] = nested_u(M, x0, with_matmul);
      check_all_close(check_compiled(tn, {M, x0}, what), {c, ys}, dt, what + " vs unrolled");
      // Its gradient: nested scans of the bodies' adjoints.
      const Tape g = grad_tape(trace([&](const Tensor& m, const Tensor& x) {
        const auto [c2, ys2] = nested(m, x, with_matmul);
        return sum(c2 * c2) + sum(ys2);
      }, M, x0));
      check_compiled(g, {M, x0}, what + " gradient");
    }
  }
}

TEST_CASE("compiled scan: the counter with reverse and an offset, in a hand-written tape") {
  // k runs 3, 2, 1, 0: the counter is 10 + k, cast to f64 and added to the slice of xs.
  const Tape t = parsed(
      "inp %1::f64[2]\n"
      "inp %2::f64[4,2]\n"
      "%3, %4 = scan(%1, %2, body={inp %1::i64[]; inp %2::f64[2]; inp %3::f64[2]; %4 = cast(%1, dtype=f64)::f64[]; "
      "%5 = add(%3, %4)::f64[2]; %6 = mul(%2, %5)::f64[2]; out %6, %4}, length=4, num_consts=0, num_carry=1, "
      "reverse=true, index=10)::f64[2], f64[4]\n"
      "out %3, %4\n");
  const Tensor x = tensor({1.0, -0.5}, {2}), xs = randn({4, 2}, 1);
  const std::vector<Tensor> got = check_compiled(t, {x, xs}, "counter");
  CHECK(got[1].values() == std::vector<double>{10, 11, 12, 13});
  Tensor c = x;
  for (int64_t k = 3; k >= 0; --k) c = c * (index(xs, k) + static_cast<double>(10 + k));
  test::check_close(got[0], c, 1e-14, 1e-14, "carry");
}

TEST_CASE("compiled scan: body outputs that are inputs, constants, or each other") {
  // Carries swapped, one passed on as it is, one set to a constant; ys that are a
  // carry's input, its new value (the variable the carry is), a constant and the slice
  // of xs. Through a loop kernel (with and without a guard), and through the step (a
  // matmul in the body).
  const std::vector<std::pair<std::string, std::string>> modes{
      {"a loop kernel", "%12 = sin(%10)::f64[3]; "},
      {"a loop kernel with a guard",
       "%12 = sin(%10)::f64[3]; %13 = sum(%2)::f64[]; %14 = gt(%13, %13)::f64[]; %15 = guard(%14, expected=false)::f64[]; "},
      {"the step", "%12 = matmul(%11, %10)::f64[3]; "}};
  for (const auto& [mode, ops] : modes) {
    const Tape t = parsed(fmt::format(
        "inp %1::f64[3]\n"
        "inp %2::f64[3]\n"
        "inp %3::f64[3]\n"
        "inp %4::f64[3]\n"
        "inp %5::f64[3]\n"
        "inp %6::f64[3]\n"
        "inp %7::f64[5,3]\n"
        "%8, %9, %10, %11, %12, %13, %14, %15, %16, %17 = scan(%1, %2, %3, %4, %5, %6, %7, body={{inp %1::f64[3]; "
        "inp %2::f64[3]; inp %3::f64[3]; inp %4::f64[3]; inp %5::f64[3]; inp %6::f64[3]; inp %7::f64[3]; "
        "%8 = add(%3, %7)::f64[3]; %9 = const [7, 7, 7]::f64[3]; %10 = mul(%8, %1)::f64[3]; "
        "%11 = const [0.5, 0, 0, 0, 1, 0, 0, 0.25, 1]::f64[3,3]; {}out %3, %2, %12, %5, %9, %2, %12, %9, %7, %12}}, "
        "length=5, num_consts=1, num_carry=5)::f64[3], f64[3], f64[3], f64[3], f64[3], f64[5,3], f64[5,3], f64[5,3], "
        "f64[5,3], f64[5,3]\n"
        "out %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %10\n",
        ops));
    CHECK(plan_text(t).find(mode == "the step" ? "a step running the body" : "one kernel") != std::string::npos);
    const std::vector<Tensor> args{randn({3}, 1), randn({3}, 2), randn({3}, 3), randn({3}, 4),
                                   randn({3}, 5), randn({3}, 6), randn({5, 3}, 7)};
    check_compiled(t, args, "aliasing outputs, " + mode);
  }
}

TEST_CASE("compiled scan: ys nobody reads are not computed; outputs read straight from the stacks") {
  const Tape t = trace([](const Tensor& x, const Tensor& xs) {
    const auto [c, ys] = scan([](const Tensor& c, const Tensor& x) {
      return std::pair{c * 0.5 + x, std::pair{exp(c), c * 3.0}};
    }, x, xs);
    return std::vector<Tensor>{c, ys.second};  // ys.first is dead
  }, randn({4}, 1), randn({6, 4}, 2));
  const std::string plan = plan_text(t);
  CAPTURE(plan);
  CHECK(plan.find("exp") == std::string::npos);
  CHECK(plan.find("(eager)") == std::string::npos);
  check_compiled(t, {randn({4}, 3), randn({6, 4}, 4)}, "dead ys");
}

TEST_CASE("compiled scan: zero-length scans give their initial carries and empty ys") {
  for (bool with_matmul : {false, true}) {
    const Tensor M = randn({3, 3}, 1), x = randn({3}, 2), xs = zeros({0, 3});
    const Tape t = trace([with_matmul](const Tensor& m, const Tensor& c0, const Tensor& xs0) {
      const auto [c, ys] = scan([&](const Tensor& c, const Tensor& x) {
        const Tensor next = with_matmul ? matmul(m, c) + x : c * 2.0 + x;
        return std::pair{next, next * 3.0};
      }, c0, xs0);
      return std::vector<Tensor>{c, ys};
    }, M, x, xs);
    const std::vector<Tensor> got = check_compiled(t, {M, x, xs}, "zero length");
    CHECK(got[0].values() == x.values());
    CHECK(got[1].shape() == Shape{0, 3});
  }
  // Swapped carries (not updated in place), no xs.
  for (int64_t n : {0, 1, 2, 5}) {
    const Tensor a = randn({3}, 3), b = randn({3}, 4);
    const Tape t = trace([n](const Tensor& a0, const Tensor& b0) {
      const auto [c, ys] = scan([](const std::pair<Tensor, Tensor>& c, const None&) {
        return std::pair{std::pair{c.second, c.first * 2.0}, none};
      }, std::pair{a0, b0}, none, {.length = n});
      return std::vector<Tensor>{c.first, c.second};
    }, a, b);
    check_compiled(t, {a, b}, fmt::format("swapped carries, length {}", n));
  }
}

TEST_CASE("compiled scan: a guard failing in an iteration raises GuardFailure naming it and the iteration") {
  // The body was traced where sum(c) > 0; the carry turns negative in iteration 2.
  const Tape t = trace([](const Tensor& x) {
    return scan([](const Tensor& c, const None&) {
      const Tensor next = sum(c) > 0.0 ? c - 1.0 : c + 1.0;
      return std::pair{next, none};
    }, x, none, {.length = 4}).first;
  }, tensor({9.0, 9.0}, {2}));
  CHECK(to_string(t).find("guard(") != std::string::npos);
  const CompiledFunction f = compile(t);
  CHECK(f({tensor({9.0, 9.0}, {2})})[0].values() == std::vector<double>{5, 5});
  CHECK_THROWS_WITH_AS(f({tensor({1.5, 1.0}, {2})}), doctest::Contains("iteration 2"), GuardFailure);
  CHECK_THROWS_WITH_AS(f({tensor({1.5, 1.0}, {2})}), doctest::Contains("guard(%"), GuardFailure);
  CHECK_THROWS_WITH_AS(f({tensor({1.5, 1.0}, {2})}), doctest::Contains("= scan(%1)"), GuardFailure);
  CHECK_THROWS_AS(play(t, {tensor({1.5, 1.0}, {2})}), GuardFailure);
  CHECK(plan_text(t).find("one kernel") != std::string::npos);
  // The same through the step running the body (a matmul in it).
  const Tensor M = tensor({1.0, 0.0, 0.0, 1.0}, {2, 2});
  const Tape ts = trace([](const Tensor& m, const Tensor& x) {
    return scan([&](const Tensor& c, const None&) {
      const Tensor next = sum(c) > 0.0 ? matmul(m, c) - 1.0 : c + 1.0;
      return std::pair{next, none};
    }, x, none, {.length = 4}).first;
  }, M, tensor({9.0, 9.0}, {2}));
  CHECK(plan_text(ts).find("a step running the body") != std::string::npos);
  const CompiledFunction fs = compile(ts);
  CHECK(fs({M, tensor({9.0, 9.0}, {2})})[0].values() == std::vector<double>{5, 5});
  CHECK_THROWS_WITH_AS(fs({M, tensor({1.5, 1.0}, {2})}), doctest::Contains("iteration 2"), GuardFailure);
  CHECK_THROWS_WITH_AS(fs({M, tensor({1.5, 1.0}, {2})}), doctest::Contains("guard(%"), GuardFailure);
  // Two guards in one loop kernel: the message names the one that failed, and the value.
  const Tape two = trace([](const Tensor& x) {
    return scan([](const Tensor& c, const None&) {
      const Tensor a = sum(c) > -100.0 ? c - 1.0 : c;  // holds
      const Tensor next = sum(a) > 10.0 ? a : a * 2.0;  // fails in iteration 1 from (4, 9)
      return std::pair{next, none};
    }, x, none, {.length = 3}).first;
  }, tensor({9.0, 9.0}, {2}));
  CHECK(plan_text(two).find("one kernel") != std::string::npos);
  const CompiledFunction f2 = compile(two);
  CHECK_THROWS_WITH_AS(f2({tensor({4.0, 9.0}, {2})}), doctest::Contains("iteration 1"), GuardFailure);
  CHECK_THROWS_WITH_AS(f2({tensor({4.0, 9.0}, {2})}), doctest::Contains("(value 0)"), GuardFailure);
  CHECK_THROWS_AS(play(two, {tensor({4.0, 9.0}, {2})}), GuardFailure);
  CHECK(f2({tensor({9.0, 9.0}, {2})})[0].values() == play(two, {tensor({9.0, 9.0}, {2})})[0].values());
  // Other errors in a body name the loop and the iteration too: an index out of range.
  const Tape g = parsed(
      "inp %1::f64[3]\n"
      "inp %2::i64[4]\n"
      "%3 = scan(%1, %2, body={inp %1::f64[3]; inp %2::i64[]; %3 = gather(%1, %2)::f64[]; %4 = add(%1, %3)::f64[3]; "
      "out %4}, length=4, num_consts=0, num_carry=1)::f64[3]\n"
      "out %3\n");
  CHECK_ERROR(compile(g)({randn({3}, 1), tensor({0.0, 2.0, 7.0, 1.0}, {4}, DType::i64)}), "iteration 2",
              "gather", "out of range");
}

TEST_CASE("compiled scan: gradient tapes of traced scans equal their interpretation and the unrolled gradient") {
  for (DType dt : {DType::f64, DType::f32}) {
    const Tensor W = cast(randn({4}, 1), dt), h0 = cast(randn({4}, 2), dt), s0 = cast(randn({}, 3), dt);
    const Tensor us = cast(randn({6, 4}, 4), dt), vs = cast(randn({6, 3}, 5), dt);
    for (bool reverse : {false, true}) {
      auto loss = [](const std::vector<Tensor>& r) { return sum(r[0] * r[0]) + r[1] + sum(r[2]) + sum(r[3] * r[3]); };
      auto f = [&](const Tensor& w, const Tensor& h, const Tensor& s, const Tensor& u, const Tensor& v) {
        return loss(rolled(w, h, s, u, v, reverse));
      };
      auto fu = [&](const Tensor& w, const Tensor& h, const Tensor& s, const Tensor& u, const Tensor& v) {
        return loss(unrolled(w, h, s, u, v, reverse));
      };
      const std::string what = fmt::format("{} reverse={} gradient", dtype_name(dt), reverse);
      const Tape g = grad_tape(trace(f, W, h0, s0, us, vs));
      const std::vector<Tensor> got = check_compiled(g, {W, h0, s0, us, vs}, what);
      const std::vector<Tensor> want = compile(grad_tape(trace(fu, W, h0, s0, us, vs)))({W, h0, s0, us, vs});
      check_all_close(got, want, dt, what + " vs unrolled");
    }
  }
  // A matmul recurrence (a body through the step) and its gradient's finite differences.
  const Tensor M = randn({4, 4}, 6) * 0.4, y0 = randn({4}, 7), xs = randn({5, 4}, 8);
  auto tanh_rnn = [](const std::vector<Tensor>& a) {
    const auto [y, ys] = scan([&](const Tensor& y, const Tensor& x) {
      const Tensor next = tanh(matmul(a[0], y) + x);
      return std::pair{next, sin(next)};
    }, a[1], a[2]);
    return sum(y * y) + sum(ys);
  };
  const Tape g = grad_tape(test::trace_list(tanh_rnn, {M, y0, xs}));
  const std::vector<Tensor> got = check_compiled(g, {M, y0, xs}, "tanh rnn gradient");
  const std::vector<Tensor> fd = test::finite_diff(tanh_rnn, {M, y0, xs});
  for (std::size_t i = 0; i < fd.size(); ++i) test::check_close(got[i + 1], fd[i], 1e-6, 1e-7, "finite differences");
}

TEST_CASE("compiled scan: threads each run the loop in their own workspace") {
  const Tape t = grad_tape(trace([](const Tensor& x, const Tensor& xs) {
    return sum(scan([](const Tensor& c, const Tensor& x) { return std::pair{tanh(c * x + 0.1), none}; }, x, xs).first);
  }, randn({6}, 1), randn({50, 6}, 2)));
  const CompiledFunction f = compile(t);
  std::vector<std::vector<Tensor>> args, want, got(4);
  for (int i = 0; i < 4; ++i) {
    args.push_back({randn({6}, 10 + i), randn({50, 6}, 20 + i)});
    want.push_back(play(t, args.back()));
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      for (int r = 0; r < 20; ++r) got[static_cast<std::size_t>(i)] = f(args[static_cast<std::size_t>(i)]);
    });
  for (std::thread& th : threads) th.join();
  for (int i = 0; i < 4; ++i) check_all_close(got[i], want[i], DType::f64, fmt::format("thread {}", i));
}

TEST_CASE("compiled while_loop and call: equal the interpreter (hand-written tapes)") {
  if (find_primitive("while_loop") != nullptr) {
    // Halve until below 1, counting the trips in a second carry; the cond reads a const.
    const Tape t = parsed(
        "inp %1::f64[]\n"
        "inp %2::f64[2]\n"
        "inp %3::f64[]\n"
        "%4, %5 = while_loop(%1, %2, %3, cond={inp %1::f64[]; inp %2::f64[2]; inp %3::f64[]; %4 = sum(%2)::f64[]; "
        "%5 = gt(%4, %1)::f64[]; out %5}, body={inp %1::f64[]; inp %2::f64[2]; inp %3::f64[]; %4 = const 0.5::f64[]; "
        "%5 = mul(%2, %4)::f64[2]; %6 = const 1::f64[]; %7 = add(%3, %6)::f64[]; out %5, %7}, num_consts=1)::f64[2], f64[]\n"
        "out %4, %5\n");
    for (double start : {0.25, 3.0, 12.0, 100.0}) {  // 0, 2, 4 and 7 trips (an even count ends in the temporary)
      const std::vector<Tensor> got =
          check_compiled(t, {scalar(1.0), tensor({start, start}, {2}), scalar(0.0)}, fmt::format("while {}", start));
      CHECK(got[0].values()[0] == play(t, {scalar(1.0), tensor({start, start}, {2}), scalar(0.0)})[0].values()[0]);
    }
  } else {
    MESSAGE("while_loop is not registered: its compiled case is skipped");
  }
  for (const char* name : {"call", "checkpoint"}) {
    if (find_primitive(name) == nullptr) {
      MESSAGE(std::string(name), " is not registered: its compiled case is skipped");
      continue;
    }
    // A body with two results, one of them its input as it is.
    const Tape t = parsed(fmt::format(
        "inp %1::f64[3]\n"
        "inp %2::f64[3]\n"
        "%3, %4 = {}(%1, %2, body={{inp %1::f64[3]; inp %2::f64[3]; %3 = mul(%1, %2)::f64[3]; %4 = sin(%3)::f64[3]; "
        "out %4, %1}})::f64[3], f64[3]\n"
        "%5 = add(%3, %4)::f64[3]\n"
        "out %5, %3\n",
        name));
    check_compiled(t, {randn({3}, 1), randn({3}, 2)}, name);
  }
}
