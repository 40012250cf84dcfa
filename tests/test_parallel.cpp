// Compiled code on several threads (reel/parallel.hpp): large kernels run in chunks on
// the thread pool, with the same bits on any number of threads and close to the
// interpreter; the thread count's API and its errors.
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

using namespace reel;

namespace {

// Restores every core when a test ends, whatever it set.
struct EveryCoreAfter {
  ~EveryCoreAfter() { set_num_threads(0); }
};

// Programs whose kernels are large enough to run in chunks at the default chunk size:
// sums and reductions to one number, reductions keeping rows and columns, a transpose.
struct Program {
  std::string name;
  test::Fn fn;
  std::vector<Tensor> args;
};

std::vector<Program> large_programs() {
  return {
      {"sum(sigmoid(x)), 200000", [](const std::vector<Tensor>& a) { return sum(sigmoid(a[0])); },
       {randn({200000}, 1)}},
      {"logsumexp, 150000", [](const std::vector<Tensor>& a) { return logsumexp(a[0]); }, {randn({150000}, 2)}},
      {"max and min of all, 100000", [](const std::vector<Tensor>& a) { return max(a[0]) - min(a[0]) * 2.0; },
       {randn({100000}, 3)}},
      {"sum over rows of [600, 300]", [](const std::vector<Tensor>& a) { return sum(tanh(sum(a[0], 0))); },
       {randn({600, 300}, 4)}},
      {"mean over columns of [300, 600]", [](const std::vector<Tensor>& a) { return sum(exp(mean(a[0], 1))); },
       {randn({300, 600}, 5)}},
      {"sum over the middle of [40, 300, 20]", [](const std::vector<Tensor>& a) { return sum(sin(sum(a[0], 1))); },
       {randn({40, 300, 20}, 6)}},
      {"transpose of [700, 400]", [](const std::vector<Tensor>& a) { return sum(transpose(a[0]) * a[1]); },
       {randn({700, 400}, 7), randn({400, 700}, 8)}},
      // Products: cut into blocks of rows or columns on the pool (OpenBLAS on one thread).
      {"matmul [64,64] x [64,300] (a review's case)",
       [](const std::vector<Tensor>& a) { return sum(tanh(matmul(a[0], a[1]))); }, {randn({64, 64}, 10), randn({64, 300}, 11)}},
      {"matmul [300,200] x [200,250], both gradients",
       [](const std::vector<Tensor>& a) { return sum(sin(matmul(a[0], a[1]))); }, {randn({300, 200}, 12), randn({200, 250}, 13)}},
      {"matrix-vector [3000,400] x [400] and back",
       [](const std::vector<Tensor>& a) { return sum(square(matmul(a[0], a[1]))); }, {randn({3000, 400}, 14), randn({400}, 15)}},
      // Row sums of a loop's values, added up in the result by the loop, a chunk of rows each.
      {"sums and means of products over rows of [3000, 400]",
       [](const std::vector<Tensor>& a) {
         return sum(square(sum(a[0] * a[1], 1))) + sum(cos(mean(sin(a[0]), std::vector<int64_t>{1}, true)));
       },
       {randn({3000, 400}, 16), randn({400}, 17)}},
      {"f32 softmax cross-entropy rows, [256, 1000]",
       [](const std::vector<Tensor>& a) { return mean(logsumexp(a[0], 1)) - mean(a[0]); },
       {randn({256, 1000}, 9, DType::f32)}},
  };
}

}  // namespace

TEST_CASE("threads: set_num_threads and num_threads, and their errors") {
  EveryCoreAfter restore;
  set_num_threads(0);
  const int every = num_threads();  // the cores this process may run on
  CHECK(every >= 1);
  set_num_threads(1);
  CHECK(num_threads() == 1);
  set_num_threads(2);
  CHECK(num_threads() == std::min(2, every));
  set_num_threads(4096);  // more threads than cores are not used
  CHECK(num_threads() == every);
  for (int bad : {-2, 4097}) {
    try {
      set_num_threads(bad);
      FAIL("set_num_threads(", bad, ") did not throw");
    } catch (const Error& e) {
      const std::string m = e.what();
      CHECK(m.find("set_num_threads") != std::string::npos);
      CHECK(m.find(fmt::format("given {}", bad)) != std::string::npos);
    }
  }
  CHECK(num_threads() == every);  // unchanged by the refused calls
}

