// Issue 33, items 1 and 3. (1) Loops carrying an i64 tensor (an argmax of the state, a
// counter) beside f64 state: the float carries, consts and xs get their gradients (the
// i64 carry none), through scan, fori_loop, while_loop, checkpointing, compile_grad,
// jit_grad, jacrev, hessian, Tracker's back, vmap of grad and a re-rolled plain loop,
// each against the same loop written in plain C++ (unrolled), finite differences,
// forward mode or REEL_REROLL=0. (3) grad of a vmapped while_loop, with one trip count
// for the batch and with a trip count per batch element, against vmap of grad and a
// loop of grads.
#include <cmath>

#include "test_util.hpp"

using namespace reel;

namespace {

using Carry = std::pair<Tensor, Tensor>;  // (an i64 index, the f64 state): the i64 carry first

// One step: the previous argmax picks the element added back; the next carry is the new
// argmax. Shared by the loops and the plain C++ loops they are compared with.
Carry argmax_step(const Carry& c, const Tensor& x) {
  const Tensor next = sin(c.second) * 1.5 + x * c.second + gather(c.second, c.first) * 0.25;
  return {argmax(next), next};
}

Tensor loss_of(const Carry& c, const Tensor& ys) { return sum(c.second * c.second) + sum(ys) * 0.5 + cast(c.first, DType::f64); }

// A scan over xs' rows carrying (argmax, state), ys the state times x.
Tensor scan_loss(const Tensor& s0, const Tensor& xs, const ScanOptions& options = {}) {
  const auto [c, ys] = scan([](const Carry& c, const Tensor& x) {
    const Carry next = argmax_step(c, x);
    return std::pair{next, next.second * x};
  }, Carry{argmax(s0), s0}, xs, options);
  return loss_of(c, ys);
}

// The same in plain C++.
Tensor unrolled_loss(const Tensor& s0, const Tensor& xs, bool reverse = false) {
  Carry c{argmax(s0), s0};
  const int64_t n = xs.shape()[0];
  std::vector<Tensor> ys(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = reverse ? n - 1 - i : i;
    c = argmax_step(c, index(xs, k));
    ys[static_cast<std::size_t>(k)] = c.second * index(xs, k);
  }
  return loss_of(c, stack(ys));
}

void check_all_close(const std::vector<Tensor>& got, const std::vector<Tensor>& want, double tol,
                     const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) test::check_close(got[i], want[i], tol, tol, fmt::format("{} {}", what, i));
}

const Tensor& state0() {
  static const Tensor s = tensor({0.3, -0.4, 0.2});
  return s;
}
const Tensor& xs0() {
  static const Tensor x = tensor({0.5, 0.9, -0.3, 0.2, 0.7, 0.4, -0.6, 0.1, 0.8, 0.3, 0.5, -0.2, 0.6, 0.4, 0.9}, {5, 3});
  return x;
}

// The gradients of unrolled_loss at (s0, xs): traced without loops, the reference.
std::vector<Tensor> unrolled_grads(const Tensor& s0, const Tensor& xs, bool reverse = false) {
  const test::NoReroll keep;  // (a plain loop is re-rolled into a scan otherwise)
  return grad([reverse](const Tensor& s, const Tensor& x) { return unrolled_loss(s, x, reverse); }, s0, xs).grads;
}

}  // namespace

