#pragma once
// How reel_bench measures: clocks, the median of alternating calibrated rounds (so that
// functions measured together share the machine's slow spells), and small helpers the
// tables share.
#include <reel/reel.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace bench {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Timed rounds per measurement (the median is reported) and the length of one round;
// --quick makes them 5 rounds of 2 ms.
struct Rounds {
  int count = 15;
  double seconds = 0.01;
};
inline Rounds rounds;

// Median time of one call of each function, in nanoseconds. Rounds of calibrated
// batches alternate between the functions, so that a slow spell of the machine hits
// all of them alike and their ratios stay fair.
// `before`, if given, runs before each batch of calls[k] (untimed): reel_bench sets the
// thread count there.
template <std::size_t N>
std::array<double, N> median_ns(const std::array<std::function<void()>, N>& calls,
                                const std::array<std::function<void()>, N>& before = {}) {
  auto prepare = [&](std::size_t k) {
    if (before[k]) before[k]();
  };
  std::array<int64_t, N> batch{};
  for (std::size_t k = 0; k < N; ++k) {
    prepare(k);
    calls[k]();  // warm up
    const auto t0 = Clock::now();
    calls[k]();
    const double one = std::max(seconds_since(t0), 1e-9);
    batch[k] = static_cast<int64_t>(std::max(1.0, rounds.seconds / one));
  }
  std::array<std::vector<double>, N> samples;
  for (int r = 0; r < rounds.count; ++r)
    for (std::size_t k = 0; k < N; ++k) {
      prepare(k);
      const auto t0 = Clock::now();
      for (int64_t i = 0; i < batch[k]; ++i) calls[k]();
      samples[k].push_back(seconds_since(t0) * 1e9 / static_cast<double>(batch[k]));
    }
  std::array<double, N> medians{};
  for (std::size_t k = 0; k < N; ++k) {
    auto& v = samples[k];
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    medians[k] = v[v.size() / 2];
  }
  return medians;
}

// The thread count reel_bench runs at (--threads; every core by default), and the one
// its threads column compares with one thread.
inline int threads = 0;

// A duration for the tables: "30 ns", "1.2 us", "3.45 ms".
std::string human(double ns);

// This process's resident memory now, in MB.
double current_rss_mb();
// This process's peak resident memory so far, in MB (VmHWM: unlike getrusage's
// ru_maxrss, it does not include what the parent held when it forked this process).
double peak_rss_mb();

// With REEL_BENCH_DUMP_TAPES=DIR, writes a workload's forward tape to DIR as text, so
// that gradient tapes of two versions can be compared with reel-opt.
void dump_tape(const std::string& workload, const reel::Tape& tape);

// Runs `cmd` (this program in a child mode) and returns what it printed; a
// std::runtime_error if it cannot be run or fails.
std::string run_child(const std::string& cmd);

}  // namespace bench
