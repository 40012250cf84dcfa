// Loops as loops: reel::scan, reel::fori_loop and reel::while_loop against the same
// loops unrolled (values, gradients, forward mode, second order; interpreted and
// compiled; f32 and f64; finite differences), nested, inside grad inside a loop, with
// struct and tuple carries, of no iterations; while_loop's trip counts through the
// caches and Tracker; print/parse round trips, and errors.
#include <cmath>
#include <set>

#include "test_util.hpp"

using namespace reel;

namespace {

// The tanh recurrence as a scan: carry y, xs rows; ys every y.
std::pair<Tensor, Tensor> tanh_scan(const Tensor& W, const Tensor& y0, const Tensor& xs, bool reverse = false) {
  return scan([&](const Tensor& y, const Tensor& x) {
    const Tensor next = tanh(matmul(W, y) + x) * 0.5 + y * 0.5;
    return std::pair{next, sin(next)};
  }, y0, xs, {.reverse = reverse});
}

std::pair<Tensor, Tensor> tanh_unrolled(const Tensor& W, const Tensor& y0, const Tensor& xs, bool reverse = false) {
  Tensor y = y0;
  const int64_t n = xs.shape()[0];
  std::vector<Tensor> ys(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = reverse ? n - 1 - i : i;
    y = tanh(matmul(W, y) + index(xs, k)) * 0.5 + y * 0.5;
    ys[static_cast<std::size_t>(k)] = sin(y);
  }
  return {y, stack(ys)};
}

Tensor loss_of(const std::pair<Tensor, Tensor>& r) { return sum(r.first * r.first) + sum(r.second * 0.3); }

void check_all_close(const std::vector<Tensor>& a, const std::vector<Tensor>& b, double tol, const std::string& what) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) test::check_close(a[i], b[i], tol, tol, fmt::format("{} {}", what, i));
}

}  // namespace

TEST_CASE("scan: values equal the unrolled loop, forward and reverse, f64 and f32") {
  for (DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
    const Tensor W = cast(randn({4, 4}, 1) * 0.4, dt), y0 = cast(randn({4}, 2), dt), xs = cast(randn({7, 4}, 3), dt);
    for (bool reverse : {false, true}) {
      const auto [y, ys] = tanh_scan(W, y0, xs, reverse);
      const auto [yu, ysu] = tanh_unrolled(W, y0, xs, reverse);
      test::check_close(y, yu, tol, tol, "final carry");
      test::check_close(ys, ysu, tol, tol, "ys");
    }
  }
}

TEST_CASE("scan: the traced tape holds one scan with its body, prints and parses back, and compiles") {
  const Tensor W = randn({4, 4}, 1) * 0.4, y0 = randn({4}, 2), xs = randn({6, 4}, 3);
  const Tape t = trace([](const Tensor& w, const Tensor& y, const Tensor& x) { return loss_of(tanh_scan(w, y, x)); },
                       W, y0, xs);
  int scans = 0;
  for (const Op& op : t.ops) scans += op.kind == OpKind::call && op.prim->name == "scan";
  CHECK(scans == 1);
  test::check_round_trip(t);
  const std::vector<Tensor> args{W, y0, xs};
  const Tensor want = loss_of(tanh_unrolled(W, y0, xs));
  test::check_close(play(t, args)[0], want, 1e-12, 1e-12, "played");
  test::check_close(compile(t)(args)[0], want, 1e-12, 1e-12, "compiled");
}

TEST_CASE("scan: gradients equal the unrolled loop's and finite differences (consts, carries, xs)") {
  const Tensor W = randn({4, 4}, 1) * 0.4, y0 = randn({4}, 2), xs = randn({5, 4}, 3);
  for (bool reverse : {false, true}) {
    auto rolled = [reverse](const Tensor& w, const Tensor& y, const Tensor& x) { return loss_of(tanh_scan(w, y, x, reverse)); };
    auto unrolled = [reverse](const Tensor& w, const Tensor& y, const Tensor& x) {
      return loss_of(tanh_unrolled(w, y, x, reverse));
    };
    const auto g = grad(rolled, W, y0, xs), gu = grad(unrolled, W, y0, xs);
    check_all_close(g.grads, gu.grads, 1e-10, "grad vs unrolled");
    const std::vector<Tensor> fd = test::finite_diff(
        [&](const std::vector<Tensor>& a) { return unrolled(a[0], a[1], a[2]); }, {W, y0, xs});
    check_all_close(g.grads, fd, 1e-6, "grad vs finite differences");
    // The gradient tape compiled equals it interpreted.
    const Tape gt = grad_tape(trace(rolled, W, y0, xs));
    test::check_round_trip(gt);
    check_all_close(compile(gt)({W, y0, xs}), play(gt, {W, y0, xs}), 1e-12, "compiled gradient tape");
  }
}

