"""numpy's order of complex numbers, on the real and imaginary parts of a
traced complex value: ``maximum``/``minimum``/``fmax``/``fmin``, ``max``/``min``
and ``argmax``/``argmin``.

numpy compares complex numbers lexicographically -- the real parts first, the
imaginary parts on a tie -- and an element with a NaN part is NaN: ``maximum``,
``max`` and ``argmax`` propagate it (the first one), ``fmax`` ignores it.  Each
function here takes and returns ``(real, imag)`` pairs of real values (tracers
or constants; :mod:`.numpy_complex` wraps them into a
:class:`~hybridad.frontend.numpy_complex.ComplexTracer`), and is written with
comparisons, ``np.where`` and a one-hot sum: the derivative follows the
selected element, both of its parts, and an unselected element (NaN or not)
never reaches the derivative.
"""

from __future__ import annotations

import numpy as np

__all__ = ["argbest", "best", "pick"]


def _nan(re, im):
    return np.isnan(re) | np.isnan(im)


def _ge(a, b):
    """``a >= b`` in numpy's lexicographic order (``a`` and ``b`` not NaN)."""
    (ar, ai), (br, bi) = a, b
    return (ar > br) | ((ar == br) & (ai >= bi))


def pick(a, b, largest=True, ignore_nan=False):
    """numpy's ``maximum(a, b)`` (``largest``) or ``minimum``; ``fmax``/``fmin``
    with ``ignore_nan`` -- as ``(real, imag)``."""
    an, bn = _nan(*a), _nan(*b)
    ge = _ge(a, b) if largest else _ge(b, a)
    sel = (bn | (~an & ge)) if ignore_nan else (an | (~bn & ge))
    return np.where(sel, a[0], b[0]), np.where(sel, a[1], b[1])


def _gathered(re, im, axis):
    """The parts with the reduced axes as one last axis (``axis`` None: all),
    and the shape a ``keepdims`` result has."""
    shape, ndim = np.shape(re), np.ndim(re)
    axes = tuple(range(ndim)) if axis is None else \
        tuple(a % ndim for a in ((axis,) if isinstance(axis, (int, np.integer)) else axis))
    kept = tuple(d for d in range(ndim) if d not in axes)
    keep_shape = tuple(1 if d in axes else shape[d] for d in range(ndim))
    n = int(np.prod([shape[d] for d in axes], dtype=np.int64))
    if n == 0:
        raise ValueError("hybridad: max/min/argmax/argmin of an empty complex array")
    if axes != tuple(range(ndim - len(axes), ndim)):
        re, im = (np.transpose(p, kept + axes) for p in (re, im))
    out_shape = tuple(shape[d] for d in kept)
    re, im = (np.reshape(p, (*out_shape, n)) for p in (re, im))
    return re, im, out_shape, keep_shape


def _index(re, im, largest):
    """The index (keepdims, along the last axis) of the first NaN when there
    is one, else of the first lexicographic maximum (``largest``) or minimum."""
    nan = _nan(re, im)
    fill = -np.inf if largest else np.inf
    top = np.max if largest else np.min
    rc = np.where(nan, fill, re)
    cand = (rc == top(rc, axis=-1, keepdims=True)) & ~nan
    ic = np.where(cand, im, fill)
    sel = cand & (ic == top(ic, axis=-1, keepdims=True))
    sel = np.where(np.any(nan, axis=-1, keepdims=True), nan, sel)
    return np.argmax(sel, axis=-1, keepdims=True)


def best(re, im, axis=None, keepdims=False, largest=True):
    """numpy's ``max`` (``largest``) or ``min`` of ``re + 1j * im`` over
    ``axis``, as ``(real, imag)``: a one-hot sum picks the element."""
    re, im, out_shape, keep_shape = _gathered(re, im, axis)
    idx = _index(re, im, largest)
    one = idx == np.arange(np.shape(re)[-1])
    parts = [np.sum(np.where(one, p, 0.0), axis=-1) for p in (re, im)]
    shape = keep_shape if keepdims else out_shape
    return tuple(p if np.shape(p) == shape else np.reshape(p, shape) for p in parts)


def argbest(re, im, axis=None, keepdims=False, largest=True):
    """numpy's ``argmax`` (``largest``) or ``argmin`` of ``re + 1j * im``."""
    if axis is not None and not isinstance(axis, (int, np.integer)):
        raise TypeError("argmax/argmin take an integer axis or None")
    re, im, out_shape, keep_shape = _gathered(re, im, axis)
    idx = np.reshape(_index(re, im, largest), out_shape)
    return np.reshape(idx, keep_shape) if keepdims else idx
