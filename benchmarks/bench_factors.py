"""One factorization per matrix (hybridad/transforms/factors.py), A/B/C in one run.

The gradient of a Gaussian process's negative log-likelihood (bench_gpu.py's
``gp``: cholesky and ``np.linalg.solve`` of one n x n kernel matrix, w.r.t.
the hyperparameters and the inputs) on the numba backend, built twice in one
process: as the lowering now does (both solves by the Cholesky factor the
function makes anyway, the kernel matrix being symmetric), with LU factors
alone (the forward solve's gesv keeps them, the reverse sweep's solve with
the transpose reads them) and with the pass left out (a second gesv on the
transpose).  Interleaved calls,
medians in ms, and each plan's workspace.

``python benchmarks/bench_factors.py [--n 300 1000] [--repeats 9]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402

_harness.use_checkout()

import bench_gpu  # noqa: E402

import hybridad as ha  # noqa: E402
from hybridad.transforms import pipeline  # noqa: E402
from hybridad.transforms.factors import share_factorizations  # noqa: E402


def plans(n):
    rng = np.random.default_rng(0)
    args = [np.array([0.0, 0.0, np.log(0.5)]), rng.uniform(-1, 1, (n, 3)),
            rng.standard_normal(n), np.eye(n)]
    factor = ha.compile(bench_gpu.gp, *args, argnums=(0, 1))
    entry = pipeline.PASSES["share_factorizations"]
    pipeline.PASSES["share_factorizations"] = (entry[0], lambda nodes, ins, outs, upd, mach: (
        share_factorizations(nodes, outs, cholesky=False)))
    try:
        lu = ha.plans.plan.Plan(bench_gpu.gp, args, argnums=(0, 1))
    finally:
        pipeline.PASSES["share_factorizations"] = entry
    saved = pipeline.LOWERING["numba"]
    pipeline.LOWERING["numba"] = tuple(p for p in saved if p != "share_factorizations")
    try:
        apart = ha.plans.plan.Plan(bench_gpu.gp, args, argnums=(0, 1))
    finally:
        pipeline.LOWERING["numba"] = saved
    return args, {"cholesky factor": factor, "one LU": lu, "two (gesv twice)": apart}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, nargs="+", default=[300, 1000])
    p.add_argument("--repeats", type=int, default=9)
    a = p.parse_args(argv)
    for n in a.n:
        args, built = plans(n)
        results = {k: plan.new_result() for k, plan in built.items()}
        times = {k: [] for k in built}
        for k, plan in built.items():
            plan.gradient(*args, out=results[k])
        for _ in range(a.repeats):
            for k, plan in built.items():
                t0 = time.perf_counter()
                plan.gradient(*args, out=results[k])
                times[k].append(time.perf_counter() - t0)
        ms = {k: statistics.median(times[k]) * 1e3 for k in built}
        two = ms["two (gesv twice)"]
        print(f"n = {n}: " + ", ".join(
            f"{k} {v:.2f} ms ({v / two:.2f}x, workspace "
            f"{built[k].memory.total_bytes / 1e6:.1f} MB)" for k, v in ms.items()))
        for k in built:
            np.testing.assert_allclose(results[k].gradient[1],
                                       results["two (gesv twice)"].gradient[1], rtol=1e-9,
                                       atol=1e-12)
    return 0


if __name__ == "__main__":
    sys.exit(main())
