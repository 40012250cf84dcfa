// A small differential fuzzer: random tapes (and their gradient tapes) must give the
// same results compiled as interpreted, and forward mode must agree with reverse mode
// and finite differences. The tapes hold loops too (scan, while_loop, nested once).
// Deterministic seeds, so a failure reproduces.
#include <cstdlib>
#include <cmath>
#include <random>

#include "random_tape.hpp"
#include "test_util.hpp"

using namespace reel;

using test::RandomTape;
using test::scalarised;

TEST_CASE("fuzz: random tapes and their gradients run the same compiled and interpreted") {
  // REEL_FUZZ_SEEDS=N runs more seeds (CI runs 150), from REEL_FUZZ_FIRST (default 1).
  const char* env = std::getenv("REEL_FUZZ_SEEDS");
  const char* first_env = std::getenv("REEL_FUZZ_FIRST");
  const uint64_t seeds = env ? std::strtoull(env, nullptr, 10) : 150;
  const uint64_t first = first_env ? std::strtoull(first_env, nullptr, 10) : 1;
  int edge_calls = 0, edge_errors = 0, fd_skipped = 0, loops = 0, nested_loops = 0, loop_tapes = 0;
  for (uint64_t seed = first; seed < first + seeds; ++seed) {
    CAPTURE(seed);
    RandomTape gen(seed);
    const DType dtype = seed % 4 == 0 ? DType::f32 : DType::f64;
    const Tape t = gen.make(dtype);
    edge_calls += gen.edge_calls(), edge_errors += gen.edge_errors();
    loops += gen.loops(), nested_loops += gen.nested_loops(), loop_tapes += gen.loops() > 0;
    CAPTURE(to_string(t));
    const std::vector<Tensor> args = gen.args(t);
    test::run_checked(t, args);
    const Tape s = scalarised(t);
    const Tape g = grad_tape(s);
    const auto reused = test::run_checked(g, args);
    // Forward mode agrees with reverse mode: <grad, u> = J u, for a random direction u.
    std::vector<Tensor> with_tangents = args;
    double dot = 0;
    for (std::size_t i = 0; i < args.size(); ++i) {
      const Tensor u = randn(args[i].shape(), 1000 + seed + i, args[i].dtype());
      with_tangents.push_back(u);
      dot += sum(reused[1 + i] * u).item();
    }
    const auto forward = test::run_checked(jvp_tape(s), with_tangents);
    const double tol = dtype == DType::f64 ? 1e-9 : 1e-3;
    CHECK_MESSAGE(std::abs(forward[1].item() - dot) <= tol * (1 + std::abs(dot)), "jvp ", forward[1].item(),
                  " vs <grad, u> ", dot);
    // And against central finite differences along u (f64 only: f32 has too few digits).
    // Where the differences at h and h/2 disagree, the function varies too fast at this
    // point for them to mean anything (sin of a large product), and the check is skipped;
    // forward and reverse mode were compared above all the same.
    if (dtype == DType::f64) {
      auto central = [&](double h) {
        std::vector<Tensor> plus = args, minus = args;
        for (std::size_t i = 0; i < args.size(); ++i) {
          plus[i] = args[i] + with_tangents[args.size() + i] * h;
          minus[i] = args[i] - with_tangents[args.size() + i] * h;
        }
        return (play(s, plus)[0].item() - play(s, minus)[0].item()) / (2 * h);
      };
      const double fd = central(1e-6), fd_half = central(5e-7);
      if (std::abs(fd - fd_half) <= 1e-6 * (1 + std::abs(fd))) {
        CHECK_MESSAGE(std::abs(forward[1].item() - fd) <= 1e-5 * (1 + std::abs(fd)), "jvp ", forward[1].item(),
                      " vs finite differences ", fd);
      } else {
        ++fd_skipped;
      }
    }
    // Buffer reuse and in-place updates change no result: the same tape compiled with
    // every buffer separate agrees.
    const auto separate = compile(g, {.reuse_memory = false})(args);
    for (std::size_t k = 0; k < separate.size(); ++k) {
      const test::Tolerance tol = test::compiled_tolerance(separate[k].dtype());
      test::check_close(separate[k], reused[k], tol.rtol, tol.atol, fmt::format("reuse off: output {}", k));
    }
  }
  // Attributes at their edges were drawn, both valid ones (run above) and invalid ones
  // (each a reel::Error when its call was built).
  MESSAGE(fmt::format("fuzz: {} seeds; {} calls with attributes at their edges, {} refused with reel::Error; {} loops "
                      "(scan, while_loop) in {} tapes, {} of them in a loop's body; finite differences skipped at {} "
                      "ill-conditioned points",
                      seeds, edge_calls, edge_errors, loops, loop_tapes, nested_loops, fd_skipped));
  if (seeds >= 150) {
    CHECK(edge_calls > 0);
    CHECK(edge_errors > 0);
    CHECK(loop_tapes > seeds / 5);
    CHECK(nested_loops > 0);
  }
}

