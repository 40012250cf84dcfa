// CSE, DCE, simplify, the pipeline, and what gradient tapes look like after them.
#include "test_util.hpp"

#include "reel/real.hpp"

#include <sstream>
#include <utility>

using namespace reel;

TEST_CASE("CSE and DCE shrink a tape by the expected count and keep its results") {
  auto f = [](const Tensor& x) {
    const Tensor unused = cos(x) * 2.0;  // dead: three operations (cos, const, mul)
    (void)unused;
    return sum(exp(x) * exp(x));  // exp(x) twice: one duplicate
  };
  const Tensor x = tensor({0.1, 0.2, 0.3});
  const Tape t = trace(f, x);
  CHECK(t.size() == 8);  // inp, cos, const, mul, exp, exp, mul, sum
  const Tape c = cse(t);
  CHECK(c.size() == 7);
  const Tape d = dce(c);
  CHECK(d.size() == 4);  // inp, exp, mul, sum
  CHECK(to_string(d) ==
        "inp %1::f64[3]\n"
        "%2 = exp(%1)::f64[3]\n"
        "%3 = mul(%2, %2)::f64[3]\n"
        "%4 = sum(%3)::f64[]\n"
        "out %4");
  const Tensor y = tensor({1, -1, 0.5});
  CHECK(test::run_checked(d, {y})[0].item() == test::run_checked(t, {y})[0].item());
}

TEST_CASE("a pipeline's cleanup moves the operations of the tapes it made: the same tapes as the passes one by one") {
  // After its first pass a pipeline owns its tape, and simplify, cse and dce consume it
  // (their operations moved, renamed in place); the passes called on a tape copy them.
  // A scalar chain with repeated reads (merged), multiplications by one (simplified),
  // dead operations, a guard and constants.
  auto f = [](const std::vector<Real>& x) {
    Real s = x[0];
    for (int i = 0; i < 40; ++i) s = sin(s * x[i % 5]) * 1.0 + x[i % 5] * x[(i + 1) % 5];
    (void)exp(s);  // dead
    if (s > -100.0) s = s * 2.0;  // a guard
    return s + std::max(x[1], x[2]);
  };
  const Tape t = trace(f, std::vector<double>{0.1, 0.2, 0.3, 0.4, 0.5});
  const Tape one_by_one = dce(cse(simplify(dce(cse(simplify(t))))));
  const Tape piped = PassPipeline({"simplify", "cse", "dce", "simplify", "cse", "dce"}).run(t);
  CHECK(to_string(piped) == to_string(one_by_one));
  CHECK(piped.size() < t.size());
  const Tape g = grad_tape(t);  // (its cleanup consumes the reverse pass's tape)
  const Tape g_one_by_one = dce(cse(simplify(reverse_mode(dce(cse(simplify(t)))))));
  CHECK(to_string(g) == to_string(g_one_by_one));
  const Tensor y = tensor({0.3, -0.2, 0.7, 0.1, 0.9});
  test::check_close(test::run_checked(g, {y})[1], test::run_checked(reverse_mode(t), {y})[1], 1e-12, 1e-12,
                    "cleaned gradient vs raw gradient");
}

TEST_CASE("CSE merges equal constants and commuted add/mul, and DCE keeps unused inputs") {
  const Tape t = parse_tape(R"(
    inp %1::f64[2]
    inp %2::f64[2]      # unused, but part of the signature
    %3 = const 2::f64[]
    %4 = const 2::f64[]
    %5 = mul(%1, %3)::f64[2]
    %6 = mul(%4, %1)::f64[2]
    %7 = add(%5, %6)::f64[2]
    out %7
  )");
  const Tape s = dce(cse(t));
  CHECK(to_string(s) ==
        "inp %1::f64[2]\n"
        "inp %2::f64[2]\n"
        "%3 = const 2::f64[]\n"
        "%4 = mul(%1, %3)::f64[2]\n"
        "%5 = add(%4, %4)::f64[2]\n"
        "out %5");
  const std::vector<Tensor> args{tensor({1, 2}), tensor({0, 0})};
  CHECK(test::run_checked(s, args)[0].values() == test::run_checked(t, args)[0].values());
}

