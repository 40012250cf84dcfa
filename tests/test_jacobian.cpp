// Jacobians (jacfwd, jacrev, jacobian), Hessians, sparse Jacobians and vector-mode jvp:
// against finite differences and each other, cached and compiled vs interpreted, nested,
// and their errors.
#include <cmath>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>

#include "reel/custom.hpp"
#include "reel/ir/body_tape.hpp"
#include "reel/jacobian.hpp"
#include "test_prims.hpp"
#include "test_util.hpp"

using namespace reel;
using namespace reel::test;

struct Affine {
  Tensor W, b;
  double scale = 1;
};
REEL_FIELDS(Affine, W, b, scale)

namespace {

// Central differences of output `o` of fn (a list of outputs) with respect to argument
// k: shape output shape + argument shape.
Tensor fd_jacobian(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                   const std::vector<Tensor>& args, std::size_t o, std::size_t k, double h = 1e-6) {
  const std::vector<double> base = args[k].values();
  const Shape out_shape = fn(args)[o].shape();
  const int64_t m = numel(out_shape), n = static_cast<int64_t>(base.size());
  std::vector<double> j(static_cast<std::size_t>(m * n));
  for (int64_t c = 0; c < n; ++c) {
    auto shifted = [&](double d) {
      std::vector<double> v = base;
      v[static_cast<std::size_t>(c)] += d;
      std::vector<Tensor> a = args;
      a[k] = tensor(v, args[k].shape(), args[k].dtype());
      return fn(a)[o].values();
    };
    const std::vector<double> up = shifted(h), down = shifted(-h);
    for (int64_t r = 0; r < m; ++r)
      j[static_cast<std::size_t>(r * n + c)] = (up[static_cast<std::size_t>(r)] - down[static_cast<std::size_t>(r)]) / (2 * h);
  }
  Shape s = out_shape;
  s.insert(s.end(), args[k].shape().begin(), args[k].shape().end());
  return tensor(j, s);
}

// Two arguments, two outputs of different shapes.
std::tuple<Tensor, Tensor> two_out(const Tensor& x, const Tensor& W) {
  const Tensor h = tanh(matmul(W, x)) * sum(x);
  return {h, sin(W) * x + square(W)};
}

std::vector<Tensor> two_out_list(const std::vector<Tensor>& a) {
  auto [h, g] = two_out(a[0], a[1]);
  return {h, g};
}

Tensor scalar_fn(const Tensor& x, const Tensor& y) { return sum(sin(x) * square(x)) * sum(y * x) + prod(y); }

void check_blocks(const Jacobian& J, const std::vector<Tensor>& args, const std::string& what) {
  REQUIRE(J.blocks.size() == 2);
  for (std::size_t o = 0; o < 2; ++o)
    for (std::size_t k = 0; k < 2; ++k)
      check_close(J.blocks[o][k], fd_jacobian(two_out_list, args, o, k), 1e-6, 1e-7,
                  fmt::format("{}: block [{}][{}]", what, o, k));
}

}  // namespace

TEST_CASE("jacobian: jacfwd and jacrev against finite differences, blocks and shapes") {
  const Tensor x = randn({3}, 1), W = randn({4, 3}, 2);
  const std::vector<Tensor> args{x, W};
  const Jacobian F = jacfwd(two_out, x, W), R = jacrev(two_out, x, W), A = jacobian(two_out, x, W);
  CHECK(F.blocks[0][0].shape() == Shape{4, 3});
  CHECK(F.blocks[0][1].shape() == Shape{4, 4, 3});
  CHECK(F.blocks[1][0].shape() == Shape{4, 3, 3});
  CHECK(F.blocks[1][1].shape() == Shape{4, 3, 4, 3});
  check_close(F.values[0], two_out_list(args)[0], 1e-12, 1e-12, "jacfwd value");
  check_close(R.values[1], two_out_list(args)[1], 1e-12, 1e-12, "jacrev value");
  check_blocks(F, args, "jacfwd");
  check_blocks(R, args, "jacrev");
  check_blocks(A, args, "jacobian");
  for (std::size_t o = 0; o < 2; ++o)
    for (std::size_t k = 0; k < 2; ++k) check_close(F.blocks[o][k], R.blocks[o][k], 1e-12, 1e-12, "jacfwd == jacrev");
  // One argument, one output: .jacobian; f32.
  const Tensor x32 = randn({5}, 3, DType::f32);
  const Jacobian J = jacobian([](const Tensor& v) { return exp(v) * sum(v); }, x32);
  CHECK(J.jacobian.dtype() == DType::f32);
  check_close(J.jacobian, jacrev([](const Tensor& v) { return exp(v) * sum(v); }, x32).jacobian, 1e-5, 1e-5,
              "f32 forward vs reverse");
  // A scalar output: the Jacobian is the gradient; 0-d argument: shape of the output.
  const Jacobian S = jacrev([](const Tensor& v) { return sum(sin(v)); }, x);
  check_close(S.jacobian, grad([](const Tensor& v) { return sum(sin(v)); }, x).grads[0], 1e-12, 1e-12, "scalar");
}

TEST_CASE("jacobian: i64 arguments get no block") {
  const Tensor x = randn({4}, 5);
  const Tensor idx = tensor({2, 0}, {2}, DType::i64);
  const auto f = [](const Tensor& v, const Tensor& i) { return gather(v, i) * 3.0; };
  for (const Jacobian& J : {jacfwd(f, x, idx), jacrev(f, x, idx)}) {
    REQUIRE(J.blocks[0].size() == 2);
    CHECK(!J.blocks[0][1].defined());
    check_close(J.jacobian, tensor({0, 0, 3, 0, 3, 0, 0, 0}, {2, 4}), 0, 0, "gather's Jacobian");
  }
}

