#pragma once
// The benchmark's workloads: gradients written by hand (hand_written.cpp) against
// Reel's interpreted and compiled gradient tapes, and the schedule's two runners.
#include <reel/reel.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace bench {

// One workload measured: medians of the hand-written, interpreted and compiled
// gradients side by side.
struct Result {
  std::string workload;
  reel::DType dtype;
  double hand_ns, interp_ns, compiled_ns, compile_ms;
  double scalar_math_ns;  // compiled with CompileOptions{.vector_math = false}
  double max_rel_diff;    // compiled vs hand-written, over the value and every gradient
  int64_t workspace = 0, lower_bound = 0;
  // The compiled gradient on one thread and on `threads` (bench::threads), side by side.
  int threads = 1;
  double one_thread_ns = 0, threads_ns = 0;
};

// The eight workloads (a) to (g), in the table's order.
std::vector<Result> run_workloads();

// The conv2d layer gradient of (g) by hand: im2col + CBLAS and direct loops, median ns.
struct ConvChoice {
  double im2col_ns, direct_ns;
};
ConvChoice conv_choice();

// The schedule run by the loop and by a generated driver, side by side.
struct RunnerRow {
  std::string workload;
  std::size_t steps;
  double loop_ns, driver_ns, driver_compile_ms;
};
std::vector<RunnerRow> runner_table();

}  // namespace bench
