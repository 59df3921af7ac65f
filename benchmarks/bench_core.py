"""Core benchmark: hybridad's gradient against hand-written numpy gradients.

What is measured
----------------
Cases (gradient with respect to ``x`` only, float64):

* ``expsum``: ``r = sum(exp(-3 (x + 1)))``, ``f = r**2 + r**3 + r**4 / 4``,
  at n = 100, 10^4, 10^6 (``--sizes``).
* ``quadform K=10`` and ``quadform K=1``: ``f(x, A) = sum_k x @ (A[k] @ x)``
  with ``A`` a list of K constant D x D matrices, D = 500 (n = D).

Implementations, all returning the value and the gradient:

* ``ha.gradient``   -- ``ha.gradient(f, x, *consts, out=res)`` (cached plan lookup);
* ``plan.gradient`` -- ``plan.gradient(x, *consts, out=res)`` (explicit plan, numba backend);
* ``plan[numpy]``   -- the same plan on the numpy reference backend;
* ``numpy``         -- the hand-written gradient as people write it (allocating);
* ``numpy_out``     -- the same written into preallocated buffers with ``out=``
  (constants and reductions included: the best numpy a careful person writes);
* ``jax.jit`` / ``torch`` -- ``jax.jit(jax.value_and_grad(f))`` with x64 and
  ``block_until_ready``, and torch autograd in float64; only when importable
  (they are not dependencies; otherwise a note says they were skipped).

Before timing, every implementation's value and gradient are checked against
hybridad's (hand-written numpy: relative error <= 1e-12 in the max norm;
jax/torch: 1e-9, their exp and reductions differ in the last bits).

How
---
Time: each call is timed in batches with ``time.perf_counter_ns``; the
number of calls per batch is calibrated (after warm-up) so a batch lasts about
``--target-ms`` (20 ms), and ``--repeats`` (>= 7) batches are timed with the
garbage collector off.  Reported per call: the median, min and max over the
batches in microseconds, and the median's ratio to the plain numpy median of
the same case, measured in the same run.

Allocations: numpy data-buffer allocations per call (count and bytes), from
``hybridad.testing.count_allocations`` (a NEP-49 counting handler, so
temporaries are counted) over ``--alloc-calls`` (100) calls after a warm-up
call, divided by that number.  Not applicable to jax and torch, whose memory
is not numpy's (reported as "n/a" / null).

First call: for hybridad, the time of the first call for a new signature --
trace, autodiff, memory plan, code generation and one run: ``ha.gradient``
after ``ha.clear_cache()``, and ``ha.compile`` plus the first
``plan.gradient``.  One-time process costs (imports, first plan ever) are
paid beforehand by a warm-up plan on a tiny problem.  For jax it is the first
(jit-compiling) call.

Output: a plain-text table on stdout, one row per case and implementation;
``--json FILE`` writes the same rows as ``{"rows": [...], "meta": {...}}``.
``--quick`` (3 repeats of ~5 ms, 10 allocation calls, n <= 10^4) runs in a
few seconds.

Usage::

    python benchmarks/bench_core.py [--quick] [--json FILE] [--sizes N ...]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import gc
import importlib
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

_CHECKOUT = Path(__file__).resolve().parents[1]
if (_CHECKOUT / "hybridad" / "__init__.py").is_file():
    sys.path.insert(0, str(_CHECKOUT))  # benchmark the checkout, not an older installed copy

import hybridad as ha  # noqa: E402
from hybridad.testing import count_allocations  # noqa: E402

SIZES = (100, 10**4, 10**6)
QUICK_SIZES = (100, 10**4)
QUAD_D = 500
QUAD_KS = (10, 1)
SEED = 0

REPEATS = 7
TARGET_MS = 20.0
ALLOC_CALLS = 100
QUICK_REPEATS = 3
QUICK_TARGET_MS = 5.0
QUICK_ALLOC_CALLS = 10

RTOL_NUMPY = 1e-12
RTOL_OTHER = 1e-9

HYBRIDAD_IMPLS = ("ha.gradient", "plan.gradient", "plan[numpy]")
NUMPY_IMPLS = ("numpy", "numpy_out")
OPTIONAL_IMPLS = (("jax.jit", "jax"), ("torch", "torch"))

COLUMNS = (  # (header, row key, format)
    ("case", "case", "{}"),
    ("n", "n", "{}"),
    ("impl", "impl", "{}"),
    ("median_us", "median_us", "{:.2f}"),
    ("min_us", "min_us", "{:.2f}"),
    ("max_us", "max_us", "{:.2f}"),
    ("ratio_vs_numpy", "ratio_vs_numpy", "{:.3f}"),
    ("allocs/call", "allocs_per_call", "{:g}"),
    ("bytes/call", "bytes_per_call", "{:.0f}"),
    ("first_call_us", "first_call_us", "{:.0f}"),
)


# --- objectives (plain numpy code: what hybridad differentiates) -----------------


def expsum(x, xp=np):
    """``r = sum(exp(-3 (x + 1)))``; ``r**2 + r**3 + r**4 / 4``.  ``xp``: jnp/torch ports."""
    r = xp.sum(xp.exp(-3 * (x + 1)))
    return r**2 + r**3 + r**4 / 4


def quadform(x, A):
    """``sum_k x @ (A[k] @ x)`` for a list of matrices ``A`` (any array library)."""
    return sum(x @ (Ak @ x) for Ak in A)


# --- hand-written gradients -------------------------------------------------------


def expsum_numpy(x):
    """Value and gradient of :func:`expsum`, the obvious numpy code."""
    e = np.exp(-3 * (x + 1))
    r = e.sum()
    value = r**2 + r**3 + r**4 / 4
    return value, (2 * r + 3 * r**2 + r**3) * (-3 * e)


def make_expsum_numpy_out(x):
    """:func:`expsum_numpy` writing into buffers made here, once.

    Constants are 0-d arrays and the sum goes into a 0-d buffer: a Python
    float handed to a ufunc (or a reduction to a scalar) allocates a 0-d array.
    """
    e, g = np.empty_like(x), np.empty_like(x)
    one, minus3 = np.array(1.0), np.array(-3.0)
    r, coef, value = np.empty(()), np.empty(()), np.empty(())

    def grad(x):
        np.add(x, one, out=e)
        np.multiply(e, minus3, out=e)
        np.exp(e, out=e)
        np.add.reduce(e, out=r)
        rf = float(r)
        coef[()] = -3.0 * (2 * rf + 3 * rf**2 + rf**3)
        np.multiply(e, coef, out=g)
        value[()] = rf**2 + rf**3 + rf**4 / 4
        return value, g

    return grad


def quadform_numpy(x, A):
    """Value and gradient ``sum_k (A_k + A_k^T) x`` of :func:`quadform`, as people write it."""
    Ax = [Ak @ x for Ak in A]
    value = sum(x @ y for y in Ax)
    return value, sum(y + Ak.T @ x for y, Ak in zip(Ax, A, strict=True))


def make_quadform_numpy_out(x, A):
    """:func:`quadform_numpy` into buffers: ``s = sum A_k x``, ``h = sum x A_k``."""
    s, h, t, g = (np.empty_like(x) for _ in range(4))
    value = np.empty(())

    def grad(x, A):
        s.fill(0.0)
        h.fill(0.0)
        for Ak in A:
            np.matmul(Ak, x, out=t)
            np.add(s, t, out=s)
            np.matmul(x, Ak, out=t)  # A_k^T x without a transposed copy
            np.add(h, t, out=h)
        np.dot(x, s, out=value)
        np.add(s, h, out=g)
        return value, g

    return grad


# --- cases --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    """One benchmark problem: objective, arguments and the hand-written gradients."""

    name: str
    n: int
    f: Callable  # numpy objective f(x, *consts)
    args: tuple  # (x, *consts)
    numpy_grad: Callable  # (x, *consts) -> (value, grad)
    make_numpy_out: Callable  # (x, *consts) -> function like numpy_grad, own buffers
    port: Callable  # array module -> objective for that module (jax.numpy, torch)


def expsum_case(n, rng):
    x = rng.uniform(0.0, 1.0, n)
    return Case("expsum", n, expsum, (x,), expsum_numpy, make_expsum_numpy_out,
                lambda xp: functools.partial(expsum, xp=xp))


def quadform_case(k, d, rng):
    x = rng.standard_normal(d)
    A = [rng.standard_normal((d, d)) for _ in range(k)]
    return Case(f"quadform K={k}", d, quadform, (x, A), quadform_numpy,
                make_quadform_numpy_out, lambda xp: quadform)


def build_cases(sizes):
    rng = np.random.default_rng(SEED)
    return [expsum_case(n, rng) for n in sizes] + [quadform_case(k, QUAD_D, rng)
                                                   for k in QUAD_KS]


# --- implementations ------------------------------------------------------------------


@dataclasses.dataclass
class Impl:
    """A ready-to-time implementation of one case."""

    name: str
    call: Callable[[], object]  # one gradient evaluation
    result: Callable[[object], tuple]  # call()'s return -> (float value, ndarray gradient)
    rtol: float  # tolerance of the check against hybridad
    first_call_us: float | None = None
    numpy_memory: bool = True  # are its allocations numpy's (countable)?


def _elapsed_us(t0_ns):
    return (time.perf_counter_ns() - t0_ns) / 1e3


def _result_pair(res):
    return float(res.value), np.array(res.gradient)


def setup_ha_gradient(case):
    f, args = case.f, case.args
    res = ha.GradientResult(args[0])
    ha.clear_cache()
    t0 = time.perf_counter_ns()
    ha.gradient(f, *args, out=res)
    first = _elapsed_us(t0)

    def call():
        return ha.gradient(f, *args, out=res)

    return Impl("ha.gradient", call, _result_pair, RTOL_NUMPY, first)


def _setup_plan(case, backend, name):
    args = case.args
    res = ha.GradientResult(args[0])
    t0 = time.perf_counter_ns()
    plan = ha.compile(case.f, *args, backend=backend)
    plan.gradient(*args, out=res)
    first = _elapsed_us(t0)

    def call():
        return plan.gradient(*args, out=res)

    return Impl(name, call, _result_pair, RTOL_NUMPY, first)


def setup_plan_gradient(case):
    """The explicit plan on the default (numba) backend."""
    return _setup_plan(case, "numba", "plan.gradient")


def setup_plan_gradient_numpy(case):
    """The explicit plan on the numpy reference backend."""
    return _setup_plan(case, "numpy", "plan[numpy]")


def _numpy_pair(ret):
    value, grad = ret
    return float(value), np.array(grad)


def setup_numpy(case):
    grad, args = case.numpy_grad, case.args

    def call():
        return grad(*args)

    return Impl("numpy", call, _numpy_pair, RTOL_NUMPY)


def setup_numpy_out(case):
    args = case.args
    grad = case.make_numpy_out(*args)

    def call():
        return grad(*args)

    return Impl("numpy_out", call, _numpy_pair, RTOL_NUMPY)


def setup_jax(case):
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    fn = jax.jit(jax.value_and_grad(case.port(jnp)))
    args = jax.tree_util.tree_map(jnp.asarray, case.args)
    t0 = time.perf_counter_ns()
    jax.block_until_ready(fn(*args))
    first = _elapsed_us(t0)

    def call():
        return jax.block_until_ready(fn(*args))

    return Impl("jax.jit", call, _numpy_pair, RTOL_OTHER, first, numpy_memory=False)


def setup_torch(case):
    import torch

    x = torch.tensor(case.args[0], dtype=torch.float64, requires_grad=True)
    consts = [[torch.from_numpy(a) for a in c] if isinstance(c, list) else torch.from_numpy(c)
              for c in case.args[1:]]
    objective = case.port(torch)

    def call():
        value = objective(x, *consts)
        (grad,) = torch.autograd.grad(value, x)
        return value.detach(), grad

    def pair(ret):
        return float(ret[0]), ret[1].numpy().copy()

    return Impl("torch", call, pair, RTOL_OTHER, numpy_memory=False)


SETUPS = {"ha.gradient": setup_ha_gradient, "plan.gradient": setup_plan_gradient,
          "plan[numpy]": setup_plan_gradient_numpy,
          "numpy": setup_numpy, "numpy_out": setup_numpy_out,
          "jax.jit": setup_jax, "torch": setup_torch}


def available_optional():
    """(impl names that can run, {impl: why skipped}) for jax and torch."""
    ok, skipped = [], {}
    for impl, module in OPTIONAL_IMPLS:
        if importlib.util.find_spec(module) is None:
            skipped[impl] = f"{module} is not installed"
            continue
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - any import failure means "skip"
            skipped[impl] = f"import {module} failed: {exc!r}"
            continue
        ok.append(impl)
    return ok, skipped


# --- measuring -------------------------------------------------------------------------


def check_against(impl, reference):
    """Assert ``impl``'s value and gradient equal the reference (max-norm relative)."""
    value, grad = impl.result(impl.call())
    ref_value, ref_grad = reference
    value_err = abs(value - ref_value) / max(abs(ref_value), np.finfo(float).tiny)
    grad_err = float(np.max(np.abs(grad - ref_grad)) / max(np.max(np.abs(ref_grad)),
                                                          np.finfo(float).tiny))
    assert value_err <= impl.rtol and grad_err <= impl.rtol, (
        f"{impl.name} disagrees with hybridad: relative error value {value_err:.2e}, "
        f"gradient {grad_err:.2e} (tolerance {impl.rtol:g})")


