// Reel's benchmark: hand-written C++ gradients against the interpreted gradient tape
// (reel::play) and the compiled one (reel::simplegrad), measured side by side in one
// run. Prints a table and writes build/bench/latest.json (--out FILE for elsewhere;
// bench/results/latest.json is the recorded run). It asserts nothing.
//
// Then a scaling table: traced loops of 10 to 10,000 steps and a tape of over a
// million operations, each measured in a fresh process (so that its peak RSS and its
// kernels compiled are its own): trace, grad_tape and compile times, kernels, call
// time, workspace against its liveness lower bound.
//
//   ./build/bench/reel_bench [--quick] [--no-scaling] [--cache-only] [--out FILE]
#include <fmt/core.h>
#include <fmt/format.h>
#include <reel/reel.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>

#include <sys/resource.h>
#include <unistd.h>

#include <random>

#include "hand_written.hpp"

using reel::DType;
using reel::Tensor;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int g_rounds = 15;           // timed rounds per measurement; the median is reported
double g_round_seconds = 0.01;

// Median time of one call of each function, in nanoseconds. Rounds of calibrated
// batches alternate between the functions, so that a slow spell of the machine hits
// all of them alike and their ratios stay fair.
template <std::size_t N>
std::array<double, N> median_ns(const std::array<std::function<void()>, N>& calls) {
  std::array<int64_t, N> batch{};
  for (std::size_t k = 0; k < N; ++k) {
    calls[k]();  // warm up
    const auto t0 = Clock::now();
    calls[k]();
    const double one = std::max(seconds_since(t0), 1e-9);
    batch[k] = static_cast<int64_t>(std::max(1.0, g_round_seconds / one));
  }
  std::array<std::vector<double>, N> samples;
  for (int r = 0; r < g_rounds; ++r)
    for (std::size_t k = 0; k < N; ++k) {
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

struct Result {
  std::string workload;
  DType dtype;
  double hand_ns, interp_ns, compiled_ns, compile_ms;
  double scalar_math_ns;  // compiled with CompileOptions{.vector_math = false}
  double max_rel_diff;  // compiled vs hand-written, over the value and every gradient
  int64_t workspace = 0, lower_bound = 0;
};

double max_rel_diff(const std::vector<Tensor>& a, const std::vector<std::vector<double>>& b) {
  double m = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    const auto va = a[k].values();
    for (std::size_t i = 0; i < va.size(); ++i)
      m = std::max(m, std::abs(va[i] - b[k][i]) / (1 + std::abs(b[k][i])));
  }
  return m;
}

// The hand-written version of a workload: `run` computes the value and gradients into
// its own buffers (this is what is timed); `outputs` copies them out, value first, for
// the agreement check.
struct Hand {
  std::function<void()> run;
  std::function<std::vector<std::vector<double>>()> outputs;
};

// With REEL_BENCH_DUMP_TAPES=DIR, each workload's forward tape is written to DIR as
// text, so that gradient tapes of two versions can be compared with reel-opt.
void dump_tape(const std::string& workload, const reel::Tape& tape) {
  const char* dir = std::getenv("REEL_BENCH_DUMP_TAPES");
  if (dir == nullptr) return;
  std::string name;
  for (char c : workload) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  std::ofstream(std::string(dir) + "/" + name + ".tape") << reel::to_string(tape) << "\n";
}

// Times one workload: f traced at args, against the hand-written version.
template <class F, class... T>
Result measure(const std::string& workload, DType dtype, F f, const Hand& hand, const T&... args) {
  std::vector<double> compile_ms;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    auto g = reel::simplegrad(f, args...);
    compile_ms.push_back(seconds_since(t0) * 1e3);
  }
  std::sort(compile_ms.begin(), compile_ms.end());
  const auto g = reel::simplegrad(f, args...);
  const reel::Tape forward = reel::trace(f, args...);
  dump_tape(fmt::format("{} {}", workload, reel::dtype_name(dtype)), forward);
  const reel::Tape tape = reel::grad_tape(forward);
  const std::vector<Tensor> argv{args...};
  const reel::GradFunction<sizeof...(T)> scalar_math(reel::compile(tape, {.vector_math = false}));

  Result r{workload, dtype, 0, 0, 0, compile_ms[1], 0, 0};
  const auto ns = median_ns<4>({hand.run, [&] { reel::play(tape, argv); }, [&] { g(args...); },
                                [&] { scalar_math(args...); }});
  r.hand_ns = ns[0];
  r.interp_ns = ns[1];
  r.compiled_ns = ns[2];
  r.scalar_math_ns = ns[3];
  const auto out = g(args...);
  hand.run();
  r.max_rel_diff = max_rel_diff(std::vector<Tensor>(out.begin(), out.end()), hand.outputs());
  r.workspace = g.compiled().workspace_bytes();
  r.lower_bound = g.compiled().workspace_lower_bound();
  return r;
}

