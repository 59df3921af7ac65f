"""numpy idioms as people write them against the vectorized rewrite: the
gradient plan of each, per call, with new inputs at every call (so that a
mask, an index or a selection differs from one call to the next).

Cases (n = 10^4, float64):

* ``mask_write`` -- ``y = x.copy(); y[y < 0] = 0`` against
  ``np.where(x < 0, 0, x)``;
* ``argmax_read`` -- ``x[np.argmax(x)]`` against ``np.max(x)``;
* ``lookup`` -- a hand-written piecewise-linear table ``table[j]``,
  ``j = floor(x (m - 1))``, against ``np.interp`` on the same grid (m = 101);
* ``block_write`` -- ``lap = np.zeros_like(u); lap[1:-1] = u[2:] - 2 u[1:-1]
  + u[:-2]`` against ``np.concatenate`` of the same pieces;
* ``augmented`` -- ``u = u.copy(); u[1:-1] += 0.2 (...)`` against the
  concatenation;
* ``mask_update`` -- ``y = np.sin(x); y[y < 0] *= 0.1`` (a leaky clamp)
  against ``np.where(y < 0, 0.1 y, y)``;
* ``argmax_write`` -- ``y = x.copy(); y[np.argmax(y)] = 0`` against
  ``np.where(np.arange(n) == np.argmax(x), 0, x)``;
* ``masked_sum`` -- ``np.sum(x[m] ** 2 * w[m])``, ``m = x > 0``, against
  ``np.sum(np.where(m, x ** 2 * w, 0))``;
* ``huber`` -- ``r = x - 0.1; small = |r| <= 0.5``, ``np.sum(0.5 r[small] ** 2)
  + np.mean(|r[~small]| - 0.25)`` against the same with ``np.where`` and
  ``np.count_nonzero``.

The goal: the idiom costs what its rewrite costs (``idiom / rewrite`` about
1).  ``jax.jit`` of the rewrite (x64; JAX cannot run the idioms as written:
its arrays are immutable) is timed in a process of its own, before
hybridad's rows, when jax is installed.  The inputs cycle through 12 arrays,
more than the 8 specializations a plan keeps.  Interleaved batches, medians
(``time_round_robin``).

    python benchmarks/bench_idioms.py [--n 10000] [--json FILE]
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import warnings

import _harness  # noqa: F401 -- (the checkout first on sys.path)
import numpy as np

import hybridad as ha
from hybridad.bench.harness import time_round_robin


def cases(n, lib=np):
    m = 101
    grid = np.linspace(0.0, 1.0, m)

    def mask_write(x, w):
        y = x.copy()
        y[y < 0] = 0.0
        return np.sum(y ** 2 * w)

    def mask_where(x, w):
        return lib.sum(lib.where(x < 0, 0.0, x) ** 2 * w)

    def argmax_read(x, w):
        return x[np.argmax(x)] * 2.0 + np.sum(x ** 2 * w)

    def argmax_max(x, w):
        return lib.max(x) * 2.0 + lib.sum(x ** 2 * w)

    def lookup(x, table):
        u = (x - x.min()) / (x.max() - x.min())
        j = np.clip(np.floor(u * (m - 1)).astype(np.int64), 0, m - 2)
        t = u * (m - 1) - j
        return np.sum((1 - t) * table[j] + t * np.take(table, j + 1))

    def interp(x, table):
        u = (x - lib.min(x)) / (lib.max(x) - lib.min(x))
        return lib.sum(lib.interp(u, grid, table))

    def block_write(u, w):
        lap = np.zeros_like(u)
        lap[1:-1] = u[2:] - 2 * u[1:-1] + u[:-2]
        return np.sum((u + 0.2 * lap - 0.01 * u ** 3) ** 2 * w)

    def block_concat(u, w):
        z = u[:1] * 0
        lap = lib.concatenate([z, u[2:] - 2 * u[1:-1] + u[:-2], z])
        return lib.sum((u + 0.2 * lap - 0.01 * u ** 3) ** 2 * w)

    def augmented(u, w):
        u = u.copy()
        u[1:-1] += 0.2 * (u[2:] - 2 * u[1:-1] + u[:-2])
        return np.sum(u ** 2 * w)

    def augmented_concat(u, w):
        mid = u[1:-1] + 0.2 * (u[2:] - 2 * u[1:-1] + u[:-2])
        return lib.sum(lib.concatenate([u[:1], mid, u[-1:]]) ** 2 * w)

    def mask_update(x, w):
        y = np.sin(x)
        y[y < 0] *= 0.1
        return np.sum(y ** 2 * w)

    def mask_update_where(x, w):
        y = lib.sin(x)
        return lib.sum(lib.where(y < 0, 0.1 * y, y) ** 2 * w)

    def argmax_write(x, w):
        y = x.copy()
        y[np.argmax(y)] = 0.0
        return np.sum(y ** 2 * w)

    def argmax_where(x, w):
        return lib.sum(lib.where(lib.arange(x.size) == lib.argmax(x), 0.0, x) ** 2 * w)

    def masked_sum(x, w):
        m = x > 0
        return np.sum(x[m] ** 2 * w[m])

    def masked_sum_where(x, w):
        return lib.sum(lib.where(x > 0, x ** 2 * w, 0.0))

    def huber(x, w):
        r = (x - 0.1) * w
        small = np.abs(r) <= 0.5
        return np.sum(0.5 * r[small] ** 2) + np.mean(np.abs(r[~small]) - 0.25)

    def huber_where(x, w):
        r = (x - 0.1) * w
        small = lib.abs(r) <= 0.5
        return lib.sum(lib.where(small, 0.5 * r ** 2, 0.0)) + \
            lib.sum(lib.where(small, 0.0, lib.abs(r) - 0.25)) / lib.sum(~small)

    w = np.linspace(0.5, 1.5, n)
    table = np.sin(np.linspace(0.0, 3.0, m))
    return [("mask_write", mask_write, mask_where, w), ("argmax_read", argmax_read, argmax_max, w),
            ("lookup", lookup, interp, table), ("block_write", block_write, block_concat, w),
            ("augmented", augmented, augmented_concat, w),
            ("mask_update", mask_update, mask_update_where, w),
            ("argmax_write", argmax_write, argmax_where, w),
            ("masked_sum", masked_sum, masked_sum_where, w), ("huber", huber, huber_where, w)]


def _jax_times(n, inputs):
    """case -> jax.jit(grad) of the rewrite, median us a call (x64), or {}."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return {}
    jax.config.update("jax_enable_x64", True)
    out = {}
    for name, _, rewrite, second in cases(n, jnp):
        fn = jax.jit(jax.grad(rewrite))
        xs = [jnp.asarray(x) for x in inputs]
        jax.block_until_ready(fn(xs[0], second))
        pool = itertools.cycle(xs)
        (med, *_), = time_round_robin([lambda fn=fn, pool=pool, second=second:
                                       jax.block_until_ready(fn(next(pool), second))], 5, 20.0)
        out[name] = med
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10 ** 4)
    parser.add_argument("--json", default=None)
    parser.add_argument("--jax-only", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    n = opts.n
    # (more inputs than a plan keeps specializations, 8: the code before, which
    # decided on each call's mask or index, traced every one of these calls)
    inputs = [np.random.default_rng(k).standard_normal(n) for k in range(12)]
    if opts.jax_only:
        print(json.dumps(_jax_times(n, inputs)))
        return
    try:  # (in a process of its own: XLA's threads and numba's, in one, slow both)
        out = subprocess.run([sys.executable, __file__, "--n", str(n), "--jax-only"],
                             capture_output=True, text=True, timeout=600)
        jax_us = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 \
            else {}
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        jax_us = {}
    rows = []
    for name, idiom, rewrite, second in cases(n):
        calls = []
        for f in (idiom, rewrite):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (the retrace warnings of the code before)
                plan = ha.compile(f, inputs[0], second, argnums=0)
                res = ha.GradientResult(inputs[0])
                for x in inputs:  # (each new input checked against the rewrite's)
                    plan.gradient(x, second, out=res)
                    ref = ha.gradient(rewrite, x, second, backend="numpy")
                    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-9,
                                               atol=1e-9)
            pool = itertools.cycle(inputs)
            calls.append(lambda plan=plan, res=res, pool=pool:
                         plan.gradient(next(pool), second, out=res))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (a, *_), (b, *_) = time_round_robin(calls, 5, 20.0)
        rows.append({"case": name, "idiom_us": a, "rewrite_us": b, "ratio": a / b})
    for r in rows:
        if r["case"] in jax_us:
            r["jax_us"] = jax_us[r["case"]]
    print(f"{'case':<14} {'idiom us':>10} {'rewrite us':>11} {'idiom/rewrite':>14} "
          f"{'jax.jit us':>11} {'idiom/jax':>10}")
    for r in rows:
        jx = r.get("jax_us")
        print(f"{r['case']:<14} {r['idiom_us']:10.1f} {r['rewrite_us']:11.1f} {r['ratio']:14.2f} "
              + (f"{jx:11.1f} {r['idiom_us'] / jx:10.2f}" if jx else f"{'-':>11} {'-':>10}"))
    if opts.json:
        _harness.write_json(opts.json, rows, {"n": n})


if __name__ == "__main__":
    main()
