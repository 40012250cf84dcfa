// ADOL-C (Debian's libadolc-dev 2.7.2) running GradBench's own lse and det C++ (the
// templates of ../shared/gradbench-cpp/gradbench/evals/lse.hpp and det.hpp, copied below
// unchanged but for their names), for the taping peer's side of issue 35's comparison:
// the function is taped once (trace_on/trace_off) and each gradient() call interprets
// the tape, as GradBench's ADOL-C tool does. Not part of the CMake build (ADOL-C is not
// one of Reel's dependencies); by hand:
//   apt-get install libadolc-dev
//   g++ -O2 -std=c++20 bench/peers/adolc_lse_det.cpp -o /tmp/adolc_lse_det -ladolc && /tmp/adolc_lse_det
// Prints the mean time of one gradient call (at least 1 s of calls) per workload.
#include <adolc/adolc.h>
#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
using clk = std::chrono::steady_clock;
template <typename T>
void lse_primal(size_t n, const T* __restrict__ x, T* __restrict__ out) {
  T A = x[0];
  for (size_t i = 1; i < n; i++) {
    A = std::max(A, x[i]);
  }

  T s = 0;
  for (size_t i = 0; i < n; i++) {
    s += exp(x[i] - A);
  }

  *out = log(s) + A;
}

template <typename T>
T det_of_minor(const T* __restrict__ A, size_t n, size_t m,
               std::vector<size_t>& r, std::vector<size_t>& c) {
  size_t R0 = r[n];
  assert(R0 < n);
  size_t Cj = c[n];
  assert(Cj < n);

  if (m == 1) {
    return A[R0 * n + Cj];
  }

  // Determinant of the minor M.
  T detM(0);
  // Sign of factor for next sub-minor.
  int sign = 1;
  // Remove row with index 0 in M from all the sub-minors of M
  r[n] = r[R0];
  // C(j-1): initial index in c for previous column of the minor M
  size_t Cj1 = n;

  // for each column of M
  for (size_t j = 0; j < m; j++) {
    // M[0,j] = A[ R0, Cj ]
    // element with index (0, j) in the minor M
    T M0j = A[R0 * n + Cj];

    // remove column with index j in M to form next sub-minor S of M
    c[Cj1] = c[Cj];

    // detS: compute determinant of S, the sub-minor of M with row
    // R(0) and column C(j) removed.
    T detS = det_of_minor(A, n, m - 1, r, c);

    // restore column with index j in represenation of M as a minor of
    // A
    c[Cj1] = Cj;

    // detM: include this sub-minor term in the summation
    if (sign > 0) {
      detM = detM + M0j * detS;
    } else {
      detM = detM - M0j * detS;
    }

    // advance to next column of M
    Cj1  = Cj;
    Cj   = c[Cj];
    sign = -sign;
  }

  // restore row zero to the minor representation for M
  r[n] = R0;

  return detM;
}

template <typename T>
void det_primal(size_t ell, const T* __restrict__ A, T* __restrict__ out) {
  std::vector<size_t> r(ell + 1);
  std::vector<size_t> c(ell + 1);
  for (size_t i = 0; i < ell; i++) {
    r[i] = i + 1;
    c[i] = i + 1;
  }
  *out = det_of_minor(A, ell, ell, r, c);
}


template <class F>
double time_gradient(short tag, int n, std::vector<double>& x, F f) {
  std::vector<adouble> ax(n);
  adouble out;
  double y;
  trace_on(tag);
  for (int i = 0; i < n; ++i) ax[i] <<= x[i];
  f(ax.data(), &out);
  out >>= y;
  trace_off();
  std::vector<double> g(n);
  gradient(tag, n, x.data(), g.data());
  int reps = 0;
  auto t0 = clk::now();
  do { gradient(tag, n, x.data(), g.data()); ++reps; } while (std::chrono::duration<double>(clk::now() - t0).count() < 1.0);
  return 1e3 * std::chrono::duration<double>(clk::now() - t0).count() / reps;
}
int main() {
  for (int n : {2500, 20000, 80000, 640000}) {
    std::vector<double> x(n);
    for (int i = 0; i < n; ++i) x[i] = std::sin(i + 1.0);
    std::printf("ADOL-C lse n=%d gradient %.4f ms\n", n, time_gradient(1, n, x, [n](const adouble* v, adouble* out) { lse_primal<adouble>(n, v, out); }));
  }
  for (int ell : {5, 7, 9}) {
    std::vector<double> A(ell * ell);
    for (int i = 0; i < ell * ell; ++i) A[i] = std::sin(i + 1.0);
    std::printf("ADOL-C det l=%d gradient %.4f ms\n", ell, time_gradient(2, ell * ell, A, [ell](const adouble* v, adouble* out) { det_primal<adouble>(ell, v, out); }));
  }
}