TEST_CASE("issue 33.1: scan carrying an argmax beside f64 state: gradient of the state (the issue's example)") {
  // 3 steps of (argmax(state), state * 2): the state ends as 8 x, so d sum / dx = 8.
  auto f = [](const Tensor& x) {
    return sum(scan([](const Carry& c, const None&) { return std::pair{Carry{argmax(c.second), c.second * 2.0}, none}; },
                    Carry{argmax(x), x}, none, {.length = 3}).first.second);
  };
  const Tensor x = tensor({1.0, 2.0});
  test::check_close(grad(f, x).grads[0], tensor({8.0, 8.0}), 0, 0, "grad, the i64 carry first");
  // The i64 carry second was right before; it stays so.
  auto g = [](const Tensor& x) {
    using Swapped = std::pair<Tensor, Tensor>;  // (state, argmax)
    return sum(scan([](const Swapped& c, const None&) { return std::pair{Swapped{c.first * 2.0, argmax(c.first)}, none}; },
                    Swapped{x, argmax(x)}, none, {.length = 3}).first.first);
  };
  test::check_close(grad(g, x).grads[0], tensor({8.0, 8.0}), 0, 0, "grad, the i64 carry second");
  // Forward mode agrees.
  test::check_close(jvp(f, {x}, {tensor({1.0, 0.5})}).tangent, scalar(12.0), 0, 0, "jvp");
}

TEST_CASE("issue 33.1: scan carrying an argmax beside f64 state: gradients of the state and xs, forward and reverse") {
  for (bool reverse : {false, true}) {
    CAPTURE(reverse);
    const auto got = grad([reverse](const Tensor& s, const Tensor& x) { return scan_loss(s, x, {.reverse = reverse}); },
                          state0(), xs0());
    const auto want = unrolled_grads(state0(), xs0(), reverse);
    test::check_close(got.value, unrolled_loss(state0(), xs0(), reverse), 1e-12, 1e-12, "value");
    check_all_close(got.grads, want, 1e-12, "grad vs the unrolled loop");
    // Through the gradient tape, interpreted and compiled (run_checked), and finite differences.
    (void)test::check_gradient([reverse](const std::vector<Tensor>& a) { return scan_loss(a[0], a[1], {.reverse = reverse}); },
                               {state0(), xs0()}, "scan", 1e-6, 1e-7);
    // Forward mode along a direction is the gradient's dot product with it.
    const Tensor ds = tensor({0.3, -1.0, 0.7}), dx = randn({5, 3}, 7);
    const JvpResult j = jvp([reverse](const Tensor& s, const Tensor& x) { return scan_loss(s, x, {.reverse = reverse}); },
                            {state0(), xs0()}, {ds, dx});
    test::check_close(j.tangent, sum(got.grads[0] * ds) + sum(got.grads[1] * dx), 1e-12, 1e-12, "jvp vs grad");
  }
}

TEST_CASE("issue 33.1: fori_loop carrying an argmax beside f64 state: gradients of the state and the captured xs") {
  auto f = [](const Tensor& s0, const Tensor& xs) {
    const Carry c = fori_loop(0, 5, [&](const Tensor& k, const Carry& c) { return argmax_step(c, gather(xs, k)); },
                              Carry{argmax(s0), s0});
    return sum(c.second * c.second) + cast(c.first, DType::f64);
  };
  auto plain = [](const Tensor& s0, const Tensor& xs) {
    Carry c{argmax(s0), s0};
    for (int64_t k = 0; k < 5; ++k) c = argmax_step(c, index(xs, k));
    return sum(c.second * c.second) + cast(c.first, DType::f64);
  };
  const auto got = grad(f, state0(), xs0());
  GradResult want;
  {
    const test::NoReroll keep;
    want = grad(plain, state0(), xs0());
  }
  test::check_close(got.value, want.value, 1e-12, 1e-12, "value");
  check_all_close(got.grads, want.grads, 1e-12, "grad vs the plain loop");
  CHECK(sum(abs(got.grads[0])).item() > 0.1);  // (not the zeros of the issue)
  (void)test::check_gradient([&](const std::vector<Tensor>& a) { return f(a[0], a[1]); }, {state0(), xs0()},
                             "fori_loop");
}

