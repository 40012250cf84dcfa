#!/usr/bin/python3
"""Issue 20's GradBench goals (batching), measured side by side in one run: two builds of
Reel (--old: a worktree of main before issue 20; --new: this checkout's build), PyTorch
(bench/gradbench/run.py's versions, one thread, in this process) and GradBench's `manual`
tool where its numbers are known (see MANUAL: `manual` is not built here).

  /usr/bin/python3 bench/gradbench/goals20.py --old ../old20/build [--new build] [--evals ba,ht,kmeans]
                                     [--rounds 1] [--min-seconds 0.3] [--json FILE]

- ba: every default workload of bench/gradbench (ba1 to ba14 of ../shared/data/adbench/ba).
- ht: every instance of both hand models that ../shared holds: the small model's
  simple and complicated hand1 and hand2 (ADBench's files under
  ../shared/data/adbench/hand, read here into GradBench's input as GradBench's
  evals/ht/io.py does), and the big model's complicated hand1 (the recorded transcript).
  GradBench's default run also has the big model's simple hand1-2 and complicated hand2,
  whose files are not in ../shared.
- kmeans: run.py's twelve workloads.

Each tool runs objective (primal) then derivative on every workload, GradBench's way
(runs until min_seconds; the mean `evaluate`; Reel's `prepare` is trace + compile + one
run). Reel's disk code cache is off (REEL_CACHE_DIR=off). Outputs are compared with
GradBench's rule (new against old, PyTorch against new). With --rounds > 1 each figure
is the median over the rounds and the order of old and new alternates. It asserts
nothing: it prints the tables (markdown) with ratios and writes the numbers as JSON
(--json, default NEW/bench/goals20.json)."""
import argparse
import json
import os
import statistics
import sys

import run
from protocol import Tool, compare, keep_freed_memory

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
ENV = {"REEL_CACHE_DIR": "off"}

# GradBench's `manual` tool (hand-derived Jacobians), where its time is known: it is not
# built here. ba3 and ba14: issue 20 (measured with GradBench's own evals on this
# machine); ba1, ht complicated_big/hand1 and kmeans k=100,n=1000,d=8: the recorded
# transcripts of ../shared/data/gradbench (mean evaluate of `manual`'s reply).
MANUAL = {("ba", "ba1_n49_m7776_p31843", "jacobian"): (5.442e-3, "transcript"),
          ("ba", "ba3_n161_m48126_p182072", "jacobian"): (62e-3, "issue 20"),
          ("ba", "ba14_n356_m226730_p1255268", "jacobian"): (523e-3, "issue 20"),
          ("ht", "complicated_big/hand1", "jacobian"): (21.141e-3, "transcript"),
          ("kmeans", "k=100,n=1000,d=8", "dir"): (0.2673e-3, "transcript")}


# ---- ht instances -------------------------------------------------------------------------

def hand_model(folder):
    """ADBench's hand model files (bones.txt, vertices.txt, triangles.txt; fields split by
    ':') as GradBench's ht input model."""
    bones = [line.strip().split(":") for line in open(os.path.join(folder, "bones.txt")) if line.strip()]
    n = len(bones)

    def mat(fields):
        v = [float(x) for x in fields]
        return [v[4 * i:4 * i + 4] for i in range(4)]
    positions, weights = [], []
    for line in open(os.path.join(folder, "vertices.txt")):
        a = line.strip().split(":")
        if len(a) < 9:
            continue
        positions.append([float(x) for x in a[:3]] + [1.0])
        w = [0.0] * n
        for i in range(int(a[8])):
            w[int(a[9 + 2 * i])] = float(a[10 + 2 * i])
        weights.append(w)
    triangles = [[int(x) for x in line.strip().split(":")]
                 for line in open(os.path.join(folder, "triangles.txt")) if line.strip()]
    return {"bone_count": n, "bone_names": [b[0] for b in bones], "parents": [int(b[1]) for b in bones],
            "base_relatives": [mat(b[2:18]) for b in bones], "inverse_base_absolutes": [mat(b[18:34]) for b in bones],
            "base_positions": positions, "weights": weights, "triangles": triangles, "is_mirrored": False}


def hand_instance(path, model, complicated):
    lines = open(path).read().split("\n")
    npts, ntheta = (int(x) for x in lines[0].split()[:2])
    rows = [lines[1 + i].split() for i in range(npts)]
    at = 1 + npts
    us = []
    if complicated:
        us = [[float(x) for x in lines[at + i].split()] for i in range(npts)]
        at += npts
    theta = [float(lines[at + i]) for i in range(ntheta)]
    return {"theta": theta, "us": us, "data": {"model": model, "correspondences": [int(r[0]) for r in rows],
                                               "points": [[float(x) for x in r[1:4]] for r in rows]}}


