#include "workloads.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "hand_written.hpp"
#include "measure.hpp"

namespace bench {

namespace {

using reel::DType;
using reel::Tensor;

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
  r.threads = bench::threads;
  const auto t = median_ns<2>({[&] { g(args...); }, [&] { g(args...); }},
                              {[] { reel::set_num_threads(1); }, [] { reel::set_num_threads(bench::threads); }});
  reel::set_num_threads(bench::threads);
  r.one_thread_ns = t[0];
  r.threads_ns = t[1];
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

}  // namespace

std::vector<Result> run_workloads() {
  std::vector<Result> results;
  results.push_back(sigmoid_sum(5, DType::f64));
  results.push_back(sigmoid_sum(1000000, DType::f64));
  results.push_back(linear_sum());
  results.push_back(mlp<double>(DType::f64));
  results.push_back(mlp<float>(DType::f32));
  results.push_back(softmax_xent());
  results.push_back(conv_layer());
  results.push_back(logsumexp_bench());
  return results;
}

ConvChoice conv_choice() {
  const int64_t n = 32, c = 3, h = 32, w = 32, o = 16;
  const Tensor x = reel::randn({n, c, h, w}, 13, DType::f32), k = reel::randn({o, c, 3, 3}, 14, DType::f32) * 0.2;
  const Tensor r = reel::randn({n, o, h, w}, 15, DType::f32);
  ConvBuffers a(n, c, h, w, o), b(n, c, h, w, o);
  const auto ns = median_ns<2>({[&] { conv_layer_grad(x.data<float>(), k.data<float>(), r.data<float>(), n, c, h, w, o, a); },
                                [&] { conv_layer_grad_direct(x.data<float>(), k.data<float>(), r.data<float>(), n, c, h, w, o, b); }});
  return {ns[0], ns[1]};
}

namespace {

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

}  // namespace

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

}  // namespace bench
