"""The GPU sums' launch shapes, measured: each sum of :mod:`hybridad.backends.cuda.reduce`
(its levels of kernels) under a few settings of the module's ``PER_THREAD``
(elements a thread of a non-final level adds), ``UNROLL`` (loads in flight
per thread) and ``THREADS`` (the threads a level aims at).

For each setting and case (a shape, the axes summed, a dtype), the levels are
generated, compiled and launched as a plan's program launches them; the
figure is the median device time of one whole sum (CUDA events around 20
launches of every level, 5 repeats).  The results of every setting are
checked against each other (the order of additions differs between settings,
so to rounding) and against numpy.

Needs a GPU: ``python benchmarks/tune_gpu_sums.py``.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402

_harness.use_checkout()

from bench_gpu import gpu_missing  # noqa: E402

from hybridad.backends.cuda import reduce  # noqa: E402
from hybridad.backends.cuda.program import CupyLauncher  # noqa: E402

CASES = [((10**7,), (0,), np.float64), ((10**7,), (0,), np.float32),
         ((10**6,), (0,), np.float64), ((10**5, 16), (0,), np.float64),
         ((10**5, 16), (1,), np.float64), ((4096, 4096), (0,), np.float64),
         ((4096, 4096), (1,), np.float64), ((10**4, 64), (0,), np.float64)]

SETTINGS = [(64, 1, 1 << 18), (64, 8, 1 << 18), (32, 8, 1 << 18), (16, 8, 1 << 18),
            (128, 8, 1 << 18), (64, 4, 1 << 18), (64, 8, 1 << 16), (256, 8, 1 << 18)]


def one_sum(cp, shape, axis, dtype, x):
    """A callable running every level of the sum of ``x``, and its result."""
    levels = reduce.sum_levels(shape, None, axis, dtype)
    calls = CupyLauncher().build([lv.kernel for lv in levels])
    scratch = cp.empty(max(1, reduce.sum_scratch(shape, axis, dtype)), np.float64)
    out = cp.empty([s for d, s in enumerate(shape) if d not in axis], dtype)
    double = np.dtype(dtype) == np.float64
    bound = []
    for call, level in zip(calls, levels, strict=True):
        args = []
        for role, where in (("x", level.source), ("y", level.dest)):
            if where is None:
                args.append(x if role == "x" else out)
                continue
            off, count = where
            args.append(scratch[off:off + count])
            if double:
                args.append(scratch[off + count:off + 2 * count])
        bound.append((call, args))

    def run():
        for call, args in bound:
            call(*args)
    return run, out, len(levels)


def main():
    if gpu_missing("tune_gpu_sums"):
        return 1
    import cupy as cp

    rng = np.random.default_rng(0)
    rows = []
    for shape, axis, dtype in CASES:
        host = rng.uniform(-1, 1, shape).astype(dtype)
        x = cp.asarray(host)
        want = host.astype(np.float64).sum(axis=axis)
        line = [f"{'x'.join(map(str, shape))} axis {axis} {np.dtype(dtype).name}"]
        for per, unroll, threads in SETTINGS:
            reduce.PER_THREAD, reduce.UNROLL, reduce.THREADS = per, unroll, threads
            try:
                run, out, nlev = one_sum(cp, shape, axis, dtype, x)
                run()
                cp.cuda.Device().synchronize()
            except Exception as e:  # noqa: BLE001 -- said in the table, the others go on
                line.append(f"failed: {e}")
                continue
            err = float(np.max(np.abs(cp.asnumpy(out) - want)) / max(1.0, np.abs(want).max()))
            if err > (1e-6 if dtype == np.float32 else 1e-13):
                line.append(f"wrong: {err:.1e}")
                continue
            times = []
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            for _ in range(5):
                start.record()
                for _ in range(20):
                    run()
                stop.record()
                stop.synchronize()
                times.append(cp.cuda.get_elapsed_time(start, stop) * 1e3 / 20)
            line.append(f"{statistics.median(times):7.1f} ({nlev})")
        rows.append(line)
    head = ["case"] + [f"P{p} U{u} T2^{t.bit_length() - 1}" for p, u, t in SETTINGS]
    print(" | ".join(head))
    for line in rows:
        print(" | ".join(line))
    print("us per sum (levels); settings: PER_THREAD, UNROLL, THREADS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
