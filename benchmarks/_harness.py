"""Pieces the benchmark scripts share: timing batches, the error measure, the
plain-text table, package versions.  Imported by ``bench_core.py`` and
``bench_scipy.py`` (each puts this directory on ``sys.path`` first)."""

from __future__ import annotations

import contextlib
import gc
import importlib.metadata
import time

import numpy as np


def relative_error(got, want):
    """Max-norm relative error ``max|got - want| / max|want|`` (0 for empty arrays)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    scale = max(float(np.max(np.abs(want), initial=0.0)), np.finfo(float).tiny)
    return float(np.max(np.abs(got - want), initial=0.0)) / scale


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


def version(module):
    """The installed version of ``module``, or None."""
    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return None


def format_table(rows, columns, left, missing=lambda key: "-"):
    """Plain-text table, one line per row: ``columns`` is ``(header, row key,
    format)``, headers in ``left`` are left-aligned, a None value is shown as
    ``missing(key)``."""
    def cell(row, key, fmt):
        value = row[key]
        return missing(key) if value is None else fmt.format(value)

    body = [[cell(row, key, fmt) for _, key, fmt in columns] for row in rows]
    headers = [header for header, _, _ in columns]
    widths = [max(len(h), *(len(line[i]) for line in body)) for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(c.ljust(w) if h in left else c.rjust(w)
                         for c, w, h in zip(cells, widths, headers, strict=True)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(b) for b in body])