TEST_CASE("CSE merges reads of an element at the same start and keeps reads at others") {
  // A scalar trace reads each element of an input by a slice: they differ only in
  // their attributes (start, stop).
  const Tape t = parse_tape(R"(
    inp %1::f64[3]
    %2 = slice(%1, axis=0, start=0, stop=1)::f64[1]
    %3 = slice(%1, axis=0, start=1, stop=2)::f64[1]
    %4 = slice(%1, axis=0, start=0, stop=1)::f64[1]
    %5 = slice(%1, axis=0, start=2, stop=3)::f64[1]
    %6 = mul(%2, %3)::f64[1]
    %7 = add(%6, %4)::f64[1]
    %8 = add(%7, %5)::f64[1]
    out %8
  )");
  const Tape s = dce(cse(t));
  CHECK(s.size() == 7);  // %4 merged into %2
  const std::vector<Tensor> args{tensor({2, 3, 5})};
  CHECK(test::run_checked(s, args)[0].values() == std::vector<double>{13});
  CHECK(test::run_checked(t, args)[0].values() == std::vector<double>{13});
}

TEST_CASE("simplify removes multiplications by one and additions of negative zero") {
  const Tape t = parse_tape(
      "inp %1::f64[3]\n"
      "%2 = const 1::f64[]\n"
      "%3 = broadcast_to(%2, shape=[3])::f64[3]\n"
      "%4 = mul(%3, %1)::f64[3]\n"
      "%5 = const [-0, -0, -0]::f64[3]\n"
      "%6 = add(%4, %5)::f64[3]\n"
      "%7 = neg(%6)::f64[3]\n"
      "%8 = neg(%7)::f64[3]\n"
      "%9 = mul(%2, %2)::f64[]\n"
      "%10 = mul(%8, %9)::f64[3]\n"
      "out %10");
  const Tape s = dce(simplify(t));
  CHECK(to_string(s) == "inp %1::f64[3]\nout %1");
  // x + (+0) is kept: for x = -0 it is +0, not x.
  const Tape z = parse_tape("inp %1::f64[2]\n%2 = const 0::f64[]\n%3 = add(%1, %2)::f64[2]\nout %3");
  CHECK(dce(simplify(z)).size() == 3);
  const auto out = test::run_checked(z, {tensor({-0.0, 1.0})});
  CHECK(!std::signbit(out[0].values()[0]));
  // A multiplication by ones that broadcasts is kept: it changes the shape.
  const Tape b = parse_tape(
      "inp %1::f64[]\n%2 = const [1, 1]::f64[2]\n%3 = mul(%1, %2)::f64[2]\nout %3");
  CHECK(dce(simplify(b)).size() == 3);
}

TEST_CASE("gradient tapes come out simplified") {
  const Tape g = grad_tape(trace([](const Tensor& x) { return sum(sigmoid(x)); }, tensor({1, 2})));
  CHECK(to_string(g) ==
        "inp %1::f64[2]\n"
        "%2 = sigmoid(%1)::f64[2]\n"
        "%3 = sum(%2)::f64[]\n"
        "%4 = const 1::f64[]\n"
        "%5 = sub(%4, %2)::f64[2]\n"
        "%6 = mul(%2, %5)::f64[2]\n"
        "out %3, %6");
  // No duplicates and nothing dead: the passes change nothing more.
  CHECK(to_string(dce(cse(simplify(g)))) == to_string(g));
  // Branches that need no gradient get no adjoint code: exp of a constant is not
  // differentiated, and x's adjoint is just that constant's exp.
  const Tape h = grad_tape(parse_tape(
      "inp %1::f64[3]\n%2 = const [1, 2, 3]::f64[3]\n%3 = exp(%2)::f64[3]\n"
      "%4 = mul(%1, %3)::f64[3]\n%5 = sum(%4)::f64[]\nout %5"));
  CHECK(to_string(h) ==
        "inp %1::f64[3]\n%2 = const [1, 2, 3]::f64[3]\n%3 = exp(%2)::f64[3]\n"
        "%4 = mul(%1, %3)::f64[3]\n%5 = sum(%4)::f64[]\nout %5, %3");
}

