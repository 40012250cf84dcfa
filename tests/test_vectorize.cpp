// vectorize: re-rolled loops whose iterations carry only reductions become batched
// operations and reduces; recurrences stay scans. Values against the plain loop in
// double, gradients against finite differences and the unvectorized tape, compiled
// against interpreted.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "reel/ir/loop_params.hpp"
#include "reel/reel.hpp"
#include "test_util.hpp"

using namespace reel;

namespace {

int count(const Tape& t, std::string_view prim) { return test::count_calls(t, prim); }

// GradBench's lse as its C++ writes it: a max loop, then a sum of exponentials (its
// `T s = 0` puts a constant in the first iteration only: the loop is folded a step out
// of phase).
template <class T>
T lse(const std::vector<T>& x) {
  T A = x[0];
  for (std::size_t i = 1; i < x.size(); ++i) A = std::max(A, x[i]);
  T s = 0;
  for (std::size_t i = 0; i < x.size(); ++i) s += exp(x[i] - A);
  return log(s) + A;
}

template <class T>
T products(const std::vector<T>& x) {  // a product, a minimum and a sum in one loop
  T p = 1, m = x[0], s = x[1];
  for (std::size_t i = 0; i < x.size(); ++i) {
    p *= 1.0 + 0.1 * sin(x[i]);
    m = std::min(m, x[i] * x[i] - x[i]);
    s = cos(x[i]) + s;
  }
  return p + m * s;
}

template <class T>
T recurrence(const std::vector<T>& x) {  // each iteration needs the last: a scan
  T s = x[0];
  for (std::size_t i = 0; i < x.size(); ++i) s = sin(s) * x[i] + 0.5;
  return s;
}

std::vector<double> numbers(int n) {
  std::vector<double> x(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = std::sin(1.0 + 0.37 * i);
  return x;
}

// f's gradient: compiled and interpreted, with and without re-rolling, against
// finite differences of the double version; its value against the plain loop.
template <class F, class G>
void check_function(F f, G plain, const std::vector<double>& x) {
  const Tensor t = tensor(x);
  const Tape traced = trace(f, t);
  const Tape g = grad_tape(traced);
  const std::vector<Tensor> played = play(g, {t});
  const std::vector<Tensor> compiled = compile(g)({t});
  CHECK(played[0].item() == doctest::Approx(plain(x)).epsilon(1e-12));
  test::check_close(compiled[0], played[0], 1e-12, 1e-14, "compiled value");
  test::check_close(compiled[1], played[1], 1e-12, 1e-14, "compiled gradient");
  const bool before = set_auto_reroll(false);
  const std::vector<Tensor> unrolled = play(grad_tape(traced), {t});
  set_auto_reroll(before);
  test::check_close(played[1], unrolled[1], 1e-10, 1e-12, "gradient, vectorized vs unrolled");
  std::vector<double> fd(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::vector<double> up = x, down = x;
    up[i] += 1e-6;
    down[i] -= 1e-6;
    fd[i] = (plain(up) - plain(down)) / 2e-6;
  }
  test::check_close(played[1], tensor(fd), 1e-5, 1e-7, "gradient vs finite differences");
}

}  // namespace

TEST_CASE("vectorize: lse's max and sum loops become max and sum over the vector") {
  auto f = [](const std::vector<Real>& x) { return lse(x); };
  const std::vector<double> x = numbers(300);
  const Tape cleaned = cleanup_traced(trace(f, tensor(x)));
  CAPTURE(to_string(cleaned));
  CHECK(count(cleaned, "scan") == 0);
  CHECK(count(cleaned, "max") == 1);
  CHECK(count(cleaned, "sum") == 1);
  CHECK(cleaned.size() < 30);
  check_function(f, [](const std::vector<double>& v) { return lse(v); }, x);
}

TEST_CASE("vectorize: products, minima and sums carried together; a recurrence stays a scan") {
  auto f = [](const std::vector<Real>& x) { return products(x); };
  const std::vector<double> x = numbers(200);
  const Tape cleaned = cleanup_traced(trace(f, tensor(x)));
  CAPTURE(to_string(cleaned));
  CHECK(count(cleaned, "scan") == 0);
  CHECK(count(cleaned, "prod") == 1);
  CHECK(count(cleaned, "min") == 1);
  check_function(f, [](const std::vector<double>& v) { return products(v); }, x);

  auto r = [](const std::vector<Real>& v) { return recurrence(v); };
  const Tape rolled = cleanup_traced(trace(r, tensor(x)));
  CHECK(count(rolled, "scan") == 1);
  check_function(r, [](const std::vector<double>& v) { return recurrence(v); }, x);
}

TEST_CASE("vectorize: a scan of tensors whose carries are sums and whose ys are independent") {
  const Tensor xs = randn({40, 3}, 1), w = randn({3}, 2);
  auto f = [](const Tensor& xs, const Tensor& w) {
    auto [total, ys] = scan([&](const Tensor& c, const Tensor& x) {
      const Tensor y = tanh(x * w);
      return std::pair{c + y, y * 2.0};
    }, zeros({3}), xs);
    return sum(total) + sum(ys * ys);
  };
  const Tape t = trace(f, xs, w);
  const Tape v = vectorize(t);
  CAPTURE(to_string(v));
  CHECK(count(t, "scan") == 1);
  CHECK(count(v, "scan") == 0);
  test::check_close(play(v, {xs, w})[0], play(t, {xs, w})[0], 1e-12, 1e-12, "value");
  const std::vector<Tensor> gv = play(grad_tape(v), {xs, w}), gt = play(reverse_mode(t), {xs, w});
  test::check_close(gv[1], gt[1], 1e-12, 1e-12, "d/dxs");
  test::check_close(gv[2], gt[2], 1e-12, 1e-12, "d/dw");
  test::check_close(compile(grad_tape(v))({xs, w})[2], gt[2], 1e-12, 1e-12, "d/dw compiled");
}

TEST_CASE("vectorize: left alone are recurrences, guards, checkpointed and reverse scans") {
  const Tensor xs = randn({20, 2}, 3);
  auto body = [](const Tensor& c, const Tensor& x) { return std::pair{c + exp(x), x}; };
  // A checkpoint policy asks for fewer residuals than the batched form would keep.
  const Tape checkpointed = trace([&](const Tensor& s) {
    ScanOptions o;
    o.checkpoint = Checkpoint::sqrt();
    return std::get<0>(scan(body, zeros({2}), s, o));
  }, xs);
  CHECK(count(vectorize(checkpointed), "scan") == 1);
  const Tape reversed = trace([&](const Tensor& s) {
    ScanOptions o;
    o.reverse = true;
    return std::get<0>(scan(body, zeros({2}), s, o));
  }, xs);
  CHECK(count(vectorize(reversed), "scan") == 1);
  // A carry read by something else than its reduction is a recurrence.
  const Tape recurrent = trace([&](const Tensor& s) {
    return std::get<0>(scan([](const Tensor& c, const Tensor& x) { return std::pair{c + exp(x) * c, x}; }, zeros({2}), s));
  }, xs);
  CHECK(count(vectorize(recurrent), "scan") == 1);
}

TEST_CASE("vectorize: loops of reductions inside a recurrence are vectorized in its body") {
  // The inner sum over j is independent per iteration of the outer loop, which carries s.
  auto f = [](const std::vector<Real>& x) {
    Real s = 0.5;
    for (int i = 0; i < 12; ++i) {
      Real inner = 0;
      for (std::size_t j = 0; j < x.size(); ++j) inner += exp(x[j] * s);
      s = log(inner) * 0.1 + sin(s);
    }
    return s;
  };
  auto plain = [](const std::vector<double>& x) {
    double s = 0.5;
    for (int i = 0; i < 12; ++i) {
      double inner = 0;
      for (double xj : x) inner += std::exp(xj * s);
      s = std::log(inner) * 0.1 + std::sin(s);
    }
    return s;
  };
  const std::vector<double> x = numbers(64);
  const Tape cleaned = cleanup_traced(trace(f, tensor(x)));
  CAPTURE(to_string(cleaned));
  CHECK(count(cleaned, "scan") == 1);
  const Tape& body = [&]() -> const Tape& {
    for (const Op& op : cleaned.ops)
      if (op.kind == OpKind::call && op.prim->name == "scan") return op.attrs.tape("body");
    return cleaned;
  }();
  CHECK(count(body, "scan") == 0);
  CHECK(count(body, "sum") >= 1);
  check_function(f, plain, x);
}

TEST_CASE("vectorize: a carry passed through unchanged goes along; impure bodies and f32 sums stay scans") {
  const Tensor xs = randn({30, 2}, 5), p0 = tensor({1.5, -2});
  auto sum_and_pass = [](const Tensor& xs, const Tensor& p0) {
    auto [carries, ys] = scan([](const std::pair<Tensor, Tensor>& c, const Tensor& x) {
      return std::pair{std::pair{c.first + exp(x), c.second}, none};
    }, std::pair{zeros({2}), p0}, xs);
    return sum(carries.first) + sum(carries.second * carries.second);
  };
  const Tape t = trace(sum_and_pass, xs, p0);
  const Tape v = vectorize(t);
  CAPTURE(to_string(v));
  CHECK(count(v, "scan") == 0);
  test::check_close(play(v, {xs, p0})[0], play(t, {xs, p0})[0], 1e-12, 1e-12, "value");
  const std::vector<Tensor> gv = play(grad_tape(v), {xs, p0}), gt = play(reverse_mode(t), {xs, p0});
  test::check_close(gv[2], gt[2], 1e-12, 1e-12, "d/dp0");

  // A primitive that is not pure runs once per iteration: batching would run it once.
  define_primitive({.name = "vectorize_noisy",
                    .eager = [](std::span<const Tensor> in, const Attrs&) { return in[0] * 1.0; },
                    .pure = false});
  const Tape impure = trace([](const Tensor& s) {
    return std::get<0>(scan([](const Tensor& c, const Tensor& x) {
      return std::pair{c + reel::apply("vectorize_noisy", std::vector<Tensor>{x}, {}), x};
    }, zeros({2}), s));
  }, xs);
  CHECK(count(vectorize(impure), "scan") == 1);

  // An f32 sum rounds at every step of the loop; a reduce would add in double.
  const Tensor xs32 = cast(xs, DType::f32);
  const Tape f32 = trace([](const Tensor& s) {
    return std::get<0>(scan([](const Tensor& c, const Tensor& x) { return std::pair{c + x, x}; },
                            zeros({2}, DType::f32), s));
  }, xs32);
  CHECK(count(vectorize(f32), "scan") == 1);
  const Tape f32max = trace([](const Tensor& s) {
    return std::get<0>(scan([](const Tensor& c, const Tensor& x) { return std::pair{maximum(c, x), x}; },
                            zeros({2}, DType::f32), s));
  }, xs32);
  CHECK(count(vectorize(f32max), "scan") == 0);
}

namespace {
// GradBench's llsq as its C++ writes it: an inner loop subtracting from a carry, with
// numbers (powers of t) that differ in every iteration, inside a sum of squares.
template <class T>
T llsq(const std::vector<T>& x, std::size_t n) {
  T total = T(0);
  for (std::size_t i = 0; i < n; i++) {
    const double ti = -1 + static_cast<double>(i) * 2 / static_cast<double>(n - 1);
    T inner = T((0 < ti) - (ti < 0));
    T mul = 1;
    for (std::size_t j = 0; j < x.size(); j++) {
      inner -= x[j] * mul;
      mul *= ti;
    }
    total += inner * inner;
  }
  return total / T(2);
}
}  // namespace

TEST_CASE("vectorize: subtractions from a carry; llsq's loops") {
  // s -= f(x[i]): the carry minus a sum.
  auto minus = [](const auto& x) {
    using T = std::decay_t<decltype(x[0])>;
    T s = x[0] * x[1];
    for (std::size_t i = 0; i < x.size(); ++i) s -= sin(x[i]) * x[i];
    return s;
  };
  const std::vector<double> x = numbers(128);
  const Tape cleaned = cleanup_traced(trace([&](const std::vector<Real>& v) { return minus(v); }, tensor(x)));
  CAPTURE(to_string(cleaned));
  CHECK(count(cleaned, "scan") == 0);
  CHECK(count(cleaned, "sum") == 1);
  check_function([&](const std::vector<Real>& v) { return minus(v); }, [&](const std::vector<double>& v) { return minus(v); }, x);
  // llsq: numbers that differ in every iteration (powers of t) and loops of loops; the
  // values and gradients are the loop's whatever folds.
  check_function([](const std::vector<Real>& v) { return llsq(v, 24); },
                 [](const std::vector<double>& v) { return llsq(v, 24); }, x);
}

TEST_CASE("reroll: a chain of loops, each over the last one's results, folds loop after loop") {
  // Six elementwise loops over arrays of Reals, each reading the one before (as ode's
  // Runge-Kutta stages do): each round of folding stacks one loop's values for the next.
  auto chain = [](const auto& x) {
    using T = std::decay_t<decltype(x[0])>;
    std::vector<T> a(x.begin(), x.end()), b(x.size());
    for (int stage = 0; stage < 6; ++stage) {
      for (std::size_t i = 0; i < x.size(); ++i) b[i] = sin(a[i]) * 0.5 + x[i] * (1.0 + 0.1 * stage);
      std::swap(a, b);
    }
    T s = 0;
    for (const T& v : a) s += v * v;
    return s;
  };
  const std::vector<double> x = numbers(100);
  auto f = [&](const std::vector<Real>& v) { return chain(v); };
  const Tape traced = trace(f, tensor(x));
  const Tape cleaned = cleanup_traced(traced);
  CAPTURE(to_string(cleaned));
  CHECK(cleaned.size() * 20 < traced.size());
  check_function(f, [&](const std::vector<double>& v) { return chain(v); }, x);
}

TEST_CASE("vectorize: a value the loop computes a step ahead and reads as it goes (a shifted carry)") {
  // z[i] = x[i] * y[i - 1]: re-rolled a step out of phase, the body carries the next
  // iteration's x[i] and multiplies it by y; the carry is read by a product whose
  // values are stacked, not by a reduction. It is the initial value followed by its
  // next values, shifted by one iteration: batched, with no scan left.
  auto shifted = [](const auto& x) {
    using T = std::decay_t<decltype(x[0])>;
    const std::size_t n = x.size();
    std::vector<T> y(n), z(n);
    for (std::size_t i = 0; i < n; ++i) y[i] = sin(x[i]);
    z[0] = x[0];
    for (std::size_t i = 1; i < n; ++i) z[i] = x[i] * y[i - 1];
    T s = 0;
    for (std::size_t i = 0; i < n; ++i) s += z[i] * z[i] * (1.0 + 0.01 * static_cast<double>(i));
    return s;
  };
  const std::vector<double> x = numbers(96);
  auto f = [&](const std::vector<Real>& v) { return shifted(v); };
  const Tape cleaned = cleanup_traced(trace(f, tensor(x)));
  CAPTURE(to_string(cleaned));
  CHECK(count(cleaned, "scan") == 0);
  check_function(f, [&](const std::vector<double>& v) { return shifted(v); }, x);
}

namespace {

// Operations on 0-d values other than reading them (slice, reshape) or putting them
// together (concat).
int arithmetic_on_scalars(const Tape& t) {
  int n = 0;
  for (const Op& op : t.ops)
    n += op.kind == OpKind::call && op.type.shape.empty() && op.prim->name != "reshape" && op.prim->name != "slice";
  return n;
}

// GradBench's ode as its C++ writes it: Runge-Kutta steps over a state kept in an array
// of scalars, each stage a loop over the elements reading the element before.
template <class T>
void ode_rate(std::size_t n, const T* x, const T* y, T* z) {
  z[0] = x[0];
  for (std::size_t i = 1; i < n; i++) z[i] = x[i] * y[i - 1];
}

template <class T>
T ode(const std::vector<T>& x, std::size_t steps) {
  const std::size_t n = x.size();
  const double h = 2.0 / static_cast<double>(steps);
  std::vector<T> k1(n), k2(n), k3(n), k4(n), tmp(n), y(n, T(0));
  for (std::size_t s = 0; s < steps; s++) {
    ode_rate(n, x.data(), y.data(), k1.data());
    for (std::size_t i = 0; i < n; i++) tmp[i] = y[i] + h * k1[i] / 2.0;
    ode_rate(n, x.data(), tmp.data(), k2.data());
    for (std::size_t i = 0; i < n; i++) tmp[i] = y[i] + h * k2[i] / 2.0;
    ode_rate(n, x.data(), tmp.data(), k3.data());
    for (std::size_t i = 0; i < n; i++) tmp[i] = y[i] + h * k3[i];
    ode_rate(n, x.data(), tmp.data(), k4.data());
    for (std::size_t i = 0; i < n; i++) y[i] += h * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i]) / 6.0;
  }
  T s = 0;
  for (std::size_t i = 0; i < n; i++) s += y[i] * (1.0 + 0.1 * static_cast<double>(i));
  return s;
}

}  // namespace

