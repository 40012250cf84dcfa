// The compile time of a long straight-line scalar gradient (issue 35's goal: 10^5 traced
// operations in under 0.3 s, 10^6 in under 3 s and 1 GB), a benchmark: it prints times
// and asserts nothing.
//
//   scalar_compile [OPS] [--distinct] [--phases]
//
// f(x) over 100 Reals (64 with --distinct) is a chain that reads x at pseudo-random
// positions, so that no read advances by a stride and nothing folds into a loop:
//   repeating (default): s = sin(x[h(i)]) * s * 0.001 + s * 0.999, 9 traced operations a
//     step; its fused kernels repeat (a kernel's key holds no buffer offsets), so LLVM
//     builds a few hundred distinct kernels (246 at 10^5 operations, 464 at 10^6);
//   --distinct: s = sin(s * x[k]) + x[7k mod 64] (7 operations), whose kernels are
//     mostly distinct (1,725 at 10^5 operations).
// OPS (default 100000) is the number of traced operations. Prints the time of
// reel::compile_grad (trace, derivative passes, compile) and of the first call; with
// --phases, trace, grad_tape and compile separately instead. Run it as a whole process
// beside another build (farm-bench) with REEL_CACHE_DIR=off, so that nothing comes from
// the code cache on disk.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "reel/real.hpp"
#include "reel/reel.hpp"

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  long ops = 100000;
  bool distinct = false, phases = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--distinct") == 0) distinct = true;
    else if (std::strcmp(argv[i], "--phases") == 0) phases = true;
    else if (char* end = nullptr; (ops = std::strtol(argv[i], &end, 10)) <= 0 || *end != '\0') {
      std::fprintf(stderr, "usage: scalar_compile [OPS] [--distinct] [--phases]\n");
      return 2;
    }
  }
  const int n = distinct ? 64 : 100;
  std::vector<double> x0(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) x0[static_cast<std::size_t>(i)] = 0.5 + 0.01 * i;
  // Traced operations a step: a read is a slice and a reshape, a number a constant.
  const long steps = ops / (distinct ? 7 : 9);
  auto f = [=](const std::vector<reel::Real>& x) {
    reel::Real s = x[0];
    unsigned h = 12345;
    for (long i = 0; i < steps; ++i) {
      h = h * 1103515245u + 12345u;
      if (distinct) {
        const int k = static_cast<int>((h >> 16) % 64u);
        s = sin(s * x[static_cast<std::size_t>(k)]) + x[static_cast<std::size_t>(k * 7 % 64)];
      } else {
        s = sin(x[(h >> 16) % 100u]) * s * 0.001 + s * 0.999;
      }
    }
    return s;
  };
  if (phases) {
    const double t0 = now();
    reel::Tape t = reel::trace(f, x0);
    const double t1 = now();
    reel::Tape g = reel::grad_tape(t);
    const double t2 = now();
    const long traced = t.size();
    t = reel::Tape();
    const reel::CompiledFunction c = reel::compile(g);
    const double t3 = now();
    std::printf("%ld traced operations (gradient tape %ld, %zu distinct kernels): trace %.3f s, grad_tape %.3f s, "
                "compile %.3f s, %.3f s in all\n",
                traced, static_cast<long>(g.size()), c.num_kernels(), t1 - t0, t2 - t1, t3 - t2, t3 - t0);
    return 0;
  }
  const double t0 = now();
  auto g = reel::compile_grad(f, x0);
  const double t1 = now();
  const auto r = g(x0);
  const double t2 = now();
  std::printf("compile_grad of about %ld traced operations (%s): %.3f s; first call %.4f s (value %.6f)\n", ops,
              distinct ? "distinct kernels" : "repeating kernels", t1 - t0, t2 - t1, r[0].item());
  return 0;
}