TEST_CASE("the pass pipeline runs named passes in order") {
  const Tape t = trace([](const Tensor& x) { return sum(x * x); }, tensor({1, 2}));
  const Tape g1 = PassPipeline({"grad", "simplify", "cse", "dce"}).run(t);
  CHECK(to_string(g1) == to_string(grad_tape(t)));
  CHECK(to_string(PassPipeline({}).run(t)) == to_string(t));
  const auto out = test::run_checked(g1, {tensor({1, 2})});
  CHECK(out[1].values() == std::vector<double>{2, 4});
  const auto names = pass_names();
  CHECK(std::find(names.begin(), names.end(), "cse") != names.end());
}

namespace {
// The dumps of a pipeline's print-after output: (pass name, tape text) in order.
std::vector<std::pair<std::string, std::string>> dumps_of(const std::string& text) {
  const std::string head = "# *** Tape after ", tail = " ***\n";
  std::vector<std::pair<std::string, std::string>> out;
  for (std::size_t at = text.find(head); at != std::string::npos;) {
    const std::size_t name_end = text.find(tail, at);
    const std::size_t body = name_end + tail.size(), next = text.find(head, body);
    std::string tape = text.substr(body, (next == std::string::npos ? text.size() : next) - body);
    out.emplace_back(text.substr(at + head.size(), name_end - at - head.size()), tape.substr(0, tape.size() - 1));
    at = next;
  }
  return out;
}
}  // namespace

TEST_CASE("print_after_all dumps the tape after each pass, under a header naming it, as the passes made it") {
  const Tape t = trace([](const Tensor& x) { return sum(sin(x) * x); }, tensor({1, 2}));
  std::ostringstream out;
  const Tape g = PassPipeline({"grad", "simplify", "cse", "dce"}).print_after_all().print_to(out).run(t);
  const auto dumps = dumps_of(out.str());
  REQUIRE(dumps.size() == 4);
  const Tape after_grad = reverse_mode(t), after_simplify = simplify(after_grad), after_cse = cse(after_simplify);
  CHECK(dumps[0] == std::pair<std::string, std::string>{"grad", to_string(after_grad)});
  CHECK(dumps[1] == std::pair<std::string, std::string>{"simplify", to_string(after_simplify)});
  CHECK(dumps[2] == std::pair<std::string, std::string>{"cse", to_string(after_cse)});
  CHECK(dumps[3] == std::pair<std::string, std::string>{"dce", to_string(g)});
  // The header is a comment of the text form: the whole output parses, as the last tape.
  CHECK(to_string(parse_tape(out.str().substr(out.str().rfind("# *** Tape after dce")))) == to_string(g));
}

TEST_CASE("print_after prints after the passes named only, each time one runs, and nothing once turned off") {
  const Tape t = trace([](const Tensor& x) { return sum(exp(x)); }, tensor({1, 2}));
  std::ostringstream out;
  PassPipeline({"grad", "simplify", "cse", "simplify"}).print_after("simplify").print_to(out).run(t);
  const auto dumps = dumps_of(out.str());
  REQUIRE(dumps.size() == 2);
  CHECK(dumps[0].first == "simplify");
  CHECK(dumps[1].first == "simplify");
  CHECK(dumps[1].second == to_string(simplify(cse(simplify(reverse_mode(t))))));

  std::ostringstream quiet;
  PassPipeline({"grad", "dce"}).print_after_all().print_after_all(false).print_to(quiet).run(t);
  CHECK(quiet.str().empty());
  CHECK_ERROR(PassPipeline({"cse"}).print_after("nope"), "PassPipeline::print_after", "expected a pass name", "cse, dce",
              "got 'nope'");
}

