#!/usr/bin/python3
"""Reel from Python, side by side in one run: each of the benchmark's workloads (reel_bench's
rows) written in Python, its gradient compiled with reel.compile_grad and called from
Python, against the same compiled function called from C++ (reel._reel._time_cpp_calls: a
C++ loop calling it as a C++ program does, f(args)), and against eager PyTorch (Debian's
python3-torch, scripts/install-bench-deps.sh) at the same thread count. Also the cached
gradient (reel.simplegrad(f)) on a 5-element input. Median of repeated runs; prints a
table and asserts nothing.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_bench.py [--threads 1]
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

import reel
from timing import median_seconds

try:
    import torch
except ImportError:  # the PyTorch column is left out
    torch = None




def per_call(fn, calls):
    """Median over 7 batches of `calls` calls: seconds per call (for sub-microsecond calls)."""
    fn()
    out = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls)
    return statistics.median(out)


def cpp_seconds(compiled, args, calls):
    return statistics.median(reel._reel._time_cpp_calls(compiled, args, calls) for _ in range(7))


def randn(shape, seed, dtype, scale=1.0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype) * dtype(scale)


# Each workload: (name, f written with reel, arguments as NumPy arrays, the same in PyTorch).
def sigmoid5():
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    return ("sum(sigmoid(x)), n=5 f64", lambda x: reel.sum(reel.sigmoid(x)), [x],
            lambda x: torch.sigmoid(x).sum())


def matmul_bias():
    W, b, x = randn((128, 784), 1, np.float64), randn((128, 1), 2, np.float64), randn((784, 100), 3, np.float64)
    return ("(c) sum(matmul(W,x)+b), 128x784x100 f64", lambda W, b, x: reel.sum(reel.matmul(W, x) + b), [W, b, x],
            lambda W, b, x: (W @ x + b).sum())


def mlp(dtype):
    W1, b1 = randn((128, 784), 1, dtype, 0.05), randn((128, 1), 2, dtype)
    W2, b2 = randn((10, 128), 3, dtype, 0.1), randn((10, 1), 4, dtype)
    x, y = randn((784, 100), 5, dtype), randn((10, 100), 6, dtype)
    rx, ry = reel.tensor(x), reel.tensor(y)
    tx, ty = (torch.from_numpy(x), torch.from_numpy(y)) if torch else (None, None)
    name = "f64" if dtype == np.float64 else "f32"
    return (f"(d) 2-layer MLP, 784-128-10, batch 100 {name}",
            lambda W1, b1, W2, b2: reel.sum(reel.square(reel.matmul(W2, reel.tanh(reel.matmul(W1, rx) + b1)) + b2 - ry)),
            [W1, b1, W2, b2], lambda W1, b1, W2, b2: ((W2 @ torch.tanh(W1 @ tx + b1) + b2 - ty) ** 2).sum())


def softmax_xent():
    rows, cols = 256, 1000
    z = randn((rows, cols), 7, np.float32, 3.0)
    y = np.zeros((rows, cols), np.float32)
    y[np.arange(rows), (np.arange(rows) * 37) % cols] = 1
    ry = reel.tensor(y)
    ty = torch.from_numpy(y) if torch else None
    return ("(e) softmax cross-entropy, 256x1000 f32", lambda z: -reel.sum(reel.log_softmax(z, 1) * ry) / rows, [z],
            lambda z: -(torch.log_softmax(z, 1) * ty).sum() / rows)


def logsumexp():
    x = randn((1000000,), 8, np.float64, 10.0)
    return ("(f) logsumexp, n=1000000 f64", lambda x: reel.logsumexp(x), [x], lambda x: torch.logsumexp(x, 0))


def conv_layer():
    x, w = randn((32, 3, 32, 32), 9, np.float32), randn((16, 3, 3, 3), 10, np.float32, 0.2)
    r = randn((32, 16, 32, 32), 11, np.float32)
    rr = reel.tensor(r)
    tr = torch.from_numpy(r) if torch else None
    return ("(g) conv2d layer, 32x3x32x32, 16x3x3x3 f32",
            lambda x, w: reel.sum(reel.conv2d(x, w, padding=1) * rr), [x, w],
            lambda x, w: (torch.nn.functional.conv2d(x, w, padding=1) * tr).sum())


def torch_step(tf, args):
    ts = [torch.from_numpy(a.copy()).requires_grad_() for a in args]

    def step():
        for t in ts:
            t.grad = None
        tf(*ts).backward()

    return step


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1, help="threads for Reel and PyTorch (default 1)")
    a = ap.parse_args()
    reel.set_num_threads(a.threads)
    if torch:
        torch.set_num_threads(a.threads)
    print(f"Reel from Python vs the same compiled gradient called from C++ and vs eager PyTorch "
          f"({'PyTorch ' + torch.__version__ if torch else 'PyTorch not installed'}), {a.threads} thread(s), "
          f"{os.cpu_count()} cores; median times")
    header = f"{'workload':44} {'Python':>10} {'C++':>10} {'Py-C++':>9} {'Py/C++':>7} {'PyTorch':>10} {'Reel/PyTorch':>12}"
    print(header)
    print("-" * len(header))
    for make in [sigmoid5, matmul_bias, lambda: mlp(np.float64), lambda: mlp(np.float32), softmax_xent, logsumexp,
                 conv_layer]:
        name, f, args, tf = make()
        targs = [reel.Tensor(x) for x in args]
        g = reel.compile_grad(f, *targs)
        # agreement with the interpreter before timing
        want = reel.grad(f, *targs).grads
        got = g(*targs)[1:]
        err = max(float(np.max(np.abs(np.asarray(u) - np.asarray(v)) / (1 + np.abs(np.asarray(v)))))
                  for u, v in zip(got, want))
        assert err < 1e-3, (name, err)
        small = targs[0].size <= 16
        if small:
            py = per_call(lambda: g(*targs), 20000)
            cpp = cpp_seconds(g.compiled, targs, 20000)
        else:
            py = median_seconds(lambda: g(*targs))
            cpp = statistics.median(reel._reel._time_cpp_calls(g.compiled, targs, 5) for _ in range(9))
        th = None
        if torch:
            th = per_call(torch_step(tf, args), 2000) if small else median_seconds(torch_step(tf, args))
        diff = (py - cpp) * 1e6
        torch_cols = f"{th * 1e6:8.1f}us {py / th:11.2f}x" if th else f"{'-':>10} {'-':>12}"
        print(f"{name:44} {py * 1e6:8.2f}us {cpp * 1e6:8.2f}us {diff:+7.2f}us {py / cpp:6.3f}x {torch_cols}")
        if small:
            sg = reel.simplegrad(f, compile_after=1)
            sg(*targs)
            hit = per_call(lambda: sg(*targs), 20000)
            print(f"{'  the same through reel.simplegrad(f) (a hit)':44} {hit * 1e6:8.2f}us {cpp * 1e6:8.2f}us "
                  f"{(hit - cpp) * 1e6:+7.2f}us {hit / cpp:6.3f}x")
    print("Python: g(*args) of g = reel.compile_grad(f, *args); C++: the same compiled gradient called in a C++ loop; "
          "Py-C++: what calling from Python adds per call.")


if __name__ == "__main__":
    sys.exit(main())
