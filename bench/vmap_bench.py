#!/usr/bin/python3
"""Issue 20's goals for batching, side by side in one run on one thread (f32; --threads N for N):
per-example gradients of the Fashion-MNIST MLP 784-256-128-10 (relu, log-softmax
cross-entropy) for a batch of 100 with Reel's vmap(grad) against one batch gradient
(Reel's and PyTorch's) and against functorch's vmap(grad); the Jacobian of
f(x) = W2 tanh(W1 x) (100 -> 100) with Reel's forward (vector-mode jvp_tape) and reverse
(vmap_tape over the vjp tape's cotangents) against functorch's jacfwd and jacrev.

  /usr/bin/python3 bench/vmap_bench.py [--build build] [--threads 1]

Reel's times come from BUILD/bench/vmap_bench (median of timed calls, compiled; it also
checks the per-example gradients' sum against the batch gradient and forward against
reverse), PyTorch's from this process (Debian's python3-torch 1.13 with functorch, median
of timed calls). Inputs are random, the same shapes on both sides. Prints the tables
(markdown) with ratios; asserts nothing."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
from functorch import grad, jacfwd, jacrev, vmap

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gradbench"))
from protocol import keep_freed_memory  # noqa: E402
from torch_threads import set_torch_threads  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def median_seconds(fn, min_runs=20, min_seconds=0.5):
    fn()  # warm
    times, total = [], 0.0
    while len(times) < min_runs or total < min_seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        total += times[-1]
    return statistics.median(times)


def torch_mlp():
    g = torch.Generator().manual_seed(1)
    n = 100
    shapes = [(256, 784), (256,), (128, 256), (128,), (10, 128), (10,)]
    scales = [0.05, 0.1, 0.06, 0.1, 0.09, 0.1]  # as bench/vmap_bench.cpp's
    params = [torch.randn(s, generator=g) * c for s, c in zip(shapes, scales)]
    X = torch.rand(n, 784, generator=g)
    Y = torch.nn.functional.one_hot((torch.arange(n) * 7) % 10, 10).float()

    def loss_one(p, x, y):
        h1 = torch.relu(p[0] @ x + p[1])
        h2 = torch.relu(p[2] @ h1 + p[3])
        z = p[4] @ h2 + p[5]
        return -(y * torch.log_softmax(z, 0)).sum()

    def loss_batch(p, X, Y):
        h1 = torch.relu(X @ p[0].T + p[1])
        h2 = torch.relu(h1 @ p[2].T + p[3])
        z = h2 @ p[4].T + p[5]
        return -(Y * torch.log_softmax(z, 1)).sum()

    leaves = [p.clone().requires_grad_() for p in params]

    def batch():
        return torch.autograd.grad(loss_batch(leaves, X, Y), leaves)

    per_example = vmap(grad(loss_one), in_dims=(None, 0, 0))

    def functorch_vmap_grad():
        return per_example(params, X, Y)

    def loop():  # one autograd gradient per example
        return [torch.autograd.grad(loss_one(leaves, X[i], Y[i]), leaves) for i in range(n)]
    got = functorch_vmap_grad()
    check = max((a.sum(0) - b).abs().max().item() for a, b in zip(got, batch()))
    return {"batch": median_seconds(batch), "vmap_grad": median_seconds(functorch_vmap_grad),
            "loop": median_seconds(loop, min_runs=5), "check": check}


def torch_jacobian():
    g = torch.Generator().manual_seed(2)
    n = 100
    W1, W2 = torch.randn(n, n, generator=g) * 0.1, torch.randn(n, n, generator=g) * 0.1
    x = torch.randn(n, generator=g)

    def f(v):
        return W2 @ torch.tanh(W1 @ v)
    jf, jr = jacfwd(f), jacrev(f)
    check = (jf(x) - jr(x)).abs().max().item()
    return {"jacfwd": median_seconds(lambda: jf(x)), "jacrev": median_seconds(lambda: jr(x)), "check": check}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=1, help="Reel's and PyTorch's thread count (default 1)")
    args = ap.parse_args()
    keep_freed_memory()  # PyTorch at its fastest (see gradbench/protocol.py)
    set_torch_threads(torch, args.threads)  # (its OpenBLAS too)
    t = str(args.threads)
    exe = os.path.join(args.build, "bench", "vmap_bench")
    out = subprocess.run([exe], capture_output=True, text=True, check=True,
                         env=dict(os.environ, OPENBLAS_NUM_THREADS=t, OMP_NUM_THREADS=t, REEL_NUM_THREADS=t,
                                  REEL_CACHE_DIR="off"))
    reel = {r["name"]: r for r in map(json.loads, out.stdout.splitlines())}
    rb = reel["mlp batch gradient"]["seconds"]
    rv = reel["mlp per-example gradients (vmap(grad))"]["seconds"]
    floor = reel["memset of the per-example gradients' bytes"]
    tm = torch_mlp()
    us = lambda s: f"{s * 1e6:.1f} us"  # noqa: E731
    print(f"\n## Per-example gradients, MLP 784-256-128-10, batch 100, f32, {args.threads} thread(s) (median)\n")
    print("| computation | time | / Reel batch gradient | / functorch vmap(grad) |")
    print("|---|---|---|---|")
    for name, t in [("Reel: one batch gradient (compiled)", rb), ("Reel: vmap(grad), compiled", rv),
                    (f"memset of the per-example gradients' {floor['check'] / 1e6:.0f} MB (a floor)", floor["seconds"]),
                    ("PyTorch: one batch gradient (autograd)", tm["batch"]),
                    ("functorch: vmap(grad)", tm["vmap_grad"]),
                    ("PyTorch: a loop of 100 autograd gradients", tm["loop"])]:
        print(f"| {name} | {us(t)} | {t / rb:.2f}x | {t / tm['vmap_grad']:.2f}x |")
    print(f"\nchecks (largest |sum of per-example gradients - batch gradient|): Reel "
          f"{reel['mlp per-example gradients (vmap(grad))']['check']:.2g}, functorch {tm['check']:.2g}")

    tj = torch_jacobian()
    jf = reel["jacobian 100->100 forward (jvp_tape(tape, 100))"]
    jr = reel["jacobian 100->100 reverse (vmap_tape of the vjp tape)"]
    print(f"\n## Jacobian of f(x) = W2 tanh(W1 x), 100 -> 100, f32, {args.threads} thread(s) (median)\n")
    print("| computation | time | / functorch jacrev | / functorch jacfwd |")
    print("|---|---|---|---|")
    for name, t in [("Reel: forward, jvp_tape(tape, 100), compiled", jf["seconds"]),
                    ("Reel: reverse, vmap_tape(vjp tape) over 100 cotangents, compiled", jr["seconds"]),
                    ("functorch: jacrev", tj["jacrev"]), ("functorch: jacfwd", tj["jacfwd"])]:
        print(f"| {name} | {us(t)} | {t / tj['jacrev']:.3f}x | {t / tj['jacfwd']:.3f}x |")
    print(f"\nchecks (largest |forward - reverse|): Reel {jf['check']:.2g}, functorch {tj['check']:.2g}")

    print("\n## The goals (issue 20)\n")
    print("| goal | target | now |")
    print("|---|---|---|")
    print(f"| per-example gradients (vmap(grad)) / one batch gradient (Reel's, {us(rb)}) | <= 3x | {rv / rb:.2f}x |")
    print(f"| (the floor: memset of the outputs' bytes, {us(floor['seconds'])}, / one batch gradient) | | "
          f"{floor['seconds'] / rb:.2f}x |")
    print(f"| per-example gradients: Reel vmap(grad) / functorch vmap(grad) ({us(tm['vmap_grad'])}) | < 1x | "
          f"{rv / tm['vmap_grad']:.2f}x |")
    best = min(jf["seconds"], jr["seconds"])
    print(f"| jacobian 100 -> 100: Reel's faster of forward and reverse ({us(best)}) / functorch jacrev "
          f"({us(tj['jacrev'])}) | < 1x | {best / tj['jacrev']:.3f}x |")
    print(f"| jacobian 100 -> 100: Reel / functorch jacfwd ({us(tj['jacfwd'])}) | < 1x | {best / tj['jacfwd']:.3f}x |")


if __name__ == "__main__":
    sys.exit(main())