@contextlib.contextmanager
def gc_disabled():
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def batch_ns(call, number):
    """Nanoseconds taken by ``number`` back-to-back calls."""
    t0 = time.perf_counter_ns()
    for _ in range(number):
        call()
    return time.perf_counter_ns() - t0


def calls_per_batch(call, target_ns):
    """Calls needed for a batch of about ``target_ns`` (grows a trial batch 10x at a time)."""
    number = 1
    while True:
        elapsed = batch_ns(call, number)
        if elapsed >= target_ns / 10 or number >= 10**7:
            return max(1, round(number * target_ns / max(elapsed, 1)))
        number *= 10


def time_per_call_us(call, repeats, target_ms):
    """(median, min, max) microseconds per call over ``repeats`` batches, and calls per batch."""
    call()  # warm-up
    with gc_disabled():
        number = calls_per_batch(call, target_ms * 1e6)
        per_call = [batch_ns(call, number) / number / 1e3 for _ in range(repeats)]
    return statistics.median(per_call), min(per_call), max(per_call), number


def allocations_per_call(call, calls):
    """(numpy allocations, bytes) per call, averaged over ``calls`` calls after a warm-up call."""
    call()
    with count_allocations() as counts:
        for _ in range(calls):
            call()
    return counts.allocations / calls, counts.bytes / calls


