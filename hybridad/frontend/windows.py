"""Sliding windows times a kernel: ``sliding_window_view(x, 9) @ w`` as a correlation.

``np.lib.stride_tricks.sliding_window_view`` of a traced array is a gather
of every window (:func:`.numpy_shapes.sliding_window_view`): a copy
``window`` times the signal's size, read through an index table as large.
Code as people ship it multiplies the windows by a kernel right away -- a
1-D convolution ``swv(x, k) @ w``, a 2-D one ``np.einsum("ijkl,kl->ij",
swv(X, (3, 3)), K)`` -- which is scipy.signal's correlation of ``x`` with the
kernel (:func:`.scipy_signal.slide`: a short kernel is a sum of shifted
slices, one fused pass over the signal; the windows are never made).  Each
windows tracer is remembered with its trace (:func:`remember`), and ``@``
(:data:`.numpy_api.MATMUL`) and ``np.einsum`` take that route where one
operand is such windows and the other a kernel over exactly its window axes;
anything else reads the windows as they are.
"""

from __future__ import annotations

import numpy as np

from ..core.tracer import Tracer
from . import numpy_api

__all__ = ["einsum_of_windows", "remember"]


def remember(windows, x, axes):
    """Note that tracer ``windows`` is ``x``'s sliding windows along ``axes``
    (the windows' axes last, in that order, as numpy puts them)."""
    memo = windows._trace.__dict__.setdefault("_windows", {})
    memo[windows.node.id] = (windows.node, x, tuple(axes))


def _of(t):
    """``(x, axes)`` where tracer ``t`` is remembered windows, else None."""
    if not isinstance(t, Tracer):
        return None
    hit = t._trace.__dict__.get("_windows", {}).get(t.node.id)
    return None if hit is None or hit[0] is not t.node else hit[1:]


def _correlated(x, axes, kernel):
    """``x`` correlated with ``kernel`` (shaped as the windows' axes) along
    ``axes``: each output is its window times the kernel, summed."""
    from .scipy_signal import slide

    if len(set(axes)) != len(axes):
        return None
    k = kernel if isinstance(kernel, Tracer) else np.asarray(kernel)
    shape = [1] * x.ndim
    for a, size in zip(axes, k.shape, strict=True):
        shape[a] = size
    k = np.reshape(k, tuple(shape)) if len(axes) > 1 or x.ndim > 1 else k
    return slide(x, k, [(0, 0)] * len(axes), axes=axes)


def _matmul(a, b):
    """``a @ b`` where ``a`` is one window axis of windows and ``b`` a kernel
    vector over it; else numpy_api's matmul."""
    hit = _of(a)
    if hit is not None and len(hit[1]) == 1 and isinstance(b, (Tracer, np.ndarray)) and \
            b.ndim == 1 and b.shape[0] == a.shape[-1] and \
            np.result_type(a.dtype, b.dtype).kind == "f":
        out = _correlated(hit[0], hit[1], b)
        if out is not None:
            return out
    return _MATMUL(a, b)


_MATMUL = numpy_api.MATMUL[0]
numpy_api.MATMUL[0] = _matmul


def einsum_of_windows(lhs, rhs, arrays):
    """``np.einsum(lhs + "->" + rhs, *arrays)`` as a correlation where the
    first operand is windows whose window letters the second (a kernel) has
    exactly, and the output is the windows' other letters in order; None
    otherwise."""
    if len(arrays) != 2:
        return None
    hit = _of(arrays[0])
    if hit is None:
        return None
    x, axes = hit
    spec, kspec = lhs
    n = len(axes)
    if len(spec) != arrays[0].ndim or len(set(spec)) != len(spec) or \
            kspec != spec[-n:] or rhs != spec[:-n] or np.ndim(arrays[1]) != n:
        return None
    k = arrays[1]
    if not isinstance(k, (Tracer, np.ndarray)) or np.result_type(x.dtype, k.dtype).kind != "f":
        return None
    return _correlated(x, axes, k)