template <class T>
std::vector<double> to_vec(const std::vector<T>& v) { return {v.begin(), v.end()}; }

Result sigmoid_sum(int64_t n, DType dtype) {
  const Tensor x = reel::randn({n}, 1, dtype);
  auto L = [](const Tensor& v) { return reel::sum(reel::sigmoid(v)); };
  std::vector<double> dx64(n);
  std::vector<float> dx32(n);
  double value = 0;
  Hand hand{[&] {
              value = dtype == DType::f64
                          ? bench::sigmoid_sum_grad(x.data<double>(), dx64.data(), n)
                          : bench::sigmoid_sum_grad(x.data<float>(), dx32.data(), n);
            },
            [&] {
              return std::vector<std::vector<double>>{
                  {value}, dtype == DType::f64 ? to_vec(dx64) : to_vec(dx32)};
            }};
  return measure(fmt::format("(a/b) sum(sigmoid(x)), n={}", n), dtype, L, hand, x);
}

Result linear_sum() {
  const int64_t m = 128, k = 784, n = 100;
  const Tensor W = reel::randn({m, k}, 1), b = reel::randn({m, 1}, 2), x = reel::randn({k, n}, 3);
  auto loss = [](const Tensor& w, const Tensor& bias, const Tensor& v) {
    return reel::sum(reel::matmul(w, v) + bias);
  };
  bench::LinearBuffers buf(m, k, n);
  double value = 0;
  Hand hand{[&] {
              value = bench::linear_sum_grad(W.data<double>(), b.data<double>(),
                                             x.data<double>(), m, k, n, buf);
            },
            [&] { return std::vector<std::vector<double>>{{value}, buf.dW, buf.db, buf.dx}; }};
  return measure("(c) sum(matmul(W,x)+b), 128x784x100", DType::f64, loss, hand, W, b, x);
}

Result softmax_xent() {
  const int64_t rows = 256, cols = 1000;
  const Tensor z = reel::randn({rows, cols}, 11, DType::f32) * 3.0;
  std::vector<double> onehot(static_cast<std::size_t>(rows * cols), 0.0);
  for (int64_t i = 0; i < rows; ++i) onehot[static_cast<std::size_t>(i * cols + (i * 37) % cols)] = 1.0;
  const Tensor y = reel::tensor(onehot, {rows, cols}, DType::f32);
  auto loss = [&](const Tensor& logits) {
    return -reel::sum(reel::log_softmax(logits, 1) * y) / static_cast<double>(rows);
  };
  std::vector<float> dz(static_cast<std::size_t>(rows * cols));
  float value = 0;
  Hand hand{[&] { value = bench::softmax_xent_grad(z.data<float>(), y.data<float>(), rows, cols, dz.data()); },
            [&] { return std::vector<std::vector<double>>{{value}, to_vec(dz)}; }};
  return measure("(e) softmax cross-entropy, 256x1000", DType::f32, loss, hand, z);
}

Result logsumexp_bench() {
  const int64_t n = 1000000;
  const Tensor x = reel::randn({n}, 12) * 10.0;
  auto f = [](const Tensor& v) { return reel::logsumexp(v); };
  std::vector<double> dx(static_cast<std::size_t>(n));
  double value = 0;
  Hand hand{[&] { value = bench::logsumexp_grad(x.data<double>(), n, dx.data()); },
            [&] { return std::vector<std::vector<double>>{{value}, dx}; }};
  return measure("(f) logsumexp, n=1000000", DType::f64, f, hand, x);
}

Result conv_layer() {
  const int64_t n = 32, c = 3, h = 32, w = 32, o = 16;
  const Tensor x = reel::randn({n, c, h, w}, 13, DType::f32), k = reel::randn({o, c, 3, 3}, 14, DType::f32) * 0.2;
  const Tensor r = reel::randn({n, o, h, w}, 15, DType::f32);
  auto loss = [&](const Tensor& xx, const Tensor& ww) {
    return reel::sum(reel::conv2d(xx, ww, {.padding = {1, 1}}) * r);
  };
  bench::ConvBuffers buf(n, c, h, w, o);
  float value = 0;
  Hand hand{[&] { value = bench::conv_layer_grad(x.data<float>(), k.data<float>(), r.data<float>(), n, c, h, w, o, buf); },
            [&] { return std::vector<std::vector<double>>{{value}, to_vec(buf.dx), to_vec(buf.dw)}; }};
  return measure("(g) conv2d layer, 32x3x32x32, 16x3x3x3", DType::f32, loss, hand, x, k);
}