TEST_CASE("REEL_PRINT_AFTER_ALL: 1 is on; unset, empty and 0 are off; other values are off with a warning") {
  std::string warning = "stale";
  CHECK(detail::print_after_all_setting("1", warning));
  CHECK(warning.empty());
  for (const char* off : {static_cast<const char*>(nullptr), "", "0"}) {
    CHECK_FALSE(detail::print_after_all_setting(off, warning));
    CHECK(warning.empty());
  }
  for (const char* bad : {"yes", "true", "2", " 1", "1 ", "01"}) {
    CAPTURE(bad);
    CHECK_FALSE(detail::print_after_all_setting(bad, warning));
    CHECK(warning == fmt::format("REEL_PRINT_AFTER_ALL=\"{}\" is not 0 or 1; the tape is not printed after passes", bad));
  }
}

// How many calls of `name` a tape makes.
static int calls_of(const Tape& t, const std::string& name) {
  int n = 0;
  for (Var v = 1; v <= t.size(); ++v)
    if (t.op(v).kind == OpKind::call && t.op(v).prim->name == name) ++n;
  return n;
}

TEST_CASE("the gradients of slices of one tensor are placed in one step, not added as zeros per slice") {
  const test::NoReroll unrolled;  // (the unrolled trace is what this is about)
  // Each row of q read on its own (gmm's Q_k from q_k): the reverse pass gets one unslice
  // per row, which become one `place` (here every row: then the gradient itself).
  const Tensor q = randn({6, 3}, 1), w = randn({3}, 2);
  auto rows = [&](const std::vector<Tensor>& a) {
    Tensor s = sum(exp(index(a[0], 0)) * w);
    for (int64_t j = 1; j < 6; ++j) s = s + sum(exp(index(a[0], j)) * w * static_cast<double>(j));
    return s;
  };
  const Tape g = grad_tape(test::trace_list(rows, {q}));
  CHECK(calls_of(g, "unslice") == 0);
  CHECK(calls_of(g, "add") <= 5);  // (the forward sum's; no [6,3] additions)
  test::check_gradient(rows, {q}, "rows of q");
  // Rows 0 and 2 (by a step of 2), 1 and 4: disjoint, so still one placement (zeros where none goes).
  auto some = [&](const std::vector<Tensor>& a) {
    return sum(square(slice(a[0], 0, 0, 3, 2))) + sum(sin(slice(a[0], 0, 1, 2))) + sum(slice(a[0], 4, 5) * 3.0);
  };
  const Tape h = grad_tape(test::trace_list(some, {q}));
  CHECK(calls_of(h, "place") == 1);
  CHECK(calls_of(h, "unslice") == 0);
  test::check_gradient(some, {q}, "rows 0, 1, 4 of q");
  // The same slice read many times (a traced loop): the terms that cannot be combined
  // are added as they come, a few at a time, not all kept.
  auto again = [&](const std::vector<Tensor>& a) {
    Tensor s = sum(sin(slice(a[0], 1, 4)));
    for (int i = 1; i < 60; ++i) s = s + sum(sin(slice(a[0], 1, 4)) * static_cast<double>(i));
    return s;
  };
  const Tape r = grad_tape(test::trace_list(again, {q}));
  CHECK(calls_of(r, "place") == 0);
  test::check_gradient(again, {q}, "one slice read 60 times", 1e-6, 1e-6);
  // Overlapping slices are not placed together: their gradients add.
  auto overlap = [&](const std::vector<Tensor>& a) {
    return sum(square(slice(a[0], 0, 3))) + sum(sin(slice(a[0], 2, 5)));
  };
  const Tape o = grad_tape(test::trace_list(overlap, {q}));
  CHECK(calls_of(o, "place") == 0);
  CHECK(calls_of(o, "unslice") == 2);
  test::check_gradient(overlap, {q}, "overlapping rows of q");
}

namespace {
// s (t simplified) gives t's outputs bit for bit, interpreted and compiled.
void check_runs_as(const Tape& t, const Tape& s, const std::vector<Tensor>& args) {
  const std::vector<Tensor> a = play(t, args), b = test::run_checked(s, args);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) test::check_same_bits(a[i], b[i], "output " + std::to_string(i));
}
}  // namespace

