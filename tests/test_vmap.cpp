// reel::vmap and vector-mode forward (jvp_tape(tape, k)): against a loop of the function
// over the batch, through composition with grad, jit and itself, and bad input.
#include <reel/reel.hpp>

#include "test_util.hpp"

using namespace reel;

namespace {

// f applied to each slice j of the batched arguments (axis `axis` of each), the results
// stacked on a new leading axis.
Tensor loop_of(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& args,
               const std::vector<int>& axes) {
  int64_t n = -1;
  for (std::size_t i = 0; i < args.size(); ++i)
    if (axes[i] >= 0) n = args[i].shape()[static_cast<std::size_t>(axes[i])];
  std::vector<Tensor> rows;
  for (int64_t j = 0; j < n; ++j) {
    std::vector<Tensor> a;
    for (std::size_t i = 0; i < args.size(); ++i) a.push_back(axes[i] >= 0 ? index(args[i], j, axes[i]) : args[i]);
    rows.push_back(reshape(f(a), [&] {
      Shape s = f(a).shape();
      s.insert(s.begin(), 1);
      return s;
    }()));
  }
  return concat(rows, 0);
}

// A function using elementwise operations, broadcasting, reductions along an axis, a
// matrix product, reshapes and a slice.
Tensor mixed(const Tensor& x, const Tensor& W) {
  const Tensor h = tanh(matmul(W, x) + 0.5);                       // [4]
  const Tensor r = reshape(h, {2, 2});
  return sum(r * r, {0}) + slice(h, 1, 3) * max(x) + mean(exp(x)); // [2]
}

struct VLayer {
  Tensor W, b;
};
REEL_FIELDS(VLayer, W, b)

}  // namespace

TEST_CASE("vmap: a batch at once equals a loop over it, interpreted and compiled") {
  const Tensor xs = randn({5, 3}, 1), W = randn({4, 3}, 2), Ws = randn({5, 4, 3}, 3);
  auto f = [](const std::vector<Tensor>& a) { return mixed(a[0], a[1]); };
  SUBCASE("x batched, W shared") {
    const Tensor got = vmap(mixed, {0, none})(xs, W);
    test::check_close(got, loop_of(f, {xs, W}, {0, -1}), 1e-14, 1e-14, "vmap");
  }
  SUBCASE("both batched") {
    const Tensor got = vmap(mixed)(xs, Ws);
    test::check_close(got, loop_of(f, {xs, Ws}, {0, 0}), 1e-14, 1e-14, "vmap");
  }
  SUBCASE("W batched only, on its last axis; the output's batch axis last") {
    const Tensor Wl = permute(Ws, {1, 2, 0});  // [4, 3, 5]
    const Tensor got = vmap(mixed, {none, -1}, 1)(index(xs, 0), Wl);
    test::check_close(got, transpose(loop_of(f, {index(xs, 0), Wl}, {-1, 2})), 1e-14, 1e-14, "vmap");
  }
  SUBCASE("the batched tape compiles to the same values") {
    const Tape t = trace(mixed, index(xs, 0), W);
    const Tape b = vmap_tape(t, std::vector<bool>{true, false}, 5);
    CHECK(b.input_types()[0].shape == Shape{5, 3});
    CHECK(b.input_types()[1].shape == Shape{4, 3});
    test::check_round_trip(b);
    const auto out = test::run_checked(b, {xs, W});
    test::check_close(out[0], loop_of(f, {xs, W}, {0, -1}), 1e-12, 1e-13, "compiled");
  }
}

TEST_CASE("vmap: structs and tuples of tensors, plain arguments, several outputs") {
  const VLayer L{randn({2, 3}, 4), randn({2}, 5)};
  const Tensor xs = randn({4, 3}, 6);
  auto f = [](const VLayer& l, const Tensor& x, double scale) {
    const Tensor y = matmul(l.W, x) + l.b;
    return std::pair{y * scale, sum(y)};
  };
  const auto [ys, ss] = vmap(f, {none, 0, none})(L, xs, 2.0);
  CHECK(ys.shape() == Shape{4, 2});
  CHECK(ss.shape() == Shape{4});
  for (int64_t j = 0; j < 4; ++j) {
    const auto [y, s] = f(L, index(xs, j), 2.0);
    test::check_close(index(ys, j), y, 1e-14, 1e-14, "y");
    test::check_close(index(ss, j), s, 1e-14, 1e-14, "s");
  }
  // A batched struct: every leaf along axis 0.
  const VLayer Ls{randn({4, 2, 3}, 7), randn({4, 2}, 8)};
  const auto [ys2, ss2] = vmap(f, {0, 0, none})(Ls, xs, 1.0);
  for (int64_t j = 0; j < 4; ++j) {
    const auto [y, s] = f(VLayer{index(Ls.W, j), index(Ls.b, j)}, index(xs, j), 1.0);
    test::check_close(index(ys2, j), y, 1e-14, 1e-14, "y, batched struct");
  }
}

