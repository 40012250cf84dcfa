#!/usr/bin/python3
"""PyTorch against compiled Reel on bench/'s workloads (e), (f) and (g): the value and
gradient of the same computations as reel_bench's rows, eager PyTorch and Reel's
compiled gradient at the same thread count, for each count of --threads (default: 1
and every core), median of repeated runs. Reel's times come from
`reel_bench --workloads-only --threads N` run at that point of the same run. Needs
Debian's python3-torch (scripts/install-bench-deps.sh), run with Debian's
/usr/bin/python3. Prints a table with Reel/PyTorch per workload and thread count;
asserts nothing."""
import argparse
import json
import os
import subprocess
import tempfile

import torch

from timing import median_seconds
from torch_threads import set_torch_threads




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


def reel_times(build, threads):
    """Reel's compiled gradient times (seconds) by workload name, from reel_bench."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "reel.json")
        subprocess.run([os.path.join(build, "bench", "reel_bench"), "--workloads-only", "--threads", str(threads),
                        "--out", out], check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            rows = json.load(f)
    return {f"{r['workload']} {r['dtype']}": r["compiled_ns"] * 1e-9 for r in rows if "workload" in r}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default=f"1,{os.cpu_count() or 1}",
                    help="thread counts, comma-separated (default: 1 and every core)")
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build"))
    args = ap.parse_args()
    counts = [int(t) for t in args.threads.split(",")]
    print(f"PyTorch {torch.__version__} against compiled Reel; median time of value + gradient")
    print(f"{'workload':<46} {'threads':>7} {'PyTorch':>12} {'Reel':>12} {'Reel/PyTorch':>13}")
    steps = [make() for make in (softmax_xent, logsumexp, conv_layer)]
    results = []
    for t in counts:
        reel = reel_times(args.build, t)
        set_torch_threads(torch, t)  # (its OpenBLAS too)
        for name, step in steps:
            pt = median_seconds(step)
            r = reel.get(name)
            ratio = f"{r / pt:>13.2f}" if r else f"{'-':>13}"
            reel_ms = f"{r * 1e3:>9.2f} ms" if r else f"{'-':>12}"
            print(f"{name:<46} {t:>7} {pt * 1e3:>9.2f} ms {reel_ms} {ratio}", flush=True)
            results.append({"workload": name, "threads": t, "pytorch_s": pt, "reel_s": r})
    return results


if __name__ == "__main__":
    main()
