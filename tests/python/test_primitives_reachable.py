"""Every primitive of the registry is reachable from Python: reel.apply calls it by name
(its result checked against the named Python function where there is one), or, for the
primitives that only derivatives make (the reverse of a checkpointed scan), a tape
holding a call of it is played. A primitive registered later fails here until it gets
an entry below (or works with the defaults: one f64[3] argument, no attributes)."""
import math

import pytest

import reel

# Loop bodies and conditions as tapes, the loop primitives' attributes.
H_TIMES_X = reel.parse_tape("inp %1::f64[3]\ninp %2::f64[3]\n%3 = mul(%1, %2)::f64[3]\n"
                            "%4 = sin(%3)::f64[3]\nout %4, %4")
HALVE = reel.parse_tape("inp %1::f64[3]\n%2 = const 0.5::f64[]\n%3 = mul(%1, %2)::f64[3]\nout %3")
ABOVE_0_1 = reel.parse_tape("inp %1::f64[3]\n%2 = sum(%1)::f64[]\n%3 = const 0.1::f64[]\n"
                            "%4 = gt(%2, %3)::f64[]\nout %4")
POOL = {"kernel": [2, 2], "stride": [2, 2], "padding": [0, 0]}
CONV = {"stride": [1, 1], "padding": [0, 0], "dilation": [1, 1]}


def v3():
    return reel.tensor([0.25, 0.5, 0.75])


def idx():
    return reel.tensor([2, 0, 1], dtype=reel.i64)


# name: (arguments, attributes). Not listed: one f64[3] argument, no attributes.
CASES = {
    "where": (lambda: [reel.tensor([1.0, 0.0, 1.0]), v3(), reel.ones([3])], None),
    "clamp": (lambda: [v3()], {"lo": 0.3, "hi": 0.6}),
    "cast": (lambda: [v3()], {"dtype": reel.f32}),
    "pow": (lambda: [v3()], {"p": 2.0}),
    "sum_to": (lambda: [reel.ones([2, 3])], {"shape": [3]}),
    "reshape": (lambda: [v3()], {"shape": [3, 1]}),
    "broadcast_to": (lambda: [v3()], {"shape": [2, 3]}),
    "transpose": (lambda: [reel.ones([2, 3])], None),
    "matmul": (lambda: [reel.ones([2, 3]), v3()], None),
    "batch_matmul": (lambda: [reel.ones([2, 3, 4]), reel.ones([2, 4, 5])], None),
    "slice": (lambda: [v3()], {"axis": 0, "start": 1, "stop": 3, "step": 1}),
    "unslice": (lambda: [v3()], {"axis": 0, "start": 1, "step": 1, "size": 5}),
    "place": (lambda: [v3(), v3()], {"axis": 0, "starts": [0, 3], "step": 1, "size": 6}),
    "permute": (lambda: [reel.ones([2, 3, 4])], {"perm": [2, 0, 1]}),
    "concat": (lambda: [v3(), v3()], {"axis": 0}),
    "gather": (lambda: [v3(), idx()], {"axis": 0}),
    "scatter_add": (lambda: [v3(), idx(), v3()], {"axis": 0}),
    "index_update": (lambda: [v3(), idx(), v3()], {"axis": 0}),
    "conv2d": (lambda: [reel.ones([1, 2, 6, 6]), reel.ones([3, 2, 3, 3])], CONV),
    "conv2d_data_grad": (lambda: [reel.ones([1, 3, 4, 4]), reel.ones([3, 2, 3, 3])], {**CONV, "input_hw": [6, 6]}),
    "conv2d_filter_grad": (lambda: [reel.ones([1, 2, 6, 6]), reel.ones([1, 3, 4, 4])],
                           {**CONV, "kernel_hw": [3, 3]}),
    "max_pool2d": (lambda: [reel.ones([1, 1, 4, 4])], POOL),
    "max_pool2d_grad": (lambda: [reel.ones([1, 1, 4, 4]), reel.ones([1, 1, 2, 2])], POOL),
    "max_pool2d_gather": (lambda: [reel.ones([1, 1, 4, 4]), reel.ones([1, 1, 4, 4])], POOL),
    "avg_pool2d": (lambda: [reel.ones([1, 1, 4, 4])], POOL),
    "avg_pool2d_grad": (lambda: [reel.ones([1, 1, 2, 2])], {**POOL, "input_hw": [4, 4]}),
    "guard": (lambda: [reel.scalar(1.0)], {"expected": True}),
    "guard_value": (lambda: [reel.scalar(2.0)], {"values": [2.0]}),
    "scan": (lambda: [v3(), reel.ones([4, 3])], {"body": H_TIMES_X, "length": 4, "num_consts": 0, "num_carry": 1}),
    "while_loop": (lambda: [v3()], {"cond": ABOVE_0_1, "body": HALVE, "num_consts": 0}),
    "call": (lambda: [v3()], {"body": HALVE}),
    "checkpoint": (lambda: [v3()], {"body": HALVE}),
}
# Binary elementwise primitives: two f64[3] arguments.
BINARY = {"add", "sub", "mul", "div", "hypot", "lt", "le", "gt", "ge", "eq", "ne", "maximum", "minimum", "atan2",
          "copysign", "powv"}