TEST_CASE("scan: forward mode and hvp (second order) equal the unrolled loop's") {
  const Tensor W = randn({3, 3}, 1) * 0.4, y0 = randn({3}, 2), xs = randn({4, 3}, 3);
  const Tensor tW = randn({3, 3}, 4), ty = randn({3}, 5), tx = randn({4, 3}, 6);
  auto rolled = [](const Tensor& w, const Tensor& y, const Tensor& x) { return loss_of(tanh_scan(w, y, x)); };
  auto unrolled = [](const Tensor& w, const Tensor& y, const Tensor& x) { return loss_of(tanh_unrolled(w, y, x)); };
  const auto j = jvp(rolled, {W, y0, xs}, {tW, ty, tx}), ju = jvp(unrolled, {W, y0, xs}, {tW, ty, tx});
  test::check_close(j.value, ju.value, 1e-12, 1e-12, "jvp value");
  test::check_close(j.tangent, ju.tangent, 1e-10, 1e-10, "jvp tangent");
  const auto h = hvp(rolled, {W, y0, xs}, {tW, ty, tx}), hu = hvp(unrolled, {W, y0, xs}, {tW, ty, tx});
  check_all_close(h.grads, hu.grads, 1e-10, "hvp grads");
  check_all_close(h.hvp, hu.hvp, 1e-9, "hvp");
  // grad of grad: d/dy0 of sum(dloss/dW).
  auto gsum = [&](const Tensor& y) { return sum(grad(rolled, W, y, xs).grads[0]); };
  auto gsum_u = [&](const Tensor& y) { return sum(grad(unrolled, W, y, xs).grads[0]); };
  test::check_close(grad(gsum, y0).grads[0], grad(gsum_u, y0).grads[0], 1e-9, 1e-9, "grad of grad");
}

TEST_CASE("scan: several carries as a struct-like pair, no xs (length), nested scans") {
  const Tensor a = randn({3}, 1), b = randn({3}, 2);
  auto f = [](const Tensor& a0, const Tensor& b0) {
    const auto [c, ys] = scan([](const std::pair<Tensor, Tensor>& c, const None&) {
      return std::pair{std::pair{c.first * 0.9 + sin(c.second), c.second * 0.8}, none};
    }, std::pair{a0, b0}, none, {.length = 6});
    return sum(c.first) + sum(c.second * c.second);
  };
  auto unrolled = [](const Tensor& a0, const Tensor& b0) {
    Tensor x = a0, y = b0;
    for (int i = 0; i < 6; ++i) std::tie(x, y) = std::pair{x * 0.9 + sin(y), y * 0.8};
    return sum(x) + sum(y * y);
  };
  test::check_close(f(a, b), unrolled(a, b), 1e-12, 1e-12, "value");
  check_all_close(grad(f, a, b).grads, grad(unrolled, a, b).grads, 1e-10, "grads");
  // A scan inside a scan: the inner one sums the outer carry 3 times.
  auto nested = [](const Tensor& x0) {
    return sum(scan([](const Tensor& x, const None&) {
      const Tensor inner = scan([](const Tensor& y, const None&) { return std::pair{sin(y) + y, none}; }, x, none,
                                {.length = 3}).first;
      return std::pair{inner * 0.5, none};
    }, x0, none, {.length = 4}).first);
  };
  auto nested_u = [](const Tensor& x0) {
    Tensor x = x0;
    for (int i = 0; i < 4; ++i) {
      Tensor y = x;
      for (int k = 0; k < 3; ++k) y = sin(y) + y;
      x = y * 0.5;
    }
    return sum(x);
  };
  test::check_close(nested(a), nested_u(a), 1e-12, 1e-12, "nested value");
  test::check_close(grad(nested, a).grads[0], grad(nested_u, a).grads[0], 1e-10, 1e-10, "nested grad");
}

TEST_CASE("fori_loop: the counter indexes, values and gradients equal the unrolled loop") {
  const Tensor table = randn({10, 3}, 1), x0 = randn({3}, 2);
  auto f = [&](const Tensor& t, const Tensor& x) {
    return sum(fori_loop(2, 8, [&](const Tensor& i, const Tensor& c) { return c * gather(t, i) + sin(c); }, x));
  };
  auto u = [&](const Tensor& t, const Tensor& x) {
    Tensor c = x;
    for (int64_t i = 2; i < 8; ++i) c = c * index(t, i) + sin(c);
    return sum(c);
  };
  test::check_close(f(table, x0), u(table, x0), 1e-12, 1e-12, "value");
  check_all_close(grad(f, table, x0).grads, grad(u, table, x0).grads, 1e-10, "grads");
}

TEST_CASE("scan: errors name the operation, the expected and the given") {
  const Tensor y0 = randn({3}, 1);
  CHECK_ERROR(scan([](const Tensor& y, const std::vector<Tensor>& x) { return std::pair{y + x[0] + x[1], none}; }, y0,
                   std::vector<Tensor>{randn({4, 3}, 2), randn({5, 3}, 3)}),
              "scan", "expected a leading axis of 4");
  CHECK_ERROR(scan([](const Tensor& y, const None&) { return std::pair{y, none}; }, y0, none), "scan",
              "ScanOptions::length");
  CHECK_ERROR(scan([](const Tensor& y, const None&) { return std::pair{sum(y), none}; }, y0, none, {.length = 2}),
              "scan", "carry 1");
  CHECK_ERROR(parse_tape("inp %1::f64[3]\n%2 = scan(%1, body={inp %1::f64[2]; out %1}, length=2, num_consts=0, "
                         "num_carry=1)::f64[3]\nout %2\n"),
              "scan", "body taking");
}

// ---- Every loop against the same loop unrolled ----------------------------------------

