// One process of the disk-cache tests: compiles the gradient of a small MLP with the
// persistent code cache in the directory given (disk_cache_processes.sh), or, given
// --env, where REEL_CACHE_DIR and REEL_CACHE_MAX_MB say (disk_cache_env.sh; it then
// also compiles a second program and prints the cache's directory and bound first),
// runs it, and prints the results and what the cache did.
#include <fmt/format.h>
#include <reel/reel.hpp>

#include <cmath>
#include <cstdio>
#include <string>

using namespace reel;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: cache_process <cache directory> | --env\n");
    return 2;
  }
  const bool from_env = std::string(argv[1]) == "--env";
  if (!from_env) set_code_cache_dir(argv[1]);
  auto loss = [](const Tensor& W1, const Tensor& W2, const Tensor& x) {
    return sum(square(matmul(W2, tanh(matmul(W1, x))) - 1.0));
  };
  const Tensor W1 = randn({32, 16}, 1), W2 = randn({4, 32}, 2), x = randn({16, 8}, 3);
  const Tape g = grad_tape(trace(loss, W1, W2, x));
  const CompiledFunction f = compile(g);
  const std::vector<Tensor> out = f({W1, W2, x});
  const std::vector<Tensor> want = play(g, {W1, W2, x});
  double worst = 0;
  for (std::size_t k = 0; k < out.size(); ++k) {
    const auto a = out[k].values(), b = want[k].values();
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / (1 + std::abs(b[i])));
  }
  if (from_env) {  // a second program, and the settings looked at again
    const Tape t = trace([](const Tensor& v) { return sum(exp(v) * 3.0); }, W1);
    const double a = compile(t)({W1})[0].item(), b = play(t, {W1})[0].item();
    worst = std::max(worst, std::abs(a - b) / (1 + std::abs(b)));
    fmt::print("dir {} max_bytes {}\n", code_cache_info().dir, code_cache_info().max_bytes);
  }
  const CodeCacheInfo c = code_cache_info();
  fmt::print("value {:.17g} worst {:.3g} hits {} misses {} writes {} rejected {}\n", out[0].item(), worst, c.hits,
             c.misses, c.writes, c.rejected);
  return worst < 1e-12 ? 0 : 1;
}
