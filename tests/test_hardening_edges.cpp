// Issue 33, items 5 and 6: edges that crashed, threw a non-Reel exception or blamed the
// wrong operation (process exit under a running thread, nested tape text, binomial
// checkpoints, Jacobian seeds, matmul's batch, vmap's batch size). Loops' own edges are
// in test_loop_carries.cpp and test_loop_reads.cpp; the IDX reader's in test_idx.cpp.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <thread>

#include <reel/ir/revolve.hpp>

#include "child_process.hpp"
#include "test_util.hpp"

using namespace reel;

namespace {

constexpr const char* kExitChild = "REEL_TEST_EXIT_CHILD";

// How deeply tape attributes nest in `t`.
int nesting(const Tape& t) {
  int deepest = 0;
  for (const Op& op : t.ops)
    for (const auto& [key, value] : op.attrs.items())
      if (const auto* ref = std::get_if<TapeRef>(&value); ref != nullptr && ref->tape)
        deepest = std::max(deepest, 1 + nesting(*ref->tape));
  return deepest;
}

// sin(x) inside `depth` nested loop bodies (a one-trip fori_loop, a scan) or checkpoints.
Tensor nested_loops(const Tensor& x, int depth) {
  if (depth == 0) return sin(x);
  return fori_loop(0, 1, [depth](const Tensor&, const Tensor& c) { return nested_loops(c, depth - 1); }, x);
}
Tensor nested_checkpoints(const Tensor& x, int depth) {
  if (depth == 0) return sin(x);
  return checkpoint([depth](const Tensor& y) { return nested_checkpoints(y, depth - 1); })(x);
}

// The text of nested_checkpoints(x [2], depth), written out: each level is the one
// below as the body of a checkpoint, its lines joined by "; ".
std::string nested_checkpoint_text(int depth) {
  std::string text = "inp %1::f64[2]\n%2 = sin(%1)::f64[2]\nout %2";
  for (int d = 0; d < depth; ++d) {
    std::string body;
    for (char c : text) body += c == '\n' ? std::string("; ") : std::string(1, c);
    text = "inp %1::f64[2]\n%2 = checkpoint(%1, body={" + body + "})::f64[2]\nout %2";
  }
  return text;
}

}  // namespace