TEST_CASE("hessian: symmetric, against finite differences of the gradient") {
  const Tensor x = randn({4}, 7), y = randn({4}, 8);
  const Hessian H = hessian(scalar_fn, x, y);
  CHECK(H.value.item() == doctest::Approx(scalar_fn(x, y).item()));
  const GradResult g = grad(scalar_fn, x, y);
  check_close(H.grads[0], g.grads[0], 1e-12, 1e-12, "hessian's gradient");
  REQUIRE(H.blocks.size() == 2);
  auto grads = [](const std::vector<Tensor>& a) { return grad(scalar_fn, a[0], a[1]).grads; };
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 2; ++j) {
      CHECK(H.blocks[i][j].shape() == Shape{4, 4});
      check_close(H.blocks[i][j], fd_jacobian(grads, {x, y}, i, j), 1e-5, 1e-6,
                  fmt::format("H[{}][{}] vs finite differences of the gradient", i, j));
      // Symmetric: H[i][j] = H[j][i]^T.
      check_close(H.blocks[i][j], transpose(H.blocks[j][i]), 1e-12, 1e-12, "symmetric");
    }
  // A matrix argument: shape W + W.
  const Tensor W = randn({2, 3}, 9);
  const Hessian HW = hessian([](const Tensor& w) { return sum(tanh(w) * w); }, W);
  CHECK(HW.hessian.shape() == Shape{2, 3, 2, 3});
}

TEST_CASE("jacobian: jacobian of jacobian, grad of jacobian") {
  const Tensor x = randn({3}, 11);
  const auto f = [](const Tensor& v) { return sin(v) * sum(square(v)); };
  // d/dx of the Jacobian: [3, 3, 3], against finite differences of the Jacobian.
  const auto jac = [&](const Tensor& v) { return jacfwd(f, v).jacobian; };
  const Jacobian JJ = jacobian(jac, x);
  CHECK(JJ.jacobian.shape() == Shape{3, 3, 3});
  check_close(JJ.jacobian, fd_jacobian([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{jac(a[0])}; },
                                       {x}, 0, 0),
              1e-5, 1e-6, "jacobian(jacobian)");
  const Jacobian JJr = jacrev([&](const Tensor& v) { return jacrev(f, v).jacobian; }, x);
  check_close(JJr.jacobian, JJ.jacobian, 1e-10, 1e-10, "jacrev(jacrev) == jacobian(jacfwd)");
  // jacobian of the gradient = the Hessian.
  const auto s = [](const Tensor& v) { return sum(sin(v) * square(v)); };
  const Jacobian JG = jacobian([&](const Tensor& v) { return grad(s, v).grads[0]; }, x);
  check_close(JG.jacobian, hessian(s, x).hessian, 1e-10, 1e-10, "jacobian(grad) == hessian");
  // grad of a function of a Jacobian.
  const GradResult g = grad([&](const Tensor& v) { return sum(jacrev(f, v).jacobian); }, x);
  check_close(g.grads[0], sum(JJ.jacobian, std::vector<int64_t>{0, 1}), 1e-10, 1e-10, "grad(sum(jacobian))");
}

TEST_CASE("jit_jacobian and jit_hessian: cached, compiled vs interpreted") {
  const Tensor x = randn({3}, 21), W = randn({4, 3}, 22);
  auto jf = jit_jacobian(two_out);
  const Jacobian first = jf(x, W);   // traced and interpreted
  const Jacobian second = jf(x, W);  // compiled
  const Jacobian plain = jacobian(two_out, x, W);
  for (std::size_t o = 0; o < 2; ++o)
    for (std::size_t k = 0; k < 2; ++k) {
      check_close(first.blocks[o][k], plain.blocks[o][k], 1e-12, 1e-12, "interpreted");
      check_close(second.blocks[o][k], plain.blocks[o][k], 1e-10, 1e-12, "compiled");
    }
  CHECK(jf.cache_info().misses == 1);
  CHECK(jf.cache_info().hits == 1);
  CHECK(jf.cache_info().compilations == 1);
  // Another shape: another signature.
  const Tensor x2 = randn({2}, 23), W2 = randn({4, 2}, 24);
  check_close(jf(x2, W2).blocks[1][1], jacrev(two_out, x2, W2).blocks[1][1], 1e-10, 1e-12, "second signature");
  CHECK(jf.cache_info().misses == 2);

  auto jr = jit_jacrev(two_out, JitOptions{.compile_after = 1});
  check_close(jr(x, W).blocks[0][1], plain.blocks[0][1], 1e-10, 1e-12, "jit_jacrev compiled at once");

  auto jh = jit_hessian(scalar_fn);
  const Tensor y = randn({3}, 25);
  const Hessian h0 = hessian(scalar_fn, x, y);
  for (int call = 0; call < 3; ++call) {
    const Hessian h = jh(x, y);
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t j = 0; j < 2; ++j) check_close(h.blocks[i][j], h0.blocks[i][j], 1e-10, 1e-12, "jit_hessian");
  }
  CHECK(jh.cache_info().hits == 2);
  // Inside another trace: no cache, recorded on it.
  const Jacobian outer = jacobian([&](const Tensor& v) { return jf(v, W).blocks[0][0]; }, x);
  CHECK(outer.jacobian.shape() == Shape{4, 3, 3});
}

