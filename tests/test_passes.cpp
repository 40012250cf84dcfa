// CSE, DCE, simplify, the pipeline, and what gradient tapes look like after them.
#include "test_util.hpp"

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
