#!/usr/bin/env python3
"""Issue 19's goals (loops as loops), measured side by side in one run: two builds of
Reel (--old, e.g. a worktree of main before loops; --new, this checkout's build) and
the hand-written C++ of bench/gradbench/hand.cpp (from --new's build).

  python3 bench/gradbench/goals.py --old ../old/build [--new build] [--rounds 3] [--json FILE]

- GradBench's lstm (b = 14) at l=2, c = 1024, 4096, 8192 and l=6, c=8192, and ode at its
  nine default sizes, through reel-gradbench (old, new) and gradbench_hand, one process
  per tool and round, workloads in run.py's order, objective then derivative:
  GradBench's timings (`prepare`: trace + compile + one run of both functions; the mean
  `evaluate`). Inputs are random (Python's random, seed 31337), as GradBench's are.
- The scaling rows of reel_bench (`--row PROGRAM STEPS --quick`, each a fresh process):
  the plain 84,000-step sin and tanh recurrences in both builds, and the same loops
  written with reel::scan (sin-scan, tanh-scan) in the new one, at 10^3 to 10^6 steps.

Each figure is the median over the rounds; the order of old and new alternates between
rounds. Reel's disk code cache is off (REEL_CACHE_DIR=off), so compiles are cold. It
asserts nothing: it prints the tables (markdown) with ratios, and writes the numbers as
JSON (--json, default BUILD/bench/goals.json)."""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys

from protocol import Tool, compare, keep_freed_memory

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ENV = {"REEL_CACHE_DIR": "off"}


def lstm_input(l, c, b=14):
    r = random.Random(31337)
    return {"main_params": [[r.random() for _ in range(4 * b)] for _ in range(2 * l)],
            "extra_params": [[r.random() for _ in range(b)] for _ in range(3)],
            "state": [[r.random() for _ in range(b)] for _ in range(2 * l)],
            "sequence": [[float(r.randint(0, 1)) for _ in range(b)] for _ in range(c)]}


def ode_input(n, s):
    r = random.Random(31337)
    return {"x": [r.random() for _ in range(n)], "s": s}


# (eval, label, input maker, primal, derivative), in run.py's order (by size).
WORKLOADS = ([("lstm", f"l={l},c={c}", (lambda l=l, c=c: lstm_input(l, c)), "objective", "jacobian")
              for l, c in [(2, 1024), (2, 4096), (2, 8192), (6, 8192)]] +
             [("ode", f"n={n},s={s}", (lambda n=n, s=s: ode_input(n, s)), "primal", "gradient")
              for n, s in sorted(((n, s) for n in (1000, 10000, 100000) for s in (1, 10, 100)),
                                 key=lambda p: p[0] * p[1])])

SCALING = {"old": [("sin", 84000), ("tanh", 84000)],
           "new": [("sin", 84000), ("tanh", 84000)] +
                  [("sin-scan", n) for n in (1000, 10000, 84000, 1000000)] +
                  [("tanh-scan", n) for n in (1000, 10000, 84000)]}
ROW_FIELDS = ["ops", "trace_ms", "grad_ms", "compile_ms", "call_ns", "kernels", "steps", "workspace", "lower_bound",
              "rss_mb", "warm_ms"]


def gradbench_round(tools, inputs, min_seconds, out):
    """One round: each tool in its own process over every workload."""
    for tag, exe in tools:
        tool = Tool(tag, exe, ENV)
        for ev, label, _, primal, deriv in WORKLOADS:
            for fn in (primal, deriv):
                t, output, prepare = tool.evaluate(ev, fn, inputs[label], min_seconds)
                rec = out.setdefault((tag, label, fn), {"time": [], "prepare": [], "output": None, "error": None})
                if t is None:
                    rec["error"] = prepare
                    continue
                rec["time"].append(t)
                rec["prepare"].append(prepare)
                rec["output"] = output
            print(f"  {tag} {ev} {label}", file=sys.stderr, flush=True)
        tool.close()


def scaling_round(benches, out):
    for tag, exe in benches:
        for program, steps in SCALING[tag]:
            # Through a shell that forks: a child forked from this (large) process would
            # count this process's memory in its getrusage peak (old builds read that).
            line = subprocess.run(["sh", "-c", '"$0" "$@"; exit $?', exe, "--row", program, str(steps), "--quick"],
                                  capture_output=True, text=True,
                                  env=dict(os.environ, OPENBLAS_NUM_THREADS="1", **ENV), check=True).stdout.split()
            row = dict(zip(ROW_FIELDS, map(float, line)))
            out.setdefault((tag, program, steps), []).append(row)
            print(f"  {tag} --row {program} {steps}", file=sys.stderr, flush=True)


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def ms(s):
    return f"{s * 1e3:.3f} ms" if s == s else "-"


