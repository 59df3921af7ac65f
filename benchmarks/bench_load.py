"""Parallel plans on a busy machine: the default plan against ``parallel=False``.

A parallel plan's ``prange`` loops help only while cores are free.  This
script times, in one run, three plans of each workload -- the default
(parallel, its thread count chosen from measured calls:
:class:`hybridad.backends.numba.threads.ThreadChoice`), the same plan with
every call on all threads (``HYBRIDAD_THREAD_CHOICE=0``, what the default
did before) and ``parallel=False`` -- in four conditions:

* ``quiet``: nothing else runs (beyond what the machine runs anyway);
* ``twin``: a second process runs its own parallel hybridad plan in a loop
  (two jobs on one machine, a process pool, a parameter sweep);
* ``busy``: a second process spins a pure-Python loop;
* ``blas``: a thread of this process runs numpy matmuls in a loop (BLAS's
  own threads active in the same process).

Each plan is timed for ``--seconds`` of calls per condition (calls
alternate between the plans in rounds, so load changes hit all three
alike); rows give the median and the mean per call (the mean includes the
probes :class:`ThreadChoice` makes) and the ratio default / serial, whose
goal is at most 1.2 everywhere.

Workloads (float64, value + gradient): ``w1`` -- an elementwise objective
``sum((x^2 - 1)^2 + 0.5 x)`` at n = 10^6 (memory-bound: threads help on a
quiet machine), ``trig`` -- ``sum(exp(-x^2) sin x + log1p(x^2))`` at n = 10^6
(compute-bound), ``mlp`` -- the suite's tanh MLP 1-16-16-1 at B = 10^4
and 10^5.

Usage::

    python benchmarks/bench_load.py [--seconds 3] [--json FILE]
                                    [--conditions quiet twin busy blas]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("HYBRIDAD_TIERED", "0")  # time the compiled programs

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402,F401  (the checkout first on sys.path)

import numpy as np  # noqa: E402

import hybridad as ha  # noqa: E402
from hybridad.backends.numba.runner import NumbaProgram  # noqa: E402
from hybridad.bench.harness import machine, write_json  # noqa: E402
from hybridad.bench.workloads import mlp_problem  # noqa: E402

CONDITIONS = ("quiet", "twin", "busy", "blas")

_TWIN = """
import os, sys, time
os.environ["HYBRIDAD_TIERED"] = "0"
sys.path.insert(0, {root!r})
import numpy as np, hybridad as ha
x = np.linspace(-2, 2, 10**6)
plan = ha.compile(lambda x: np.sum((x * x - 1.0) ** 2 + 0.5 * x), x, wait=True)
res = ha.GradientResult(x)
print("ready", flush=True)
end = time.time() + {seconds}
while time.time() < end:
    plan.gradient(x, out=res)
"""

_BUSY = """
import time
print("ready", flush=True)
end = time.time() + {seconds}
while time.time() < end:
    pass
