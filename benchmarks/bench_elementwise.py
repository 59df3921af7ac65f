"""``@hybridad.elementwise`` against the same math as array expressions and by hand.

Cases (float64, gradient w.r.t. ``x``):

* ``expsum`` -- ``r = sum(rho(x))``, ``f = r**2 + r**3 + r**4 / 4`` with the
  scalar ``rho(r) = math.exp(-3 (r + 1))`` under ``@hybridad.elementwise``,
  against the array expression ``np.sum(np.exp(-3 * (x + 1)))`` (bench_core's
  expsum), at n = 10^3, 10^5 and 10^6 (``--quick``: 10^3, 10^5).  The issue's
  target: the scalar version within 1.2x of the array expression at
  n = 10^5, and zero numpy allocations per call.
* ``huber`` -- ``sum(huber(x, 1))`` with the branching scalar Huber loss,
  against ``np.where(|x| < 1, x^2 / 2, |x| - 1/2)`` as an array expression,
  n = 10^5.
* ``lj pairs`` -- ``sum(lj(x[:, None], x[None, :])) / 2``, a Lennard-Jones pair
  energy with a cutoff written with ``if``s, broadcasting (n, 1) against
  (1, n), against the array expression with ``np.where`` masks, n = 300
  (90,000 pairs).

Rows per case: ``array expr`` (``plan.gradient`` of the array-expression
function), ``@elementwise`` (``plan.gradient`` of the scalar-function
version), ``hand numba`` (a plain ``@numba.njit`` loop writing value and
gradient into preallocated arrays, compiled before timing) and ``hand numpy``
(the gradient written with numpy, allocating).  Every row's value and
gradient are checked against the array expression's first (1e-12 relative).
Timing: interleaved batches of ~20 ms (``hybridad.bench.harness.time_round_robin``),
median / min / max microseconds per call; ``vs array`` and ``vs hand numba``
are ratios of medians measured in the same run; ``allocs/call`` from
``hybridad.testing.count_allocations``; ``first_call_s`` is trace, plan and
compilation (or numba's compilation) plus one call.

Usage::

    python benchmarks/bench_elementwise.py [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402

_harness.use_checkout()

import numba  # noqa: E402

import hybridad as ha  # noqa: E402
from hybridad.bench.harness import allocations_per_call, time_round_robin  # noqa: E402
from hybridad.bench.kernels import _expsum_kernel, jit  # noqa: E402

TARGET_RATIO = 1.2
CUTOFF = 2.5


# --- the scalar laws -------------------------------------------------------------------
@ha.elementwise
def rho(r):
    return math.exp(-3.0 * (r + 1.0))


@ha.elementwise
def huber(r, d):
    if abs(r) < d:
        return 0.5 * r * r
    return d * (abs(r) - 0.5 * d)


@ha.elementwise
def lj(xi, xj):
    r = abs(xi - xj)
    if r < 1e-12 or r > CUTOFF:
        return 0.0
    inv6 = (1.0 / r) ** 6
    return 4.0 * (inv6 * inv6 - inv6)


def _poly(r):
    return r ** 2 + r ** 3 + r ** 4 / 4


def expsum_elementwise(x):
    return _poly(np.sum(rho(x)))


def expsum_array(x):
    return _poly(np.sum(np.exp(-3.0 * (x + 1.0))))


def huber_elementwise(x):
    return np.sum(huber(x, 1.0))


def huber_array(x):
    a = np.abs(x)
    return np.sum(np.where(a < 1.0, 0.5 * x * x, a - 0.5))


def lj_elementwise(x):
    return 0.5 * np.sum(lj(x[:, None], x[None, :]))


def lj_array(x):
    r = np.abs(x[:, None] - x[None, :])
    inside = (r > 1e-12) & (r <= CUTOFF)
    safe = np.where(inside, r, 1.0)
    inv6 = (1.0 / safe) ** 6
    return 0.5 * np.sum(np.where(inside, 4.0 * (inv6 * inv6 - inv6), 0.0))


# --- hand-written gradients ------------------------------------------------------------
@numba.njit
def _huber_kernel(x, g):
    total = 0.0
    for i in range(x.shape[0]):
        v = x[i]
        if abs(v) < 1.0:
            total += 0.5 * v * v
            g[i] = v
        else:
            total += abs(v) - 0.5
            g[i] = 1.0 if v > 0 else -1.0
    return total


@numba.njit
def _lj_kernel(x, g):
    n = x.shape[0]
    total = 0.0
    g[:] = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            d = x[i] - x[j]
            r = abs(d)
            if r < 1e-12 or r > CUTOFF:
                continue
            inv6 = (1.0 / r) ** 6
            total += 4.0 * (inv6 * inv6 - inv6)
            dr = 4.0 * (-12.0 * inv6 * inv6 + 6.0 * inv6) / r
            s = dr if d > 0 else -dr
            g[i] += s
            g[j] -= s
    return total


def expsum_numpy(x):
    e = np.exp(-3.0 * (x + 1.0))
    r = e.sum()
    return _poly(r), (-3.0 * (2 * r + 3 * r * r + r ** 3)) * e


def huber_numpy(x):
    a = np.abs(x)
    inside = a < 1.0
    return np.sum(np.where(inside, 0.5 * x * x, a - 0.5)), np.where(inside, x, np.sign(x))


def lj_numpy(x):
    d = x[:, None] - x[None, :]
    r = np.abs(d)
    inside = (r > 1e-12) & (r <= CUTOFF)
    safe = np.where(inside, r, 1.0)
    inv6 = safe ** -6.0
    e = np.where(inside, 4.0 * (inv6 * inv6 - inv6), 0.0)
    dr = np.where(inside, 4.0 * (-12.0 * inv6 * inv6 + 6.0 * inv6) / safe, 0.0)
    return 0.5 * e.sum(), np.sum(dr * np.sign(d), axis=1)


CASES = {  # name -> (array version, elementwise version, numba kernel, numpy gradient)
    "expsum": (expsum_array, expsum_elementwise, jit(_expsum_kernel), expsum_numpy),
    "huber": (huber_array, huber_elementwise, _huber_kernel, huber_numpy),
    "lj pairs": (lj_array, lj_elementwise, _lj_kernel, lj_numpy),
}


def make_input(case, n, rng):
    if case == "lj pairs":
        return np.arange(float(n)) * 0.9 + rng.uniform(-0.1, 0.1, n)
    if case == "huber":
        return rng.uniform(-3.0, 3.0, n)
    return rng.uniform(-1.0, 1.0, n)


def implementations(case, x):
    """name -> (call, result-of-call -> (value, gradient), first_call_s)."""
    f_array, f_elem, kernel, grad_numpy = CASES[case]
    impls = {}
    for name, f in (("array expr", f_array), ("@elementwise", f_elem)):
        t0 = time.perf_counter()
        plan = ha.compile(f, x, wait=True)
        res = ha.GradientResult(x)
        plan.gradient(x, out=res)
        first = time.perf_counter() - t0
        impls[name] = (lambda plan=plan, res=res: plan.gradient(x, out=res),
                       lambda _, res=res: (float(res.value), res.gradient), first)
    g = np.empty_like(x)
    t0 = time.perf_counter()
    kernel(x, g)
    impls["hand numba"] = (lambda: kernel(x, g), lambda v: (float(v), g),
                           time.perf_counter() - t0)
    impls["hand numpy"] = (lambda: grad_numpy(x), lambda vg: (float(vg[0]), vg[1]), 0.0)
    return impls


def measure(case, n, settings, rng):
    x = make_input(case, n, rng)
    impls = implementations(case, x)
    ref_value, ref_grad = impls["array expr"][1](impls["array expr"][0]())
    ref_value, ref_grad = ref_value, ref_grad.copy()
    for name, (call, result, _) in impls.items():
        value, grad = result(call())
        err = max(_harness.relative_error(value, ref_value),
                  _harness.relative_error(grad, ref_grad))
        if err > 1e-12:
            raise SystemExit(f"{case} n={n}: {name} disagrees with the array expression "
                             f"(relative error {err:.2e})")
    timings = time_round_robin([c for c, _, _ in impls.values()], settings.repeats,
                               settings.target_ms)
    rows = []
    for (name, (call, _, first)), (median, lo, hi, _) in zip(impls.items(), timings,
                                                                strict=True):
        allocs, nbytes = allocations_per_call(call, settings.alloc_calls)
        rows.append({"case": case, "n": n, "impl": name, "median_us": median, "min_us": lo,
                     "max_us": hi, "allocs_per_call": allocs, "bytes_per_call": nbytes,
                     "first_call_s": first})
    by = {r["impl"]: r["median_us"] for r in rows}
    for r in rows:
        r["vs_array"] = r["median_us"] / by["array expr"]
        r["vs_hand_numba"] = r["median_us"] / by["hand numba"]
    return rows


COLUMNS = (("case", "case", "{}"), ("n", "n", "{:,}"), ("impl", "impl", "{}"),
           ("median_us", "median_us", "{:.1f}"), ("min_us", "min_us", "{:.1f}"),
           ("max_us", "max_us", "{:.1f}"), ("vs array", "vs_array", "{:.2f}"),
           ("vs hand numba", "vs_hand_numba", "{:.2f}"),
           ("allocs/call", "allocs_per_call", "{:g}"), ("bytes/call", "bytes_per_call", "{:,.0f}"),
           ("first_call_s", "first_call_s", "{:.2f}"))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="3 batches of ~5 ms, n <= 10^5")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = p.parse_args(argv)
    args.repeats, args.target_ms, args.alloc_calls = (3, 5.0, 5) if args.quick else (9, 20.0, 20)
    return args


def main(argv=None):
    settings = parse_args(argv)
    sizes = {"expsum": (10**3, 10**5) + (() if settings.quick else (10**6,)),
             "huber": (10**5,), "lj pairs": (300,)}
    rng = np.random.default_rng(0)
    rows = []
    for case, ns in sizes.items():
        for n in ns:
            rows += measure(case, n, settings, rng)
    print(_harness.format_table(rows, COLUMNS, {"case", "impl"}))
    target = next(r for r in rows if r["case"] == "expsum" and r["n"] == 10**5
                  and r["impl"] == "@elementwise")
    met = target["vs_array"] <= TARGET_RATIO and target["allocs_per_call"] == 0
    print(f"\nexpsum n=10^5: @elementwise {target['vs_array']:.2f}x the array expression, "
          f"{target['allocs_per_call']:g} allocations per call (target <= {TARGET_RATIO}x, "
          f"0): {'met' if met else 'NOT met'}")
    if settings.json:
        _harness.write_json(settings.json, rows, {"quick": settings.quick,
                                                  "numpy": np.__version__,
                                                  "numba": numba.__version__})
    return 0


if __name__ == "__main__":
    sys.exit(main())
