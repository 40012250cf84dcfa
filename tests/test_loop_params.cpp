// The typed loop layouts (reel/ir/loop_params.hpp) and the body-tape toolkit
// (reel/ir/body_tape.hpp): attributes read and written back unchanged (text and order),
// the operand groups, the checkpoint policy's enum, the loop form from the primitive;
// the dependence floods, the carries' fixed point and the vjp split on small bodies.
#include <doctest/doctest.h>

#include "reel/ir/body_tape.hpp"
#include "reel/ir/loop_params.hpp"
#include "test_util.hpp"

using namespace reel;

namespace {

// A scan body: [counter,] one const c, carries a (f64) and n (i64), one slice x ->
// a + c * x, n, a * x (one y).
std::shared_ptr<const Tape> scan_body(bool counter) {
  TapeBuilder b;
  if (counter) (void)b.input({DType::i64, {}});
  const Var c = b.input({DType::f64, {}}), a = b.input({DType::f64, {}}), n = b.input({DType::i64, {}});
  const Var x = b.input({DType::f64, {}});
  b.set_outputs({b.add(a, b.mul(c, x)), n, b.mul(a, x)});
  return std::make_shared<const Tape>(b.finish());
}

}  // namespace

TEST_CASE("loop params: a scan's attributes read and written back unchanged, its operand groups named") {
  Attrs a{{"body", TapeRef{scan_body(true)}}, {"length", int64_t{9}}, {"num_consts", int64_t{1}},
          {"num_carry", int64_t{2}}, {"index", int64_t{4}}, {"checkpoint", std::string("sqrt")}};
  const ScanParams s = ScanParams::read(a, 4);
  CHECK(s.C == 1);
  CHECK(s.K == 2);
  CHECK(s.X == 1);
  CHECK(s.Y == 1);
  CHECK(s.has_index);
  CHECK(s.index0 == 4);
  CHECK(s.policy == CheckpointPolicy::sqrt);
  CHECK(s.segment == 3);
  CHECK(s.carries().first == 1);
  CHECK(s.xs().first == 3);
  CHECK(s.first_x() == 4);  // (behind the counter in the body's inputs)
  CHECK(s.attrs() == a);
  CHECK(s.attrs(a) == a);
  // A derived scan keeps the call's order; reverse joins at the end, and stays (false)
  // where the call had it.
  ScanParams flipped = s;
  flipped.reverse = true;
  const Attrs f = flipped.attrs(a);
  CHECK(f.items().back().first == "reverse");
  flipped.reverse = false;
  CHECK(flipped.attrs(f).has("reverse"));
  CHECK_FALSE(flipped.attrs().has("reverse"));
  CHECK_THROWS_WITH_AS(ScanParams::read(a, 2), "scan: num_consts 1 and num_carry 2 do not fit the 2 arguments",
                       Error);
}

TEST_CASE("loop params: the checkpoint policy is an enum with the tape text's names") {
  for (CheckpointPolicy p :
       {CheckpointPolicy::store, CheckpointPolicy::every, CheckpointPolicy::sqrt, CheckpointPolicy::binomial})
    CHECK(policy_named(policy_name(p)) == p);
  CHECK(policy_name(CheckpointPolicy::store).empty());
  CHECK(policy_name(CheckpointPolicy::binomial) == "binomial");
  CHECK_THROWS_WITH_AS(policy_named("often"),
                       "scan: expected checkpoint \"\", \"every\", \"sqrt\" or \"binomial\", got \"often\"", Error);
}

