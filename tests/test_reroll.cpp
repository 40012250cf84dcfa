// Re-rolling traced loops (reel::reroll): plain C++ loops, traced, fold into scans that
// give the same values and gradients as the unrolled tape (played and compiled, f64 and
// f32); near-repeats that differ do not fold; the default pipelines run it first.
#include <cmath>
#include <cstdlib>
#include <array>
#include <random>
#include <sstream>

#include "test_util.hpp"

using namespace reel;

namespace {

int count_prim(const Tape& t, std::string_view name) { return test::count_calls(t, name); }
int count_scans(const Tape& t) { return count_prim(t, "scan"); }

// The body of the first scan of t.
const Tape& first_body(const Tape& t) {
  for (const Op& op : t.ops)
    if (op.kind == OpKind::call && op.prim->name == "scan") return op.attrs.tape("body");
  FAIL("no scan in the tape");
  return t;
}

double tol_of(const std::vector<Tensor>& args) {
  return !args.empty() && args[0].dtype() == DType::f32 ? 1e-4 : 1e-10;
}

void check_all_close(const std::vector<Tensor>& got, const std::vector<Tensor>& want, double tol,
                     const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) test::check_close(got[i], want[i], tol, tol, fmt::format("{} {}", what, i));
}

// The re-rolled tape against the unrolled one: values (played, exactly: the body runs
// the same operations; and compiled), reverse mode and forward mode, played and compiled.
void check_same_function(const Tape& unrolled, const Tape& rolled, const std::vector<Tensor>& args) {
  const double tol = tol_of(args);
  test::check_round_trip(rolled);
  verify(rolled);
  const std::vector<Tensor> want = play(unrolled, args), got = play(rolled, args);
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK_MESSAGE(got[i].values() == want[i].values(), "played value ", i);
  check_all_close(compile(rolled)(args), want, tol, "compiled value");

  Tape g_unrolled, j_unrolled;
  {
    const test::NoReroll keep;
    g_unrolled = grad_tape(unrolled);
    j_unrolled = jvp_tape(unrolled);
  }
  const Tape g_rolled = grad_tape(rolled);
  CHECK(count_scans(g_rolled) >= 1);
  const std::vector<Tensor> g_want = play(g_unrolled, args);
  check_all_close(play(g_rolled, args), g_want, tol, "gradient played");
  check_all_close(compile(g_rolled)(args), g_want, tol, "gradient compiled");

  std::vector<Tensor> jargs = args;
  for (std::size_t i = 0; i < args.size(); ++i) jargs.push_back(cast(randn(args[i].shape(), 40 + i), args[i].dtype()));
  const Tape j_rolled = jvp_tape(rolled);
  check_all_close(play(j_rolled, jargs), play(j_unrolled, jargs), tol, "jvp played");
}

// An LSTM loss with GradBench's (ADBench's) parameters, main [2l][4b], extra [3][b],
// state [2l][b] and sequence [c][b]: l layers of gates, then the log-softmax prediction
// of each next element of the sequence. Written plainly: slices of the parameters and
// of the sequence in the loop, as user code would.
Tensor lstm_loss(const Tensor& main, const Tensor& extra, const Tensor& state, const Tensor& seq) {
  const int64_t layers = main.shape()[0] / 2, b = main.shape()[1] / 4, c = seq.shape()[0];
  std::vector<std::array<Tensor, 8>> W(static_cast<std::size_t>(layers));  // weights f i o c, biases f i o c
  std::vector<Tensor> h, cell;
  for (int64_t j = 0; j < layers; ++j) {
    for (int64_t g = 0; g < 8; ++g)
      W[static_cast<std::size_t>(j)][static_cast<std::size_t>(g)] =
          slice(index(main, 2 * j + g / 4), (g % 4) * b, (g % 4 + 1) * b);
    h.push_back(index(state, 2 * j));
    cell.push_back(index(state, 2 * j + 1));
  }
  Tensor loss = scalar(0.0);
  for (int64_t t = 0; t + 1 < c; ++t) {
    Tensor x = index(seq, t) * index(extra, 0);
    for (std::size_t j = 0; j < h.size(); ++j) {
      auto gate = [&](std::size_t g, const Tensor& in) { return in * W[j][g] + W[j][g + 4]; };
      const Tensor forget = sigmoid(gate(0, x)), input = sigmoid(gate(1, h[j]));
      const Tensor output = sigmoid(gate(2, x)), candidate = tanh(gate(3, h[j]));
      cell[j] = cell[j] * forget + input * candidate;
      h[j] = output * tanh(cell[j]);
      x = h[j];
    }
    const Tensor y = x * index(extra, 1) + index(extra, 2);
    loss = loss - sum(index(seq, t + 1) * (y - log(2.0 + sum(exp(y)))));
  }
  return loss / static_cast<double>((c - 1) * b);
}