// The batching pass on random tapes (loops included) and their gradient tapes: the
// batched tape, interpreted and compiled, gives row b what the tape gives on the rows b
// of the batched inputs (the others shared). Every primitive's batching rule (or the
// fallback) is drawn this way in combinations the registry walk does not make.
TEST_CASE("fuzz: vmap_tape of random tapes equals the tape run on each batch row") {
  const char* env = std::getenv("REEL_FUZZ_SEEDS");
  const uint64_t seeds = env ? std::strtoull(env, nullptr, 10) : 150;
  int batched_tapes = 0, guard_failures = 0;
  for (uint64_t seed = 1; seed <= seeds; ++seed) {
    CAPTURE(seed);
    RandomTape gen(seed);
    const DType dtype = seed % 4 == 0 ? DType::f32 : DType::f64;
    const Tape t0 = gen.make(dtype);
    for (const Tape& t : {t0, grad_tape(scalarised(t0))}) {
      CAPTURE(to_string(t));
      std::mt19937_64 rng(seed * 7919);
      const std::size_t n = t.inputs().size();
      const int64_t size = std::uniform_int_distribution<int64_t>(1, 3)(rng);
      std::vector<bool> batched(n);
      bool any = false;
      for (std::size_t i = 0; i < n; ++i) any = any || (batched[i] = rng() % 2 == 0);
      if (!any) batched[rng() % n] = true;
      std::vector<Tensor> args;
      for (std::size_t i = 0; i < n; ++i) {
        Shape s = t.input_types()[i].shape;
        if (batched[i]) s.insert(s.begin(), size);
        args.push_back(randn(s, seed * 31 + i, dtype));
      }
      // Row by row.
      std::vector<std::vector<Tensor>> rows;
      bool failed = false;
      try {
        for (int64_t b = 0; b < size; ++b) {
          std::vector<Tensor> a;
          for (std::size_t i = 0; i < n; ++i) a.push_back(batched[i] ? index(args[i], b) : args[i]);
          rows.push_back(play(t, a));
        }
      } catch (const GuardFailure&) {
        failed = true;
      }
      const Tape bt = vmap_tape(t, batched, size);
      if (failed) {  // a guard some row fails fails the batch too
        ++guard_failures;
        CHECK_THROWS_AS(play(bt, args), GuardFailure);
        continue;
      }
      ++batched_tapes;
      const std::vector<Tensor> out = test::run_checked(bt, args);
      REQUIRE(out.size() == t.outputs.size());
      const double tol = dtype == DType::f64 ? 1e-12 : 1e-5;
      for (std::size_t k = 0; k < out.size(); ++k)
        for (int64_t b = 0; b < size; ++b)
          test::check_close(index(out[k], b), rows[static_cast<std::size_t>(b)][k], tol, tol,
                            fmt::format("output {}, row {}", k, b));
    }
  }
  MESSAGE(fmt::format("fuzz vmap: {} batched tapes checked, {} with a guard failing on some row", batched_tapes,
                      guard_failures));
  CHECK(batched_tapes > static_cast<int>(seeds));
}
