#!/usr/bin/python3
"""GradBench's evals run through reel-gradbench, side by side in one run with
hand-written C++ (lse, gmm, lstm, ode: ./build/bench/gradbench_hand) and PyTorch (the same
computations with torch autograd, in this process), all on one thread, or on each count
of --threads in turn (--threads 1,2: every tool on 1 thread, then every tool on 2). For each eval and
workload it times the primal and the derivative (GradBench's rule: runs until
min_runs and min_seconds are met; the mean `evaluate` time), checks the tools'
outputs against Reel's with GradBench's comparison, writes results.json and one PNG
chart per eval (time against workload, log scale, one line per tool) into
build/bench/gradbench (--out DIR for elsewhere: --out bench/gradbench updates the
recorded run the README shows), and prints the
summary table (Reel/hand-written and Reel/PyTorch at the largest workload all tools
ran). Workloads follow GradBench's defaults (specs/gradbench.md), generated here with
numpy; ba's come from ../shared/data/adbench/ba; ht runs the one input here (hand1 of
the big model, from the recorded transcript), GradBench's other ht data not being in
../shared.

With --scalar, reel-gradbench --scalar (GradBench's own templated C++ for lse, llsq,
ode, det, gmm and lstm, instantiated with reel::Real) runs too, as the tool
"reel-scalar" beside "reel", its outputs checked against reel's; a second table
compares the two.

One thread writes results.json (the recorded run), N threads results-threads<N>.json,
each with its table printed. The tables give Reel/PyTorch
at the largest workload and the worst ratio over every workload all tools ran.

  /usr/bin/python3 bench/gradbench/run.py [--quick] [--scalar] [--evals lse,gmm] [--threads 1,2] [--max-seconds 60] [--out DIR]
"""
import argparse
import itertools
import json
import math
import os
import sys
import time

import numpy as np
import torch

from protocol import Tool, compare, keep_freed_memory

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch_threads import set_torch_threads  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")


# ---- workloads (GradBench's defaults) --------------------------------------------------

def rng():
    return np.random.default_rng(31337)


def lse_workloads():
    for k in range(10):
        n = 2500 * 2 ** k
        yield f"n={n}", n, {"x": rng().random(n).tolist()}


def llsq_workloads():
    for n in [16 * 2 ** i for i in range(9)] + [8196, 16392]:
        yield f"n={n}", n, {"x": rng().random(128).tolist(), "n": n}


def ode_workloads():
    for n, s in sorted(itertools.product([1000, 10000, 100000], [1, 10, 100]), key=lambda p: p[0] * p[1]):
        yield f"n={n},s={s}", n * s, {"x": rng().random(n).tolist(), "s": s}


def kmeans_workloads():
    sizes = sorted(itertools.product([10, 100, 1000], [1000, 10000], [8, 16]), key=lambda p: p[0] * p[1] * p[2])
    for k, n, d in sizes:
        points = rng().random((n, d))
        yield f"k={k},n={n},d={d}", k * n * d, {"points": points.tolist(), "centroids": points[-k:].tolist()}


def det_workloads():
    for ell in range(5, 12):
        yield f"{ell}", ell, {"A": rng().random(ell * ell).tolist(), "ell": ell}


