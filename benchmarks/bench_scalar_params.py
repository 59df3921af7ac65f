"""Gradients with respect to scalar parameters of a model over data: a curve fit.

The scientific workload of our users: a model with a few scalar parameters
evaluated over an array of data points, its least-squares loss, and the
gradient with respect to the parameters (``p``, 3 numbers), at n = 100,
10^4 and 10^6 data points (``--quick``: 100 and 10^4).  Each parameter's
gradient is a sum over every point; hybridad sums it in the loss's own loop
(nothing of the data's size is kept from the forward to the backward
sweep), or, where a region recomputes its partials, in one backward loop for
all parameters.

Cases (float64):

* ``decay`` -- ``r = p0 exp(-p1 t) + p2 - y``, ``f = sum(r^2) / 2``: cheap
  arithmetic and one ``exp``.
* ``decay+sin`` -- ``r = p0 exp(-p1 t) + p2 sin(t) - y``: a second
  transcendental.

Rows: ``hybridad`` (``plan.gradient`` into a preallocated result), ``hand
numba`` (one ``@numba.njit`` loop computing the value and the three sums),
``hand numpy`` (the gradient written with numpy, allocating), and
``jax.jit`` when jax is installed (``jax.value_and_grad``, float64).  Every
row's value and gradient are checked against the hand numba loop's (1e-10
relative).  Timing: interleaved batches of ~20 ms
(:func:`hybridad.bench.harness.time_round_robin`), median / min / max
microseconds per call; ``vs numba`` and ``vs numpy`` are ratios of medians
in the same run; ``allocs/call`` from :func:`hybridad.testing.count_allocations`;
``arena`` is the plan's workspace in bytes.

Usage::

    python benchmarks/bench_scalar_params.py [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402

_harness.use_checkout()

import numba  # noqa: E402

import hybridad as ha  # noqa: E402
from hybridad.bench.harness import allocations_per_call, time_round_robin  # noqa: E402


def decay(p, t, y):
    r = p[0] * np.exp(-p[1] * t) + p[2] - y
    return 0.5 * np.sum(r * r)


def decay_sin(p, t, y):
    r = p[0] * np.exp(-p[1] * t) + p[2] * np.sin(t) - y
    return 0.5 * np.sum(r * r)


def decay_numpy(p, t, y):
    e = np.exp(-p[1] * t)
    r = p[0] * e + p[2] - y
    return 0.5 * (r @ r), np.array([r @ e, -p[0] * (r @ (t * e)), r.sum()])


def decay_sin_numpy(p, t, y):
    e, s = np.exp(-p[1] * t), np.sin(t)
    r = p[0] * e + p[2] * s - y
    return 0.5 * (r @ r), np.array([r @ e, -p[0] * (r @ (t * e)), r @ s])


@numba.njit(cache=True)
def _decay_kernel(p, t, y, g, with_sin):
    f = g0 = g1 = g2 = 0.0
    for i in range(t.shape[0]):
        e = np.exp(-p[1] * t[i])
        s = np.sin(t[i]) if with_sin else 1.0
        r = p[0] * e + p[2] * s - y[i]
        f += r * r
        g0 += r * e
        g1 += r * t[i] * e
        g2 += r * s
    g[0], g[1], g[2] = g0, -p[0] * g1, g2
    return 0.5 * f


CASES = {  # name -> (function, hand numpy gradient, whether the numba loop takes sin)
    "decay": (decay, decay_numpy, False),
    "decay+sin": (decay_sin, decay_sin_numpy, True),
}


def _jax_call(f):
    try:
        import jax
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    def port(p, t, y):
        r = p[0] * jnp.exp(-p[1] * t) + p[2] * (jnp.sin(t) if f is decay_sin else 1.0) - y
        return 0.5 * jnp.sum(r * r)

    vg = jax.jit(jax.value_and_grad(port))

    def call(p, t, y):
        v, g = vg(p, t, y)
        return float(v), np.asarray(g.block_until_ready())
    return call


def run(sizes, repeats, with_jax):
    rng = np.random.default_rng(0)
    rows = []
    for case, (f, hand, with_sin) in CASES.items():
        for n in sizes:
            t = np.linspace(0.0, 3.0, n)
            y = 2.0 * np.exp(-1.3 * t) + 0.5 + 0.01 * rng.standard_normal(n)
            p = np.array([1.0, 1.0, 0.2])
            plan = ha.compile(f, p, t, y, argnums=0, tiered=False)
            res = plan.gradient(p, t, y)
            g = np.empty(3)
            ref_v = _decay_kernel(p, t, y, g, with_sin)
            ref_g = g.copy()
            impls = {
                "hybridad": (lambda plan=plan, res=res: plan.gradient(p, t, y, out=res),
                             lambda _, res=res: (float(res.value), res.gradient)),
                "hand numba": (lambda: _decay_kernel(p, t, y, g, with_sin),
                               lambda v: (v, g)),
                "hand numpy": (lambda hand=hand: hand(p, t, y), lambda out: out),
            }
            jx = _jax_call(f) if with_jax else None
            if jx is not None:
                impls["jax.jit"] = (lambda jx=jx: jx(p, t, y), lambda out: out)
            for name, (call, read) in impls.items():
                v, grad = read(call())
                assert abs(v - ref_v) <= 1e-10 * abs(ref_v), (case, n, name, v, ref_v)
                np.testing.assert_allclose(grad, ref_g, rtol=1e-10, err_msg=f"{case} {name}")
            times = time_round_robin([c for c, _ in impls.values()], repeats, 20.0)
            med = {name: tm[0] for name, tm in zip(impls, times, strict=True)}
            for name, (median, lo, hi, _) in zip(impls, times, strict=True):
                allocs = allocations_per_call(impls[name][0], 20)[0] \
                    if name != "jax.jit" else float("nan")
                rows.append(dict(case=case, n=n, impl=name, median_us=median, min_us=lo,
                                 max_us=hi, vs_numba=median / med["hand numba"],
                                 vs_numpy=median / med["hand numpy"], allocs=allocs,
                                 arena=plan.memory.total_bytes if name == "hybridad" else None))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="n = 100 and 10^4 only")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-jax", action="store_true", help="leave jax.jit out")
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args(argv)
    sizes = (100, 10 ** 4) if a.quick else (100, 10 ** 4, 10 ** 6)
    rows = run(sizes, a.repeats, not a.no_jax)
    print(f"{'case':<10} {'n':>8} {'impl':<11} {'median us':>10} {'min':>9} {'max':>9} "
          f"{'vs numba':>8} {'vs numpy':>8} {'allocs':>6} {'arena B':>9}")
    for r in rows:
        arena = "" if r["arena"] is None else str(r["arena"])
        print(f"{r['case']:<10} {r['n']:>8} {r['impl']:<11} {r['median_us']:>10.2f} "
              f"{r['min_us']:>9.2f} {r['max_us']:>9.2f} {r['vs_numba']:>8.2f} "
              f"{r['vs_numpy']:>8.2f} {r['allocs']:>6.0f} {arena:>9}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
