"""scipy.signal's linear recursive filters on tracers: ``lfilter`` (with
``zi``), ``lfilter_zi`` and ``filtfilt`` (``method='pad'``).

``lfilter`` is scipy's direct form II transposed recurrence, written as one
:func:`~.loops.scan` over the filtered axis: the body (one sample: the
output from the first delay, the delays shifted and updated) is traced and
compiled once, whatever the signal's length, and its derivatives -- with
respect to the signal, the initial delays and the coefficients ``b`` and
``a`` alike -- are the loop's (a reverse sweep over the samples).  Each
delay is updated as scipy's C loop does it, ``z[k + 1] + x b[k + 1] - y
a[k + 1]`` after ``b`` and ``a`` are divided by ``a[0]``: scipy's values
to rounding.  ``filtfilt`` is scipy's own composition (odd, even or
constant extension of the edges, ``lfilter_zi`` scaled by the first sample,
the filter forward and backward), each step on tracers.

Registered in :data:`.scipy_special.INTERCEPTED` under ``"scipy.signal"``:
the wrappers hand a call with a traced argument here.
"""

from __future__ import annotations

import numpy as np

from .loops import scan
from .numpy_api import _tracer, concatenate, getitem, moveaxis, reshape
from .scipy_special import intercepts

__all__ = []

_M = "scipy.signal"


def _coefficients(b, a, dtype):
    """``b`` and ``a`` as tracers of ``dtype``, padded with zeros to one
    length and divided by ``a[0]``, as scipy's filter normalizes them."""
    b, a = (_tracer(np.asarray(v) if not hasattr(v, "shape") else v).astype(dtype)
            for v in (b, a))
    if b.ndim != 1 or a.ndim != 1:
        raise ValueError("object of too small depth for desired array" if min(b.ndim, a.ndim)
                         < 1 else "object too deep for desired array")
    n = max(a.shape[0], b.shape[0])
    b, a = (v if v.shape[0] == n else concatenate([v, np.zeros(n - v.shape[0], dtype)])
            for v in (b, a))
    a0 = a[0]
    return b / a0, a / a0, n


def _dtype(*values):
    dt = np.result_type(*(getattr(v, "dtype", np.asarray(v).dtype) for v in values))
    return dt if dt.kind == "f" else np.dtype(np.float64)


def _axis(axis, ndim):
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {ndim}")
    return axis % ndim


@intercepts(_M, "lfilter")
def lfilter(b, a, x, axis=-1, zi=None):
    """``scipy.signal.lfilter``: ``y`` (and the final delays ``zf`` when
    ``zi`` is given), the recurrence as one loop over ``axis``; ``b``, ``a``,
    ``x`` and ``zi`` differentiable."""
    x = _tracer(x)
    dtype = _dtype(b, a, x, *(() if zi is None else (zi,)))
    x = x.astype(dtype)
    if x.ndim == 0:
        raise ValueError("x must be at least 1-D")
    axis = _axis(axis, x.ndim)
    b, a, n = _coefficients(b, a, dtype)
    xs = moveaxis(x, axis, 0)
    rest = xs.shape[1:]
    if n == 1:  # (no delay: a gain)
        y = x * b[0]
        return y if zi is None else (y, _tracer(np.zeros(x.shape[:axis] + (0,) +
                                                         x.shape[axis + 1:], dtype)))
    if zi is None:
        z0 = _tracer(np.zeros(rest + (n - 1,), dtype))
    else:
        zi = _tracer(zi).astype(dtype)
        want = x.shape[:axis] + (n - 1,) + x.shape[axis + 1:]
        if zi.shape != want:
            raise ValueError(f"Unexpected shape for zi: expected {want}, found {zi.shape}.")
        z0 = moveaxis(zi, axis, -1)
    tail = np.zeros(rest + (1,), dtype)
    b0, bs, as_ = b[0], b[1:], a[1:]

    def step(z, xt):
        y = getitem(z, (Ellipsis, 0)) + b0 * xt
        shifted = concatenate([getitem(z, (Ellipsis, slice(1, None))), tail], axis=-1)
        xt, yt = reshape(xt, rest + (1,)), reshape(y, rest + (1,))
        return shifted + xt * bs - yt * as_, y

    zf, ys = scan(step, z0, xs)
    y = moveaxis(ys, 0, axis)
    return y if zi is None else (y, moveaxis(zf, -1, axis))


