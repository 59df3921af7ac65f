"""Start-up benchmark: how long until the first gradient, in a new process.

For each case a fresh Python process imports numpy and hybridad, builds the
plan (trace, partition, autodiff, memory plan, code generation, numba
compilation or its disk cache) and makes one ``plan.gradient`` call:

* ``cold``: an empty ``HYBRIDAD_CACHE_DIR`` (everything is compiled);
* ``warm``: the same directory again (the plan's machine code comes from the
  disk cache).

Reported per run: ``import_s`` (``import hybridad`` after numpy), ``plan_s``
(``ha.compile`` plus the first call), ``to_first_result_s`` (from the first
line of the child script -- before ``import numpy`` -- to the first result)
and ``process_s`` (the child's whole wall time measured by the parent,
interpreter start-up and exit included).  Medians of ``--repeats`` cold
runs (each in a new directory) and as many warm runs (one from each).

Targets (numba issue): cold first call (trace + compile) <= 3 s; warm
``to_first_result_s`` <= 1 s, import included.

    python benchmarks/bench_startup.py [--repeats 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent("""
    import time
    t0 = time.perf_counter()
    import numpy as np
    t1 = time.perf_counter()
    import hybridad as ha
    t2 = time.perf_counter()
    CASE = {case!r}
    rng = np.random.default_rng(0)
    if CASE == "expsum":
        def f(x):
            r = np.sum(np.exp(-3 * (x + 1)))
            return r ** 2 + r ** 3 + r ** 4 / 4
        args, argnums = (rng.random(100),), 0
    elif CASE == "quadform":
        A = [rng.standard_normal((500, 500)) for _ in range(10)]
        def f(x):
            return sum(x @ (a @ x) for a in A)
        args, argnums = (rng.random(500),), 0
    else:
        X = rng.uniform(-1, 1, (1000, 1))
        Y = np.sin(np.pi * X)
        def f(W1, b1, W2, b2, W3, b3):
            h = np.tanh(X @ W1 + b1)
            h = np.tanh(h @ W2 + b2)
            return np.mean((h @ W3 + b3 - Y) ** 2)
        args = (rng.standard_normal((1, 16)), np.zeros(16), rng.standard_normal((16, 16)) / 4,
                np.zeros(16), rng.standard_normal((16, 1)) / 4, np.zeros(1))
        argnums = tuple(range(6))
    plan = ha.compile(f, *args, argnums=argnums)
    res = plan.gradient(*args)
    t3 = time.perf_counter()
    assert np.isfinite(float(res.value))
    print(t2 - t1, t3 - t2, t3 - t0)
""")

CASES = ("expsum", "quadform", "mlp")


def run_child(case, cache_dir):
    env = dict(os.environ, HYBRIDAD_CACHE_DIR=str(cache_dir))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD.format(case=case)], env=env,
                         capture_output=True, text=True, check=True)
    process = time.perf_counter() - t
    imp, plan, first = map(float, out.stdout.split())
    return {"import_s": imp, "plan_s": plan, "to_first_result_s": first,
            "process_s": process}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5, help="cold and warm runs per case (medians)")
    p.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    a = p.parse_args(argv)
    rows = []
    print(f"{'case':<10}{'run':<6}{'import_s':>10}{'plan_s':>10}{'first_result_s':>16}"
          f"{'process_s':>11}")
    for case in a.cases:
        cold_runs, warm_runs = [], []
        for _ in range(a.repeats):  # interleaved: a fresh directory, then warm from it
            with tempfile.TemporaryDirectory() as cache_dir:
                cold_runs.append(run_child(case, cache_dir))
                warm_runs.append(run_child(case, cache_dir))
        cold = {k: statistics.median(r[k] for r in cold_runs) for k in cold_runs[0]}
        warm = {k: statistics.median(r[k] for r in warm_runs) for k in cold_runs[0]}
        for name, r in (("cold", cold), ("warm", warm)):
            rows.append({"case": case, "run": name, **r})
            print(f"{case:<10}{name:<6}{r['import_s']:>10.3f}{r['plan_s']:>10.3f}"
                  f"{r['to_first_result_s']:>16.3f}{r['process_s']:>11.3f}")
    if a.json:
        Path(a.json).write_text(json.dumps({"rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