namespace {

// rolled and unrolled compute the same function of tensors: in f64 and f32, the
// rolled one's value (eager, its traced tape played and compiled), gradient tape
// (played and compiled) and forward-mode tape equal the unrolled one's, and each tape
// prints and parses back; in f64 the gradient also equals finite differences of the
// rolled function, and its Hessian-vector product the unrolled one's.
template <class F, class U, std::size_t... I>
void check_unrolled(const std::string& what, const F& rolled, const U& unrolled, const std::vector<Tensor>& args64,
                    std::index_sequence<I...>) {
  for (DType dt : {DType::f64, DType::f32}) {
    const bool f64 = dt == DType::f64;
    const double tol = f64 ? 1e-10 : 2e-4;
    const std::string w = fmt::format("{} ({})", what, f64 ? "f64" : "f32");
    CAPTURE(w);
    const std::vector<Tensor> a{cast(args64[I], dt)...};
    const Tensor want = unrolled(a[I]...);
    test::check_close(rolled(a[I]...), want, tol, tol, w + ": eager value");
    const Tape t = trace(rolled, a[I]...);
    test::check_round_trip(t);
    test::check_close(play(t, a)[0], want, tol, tol, w + ": played");
    test::check_close(compile(t)(a)[0], want, tol, tol, w + ": compiled");
    const Tape g = grad_tape(t);
    test::check_round_trip(g);
    const std::vector<Tensor> gu = play(grad_tape(trace(unrolled, a[I]...)), a);
    check_all_close(play(g, a), gu, tol, w + ": gradient played");
    check_all_close(compile(g)(a), gu, tol, w + ": gradient compiled");
    std::vector<Tensor> with_tangents = a;
    for (std::size_t i = 0; i < a.size(); ++i) with_tangents.push_back(randn(a[i].shape(), 100 + i, dt));
    const Tape j = jvp_tape(t);
    test::check_round_trip(j);
    const std::vector<Tensor> ju = play(jvp_tape(trace(unrolled, a[I]...)), with_tangents);
    check_all_close(play(j, with_tangents), ju, tol, w + ": jvp played");
    check_all_close(compile(j)(with_tangents), ju, tol, w + ": jvp compiled");
    if (!f64) continue;
    const std::vector<Tensor> fd = test::finite_diff([&](const std::vector<Tensor>& x) { return rolled(x[I]...); }, a);
    check_all_close(std::vector<Tensor>(gu.begin() + 1, gu.end()), fd, 1e-6, w + ": gradient vs finite differences");
    const Tensor v[] = {with_tangents[a.size() + I]...};
    const Tensor x[] = {a[I]...};
    check_all_close(hvp(rolled, x, v).hvp, hvp(unrolled, x, v).hvp, 1e-9, w + ": hvp");
  }
}

template <class F, class U, std::size_t N>
void check_unrolled(const std::string& what, const F& rolled, const U& unrolled, const Tensor (&args)[N]) {
  check_unrolled(what, rolled, unrolled, std::vector<Tensor>(args, args + N), std::make_index_sequence<N>{});
}

// The trip counts recorded by the while_loops of a tape (not inside bodies).
std::vector<int64_t> trips_of(const Tape& t) {
  std::vector<int64_t> trips;
  for (const Op& op : t.ops)
    if (op.kind == OpKind::call && op.prim->name == "while_loop") trips.push_back(op.attrs.integer("trips"));
  return trips;
}

// while sum(c^2) < 40: c = 1.3 c + a sin(c); the trip count depends on x and a.
Tensor grow_while(const Tensor& x, const Tensor& a) {
  return sum(while_loop([](const Tensor& c) { return sum(c * c) < 40.0; },
                        [&](const Tensor& c) { return c * 1.3 + sin(c) * a; }, x));
}
Tensor grow_unrolled(const Tensor& x, const Tensor& a) {
  Tensor c = x;
  while (sum(c * c).item() < 40.0) c = c * 1.3 + sin(c) * a;
  return sum(c);
}

struct Cell {
  Tensor h, c;
  int width = 0;  // a plain field rides along
};
REEL_FIELDS(Cell, h, c, width)

// A recurrence whose carry is a struct (REEL_FIELDS).
Cell cell_step(const Cell& s, const Tensor& x, const Tensor& W) {
  const Tensor c = s.c * 0.6 + tanh(matmul(W, s.h) + x) * 0.4;
  return {tanh(c) * 0.9 + s.h * 0.1, c, s.width};
}

}  // namespace