TEST_CASE("loop params: while_loop's attributes, max_trips checked in one place") {
  TapeBuilder c, b;
  const Var c0 = c.input({DType::f64, {}}), c1 = c.input({DType::f64, {}});
  c.set_outputs({c.sub(c0, c1)});
  const Var b0 = b.input({DType::f64, {}}), b1 = b.input({DType::f64, {}});
  b.set_outputs({b.add(b0, b1)});
  const Attrs a{{"cond", tape_ref(c.finish())}, {"body", tape_ref(b.finish())}, {"num_consts", int64_t{1}},
                {"max_trips", int64_t{10}}, {"trips", int64_t{3}}};
  const WhileParams w = WhileParams::read(a, 2);
  CHECK(w.C == 1);
  CHECK(w.K == 1);
  CHECK(w.carries().first == 1);
  CHECK(w.trips == 3);
  CHECK(w.max_trips == 10);
  CHECK(w.attrs(a) == a);
  CHECK_THROWS_WITH_AS(checked_max_trips(-2), "while_loop: expected max_trips >= 0, got -2", Error);
  CHECK_THROWS_WITH_AS(checked_max_trips(-2, true),
                       "while_loop: expected max_trips >= 0 (or none, for no limit), got -2", Error);
  const VarType f64{DType::f64, {}}, i64{DType::i64, {}};
  CHECK_THROWS_WITH_AS(check_carries("while_loop", std::vector<VarType>{f64}, std::vector<VarType>{i64}),
                       "while_loop: carry 1 enters the body as f64[] and leaves it as i64[]", Error);
}

TEST_CASE("loop params: the loop form comes from the primitive") {
  CHECK(loop_form(primitive("scan")) == LoopForm::scan);
  CHECK(loop_form(primitive("while_loop")) == LoopForm::while_loop);
  CHECK(loop_form(primitive("call")) == LoopForm::call);
  CHECK(loop_form(primitive("checkpoint")) == LoopForm::call);
  CHECK(loop_form(primitive("add")) == LoopForm::none);
  CHECK(loop_form(primitive("revolve")) == LoopForm::none);  // (a runtime driver, not a loop step)
  const Attrs call{{"body", TapeRef{scan_body(false)}}};
  CHECK(CallParams::read(call).attrs() == call);
}

TEST_CASE("body tape: dependences forward and backward, the carries' fixed point, copies") {
  const std::shared_ptr<const Tape> body = scan_body(false);  // c, a, n, x -> a + c x, n, a x
  CHECK(depends_on(*body, {true, false, false, false}) == std::vector<bool>{true, false, false});
  CHECK(reaches(*body, {false, false, true}) == std::vector<bool>{false, true, false, true});
  // Forward: x batched makes carry a batched (its next value reads x), not n.
  std::vector<bool> in{false, false, false, true};
  carries_fixed_point(*body, Flow::forward, in, 1, 2);
  CHECK(in == std::vector<bool>{false, true, false, true});
  // Backward: the y seeded seeds carry a (it reaches y); `may` can keep one out.
  std::vector<bool> out{false, false, true};
  carries_fixed_point(*body, Flow::backward, out, 1, 2);
  CHECK(out == std::vector<bool>{true, false, true});
  std::vector<bool> none{false, false, true};
  carries_fixed_point(*body, Flow::backward, none, 1, 2, [](std::size_t) { return false; });
  CHECK(none == std::vector<bool>{false, false, true});
  // copy_ops: the body again, through a map of its inputs.
  TapeBuilder b;
  std::vector<Var> map = var_map(*body);
  copy_ops(b, *body, map, [](Var) { return true; });
  std::vector<Var> outs;
  for (Var o : body->outputs) outs.push_back(map[o]);
  b.set_outputs(outs);
  CHECK(to_string(b.finish()) == to_string(*body));
  const Flags flags(std::vector<bool>{true, false});
  const std::span<const bool> span = flags;
  CHECK(span.size() == 2);
  CHECK(span[0]);
  CHECK_FALSE(span[1]);
}

TEST_CASE("body tape: split_parts sorts a tape's variables and finds what crosses into the last part") {
  TapeBuilder b;
  const Var x = b.input({DType::f64, {}}), seed = b.input({DType::f64, {}});
  const Var s = b.call("sin", {x}), g = b.mul(seed, b.call("cos", {x}));
  b.set_outputs({s, g});
  const Tape t = b.finish();
  const TapeParts p = split_parts(t, {0, 1}, 1, 1);
  CHECK(p.part[static_cast<std::size_t>(s)] == 0);
  CHECK(p.part[static_cast<std::size_t>(g)] == 1);
  CHECK(p.read[static_cast<std::size_t>(t.op(g).args[1])]);  // cos(x), read by the backward part
  CHECK_FALSE(p.read[static_cast<std::size_t>(s)]);
}
