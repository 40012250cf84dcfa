// Checkpointing: reel::checkpoint (a function recomputed in the backward pass) and
// scan's checkpoint policies (every k, sqrt, binomial), against the same functions
// storing everything (values, gradients, f32 and f64), finite differences, second
// order, forward mode, compiled against interpreted, print/parse round trips, that the
// recomputation happens (a counting primitive in the body; the gradient tapes' shapes),
// Revolve's schedule against the optimum, and errors.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>

#include <reel/ir/revolve.hpp>

#include "test_util.hpp"

using namespace reel;

namespace {

void check_all_close(const std::vector<Tensor>& a, const std::vector<Tensor>& b, double tol, const std::string& what) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) test::check_close(a[i], b[i], tol, tol, fmt::format("{} {}", what, i));
}

// sin, counting its eager calls: how often a body really runs.
std::atomic<int> sin_calls{0};
Tensor counted_sin(const Tensor& x) {
  static const bool registered = [] {
    define_primitive({.name = "test_counted_sin",
                      .eager = [](std::span<const Tensor> x, const Attrs&) {
                        ++sin_calls;
                        return sin(x[0]);
                      },
                      .vjp = [](const std::vector<Tensor>& x, const Tensor&, const Tensor& dy, const Attrs&) {
                        return std::vector<Tensor>{dy * cos(x[0])};
                      },
                      .jvp = [](const std::vector<Tensor>& x, const Tensor&, const std::vector<Tensor>& t,
                                const Attrs&) { return t[0] * cos(x[0]); }});
    return true;
  }();
  (void)registered;
  return reel::apply("test_counted_sin", std::vector<Tensor>{x});
}

// The largest leading axis among the values of rank >= 2 on a tape (not inside bodies): the stacks.
int64_t largest_stack(const Tape& t) {
  int64_t n = 0;
  for (const Op& op : t.ops)
    if (op.type.shape.size() >= 2) n = std::max(n, op.type.shape[0]);
  return n;
}

// A block worth checkpointing: y = tanh(W x) * 0.5 + sin(x) * x.
Tensor block(const Tensor& W, const Tensor& x) { return tanh(matmul(W, x)) * 0.5 + sin(x) * x; }

// The scan the policies are checked on: y_{t+1} = tanh(W y_t + x_t) / 2 + y_t / 2, ys sin(y).
Tensor scan_loss(const Tensor& W, const Tensor& y0, const Tensor& xs, ScanOptions o) {
  const auto [y, ys] = scan([&](const Tensor& y, const Tensor& x) {
    const Tensor next = tanh(matmul(W, y) + x) * 0.5 + y * 0.5;
    return std::pair{next, sin(next)};
  }, y0, xs, o);
  return sum(y * y) + sum(ys * 0.3);
}

std::vector<std::pair<std::string, Checkpoint>> policies() {
  return {{"every(1)", Checkpoint::every(1)},     {"every(2)", Checkpoint::every(2)},
          {"every(3)", Checkpoint::every(3)},     {"every(100)", Checkpoint::every(100)},
          {"sqrt", Checkpoint::sqrt()},           {"binomial(1)", Checkpoint::binomial(1)},
          {"binomial(2)", Checkpoint::binomial(2)}, {"binomial(3)", Checkpoint::binomial(3)},
          {"binomial(100)", Checkpoint::binomial(100)}};
}

// Revolve's minimal number of advances to reverse l steps with c snapshots, by dynamic
// programming over the first split: F(1, c) = 0, F(l, 1) = l (l - 1) / 2,
// F(l, c) = min over 0 < m < l of m + F(l - m, c - 1) + F(m, c).
int64_t fewest_advances(int64_t l, int64_t c, std::map<std::pair<int64_t, int64_t>, int64_t>& memo) {
  if (l <= 1) return 0;
  if (c == 1) return l * (l - 1) / 2;
  const auto key = std::pair{l, c};
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  int64_t best = INT64_MAX;
  for (int64_t m = 1; m < l; ++m)
    best = std::min(best, m + fewest_advances(l - m, c - 1, memo) + fewest_advances(m, c, memo));
  return memo[key] = best;
}

}  // namespace