TEST_CASE("vmap composes: per-example gradients, grad of vmap, vmap of vmap, jit") {
  const Tensor xs = randn({6, 3}, 9), W = randn({4, 3}, 10);
  auto loss = [](const Tensor& x, const Tensor& W) { return sum(square(tanh(matmul(W, x)))); };
  SUBCASE("vmap(grad): per-example gradients") {
    const Tensor per = vmap([&](const Tensor& x) { return grad(loss, x, W).grads[1]; })(xs);
    CHECK(per.shape() == Shape{6, 4, 3});
    for (int64_t j = 0; j < 6; ++j)
      test::check_close(index(per, j), grad(loss, index(xs, j), W).grads[1], 1e-13, 1e-14, "per-example");
  }
  SUBCASE("grad(vmap): the gradient of a batched sum is the sum of the gradients") {
    const auto g = grad([&](const Tensor& W) { return sum(vmap(loss, {0, none})(xs, W)); }, W);
    Tensor want = zeros({4, 3});
    for (int64_t j = 0; j < 6; ++j) want = want + grad(loss, index(xs, j), W).grads[1];
    test::check_close(g.grads[0], want, 1e-12, 1e-13, "grad of vmap");
    const auto fd = test::finite_diff([&](const std::vector<Tensor>& a) { return sum(vmap(loss, {0, none})(xs, a[0])); },
                                      {W});
    test::check_close(g.grads[0], fd[0], 1e-6, 1e-7, "finite differences");
  }
  SUBCASE("vmap(vmap): a batch of batches") {
    const Tensor xss = randn({2, 6, 3}, 11);
    const Tensor got = vmap(vmap(loss, {0, none}), {0, none})(xss, W);
    CHECK(got.shape() == Shape{2, 6});
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 6; ++j)
        CHECK(index(index(got, i), j).item() == doctest::Approx(loss(index(index(xss, i), j), W).item()).epsilon(1e-13));
  }
  SUBCASE("jit(vmap) compiles and caches it; simplegrad of it") {
    auto jf = jit(vmap(loss, {0, none}));
    const Tensor a = jf(xs, W), b = jf(xs * 2.0, W);
    test::check_close(a, vmap(loss, {0, none})(xs, W), 1e-12, 1e-13, "jit");
    test::check_close(b, vmap(loss, {0, none})(xs * 2.0, W), 1e-12, 1e-13, "jit, second call");
    auto sg = simplegrad([&](const Tensor& W) { return sum(vmap(loss, {0, none})(xs, W)); }, W);
    test::check_close(sg(W)[1], grad([&](const Tensor& W) { return sum(vmap(loss, {0, none})(xs, W)); }, W).grads[0],
                      1e-12, 1e-13, "simplegrad");
  }
}

TEST_CASE("vmap: a primitive without a batching rule runs once per batch element") {
  // A user's primitive with no batching rule, neither elementwise: the pass falls back
  // to a scan over the batch.
  static const Primitive& twice = register_primitive(Primitive{
      .name = "test_vmap_twice_rows",
      .arity = 1,
      .infer = [](std::span<const VarType> in, const Attrs&) { return in[0]; },
      .eager = [](std::span<const Tensor> in, const Attrs&) { return Tensor(in[0].values().size() ? in[0] * 2.0 : in[0]); },
      .structure = Structure::opaque,
  });
  TapeBuilder b;
  const Var x = b.input({DType::f64, {3}});
  b.set_outputs({b.call(twice, {b.call("sin", {x})})});
  const Tape t = b.finish();
  const Tape bt = vmap_tape(t, std::vector<bool>{true}, 4);
  CHECK(to_string(bt).find("scan(") != std::string::npos);
  const Tensor xs = randn({4, 3}, 12);
  test::check_close(play(bt, {xs})[0], sin(xs) * 2.0, 1e-15, 0, "fallback");
}

