"""What bench/gradbench/run.py and goals.py share: a GradBench tool process spoken to
over its JSON-lines protocol, and GradBench's comparison of outputs."""
import json
import os
import subprocess
import sys

# glibc's malloc maps every block over 32 MB afresh and unmaps it when freed, so each
# large PyTorch tensor costs page faults: kmeans' derivative at k=1000, n=10000 took
# 250 ms that way and 61 ms with freed memory kept; gmm's varied 82-291 ms between runs
# (with the threshold raised by earlier evals' frees, or not). The benchmarks run
# PyTorch (in their own process) at its fastest: freed memory kept for reuse.
KEEP_FREED_MEMORY = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "8589934592"}


def keep_freed_memory():
    """Re-runs this script with KEEP_FREED_MEMORY in its environment (once)."""
    if all(os.environ.get(k) == v for k, v in KEEP_FREED_MEMORY.items()):
        return
    os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, **KEEP_FREED_MEMORY))


class Tool:
    """A GradBench tool process (the protocol over stdin/stdout) on `threads` threads
    (Reel's, OpenBLAS's, OpenMP's; one by default); `env` adds environment variables
    (goals.py turns Reel's disk code cache off); `args` are the tool's options
    (reel-gradbench --scalar)."""

    def __init__(self, name, exe, env=None, threads=1, args=()):
        self.name = name
        t = str(threads)
        self.p = subprocess.Popen([exe, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env=dict(os.environ, OPENBLAS_NUM_THREADS=t, OMP_NUM_THREADS=t, REEL_NUM_THREADS=t,
                                           **(env or {})))
        self.id = 0

    def send(self, msg):
        msg["id"] = self.id
        self.id += 1
        self.p.stdin.write(json.dumps(msg) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:  # the process ended (killed by the kernel when out of memory: -9)
            raise RuntimeError(f"{self.name} ended with status {self.p.wait()}")
        return json.loads(line)

    def evaluate(self, module, fn, inp, min_seconds):
        """(mean evaluate seconds, output, prepare seconds), or (None, None, error)."""
        r = self.send({"kind": "evaluate", "module": module, "function": fn,
                       "input": dict(inp, min_runs=1, min_seconds=min_seconds)})
        if not r.get("success"):
            return None, None, r.get("error")
        times = [x["nanoseconds"] for x in r["timings"] if x["name"] == "evaluate"]
        prepare = sum(x["nanoseconds"] for x in r["timings"] if x["name"] == "prepare")
        return sum(times) / len(times) / 1e9, r["output"], prepare / 1e9

    def close(self):
        try:
            self.p.stdin.close()
        except BrokenPipeError:  # (it has ended already)
            pass
        self.p.wait()


def compare(a, b):
    """GradBench's rule (python/gradbench/gradbench/comparison.py): the same structure,
    floats within |a - b| / max(1, |a| + |b|) <= 1e-4."""
    if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool):  # ints exactly, as GradBench
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) / max(1, abs(a) + abs(b)) <= 1e-4
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(compare(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(compare(a[k], b[k]) for k in a)
    return a == b