TEST_CASE("checkpoint: values and gradients equal the function's, f64 and f32, and finite differences") {
  for (DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? 1e-13 : 1e-6;
    const Tensor W = cast(randn({4, 4}, 1) * 0.5, dt), x = cast(randn({4}, 2), dt);
    auto plain = [](const Tensor& w, const Tensor& x0) { return sum(block(w, block(w, x0))); };
    auto ckpt = [](const Tensor& w, const Tensor& x0) {
      const auto f = checkpoint([&](const Tensor& v) { return block(w, v); });  // w is captured
      return sum(f(f(x0)));
    };
    test::check_close(ckpt(W, x), plain(W, x), tol, tol, "eager value");
    const auto g = grad(ckpt, W, x), gp = grad(plain, W, x);
    test::check_close(g.value, gp.value, tol, tol, "value");
    check_all_close(g.grads, gp.grads, tol, "grads");
    if (dt == DType::f64) {
      const std::vector<Tensor> fd =
          test::finite_diff([&](const std::vector<Tensor>& a) { return plain(a[0], a[1]); }, {W, x});
      check_all_close(g.grads, fd, 1e-6, "finite differences");
    }
  }
}

TEST_CASE("checkpoint: trees in and out, captured tensors, plain arguments") {
  const Tensor a = randn({3}, 1), b = randn({3}, 2), c = randn({3}, 3);
  auto plain = [](const Tensor& a0, const Tensor& b0, const Tensor& c0) {
    const Tensor u = sin(a0) * c0 + b0 * 2.0, v = a0 * b0 * 3.0;
    return sum(u * v) + sum(exp(v * 0.1));
  };
  auto ckpt = [](const Tensor& a0, const Tensor& b0, const Tensor& c0) {
    const auto f = checkpoint([&](const std::pair<Tensor, Tensor>& p, double scale) {
      return std::tuple{sin(p.first) * c0 + p.second * 2.0, p.first * p.second * scale};
    });
    const auto [u, v] = f(std::pair{a0, b0}, 3.0);
    return sum(u * v) + sum(exp(v * 0.1));
  };
  test::check_close(ckpt(a, b, c), plain(a, b, c), 1e-14, 1e-14, "value");
  check_all_close(grad(ckpt, a, b, c).grads, grad(plain, a, b, c).grads, 1e-13, "grads");
}

TEST_CASE("checkpoint: the gradient tape recomputes (a call of the body's gradient), prints, parses and compiles") {
  const Tensor W = randn({4, 4}, 1) * 0.5, x = randn({4}, 2);
  auto f = [](const Tensor& w, const Tensor& x0) {
    const auto g = checkpoint([&](const Tensor& v) { return counted_sin(matmul(w, v)) * v; });
    return sum(g(g(x0)));
  };
  auto stored = [](const Tensor& w, const Tensor& x0) {
    auto g = [&](const Tensor& v) { return counted_sin(matmul(w, v)) * v; };
    return sum(g(g(x0)));
  };
  const Tape t = trace(f, W, x);
  CHECK(test::count_calls(t, "checkpoint") == 2);
  test::check_round_trip(t);
  const Tape gt = grad_tape(t);
  CHECK(test::count_calls(gt, "checkpoint") == 2);  // the forward part
  CHECK(test::count_calls(gt, "call") == 2);        // the backward part: each body again, and its gradient
  CHECK(test::count_calls(gt, "test_counted_sin") == 0);
  test::check_round_trip(gt);
  const std::vector<Tensor> args{W, x};
  sin_calls = 0;
  const std::vector<Tensor> played = play(gt, args);
  CHECK(sin_calls == 4);  // 2 forward + 2 recomputed
  const Tape stored_gt = grad_tape(trace(stored, W, x));
  sin_calls = 0;
  const std::vector<Tensor> want = play(stored_gt, args);
  CHECK(sin_calls == 2);  // stored: each once
  check_all_close(played, want, 1e-13, "checkpointed against stored");
  check_all_close(compile(gt)(args), played, 1e-12, "compiled against interpreted");
  check_all_close(compile(parse_tape(to_string(gt)))(args), played, 1e-12, "parsed, compiled");
}