TEST_CASE("issue 33.1: while_loop carrying an i64 counter beside f64 state: gradient of the state") {
  // The counter n indexes the state: while n < 3, s = sin(s) * 1.5 + s * 0.5 + s[n] * 0.25.
  auto f = [](const Tensor& s0) {
    const Carry c = while_loop([](const Carry& c) { return cast(c.first, DType::f64) < 3.0; },
                               [](const Carry& c) {
                                 return Carry{cast(cast(c.first, DType::f64) + 1.0, DType::i64),
                                              sin(c.second) * 1.5 + c.second * 0.5 + gather(c.second, c.first) * 0.25};
                               },
                               Carry{cast(scalar(0.0), DType::i64), s0});
    return sum(c.second * c.second);
  };
  auto plain = [](const Tensor& s0) {
    Tensor s = s0;
    for (int64_t n = 0; n < 3; ++n) s = sin(s) * 1.5 + s * 0.5 + index(s, n) * 0.25;
    return sum(s * s);
  };
  const auto got = grad(f, state0());
  GradResult want;
  {
    const test::NoReroll keep;
    want = grad(plain, state0());
  }
  test::check_close(got.value, want.value, 1e-12, 1e-12, "value");
  test::check_close(got.grads[0], want.grads[0], 1e-12, 1e-12, "grad vs the plain loop");
  (void)test::check_gradient([&](const std::vector<Tensor>& a) { return f(a[0]); }, {state0()}, "while_loop");
  // A cond on the float state, the argmax carried first.
  auto g = [](const Tensor& s0) {
    const Carry c = while_loop([](const Carry& c) { return sum(c.second) < 10.0; },
                               [](const Carry& c) { return argmax_step(c, scalar(1.2)); }, Carry{argmax(s0), s0});
    return sum(c.second) + cast(c.first, DType::f64);
  };
  auto g_plain = [](const Tensor& s0) {
    Carry c{argmax(s0), s0};
    while (sum(c.second).item() < 10.0) c = argmax_step(c, scalar(1.2));
    return sum(c.second) + cast(c.first, DType::f64);
  };
  const Tensor s1 = tensor({0.5, 1.0, 0.25});
  GradResult g_want;
  {
    const test::NoReroll keep;
    g_want = grad(g_plain, s1);
  }
  test::check_close(grad(g, s1).grads[0], g_want.grads[0], 1e-12, 1e-12, "grad, cond on the state");
}

TEST_CASE("issue 33.1: checkpointed scans (every k, sqrt, binomial) and reel::checkpoint with an argmax carry") {
  const auto want = unrolled_grads(state0(), xs0());
  for (const Checkpoint cp : {Checkpoint::every(2), Checkpoint::every(1), Checkpoint::every(5), Checkpoint::sqrt(),
                              Checkpoint::binomial(2)}) {
    CAPTURE(static_cast<int>(cp.kind));
    CAPTURE(cp.arg);
    auto f = [cp](const Tensor& s, const Tensor& x) { return scan_loss(s, x, {.checkpoint = cp}); };
    check_all_close(grad(f, state0(), xs0()).grads, want, 1e-12, "grad vs the unrolled loop");
    const Tape t = trace(f, state0(), xs0());
    check_all_close(compile(grad_tape(t))({state0(), xs0()}),
                    {unrolled_loss(state0(), xs0()), want[0], want[1]}, 1e-11, "compiled gradient");
  }
  // A checkpointed block returning (argmax, state), the i64 result first.
  auto block = checkpoint([](const Carry& c, const Tensor& x) { return argmax_step(c, x); });
  auto f = [&](const Tensor& s0, const Tensor& xs) {
    Carry c{argmax(s0), s0};
    std::vector<Tensor> ys;
    for (int64_t k = 0; k < 5; ++k) {
      c = block(c, index(xs, k));
      ys.push_back(c.second * index(xs, k));
    }
    return loss_of(c, stack(ys));
  };
  const test::NoReroll keep;
  check_all_close(grad(f, state0(), xs0()).grads, want, 1e-12, "reel::checkpoint: grad vs the unrolled loop");
}

