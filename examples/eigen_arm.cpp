// A 3-link planar arm's forward kinematics, written once with Eigen and templated on its
// scalar type, and its Jacobian through reel::Real: traced, derived and compiled once,
// then called again and again (reel::jit_jacobian caches the compiled code). Prints the
// Jacobian against its closed form, and the time of one compiled Jacobian beside one
// evaluation of the same function in plain double.
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
    sink += end_effector(x)(0);
  }
  auto t1 = clock::now();
  for (int i = 0; i < reps; ++i) {
    x(0) = 0.3 + 1e-9 * i;
    sink += jac(x).jacobian.data<double>()[0];
  }
  auto t2 = clock::now();
  const double plain_ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / reps;
  const double jac_ns = std::chrono::duration<double, std::nano>(t2 - t1).count() / reps;
  std::printf("one evaluation in double: %.0f ns; one compiled Jacobian (jit_jacobian, cached): %.0f ns; ratio %.1f\n",
              plain_ns, jac_ns, jac_ns / plain_ns);
  const reel::CacheInfo info = jac.cache_info();
  std::printf("cache: %llu hits, %llu misses, %llu compilations\n", static_cast<unsigned long long>(info.hits),
              static_cast<unsigned long long>(info.misses), static_cast<unsigned long long>(info.compilations));
  return sink == 12345.0 ? 1 : 0;
}
