// ADOL-C (Debian's libadolc-dev 2.7.2) running GradBench's own C++ for lse, det, llsq,
// ode, gmm and lstm (../shared/gradbench-cpp, included unchanged), for the taping peer's
// side of issue 35's comparison: each function is taped once (trace_on/trace_off) and
// each gradient() call interprets the tape, as GradBench's ADOL-C tool does. The inputs
// are made up (sines and cosines), at the sizes of GradBench's default workloads; only
// the time matters. Not part of the CMake build (ADOL-C is not one of Reel's
// dependencies); by hand:
//   apt-get install libadolc-dev
//   g++ -O2 -std=c++20 -I../shared/gradbench-cpp -I/usr/include/nlohmann \
//     bench/peers/adolc_gradbench.cpp -o /tmp/adolc_gradbench -ladolc && /tmp/adolc_gradbench
// Prints the mean time of one gradient call (at least 1 s of calls) per workload.
#include <adolc/adolc.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "gradbench/evals/det.hpp"
#include "gradbench/evals/gmm.hpp"
#include "gradbench/evals/llsq.hpp"
#include "gradbench/evals/lse.hpp"
#include "gradbench/evals/lstm.hpp"
#include "gradbench/evals/ode.hpp"

using clk = std::chrono::steady_clock;

namespace {

std::vector<double> wave(std::size_t n, double scale = 1.0) {
  std::vector<double> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = scale * std::sin(1.0 + 0.37 * static_cast<double>(i));
  return x;
}

// Tapes f (of x's adoubles, writing one adouble) once, then times gradient().
template <class F>
double time_gradient(short tag, std::vector<double> x, F f) {
  const int n = static_cast<int>(x.size());
  std::vector<adouble> ax(x.size());
  adouble out;
  double y;
  trace_on(tag);
  for (int i = 0; i < n; ++i) ax[static_cast<std::size_t>(i)] <<= x[static_cast<std::size_t>(i)];
  f(ax.data(), &out);
  out >>= y;
  trace_off();
  std::vector<double> g(x.size());
  gradient(tag, n, x.data(), g.data());
  int reps = 0;
  const auto t0 = clk::now();
  do {
    gradient(tag, n, x.data(), g.data());
    ++reps;
  } while (std::chrono::duration<double>(clk::now() - t0).count() < 1.0);
  return 1e3 * std::chrono::duration<double>(clk::now() - t0).count() / reps;
}

void report(const char* what, double ms) {
  std::printf("ADOL-C %s gradient %.4f ms\n", what, ms);
  std::fflush(stdout);
}

}  // namespace

int main() {
  short tag = 1;
  char name[96];
  for (std::size_t n : {2500, 20000, 80000, 640000}) {
    std::snprintf(name, sizeof name, "lse n=%zu", n);
    report(name, time_gradient(tag++, wave(n), [n](const adouble* v, adouble* out) { lse::primal<adouble>(n, v, out); }));
  }
  for (std::size_t l : {5, 7, 9}) {
    std::snprintf(name, sizeof name, "det l=%zu", l);
    report(name, time_gradient(tag++, wave(l * l), [l](const adouble* v, adouble* out) { det::primal<adouble>(l, v, out); }));
  }
  for (std::size_t n : {16, 1024, 16392}) {  // GradBench's llsq: m = 128 coefficients
    std::snprintf(name, sizeof name, "llsq n=%zu", n);
    report(name, time_gradient(tag++, wave(128, 0.1),
                               [n](const adouble* v, adouble* out) { llsq::primal<adouble>(n, 128, v, out); }));
  }
  for (auto [n, s] : {std::pair<std::size_t, std::size_t>{1000, 1}, {1000, 10}, {1000, 100}, {10000, 10}}) {
    std::snprintf(name, sizeof name, "ode n=%zu, s=%zu", n, s);
    report(name, time_gradient(tag++, wave(n, 0.5), [n, s](const adouble* v, adouble* out) {
             std::vector<adouble> y(n);
             ode::primal<adouble>(n, v, s, y.data());
             *out = y[n - 1];  // GradBench's ode: the gradient of the last value
           }));
  }
  for (auto [d, k] : {std::pair<int, int>{2, 5}, {10, 10}, {20, 5}, {32, 5}}) {  // n = 1000 points
    const int n = 1000, icf = d * (d + 1) / 2;
    const std::vector<double> x = wave(static_cast<std::size_t>(n * d));
    std::snprintf(name, sizeof name, "gmm %d_%d_%d", d, k, n);
    std::vector<double> params = wave(static_cast<std::size_t>(k + k * d + k * icf), 0.3);
    report(name, time_gradient(tag++, params, [&, d, k](const adouble* v, adouble* out) {
             const ::Wishart wishart{1.0, 0};
             gmm::objective<adouble>(d, k, n, v, v + k, v + k + k * d, v + k + k * d + k * d,
                                     x.data(), wishart, out);
           }));
  }
  for (auto [l, c] : {std::pair<int, int>{2, 1024}, {4, 1024}, {6, 1024}}) {
    const int b = 14;
    const std::vector<double> state = wave(static_cast<std::size_t>(2 * l * b), 0.5);
    std::vector<double> sequence(static_cast<std::size_t>(c * b), 0.0);
    for (int t = 0; t < c; ++t) sequence[static_cast<std::size_t>(t * b + (t * 7) % b)] = 1.0;
    std::snprintf(name, sizeof name, "lstm l=%d, c=%d", l, c);
    const std::size_t main_size = static_cast<std::size_t>(2 * l * 4 * b), extra_size = static_cast<std::size_t>(3 * b);
    std::vector<double> params = wave(main_size + extra_size, 0.3);
    report(name, time_gradient(tag++, params, [&, l, c, main_size](const adouble* v, adouble* out) {
             std::vector<adouble> s(state.begin(), state.end()), q(sequence.begin(), sequence.end());
             lstm::objective<adouble>(l, c, b, v, v + main_size, s.data(), q.data(), out);
           }));
  }
}