TEST_CASE("threads: chunks run in the caller's floating-point settings") {
  // Flush-to-zero and denormals-are-zero (MXCSR bits 15 and 6) on the calling thread: a
  // sum of subnormals is 0 on one thread, and must be on two (TBB's workers would keep
  // the settings of the thread that first entered the pool).
  EveryCoreAfter restore;
  const Tensor x = full({200000}, 1e-310);
  const CompiledFunction f = compile(trace([](const Tensor& v) { return sum(v * 1.0); }, x));
  unsigned csr = 0;
  asm volatile("stmxcsr %0" : "=m"(csr));
  const unsigned flushing = csr | (1u << 15) | (1u << 6);
  std::vector<double> got;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    asm volatile("ldmxcsr %0" : : "m"(flushing));
    got.push_back(f({x})[0].item());
    asm volatile("ldmxcsr %0" : : "m"(csr));
  }
  CHECK(got[0] == got[1]);
  CHECK(f({x})[0].item() > 0);  // the usual settings again: subnormals add up
}

TEST_CASE("threads: large kernels run in chunks, the same bits on 1, 2 and 3 threads and on every call") {
  EveryCoreAfter restore;
  for (const Program& p : large_programs()) {
    CAPTURE(p.name);
    const Tape forward = test::trace_list(p.fn, p.args);
    const Tape g = grad_tape(forward);
    const std::string plan = plan_text(g);
    CHECK_MESSAGE((plan.find("chunks of") != std::string::npos || plan.find("cblas") != std::string::npos), plan);
    const CompiledFunction f = compile(g);
    const CompiledFunction whole = compile(g, {.chunk_elements = 0});
    CHECK(plan_text(g, {.chunk_elements = 0}).find("chunks of") == std::string::npos);
    const std::vector<Tensor> interpreted = play(g, p.args);
    set_num_threads(1);
    const std::vector<Tensor> one = f(p.args);
    for (int threads : {2, 3, 2}) {
      set_num_threads(threads);
      for (int call = 0; call < 3; ++call) {
        const std::vector<Tensor> again = f(p.args);
        for (std::size_t k = 0; k < one.size(); ++k)
          test::check_same_bits(again[k], one[k], fmt::format("output {} on {} threads, call {}, vs 1 thread", k, threads, call));
      }
    }
    const std::vector<Tensor> in_one_piece = whole(p.args);
    for (std::size_t k = 0; k < one.size(); ++k) {
      const test::Tolerance tol = test::compiled_tolerance(one[k].dtype());
      test::check_close(one[k], interpreted[k], tol.rtol, tol.atol, fmt::format("output {} vs interpreted", k));
      test::check_close(one[k], in_one_piece[k], tol.rtol, tol.atol, fmt::format("output {} vs in one piece", k));
    }
  }
}

TEST_CASE("threads: a compiled function in chunks called from four threads at once") {
  EveryCoreAfter restore;
  set_num_threads(2);
  const Tensor x = randn({300000}, 11);
  const Tape g = grad_tape(trace([](const Tensor& v) { return sum(tanh(v) * v); }, x));
  const CompiledFunction f = compile(g);
  const std::vector<Tensor> want = f({x});
  std::vector<std::vector<Tensor>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int call = 0; call < 5; ++call) got[static_cast<std::size_t>(t)] = f({x});
    });
  for (std::thread& t : threads) t.join();
  for (const auto& out : got)
    for (std::size_t k = 0; k < want.size(); ++k) test::check_same_bits(out[k], want[k], fmt::format("output {}", k));
}

TEST_CASE("threads: a negative chunk size is an error; a huge one leaves kernels whole") {
  const Tape t = trace([](const Tensor& v) { return sum(exp(v)); }, randn({100000}, 12));
  CHECK_THROWS_WITH_AS(compile(t, {.chunk_elements = -5}),
                       "compile: CompileOptions::chunk_elements must be >= 0 (0: no chunks), given -5", Error);
  CHECK(plan_text(t, {.chunk_elements = std::numeric_limits<int64_t>::max()}).find("chunks of") == std::string::npos);
  CHECK(plan_text(t).find("chunks of") != std::string::npos);
}

