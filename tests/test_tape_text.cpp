// The tape's text form: printing, parsing, round trips.
#include "test_util.hpp"

using namespace reel;

TEST_CASE("every kind of operation and attribute round-trips through text") {
  const std::string text =
      "inp %1::f32[2,3]\n"
      "inp %2::f64[]\n"
      "%3 = const [0.1, -2.5, 1e+30, 3]::f32[2,2]\n"
      "%4 = const 0.30000000000000004::f64[]\n"
      "%5 = pow(%1, p=2.5)::f32[2,3]\n"
      "%6 = sum(%5, axis=1)::f32[2]\n"
      "%7 = reshape(%6, shape=[2,1])::f32[2,1]\n"
      "%8 = broadcast_to(%7, shape=[2,3])::f32[2,3]\n"
      "%9 = sum_to(%8, shape=[1,3])::f32[1,3]\n"
      "%10 = transpose(%1)::f32[3,2]\n"
      "%11 = matmul(%1, %10)::f32[2,2]\n"
      "%12 = add(%11, %3)::f32[2,2]\n"
      "%13 = mul(%2, %4)::f64[]\n"
      "out %12, %13, %9";
  const Tape t = parse_tape(text);
  CHECK(to_string(t) == text);
  test::check_round_trip(t);
  const auto out = test::run_checked(t, {ones({2, 3}, DType::f32), scalar(2.0)});
  CHECK(out[0].values()[1] == doctest::Approx(3 - 2.5));
  CHECK(out[1].item() == doctest::Approx(0.6));
  CHECK(out[2].values() == std::vector<double>{6, 6, 6});
}

TEST_CASE("constants keep their exact values through text") {
  const Tensor c = randn({7}, 3), c32 = randn({7}, 3, DType::f32);
  const Tape t = trace([&](const Tensor& x) { return std::make_tuple(x + c, c32 * 1.0); }, zeros({7}));
  const Tape back = parse_tape(to_string(t));
  CHECK(back.op(2).value.values() == c.values());
  CHECK(back.op(4).value.values() == c32.values());
}

TEST_CASE("comments, blank lines and spacing are accepted") {
  const Tape t = parse_tape("\n# a comment\n  inp   %1 :: f64[ 2 ]  \n%2=exp( %1 )::f64[2]   # e^x\n\nout %2\n");
  CHECK(to_string(t) == "inp %1::f64[2]\n%2 = exp(%1)::f64[2]\nout %2");
}

TEST_CASE("a tape with no outputs and a gradient tape round-trip") {
  test::check_round_trip(parse_tape("inp %1::f64[1]\nout"));
  const Tape g = grad_tape(trace([](const Tensor& w, const Tensor& x) { return mean(tanh(matmul(w, x))); },
                                 randn({3, 4}, 1), randn({4}, 2)));
  test::check_round_trip(g);
}