template <class T>
Result mlp(DType dtype) {
  const int64_t h = 128, k = 784, o = 10, n = 100;
  const Tensor W1 = reel::randn({h, k}, 1, dtype) * 0.05, b1 = reel::randn({h, 1}, 2, dtype);
  const Tensor W2 = reel::randn({o, h}, 3, dtype) * 0.1, b2 = reel::randn({o, 1}, 4, dtype);
  const Tensor x = reel::randn({k, n}, 5, dtype), y = reel::randn({o, n}, 6, dtype);
  auto loss = [&](const Tensor& w1, const Tensor& c1, const Tensor& w2, const Tensor& c2) {
    return reel::sum(reel::square(reel::matmul(w2, reel::tanh(reel::matmul(w1, x) + c1)) + c2 - y));
  };
  bench::MlpBuffers<T> buf(h, k, o, n);
  T value = 0;
  Hand hand{[&] {
              value = bench::mlp_grad(W1.data<T>(), b1.data<T>(), W2.data<T>(), b2.data<T>(),
                                      x.data<T>(), y.data<T>(), h, k, o, n, buf);
            },
            [&] {
              return std::vector<std::vector<double>>{{static_cast<double>(value)},
                                                      to_vec(buf.dW1), to_vec(buf.db1),
                                                      to_vec(buf.dW2), to_vec(buf.db2)};
            }};
  return measure("(d) 2-layer MLP, 784-128-10, batch 100", dtype, loss, hand, W1, b1, W2, b2);
}

std::string human(double ns) {
  if (ns < 1e3) return fmt::format("{:.0f} ns", ns);
  if (ns < 1e6) return fmt::format("{:.1f} us", ns / 1e3);
  return fmt::format("{:.2f} ms", ns / 1e6);
}

// The schedule run by the loop and by a generated driver, side by side.
struct RunnerRow {
  std::string workload;
  std::size_t steps;
  double loop_ns, driver_ns, driver_compile_ms;
};

RunnerRow compare_runners(const std::string& workload, const reel::Tape& gradient,
                          const std::vector<Tensor>& args) {
  using Runner = reel::CompileOptions::Runner;
  const reel::CompiledFunction loop = reel::compile(gradient, {.runner = Runner::loop});
  const auto t0 = Clock::now();
  const reel::CompiledFunction driver = reel::compile(gradient, {.runner = Runner::driver});
  const double driver_ms = seconds_since(t0) * 1e3;  // its kernels are cached by then
  const auto ns = median_ns<2>({[&] { loop(args); }, [&] { driver(args); }});
  return {workload, loop.num_steps(), ns[0], ns[1], driver_ms};
}

std::vector<RunnerRow> runner_table() {
  std::vector<RunnerRow> rows;
  {
    const Tensor x = reel::randn({5}, 1);
    rows.push_back(compare_runners("sum(sigmoid(x)), n=5", reel::grad_tape(reel::trace(
        [](const Tensor& v) { return reel::sum(reel::sigmoid(v)); }, x)), {x}));
  }
  for (int n : {10, 100}) {
    const Tensor x = reel::randn({8}, 1) * 0.5;
    rows.push_back(compare_runners(fmt::format("sin recurrence, {} steps", n), reel::grad_tape(reel::trace(
        [n](const Tensor& v) {
          Tensor y = v;
          for (int i = 0; i < n; ++i) y = reel::sin(y) * 1.01 + reel::square(y) * 0.001;
          return reel::sum(y);
        }, x)), {x}));
  }
  for (int n : {10, 100, 1000}) {
    const Tensor W = reel::randn({16, 16}, 1) * 0.25, b = reel::randn({16}, 2), x = reel::randn({16}, 3);
    rows.push_back(compare_runners(fmt::format("tanh recurrence, {} steps", n), reel::grad_tape(reel::trace(
        [n](const Tensor& w, const Tensor& c, const Tensor& v) {
          Tensor y = v;
          for (int i = 0; i < n; ++i) y = reel::tanh(reel::matmul(w, y) + c) * 0.5 + y * 0.5;
          return reel::sum(y);
        }, W, b, x)), {W, b, x}));
  }
  return rows;
}