TEST_CASE("reroll: a loop over steps whose state is many scalars carries one vector, and its inner loops fold") {
  // The steps fold into one scan. Its state, 64 scalars, is packed into one carried
  // vector, so the body's loops over the elements read advancing slices of it and are
  // vectorized in turn: no scan inside the scan, no element-wise scalar code left.
  const std::vector<double> x = numbers(64);
  auto f = [&](const std::vector<Real>& v) { return ode(v, 10); };
  const Tape traced = trace(f, tensor(x));
  const Tape cleaned = cleanup_traced(traced);
  CAPTURE(to_string(cleaned));
  REQUIRE(count(cleaned, "scan") == 1);
  CHECK(test::count_calls(cleaned, "scan", true) == 1);
  for (const Op& op : cleaned.ops)
    if (op.kind == OpKind::call && op.prim->name == "scan") {
      const ScanParams p = ScanParams::read(op.attrs, op.args.size());
      CHECK(p.K == 1);
      CHECK(p.body->type(p.body->outputs[0]).shape == Shape{64});
      CHECK(arithmetic_on_scalars(*p.body) < 40);  // an iteration traced 2,200 of them
    }
  check_function(f, [&](const std::vector<double>& v) { return ode(v, 10); }, x);
}

TEST_CASE("reroll: a loop over steps that reads a row of numbers per step reads them as one vector") {
  // Per step, 16 numbers that differ from step to step (an input sequence held as
  // Reals made from doubles) and 16 scalars of state: both come into the body as one
  // vector each, and the loop over the 16 elements inside folds and vectorizes.
  auto steps = [](const auto& w) {
    using T = std::decay_t<decltype(w[0])>;
    const std::size_t b = w.size();
    std::vector<T> h(b, T(0.1)), seq;
    for (std::size_t t = 0; t < 24 * b; ++t) seq.push_back(T(std::cos(0.3 * static_cast<double>(t))));
    for (std::size_t t = 0; t < 24; ++t)
      for (std::size_t i = 0; i < b; ++i) h[i] = tanh(h[i] * w[i] + seq[t * b + i]);
    T s = 0;
    for (std::size_t i = 0; i < b; ++i) s += h[i] * h[i];
    return s;
  };
  const std::vector<double> w = numbers(16);
  auto f = [&](const std::vector<Real>& v) { return steps(v); };
  const Tape cleaned = cleanup_traced(trace(f, tensor(w)));
  CAPTURE(to_string(cleaned));
  REQUIRE(count(cleaned, "scan") == 1);
  CHECK(test::count_calls(cleaned, "scan", true) == 1);
  CHECK(test::count_calls(cleaned, "tanh", true) <= 6);  // per step a tanh of a vector, not 16 tanh
  for (const Op& op : cleaned.ops)
    if (op.kind == OpKind::call && op.prim->name == "scan")
      CHECK(arithmetic_on_scalars(*ScanParams::read(op.attrs, op.args.size()).body) < 8);
  check_function(f, [&](const std::vector<double>& v) { return steps(v); }, w);
}

