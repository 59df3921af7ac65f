"""One LU factorization per matrix (hybridad/transforms/factors.py), A/B in one run.

The gradient of a Gaussian process's negative log-likelihood (bench_gpu.py's
``gp``: cholesky and ``np.linalg.solve`` of one n x n kernel matrix, w.r.t.
the hyperparameters and the inputs) on the numba backend, built twice in one
process: as the lowering now does (the forward solve's gesv keeps its LU
factors, the reverse sweep's solve with the transpose reads them) and with
the pass left out (a second gesv on the transpose).  Interleaved calls,
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


def plans(n):
    rng = np.random.default_rng(0)
    args = [np.array([0.0, 0.0, np.log(0.5)]), rng.uniform(-1, 1, (n, 3)),
            rng.standard_normal(n), np.eye(n)]
    shared = ha.compile(bench_gpu.gp, *args, argnums=(0, 1))
    saved = pipeline.LOWERING["numba"]
    pipeline.LOWERING["numba"] = tuple(p for p in saved if p != "share_factorizations")
    try:
        apart = ha.plans.plan.Plan(bench_gpu.gp, args, argnums=(0, 1))
    finally:
        pipeline.LOWERING["numba"] = saved
    return args, {"one factorization": shared, "two (gesv twice)": apart}


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
        first, second = (statistics.median(times[k]) * 1e3 for k in built)
        one, two = built.values()
        print(f"n = {n}: one factorization {first:.2f} ms, two {second:.2f} ms "
              f"({first / second:.2f}x); workspace {one.memory.total_bytes / 1e6:.1f} MB "
              f"against {two.memory.total_bytes / 1e6:.1f} MB")
        np.testing.assert_allclose(results["one factorization"].gradient[1],
                                   results["two (gesv twice)"].gradient[1], rtol=1e-9,
                                   atol=1e-12)
    return 0


if __name__ == "__main__":
    sys.exit(main())
