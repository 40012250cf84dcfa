// Issue 33: values read inside loop bodies (item(), values(), the counter) are guards
// checked at every iteration, never constants; a while_loop whose cond reads one runs
// as the C++ loop it is; the loops' edges (fori_loop's bounds, a scan counter past
// INT64_MAX, an undefined leaf) are reel::Errors naming the loop; while_loop's
// max_trips stops a runaway loop, interpreted, compiled, cached and under grad.
// Values are checked against plain C++ loops.
#include <cmath>
#include <limits>

#include "test_util.hpp"

using namespace reel;

namespace {

// x doubled while x < 10, as plain C++ (the value every while_loop below must give).
double doubled_past_10(double x) {
  while (x < 10.0) x *= 2.0;
  return x;
}
int trips_past_10(double x) {
  int n = 0;
  for (; x < 10.0; ++n) x *= 2.0;
  return n;
}

// A while_loop whose cond reads the carry's value.
Tensor grow_reading_cond(const Tensor& x) {
  return while_loop([](const Tensor& c) { return scalar(c.item() < 10.0 ? 1.0 : 0.0); },
                    [](const Tensor& c) { return c * 2.0; }, x);
}

// A loop that never stops by itself (x > 0 stays true as x grows), bounded by max_trips.
Tensor runaway(const Tensor& x, int64_t max_trips) {
  return while_loop([](const Tensor& c) { return sum(c) > 0.0; }, [](const Tensor& c) { return c * 1.5 + 0.1; }, x,
                    {.max_trips = max_trips});
}
// The same loop stopping at a bound the argument gives: trips = how often 1.5 c + 0.1 runs until sum(c) >= 100.
Tensor bounded(const Tensor& x, int64_t max_trips) {
  return while_loop([](const Tensor& c) { return sum(c) < 100.0; }, [](const Tensor& c) { return c * 1.5 + 0.1; }, x,
                    {.max_trips = max_trips});
}
int bounded_trips(double x) {
  int n = 0;
  for (; x < 100.0; ++n) x = x * 1.5 + 0.1;
  return n;
}

}  // namespace

TEST_CASE("issue 33.2: scan body reading item() is checked every iteration") {
  // c <- c + c.item() from 1 over 4 steps is 16 in C++; a constant 1 would give 5.
  double plain = 1.0;
  for (int i = 0; i < 4; ++i) plain += plain;
  REQUIRE(plain == 16.0);
  auto f = [](const Tensor& x) {
    return scan([](const Tensor& c, const None&) { return std::pair{c + c.item(), none}; }, x, none, {.length = 4})
        .first;
  };
  CHECK_THROWS_AS(f(scalar(1.0)), GuardFailure);
  CHECK_ERROR(f(scalar(1.0)), "scan, iteration 1", "scan's body read a traced value with item()", "reel::where",
              "element 0 = 1", "here it is 2");
  // values() too, and under reel::jit (which traces the body the same way).
  auto g = [](const Tensor& x) {
    return scan([](const Tensor& c, const None&) { return std::pair{c * c.values()[0], none}; }, x, none,
                {.length = 3})
        .first;
  };
  CHECK_ERROR(g(scalar(2.0)), "scan's body read a traced value", "here it is 4");
  const auto jf = jit(f);
  CHECK_THROWS_AS(jf(scalar(1.0)), GuardFailure);
  // A length-1 scan reads its value once: nothing to check against.
  const auto one = scan([](const Tensor& c, const None&) { return std::pair{c + c.item(), none}; }, scalar(3.0), none,
                        {.length = 1});
  CHECK(one.first.item() == 6.0);
}

