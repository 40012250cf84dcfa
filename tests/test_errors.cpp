// Bad input gets a reel::Error whose message names the operation, what it expected
// and what it got.
#include "test_util.hpp"

using namespace reel;

TEST_CASE("shape mismatches throw at trace time, naming the operation and both shapes") {
  CHECK_ERROR(trace([](const Tensor& a, const Tensor& b) { return sum(matmul(a, b)); },
                    zeros({2, 3}), zeros({2, 3})),
              "matmul", "[2,3] and [2,3]");
  CHECK_ERROR(trace([](const Tensor& a, const Tensor& b) { return sum(a + b); }, zeros({3, 4}),
                    zeros({5})),
              "add", "[3,4] and [5]", "broadcast");
  CHECK_ERROR(zeros({3}) * zeros({2}), "mul", "[3] and [2]");
  CHECK_ERROR(zeros({3}) + zeros({3}, DType::f32), "add", "f64[3]", "f32[3]");
  CHECK_ERROR(reshape(zeros({3, 4}), {5}), "reshape", "f64[3,4]", "[5]");
  CHECK_ERROR(sum(zeros({3, 4}), 2), "sum", "axis 2", "f64[3,4]");
  CHECK_ERROR(transpose(zeros({3})), "transpose", "rank 2 or more", "f64[3]");
  CHECK_ERROR(broadcast_to(zeros({3}), {4}), "broadcast_to", "f64[3]", "[4]");
  CHECK_ERROR(sum_to(zeros({3}), {4}), "sum_to", "f64[3]", "[4]");
  CHECK_ERROR(matmul(zeros({2}), zeros({3})), "matmul", "f64[2] and f64[3]");
}

TEST_CASE("grad of a non-scalar output without a seed says so") {
  CHECK_ERROR(grad([](const Tensor& x) { return exp(x); }, zeros({3})), "grad", "scalar",
              "f64[3]", "vjp");
  CHECK_ERROR(vjp([](const Tensor& x) { return exp(x); }, zeros({2}), zeros({3})), "vjp", "seed",
              "f64[3]", "f64[2]");
  CHECK_ERROR(grad_tape(trace([](const Tensor& x) { return std::make_tuple(sum(x), sum(x)); },
                              zeros({2}))),
              "grad", "one output", "2");
}

TEST_CASE("play checks its arguments") {
  const Tape t = trace([](const Tensor& a, const Tensor& b) { return sum(a * b); }, zeros({2}),
                       zeros({2, 2}));
  CHECK_ERROR(play(t, {zeros({2})}), "play", "expected 2 arguments, got 1");
  CHECK_ERROR(play(t, {zeros({2}), zeros({3})}), "play", "argument 2", "f64[2,2]", "f64[3]");
  CHECK_ERROR(play(t, {zeros({2}, DType::f32), zeros({2, 2})}), "play", "argument 1", "f64[2]",
              "f32[2]");
  CHECK_ERROR(play(t, {Tensor{}, zeros({2, 2})}), "play", "argument 1", "undefined");
}

