#!/usr/bin/env python3
"""Draws a compiled function's memory plan as a timeline of its workspace buffers.

Input: the text of reel::plan_text(tape) or `reel-opt --print-plan` (a file, or standard
input with -). Each buffer line, "buffer [%5, %7]: offset 0, 36032 bytes, steps 0..2",
becomes a rectangle: steps along x (its live range, inclusive), bytes along y (its
offset and size in the workspace). Buffers that share memory at different times sit at
the same height; the dashed line is the liveness lower bound.

  ./build/tools/reel-opt --passes=grad,simplify,cse,dce --print-plan f.tape > plan.txt
  /usr/bin/python3 tools/plan_timeline.py plan.txt plan.png [--title TEXT]

Needs matplotlib (scripts/install-bench-deps.sh); for pictures only, never for Reel.
"""
import argparse
import re
import sys

BUFFER = re.compile(r"^  buffer \[([^\]]*)\]: offset (\d+), (\d+) bytes, steps (\d+)\.\.(\d+)")
TOTAL = re.compile(r"^memory: (\d+) workspace buffers, (\d+) bytes, liveness lower bound (\d+) bytes")


def parse(text):
    """The top-level plan's buffers [(vars, offset, bytes, first, last)] and (total, bound)."""
    buffers, totals = [], None
    for line in text.splitlines():
        if line.startswith("memory: ") and totals is None:
            m = TOTAL.match(line)
            if not m:
                raise SystemExit(f"plan_timeline: cannot read the memory line: {line!r}")
            totals = (int(m.group(2)), int(m.group(3)))
            continue
        if totals is not None:
            m = BUFFER.match(line)
            if m:
                buffers.append((m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5))))
            elif line.startswith("  buffer"):
                raise SystemExit(f"plan_timeline: cannot read a buffer line: {line!r}")
            elif not line.startswith("  "):
                break  # (what follows: threads, ...)
    if totals is None:
        raise SystemExit("plan_timeline: no 'memory:' line: is this reel-opt --print-plan's output?")
    return buffers, totals


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan", help="plan text (reel-opt --print-plan), or - for standard input")
    ap.add_argument("out", help="image to write (.png, .svg, .pdf)")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    text = sys.stdin.read() if a.plan == "-" else open(a.plan).read()
    buffers, (total, bound) = parse(text)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    steps = max([b[4] for b in buffers], default=0) + 1
    scale, unit = (1024.0, "KiB") if total < 4 << 20 else (1024.0 * 1024.0, "MiB")
    fig, ax = plt.subplots(figsize=(10, 5))
    colors = plt.get_cmap("tab20").colors
    for i, (names, offset, size, first, last) in enumerate(buffers):
        ax.add_patch(Rectangle((first - 0.4, offset / scale), last - first + 0.8, size / scale,
                               facecolor=colors[i % len(colors)], edgecolor="black", linewidth=0.4, alpha=0.85))
        if size / max(total, 1) > 0.04 and last - first >= 1:
            ax.text((first + last) / 2, (offset + size / 2) / scale, names.split(",")[0], ha="center", va="center",
                    fontsize=7)
    ax.axhline(bound / scale, color="gray", linestyle="--", linewidth=0.8)
    ax.set_xlim(-1, steps)
    ax.set_ylim(0, max(total, 1) / scale * 1.05)
    ax.set_xlabel("step of the schedule")
    ax.set_ylabel(f"workspace offset ({unit})")
    ax.set_title(a.title or f"{len(buffers)} buffers, {total / scale:.1f} {unit} workspace "
                 f"(liveness lower bound {bound / scale:.1f} {unit}, dashed)")
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)
    print(f"wrote {a.out}: {len(buffers)} buffers over {steps} steps, {total} bytes")


if __name__ == "__main__":
    main()