"""


def w1(x):
    return np.sum((x * x - 1.0) ** 2 + 0.5 * x)


def trig(x):
    return np.sum(np.exp(-x * x) * np.sin(x) + np.log1p(x * x))


def problems():
    """(name, f, args, argnums) per workload."""
    x = np.linspace(-2, 2, 10**6)
    out = [("w1 n=1e6", w1, (x,), 0), ("trig n=1e6", trig, (x,), 0)]
    for b in (10**4, 10**5):
        p = mlp_problem(b, np.random.default_rng(0))
        out.append((f"mlp B=1e{len(str(b)) - 1}", p.f, p.args, p.argnums))
    return out


def all_threads_plan(f, args, argnums):
    """The default plan as it was before thread choice: every call on all threads."""
    os.environ["HYBRIDAD_THREAD_CHOICE"] = "0"
    try:
        return ha.compile(f, *args, argnums=argnums, wait=True)
    finally:
        del os.environ["HYBRIDAD_THREAD_CHOICE"]


def build(f, args, argnums):
    plans = {"default": ha.compile(f, *args, argnums=argnums, wait=True),
             "all threads": all_threads_plan(f, args, argnums),
             "serial": ha.compile(f, *args, argnums=argnums, parallel=False, wait=True)}
    res = ha.GradientResult(args[argnums] if isinstance(argnums, int) else
                            tuple(args[i] for i in argnums))
    return plans, res


class Load:
    """A condition's load, started on enter and stopped on exit."""

    def __init__(self, name, seconds):
        self.name, self.seconds = name, seconds
        self.proc = self.thread = None
        self.stop = threading.Event()

    def __enter__(self):
        root = str(Path(__file__).resolve().parents[1])
        if self.name in ("twin", "busy"):
            src = (_TWIN if self.name == "twin" else _BUSY).format(root=root,
                                                                  seconds=self.seconds + 120)
            self.proc = subprocess.Popen([sys.executable, "-c", src], stdout=subprocess.PIPE,
                                         text=True)
            line = self.proc.stdout.readline()
            if "ready" not in line:
                raise RuntimeError(f"the {self.name} load did not start")
            time.sleep(0.5)
        elif self.name == "blas":
            a = np.random.default_rng(1).standard_normal((600, 600))

            def spin():
                while not self.stop.is_set():
                    a @ a

            self.thread = threading.Thread(target=spin, daemon=True)
            self.thread.start()
            time.sleep(0.3)
        return self

    def __exit__(self, *exc):
        self.stop.set()
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
        if self.thread is not None:
            self.thread.join()
        return False


def time_plans(plans, res, args, seconds):
    """Per plan: every call's seconds, the plans called in alternating rounds."""
    times = {k: [] for k in plans}
    for p in plans.values():  # warm
        p.gradient(*args, out=res)
    end = time.perf_counter() + seconds * len(plans)
    while time.perf_counter() < end:
        for k, p in plans.items():
            for _ in range(5):
                t = time.perf_counter()
                p.gradient(*args, out=res)
                times[k].append(time.perf_counter() - t)
    return times


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds of calls per plan")
    ap.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=CONDITIONS)
    ap.add_argument("--json", help="write the rows as JSON")
    a = ap.parse_args(argv)
    rows = []
    built = [(name, *build(f, args, argnums), args) for name, f, args, argnums in problems()]
    hdr = (f"{'workload':<12} {'condition':<7} {'default':>16} {'all threads':>16} "
           f"{'serial':>16} {'def/ser':>8} {'all/ser':>8}  chosen")
    print("median / mean ms per call;", os.cpu_count(), "cores;", machine().get("cpu_model", ""))
    print(hdr)
    for cond in a.conditions:
        with Load(cond, a.seconds * 3 * len(built)):
            for name, plans, res, args in built:
                t = time_plans(plans, res, args, a.seconds)
                med = {k: 1e3 * float(np.median(v)) for k, v in t.items()}
                mean = {k: 1e3 * float(np.mean(v)) for k, v in t.items()}
                prog = plans["default"]._program
                chosen = prog.threads.describe() if isinstance(prog, NumbaProgram) and \
                    prog.threads is not None else "(serial program)"
                row = {"workload": name, "condition": cond, "median_ms": med, "mean_ms": mean,
                       "default_over_serial": med["default"] / med["serial"],
                       "all_over_serial": med["all threads"] / med["serial"], "chosen": chosen,
                       "calls": {k: len(v) for k, v in t.items()},
                       "loadavg": os.getloadavg()[0]}
                rows.append(row)
                cell = "  ".join(f"{med[k]:7.3f}/{mean[k]:<7.3f}" for k in plans)
                print(f"{name:<12} {cond:<7} {cell} {row['default_over_serial']:8.2f} "
                      f"{row['all_over_serial']:8.2f}  {chosen}", flush=True)
    worst = max(r["default_over_serial"] for r in rows)
    print(f"worst default / serial: {worst:.2f} (goal <= 1.2)")
    if a.json:
        write_json(a.json, rows, machine())


if __name__ == "__main__":
    main()