// The process of the next test: a detached thread calls compiled functions (a small
// one, one large enough to run in chunks on the thread pool, and matrix products cut
// into blocks on it) for ever while the process returns from main and exits. It runs
// only when the variable is set.
TEST_CASE("issue 33.5 child: the process exits while a detached thread runs compiled code") {
  if (std::getenv(kExitChild) == nullptr) return;
  // Destroyed after the exit handler that stops other threads' products (it is made
  // before any product): the exiting thread's own products must still run.
  struct AtExit {
    std::function<void()> last;
    ~AtExit() {
      if (last) last();
    }
  };
  static AtExit at_exit;
  const Tensor small = tensor({0.5, 1.0, 2.0}), large = randn({400000}, 1), w = randn({256, 256}, 2);
  auto step = [](const Tensor& x) { return sum(tanh(x) * sin(x) + exp(x * 0.001)); };
  auto layer = [](const Tensor& m) { return sum(tanh(matmul(m, m))); };
  const CompiledFunction f = compile(trace(step, small)), g = compile(grad_tape(trace(step, large))),
                         h = compile(grad_tape(trace(layer, w)));
  static std::atomic<int64_t> calls{0};
  std::thread([f, g, h, small, large, w] {
    while (true) {
      (void)f({small});
      (void)g({large});
      (void)h({w});
      calls.fetch_add(1);
    }
  }).detach();
  while (calls.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  at_exit.last = [h, w] {
    if (h({w}).size() != 2) std::abort();
  };
  // Returning ends the test run: main returns and static destruction begins while the
  // thread is inside compiled code.
}

TEST_CASE("issue 33.5: the process exits cleanly while a detached thread runs compiled code") {
  // A fresh process (this test binary, running only the case above): a forked copy of
  // this one would inherit a thread pool whose threads it does not have.
  for (int run = 0; run < 3; ++run) {
    CAPTURE(run);
    const std::string how = test::run_in_child(
        [] {
          setenv(kExitChild, "1", 1);
          if (std::freopen("/dev/null", "w", stdout) == nullptr) _exit(6);
          execl("/proc/self/exe", "reel_tests", "-tc=issue 33.5 child*", static_cast<char*>(nullptr));
          _exit(5);  // exec failed
        },
        120);
    CHECK(how == "exit 0");
  }
}

TEST_CASE("issue 33.6: tapes nested 70 deep print and parse, and 257 deep is a short error both ways") {
  const Tensor x = tensor({0.3, -1.2});
  // 70 levels of loops and of checkpoints: print, parse back, the same text and values.
  for (const auto& [name, nest] : {std::pair<const char*, Tensor (*)(const Tensor&, int)>{"loops", nested_loops},
                                   {"checkpoints", nested_checkpoints}}) {
    CAPTURE(name);
    const Tape t = trace([nest](const Tensor& v) { return nest(v, 70); }, x);
    REQUIRE(nesting(t) >= 70);
    const std::string text = to_string(t);
    const Tape back = parse_tape(text);
    CHECK(to_string(back) == text);
    CHECK(nesting(back) == nesting(t));
    test::check_close(play(back, {x})[0], sin(x), 0, 0, name);
  }
  CHECK(to_string(trace([](const Tensor& v) { return nested_checkpoints(v, 70); }, x)) == nested_checkpoint_text(70));
  // The deepest both accept.
  const Tape deepest = parse_tape(nested_checkpoint_text(256));
  CHECK(nesting(deepest) == 256);
  CHECK(to_string(deepest) == nested_checkpoint_text(256));
  test::check_close(play(deepest, {x})[0], sin(x), 0, 0, "256 deep");
  // One more: refused by both, in one short sentence (not one prefix per level).
  std::string message;
  try {
    (void)parse_tape(nested_checkpoint_text(257));
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message == "parse_tape: line 2: expected tape attributes (loop and checkpoint bodies) nested at most 256 deep, "
                   "got deeper");
  const Tape too_deep = trace([](const Tensor& v) { return nested_checkpoints(v, 257); }, x);
  CHECK(nesting(too_deep) == 257);
  CHECK_ERROR(to_string(too_deep), "to_string: expected tape attributes (loop and checkpoint bodies) nested at most 256 "
                                   "deep, got deeper");
}

TEST_CASE("issue 33.6: two equal calls of tapes 300 deep are merged by CSE, not printed (whose limit is 256)") {
  const Tensor x = tensor({0.3, -1.2});
  const Tape t = trace([](const Tensor& v) { return nested_checkpoints(v, 300) + nested_checkpoints(v, 300); }, x);
  REQUIRE(nesting(t) == 300);
  const Tape merged = cse(t);
  CHECK(merged.count(OpKind::call) == t.count(OpKind::call) - 1);  // the second checkpoint is the first
  test::check_close(play(merged, {x})[0], sin(x) * 2.0, 1e-15, 0, "merged");
  // Equal structure, not equal text: different constants deep inside are not merged.
  const Tape other = trace([](const Tensor& v) { return nested_checkpoints(v, 300) + nested_checkpoints(v * 1.0, 300); }, x);
  CHECK(same_tape(t, t));
  CHECK_FALSE(same_tape(t, other));
}

TEST_CASE("issue 33.6: Checkpoint binomial with 2^40 or INT64_MAX snapshots is the store-all gradient") {
  const Tensor x0 = tensor({0.3, -0.7}), xs = randn({10, 2}, 7);
  auto run = [xs](Checkpoint cp) {
    return [xs, cp](const Tensor& x) {
      ScanOptions o;
      o.checkpoint = cp;
      const auto [c, ys] = scan([](const Tensor& c, const Tensor& xi) { return std::pair{sin(c) * xi + c, sum(c)}; }, x, xs, o);
      return sum(c) + sum(ys);
    };
  };
  const Tape stored = grad_tape(trace(run({}), x0));
  const std::vector<Tensor> want = play(stored, {x0});
  for (const int64_t snapshots : {int64_t{1} << 40, std::numeric_limits<int64_t>::max()}) {
    CAPTURE(snapshots);
    const Tape g = grad_tape(trace(run(Checkpoint::binomial(snapshots)), x0));
    CHECK(test::count_calls(g, "revolve") == 1);
    const std::vector<Tensor> got = test::run_checked(g, {x0});
    REQUIRE(got.size() == want.size());
    for (std::size_t k = 0; k < got.size(); ++k) test::check_close(got[k], want[k], 1e-13, 1e-14, "binomial");
  }
  // The schedule holds at most one state per step, whatever was asked.
  CHECK(revolve_slots(10, int64_t{1} << 40) == 11);
  CHECK(revolve_slots(10, 3) == 4);
  CHECK(revolve_slots(0, std::numeric_limits<int64_t>::max()) == 2);
}

TEST_CASE("issue 33.6: jacfwd and jacrev with a million inputs or outputs is an error stating the size") {
  const Tensor big = zeros({1000000});
  auto total = [](const Tensor& v) { return sum(sin(v)); };  // 10^6 inputs, 1 output
  auto each = [](const Tensor& v) { return sin(v); };        // 10^6 inputs and outputs
  auto small_in = [](const Tensor& v) { return reshape(broadcast_to(sin(v), {1000000, 1}), {1000000}) * 2.0; };
  CHECK_ERROR(jacfwd(total, big), "jacfwd: one pass batched over 1000000 seed directions (one per input element)",
              "f64[1000000,1000000]", "8e+12 bytes", "bytes of memory this process may use", "ask for fewer directions");
  CHECK_ERROR(jacrev(each, big), "jacrev: one pass batched over 1000000 seed directions (one per output element)",
              "f64[1000000,1000000]", "8e+12 bytes");
  CHECK_ERROR(jacobian(each, big), "jacobian: one pass batched over 1000000 seed directions");
  CHECK_ERROR(hessian(total, big), "hessian: one pass batched over 1000000 seed directions");
  // The cheap mode of each still works: one output row, or one input column.
  const Tensor x = tensor({0.25});
  const Jacobian r = jacrev(total, full({1000}, 0.5));
  CHECK(r.jacobian.shape() == Shape{1000});
  CHECK(r.jacobian.values()[999] == doctest::Approx(std::cos(0.5)));
  const Jacobian f = jacfwd(small_in, x);
  CHECK(f.jacobian.shape() == Shape{1000000, 1});
  CHECK(f.jacobian.values()[123456] == doctest::Approx(2 * std::cos(0.25)));
}

TEST_CASE("issue 33.6: matmul whose batch dimensions overflow names matmul") {
  // No elements (an empty matrix dimension), but the batch [2^40, 2^40] has 2^80.
  const Tensor a = zeros({1, int64_t{1} << 40, 2, 0}), b = zeros({int64_t{1} << 40, 1, 0, 3});
  CHECK_ERROR(matmul(a, b), "matmul: the batch dimensions [1,1099511627776] of f64[1,1099511627776,2,0] and "
                            "[1099511627776,1] of f64[1099511627776,1,0,3] broadcast to a result of "
                            "[1099511627776,1099511627776,2,3]", "expected at most");
  std::string message;
  try {
    (void)matmul(a, b);
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message.find("batch_matmul") == std::string::npos);
  // Traced too.
  CHECK_ERROR(trace([&](const Tensor& u) { return matmul(u, b); }, a), "matmul: the batch dimensions");
  // One that fits is still a product.
  CHECK(matmul(zeros({3, 1, 2, 0}), zeros({4, 0, 5})).shape() == Shape{3, 4, 2, 5});
}

TEST_CASE("issue 33.6: vmap_tape with a batch too large names vmap and the batch size") {
  const Tape t = trace([](const Tensor& v) { return sin(v); }, tensor({1.0, 2.0, 3.0}));
  CHECK_ERROR(vmap_tape(t, std::vector<bool>{true}, int64_t{1} << 62),
              "vmap: a batch size of 4611686018427387904 makes f64[4611686018427387904,3] of f64[3]",
              "expected at most");
  std::string message;
  try {
    (void)vmap_tape(t, std::vector<bool>{true}, int64_t{1} << 62);
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message.find("sin") == std::string::npos);
  CHECK(vmap_tape(t, std::vector<bool>{true}, 4).outputs.size() == 1);
}

TEST_CASE("issue 33 fuzz at 10x: pooling with a single output row or column compiles to the interpreter's values") {
  // Found by the random-tape fuzzer at seed 524 (REEL_FUZZ_SEEDS=1500): compiled pooling
  // read every window as padding (avg 0, max -inf) when the output had one row or
  // column and the padding was not 0 (the window's start, -padding, added with nuw).
  const Tensor x = tensor({-1.5, 0.25, -1.75, 1.0}, {1, 1, 4, 1});
  for (const char* op : {"avg_pool2d", "max_pool2d"}) {
    CAPTURE(op);
    const Tape t = parse_tape(fmt::format("inp %1::f64[1,1,4,1]\n%2 = {}(%1, kernel=[3,3], stride=[3,2], "
                                          "padding=[1,1])::f64[1,1,2,1]\nout %2",
                                          op));
    const Tensor want = std::string(op) == "avg_pool2d" ? tensor({(-1.5 + 0.25) / 9, (-1.75 + 1.0) / 9}, {1, 1, 2, 1})
                                                        : tensor({0.25, 1.0}, {1, 1, 2, 1});
    test::check_close(play(t, {x})[0], want, 1e-15, 0, "interpreted");
    test::check_close(compile(t)({x})[0], want, 1e-15, 0, "compiled");
    // One output column of a wider input, one row, one element; and the gradients.
    for (const Shape& shape : {Shape{1, 1, 4, 2}, Shape{1, 1, 1, 4}, Shape{1, 1, 1, 1}}) {
      const Tensor v = randn(shape, 5);
      const Tape f = trace([op](const Tensor& u) {
        const Pool2dOptions o{.stride = {{2, 3}}, .padding = {1, 1}};
        return sum(tanh(std::string(op) == "avg_pool2d" ? avg_pool2d(u, {3, 3}, o) : max_pool2d(u, {3, 3}, o)));
      }, v);
      test::run_checked(f, {v});
      test::run_checked(grad_tape(f), {v});
    }
  }
}
