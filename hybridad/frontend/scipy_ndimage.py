"""scipy.ndimage's linear filters on tracers: ``correlate``, ``convolve``,
``correlate1d``, ``convolve1d``, ``gaussian_filter``, ``gaussian_filter1d``,
``uniform_filter`` and ``uniform_filter1d``, built from the primitives while
tracing (no rules of their own).

Registered in :data:`.scipy_special.INTERCEPTED` under ``"scipy.ndimage"``
(wrapped when hybridad or scipy.ndimage is imported, whichever is second).

Each filter is :func:`.scipy_signal.slide` -- shifted slices of the input padded
once for a kernel of up to 32 taps, else one gather of its windows --,
extended at the edges as np.pad does for scipy's mode
('reflect' and 'grid-mirror' are np.pad's 'symmetric', 'mirror' its
'reflect', 'nearest' its 'edge', 'wrap' and 'grid-wrap' its 'wrap',
'constant' and 'grid-constant' ``cval``), times the weights.  ``origin``
shifts the windows as scipy's.  The input and the weights may be traced
(``sigma``, ``size``, ``truncate``, ``radius`` and ``order`` are constants:
the Gaussian weights are scipy's own, computed at trace time as
``_gaussian_kernel1d`` computes them).  Values are scipy's to rounding (scipy
sums in C in another order; ``uniform_filter1d`` keeps a running sum); a
float32 input is filtered in float64 and rounded, axis by axis, as scipy's.
"""

from __future__ import annotations

import numbers

import numpy as np

from .numpy_api import _norm_axis, _tracer
from .scipy_signal import operand, slide
from .scipy_special import intercepts
from ..core.tracer import Tracer

__all__ = ["window_pads"]

_M = "scipy.ndimage"
#: scipy.ndimage's modes -> np.pad's (the filters' extension of the input)
_PADS = {"reflect": "symmetric", "grid-mirror": "symmetric", "mirror": "reflect",
         "nearest": "edge", "wrap": "wrap", "grid-wrap": "wrap", "constant": "constant",
         "grid-constant": "constant"}


def _pad_mode(mode):
    if not isinstance(mode, str) or mode not in _PADS:
        raise RuntimeError("boundary mode not supported")
    return _PADS[mode]


def _input(name, x, output):
    if output is not None and not (isinstance(output, (type, np.dtype, str))):
        raise NotImplementedError(f"hybridad: {_M}.{name}(..., output=<array>) of traced "
                                  "values is not supported (take the result instead)")
    x = operand(x, f"{_M}.{name}")
    dtype = np.dtype(output) if output is not None else x.dtype
    if dtype.kind != "f":
        raise NotImplementedError(
            f"hybridad: {_M}.{name} into {dtype} while tracing (scipy rounds the filtered "
            "values to the integers of that dtype): give a floating-point input or output")
    return x, dtype


def _weights(name, weights):
    w = operand(weights, f"{_M}.{name}")
    return w if w.dtype == np.float64 else w.astype(np.float64)