// One row of the scaling table, measured in this process (see run_row).
struct Row {
  std::string program;
  int steps = 0;
  int64_t ops = 0;
  double trace_ms = 0, grad_ms = 0, compile_ms = 0, call_ns = 0;
  double warm_ms = 0;  // compiling the same tape again: every kernel cached
  int kernels = 0, steps_scheduled = 0;
  int64_t workspace = 0, lower_bound = 0, no_reuse = 0;
  double rss_mb = 0;
};

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

double median_call_ns(const reel::CompiledFunction& f, const std::vector<Tensor>& args) {
  return median_ns<1>({[&] { f(args); }})[0];
}

Row measure_row(const std::string& program, int steps) {
  reel::compile(reel::trace([](const Tensor& v) { return v * 2.0; }, reel::zeros({1})));  // JIT start-up
  Row r{program, steps};
  std::vector<Tensor> args;
  reel::Tape tape;
  auto t0 = Clock::now();
  if (program == "sin") {
    args = {reel::randn({8}, 1) * 0.5};
    tape = reel::trace([steps](const Tensor& x) { return sin_program(x, steps); }, args[0]);
  } else {
    args = {reel::randn({16, 16}, 1) * 0.25, reel::randn({16}, 2), reel::randn({16}, 3)};
    tape = reel::trace([steps](const Tensor& W, const Tensor& b, const Tensor& x) {
      return tanh_program(W, b, x, steps); }, args[0], args[1], args[2]);
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
  rusage u{};  // peak RSS through trace, gradient and the first compile (the warm one is extra)
  getrusage(RUSAGE_SELF, &u);
  r.rss_mb = static_cast<double>(u.ru_maxrss) / 1024.0;
  t0 = Clock::now();
  (void)reel::compile(g);
  r.warm_ms = seconds_since(t0) * 1e3;
  r.steps_scheduled = static_cast<int>(f.num_steps());
  r.workspace = f.workspace_bytes();
  r.lower_bound = f.workspace_lower_bound();
  r.call_ns = median_call_ns(f, args);
  return r;
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
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("cannot run " + cmd);
  Row r{program, steps};
  char line[4096];
  std::string out;
  while (std::fgets(line, sizeof line, pipe) != nullptr) out += line;
  if (pclose(pipe) != 0) throw std::runtime_error("failed: " + cmd + "\n" + out);
  // The child prints the fields in row_json's order, separated by spaces.
  std::sscanf(out.c_str(), "%ld %lf %lf %lf %lf %d %d %ld %ld %lf %lf", &r.ops, &r.trace_ms, &r.grad_ms,
              &r.compile_ms, &r.call_ns, &r.kernels, &r.steps_scheduled, &r.workspace, &r.lower_bound,
              &r.rss_mb, &r.warm_ms);
  return r;
}

}  // namespace

double current_rss_mb() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

Tensor iterative(const Tensor& x, int n) {  // Yota's example
  Tensor y = x;
  for (int i = 0; i < n; ++i) y = y * 2.0;
  return reel::sum(y);
}