TEST_CASE("loops against the same loops unrolled: scan, fori_loop, while_loop (values, gradients, jvp, hvp)") {
  const Tensor W = randn({3, 3}, 1) * 0.4, y0 = randn({3}, 2), xs = randn({5, 3}, 3);
  for (bool reverse : {false, true})
    check_unrolled(reverse ? "scan, reverse" : "scan",
                   [reverse](const Tensor& w, const Tensor& y, const Tensor& x) { return loss_of(tanh_scan(w, y, x, reverse)); },
                   [reverse](const Tensor& w, const Tensor& y, const Tensor& x) {
                     return loss_of(tanh_unrolled(w, y, x, reverse));
                   },
                   {W, y0, xs});
  check_unrolled("fori_loop",
                 [](const Tensor& t, const Tensor& x) {
                   return sum(fori_loop(1, 6, [&](const Tensor& i, const Tensor& c) {
                     return c * gather(t, i) + sin(c) * cast(i, c.dtype()) * 0.1;
                   }, x));
                 },
                 [](const Tensor& t, const Tensor& x) {
                   Tensor c = x;
                   for (int64_t i = 1; i < 6; ++i) c = c * index(t, i) + sin(c) * static_cast<double>(i) * 0.1;
                   return sum(c);
                 },
                 {randn({8, 3}, 4) * 0.5, randn({3}, 5)});
  const Tensor gx = tensor({0.5, -0.3, 0.8}), ga = tensor({0.2, 0.1, -0.1});
  CHECK(trips_of(trace(grow_while, gx, ga)) == std::vector<int64_t>{7});  // sum(c^2): 29 before the last, 47 after
  check_unrolled("while_loop", grow_while, grow_unrolled, {gx, ga});
  // Carries that are tuples and structs; the counter is a carry too.
  check_unrolled("while_loop, a tuple carry",
                 [](const Tensor& x, const Tensor& a) {
                   using C = std::tuple<Tensor, Tensor, std::vector<Tensor>>;
                   const C r = while_loop([](const C& c) { return std::get<0>(c) < 4.0; },
                                          [&](const C& c) {
                                            const Tensor& u = std::get<2>(c)[0];
                                            return C{std::get<0>(c) + 1.0, std::get<1>(c) * u,
                                                     std::vector<Tensor>{u + sin(std::get<1>(c)) * a}};
                                          },
                                          C{scalar(0.0, x.dtype()), x, std::vector<Tensor>{x * 0.5}});
                   return sum(std::get<1>(r)) + sum(std::get<2>(r)[0]);
                 },
                 [](const Tensor& x, const Tensor& a) {
                   Tensor p = x, u = x * 0.5;
                   for (int i = 0; i < 4; ++i) std::tie(p, u) = std::pair{p * u, u + sin(p) * a};
                   return sum(p) + sum(u);
                 },
                 {randn({3}, 6), randn({3}, 7)});
  check_unrolled("scan, a struct carry",
                 [](const Tensor& w, const Tensor& h, const Tensor& x) {
                   const auto [s, hs] = scan([&](const Cell& c, const Tensor& xt) {
                     const Cell n = cell_step(c, xt, w);
                     return std::pair{n, n.h * 2.0};
                   }, Cell{h, h * 0.5, 3}, x);
                   CHECK(s.width == 3);
                   return sum(s.c * s.h) + sum(hs * hs);
                 },
                 [](const Tensor& w, const Tensor& h, const Tensor& x) {
                   Cell c{h, h * 0.5, 3};
                   Tensor total = sum(h * 0.0);
                   for (int64_t t = 0; t < x.shape()[0]; ++t) {
                     c = cell_step(c, index(x, t), w);
                     total = total + sum(c.h * 2.0 * (c.h * 2.0));
                   }
                   return sum(c.c * c.h) + total;
                 },
                 {W, y0, xs});
}

namespace {

// An inner while that runs three times (a counter) inside a scan.
Tensor while_in_scan(const Tensor& W, const Tensor& y0, const Tensor& xs) {
  using C = std::pair<Tensor, Tensor>;
  return sum(scan([&](const Tensor& y, const Tensor& x) {
    const C r = while_loop([](const C& c) { return c.first < 3.0; },
                           [&](const C& c) { return C{c.first + 1.0, tanh(matmul(W, c.second) + x)}; },
                           C{scalar(0.0, y.dtype()), y});
    return std::pair{r.second * 0.7 + y * 0.3, none};
  }, y0, xs).first);
}
Tensor while_in_scan_unrolled(const Tensor& W, const Tensor& y0, const Tensor& xs) {
  Tensor y = y0;
  for (int64_t t = 0; t < xs.shape()[0]; ++t) {
    Tensor z = y;
    for (int k = 0; k < 3; ++k) z = tanh(matmul(W, z) + index(xs, t));
    y = z * 0.7 + y * 0.3;
  }
  return sum(y);
}

}  // namespace

TEST_CASE("loops against the same loops unrolled: nested (a while inside a scan, a scan inside a fori_loop)") {
  const Tensor W = randn({3, 3}, 1) * 0.4, y0 = randn({3}, 2), xs = randn({4, 3}, 3);
  check_unrolled("while inside scan", while_in_scan, while_in_scan_unrolled, {W, y0, xs});
  check_unrolled("scan inside fori_loop",
                 [](const Tensor& w, const Tensor& y, const Tensor& x) {
                   return sum(fori_loop(0, 3, [&](const Tensor& i, const Tensor& c) {
                     const Tensor inner = scan([&](const Tensor& h, const Tensor& xt) {
                       return std::pair{tanh(matmul(w, h) + xt * cast(i, xt.dtype())), none};
                     }, c, x).first;
                     return inner * 0.5 + c * 0.5;
                   }, y));
                 },
                 [](const Tensor& w, const Tensor& y, const Tensor& x) {
                   Tensor c = y;
                   for (int64_t i = 0; i < 3; ++i) {
                     Tensor h = c;
                     for (int64_t t = 0; t < x.shape()[0]; ++t) h = tanh(matmul(w, h) + index(x, t) * static_cast<double>(i));
                     c = h * 0.5 + c * 0.5;
                   }
                   return sum(c);
                 },
                 {W, y0, xs});
}

