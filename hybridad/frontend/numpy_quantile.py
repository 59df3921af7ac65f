"""numpy's quantiles of traced arrays, built from the primitives while tracing
(no rules of their own, as :func:`.numpy_selection.median`): the array sorted
with the traced ``np.sort``, the order statistics read at positions, and
numpy's linear interpolation between them.

``np.quantile`` and ``np.percentile`` (every ``method`` numpy offers):
``q`` is a constant, so the positions -- numpy's *virtual indexes*, computed
from ``q`` and the length of the sorted axis by numpy's own formulas -- are
known at trace time, and the order statistics are one gather of the sorted
array.  ``np.nanquantile`` and ``np.nanpercentile``: the count of non-NaN
elements of each slice is a traced (integer-valued) float, the virtual
indexes are computed from it by the same formulas while the plan runs, and
each order statistic is read by a one-hot sum over the sorted slice (NaNs
sort last, so the first ``count`` elements are the slice's values in order).

The derivative follows from the sort (each sorted element's cotangent goes
to the element it came from; a tie to one of the tied elements, in numpy's
stable order) and the interpolation ``a + (b - a) * t`` (``t`` piecewise
constant).  The values are numpy's bit for bit: the same virtual indexes,
the same ``_lerp`` formula (``b - (b - a) * (1 - t)`` where ``t >= 0.5``),
NaN where a slice holds one (``np.quantile``) or holds nothing else
(``np.nanquantile``).
"""

from __future__ import annotations

import numpy as np

from ..core.decisions import decide_constant
from ..core.tracer import Tracer
from ..errors import user_location
from .numpy_api import (
    _no_kwargs,
    _norm_axis,
    _tracer,
    gather_positions,
    getitem,
    implements,
    reshape,
    transpose,
    where,
)
from .numpy_selection import sort

__all__ = ["nanmedian", "nanpercentile", "nanquantile", "percentile", "quantile"]

#: numpy's continuous methods of Hyndman and Fan: (alpha, beta)
_ALPHA_BETA = {"interpolated_inverted_cdf": (0, 1), "hazen": (0.5, 0.5), "weibull": (0, 0),
               "median_unbiased": (1 / 3.0, 1 / 3.0), "normal_unbiased": (3 / 8.0, 3 / 8.0)}
#: the methods numpy reads one order statistic for (no interpolation: ``fix_gamma`` None)
_DISCRETE = ("inverted_cdf", "closest_observation", "lower", "higher", "nearest")
METHODS = ("inverted_cdf", "averaged_inverted_cdf", "closest_observation",
           *_ALPHA_BETA, "linear", "lower", "higher", "midpoint", "nearest")


# ----------------------------------------------------------------------------
# numpy's virtual indexes (numpy/lib/_function_base_impl.py, _QuantileMethods):
# ``n`` an int (numpy arrays, at trace time) or a traced count (tracers)
# ----------------------------------------------------------------------------

def _boundaries(index, at_previous):
    """numpy's ``_discrete_interpolation_to_boundaries``."""
    previous = np.floor(index)
    gamma = index - previous
    res = np.where(at_previous(gamma, index), previous, previous + 1)
    return np.where(res < 0, 0, res)  # (out-of-bound indexes clipped, as numpy)


def _virtual(method, n, q):
    """numpy's virtual index of the quantiles ``q`` of ``n`` sorted values."""
    if method == "inverted_cdf":
        return _boundaries(n * q - 1, lambda gamma, _: gamma == 0)
    if method == "averaged_inverted_cdf":
        return n * q - 1
    if method == "closest_observation":
        return _boundaries(n * q - 1 - 0.5,
                           lambda gamma, index: (gamma == 0) & (np.floor(index) % 2 == 1))
    if method in _ALPHA_BETA:
        alpha, beta = _ALPHA_BETA[method]
        return n * q + (alpha + q * (1 - alpha - beta)) - 1
    if method == "linear":
        return (n - 1) * q
    if method == "lower":
        return np.floor((n - 1) * q)
    if method == "higher":
        return np.ceil((n - 1) * q)
    if method == "midpoint":
        return 0.5 * (np.floor((n - 1) * q) + np.ceil((n - 1) * q))
    if method == "nearest":
        return np.around((n - 1) * q)
    raise ValueError(f"{method!r} is not a valid method. Use one of: {METHODS}")