TEST_CASE("simplify: a stack of a tensor's slices is the tensor, a reshape of a reshape one reshape") {
  const Tape t = parse_tape(
      "inp %1::f64[3,2]\n"
      "%2 = slice(%1, axis=0, start=0, stop=1, step=1)::f64[1,2]\n"
      "%3 = slice(%1, axis=0, start=1, stop=3, step=1)::f64[2,2]\n"
      "%4 = reshape(%2, shape=[2])::f64[2]\n"
      "%5 = reshape(%4, shape=[1,2])::f64[1,2]\n"
      "%6 = concat(%5, %3, axis=0)::f64[3,2]\n"
      "%7 = unslice(%6, axis=1, start=0, step=1, size=2)::f64[3,2]\n"
      "%8 = reshape(%7, shape=[6])::f64[6]\n"
      "%9 = reshape(%8, shape=[2,3])::f64[2,3]\n"
      "%10 = neg(%9)::f64[2,3]\n"
      "%11 = sum(%10, axes=[0])::f64[3]\n"
      "out %7, %9, %11");
  const Tape s = dce(simplify(t));
  CHECK(to_string(s) ==
        "inp %1::f64[3,2]\n"
        "%2 = reshape(%1, shape=[2,3])::f64[2,3]\n"
        "%3 = neg(%2)::f64[2,3]\n"
        "%4 = sum(%3, axes=[0])::f64[3]\n"
        "out %1, %2, %4");
  // (A sum of negations stays one: for zeros sum(-x) is +0, and -sum(x) would be -0.)
  const Tensor z = zeros({3, 2});
  CHECK(!std::signbit(play(s, {z})[2].values()[0]));
  check_runs_as(t, s, {randn({3, 2}, 3)});
  // Slices put back elsewhere, or not covering the tensor, stay.
  const Tape moved = parse_tape(
      "inp %1::f64[2,2]\n"
      "%2 = slice(%1, axis=0, start=0, stop=1, step=1)::f64[1,2]\n"
      "%3 = slice(%1, axis=0, start=1, stop=2, step=1)::f64[1,2]\n"
      "%4 = concat(%3, %2, axis=0)::f64[2,2]\n"
      "%5 = unslice(%2, axis=0, start=0, step=1, size=2)::f64[2,2]\n"
      "out %4, %5");
  CHECK(to_string(dce(simplify(moved))) == to_string(moved));
}