// Independent steps worth a thread each but too small for chunks or blocks run at the
// same time (concurrent.hpp, concurrent_groups): the gradient of a layer whose
// products are 2^17 to 2^19 multiply-adds computes dW = x^T d and dx = d W^T at once.
// The same bits as one at a time; a step reading another's result (a chain) waits.
TEST_CASE("threads: independent steps run at the same time, with the same results") {
  EveryCoreAfter restore;
  const Tensor x = randn({32, 128}, 21), w = randn({128, 64}, 22) * 0.1, v = randn({64, 64}, 23) * 0.1;
  const auto f = [](const Tensor& a, const Tensor& p, const Tensor& q) {
    return sum(square(matmul(tanh(matmul(a, p)), q)));  // 262,144 and 131,072 multiply-adds
  };
  const Tape g = grad_tape(trace(f, x, w, v));
  const std::string plan = plan_text(g);
  CHECK_MESSAGE(plan.find("independent steps run at the same time") != std::string::npos, plan);
  const CompiledFunction c = compile(g);
  const std::vector<Tensor> args{x, w, v};
  set_num_threads(1);
  const std::vector<Tensor> one = c(args);
  set_num_threads(2);
  for (int call = 0; call < 5; ++call) {
    const std::vector<Tensor> two = c(args);
    for (std::size_t k = 0; k < one.size(); ++k) test::check_same_bits(two[k], one[k], "on 2 threads vs 1");
  }
  const std::vector<Tensor> interpreted = play(g, args);
  for (std::size_t k = 0; k < one.size(); ++k) test::check_close(one[k], interpreted[k], 1e-12, 1e-12, "vs interpreted");
  // A chain (each step reads the one before) has nothing to run at the same time.
  const Tape chain = trace([](const Tensor& a) { return sum(exp(sum(exp(a), 1)) * 2.0); }, randn({300, 200}, 24));
  CHECK(plan_text(chain).find("at the same time") == std::string::npos);
  test::run_checked(g, args);  // (under run_checked's small chunks: many groups)
}

TEST_CASE("threads: compiled calls in chunks of the pool itself, each with a workspace of its own") {
  // A thread waiting for a call's chunked kernel must not pick up another chunk of the
  // outer loop and run a second call on the same workspace (for_chunks is isolated; a
  // review found the race by reading: it depends on timing, and this exercises the path
  // rather than reproducing it reliably).
  EveryCoreAfter restore;
  set_num_threads(2);
  const Tensor x = randn({300000}, 12);
  const Tape g = grad_tape(trace([](const Tensor& v) { return sum(tanh(v) * v); }, x));
  const CompiledFunction f = compile(g);
  std::vector<Tensor> inputs;
  for (int i = 0; i < 8; ++i) inputs.push_back(x * (1.0 + 0.1 * i));
  std::vector<std::vector<Tensor>> want;
  for (const Tensor& in : inputs) want.push_back(f({in}));
  for (int round = 0; round < 5; ++round) {
    std::vector<std::vector<Tensor>> got(inputs.size());
    parallel::for_chunks(static_cast<int64_t>(inputs.size()),
                         [&](int64_t c) { got[static_cast<std::size_t>(c)] = f({inputs[static_cast<std::size_t>(c)]}); });
    for (std::size_t c = 0; c < inputs.size(); ++c)
      for (std::size_t k = 0; k < want[c].size(); ++k)
        test::check_same_bits(got[c][k], want[c][k], fmt::format("round {}, call {}, output {}", round, c, k));
  }
}

TEST_CASE("profile from inside a profiled function's step keeps the outer table") {
  const Tensor x = randn({16}, 13);
  const CompiledFunction inner = compile(trace([](const Tensor& v) { return sin(v) * 2.0; }, x));
  Primitive p{.name = "test_profiles_inside", .arity = 1};
  p.infer = [](std::span<const VarType> in, const Attrs&) { return in[0]; };
  p.eager = [&inner](std::span<const Tensor> in, const Attrs&) {
    const std::string table = inner.profile({in[0]}, 2);
    CHECK(table.find("steps,") != std::string::npos);
    return inner({in[0]})[0];
  };
  register_primitive(p);
  const Tape t = trace([](const Tensor& v) { return exp(reel::apply(primitive("test_profiles_inside"), std::vector<Tensor>{v})); }, x);
  const CompiledFunction f = compile(t);
  const std::string outer = f.profile({x}, 3);
  CAPTURE(outer);
  CHECK(outer.find(fmt::format("{} steps,", f.num_steps())) == 0);
  CHECK(outer.find("eager %2 = test_profiles_inside(%1)") != std::string::npos);
}
