// Trains a model written as a struct of layers on Fashion-MNIST (Debian's
// dataset-fashion-mnist: 60,000 + 10,000 images 28x28) with mini-batches, the cached
// compiled gradient of the struct (reel::simplegrad(loss)) and reel::update; prints a
// progress bar with the loss during each epoch and the test accuracy after it, and
// writes the learning curve (CSV, and a PNG through matplotlib when it is installed).
//
//   ./build/examples/fashion_mnist_train [--epochs 3] [--model mlp|cnn] [--batch 100] [--lr 0.1]
//        [--data /usr/share/datasets/fashion-mnist] [--out DIR] [--limit N] [--quiet]
//        [--summary]   (one JSON line at the end, for bench/train_epoch.py)
//
// The curve goes to --out, by default fashion_mnist/ in the build tree the program is
// in (<build>/examples/fashion_mnist_train writes <build>/fashion_mnist), wherever it
// is run from: never into the current directory, which may be the checkout.
#include <fmt/format.h>
#include <reel/reel.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "idx.hpp"

using reel::Tensor;

namespace model {

struct Dense {
  Tensor W, b;  // [in, out], [out]
};
REEL_FIELDS(Dense, W, b)

struct Conv {
  Tensor k, b;  // [out, in, 3, 3], [out, 1, 1]
};
REEL_FIELDS(Conv, k, b)

// A two-hidden-layer MLP (784-256-128-10, relu), or a small CNN (two 3x3 convolutions
// with 2x2 max pooling, then a dense layer) when `convs` is not empty.
struct Net {
  std::vector<Conv> convs;
  std::vector<Dense> dense;
  std::string kind;  // carried along
};
REEL_FIELDS(Net, convs, dense, kind)

Dense dense(int64_t in, int64_t out, uint64_t seed) {  // He initialisation
  return {reel::randn({in, out}, seed, reel::DType::f32) * std::sqrt(2.0 / static_cast<double>(in)),
          reel::zeros({out}, reel::DType::f32)};
}
Conv conv(int64_t in, int64_t out, uint64_t seed) {
  return {reel::randn({out, in, 3, 3}, seed, reel::DType::f32) * std::sqrt(2.0 / static_cast<double>(9 * in)),
          reel::zeros({out, 1, 1}, reel::DType::f32)};
}

Net mlp() { return {{}, {dense(784, 256, 1), dense(256, 128, 2), dense(128, 10, 3)}, "mlp"}; }
Net cnn() { return {{conv(1, 8, 4), conv(8, 16, 5)}, {dense(16 * 7 * 7, 10, 6)}, "cnn"}; }

Tensor logits(const Net& m, const Tensor& x) {  // x [n, 784]
  Tensor h = x;
  if (!m.convs.empty()) {
    h = reel::reshape(h, {x.shape()[0], 1, 28, 28});
    for (const Conv& c : m.convs)
      h = reel::max_pool2d(reel::relu(reel::conv2d(h, c.k, {.padding = {1, 1}}) + c.b), {2, 2});
    h = reel::reshape(h, {x.shape()[0], h.numel() / x.shape()[0]});
  }
  for (std::size_t i = 0; i < m.dense.size(); ++i) {
    h = reel::matmul(h, m.dense[i].W) + m.dense[i].b;
    if (i + 1 < m.dense.size()) h = reel::relu(h);
  }
  return h;
}

// Mean softmax cross-entropy against one-hot labels. The data are arguments (so one
// compiled gradient serves every batch) through which no gradient is wanted:
// reel::nodiff says so, and the gradient tape then skips the products that would
// compute one (for the MLP, a third of its matrix products).
Tensor loss(const Net& m, const Tensor& x, const Tensor& y) {
  const Tensor z = logits(m, reel::nodiff(x));
  return reel::mean(reel::logsumexp(z, 1) - reel::sum(z * reel::nodiff(y), 1));
}

}  // namespace model

namespace {

struct Options {
  int epochs = 3;
  int64_t batch = 100;
  double lr = 0.1;
  std::string model = "mlp";
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string out;  // "": default_out()
  int64_t limit = 0;  // 0: every training image
  bool quiet = false, summary = false;
};

// fashion_mnist/ beside the directory of the executable (its build tree's examples/),
// or where the build put it if /proc/self/exe cannot be read.
std::string default_out() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec || !exe.is_absolute()) return REEL_FASHION_MNIST_OUT;
  return (exe.parent_path().parent_path() / "fashion_mnist").string();
}

