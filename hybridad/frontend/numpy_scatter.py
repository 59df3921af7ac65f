"""Scatter-adds at integer indices the plan reads at every call: ``np.add.at``
/ ``np.subtract.at`` and ``np.bincount`` whose indices are an argument of
``f`` (an edge list, group labels) or computed from one.

A gather at such indices (``u[g]``) was already one ``gather`` at flat
positions the plan computes (:func:`hybridad.frontend.numpy_selection.traced_take`);
its derivative is the scatter-add these are: ``scatter_flat`` at the same
positions (repeats adding up), whose derivative is the gather again.  The
decisions taken are numpy's checks, guarded like any decision on values (a
call that fails one is traced anew and raises numpy's error):

* ``ufunc.at``: every index in range (:func:`~.numpy_masked.in_range_positions`);
* ``bincount``: no negative bin, and the number of bins,
  ``max(max(x) + 1, minlength)`` -- with ``minlength`` above every bin, the
  decision is only that it stays so (the usual ``minlength=n_groups``).

``multiply``, ``maximum`` and ``minimum`` at such indices need the updates
grouped by target at run time: they take the indices' values at the traced
call (guarded: other indices trace again), as before.
"""

from __future__ import annotations

import numpy as np

from ..core.decisions import decide
from ..core.trace import bind
from ..core.tracer import Tracer
from ..errors import TracingError, user_location
from .numpy_api import _tracer, broadcast_to
from .numpy_masked import traced_flat

__all__ = ["traced_at", "traced_bincount"]


def _traced(index):
    parts = index if type(index) is tuple else (index,)
    return any(isinstance(p, Tracer) for p in parts)


def traced_at(ufunc, a, indices, b):
    """``ufunc.at(a, indices, b)`` for a traced ``a`` and indices some of
    which are traced integer arrays: the new value of ``a`` (``a`` plus or
    minus ``b`` added at the indices); None when no index is traced or
    another form of the update serves (its caller then decides the indices
    on this call's values, guarded: ``multiply``, ``maximum``, ``minimum``,
    slices or masks beside the arrays, and indices out of range, for which
    numpy's IndexError is then raised)."""
    if ufunc not in (np.add, np.subtract) or not _traced(indices):
        return None
    flat = traced_flat(a.shape, indices)
    if flat is None:
        return None
    b = broadcast_to(_tracer(b).astype(a.dtype), flat.shape)
    s = bind("scatter_flat", b, flat, shape=a.shape)
    return a + s if ufunc is np.add else a - s


def traced_bincount(x, weights=None, minlength=0):
    """``np.bincount(x, weights, minlength)`` for traced integer bins ``x``
    (module docstring: the decisions taken)."""
    if x.ndim != 1:
        raise ValueError("object too deep for desired array" if x.ndim > 1 else
                         "object of too small depth for desired array")
    if x.dtype.kind not in "iub":
        raise TypeError(f"Cannot cast array data from {x.dtype!r} to dtype('int64') "
                        "according to the rule 'safe'")
    minlength = int(minlength)
    if minlength < 0:
        raise ValueError("'minlength' must not be negative")
    w = None if weights is None else _tracer(weights).astype(np.float64)
    if w is not None and w.shape != x.shape:
        raise ValueError("The weights and list don't have the same length.")
    if x.size == 0:
        n = minlength
    else:
        positive = decide(np.all(x >= 0), "bool")
        if positive is None:
            raise TracingError(
                f"numpy.bincount at {user_location()}: its bins are computed from values, and "
                "this trace has none to count them with (make them constants)")
        if not positive:
            raise ValueError("'list' argument must have no negative elements")
        top = np.max(x)
        if minlength and decide(top < minlength, "bool"):
            n = minlength
        else:
            n = max(decide(top, "int") + 1, minlength)
    flat = x.astype(np.intp)
    if n == 0 or x.size == 0:
        return np.zeros(n, np.float64 if w is not None else np.intp)
    if w is None:  # (the counts: no derivative)
        return bind("scatter_flat", np.ones_like(flat, dtype=np.float64), flat,
                    shape=(n,)).astype(np.intp)
    return bind("scatter_flat", w, flat, shape=(n,))