TEST_CASE("issue 33.2: scan body reading a value that stays the same works, and its tapes re-check it") {
  // The carry (x, step): the body reads step, which it never changes, so every
  // iteration passes the guard; x_{k+1} = x_k * step.
  using C = std::pair<Tensor, Tensor>;
  auto f = [](const Tensor& x, const Tensor& step) {
    return scan([](const C& c, const Tensor& w) {
      const double s = c.second.item();
      return std::pair{C{c.first * s + w, c.second}, none};
    }, C{x, step}, tensor({1.0, 2.0, 3.0})).first.first;
  };
  auto plain = [](double x, double s) {
    for (double w : {1.0, 2.0, 3.0}) x = x * s + w;
    return x;
  };
  CHECK(f(scalar(1.0), scalar(2.0)).item() == plain(1.0, 2.0));
  // reel::jit: a call with another step fails the cached guard and is traced anew.
  const auto jf = jit(f);
  for (double s : {2.0, 3.0, 2.0, 0.5}) {
    CAPTURE(s);
    CHECK(jf(scalar(1.0), scalar(s)).item() == doctest::Approx(plain(1.0, s)).epsilon(1e-12));
  }
  CHECK(jf.cache_info().entries >= 1);
  // Compiled once: another step is a GuardFailure of the compiled loop naming the scan,
  // never the traced step used as a constant.
  const CompiledFunction once = compile(trace(f, scalar(1.0), scalar(2.0)));
  CHECK(once({scalar(1.0), scalar(2.0)})[0].item() == doctest::Approx(plain(1.0, 2.0)).epsilon(1e-12));
  CHECK_THROWS_AS(once({scalar(1.0), scalar(3.0)}), GuardFailure);
  CHECK_ERROR(once({scalar(1.0), scalar(3.0)}), "compiled", "scan", "iteration 0", "scan's body read a traced value");
  // And the interpreted tape (play), which prints the guard's loop and parses back.
  const Tape t = trace(f, scalar(1.0), scalar(2.0));
  test::check_round_trip(t);
  CHECK(to_string(t).find("loop=\"scan\"") != std::string::npos);
  CHECK(play(t, {scalar(1.0), scalar(2.0)})[0].item() == plain(1.0, 2.0));
  CHECK_THROWS_AS(play(t, {scalar(1.0), scalar(3.0)}), GuardFailure);
  CHECK_THROWS_AS(play(parse_tape(to_string(t)), {scalar(1.0), scalar(3.0)}), GuardFailure);
}

TEST_CASE("issue 33.2: a value read in a checkpoint or a gradient inside a loop body is checked every iteration") {
  // The read happens in a trace nested in the body's; its tape becomes part of the body.
  const auto block = checkpoint([](const Tensor& c) { return c + c.item(); });
  auto f = [&](const Tensor& x) {
    return scan([&](const Tensor& c, const None&) { return std::pair{block(c), none}; }, x, none, {.length = 4}).first;
  };
  CHECK_ERROR(f(scalar(1.0)), "scan's body read a traced value", "here it is 2");
  auto g = [](const Tensor& x) {
    return scan([](const Tensor& c, const None&) {
      const Tensor d = grad([](const Tensor& y) { return sum(y * y.item()); }, c).grads[0];
      return std::pair{c + d, none};
    }, x, none, {.length = 3}).first;
  };
  CHECK_ERROR(g(scalar(1.0)), "scan's body read a traced value");
  // Values that stay the same pass: c.item() of a carry the body keeps.
  using C = std::pair<Tensor, Tensor>;
  const auto scaled = checkpoint([](const C& c) { return C{c.first * c.second.item(), c.second}; });
  const C r = scan([&](const C& c, const None&) { return std::pair{scaled(c), none}; }, C{scalar(1.0), scalar(3.0)},
                   none, {.length = 3}).first;
  CHECK(r.first.item() == 27.0);
}

TEST_CASE("issue 33.2: scan reading an xs slice checks each slice, compiled and interpreted") {
  auto f = [](const Tensor& x, const Tensor& xs) {
    return scan([](const Tensor& c, const Tensor& w) { return std::pair{c + w.item(), none}; }, x, xs).first;
  };
  CHECK(f(scalar(1.0), tensor({2.0, 2.0, 2.0})).item() == 7.0);  // the same value in every slice
  CHECK_ERROR(f(scalar(1.0), tensor({2.0, 5.0, 2.0})), "scan, iteration 1", "scan's body read", "here it is 5");
  const CompiledFunction c = compile(trace(f, scalar(1.0), tensor({2.0, 2.0, 2.0})));
  CHECK(c({scalar(1.0), tensor({2.0, 2.0, 2.0})})[0].item() == 7.0);
  CHECK_ERROR(c({scalar(1.0), tensor({2.0, 2.0, 7.0})}), "iteration 2", "scan's body read", "here it is 7");
}

