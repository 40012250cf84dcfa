// Reel's side of bench/vmap_bench.py (issue 20's goals for batching), f32, one thread:
//  - per-example gradients of the Fashion-MNIST MLP 784-256-128-10 (relu, log-softmax
//    cross-entropy) for a batch of 100: reel::vmap of reel::grad, traced and compiled,
//    against one gradient of the batch's summed loss (compiled, reel::grad_tape);
//  - the Jacobian of f(x) = W2 tanh(W1 x) (100 -> 100): forward (vector-mode jvp_tape
//    with the 100 unit tangents, one pass) and reverse (the vjp tape batched by vmap_tape
//    over the 100 unit cotangents, one pass), compiled, each returning J [100, 100].
// Prints one JSON object per line: {"name", "seconds" (median of the timed calls),
// "check" (the largest absolute difference of a consistency check)}.
// Inputs are random (reel::randn); the Python side draws its own of the same shapes.
#include <reel/reel.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

namespace {

using reel::Tensor;

double median_seconds(const std::function<void()>& call, double min_seconds = 0.5, int min_runs = 20) {
  call();  // warm
  std::vector<double> times;
  double total = 0;
  while (static_cast<int>(times.size()) < min_runs || total < min_seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    total += times.back();
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void row(const char* name, double seconds, double check) {
  std::printf("{\"name\": \"%s\", \"seconds\": %.9g, \"check\": %.3g}\n", name, seconds, check);
  std::fflush(stdout);
}

constexpr reel::DType f32 = reel::DType::f32;

// The MLP's loss on one example x [784] with one-hot label y [10].
Tensor mlp_loss(const std::vector<Tensor>& p, const Tensor& x, const Tensor& y) {
  const Tensor h1 = reel::relu(reel::matmul(p[0], reel::nodiff(x)) + p[1]);
  const Tensor h2 = reel::relu(reel::matmul(p[2], h1) + p[3]);
  const Tensor z = reel::matmul(p[4], h2) + p[5];
  return -reel::sum(reel::nodiff(y) * reel::log_softmax(z, 0));
}

// The summed loss of a batch X [n, 784], Y [n, 10] (rows are examples).
Tensor mlp_batch_loss(const std::vector<Tensor>& p, const Tensor& X, const Tensor& Y) {
  const auto T = [](const Tensor& t) { return reel::transpose(t); };
  const Tensor h1 = reel::relu(reel::matmul(reel::nodiff(X), T(p[0])) + p[1]);
  const Tensor h2 = reel::relu(reel::matmul(h1, T(p[2])) + p[3]);
  const Tensor z = reel::matmul(h2, T(p[4])) + p[5];
  return -reel::sum(reel::nodiff(Y) * reel::log_softmax(z, 1));
}

void mlp() {
  const int64_t n = 100;
  const std::vector<Tensor> params{reel::randn({256, 784}, 1, f32) * 0.05, reel::randn({256}, 2, f32) * 0.1,
                                   reel::randn({128, 256}, 3, f32) * 0.06, reel::randn({128}, 4, f32) * 0.1,
                                   reel::randn({10, 128}, 5, f32) * 0.09, reel::randn({10}, 6, f32) * 0.1};
  const Tensor X = reel::rand({n, 784}, 7, f32);
  std::vector<double> onehot(static_cast<std::size_t>(n * 10), 0.0);
  for (int64_t i = 0; i < n; ++i) onehot[static_cast<std::size_t>(i * 10 + (i * 7) % 10)] = 1.0;
  const Tensor Y = reel::tensor(onehot, {n, 10}, f32);
  std::vector<Tensor> args = params;
  args.push_back(X);
  args.push_back(Y);

  // One gradient of the batch's loss: value, then the 6 parameters' gradients (and X's, Y's: zero).
  const reel::CompiledFunction batch = reel::compile(reel::grad_tape(reel::trace(
      [](const std::vector<Tensor>& p, const Tensor& X, const Tensor& Y) { return mlp_batch_loss(p, X, Y); }, params,
      X, Y)));
  // Per-example gradients: vmap over the examples of grad of the one-example loss.
  const reel::CompiledFunction vmapped = reel::compile(reel::trace(
      [](const std::vector<Tensor>& p, const Tensor& X, const Tensor& Y) {
        return reel::vmap(
            [](const std::vector<Tensor>& q, const Tensor& x, const Tensor& y) {
              const auto r = reel::grad(
                  [](const Tensor& w1, const Tensor& c1, const Tensor& w2, const Tensor& c2, const Tensor& w3,
                     const Tensor& c3, const Tensor& a, const Tensor& b) {
                    return mlp_loss({w1, c1, w2, c2, w3, c3}, a, b);
                  },
                  q[0], q[1], q[2], q[3], q[4], q[5], x, y);
              return std::vector<Tensor>(r.grads.begin(), r.grads.begin() + 6);
            },
            {reel::none, 0, 0})(p, X, Y);
      },
      params, X, Y));
  std::vector<Tensor> bout, vout;
  const double tb = median_seconds([&] { bout = batch(args); });
  const double tv = median_seconds([&] { vout = vmapped(args); });
  // Check: the per-example gradients summed over the batch are the batch's gradient.
  double check = 0;
  for (std::size_t i = 0; i < params.size(); ++i)
    check = std::max(check, reel::max_abs_diff(reel::sum(vout.at(i), 0), bout.at(i + 1)));
  // The floor under any per-example gradient: writing its bytes once (the outputs are
  // 100 copies of the parameters, 94 MB in f32) with memset into memory already touched.
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < params.size(); ++i) bytes += vout.at(i).nbytes();
  std::vector<unsigned char> sink(bytes, 1);
  int fill = 0;
  const double tw = median_seconds([&] {
    std::memset(sink.data(), ++fill & 0xff, sink.size());
    asm volatile("" : : "r"(sink.data()) : "memory");
  });
  row("mlp batch gradient", tb, 0);
  row("mlp per-example gradients (vmap(grad))", tv, check);
  row("memset of the per-example gradients' bytes", tw, static_cast<double>(bytes));
}

void jacobian() {
  const int64_t n = 100;
  const Tensor W1 = reel::randn({n, n}, 11, f32) * 0.1, W2 = reel::randn({n, n}, 12, f32) * 0.1;
  const Tensor x = reel::randn({n}, 13, f32);
  const auto f = [&](const Tensor& v) { return reel::matmul(W2, reel::tanh(reel::matmul(W1, v))); };
  const reel::Tape t = reel::trace(f, x);  // W1, W2 constants of the tape
  std::vector<double> eye(static_cast<std::size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) eye[static_cast<std::size_t>(i * n + i)] = 1.0;
  const Tensor I = reel::tensor(eye, {n, n}, f32);

  // Forward: J^T's rows are the tangents of the n unit directions; J its transpose.
  const reel::Tape fwd = reel::jvp_tape(t, n);  // x, tangents [n, n] -> y, tangents [n, n]
  reel::TapeBuilder bf;
  {
    const reel::Var in = bf.input(t.type(t.inputs()[0]));
    const std::vector<reel::Var> ins{in, bf.constant(I)};
    bf.set_outputs({bf.transpose(bf.inline_tape(fwd, ins).at(1))});
  }
  const reel::CompiledFunction jacfwd = reel::compile(reel::cleanup(bf.finish()));
  // Reverse: the vjp tape batched over its cotangent (the n unit cotangents): J's rows.
  const reel::Tape vjp = reel::vjp_tape(t);  // x, cotangent [n] -> y, x's gradient
  const reel::Tape rows = reel::vmap_tape(vjp, std::vector<bool>{false, true}, n);
  reel::TapeBuilder br;
  {
    const reel::Var in = br.input(t.type(t.inputs()[0]));
    const std::vector<reel::Var> ins{in, br.constant(I)};
    br.set_outputs({br.inline_tape(rows, ins).at(1)});
  }
  const reel::CompiledFunction jacrev = reel::compile(reel::cleanup(br.finish()));
  std::vector<Tensor> jf, jr;
  const std::vector<Tensor> args{x};
  const double tf = median_seconds([&] { jf = jacfwd(args); });
  const double tr = median_seconds([&] { jr = jacrev(args); });
  const double check = reel::max_abs_diff(jf.at(0), jr.at(0));
  row("jacobian 100->100 forward (jvp_tape(tape, 100))", tf, check);
  row("jacobian 100->100 reverse (vmap_tape of the vjp tape)", tr, check);
}

}  // namespace

int main() {
  try {
    mlp();
    jacobian();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vmap_bench: %s\n", e.what());
    return 1;
  }
}