TEST_CASE("sparse jacobian: detected and given patterns, colouring, against dense") {
  // A banded function: out[i] depends on x[i-1], x[i], x[i+1].
  const int64_t n = 12;
  const auto f = [](const Tensor& v) {
    const int64_t len = v.shape()[0];
    const Tensor mid = slice(v, 1, len - 1);
    const Tensor inner = sin(slice(v, 0, len - 2)) * mid + square(slice(v, 2, len)) * mid;
    return concat({slice(v, 0, 1) * 2.0, inner, exp(slice(v, len - 1, len))});
  };
  const Tensor x = randn({n}, 31);
  const Sparsity s = detect_sparsity(f, x);
  CHECK(s.rows == n);
  CHECK(s.cols == n);
  CHECK(s.nnz() == 2 + 3 * (n - 2));
  CHECK(s.row_cols[5] == std::vector<int64_t>{4, 5, 6});
  const Colouring c = colour_columns(s);
  CHECK(c.count == 3);
  for (const auto& row : s.row_cols)  // columns sharing a row differ
    for (std::size_t a = 0; a < row.size(); ++a)
      for (std::size_t b = a + 1; b < row.size(); ++b)
        CHECK(c.colour[static_cast<std::size_t>(row[a])] != c.colour[static_cast<std::size_t>(row[b])]);
  const SparseJacobian J = sparse_jacobian(f, s, x);
  CHECK(J.colours == 3);
  const Tensor dense = jacobian(f, x).jacobian;
  check_close(J.dense(), dense, 1e-12, 1e-12, "sparse vs dense");
  CHECK(Sparsity::from_dense(dense).row_cols == s.row_cols);
  // Columns in several chunks (more than 256): the same band.
  const Sparsity big = detect_sparsity(f, randn({300}, 34));
  CHECK(big.nnz() == 2 + 3 * 298);
  CHECK(big.row_cols[290] == std::vector<int64_t>{289, 290, 291});
  CHECK(big.row_cols[299] == std::vector<int64_t>{299});
  // A coefficient that is zero here still counts (NaN * 0 is NaN): d(x0 * x1)/dx1 at x0 = 0.
  const Sparsity z = detect_sparsity([](const Tensor& v) { return slice(v, 0, 1) * slice(v, 1, 2); }, tensor({0.0, 2.0}));
  CHECK(z.row_cols[0] == std::vector<int64_t>{0, 1});
  // Cached: detected at the first call of each signature, compiled at the second.
  auto js = jit_sparse_jacobian(f);
  for (int call = 0; call < 3; ++call) check_close(js(x).dense(), dense, 1e-10, 1e-12, "jit_sparse_jacobian");
  CHECK(js.cache_info().hits == 2);
  // A given (denser) pattern works as well: a superset only costs colours.
  Sparsity full{n, n, std::vector<std::vector<int64_t>>(static_cast<std::size_t>(n))};
  for (auto& row : full.row_cols)
    for (int64_t col = 0; col < n; ++col) row.push_back(col);
  const SparseJacobian D = sparse_jacobian(f, full, x);
  CHECK(D.colours == n);
  check_close(D.dense(), dense, 1e-12, 1e-12, "full pattern");
  // Two arguments and two outputs: rows and columns concatenated.
  const Tensor W = randn({4, 3}, 32), v = randn({3}, 33);
  const auto g = [](const Tensor& a, const Tensor& w) {
    auto [h, k] = two_out(a, w);
    return std::vector<Tensor>{h, k};
  };
  const SparseJacobian G = sparse_jacobian(g, detect_sparsity(g, v, W), v, W);
  CHECK(G.pattern->rows == 4 + 12);
  CHECK(G.pattern->cols == 3 + 12);
  const Jacobian GD = jacobian(g, v, W);
  const Tensor Gd = G.dense();
  // Block [1][1] (d(sin(W) x + W^2)/dW) is rows 4.., columns 3..: elementwise in W.
  check_close(reshape(slice(slice(Gd, 0, 4, 16), 1, 3, 15), {4, 3, 4, 3}), GD.blocks[1][1], 1e-12, 1e-12,
              "two arguments, block [1][1]");
  check_close(reshape(slice(slice(Gd, 0, 0, 4), 1, 0, 3), {4, 3}), GD.blocks[0][0], 1e-12, 1e-12,
              "two arguments, block [0][0]");
}

TEST_CASE("jacobian: errors name the operation") {
  const Tensor x = randn({3}, 41);
  CHECK_THROWS_WITH_AS(hessian([](const Tensor& v) { return sin(v); }, x),
                       doctest::Contains("hessian: expected a function with one scalar (0-d) output, got f64[3]"),
                       Error);
  Sparsity bad{2, 3, {{0}, {1}}};
  CHECK_THROWS_WITH_AS(sparse_jacobian([](const Tensor& v) { return sin(v); }, bad, x),
                       doctest::Contains("sparse_jacobian: expected a sparsity pattern of 3 rows"), Error);
  Sparsity out_of_range{3, 3, {{0}, {5}, {2}}};
  CHECK_THROWS_WITH_AS(sparse_jacobian([](const Tensor& v) { return sin(v); }, out_of_range, x),
                       doctest::Contains("row 1 has column 5, expected 0 <= column < 3"), Error);
  const Tensor idx = tensor({1, 0}, {2}, DType::i64);
  CHECK_THROWS_WITH_AS(jacobian([](const Tensor& v, const Tensor& i) { return std::make_tuple(sum(v), i); }, x, idx),
                       doctest::Contains("jacobian: expected floating-point outputs, got output 2 of type i64[2]"),
                       Error);
}