TEST_CASE("loops against the same loops unrolled: a loop inside grad inside a loop") {
  // Three steps of gradient descent on a loss that is itself a loop (a scan, then a
  // while), differentiated with respect to the starting point and the data.
  auto inner_scan = [](const Tensor& x, const Tensor& d) {
    return sum(scan([&](const Tensor& c, const Tensor& dt) { return std::pair{sin(c) * dt + c * 0.5, none}; }, x, d).first);
  };
  auto inner_scan_unrolled = [](const Tensor& x, const Tensor& d) {
    Tensor c = x;
    for (int64_t t = 0; t < d.shape()[0]; ++t) c = sin(c) * index(d, t) + c * 0.5;
    return sum(c);
  };
  auto descend = [](auto inner) {
    return [inner](const Tensor& x0, const Tensor& d) {
      return sum(square(fori_loop(0, 3, [&](const Tensor&, const Tensor& x) { return x - grad(inner, x, d).grads[0] * 0.1; },
                                  x0)));
    };
  };
  auto descend_unrolled = [](auto inner) {
    return [inner](const Tensor& x0, const Tensor& d) {
      Tensor x = x0;
      for (int i = 0; i < 3; ++i) x = x - grad(inner, x, d).grads[0] * 0.1;
      return sum(square(x));
    };
  };
  const Tensor x0 = randn({3}, 1), d = randn({4, 3}, 2);
  check_unrolled("scan inside grad inside fori_loop", descend(inner_scan), descend_unrolled(inner_scan_unrolled), {x0, d});
  auto inner_while = [](const Tensor& x, const Tensor& d) {
    using C = std::pair<Tensor, Tensor>;
    return sum(while_loop([](const C& c) { return c.first < 2.0; },
                          [&](const C& c) { return C{c.first + 1.0, sin(c.second) * d + c.second * 0.5}; },
                          C{scalar(0.0, x.dtype()), x}).second);
  };
  auto inner_while_unrolled = [](const Tensor& x, const Tensor& d) {
    Tensor c = x;
    for (int k = 0; k < 2; ++k) c = sin(c) * d + c * 0.5;
    return sum(c);
  };
  check_unrolled("while inside grad inside fori_loop", descend(inner_while), descend_unrolled(inner_while_unrolled),
                 {x0, randn({3}, 3)});
}

TEST_CASE("loops against the same loops unrolled: zero-length loops") {
  const Tensor W = randn({3, 3}, 1) * 0.4, y0 = randn({3}, 2);
  check_unrolled("scan over no xs",
                 [](const Tensor& w, const Tensor& y, const Tensor& x) {
                   const auto [c, ys] = scan([&](const Tensor& h, const Tensor& xt) {
                     const Tensor n = tanh(matmul(w, h) + xt);
                     return std::pair{n, n};
                   }, y, x);
                   CHECK(ys.shape() == Shape{0, 3});
                   return sum(c * c) + sum(ys);
                 },
                 [](const Tensor&, const Tensor& y, const Tensor&) { return sum(y * y); }, {W, y0, zeros({0, 3})});
  check_unrolled("fori_loop with hi <= lo",
                 [](const Tensor& w, const Tensor& y) {
                   auto body = [&](const Tensor&, const Tensor& c) { return tanh(matmul(w, c)); };
                   return sum(fori_loop(4, 4, body, y) * fori_loop(5, 2, body, y));
                 },
                 [](const Tensor&, const Tensor& y) { return sum(y * y); }, {W, y0});
  check_unrolled("while_loop whose cond is false at once",
                 [](const Tensor& w, const Tensor& y) {
                   const Tensor r = while_loop([](const Tensor& c) { return sum(c) > 100.0; },
                                               [&](const Tensor& c) { return tanh(matmul(w, c)); }, y);
                   return sum(r * r);
                 },
                 [](const Tensor&, const Tensor& y) { return sum(y * y); }, {W, y0});
  const Tape t = trace([](const Tensor& y) {
    return sum(while_loop([](const Tensor& c) { return sum(c) > 100.0; }, [](const Tensor& c) { return c * 2.0; }, y));
  }, y0);
  CHECK(trips_of(t) == std::vector<int64_t>{0});
}

TEST_CASE("while_loop: data-dependent trip counts through reel::jit and reel::jit_grad (simplegrad) retrace") {
  // while sum(c) < 10: c = 1.5 c + 0.1, so d sum(c)/dx = 1.5^trips elementwise.
  auto f = [](const Tensor& x) {
    return sum(while_loop([](const Tensor& c) { return sum(c) < 10.0; }, [](const Tensor& c) { return c * 1.5 + 0.1; },
                          x));
  };
  auto expected = [](const Tensor& x) {
    Tensor c = x;
    int trips = 0;
    for (; sum(c).item() < 10.0; ++trips) c = c * 1.5 + 0.1;
    return std::pair{sum(c), trips};
  };
  const Tape t = trace(f, tensor({1.0, 2.0}));
  CHECK(trips_of(t) == std::vector<int64_t>{3});
  const auto jf = jit(f);
  const auto g = jit_grad(f);
  const auto sg = simplegrad(f, JitOptions{.compile_after = 1});
  std::set<int> seen;
  for (double s : {1.0, 0.2, 3.0, 1.1, 0.05, 1.0, 0.2}) {  // trip counts 3, 6, 1, 3, 8, 3, 6
    CAPTURE(s);
    const Tensor x = tensor({s, 2 * s});
    const auto [value, trips] = expected(x);
    seen.insert(trips);
    test::check_close(jf(x), value, 1e-12, 1e-12, "jit");
    for (const auto& r : {g(x), sg(x)}) {
      test::check_close(r[0], value, 1e-12, 1e-12, "jit_grad value");
      test::check_close(r[1], full({2}, std::pow(1.5, trips)), 1e-12, 1e-12, "jit_grad gradient");
    }
  }
  CHECK(seen.size() == 4);
  // The primal runs any trip count from one path; the gradient has a path per count seen.
  CHECK(jf.cache_info().misses == 1);
  CHECK(g.cache_info().misses == 4);
  CHECK(g.cache_info().hits == 3);
  CHECK(g.cache_info().entries == 4);
  // A gradient compiled once (compile_grad) refuses another trip count, naming the guard.
  const auto once = compile_grad(f, tensor({1.0, 2.0}));
  test::check_close(once(tensor({1.1, 2.2}))[1], full({2}, std::pow(1.5, 3)), 1e-12, 1e-12, "same trip count");
  CHECK_THROWS_AS(once(tensor({0.2, 0.4})), GuardFailure);
  CHECK_THROWS_WITH(once(tensor({3.0, 6.0})), doctest::Contains("guard"));
  // So does the interpreted gradient tape, when the loop would run longer or shorter.
  const Tape gt = grad_tape(t);
  CHECK_THROWS_AS(play(gt, {tensor({0.2, 0.4})}), GuardFailure);
  CHECK_THROWS_AS(play(gt, {tensor({3.0, 6.0})}), GuardFailure);
  // Forward mode takes any trip count from one tape.
  const Tape j = jvp_tape(t);
  for (double s : {0.2, 3.0}) {
    const auto out = play(j, {tensor({s, 2 * s}), tensor({1.0, -1.0})});
    test::check_close(out[1], scalar(0.0), 1e-12, 1e-12, "jvp along (1, -1)");
    const auto ones_dir = play(j, {tensor({s, 2 * s}), tensor({1.0, 1.0})});
    test::check_close(ones_dir[1], scalar(2 * std::pow(1.5, expected(tensor({s, 2 * s})).second)), 1e-12, 1e-12,
                      "jvp along (1, 1)");
  }
}

