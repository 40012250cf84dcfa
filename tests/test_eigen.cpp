// Eigen matrices of reel::Real (reel/eigen.hpp): the same code with double and with Real,
// fixed and dynamic sizes, products, decompositions, and their derivatives.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

// (reel's headers first, Eigen's decompositions after: Eigen's `using std::sqrt;
// sqrt(x)` must find one function for a Real whatever the order.)
#include "reel/eigen.hpp"
#include "reel/reel.hpp"

#include <Eigen/Dense>
#include "test_util.hpp"

using namespace reel;

namespace {

template <class T>
using Vec3 = Eigen::Matrix<T, 3, 1>;
template <class T>
using Mat3 = Eigen::Matrix<T, 3, 3>;

// A 3-link planar arm: the end effector's position (x, y) for joint angles q and link
// lengths 1, 0.8, 0.5.
template <class T>
Eigen::Matrix<T, 2, 1> arm(const Vec3<T>& q) {
  const double lengths[3] = {1.0, 0.8, 0.5};
  Eigen::Matrix<T, 2, 1> p = Eigen::Matrix<T, 2, 1>::Zero();
  T angle = 0;
  for (int i = 0; i < 3; ++i) {
    angle += q(i);
    p += lengths[i] * Eigen::Matrix<T, 2, 1>(cos(angle), sin(angle));
  }
  return p;
}

// Linear algebra of a small physics code: a symmetric positive definite matrix from x,
// its inverse and an LLT solve, norms, dots and sums.
template <class T>
T linalg(const Vec3<T>& x) {
  Mat3<T> A;
  A << 4 + x(0) * x(0), x(1), 0.5, x(1), 3 + x(2) * x(2), x(0) * 0.25, 0.5, x(0) * 0.25, 5;
  const Mat3<T> inv = A.inverse();
  const Vec3<T> b(1.0, x(1), 2.0);
  const Vec3<T> s = A.llt().solve(b);
  return inv.sum() + s.dot(x) + (A * x).norm() + A.transpose().row(0).sum() + inv.trace();
}

template <class T>
T dynamic_sizes(const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>& M, const Eigen::Matrix<T, Eigen::Dynamic, 1>& v) {
  const Eigen::Matrix<T, Eigen::Dynamic, 1> w = M * v;
  return w.squaredNorm() + (M.transpose() * M).sum();
}

std::vector<double> fd_gradient(const std::function<double(const Vec3<double>&)>& f, Vec3<double> x) {
  std::vector<double> g;
  for (int i = 0; i < 3; ++i) {
    const double h = 1e-6, xi = x(i);
    x(i) = xi + h;
    const double up = f(x);
    x(i) = xi - h;
    const double down = f(x);
    x(i) = xi;
    g.push_back((up - down) / (2 * h));
  }
  return g;
}

}  // namespace

TEST_CASE("reel::Real with Eigen: untraced, the same values as double") {
  const Vec3<double> q(0.3, -0.4, 1.2);
  const Vec3<Real> qr = q.cast<Real>();
  const auto p = arm(q);
  const auto pr = arm(qr);
  CHECK(pr(0).value() == p(0));
  CHECK(pr(1).value() == p(1));
  CHECK(linalg(qr).value() == doctest::Approx(linalg(q)).epsilon(1e-15));
  Eigen::MatrixXd M(2, 3);
  M << 1, 2, 3, 4, 5, 6;
  Eigen::VectorXd v(3);
  v << 0.5, -1, 2;
  CHECK(dynamic_sizes<Real>(M.cast<Real>(), v.cast<Real>()).value() == dynamic_sizes<double>(M, v));
  CHECK((Mat3<Real>::Identity() * 2.0).determinant().value() == 8.0);
}