TEST_CASE("jvp: vector mode, k directions in one pass") {
  const Tensor x = randn({3}, 51), W = randn({4, 3}, 52), tx = randn({5, 3}, 53), tW = randn({5, 4, 3}, 54);
  const auto f = [](const Tensor& a, const Tensor& w) { return tanh(matmul(w, a)) * sum(a); };
  const JvpResult r = jvp(f, {x, W}, {tx, tW});
  CHECK(r.tangent.shape() == Shape{5, 4});
  check_close(r.value, f(x, W), 1e-12, 1e-12, "value");
  for (int64_t d = 0; d < 5; ++d) {
    const JvpResult one = jvp(f, {x, W}, {index(tx, d), index(tW, d)});
    check_close(index(r.tangent, d), one.tangent, 1e-12, 1e-12, fmt::format("direction {}", d));
  }
  // = the Jacobian times the directions.
  const Jacobian J = jacfwd(f, x, W);
  const Tensor Jt = transpose(matmul(J.blocks[0][0], transpose(tx))) +
                    transpose(matmul(reshape(J.blocks[0][1], {4, 12}), transpose(reshape(tW, {5, 12}))));
  check_close(r.tangent, Jt, 1e-10, 1e-12, "J t");
  // A 0-d argument with k directions: [k].
  const JvpResult s = jvp([](const Tensor& a) { return sin(a) * 2.0; }, {tensor({0.5}, {})}, {tensor({1.0, 2.0, 3.0})});
  check_close(s.tangent, tensor({1.0, 2.0, 3.0}) * (2 * std::cos(0.5)), 1e-12, 1e-12, "0-d argument");
  // Inside a trace: a captured traced tensor gets zero tangents, and the derivative flows.
  const Tensor y = randn({3}, 55), T = randn({2, 3}, 56);
  const auto g = [&](const Tensor& v) {
    return sum(jvp([&](const Tensor& a) { return sin(a * v); }, {x}, {T}).tangent);
  };
  check_close(grad(g, y).grads[0], finite_diff([&](const std::vector<Tensor>& a) { return g(a[0]); }, {y})[0], 1e-6,
              1e-7, "grad of a vector jvp");
  // Directions of different counts.
  CHECK_THROWS_WITH_AS(jvp(f, {x, W}, {tx, randn({4, 4, 3}, 57)}),
                       doctest::Contains("jvp: tangent 2 must have its argument's type f64[4,3] (one direction) or, as "
                                         "tangent 1 has 5 directions, f64[5,4,3]; got f64[4,4,3]"),
                       Error);
}

TEST_CASE("jacobian: vmap of jacobian and hessian, jit of a function that takes one") {
  const Tensor xs = randn({4, 3}, 61), W = randn({2, 3}, 62);
  const auto f = [&](const Tensor& v) { return tanh(matmul(W, v)) * sum(v); };
  const auto per_example = vmap([&](const Tensor& v) { return jacfwd(f, v).jacobian; });
  const Tensor J = per_example(xs);
  CHECK(J.shape() == Shape{4, 2, 3});
  for (int64_t b = 0; b < 4; ++b)
    check_close(index(J, b), jacrev(f, index(xs, b)).jacobian, 1e-12, 1e-12, fmt::format("vmap(jacfwd) element {}", b));
  auto jit_per_example = jit(per_example);  // traced once, the batched tape compiled on the second call
  for (int call = 0; call < 3; ++call) check_close(jit_per_example(xs), J, 1e-10, 1e-12, "jit(vmap(jacfwd))");
  const auto s = [](const Tensor& v) { return sum(sin(v) * square(v)); };
  const Tensor H = vmap([&](const Tensor& v) { return hessian(s, v).hessian; })(xs);
  for (int64_t b = 0; b < 4; ++b)
    check_close(index(H, b), hessian(s, index(xs, b)).hessian, 1e-12, 1e-12, fmt::format("vmap(hessian) element {}", b));
  // jit of a function computing a Jacobian: traced once, compiled on the second call.
  auto jf = jit([&](const Tensor& v) { return jacrev(f, v).jacobian * 2.0; });
  const Tensor x = index(xs, 0);
  for (int call = 0; call < 3; ++call)
    check_close(jf(x), jacfwd(f, x).jacobian * 2.0, 1e-10, 1e-12, fmt::format("jit(jacrev) call {}", call));
  CHECK(jf.cache_info().compilations == 1);
}

TEST_CASE("jacobian: the derived tapes are batched, not looped, where the primitives have batching rules") {
  const Tensor x = randn({3}, 71), W = randn({4, 3}, 72);
  const Tape t = trace([](const Tensor& v, const Tensor& w) { return tanh(matmul(w, v)) * sum(v); }, x, W);
  const std::vector<Tensor> in{x, W};
  for (JacobianMode mode : {JacobianMode::forward, JacobianMode::reverse}) {
    const detail::Derived d = detail::JacobianDerivation{mode}.derive(t, 2, in);
    CHECK_MESSAGE(fmt::format("{}", d.tape).find("scan") == std::string::npos, fmt::format("{}", d.tape));
  }
  const Tape s = trace([](const Tensor& v) { return sum(tanh(v) * v); }, x);
  const detail::Derived h = detail::HessianDerivation{}.derive(s, 1, std::vector<Tensor>{x});
  CHECK_MESSAGE(fmt::format("{}", h.tape).find("scan") == std::string::npos, fmt::format("{}", h.tape));
}