def gmm_workloads():
    for d, k in sorted(itertools.product([2, 10, 20, 32, 64], [5, 10, 25, 50, 100]), key=lambda p: p[0] * p[1]):
        r, n = rng(), 1000
        yield f"{d}_{k}_{n}", d * k, {
            "d": d, "k": k, "n": n, "x": r.normal(size=(n, d)).tolist(), "m": 0, "gamma": 1.0,
            "alpha": r.normal(size=k).tolist(), "mu": r.random((k, d)).tolist(), "q": r.normal(size=(k, d)).tolist(),
            "l": r.normal(size=(k, d * (d - 1) // 2)).tolist()}


def lstm_workloads():
    for l, c in sorted(itertools.product([2, 4, 6], [1024, 4096, 8192]), key=lambda p: p[0] * p[1]):
        r, b = rng(), 14
        yield f"l={l},c={c}", l * c, {
            "main_params": r.random((2 * l, 4 * b)).tolist(), "extra_params": r.random((3, b)).tolist(),
            "state": r.random((2 * l, b)).tolist(), "sequence": r.integers(0, 2, (c, b)).astype(float).tolist()}


def ba_workloads():
    folder = os.path.join(SHARED, "data", "adbench", "ba")
    for i in range(1, 15):
        name = next(f for f in os.listdir(folder) if f.startswith(f"ba{i}_"))
        v = open(os.path.join(folder, name)).read().split()
        n, m, p = int(v[0]), int(v[1]), int(v[2])
        nums = [float(x) for x in v[3:3 + 17]]
        yield name[:-4], p, {"n": n, "m": m, "p": p, "cam": nums[0:11], "x": nums[11:14], "w": nums[14],
                             "feat": nums[15:17]}


def ht_workloads():
    # The one ht input here: hand1 of the big model (complicated), recorded in the
    # transcript (GradBench's other ht data are not in ../shared).
    for line in open(os.path.join(SHARED, "data", "gradbench", "ht.jsonl")):
        e = json.loads(line)
        m = e.get("message", {})
        if m.get("kind") == "evaluate":
            inp = {k: v for k, v in m["input"].items() if k not in ("min_runs", "min_seconds")}
            yield m.get("description", "hand1"), len(inp["data"]["correspondences"]), inp
            return


EVALS = {
    "lse": (lse_workloads, "primal", "gradient"),
    "llsq": (llsq_workloads, "primal", "gradient"),
    "ode": (ode_workloads, "primal", "gradient"),
    "kmeans": (kmeans_workloads, "cost", "dir"),
    "det": (det_workloads, "primal", "gradient"),
    "gmm": (gmm_workloads, "objective", "jacobian"),
    "lstm": (lstm_workloads, "objective", "jacobian"),
    "ba": (ba_workloads, "objective", "jacobian"),
    "ht": (ht_workloads, "objective", "jacobian"),
}

# ---- PyTorch versions ------------------------------------------------------------------

T = torch.float64


def t(x):
    return torch.tensor(x, dtype=T)


def grad_of(f, *args, wrt=(0,)):
    args = [a.clone().requires_grad_(i in wrt) for i, a in enumerate(args)]
    y = f(*args)
    return torch.autograd.grad(y, [args[i] for i in wrt])


def torch_lse(inp, fn):
    x = t(inp["x"])
    if fn == "primal":
        return lambda: torch.logsumexp(x, 0)
    return lambda: grad_of(lambda v: torch.logsumexp(v, 0), x)[0]


def torch_llsq(inp, fn):
    x, n = t(inp["x"]), inp["n"]
    # The powers of t depend on n alone: made before the timed runs, as Reel's trace does.
    ts = -1 + torch.arange(n, dtype=T) * 2 / (n - 1)
    V, S = ts[:, None] ** torch.arange(x.shape[0], dtype=T), torch.sign(ts)

    def f(x):
        return 0.5 * torch.sum((S - V @ x) ** 2)
    if fn == "primal":
        return lambda: f(x)
    return lambda: grad_of(f, x)[0]


def torch_ode(inp, fn):
    x, s = t(inp["x"]), inp["s"]

    def f(x):
        h = 2.0 / s
        y = torch.zeros_like(x)
        ff = lambda y: torch.cat([x[:1], x[1:] * y[:-1]])  # noqa: E731
        for _ in range(s):
            k1 = ff(y)
            k2 = ff(y + h / 2 * k1)
            k3 = ff(y + h / 2 * k2)
            k4 = ff(y + h * k3)
            y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        return y
    if fn == "primal":
        return lambda: f(x)
    return lambda: grad_of(lambda v: f(v)[-1], x)[0]


def torch_kmeans(inp, fn):
    P, C = t(inp["points"]), t(inp["centroids"])

    def cost(C):
        d2 = (P * P).sum(1, keepdim=True) - 2 * P @ C.T + (C * C).sum(1)
        return d2.min(1).values.sum()
    if fn == "cost":
        return lambda: cost(C)

    def direction():
        c = C.clone().requires_grad_()
        (g,) = torch.autograd.grad(cost(c), c, create_graph=True)
        (h,) = torch.autograd.grad(g, c, grad_outputs=torch.ones_like(g))
        return g / h
    return direction


_det_plans = {}


def det_plan(ell):
    if ell not in _det_plans:
        subsets = [[m for m in range(1 << ell) if bin(m).count("1") == k] for k in range(ell + 1)]
        pos = [{m: i for i, m in enumerate(level)} for level in subsets]
        plan = []
        for k in range(2, ell + 1):
            cols, prev, signs = [], [], []
            for S in subsets[k]:
                tpos = 0
                for j in range(ell):
                    if S >> j & 1:
                        cols.append(j)
                        prev.append(pos[k - 1][S & ~(1 << j)])
                        signs.append(1.0 if tpos % 2 == 0 else -1.0)
                        tpos += 1
            n = len(subsets[k])
            plan.append((torch.tensor(cols).reshape(n, k), torch.tensor(prev).reshape(n, k),
                         torch.tensor(signs, dtype=T).reshape(n, k)))
        _det_plans[ell] = plan
    return _det_plans[ell]


def torch_det(inp, fn):
    A, ell = t(inp["A"]), inp["ell"]
    plan = det_plan(ell)

    def f(A):  # expansion by minors, each minor once (as reel-gradbench)
        M = A.reshape(ell, ell)
        minors = M[ell - 1]
        for k, (cols, prev, signs) in enumerate(plan, start=2):
            minors = (signs * M[ell - k][cols] * minors[prev]).sum(1)
        return minors[0]
    if fn == "primal":
        return lambda: f(A)
    return lambda: grad_of(f, A)[0]


def torch_gmm(inp, fn):
    x, alpha, mu, q, l = (t(inp[k]) for k in ["x", "alpha", "mu", "q", "l"])
    d, k, n, m, gamma = inp["d"], inp["k"], inp["n"], inp["m"], inp["gamma"]
    rows, cols = torch.tril_indices(d, d, -1)
    order = torch.argsort(cols * d + rows)  # l fills the strict lower part column by column
    nw = d + m + 1
    C = nw * d * (math.log(gamma) - 0.5 * math.log(2)) - (
        d * (d - 1) / 4 * math.log(math.pi) + sum(math.lgamma(nw / 2 + (1 - j) / 2) for j in range(1, d + 1)))

    def f(alpha, mu, q, l):
        Q = torch.diag_embed(torch.exp(q))
        Q = Q.index_put((torch.arange(k)[:, None], rows[order][None, :], cols[order][None, :]), l, accumulate=True)
        xc = x[None, :, :] - mu[:, None, :]
        sq = ((xc @ Q.transpose(1, 2)) ** 2).sum(2)
        beta = (alpha + q.sum(1))[:, None] - 0.5 * sq
        wishart = (0.5 * gamma ** 2 * (torch.exp(2 * q).sum() + (l ** 2).sum())) - m * q.sum()
        return (-(n * d / 2) * math.log(2 * math.pi) + torch.logsumexp(beta, 0).sum()
                - n * torch.logsumexp(alpha, 0) - wishart + k * C)
    if fn == "objective":
        return lambda: f(alpha, mu, q, l)

    def jac():
        g = grad_of(f, alpha, mu, q, l, wrt=(0, 1, 2, 3))
        return {"alpha": g[0], "mu": g[1], "q": g[2], "l": g[3]}
    return jac


def torch_lstm(inp, fn):
    main, extra, state, seq = (t(inp[k]) for k in ["main_params", "extra_params", "state", "sequence"])

    def f(main, extra):
        layers, b = main.shape[0] // 2, extra.shape[1]
        h = [state[2 * j] for j in range(layers)]
        c = [state[2 * j + 1] for j in range(layers)]
        total = 0
        for s in range(seq.shape[0] - 1):
            x = seq[s] * extra[0]
            for j in range(layers):
                w, bias = main[2 * j], main[2 * j + 1]
                f_ = torch.sigmoid(x * w[:b] + bias[:b])
                i = torch.sigmoid(h[j] * w[b:2 * b] + bias[b:2 * b])
                o = torch.sigmoid(x * w[2 * b:3 * b] + bias[2 * b:3 * b])
                g = torch.tanh(h[j] * w[3 * b:] + bias[3 * b:])
                c[j] = c[j] * f_ + i * g
                h[j] = o * torch.tanh(c[j])
                x = h[j]
            y = x * extra[1] + extra[2]
            total = total + (seq[s + 1] * (y - torch.log(2 + torch.exp(y).sum()))).sum()
        return -total / ((seq.shape[0] - 1) * b)
    if fn == "objective":
        return lambda: f(main, extra)

    def jac():
        g = grad_of(f, main, extra, wrt=(0, 1))
        return torch.cat([g[0].reshape(-1), g[1].reshape(-1)])
    return jac


def torch_ba(inp, fn):
    p = inp["p"]
    cams = t([inp["cam"]] * p)
    X = t([inp["x"]] * p)
    w = torch.full((p,), inp["w"], dtype=T)
    feat = t([inp["feat"]] * p)

    def reproj(cams, X, w):
        rot, centre, f, uv0, k1, k2 = cams[:, 0:3], cams[:, 3:6], cams[:, 6:7], cams[:, 7:9], cams[:, 9:10], cams[:, 10:11]
        Xo = X - centre
        theta = torch.sqrt((rot ** 2).sum(1, keepdim=True))
        v = rot / theta
        Xcam = Xo * torch.cos(theta) + torch.cross(v, Xo, dim=1) * torch.sin(theta) + v * (
            (v * Xo).sum(1, keepdim=True) * (1 - torch.cos(theta)))
        u = Xcam[:, 0:2] / Xcam[:, 2:3]
        rsq = (u ** 2).sum(1, keepdim=True)
        return (u * ((1 + k1 * rsq + k2 * rsq * rsq) * f) + uv0 - feat) * w[:, None]
    if fn == "objective":
        def obj():
            e = reproj(cams, X, w)
            werr = 1 - w ** 2
            return {"reproj_error": {"elements": e[0], "repeated": p}, "w_err": {"element": werr[0], "repeated": p}}
        return obj

    import torch.autograd.forward_ad as fwAD
    tangents = []  # made before the timed runs, as reel-gradbench does
    for kk in range(15):
        tc, tx, tw = torch.zeros_like(cams), torch.zeros_like(X), torch.zeros_like(w)
        if kk < 11:
            tc[:, kk] = 1
        elif kk < 14:
            tx[:, kk - 11] = 1
        else:
            tw[:] = 1
        tangents.append((tc, tx, tw))
    n, m = inp["n"], inp["m"]

    def jac():
        blocks = []
        for tc, tx, tw in tangents:
            with fwAD.dual_level():
                out = reproj(fwAD.make_dual(cams, tc), fwAD.make_dual(X, tx), fwAD.make_dual(w, tw))
                blocks.append(fwAD.unpack_dual(out).tangent)
        cols = [kk if kk < 11 else 11 * n + (kk - 11) if kk < 14 else 11 * n + 3 * m for kk in range(15)] * 2
        return {"rows": [15 * r if r <= 2 * p else 30 * p + (r - 2 * p) for r in range(30)] + [31 * p],
                "cols": cols + [11 * n + 3 * m + p - 1],
                "vals": torch.stack([blocks[kk][0, r] for r in range(2) for kk in range(15)] + [-2 * w[-1]])}
    return jac


def torch_ht(inp, fn):
    model, data = inp["data"]["model"], inp["data"]
    parents = model["parents"]
    base_rel = t(model["base_relatives"])                 # [bones, 4, 4]
    inv_abs = t(model["inverse_base_absolutes"])
    positions = t(model["base_positions"]).T              # [4, V]
    weights = t(model["weights"]).T                       # [bones, V]
    points = t(data["points"]).T                          # [3, c]
    corr = data["correspondences"]
    complicated = len(inp["us"]) > 0
    tris = model["triangles"]
    ia = torch.tensor([tris[c][0] for c in corr] if complicated else corr)
    ib = torch.tensor([tris[c][1] for c in corr] if complicated else corr)
    ic = torch.tensor([tris[c][2] for c in corr] if complicated else corr)
    theta0 = t(inp["theta"])
    us0 = t(inp["us"]) if complicated else torch.zeros(len(corr), 2, dtype=T)

    def rot(a, b, c, d, e, f, g, h, i):
        return torch.stack([torch.stack([a, b, c]), torch.stack([d, e, f]), torch.stack([g, h, i])])

    def residuals(theta, us):
        z, one = torch.zeros((), dtype=T), torch.ones((), dtype=T)
        pose = [theta[0:3], torch.ones(3, dtype=T), theta[3:6]] + [torch.zeros(3, dtype=T)] * len(parents)
        it, ip = 6, 5
        for _ in range(5):
            for i in range(2, 5):
                a = theta[it]; it += 1
                b = theta[it] if i == 2 else z
                if i == 2:
                    it += 1
                pose[ip] = torch.stack([a, b, z]); ip += 1
            ip += 1
        absolutes, transforms = [], []
        for i, par in enumerate(parents):
            tx, ty, tz = pose[i + 3][0], pose[i + 3][2], pose[i + 3][1]
            Rx = rot(one, z, z, z, torch.cos(tx), -torch.sin(tx), z, torch.sin(tx), torch.cos(tx))
            Ry = rot(torch.cos(ty), z, torch.sin(ty), z, one, z, -torch.sin(ty), z, torch.cos(ty))
            Rz = rot(torch.cos(tz), -torch.sin(tz), z, torch.sin(tz), torch.cos(tz), z, z, z, one)
            R = Rz @ Ry @ Rx
            tr = torch.eye(4, dtype=T).index_put((torch.arange(3)[:, None], torch.arange(3)[None, :]), R)
            rel = base_rel[i] @ tr
            absolutes.append(rel if par < 0 else absolutes[par] @ rel)
            transforms.append((absolutes[i] @ inv_abs[i])[:3])
        pos = ((torch.stack(transforms) @ positions) * weights[:, None, :]).sum(0)
        if model["is_mirrored"]:
            pos = pos * torch.tensor([[-1.0], [1.0], [1.0]], dtype=T)
        aa = pose[0]
        norm = torch.sqrt((aa ** 2).sum())
        x, y, zz = aa / norm
        s_, c_ = torch.sin(norm), torch.cos(norm)
        R = rot(x * x + (1 - x * x) * c_, x * y * (1 - c_) - zz * s_, x * zz * (1 - c_) + y * s_,
                x * y * (1 - c_) + zz * s_, y * y + (1 - y * y) * c_, y * zz * (1 - c_) - x * s_,
                x * zz * (1 - c_) - y * s_, zz * y * (1 - c_) + x * s_, zz * zz + (1 - zz * zz) * c_)
        pos = R @ pos + pose[2][:, None]
        if complicated:
            u0, u1 = us[:, 0], us[:, 1]
            at = u0 * pos[:, ia] + u1 * pos[:, ib] + (1 - u0 - u1) * pos[:, ic]
        else:
            at = pos[:, ia]
        return (points - at).T.reshape(-1)
    if fn == "objective":
        return lambda: residuals(theta0, us0)

    import torch.autograd.forward_ad as fwAD

    def jac():
        extra = 2 if complicated else 0
        cols = []
        for k in range(26 + extra):
            tt, tu = torch.zeros(26, dtype=T), torch.zeros_like(us0)
            if k < extra:
                tu[:, k] = 1
            else:
                tt[k - extra] = 1
            with fwAD.dual_level():
                out = residuals(fwAD.make_dual(theta0, tt), fwAD.make_dual(us0, tu))
                cols.append(fwAD.unpack_dual(out).tangent)
        return torch.stack(cols, 1)
    return jac


# The evals ./build/bench/gradbench_hand writes by hand.
HAND_EVALS = ("lse", "gmm", "lstm", "ode")
SCALAR_EVALS = ("lse", "llsq", "ode", "det", "gmm", "lstm")  # reel-gradbench --scalar's

TORCH = {"lse": torch_lse, "llsq": torch_llsq, "ode": torch_ode, "kmeans": torch_kmeans, "det": torch_det,
         "gmm": torch_gmm, "lstm": torch_lstm, "ba": torch_ba, "ht": torch_ht}

# ---- running -----------------------------------------------------------------------------


def plain(out):
    """A result of tensors as JSON values (after the timed runs)."""
    if isinstance(out, torch.Tensor):
        return out.item() if out.dim() == 0 else out.tolist()
    if isinstance(out, dict):
        return {k: plain(v) for k, v in out.items()}
    if isinstance(out, list):
        return [plain(v) for v in out]
    return out


def time_torch(make, min_seconds):
    run = make()
    out = run()  # warm
    times, total = [], 0.0
    while not times or total < min_seconds:
        t0 = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - t0)
        total += times[-1]
    return sum(times) / len(times), plain(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--evals", default=",".join(EVALS))
    ap.add_argument("--quick", action="store_true", help="the three smallest workloads of each eval")
    ap.add_argument("--max-seconds", type=float, default=60,
                    help="a tool stops an eval after a workload whose primal and derivative took longer")
    ap.add_argument("--min-seconds", type=float, default=0.3)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", help="directory for results.json and the charts (default: BUILD/bench/gradbench; "
                    "bench/gradbench holds the recorded run)")
    ap.add_argument("--threads", default="1", help="thread counts, comma-separated, each run in turn (default 1)")
    ap.add_argument("--scalar", action="store_true",
                    help="also run reel-gradbench --scalar (GradBench's C++ with reel::Real) as the tool reel-scalar")
    args = ap.parse_args()
    keep_freed_memory()  # PyTorch at its fastest (see protocol.py)
    out_dir = args.out or os.path.join(args.build, "bench", "gradbench")  # a run changes no tracked file
    os.makedirs(out_dir, exist_ok=True)
    counts = [int(t) for t in args.threads.split(",")]
    for threads in counts:
        name = "results.json" if threads == 1 else f"results-threads{threads}.json"
        run_all(args, threads, out_dir, name, charts_too=threads == counts[0])


def run_all(args, threads, out_dir, name, charts_too):
    set_torch_threads(torch, threads)  # (its OpenBLAS too)
    print(f"---- every tool on {threads} thread{'s' if threads > 1 else ''} ----", flush=True)
    reel_exe = os.path.join(args.build, "tools", "reel-gradbench")
    reel = Tool("reel", reel_exe, threads=threads)
    hand = Tool("hand", os.path.join(args.build, "bench", "gradbench_hand"), threads=threads)
    # The scalar mode's process is started anew for each workload: its traces of
    # millions of operations (and the caches of each size) would otherwise add up in one
    # process over an eval's workloads.
    scalar = (lambda: Tool("reel-scalar", reel_exe, threads=threads, args=["--scalar"])) if args.scalar else None
    tools = ["reel"] + (["reel-scalar"] if scalar else []) + ["hand", "torch"]
    results = {}
    for ev in args.evals.split(","):
        gen, primal, deriv = EVALS[ev]
        rows, stopped = [], set()
        for i, (label, size, inp) in enumerate(gen()):
            if args.quick and i >= 3:
                break
            row = {"workload": label, "size": size}
            for tool in tools:
                if tool in stopped or (tool == "hand" and ev not in HAND_EVALS) or \
                        (tool == "reel-scalar" and ev not in SCALAR_EVALS):
                    continue
                t0 = time.perf_counter()
                try:
                    if tool == "torch":
                        tp, op = time_torch(lambda: TORCH[ev](inp, primal), args.min_seconds)
                        td, od = time_torch(lambda: TORCH[ev](inp, deriv), args.min_seconds)
                        prep = None
                    else:
                        proc = {"reel": reel, "reel-scalar": scalar() if scalar else None, "hand": hand}[tool]
                        try:
                            tp, op, prep_p = proc.evaluate(ev, primal, inp, args.min_seconds)
                            td, od, prep_d = proc.evaluate(ev, deriv, inp, args.min_seconds)
                        finally:
                            if tool == "reel-scalar":
                                proc.close()
                        if tp is None or td is None:
                            row[tool] = {"error": prep_p if tp is None else prep_d}
                            stopped.add(tool)
                            continue
                        prep = (prep_p or 0) + (prep_d or 0) if tool.startswith("reel") else None
                    row[tool] = {"primal_s": tp, "derivative_s": td, "prepare_s": prep,
                                 "output": (op, od)}
                except Exception as e:  # noqa: BLE001
                    row[tool] = {"error": str(e)[:200]}
                    stopped.add(tool)
                if time.perf_counter() - t0 > args.max_seconds:
                    stopped.add(tool)
            ref = row.get("reel", {}).get("output")
            for tool in tools[1:]:
                if ref and "output" in row.get(tool, {}):
                    row[tool]["valid"] = compare(row[tool]["output"][0], ref[0]) and compare(row[tool]["output"][1], ref[1])
            for tool in tools:
                row.get(tool, {}).pop("output", None)
            rows.append(row)
            print(ev, label, {k: ({kk: (round(vv * 1e3, 3) if isinstance(vv, float) else vv) for kk, vv in v.items()}
                                  if isinstance(v, dict) else v) for k, v in row.items() if k in tools},
                  flush=True)
        results[ev] = rows
    reel.close()
    hand.close()
    # Evals run now replace theirs in the results file; the others' results are kept.
    out = os.path.join(out_dir, name)
    everything = json.load(open(out)) if os.path.exists(out) else {}
    everything.update(results)
    with open(out, "w") as f:
        json.dump(everything, f, indent=1)
    if charts_too:
        charts(results, out_dir, threads)
    print(f"\nevery tool on {threads} thread{'s' if threads > 1 else ''}:")
    table(everything)
    scalar_table(everything)
    print(f"wrote {out}" + (f" and {os.path.join(out_dir, '<eval>.png')}" if charts_too else ""))


def charts(results, out_dir, threads=1):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for ev, rows in results.items():
        fig, ax = plt.subplots(figsize=(7, 4))
        for tool, colour in [("reel", "tab:blue"), ("reel-scalar", "tab:cyan"), ("hand", "tab:green"),
                             ("torch", "tab:red")]:
            pts = [(i, r[tool]) for i, r in enumerate(rows) if "derivative_s" in r.get(tool, {})]
            if not pts:
                continue
            xs = [i for i, _ in pts]
            ax.plot(xs, [v["derivative_s"] * 1e3 for _, v in pts], "o-", color=colour, label=f"{tool} derivative")
            ax.plot(xs, [v["primal_s"] * 1e3 for _, v in pts], "x--", color=colour, alpha=0.6, label=f"{tool} primal")
        ax.set_yscale("log")
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([r["workload"] for r in rows], rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("ms (mean of runs)")
        ax.set_title(f"GradBench {ev}: Reel, hand-written C++, PyTorch ({threads} thread{'s' if threads > 1 else ''})")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, f"{ev}.png"), dpi=110)
        plt.close(fig)


def table(results):
    print("\n| eval | largest workload run by all | Reel derivative | hand-written | PyTorch | Reel/hand | Reel/PyTorch | worst Reel/PyTorch (workload) | Reel prepare |")
    print("|---|---|---|---|---|---|---|---|---|")
    for ev, rows in results.items():
        tools = ["reel", "torch"] + (["hand"] if ev in HAND_EVALS else [])
        done = [r for r in rows if all("derivative_s" in r.get(t, {}) for t in tools)]
        if not done:
            print(f"| {ev} | none | | | | | | | |")
            continue
        r = done[-1]
        rd, td = r["reel"]["derivative_s"], r["torch"]["derivative_s"]
        hd = r["hand"]["derivative_s"] if "hand" in tools else None
        worst = max(done, key=lambda w: w["reel"]["derivative_s"] / w["torch"]["derivative_s"])
        wr = worst["reel"]["derivative_s"] / worst["torch"]["derivative_s"]
        print(f"| {ev} | {r['workload']} | {rd * 1e3:.3f} ms | " + (f"{hd * 1e3:.3f} ms" if hd else "-") +
              f" | {td * 1e3:.3f} ms | " + (f"{rd / hd:.2f}" if hd else "-") + f" | {rd / td:.2f} | "
              f"{wr:.2f} ({worst['workload']}) | {r['reel']['prepare_s']:.2f} s |")


def scalar_table(results):
    """reel-scalar (GradBench's C++ with reel::Real) against reel, each workload both ran."""
    rows = [(ev, r) for ev, rs in results.items() for r in rs
            if "derivative_s" in r.get("reel-scalar", {}) and "derivative_s" in r.get("reel", {})]
    if not rows:
        return
    print("\n| eval | workload | reel derivative | reel-scalar derivative | scalar/reel | reel prepare | "
          "reel-scalar prepare | valid |")
    print("|---|---|---|---|---|---|---|---|")
    for ev, r in rows:
        rd, sd = r["reel"]["derivative_s"], r["reel-scalar"]["derivative_s"]
        print(f"| {ev} | {r['workload']} | {rd * 1e3:.3f} ms | {sd * 1e3:.3f} ms | {sd / rd:.2f} | "
              f"{r['reel']['prepare_s']:.2f} s | {r['reel-scalar']['prepare_s']:.2f} s | "
              f"{r['reel-scalar'].get('valid', '-')} |")


if __name__ == "__main__":
    sys.exit(main())
