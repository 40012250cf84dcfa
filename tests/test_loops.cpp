// Loops as loops: reel::scan and reel::fori_loop against the same loops unrolled
// (values, gradients, forward mode, second order; interpreted and compiled; f32 and
// f64), print/parse round trips, and errors.
#include <cmath>

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