def window_pads(shape, origins):
    """The ``(before, after)`` extension of each axis for windows of ``shape``
    centred at ``size // 2 + origin`` (scipy's origins, checked)."""
    for k, o in zip(shape, origins, strict=True):
        if o < -(k // 2) or o > (k - 1) // 2:
            raise ValueError("Invalid origin; origin must satisfy -(weights.shape[k] // 2) "
                             "<= origin[k] <= (weights.shape[k]-1) // 2")
    return [(k // 2 + o, k - 1 - (k // 2 + o)) for k, o in zip(shape, origins, strict=True)]


def _filter(x, w, axes, origins, mode, cval, dtype):
    """scipy's correlation of ``x`` with ``w`` (one axis of ``w`` per axis of
    ``axes``, centred at ``size // 2 + origin``), in float64, then ``dtype``."""
    pads = window_pads(w.shape, origins)
    x64 = x if x.dtype == np.float64 else x.astype(np.float64)
    shape = [1] * x.ndim
    for a, k in zip(axes, w.shape, strict=True):
        shape[a] = k
    out = slide(x64, np.reshape(w, tuple(shape)), pads, axes, _pad_mode(mode), cval)
    return out if out.dtype == dtype else out.astype(dtype)


def _axes(axes, ndim):
    if axes is None:
        return tuple(range(ndim))
    axes = (axes,) if isinstance(axes, numbers.Integral) else tuple(axes)
    axes = tuple(_norm_axis(a, ndim)[0] for a in axes)
    if len(set(axes)) != len(axes):
        raise ValueError("axes must be unique")
    return axes


def _per_axis(value, n):
    """scipy's ``_normalize_sequence``: one value per axis."""
    if isinstance(value, str) or not np.iterable(value):
        return [value] * n
    value = list(value)
    if len(value) != n:
        raise RuntimeError("sequence argument must have length equal to input rank")
    return value


def _correlate_nd(name, x, weights, output, mode, cval, origin, axes, convolution):
    x, dtype = _input(name, x, output)
    w = _weights(name, weights)
    axes = _axes(axes, x.ndim)
    if w.ndim != len(axes) or 0 in w.shape:
        raise RuntimeError(f"weights.ndim ({w.ndim}) must match len(axes) ({len(axes)})")
    origins = [int(o) for o in _per_axis(origin, len(axes))]
    if convolution:
        w, origins = _flipped(w, origins)
    return _filter(x, w, axes, origins, mode, cval, dtype)


def _flipped(w, origins):
    """A convolution as scipy's correlation: the weights reversed, each origin
    negated, one less along an even-sized axis."""
    return w[(slice(None, None, -1),) * w.ndim], \
        [-o - (0 if k & 1 else 1) for o, k in zip(origins, w.shape, strict=True)]


@intercepts(_M, "correlate")
def correlate(input, weights, output=None, mode="reflect", cval=0.0, origin=0, *,  # noqa: A002
              axes=None):
    """``scipy.ndimage.correlate``: the N-D correlation with scipy's edges.

    Parameters
    ----------
    input, weights : Tracer or array_like
        Real arrays; ``weights`` has one axis per axis filtered (``axes``,
        default every one).  Either or both traced.
    output : dtype, optional
        A floating-point dtype (an output array is refused).
    mode : str
        scipy's modes (this module's docstring); ``cval`` for 'constant'.
    origin : int or sequence of int
        scipy's shift of the windows (its range checked).

    Returns
    -------
    Tracer
        The extended input's windows times the weights
        (:func:`.scipy_signal.slide`): scipy's values to rounding.
    """
    return _correlate_nd("correlate", input, weights, output, mode, cval, origin, axes, False)


@intercepts(_M, "convolve")
def convolve(input, weights, output=None, mode="reflect", cval=0.0, origin=0, *,  # noqa: A002
             axes=None):
    """``scipy.ndimage.convolve``: :func:`correlate` with the weights reversed
    and scipy's origin (negated, one less along an even-sized axis).

    Parameters
    ----------
    input, weights, output, mode, cval, origin, axes
        As :func:`correlate`.

    Returns
    -------
    Tracer
        scipy's values to rounding.
    """
    return _correlate_nd("convolve", input, weights, output, mode, cval, origin, axes, True)


def _along(name, x, w, axis, output, mode, cval, origin, convolution=False):
    """The 1-D correlation of ``x`` with ``w`` along ``axis`` (scipy's
    correlate1d; ``convolution``: its convolve1d)."""
    x, dtype = _input(name, x, output)
    if w.ndim != 1 or w.shape[0] < 1:
        raise RuntimeError("no filter weights given")
    axis = _norm_axis(axis, x.ndim)[0]
    origins = [int(origin)]
    if convolution:
        w, origins = _flipped(w, origins)
    return _filter(x, w, (axis,), origins, mode, cval, dtype)


@intercepts(_M, "correlate1d")
def correlate1d(input, weights, axis=-1, output=None, mode="reflect", cval=0.0,  # noqa: A002
                origin=0):
    """``scipy.ndimage.correlate1d``: the correlation along one axis.

    Parameters
    ----------
    input, weights : Tracer or array_like
        ``weights`` 1-D; either or both traced.
    axis, output, mode, cval, origin
        As scipy's (``output`` a floating-point dtype at most).

    Returns
    -------
    Tracer
        The extended input's windows times the weights
        (:func:`.scipy_signal.slide`): scipy's values to rounding.
    """
    return _along("correlate1d", input, _weights("correlate1d", weights), axis, output, mode,
                  cval, origin)


@intercepts(_M, "convolve1d")
def convolve1d(input, weights, axis=-1, output=None, mode="reflect", cval=0.0,  # noqa: A002
               origin=0):
    """``scipy.ndimage.convolve1d``: :func:`correlate1d` with the weights
    reversed and scipy's origin (negated, one less for an even size).

    Parameters
    ----------
    input, weights, axis, output, mode, cval, origin
        As :func:`correlate1d`.

    Returns
    -------
    Tracer
        scipy's values to rounding.
    """
    return _along("convolve1d", input, _weights("convolve1d", weights), axis, output, mode,
                  cval, origin, convolution=True)


def gaussian_kernel(sigma, order, radius):
    """scipy's ``_gaussian_kernel1d``: the normalized Gaussian on
    ``-radius..radius`` (in scipy's operations, so its values bit for bit),
    times the polynomial its ``order``-th derivative has for ``order > 0``."""
    if order < 0:
        raise ValueError("order must be non-negative")
    sigma2 = sigma * sigma
    x = np.arange(-radius, radius + 1)
    phi = np.exp(-0.5 / sigma2 * x ** 2)
    phi = phi / phi.sum()
    if order == 0:
        return phi
    # d/dx (q(x) phi(x)) = (q'(x) - x q(x) / sigma^2) phi(x), on q's coefficients
    powers = np.arange(order + 1)
    q = np.zeros(order + 1)
    q[0] = 1
    step = np.diag(powers[1:], 1) + np.diag(np.ones(order) / -sigma2, -1)
    for _ in range(order):
        q = step.dot(q)
    return (x[:, None] ** powers).dot(q) * phi


def _constant(name, what, value):
    if isinstance(value, Tracer):
        raise NotImplementedError(f"hybridad: {_M}.{name} with a traced {what} (pass it as a "
                                  "constant: the weights are computed while tracing)")
    return value


def _gaussian_weights(sigma, order, truncate, radius):
    sd = float(_constant("gaussian_filter", "sigma", sigma))
    lw = int(_constant("gaussian_filter", "truncate", truncate) * sd + 0.5)
    if radius is not None:
        lw = radius
    if not isinstance(lw, numbers.Integral) or lw < 0:
        raise ValueError("Radius must be a nonnegative integer.")
    order = _constant("gaussian_filter", "order", order)
    return gaussian_kernel(sigma, int(order), lw)[::-1]


@intercepts(_M, "gaussian_filter1d")
def gaussian_filter1d(input, sigma, axis=-1, order=0, output=None, mode="reflect",  # noqa: A002
                      cval=0.0, truncate=4.0, *, radius=None):
    """``scipy.ndimage.gaussian_filter1d``: :func:`correlate1d` with scipy's
    Gaussian weights (``order`` its derivatives).

    Parameters
    ----------
    input : Tracer or array_like
    sigma, order, truncate, radius
        Constants: the weights are scipy's ``_gaussian_kernel1d``, reversed,
        computed while tracing.
    axis, output, mode, cval
        As :func:`correlate1d`.

    Returns
    -------
    Tracer
        scipy's values to rounding.
    """
    w = _gaussian_weights(sigma, order, truncate, radius)
    return _along("gaussian_filter1d", input, w, axis, output, mode, cval, 0)


@intercepts(_M, "gaussian_filter")
def gaussian_filter(input, sigma, order=0, output=None, mode="reflect", cval=0.0,  # noqa: A002
                    truncate=4.0, *, radius=None, axes=None):
    """``scipy.ndimage.gaussian_filter``: :func:`gaussian_filter1d` along each
    axis in turn, as scipy (an axis whose ``sigma`` is 1e-15 or less skipped).

    Parameters
    ----------
    input : Tracer or array_like
    sigma, order, mode, radius : scalar or sequence (one per axis of ``axes``)
    output, cval, truncate, axes
        As scipy's (``output`` a floating-point dtype at most).

    Returns
    -------
    Tracer
        scipy's values to rounding (each pass rounded to the output dtype).
    """
    x, dtype = _input("gaussian_filter", input, output)
    axes = _axes(axes, x.ndim)
    n = len(axes)
    passes = [(a, s, o, m, r) for a, s, o, m, r in zip(
        axes, _per_axis(sigma, n), _per_axis(order, n), _per_axis(mode, n),
        _per_axis(radius, n), strict=True) if s > 1e-15]
    if not passes:
        return np.copy(_tracer(x)).astype(dtype)
    for axis, s, order_, mode_, r in passes:
        x = _along("gaussian_filter", x, _gaussian_weights(s, order_, truncate, r), axis,
                   dtype, mode_, cval, 0)
    return x


def _uniform_along(x, size, axis, mode, cval, origin, dtype):
    size = int(_constant("uniform_filter", "size", size))
    if size < 1:
        raise RuntimeError("incorrect filter size")
    if size // 2 + origin < 0 or size // 2 + origin >= size:
        raise ValueError("invalid origin")
    axis = _norm_axis(axis, x.ndim)[0]
    # (scipy's: the sum of each window, then over size)
    total = _filter(x, np.ones(size), (axis,), [int(origin)], mode, cval, np.dtype(np.float64))
    out = total / float(size)
    return out if out.dtype == dtype else out.astype(dtype)


@intercepts(_M, "uniform_filter1d")
def uniform_filter1d(input, size, axis=-1, output=None, mode="reflect", cval=0.0,  # noqa: A002
                     origin=0):
    """``scipy.ndimage.uniform_filter1d``: the mean of each window of ``size``.

    Parameters
    ----------
    input : Tracer or array_like
    size : int
    axis, output, mode, cval, origin
        As :func:`correlate1d`.

    Returns
    -------
    Tracer
        Each window's sum over ``size`` (:func:`.scipy_signal.slide` with
        ones): scipy's values to rounding (scipy keeps a running sum).
    """
    x, dtype = _input("uniform_filter1d", input, output)
    return _uniform_along(x, size, axis, mode, cval, origin, dtype)


@intercepts(_M, "uniform_filter")
def uniform_filter(input, size=3, output=None, mode="reflect", cval=0.0, origin=0, *,  # noqa: A002
                   axes=None):
    """``scipy.ndimage.uniform_filter``: :func:`uniform_filter1d` along each
    axis in turn whose ``size`` exceeds 1, as scipy.

    Parameters
    ----------
    input : Tracer or array_like
    size, mode, origin : scalar or sequence (one per axis of ``axes``)
    output, cval, axes
        As scipy's.

    Returns
    -------
    Tracer
        scipy's values to rounding.
    """
    x, dtype = _input("uniform_filter", input, output)
    axes = _axes(axes, x.ndim)
    n = len(axes)
    passes = [(a, s, o, m) for a, s, o, m in zip(
        axes, _per_axis(size, n), _per_axis(origin, n), _per_axis(mode, n), strict=True)
        if s > 1]
    if not passes:
        return np.copy(_tracer(x)).astype(dtype)
    for axis, s, o, m in passes:
        x = _uniform_along(x, s, axis, m, cval, int(o), dtype)
    return x
