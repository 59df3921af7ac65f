"""Measuring and reporting: timing batches, allocation counts, the error
measure, plain-text tables, JSON and the machine's description.

Shared by the suite (``python -m hybridad bench``) and the scripts in the
repository's ``benchmarks/`` folder.  Imports numpy only at module level:
the peers' child processes (:mod:`hybridad.bench.rss`) load it without
hybridad's own machinery or numba.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.metadata
import json
import os
import platform
import statistics
import time

import numpy as np

from ..transforms.costs import cpu_model

__all__ = ["allocations_per_call", "balanced_orders", "batch_ns", "calls_per_batch",
           "check_against", "cpu_model", "format_table", "format_time", "gc_disabled", "machine",
           "relative_error", "time_round_robin", "version", "write_json"]


def relative_error(got, want):
    """Max-norm relative error ``max|got - want| / max|want|`` (0 for empty arrays).

    Parameters
    ----------
    got, want : array_like
        Compared as float64 arrays of one shape (scalars allowed).

    Returns
    -------
    float
    """
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    scale = max(float(np.max(np.abs(want), initial=0.0)), np.finfo(float).tiny)
    return float(np.max(np.abs(got - want), initial=0.0)) / scale


@contextlib.contextmanager
def gc_disabled():
    """The garbage collector off inside the block (restored afterwards)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def batch_ns(call, number):
    """Nanoseconds taken by ``number`` back-to-back calls of ``call()``."""
    t0 = time.perf_counter_ns()
    for _ in range(number):
        call()
    return time.perf_counter_ns() - t0


def calls_per_batch(call, target_ns, step=1):
    """Calls needed for a batch of about ``target_ns`` nanoseconds.

    A trial batch grows 10x at a time until it lasts a tenth of the target;
    the count comes from the fastest of three batches of that size.

    Parameters
    ----------
    call : callable
        One call to time.
    target_ns : float
        Wanted duration of a batch.
    step : int, default 1
        The count is a multiple of ``step`` (at least ``step``): 2 for calls
        that alternate between two points.

    Returns
    -------
    int
    """
    number = step
    while True:
        elapsed = batch_ns(call, number)
        if elapsed >= target_ns / 10 or number >= 10**7:
            # the fastest of three trials: one trial that met a stall (another
            # row's thread pool still spinning, a plan's thread probe) made
            # batches of one call, timing each row's first call after another
            elapsed = min(elapsed, *(batch_ns(call, number) for _ in range(2)))
            return max(step, step * round(number * target_ns / max(elapsed, 1) / step))
        number *= 10


def settle(calls, seconds=0.3, rounds=2):
    """Run each call for about ``seconds``, then wait for the compiles hybridad
    started in the background (a tiered plan's program, the serial twin a
    thread probe asked for), ``rounds`` times: the timed batches then see
    each plan's steady state, not its first seconds, and no compile thread
    takes a core from another row."""
    from ..plans.tiered import join_all

    for _ in range(rounds):
        for call in calls:
            end = time.perf_counter() + seconds
            call()
            while time.perf_counter() < end:
                call()
        join_all()


def balanced_orders(n, rounds=None):
    """Orders of ``n`` calls, one per round, in which every call directly
    follows each of the others equally often over a full cycle (a Williams
    design: ``n`` rounds for even ``n``, each ordered pair once; ``2 n`` for
    odd ``n``, each pair twice); ``rounds``: that many orders, the cycle
    repeated (default: one cycle).  Rotating one order (``k + r``) does not:
    each call then follows the same neighbour in every round but one.

    >>> balanced_orders(4)
    [[0, 1, 3, 2], [1, 2, 0, 3], [2, 3, 1, 0], [3, 0, 2, 1]]
    """
    if rounds is not None:
        cycle = balanced_orders(n)
        return [cycle[r % len(cycle)] for r in range(rounds)]
    if n <= 1:
        return [list(range(n))]
    first, lo, hi = [0], 1, n - 1
    while lo <= hi:  # 0, 1, n-1, 2, n-2, ...
        first.append(lo)
        lo += 1
        if lo <= hi:
            first.append(hi)
            hi -= 1
    rows = [[(i + r) % n for i in first] for r in range(n)]
    return rows if n % 2 == 0 else rows + [row[::-1] for row in rows]


def time_round_robin(calls, repeats, target_ms, step=1):
    """Time several calls in interleaved batches.

    Each call is warmed up, its batch size calibrated to about ``target_ms``,
    then ``repeats`` rounds run one batch of every call each, the garbage
    collector off, so that a slow spell of a shared machine falls on all of
    them and ratios stay fair; the order changes from round to round, every
    call following each of the others alike (:func:`balanced_orders`).

    Parameters
    ----------
    calls : sequence of callable
    repeats : int
        Timed batches per call.
    target_ms : float
        Duration of one batch.
    step : int, default 1
        See :func:`calls_per_batch`.

    Returns
    -------
    list of tuple
        Per call: ``(median, min, max)`` microseconds per call over the
        batches, and the calls per batch.
    """
    for call in calls:
        call()  # warm-up
        if step > 1:
            call()
    settle(calls)
    with gc_disabled():
        numbers = [calls_per_batch(call, target_ms * 1e6, step) for call in calls]
        per_call = [[] for _ in calls]
        for order in balanced_orders(len(calls), repeats):
            # every call follows each of the others alike (a call right after
            # another library's BLAS or OpenMP pool meets its idle workers still
            # spinning -- the same plan measured 2.8x slower first in every round
            # than second, on 2 cores)
            for i in order:
                per_call[i].append(batch_ns(calls[i], numbers[i]) / numbers[i] / 1e3)
    return [(statistics.median(t), min(t), max(t), number)
            for t, number in zip(per_call, numbers, strict=True)]