// A path as shown to the user: relative to the current directory when inside it
// (build/fashion_mnist from the checkout), else absolute.
std::string shown(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path cwd = std::filesystem::current_path(ec);
  const std::filesystem::path abs = std::filesystem::absolute(path, ec).lexically_normal();
  if (ec) return path;
  const std::filesystem::path rel = abs.lexically_relative(cwd);
  return rel.empty() || rel.begin()->string() == ".." ? abs.string() : rel.string();
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw reel::Error(fmt::format("fashion_mnist_train: {} needs a value", a));
      return argv[++i];
    };
    if (a == "--epochs") o.epochs = std::stoi(value());
    else if (a == "--batch") o.batch = std::stoll(value());
    else if (a == "--lr") o.lr = std::stod(value());
    else if (a == "--model") o.model = value();
    else if (a == "--data") o.data = value();
    else if (a == "--out") o.out = value();
    else if (a == "--limit") o.limit = std::stoll(value());
    else if (a == "--quiet") o.quiet = true;
    else if (a == "--summary") o.summary = true;
    else throw reel::Error(fmt::format("fashion_mnist_train: unknown option {} (see the top of train.cpp)", a));
  }
  if (o.model != "mlp" && o.model != "cnn")
    throw reel::Error(fmt::format("fashion_mnist_train: --model expects mlp or cnn, got {}", o.model));
  if (o.epochs < 1 || o.batch < 1 || !(o.lr > 0))
    throw reel::Error("fashion_mnist_train: --epochs and --batch must be at least 1, --lr positive");
  if (o.out.empty()) o.out = default_out();
  return o;
}

// Rows `idx[from, from + n)` of a [N, k] tensor, copied into a new [n, k] tensor.
Tensor rows(const Tensor& t, const std::vector<int64_t>& idx, std::size_t from, int64_t n) {
  const int64_t k = t.shape()[1];
  Tensor out(t.dtype(), {n, k});
  const std::size_t row_bytes = static_cast<std::size_t>(k) * reel::dtype_size(t.dtype());
  for (int64_t r = 0; r < n; ++r)
    std::memcpy(static_cast<char*>(out.mutable_raw()) + static_cast<std::size_t>(r) * row_bytes,
                static_cast<const char*>(t.raw()) + static_cast<std::size_t>(idx[from + static_cast<std::size_t>(r)]) * row_bytes,
                row_bytes);
  return out;
}