TEST_CASE("jacobian: struct arguments give one block per tensor leaf, plain fields are keys") {
  const Affine p{randn({2, 3}, 81), randn({2}, 82), 0.5};
  const Tensor x = randn({3}, 83);
  const auto f = [](const Affine& a, const Tensor& v) { return tanh(matmul(a.W, v) + a.b) * a.scale; };
  const Jacobian J = jacobian(f, p, x);
  REQUIRE(J.blocks[0].size() == 3);  // W, b, x
  CHECK(J.blocks[0][0].shape() == Shape{2, 2, 3});
  CHECK(J.blocks[0][1].shape() == Shape{2, 2});
  CHECK(J.blocks[0][2].shape() == Shape{2, 3});
  const auto list = [&](const std::vector<Tensor>& a) {
    return std::vector<Tensor>{f(Affine{a[0], a[1], 0.5}, a[2])};
  };
  for (std::size_t k = 0; k < 3; ++k)
    check_close(J.blocks[0][k], fd_jacobian(list, {p.W, p.b, x}, 0, k), 1e-6, 1e-7, fmt::format("leaf {}", k));
  auto jf = jit_jacobian(f);
  check_close(jf(p, x).blocks[0][2], J.blocks[0][2], 1e-12, 1e-12, "cached");
  const Affine q{p.W, p.b, 2.0};  // another plain value: another signature
  check_close(jf(q, x).blocks[0][2], J.blocks[0][2] * 4.0, 1e-12, 1e-12, "scale 2");
  CHECK(jf.cache_info().misses == 2);
}

TEST_CASE("jacobian: outputs that do not depend on an argument get zero blocks") {
  const Tensor x = randn({3}, 91), y = randn({2}, 92);
  const auto f = [](const Tensor& a, const Tensor& b) {
    (void)b;
    return std::make_tuple(sin(a), a * 0.0 + 1.0);
  };
  for (const Jacobian& J : {jacfwd(f, x, y), jacrev(f, x, y)}) {
    check_close(J.blocks[0][1], zeros({3, 2}), 0, 0, "d sin(x) / dy");
    check_close(J.blocks[1][0], zeros({3, 3}), 0, 0, "d const / dx");
    check_close(J.blocks[1][1], zeros({3, 2}), 0, 0, "d const / dy");
    check_close(J.values[1], tensor({1.0, 1.0, 1.0}), 0, 0, "value");
  }
  const Hessian H = hessian([](const Tensor& a, const Tensor& b) { return sum(sin(a)) + 0.0 * sum(b); }, x, y);
  check_close(H.blocks[1][1], zeros({2, 2}), 0, 0, "H yy");
  check_close(H.blocks[0][1], zeros({3, 2}), 0, 0, "H xy");
}

TEST_CASE("jacobian: a primitive without a batching rule goes through the scan fallback, correctly") {
  test::register_test_primitives();
  const Tensor x = randn({4}, 95);
  const auto f = [](const Tensor& a) {
    const Tensor in[] = {a};
    const std::vector<Tensor> sc = reel::apply_results("sincos", in);  // two results: no generic batching
    return sc[0] * sc[1] * 2.0;                                         // sin(2x)
  };
  // (Forward and reverse batch only the tangents and adjoints, which sincos's rules
  // compute elementwise; under vmap the primal sincos is batched: by a scan.)
  CHECK(to_string(vmap_tape(trace(f, x), Flags(1, true), 3)).find("scan") != std::string::npos);
  std::vector<double> diag(16, 0.0);
  const auto xs = x.values();
  for (int i = 0; i < 4; ++i) diag[static_cast<std::size_t>(5 * i)] = 2 * std::cos(2 * xs[static_cast<std::size_t>(i)]);
  const Tensor want = tensor(diag, {4, 4});
  check_close(jacfwd(f, x).jacobian, want, 1e-12, 1e-12, "jacfwd through the fallback");
  check_close(jacrev(f, x).jacobian, want, 1e-12, 1e-12, "jacrev through the fallback");
  auto jf = jit_jacfwd(f, JitOptions{.compile_after = 1});
  check_close(jf(x).jacobian, want, 1e-12, 1e-12, "compiled");
  const Tensor batch = randn({3, 4}, 96);
  const Tensor J = vmap([&](const Tensor& a) { return jacrev(f, a).jacobian; })(batch);
  for (int64_t b = 0; b < 3; ++b)
    check_close(index(J, b), jacfwd(f, index(batch, b)).jacobian, 1e-12, 1e-12, "vmap(jacrev) through the fallback");
}

TEST_CASE("hvp: k vectors in one pass, = the Hessian times them") {
  const Tensor x = randn({4}, 97), y = randn({4}, 98), vx = randn({3, 4}, 99), vy = randn({3, 4}, 100);
  const HvpResult r = hvp(scalar_fn, {x, y}, {vx, vy});
  REQUIRE(r.hvp.size() == 2);
  CHECK(r.hvp[0].shape() == Shape{3, 4});
  const Hessian H = hessian(scalar_fn, x, y);
  // (H v)_i = sum_j H[i][j] v_j, for each of the 3 vectors (rows of vx, vy).
  for (std::size_t i = 0; i < 2; ++i) {
    const Tensor want = transpose(matmul(H.blocks[i][0], transpose(vx)) + matmul(H.blocks[i][1], transpose(vy)));
    check_close(r.hvp[i], want, 1e-10, 1e-12, fmt::format("H v, argument {}", i));
  }
  for (int64_t d = 0; d < 3; ++d)
    check_close(index(r.hvp[1], d), hvp(scalar_fn, {x, y}, {index(vx, d), index(vy, d)}).hvp[1], 1e-12, 1e-12,
                "one vector at a time");
}

