"""scipy benchmark: L-BFGS-B on the chained Rosenbrock, hybridad against hand-written derivatives.

What is measured
----------------
The whole optimizer: the wall time of one ``scipy.optimize.minimize(...,
method="L-BFGS-B")`` call on scipy's chained Rosenbrock function
(``scipy.optimize.rosen``: ``sum(100 (x[1:] - x[:-1]**2)**2 + (1 - x[:-1])**2)``)
from ``x0 = np.tile([-1.2, 1.0], n // 2)``, at n = 10^3 and 10^5 (``--sizes``).
Every implementation gets the same options: ``{"maxiter": 15000}`` for
n <= 10^4 (L-BFGS-B converges, about 5000 iterations at n = 10^3), and
``{"maxiter": 100}`` for larger n (``--maxiter-large``; the chained
Rosenbrock needs far more iterations there -- at n = 10^5, 2000 iterations take
about a minute per call on a 2-core machine and do not converge -- so those runs
stop at the cap, and the time is that of the capped run).  The
issue's target: hybridad's total optimizer wall time within 1.3x of
hand-written derivatives.

Implementations (rows), all float64:

* ``scipy rosen+rosen_der`` -- ``minimize(rosen, x0, jac=rosen_der)``: scipy's
  hand-written derivative, value and gradient in separate calls;
* ``hand numpy (jac=True)`` -- a hand-written numpy function returning
  ``(value, gradient)`` from one pass (shared temporaries), as people write it;
* ``hand numba (jac=True)`` -- a hand-written ``@numba.njit(cache=False)`` loop
  (plain njit: no fastmath, no parallel) computing the value and the gradient
  into a preallocated array in one pass, wrapped as ``(float(value),
  grad.copy())`` (scipy keeps the gradients it is given, so it gets a copy);
* ``hybridad.scipy.minimize`` -- ``hs.minimize(rosen_np, x0,
  method="L-BFGS-B", options=...)`` with ``rosen_np`` the plain numpy
  expression above; it builds a new ``hs.Objective`` inside every call (its
  plan comes from hybridad's plan cache after the first), part of its time;
* ``hybridad Objective (jac=True)`` -- ``obj = hs.Objective(rosen_np, x0)``
  built once, untimed, then ``minimize(obj.value_and_grad, obj.x0, jac=True,
  ...)``: the optimizer with the plan already built;
* ``jax.jit (jac=True)`` -- ``jax.jit(jax.value_and_grad(f))`` with x64, wrapped
  as ``(float(v), np.asarray(g, dtype=np.float64))``; only when jax is
  importable (it is not a dependency; otherwise a note says it was skipped).

Before timing, every implementation's value and gradient at x0 and at a
random point are checked against ``rosen`` / ``rosen_der``: relative error in
the max norm <= 1e-12 (jax 1e-9); for the value at least ``n * eps``, the
error bound of the numba loop's sequential sum (2.2e-11 at n = 10^5).

How
---
Optimizer time: first one untimed call per implementation (numba and jax
compile, hybridad builds its plan), whose time is reported as ``first_s``
(setup -- njit compilation, Objective construction, jit -- plus that first
call).  Then ``--repeats`` rounds (5; 3 with ``--quick``); in each round every
implementation runs ``minimize`` once, the garbage collector off, timed with
``time.perf_counter``; the order of the implementations changes from round
to round, each after each of the others alike, so that a slow spell of a
shared machine falls on all of them.
Reported: the median, min and max seconds over the rounds (``median_s``,
``min_s``, ``max_s``), and ``ratio_vs_best_hand``, the median over the
smallest median among the hand-written rows (``scipy rosen+rosen_der``,
``hand numpy``, ``hand numba``) of the same n, all measured in the same run.

From the last ``OptimizeResult``: ``nit``, ``nfev`` (evaluations of the
function scipy was given; with ``jac=True`` each is a value and a gradient),
for hybridad also the plan runs (``n_eval``: ``res.n_evaluations`` from
``hs.minimize``, the growth of ``obj.n_evaluations`` for the Objective row),
and the final ``f``.  ``df`` is ``|f - f_scipy| / max(1, |f_scipy|)``
against the first row; ``same_f`` says whether that is <= 1e-4 (the iterates
drift apart by rounding over thousands of iterations, so the final points
differ slightly; the last round's result is reported).

Per evaluation (``eval_us``): the median microseconds of one value+gradient
call at x0, measured separately: the callable scipy gets (for the scipy row
``rosen(x)`` and ``rosen_der(x)``) called alternately at x0 and at x0 with its
first entry moved by 1e-3 (hybridad's Objective memoizes by the point's
contents, so the same point twice would not evaluate), in ``--repeats`` (at
least 7) interleaved batches of about 20 ms (5 ms with ``--quick``), the
garbage collector off.  Both hybridad rows measure ``Objective.value_and_grad``
(for ``hs.minimize`` an Objective made for the purpose, untimed: the one it
builds inside is not reachable), each on its own.  ``eval_share`` = nfev *
eval_us / median_s: the part of the optimizer's time that evaluations would
take at their stand-alone speed (the rest is L-BFGS-B itself and scipy's
Python wrapper).

Plan reuse: ``hs.minimize`` constructs an ``Objective`` (and its plan) per
call; after the rows of a size the script times 6 more constructions of
``hs.Objective(rosen_np, x0)`` and prints their median and min, and whether
two Objectives share one plan object.

Threads: L-BFGS-B's linear algebra calls BLAS (OpenBLAS threads for long
vectors), and hybridad's numba plans may run parallel regions (numba's
threading layer, e.g. OpenMP).  On few cores the two pools can get in each
other's way (spinning workers), which shows in the optimizer's time and not in
``eval_us`` (evaluations timed alone).  The script changes no thread settings:
it measures what a user gets and prints the relevant environment variables
(``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``, ``OMP_WAIT_POLICY``,
``NUMBA_NUM_THREADS``, ``NUMBA_THREADING_LAYER``) and numba's threading
layer; set them when running it to compare.

Output: a plain-text table on stdout; ``--json FILE`` writes the same rows as
``{"rows": [...], "meta": {...}}`` (with each round's time in ``times_s`` and
scipy's stop ``message``).  A full run takes about 2 minutes on a 2-core
machine (about 1 minute with ``--quick``).

The objective, its hand-written derivatives and kernel
(:mod:`hybridad.bench.workloads`, :mod:`hybridad.bench.kernels`) and the
optimizer and evaluation timing (:mod:`hybridad.bench.optim`) live in the
package, shared with the suite ``python -m hybridad bench`` (its ``rosen``
workload).

Usage::

    python benchmarks/bench_scipy.py [--quick] [--json FILE] [--sizes N ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib.util
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy
from scipy.optimize import minimize, rosen, rosen_der

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared _harness
import _harness  # noqa: E402  (puts this checkout first on sys.path)
from _harness import relative_error, version  # noqa: E402

import hybridad as ha  # noqa: E402
import hybridad.scipy as hs  # noqa: E402
from hybridad.bench.kernels import make_rosen_numba  # noqa: E402
from hybridad.bench.optim import (  # noqa: E402
    MAXITER_LARGE, MAXITER_SMALL, METHOD, SMALL_LIMIT, time_evaluations, time_optimizer)
from hybridad.bench.workloads import rosen_np, rosen_value_and_grad  # noqa: E402,F401

SIZES = (10**3, 10**5)
SEED = 0

REPEATS = 5
QUICK_REPEATS = 3
EVAL_REPEATS = 7  # at least, for eval_us
TARGET_MS = 20.0
QUICK_TARGET_MS = 5.0

PLAN_BUILDS = 6
THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "OMP_WAIT_POLICY", "NUMBA_NUM_THREADS",
              "NUMBA_THREADING_LAYER")

RTOL_CHECK = 1e-12
RTOL_CHECK_JAX = 1e-9
F_TOL = 1e-4  # same_f: |f - f_scipy| / max(1, |f_scipy|)

SCIPY_ROW = "scipy rosen+rosen_der"
HAND_IMPLS = (SCIPY_ROW, "hand numpy (jac=True)", "hand numba (jac=True)")
HYBRIDAD_IMPLS = ("hybridad.scipy.minimize", "hybridad Objective (jac=True)")
JAX_IMPL = "jax.jit (jac=True)"

COLUMNS = (  # (header, row key, format)
    ("n", "n", "{}"),
    ("impl", "impl", "{}"),
    ("maxiter", "maxiter", "{}"),
    ("median_s", "median_s", "{:.3f}"),
    ("min_s", "min_s", "{:.3f}"),
    ("max_s", "max_s", "{:.3f}"),
    ("ratio_vs_best_hand", "ratio_vs_best_hand", "{:.3f}"),
    ("nit", "nit", "{}"),
    ("nfev", "nfev", "{}"),
    ("n_eval", "n_evaluations", "{}"),
    ("f", "f", "{:.6g}"),
    ("df", "df", "{:.1e}"),
    ("same_f", "same_f", "{}"),
    ("eval_us", "eval_us", "{:.1f}"),
    ("eval_share", "eval_share", "{:.2f}"),
    ("first_s", "first_s", "{:.3f}"),
)


# --- the objective and its hand-written derivatives ---------------------------------
#
# rosen_np (the plain numpy expression hybridad differentiates) and
# rosen_value_and_grad (hand-written numpy) come from hybridad.bench.workloads.


def make_numba(n):
    """The hand-written njit kernel (:func:`hybridad.bench.kernels.make_rosen_numba`, a fresh
    dispatcher, no disk cache) as ``(float(value), g.copy())``; compiled lazily."""
    grad = make_rosen_numba(np.empty(n), cache=False)

    def value_and_grad(x):
        value, g = grad(x)
        return float(value), g.copy()  # a new array: scipy keeps the gradients it gets

    return value_and_grad


# --- implementations --------------------------------------------------------------


@dataclasses.dataclass
class Impl:
    """One row: ``run()`` is a whole ``minimize`` call; ``evaluate(x)`` returns (value, grad)."""

    name: str
    run: Callable  # () -> OptimizeResult
    evaluate: Callable  # (x) -> (value, gradient): the per-evaluation cost
    rtol: float = RTOL_CHECK
    first_s: float | None = None


def setup_impls(n, x0, options, jax_ok):
    """The rows for size ``n``, each set up and run once (untimed; its ``first_s``)."""
    def scipy_pair(x):
        return rosen(x), rosen_der(x)

    impls = []

    def add(name, make, rtol=RTOL_CHECK):
        t0 = time.perf_counter()
        run, evaluate = make()
        run()
        impl = Impl(name, run, evaluate, rtol, time.perf_counter() - t0)
        impls.append(impl)
        return impl

    add(SCIPY_ROW, lambda: (
        lambda: minimize(rosen, x0, jac=rosen_der, method=METHOD, options=options), scipy_pair))
    add(HAND_IMPLS[1], lambda: (
        lambda: minimize(rosen_value_and_grad, x0, jac=True, method=METHOD, options=options),
        rosen_value_and_grad))

    def numba_row():
        vg = make_numba(n)
        return lambda: minimize(vg, x0, jac=True, method=METHOD, options=options), vg

    add(HAND_IMPLS[2], numba_row)

    hs_impl = add(HYBRIDAD_IMPLS[0], lambda: (
        lambda: hs.minimize(rosen_np, x0, method=METHOD, options=options), None))
    # eval_us: an Objective of its own (what hs.minimize builds inside), made untimed
    hs_impl.evaluate = hs.Objective(rosen_np, x0).value_and_grad

    def objective_row():
        obj = hs.Objective(rosen_np, x0)

        def run():
            before = obj.n_evaluations
            res = minimize(obj.value_and_grad, obj.x0, jac=True, method=METHOD, options=options)
            res.n_evaluations = obj.n_evaluations - before  # this call's plan runs
            return res

        return run, obj.value_and_grad

    add(HYBRIDAD_IMPLS[1], objective_row)

    if jax_ok:
        def jax_row():
            import jax

            jax.config.update("jax_enable_x64", True)
            import jax.numpy as jnp

            vg = jax.jit(jax.value_and_grad(functools.partial(rosen_np, xp=jnp)))

            def value_and_grad(x):
                v, g = vg(x)
                return float(v), np.asarray(g, dtype=np.float64)

            value_and_grad(x0)  # compile
            return (lambda: minimize(value_and_grad, x0, jac=True, method=METHOD,
                                     options=options), value_and_grad)

        add(JAX_IMPL, jax_row, RTOL_CHECK_JAX)
    return impls


def jax_available():
    """(True, None) when jax imports, else (False, why)."""
    if importlib.util.find_spec("jax") is None:
        return False, "jax is not installed"
    try:
        import jax  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means "skip"
        return False, f"import jax failed: {exc!r}"
    return True, None


# --- checks and timing -----------------------------------------------------------------


def check_derivatives(impls, points):
    """Assert each implementation's value and gradient equal ``rosen`` / ``rosen_der``.

    The value's tolerance is at least ``n * eps``: the error bound of a sequential
    sum of n positive terms (the numba loop), which numpy's pairwise sum beats.
    """
    for x in points:
        want_v, want_g = rosen(x), rosen_der(x)
        for impl in impls:
            v, g = impl.evaluate(x)
            errs = relative_error(v, want_v), relative_error(g, want_g)
            value_tol = max(impl.rtol, x.size * np.finfo(np.float64).eps)
            assert errs[0] <= value_tol and errs[1] <= impl.rtol, (
                f"{impl.name} disagrees with rosen/rosen_der: relative error value "
                f"{errs[0]:.2e}, gradient {errs[1]:.2e} (tolerance {value_tol:g} and "
                f"{impl.rtol:g})")


def plan_reuse(x0, count):
    """(median, min) seconds of ``count`` constructions of ``hs.Objective(rosen_np, x0)``
    (the plan was built before at this size), and whether two Objectives share one
    plan object (None when the attribute is not there)."""
    objs, times = [], []
    for _ in range(count):
        t0 = time.perf_counter()
        objs.append(hs.Objective(rosen_np, x0))
        times.append(time.perf_counter() - t0)
    plans = [getattr(o, "_plan", None) for o in objs[-2:]]
    shared = None if plans[0] is None else plans[0] is plans[1]
    return statistics.median(times), min(times), shared


def warm_up_hybridad():
    """Pay one-time process costs (lazy imports, hybridad's runtime helpers) on a tiny problem."""
    hs.minimize(rosen_np, np.tile([-1.2, 1.0], 2), method=METHOD)


def measure_size(n, settings, jax_ok):
    x0 = np.tile([-1.2, 1.0], n // 2)
    maxiter = MAXITER_SMALL if n <= SMALL_LIMIT else settings.maxiter_large
    options = {"maxiter": maxiter}
    impls = setup_impls(n, x0, options, jax_ok)
    rng = np.random.default_rng(SEED)
    check_derivatives(impls, [x0, rng.uniform(-2.0, 2.0, n)])
    times, results = time_optimizer([impl.run for impl in impls], settings.repeats)
    evals = time_evaluations([impl.evaluate for impl in impls], x0,
                             max(settings.repeats, EVAL_REPEATS), settings.target_ms)
    rows = []
    for impl, t, res, eval_us in zip(impls, times, results, evals, strict=True):
        n_eval = res.get("n_evaluations")
        rows.append({"n": n, "impl": impl.name, "maxiter": maxiter,
                     "median_s": statistics.median(t), "min_s": min(t), "max_s": max(t),
                     "times_s": t, "ratio_vs_best_hand": None, "best_hand": None,
                     "nit": int(res.nit), "nfev": int(res.nfev),
                     "njev": int(res.njev) if "njev" in res else None,
                     "n_evaluations": None if n_eval is None else int(n_eval),
                     "f": float(res.fun), "df": None, "same_f": None,
                     "message": str(res.message), "success": bool(res.success),
                     "eval_us": eval_us, "eval_share": None, "first_s": impl.first_s,
                     "repeats": settings.repeats})
    best = min((r for r in rows if r["impl"] in HAND_IMPLS), key=lambda r: r["median_s"])
    f_ref = rows[0]["f"]
    for row in rows:
        row["ratio_vs_best_hand"] = row["median_s"] / best["median_s"]
        row["best_hand"] = best["impl"]
        row["df"] = abs(row["f"] - f_ref) / max(1.0, abs(f_ref))
        row["same_f"] = row["df"] <= F_TOL
        row["eval_share"] = row["nfev"] * row["eval_us"] * 1e-6 / row["median_s"]
    median, lo, shared = plan_reuse(x0, PLAN_BUILDS)
    reuse = {"n": n, "builds": PLAN_BUILDS, "median_s": median, "min_s": lo,
             "same_plan_object": shared}
    return rows, reuse


# --- output --------------------------------------------------------------------------


def format_table(rows):
    """Plain-text table, one line per row; missing values as ``-``."""
    return _harness.format_table(rows, COLUMNS, {"impl"})


def environment(settings, skipped):
    return {"python": platform.python_version(), "numpy": np.__version__,
            "scipy": scipy.__version__, "hybridad": ha.__version__,
            "hybridad_path": str(Path(ha.__file__).parent), "numba": version("numba"),
            "jax": version("jax"), "platform": platform.platform(),
            "cpu_count": os.cpu_count(), "quick": settings.quick, "repeats": settings.repeats,
            "target_ms": settings.target_ms, "sizes": list(settings.sizes),
            "maxiter_small": MAXITER_SMALL, "maxiter_large": settings.maxiter_large,
            "small_limit": SMALL_LIMIT, "method": METHOD, "f_tol": F_TOL, "skipped": skipped,
            "thread_env": {k: os.environ.get(k) for k in THREAD_ENV}}


def numba_threading_layer():
    """numba's threading layer once a parallel function ran (hybridad's plans), else None."""
    try:
        import numba

        return numba.threading_layer()
    except Exception:  # noqa: BLE001 - ValueError before any parallel run
        return None


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help=f"{QUICK_REPEATS} rounds instead of {REPEATS}; evaluation batches of "
                        f"~{QUICK_TARGET_MS:g} ms (same sizes and options)")
    p.add_argument("--json", metavar="FILE", help='also write the rows as JSON {"rows": [...]}')
    p.add_argument("--sizes", metavar="N", type=int, nargs="+",
                   help=f"problem sizes, even (default {SIZES})")
    p.add_argument("--repeats", type=int, help=f"timed rounds (default {REPEATS})")
    p.add_argument("--maxiter-large", type=int, default=MAXITER_LARGE,
                   help=f"maxiter for n > {SMALL_LIMIT} (default {MAXITER_LARGE}; "
                        f"n <= {SMALL_LIMIT}: {MAXITER_SMALL})")
    args = p.parse_args(argv)
    sizes = tuple(args.sizes or SIZES)
    if any(n < 2 or n % 2 for n in sizes):
        p.error("sizes must be even and >= 2")
    quick = args.quick
    return argparse.Namespace(
        quick=quick, json=args.json, sizes=sizes, maxiter_large=args.maxiter_large,
        repeats=args.repeats or (QUICK_REPEATS if quick else REPEATS),
        target_ms=QUICK_TARGET_MS if quick else TARGET_MS)


def main(argv=None):
    settings = parse_args(argv)
    jax_ok, why = jax_available()
    skipped = {} if jax_ok else {JAX_IMPL: why}
    meta = environment(settings, skipped)
    print(f"hybridad {meta['hybridad']} ({meta['hybridad_path']}), numpy {meta['numpy']}, "
          f"scipy {meta['scipy']}, numba {meta['numba']}, jax {meta['jax']}, "
          f"Python {meta['python']}, {meta['cpu_count']} CPUs, {meta['platform']}")
    print(f"minimize(method={METHOD!r}) on scipy.optimize.rosen from tile([-1.2, 1], n/2); "
          f"options maxiter={MAXITER_SMALL} for n <= {SMALL_LIMIT}, "
          f"maxiter={settings.maxiter_large} (capped: stops at the cap) above; "
          f"{settings.repeats} interleaved rounds, medians"
          + (" (--quick)" if settings.quick else ""))
    thread_env = ", ".join(f"{k}={v}" for k, v in meta["thread_env"].items() if v is not None)
    print(f"thread settings: {thread_env or 'none set (library defaults)'}")
    t_start = time.perf_counter()
    warm_up_hybridad()
    rows, reuse = [], []
    for n in settings.sizes:
        size_rows, size_reuse = measure_size(n, settings, jax_ok)
        rows.extend(size_rows)
        reuse.append(size_reuse)
    meta["plan_reuse"] = reuse
    meta["total_s"] = time.perf_counter() - t_start
    meta["numba_threading_layer"] = numba_threading_layer()
    print()
    print(format_table(rows))
    print()
    for n in settings.sizes:
        stops = sorted({r["message"] for r in rows if r["n"] == n})
        print(f"n={n}: stop reason {' | '.join(stops)}")
    for r in reuse:
        print(f"n={r['n']}: hs.Objective(rosen_np, x0) construction (what hs.minimize pays per "
              f"call): median {r['median_s'] * 1e3:.1f} ms, min {r['min_s'] * 1e3:.1f} ms "
              f"over {r['builds']}; two Objectives share one plan object: "
              f"{r['same_plan_object']}")
    differ = [f"{r['impl']} n={r['n']} (df {r['df']:.1e})" for r in rows if not r["same_f"]]
    if differ:
        print(f"warning: final f differs from {SCIPY_ROW}'s by more than {F_TOL:g} "
              f"(relative): {'; '.join(differ)}")
    for impl, why in skipped.items():
        print(f"note: {impl} skipped ({why})")
    print(f"numba threading layer: {meta['numba_threading_layer']}; total {meta['total_s']:.0f} s")
    if settings.json:
        _harness.write_json(settings.json, rows, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