TEST_CASE("reel::Real with Eigen: the arm's Jacobian, against its closed form, interpreted and compiled") {
  const Vec3<double> q(0.3, -0.4, 1.2);
  auto f = [](const Vec3<Real>& q) { return arm(q); };
  const Jacobian j = jacobian(f, q);
  REQUIRE(j.jacobian.shape() == Shape{2, 3});
  // d p / d q_k = sum over links i >= k of l_i (-sin, cos)(q_0 + ... + q_i).
  const double l[3] = {1.0, 0.8, 0.5};
  double a[3];
  a[0] = q(0), a[1] = a[0] + q(1), a[2] = a[1] + q(2);
  const auto J = j.jacobian.values();
  for (int k = 0; k < 3; ++k) {
    double dx = 0, dy = 0;
    for (int i = k; i < 3; ++i) dx -= l[i] * std::sin(a[i]), dy += l[i] * std::cos(a[i]);
    CHECK(J[static_cast<std::size_t>(k)] == doctest::Approx(dx).epsilon(1e-14));
    CHECK(J[static_cast<std::size_t>(3 + k)] == doctest::Approx(dy).epsilon(1e-14));
  }
  auto cached = jit_jacobian(f);
  const auto Jc = cached(q).jacobian.values();
  for (std::size_t i = 0; i < 6; ++i) CHECK(Jc[i] == doctest::Approx(J[i]).epsilon(1e-14));
  const Vec3<double> q2(-1.0, 0.5, 0.25);
  const auto J2 = cached(q2).jacobian.values(), J2i = jacobian(f, q2).jacobian.values();
  for (std::size_t i = 0; i < 6; ++i) CHECK(J2[i] == doctest::Approx(J2i[i]).epsilon(1e-14));
}

TEST_CASE("reel::Real with Eigen: inverse, LLT, norm, dot and sum, differentiated") {
  const Vec3<double> x(0.7, -0.2, 0.4);
  auto f = [](const Vec3<Real>& x) { return linalg(x); };
  const auto fd = fd_gradient([](const Vec3<double>& v) { return linalg(v); }, x);
  const GradResult r = grad(f, x);
  CHECK(r.value.item() == doctest::Approx(linalg(x)).epsilon(1e-14));
  const auto g = r.grads[0].values();
  for (int i = 0; i < 3; ++i) CHECK(g[static_cast<std::size_t>(i)] == doctest::Approx(fd[static_cast<std::size_t>(i)]).epsilon(1e-6));
  auto compiled = compile_grad(f, x);
  const auto c = compiled(x)[1].values();
  for (int i = 0; i < 3; ++i) CHECK(c[static_cast<std::size_t>(i)] == doctest::Approx(g[static_cast<std::size_t>(i)]).epsilon(1e-12));
}

TEST_CASE("reel::Real with Eigen: dynamic sizes and Eigen::Map over Reals; gradients as matrices") {
  Eigen::MatrixXd M(2, 3);
  M << 1, 2, 3, 4, 5, 6;
  Eigen::VectorXd v(3);
  v << 0.5, -1, 2;
  using MatX = Eigen::Matrix<Real, Eigen::Dynamic, Eigen::Dynamic>;
  using VecX = Eigen::Matrix<Real, Eigen::Dynamic, 1>;
  auto f = [](const MatX& M, const VecX& v) { return dynamic_sizes(M, v); };
  const GradResult r = grad(f, M, v);
  CHECK(r.grads[0].shape() == Shape{2, 3});
  CHECK(r.grads[1].shape() == Shape{3});
  // d/dv |M v|^2 = 2 M^T M v; d/dM (|Mv|^2 + sum(M^T M)) = 2 (M v) v^T + 2 M 1 1^T (row sums of M)
  const Eigen::VectorXd dv = 2 * M.transpose() * M * v;
  for (int i = 0; i < 3; ++i) CHECK(r.grads[1].values()[static_cast<std::size_t>(i)] == doctest::Approx(dv(i)));
  const Eigen::MatrixXd dM = 2 * (M * v) * v.transpose() + 2 * M * Eigen::MatrixXd::Ones(3, 3);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) CHECK(r.grads[0].values()[static_cast<std::size_t>(i * 3 + j)] == doctest::Approx(dM(i, j)));
  // Given as Reals, the gradients are matrices of Reals.
  auto [value, grads] = withgradient(f, MatX(M.cast<Real>()), VecX(v.cast<Real>()));
  CHECK(value.item() == doctest::Approx(dynamic_sizes<double>(M, v)));
  CHECK(std::get<0>(grads)(1, 2).value() == doctest::Approx(dM(1, 2)));
  // A Map over a vector of Reals, as code written against raw pointers does.
  auto mapped = [](const std::vector<Real>& x) {
    Eigen::Map<const Eigen::Matrix<Real, 2, 2, Eigen::RowMajor>> A(x.data());
    return (A * A).trace();
  };
  CHECK(grad(mapped, std::vector<double>{1, 2, 3, 4}).grads[0].values() == std::vector<double>{2, 6, 4, 8});
}