TEST_CASE("jit_jacobian and jit_hessian into a kept result: the same values, written in place") {
  const Tensor W = randn({4, 3}, 41);
  auto jf = jit_jacobian(two_out);
  Jacobian J;
  const void* kept = nullptr;
  for (int call = 0; call < 4; ++call) {
    const Tensor x = randn({3}, 42 + call);
    jf.into(J, x, W);
    const Jacobian plain = jacobian(two_out, x, W);
    REQUIRE(J.values.size() == 2);
    for (std::size_t o = 0; o < 2; ++o) {
      check_close(J.values[o], plain.values[o], 1e-12, 1e-12, "into: value");
      for (std::size_t k = 0; k < 2; ++k) check_close(J.blocks[o][k], plain.blocks[o][k], 1e-10, 1e-12, "into: block");
    }
    check_close(J.jacobian, plain.jacobian, 1e-10, 1e-12, "into: jacobian");
    check_close(J.value, plain.value, 1e-12, 1e-12, "into: value");
    if (call == 2) kept = J.jacobian.raw();             // compiled from the second call on
    if (call == 3) CHECK(J.jacobian.raw() == kept);  // written in place
  }
  // A copy kept by the caller keeps its values.
  const Tensor old = J.jacobian;
  const std::vector<double> old_values = old.values();
  jf.into(J, randn({3}, 50), W);
  CHECK(old.values() == old_values);
  CHECK(J.jacobian.raw() != old.raw());
  // Another signature into the same result: the other shapes.
  const Tensor x2 = randn({2}, 51), W2 = randn({4, 2}, 52);
  jf.into(J, x2, W2);
  check_close(J.blocks[1][1], jacrev(two_out, x2, W2).blocks[1][1], 1e-10, 1e-12, "into: another signature");
  CHECK(jf.cache_info().misses == 2);

  auto jh = jit_hessian(scalar_fn);
  Hessian H;
  const Tensor y = randn({3}, 53);
  for (int call = 0; call < 3; ++call) {
    const Tensor x = randn({3}, 54 + call);
    jh.into(H, x, y);
    const Hessian h0 = hessian(scalar_fn, x, y);
    check_close(H.value, h0.value, 1e-12, 1e-12, "hessian into: value");
    for (std::size_t i = 0; i < 2; ++i) {
      check_close(H.grads[i], h0.grads[i], 1e-10, 1e-12, "hessian into: gradient");
      for (std::size_t j = 0; j < 2; ++j) check_close(H.blocks[i][j], h0.blocks[i][j], 1e-10, 1e-12, "hessian into");
    }
    check_close(H.hessian, h0.hessian, 1e-10, 1e-12, "hessian into: hessian");
  }
  // A derivation without kept tensors (sparse) gives its result as operator() does.
  const auto band = [](const Tensor& v) { return sin(v) * 2.0; };
  auto js = jit_sparse_jacobian(band);
  SparseJacobian S;
  const Tensor z = randn({5}, 60);
  js.into(S, z);
  check_close(S.dense(), jacobian(band, z).jacobian, 1e-10, 1e-12, "sparse into");
}

TEST_CASE("into a result kept from another signature with as many tensors in other places") {
  // f(x, n) and f(n, x): one float argument each, so one block each, in another column.
  const auto f = [](const Tensor& a, const Tensor& b) {
    return a.dtype() == DType::i64 ? sin(b) * 2.0 : sin(a) * 2.0;
  };
  auto jf = jit_jacobian(f);
  const Tensor x = tensor({0.1, 0.2, 0.3}), n = full({}, 2, DType::i64);
  Jacobian J;
  for (int call = 0; call < 3; ++call) {
    jf.into(J, x, n);
    REQUIRE(J.blocks.size() == 1);
    REQUIRE(J.blocks[0].size() == 2);
    CHECK(J.blocks[0][0].defined());
    CHECK_FALSE(J.blocks[0][1].defined());
    jf.into(J, n, x);  // the same count of tensors, the block in the other column
    const Jacobian plain = jacobian(f, n, x);
    REQUIRE(J.blocks.size() == 1);
    REQUIRE(J.blocks[0].size() == 2);
    CHECK_FALSE(J.blocks[0][0].defined());
    check_close(J.blocks[0][1], plain.blocks[0][1], 1e-12, 1e-12, "into: the other column");
    CHECK(J.jacobian.defined() == plain.jacobian.defined());  // (blocks[0][0]'s name: undefined here)
    check_close(J.value, plain.value, 1e-12, 1e-12, "into: value");
    CHECK(J.value.same_storage(J.values[0]));
  }
}

namespace {
// An identity primitive without a lowering: compiled code calls its eager function,
// which runs `hook` (if set, and not from within itself): C++ code of the caller's
// that a compiled call runs.
void define_reentering(const char* name, std::function<void()>& hook) {
  define_primitive({.name = name,
                    .eager =
                        [&hook](std::span<const Tensor> x, const Attrs&) {
                          static thread_local bool inside = false;
                          if (hook && !inside) {
                            inside = true;
                            hook();
                            inside = false;
                          }
                          return x[0] * 1.0;
                        },
                    .vjp = [](const std::vector<Tensor>&, const Tensor&, const Tensor& d,
                              const Attrs&) { return std::vector<Tensor>{d}; },
                    .jvp = [](const std::vector<Tensor>&, const Tensor&, const std::vector<Tensor>& t,
                              const Attrs&) { return t[0]; }});
}

// J is `plain`, a Jacobian of f(x, n) with n an i64: one block, in the first column.
void check_first_column(const Jacobian& J, const Jacobian& plain) {
  REQUIRE(J.blocks.size() == 1);
  REQUIRE(J.blocks[0].size() == 2);
  check_close(J.blocks[0][0], plain.blocks[0][0], 1e-12, 1e-12, "into: block");
  CHECK_FALSE(J.blocks[0][1].defined());
  check_close(J.value, plain.value, 1e-12, 1e-12, "into: value");
}
}  // namespace