@intercepts(_M, "lfilter_zi")
def lfilter_zi(b, a):
    """``scipy.signal.lfilter_zi``: the delays of the filter's step response
    in its steady state, ``solve(I - companion(a).T, b[1:] - a[1:] b[0])``
    as scipy computes them (after dividing by ``a[0]``)."""
    dtype = _dtype(b, a)
    b, a, n = _coefficients(b, a, dtype)
    if n == 1:
        return _tracer(np.zeros(0, dtype))
    # I - companion(a).T: the first column 1 + a[1], a[2:]; -1 on the superdiagonal
    first = reshape(-a[1:], (n - 1, 1))
    shift = np.zeros((n - 1, n - 2), dtype)
    shift[np.arange(n - 2), np.arange(n - 2)] = 1.0
    iminus = np.eye(n - 1, dtype=dtype) - concatenate([first, _tracer(shift)], axis=1)
    return np.linalg.solve(iminus, b[1:] - a[1:] * b[0])


def _extended(x, padtype, n, axis):
    """``x`` with ``n`` samples added at each end along ``axis``: scipy's
    ``even_ext`` and ``const_ext`` are np.pad's 'reflect' and 'edge';
    ``odd_ext`` each end's value twice less the reflection."""
    widths = [(0, 0)] * x.ndim
    widths[axis] = (n, n)
    if padtype != "odd":
        return np.pad(x, widths, mode="reflect" if padtype == "even" else "edge")

    def part(lo, hi, step=None):
        return getitem(x, (slice(None),) * axis + (slice(lo, hi, step),))

    size = x.shape[axis]
    left_in = part(n, 0, -1)
    right_in = part(size - 2, size - n - 2 if size - n - 2 >= 0 else None, -1)
    return concatenate([2 * part(0, 1) - left_in, x, 2 * part(size - 1, size) - right_in],
                       axis=axis)


def _axis_slice(axis, index):
    return (slice(None),) * axis + (index,)


def forward_and_back(x, axis, padtype, padlen, ntaps, zi, run):
    """scipy's ``filtfilt`` scheme, for ``filtfilt`` and ``sosfiltfilt``: ``x``
    (a tracer, filtered along ``axis``) extended at each end by ``padlen``
    samples (default ``3 * ntaps``; ``padtype`` odd, even, constant or None),
    run forward from the delays ``zi`` times the first sample and backward from
    them times the last, the extension cut off.  ``run(signal, delays)``
    returns the filtered signal and its final delays."""
    if padtype not in ("odd", "even", "constant", None):
        raise ValueError(f"Unknown value '{padtype}' given to padtype.  padtype must be "
                         "'even', 'odd', 'constant', or None.")
    edge = 0 if padtype is None else (3 * ntaps if padlen is None else int(padlen))
    if x.shape[axis] <= edge:
        raise ValueError(f"The length of the input vector x must be greater than padlen, "
                         f"which is {edge}.")
    ext = _extended(x, padtype, edge, axis) if edge > 0 else x
    y, _ = run(ext, zi * getitem(ext, _axis_slice(axis, slice(0, 1))))
    size = y.shape[axis]
    last = getitem(y, _axis_slice(axis, slice(size - 1, size)))
    y, _ = run(getitem(y, _axis_slice(axis, slice(None, None, -1))), zi * last)
    y = getitem(y, _axis_slice(axis, slice(None, None, -1)))
    return getitem(y, _axis_slice(axis, slice(edge, size - edge))) if edge > 0 else y


@intercepts(_M, "filtfilt")
def filtfilt(b, a, x, axis=-1, padtype="odd", padlen=None, method="pad", irlen=None):
    """``scipy.signal.filtfilt`` with ``method='pad'``: the edges extended
    (``padtype`` odd, even, constant or None), the filter run forward from
    ``lfilter_zi`` times the first sample and backward from it times the
    last, the extension cut off -- scipy's steps, on tracers
    (:func:`forward_and_back`)."""
    if method != "pad":
        raise NotImplementedError("hybridad: scipy.signal.filtfilt(method='gust') is not "
                                  "supported while tracing (method='pad' is)")
    x = _tracer(x)
    dtype = _dtype(b, a, x)
    x = x.astype(dtype)
    axis = _axis(axis, x.ndim)
    zi = lfilter_zi(b, a)
    shape = [1] * x.ndim
    shape[axis] = zi.shape[0]
    return forward_and_back(x, axis, padtype, padlen, max(np.shape(a)[0], np.shape(b)[0]),
                            reshape(zi, tuple(shape)),
                            lambda v, z: lfilter(b, a, v, axis=axis, zi=z))