def ht_workloads():
    hand = os.path.join(SHARED, "data", "adbench", "hand")
    for kind in ("simple_small", "complicated_small"):
        folder = os.path.join(hand, kind)
        model = hand_model(os.path.join(folder, "model"))
        for i in (1, 2):
            name = next(f for f in sorted(os.listdir(folder)) if f.startswith(f"hand{i}_"))
            inp = hand_instance(os.path.join(folder, name), model, kind.startswith("complicated"))
            yield f"{kind}/hand{i}", len(inp["data"]["correspondences"]), inp
    for _, size, inp in run.ht_workloads():  # the big model's complicated hand1
        yield "complicated_big/hand1", size, inp


WORKLOADS = {"ba": (run.ba_workloads, "objective", "jacobian"), "ht": (ht_workloads, "objective", "jacobian"),
             "kmeans": (run.kmeans_workloads, "cost", "dir")}


# ---- running ---------------------------------------------------------------------------------

def measure(evals, builds, rounds, min_seconds, quick=False):
    """{(tool, eval, workload, function): {"time": [...], "prepare": [...], "output", "error"}}"""
    out, order = {}, []
    for r in range(rounds):
        print(f"round {r + 1} of {rounds}", file=sys.stderr, flush=True)
        tags = [tag for tag, _ in builds]
        if r % 2:
            tags.reverse()
        for ev in evals:
            gen, primal, deriv = WORKLOADS[ev]
            procs = {tag: Tool(tag, os.path.join(dict(builds)[tag], "tools", "reel-gradbench"), ENV) for tag in tags}
            for i, (label, size, inp) in enumerate(gen()):
                if quick and i >= 2:
                    break
                if r == 0:
                    order.append((ev, label, size))
                for tool in tags + ["torch"]:
                    for fn in (primal, deriv):
                        rec = out.setdefault((tool, ev, label, fn),
                                             {"time": [], "prepare": [], "output": None, "error": None})
                        if rec["error"]:
                            continue
                        try:
                            if tool == "torch":
                                t, o = run.time_torch(lambda: run.TORCH[ev](inp, fn), min_seconds)
                                p = None
                            else:
                                t, o, p = procs[tool].evaluate(ev, fn, inp, min_seconds)
                                if t is None:
                                    rec["error"] = p
                                    continue
                        except Exception as e:  # noqa: BLE001
                            rec["error"] = str(e)[:200]
                            continue
                        rec["time"].append(t)
                        rec["prepare"].append(p)
                        rec["output"] = o
                    print(f"  {tool} {ev} {label}: " + ", ".join(
                        f"{fn} {ms(med(out[(tool, ev, label, fn)]['time']))}" for fn in (primal, deriv)),
                        file=sys.stderr, flush=True)
            for p in procs.values():
                p.close()
    return out, order


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def ms(s):
    return f"{s * 1e3:.3f} ms" if s == s else "-"


def ratio(a, b):
    return f"{a / b:.3g}" if a == a and b == b and b else "-"


