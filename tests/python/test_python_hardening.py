"""Issue 33, item 4 and the Python edges of item 6: hostile use of the Python package.
Each case that crashed (a segmentation fault, a stack overflow, a deadlock) runs in a
child interpreter with a timeout, so that a regression fails its test instead of
killing pytest."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import reel

UNINIT = "uninitialised"


def run_child(code, timeout=120):
    """Runs `code` (after `import numpy as np, reel`) in a child interpreter; its stdout
    lines. A crash or a hang fails the test with what the child printed."""
    try:
        r = subprocess.run([sys.executable, "-c", "import numpy as np, reel\n" + textwrap.dedent(code)],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the child hung (more than {timeout} s): {e.stdout!r} {e.stderr!r}")
    assert r.returncode == 0, f"the child ended with {r.returncode}: {r.stdout}\n{r.stderr}"
    return r.stdout.splitlines()


# Prints, for each named expression, "name <exception type>: <message>" (or "name ok <value>").
PROBE = """
import sys
def probe(name, f):
    try:
        v = f()
        print(name, "ok", repr(v) if not isinstance(v, reel.Tensor) else "tensor")
    except Exception as e:
        print(name, type(e).__name__ + ":", str(e).replace("\\n", " "))
    sys.stdout.flush()
"""


def probed(lines):
    out = {}
    for line in lines:
        name, _, rest = line.partition(" ")
        out[name] = rest
    return out


def test_33_4_uninitialised_tensor_is_an_error():
    lines = run_child(PROBE + """
u = reel.Tensor.__new__(reel.Tensor)
t = reel.tensor([1.0, 2.0])
for name, f in [
    ("repr", lambda: repr(u)), ("str", lambda: str(u)), ("item", lambda: u.item()), ("tolist", lambda: u.tolist()),
    ("numpy", lambda: u.numpy()), ("asarray", lambda: np.asarray(u)), ("memoryview", lambda: memoryview(u)),
    ("float", lambda: float(u)), ("int", lambda: int(u)), ("len", lambda: len(u)), ("bool", lambda: bool(u)),
    ("shape", lambda: u.shape), ("dtype", lambda: u.dtype), ("values", lambda: u.values()),
    ("sin", lambda: reel.sin(u)), ("sum", lambda: reel.sum(u)), ("add", lambda: u + 1), ("radd", lambda: t + u),
    ("neg", lambda: -u), ("matmul", lambda: t @ u), ("getitem", lambda: u[0]), ("method", lambda: u.exp()),
    ("Tensor", lambda: reel.Tensor(u)), ("tensor", lambda: reel.tensor(u)), ("stack", lambda: reel.stack([t, u])),
    ("jit", lambda: reel.jit(lambda x: x)(u)), ("grad", lambda: reel.grad(lambda x: reel.sum(x * x), u)),
    ("play", lambda: reel.play(reel.trace(lambda x: x * 2, t), [u])),
]:
    probe(name, f)
""")
    got = probed(lines)
    assert len(got) == 28, lines
    for name, result in got.items():
        assert result.startswith("Error:") and UNINIT in result, (name, result)
    # Each message names the call it refused.
    assert got["item"].startswith("Error: Tensor.item: expected arguments (self: reel.Tensor), got (uninitialised Tensor")
    assert got["shape"].startswith("Error: Tensor.shape: expected")
    assert got["sin"].startswith("Error: sin: expected arguments (x: reel.Tensor), got (uninitialised Tensor")
    assert got["add"].startswith("Error: add: expected a reel.Tensor, a NumPy array or a number, got uninitialised")
    assert got["repr"].startswith("Error: Tensor.__repr__:")
    assert got["jit"].startswith("Error: jit: argument 1 is uninitialised Tensor")
    assert got["stack"].startswith("Error: stack: expected arguments (xs: List[reel.Tensor], axis: int = 0), "
                                   "got ([reel.Tensor f64[2], uninitialised Tensor (made by Tensor.__new__ without "
                                   "__init__)])")


def test_33_4_uninitialised_compiled_jit_and_other_objects_are_errors():
    lines = run_child(PROBE + """
