// The floor under the scalar mode's llsq gradient: GradBench's llsq C++ computes the
// powers t_i^j in `double`, outside the trace, so the traced tape holds them as an
// n x 128 table of numbers that every gradient call must read. This reads that table
// once, computing the value and the gradient in one fused pass (each row in cache for
// both), as hand-written C++ would: no tape can read it faster. Not part of the CMake
// build; by hand:
//   g++ -O3 -march=native bench/llsq_table_floor.cpp -o /tmp/llsq_table_floor && /tmp/llsq_table_floor
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

int main() {
  const std::size_t n = 16392, m = 128;  // GradBench's largest llsq workload
  std::vector<double> table(n * m, 1.0), x(m, 0.5), g(m, 0.0);
  double best = 1e9, total = 0;
  for (int rep = 0; rep < 30; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < n; ++i) {
      const double* row = &table[i * m];
      double r = 0;
      for (std::size_t j = 0; j < m; ++j) r += row[j] * x[j];
      total += r * r;
      for (std::size_t j = 0; j < m; ++j) g[j] += 2 * r * row[j];
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("one fused pass over the %zu x %zu table (value and gradient): %.3f ms, %.1f GB/s (checksum %g)\n", n, m,
              best * 1e3, static_cast<double>(n * m * 8) / best / 1e9, total + g[0]);
}