// Classic RK4 steps of GradBench's ode, y' = x * (S y + e0) with S the shift down by one,
// from y = 0 over [0, 2].
Tensor rk4(const Tensor& x, int64_t steps) {
  const int64_t n = x.shape()[0];
  std::vector<double> shift(static_cast<std::size_t>(n * n), 0.0), first(static_cast<std::size_t>(n), 0.0);
  for (int64_t i = 1; i < n; ++i) shift[static_cast<std::size_t>(i * n + i - 1)] = 1.0;
  first[0] = 1.0;
  const Tensor S = tensor(shift, {n, n}), e0 = tensor(first, {n});
  auto f = [&](const Tensor& y) { return x * (matmul(S, y) + e0); };
  const double dt = 2.0 / static_cast<double>(steps);
  Tensor y = zeros({n});
  for (int64_t k = 0; k < steps; ++k) {
    const Tensor a = f(y), b = f(y + a * (dt / 2)), c = f(y + b * (dt / 2)), d = f(y + c * dt);
    y = y + (a + (b + c) * 2.0 + d) * (dt / 6);
  }
  return y;
}

}  // namespace

TEST_CASE("reroll: the sin recurrence folds into one scan; values and gradients equal the unrolled tape's") {
  for (DType dt : {DType::f64, DType::f32}) {
    const std::vector<Tensor> args{cast(randn({8}, 1) * 0.5, dt)};
    const Tape unrolled = test::trace_list([](const std::vector<Tensor>& a) { return test::sin_recurrence(a[0], 300); }, args);
    const Tape rolled = reroll(unrolled);
    CAPTURE(to_string(rolled));
    CHECK(unrolled.size() > 2000);
    CHECK(rolled.size() <= 4);
    CHECK(count_scans(rolled) == 1);
    CHECK(first_body(rolled).size() <= 8);  // one step: sin, square, two constants, two mul, add
    check_same_function(unrolled, rolled, args);
  }
}

TEST_CASE("reroll: the scans made may checkpoint (every k, sqrt, binomial) with the same gradients") {
  const std::vector<Tensor> args{randn({6, 6}, 1) * 0.3, randn({6}, 2), randn({6}, 3)};
  const Tape unrolled = test::trace_list(
      [](const std::vector<Tensor>& a) { return test::tanh_recurrence(a[0], a[1], a[2], 50); }, args);
  const std::vector<Tensor> want = play(grad_tape(reroll(unrolled)), args);
  for (auto [policy, arg] : {std::pair<std::string, int64_t>{"every", 5}, {"sqrt", 0}, {"binomial", 3}}) {
    CAPTURE(policy);
    const Tape rolled = reroll(unrolled, {.checkpoint = policy, .checkpoint_arg = arg});
    CHECK(to_string(rolled).find("checkpoint=\"" + policy + "\"") != std::string::npos);
    check_all_close(play(grad_tape(rolled), args), want, 1e-10, "checkpointed gradient");
  }
}