TEST_CASE("while_loop inside a scan: another trip count in a later iteration is a GuardFailure of the gradient") {
  // The inner loop's trip count depends on the outer carry; the body was traced in the
  // first iteration, so the gradient holds that iteration's count.
  auto f = [](const Tensor& y0) {
    return sum(scan([](const Tensor& y, const None&) {
      return std::pair{while_loop([](const Tensor& c) { return sum(c) < 10.0; }, [](const Tensor& c) { return c * 2.0; }, y),
                       none};
    }, y0, none, {.length = 3}).first);
  };
  auto unrolled = [](const Tensor& y0) {
    Tensor y = y0;
    for (int k = 0; k < 3; ++k)
      while (sum(y).item() < 10.0) y = y * 2.0;
    return sum(y);
  };
  const Tensor same = tensor({1.0, 2.0});    // 2 trips, then none: sum 12 >= 10
  test::check_close(f(same), unrolled(same), 1e-12, 1e-12, "value");
  const Tape t = trace(f, same);
  test::check_close(compile(t)({same})[0], unrolled(same), 1e-12, 1e-12, "compiled value");
  CHECK_THROWS_AS(play(grad_tape(t), {same}), GuardFailure);
  // Tracing again traces the body in the first iteration again: jit_grad gives up too.
  CHECK_THROWS_AS(jit_grad(f)(same), GuardFailure);
  // With the same count in every iteration (none after the first ran none), it holds.
  const Tensor large = tensor({6.0, 7.0});
  const Tape tl = trace(f, large);
  test::check_close(play(grad_tape(tl), {large})[1], ones({2}), 1e-12, 1e-12, "gradient with no trips");
}

TEST_CASE("Tracker: back through a scan and a while_loop that capture params reaches the params") {
  const Tensor W0 = randn({3, 3}, 1) * 0.4, b0 = randn({3}, 2), y0 = randn({3}, 3), xs = randn({4, 3}, 4);
  auto loss = [&](const Tensor& W, const Tensor& b) {
    const Tensor y = scan([&](const Tensor& h, const Tensor& x) { return std::pair{tanh(matmul(W, h) + x + b), none}; },
                          y0, xs).first;
    return sum(while_loop([](const Tensor& c) { return sum(c * c) < 30.0; }, [&](const Tensor& c) { return c * 1.5 + b; },
                          y));
  };
  const Tensor W = param(W0), b = param(b0);
  back(loss(W, b));
  const auto want = grad(loss, W0, b0);
  test::check_close(W.grad(), want.grads[0], 1e-12, 1e-12, "W.grad()");
  test::check_close(b.grad(), want.grads[1], 1e-12, 1e-12, "b.grad()");
  const std::vector<Tensor> fd =
      test::finite_diff([&](const std::vector<Tensor>& a) { return loss(a[0], a[1]); }, {W0, b0});
  test::check_close(W.grad(), fd[0], 1e-6, 1e-6, "W.grad() vs finite differences");
  test::check_close(b.grad(), fd[1], 1e-6, 1e-6, "b.grad() vs finite differences");
}