TEST_CASE("jvp_tape(tape, k): k directional derivatives in one pass") {
  const Tensor x = randn({3}, 13), W = randn({4, 3}, 14);
  const Tape t = trace(mixed, x, W);
  const Tape j1 = jvp_tape(t), jk = jvp_tape(t, 5);
  const Tensor tx = randn({5, 3}, 15), tW = randn({5, 4, 3}, 16);
  const auto out = test::run_checked(jk, {x, W, tx, tW});
  REQUIRE(out.size() == 2);
  CHECK(out[1].shape() == Shape{5, 2});
  for (int64_t j = 0; j < 5; ++j) {
    const auto one = play(j1, {x, W, index(tx, j), index(tW, j)});
    test::check_close(out[0], one[0], 0, 0, "value");
    test::check_close(index(out[1], j), one[1], 1e-12, 1e-13, "tangent");
  }
  CHECK_ERROR(jvp_tape(t, -1), "jvp", "k >= 0", "-1");
}

TEST_CASE("vmap: bad input is a reel::Error naming what was expected and given") {
  auto f = [](const Tensor& x, const Tensor& y) { return x + y; };
  CHECK_ERROR(vmap(f)(randn({3, 2}, 1), randn({4, 2}, 2)), "vmap", "batch size 3", "got 4");
  CHECK_ERROR(vmap(f, {0})(randn({3, 2}, 1), randn({3, 2}, 2)), "vmap", "expected 2 in_axes", "got 1");
  CHECK_ERROR(vmap(f, {2, 0})(randn({3, 2}, 1), randn({3, 2}, 2)), "vmap", "in_axes 2", "out of range", "f64[3,2]");
  CHECK_ERROR(vmap(f, none)(randn({3, 2}, 1), randn({3, 2}, 2)), "vmap", "at least one batched argument");
  CHECK_ERROR(vmap(f, 0, 3)(randn({3, 2}, 1), randn({3, 2}, 2)), "vmap", "out_axes", "out of range");
  // Shapes f rejects on a slice are f's errors, as without vmap.
  CHECK_ERROR(vmap(f)(randn({3, 2}, 1), randn({3, 5}, 2)), "add");
  const Tape t = trace([](const Tensor& x) { return sin(x); }, randn({2}, 3));
  CHECK_ERROR(vmap_tape(t, std::vector<bool>{true}, -2), "vmap", "batch size >= 0", "-2");
  CHECK_ERROR(vmap_tape(t, std::vector<bool>{}, 2), "vmap", "expected 1 batched flags", "got 0");
}

TEST_CASE("vmap: values read inside f, guards in loop bodies, empty batches, no directions") {
  // A value read with item() is the first element's: a guard that every element has it.
  auto f = [](const Tensor& x) { return x * x.item(); };
  CHECK_THROWS_AS(vmap(f)(tensor({1.0, 2.0, 3.0})), GuardFailure);
  test::check_close(vmap(f)(tensor({2.0, 2.0})), tensor({4.0, 4.0}), 0, 0, "equal elements");
  // A guard inside a loop body that reads a batched value holds for every element, even
  // where no carry is batched.
  auto g = [](const Tensor& w) {
    return fori_loop(0, 3, [&](const Tensor& i, const Tensor& c) {
      return (sum(w) - cast(i, DType::f64) > 0.0) ? c + 1.0 : c - 1.0;
    }, scalar(0.0));
  };
  CHECK(vmap(g)(tensor({10.0, 20.0})).values() == std::vector<double>{3, 3});
  CHECK_THROWS_AS(vmap(g)(tensor({10.0, 0.5})), GuardFailure);
  CHECK_THROWS_AS(jit(vmap(g))(tensor({10.0, 0.5})), GuardFailure);
  // reel::vmap traces f on an element: an empty batch is an error (vmap_tape takes any size).
  CHECK_ERROR(vmap(f)(zeros({0})), "vmap", "at least one element", "size 0");
  // Vector-mode forward and Jacobians with no directions, through a loop.
  auto h = [](const Tensor& x) {
    return fori_loop(0, 3, [](const Tensor&, const Tensor& c) { return sin(c) + c; }, x);
  };
  const Tape t = trace(h, randn({3}, 20));
  const auto out = test::run_checked(jvp_tape(t, 0), {randn({3}, 21), zeros({0, 3})});
  test::check_close(out[0], h(randn({3}, 21)), 0, 0, "value");
  CHECK(out[1].shape() == Shape{0, 3});
  CHECK(jacfwd(h, zeros({0})).jacobian.shape() == Shape{0, 0});
  CHECK(jacrev(h, zeros({0})).jacobian.shape() == Shape{0, 0});
  CHECK_ERROR(SparseJacobian{}.dense(), "dense", "empty");
}