TEST_CASE("reroll: the tanh recurrence folds, W and b loop invariants") {
  const std::vector<Tensor> args{randn({6, 6}, 1) * 0.3, randn({6}, 2), randn({6}, 3)};
  const Tape unrolled = test::trace_list(
      [](const std::vector<Tensor>& a) { return test::tanh_recurrence(a[0], a[1], a[2], 60); }, args);
  const Tape rolled = reroll(unrolled);
  CAPTURE(to_string(rolled));
  CHECK(count_scans(rolled) == 1);
  CHECK(rolled.size() < 10);
  int consts = -1;
  for (const Op& op : rolled.ops)
    if (op.kind == OpKind::call && op.prim->name == "scan") consts = static_cast<int>(op.attrs.integer("num_consts"));
  CHECK(consts == 2);  // W and b
  check_same_function(unrolled, rolled, args);
}

TEST_CASE("reroll: GradBench's lstm written as a plain loop folds over time steps") {
  const int64_t layers = 2, b = 3, c = 40;
  const std::vector<Tensor> args{randn({2 * layers, 4 * b}, 1) * 0.5, randn({3, b}, 2) * 0.5,
                                 randn({2 * layers, b}, 3) * 0.5, randn({c, b}, 4)};
  auto f = [](const std::vector<Tensor>& a) { return lstm_loss(a[0], a[1], a[2], a[3]); };
  const Tape unrolled = trace([&](const Tensor& m, const Tensor& e, const Tensor& s, const Tensor& q) {
    return f({m, e, s, q}); }, args[0], args[1], args[2], args[3]);
  const Tape rolled = reroll(unrolled);
  CAPTURE(rolled.size());
  CHECK(count_scans(rolled) == 1);
  CHECK(rolled.size() * 8 < unrolled.size());  // the time steps collapse into one body
  CHECK(first_body(rolled).size() * static_cast<int>(c) / 2 < unrolled.size());
  // The sequence is read by advancing slices: one slice of it is the scan's xs.
  bool sliced_xs = false;
  for (const Op& op : rolled.ops)
    if (op.kind == OpKind::call && op.prim->name == "slice" && op.type.shape[0] > 30) sliced_xs = true;
  CHECK(sliced_xs);
  check_same_function(unrolled, rolled, args);
  // And against finite differences, for the main parameters.
  const std::vector<Tensor> g = play(grad_tape(rolled), args);
  const std::vector<Tensor> fd = test::finite_diff(f, args);
  test::check_close(g[1], fd[0], 1e-5, 1e-7, "d lstm / d main vs finite differences");
}

TEST_CASE("reroll: GradBench's ode written as a plain loop folds over the RK4 steps") {
  const std::vector<Tensor> args{randn({5}, 1) * 0.5};
  const Tape unrolled = test::trace_list([](const std::vector<Tensor>& a) { return sum(rk4(a[0], 50) * rk4(a[0], 50)); },
                                         args);
  const Tape rolled = reroll(unrolled);
  CAPTURE(to_string(rolled));
  CHECK(count_scans(rolled) == 2);  // ode is called twice: two loops
  // Step 0 stays unrolled: its f(y) of the untraced zeros was computed while tracing.
  CHECK(rolled.size() * 10 < unrolled.size());
  check_same_function(unrolled, rolled, args);
}

TEST_CASE("reroll: a compiled function and a gradient of traced code get rolled loops (jit, grad)") {
  const Tensor x = randn({8}, 1) * 0.5;
  const Tape t = trace([](const Tensor& v) { return test::sin_recurrence(v, 100); }, x);
  const CompiledFunction f = compile(t);
  CHECK(count_scans(f.tape()) == 1);
  const auto g = grad([](const Tensor& v) { return test::sin_recurrence(v, 100); }, x);
  const test::NoReroll unrolled;
  const CompiledFunction fu = compile(t);
  CHECK(count_scans(fu.tape()) == 0);
  test::check_close(f({x})[0], fu({x})[0], 1e-12, 1e-12, "compiled rolled vs unrolled");
  const auto gu = grad([](const Tensor& v) { return test::sin_recurrence(v, 100); }, x);
  test::check_close(g.grads[0], gu.grads[0], 1e-10, 1e-12, "grad rolled vs unrolled");
}

