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
from ..core.tracer import Tracer
from ..errors import TracingError, user_location
from .numpy_masked import traced_flat

__all__ = ["traced_bins", "traced_positions"]


def _traced(index):
    parts = index if type(index) is tuple else (index,)
    return any(isinstance(p, Tracer) for p in parts)


def traced_positions(ufunc, a, indices):
    """The flat positions of ``ufunc.at(a, indices, b)``'s updates where some
    indices are traced integer arrays and ``ufunc`` is ``np.add`` or
    ``np.subtract``: a traced ``intp`` array of ``a[indices]``'s shape; None
    when no index is traced or another form of the update serves (its caller
    then decides the indices on this call's values, guarded: ``multiply``,
    ``maximum``, ``minimum``, slices or masks beside the arrays, and indices
    out of range, for which numpy's IndexError is then raised)."""
    if ufunc not in (np.add, np.subtract) or not _traced(indices):
        return None
    return traced_flat(a.shape, indices)


def traced_bins(x, minlength=0):
    """``(positions, number of bins)`` of ``np.bincount(x, minlength=...)``
    for traced integer bins ``x``, after numpy's checks and the decisions of
    the module docstring."""
    if x.ndim != 1:
        raise ValueError("object too deep for desired array" if x.ndim > 1 else
                         "object of too small depth for desired array")
    if x.dtype.kind not in "iub":
        raise TypeError(f"Cannot cast array data from {x.dtype!r} to dtype('int64') "
                        "according to the rule 'safe'")
    minlength = int(minlength)
    if minlength < 0:
        raise ValueError("'minlength' must not be negative")
    if x.size == 0:
        return x.astype(np.intp), minlength
    positive = decide(np.all(x >= 0), "bool")
    if positive is None:
        raise TracingError(
            f"numpy.bincount at {user_location()}: its bins are computed from values, and "
            "this trace has none to count them with (make them constants)")
    if not positive:
        raise ValueError("'list' argument must have no negative elements")
    top = np.max(x)
    if minlength and decide(top < minlength, "bool"):
        return x.astype(np.intp), minlength
    return x.astype(np.intp), max(decide(top, "int") + 1, minlength)
