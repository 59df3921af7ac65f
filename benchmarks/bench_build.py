"""Build-time benchmark: the cost of building a plan per traced node, from 10^3
to 10^5 nodes: a build linear in the traced nodes.

A plan's build -- the trace of ``f``, region fusion, the reverse pass, the
lowering passes, the memory plan and the backend's program -- should cost
time linear (or ``n log n``) in the number of traced nodes, so that a long
unrolled loop costs in proportion to its length.  Each case here is a Python
loop unrolled into the trace, at trip counts giving about 10^3, 10^4 and
10^5 traced nodes; every row is one build in a fresh process (so no row
inherits another's heap, caches or garbage), after a build of the same case
at 60 steps (the process's one-time costs -- imports, first loads of
library kernels -- are not the per-node cost), with ``backend="numpy"``: trace,
passes and code generation, without numba's compile (numba compiles the
generated function in time of its own, superlinear in the size of one
function; loop rolling is what removes it).  The children run with
``HYBRIDAD_ROLL=0``: by default the loop would be rolled
(:mod:`hybridad.transforms.rolling`) and the passes would see one step;
``benchmarks/bench_loops.py`` measures rolled loops.

Cases:

* ``euler`` -- explicit Euler steps of a 50-dimensional nonlinear ODE,
  ``x = x + dt * tanh(W @ x)``, then ``sum(x**2)``; gradient w.r.t. ``x0``;
* ``rnn`` -- an RNN over a sequence, ``h = tanh(W @ h + U[:, k] * x[k])``
  (a per-step input row), then ``sum(h)``; gradient w.r.t. ``W``.

Columns: ``nodes`` (traced, ``plan.build_times.nodes``), ``total_s``, then
microseconds per traced node, in total and for each stage of
``plan.build_times`` (see :mod:`hybridad.plans.buildtime`), and ``flat``: the
row's total per node over the smallest row's of its case.  The goal: ``flat``
at most 2 across the range (tests/test_build_time.py checks 10^3 against
10^4 nodes in the suite).

    python benchmarks/bench_build.py [--cases euler rnn] [--sizes 1000 10000 100000]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: traced nodes per step of each case (to choose the trip count for a size)
NODES_PER_STEP = {"euler": 6, "rnn": 7}

CHILD = r'''
import json, sys, time
import numpy as np
import hybridad as ha
case = sys.argv[1]
rng = np.random.default_rng(0)
n = 50


def build(case, steps):
    W = rng.standard_normal((n, n)) / np.sqrt(n)
    if case == "euler":
        dt = 0.01
        def f(x):
            for _ in range(steps):
                x = x + dt * np.tanh(W @ x)
            return np.sum(x ** 2)
        arg = rng.standard_normal(n)
    elif case == "rnn":
        U = rng.standard_normal((n, steps))
        xs = rng.standard_normal(steps)
        def f(W):
            h = np.zeros(n)
            for k in range(steps):
                h = np.tanh(W @ h + U[:, k] * xs[k])
            return np.sum(h)
        arg = W
    else:
        raise SystemExit(f"unknown case {case}")
    return f, arg


# one-time costs -- imports, first loads of library kernels (the content hash of a
# captured array over 16 KiB is a numba kernel: rnn's U at 60 steps) -- not counted
ha.compile(*build(case, 60), backend="numpy")
f, arg = build(case, int(sys.argv[2]))
t0 = time.perf_counter()
plan = ha.compile(f, arg, backend="numpy")
wall = time.perf_counter() - t0
b = plan.build_times
print(json.dumps({"nodes": b.nodes, "total_s": wall, "stages": b.stages}))
'''


def run_one(case, size):
    steps = max(1, round(size / NODES_PER_STEP[case]))
    env = dict(os.environ, HYBRIDAD_ROLL="0",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", CHILD, case, str(steps)], env=env,
                         capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    row.update(case=case, size=size, steps=steps)
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=list(NODES_PER_STEP))
    ap.add_argument("--sizes", nargs="+", type=int, default=[1000, 10000, 100000])
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _harness
    _harness.installed_bytecode()  # (what an install compiles)
    rows = []
    for case in args.cases:
        for size in args.sizes:
            row = run_one(case, size)
            rows.append(row)
            print(f"  {case:6} {row['nodes']:7d} nodes  {row['total_s']:8.2f} s", flush=True)
    stages = list(dict.fromkeys(k for r in rows for k in r["stages"]))
    print("\nMicroseconds per traced node (one build per fresh process, backend='numpy'):\n")
    print("| case | nodes | total_s | us/node | flat | " + " | ".join(stages) + " |")
    print("|---" * (5 + len(stages)) + "|")
    worst = {}
    for case in args.cases:
        mine = [r for r in rows if r["case"] == case]
        base = 1e6 * mine[0]["total_s"] / mine[0]["nodes"]
        for r in mine:
            per = 1e6 * r["total_s"] / r["nodes"]
            r["us_per_node"], r["flat"] = per, per / base
            worst[case] = max(worst.get(case, 0.0), r["flat"])
            cells = [f"{1e6 * r['stages'].get(s, 0.0) / r['nodes']:.1f}" for s in stages]
            print(f"| {case} | {r['nodes']} | {r['total_s']:.2f} | {per:.1f} | "
                  f"{r['flat']:.2f}x | " + " | ".join(cells) + " |")
    print("\nflat (largest per-node cost over the smallest size's, goal <= 2.0x): " +
          ", ".join(f"{c} {w:.2f}x ({'met' if w <= 2.0 else 'NOT met'})"
                    for c, w in worst.items()))
    if args.json:
        meta = {"python": sys.version.split()[0], "machine": platform.machine(),
                "cpus": os.cpu_count()}
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
