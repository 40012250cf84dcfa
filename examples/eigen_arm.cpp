// A 3-link planar arm's forward kinematics, written once with Eigen and templated on its
// scalar type, and its Jacobian through reel::Real: traced, derived and compiled once,
// then called again and again (reel::jit_jacobian caches the compiled code). Prints the
// Jacobian against its closed form, and the time of one compiled Jacobian beside one
// evaluation of the same function in plain double: returned as a new reel::Jacobian
// (jac(q)), and written into one kept by the caller (jac.into(J, q)), which allocates
// nothing on a cache hit.
#include <chrono>
#include <cmath>
#include <cstdio>

#include <Eigen/Dense>

#include "reel/eigen.hpp"
#include "reel/reel.hpp"

template <class T>
Eigen::Matrix<T, 2, 1> end_effector(const Eigen::Matrix<T, 3, 1>& q) {
  const double lengths[3] = {1.0, 0.8, 0.5};
  Eigen::Matrix<T, 2, 1> p = Eigen::Matrix<T, 2, 1>::Zero();
  T angle = 0;
  for (int i = 0; i < 3; ++i) {
    angle += q(i);
    p += lengths[i] * Eigen::Matrix<T, 2, 1>(cos(angle), sin(angle));
  }
  return p;
}

int main() {
  using Q = Eigen::Matrix<reel::Real, 3, 1>;
  auto jac = reel::jit_jacobian([](const Q& q) { return end_effector(q); });
  const Eigen::Vector3d q(0.3, -0.4, 1.2);
  const std::vector<double> J = jac(q).jacobian.values();  // row-major 2 x 3
  std::printf("Jacobian of the end effector at q = (0.3, -0.4, 1.2):\n");
  const double l[3] = {1.0, 0.8, 0.5}, a[3] = {q(0), q(0) + q(1), q(0) + q(1) + q(2)};
  double worst = 0;
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 3; ++k) {
      double exact = 0;
      for (int i = k; i < 3; ++i) exact += r == 0 ? -l[i] * std::sin(a[i]) : l[i] * std::cos(a[i]);
      worst = std::max(worst, std::abs(J[static_cast<std::size_t>(r * 3 + k)] - exact));
      std::printf("  % .12f", J[static_cast<std::size_t>(r * 3 + k)]);
    }
    std::printf("\n");
  }
  std::printf("largest difference from the closed form: %.3g\n", worst);

  // Timing, side by side: the compiled Jacobian (a cache hit) and the function in double.
  using clock = std::chrono::steady_clock;
  const int reps = 200000;
  Eigen::Vector3d x = q;
  double sink = 0;
  auto t0 = clock::now();
  for (int i = 0; i < reps; ++i) {
    x(0) = 0.3 + 1e-9 * i;
    const Eigen::Vector2d p = end_effector(x);  // (both coordinates used: all of one evaluation)
    sink += p(0) + p(1);
  }
  auto t1 = clock::now();
  for (int i = 0; i < reps; ++i) {
    x(0) = 0.3 + 1e-9 * i;
    sink += jac(x).jacobian.data<double>()[0];
  }
  auto t2 = clock::now();
  reel::Jacobian kept;  // each call writes into its tensors
  for (int i = 0; i < reps; ++i) {
    x(0) = 0.3 + 1e-9 * i;
    jac.into(kept, x);
    sink += kept.jacobian.data<double>()[0];
  }
  auto t3 = clock::now();
  const auto ns = [&](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double, std::nano>(b - a).count() / reps;
  };
  const double plain_ns = ns(t0, t1), jac_ns = ns(t1, t2), into_ns = ns(t2, t3);
  std::printf("one evaluation in double: %.0f ns\n", plain_ns);
  std::printf("one compiled Jacobian (jit_jacobian, cached), a new result:      %.0f ns; ratio %.1f\n", jac_ns,
              jac_ns / plain_ns);
  std::printf("one compiled Jacobian (jit_jacobian, cached), into a kept result: %.0f ns; ratio %.1f\n", into_ns,
              into_ns / plain_ns);
  const reel::CacheInfo info = jac.cache_info();
  std::printf("cache: %llu hits, %llu misses, %llu compilations\n", static_cast<unsigned long long>(info.hits),
              static_cast<unsigned long long>(info.misses), static_cast<unsigned long long>(info.compilations));
  return sink == 12345.0 ? 1 : 0;
}
