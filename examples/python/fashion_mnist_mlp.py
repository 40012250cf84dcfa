#!/usr/bin/python3
"""The Fashion-MNIST MLP (784-256-128-10, relu) of examples/fashion_mnist/train.cpp, written in
Python: the model is a dict of tensors, its loss a Python function, its gradient the cached
compiled gradient reel.simplegrad(loss), and each step an SGD update with reel.tree_map.
Reads Debian's dataset-fashion-mnist (scripts/install-bench-deps.sh installs it).

    PYTHONPATH=build/python /usr/bin/python3 examples/python/fashion_mnist_mlp.py [--epochs 1] [--limit 60000]
"""
import argparse
import gzip
import os
import time

import numpy as np

import reel


def read_idx(path):
    """An IDX file (gzip'd) as a NumPy array."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def dense(n_in, n_out, seed):
    return {"W": reel.randn([n_in, n_out], seed, reel.f32) * float(np.sqrt(2.0 / n_in)),
            "b": reel.zeros([n_out], reel.f32)}


def logits(model, x):
    h = x
    for i, layer in enumerate(model["layers"]):
        h = reel.matmul(h, layer["W"]) + layer["b"]
        if i + 1 < len(model["layers"]):
            h = reel.relu(h)
    return h


def loss(model, x, y):
    """Mean softmax cross-entropy; no gradient is wanted for the images and labels."""
    z = logits(model, reel.nodiff(x))
    return reel.mean(reel.logsumexp(z, 1) - reel.sum(z * reel.nodiff(y), 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--limit", type=int, default=60000, help="training images used (default all 60000)")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()

    images = read_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz"))[: a.limit]
    labels = read_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz"))[: a.limit]
    test_x = read_idx(os.path.join(a.data, "t10k-images-idx3-ubyte.gz")).reshape(-1, 784).astype(np.float32) / 255
    test_y = read_idx(os.path.join(a.data, "t10k-labels-idx1-ubyte.gz"))
    onehot = np.eye(10, dtype=np.float32)

    model = {"layers": [dense(784, 256, 1), dense(256, 128, 2), dense(128, 10, 3)]}
    grad = reel.simplegrad(loss)  # compiled once per signature, then cached
    predict = reel.jit(lambda m, x: reel.argmax(logits(m, x), 1))
    lr = a.lr
    rng = np.random.default_rng(0)
    batches = len(images) // a.batch
    for epoch in range(1, a.epochs + 1):
        order = rng.permutation(len(images))
        start = time.perf_counter()
        for b in range(batches):
            rows = order[b * a.batch:(b + 1) * a.batch]
            x = images[rows].reshape(a.batch, 784).astype(np.float32) / 255  # NumPy arrays are tensors
            y = onehot[labels[rows]]
            value, dmodel, _, _ = grad(model, x, y)
            model = reel.tree_map(lambda w, dw: w - lr * dw, model, dmodel)
            if (b + 1) % 100 == 0 or b + 1 == batches:
                print(f"epoch {epoch} batch {b + 1}/{batches} loss {value.item():.4f}", flush=True)
        seconds = time.perf_counter() - start
        guess = np.concatenate([predict(model, test_x[s:s + 1000]).numpy() for s in range(0, len(test_x), 1000)])
        print(f"epoch {epoch}: {seconds:.2f} s ({seconds / batches * 1e6:.0f} us per step), "
              f"test accuracy {np.mean(guess == test_y):.4f}")
    print(grad.cache_info())


if __name__ == "__main__":
    main()