TEST_CASE("into a result that the compiled code's own C++ call fills again meanwhile (found by review)") {
  // A primitive without a lowering runs its eager function inside the compiled code;
  // here that function calls into on the same result, with the other signature.
  static std::function<void()> reenter;
  define_reentering("test_into_reenter", reenter);
  const auto f = [](const Tensor& a, const Tensor& b) {
    const Tensor& v = a.dtype() == DType::i64 ? b : a;
    return sin(reel::apply("test_into_reenter", std::vector<Tensor>{v})) * 2.0;
  };
  auto jf = jit_jacobian(f, JitOptions{.compile_after = 1});
  const Tensor x = tensor({0.1, 0.2, 0.3}), n = full({}, 2, DType::i64);
  Jacobian J, K;
  for (int i = 0; i < 3; ++i) {
    jf.into(J, x, n);
    jf.into(K, n, x);
  }
  int reentered = 0;
  reenter = [&] { ++reentered, jf.into(J, n, x); };  // the same J, the other signature
  jf.into(J, x, n);
  reenter = nullptr;
  CHECK(reentered == 1);
  check_first_column(J, jacobian(f, x, n));
}

TEST_CASE("into after a path whose own C++ call filled the result again failed its guard (found by review)") {
  // Path A (a positive sum) runs the primitive's eager function, which calls into on the
  // same result with the other signature, then fails its guard; path B, whose code calls
  // nothing, then writes into the result as it is now.
  static std::function<void()> reenter;
  define_reentering("test_into_reenter_guarded", reenter);
  const auto f = [](const Tensor& a, const Tensor& b) {
    const Tensor& v = a.dtype() == DType::i64 ? b : a;
    const Tensor y = reel::apply("test_into_reenter_guarded", std::vector<Tensor>{v});
    if (sum(v) > 0.0) return y * 2.0;
    return sin(v);
  };
  auto jf = jit_jacobian(f);
  const Tensor pos = tensor({0.1, 0.2, 0.3}), neg = tensor({-0.1, -0.2, -0.3}), n = full({}, 2, DType::i64);
  Jacobian J, K;
  for (int i = 0; i < 3; ++i) {
    jf.into(K, neg, n);  // path B, compiled
    jf.into(K, n, pos);  // the other signature
    jf.into(J, pos, n);  // path A last: tried first next time
  }
  int reentered = 0;
  reenter = [&] { ++reentered, jf.into(J, n, pos); };
  jf.into(J, neg, n);
  reenter = nullptr;
  CHECK(reentered == 1);  // (path A ran, called into, and failed its guard)
  check_first_column(J, jacobian(f, neg, n));
}

TEST_CASE("into writes in place through a result's second names; hits are counted on every thread") {
  auto jf = jit_jacobian([](const Tensor& x) { return sin(x) * 3.0; });
  Jacobian J;
  const void* value = nullptr;
  const void* jacobian_memory = nullptr;
  for (int call = 0; call < 5; ++call) {
    const Tensor x = randn({3}, 70 + call);
    jf.into(J, x);
    const Jacobian want = jacobian([](const Tensor& v) { return sin(v) * 3.0; }, x);
    check_close(J.value, want.value, 1e-12, 1e-12, "into: value");
    check_close(J.jacobian, want.jacobian, 1e-12, 1e-12, "into: jacobian");
    CHECK(J.value.same_storage(J.values[0]));  // value and jacobian name values[0] and blocks[0][0]
    CHECK(J.jacobian.same_storage(J.blocks[0][0]));
    if (call == 2) value = J.value.raw(), jacobian_memory = J.jacobian.raw();
    if (call > 2) {  // compiled: written in place, although two names hold each tensor
      CHECK(J.value.raw() == value);
      CHECK(J.jacobian.raw() == jacobian_memory);
    }
  }
  // A copy of the value kept elsewhere keeps its values; the result's names follow the new tensor.
  const Tensor old = J.value;
  const std::vector<double> old_values = old.values();
  jf.into(J, randn({3}, 80));
  CHECK(old.values() == old_values);
  CHECK(J.value.same_storage(J.values[0]));
  CHECK_FALSE(J.value.same_storage(old));
  // A second name pointed elsewhere by the caller is made a name of the result again.
  J.jacobian = zeros({1});
  jf.into(J, randn({3}, 81));
  CHECK(J.jacobian.same_storage(J.blocks[0][0]));
  CHECK(J.jacobian.shape() == Shape{3, 3});
  // A call that throws leaves the result empty (no name of half-written memory).
  auto picky = jit_jacobian([](const Tensor& v) {
    if (v.rank() != 1) throw Error("picky: expected a vector");
    return sin(v);
  });
  Jacobian P;
  for (int call = 0; call < 3; ++call) picky.into(P, tensor({0.1, 0.2}));
  CHECK_THROWS_WITH_AS(picky.into(P, zeros({2, 2})), doctest::Contains("picky: expected a vector"), Error);
  CHECK_FALSE(P.value.defined());
  CHECK_FALSE(P.jacobian.defined());
  CHECK(P.values.empty());
  picky.into(P, tensor({0.3, 0.4}));
  check_close(P.jacobian, jacobian([](const Tensor& v) { return sin(v); }, tensor({0.3, 0.4})).jacobian, 1e-12, 1e-12,
              "into after a throw");
  // Hessians too.
  auto jh = jit_hessian([](const Tensor& v) { return sum(exp(v)); });
  Hessian H;
  const void* hessian_memory = nullptr;
  for (int call = 0; call < 4; ++call) {
    const Tensor x = randn({2}, 90 + call);
    jh.into(H, x);
    check_close(H.hessian, hessian([](const Tensor& v) { return sum(exp(v)); }, x).hessian, 1e-12, 1e-12, "hessian");
    CHECK(H.hessian.same_storage(H.blocks[0][0]));
    if (call == 2) hessian_memory = H.hessian.raw();
    if (call == 3) CHECK(H.hessian.raw() == hessian_memory);
  }
  // Hits counted exactly: this thread's, another thread's (its last hit remembered), and
  // after each moved on to another cache.
  auto jg = jit_jacobian([](const Tensor& x) { return x * 2.0; });
  const Tensor x = tensor({1.0, 2.0});
  const uint64_t before = jg.cache_info().hits;
  for (int call = 0; call < 10; ++call) (void)jg(x);
  std::thread worker([&] {
    for (int call = 0; call < 7; ++call) (void)jg(x);
    (void)jf(tensor({0.5, 0.5, 0.5}));  // (its memo moves to another cache)
    for (int call = 0; call < 3; ++call) (void)jg(x);
  });
  worker.join();
  (void)jf(tensor({0.5, 0.5, 0.5}));
  CHECK(jg.cache_info().hits - before == 10 + 7 + 3 - 1);  // (the first call of all missed)
  CHECK(jg.cache_info().misses == 1);
}