def measure_case(case, impl_names, settings):
    """Rows (dicts) for one case, one per implementation, in ``impl_names`` order."""
    impls = [SETUPS[name](case) for name in impl_names]
    reference = impls[0].result(impls[0].call())  # hybridad's value and gradient
    rows = []
    for impl in impls:
        check_against(impl, reference)
        median, lo, hi, number = time_per_call_us(impl.call, settings.repeats,
                                                  settings.target_ms)
        allocs, nbytes = (allocations_per_call(impl.call, settings.alloc_calls)
                          if impl.numpy_memory else (None, None))
        rows.append({"case": case.name, "n": case.n, "impl": impl.name,
                     "median_us": median, "min_us": lo, "max_us": hi, "ratio_vs_numpy": None,
                     "allocs_per_call": allocs, "bytes_per_call": nbytes,
                     "first_call_us": impl.first_call_us, "repeats": settings.repeats,
                     "calls_per_repeat": number})
    numpy_median = next(r["median_us"] for r in rows if r["impl"] == "numpy")
    for row in rows:
        row["ratio_vs_numpy"] = row["median_us"] / numpy_median
    return rows


def warm_up_hybridad():
    """Pay one-time process costs (lazy imports, first plan) before first-call timings."""
    for case in (expsum_case(3, np.random.default_rng(1)),
                 quadform_case(2, 3, np.random.default_rng(1))):
        ha.gradient(case.f, *case.args)
        ha.compile(case.f, *case.args).gradient(*case.args)
    ha.clear_cache()