// The gradient of a row of slices that all read one number per row (a loop split in
// two): one value, broadcast to each piece and placed side by side, is its broadcast.
TEST_CASE("simplify: pieces of one broadcast value placed side by side are its broadcast") {
  const Tape t = parse_tape(
      "inp %1::f64[4]\n"
      "%2 = neg(%1)::f64[4]\n"
      "%3 = reshape(%2, shape=[4,1])::f64[4,1]\n"
      "%4 = neg(%1)::f64[4]\n"  // (the same value computed twice, as the reverse pass does)
      "%5 = reshape(%4, shape=[4,1])::f64[4,1]\n"
      "%6 = broadcast_to(%5, shape=[4,3])::f64[4,3]\n"
      "%7 = place(%3, %6, axis=1, starts=[3,0], step=1, size=4)::f64[4,4]\n"
      "out %7");
  const Tape s = dce(simplify(t));
  CHECK(to_string(s) ==
        "inp %1::f64[4]\n"
        "%2 = neg(%1)::f64[4]\n"
        "%3 = reshape(%2, shape=[4,1])::f64[4,1]\n"
        "%4 = broadcast_to(%3, shape=[4,4])::f64[4,4]\n"
        "out %4");
  check_runs_as(t, s, {randn({4}, 5)});
  // Pieces with no elements (found by review: a division by a zero stride).
  const Tape none = parse_tape("inp %1::f64[2,0]\n%2 = concat(%1, %1, axis=0)::f64[4,0]\nout %2");
  CHECK(play(simplify(none), {zeros({2, 0})}).at(0).shape() == Shape{4, 0});
  // Rows of one row placed one under the other are its broadcast too.
  const Tape rows = parse_tape(
      "inp %1::f64[1,3]\n%2 = broadcast_to(%1, shape=[2,3])::f64[2,3]\n"
      "%3 = place(%1, %2, axis=0, starts=[0,1], step=1, size=3)::f64[3,3]\nout %3");
  CHECK(to_string(dce(simplify(rows))) == "inp %1::f64[1,3]\n%2 = broadcast_to(%1, shape=[3,3])::f64[3,3]\nout %2");
  check_runs_as(rows, dce(simplify(rows)), {randn({1, 3}, 6)});
  // Pieces of different values, or of a value that varies along the placement's axis
  // (slices of it, or it twice), stay.
  for (const char* kept : {
           "inp %1::f64[4,1]\ninp %2::f64[4,1]\n"
           "%3 = place(%1, %2, axis=1, starts=[0,1], step=1, size=2)::f64[4,2]\nout %3",
           "inp %1::f64[2]\n%2 = place(%1, %1, axis=0, starts=[0,2], step=1, size=4)::f64[4]\nout %2",
           "inp %1::f64[4,1]\n%2 = slice(%1, axis=0, start=0, stop=2, step=1)::f64[2,1]\n"
           "%3 = slice(%1, axis=0, start=2, stop=4, step=1)::f64[2,1]\n"
           "%4 = place(%3, %2, axis=0, starts=[0,2], step=1, size=4)::f64[4,1]\nout %4"}) {
    const Tape k = parse_tape(kept);
    CHECK_MESSAGE(to_string(dce(simplify(k))).find("place(") != std::string::npos, kept);
  }
}

TEST_CASE("simplify folds a small view or slice of a constant into a constant, not a large one") {
  const Tape t = parse_tape(
      "%1 = const [1, 0, 0, 1, 2, 3]::f64[2,3]\n"
      "%2 = slice(%1, axis=1, start=1, stop=3, step=1)::f64[2,2]\n"
      "%3 = reshape(%2, shape=[4])::f64[4]\n"
      "%4 = permute(%1, perm=[1,0])::f64[3,2]\n"
      "out %3, %4");
  const Tape s = dce(simplify(t));
  CHECK(to_string(s) ==
        "%1 = const [0, 0, 2, 3]::f64[4]\n"
        "%2 = const [1, 1, 0, 2, 0, 3]::f64[3,2]\n"
        "out %1, %2");
  check_runs_as(t, s, {});
  // Past 64 elements a slice of a constant stays a slice (a new constant would be a copy).
  TapeBuilder big;
  const Var c = big.constant(cast(arange(100), DType::f64));
  big.set_outputs({big.call("slice", {c}, {{"axis", int64_t{0}}, {"start", int64_t{10}}, {"stop", int64_t{90}}, {"step", int64_t{1}}})});
  const Tape bs = dce(simplify(big.finish()));
  CHECK(bs.size() == 2);
  CHECK(bs.op(2).kind == OpKind::call);
}