def _fix_gamma(method, gamma, virtual):
    """numpy's ``fix_gamma`` of ``method``."""
    if method == "averaged_inverted_cdf":
        return np.where(gamma == 0, 0.5, 1.0)
    if method == "midpoint":
        return np.where(virtual % 1 == 0, 0.0, 0.5)
    return gamma


def _neighbours(method, n, virtual):
    """``(previous, next, gamma)``: numpy's ``_get_indexes`` and ``_get_gamma``
    -- the neighbouring positions (``-1``: the last value, for a virtual index
    at or above it; 0 below the first) and the interpolation weight, computed
    from the previous index as numpy leaves it (``-1`` above the last)."""
    previous = np.floor(virtual)
    nxt = previous + 1
    above, below = virtual >= n - 1, virtual < 0
    previous = np.where(below, 0, np.where(above, -1, previous))
    nxt = np.where(below, 0, np.where(above, -1, nxt))
    gamma = _fix_gamma(method, virtual - previous, virtual)
    gamma = gamma.astype(virtual.dtype) if isinstance(gamma, Tracer) else \
        np.asanyarray(gamma, dtype=virtual.dtype)  # (numpy's _get_gamma: the index's type)
    return previous, nxt, gamma


def _lerp(a, b, gamma, dtype, weak):
    """numpy's ``_lerp(a, b, t)``: ``a + (b - a) * t``, ``b - (b - a) * (1 - t)``
    where ``t >= 0.5``, in the result's ``dtype`` (``t`` and ``1 - t``
    computed as numpy computes them, then rounded to it)."""
    diff = b - a
    if isinstance(gamma, Tracer):
        t, rest = gamma.astype(dtype), (1 - gamma).astype(dtype)
    else:
        t = np.asarray(gamma).astype(dtype)
        rest = np.asarray(1 - (float(gamma) if weak else gamma)).astype(dtype)
    high = gamma >= 0.5
    if not isinstance(high, Tracer) and not np.any(high):
        return a + diff * t
    if not isinstance(high, Tracer) and np.all(high):
        return b - diff * rest
    return where(high, b - diff * rest, a + diff * t)


# ----------------------------------------------------------------------------
# the levels and the slices
# ----------------------------------------------------------------------------

def _levels(name, q, percent):
    """``(q in [0, 1] as numpy holds it, weak)``: ``weak`` where ``q`` is a
    Python int or float (numpy's weak promotion of the result)."""
    weak = type(q) in (int, float)

    def constant(v):  # (a constant's tracer, np.array([...]) made in f: its value)
        if isinstance(v, (list, tuple)):
            return [constant(u) for u in v]
        if not isinstance(v, Tracer):
            return v
        if v.node.is_const:
            return np.array(v.node.attrs["value"])
        known = decide_constant(v)  # (a data argument's: its values, guarded)
        if known is not None:
            return known
        raise NotImplementedError(
            f"hybridad: numpy.{name} with a q a differentiated argument reaches at "
            f"{user_location()}: the levels `q` must be constants or data arguments (the "
            "positions read from the sorted array are computed from them when f is traced)")

    q = constant(q)
    q = np.true_divide(q, 100) if percent else np.asanyarray(q)
    if q.size and not (q.min() >= 0 and q.max() <= 1):
        raise ValueError("Percentiles must be in the range [0, 100]" if percent else
                         "Quantiles must be in the range [0, 1]")
    if q.ndim > 2:
        raise ValueError("q must be a scalar or 1d")
    return q, weak