TEST_CASE("issue 33.1: compile_grad, jit_grad, jacrev and hessian through a scan carrying an argmax") {
  auto f = [](const Tensor& s, const Tensor& x) { return scan_loss(s, x); };
  const auto want = unrolled_grads(state0(), xs0());
  const Tensor value = unrolled_loss(state0(), xs0());
  const auto once = compile_grad(f, state0(), xs0());
  check_all_close({once(state0(), xs0())[0], once(state0(), xs0())[1], once(state0(), xs0())[2]},
                  {value, want[0], want[1]}, 1e-11, "compile_grad");
  const auto cached = jit_grad(f);
  for (int call = 0; call < 2; ++call) {
    const auto r = cached(state0(), xs0());
    check_all_close({r[0], r[1], r[2]}, {value, want[0], want[1]}, 1e-11, "jit_grad");
  }
  // jacrev of the final state (reverse mode, one row per output element) against jacfwd
  // (forward mode) and the plain loop's jacrev.
  auto final_state = [](const Tensor& s0) {
    return scan([](const Carry& c, const Tensor& x) { return std::pair{argmax_step(c, x), none}; },
                Carry{argmax(s0), s0}, xs0()).first.second;
  };
  auto plain_state = [](const Tensor& s0) {
    Carry c{argmax(s0), s0};
    for (int64_t k = 0; k < 5; ++k) c = argmax_step(c, index(xs0(), k));
    return c.second;
  };
  const Tensor J = jacrev(final_state, state0()).jacobian;
  test::check_close(J, jacfwd(final_state, state0()).jacobian, 1e-12, 1e-12, "jacrev vs jacfwd");
  {
    const test::NoReroll keep;
    test::check_close(J, jacrev(plain_state, state0()).jacobian, 1e-12, 1e-12, "jacrev vs the plain loop's");
  }
  CHECK(sum(abs(J)).item() > 0.1);
  // The Hessian of the loss in the state (forward over reverse) against the plain loop's.
  auto loss_in_state = [](const Tensor& s) { return scan_loss(s, xs0()); };
  auto plain_in_state = [](const Tensor& s) { return unrolled_loss(s, xs0()); };
  const Hessian H = hessian(loss_in_state, state0());
  const test::NoReroll keep;
  const Hessian Hp = hessian(plain_in_state, state0());
  test::check_close(H.hessian, Hp.hessian, 1e-10, 1e-12, "hessian vs the plain loop's");
  test::check_close(H.grads[0], Hp.grads[0], 1e-12, 1e-12, "hessian's gradient");
  CHECK(sum(abs(H.hessian)).item() > 0.1);
}

TEST_CASE("issue 33.1: Tracker's back through a scan carrying an argmax reaches the params") {
  const Tensor s = param(state0()), x = param(xs0());
  back(scan_loss(s, x));
  const auto want = unrolled_grads(state0(), xs0());
  test::check_close(s.grad(), want[0], 1e-12, 1e-12, "state's grad()");
  test::check_close(x.grad(), want[1], 1e-12, 1e-12, "xs' grad()");
}

TEST_CASE("issue 33.1: vmap of grad through a scan carrying an argmax: per-example gradients") {
  const Tensor S = tensor({0.3, -0.4, 0.2, -0.1, 0.6, 0.25, 0.9, 0.1, -0.7}, {3, 3});
  const Tensor G = reel::vmap([](const Tensor& s) { return grad([](const Tensor& v) { return scan_loss(v, xs0()); }, s).grads[0]; })(S);
  for (int64_t j = 0; j < 3; ++j)
    test::check_close(index(G, j), unrolled_grads(index(S, j), xs0())[0], 1e-12, 1e-12, fmt::format("example {}", j));
}