TEST_CASE("reroll: a branch on a value inside a loop: the guard folds into the body and fails there (jit, simplegrad)") {
  auto f = [](const Tensor& x) {
    Tensor y = x;
    for (int i = 0; i < 20; ++i) y = sum(y) > 0.0 ? y * 0.9 + 0.01 : y * 0.5 + 0.05;  // a negative sum turns positive
    return sum(y * y);
  };
  const Tape t = trace(f, tensor({1.0, 2.0}));
  const Tape r = reroll(t);
  REQUIRE(count_scans(r) == 1);
  CHECK(count_prim(first_body(r), "guard") == 1);
  auto jf = jit(f, {.compile_after = 1});
  auto g = simplegrad(f, {.compile_after = 1});
  // Positive all the way (the loop folds, guard and all), and sums that turn positive
  // after 2 or 5 iterations (the guard in the folded body fails: other paths).
  for (const Tensor& x : {tensor({1.0, 2.0}), tensor({-0.5, 0.1}), tensor({-1.0, -1.9}), tensor({3.0, 1.0})}) {
    CHECK(jf(x).item() == doctest::Approx(f(x).item()).epsilon(1e-12));
    const auto [value, dx] = g(x);
    const auto fd = test::finite_diff([&](const std::vector<Tensor>& a) { return f(a[0]); }, {x});
    CHECK(value.item() == doctest::Approx(f(x).item()).epsilon(1e-12));
    test::check_close(dx, fd[0], 1e-6, 1e-8, "gradient on each path");
  }
}

TEST_CASE("reroll: second order through a re-rolled loop (hvp) equals the unrolled loop's") {
  auto f = [](const Tensor& W, const Tensor& x) {
    const Tensor b = zeros({4}) + 0.1;
    return test::tanh_recurrence(W, b, x, 30);
  };
  const Tensor W = randn({4, 4}, 1) * 0.3, x = randn({4}, 2), vW = randn({4, 4}, 3), vx = randn({4}, 4);
  const HvpResult rolled = hvp(f, {W, x}, {vW, vx});
  const test::NoReroll off;
  const HvpResult unrolled = hvp(f, {W, x}, {vW, vx});
  check_all_close(rolled.hvp, unrolled.hvp, 1e-10, "hvp");
}

TEST_CASE("reroll: values of earlier iterations read after the loop are stacked ys") {
  const std::vector<Tensor> args{randn({4}, 1) * 0.5, randn({4}, 2)};
  auto f = [](const std::vector<Tensor>& a) {
    Tensor x = a[0];
    std::vector<Tensor> seen;
    for (int i = 0; i < 20; ++i) {
      x = tanh(x * a[1] + 0.1);
      seen.push_back(sin(x));
    }
    return sum(stack(seen)) + sum(seen[3] * x) + sum(seen[19]);
  };
  const Tape unrolled = test::trace_list(f, args);
  const Tape rolled = reroll(unrolled);
  CAPTURE(to_string(rolled));
  CHECK(count_scans(rolled) == 1);
  check_same_function(unrolled, rolled, args);
}

TEST_CASE("reroll: constants that differ per iteration are stacked into an xs; equal ones stay in the body") {
  const std::vector<Tensor> args{randn({3}, 1) * 0.5};
  auto f = [](const std::vector<Tensor>& a) {
    Tensor x = a[0];
    for (int i = 0; i < 16; ++i) x = sin(x) * (1.0 + 0.01 * i) + 0.5;  // 1 + 0.01 i differs, 0.5 does not
    return sum(x);
  };
  const Tape unrolled = test::trace_list(f, args);
  const Tape rolled = reroll(unrolled);
  CAPTURE(to_string(rolled));
  REQUIRE(count_scans(rolled) == 1);
  bool stacked = false;
  for (const Op& op : rolled.ops) stacked = stacked || (op.kind == OpKind::constant && op.type.shape == Shape{16});
  CHECK(stacked);
  CHECK(count_prim(first_body(rolled), "sin") == 1);
  check_same_function(unrolled, rolled, args);
}