def _slices(name, a, axis):
    """``(sorted, rest shape, full shape with the reduced axes 1)``: ``a``'s
    reduced axes moved last and merged (in numpy's order), sorted along them."""
    a = _tracer(a)
    if a.dtype.kind == "c":
        raise TypeError("a must be an array of real numbers")
    axes = _norm_axis(axis, a.ndim)
    rest = [d for d in range(a.ndim) if d not in axes]
    x = transpose(a, rest + list(axes)) if rest + list(axes) != list(range(a.ndim)) else a
    m = int(np.prod([a.shape[d] for d in axes], dtype=np.int64))
    if m == 0:
        raise ValueError(f"numpy.{name} of an empty selection is not supported while tracing")
    shape = tuple(a.shape[d] for d in rest)
    kept = tuple(1 if d in axes else s for d, s in enumerate(a.shape))
    return sort(reshape(x, shape + (m,)), -1), shape, kept


def _shaped(result, q, kept, keepdims):
    return reshape(result, q.shape + kept) if keepdims else result


def _result_dtype(x, gamma_dtype, weak):
    return np.result_type(x.dtype, 0.5 if weak else gamma_dtype)


# ----------------------------------------------------------------------------
# np.quantile, np.percentile
# ----------------------------------------------------------------------------

def _quantile(name, a, q, axis, method, keepdims, percent):
    q, weak = _levels(name, q, percent)
    x, shape, kept = _slices(name, a, axis)
    m = x.shape[-1]
    virtual = np.asanyarray(_virtual(method, m, q))
    nq, nr = q.ndim, len(shape)

    def read(index):  # the sorted values at ``index`` (q's shape), q's axes first
        index = np.asarray(index).astype(np.intp)
        return gather_positions(x, lambda p: np.moveaxis(
            p[..., index], list(range(nr, nr + nq)), list(range(nq))))

    if method in _DISCRETE or method == "linear" and virtual.dtype.kind in "biu":
        result = read(virtual)
    else:
        previous, nxt, gamma = _neighbours(method, m, virtual)
        dtype = _result_dtype(x, gamma.dtype, weak)
        gamma = gamma[()] if weak else gamma.reshape(q.shape + (1,) * nr)
        result = _lerp(read(previous), read(nxt), gamma, dtype, weak)
    if x.dtype.kind == "f":  # a slice holding a NaN: NaN (NaNs sort last)
        result = where(np.isnan(getitem(x, (Ellipsis, m - 1))),
                       np.asarray(np.nan, result.dtype), result)
    return _shaped(result, q, kept, keepdims)


def _refuse_weights(name, out, weights):
    _no_kwargs(name, {"out": out, "weights": weights})


@implements(np.quantile)
def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
             keepdims=False, *, weights=None):
    """``np.quantile`` of a traced array, constant ``q``.

    Parameters
    ----------
    a : Tracer
    q : float or array_like
        Constant levels in [0, 1] (scalar, 1-D or 2-D, as numpy); a traced
        ``q`` raises NotImplementedError naming it.
    axis : None, int or tuple of ints
    method : str
        Any of numpy's thirteen methods.
    keepdims : bool

    Returns
    -------
    Tracer
        ``q``'s axes first, as numpy.  Built of ``np.sort``, a gather of the
        sorted values at the virtual indexes numpy computes (from ``q`` and
        the axis length, at trace time) and numpy's ``_lerp``: numpy's values
        bit for bit; NaN for a slice that holds a NaN.  ``out`` and
        ``weights`` are refused.
    """
    _refuse_weights("quantile", out, weights)
    return _quantile("quantile", a, q, axis, method, keepdims, False)


@implements(np.percentile)
def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
               keepdims=False, *, weights=None):
    """``np.percentile``: :func:`quantile` of ``q / 100`` (numpy's division).

    Parameters
    ----------
    a, axis, method, keepdims
        As :func:`quantile`.
    q : float or array_like
        Constant levels in [0, 100].

    Returns
    -------
    Tracer
    """
    _refuse_weights("percentile", out, weights)
    return _quantile("percentile", a, q, axis, method, keepdims, True)