# --- output --------------------------------------------------------------------------


def format_table(rows):
    """Plain-text table, one line per row; missing values as ``-`` (or ``n/a`` for allocs)."""
    def cell(row, key, fmt):
        value = row[key]
        if value is None:
            return "n/a" if key in ("allocs_per_call", "bytes_per_call") else "-"
        return fmt.format(value)

    body = [[cell(row, key, fmt) for _, key, fmt in COLUMNS] for row in rows]
    headers = [header for header, _, _ in COLUMNS]
    widths = [max(len(h), *(len(line[i]) for line in body)) for i, h in enumerate(headers)]
    left = {"case", "impl"}

    def line(cells):
        return "  ".join(c.ljust(w) if h in left else c.rjust(w)
                         for c, w, h in zip(cells, widths, headers, strict=True)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(b) for b in body])


def environment(settings, skipped):
    return {"python": platform.python_version(), "numpy": np.__version__,
            "hybridad": ha.__version__, "hybridad_path": str(Path(ha.__file__).parent),
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
                   help=f"expsum sizes (default {SIZES}; quadform always has n = {QUAD_D})")
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
    impl_names = list(HYBRIDAD_IMPLS + NUMPY_IMPLS) + optional
    meta = environment(settings, skipped)
    print(f"hybridad {meta['hybridad']} ({meta['hybridad_path']}), numpy {meta['numpy']}, "
          f"Python {meta['python']}, {meta['cpu_count']} CPUs, {meta['platform']}")
    print(f"{settings.repeats} repeats of ~{settings.target_ms:g} ms per row, medians; "
          f"allocations over {settings.alloc_calls} calls"
          + (" (--quick)" if settings.quick else ""))
    warm_up_hybridad()
    rows = []
    for case in build_cases(settings.sizes):
        rows.extend(measure_case(case, impl_names, settings))
    print()
    print(format_table(rows))
    for impl, why in skipped.items():
        print(f"note: {impl} skipped ({why})")
    if settings.json:
        with open(settings.json, "w") as fh:
            json.dump({"rows": rows, "meta": meta}, fh, indent=1)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
