"""Where a plan's time goes: per-node profiles of compiled numba plans.

For each workload and size, with ``parallel=True`` and ``parallel=False``,
builds the gradient plan (untiered: the compiled numba program, not the
numpy reference tier), then :func:`hybridad.plans.profile.profile`: the
plan's program compiled again with a clock read after every node, called
in turn with the plan's own program; per node the median nanoseconds over
the calls.  Prints per workload the slowest nodes and the totals by kind
(region, region_reduce, matmul, reduction, copy, lapack, other, entry) and
writes everything as JSON (``--json``).

Workloads (float64): ``python -m hybridad bench``'s ``mlp`` (tanh MLP
1-16-16-1, B = 10^3, 10^4, 10^5), ``chain`` (n = 10^5, 10^6), ``quadform``
(K = 10, D = 500), ``expsum`` (n = 10^5, 10^6), and ``wide`` (the same MLP
64-256-256-10 at B = 256, 1024, 4096).  ``--quick``: the smaller sizes.

Usage::

    python benchmarks/profile_plan.py [--quick] [--json FILE] [--workloads mlp wide]
                                      [--parallel on|off|both] [--top 10] [--budget 1.0]
                                      [--clock wall|cpu]

Timings on a shared machine are noisy: each row is a median over the calls
(``--budget`` seconds of calls per plan, 5 to 200 of them), and the
summary line of each table compares the run's median (stretched by any stall
in any node) with the sum of the rows' medians.  ``--clock cpu`` times the
calling thread's CPU time instead (BLAS single-threaded): serial plans
without the time slices other processes take.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HYBRIDAD_TIERED", "0")  # profile the numba program, not tier 0

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402,F401  (the checkout first on sys.path)

import numba  # noqa: E402

import hybridad as ha  # noqa: E402
from hybridad.bench.harness import machine, write_json  # noqa: E402
from hybridad.bench.workloads import make_problem, mlp_problem  # noqa: E402
from hybridad.plans.profile import profile  # noqa: E402

WIDE = (64, 256, 256, 10)
#: workload -> (full sizes, --quick sizes)
SIZES = {
    "mlp": ((10**3, 10**4, 10**5), (10**3, 10**4)),
    "wide": ((256, 1024, 4096), (256, 1024)),
    "chain": ((10**5, 10**6), (10**5,)),
    "quadform": ((500,), (100,)),
    "expsum": ((10**5, 10**6), (10**4,)),
}


def problem(workload, size):
    if workload == "wide":
        import numpy as np

        p = mlp_problem(size, np.random.default_rng(0), widths=WIDE)
        return "wide mlp 64-256-256-10", p
    p = make_problem(workload, size)
    return p.name, p


def run(workloads, quick, parallels, top, budget, repeats, clock="wall"):
    results = []
    for workload in workloads:
        for size in SIZES[workload][1 if quick else 0]:
            name, p = problem(workload, size)
            for parallel in parallels:
                t0 = time.perf_counter()
                plan = ha.compile(p.f, *p.args, argnums=p.argnums, parallel=parallel,
                                  tiered=False)
                prof = profile(plan, *p.args, repeats=repeats, budget_s=budget, clock=clock)
                took = time.perf_counter() - t0
                print(f"\n== {name}, {workload} size {size}, parallel={parallel} "
                      f"(work {plan.work:.3g} element ops, {len(plan.graph.nodes)} nodes; "
                      f"built and profiled in {took:.1f} s)")
                print(prof.table(top=top))
                results.append({"workload": workload, "case": name, "size": size,
                                "work": plan.work, **prof.to_dict()})
    return results


def summary(results):
    """One line per profile: the run and the shares of the main kinds."""
    kinds = ("region", "region_reduce", "matmul", "reduction", "copy", "other")
    head = f"{'case':<26} {'size':>8} {'par':<5} {'rows_us':>9} {'run_us':>9} " + \
        " ".join(f"{k:>13}" for k in kinds) + "  top node"
    lines = [head, "-" * len(head)]
    for r in results:
        by = r["by_kind"]
        top = max(r["rows"], key=lambda x: x["median_ns"])
        lines.append(f"{r['case']:<26.26} {r['size']:>8} {str(r['parallel']):<5} "
                     f"{r['nodes_ns'] / 1e3:9.1f} {r['total_ns'] / 1e3:9.1f} " +
                     " ".join(f"{100 * by.get(k, {'share': 0})['share']:12.1f}%" for k in kinds)
                     + f"  %{top['node']} {top['op']} {100 * top['share']:.0f}%")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the smaller sizes only")
    ap.add_argument("--json", help="write {'rows': [...], 'meta': {...}} here")
    ap.add_argument("--workloads", nargs="+", default=list(SIZES), choices=list(SIZES))
    ap.add_argument("--parallel", choices=("on", "off", "both"), default="both")
    ap.add_argument("--top", type=int, default=10, help="rows per table (slowest first)")
    ap.add_argument("--budget", type=float, default=1.0,
                    help="seconds of calls per plan (sets the repeats)")
    ap.add_argument("--repeats", type=int, default=None, help="calls per plan (overrides)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: the calling thread's CPU time, BLAS single-threaded (serial "
                         "plans on a busy machine; see hybridad.plans.profile)")
    args = ap.parse_args(argv)
    parallels = {"on": (True,), "off": (False,), "both": (True, False)}[args.parallel]
    print(f"hybridad from {Path(ha.__file__).parent}; numba {numba.__version__}, "
          f"{numba.config.NUMBA_NUM_THREADS} threads; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    results = run(args.workloads, args.quick, parallels, args.top, args.budget, args.repeats,
                  args.clock)
    print("\nsummary (shares of the sum of the rows' medians):")
    print(summary(results))
    if args.json:
        meta = {**machine(), "threads": numba.config.NUMBA_NUM_THREADS,
                "threading_layer": _threading_layer(), "loadavg": os.getloadavg(),
                "clock": results[0]["clock"] if results else None}
        write_json(args.json, results, meta)
        print(f"wrote {args.json}")
    return 0


def _threading_layer():
    try:
        return numba.threading_layer()
    except ValueError:  # no parallel code ran
        return None


if __name__ == "__main__":
    sys.exit(main())
