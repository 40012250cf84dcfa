#include "scaling.hpp"

#include <fmt/format.h>
#include <reel/reel.hpp>

#include <cstdio>
#include <utility>
#include <vector>

#include "measure.hpp"

namespace bench {

namespace {

using reel::Tensor;

Tensor sin_program(const Tensor& x0, int steps) {
  Tensor x = x0;
  for (int i = 0; i < steps; ++i) x = reel::sin(x) * 1.01 + reel::square(x) * 0.001;
  return reel::sum(x);
}
Tensor tanh_program(const Tensor& W, const Tensor& b, const Tensor& x0, int steps) {
  Tensor x = x0;
  for (int i = 0; i < steps; ++i) x = reel::tanh(reel::matmul(W, x) + b) * 0.5 + x * 0.5;
  return reel::sum(x);
}

// The same recurrences written with reel::scan: the tape holds one step, whatever steps.
Tensor sin_scan_program(const Tensor& x0, int steps) {
  const auto [x, ys] = reel::scan([](const Tensor& x, reel::None) {
    return std::pair{reel::sin(x) * 1.01 + reel::square(x) * 0.001, reel::none};
  }, x0, reel::none, {.length = steps});
  return reel::sum(x);
}
Tensor tanh_scan_program(const Tensor& W, const Tensor& b, const Tensor& x0, int steps) {
  const auto [x, ys] = reel::scan([&](const Tensor& x, reel::None) {
    return std::pair{reel::tanh(reel::matmul(W, x) + b) * 0.5 + x * 0.5, reel::none};
  }, x0, reel::none, {.length = steps});
  return reel::sum(x);
}

double median_call_ns(const reel::CompiledFunction& f, const std::vector<Tensor>& args) {
  return median_ns<1>({[&] { f(args); }})[0];
}

Row measure_row(const std::string& program, int steps) {
  reel::compile(reel::trace([](const Tensor& v) { return v * 2.0; }, reel::zeros({1})));  // JIT start-up
  Row r{program, steps};
  std::vector<Tensor> args;
  reel::Tape tape;
  auto t0 = Clock::now();
  const bool scan = program.ends_with("-scan");
  if (program.starts_with("sin")) {
    args = {reel::randn({8}, 1) * 0.5};
    tape = reel::trace([steps, scan](const Tensor& x) {
      return scan ? sin_scan_program(x, steps) : sin_program(x, steps); }, args[0]);
  } else {
    args = {reel::randn({16, 16}, 1) * 0.25, reel::randn({16}, 2), reel::randn({16}, 3)};
    tape = reel::trace([steps, scan](const Tensor& W, const Tensor& b, const Tensor& x) {
      return scan ? tanh_scan_program(W, b, x, steps) : tanh_program(W, b, x, steps); }, args[0], args[1], args[2]);
  }
  r.trace_ms = seconds_since(t0) * 1e3;
  t0 = Clock::now();
  dump_tape(fmt::format("{} {}", program, steps), tape);
  const reel::Tape g = reel::grad_tape(tape);
  r.grad_ms = seconds_since(t0) * 1e3;
  r.ops = g.size();
  t0 = Clock::now();
  const reel::CompiledFunction f = reel::compile(g);
  r.compile_ms = seconds_since(t0) * 1e3;
  r.kernels = f.kernels_compiled();
  r.rss_mb = peak_rss_mb();  // through trace, gradient and the first compile (the warm one is extra)
  t0 = Clock::now();
  (void)reel::compile(g);
  r.warm_ms = seconds_since(t0) * 1e3;
  r.steps_scheduled = static_cast<int>(f.num_steps());
  r.workspace = f.workspace_bytes();
  r.lower_bound = f.workspace_lower_bound();
  r.call_ns = median_call_ns(f, args);
  return r;
}

}  // namespace

int row_mode(const std::string& program, int steps) {
  if (program != "sin" && program != "tanh" && program != "sin-scan" && program != "tanh-scan") {
    fmt::print(stderr, "reel_bench --row: expected a program sin, tanh, sin-scan or tanh-scan, got {}\n", program);
    return 2;
  }
  const Row r = measure_row(program, steps);
  fmt::print("{} {} {} {} {} {} {} {} {} {} {}\n", r.ops, r.trace_ms, r.grad_ms, r.compile_ms, r.call_ns, r.kernels,
             r.steps_scheduled, r.workspace, r.lower_bound, r.rss_mb, r.warm_ms);
  return 0;
}

std::string row_json(const Row& r) {
  return fmt::format(
      "{{\"program\": \"{}\", \"steps\": {}, \"grad_tape_ops\": {}, \"trace_ms\": {:.2f}, "
      "\"grad_tape_ms\": {:.2f}, \"compile_ms\": {:.2f}, \"compile_us_per_op\": {:.3f}, "
      "\"kernels_compiled\": {}, \"warm_compile_ms\": {:.2f}, \"schedule_steps\": {}, \"call_ns\": {:.1f}, "
      "\"workspace_bytes\": {}, \"liveness_lower_bound\": {}, \"peak_rss_mb\": {:.1f}}}",
      r.program, r.steps, r.ops, r.trace_ms, r.grad_ms, r.compile_ms, r.compile_ms * 1e3 / static_cast<double>(r.ops),
      r.kernels, r.warm_ms, r.steps_scheduled, r.call_ns, r.workspace, r.lower_bound, r.rss_mb);
}

// Runs one row in a child process (this program with --row), so that peak RSS and the
// kernel cache start fresh for each row.
Row run_row(const std::string& self, const std::string& program, int steps, bool quick) {
  const std::string cmd = fmt::format("'{}' --row {} {}{}", self, program, steps, quick ? " --quick" : "");
  const std::string out = run_child(cmd);
  Row r{program, steps};
  // The child prints the fields in row_mode's order, separated by spaces.
  std::sscanf(out.c_str(), "%ld %lf %lf %lf %lf %d %d %ld %ld %lf %lf", &r.ops, &r.trace_ms, &r.grad_ms,
              &r.compile_ms, &r.call_ns, &r.kernels, &r.steps_scheduled, &r.workspace, &r.lower_bound,
              &r.rss_mb, &r.warm_ms);
  return r;
}

}  // namespace bench
