"""One process against a dask.distributed cluster for a batched gradient.

The workload: a logistic loss ``f(w) = mean(log(1 + exp(-y * (A @ w))))`` over
a fixed data set ``A`` (m = 64 samples, d = 32 features), evaluated with its
gradient at B = 10^6 points ``w`` (the rows of ``W``; ``--quick``: 2 * 10^5),
``hybridad.dask.gradient_map`` over row blocks of 25 000.  ``W`` is generated
on the workers (``dask.array.random``) and held in their memory before the
timing starts, as the one-process rows hold their blocks; each run reduces
the values and gradients there (their sums), so that what is timed is the
work, not moving 10^6 x 32 floats through the client.  Rows:

* ``one process, serial``: ``plan.gradient_batch`` over the same blocks in a
  Python loop, a plan compiled with ``parallel=False`` and BLAS on one thread
  (one core, as each worker);
* ``one process, 2 threads``: the same blocks, the plan's own loops on all
  cores (``parallel=True``);
* ``LocalCluster 2 x 1``: two worker processes of one thread each;
* ``per-task cost``: the same cluster on B / 40 rows in 40 blocks, the wall
  time of a run less the blocks' compute time in one process (shared by the
  two workers), per block and worker; beside it dask's own cost of the same
  graph, with a block that only copies its rows.

Medians of ``--repeats`` runs after a warm-up run (the workers' first run
builds their plan, from the disk cache when it holds it).  The first run on the
cluster is reported apart (``first run``).  Checked: every row's sums agree
with the serial row's to 1e-10.

Usage: ``python benchmarks/bench_dask.py [--quick] [--repeats N] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402,F401  (the checkout first on sys.path)

import hybridad as ha  # noqa: E402
from hybridad.bench.harness import format_table, write_json  # noqa: E402

M, D, CHUNK = 64, 32, 25_000


def data():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((M, D))
    y = np.where(rng.uniform(size=M) < 0.5, -1.0, 1.0)
    return A, y


def logistic(w, A, y):
    return np.mean(np.logaddexp(0.0, -y * (A @ w)))


def timed(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times), out


COLUMNS = (("setup", "impl", "{}"), ("B", "B", "{:,}"), ("median s", "median", "{:.3f}"),
           ("min s", "min", "{:.3f}"), ("max s", "max", "{:.3f}"),
           ("vs one process", "ratio", "{:.2f}"), ("first run s", "first", "{}"))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="B = 2e5, 3 repeats")
    p.add_argument("--repeats", type=int)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    import dask
    import dask.array as da
    from distributed import Client, LocalCluster
    from threadpoolctl import threadpool_limits

    from hybridad.dask import gradient_map

    B = 2 * 10**5 if args.quick else 10**6
    repeats = args.repeats or (3 if args.quick else 5)
    A, y = data()
    W = da.random.default_rng(0).uniform(-1, 1, size=(B, D), chunks=(CHUNK, D))
    blocks = [np.asarray(b) for b in dask.compute(*W.to_delayed().ravel(),
                                                  scheduler="threads")]

    def local(parallel):
        plan = ha.compile(logistic, blocks[0][0], A, y, parallel=parallel, wait=True)
        res = {}

        def run():
            v, g = 0.0, np.zeros(D)
            for b in blocks:
                out = res.get(len(b))
                if out is None:
                    out = res[len(b)] = ha.DiffResult(np.zeros(len(b)), np.zeros_like(b))
                plan.gradient_batch(b, A, y, out=out)
                v += out.value.sum()
                g += out.derivs[0].sum(axis=0)
            return v, g

        run()
        return run

    rows, want = [], None
    for name, parallel in (("one process, serial", False), ("one process, 2 threads", True)):
        # serial: BLAS on one thread too, as on each worker (dask sets OPENBLAS_NUM_THREADS=1)
        with threadpool_limits(1 if not parallel else None):
            med, lo, hi, out = timed(local(parallel), repeats)
        want = out if want is None else want
        rows.append({"impl": name, "B": B, "median": med, "min": lo, "max": hi, "first": "-",
                     "sums": out})
    compute_per_row = rows[0]["median"] / B

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster):
        def persisted(rows_, chunk):  # the points, in the workers' memory before timing
            return da.random.default_rng(0).uniform(-1, 1, size=(rows_, D),
                                                    chunks=(chunk, D)).persist()

        def cluster_run(Wc, block=None):
            if block is None:
                values, grads = gradient_map(logistic, Wc, A, y)
            else:  # dask's own cost of the same graph: a block that only copies
                both = Wc.map_blocks(block, chunks=(Wc.chunks[0], (D + 1,)), dtype=Wc.dtype)
                values, grads = both[:, 0], both[:, 1:]
            v, g = dask.compute(values.sum(), grads.sum(axis=0))
            return float(v), g

        Wc = persisted(B, CHUNK)
        t0 = time.perf_counter()
        cluster_run(Wc)
        first = time.perf_counter() - t0
        med, lo, hi, out = timed(lambda: cluster_run(Wc), repeats)
        rows.append({"impl": "LocalCluster 2 x 1", "B": B, "median": med, "min": lo, "max": hi,
                     "first": f"{first:.2f}", "sums": out})
        small = persisted(B // 40, B // 1600)  # 40 blocks: mostly the cost of a task
        cluster_run(small)  # (a plan of the new block size on each worker)
        med_s = timed(lambda: cluster_run(small), repeats)[0]
        copy = functools.partial(np.pad, pad_width=((0, 0), (1, 0)))
        cluster_run(small, copy)
        med_d = timed(lambda: cluster_run(small, copy), repeats)[0]
        compute = compute_per_row * (B // 40) / 2  # two workers share the rows
        overhead = (med_s - compute) / 20  # 20 blocks a worker
        dask_overhead = med_d / 20
    for r in rows:
        r["ratio"] = r["median"] / rows[0]["median"]
        v, g = r.pop("sums")
        err = max(abs(v - want[0]) / abs(want[0]),
                  float(np.max(np.abs(g - want[1])) / np.max(np.abs(want[1]))))
        if err > 1e-10:
            raise SystemExit(f"{r['impl']} disagrees with the serial sums ({err:.1e})")
    print(format_table(rows, COLUMNS, {"impl"}))
    print(f"per-task cost on the cluster, 40 blocks of {B // 1600} rows: {overhead * 1e3:.1f} "
          f"ms a block beyond its compute ({med_s:.3f} s a run); dask's own, the same graph "
          f"with a block that only copies: {dask_overhead * 1e3:.1f} ms ({med_d:.3f} s)")
    if args.json:
        write_json(args.json, rows, {"quick": args.quick, "m": M, "d": D, "chunk": CHUNK,
                                     "task_overhead_s": overhead,
                                     "dask_task_overhead_s": dask_overhead})
    return 0


if __name__ == "__main__":
    sys.exit(main())