TEST_CASE("reroll: slices that advance by a step along the leading axis are xs (rows, every other row, chunks)") {
  const std::vector<Tensor> args{randn({40, 3}, 1), randn({3}, 2)};
  auto rows = [](int64_t step, int64_t width) {
    return [=](const std::vector<Tensor>& a) {
      Tensor h = a[1];
      for (int64_t t = 0; t * step + width <= 40 && t < 18; ++t)
        h = tanh(h * 0.5 + sum(slice(a[0], t * step, t * step + width), 0));
      return sum(h);
    };
  };
  for (auto [step, width] : {std::pair<int64_t, int64_t>{1, 1}, {2, 1}, {2, 2}}) {
    CAPTURE(step);
    CAPTURE(width);
    const Tape unrolled = test::trace_list(rows(step, width), args);
    const Tape rolled = reroll(unrolled);
    CAPTURE(to_string(rolled));
    CHECK(count_scans(rolled) == 1);
    CHECK(rolled.size() < 12);
    check_same_function(unrolled, rolled, args);
  }
}

TEST_CASE("reroll: loops in loops fold into a scan whose body holds a scan") {
  const std::vector<Tensor> args{randn({4}, 1) * 0.5};
  auto f = [](const std::vector<Tensor>& a) {
    Tensor x = a[0], total = sum(a[0]);
    for (int i = 0; i < 12; ++i) {
      for (int j = 0; j < 16; ++j) x = sin(x) * 0.9 + 0.05;  // 16 x 5 operations: enough to fold
      total = total + sum(x * x);
    }
    return total;
  };
  const Tape unrolled = test::trace_list(f, args);
  const Tape rolled = reroll(unrolled);
  CAPTURE(to_string(rolled));
  REQUIRE(count_scans(rolled) == 1);
  CHECK(count_scans(first_body(rolled)) == 1);
  CHECK(count_scans(reroll(unrolled, {.nested = false})) == 1);
  CHECK(count_scans(first_body(reroll(unrolled, {.nested = false}))) == 0);
  check_same_function(unrolled, rolled, args);
}

TEST_CASE("reroll: a loop of scans (calls with several results) folds") {
  const std::vector<Tensor> args{randn({3}, 1) * 0.5, randn({4, 3}, 2)};
  auto f = [](const std::vector<Tensor>& a) {
    Tensor x = a[0];
    for (int i = 0; i < 10; ++i) {
      auto [y, ys] = scan([](const Tensor& c, const Tensor& r) {
        const Tensor n = tanh(c + r);
        return std::pair{n, n * 2.0};
      }, x, a[1]);
      x = y * 0.5 + sum(ys, 0) * 0.1;
    }
    return sum(x);
  };
  const Tape unrolled = test::trace_list(f, args);
  REQUIRE(count_scans(unrolled) == 10);
  const Tape rolled = reroll(unrolled);
  CAPTURE(to_string(rolled));
  CHECK(count_scans(rolled) == 1);
  CHECK(count_scans(first_body(rolled)) == 1);
  check_same_function(unrolled, rolled, args);
}

TEST_CASE("reroll: scattered reads do not fold; reads that advance only every other iteration fold with two steps") {
  const std::vector<Tensor> args{randn({60, 3}, 3), randn({3}, 4)};
  auto f = [](const std::vector<Tensor>& a) {
    Tensor h = a[1];
    unsigned r = 7;
    for (int t = 0; t < 40; ++t) {  // rows at pseudo-random places: no step between them
      r = r * 1103515245u + 12345u;
      const int64_t row = static_cast<int64_t>((r >> 16) % 60u);
      h = tanh(h * 0.5 + sum(slice(a[0], row, row + 1), 0));
    }
    for (int64_t t = 0; t < 24; ++t) {  // rows 0, 31, 2, 33, ...: a step of 2 every other iteration
      const int64_t row = t + (t % 2) * 30;
      h = tanh(h * 0.5 + sum(slice(a[0], row, row + 1), 0));
    }
    return sum(h);
  };
  const Tape unrolled = test::trace_list(f, args);
  const Tape rolled = reroll(unrolled);
  CAPTURE(to_string(rolled));
  CHECK(count_scans(rolled) == 1);
  CHECK(rolled.size() + 100 < unrolled.size());  // (the scattered reads stay as they are)
  check_same_function(unrolled, rolled, args);
}

