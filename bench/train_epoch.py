#!/usr/bin/python3
"""One training epoch of the Fashion-MNIST MLP (784-256-128-10, relu, softmax
cross-entropy, SGD lr 0.1, batches of 100, f32), Reel against PyTorch, in one run, at
each thread count of --threads (default: 1 and every core), the same count for both:
Reel is examples/fashion_mnist/train.cpp (./build/examples/fashion_mnist_train,
REEL_NUM_THREADS=N, which sets OpenBLAS's too), PyTorch the same model, data order and
update written here (torch.set_num_threads(N)). Each trains for --epochs epochs
(default 3); the table shows every epoch's time (the first includes Reel's trace and
compile, unless the disk code cache has it), the test accuracy after the last and
Reel's peak resident memory (its process's VmHWM, which it reports), then Reel/PyTorch for the
steady-state epoch (the median of the epochs after the first). Writes the numbers to
build/bench/train_epoch.json (--out FILE for elsewhere).
Needs dataset-fashion-mnist, python3-torch and a build (README, Benchmark)."""
import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

from torch_threads import set_torch_threads

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def torch_epochs(epochs, batch, lr, threads):
    set_torch_threads(torch, threads)  # (its OpenBLAS too)
    torch.manual_seed(0)
    x = torch.from_numpy(read_idx(f"{DATA}/train-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255)
    y = torch.from_numpy(read_idx(f"{DATA}/train-labels-idx1-ubyte.gz").astype(np.int64))
    tx = torch.from_numpy(read_idx(f"{DATA}/t10k-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255)
    ty = torch.from_numpy(read_idx(f"{DATA}/t10k-labels-idx1-ubyte.gz").astype(np.int64))
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128),
                                torch.nn.ReLU(), torch.nn.Linear(128, 10))
    for m in model:
        if isinstance(m, torch.nn.Linear):  # He initialisation, zero biases, as in train.cpp
            torch.nn.init.kaiming_normal_(m.weight)
            torch.nn.init.zeros_(m.bias)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    seconds = []
    n = x.shape[0] // batch * batch
    for _ in range(epochs):
        order = torch.randperm(x.shape[0])
        t0 = time.perf_counter()
        for b in range(0, n, batch):
            idx = order[b:b + batch]
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        seconds.append(time.perf_counter() - t0)
    with torch.no_grad():
        accuracy = (model(tx).argmax(1) == ty).float().mean().item()
    return seconds, accuracy


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", default=f"1,{os.cpu_count() or 1}",
                        help="thread counts, comma-separated (default: 1 and every core)")
    parser.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    parser.add_argument("--out", help="where to write the results (default: BUILD/bench/train_epoch.json; "
                        "bench/results/train_epoch.json is the recorded run)")
    args = parser.parse_args()
    if args.out is None:  # under the build tree: a run does not change tracked files
        args.out = os.path.join(args.build, "bench", "train_epoch.json")
    exe = os.path.join(args.build, "examples", "fashion_mnist_train")
    counts = [int(t) for t in args.threads.split(",")]
    steady = lambda s: statistics.median(s[1:]) if len(s) > 1 else s[0]  # noqa: E731
    results = []
    print(f"Fashion-MNIST MLP 784-256-128-10, batches of 100, SGD, f32; Reel and PyTorch at each thread count")
    print(f"{'':10} {'threads':>7} " + " ".join(f"{'epoch ' + str(i + 1):>9}" for i in range(args.epochs)) +
          f" {'accuracy':>9} {'peak RSS':>9}")
    for t in counts:
        env = dict(os.environ, REEL_NUM_THREADS=str(t), OPENBLAS_NUM_THREADS=str(t), OMP_NUM_THREADS=str(t))
        with subprocess.Popen([exe, "--epochs", str(args.epochs), "--quiet", "--summary", "--out",
                               os.path.join(args.build, "fashion_mnist_bench")],
                              env=env, stdout=subprocess.PIPE, text=True) as proc:
            out = proc.stdout.read()
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            sys.exit(f"{exe} failed ({proc.returncode})")
        reel = json.loads(out.strip().splitlines()[-1])
        # Its own VmHWM (the summary's): wait4's ru_maxrss would include this Python
        # process's memory (torch, the data) copied at fork, before the exec.
        if reel.get("peak_rss_mb", -1) < 0:
            reel["peak_rss_mb"] = usage.ru_maxrss / 1024  # (KiB on Linux)
        torch_seconds, torch_accuracy = torch_epochs(args.epochs, 100, 0.1, t)
        print(f"{'Reel':10} {t:>7} " + " ".join(f"{s:8.2f}s" for s in reel["epoch_seconds"]) +
              f" {100 * reel['test_accuracy']:8.2f}% {reel['peak_rss_mb']:6.0f} MB")
        print(f"{'PyTorch':10} {t:>7} " + " ".join(f"{s:8.2f}s" for s in torch_seconds) +
              f" {100 * torch_accuracy:8.2f}%")
        ratio = steady(reel["epoch_seconds"]) / steady(torch_seconds)
        print(f"Reel/PyTorch, steady-state epoch, {t} thread{'s' if t > 1 else ''}: {ratio:.2f}", flush=True)
        results.append({"threads": t, "reel": reel,
                        "torch": {"epoch_seconds": torch_seconds, "test_accuracy": torch_accuracy},
                        "reel_over_torch_steady_epoch": ratio})
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