TEST_CASE("checkpoint: grad of grad, jvp and hvp equal the function's") {
  const Tensor W = randn({3, 3}, 1) * 0.5, x = randn({3}, 2), tW = randn({3, 3}, 3), tx = randn({3}, 4);
  auto plain = [](const Tensor& w, const Tensor& x0) { return sum(block(w, block(w, x0)) * x0); };
  auto ckpt = [](const Tensor& w, const Tensor& x0) {
    const auto f = checkpoint([&](const Tensor& v) { return block(w, v); });
    return sum(f(f(x0)) * x0);
  };
  const auto j = jvp(ckpt, {W, x}, {tW, tx}), jp = jvp(plain, {W, x}, {tW, tx});
  test::check_close(j.value, jp.value, 1e-13, 1e-13, "jvp value");
  test::check_close(j.tangent, jp.tangent, 1e-12, 1e-12, "jvp tangent");
  CHECK(test::count_calls(jvp_tape(trace(ckpt, W, x)), "checkpoint") == 2);  // the tangent is a checkpoint too
  const auto h = hvp(ckpt, {W, x}, {tW, tx}), hp = hvp(plain, {W, x}, {tW, tx});
  check_all_close(h.grads, hp.grads, 1e-12, "hvp grads");
  check_all_close(h.hvp, hp.hvp, 1e-11, "hvp");
  auto gsum = [&](const Tensor& v) { return sum(grad(ckpt, W, v).grads[0]); };
  auto gsum_p = [&](const Tensor& v) { return sum(grad(plain, W, v).grads[0]); };
  test::check_close(grad(gsum, x).grads[0], grad(gsum_p, x).grads[0], 1e-11, 1e-11, "grad of grad");
  // The second-order gradient tape still recomputes: calls in it, interpreted = compiled.
  const Tape gg = grad_tape(trace(gsum, x));
  CHECK(test::count_calls(gg, "call") >= 2);
  test::check_round_trip(gg);
  check_all_close(compile(gg)({x}), play(gg, {x}), 1e-11, "grad of grad compiled");
}

TEST_CASE("checkpoint: params for reel::back, cached gradients (jit_grad), untraced calls") {
  const Tensor W0 = randn({3, 3}, 1) * 0.5, x = randn({3}, 2);
  auto plain = [&](const Tensor& w) { return sum(block(w, block(w, x))); };
  const Tensor want = grad(plain, W0).grads[0];
  // A param captured by the checkpointed function gets its gradient through back.
  Tensor W = param(W0 * 1.0);
  const auto f = checkpoint([&](const Tensor& v) { return block(W, v); });
  back(sum(f(f(x))));
  test::check_close(W.grad(), want, 1e-13, 1e-13, "back through a checkpoint");
  // A cached gradient (compiled after its first calls) of a function with checkpoints.
  auto g = jit_grad([](const Tensor& w, const Tensor& v) {
    const auto c = checkpoint([&](const Tensor& u) { return block(w, u); });
    return sum(c(c(v)));
  });
  for (int i = 0; i < 3; ++i) test::check_close(g(W0, x)[1], want, 1e-12, 1e-12, "jit_grad");
  // f of no tensors: nothing to record.
  const auto constant = checkpoint([] { return ones({2}) * 3.0; });
  test::check_close(constant(), ones({2}) * 3.0, 0, 0, "no arguments");
}

TEST_CASE("scan checkpoint policies: gradients equal storing everything, any length, forward and reverse") {
  const Tensor W = randn({4, 4}, 1) * 0.4;
  for (int64_t n : {0, 1, 2, 7, 10}) {
    const Tensor y0 = randn({4}, 2), xs = randn({n, 4}, 3);
    for (bool reverse : {false, true}) {
      auto stored = [&](const Tensor& w, const Tensor& y, const Tensor& x) {
        return scan_loss(w, y, x, {.reverse = reverse});
      };
      const auto want = grad(stored, W, y0, xs);
      for (const auto& [name, policy] : policies()) {
        CAPTURE(n);
        CAPTURE(reverse);
        CAPTURE(name);
        auto ckpt = [&](const Tensor& w, const Tensor& y, const Tensor& x) {
          return scan_loss(w, y, x, {.reverse = reverse, .checkpoint = policy});
        };
        const auto g = grad(ckpt, W, y0, xs);
        test::check_close(g.value, want.value, 1e-14, 1e-14, name + " value");
        check_all_close(g.grads, want.grads, 1e-13, name + " grads");
      }
    }
  }
}