TEST_CASE("reroll: a dependency two iterations back in every iteration folds with a body of two steps") {
  const std::vector<Tensor> args{randn({3}, 1) * 0.5, randn({3}, 2) * 0.5};
  auto f = [](const std::vector<Tensor>& a) {
    Tensor p = a[0], q = a[1];
    for (int i = 0; i < 30; ++i) {
      const Tensor z = sin(q) * 0.6 + p * 0.3;  // reads the last two values
      p = q, q = z;
    }
    return sum(q);
  };
  const Tape unrolled = test::trace_list(f, args);
  const Tape rolled = reroll(unrolled);
  CAPTURE(to_string(rolled));
  CHECK(count_scans(rolled) == 1);
  check_same_function(unrolled, rolled, args);
}

// ---- random loops ----

namespace {

// A random loop, written out as a trace would record it: a body of `P` operations drawn
// once (each argument a value of the same iteration, of the previous one, a loop
// invariant input or a constant, equal or different per iteration), repeated R times;
// with `odd`, one iteration draws one operation or argument again (a near-repeat).
// The outputs read the last values and a few of earlier iterations.
struct RandomLoop {
  std::mt19937_64 rng;
  explicit RandomLoop(uint64_t seed) : rng(seed) {}
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

  enum Src { same, previous, invariant, constant, varying };
  struct Arg {
    Src src;
    int at;
  };
  struct BodyOp {
    const char* prim;
    std::vector<Arg> args;
  };

  BodyOp draw(int j) {
    static const char* unary[] = {"sin", "tanh", "neg"};
    static const char* binary[] = {"mul", "add", "sub"};
    const bool two = pick(0, 1) == 1;
    BodyOp op{two ? binary[pick(0, 2)] : unary[pick(0, 2)], {}};
    for (int a = 0; a < (two ? 2 : 1); ++a) {
      Src src = static_cast<Src>(pick(0, 4));
      if (src == same && j == 0) src = previous;
      op.args.push_back({src, src == same ? pick(0, j - 1) : pick(0, 1000)});
    }
    return op;
  }

  Tape make(int P, int R, bool odd) {
    TapeBuilder b;
    const VarType t{DType::f64, {3}};
    const std::vector<Var> inv{b.input(t), b.input(t)};
    const std::vector<Var> init{b.call("sin", {inv[0]}), b.call("cos", {inv[1]})};
    std::vector<BodyOp> body;
    for (int j = 0; j < P; ++j) body.push_back(draw(j));
    const int odd_k = odd ? pick(0, R - 1) : -1, odd_j = pick(0, P - 1);
    std::vector<Var> prev, cur;
    std::vector<std::vector<Var>> all;
    for (int k = 0; k < R; ++k) {
      cur.clear();
      for (int j = 0; j < P; ++j) {
        const BodyOp op = k == odd_k && j == odd_j ? draw(j) : body[static_cast<std::size_t>(j)];
        std::vector<Var> args;
        for (const Arg& a : op.args) {
          switch (a.src) {
            case same: args.push_back(cur[static_cast<std::size_t>(a.at)]); break;
            case previous:
              args.push_back(k == 0 ? init[static_cast<std::size_t>(a.at % 2)] : prev[static_cast<std::size_t>(a.at % P)]);
              break;
            case invariant: args.push_back(inv[static_cast<std::size_t>(a.at % 2)]); break;
            case constant: args.push_back(b.scalar(0.5, DType::f64)); break;
            case varying: args.push_back(b.scalar(0.1 * (k % 7) + 0.01 * a.at, DType::f64)); break;
          }
        }
        // A binary call of two 0-d constants would be 0-d: give it the carries' type.
        Var v = b.call(op.prim, std::move(args));
        if (b.type(v).shape.empty()) v = b.broadcast_to(v, t.shape);
        cur.push_back(b.call("tanh", {v}));  // keeps values bounded
      }
      all.push_back(cur);
      prev = cur;
    }
    Var out = b.call("sum", {prev.back()});
    for (int i = pick(0, 2); i > 0; --i) {
      const auto& it = all[static_cast<std::size_t>(pick(0, R - 1))];
      out = b.add(out, b.call("sum", {it[static_cast<std::size_t>(pick(0, P - 1))]}));
    }
    b.set_outputs({out});
    return b.finish();
  }
};

}  // namespace