// Cached functions (reel::simplegrad(f), reel::jit): what a hit costs over the bare
// compiled call, what a guard costs, a dynamic program called with random loop counts,
// the first call interpreted or compiled, and memory over many signatures.
void cache_table(bool quick) {
  fmt::print("\nCached functions (reel::simplegrad(f) / reel::jit):\n");
  const Tensor a = reel::randn({5}, 1), b = reel::randn({5}, 2), c = reel::randn({5}, 3);
  auto f = [](const Tensor& x, const Tensor& y, const Tensor& z) { return reel::sum(x * y + z); };
  const auto bare = reel::simplegrad(f, a, b, c);
  const auto cached = reel::simplegrad(f);
  (void)cached(a, b, c);
  (void)cached(a, b, c);  // compiled now
  auto guarded = [](const Tensor& x, const Tensor& y, const Tensor& z) {
    return reel::sum(x) > -1e9 ? reel::sum(x * y + z) : reel::sum(x);
  };
  const auto bare_guarded = reel::simplegrad(guarded, a, b, c);
  const auto ns = median_ns<3>({[&] { bare(a, b, c); }, [&] { cached(a, b, c); }, [&] { bare_guarded(a, b, c); }});
  fmt::print("  hit, 3 arguments of f64[5]: {} vs the bare compiled call {}: +{:.0f} ns\n", human(ns[1]), human(ns[0]),
             ns[1] - ns[0]);
  fmt::print("  a guard (sum(x) > c, checked in compiled code): {} vs {} without: +{:.0f} ns\n", human(ns[2]),
             human(ns[0]), ns[2] - ns[0]);

  // Yota's iterative(x, n) with n drawn from 1..50.
  const int calls = quick ? 1000 : 10000, remade_calls = quick ? 20 : 200;
  std::mt19937 rng(7);
  std::vector<int> ns_drawn(static_cast<std::size_t>(calls));
  for (int& n : ns_drawn) n = std::uniform_int_distribution<int>(1, 50)(rng);
  const Tensor x = reel::randn({4}, 4);
  auto g = reel::simplegrad(iterative);
  auto t0 = Clock::now();
  for (int n : ns_drawn) (void)g(x, n);
  const double cached_us = seconds_since(t0) * 1e6 / calls;
  t0 = Clock::now();
  for (int n : ns_drawn) (void)reel::grad(iterative, x, n);  // re-trace and interpret every call (Yota's way)
  const double retrace_us = seconds_since(t0) * 1e6 / calls;
  t0 = Clock::now();
  for (int i = 0; i < remade_calls; ++i) {
    const int n = ns_drawn[static_cast<std::size_t>(i)];
    (void)reel::simplegrad([n](const Tensor& v) { return iterative(v, n); }, x)(x);  // trace + compile every call
  }
  const double remade_us = seconds_since(t0) * 1e6 / remade_calls;
  const reel::CacheInfo info = g.cache_info();
  fmt::print("  iterative(x, n), n random in 1..50, {} calls: cached {:.1f} us/call, re-trace + interpret {:.1f} us/call "
             "({:.1f}x), simplegrad(f, args...) re-made {:.0f} us/call ({:.0f}x); {} hits, {} misses, {} compilations, "
             "{:.0f} ms compiling\n",
             calls, cached_us, retrace_us, retrace_us / cached_us, remade_us, remade_us / cached_us, info.hits,
             info.misses, info.compilations, info.compile_seconds * 1e3);

  // A signature's first call: interpreted (compile_after = 2, the default) or compiled (1).
  double first_interp = 0, first_compiled = 0;
  for (int n = 30; n < 40; ++n) {
    auto lazy = reel::simplegrad(iterative);
    auto eager = reel::simplegrad(iterative, {.compile_after = 1});
    t0 = Clock::now();
    (void)lazy(x, n);
    first_interp += seconds_since(t0);
    t0 = Clock::now();
    (void)eager(x, n);
    first_compiled += seconds_since(t0);
  }
  fmt::print("  a signature's first call (iterative, n = 30..39): interpreted {:.0f} us, compiled {:.0f} us ({:.1f}x)\n",
             first_interp * 1e5, first_compiled * 1e5, first_compiled / first_interp);

  // Memory over many distinct signatures with a small bound.
  const int signatures = quick ? 10000 : 100000;
  auto h = reel::jit([](const Tensor& v, int n) { return v * static_cast<double>(n); }, {.max_entries = 64});
  (void)h(x, 0);
  const double before = current_rss_mb();
  for (int n = 1; n <= signatures; ++n) (void)h(x, n);
  const double after = current_rss_mb();
  fmt::print("  {} distinct signatures through one jit function (max_entries 64): RSS {:.1f} MB before, {:.1f} MB after; "
             "{} evictions\n",
             signatures, before, after, h.cache_info().evictions);
}

// Tracker's param/back: steps of a small regression trained with back and in-place
// updates; what is recorded must be released with the loss of each step.
void tracker_rows(bool quick) {
  const int steps = quick ? 10000 : 100000;
  Tensor W = reel::param(reel::randn({8, 16}, 1) * 0.1), b = reel::param(reel::zeros({8}));
  const Tensor x = reel::randn({16}, 2), target = reel::randn({8}, 3);
  auto step = [&] {
    Tensor loss = reel::sum(reel::square(reel::matmul(W, x) + b - target));
    reel::back(loss);
    W.assign(W - 0.01 * W.grad());
    b.assign(b - 0.01 * b.grad());
    W.zero_grad();
    b.zero_grad();
    return loss;
  };
  const double first = step().item();
  for (int i = 0; i < 1000; ++i) step();  // warm: allocator caches settle
  const double before = current_rss_mb();
  const auto t0 = Clock::now();
  double last = 0;
  for (int i = 0; i < steps; ++i) last = step().item();
  const double us = seconds_since(t0) * 1e6 / steps;
  fmt::print("  Tracker: {} training steps of param/back (8x16 regression): {:.1f} us/step; RSS {:.1f} MB before, "
             "{:.1f} MB after; loss {:.3g} -> {:.3g}\n",
             steps, us, before, current_rss_mb(), first, last);
}