x = reel.tensor([1.0, 2.0])
for cls, uses in [
    (reel.CompiledFunction, [("call", lambda u: u(x)), ("tape", lambda u: u.tape), ("llvm_ir", lambda u: u.llvm_ir),
                             ("num_outputs", lambda u: u.num_outputs()), ("profile", lambda u: u.profile([x]))]),
    (reel.CompiledGrad, [("call", lambda u: u(x)), ("tape", lambda u: u.tape), ("compiled", lambda u: u.compiled)]),
    (reel.JitFunction, [("call", lambda u: u(x)), ("cache_info", lambda u: u.cache_info())]),
    (reel.Tape, [("str", lambda u: str(u)), ("len", lambda u: len(u)), ("grad_tape", lambda u: reel.grad_tape(u)),
                 ("compile", lambda u: reel.compile(u)), ("play", lambda u: reel.play(u, [x])),
                 ("apply", lambda u: reel.apply("scan", [x], {"body": u}))]),
    (reel.CacheInfo, [("hits", lambda u: u.hits), ("repr", lambda u: repr(u))]),
    (reel.DType, [("int", lambda u: int(u)), ("str", lambda u: str(u)), ("zeros", lambda u: reel.zeros([2], u)),
                  ("cast", lambda u: reel.cast(x, u))]),
]:
    u = cls.__new__(cls)
    for name, f in uses:
        probe(cls.__name__ + "." + name, lambda: f(u))
""")
    got = probed(lines)
    assert len(got) == 22, lines
    for name, result in got.items():
        assert result.startswith("Error:") and UNINIT in result, (name, result)
    assert got["CompiledFunction.call"].startswith(
        "Error: CompiledFunction.__call__: expected arguments (self: reel.CompiledFunction, *args), "
        "got (uninitialised CompiledFunction (made by CompiledFunction.__new__ without __init__), reel.Tensor f64[2])")
    assert got["CompiledGrad.call"].startswith("Error: CompiledGrad.__call__:")
    assert got["JitFunction.call"].startswith("Error: JitFunction.__call__:")
    assert got["DType.zeros"].startswith("Error: zeros: expected a dtype")


def test_33_4_a_deep_jit_argument_is_a_recursion_error():
    lines = run_child(PROBE + """
sys.setrecursionlimit(1_000_000)
x = reel.tensor([1.0, 2.0])
deep = x
for _ in range(200_000):
    deep = [deep]
probe("jit", lambda: reel.jit(lambda a: 1.0)(deep))
probe("jit_grad", lambda: reel.jit_grad(lambda a: reel.sum(x))(deep))
probe("trace", lambda: reel.trace(lambda a: x * 2, deep))
probe("grad", lambda: reel.grad(lambda a: reel.sum(x), deep))
probe("compile_grad", lambda: reel.compile_grad(lambda a: reel.sum(x), deep))
probe("play", lambda: reel.play(reel.trace(lambda a: a * 2, x), deep))
cycle = [x]
cycle.append(cycle)
probe("cycle", lambda: reel.jit(lambda a: 1.0)(cycle))
# A tree 900 deep is still walked.
nested = x
for _ in range(900):
    nested = [nested]
def first(a):
    while isinstance(a, list):
        a = a[0]
    return reel.sum(a)
probe("shallow", lambda: float(reel.grad(first, nested).value))
""", timeout=300)
    got = probed(lines)
    for name in ("jit", "jit_grad", "trace", "grad", "compile_grad", "play", "cycle"):
        assert got[name].startswith("RecursionError:"), (name, got[name])
    assert "nested deeper than 1000" in got["jit"]
    assert got["shallow"] == "ok 3.0"


def test_33_4_jit_reentry_from_a_joined_thread_does_not_deadlock():
    lines = run_child("""
import threading

def make(jit):
    @jit
    def f(x, depth):
        if depth > 0:
            out = []
            th = threading.Thread(target=lambda: out.append(f(reel.tensor([5.0]), depth - 1)))
            th.start()
            th.join()
            inner = out[0][0] if isinstance(out[0], tuple) else out[0]
            return reel.sum(x * 2 + inner)
        return reel.sum(x * 2)
    return f