TEST_CASE("issue 33.2: while_loop body reading item() is checked every iteration") {
  // x <- x + x.item() while x < 10 from 1 is 16 in C++; the baked 1 gave 10.
  auto f = [](const Tensor& x) {
    return while_loop([](const Tensor& c) { return c < 10.0; }, [](const Tensor& c) { return c + c.item(); }, x);
  };
  CHECK(doubled_past_10(1.0) == 16.0);
  CHECK_THROWS_AS(f(scalar(1.0)), GuardFailure);
  CHECK_ERROR(f(scalar(1.0)), "while_loop, iteration 1", "while_loop's body read a traced value",
              "while_loop's cond", "reel::where");
  const auto jf = jit(f);
  CHECK_ERROR(jf(scalar(1.0)), "while_loop's body read a traced value");
  CHECK_ERROR(grad([&](const Tensor& x) { return sum(f(x)); }, scalar(1.0)), "while_loop's body read");
  // A loop of one trip reads once: it holds.
  CHECK(f(scalar(6.0)).item() == 12.0);
}

TEST_CASE("issue 33.2: fori_loop body reading its counter's item() is a GuardFailure") {
  auto f = [](const Tensor& x) {
    return fori_loop(0, 4, [](const Tensor& i, const Tensor& c) { return c + static_cast<double>(i.item()); }, x);
  };
  CHECK_ERROR(f(scalar(0.0)), "fori_loop's body read a traced value", "element 0 = 0", "here it is 1");
  // Computing with the counter as a tensor is right: 0 + 1 + 2 + 3.
  const Tensor ok = fori_loop(0, 4, [](const Tensor& i, const Tensor& c) { return c + cast(i, DType::f64); },
                              scalar(0.0));
  CHECK(ok.item() == 6.0);
}

TEST_CASE("issue 33.2: while_loop whose cond reads item() runs as the C++ loop, never hangs") {
  for (double x : {1.0, 3.0, 0.7, 12.0}) {
    CAPTURE(x);
    CHECK(grow_reading_cond(scalar(x)).item() == doubled_past_10(x));
  }
  // A cond branching on the carry (bool) is a read too.
  const Tensor b = while_loop([](const Tensor& c) { return (c < 10.0) ? scalar(1.0) : scalar(0.0); },
                              [](const Tensor& c) { return c * 2.0; }, scalar(1.0));
  CHECK(b.item() == 16.0);
  // reel::jit: each call's reads are guards, so another x takes its own path, never
  // the first call's trip count.
  const auto jf = jit([](const Tensor& x) { return grow_reading_cond(x); });
  for (double x : {1.0, 3.0, 1.0, 0.7, 12.0, 3.0}) {
    CAPTURE(x);
    CHECK(jf(scalar(x)).item() == doubled_past_10(x));
  }
  // Gradients: d/dx of x * 2^trips.
  auto loss = [](const Tensor& x) { return sum(grow_reading_cond(x)); };
  for (double x : {1.0, 3.0, 0.7}) {
    CAPTURE(x);
    const auto g = grad(loss, scalar(x));
    CHECK(g.grads[0].item() == std::pow(2.0, trips_past_10(x)));
    const auto jg = jit_grad(loss)(scalar(x));
    CHECK(jg[0].item() == doubled_past_10(x));
    CHECK(jg[1].item() == std::pow(2.0, trips_past_10(x)));
  }
  // Compiled once (a plain trace): the values cond read are guards of the compiled
  // code, so another x is a GuardFailure, not x * 2^4.
  const CompiledFunction once = compile(trace([](const Tensor& x) { return grow_reading_cond(x); }, scalar(1.0)));
  CHECK(once({scalar(1.0)})[0].item() == 16.0);
  CHECK_THROWS_AS(once({scalar(3.0)}), GuardFailure);
  // max_trips holds there too.
  CHECK_ERROR(while_loop([](const Tensor& c) { return scalar(c.item() > 0.0 ? 1.0 : 0.0); },
                         [](const Tensor& c) { return c + 1.0; }, scalar(1.0), {.max_trips = 7}),
              "while_loop", "after 7 iterations", "max_trips");
}

