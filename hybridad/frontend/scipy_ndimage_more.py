"""scipy.ndimage's derivative and rank filters on tracers: ``sobel``,
``prewitt``, ``laplace``, ``gaussian_laplace``, ``gaussian_gradient_magnitude``
(compositions of :mod:`.scipy_ndimage`'s correlations, in scipy's order and
dtype), and ``minimum_filter``, ``maximum_filter``, ``median_filter``,
``percentile_filter``, ``rank_filter`` (the windows of the footprint gathered,
extended at the edges as the linear filters are, then scipy's order statistic
of each: its derivative is the selected element's, as ``np.sort``'s).

Registered in :data:`.scipy_special.INTERCEPTED` under ``"scipy.ndimage"``.
"""

from __future__ import annotations

import numbers

import numpy as np

from .scipy_ndimage import (_axes, _input, _pad_mode, _per_axis, correlate1d, gaussian_filter,
                            window_pads)
from .scipy_signal import _windows
from .scipy_special import intercepts

__all__ = []

_M = "scipy.ndimage"


def _axis(axis, ndim):
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(axis, ndim)
    return axis % ndim


def _edge_filter(name, smooth, input, axis, output, mode, cval):  # noqa: A002
    x, dtype = _input(name, input, output)
    axis = _axis(axis, x.ndim)
    modes = _per_axis(mode, x.ndim)
    out = correlate1d(x, [-1, 0, 1], axis, dtype, modes[axis], cval, 0)
    for ii in range(x.ndim):
        if ii != axis:
            out = correlate1d(out, smooth, ii, dtype, modes[ii], cval, 0)
    return out


@intercepts(_M, "sobel")
def sobel(input, axis=-1, output=None, mode="reflect", cval=0.0):  # noqa: A002
    """scipy's Sobel filter: [-1, 0, 1] along ``axis``, [1, 2, 1] along the others."""
    return _edge_filter("sobel", [1, 2, 1], input, axis, output, mode, cval)


@intercepts(_M, "prewitt")
def prewitt(input, axis=-1, output=None, mode="reflect", cval=0.0):  # noqa: A002
    """scipy's Prewitt filter: [-1, 0, 1] along ``axis``, [1, 1, 1] along the others."""
    return _edge_filter("prewitt", [1, 1, 1], input, axis, output, mode, cval)


def _summed(name, input, output, mode, axes, derivative):  # noqa: A002
    """scipy's ``generic_laplace``: ``derivative(x, axis, dtype, mode)`` summed over ``axes``."""
    x, dtype = _input(name, input, output)
    axes = _axes(axes, x.ndim)
    modes = _per_axis(mode, len(axes))
    out = derivative(x, axes[0], dtype, modes[0])
    for ii in range(1, len(axes)):
        out = out + derivative(x, axes[ii], dtype, modes[ii])
    return out if out.dtype == dtype else out.astype(dtype)


@intercepts(_M, "laplace")
def laplace(input, output=None, mode="reflect", cval=0.0, *, axes=None):  # noqa: A002
    """The sum of the second differences [1, -2, 1] along each axis."""
    return _summed("laplace", input, output, mode, axes,
                   lambda x, a, dt, m: correlate1d(x, [1, -2, 1], a, dt, m, cval, 0))


def _gaussian_order(x, axis, order, sigma, dtype, mode, cval, kwargs):
    orders = [0] * x.ndim
    orders[axis] = order
    return gaussian_filter(x, sigma, orders, dtype, mode, cval, **kwargs)


@intercepts(_M, "gaussian_laplace")
def gaussian_laplace(input, sigma, output=None, mode="reflect", cval=0.0, *,  # noqa: A002
                     axes=None, **kwargs):
    """The sum over the axes of the Gaussian filter's second derivative along each."""
    if axes is not None:
        raise NotImplementedError("hybridad: scipy.ndimage.gaussian_laplace with axes= of "
                                  "traced values is not supported")
    return _summed("gaussian_laplace", input, output, mode, None,
                   lambda x, a, dt, m: _gaussian_order(x, a, 2, sigma, dt, m, cval, kwargs))


@intercepts(_M, "gaussian_gradient_magnitude")
def gaussian_gradient_magnitude(input, sigma, output=None, mode="reflect",  # noqa: A002
                                cval=0.0, *, axes=None, **kwargs):
    """``sqrt`` of the summed squares of the Gaussian filter's first derivatives
    (each square in the output dtype, as scipy's)."""
    if axes is not None:
        raise NotImplementedError("hybridad: scipy.ndimage.gaussian_gradient_magnitude with "
                                  "axes= of traced values is not supported")

    def squared(x, a, dt, m):
        d = _gaussian_order(x, a, 1, sigma, dt, m, cval, kwargs)
        return d * d

    out = _summed("gaussian_gradient_magnitude", input, output, mode, None, squared)
    return np.sqrt(out)