TEST_CASE("loops: errors name the operation, the expected and the given") {
  const Tensor x = randn({3}, 1);
  auto cond = [](const Tensor& c) { return sum(c) < 10.0; };
  // Carries whose types change in the body.
  CHECK_ERROR(while_loop(cond, [](const Tensor& c) { return sum(c); }, x), "while_loop", "carry 1", "f64[3]",
              "f64[]");
  CHECK_ERROR(while_loop(cond, [](const Tensor& c) { return cast(c, DType::f32); }, x), "while_loop", "carry 1",
              "f64[3]", "f32[3]");
  CHECK_ERROR(while_loop([](const std::vector<Tensor>& c) { return sum(c[0]) < 1.0; },
                         [](const std::vector<Tensor>& c) { return std::vector<Tensor>{c[0], c[0]}; },
                         std::vector<Tensor>{x}),
              "while_loop", "2 tensors", "expected 1");
  CHECK_ERROR(scan([](const Tensor& c, const Tensor& xt) { return std::pair{cast(c + xt, DType::f32), none}; }, x,
                   randn({2, 3}, 2)),
              "scan", "carry 1", "f64[3]", "f32[3]");
  CHECK_ERROR(fori_loop(0, 2, [](const Tensor&, const Tensor& c) { return reshape(c, {3, 1}); }, x), "scan", "carry 1",
              "f64[3]", "f64[3,1]");
  // A cond of more than one element.
  CHECK_ERROR(while_loop([](const Tensor& c) { return c < 10.0; }, [](const Tensor& c) { return c * 2.0; }, x),
              "while_loop", "one value of one element", "f64[3]");
  // xs of different lengths, and xs without a leading axis.
  CHECK_ERROR(scan([](const Tensor& c, const std::pair<Tensor, Tensor>& xt) { return std::pair{c + xt.first + xt.second, none}; },
                   x, std::pair{randn({4, 3}, 2), randn({5, 3}, 3)}),
              "scan", "xs 2", "f64[5,3]", "leading axis of 4");
  CHECK_ERROR(scan([](const Tensor& c, const Tensor& xt) { return std::pair{c + xt, none}; }, x, scalar(1.0)), "scan",
              "xs 1", "f64[]", "leading axis");
  CHECK_ERROR(scan([](const Tensor& c, const Tensor& xt) { return std::pair{c + xt, none}; }, x, randn({4, 3}, 2),
                   {.length = 5}),
              "scan", "length is 5", "4 slices");
  // Hand-written tapes: the checks of the type rules.
  const std::string body = "body={inp %1::f64[2]; %2 = sin(%1)::f64[2]; out %2}";
  CHECK_ERROR(parse_tape("inp %1::f64[3,2]\n%2 = scan(%1, " + body + ", length=2, num_consts=0, num_carry=0)::f64[3,2]\nout %2\n"),
              "scan", "xs 1 is f64[3,2]", "leading axis of the length 2");
  CHECK_ERROR(parse_tape("inp %1::f64[2]\n%2 = while_loop(%1, cond={inp %1::f64[2]; out %1}, " + body +
                         ", num_consts=0)::f64[2]\nout %2\n"),
              "while_loop", "one value of one element", "(f64[2])");
  CHECK_ERROR(parse_tape("inp %1::f64[2]\n%2 = while_loop(%1, cond={inp %1::f64[3]; %2 = sum(%1)::f64[]; out %2}, " +
                         body + ", num_consts=0)::f64[2]\nout %2\n"),
              "while_loop", "cond taking (f64[2])", "(f64[3])");
  CHECK_ERROR(parse_tape("inp %1::f64[2]\n%2 = while_loop(%1, cond={inp %1::f64[2]; %2 = sum(%1)::f64[]; out %2}, "
                         "body={inp %1::f64[2]; %2 = sum(%1)::f64[]; out %2}, num_consts=0)::f64[2]\nout %2\n"),
              "while_loop", "carry 1 enters the body as f64[2] and leaves it as f64[]");
  CHECK_ERROR(parse_tape("inp %1::f64[2]\n%2 = while_loop(%1, cond={inp %1::f64[2]; %2 = sum(%1)::f64[]; out %2}, " +
                         body + ", num_consts=1)::f64[2]\nout %2\n"),
              "while_loop", "num_consts in [0, 1)", "got 1");
  CHECK_ERROR(parse_tape("inp %1::f64[2]\n%2 = while_loop(%1, cond={inp %1::f64[2]; %2 = sum(%1)::f64[]; out %2}, " +
                         body + ", num_consts=0, trips=-1)::f64[2]\nout %2\n"),
              "while_loop", "trips >= 0", "-1");
}

TEST_CASE("while_loop: a hand-written tape runs, prints and parses back; its gradient needs trips") {
  // while sum(c) < 10: c = 2 c + k (k a const).
  const std::string loop =
      "%3 = while_loop(%1, %2, cond={inp %1::f64[2]; inp %2::f64[2]; %3 = sum(%2)::f64[]; %4 = const 10::f64[]; "
      "%5 = lt(%3, %4)::f64[]; out %5}, body={inp %1::f64[2]; inp %2::f64[2]; %3 = const 2::f64[]; "
      "%4 = mul(%2, %3)::f64[2]; %5 = add(%4, %1)::f64[2]; out %5}, num_consts=1";
  const std::string tail = ")::f64[2]\n%4 = sum(%3)::f64[]\nout %4";
  const Tape t = parse_tape("inp %1::f64[2]\ninp %2::f64[2]\n" + loop + tail);
  test::check_round_trip(t);
  CHECK(to_string(t) == "inp %1::f64[2]\ninp %2::f64[2]\n" + loop + tail);
  const Tensor k = tensor({0.5, 0.0}), x = tensor({1.0, 1.0});  // 2 -> 4.5 -> 9.5 -> 19.5: 3 trips
  // x_3 = 8 x + 7 k: d/dx = 8, d/dk = 7.
  test::check_close(play(t, {k, x})[0], scalar(19.5), 1e-12, 1e-12, "played");
  test::check_close(compile(t)({k, x})[0], scalar(19.5), 1e-12, 1e-12, "compiled");
  CHECK_ERROR(grad_tape(t), "grad", "while_loop has no trip count", "trips");
  const Tape with_trips = parse_tape("inp %1::f64[2]\ninp %2::f64[2]\n" + loop + ", trips=3" + tail);
  const Tape g = grad_tape(with_trips);
  test::check_round_trip(g);
  for (const auto& out : {play(g, {k, x}), compile(g)({k, x})}) {
    test::check_close(out[1], full({2}, 7.0), 1e-12, 1e-12, "d/dk");
    test::check_close(out[2], full({2}, 8.0), 1e-12, 1e-12, "d/dx");
  }
  CHECK_THROWS_AS(play(g, {k, tensor({3.0, 3.0})}), GuardFailure);
  CHECK_THROWS_AS(compile(g)({k, tensor({0.1, 0.1})}), GuardFailure);
  // Forward mode needs no trip count; its one loop computes primal and tangent together.
  const Tape j = jvp_tape(t);
  test::check_round_trip(j);
  CHECK(test::count_calls(j, "while_loop") == 1);
  CHECK(test::count_calls(g, "while_loop") == 0);
  CHECK(test::count_calls(g, "scan") == 2);  // forward and backward
  CHECK(test::count_calls(g, "guard") == 1);  // after the loop (the other is in the forward scan's body)
  test::check_close(play(j, {k, x, ones({2}), zeros({2})})[1], scalar(14.0), 1e-12, 1e-12, "jvp along k");
}

