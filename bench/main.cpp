// reel_bench: Reel's benchmark (README, "Benchmark"). Hand-written C++ gradients
// against the interpreted gradient tape (reel::play) and the compiled one
// (reel::simplegrad), measured side by side in one run (workloads.cpp); the costs of
// cached functions and of the code caches (caches.cpp); the schedule's loop against a
// generated driver; a scaling table of loops (plain C++ loops, traced step by step, and
// the same loops written with reel::scan), each row in a fresh process
// (scaling.cpp). Prints tables (report.cpp) and writes build/bench/latest.json. It
// asserts nothing. `reel_bench --help` lists the options.
#include <fmt/core.h>
#include <reel/reel.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "caches.hpp"
#include "checkpointing.hpp"
#include "measure.hpp"
#include "report.hpp"

namespace {

struct Options {
  std::string self;  // this program, run again for the child modes
  std::string out_path = REEL_BENCH_RESULTS;
  bool scaling = true, quick = false, cache_only = false, workloads_only = false, help = false, probe = false;
  std::string row_program, probe_dir;  // the child modes, --row and --compile-probe
  int row_steps = 0;
  int threads = 0;
  bool checkpoint_table = false;
  std::string checkpoint_row[3];  // the child mode --checkpoint-row: POLICY N MODE
};

// Every option, for parse and --help: its spelling, its arguments and what it does.
struct Flag {
  const char* name;
  int args;
  const char* arguments;
  const char* help;
  void (*set)(Options&, char** values);
};

constexpr Flag kFlags[] = {
    {"--quick", 0, "", "fewer and shorter timed rounds (5 of 2 ms instead of 15 of 10 ms), fewer calls in the cache rows",
     [](Options& o, char**) { o.quick = true; }},
    {"--no-scaling", 0, "", "skip the scaling table, whose rows take the longest",
     [](Options& o, char**) { o.scaling = false; }},
    {"--workloads-only", 0, "", "only the workload table (a) to (g) (and its JSON): what bench/torch_bench.py reads",
     [](Options& o, char**) { o.workloads_only = true; }},
    {"--cache-only", 0, "", "only the rows of cached functions, code caches and Tracker",
     [](Options& o, char**) { o.cache_only = true; }},
    {"--threads", 1, "N", "run on N threads (reel::set_num_threads; 0, the default: every core); the threads column compares 1 and N",
     [](Options& o, char** v) { o.threads = std::atoi(v[0]); }},
    {"--out", 1, "FILE", "write the results (JSON) to FILE instead of build/bench/latest.json",
     [](Options& o, char** v) { o.out_path = v[0]; }},
    {"--row", 2, "PROGRAM STEPS",
     "(run by reel_bench itself) measure one scaling row, PROGRAM sin, tanh, sin-scan or tanh-scan, and print its fields on one line",
     [](Options& o, char** v) { o.row_program = v[0], o.row_steps = std::atoi(v[1]); }},
    {"--compile-probe", 1, "DIR",
     "(run by reel_bench itself) compile the MLP gradient with the code cache in DIR and print its times on one line",
     [](Options& o, char** v) { o.probe = true, o.probe_dir = v[0]; }},
    {"--checkpoint-table", 0, "", "only the checkpointing table: memory against recomputation time (checkpointing.cpp)",
     [](Options& o, char**) { o.checkpoint_table = true; }},
    {"--checkpoint-row", 3, "POLICY N MODE", "(run by reel_bench itself) measure one row of the checkpointing table",
     [](Options& o, char** v) { o.checkpoint_row[0] = v[0], o.checkpoint_row[1] = v[1], o.checkpoint_row[2] = v[2]; }},
    {"--help", 0, "", "this list", [](Options& o, char**) { o.help = true; }},
};

void print_usage(std::FILE* to) {
  fmt::print(to, "usage: reel_bench [options]\n");
  for (const Flag& f : kFlags)
    fmt::print(to, "  {:<30} {}\n", fmt::format("{} {}", f.name, f.arguments), f.help);
  fmt::print(to, "environment: REEL_BENCH_DUMP_TAPES=DIR writes each workload's forward tape to DIR\n");
}

// The options, or nothing (after the usage on standard error) for an unknown one.
bool parse(int argc, char** argv, Options& o) {
  o.self = argv[0];
  for (int i = 1; i < argc; ++i) {
    const Flag* flag = nullptr;
    for (const Flag& f : kFlags)
      if (argv[i] == std::string(f.name) && i + f.args < argc) flag = &f;
    if (flag == nullptr) {
      print_usage(stderr);
      return false;
    }
    flag->set(o, argv + i + 1);
    i += flag->args;
  }
  if (o.quick) bench::rounds = {.count = 5, .seconds = 0.002};
  if (o.threads < 0) {
    fmt::print(stderr, "reel_bench: --threads expects a count >= 0 (0: every core), given {}\n", o.threads);
    return false;
  }
  return true;
}

// Starts the JIT once, so that its one-off set-up is not counted as a compile.
void start_jit() {
  const auto t0 = bench::Clock::now();
  reel::compile(reel::trace([](const reel::Tensor& v) { return v * 2.0; }, reel::zeros({1})));
  fmt::print("JIT start-up: {:.1f} ms, host CPU {}\n\n", bench::seconds_since(t0) * 1e3, reel::jit_cpu());
}

void cache_rows(const Options& o) {
  bench::cache_table(o.quick);
  bench::disk_cache_rows(o.self);
  bench::tracker_rows(o.quick);
}

// The scaling table: each row in a child process, printed as it comes.
std::vector<bench::Row> scaling_rows(const Options& o) {
  bench::print_scaling_header();
  std::vector<std::pair<std::string, int>> plan;
  // Each plain loop, then the same loop written with reel::scan.
  for (const char* program : {"tanh", "tanh-scan"})
    for (int n : {10, 100, 1000, 10000}) plan.emplace_back(program, n);
  for (const char* program : {"sin", "sin-scan"}) {
    for (int n : {10, 100, 1000, 10000}) plan.emplace_back(program, n);
    plan.emplace_back(program, 84000);  // plain: over 1,000,000 gradient-tape operations
  }
  std::vector<bench::Row> rows;
  for (const auto& [program, n] : plan) {
    rows.push_back(bench::run_row(o.self, program, n, o.quick));
    bench::print_scaling_row(rows.back());
  }
  return rows;
}

int full_run(const Options& o) {
  const std::vector<bench::Result> results = bench::run_workloads();
  bench::print_workload_table(results);
  if (o.workloads_only) return bench::write_results(o.out_path, results, {}, {});
  bench::print_conv_choice(bench::conv_choice());
  cache_rows(o);
  bench::print_runner_header();
  const std::vector<bench::RunnerRow> runners = bench::runner_table();
  bench::print_runner_rows(runners);
  const std::vector<bench::Row> rows = o.scaling ? scaling_rows(o) : std::vector<bench::Row>{};
  return bench::write_results(o.out_path, results, runners, rows);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 2;
  if (o.help) return print_usage(stdout), 0;
  if (o.probe) return bench::compile_probe(o.probe_dir);  // sets its own code cache
  // Compile times here are cold ones: the persistent code cache is off (for this
  // process and the rows' child processes) except where it is measured.
  setenv("REEL_CACHE_DIR", "off", 1);
  reel::set_code_cache_dir("off");
  if (!o.row_program.empty()) return bench::row_mode(o.row_program, o.row_steps);
  if (!o.checkpoint_row[0].empty())
    return bench::checkpoint_row_mode(o.checkpoint_row[0], std::atol(o.checkpoint_row[1].c_str()), o.checkpoint_row[2]);
  if (o.checkpoint_table) return bench::checkpoint_table(o.self, o.quick);
  reel::set_num_threads(o.threads);
  bench::threads = reel::num_threads();
  fmt::print("threads: {} (reel::set_num_threads; CBLAS's too)\n", bench::threads);
  start_jit();
  if (o.cache_only) return cache_rows(o), 0;
  return full_run(o);
}