TEST_CASE("issue 33.6: fori_loop whose bounds overflow is a reel::Error naming fori_loop and the bounds") {
  constexpr int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  auto body = [](const Tensor&, const Tensor& c) { return c + 1.0; };
  CHECK_ERROR(fori_loop(lo, hi, body, scalar(0.0)), "fori_loop", "lo=-9223372036854775808",
              "hi=9223372036854775807", "hi - lo <= 9223372036854775807");
  CHECK_ERROR(fori_loop(-2, hi, body, scalar(0.0)), "fori_loop", "lo=-2");
  // The largest count that fits is not refused for its bounds (here: no iteration at all).
  CHECK(fori_loop(hi, lo, body, scalar(5.0)).item() == 5.0);
  CHECK(fori_loop(hi - 2, hi, body, scalar(5.0)).item() == 7.0);
}

TEST_CASE("issue 33.6: a scan tape whose counter passes INT64_MAX is refused at parse and verify") {
  constexpr int64_t top = std::numeric_limits<int64_t>::max();
  auto f = [](const Tensor& x) {
    return fori_loop(top - 3, top, [](const Tensor&, const Tensor& c) { return c + 1.0; }, x);
  };
  const Tape t = trace(f, scalar(0.0));
  const std::string text = to_string(t);
  REQUIRE(text.find("index=9223372036854775804") != std::string::npos);
  CHECK(play(parse_tape(text), {scalar(0.0)})[0].item() == 3.0);  // counters INT64_MAX - 3 .. INT64_MAX - 1
  std::string at_top = text;
  at_top.replace(at_top.find("index=9223372036854775804"), 25, "index=9223372036854775805");
  CHECK(play(parse_tape(at_top), {scalar(0.0)})[0].item() == 3.0);  // the last counter is INT64_MAX itself
  std::string past = text;
  past.replace(past.find("index=9223372036854775804"), 25, "index=9223372036854775806");
  CHECK_ERROR(parse_tape(past), "scan", "index=9223372036854775806", "length=3", "passes the largest i64");
}

TEST_CASE("issue 33.6: a loop body returning an undefined tensor names the loop and which result") {
  CHECK_ERROR(scan([](const Tensor& c, const None&) { return std::pair{c, Tensor()}; }, scalar(1.0), none,
                   {.length = 2}),
              "scan: the body returned an undefined tensor in its y", "leaf 1 of 1");
  using C = std::pair<Tensor, Tensor>;
  CHECK_ERROR(scan([](const C& c, const None&) { return std::pair{C{c.first, Tensor()}, none}; },
                   C{scalar(1.0), scalar(2.0)}, none, {.length = 2}),
              "scan: the body returned an undefined tensor in its new carry", "leaf 2 of 2");
  CHECK_ERROR(fori_loop(0, 2, [](const Tensor&, const Tensor&) { return Tensor(); }, scalar(1.0)),
              "fori_loop: the body returned an undefined tensor in its new carry");
  CHECK_ERROR(while_loop([](const Tensor&) { return Tensor(); }, [](const Tensor& c) { return c; }, scalar(1.0)),
              "while_loop: cond returned an undefined tensor");
  CHECK_ERROR(while_loop([](const Tensor& c) { return c < 3.0; }, [](const Tensor&) { return Tensor(); },
                         scalar(1.0)),
              "while_loop: the body returned an undefined tensor in its new carry");
}

