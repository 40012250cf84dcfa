"""Issue 33, items 1 and 3, from Python: loops carrying an i64 tensor beside f64 state
get the float state's gradients (a scan tape, and a plain Python loop that re-rolling
folds into a scan, against NumPy finite differences and REEL_REROLL=0), and a while_loop
batched by vmap with a trip count per batch element differentiates where it runs under
reel.grad (the largest trip count recorded, each element masked after its own), or says
in the user's terms why it cannot."""
import os
import subprocess
import sys

import numpy as np
import pytest

import reel

# A scan over 3 steps carrying (argmax(state), state * 2): the i64 carry first.
SCAN_TAPE = """inp %1::f64[2]
%2 = argmax(%1)::i64[]
%3, %4 = scan(%2, %1, body={inp %1::i64[]; inp %2::f64[2]; %3 = argmax(%2)::i64[]; %4 = const 2::f64[]; \
%5 = mul(%2, %4)::f64[2]; out %3, %5}, length=3, num_consts=0, num_carry=2)::i64[], f64[2]
%5 = sum(%4)::f64[]
out %5
"""


def test_issue_33_1_scan_tape_carrying_an_argmax_beside_f64_state():
    t = reel.parse_tape(SCAN_TAPE)
    x = reel.tensor([1.0, 2.0])
    value, dx = reel.play(reel.grad_tape(t), [x])
    assert float(value) == 24.0
    assert np.asarray(dx).tolist() == [8.0, 8.0]  # was [0, 0]
    # Compiled, and forward mode along (1, 0.5): 8 * 1.5.
    assert np.asarray(reel.compile(reel.grad_tape(t))(x)[1]).tolist() == [8.0, 8.0]
    assert float(reel.play(reel.jvp_tape(t), [x, reel.tensor([1.0, 0.5])])[1]) == 12.0


def step(i, s, x):
    """One step: the previous argmax (i64) picks the element added back."""
    shift = reel.cast(i, reel.f64) * 0.125  # (the body reads the i64 carry first)
    return reel.argmax(s), reel.sin(s) * 1.5 + x * s + reel.gather(s, i) * 0.25 + shift


def loss(s0, xs):
    i, s = reel.argmax(s0), s0
    for k in range(xs.shape[0]):
        i, s = step(i, s, reel.index(xs, k))
    return reel.sum(s * s) + reel.cast(i, reel.f64)


def numpy_loss(s0, xs):
    i, s = int(np.argmax(s0)), s0.copy()
    for k in range(xs.shape[0]):
        i, s = int(np.argmax(s)), np.sin(s) * 1.5 + xs[k] * s + s[i] * 0.25 + i * 0.125
    return float(np.sum(s * s)) + i


S0 = np.array([0.3, -0.4, 0.2])
XS = np.random.default_rng(5).normal(size=(16, 3)) * 0.3


def numpy_fd(f, args, eps=1e-6):
    grads = []
    for a in range(len(args)):
        g = np.zeros_like(args[a])
        for idx in np.ndindex(args[a].shape):
            plus = [x.copy() for x in args]
            minus = [x.copy() for x in args]
            plus[a][idx] += eps
            minus[a][idx] -= eps
            g[idx] = (f(*plus) - f(*minus)) / (2 * eps)
        grads.append(g)
    return grads


