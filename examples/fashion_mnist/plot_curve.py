#!/usr/bin/env python3
"""Plots the learning curve written by fashion_mnist_train (curve.csv) as a PNG."""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst):
    steps, losses, acc_steps, accs = [], [], [], []
    with open(src) as f:
        for row in csv.DictReader(f):
            if row["train_loss"]:
                steps.append(int(row["step"]))
                losses.append(float(row["train_loss"]))
            if row["test_accuracy"]:
                acc_steps.append(int(row["step"]))
                accs.append(100 * float(row["test_accuracy"]))
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, losses, color="tab:blue", label="training loss (mean over 50 steps)")
    ax.set_xlabel("training step (mini-batch)")
    ax.set_ylabel("cross-entropy loss", color="tab:blue")
    right = ax.twinx()
    right.plot(acc_steps, accs, "o-", color="tab:orange", label="test accuracy")
    right.set_ylabel("test accuracy (%)", color="tab:orange")
    ax.set_title("Reel: Fashion-MNIST learning curve")
    fig.tight_layout()
    fig.savefig(dst, dpi=120)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot_curve.py curve.csv curve.png")
    main(sys.argv[1], sys.argv[2])