TEST_CASE("scan checkpoint policies: f32, finite differences, compiled, round trips") {
  const Tensor W = randn({3, 3}, 1) * 0.4, y0 = randn({3}, 2), xs = randn({9, 3}, 3);
  const std::vector<Tensor> args{W, y0, xs};
  auto stored = [](const Tensor& w, const Tensor& y, const Tensor& x) { return scan_loss(w, y, x, {}); };
  const std::vector<Tensor> fd = test::finite_diff(
      [&](const std::vector<Tensor>& a) { return stored(a[0], a[1], a[2]); }, args);
  std::vector<Tensor> args32;
  for (const Tensor& t : args) args32.push_back(cast(t, DType::f32));
  const auto want32 = grad(stored, args32[0], args32[1], args32[2]);
  for (const auto& [name, policy] : policies()) {
    CAPTURE(name);
    auto ckpt = [policy](const Tensor& w, const Tensor& y, const Tensor& x) {
      return scan_loss(w, y, x, {.checkpoint = policy});
    };
    check_all_close(grad(ckpt, W, y0, xs).grads, fd, 1e-6, name + " vs finite differences");
    check_all_close(grad(ckpt, args32[0], args32[1], args32[2]).grads, want32.grads, 1e-5, name + " f32");
    const Tape gt = grad_tape(trace(ckpt, W, y0, xs));
    test::check_round_trip(gt);
    const std::vector<Tensor> played = play(gt, args);
    check_all_close(compile(gt)(args), played, 1e-12, name + " compiled");
    check_all_close(play(parse_tape(to_string(gt)), args), played, 0, name + " parsed");
  }
}

TEST_CASE("scan checkpoint policies: the forward part keeps O(N / k) carries and the backward recomputes") {
  constexpr int64_t n = 100;
  const Tensor x0 = randn({8}, 1);
  auto run = [](Checkpoint policy) {
    return [policy](const Tensor& x) {
      const auto [y, ys] = scan([](const Tensor& c, const None&) {
        return std::pair{counted_sin(c) * 1.01 + square(c) * 0.001, none};
      }, x, none, {.length = n, .checkpoint = policy});
      return sum(y);
    };
  };
  const Tape stored = grad_tape(trace(run({}), x0));
  CHECK(largest_stack(stored) == n);  // the residuals, stacked
  sin_calls = 0;
  const std::vector<Tensor> want = play(stored, {x0});
  CHECK(sin_calls == n);
  // every 7: 14 segments of 7 (their carries stored, each recomputed once), 2 left over (stored).
  const Tape every = grad_tape(trace(run(Checkpoint::every(7)), x0));
  CHECK(largest_stack(every) == 14);
  sin_calls = 0;
  check_all_close(play(every, {x0}), want, 1e-13, "every(7)");
  CHECK(sin_calls == 2 * 98 + 2);
  const Tape sq = grad_tape(trace(run(Checkpoint::sqrt()), x0));
  CHECK(largest_stack(sq) == 10);
  sin_calls = 0;
  check_all_close(play(sq, {x0}), want, 1e-13, "sqrt");
  CHECK(sin_calls == 2 * n);
  // binomial: nothing stacked; the plain forward, Revolve's advances, one turn per step.
  std::map<std::pair<int64_t, int64_t>, int64_t> memo;
  for (int64_t snapshots : {1, 2, 3, 5, 10, 200}) {
    CAPTURE(snapshots);
    const Tape bin = grad_tape(trace(run(Checkpoint::binomial(snapshots)), x0));
    CHECK(largest_stack(bin) == 0);
    CHECK(test::count_calls(bin, "revolve") == 1);
    test::check_round_trip(bin);
    sin_calls = 0;
    check_all_close(play(bin, {x0}), want, 1e-13, "binomial");
    CHECK(sin_calls == n + fewest_advances(n, snapshots, memo) + n);
  }
}

TEST_CASE("revolve schedule: each step turned once, last first, within the snapshots, with the fewest advances") {
  std::map<std::pair<int64_t, int64_t>, int64_t> memo;
  for (int64_t snapshots = 1; snapshots <= 6; ++snapshots)
    for (int64_t steps = 0; steps <= 60; ++steps) {
      CAPTURE(snapshots);
      CAPTURE(steps);
      // Simulated states: slot -> the step it is before (-1: empty).
      std::vector<int64_t> slot(static_cast<std::size_t>(snapshots) + 1, -1);
      slot[0] = 0;
      int64_t advances = 0, next_turn = steps - 1;
      int used = 1;
      bool ok = true;
      revolve(steps, snapshots,
              {.advance = [&](int from_slot, int64_t from, int to_slot, int64_t to) {
                 ok = ok && from_slot != to_slot && slot.at(static_cast<std::size_t>(from_slot)) == from && from < to;
                 slot.at(static_cast<std::size_t>(to_slot)) = to;
                 if (to_slot != snapshots) used = std::max(used, to_slot + 1);
                 advances += to - from;
               },
               .turn = [&](int s, int64_t step) {
                 ok = ok && slot.at(static_cast<std::size_t>(s)) == step && step == next_turn;
                 --next_turn;
               }});
      CHECK(ok);
      CHECK(next_turn == -1);
      CHECK(used <= snapshots);
      CHECK(advances == fewest_advances(steps, snapshots, memo));
      CHECK(advances == revolve_advances(steps, snapshots));
    }
  CHECK(revolve_advances(1000000, 1000) == 3 * 1000000 - 1003 * 1002 / 2);  // t = 3: 3 l - C(1003, 2)
  CHECK_ERROR(revolve(5, 0, {}), "revolve", "snapshots >= 1", "got 5 and 0");
}