def report(res, order):
    def t(tool, ev, label, fn, what="time"):
        return med(res.get((tool, ev, label, fn), {}).get(what, []))

    def agree(a, b, ev, label, fn):
        x, y = res.get((a, ev, label, fn), {}).get("output"), res.get((b, ev, label, fn), {}).get("output")
        return "yes" if x is not None and y is not None and compare(x, y) else "NO"

    for ev in dict.fromkeys(e for e, _, _ in order):
        _, primal, deriv = WORKLOADS[ev]
        print(f"\n## {ev}: derivative ({deriv}), mean evaluate (median of rounds)\n")
        print("| workload | size | old | new | PyTorch | manual | new/old | new/PyTorch | new/manual | old/PyTorch "
              "| prepare old (objective + derivative) | prepare new (objective + derivative) | new = old, PyTorch = new |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for e, label, size in order:
            if e != ev:
                continue
            o, n, p = t("old", ev, label, deriv), t("new", ev, label, deriv), t("torch", ev, label, deriv)
            m, src = MANUAL.get((ev, label, deriv), (float("nan"), ""))
            po = t("old", ev, label, primal, "prepare") + t("old", ev, label, deriv, "prepare")
            pn = t("new", ev, label, primal, "prepare") + t("new", ev, label, deriv, "prepare")
            print(f"| {label} | {size} | {ms(o)} | {ms(n)} | {ms(p)} | {ms(m)}{f' ({src})' if src else ''} | "
                  f"{ratio(n, o)} | {ratio(n, p)} | {ratio(n, m)} | {ratio(o, p)} | {po:.2f} s | {pn:.2f} s | "
                  f"{agree('new', 'old', ev, label, deriv)}, {agree('torch', 'new', ev, label, deriv)} |")
        print(f"\n{ev} primal ({primal}): " + "; ".join(
            f"{label} old {ms(t('old', ev, label, primal))}, new {ms(t('new', ev, label, primal))}, "
            f"PyTorch {ms(t('torch', ev, label, primal))}" for e, label, _ in order if e == ev))
    errors = [(k, v["error"]) for k, v in res.items() if v["error"]]
    for k, e in errors:
        print(f"\nerror {k}: {e}")
    goals(t, order)


def goals(t, order):
    print("\n## The goals (issue 20)\n")
    print("| goal | target | before (old) | now (new) |")
    print("|---|---|---|---|")
    labels = {ev: [label for e, label, _ in order if e == ev] for ev in WORKLOADS}

    def worst(tag, ev, deriv, ref):
        rs = [(t(tag, ev, label, deriv) / ref(label), label) for label in labels[ev]]
        rs = [r for r in rs if r[0] == r[0]]
        if not rs:
            return "-"
        hi = max(rs)
        return f"{min(rs)[0]:.3g}-{hi[0]:.3g}x (worst {hi[1]})"

    def against_manual(ev, deriv, target):
        for label in labels[ev]:
            m = MANUAL.get((ev, label, deriv))
            if m:
                o, n = t("old", ev, label, deriv), t("new", ev, label, deriv)
                print(f"| {ev} {label.split('_')[0] if ev == 'ba' else label} derivative / manual ({ms(m[0])}, {m[1]}) | {target} | "
                      f"{o / m[0]:.2f}x ({ms(o)}) | {n / m[0]:.2f}x ({ms(n)}) |")

    def against_torch(ev, deriv, what, target):
        ref = lambda label: t("torch", ev, label, deriv)  # noqa: E731
        print(f"| {ev} derivative / PyTorch, {what} | {target} | {worst('old', ev, deriv, ref)} | "
              f"{worst('new', ev, deriv, ref)} |")
    if labels["ba"]:
        against_torch("ba", "jacobian", "every default workload", "<= 0.7x")
        against_manual("ba", "jacobian", "<= 3x")
        prep = {tag: max((t(tag, "ba", label, "jacobian", "prepare"), label) for label in labels["ba"])
                for tag in ("old", "new")}
        print(f"| ba prepare of the derivative, largest over the workloads | < 3 s | {prep['old'][0]:.2f} s "
              f"({prep['old'][1].split('_')[0]}) | {prep['new'][0]:.2f} s ({prep['new'][1].split('_')[0]}) |")
    if labels["ht"]:
        against_manual("ht", "jacobian", "<= 2x")
        against_torch("ht", "jacobian", f"the {len(labels['ht'])} instances here (no `manual` numbers for the small "
                      "model)", "-")
    if labels["kmeans"]:
        against_torch("kmeans", "dir", f"the {len(labels['kmeans'])} workloads", "<= 1.0x")
        big = labels["kmeans"][-1]
        print(f"| kmeans {big} derivative / PyTorch ({ms(t('torch', 'kmeans', big, 'dir'))}) | <= 1.0x | "
              f"{ratio(t('old', 'kmeans', big, 'dir'), t('torch', 'kmeans', big, 'dir'))}x | "
              f"{ratio(t('new', 'kmeans', big, 'dir'), t('torch', 'kmeans', big, 'dir'))}x |")
        m = MANUAL.get(("kmeans", "k=100,n=1000,d=8", "dir"))
        if m and "k=100,n=1000,d=8" in labels["kmeans"]:
            print(f"| kmeans k=100,n=1000,d=8 derivative / manual ({ms(m[0])}, {m[1]}; no goal) | - | "
                  f"{ratio(t('old', 'kmeans', 'k=100,n=1000,d=8', 'dir'), m[0])}x | "
                  f"{ratio(t('new', 'kmeans', 'k=100,n=1000,d=8', 'dir'), m[0])}x |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="the build directory of Reel before issue 20")
    ap.add_argument("--new", default=os.path.join(ROOT, "build"), help="the build directory of the new Reel")
    ap.add_argument("--evals", default="ba,ht,kmeans")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="the first two workloads of each eval (a check of the script)")
    ap.add_argument("--min-seconds", type=float, default=0.3, help="GradBench's min_seconds per evaluate")
    ap.add_argument("--json", help="where to write the numbers (default: NEW/bench/goals20.json)")
    args = ap.parse_args()
    keep_freed_memory()  # PyTorch at its fastest (see protocol.py)
    import torch
    run.set_torch_threads(torch, 1)  # (its OpenBLAS too)
    res, order = measure(args.evals.split(","), [("old", args.old), ("new", args.new)], args.rounds, args.min_seconds,
                         args.quick)
    report(res, order)
    path = args.json or os.path.join(args.new, "bench", "goals20.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump([{"tool": k[0], "eval": k[1], "workload": k[2], "function": k[3], "evaluate_s": v["time"],
                    "prepare_s": v["prepare"], "error": v["error"]} for k, v in res.items()], f, indent=1)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    sys.exit(main())