TEST_CASE("loops: integer consts and ys, carries nothing reads, results not used") {
  // An i64 const (indices) read by gather in the body; an i64 y (argmax per step).
  Tensor idx(DType::i64, {3});
  for (int i = 0; i < 3; ++i) idx.mutable_data<int64_t>()[i] = 2 - i;
  const Tensor xs = randn({4, 3}, 1), y0 = randn({3}, 2);
  auto rolled = [&](const Tensor& x, const Tensor& y) {
    const auto [c, ys] = scan([&](const std::pair<Tensor, Tensor>& c, const Tensor& xt) {
      const Tensor n = sin(gather(c.first, idx)) * xt + c.first * 0.5;
      return std::pair{std::pair{n, c.second * 0.0 + 1.0}, std::pair{argmax(n, 0), n * 2.0}};
    }, std::pair{y, y}, x);
    CHECK(ys.first.dtype() == DType::i64);
    return sum(ys.second) + sum(c.first);  // c.second and ys.first: no gradient
  };
  auto unrolled = [&](const Tensor& x, const Tensor& y) {
    Tensor c = y, total = sum(y * 0.0);
    for (int64_t t = 0; t < 4; ++t) {
      c = sin(gather(c, idx)) * index(x, t) + c * 0.5;
      total = total + sum(c * 2.0);
    }
    return total + sum(c);
  };
  check_unrolled("i64 const and ys", rolled, unrolled, {xs, y0});
}

TEST_CASE("loops: carries of two dtypes (f32 and f64) in one loop") {
  const Tensor a = randn({3}, 1), b = cast(randn({3}, 2), DType::f32);
  using C = std::pair<Tensor, Tensor>;
  auto rolled = [](const Tensor& x, const Tensor& y) {
    const C s = scan([](const C& c, const None&) {
      return std::pair{C{sin(c.first) + cast(c.second, DType::f64) * 0.5, cos(c.second) * 0.9f}, none};
    }, C{x, y}, none, {.length = 3}).first;
    const C w = while_loop([](const C& c) { return sum(c.first) < 100.0; },
                           [](const C& c) { return C{c.first * 2.0 + 1.0, c.second + cast(sum(c.first), DType::f32)}; },
                           s);
    return sum(w.first) + cast(sum(w.second), DType::f64);
  };
  auto unrolled = [](const Tensor& x, const Tensor& y) {
    Tensor p = x, q = y;
    for (int i = 0; i < 3; ++i) std::tie(p, q) = std::pair{sin(p) + cast(q, DType::f64) * 0.5, cos(q) * 0.9f};
    while (sum(p).item() < 100.0) std::tie(p, q) = std::pair{p * 2.0 + 1.0, q + cast(sum(p), DType::f32)};
    return sum(p) + cast(sum(q), DType::f64);
  };
  test::check_close(rolled(a, b), unrolled(a, b), 1e-6, 1e-6, "value");
  const Tape t = trace(rolled, a, b);
  const std::vector<Tensor> g = play(grad_tape(t), {a, b}), gu = play(grad_tape(trace(unrolled, a, b)), {a, b});
  check_all_close(g, gu, 1e-5, "gradients");
  check_all_close(compile(grad_tape(t))({a, b}), gu, 1e-5, "compiled gradients");
  CHECK(g[2].dtype() == DType::f32);
}

TEST_CASE("while_loop inside reel::checkpoint, and a checkpoint inside a while_loop's body") {
  const Tensor W = randn({3, 3}, 1) * 0.5, x0 = tensor({0.3, -0.2, 0.4});
  auto grow = [](const Tensor& w, const Tensor& c) { return tanh(matmul(w, c)) + c * 1.2; };
  auto cond = [](const Tensor& c) { return sum(c * c) < 25.0; };
  check_unrolled("while inside checkpoint",
                 [&](const Tensor& w, const Tensor& x) {
                   auto block = checkpoint([&](const Tensor& y) {
                     return while_loop(cond, [&](const Tensor& c) { return grow(w, c); }, y);
                   });
                   return sum(block(x) * x);
                 },
                 [&](const Tensor& w, const Tensor& x) {
                   Tensor c = x;
                   while (sum(c * c).item() < 25.0) c = grow(w, c);
                   return sum(c * x);
                 },
                 {W, x0});
  check_unrolled("checkpoint inside while",
                 [&](const Tensor& w, const Tensor& x) {
                   auto step = checkpoint([&](const Tensor& c) { return grow(w, c); });
                   return sum(while_loop(cond, [&](const Tensor& c) { return step(c); }, x));
                 },
                 [&](const Tensor& w, const Tensor& x) {
                   Tensor c = x;
                   while (sum(c * c).item() < 25.0) c = grow(w, c);
                   return sum(c);
                 },
                 {W, x0});
}