# ----------------------------------------------------------------------------
# np.nanquantile, np.nanpercentile: positions from a traced count
# ----------------------------------------------------------------------------

def _nanquantile(name, a, q, axis, method, keepdims, percent):
    a = _tracer(a)
    if a.dtype.kind != "f":  # (no NaN to leave out)
        return _quantile(name, a, q, axis, method, keepdims, percent)
    q, weak = _levels(name, q, percent)
    if method not in METHODS:
        raise ValueError(f"{method!r} is not a valid method. Use one of: {METHODS}")
    x, shape, kept = _slices(name, a, axis)
    m, nr = x.shape[-1], len(shape)
    count = np.sum(np.logical_not(np.isnan(x)), axis=-1)  # (a float: exact)
    # numpy computes with the count a Python int: in q's float type (float64 for ints)
    count = count.astype(q.dtype if q.dtype.kind == "f" else np.float64)
    levels = q.reshape(q.shape + (1,) * nr)
    virtual = _virtual(method, count, levels)
    ramp = np.arange(m, dtype=np.float64)

    def read(index):  # x's element at the traced position ``index`` (-1: the last value)
        index = where(index < 0, count - 1, index)
        hit = np.equal(reshape(index, index.shape + (1,)), ramp)
        return np.sum(where(hit, x, np.asarray(0, x.dtype)), axis=-1)

    if method in _DISCRETE or method == "linear" and q.dtype.kind in "biu":
        result = read(virtual)
    else:
        previous, nxt, gamma = _neighbours(method, count, virtual)
        dtype = _result_dtype(x, gamma.dtype, weak)
        result = _lerp(read(previous), read(nxt), gamma, dtype, weak)
    result = where(count == 0, np.asarray(np.nan, result.dtype), result)  # all NaN: NaN
    return _shaped(result, q, kept, keepdims)


@implements(np.nanquantile)
def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                keepdims=False, *, weights=None):
    """``np.nanquantile`` of a traced array, constant ``q``: the quantiles of
    each slice's non-NaN elements (NaN for a slice of NaNs).

    Parameters
    ----------
    a, q, axis, method, keepdims
        As :func:`quantile`.

    Returns
    -------
    Tracer
        Built of ``np.sort`` (NaNs last), the count of non-NaN elements per
        slice (a traced float), numpy's virtual indexes computed from it while
        the plan runs, each order statistic a one-hot sum over the sorted
        slice (``np.where`` and ``np.sum``: exact, and the derivative goes to
        the element read), and numpy's ``_lerp``: numpy's values bit for bit
        (a zero read is +0.0 where numpy's may be -0.0).  Costs a slice's
        length per level and slice.
    """
    _refuse_weights("nanquantile", out, weights)
    return _nanquantile("nanquantile", a, q, axis, method, keepdims, False)


@implements(np.nanpercentile)
def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                  keepdims=False, *, weights=None):
    """``np.nanpercentile``: :func:`nanquantile` of ``q / 100``.

    Parameters
    ----------
    a, q, axis, method, keepdims
        As :func:`percentile`.

    Returns
    -------
    Tracer
    """
    _refuse_weights("nanpercentile", out, weights)
    return _nanquantile("nanpercentile", a, q, axis, method, keepdims, True)


@implements(np.nanmedian)
def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """``np.nanmedian`` of a traced array: :func:`nanquantile` at 0.5 (the
    middle of each slice's non-NaN elements, the mean of the two middle ones
    by numpy's ``_lerp``; NaN for a slice of NaNs).

    Parameters
    ----------
    a, axis, keepdims
        As :func:`quantile`.

    Returns
    -------
    Tracer
        numpy's value to rounding (numpy averages the two middle elements as
        ``(a + b) / 2``, the interpolation as ``b - (b - a) / 2``).
    """
    _refuse_weights("nanmedian", out, None)
    return _nanquantile("nanmedian", a, 0.5, axis, "linear", keepdims, False)
