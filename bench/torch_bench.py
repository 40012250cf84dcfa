#!/usr/bin/python3
"""PyTorch's time for bench/'s issue-8 workloads: the value and gradient of the same
computations as reel_bench rows (e), (f) and (g), eager PyTorch on one thread and on
all threads, median of repeated runs. Needs Debian's python3-torch
(scripts/install-bench-deps.sh), run with Debian's /usr/bin/python3. Prints one line per workload; compare with the
'compiled' column of ./build/bench/reel_bench."""
import os
import statistics
import time

import torch


def median_seconds(fn, min_runs=20, min_seconds=0.5):
    fn()  # warm up
    times = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def softmax_xent():
    rows, cols = 256, 1000
    z = (torch.randn(rows, cols, dtype=torch.float32) * 3).requires_grad_()
    y = torch.zeros(rows, cols, dtype=torch.float32)
    y[torch.arange(rows), (torch.arange(rows) * 37) % cols] = 1

    def step():
        z.grad = None
        loss = -(torch.log_softmax(z, 1) * y).sum() / rows
        loss.backward()

    return "(e) softmax cross-entropy, 256x1000 f32", step


def logsumexp():
    x = (torch.randn(1000000, dtype=torch.float64) * 10).requires_grad_()

    def step():
        x.grad = None
        torch.logsumexp(x, 0).backward()

    return "(f) logsumexp, n=1000000 f64", step


def conv_layer():
    x = torch.randn(32, 3, 32, 32, dtype=torch.float32, requires_grad=True)
    w = (torch.randn(16, 3, 3, 3, dtype=torch.float32) * 0.2).requires_grad_()
    r = torch.randn(32, 16, 32, 32, dtype=torch.float32)

    def step():
        x.grad = None
        w.grad = None
        (torch.nn.functional.conv2d(x, w, padding=1) * r).sum().backward()

    return "(g) conv2d layer, 32x3x32x32, 16x3x3x3 f32", step


def main():
    all_threads = os.cpu_count() or 1
    print(f"PyTorch {torch.__version__}; median time of value + gradient")
    print(f"{'workload':<46} {'1 thread':>12} {f'{all_threads} threads':>12}")
    for make in (softmax_xent, logsumexp, conv_layer):
        name, step = make()
        torch.set_num_threads(1)
        one = median_seconds(step)
        torch.set_num_threads(all_threads)
        many = median_seconds(step)
        print(f"{name:<46} {one * 1e3:>9.2f} ms {many * 1e3:>9.2f} ms")


if __name__ == "__main__":
    main()