TEST_CASE("a cached function's hits on one signature, others between them, and branches: right values each time") {
  // (A thread remembers its last hit; these interleave signatures, branches and caches.)
  auto f = [](const Tensor& x) { return sum(x) > 0.0 ? x * x : -x * 3.0; };
  auto jf = jit_jacobian(f);
  const auto e = [](const Tensor& x) { return exp(x); };
  auto jg = jit_jacobian(e);
  const Tensor pos = tensor({1.0, 2.0}), neg = tensor({-1.0, -2.0}), three = tensor({0.5, 1.0, 1.5});
  Jacobian J;
  for (int round = 0; round < 5; ++round) {
    for (const Tensor& x : {pos, pos, neg, three, neg, neg, pos}) {
      check_close(jf(x).jacobian, jacobian(f, x).jacobian, 1e-12, 1e-12, "memo: operator()");
      jf.into(J, x);
      check_close(J.jacobian, jacobian(f, x).jacobian, 1e-12, 1e-12, "memo: into");
      check_close(jg(x).jacobian, jacobian(e, x).jacobian, 1e-12, 1e-12, "memo: another cache");
    }
  }
  CHECK(jf.cache_info().misses == 3);  // two signatures, the first with two paths
  // A cache made after another was destroyed never runs the other's code.
  for (int k = 1; k <= 3; ++k) {
    auto jk = jit_jacobian([k](const Tensor& x) { return x * static_cast<double>(k); });
    for (int call = 0; call < 3; ++call) CHECK(jk(pos).jacobian.values() == std::vector<double>{1.0 * k, 0, 0, 1.0 * k});
  }
}

TEST_CASE("into with an argument that is one of the kept result's tensors, and a cache freed while a thread remembers it") {
  // A fixed-point iteration with its Jacobian: the argument is the last value.
  const auto g = [](const Tensor& x) { return sin(x) * 0.5 + 1.0; };
  auto jg = jit_jacobian(g);
  Jacobian r = jg(tensor({0.1, 0.2}));
  for (int step = 0; step < 5; ++step) {
    const Jacobian want = jacobian(g, r.value);
    jg.into(r, r.value);
    check_close(r.value, want.value, 1e-12, 1e-12, "into(r, r.value): value");
    check_close(r.jacobian, want.jacobian, 1e-10, 1e-12, "into(r, r.value): jacobian");
    const Jacobian want2 = jacobian(g, r.values[0]);
    jg.into(r, r.values[0]);
    check_close(r.values[0], want2.value, 1e-12, 1e-12, "into(r, r.values[0]): value");
  }
  // A thread that remembers its last hit does not keep a destroyed cache's path alive.
  Tensor captured = ones({3});
  std::mutex m;
  std::condition_variable cv;
  bool done = false, quit = false;
  std::optional<JitFunction<std::function<Tensor(const Tensor&)>>> jf;
  jf.emplace(jit(std::function<Tensor(const Tensor&)>([captured](const Tensor& v) { return v * captured; })));
  CHECK_FALSE(captured.unshared());
  std::thread worker([&] {
    for (int call = 0; call < 4; ++call) CHECK((*jf)(tensor({1.0, 2.0, 3.0})).values() == std::vector<double>{1, 2, 3});
    std::unique_lock<std::mutex> lock(m);
    done = true;
    cv.notify_all();
    cv.wait(lock, [&] { return quit; });
  });
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return done; });
  }
  jf.reset();
  CHECK(captured.unshared());  // the path (and its copy of the capture) is gone
  {
    std::lock_guard<std::mutex> lock(m);
    quit = true;
  }
  cv.notify_all();
  worker.join();
}
