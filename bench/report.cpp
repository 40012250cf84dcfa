#include "report.hpp"

#include <fmt/format.h>
#include <reel/reel.hpp>

#include <cstdio>
#include <fstream>

#include "measure.hpp"

namespace bench {

void print_workload_table(const std::vector<Result>& results) {
  const int n = results.empty() ? 1 : results[0].threads;
  fmt::print("{:<40} {:>5} {:>10} {:>10} {:>10} {:>10} {:>9} {:>11} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>7}\n",
             "workload", "dtype", "hand", "interp", "compiled", "compile", "comp/hand", "interp/comp",
             "no-vec-math", "max rel diff", "workspace", "live bound", "1 thread", fmt::format("{} threads", n),
             "1/n");
  for (const Result& r : results)
    fmt::print(
        "{:<40} {:>5} {:>10} {:>10} {:>10} {:>7.1f} ms {:>9.2f} {:>11.1f} {:>12} {:>12.1e} {:>10} {:>10} {:>10} {:>10} "
        "{:>7.2f}\n",
        r.workload, reel::dtype_name(r.dtype), human(r.hand_ns), human(r.interp_ns), human(r.compiled_ns),
        r.compile_ms, r.compiled_ns / r.hand_ns, r.interp_ns / r.compiled_ns, human(r.scalar_math_ns),
        r.max_rel_diff, r.workspace, r.lower_bound, human(r.one_thread_ns), human(r.threads_ns),
        r.one_thread_ns / r.threads_ns);
  fmt::print("\nno-vec-math: the compiled gradient with one scalar libm call per element for\n"
             "exp/tanh (CompileOptions{{.vector_math = false}}), for comparison. workspace: bytes of\n"
             "scratch memory after reuse; live bound: the most bytes alive at one step. Everything\n"
             "runs on {} threads (--threads; CBLAS too), but the threads column: the compiled\n"
             "gradient on 1 thread and on {}, measured side by side, and 1/n the speedup.\n", n, n);
}

void print_conv_choice(const ConvChoice& c) {
  fmt::print("\nconv2d layer gradient by hand (g): im2col + CBLAS {} vs direct loops {}: direct/im2col {:.2f}\n",
             human(c.im2col_ns), human(c.direct_ns), c.direct_ns / c.im2col_ns);
}

void print_runner_header() {
  fmt::print("\nRunning the schedule: a loop over its steps vs a generated driver function\n");
  fmt::print("{:<34} {:>7} {:>10} {:>10} {:>13} {:>16}\n", "gradient of", "steps", "loop", "driver",
             "driver/loop", "driver compile");
}

void print_runner_rows(const std::vector<RunnerRow>& runners) {
  for (const RunnerRow& r : runners)
    fmt::print("{:<34} {:>7} {:>10} {:>10} {:>13.3f} {:>13.2f} ms\n", r.workload, r.steps, human(r.loop_ns),
               human(r.driver_ns), r.driver_ns / r.loop_ns, r.driver_compile_ms);
}

void print_scaling_header() {
  fmt::print("\nScaling (each row in a fresh process; times of the gradient tape of the program; "
             "warm comp: compiling it again, every kernel cached):\n");
  fmt::print("{:<46} {:>10} {:>9} {:>10} {:>10} {:>9} {:>8} {:>10} {:>9} {:>7} {:>10} {:>11} {:>11} {:>6} {:>9}\n", "program",
             "grad ops", "trace", "grad_tape", "compile", "us/op", "kernels", "warm comp", "us/op", "steps", "call",
             "workspace", "live bound", "ws/lb", "peak RSS");
}

void print_scaling_row(const Row& r) {
  const std::string name = fmt::format("{}{}, {} steps",
                                       r.program.starts_with("sin") ? "sin(x)*1.01+square(x)*0.001" : "tanh(Wx+b)*.5+x*.5 16x16",
                                       r.program.ends_with("-scan") ? " scan" : "", r.steps);
  const double ops = static_cast<double>(r.ops);
  const double ws_over_lb = r.lower_bound > 0 ? static_cast<double>(r.workspace) / static_cast<double>(r.lower_bound) : 1.0;
  fmt::print("{:<46} {:>10} {:>6.1f} ms {:>7.1f} ms {:>7.1f} ms {:>9.2f} {:>8} {:>7.1f} ms {:>9.2f} {:>7} {:>10} {:>11} "
             "{:>11} {:>6.2f} {:>6.0f} MB\n",
             name, r.ops, r.trace_ms, r.grad_ms, r.compile_ms, r.compile_ms * 1e3 / ops, r.kernels, r.warm_ms,
             r.warm_ms * 1e3 / ops, r.steps_scheduled, human(r.call_ns), r.workspace, r.lower_bound, ws_over_lb, r.rss_mb);
  std::fflush(stdout);
}

int write_results(const std::string& out_path, const std::vector<Result>& results, const std::vector<RunnerRow>& runners,
                  const std::vector<Row>& rows) {
  std::string json = "[\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    json += fmt::format(
        "  {{\"workload\": \"{}\", \"dtype\": \"{}\", \"hand_ns\": {:.1f}, \"interp_ns\": {:.1f}, "
        "\"compiled_ns\": {:.1f}, \"compile_ms\": {:.2f}, \"compiled_over_hand\": {:.3f}, "
        "\"interp_over_compiled\": {:.2f}, \"compiled_scalar_math_ns\": {:.1f}, "
        "\"max_rel_diff\": {:.2e}, \"workspace_bytes\": {}, \"liveness_lower_bound\": {}, \"threads\": {}, "
        "\"one_thread_ns\": {:.1f}, \"threads_ns\": {:.1f}}},\n",
        r.workload, reel::dtype_name(r.dtype), r.hand_ns, r.interp_ns, r.compiled_ns, r.compile_ms,
        r.compiled_ns / r.hand_ns, r.interp_ns / r.compiled_ns, r.scalar_math_ns, r.max_rel_diff,
        r.workspace, r.lower_bound, r.threads, r.one_thread_ns, r.threads_ns);
  }
  for (const RunnerRow& r : runners)
    json += fmt::format("  {{\"runner_workload\": \"{}\", \"steps\": {}, \"loop_ns\": {:.1f}, \"driver_ns\": {:.1f}, "
                        "\"driver_compile_ms\": {:.2f}}},\n",
                        r.workload, r.steps, r.loop_ns, r.driver_ns, r.driver_compile_ms);
  for (const Row& r : rows) json += "  " + row_json(r) + ",\n";
  json.erase(json.size() - 2);  // the last comma
  json += "\n]\n";
  std::ofstream file(out_path);
  file << json;
  file.close();
  if (!file) {
    fmt::print(stderr, "\nreel_bench: cannot write {}\n", out_path);
    return 1;
  }
  fmt::print("\nwrote {}\n", out_path);
  return 0;
}

}  // namespace bench
