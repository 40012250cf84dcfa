#!/usr/bin/env python3
"""Old main against new main: runs two reel_bench binaries alternately and prints, for
every row of their JSON output, the medians and the median of the paired ratios new/old.

    python3 bench/compare_builds.py OLD/build/bench/reel_bench build/bench/reel_bench 8 [reel_bench flags]

Rounds alternate which binary runs first; both run with OPENBLAS_NUM_THREADS=1 and the
disk code cache off (REEL_CACHE_DIR=off), so each compile is measured cold. Paired
ratios cancel most of the drift of a shared machine; it asserts nothing."""
import json, os, statistics, subprocess, sys, tempfile

def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    old, new, rounds, extra = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", REEL_CACHE_DIR="off")
    runs = {"old": [], "new": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            order = (("old", old), ("new", new)) if r % 2 == 0 else (("new", new), ("old", old))
            for tag, exe in order:
                out = os.path.join(tmp, f"{tag}{r}.json")
                subprocess.run([exe, "--out", out] + extra, env=env, check=True, stdout=subprocess.DEVNULL)
                with open(out) as f:
                    runs[tag].append(json.load(f))
    metrics = ["interp_ns", "compiled_ns", "compile_ms", "loop_ns", "driver_ns", "call_ns", "trace_ms", "grad_tape_ms"]
    table = {}
    for tag, tag_runs in runs.items():
        for i, run in enumerate(tag_runs):
            for row in run:
                key = next((str(row[k]) for k in ("workload", "runner_workload", "program") if k in row), None)
                if key is None:
                    continue
                key += " " + str(row.get("dtype", row.get("steps", "")))
                for m in metrics:
                    if isinstance(row.get(m), (int, float)):
                        table.setdefault((key, m), {"old": [None] * rounds, "new": [None] * rounds})[tag][i] = row[m]
    print(f"{'row':50} {'metric':13} {'old median':>11} {'new median':>11} {'new/old':>8}")
    for (key, m), v in table.items():
        pairs = [(a, b) for a, b in zip(v["old"], v["new"]) if a is not None and b is not None]
        ratios = [b / a for a, b in pairs if a]
        if not pairs:
            continue
        om, nm = statistics.median(a for a, _ in pairs), statistics.median(b for _, b in pairs)
        ratio = f"{statistics.median(ratios):.3f}" if ratios else "-"
        print(f"{key[:50]:50} {m:13} {om:11.4g} {nm:11.4g} {ratio:>8}")

main()