# Made by derivatives only (their attributes are tapes built by the gradient of a loop):
# reached by playing such a derivative. name: (tape text, its inputs).
BINOMIAL_SCAN = ("inp %1::f64[3]\ninp %2::f64[6,3]\n"
                 "%3, %4 = scan(%1, %2, body={inp %1::f64[3]; inp %2::f64[3]; %3 = mul(%1, %2)::f64[3]; "
                 "%4 = sin(%3)::f64[3]; out %4, %4}, length=6, num_consts=0, num_carry=1, "
                 "checkpoint=\"binomial\", checkpoint_arg=2)::f64[3], f64[6,3]\n"
                 "%5 = sum(%3)::f64[]\nout %5")
DERIVED = {"revolve": (lambda: reel.grad_tape(reel.parse_tape(BINOMIAL_SCAN)), lambda: [v3(), reel.ones([6, 3])])}


def arguments_and_attributes(name):
    if name in CASES:
        make, attrs = CASES[name]
        return make(), attrs
    if name in BINARY:
        return [v3(), reel.tensor([0.5, 0.25, 1.0])], None
    return [v3()], None


def same(a, b):
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    av, bv = a.tolist(), b.tolist()
    flat = lambda v: [w for x in v for w in flat(x)] if isinstance(v, list) else [v]
    return all((math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(flat(av), flat(bv)))


def test_the_registry_is_listed():
    names = reel.primitive_names()
    assert len(names) == len(set(names))
    for name in ("add", "sum", "matmul", "scan", "while_loop", "revolve"):
        assert name in names


@pytest.mark.parametrize("name", reel.primitive_names())
def test_each_primitive_is_reachable(name):
    if name in DERIVED:
        make_tape, make_args = DERIVED[name]
        tape = make_tape()
        assert f"= {name}(" in str(tape)
        outs = reel.play(tape, make_args())
        assert len(outs) == tape.num_outputs
        return
    args, attrs = arguments_and_attributes(name)
    out = reel.apply(name, args, attrs)
    results = out if isinstance(out, list) else [out]
    assert results and all(isinstance(r, reel.Tensor) for r in results)
    # Where a Python function of the same name takes the arguments alone, it agrees.
    fn = getattr(reel, name, None)
    if callable(fn) and attrs is None and name not in ("sum", "mean", "prod", "max", "min", "argmax", "argmin"):
        assert same(fn(*args), out)


def test_a_loop_applied_by_name_is_recorded_as_one_call():
    tape = reel.trace(lambda x: reel.apply("while_loop", [x], {"cond": ABOVE_0_1, "body": HALVE, "num_consts": 0})[0],
                      v3())
    assert str(tape).count("while_loop(") == 1
    assert same(reel.play(tape, [v3()]), [reel.tensor([0.015625, 0.03125, 0.046875])])
