"""Core benchmark: hybridad's gradient against hand-written gradients (numpy, numba).

What is measured
----------------
Cases (float64; column ``n`` is the length of the gradient, i.e. the number
of differentiated scalars, all differentiated arrays together):

* ``expsum``: ``r = sum(exp(-3 (x + 1)))``, ``f = r**2 + r**3 + r**4 / 4``,
  gradient w.r.t. ``x``, at n = 100, 10^4, 10^6 (``--sizes``).
* ``quadform K=10`` and ``quadform K=1``: ``f(x, A) = sum_k x @ (A[k] @ x)``
  with ``A`` a list of K constant D x D matrices, D = 500 (n = D), gradient
  w.r.t. ``x``.
* ``mlp B=1000``: a multilayer perceptron 1 -> 16 -> 16 -> 1 with tanh
  activations on a batch of B = 1000 samples, ``f = mean((pred - Y)**2)`` (the
  mean, not the sum, over the 1000 x 1 residuals) with
  ``pred = tanh(tanh(X @ W1 + b1) @ W2 + b2) @ W3 + b3``; gradient w.r.t. all six
  weight and bias arrays W1 (1, 16), b1 (16,), W2 (16, 16), b2 (16,), W3 (16, 1),
  b3 (1,) (``argnums=(0, ..., 5)``, n = 321 parameters); X (1000, 1) and
  Y (1000, 1) are constants (seeded: X ~ U(-1, 1), Y = sin(pi X) + noise).

Implementations, all returning the value and the gradient (for the MLP a
tuple of six arrays):

* ``ha.gradient``   -- ``ha.gradient(f, *args, argnums=..., out=res)`` (cached plan lookup);
* ``plan.gradient`` -- ``plan.gradient(*args, out=res)`` (explicit plan, numba backend);
* ``plan[numpy]``   -- the same plan on the numpy reference backend;
* ``numpy``         -- the hand-written gradient (for the MLP: backpropagation)
  as people write it (allocating);
* ``numpy_out``     -- the same written into preallocated buffers with ``out=``
  (constants and reductions included: the best numpy a careful person writes);
* ``numba``         -- a hand-written ``@numba.njit`` kernel (plain ``njit``: no
  fastmath, no parallel; :mod:`hybridad.bench.kernels`) called from Python that
  writes the gradient into preallocated arrays and returns the value: loops
  for expsum (``exp`` and the sum in one loop, then the scaling), for quadform (one pass over each
  ``A_k`` for ``A_k x`` and ``x A_k``; ``A`` stacked into one (K, D, D) array
  once, untimed) and for the MLP (forward and backward one sample at a time).
  It is compiled by a first call before timing (its ``first_call_us``: njit
  compilation, no disk cache, plus one run).  A case without a kernel has no
  ``numba`` row (a note says so);
* ``jax.jit`` / ``torch`` -- ``jax.jit(jax.value_and_grad(f, argnums=...))`` with
  x64 and ``block_until_ready``, and torch autograd in float64 (same math);
  only when importable (they are not dependencies; otherwise a note says they
  were skipped).

Before timing, every implementation's value and gradient are checked against
``ha.gradient``'s, each gradient array on its own (relative error in the max
norm, ``max|g - g_ref| / max|g_ref|``): hand-written numpy and numba and
hybridad's plans <= 1e-12; jax/torch <= 1e-9 (their exp, tanh and reductions
differ in the last bits).

How
---
Time: each call is timed in batches with ``time.perf_counter_ns``; the
number of calls per batch is calibrated (after warm-up) so a batch lasts about
``--target-ms`` (20 ms), and ``--repeats`` (>= 7) batches are timed with the
garbage collector off.  Reported per call: the median, min and max over the
batches in microseconds (``median_us``, ``min_us``, ``max_us``);
``ratio_vs_numpy``, the median's ratio to the plain ``numpy`` median of the
same case; and ``ratio_vs_best_hand``, the median's ratio to the smallest
median among the hand-written rows of the case (``numpy``, ``numpy_out`` and
``numba`` where present; which one is in the JSON as ``best_hand``), all
measured in the same run.

Allocations (``allocs/call``, ``bytes/call``): numpy data-buffer allocations
per call, from ``hybridad.testing.count_allocations`` (a NEP-49 counting
handler, so temporaries are counted) over ``--alloc-calls`` (100) calls after
a warm-up call, divided by that number.  Not applicable to jax and torch,
whose memory is not numpy's (reported as "n/a" / null).  Memory numba code
allocates itself would not be seen (it is not numpy's); the hand-written
kernels allocate none.

First call (``first_call_us``): for hybridad, the time of the first call for
a new signature -- trace, autodiff, memory plan, code generation and one run:
``ha.gradient`` after ``ha.clear_cache()``, and ``ha.compile`` plus the first
``plan.gradient`` (numba code is cached on disk under ``HYBRIDAD_CACHE_DIR``,
so a second run of the script may load it instead of compiling it).  One-time
process costs (imports, first plan ever) are paid beforehand by warm-up plans
on tiny problems.  For ``numba`` the njit compilation and first run, for jax
the first (jit-compiling) call; "-" for the others.

Output: a plain-text table on stdout, one row per case and implementation;
``--json FILE`` writes the same rows as ``{"rows": [...], "meta": {...}}``.
``--quick`` (3 repeats of ~5 ms, 10 allocation calls, n <= 10^4) runs in
seconds (plus one-time compilations).

The objectives, the hand-written gradients and kernels, the implementations
and the timing helpers live in the package (:mod:`hybridad.bench`: the
workloads, kernels, impls and harness modules), shared with the suite
``python -m hybridad bench``; this script keeps its own cases, rows and table.

Usage::

    python benchmarks/bench_core.py [--quick] [--json FILE] [--sizes N ...]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared _harness
import _harness  # noqa: E402  (puts this checkout first on sys.path)

import hybridad as ha  # noqa: E402
from hybridad.bench import impls as bench_impls  # noqa: E402
from hybridad.bench.harness import (  # noqa: E402,F401  (re-exported: bench_elementwise)
    allocations_per_call, check_against, time_round_robin, version)
from hybridad.bench.workloads import (  # noqa: E402,F401  (the cases' functions, re-exported)
    MLP_WIDTHS, Problem, expsum, expsum_numpy, expsum_problem, mlp, mlp_numpy, mlp_problem,
    quadform, quadform_numpy, quadform_problem)

SIZES = (100, 10**4, 10**6)
QUICK_SIZES = (100, 10**4)
QUAD_D = 500
QUAD_KS = (10, 1)
MLP_BATCH = 1000
SEED = 0

REPEATS = 7
TARGET_MS = 20.0
ALLOC_CALLS = 100
QUICK_REPEATS = 3
QUICK_TARGET_MS = 5.0
QUICK_ALLOC_CALLS = 10

HYBRIDAD_IMPLS = ("ha.gradient", "plan.gradient", "plan[numpy]")
HAND_IMPLS = ("numpy", "numpy_out", "numba")  # hand-written: ratio_vs_best_hand's reference
OPTIONAL_IMPLS = ("jax.jit", "torch")

# each row's implementation in hybridad.bench.impls: (name there, options)
SOURCES = {"ha.gradient": ("ha.gradient", {}), "plan.gradient": ("hybridad", {}),
           "plan[numpy]": ("hybridad", {"backend": "numpy"}), "numpy": ("hand numpy", {}),
           "numpy_out": ("hand numpy out=", {}),
           "numba": ("hand numba", {"cache": False}),  # a fresh dispatcher: compiled here
           "jax.jit": ("jax.jit", {}), "torch": ("torch", {})}

COLUMNS = (  # (header, row key, format)
    ("case", "case", "{}"),
    ("n", "n", "{}"),
    ("impl", "impl", "{}"),
    ("median_us", "median_us", "{:.2f}"),
    ("min_us", "min_us", "{:.2f}"),
    ("max_us", "max_us", "{:.2f}"),
    ("ratio_vs_numpy", "ratio_vs_numpy", "{:.3f}"),
    ("ratio_vs_best_hand", "ratio_vs_best_hand", "{:.3f}"),
    ("allocs/call", "allocs_per_call", "{:g}"),
    ("bytes/call", "bytes_per_call", "{:.0f}"),
    ("first_call_us", "first_call_us", "{:.0f}"),
)


# --- cases (hybridad.bench.workloads' problems) ----------------------------------------------

Case = Problem


def expsum_case(n, rng):
    return expsum_problem(n, rng)


def quadform_case(k, d, rng):
    return quadform_problem(k, d, rng)


def mlp_case(batch, widths, rng):
    return mlp_problem(batch, rng, widths)


def build_cases(sizes):
    rng = np.random.default_rng(SEED)
    return ([expsum_case(n, rng) for n in sizes]
            + [quadform_case(k, QUAD_D, rng) for k in QUAD_KS]
            + [mlp_case(MLP_BATCH, MLP_WIDTHS, rng)])


def setup(impl, case):
    """Row ``impl`` of ``case``, set up and called once (None: the case has no such kernel)."""
    name, options = SOURCES[impl]
    return bench_impls.setup(name, case, label=impl, **options)


def available_optional():
    """(impl names that can run, {impl: why skipped}) for jax and torch."""
    ok, skipped = [], {}
    for impl in OPTIONAL_IMPLS:
        why = bench_impls.availability(impl)
        if why is None:
            ok.append(impl)
        else:
            skipped[impl] = why
    return ok, skipped


# --- measuring -------------------------------------------------------------------------


def measure_case(case, impl_names, settings):
    """Rows (dicts) for one case, one per implementation the case has, in ``impl_names`` order.

    ``impl_names[0]`` must be ``ha.gradient``: the reference of the checks.
    """
    impls = [impl for impl in (setup(name, case) for name in impl_names) if impl is not None]
    reference = impls[0].result(impls[0].call())  # hybridad's value and gradient
    rows = []
    for impl in impls:
        check_against(f"{impl.name} (against ha.gradient)", impl.result(impl.call()),
                      reference, impl.rtol)
    timings = time_round_robin([impl.call for impl in impls], settings.repeats,
                               settings.target_ms)
    for impl, (median, lo, hi, number) in zip(impls, timings, strict=True):
        allocs, nbytes = (allocations_per_call(impl.call, settings.alloc_calls)
                          if impl.numpy_memory else (None, None))
        rows.append({"case": case.name, "n": case.n, "impl": impl.name,
                     "median_us": median, "min_us": lo, "max_us": hi, "ratio_vs_numpy": None,
                     "ratio_vs_best_hand": None, "best_hand": None,
                     "allocs_per_call": allocs, "bytes_per_call": nbytes,
                     "first_call_us": None if impl.first_call_s is None or impl.name in (
                         "numpy", "numpy_out", "torch") else impl.first_call_s * 1e6,
                     "repeats": settings.repeats,
                     "calls_per_repeat": number})
    numpy_median = next(r["median_us"] for r in rows if r["impl"] == "numpy")
    best = min((r for r in rows if r["impl"] in HAND_IMPLS), key=lambda r: r["median_us"])
    for row in rows:
        row["ratio_vs_numpy"] = row["median_us"] / numpy_median
        row["ratio_vs_best_hand"] = row["median_us"] / best["median_us"]
        row["best_hand"] = best["impl"]
    return rows


def warm_up_hybridad():
    """Pay one-time process costs (lazy imports, first plan) before first-call timings."""
    rng = np.random.default_rng(1)
    for case in (expsum_case(3, rng), quadform_case(2, 3, rng), mlp_case(4, (1, 2, 2, 1), rng)):
        ha.gradient(case.f, *case.args, argnums=case.argnums)
        ha.compile(case.f, *case.args, argnums=case.argnums).gradient(*case.args)
    ha.clear_cache()


# --- output --------------------------------------------------------------------------


def format_table(rows):
    """Plain-text table, one line per row; missing values as ``-`` (or ``n/a`` for allocs)."""
    allocs = ("allocs_per_call", "bytes_per_call")
    return _harness.format_table(rows, COLUMNS, {"case", "impl"},
                                 missing=lambda key: "n/a" if key in allocs else "-")


def environment(settings, skipped):
    return {"python": platform.python_version(), "numpy": np.__version__,
            "hybridad": ha.__version__, "hybridad_path": str(Path(ha.__file__).parent),
            "numba": version("numba"), "jax": version("jax"), "torch": version("torch"),
            "platform": platform.platform(), "cpu_count": os.cpu_count(),
            "quick": settings.quick, "repeats": settings.repeats,
            "target_ms": settings.target_ms, "alloc_calls": settings.alloc_calls,
            "sizes": list(settings.sizes), "skipped": skipped}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help=f"{QUICK_REPEATS} repeats of ~{QUICK_TARGET_MS:g} ms, "
                        f"{QUICK_ALLOC_CALLS} allocation calls, expsum sizes {QUICK_SIZES}")
    p.add_argument("--json", metavar="FILE", help='also write the rows as JSON {"rows": [...]}')
    p.add_argument("--sizes", metavar="N", type=int, nargs="+",
                   help=f"expsum sizes (default {SIZES}; quadform (n = {QUAD_D}) and mlp "
                        "do not depend on it)")
    p.add_argument("--repeats", type=int, help=f"timed batches per row (default {REPEATS})")
    p.add_argument("--target-ms", type=float,
                   help=f"duration of one timed batch (default {TARGET_MS:g} ms)")
    p.add_argument("--alloc-calls", type=int,
                   help=f"calls counted for allocations per call (default {ALLOC_CALLS})")
    args = p.parse_args(argv)
    quick = args.quick
    return argparse.Namespace(
        quick=quick, json=args.json,
        sizes=tuple(args.sizes or (QUICK_SIZES if quick else SIZES)),
        repeats=args.repeats or (QUICK_REPEATS if quick else REPEATS),
        target_ms=args.target_ms or (QUICK_TARGET_MS if quick else TARGET_MS),
        alloc_calls=args.alloc_calls or (QUICK_ALLOC_CALLS if quick else ALLOC_CALLS))


def main(argv=None):
    settings = parse_args(argv)
    optional, skipped = available_optional()
    impl_names = list(HYBRIDAD_IMPLS + HAND_IMPLS) + optional
    meta = environment(settings, skipped)
    print(f"hybridad {meta['hybridad']} ({meta['hybridad_path']}), numpy {meta['numpy']}, "
          f"numba {meta['numba']}, Python {meta['python']}, {meta['cpu_count']} CPUs, "
          f"{meta['platform']}")
    print(f"{settings.repeats} repeats of ~{settings.target_ms:g} ms per row, medians; "
          f"allocations over {settings.alloc_calls} calls"
          + (" (--quick)" if settings.quick else ""))
    warm_up_hybridad()
    rows, absent = [], {}
    for case in build_cases(settings.sizes):
        case_rows = measure_case(case, impl_names, settings)
        rows.extend(case_rows)
        for impl in sorted(set(impl_names) - {r["impl"] for r in case_rows}):
            absent.setdefault(impl, []).append(f"{case.name} n={case.n}")
    meta["absent"] = absent
    print()
    print(format_table(rows))
    for impl, why in skipped.items():
        print(f"note: {impl} skipped ({why})")
    for impl, cases in absent.items():
        print(f"note: no {impl} implementation for {'; '.join(cases)}")
    if settings.json:
        _harness.write_json(settings.json, rows, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