TEST_CASE("place: several slices' gradients in one step; checked arguments, gradients, compiled") {
  const Tensor a = randn({2, 2, 3}, 4), c = randn({2, 1, 3}, 5);
  const Attrs attrs{{"axis", int64_t{1}}, {"starts", Shape{0, 3}}, {"step", int64_t{2}}, {"size", int64_t{5}}};
  const Tensor y = apply(primitive("place"), std::vector<Tensor>{a, c}, attrs);
  REQUIRE(y.shape() == Shape{2, 5, 3});
  const auto ya = y.values(), av = a.values(), cv = c.values();
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t k = 0; k < 3; ++k) {
      CHECK(ya[static_cast<std::size_t>((i * 5 + 0) * 3 + k)] == av[static_cast<std::size_t>((i * 2 + 0) * 3 + k)]);
      CHECK(ya[static_cast<std::size_t>((i * 5 + 2) * 3 + k)] == av[static_cast<std::size_t>((i * 2 + 1) * 3 + k)]);
      CHECK(ya[static_cast<std::size_t>((i * 5 + 3) * 3 + k)] == cv[static_cast<std::size_t>(i * 3 + k)]);
      for (int64_t r : {1, 4}) CHECK(ya[static_cast<std::size_t>((i * 5 + r) * 3 + k)] == 0.0);
    }
  // Reverse and forward mode, interpreted and compiled.
  const Tensor w = randn({2, 5, 3}, 6);
  test::check_gradient([&](const std::vector<Tensor>& v) { return sum(apply(primitive("place"), std::vector<Tensor>{v[0], v[1]}, attrs) * w); },
                       {a, c}, "place");
  const Tape f = parse_tape(
      "inp %1::f64[2,2,3]\ninp %2::f64[2,1,3]\n"
      "%3 = place(%1, %2, axis=1, starts=[0,3], step=2, size=5)::f64[2,5,3]\n%4 = sin(%3)::f64[2,5,3]\nout %4");
  test::run_checked(f, {a, c});
  const Tape jf = jvp_tape(f);
  test::run_checked(jf, {a, c, randn({2, 2, 3}, 7), randn({2, 1, 3}, 8)});
  // Bad arguments: each a reel::Error naming place.
  auto call = [](std::vector<Tensor> args, Shape starts, int64_t step = 1, int64_t size = 4) {
    return apply(primitive("place"), args, {{"axis", int64_t{0}}, {"starts", starts}, {"step", step}, {"size", size}});
  };
  CHECK_ERROR(call({zeros({2}), zeros({2})}, {0, 1}), "place", "argument 2 goes to position 1", "earlier argument");
  CHECK_ERROR(call({zeros({2})}, {0, 1}), "place", "expected 1 starts", "got 2");
  CHECK_ERROR(call({zeros({2})}, {3}), "place", "do not fit in 4");
  CHECK_ERROR(call({zeros({2})}, {-1}), "place", "do not fit in 4");
  CHECK_ERROR(call({zeros({2})}, {0}, 0), "place", "step >= 1", "got 0");
  CHECK_ERROR(call({zeros({2, 2}), zeros({2, 3})}, {0, 2}), "place", "argument 2 is f64[2,3]");
  CHECK_ERROR(call({zeros({3}), zeros({3})}, {0, 1}, 1, 5), "place", "positions along axis 0 exceed its 5");
  CHECK_ERROR(parse_tape("inp %1::f64[2]\n%2 = place(%1, axis=0, starts=[0], step=1, size=-1)::f64[0]\nout %2"), "place",
              "size >= 0");
}

TEST_CASE("place from a user's adjoint rule with a negative axis") {
  // combine_terms normalises the axis as the primitives do (a review found -1 read as an index).
  Primitive p{.name = "test_rows_neg_axis", .arity = 1};
  p.infer = [](std::span<const VarType> in, const Attrs&) { return VarType{in[0].dtype, {in[0].shape[0], 1}}; };
  p.eager = [](std::span<const Tensor> in, const Attrs&) { return slice(in[0], 1, 0, 1); };
  p.adjoint = [](TapeBuilder& b, const AdjointArgs& a) {
    return std::vector<Var>{b.call("unslice", {a.dout}, {{"axis", int64_t{-1}}, {"start", int64_t{0}}, {"step", int64_t{1}},
                                                         {"size", b.type(a.args[0]).shape[1]}})};
  };
  register_primitive(p);
  const Tensor x = randn({4, 3}, 9);
  auto f = [](const std::vector<Tensor>& a) {
    return sum(reel::apply(primitive("test_rows_neg_axis"), std::vector<Tensor>{a[0]})) * 2.0 + sum(slice(a[0], 1, 1, 3) * 3.0);
  };
  const auto g = test::check_gradient(f, {x}, "a user's unslice with axis -1");
  CHECK(g[0].values()[0] == doctest::Approx(2.0));
  CHECK(g[0].values()[1] == doctest::Approx(3.0));
}
