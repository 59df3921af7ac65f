"""Pieces the benchmark scripts share: timing batches, the error measure, the
plain-text table, package versions, the JSON output, the checkout on
``sys.path``, and the MLP workload with its hand-written gradient.  Imported
by ``bench_core.py``, ``bench_scipy.py`` and ``bench_memory.py`` (each puts
this directory on ``sys.path`` first).  Imports numpy only: bench_memory's
peer processes load it without hybridad or numba."""

from __future__ import annotations

import contextlib
import gc
import importlib.metadata
import json
import sys
import time
from pathlib import Path

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


def use_checkout():
    """Put the repository holding these scripts first on ``sys.path`` when it
    holds the hybridad package: benchmark the checkout, not an older
    installed copy."""
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "hybridad" / "__init__.py").is_file():
        sys.path.insert(0, str(checkout))


def write_json(path, rows, meta):
    """Write ``{"rows": rows, "meta": meta}`` to ``path``."""
    with open(path, "w") as fh:
        json.dump({"rows": rows, "meta": meta}, fh, indent=1)
        fh.write("\n")


# --- the MLP workload (bench_core, bench_memory) ---------------------------------

MLP_WIDTHS = (1, 16, 16, 1)


def mlp(W1, b1, W2, b2, W3, b3, X, Y, xp=np):
    """Mean squared error of a tanh MLP on a batch: ``mean((pred - Y)**2)``.

    ``X @ W1 + b1`` -> tanh -> ``@ W2 + b2`` -> tanh -> ``@ W3 + b3`` = ``pred``;
    differentiated w.r.t. the six weight/bias arrays, ``X`` and ``Y`` constant.
    ``xp``: the array module of the peers' ports (torch, jax.numpy, autograd.numpy).
    """
    h1 = xp.tanh(X @ W1 + b1)
    h2 = xp.tanh(h1 @ W2 + b2)
    pred = h2 @ W3 + b3
    return xp.mean((pred - Y) ** 2)


def mlp_numpy(W1, b1, W2, b2, W3, b3, X, Y):
    """Value and gradient (six arrays) of :func:`mlp`: backpropagation as people write it."""
    h1 = np.tanh(X @ W1 + b1)
    h2 = np.tanh(h1 @ W2 + b2)
    r = h2 @ W3 + b3 - Y
    value = np.mean(r**2)
    dpred = (2.0 / r.size) * r
    dz2 = (dpred @ W3.T) * (1 - h2**2)
    dz1 = (dz2 @ W2.T) * (1 - h1**2)
    return value, (X.T @ dz1, dz1.sum(axis=0), h1.T @ dz2, dz2.sum(axis=0),
                   h2.T @ dpred, dpred.sum(axis=0))