def allocations_per_call(call, calls):
    """numpy allocations and bytes per call of ``call()``.

    Counted exactly by :func:`hybridad.testing.count_allocations` (a NEP-49
    handler: temporaries included) over ``calls`` calls after a warm-up call.

    Returns
    -------
    tuple of float
        ``(allocations, bytes)`` per call.
    """
    from hybridad.testing import count_allocations

    call()
    with count_allocations() as counts:
        for _ in range(calls):
            call()
    return counts.allocations / calls, counts.bytes / calls


def check_against(name, got, want, rtol, value_rtol=None):
    """Raise AssertionError unless a value and gradient equal the reference ones.

    Parameters
    ----------
    name : str
        The implementation, for the message.
    got, want : tuple
        ``(value, [gradient arrays])``; each array is compared on its own
        scale (max-norm relative error).
    rtol : float
        Tolerance of the gradients (and of the value, unless ``value_rtol``).
    value_rtol : float, optional
        Tolerance of the value.

    Returns
    -------
    float
        The largest relative error.
    """
    (value, grads), (ref_value, ref_grads) = got, want
    shapes, ref_shapes = [np.shape(g) for g in grads], [np.shape(g) for g in ref_grads]
    assert shapes == ref_shapes, f"{name}: gradient shapes {shapes}, reference {ref_shapes}"
    value_rtol = rtol if value_rtol is None else value_rtol
    value_err = relative_error(np.float64(value), np.float64(ref_value))
    grad_errs = [relative_error(g, r) for g, r in zip(grads, ref_grads, strict=True)]
    assert value_err <= value_rtol and max(grad_errs, default=0.0) <= rtol, (
        f"{name} disagrees with the reference: relative error value {value_err:.2e} "
        f"(tolerance {value_rtol:g}), gradient {', '.join(f'{e:.2e}' for e in grad_errs)} "
        f"(tolerance {rtol:g})")
    return max([value_err, *grad_errs])


def version(module):
    """The installed version of distribution ``module``, or None."""
    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine():
    """The machine and the relevant package versions, as a dict (for JSON ``meta``)."""
    return {"python": platform.python_version(), "platform": platform.platform(),
            "cpu_count": os.cpu_count(), "cpu_model": cpu_model(),
            "numpy": np.__version__,
            **{name: version(name) for name in ("hybridad", "numba", "scipy", "jax", "jaxlib",
                                                "torch", "autograd")},
            "thread_env": {k: os.environ[k] for k in (
                "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "NUMBA_NUM_THREADS", "NUMBA_THREADING_LAYER") if k in os.environ}}


def format_time(seconds):
    """``seconds`` with a unit, about 3 significant digits: ``12.3 us``, ``4.56 ms``, ``250 ms``."""
    if seconds is None:
        return "-"
    unit, scale = next(((u, f) for u, f in (("s", 1.0), ("ms", 1e-3)) if seconds >= f),
                       ("us", 1e-6))
    value = seconds / scale
    return f"{value:.{0 if value >= 100 else 1 if value >= 10 else 2}f} {unit}"


def format_table(rows, columns, left, missing=lambda key: "-"):
    """Plain-text table, one line per row.

    Parameters
    ----------
    rows : list of dict
    columns : sequence of tuple
        ``(header, row key, format)``; the format is a ``str.format`` pattern
        or a callable taking the value.
    left : set of str
        Headers of left-aligned columns.
    missing : callable, optional
        ``missing(key)`` is shown for a None value (default ``"-"``).

    Returns
    -------
    str
    """
    def cell(row, key, fmt):
        value = row.get(key)
        if value is None:
            return missing(key)
        return fmt(value) if callable(fmt) else fmt.format(value)

    body = [[cell(row, key, fmt) for _, key, fmt in columns] for row in rows]
    headers = [header for header, _, _ in columns]
    widths = [max(len(h), *(len(line[i]) for line in body)) for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(c.ljust(w) if h in left else c.rjust(w)
                         for c, w, h in zip(cells, widths, headers, strict=True)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(b) for b in body])


def write_json(path, rows, meta):
    """Write ``{"rows": rows, "meta": meta}`` to ``path`` (the benchmarks scripts' format)."""
    with open(path, "w") as fh:
        json.dump({"rows": rows, "meta": meta}, fh, indent=1)
        fh.write("\n")