TEST_CASE("reroll: per step, a row of an input read element by element is one slice of the rows") {
  // h[i] = tanh(h[i] * w[i] + seq[t * b + i]): the b reads of step t advance by b per
  // step; they share one stacked row, read at their offsets, so the loop over i folds.
  constexpr std::size_t b = 12, steps = 20;
  auto rnn = [](const auto& x) {
    using T = std::decay_t<decltype(x[0])>;
    std::vector<T> h(b, T(0.2));
    for (std::size_t t = 0; t < steps; ++t)
      for (std::size_t i = 0; i < b; ++i) h[i] = tanh(h[i] * x[i] + x[b + t * b + i]);
    T s = 0;
    for (std::size_t i = 0; i < b; ++i) s += h[i] * (1.0 + 0.1 * static_cast<double>(i));
    return s;
  };
  const std::vector<double> x = numbers(static_cast<int>(b + steps * b));
  auto f = [&](const std::vector<Real>& v) { return rnn(v); };
  const Tape cleaned = cleanup_traced(trace(f, tensor(x)));
  CAPTURE(to_string(cleaned));
  REQUIRE(count(cleaned, "scan") == 1);
  for (const Op& op : cleaned.ops)
    if (op.kind == OpKind::call && op.prim->name == "scan")
      CHECK(arithmetic_on_scalars(*ScanParams::read(op.attrs, op.args.size()).body) < 8);
  check_function(f, [&](const std::vector<double>& v) { return rnn(v); }, x);
}

TEST_CASE("vectorize: independent iterations holding a loop of reductions: the inner loop first, then the outer") {
  // sum_i (sum_j x[j] * c_ij)^2: the inner loops vectorize before the outer loop is
  // batched, so no scan is left (batched first, the inner loop was a scan over batches).
  auto nest = [](const auto& x) {
    using T = std::decay_t<decltype(x[0])>;
    T total = 0;
    for (std::size_t i = 0; i < 40; ++i) {
      T inner = 0;
      for (std::size_t j = 0; j < x.size(); ++j) inner += x[j] * std::cos(0.1 * static_cast<double>(i * x.size() + j));
      total += inner * inner;
    }
    return total;
  };
  const std::vector<double> x = numbers(32);
  auto f = [&](const std::vector<Real>& v) { return nest(v); };
  const Tape cleaned = cleanup_traced(trace(f, tensor(x)));
  CAPTURE(to_string(cleaned));
  CHECK(test::count_calls(cleaned, "scan", true) == 0);
  check_function(f, [&](const std::vector<double>& v) { return nest(v); }, x);
}