TEST_CASE("reel::Real with Eigen: a matrix of the wrong size is a reel::Error") {
  auto f = [](const Vec3<Real>& x) { return x.sum(); };
  CHECK_ERROR(grad(f, tensor({1.0, 2.0})), "Eigen::Matrix<reel::Real>", "3 x 1", "f64[2]");
}

TEST_CASE("reel::Real with Eigen: compiled and cached functions given Eigen matrices of Reals") {
  using V2 = Eigen::Matrix<Real, 2, 1>;
  auto f = [](const V2& x) { return V2(x(0) * x(1), x(0)); };
  auto jac = jit_jacobian(f);
  for (int round = 0; round < 2; ++round) {  // a miss, then a hit
    const auto J = jac(V2(3.0, 4.0)).jacobian.values();
    CHECK(J == std::vector<double>{4.0, 3.0, 1.0, 0.0});
  }
  auto g = jit_grad([](const V2& x) { return x.squaredNorm(); });
  for (int round = 0; round < 2; ++round) {
    auto [value, grads] = g(V2(3.0, 4.0));
    CHECK(value.item() == 25.0);
    CHECK(std::get<0>(grads)(1).value() == 8.0);
  }
}

TEST_CASE("reel::Real with Eigen: cached functions given numbers again and again, into a kept Jacobian") {
  // Numbers given for Reals become tensors kept per thread and refilled on the next call;
  // results must never see a later call's numbers.
  using V2 = Eigen::Matrix<Real, 2, 1>;
  auto f = [](const V2& x) { return V2(x(0) * x(1), sin(x(0))); };
  auto jac = jit_jacobian(f);
  auto id = jit([](const V2& x) { return x; });
  auto sq = jit_grad([](const std::vector<Real>& v) { return v[0] * v[0] + 3.0 * v[1]; });
  Jacobian J;
  std::vector<std::vector<double>> identities;
  std::vector<V2> kept_results;
  for (int call = 0; call < 6; ++call) {
    const double a = 0.5 + call, b = -1.0 + 0.25 * call;
    const Eigen::Vector2d x(a, b);
    jac.into(J, x);
    const std::vector<double> want{b, a, std::cos(a), 0.0};
    const std::vector<double> got = J.jacobian.values();
    for (std::size_t i = 0; i < 4; ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-14));
    CHECK(jac(x).jacobian.values() == got);
    kept_results.push_back(id(x));
    const auto [value, grads] = sq(std::vector<double>{a, b});
    CHECK(value.item() == doctest::Approx(a * a + 3 * b));
    CHECK(grads.values()[0] == doctest::Approx(2 * a));  // (numbers given: a tensor back)
  }
  for (int call = 0; call < 6; ++call) {
    CHECK(kept_results[static_cast<std::size_t>(call)](0).value() == 0.5 + call);
    CHECK(kept_results[static_cast<std::size_t>(call)](1).value() == -1.0 + 0.25 * call);
  }
  // Another size of a dynamic vector: another signature, the kept tensor remade.
  auto n = jit_grad([](const Eigen::Matrix<Real, Eigen::Dynamic, 1>& v) { return v.squaredNorm(); });
  for (int size = 1; size <= 4; ++size) {
    const Eigen::VectorXd v = Eigen::VectorXd::LinSpaced(size, 1.0, 2.0);
    for (int call = 0; call < 2; ++call) {
      const auto [value, grads] = n(v);
      CHECK(value.item() == doctest::Approx(v.squaredNorm()));
      CHECK(grads.numel() == size);
    }
  }
}
