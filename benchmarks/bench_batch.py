"""Batched gradients: one small model evaluated at many points.

The exp-sum objective (bench_core's ``expsum``, n = 100) at B = 10^5 points
(``--quick``: 10^4), three ways, each checked against the first to 1e-12:

* ``gradient_batch``: ``plan.gradient_batch(X, out=res)`` -- all B in one
  compiled call (the graph batched along a leading axis); and the same from
  a plan compiled with ``parallel=False`` (every loop in the calling thread);
* ``B single calls``: ``plan.gradient(X[b], out=res_b)`` in a Python loop over
  preallocated results (what a user writes without batching);
* ``hand numba``: a ``@numba.njit(parallel=True)`` loop over the batch
  (``prange``) calling the hand-written expsum kernel of
  :mod:`hybridad.bench.kernels` per point.

Reported: median / min / max milliseconds per batch (interleaved repeats,
``hybridad.bench.harness.time_round_robin``), gradients per second, the
ratio to the hand-written loop and numpy allocations per batch.

Usage: ``python benchmarks/bench_batch.py [--quick] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402,F401  (the checkout first on sys.path)

import hybridad as ha  # noqa: E402
from hybridad.bench.harness import (allocations_per_call, format_table,  # noqa: E402
                                    relative_error, time_round_robin, write_json)
from hybridad.bench.kernels import _expsum_kernel  # noqa: E402


def expsum(x):
    r = np.sum(np.exp(-3.0 * (x + 1.0)))
    return r ** 2 + r ** 3 + r ** 4 / 4


def hand_batch():
    import numba

    kernel = numba.njit(_expsum_kernel)

    @numba.njit(parallel=True)
    def run(X, values, grads):
        for b in numba.prange(X.shape[0]):
            values[b] = kernel(X[b], grads[b])

    return run


COLUMNS = (("impl", "impl", "{}"), ("B", "B", "{:,}"), ("median_ms", "median_ms", "{:.2f}"),
           ("min_ms", "min_ms", "{:.2f}"), ("max_ms", "max_ms", "{:.2f}"),
           ("gradients/s", "rate", "{:,.0f}"), ("vs hand numba", "ratio", "{:.2f}"),
           ("allocs/batch", "allocs", "{:g}"))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="B = 1e4, 3 rounds")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    B, n = (10**4 if args.quick else 10**5), 100
    repeats, target_ms = (3, 20.0) if args.quick else (7, 100.0)
    X = np.random.default_rng(0).uniform(-1, 1, (B, n))
    plan = ha.compile(expsum, X[0], wait=True)
    serial = ha.compile(expsum, X[0], parallel=False, wait=True)
    batch = ha.DiffResult(np.zeros(B), np.zeros_like(X))
    batch_serial = ha.DiffResult(np.zeros(B), np.zeros_like(X))
    singles = [ha.GradientResult(X[0]) for _ in range(B)]
    values, grads = np.zeros(B), np.zeros_like(X)
    run = hand_batch()

    def call_batch():
        plan.gradient_batch(X, out=batch)

    def call_serial():
        serial.gradient_batch(X, out=batch_serial)

    def call_singles():
        for b in range(B):
            plan.gradient(X[b], out=singles[b])

    def call_hand():
        run(X, values, grads)

    for call in (call_batch, call_serial, call_singles, call_hand):
        call()
    single_g = np.stack([r.gradient for r in singles])
    for name, got in (("B single calls", single_g), ("hand numba", grads),
                      ("gradient_batch serial", batch_serial.derivs[0])):
        err = relative_error(got, batch.derivs[0])
        if err > 1e-12:
            raise SystemExit(f"{name} disagrees with gradient_batch ({err:.1e})")
    calls = {"gradient_batch": call_batch, "gradient_batch serial": call_serial,
             "B single calls": call_singles, "hand numba": call_hand}
    timings = time_round_robin(list(calls.values()), repeats, target_ms)
    hand = timings[3][0]
    rows = []
    for (name, call), (median, lo, hi, _) in zip(calls.items(), timings, strict=True):
        allocs = allocations_per_call(call, 2)[0] if name != "B single calls" else \
            allocations_per_call(call, 1)[0]
        rows.append({"impl": name, "B": B, "median_ms": median / 1e3, "min_ms": lo / 1e3,
                     "max_ms": hi / 1e3, "rate": B / (median / 1e6), "ratio": median / hand,
                     "allocs": allocs})
    print(format_table(rows, COLUMNS, {"impl"}))
    if args.json:
        write_json(args.json, rows, {"quick": args.quick, "n": n})
    return 0


if __name__ == "__main__":
    sys.exit(main())