TEST_CASE("malformed tape text gets an error with its line number") {
  CHECK_ERROR(parse_tape("inp %1::f64[2]\n%2 = frobnicate(%1)::f64[2]\nout %2"), "line 2",
              "unknown primitive 'frobnicate'");
  CHECK_ERROR(parse_tape("inp %1::f64[2]\n%3 = exp(%1)::f64[2]\nout %3"), "line 2", "%2");
  CHECK_ERROR(parse_tape("inp %1::f64[2]\n%2 = exp(%5)::f64[2]\nout %2"), "line 2", "%5",
              "before it is defined");
  CHECK_ERROR(parse_tape("inp %1::f64[2]\n%2 = exp(%1)::f64[3]\nout %2"), "line 2", "f64[2]",
              "f64[3]");
  CHECK_ERROR(parse_tape("inp %1::f16[2]\nout %1"), "line 1", "dtype", "f16");
  CHECK_ERROR(parse_tape("inp %1::f64[2]\n%2 = exp(%1)::f64[2]"), "line 2", "missing 'out'");
  CHECK_ERROR(parse_tape("inp %1::f64[2]\nout %1\n%2 = exp(%1)::f64[2]"), "line 3", "out");
  CHECK_ERROR(parse_tape("%1 = const [1, 2]::f64[3]\nout %1"), "line 1", "3 values", "got 2");
  CHECK_ERROR(parse_tape("inp %1::f64[2]\n%2 = pow(%1)::f64[2]\nout %2"), "line 2", "pow",
              "missing attribute 'p'");
  CHECK_ERROR(parse_tape("inp %1::f64[2]\n%2 = exp(%1, %1)::f64[2]\nout %2"), "line 2", "exp",
              "expected 1 argument, got 2");
  CHECK_ERROR(parse_tape("inp %1::f64[2]\n%2 = sum(%1, axis=0.5)::f64[]\nout %2"), "line 2",
              "axis", "integer");
  CHECK_ERROR(parse_tape("inp %1::f64[2] junk\nout %1"), "line 1", "expected end of line",
              "junk");
  CHECK_ERROR(parse_tape("inp %1:f64[2]\nout %1"), "line 1", "'::'");
  CHECK_ERROR(parse_tape("inp %1::f64[2]\n%2 = add(%1, %1)::f64[2]\nout %2, %7"), "line 3", "%7");
  CHECK_ERROR(parse_tape("inp %1::f64[2]\n%2 = const 1x::f64[]\nout %2"), "line 2", "1x");
  CHECK_ERROR(parse_tape("inp %1::f64[-3]\nout %1"), "line 1", "dimension >= 0", "-3");
  CHECK_ERROR(parse_tape("inp %1::f64[3]\n%2 = reshape(%1, shape=[3], shape=[1,3])::f64[1,3]\nout %2"),
              "line 2", "'shape' is given twice");
  CHECK_ERROR(parse_tape("inp %1::f64[3]\n%2 = sum(axis=0, %1)::f64[]\nout %2"), "line 2",
              "arguments come before attributes");
  CHECK_ERROR(parse_tape("inp %1::f64[3]\n%2 = pow(%1, p=1e999)::f64[3]\nout %2"), "line 2",
              "1e999 is out of range");
  CHECK_ERROR(parse_tape("%1 = const 1e40::f32[]\nout %1"), "line 1", "out of range for f32");
  CHECK_ERROR(parse_tape("%1 = const [1]::f64[]\nout %1"), "line 1", "one number, not a list");
  CHECK_ERROR(parse_tape("inp %01::f64[3]\nout %1"), "line 1", "variable number");
  CHECK_ERROR(parse_tape("inp % 1::f64[3]\nout %1"), "line 1", "variable number");
  CHECK_ERROR(parse_tape("inp %1::f64[3]\noutput %1"), "line 2", "expected '%'");
  CHECK_ERROR(parse_tape("inp %1::f64[4611686018427387904,4]\nout %1"), "line 1", "int64");
  // A token that only starts like an integer is not one (it once read as 1).
  CHECK_ERROR(parse_tape("inp %1::f64[2]\n%2 = pow(%1, p=1-2)::f64[2]\nout %2"), "line 2", "1-2");
}

TEST_CASE("other bad input") {
  CHECK_ERROR(tensor({1, 2, 3}, {2, 2}), "tensor", "[2,2]", "4 values", "got 3");
  CHECK_ERROR(zeros({3}).item(), "item", "one element", "f64[3]");
  CHECK_ERROR(Tensor{}.values(), "values", "undefined");
  CHECK_ERROR(zeros({-1}), "negative");
  CHECK_ERROR(exp(Tensor{}), "exp", "undefined");
  CHECK_ERROR(PassPipeline({"cse", "nope"}), "unknown pass 'nope'");
  CHECK_ERROR(select_outputs(parse_tape("inp %1::f64[]\nout %1"), {3}), "select_outputs", "1 outputs");
  CHECK_ERROR(CompiledFunction{}({}), "compiled function", "empty");
  CHECK_ERROR(zeros({3, 6148914691236517206}), "tensor", "[3,6148914691236517206]", "int64");
  CHECK_ERROR(broadcast_to(zeros({1}), {-1}), "broadcast_to", "negative dimension");
}

TEST_CASE("hand-built malformed tapes are errors in passes, the interpreter and compile") {
  Tape dangling;
  dangling.outputs = {5};
  CHECK_ERROR(cse(dangling), "cse", "malformed", "%5");
  CHECK_ERROR(play(dangling, {}), "play", "malformed", "%5");
  CHECK_ERROR(compile(dangling), "verify", "%5");
  CHECK_ERROR(grad_tape(dangling), "malformed");
  Tape no_prim = parse_tape("inp %1::f64[2]\n%2 = exp(%1)::f64[2]\nout %2");
  no_prim.ops[1].prim = nullptr;
  CHECK_ERROR(simplify(no_prim), "simplify", "%2", "without a primitive");
  CHECK_ERROR(to_string(no_prim), "to_string", "without a primitive");
  Tape forward_ref = parse_tape("inp %1::f64[2]\n%2 = exp(%1)::f64[2]\nout %2");
  forward_ref.ops[1].args = {2};
  CHECK_ERROR(dce(forward_ref), "dce", "%2 is not defined before use");
}