TEST_CASE("binomial: the number of advances is Revolve's minimum for every length and number of snapshots") {
  std::map<std::pair<int64_t, int64_t>, int64_t> memo;
  const Tensor x0 = randn({2}, 1);
  for (int64_t snapshots = 1; snapshots <= 5; ++snapshots)
    for (int64_t n = 2; n <= 40; ++n) {  // (n = 1: nothing to recompute, stored)
      CAPTURE(snapshots);
      CAPTURE(n);
      auto f = [&](const Tensor& x) {
        return sum(fori_loop(0, n, [](const Tensor&, const Tensor& c) { return counted_sin(c) + c * 0.5; }, x,
                             {.checkpoint = Checkpoint::binomial(snapshots)}));
      };
      const Tape gt = grad_tape(trace(f, x0));
      sin_calls = 0;
      play(gt, {x0});
      CHECK(sin_calls == 2 * n + fewest_advances(n, snapshots, memo));
    }
}

TEST_CASE("scan checkpoint policies: fori_loop's counter, consts, several carries and ys") {
  const Tensor table = randn({12, 3}, 1), x0 = randn({3}, 2), z0 = randn({3}, 3);
  for (const auto& [name, policy] : policies()) {
    CAPTURE(name);
    for (bool reverse : {false, true}) {
      auto f = [&](Checkpoint p) {
        return [p, reverse](const Tensor& t, const Tensor& x, const Tensor& z) {
          const auto c = fori_loop(2, 11, [&](const Tensor& i, const std::pair<Tensor, Tensor>& c) {
            return std::pair{c.first * gather(t, i) + sin(c.second), c.second * 0.9 + c.first * 0.1};
          }, std::pair{x, z}, {.reverse = reverse, .checkpoint = p});
          return sum(c.first * c.second);
        };
      };
      const auto g = grad(f(policy), table, x0, z0), want = grad(f({}), table, x0, z0);
      test::check_close(g.value, want.value, 1e-14, 1e-14, name + " value");
      check_all_close(g.grads, want.grads, 1e-13, name + " grads");
    }
    // i64 xs (indices into the table), reversed, with ys.
    const Tensor rows = tensor({3, 0, 7, 7, 1, 11, 4, 2}, {8}, DType::i64);
    auto h = [&](Checkpoint p) {
      return [&, p](const Tensor& t, const Tensor& x) {
        const auto [c, ys] = scan([&](const Tensor& c, const Tensor& i) {
          const Tensor next = sin(c * gather(t, i)) + c * 0.5;
          return std::pair{next, sum(next)};
        }, x, rows, {.reverse = true, .checkpoint = p});
        return sum(c) + sum(ys * ys);
      };
    };
    check_all_close(grad(h(policy), table, x0).grads, grad(h({}), table, x0).grads, 1e-13, name + " i64 xs");
  }
}

TEST_CASE("scan checkpoint policies: second order (grad of grad, hvp) and forward mode") {
  const Tensor W = randn({3, 3}, 1) * 0.4, y0 = randn({3}, 2), xs = randn({7, 3}, 3);
  const Tensor tW = randn({3, 3}, 4), ty = randn({3}, 5), tx = randn({7, 3}, 6);
  auto with = [](Checkpoint p) {
    return [p](const Tensor& w, const Tensor& y, const Tensor& x) { return scan_loss(w, y, x, {.checkpoint = p}); };
  };
  const auto stored = with({});
  const auto j0 = jvp(stored, {W, y0, xs}, {tW, ty, tx});
  const auto h0 = hvp(stored, {W, y0, xs}, {tW, ty, tx});
  auto gsum = [&](auto f) { return [&, f](const Tensor& y) { return sum(grad(f, W, y, xs).grads[0]); }; };
  const Tensor gg0 = grad(gsum(stored), y0).grads[0];
  for (const auto& [name, policy] : policies()) {
    CAPTURE(name);
    const auto f = with(policy);
    const auto j = jvp(f, {W, y0, xs}, {tW, ty, tx});
    test::check_close(j.tangent, j0.tangent, 1e-12, 1e-12, name + " jvp");
    const auto h = hvp(f, {W, y0, xs}, {tW, ty, tx});
    check_all_close(h.hvp, h0.hvp, 1e-11, name + " hvp");
    test::check_close(grad(gsum(f), y0).grads[0], gg0, 1e-11, 1e-11, name + " grad of grad");
  }
}