TEST_CASE("reroll: random loops and near-repeats give the same values and gradients rolled") {
  int folded = 0, kept = 0;
  for (uint64_t seed = 0; seed < 80; ++seed) {
    RandomLoop gen(seed);
    const int P = gen.pick(1, 5), R = gen.pick(6, 24);
    const bool odd = gen.pick(0, 2) == 0;
    const Tape t = gen.make(P, R, odd);
    CAPTURE(seed);
    CAPTURE(to_string(t));
    const Tape r = reroll(t, {.min_repeats = 4, .min_ops = 0});
    CAPTURE(to_string(r));
    verify(r);
    (count_scans(r) > 0 ? folded : kept)++;
    const std::vector<Tensor> args{randn({3}, seed), randn({3}, seed + 100)};
    const std::vector<Tensor> want = play(t, args), got = play(r, args);
    CHECK(got[0].values() == want[0].values());
    Tape g_want;
    {
      const test::NoReroll keep;
      g_want = grad_tape(t);
    }
    check_all_close(play(grad_tape(r), args), play(g_want, args), 1e-10, "gradient");
    if (seed % 8 == 0) check_all_close(compile(r)(args), want, 1e-12, "compiled");
  }
  CHECK(folded > 40);  // most fold (a near-repeat may still leave a run of 4 alike)
  CHECK(kept > 0);
}

// ---- what must not fold ----

namespace {

// A 14-step loop where step 7 differs as `odd` says: either half is shorter than the
// 8 repeats a fold needs.
Tape near_repeat(const std::string& odd) {
  return trace([&](const Tensor& x0) {
    Tensor x = x0, prev = x0;
    for (int i = 0; i < 14; ++i) {
      Tensor next;
      if (i != 7 || odd == "none") next = sin(x) * 1.01 + pow(x, 2.0) * 0.001;
      else if (odd == "op") next = cos(x) * 1.01 + pow(x, 2.0) * 0.001;
      else if (odd == "attribute") next = sin(x) * 1.01 + pow(x, 3.0) * 0.001;
      else if (odd == "two back") next = sin(x) * 1.01 + pow(prev, 2.0) * 0.001;
      prev = x;
      x = next;
    }
    return sum(x);
  }, randn({4}, 1) * 0.5);
}

}  // namespace

TEST_CASE("reroll: near-repeats that differ in one iteration do not fold") {
  REQUIRE(count_scans(reroll(near_repeat("none"))) == 1);  // the control: all 14 alike
  for (const char* odd : {"op", "attribute", "two back"}) {
    CAPTURE(odd);
    const Tape t = near_repeat(odd);
    const Tape r = reroll(t);
    CHECK(count_scans(r) == 0);
    CHECK(to_string(r) == to_string(t));
  }
}

TEST_CASE("reroll: slices that move along another axis than the first, or backwards, stay unrolled") {
  const Tensor x = randn({3, 20}, 1);
  for (bool columns : {true, false}) {
    CAPTURE(columns);
    const Tape t = trace([columns](const Tensor& v) {
      Tensor h = zeros({3});
      for (int64_t k = 0; k < 16; ++k)
        h = tanh(h + (columns ? reshape(slice(v, 1, k, k + 1), {3}) : index(transpose(v), 15 - k)));
      return sum(h);
    }, x);
    const Tape r = reroll(t);
    CHECK(count_scans(r) == 0);
    CHECK(to_string(r) == to_string(t));
  }
}