TEST_CASE("issue 33: while_loop max_trips turns a runaway loop into a reel::Error, interpreted, compiled and under grad") {
  // Within the bound: the loop's value, as plain C++.
  for (double x : {1.0, 30.0, 99.0}) {
    CAPTURE(x);
    double want = x;
    for (int i = 0; i < bounded_trips(x); ++i) want = want * 1.5 + 0.1;
    CHECK(bounded(scalar(x), 50).item() == doctest::Approx(want).epsilon(1e-12));
  }
  const int exactly = bounded_trips(1.0);
  CHECK_NOTHROW(bounded(scalar(1.0), exactly));  // exactly max_trips iterations is allowed
  CHECK_ERROR(bounded(scalar(1.0), exactly - 1), "while_loop", fmt::format("after {} iterations", exactly - 1),
              "max_trips");
  CHECK_ERROR(runaway(scalar(1.0), 20), "while_loop: cond still holds after 20 iterations, and max_trips is 20");
  CHECK_ERROR(runaway(scalar(1.0), 0), "after 0 iterations");
  CHECK_ERROR(while_loop([](const Tensor& c) { return c < 3.0; }, [](const Tensor& c) { return c + 1.0; }, scalar(1.0),
                         {.max_trips = -1}),
              "while_loop", "expected max_trips >= 0", "got -1");

  // The tape: max_trips is an attribute, printed and parsed back; play honours it.
  auto f = [](const Tensor& x) { return sum(bounded(x, 12)); };
  const Tape t = trace(f, tensor({1.0}));
  test::check_round_trip(t);
  const std::string text = to_string(t);
  CHECK(text.find("max_trips=12") != std::string::npos);
  CHECK(play(t, {tensor({50.0})})[0].item() == doctest::Approx(50.0 * 1.5 * 1.5 + 0.1 * 1.5 + 0.1));
  CHECK_ERROR(play(parse_tape(text), {tensor({1e-9})}), "while_loop", "after 12 iterations", "max_trips");
  std::string negative = text;
  negative.replace(negative.find("max_trips=12"), 12, "max_trips=-4");
  CHECK_ERROR(parse_tape(negative), "while_loop", "expected max_trips >= 0", "got -4");

  // Compiled code: a call that runs past the bound stops with the error.
  const CompiledFunction c = compile(t);
  CHECK(c({tensor({1.0})})[0].item() == doctest::Approx(play(t, {tensor({1.0})})[0].item()).epsilon(1e-12));
  CHECK_ERROR(c({tensor({1e-9})}), "compiled", "while_loop", "after 12 iterations", "max_trips");
  // reel::jit: the same, from its cached code.
  const auto jf = jit(f);
  CHECK(jf(tensor({1.0})).item() == doctest::Approx(play(t, {tensor({1.0})})[0].item()).epsilon(1e-12));
  CHECK_ERROR(jf(tensor({1e-9})), "while_loop", "after 12 iterations", "max_trips");
  // Under grad, jit_grad and jvp (forward mode keeps the bound).
  CHECK(grad(f, tensor({1.0})).grads[0].item() == doctest::Approx(std::pow(1.5, bounded_trips(1.0))).epsilon(1e-12));
  CHECK_ERROR(grad(f, tensor({1e-9})), "while_loop", "after 12 iterations", "max_trips");
  const auto jg = jit_grad(f);
  CHECK(jg(tensor({1.0}))[1].item() == doctest::Approx(std::pow(1.5, bounded_trips(1.0))).epsilon(1e-12));
  CHECK_ERROR(jg(tensor({1e-9})), "while_loop", "after 12 iterations", "max_trips");
  CHECK_ERROR(play(jvp_tape(t), {tensor({1e-9}), tensor({1.0})}), "while_loop", "after 12 iterations", "max_trips");
  // vmap: every element is bounded.
  CHECK_ERROR(vmap([](const Tensor& x) { return bounded(x, 12); })(tensor({50.0, 1e-9}, {2, 1})), "while_loop",
              "max_trips");
}

TEST_CASE("issue 33.2: a branch in a loop body is checked every iteration and its failure names the loop") {
  // c <- c + 1 while c < 2 else c - 1, from 0 over 4 steps: the branch flips at step 2.
  auto f = [](const Tensor& x) {
    return scan([](const Tensor& c, const None&) { return std::pair{sum(c) < 2.0 ? c + 1.0 : c - 1.0, none}; }, x,
                none, {.length = 4})
        .first;
  };
  CHECK_ERROR(f(scalar(0.0)), "scan, iteration 2", "scan's body branched on a traced value", "reel::where");
  // A branch that goes the same way in every iteration gives the plain loop's value.
  CHECK(f(scalar(-10.0)).item() == -6.0);
  // The same tape compiled: the same check, the same words.
  const Tape t = trace(f, scalar(-10.0));
  CHECK(to_string(t).find("loop=\"scan\"") != std::string::npos);
  const CompiledFunction c = compile(t);
  CHECK(c({scalar(-3.0)})[0].item() == 1.0);
  CHECK_ERROR(c({scalar(0.0)}), "iteration", "scan's body branched on a traced value", "reel::where");
  CHECK_ERROR(play(t, {scalar(0.0)}), "iteration", "scan's body branched on a traced value");
  // A while_loop's body points to its cond.
  auto w = [](const Tensor& x) {
    return while_loop([](const Tensor& c) { return sum(c) < 5.0; },
                      [](const Tensor& c) { return sum(c) > 1.0 ? c + 2.0 : c + 1.0; }, x);
  };
  CHECK_ERROR(w(scalar(0.0)), "while_loop's body branched on a traced value", "while_loop's cond");
}
