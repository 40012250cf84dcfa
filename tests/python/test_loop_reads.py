"""Issue 33 from Python: reel.while_loop, values its body and cond read (checked at every
iteration, never constants), and max_trips stopping a runaway loop, interpreted,
through reel.jit and under reel.grad. Values against plain Python loops."""
import pytest

import reel


def doubled_past_10(x):
    while x < 10.0:
        x *= 2.0
    return x


def trips_past_10(x):
    n = 0
    while x < 10.0:
        x, n = x * 2.0, n + 1
    return n


def grow(x):
    return reel.while_loop(lambda c: c < 10.0, lambda c: c * 2.0, x)


def grow_reading_cond(x):
    return reel.while_loop(lambda c: c.item() < 10.0, lambda c: c * 2.0, x)


def test_issue_33_2_while_loop_is_a_loop_from_python():
    for x in (1.0, 3.0, 0.7, 12.0):
        assert grow(reel.scalar(x)).item() == doubled_past_10(x)
    # A tree of tensors as the carry: (x, count).
    out = reel.while_loop(lambda c: c["x"] < 10.0, lambda c: {"x": c["x"] * 2.0, "n": c["n"] + 1.0},
                          {"x": reel.scalar(1.0), "n": reel.scalar(0.0)})
    assert out["x"].item() == 16.0 and out["n"].item() == 4.0
    # One while_loop operation on the tape, whatever the trip count.
    tape = reel.trace(grow, reel.scalar(1.0))
    assert "while_loop" in str(tape)


def test_issue_33_2_while_loop_body_reading_item_is_checked_every_iteration():
    with pytest.raises(reel.GuardFailure, match="while_loop's body read a traced value") as e:
        reel.while_loop(lambda c: c < 10.0, lambda c: c + c.item(), reel.scalar(1.0))
    assert "while_loop's cond" in str(e.value) and "here it is 2" in str(e.value)
    with pytest.raises(reel.GuardFailure, match="while_loop's body read"):
        reel.while_loop(lambda c: c < 10.0, lambda c: c + float(c), reel.scalar(1.0))
    with pytest.raises(reel.GuardFailure, match="while_loop's body read"):
        reel.jit(lambda x: reel.while_loop(lambda c: c < 10.0, lambda c: c + c.item(), x))(reel.scalar(1.0))


def test_issue_33_2_while_loop_cond_reading_item_runs_as_the_python_loop():
    for x in (1.0, 3.0, 0.7, 12.0):
        assert grow_reading_cond(reel.scalar(x)).item() == doubled_past_10(x)
    # A cond returning a Python bool from a branch on the carry.
    assert reel.while_loop(lambda c: bool(c < 10.0), lambda c: c * 2.0, reel.scalar(1.0)).item() == 16.0
    # reel.jit re-checks the values read: another x never reuses the first trip count.
    jf = reel.jit(grow_reading_cond)
    for x in (1.0, 3.0, 1.0, 0.7, 12.0):
        assert jf(reel.scalar(x)).item() == doubled_past_10(x)
    # Gradients: d/dx of x * 2^trips.
    for x in (1.0, 3.0, 0.7):
        g = reel.grad(lambda t: reel.sum(grow_reading_cond(t)), reel.scalar(x))
        assert g.value.item() == doubled_past_10(x)
        assert g.grads[0].item() == 2.0 ** trips_past_10(x)


def bounded(x, max_trips):
    # while sum(c) < 100: c = 1.5 c + 0.1 (from 1e-9: 17 trips; from 1: 11).
    return reel.while_loop(lambda c: reel.sum(c) < 100.0, lambda c: c * 1.5 + 0.1, x, max_trips=max_trips)


def test_issue_33_while_loop_max_trips_stops_a_runaway_loop():
    def plain(x):
        while x < 100.0:
            x = x * 1.5 + 0.1
        return x

    assert bounded(reel.scalar(1.0), 50).item() == pytest.approx(plain(1.0), rel=1e-12)
    assert bounded(reel.scalar(1.0), 11).item() == pytest.approx(plain(1.0), rel=1e-12)  # exactly max_trips
    with pytest.raises(reel.Error, match="while_loop: cond still holds after 10 iterations, and max_trips is 10"):
        bounded(reel.scalar(1.0), 10)
    with pytest.raises(reel.Error, match="max_trips"):  # a condition that never becomes false
        reel.while_loop(lambda c: c > 0.0, lambda c: c + 1.0, reel.scalar(1.0), max_trips=1000)
    with pytest.raises(reel.Error, match=r"expected max_trips >= 0 \(or none, for no limit\), got -1"):
        bounded(reel.scalar(1.0), -1)
    # Through reel.jit (cached and compiled code) and under reel.grad.
    jf = reel.jit(lambda x: bounded(x, 12))
    for _ in range(3):  # traced, interpreted, compiled
        assert jf(reel.scalar(1.0)).item() == pytest.approx(plain(1.0), rel=1e-12)
    with pytest.raises(reel.Error, match="max_trips"):
        jf(reel.scalar(1e-9))
    g = reel.grad(lambda x: reel.sum(bounded(x, 12)), reel.scalar(1.0))
    assert g.grads[0].item() == pytest.approx(1.5 ** 11, rel=1e-12)
    with pytest.raises(reel.Error, match="max_trips"):
        reel.grad(lambda x: reel.sum(bounded(x, 12)), reel.scalar(1e-9))
    # The tape holds max_trips.
    assert "max_trips=12" in str(reel.trace(lambda x: bounded(x, 12), reel.scalar(1.0)))


def test_issue_33_while_loop_refuses_bad_arguments():
    with pytest.raises(reel.Error, match="while_loop: expected cond to be a function"):
        reel.while_loop(3, lambda c: c, reel.scalar(1.0))
    with pytest.raises(reel.Error, match="while_loop: expected an initial carry holding tensors"):
        reel.while_loop(lambda c: False, lambda c: c, 1.0)
    with pytest.raises(reel.Error, match="while_loop: expected cond to return"):
        reel.while_loop(lambda c: "yes", lambda c: c, reel.scalar(1.0))