def report(gb, rows):
    def t(tag, label, fn, what="time"):
        return med(gb.get((tag, label, fn), {}).get(what, []))

    def agree(a, b, label, fn):
        x, y = gb.get((a, label, fn), {}).get("output"), gb.get((b, label, fn), {}).get("output")
        return "yes" if x is not None and y is not None and compare(x, y) else "NO"

    print("\n## GradBench lstm (b=14) and ode: old Reel, new Reel, hand-written C++ (mean evaluate; median of rounds)\n")
    print("| workload | function | old | new | hand | old/hand | new/hand | new/old | prepare old | prepare new "
          "| new = hand, new = old |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for ev, label, _, primal, deriv in WORKLOADS:
        for fn in (primal, deriv):
            o, n, h = t("old", label, fn), t("new", label, fn), t("hand", label, fn)
            po, pn = t("old", label, fn, "prepare"), t("new", label, fn, "prepare")
            print(f"| {ev} {label} | {fn} | {ms(o)} | {ms(n)} | {ms(h)} | {o / h:.2f} | {n / h:.2f} | {n / o:.2f} | "
                  f"{po:.2f} s | {pn:.2f} s | {agree('new', 'hand', label, fn)}, {agree('new', 'old', label, fn)} |")
    errors = [(k, v["error"]) for k, v in gb.items() if v["error"]]
    for k, e in errors:
        print(f"\n{k}: {e}")
    print("\nlstm objective at l=2, growth from c=1024 (linear: 4.0 at c=4096, 8.0 at c=8192):")
    for tag in ("old", "new", "hand"):
        base = t(tag, "l=2,c=1024", "objective")
        print(f"- {tag}: " + ", ".join(f"c={c}: {t(tag, f'l=2,c={c}', 'objective') / base:.1f}x" for c in (4096, 8192)))

    scaling_table(rows)
    goals_table(t, rows)


def row_median(rows, key):
    rs = rows.get(key, [])
    return {f: med([r[f] for r in rs]) for f in ROW_FIELDS} if rs else None


def scaling_table(rows):
    print("\n## Scaling rows (reel_bench --row PROGRAM STEPS --quick; median of rounds)\n")
    print("| build | program | steps | grad ops | trace | grad_tape | compile | trace+grad+compile | call | peak RSS |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key in rows:
        tag, program, steps = key
        m = row_median(rows, key)
        total = m["trace_ms"] + m["grad_ms"] + m["compile_ms"]
        print(f"| {tag} | {program} | {steps} | {m['ops']:.0f} | {m['trace_ms']:.1f} ms | {m['grad_ms']:.1f} ms | "
              f"{m['compile_ms']:.1f} ms | {total:.0f} ms | {m['call_ns'] / 1e6:.3f} ms | {m['rss_mb']:.0f} MB |")


def goals_table(t, rows):
    """The goals of issue 19, each with its target, before (old) and now (new)."""
    print("\n## The goals\n")
    print("| goal | target | before (old) | now (new) |")
    print("|---|---|---|---|")
    big = "l=6,c=8192"
    prep = {tag: t(tag, big, "objective", "prepare") + t(tag, big, "jacobian", "prepare") for tag in ("old", "new")}
    print(f"| lstm {big}: prepare (objective + jacobian) | < 1 s | {prep['old']:.2f} s | {prep['new']:.2f} s |")
    h = t("hand", big, "jacobian")
    print(f"| lstm {big}: derivative / hand-written BPTT ({ms(h)}) | <= 1.0x | "
          f"{t('old', big, 'jacobian') / h:.2f}x ({ms(t('old', big, 'jacobian'))}) | "
          f"{t('new', big, 'jacobian') / h:.2f}x ({ms(t('new', big, 'jacobian'))}) |")
    obj = {tag: [t(tag, f"l=2,c={c}", "objective") for c in (1024, 4096, 8192)] for tag in ("old", "new", "hand")}
    fmt3 = lambda v: ", ".join(f"{x * 1e3:.2f}" for x in v)  # noqa: E731
    print(f"| lstm objective at l=2, c = 1024, 4096, 8192 (hand-written: {fmt3(obj['hand'])} ms) | linear in c, "
          f"<= hand | {fmt3(obj['old'])} ms ({obj['old'][2] / obj['old'][0]:.1f}x from 1024 to 8192; "
          f"{obj['old'][2] / obj['hand'][2]:.2f}x hand at 8192) | {fmt3(obj['new'])} ms "
          f"({obj['new'][2] / obj['new'][0]:.1f}x; {obj['new'][2] / obj['hand'][2]:.2f}x hand at 8192) |")
    ode = [label for ev, label, _, _, _ in WORKLOADS if ev == "ode"]
    ratios = {tag: [t(tag, label, "primal") / t("hand", label, "primal") for label in ode] for tag in ("old", "new")}
    big_ode = ode[-1]
    print(f"| ode primal / hand-written, the 9 sizes ({big_ode}) | <= 1.0x | {min(ratios['old']):.2f}-"
          f"{max(ratios['old']):.2f}x ({ratios['old'][-1]:.2f}x) | {min(ratios['new']):.2f}-{max(ratios['new']):.2f}x "
          f"({ratios['new'][-1]:.2f}x) |")
    for program in ("sin", "tanh"):
        old, new = row_median(rows, ("old", program, 84000)), row_median(rows, ("new", program + "-scan", 84000))
        if not old or not new:
            continue
        total = lambda m: m["trace_ms"] + m["grad_ms"] + m["compile_ms"]  # noqa: E731
        print(f"| {program} 84,000 steps (before: plain loop; now: {program}-scan): trace + grad + compile | < 1 s | "
              f"{total(old):.0f} ms | {total(new):.0f} ms |")
        print(f"| {program} 84,000 steps: peak RSS | < 150 MB | {old['rss_mb']:.0f} MB | {new['rss_mb']:.0f} MB |")
        print(f"| {program} 84,000 steps: gradient call | <= before | {old['call_ns'] / 1e6:.2f} ms | "
              f"{new['call_ns'] / 1e6:.2f} ms ({new['call_ns'] / old['call_ns']:.2f}x) |")
    compiles = [(k[2], row_median(rows, k)["compile_ms"]) for k in rows if k[0] == "new" and k[1] == "sin-scan"]
    if compiles:
        print("| compile time against the trip count (sin-scan) | flat | grows with the trace (sin: "
              f"{row_median(rows, ('old', 'sin', 84000))['compile_ms']:.0f} ms at 84,000) | "
              + ", ".join(f"{c:.1f} ms at {n:,}" for n, c in sorted(compiles)) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="the build directory of the old Reel")
    ap.add_argument("--new", default=os.path.join(ROOT, "build"), help="the build directory of the new Reel")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-seconds", type=float, default=0.3, help="GradBench's min_seconds per evaluate")
    ap.add_argument("--no-gradbench", action="store_true", help="only the scaling rows")
    ap.add_argument("--no-scaling", action="store_true", help="only the GradBench rows")
    ap.add_argument("--json", help="where to write the numbers (default: NEW/bench/goals.json)")
    args = ap.parse_args()
    keep_freed_memory()  # PyTorch at its fastest (see protocol.py)
    inputs = {label: make() for _, label, make, _, _ in WORKLOADS}
    gb, rows = {}, {}
    for r in range(args.rounds):
        print(f"round {r + 1} of {args.rounds}", file=sys.stderr, flush=True)
        builds = [("old", args.old), ("new", args.new)]
        if r % 2:
            builds.reverse()
        if not args.no_gradbench:
            tools = [(tag, os.path.join(b, "tools", "reel-gradbench")) for tag, b in builds]
            gradbench_round(tools + [("hand", os.path.join(args.new, "bench", "gradbench_hand"))], inputs,
                            args.min_seconds, gb)
        if not args.no_scaling:
            scaling_round([(tag, os.path.join(b, "bench", "reel_bench")) for tag, b in builds], rows)
    report(gb, rows)
    path = args.json or os.path.join(args.new, "bench", "goals.json")
    with open(path, "w") as f:
        json.dump({"gradbench": [{"tool": k[0], "workload": k[1], "function": k[2], "evaluate_s": v["time"],
                                  "prepare_s": v["prepare"], "error": v["error"]} for k, v in gb.items()],
                   "scaling": [{"build": k[0], "program": k[1], "steps": k[2], "rounds": v} for k, v in rows.items()]},
                  f, indent=1)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    sys.exit(main())