f = make(reel.jit)
print("jit", [float(f(reel.tensor([1.0]), 1)) for _ in range(3)], f.cache_info().misses)
g = make(reel.jit_grad)
value, dx, _ = g(reel.tensor([1.0]), 1)
print("jit_grad", float(value), dx.tolist())
""", timeout=60)
    assert lines == ["jit [12.0, 12.0, 12.0] 1", "jit_grad 12.0 [2.0]"]


def test_33_4_out_of_range_uint64_values_are_refused():
    with pytest.raises(reel.Error, match=r"Tensor: expected uint64 values that fit in i64 \(at most 2\*\*63 - 1\), "
                                         r"got 18446744073709551615"):
        reel.Tensor(np.array([2**64 - 1, 2**63], dtype=np.uint64))
    with pytest.raises(reel.Error, match="from_numpy: expected uint64 values that fit in i64"):
        reel.from_numpy(np.array([2**63], dtype=np.uint64))
    with pytest.raises(reel.Error, match="add: expected uint64 values"):
        reel.add(reel.tensor([1.0]), np.array([2**63], dtype=np.uint64))
    ok = reel.Tensor(np.array([0, 2**63 - 1], dtype=np.uint64))
    assert ok.dtype == reel.i64 and ok.tolist() == [0, 2**63 - 1]
    with pytest.raises(reel.Error, match="tensor: expected a number, a nested list of numbers or an array, got "
                                         r"\[18446744073709551616\]"):
        reel.tensor([2**64], dtype=reel.i64)


def test_33_4_int_of_a_tensor_is_pythons_int():
    with pytest.raises(ValueError):
        int(reel.tensor(float("nan")))
    with pytest.raises(OverflowError):
        int(reel.tensor(float("inf")))
    with pytest.raises(OverflowError):
        int(reel.tensor(float("-inf")))
    assert int(reel.tensor(1e30)) == int(1e30) == 1000000000000000019884624838656
    assert int(reel.tensor(-2.7)) == -2
    assert int(reel.tensor([3.9], dtype=reel.f32)) == 3
    big = 2**62 + 1  # not a double: exact through an i64 tensor
    assert int(reel.tensor(np.array([big]))) == big
    with pytest.raises(reel.Error, match="item: expected a tensor with one element"):
        int(reel.tensor([1.0, 2.0]))


def test_33_4_tensor_methods_receive_self():
    x = reel.tensor([0.5, 1.5, 2.0])
    for name in ("exp", "log", "sin", "cos", "tanh", "sigmoid", "sqrt", "square", "abs", "relu"):
        got = getattr(x, name)()
        np.testing.assert_array_equal(got.numpy(), getattr(reel, name)(x).numpy(), err_msg=name)
    np.testing.assert_allclose(x.exp().numpy(), np.exp([0.5, 1.5, 2.0]))
    np.testing.assert_allclose((-x).relu().numpy(), [0.0, 0.0, 0.0])
    # and traced as the functions are
    g = reel.grad(lambda t: t.sin().sum(), x)
    np.testing.assert_allclose(g.grads[0].numpy(), np.cos([0.5, 1.5, 2.0]))


def test_33_4_apply_of_a_loop_primitive():
    body = reel.trace(lambda c, x: [c + x, c * 2], reel.scalar(0.0), reel.scalar(0.0))
    attrs = {"body": body, "length": 3, "num_consts": 0, "num_carry": 1}
    carry, ys = reel.apply("scan", [reel.scalar(0.0), reel.tensor([1.0, 2.0, 3.0])], attrs)
    assert carry.item() == 6.0 and ys.tolist() == [0.0, 2.0, 6.0]
    # the same under a trace: one scan call on the tape
    tape = reel.trace(lambda xs: reel.apply("scan", [reel.scalar(0.0), xs], attrs)[0], reel.tensor([1.0, 2.0, 3.0]))
    assert "scan" in str(tape)
    assert reel.play(tape, [reel.tensor([4.0, 5.0, 6.0])])[0].item() == 15.0


def test_33_4_wrong_parameter_types_are_reel_errors():
    x = reel.tensor([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(reel.Error, match=r"^sin: expected arguments \(x: reel.Tensor\), got \('a'\)$"):
        reel.sin("a")
    with pytest.raises(reel.Error, match=r"^slice: expected arguments \(x: reel.Tensor, start: int, stop: int\) or "
                                         r"\(x: reel.Tensor, axis: int, start: int, stop: int, step: int = 1\), got "
                                         r"\(reel.Tensor f64\[2,2\], 1180591620717411303424 \(beyond 64 bits\), 3\)$"):
        reel.slice(x, 2**70, 3)
    with pytest.raises(reel.Error, match=r"^sum: expected an integer axis, got str$"):
        reel.sum(x, "a")
    with pytest.raises(reel.Error, match=r"^sum: expected an integer axis, got bool$"):
        reel.sum(x, True)
    with pytest.raises(reel.Error, match=r"^mean: expected axis to fit in 64 bits"):
        x.mean(2**64)
    with pytest.raises(reel.Error, match=r"^reshape: expected an integer shape, got float"):
        x.reshape(2.0, 2)
    with pytest.raises(reel.Error, match=r"^tensor: expected an integer shape, got str"):
        reel.tensor([1.0, 2.0], shape=["a"])
    with pytest.raises(reel.Error, match=r"^conv2d: expected stride as an int or two ints, got 3 of them"):
        reel.conv2d(reel.zeros([1, 1, 3, 3]), reel.zeros([1, 1, 2, 2]), stride=[1, 1, 1])
    with pytest.raises(reel.Error, match=r"^add: expected an operand to be a real number that fits in a double"):
        x + 10**400
    with pytest.raises(reel.Error, match=r"^Tensor.reshape: expected arguments"):
        reel.Tensor.reshape("not a tensor", 4)
    with pytest.raises(reel.Error, match=r"^tensor: expected a number, a nested list of numbers or an array, got 'abc'"):
        reel.Tensor("abc")
    with pytest.raises(reel.Error, match=r"^zeros: expected arguments \(shape: List\[int\], dtype: object = <DType.f64: 1>\), "
                                         r"got \('ab'\)$"):
        reel.zeros("ab")
    with pytest.raises(reel.Error, match=r"^jvp_tape: expected an integer k, got float"):
        reel.jvp_tape(reel.trace(lambda a: a * 2, x), 2.0)
    # A TypeError raised inside a call is not the call's mismatch: it reaches the caller as itself.
    def bad(a):
        raise TypeError("mine")
    with pytest.raises(TypeError, match="^mine$"):
        reel.grad(bad, x)
    # NumPy integers are integers: axes, shapes, strides, operands.
    np.testing.assert_array_equal(reel.sum(x, np.int64(1)).numpy(), [3.0, 7.0])
    np.testing.assert_array_equal(x.sum(axis=[np.int32(0)]).numpy(), [4.0, 6.0])
    np.testing.assert_array_equal(x.max(np.int64(-1), keepdims=True).numpy(), [[2.0], [4.0]])
    assert reel.argmax(x, np.int64(0)).tolist() == [1, 1]
    assert x.reshape(np.int64(4)).shape == (4,)
    assert reel.tensor([1.0, 2.0], shape=(np.int64(2), np.int64(1))).shape == (2, 1)
    assert reel.conv2d(reel.ones([1, 1, 3, 3]), reel.ones([1, 1, 2, 2]), stride=np.int64(1)).shape == (1, 1, 2, 2)
    np.testing.assert_array_equal((x + np.int64(2)).numpy(), [[3.0, 4.0], [5.0, 6.0]])
    np.testing.assert_array_equal((np.float32(2) * x).numpy(), [[2.0, 4.0], [6.0, 8.0]])
    np.testing.assert_array_equal(reel.index_update(x, slice(np.int64(0), np.int64(1)), reel.zeros([1, 2])).numpy(),
                                  [[0.0, 0.0], [3.0, 4.0]])


def test_33_4_attributes_as_a_list_are_refused():
    x = reel.tensor([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(reel.apply("sum", [x], {"axes": [1]}).numpy(), [3.0, 7.0])
    np.testing.assert_array_equal(reel.apply("sum", [x], {"axes": [np.int64(0)]}).numpy(), [4.0, 6.0])
    with pytest.raises(reel.Error, match=r"^sum: expected the attributes as a dict \{name: value\} \(or None\), got list$"):
        reel.apply("sum", [x], [("axes", [1])])
    with pytest.raises(reel.Error, match=r"^define_primitive: p33: expected attrs as a dict \{name: kind\}"):
        reel.define_primitive("p33", 1, lambda a: a[0], attrs=["axis"])
    with pytest.raises(reel.Error, match=r"^sum: attribute 'axes' is a dict"):
        reel.apply("sum", [x], {"axes": {}})


def test_33_6_grad_argnums_out_of_range_is_an_error():
    def f(a, b):
        return reel.sum(a * b)

    a, b = reel.tensor([1.0, 2.0]), reel.tensor([3.0, 4.0])
    with pytest.raises(reel.Error, match=r"^grad: expected argnums 5 to name arguments of the call \(0 to 1\), "
                                         r"got 2 arguments$"):
        reel.grad(f, argnums=5)(a, b)
    with pytest.raises(reel.Error, match=r"^value_and_grad: expected argnums \(0, 2\) to name arguments"):
        reel.value_and_grad(f, argnums=(0, 2))(a, b)
    with pytest.raises(reel.Error, match=r"^grad: expected argnums as an int or a tuple of ints, got str"):
        reel.grad(f, argnums="a")
    assert reel.grad(f, argnums=-1)(a, b).tolist() == [1.0, 2.0]
    ga, gb = reel.grad(f, argnums=(0, 1))(a, b)
    assert ga.tolist() == [3.0, 4.0] and gb.tolist() == [1.0, 2.0]


def test_33_6_seeds_and_options_out_of_range_are_errors():
    with pytest.raises(reel.Error, match=r"^randn: expected a seed from 0 to 2\*\*64 - 1, got -1$"):
        reel.randn([2], seed=-1)
    with pytest.raises(reel.Error, match=r"^rand: expected a seed from 0 to 2\*\*64 - 1, got 18446744073709551616$"):
        reel.rand([2], seed=2**64)
    with pytest.raises(reel.Error, match=r"^randn: expected an integer seed, got float$"):
        reel.randn([2], seed=1.5)
    assert reel.randn([3], seed=2**64 - 1).shape == (3,)
    np.testing.assert_array_equal(reel.rand([3], seed=np.uint64(7)).numpy(), reel.rand([3], seed=7).numpy())
    f = lambda x: x  # noqa: E731
    with pytest.raises(reel.Error, match=r"^jit: expected max_entries from 1 to 9223372036854775807, got -1$"):
        reel.jit(f, max_entries=-1)
    with pytest.raises(reel.Error, match=r"^simplegrad: expected max_paths from 1 to 9223372036854775807, got 0$"):
        reel.simplegrad(f, max_paths=0)
    with pytest.raises(reel.Error, match=r"^jit: expected compile_after from 1 to 2147483647, got 1099511627776$"):
        reel.jit(f, compile_after=2**40)
    with pytest.raises(reel.Error, match=r"^jit: expected max_entries to fit in 64 bits"):
        reel.jit(f, max_entries=2**64)
    with pytest.raises(reel.Error, match=r"^jit: expected options among compile_after, max_entries, max_paths, "
                                         r"vector_math, reuse_memory, optimization, got max_entrie$"):
        reel.jit(f, max_entrie=3)
    assert reel.jit(f, max_entries=np.int64(3))(reel.tensor([1.0])).tolist() == [1.0]


def test_33_4_hostile_new_user_probes():
    x = reel.tensor([[1.0, 2.0], [3.0, 4.0]])
    # __init__ again on a made object was silently ignored by pybind11 (the tensor kept
    # its values): an error, as the object cannot change.
    with pytest.raises(reel.Error, match=r"^Tensor.__init__: expected an object made by Tensor.__new__, got one "
                                         r"already initialised"):
        reel.Tensor.__init__(x, [5.0])
    assert x.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    g = reel.compile_grad(lambda a: reel.sum(a), x)
    with pytest.raises(reel.Error, match=r"^CompiledGrad.__init__: expected an object made by"):
        reel.CompiledGrad.__init__(g, lambda a: reel.sum(a * 2), (x,))
    assert g(x)[1].tolist() == [[1.0, 1.0], [1.0, 1.0]]
    # NumPy integers index as ints do; arrays are refused as before.
    assert x[np.int64(1), np.int32(0)].item() == 3.0
    assert x[np.int64(0):np.int64(1)].shape == (1, 2)
    with pytest.raises(reel.Error, match=r"^getitem: expected ints, slices or an i64 tensor, got ndarray$"):
        x[np.array([0, 1])]
    # Rules and argument lists are checked when given, not when first called.
    with pytest.raises(reel.Error, match=r"^custom_vjp: cv33: expected a function as its forward rule, got 5$"):
        reel.custom_vjp("cv33", [x], 5, lambda a, o, d: [d])
    with pytest.raises(reel.Error, match=r"^define_primitive: pp33: expected a function as its vjp rule, got 3$"):
        reel.define_primitive("pp33", 1, lambda a: a[0], vjp=3)
    with pytest.raises(reel.Error, match=r"^sin: expected the arguments as a list of tensors, got int$"):
        reel.apply("sin", 5)
    with pytest.raises(reel.Error, match=r"^index_update: expected an integer slice step, got str$"):
        reel.index_update(reel.tensor([1.0, 2.0]), slice(0, 2, "a"), reel.tensor([1.0, 1.0]))
    # A huge int is shortened in the message.
    with pytest.raises(reel.Error, match=r"^scalar: expected arguments \(value: float, dtype: object = <DType.f64: 1>\), "
                                         r"got \(10000000000000000000\.\.\.00000 \(beyond 64 bits\)\)$"):
        reel.scalar(10**400)
    # A subclass of Tensor is a tensor everywhere.
    class T(reel.Tensor):
        pass
    t = T([1.0, 2.0])
    assert (reel.sin(t) + t).shape == (2,) and float(reel.sum(t)) == 3.0


def test_33_review_while_loop_cond_giving_python_values():
    # A cond computed from Python state (a counter the body moves) is Python's loop, not
    # a constant traced once; so is one giving a NumPy bool.
    state = {"left": 3}

    def body(x):
        state["left"] -= 1
        return x * 2.0

    out = reel.while_loop(lambda x: state["left"] > 0, body, reel.tensor([1.0, 3.0]))
    assert out.tolist() == [8.0, 24.0]
    out = reel.while_loop(lambda x: x.numpy()[0] < 10, lambda x: x * 2.0, reel.tensor([1.0]))
    assert out.tolist() == [16.0]
    with pytest.raises(reel.Error, match="max_trips is 2"):
        reel.while_loop(lambda x: True, lambda x: x + 1.0, reel.tensor([0.0]), max_trips=2)
    # Its gradient is the unrolled loop's: d/dx of 2^3 x.
    state["left"] = 3
    g = reel.grad(lambda x: reel.sum(reel.while_loop(lambda c: state["left"] > 0, body, x)), reel.tensor([1.0]))
    assert g.grads[0].tolist() == [8.0]


def test_33_review_numpy_arrays_as_shapes_and_axes():
    x = reel.tensor(np.arange(6.0), shape=np.array([2, 3]))
    assert x.shape == (2, 3)
    assert x.reshape(np.array([3, 2])).shape == (3, 2)
    assert reel.sum(x, axis=np.array([0, 1])).item() == 15.0
    with pytest.raises(reel.Error):
        reel.sum(x, axis=np.array([[0, 1]]))