TEST_CASE("issue 33.1: a plain C++ loop carrying an argmax, re-rolled into a scan, has the gradient of REEL_REROLL=0") {
  // 16 iterations, each reading the previous one's argmax: re-rolling folds them into a
  // scan whose first carry is that i64 argmax.
  auto loss = [](const Tensor& s0, const Tensor& xs) {
    Carry c{argmax(s0), s0};
    for (int64_t k = 0; k < xs.shape()[0]; ++k) {
      const Tensor shift = cast(c.first, DType::f64) * 0.125;  // (the body reads the i64 carry first)
      c = Carry{argmax(c.second), sin(c.second) * 1.5 + index(xs, k) * c.second + gather(c.second, c.first) * 0.25 + shift};
    }
    return sum(c.second * c.second) + cast(c.first, DType::f64);
  };
  const Tensor xs = randn({16, 3}, 5) * 0.3;
  const Tape t = test::trace_list([&](const std::vector<Tensor>& a) { return loss(a[0], a[1]); }, {state0(), xs});
  const Tape rolled = reroll(t);
  REQUIRE(test::count_calls(rolled, "scan") == 1);
  for (const Op& op : rolled.ops)
    if (op.kind == OpKind::call && op.prim->name == "scan") {
      const Tape& body = op.attrs.tape("body");
      REQUIRE(op.attrs.integer("num_carry") >= 2);
      CHECK_MESSAGE(body.type(body.outputs[0]).dtype == DType::i64, to_string(rolled));  // (the case of the issue)
    }
  Tape unrolled_grad;
  {
    const test::NoReroll keep;
    unrolled_grad = grad_tape(t);
  }
  const Tape g = grad_tape(t);  // re-rolled first
  CHECK(test::count_calls(g, "scan") >= 1);
  const std::vector<Tensor> want = play(unrolled_grad, {state0(), xs});
  check_all_close(test::run_checked(g, {state0(), xs}), want, 1e-11, "re-rolled gradient vs REEL_REROLL=0");
  CHECK(sum(abs(want[1])).item() > 0.1);
}

// ---- Item 3: grad of a vmapped while_loop ----

namespace {

// while sum(c) < 10: c = 1.5 c + 0.1, so d sum(grow(x)) / dx = 1.5^trips elementwise.
Tensor grow(const Tensor& x) {
  return while_loop([](const Tensor& c) { return sum(c) < 10.0; }, [](const Tensor& c) { return c * 1.5 + 0.1; }, x);
}

int trips_of(const Tensor& x) {
  Tensor c = x;
  int trips = 0;
  for (; sum(c).item() < 10.0; ++trips) c = c * 1.5 + 0.1;
  return trips;
}

Tensor summed_vmap(const Tensor& X) { return sum(reel::vmap(grow)(X)); }

// Row j of X: 1.5^(its trip count).
Tensor expected_grad(const Tensor& X) {
  std::vector<double> g;
  for (int64_t j = 0; j < X.shape()[0]; ++j) {
    const double d = std::pow(1.5, trips_of(index(X, j)));
    for (int64_t i = 0; i < X.shape()[1]; ++i) g.push_back(d);
  }
  return tensor(g, X.shape());
}

}  // namespace

TEST_CASE("issue 33.3: grad of vmap of a while_loop with the same trip count in every batch element") {
  const Tensor X = tensor({1.0, 2.0, 1.1, 2.0, 0.5, 2.6}, {3, 2});  // sums 3, 3.1, 3.1: 3 trips each
  for (int64_t j = 0; j < 3; ++j) REQUIRE(trips_of(index(X, j)) == 3);
  const GradResult g = grad(summed_vmap, X);
  test::check_close(g.grads[0], full({3, 2}, std::pow(1.5, 3)), 1e-12, 1e-12, "grad of vmap");
  // vmap of grad, and a loop of grads, agree.
  const Tensor per = reel::vmap([](const Tensor& x) { return grad([](const Tensor& v) { return sum(grow(v)); }, x).grads[0]; })(X);
  test::check_close(g.grads[0], per, 1e-12, 1e-12, "grad of vmap vs vmap of grad");
  for (int64_t j = 0; j < 3; ++j)
    test::check_close(index(g.grads[0], j), grad([](const Tensor& v) { return sum(grow(v)); }, index(X, j)).grads[0],
                      1e-12, 1e-12, fmt::format("row {} vs its own grad", j));
  test::check_close(g.value, sum(reel::vmap(grow)(X)), 1e-12, 1e-12, "value");
}

