#pragma once
// The scaling table: gradients of two loops at 10 to 84,000 steps, written as plain
// C++ loops (traced step by step: sin, tanh) and with reel::scan (one loop operation:
// sin-scan, tanh-scan), each row measured in a fresh process (this program with --row)
// so that its peak RSS and its kernels compiled are its own.
#include <cstdint>
#include <string>

namespace bench {

// One row of the scaling table.
struct Row {
  std::string program;  // "sin", "tanh", "sin-scan" or "tanh-scan"
  int steps = 0;
  int64_t ops = 0;
  double trace_ms = 0, grad_ms = 0, compile_ms = 0, call_ns = 0;
  double warm_ms = 0;  // compiling the same tape again: every kernel cached
  int kernels = 0, steps_scheduled = 0;
  int64_t workspace = 0, lower_bound = 0, no_reuse = 0;
  double rss_mb = 0;
};

// --row PROGRAM STEPS: measures one row in this process and prints its fields on one
// line, for run_row in the parent.
int row_mode(const std::string& program, int steps);

// Runs one row in a child process (`self` --row ...).
Row run_row(const std::string& self, const std::string& program, int steps, bool quick);

// A row as a JSON object, for the results file.
std::string row_json(const Row& r);

}  // namespace bench