// The MLP gradient of (d) compiled in this process, with the persistent code cache in
// `dir`: prints the first compile's time (cold if `dir` is empty, a disk hit if an
// earlier process filled it), a second compile's while the first is alive (the
// in-memory kernel cache), and the disk cache's hits.
int compile_probe(const std::string& dir) {
  reel::set_code_cache_dir(dir);
  reel::compile(reel::trace([](const Tensor& v) { return v * 3.0; }, reel::zeros({1})));  // JIT start-up
  const int64_t h = 128, k = 784, o = 10, n = 100;
  const Tensor W1 = reel::randn({h, k}, 1) * 0.05, b1 = reel::randn({h, 1}, 2);
  const Tensor W2 = reel::randn({o, h}, 3) * 0.1, b2 = reel::randn({o, 1}, 4);
  const Tensor x = reel::randn({k, n}, 5), y = reel::randn({o, n}, 6);
  auto loss = [&](const Tensor& w1, const Tensor& c1, const Tensor& w2, const Tensor& c2) {
    return reel::sum(reel::square(reel::matmul(w2, reel::tanh(reel::matmul(w1, x) + c1)) + c2 - y));
  };
  const int64_t hits_before = reel::code_cache_info().hits;
  auto t0 = Clock::now();
  const reel::Tape g = reel::grad_tape(reel::trace(loss, W1, b1, W2, b2));
  const double trace_ms = seconds_since(t0) * 1e3;
  t0 = Clock::now();
  const reel::CompiledFunction first = reel::compile(g);
  const double first_ms = seconds_since(t0) * 1e3;
  t0 = Clock::now();
  const reel::CompiledFunction second = reel::compile(g);
  const double second_ms = seconds_since(t0) * 1e3;
  const double v1 = first({W1, b1, W2, b2})[0].item(), v2 = reel::play(g, {W1, b1, W2, b2})[0].item();
  fmt::print("{} {} {} {} {} {}\n", trace_ms, first_ms, second_ms, reel::code_cache_info().hits - hits_before,
             first.kernels_compiled(), std::abs(v1 - v2) / std::abs(v2));
  return 0;
}