void progress(int epoch, int64_t done, int64_t total, double loss) {
  constexpr int width = 30;
  const int filled = static_cast<int>(width * done / total);
  std::fprintf(stderr, "\repoch %d [%s%s] %3d%% loss %.4f", epoch, std::string(static_cast<std::size_t>(filled), '=').c_str(),
               std::string(static_cast<std::size_t>(width - filled), ' ').c_str(), static_cast<int>(100 * done / total), loss);
  std::fflush(stderr);
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  using Clock = std::chrono::steady_clock;
  const auto t_load = Clock::now();
  // The training images stay bytes (47 MB), each batch converted as it is gathered: as
  // f32 they were 188 MB, most of the peak memory.
  const idx::Array train_images = idx::read(o.data + "/train-images-idx3-ubyte.gz");
  if (train_images.dims.size() != 3)
    throw reel::Error(fmt::format("fashion_mnist_train: expected images [n, rows, cols], got {} dimensions",
                                  train_images.dims.size()));
  const idx::Array train_labels = idx::read(o.data + "/train-labels-idx1-ubyte.gz");
  Tensor train_y = idx::one_hot(train_labels, 10);
  if (train_y.shape()[0] != train_images.dims[0])
    throw reel::Error(fmt::format("fashion_mnist_train: {} training images but {} labels", train_images.dims[0],
                                  train_y.shape()[0]));
  const Tensor test_x = idx::images(idx::read(o.data + "/t10k-images-idx3-ubyte.gz"));
  const Tensor test_labels = idx::labels(idx::read(o.data + "/t10k-labels-idx1-ubyte.gz"));
  int64_t n = train_images.dims[0];
  if (o.limit > 0) n = std::min(n, o.limit);
  const int64_t batches = n / o.batch;
  if (batches == 0) throw reel::Error(fmt::format("fashion_mnist_train: {} images make no batch of {}", n, o.batch));
  if (!o.quiet)
    fmt::print("Fashion-MNIST: {} training images ({} batches of {}), {} test images, loaded in {:.2f} s; model {}\n", n,
               batches, o.batch, test_x.shape()[0], std::chrono::duration<double>(Clock::now() - t_load).count(), o.model);
  std::fflush(stdout);

  model::Net net = o.model == "mlp" ? model::mlp() : model::cnn();
  const auto grad = reel::simplegrad(model::loss);  // compiled per signature, cached
  const auto predict = reel::jit([](const model::Net& m, const Tensor& x) { return reel::argmax(model::logits(m, x), 1); });
  const float lr = static_cast<float>(o.lr);
  auto sgd = [lr](const Tensor& w, const Tensor& dw) { return w - lr * dw; };

  std::filesystem::create_directories(o.out);
  const std::string csv = o.out + "/curve.csv", png = o.out + "/curve.png";
  std::ofstream curve(csv);
  if (!curve) throw reel::Error(fmt::format("fashion_mnist_train: cannot write {}", csv));
  curve << "epoch,step,train_loss,test_accuracy\n";
  std::vector<int64_t> order(static_cast<std::size_t>(train_images.dims[0]));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(42);
  std::vector<double> epoch_seconds;
  double accuracy = 0, last_loss = 0;
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    std::shuffle(order.begin(), order.begin() + n, rng);
    const auto t0 = Clock::now();
    double running = 0;
    int64_t counted = 0;
    for (int64_t b = 0; b < batches; ++b) {
      const std::size_t from = static_cast<std::size_t>(b * o.batch);
      const Tensor xb = idx::image_rows(train_images, order, from, o.batch), yb = rows(train_y, order, from, o.batch);
      auto [value, g] = grad(net, xb, yb);
      reel::update(net, std::get<0>(g), sgd);
      running += value.item();
      ++counted;
      if ((b + 1) % 50 == 0 || b + 1 == batches) {
        last_loss = running / static_cast<double>(counted);
        curve << epoch << ',' << (epoch - 1) * batches + b + 1 << ',' << last_loss << ",\n";
        if (!o.quiet) progress(epoch, b + 1, batches, last_loss);
        running = 0, counted = 0;
      }
    }
    epoch_seconds.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    int64_t correct = 0;
    for (int64_t s = 0; s < test_x.shape()[0]; s += 1000) {
      const int64_t m = std::min<int64_t>(1000, test_x.shape()[0] - s);
      const Tensor guess = predict(net, reel::slice(test_x, 0, s, s + m));
      const auto* want = test_labels.data<int64_t>() + s;
      for (int64_t i = 0; i < m; ++i) correct += guess.data<int64_t>()[i] == want[i];
    }
    accuracy = static_cast<double>(correct) / static_cast<double>(test_x.shape()[0]);
    curve << epoch << ',' << epoch * batches << ",," << accuracy << '\n';
    if (!o.quiet)
      fmt::print(stderr, "\repoch {} done: train loss {:.4f}, test accuracy {:.2f}%, {:.2f} s ({:.0f} us per step){}\n",
                 epoch, last_loss, 100 * accuracy, epoch_seconds.back(),
                 epoch_seconds.back() * 1e6 / static_cast<double>(batches), std::string(20, ' '));
  }
  curve.close();
  if (!curve) throw reel::Error(fmt::format("fashion_mnist_train: cannot write {}", csv));
  const reel::CacheInfo info = grad.cache_info();
  if (!o.quiet) {
    fmt::print("gradient cache: {} hits, {} misses, {} compilations ({:.0f} ms compiling)\n", info.hits, info.misses,
               info.compilations, info.compile_seconds * 1e3);
    const std::string plot =
        fmt::format("/usr/bin/python3 '{}/plot_curve.py' '{}' '{}'", REEL_FASHION_MNIST_DIR, shown(csv), shown(png));
    if (std::system((plot + " 2>/dev/null").c_str()) == 0)
      fmt::print("wrote {} and {}\n", shown(csv), shown(png));
    else
      fmt::print("wrote {} (for the PNG: apt-get install python3-matplotlib, then run\n  {})\n", shown(csv), plot);
  }
  if (o.summary) {
    std::string secs;
    for (double s : epoch_seconds) secs += fmt::format("{}{:.4f}", secs.empty() ? "" : ", ", s);
    // This process's peak resident memory (VmHWM: since its exec; a parent's getrusage
    // would count the parent's memory at fork, before the exec).
    double peak_mb = -1;
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("VmHWM:", 0) == 0) peak_mb = std::strtod(line.c_str() + 6, nullptr) / 1024.0;
    fmt::print("{{\"model\": \"{}\", \"images\": {}, \"batch\": {}, \"epoch_seconds\": [{}], \"test_accuracy\": {:.4f}, "
               "\"final_loss\": {:.4f}, \"peak_rss_mb\": {:.1f}}}\n",
               o.model, n, o.batch, secs, accuracy, last_loss, peak_mb);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "\nfashion_mnist_train: %s\n", e.what());
  return 1;
}
