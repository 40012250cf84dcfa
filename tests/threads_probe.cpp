// The threads-environment test's process (threads_env.sh): prints the thread count in
// force (REEL_NUM_THREADS, or every core), then runs a gradient large enough to run in
// chunks and prints whether it matches the interpreter and the same program on one
// thread, bit for bit.
#include <fmt/format.h>
#include <reel/reel.hpp>

#include <cmath>
#include <cstring>

using namespace reel;

int main() {
  fmt::print("threads {}\n", num_threads());
  const Tensor x = randn({100000}, 1);
  const Tape g = grad_tape(trace([](const Tensor& v) { return sum(sigmoid(v) * v); }, x));
  const CompiledFunction f = compile(g);
  const std::vector<Tensor> got = f({x});
  const std::vector<Tensor> want = play(g, {x});
  set_num_threads(1);
  const std::vector<Tensor> one = f({x});
  bool same = true;
  double worst = 0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    same = same && std::memcmp(got[k].raw(), one[k].raw(), got[k].nbytes()) == 0;
    const auto a = got[k].values(), b = want[k].values();
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / (1 + std::abs(b[i])));
  }
  fmt::print("same bits as one thread: {}\nagrees with the interpreter: {}\n", same ? "yes" : "no",
             worst < 1e-12 ? "yes" : "no");
  return same && worst < 1e-12 ? 0 : 1;
}