TEST_CASE("checkpoint and scan policies nest: a checkpoint inside a scan inside a checkpoint") {
  const Tensor W = randn({3, 3}, 1) * 0.4, x = randn({3}, 2);
  auto nested = [](const Tensor& w, const Tensor& x0) {
    const auto inner = checkpoint([&](const Tensor& y) { return block(w, y) * 0.5; });
    const auto outer = checkpoint([&](const Tensor& v) {
      return scan([&](const Tensor& c, const None&) { return std::pair{inner(c), sum(c)}; }, v, none,
                  {.length = 5, .checkpoint = Checkpoint::every(2)});
    });
    const auto [y, ys] = outer(x0);
    return sum(y * y) + sum(ys);
  };
  auto unrolled = [](const Tensor& w, const Tensor& x0) {
    Tensor y = x0, total = zeros({});
    for (int i = 0; i < 5; ++i) total = total + sum(y), y = block(w, y) * 0.5;
    return sum(y * y) + total;
  };
  test::check_close(nested(W, x), unrolled(W, x), 1e-13, 1e-13, "value");
  const auto g = grad(nested, W, x), gu = grad(unrolled, W, x);
  check_all_close(g.grads, gu.grads, 1e-12, "grads");
  const Tape gt = grad_tape(trace(nested, W, x));
  test::check_round_trip(gt);
  check_all_close(compile(gt)({W, x}), play(gt, {W, x}), 1e-12, "compiled");
  auto gsum = [&](auto f) { return [&, f](const Tensor& v) { return sum(grad(f, W, v).grads[0]); }; };
  test::check_close(grad(gsum(nested), x).grads[0], grad(gsum(unrolled), x).grads[0], 1e-10, 1e-10, "grad of grad");
}

TEST_CASE("checkpoint errors: bad policies and bodies name the operation, the expected and the given") {
  const Tensor y0 = randn({3}, 1);
  auto run = [&](Checkpoint p) {
    return scan([](const Tensor& y, const None&) { return std::pair{sin(y), none}; }, y0, none,
                {.length = 4, .checkpoint = p});
  };
  CHECK_ERROR(run(Checkpoint::every(0)), "scan", "checkpoint=\"every\"", "Checkpoint::every(k)) >= 1", "got 0");
  CHECK_ERROR(run(Checkpoint::every(-3)), "scan", "checkpoint=\"every\"", "got -3");
  CHECK_ERROR(run(Checkpoint::binomial(0)), "scan", "checkpoint=\"binomial\"", "snapshots", ">= 1", "got 0");
  const std::string body = "body={inp %1::f64[3]; %2 = sin(%1)::f64[3]; out %2}, length=4, num_consts=0, num_carry=1";
  CHECK_ERROR(parse_tape("inp %1::f64[3]\n%2 = scan(%1, " + body + ", checkpoint=\"often\")::f64[3]\nout %2\n"),
              "scan", "expected checkpoint", "\"every\"", "got \"often\"");
  CHECK_ERROR(parse_tape("inp %1::f64[3]\n%2 = scan(%1, " + body + ", checkpoint=\"sqrt\", checkpoint_arg=2)::f64[3]\n"
                         "out %2\n"),
              "scan", "sqrt", "takes no checkpoint_arg", "got 2");
  CHECK_ERROR(parse_tape("inp %1::f64[3]\n%2 = scan(%1, " + body + ", checkpoint=\"every\")::f64[3]\nout %2\n"),
              "scan", "every", "got none");
  CHECK_ERROR(parse_tape("inp %1::f64[3]\n%2 = checkpoint(%1, body={inp %1::f64[2]; out %1})::f64[2]\nout %2\n"),
              "checkpoint", "expected arguments (f64[2])", "got (f64[3])");
  CHECK_ERROR(parse_tape("inp %1::f64[3]\n%2 = call(%1, body={inp %1::f64[3]; inp %2::f64[3]; out %1})::f64[3]\n"
                         "out %2\n"),
              "call", "expected arguments (f64[3], f64[3])", "got (f64[3])");
}