TEST_CASE("issue 33.3: grad of vmap of a while_loop whose trip count differs per batch element") {
  // Sums 3, 0.5, 20, 3.1: 3, 7, 0 and 3 trips; each element masked after its own.
  const Tensor X = tensor({1.0, 2.0, 0.25, 0.25, 10.0, 10.0, 1.1, 2.0}, {4, 2});
  CHECK(trips_of(index(X, 1)) == 7);
  CHECK(trips_of(index(X, 2)) == 0);
  const GradResult g = grad(summed_vmap, X);
  test::check_close(g.grads[0], expected_grad(X), 1e-12, 1e-12, "grad of vmap");
  test::check_close(g.value, sum(reel::vmap(grow)(X)), 1e-12, 1e-12, "value");
  for (int64_t j = 0; j < 4; ++j)
    test::check_close(index(g.grads[0], j), grad([](const Tensor& v) { return sum(grow(v)); }, index(X, j)).grads[0],
                      1e-12, 1e-12, fmt::format("row {} vs its own grad", j));
  // (vmap of grad holds one trip count, element 0's: its guards fail for the others.)
  CHECK_THROWS_AS(reel::vmap([](const Tensor& x) { return grad([](const Tensor& v) { return sum(grow(v)); }, x).grads[0]; })(X),
                  GuardFailure);
  const std::vector<Tensor> fd = test::finite_diff([](const std::vector<Tensor>& a) { return summed_vmap(a[0]); }, {X});
  test::check_close(g.grads[0], fd[0], 1e-6, 1e-6, "grad of vmap vs finite differences");
  // Cached and compiled: a batch with another largest trip count traces again; one with
  // the same largest count (other counts per element) reuses the path.
  const auto cached = jit_grad(summed_vmap, JitOptions{.compile_after = 1});
  for (const Tensor& B : {X, tensor({0.25, 0.25, 1.0, 2.0, 20.0, 1.0, 0.5, 0.0}, {4, 2}),
                          tensor({1.0, 2.0, 1.0, 1.0, 1.0, 1.0, 9.0, 9.0}, {4, 2}), X}) {
    const auto r = cached(B);
    test::check_close(r[0], sum(reel::vmap(grow)(B)), 1e-12, 1e-12, "jit_grad value");
    test::check_close(r[1], expected_grad(B), 1e-12, 1e-12, "jit_grad gradient");
  }
  CHECK(cached.cache_info().misses == 2);  // largest counts 7, 7, 4, 7
  const auto once = compile_grad(summed_vmap, X);
  test::check_close(once(tensor({0.25, 0.25, 1.0, 2.0, 20.0, 1.0, 0.5, 0.0}, {4, 2}))[1],
                    expected_grad(tensor({0.25, 0.25, 1.0, 2.0, 20.0, 1.0, 0.5, 0.0}, {4, 2})), 1e-12, 1e-12,
                    "compile_grad, the same largest trip count");
  CHECK_THROWS_AS(once(tensor({1.0, 2.0, 1.0, 1.0, 1.0, 1.0, 9.0, 9.0}, {4, 2})), GuardFailure);
}

TEST_CASE("issue 33.3: a batched while_loop differentiated without a run has an error naming vmap and the trip counts") {
  // vmap_tape batches a traced loop without running it: its trip count per batch element
  // is not known, and grad says so in the user's terms.
  const Tape t = trace([](const Tensor& x) { return sum(grow(x)); }, tensor({1.0, 2.0}));
  const bool batched[] = {true};
  const Tape v = vmap_tape(t, batched, 4);  // (one sum per batch element: vjp_tape seeds them)
  CHECK_ERROR(vjp_tape(v), "while_loop", "vmap", "trip count", "batch element", "vmap of grad");
}
