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

TEST_CASE("to_dot draws a tape: nodes, typed edges, outputs, a gradient's two parts, kernels and loop bodies") {
  const Tape g = grad_tape(parse_tape("inp %1::f64[3]\n%2 = sigmoid(%1)::f64[3]\n%3 = sum(%2)::f64[]\nout %3"));
  const std::string d = to_dot(g, {.gradient = true});
  CAPTURE(d);
  CHECK(d.rfind("digraph tape {", 0) == 0);
  CHECK(d.find("v1 [label=\"%1: input\\nf64[3]\", shape=ellipse") != std::string::npos);
  CHECK(d.find("v2 [label=\"%2 = sigmoid\", shape=box, style=\"rounded,filled\", fillcolor=\"#dbe8fb\"]") != std::string::npos);
  CHECK(d.find("v6 [label=\"%6 = mul\", shape=box, style=\"rounded,filled\", fillcolor=\"#fde3c8\"]") != std::string::npos);
  CHECK(d.find("v1 -> v2 [label=\"f64[3]\"]") != std::string::npos);
  CHECK(d.find("v3 -> outputs [label=\"0: f64[]\"]") != std::string::npos);
  CHECK(d.find("v6 -> outputs [label=\"1: f64[3]\"]") != std::string::npos);
  // One node per operation and one edge per argument and output.
  int nodes = 0, edges = 0;
  for (std::size_t at = d.find(" [label="); at != std::string::npos; at = d.find(" [label=", at + 1)) ++nodes;
  for (std::size_t at = d.find(" -> "); at != std::string::npos; at = d.find(" -> ", at + 1)) ++edges;
  int args = 0;
  for (Var v = 1; v <= g.size(); ++v) args += static_cast<int>(g.op(v).args.size());
  CHECK(edges == args + static_cast<int>(g.outputs.size()));
  CHECK(nodes == edges + g.size() + 1);  // (edge labels count as " [label=" too; + the outputs node)
  // Without the gradient option, no colours of parts.
  CHECK(to_dot(g).find("#fde3c8") == std::string::npos);
  // As compiled: the fused loop in a box.
  const std::string p = plan_dot(g);
  CHECK(p.find("subgraph cluster_k0 {") != std::string::npos);
  CHECK(p.find("label=\"step 0: loop f64 over [3]\"") != std::string::npos);
  // A loop's body in a dashed box next to it.
  const Tape loop = parse_tape(
      "inp %1::f64[2]\n%2 = scan(%1, body={inp %1::f64[2]; %2 = sin(%1)::f64[2]; out %2}, length=3, num_consts=0, num_carry=1)::f64[2]\nout %2");
  const std::string l = to_dot(loop);
  CAPTURE(l);
  CHECK(l.find("subgraph cluster_b1_ {") != std::string::npos);
  CHECK(l.find("b1_v2 [label=\"%2 = sin\"") != std::string::npos);
  CHECK(l.find("b1_outputs -> v2 [style=dotted") != std::string::npos);
  // Bad clusters.
  CHECK_ERROR(to_dot(g, {.clusters = {{"k", {7}}}}), "to_dot", "%7", "not on the tape");
  CHECK_ERROR(to_dot(g, {.clusters = {{"a", {2}}, {"b", {2}}}}), "to_dot", "%2 is in cluster 1 and cluster 2");
  // Quotes and backslashes in labels are escaped.
  CHECK(to_dot(g, {.title = "a \"b\" \\ c"}).find("label=\"a \\\"b\\\" \\\\ c\"") != std::string::npos);
}