// Cold compile, in-memory cache and disk cache (in a fresh process) for the MLP gradient.
void disk_cache_rows(const std::string& self) {
  struct Probe {
    double trace_ms = 0, first_ms = 0, second_ms = 0, rel_diff = 0;
    long hits = 0;
    int kernels = 0;
  };
  auto probe = [&](const std::string& dir) {
    const std::string cmd = fmt::format("'{}' --compile-probe '{}'", self, dir);
    FILE* pipe = popen(cmd.c_str(), "r");
    if (pipe == nullptr) throw std::runtime_error("cannot run " + cmd);
    char line[512] = {};
    const bool got = std::fgets(line, sizeof line, pipe) != nullptr;
    if (pclose(pipe) != 0 || !got) throw std::runtime_error("failed: " + cmd);
    Probe p;
    std::sscanf(line, "%lf %lf %lf %ld %d %lf", &p.trace_ms, &p.first_ms, &p.second_ms, &p.hits, &p.kernels,
                &p.rel_diff);
    return p;
  };
  std::vector<double> cold, memory, disk, trace;
  long disk_hits = 0;
  int kernels = 0;
  double worst = 0;
  for (int round = 0; round < 5; ++round) {
    const std::string dir = fmt::format("{}/reel-bench-cache-{}-{}", std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp",
                                        getpid(), round);
    std::system(fmt::format("rm -rf '{}'", dir).c_str());
    const Probe a = probe(dir), b = probe(dir);
    std::system(fmt::format("rm -rf '{}'", dir).c_str());
    cold.push_back(a.first_ms);
    memory.push_back(a.second_ms);
    memory.push_back(b.second_ms);
    disk.push_back(b.first_ms);
    trace.push_back(a.trace_ms);
    disk_hits += b.hits;
    kernels = a.kernels;
    worst = std::max({worst, a.rel_diff, b.rel_diff});
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  fmt::print("  MLP gradient (d, f64), reel::compile of its gradient tape ({} kernels), median of 5 fresh-process pairs:\n"
             "    cold {:.2f} ms | in-memory kernel cache {:.3f} ms ({:.0f}x faster) | disk cache, fresh process {:.2f} ms "
             "({:.1f}x faster than cold; {} of 5 loaded from disk); trace + grad_tape {:.2f} ms; max rel diff {:.1e}\n",
             kernels, median(cold), median(memory), median(cold) / median(memory), median(disk),
             median(cold) / median(disk), disk_hits, median(trace), worst);
}

int main(int argc, char** argv) {
  std::string out_path = REEL_BENCH_RESULTS;
  bool scaling = true, quick = false, cache_only = false;
  std::string row_program;
  int row_steps = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") quick = true, g_rounds = 5, g_round_seconds = 0.002;
    else if (a == "--no-scaling") scaling = false;
    else if (a == "--out" && i + 1 < argc) out_path = argv[++i];
    else if (a == "--row" && i + 2 < argc) row_program = argv[++i], row_steps = std::atoi(argv[++i]);
    else if (a == "--compile-probe" && i + 1 < argc) return compile_probe(argv[++i]);
    else if (a == "--cache-only") cache_only = true;
    else {
      fmt::print(stderr, "usage: reel_bench [--quick] [--no-scaling] [--cache-only] [--out FILE]\n");
      return 2;
    }
  }
  // Compile times here are cold ones: the persistent code cache is off (for this
  // process and the rows' child processes) except where it is measured.
  setenv("REEL_CACHE_DIR", "off", 1);
  reel::set_code_cache_dir("off");
  if (!row_program.empty()) {  // one row of the scaling table, for the parent process
    const Row r = measure_row(row_program, row_steps);
    fmt::print("{} {} {} {} {} {} {} {} {} {} {}\n", r.ops, r.trace_ms, r.grad_ms, r.compile_ms, r.call_ns,
               r.kernels, r.steps_scheduled, r.workspace, r.lower_bound, r.rss_mb, r.warm_ms);
    return 0;
  }
  {  // Start the JIT once, so its one-off set-up is not counted as a compile.
    const auto t0 = Clock::now();
    reel::compile(reel::trace([](const Tensor& v) { return v * 2.0; }, reel::zeros({1})));
    fmt::print("JIT start-up: {:.1f} ms, host CPU {}\n\n", seconds_since(t0) * 1e3, reel::jit_cpu());
  }
  if (cache_only) {  // just the cached-function and code-cache rows
    cache_table(quick);
    disk_cache_rows(argv[0]);
    tracker_rows(quick);
    return 0;
  }
  std::vector<Result> results;
  results.push_back(sigmoid_sum(5, DType::f64));
  results.push_back(sigmoid_sum(1000000, DType::f64));
  results.push_back(linear_sum());
  results.push_back(mlp<double>(DType::f64));
  results.push_back(mlp<float>(DType::f32));
  results.push_back(softmax_xent());
  results.push_back(conv_layer());
  results.push_back(logsumexp_bench());

  fmt::print("{:<40} {:>5} {:>10} {:>10} {:>10} {:>10} {:>9} {:>11} {:>12} {:>12} {:>10} {:>10}\n", "workload",
             "dtype", "hand", "interp", "compiled", "compile", "comp/hand", "interp/comp",
             "no-vec-math", "max rel diff", "workspace", "live bound");
  for (const Result& r : results)
    fmt::print("{:<40} {:>5} {:>10} {:>10} {:>10} {:>7.1f} ms {:>9.2f} {:>11.1f} {:>12} {:>12.1e} {:>10} {:>10}\n",
               r.workload, reel::dtype_name(r.dtype), human(r.hand_ns), human(r.interp_ns),
               human(r.compiled_ns), r.compile_ms, r.compiled_ns / r.hand_ns,
               r.interp_ns / r.compiled_ns, human(r.scalar_math_ns), r.max_rel_diff, r.workspace,
               r.lower_bound);
  fmt::print("\nno-vec-math: the compiled gradient with one scalar libm call per element for\n"
             "exp/tanh (CompileOptions{{.vector_math = false}}), for comparison. workspace: bytes of\n"
             "scratch memory after reuse; live bound: the most bytes alive at one step.\n");

  {  // The choice of im2col + CBLAS for conv2d, measured against direct loops.
    const int64_t n = 32, c = 3, h = 32, w = 32, o = 16;
    const Tensor x = reel::randn({n, c, h, w}, 13, DType::f32), k = reel::randn({o, c, 3, 3}, 14, DType::f32) * 0.2;
    const Tensor r = reel::randn({n, o, h, w}, 15, DType::f32);
    bench::ConvBuffers a(n, c, h, w, o), b(n, c, h, w, o);
    const auto ns = median_ns<2>(
        {[&] { bench::conv_layer_grad(x.data<float>(), k.data<float>(), r.data<float>(), n, c, h, w, o, a); },
         [&] { bench::conv_layer_grad_direct(x.data<float>(), k.data<float>(), r.data<float>(), n, c, h, w, o, b); }});
    fmt::print("\nconv2d layer gradient by hand (g): im2col + CBLAS {} vs direct loops {}: direct/im2col {:.2f}\n",
               human(ns[0]), human(ns[1]), ns[1] / ns[0]);
  }

  cache_table(quick);
  disk_cache_rows(argv[0]);
  tracker_rows(quick);

  fmt::print("\nRunning the schedule: a loop over its steps vs a generated driver function\n");
  fmt::print("{:<34} {:>7} {:>10} {:>10} {:>13} {:>16}\n", "gradient of", "steps", "loop", "driver",
             "driver/loop", "driver compile");
  const std::vector<RunnerRow> runners = runner_table();
  for (const RunnerRow& r : runners)
    fmt::print("{:<34} {:>7} {:>10} {:>10} {:>13.3f} {:>13.2f} ms\n", r.workload, r.steps, human(r.loop_ns),
               human(r.driver_ns), r.driver_ns / r.loop_ns, r.driver_compile_ms);

  std::vector<Row> rows;
  if (scaling) {
    fmt::print("\nScaling (each row in a fresh process; times of the gradient tape of the program; "
               "warm comp: compiling it again, every kernel cached):\n");
    fmt::print("{:<34} {:>10} {:>9} {:>10} {:>10} {:>9} {:>8} {:>10} {:>9} {:>7} {:>10} {:>11} {:>11} {:>6} {:>9}\n", "program",
               "grad ops", "trace", "grad_tape", "compile", "us/op", "kernels", "warm comp", "us/op", "steps", "call",
               "workspace", "live bound", "ws/lb", "peak RSS");
    std::vector<std::pair<std::string, int>> plan;
    for (int n : {10, 100, 1000, 10000}) plan.emplace_back("tanh", n);
    for (int n : {10, 100, 1000, 10000}) plan.emplace_back("sin", n);
    plan.emplace_back("sin", 84000);  // over 1,000,000 gradient-tape operations
    for (const auto& [program, n] : plan) {
      const Row r = run_row(argv[0], program, n, quick);
      rows.push_back(r);
      const std::string name = program == "sin"
                                   ? fmt::format("sin(x)*1.01+square(x)*0.001, {} steps", n)
                                   : fmt::format("tanh(Wx+b)*.5+x*.5 16x16, {} steps", n);
      fmt::print("{:<34} {:>10} {:>6.1f} ms {:>7.1f} ms {:>7.1f} ms {:>9.2f} {:>8} {:>7.1f} ms {:>9.2f} {:>7} {:>10} {:>11} {:>11} {:>6.2f} {:>6.0f} MB\n",
                 name, r.ops, r.trace_ms, r.grad_ms, r.compile_ms, r.compile_ms * 1e3 / static_cast<double>(r.ops),
                 r.kernels, r.warm_ms, r.warm_ms * 1e3 / static_cast<double>(r.ops), r.steps_scheduled, human(r.call_ns), r.workspace, r.lower_bound,
                 r.lower_bound > 0 ? static_cast<double>(r.workspace) / static_cast<double>(r.lower_bound) : 1.0,
                 r.rss_mb);
      std::fflush(stdout);
    }
  }

  std::string json = "[\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    json += fmt::format(
        "  {{\"workload\": \"{}\", \"dtype\": \"{}\", \"hand_ns\": {:.1f}, \"interp_ns\": {:.1f}, "
        "\"compiled_ns\": {:.1f}, \"compile_ms\": {:.2f}, \"compiled_over_hand\": {:.3f}, "
        "\"interp_over_compiled\": {:.2f}, \"compiled_scalar_math_ns\": {:.1f}, "
        "\"max_rel_diff\": {:.2e}, \"workspace_bytes\": {}, \"liveness_lower_bound\": {}}},\n",
        r.workload, reel::dtype_name(r.dtype), r.hand_ns, r.interp_ns, r.compiled_ns, r.compile_ms,
        r.compiled_ns / r.hand_ns, r.interp_ns / r.compiled_ns, r.scalar_math_ns, r.max_rel_diff,
        r.workspace, r.lower_bound);
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
}