TEST_CASE("reroll: a run shorter than the thresholds stays; the thresholds are options") {
  const Tape seven = trace([](const Tensor& v) { return test::sin_recurrence(v, 7); }, randn({4}, 1));
  CHECK(count_scans(reroll(seven)) == 0);
  CHECK(count_scans(reroll(seven, {.min_repeats = 3, .min_ops = 0})) == 1);
  const Tape forty = trace([](const Tensor& v) { return test::sin_recurrence(v, 40); }, randn({4}, 1));
  CHECK(count_scans(reroll(forty)) == 1);
  CHECK(count_scans(reroll(forty, {.min_repeats = 41})) == 0);
  CHECK(count_scans(reroll(forty, {.min_ops = 7 * 40 + 1})) == 0);
  CHECK(count_scans(reroll(forty, {.max_period = 6})) == 0);
}

TEST_CASE("reroll: straight-line code and loops whose iterations' values nobody reads stay as they are") {
  const Tape t = parse_tape("inp %1::f64[3]\n%2 = sin(%1)::f64[3]\n%3 = exp(%2)::f64[3]\n%4 = sum(%3)::f64[]\nout %4");
  CHECK(to_string(reroll(t)) == to_string(t));
  // Every iteration dead: nothing to give the scan; dead-code elimination drops the run.
  const Tape dead = trace([](const Tensor& v) {
    Tensor x = v;
    for (int i = 0; i < 30; ++i) x = sin(x) * 1.01 + square(x) * 0.001;
    return sum(v);
  }, randn({4}, 1));
  CHECK(count_scans(reroll(dead)) == 0);
}

// ---- the pipelines ----

TEST_CASE("reroll: grad_tape, vjp_tape and jvp_tape run it first; set_auto_reroll and REEL_REROLL turn it off") {
  const Tape t = trace([](const Tensor& v) { return test::sin_recurrence(v, 50); }, randn({4}, 1));
  CHECK(count_scans(grad_tape(t)) == 2);  // the forward scan and the reversed one
  CHECK(count_scans(vjp_tape(t)) == 2);
  CHECK(count_scans(jvp_tape(t)) >= 1);
  {
    const test::NoReroll off;
    CHECK(!auto_reroll());
    CHECK(count_scans(grad_tape(t)) == 0);
    CHECK(count_scans(jvp_tape(t)) == 0);
    CHECK(with_auto_reroll({"grad"}) == std::vector<std::string>{"grad"});
  }
  CHECK(with_auto_reroll({"grad"}) == std::vector<std::string>{"reroll", "vectorize", "grad"});
  // The pass by name, as reel-opt runs it.
  const auto names = pass_names();
  CHECK(std::find(names.begin(), names.end(), "reroll") != names.end());
  CHECK(count_scans(PassPipeline({"reroll", "cse"}).run(t)) == 1);
  const Tape plain = parse_tape("inp %1::f64[3]\n%2 = sin(%1)::f64[3]\nout %2");
  CHECK(to_string(PassPipeline({"reroll"}).run(plain)) == to_string(plain));  // nothing to fold: the same tape
  std::ostringstream dump;
  (void)PassPipeline({"reroll", "dce"}).print_after("reroll").print_to(dump).run(t);
  CHECK(dump.str().find("# *** Tape after reroll ***\ninp %1::f64[4]\n%2 = scan(%1") != std::string::npos);

  std::string warning;
  CHECK(detail::reroll_setting(nullptr, warning));
  CHECK(warning.empty());
  CHECK(detail::reroll_setting("1", warning));
  CHECK(!detail::reroll_setting("0", warning));
  CHECK(warning.empty());
  CHECK(detail::reroll_setting("off", warning));
  CHECK(warning.find("REEL_REROLL=\"off\" is not 0 or 1") != std::string::npos);
}

TEST_CASE("reroll: malformed tapes are errors naming reroll") {
  Tape t = parse_tape("inp %1::f64[3]\n%2 = sin(%1)::f64[3]\nout %2");
  t.ops[1].args = {5};
  CHECK_ERROR(reroll(t), "reroll: malformed tape", "%5");
}