# ----------------------------------------------------------------------------
# rank filters
# ----------------------------------------------------------------------------


def _footprint(name, ndim, size, footprint):
    if footprint is None:
        if size is None:
            raise RuntimeError("no footprint or filter size provided")
        return np.ones(tuple(int(s) for s in _per_axis(size, ndim)), dtype=bool)
    fp = np.asarray(footprint, dtype=bool)
    if fp.ndim != ndim:
        raise RuntimeError("footprint array has incorrect shape.")
    if not fp.any():
        raise ValueError("All-zero footprint is not supported.")
    return fp


def _rank(name, input, rank, size, footprint, output, mode, cval, origin, axes):  # noqa: A002
    """The ``rank``-th smallest of each window (a callable of the window's
    element count, or an int; negative from the largest), as scipy's."""
    x, dtype = _input(name, input, output)
    axes = _axes(axes, x.ndim)
    fp = _footprint(name, len(axes), size, footprint)
    n = int(fp.sum())
    r = rank(n) if callable(rank) else int(rank)
    if r < 0:
        r += n
    if not 0 <= r < n:
        raise RuntimeError("rank not within filter footprint size")
    pads = window_pads(fp.shape, [int(o) for o in _per_axis(origin, len(axes))])
    modes = _per_axis(mode, len(axes))
    if len(set(modes)) != 1:
        raise NotImplementedError(f"hybridad: {_M}.{name} with a mode per axis of traced "
                                  "values is not supported")
    x64 = x if x.dtype == np.float64 else x.astype(np.float64)
    win = _windows(x64, fp.shape, pads, _pad_mode(modes[0]), cval, axes)
    lead = win.shape[:win.ndim - len(axes)]
    flat = np.reshape(win, lead + (fp.size,))
    if not fp.all():
        flat = flat[..., np.flatnonzero(fp.ravel())]
    if r == 0:
        out = np.min(flat, axis=-1)
    elif r == n - 1:
        out = np.max(flat, axis=-1)
    else:
        out = np.sort(flat, axis=-1)[..., r]
    return out if out.dtype == dtype else out.astype(dtype)


def _check_mode(mode):
    if not isinstance(mode, str) and not (np.iterable(mode) and all(isinstance(m, str)
                                                                    for m in mode)):
        raise RuntimeError("boundary mode not supported")


@intercepts(_M, "minimum_filter")
def minimum_filter(input, size=None, footprint=None, output=None, mode="reflect",  # noqa: A002
                   cval=0.0, origin=0, *, axes=None):
    """The smallest element of each window of the footprint."""
    _check_mode(mode)
    return _rank("minimum_filter", input, 0, size, footprint, output, mode, cval, origin, axes)


@intercepts(_M, "maximum_filter")
def maximum_filter(input, size=None, footprint=None, output=None, mode="reflect",  # noqa: A002
                   cval=0.0, origin=0, *, axes=None):
    """The largest element of each window of the footprint."""
    _check_mode(mode)
    return _rank("maximum_filter", input, -1, size, footprint, output, mode, cval, origin, axes)


@intercepts(_M, "median_filter")
def median_filter(input, size=None, footprint=None, output=None, mode="reflect",  # noqa: A002
                  cval=0.0, origin=0, *, axes=None):
    """The element of rank ``n // 2`` of each window (scipy's median: the upper
    middle one of an even count)."""
    return _rank("median_filter", input, lambda n: n // 2, size, footprint, output, mode,
                 cval, origin, axes)


@intercepts(_M, "rank_filter")
def rank_filter(input, rank, size=None, footprint=None, output=None,  # noqa: A002
                mode="reflect", cval=0.0, origin=0, *, axes=None):
    """The element of rank ``rank`` of each window (negative: from the largest)."""
    if not isinstance(rank, numbers.Integral):
        raise TypeError("rank must be an integer")
    return _rank("rank_filter", input, int(rank), size, footprint, output, mode, cval,
                 origin, axes)


@intercepts(_M, "percentile_filter")
def percentile_filter(input, percentile, size=None, footprint=None, output=None,  # noqa: A002
                      mode="reflect", cval=0.0, origin=0, *, axes=None):
    """The element of rank ``int(n * percentile / 100)`` of each window (scipy's
    rank; negative percentiles count from 100)."""
    p = float(percentile)
    if p < 0.0:
        p += 100.0

    def rank(n):
        r = int(float(n) * p / 100.0)
        return n - 1 if r == n else r

    return _rank("percentile_filter", input, rank, size, footprint, output, mode, cval,
                 origin, axes)