def test_issue_33_1_plain_python_loop_carrying_an_argmax_rerolled_into_a_scan():
    s0, xs = reel.tensor(S0), reel.tensor(XS)
    gt = reel.grad_tape(reel.trace(loss, s0, xs))
    assert "scan(" in str(gt)  # re-rolled (REEL_REROLL unset)
    value, ds, dxs = reel.play(gt, [s0, xs])
    assert float(value) == pytest.approx(numpy_loss(S0, XS), rel=1e-12)
    fd = numpy_fd(numpy_loss, [S0, XS])
    np.testing.assert_allclose(np.asarray(ds), fd[0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(dxs), fd[1], rtol=1e-6, atol=1e-7)
    assert np.abs(np.asarray(ds)).sum() > 0.1
    # reel.grad and a compiled gradient agree.
    g = reel.grad(loss, s0, xs)
    np.testing.assert_allclose(np.asarray(g.grads[0]), np.asarray(ds), rtol=1e-12, atol=1e-12)
    _, cds, cdxs = reel.compile_grad(loss, s0, xs)(s0, xs)
    np.testing.assert_allclose(np.asarray(cds), np.asarray(ds), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(np.asarray(cdxs), np.asarray(dxs), rtol=1e-11, atol=1e-12)


def test_issue_33_1_rerolled_gradient_equals_reel_reroll_0(tmp_path):
    script = tmp_path / "unrolled.py"
    script.write_text(
        "import sys, numpy as np, reel\n"
        f"sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n"
        "from test_loop_carries import loss, S0, XS\n"
        "gt = reel.grad_tape(reel.trace(loss, reel.tensor(S0), reel.tensor(XS)))\n"
        "assert 'scan(' not in str(gt)\n"
        "np.save(sys.argv[1], np.concatenate([np.asarray(g).ravel() for g in reel.play(gt, [reel.tensor(S0), "
        "reel.tensor(XS)])[1:]]))\n")
    out = tmp_path / "unrolled.npy"
    r = subprocess.run([sys.executable, str(script), str(out)], env=dict(os.environ, REEL_REROLL="0"),
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    want = np.load(out)
    s0, xs = reel.tensor(S0), reel.tensor(XS)
    got = reel.play(reel.grad_tape(reel.trace(loss, s0, xs)), [s0, xs])[1:]
    np.testing.assert_allclose(np.concatenate([np.asarray(g).ravel() for g in got]), want, rtol=1e-11, atol=1e-12)


# --- item 3: a while_loop batched by vmap, per-element trip counts ---------------------

# grow(x) = while sum(x) < 10: x = 1.5 x + 0.1, batched by reel::vmap_tape over 3 rows
# (C++; Python has no vmap): the batched loop runs while any row goes on, each row frozen
# after its own trip count, and has no trips attribute.
BATCHED_GROW = """inp %1::f64[3,2]
%2 = sum(%1, axes=[1], keepdims=false)::f64[3]
%3 = const 10::f64[]
%4 = lt(%2, %3)::f64[3]
%5 = const 0::f64[]
%6 = ne(%4, %5)::f64[3]
%7, %8 = while_loop(%1, %6, cond={inp %1::f64[3,2]; inp %2::f64[3]; %3 = sum(%2)::f64[]; out %3}, \
body={inp %1::f64[3,2]; inp %2::f64[3]; %3 = const 1.5::f64[]; %4 = mul(%1, %3)::f64[3,2]; %5 = const 0.1::f64[]; \
%6 = add(%4, %5)::f64[3,2]; %7 = reshape(%2, shape=[3,1])::f64[3,1]; %8 = where(%7, %6, %1)::f64[3,2]; \
%9 = sum(%8, axes=[1], keepdims=false)::f64[3]; %10 = const 10::f64[]; %11 = lt(%9, %10)::f64[3]; \
%12 = const 0::f64[]; %13 = ne(%11, %12)::f64[3]; %14 = mul(%2, %13)::f64[3]; out %8, %14}, \
num_consts=0)::f64[3,2], f64[3]
out %7
"""


def test_issue_33_3_batched_while_loop_differentiates_where_it_runs_under_grad():
    t = reel.parse_tape(BATCHED_GROW)
    X = np.array([[1.0, 2.0], [0.25, 0.25], [10.0, 10.0]])  # 3, 7 and 0 trips

    def f(x):
        return reel.sum(reel.play(t, [x])[0])

    g = reel.grad(f, reel.tensor(X))
    want = np.repeat(1.5 ** np.array([3.0, 7.0, 0.0]), 2).reshape(3, 2)
    np.testing.assert_allclose(np.asarray(g.grads[0]), want, rtol=1e-12)
    _, d = reel.jit_grad(f)(reel.tensor(X))
    np.testing.assert_allclose(np.asarray(d), want, rtol=1e-12)


def test_issue_33_3_batched_while_loop_differentiated_without_a_run_is_an_error_naming_vmap():
    t = reel.parse_tape(BATCHED_GROW)
    with pytest.raises(reel.Error) as e:
        reel.vjp_tape(t)
    for part in ("while_loop", "vmap", "trip count", "batch element", "vmap of grad"):
        assert part in str(e.value)
