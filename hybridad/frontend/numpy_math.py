"""numpy's math functions built from the primitives while tracing: rounding and
clipping, statistics, scans and differences, and constructors from traced values.

Like every ``numpy_*`` module after :mod:`hybridad.frontend.numpy_api`, these
have no rules of their own: their derivatives follow from the primitives
they are made of.  np.round, np.clip, np.average, np.cumsum / np.cumprod,
``np.logaddexp.reduce``, np.diff, np.gradient, np.nan_to_num, np.sinc,
np.real / np.imag / np.angle of real arrays, np.linspace and np.full with
traced values.
"""

from __future__ import annotations

import numbers
import operator

import numpy as np

from .numpy_api import (
    HANDLED,
    UFUNC_METHODS,
    UFUNC_REDUCERS,
    _no_kwargs,
    _norm_axis,
    _reduce,
    _tracer,
    _weak,
    broadcast_to,
    concatenate,
    getitem,
    implements,
    moveaxis,
    ravel,
    reshape,
    squeeze,
    where,
)
from .numpy_reductions import mean
from ..core.decisions import decide_constant
from ..core.trace import bind
from ..core.tracer import Tracer

__all__ = []


def _float(x):
    x = _tracer(x)
    return x if x.dtype.kind == "f" else x.astype(np.float64)


# ----------------------------------------------------------------------------
# rounding, clipping
# ----------------------------------------------------------------------------

@implements(np.round, np.around)
def round_(a, decimals=0, out=None):
    """``np.round``: ``rint`` (half to even, like numpy), scaled for ``decimals``;
    its derivative is zero."""
    _no_kwargs("round", {"out": out})
    a = _tracer(a)
    if decimals == 0:
        return np.rint(a)
    scale = a.dtype.type(10.0 ** decimals) if a.dtype.kind == "f" else 10.0 ** decimals
    return np.rint(a * scale) / scale


@implements(np.clip)
def clip(a, a_min=None, a_max=None, out=None, *, min=None, max=None, **kw):  # noqa: A002
    """``np.clip``: the derivative is 1 with respect to ``a`` where
    ``a_min <= a <= a_max`` (bounds included) and flows to the bound where
    ``a`` is outside it."""
    _no_kwargs("clip", {"out": out, **kw})
    lo = a_min if a_min is not None else min
    hi = a_max if a_max is not None else max
    x = _tracer(a)
    if lo is not None:
        x = where(_or_nan(x < lo, lo), lo, x)
    if hi is not None:
        x = where(_or_nan(x > hi, hi), hi, x)
    return x


def _or_nan(outside, bound):
    """``outside``, or where ``bound`` is NaN: numpy's clip is
    ``minimum(maximum(a, lo), hi)``, so a NaN bound gives NaN there (a bound
    with no NaN adds nothing to the graph)."""
    if isinstance(bound, Tracer):
        return outside | (bound != bound) if bound.dtype.kind in "fc" else outside
    nan = np.isnan(np.asarray(bound)) if np.asarray(bound).dtype.kind in "fc" else False
    if not np.any(nan):
        return outside
    return outside | nan


# ----------------------------------------------------------------------------
# statistics
# ----------------------------------------------------------------------------

def _count(a, axis):
    return int(np.prod([a.shape[i] for i in _norm_axis(axis, a.ndim)], dtype=np.int64))


@implements(np.average)
def average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    """``np.average``, weights differentiable too."""
    a = _float(a)
    if weights is None:
        avg = mean(a, axis=axis, keepdims=keepdims)
        scl = np.full(avg.shape, _count(a, axis), a.dtype)
        return (avg, scl) if returned else avg
    w = _tracer(weights)
    if w.shape != a.shape:
        if axis is None or not isinstance(axis, numbers.Integral) or w.ndim != 1 or \
                w.shape[0] != a.shape[axis]:
            raise ValueError("Axis must be specified when shapes of a and weights differ, "
                             "and weights must be 1-D along that axis")
        shape = [1] * a.ndim
        shape[axis % a.ndim] = w.shape[0]
        w = reshape(w, tuple(shape))
    w = broadcast_to(w.astype(np.result_type(a.dtype, w.dtype)), a.shape)
    scl = _reduce("sum", w, axis, keepdims)
    avg = _reduce("sum", a * w, axis, keepdims) / scl
    return (avg, scl) if returned else avg


def _scan(name, a, axis, dtype, out):
    _no_kwargs(name, {"out": out})
    a = _tracer(a)
    if dtype is not None and np.dtype(dtype) == np.bool_:
        # numpy's logical or (cumsum) and and (cumprod) accumulated: the 0/1
        # counts' running sum or product, nonzero
        return np.not_equal(_scan(name, a.astype(np.bool_), axis, np.int64, out), 0)
    if dtype is not None:
        a = a.astype(dtype)
    elif a.dtype == np.bool_ or (a.dtype.kind in "iu" and a.dtype.itemsize < 8):
        a = a.astype(np.int64 if a.dtype.kind != "u" else np.uint64)
    if axis is None:  # runs over the flattened array
        a, axis = ravel(a), 0
    if a.ndim == 0:
        return reshape(a, (1,))
    attrs = {"reverse": False} if name == "cumsum" else {}
    return bind(name, a, axis=_norm_axis(axis, a.ndim)[0], **attrs)


@implements(np.cumsum)
def cumsum(a, axis=None, dtype=None, out=None):
    """``np.cumsum`` (``axis=None``: over the flattened array)."""
    return _scan("cumsum", a, axis, dtype, out)


@implements(np.cumprod)
def cumprod(a, axis=None, dtype=None, out=None):
    """``np.cumprod``, its gradient exact with zeros (``axis=None``: flattened)."""
    return _scan("cumprod", a, axis, dtype, out)


def _cumulative(name, x, axis, dtype, out, include_initial):
    x = _tracer(x)
    if axis is None:
        if x.ndim > 1:
            raise ValueError(f"{name}: axis must be given for arrays of more than one "
                             "dimension")
        axis = 0
    r = _scan({"cumulative_sum": "cumsum", "cumulative_prod": "cumprod"}[name], x, axis,
              dtype, out)
    if not include_initial:
        return r
    axis = _norm_axis(axis, r.ndim)[0]
    shape = r.shape[:axis] + (1,) + r.shape[axis + 1:]
    first = np.zeros(shape, r.dtype) if name == "cumulative_sum" else np.ones(shape, r.dtype)
    return concatenate([first, r], axis=axis)


if hasattr(np, "cumulative_sum"):  # numpy >= 2.1: the array API's names
    @implements(np.cumulative_sum)
    def cumulative_sum(x, /, *, axis=None, dtype=None, out=None, include_initial=False):
        """``np.cumulative_sum``: ``cumsum``, with a leading 0 by ``include_initial``."""
        return _cumulative("cumulative_sum", x, axis, dtype, out, include_initial)

    @implements(np.cumulative_prod)
    def cumulative_prod(x, /, *, axis=None, dtype=None, out=None, include_initial=False):
        """``np.cumulative_prod``: ``cumprod``, with a leading 1 by ``include_initial``."""
        return _cumulative("cumulative_prod", x, axis, dtype, out, include_initial)


def logaddexp_reduce(x, axis=0, keepdims=False):
    """``np.logaddexp.reduce``: ``m + log(sum(exp(x - m)))``, ``m`` the max
    (finite) rounded down, so large values do not overflow; the derivative is
    the softmax.  The shift carries no derivative (floor's is zero): through
    it the softmax's sum would come back as ``1 - sum(softmax)`` at the
    largest element -- zero in exact arithmetic, a rounding error against a
    softmax of ~1/n in floating point (6 % off for 1e6 float32 values)."""
    x = _float(x)
    m = _reduce("max", x, axis, True)
    m = np.floor(where(np.isfinite(m), m, 0.0))
    r = np.log(_reduce("sum", np.exp(x - m), axis, True)) + m
    return r if keepdims else squeeze(r, _norm_axis(axis, x.ndim))




UFUNC_REDUCERS[np.logaddexp] = logaddexp_reduce


# ----------------------------------------------------------------------------
# differences
# ----------------------------------------------------------------------------

@implements(np.diff)
def diff(a, n=1, axis=-1, prepend=None, append=None):
    a = _tracer(a)
    axis = _norm_axis(axis, a.ndim)[0]
    parts = [v for v in (prepend, a, append) if v is not None]
    if len(parts) > 1:
        shape = list(a.shape)
        fixed = []
        for v in parts:
            if not isinstance(v, Tracer) and np.ndim(v) == 0:
                shape[axis] = 1
                v = np.full(shape, v, a.dtype)
            fixed.append(v)
        a = concatenate(fixed, axis=axis)
    for _ in range(n):
        hi = [slice(None)] * a.ndim
        lo = list(hi)
        hi[axis], lo[axis] = slice(1, None), slice(None, -1)
        a = getitem(a, tuple(hi)) - getitem(a, tuple(lo))
    return a


@implements(np.ediff1d)
def ediff1d(ary, to_end=None, to_begin=None):
    """``np.ediff1d``: the differences of the flattened array, ``to_begin`` and
    ``to_end`` (traced or not) around them, in the array's dtype."""
    a = ravel(_tracer(ary))
    parts = [getitem(a, (slice(1, None),)) - getitem(a, (slice(None, -1),))]
    for at, extra in ((0, to_begin), (len(parts) + 1, to_end)):
        if extra is None:
            continue
        if not isinstance(extra, Tracer):
            extra = np.asarray(extra)
            if not np.can_cast(extra.dtype, a.dtype, casting="same_kind"):
                name = "to_begin" if at == 0 else "to_end"
                raise TypeError(f"dtype of `{name}` must be compatible with input `ary` under "
                                "the `same_kind` rule.")
        parts.insert(at, ravel(extra).astype(a.dtype))
    return concatenate(parts) if len(parts) > 1 else parts[0]


@implements(np.gradient)
def finite_differences(f, *varargs, axis=None, edge_order=1):
    """``np.gradient``: second-order central differences inside, one-sided
    differences of order ``edge_order`` at both ends, with numpy's formulas in
    numpy's order of operations; spacings are scalars (traced or not) or
    constant coordinate arrays.  A tuple for several axes, like numpy."""
    f = _tracer(f)
    otype = f.dtype if f.dtype.kind in "fc" else np.dtype(np.float64)
    f = f.astype(otype)
    nd = f.ndim
    if axis is None:
        axes = tuple(range(nd))
    else:
        axes = tuple(operator.index(a) for a in
                     ((axis,) if isinstance(axis, numbers.Integral) else axis))
        for a in axes:
            if not -nd <= a < nd:
                raise np.exceptions.AxisError(a, nd)
        axes = tuple(a % nd for a in axes)
        if len(set(axes)) != len(axes):
            raise ValueError("repeated axis")
    if not varargs:
        dx = [1.0] * len(axes)
    elif len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        dx = list(varargs) * len(axes)
    elif len(varargs) == len(axes):
        dx = [_gradient_spacing(d, f.shape[a]) for d, a in zip(varargs, axes, strict=True)]
    else:
        raise TypeError("invalid number of arguments")
    if edge_order > 2:
        raise ValueError("'edge_order' greater than 2 not supported")
    outs = []
    for ax, h in zip(axes, dx, strict=True):
        if f.shape[ax] < edge_order + 1:
            raise ValueError("Shape of array too small to calculate a numerical gradient, "
                             "at least (edge_order + 1) elements are required.")

        def part(start, stop, ax=ax):
            index = [slice(None)] * nd
            index[ax] = slice(start, stop)
            return getitem(f, tuple(index))

        uniform = np.ndim(h) == 0
        pieces = []
        if edge_order == 1:
            pieces.append((part(1, 2) - part(0, 1)) / (h if uniform else h[0]))
        else:
            if uniform:
                a, b, c = -1.5 / h, 2. / h, -0.5 / h
            else:
                d1, d2 = h[0], h[1]
                a = -(2. * d1 + d2) / (d1 * (d1 + d2))
                b = (d1 + d2) / (d1 * d2)
                c = - d1 / (d2 * (d1 + d2))
            pieces.append(a * part(0, 1) + b * part(1, 2) + c * part(2, 3))
        if f.shape[ax] > 2:
            if uniform:
                pieces.append((part(2, None) - part(None, -2)) / (2. * h))
            else:
                d1, d2 = h[0:-1], h[1:]
                shape = [1] * nd
                shape[ax] = -1
                a = (-(d2) / (d1 * (d1 + d2))).reshape(shape)
                b = ((d2 - d1) / (d1 * d2)).reshape(shape)
                c = (d1 / (d2 * (d1 + d2))).reshape(shape)
                pieces.append(a * part(None, -2) + b * part(1, -1) + c * part(2, None))
        if edge_order == 1:
            pieces.append((part(-1, None) - part(-2, -1)) / (h if uniform else h[-1]))
        else:
            if uniform:
                a, b, c = 0.5 / h, -2. / h, 1.5 / h
            else:
                d1, d2 = h[-2], h[-1]
                a = (d2) / (d1 * (d1 + d2))
                b = - (d2 + d1) / (d1 * d2)
                c = (2. * d2 + d1) / (d2 * (d1 + d2))
            pieces.append(a * part(-3, -2) + b * part(-2, -1) + c * part(-1, None))
        outs.append(concatenate([p.astype(otype) for p in pieces], axis=ax))
    return outs[0] if len(axes) == 1 else tuple(outs)


def _gradient_spacing(d, n):
    """One axis's spacing for :func:`gradient`: a scalar as given, constant
    coordinates as their differences (one scalar if they are uniform)."""
    if np.ndim(d) == 0:
        return d
    if isinstance(d, Tracer):  # (a data argument's: its values, guarded)
        d = decide_constant(d)
        if d is None:
            raise NotImplementedError("hybridad: np.gradient with coordinate arrays a "
                                      "differentiated argument reaches is not supported (numpy "
                                      "checks their values for uniform spacing); pass scalar "
                                      "spacings, or coordinates that are constants or data "
                                      "arguments")
    d = np.asanyarray(d)
    if d.ndim != 1:
        raise ValueError("distances must be either scalars or 1d")
    if len(d) != n:
        raise ValueError("when 1d, distances must match the length of the corresponding "
                         "dimension")
    if np.issubdtype(d.dtype, np.integer):
        d = d.astype(np.float64)
    diffx = np.diff(d)
    return diffx[0] if (diffx == diffx[0]).all() else diffx


# ----------------------------------------------------------------------------
# elementwise helpers, real parts
# ----------------------------------------------------------------------------

@implements(np.nan_to_num)
def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """NaN and infinities replaced by constants (derivative 1 where ``x`` is
    finite, 0 where it was replaced)."""
    x = _tracer(x)
    info = np.finfo(x.dtype) if x.dtype.kind == "f" else None
    if info is None:
        return x
    big = info.max if posinf is None else posinf
    small = -info.max if neginf is None else neginf
    return where(np.isnan(x), nan, where(x == np.inf, big, where(x == -np.inf, small, x)))


#: |pi x| below which sinc is its Taylor series to t^6 (float64, float32):
#: the derivative of sin(t) / t cancels there, (t cos t - sin t) / t^2 losing
#: eps / t^2 (55 % of the derivative at x = 1e-8; 0 at 1e-10), where the
#: series' next term is below the dtype's rounding
SINC_SERIES = {np.dtype(np.float64): 1e-2, np.dtype(np.float32): 0.2}


@implements(np.sinc)
def sinc(x):
    """``sin(pi x) / (pi x)`` (numpy's), near 0 its Taylor series
    ``1 - t^2/6 + t^4/120 - t^6/5040`` (:data:`SINC_SERIES`): 1 at 0, and its
    derivatives accurate near 0."""
    x = _float(x)
    dt = x.dtype.type
    t = x * dt(np.pi)
    small = np.abs(t) < dt(SINC_SERIES.get(x.dtype, 1e-2))
    t2 = where(small, t, dt(0)) ** 2
    series = dt(1) - t2 * (dt(1 / 6) - t2 * (dt(1 / 120) - t2 * dt(1 / 5040)))
    safe = where(small, dt(1), t)
    return where(small, series, np.sin(safe) / safe)


def _identity_real(name):
    def impl(x, *args, **kwargs):
        x = _tracer(x)
        if x.dtype.kind == "c":
            raise NotImplementedError(f"hybridad: numpy.{name} of complex arrays is not "
                                      "supported")
        return x

    return impl


for _f in (np.real, np.real_if_close):
    HANDLED[_f] = _identity_real(_f.__name__)


def _real_only(name, x):
    x = _tracer(x)
    if x.dtype.kind == "c":
        raise NotImplementedError(f"hybridad: numpy.{name} of complex arrays is not supported")
    return x


@implements(np.imag)
def imag(val):
    """The imaginary part of a real array: zeros of its shape and dtype (a constant)."""
    x = _real_only("imag", val)
    return np.zeros(x.shape, x.dtype)


@implements(np.angle)
def angle(z, deg=False):
    """The angle of a real array, numpy's ``arctan2(0, z)``: pi where the sign
    bit is set (negative numbers, -0.0, -inf), else 0, NaN for NaN, in
    arctan2's dtype; its derivative is zero."""
    x = _real_only("angle", z)
    dt = np.result_type(x.dtype, np.float16)
    a = where(np.isnan(x), dt.type(np.nan), where(np.signbit(x), dt.type(np.pi), dt.type(0)))
    return a * (180 / np.pi) if deg else a


# ----------------------------------------------------------------------------
# constructors from traced values
# ----------------------------------------------------------------------------

@implements(np.linspace)
def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *,
             device=None):
    """``np.linspace`` with traced ``start``/``stop``: numpy's steps (``arange
    * step + start``, the last sample set to ``stop``; ``arange / div * delta``
    where a step is 0, chosen with a traced condition), so the values match."""
    if device not in (None, "cpu"):
        raise ValueError(f"Device not understood. Only 'cpu' is allowed, but received: "
                         f"{device}")
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    div = (num - 1) if endpoint else num
    dt = np.result_type(_weak(start), _weak(stop), 0.0)
    integer_dtype = dtype is not None and np.issubdtype(dtype, np.integer)
    dtype = dt if dtype is None else np.dtype(dtype)
    start, stop = _tracer(start).astype(dt), _tracer(stop).astype(dt)
    delta = stop - start
    if num == 0:
        y = np.moveaxis(np.zeros((0,) + delta.shape, dtype), 0, axis)
        return (y, np.nan) if retstep else y
    y = np.arange(0, num, dtype=dt).reshape((-1,) + (1,) * delta.ndim)
    if div > 0:
        step = delta / div
        zero = step == 0
        y = where(zero if zero.ndim == 0 else np.any(zero), (y / div) * delta, y * step)
    else:
        step = np.nan
        y = y * delta
    y = y + start
    if endpoint and num > 1:
        y = concatenate([y[:-1], broadcast_to(stop, (1,) + y.shape[1:])], axis=0)
    if axis != 0:
        y = moveaxis(y, 0, axis)
    if integer_dtype:
        y = np.floor(y)
    y = y.astype(dtype)
    return (y, step) if retstep else y


@implements(np.full)
def full(shape, fill_value, dtype=None, order="C", *, device=None, like=None):
    """``np.full`` with a traced fill value, a broadcast of it.  numpy hands
    np.full to tracers only through ``like=`` (``np.full(shape, v, like=x)``):
    without it a traced fill value goes to np.asarray, which raises
    TracingError; ``np.full_like`` or ``np.broadcast_to`` work too."""
    if not isinstance(fill_value, Tracer):
        return np.full(shape, fill_value, dtype, order)
    return broadcast_to(fill_value if dtype is None else fill_value.astype(dtype), shape)


def ufunc_outer(ufunc, a, b, **kwargs):
    """``ufunc.outer(a, b)``: ``ufunc`` of every element of ``a`` with every
    element of ``b`` (the result ``a.shape + b.shape``), as ``ufunc`` of ``a``
    with ``b.ndim`` unit axes appended and ``b``."""
    if ufunc.nin != 2:
        raise ValueError("outer product only supported for binary functions")
    _no_kwargs(f"{ufunc.__name__}.outer", kwargs, allowed=("out",))
    a = _tracer(a)
    return ufunc(reshape(a, a.shape + (1,) * np.ndim(b)), b)


UFUNC_METHODS["outer"] = ufunc_outer


def running_extreme(ufunc, a, axis=0, dtype=None, out=None):
    """``np.maximum.accumulate`` (and ``minimum``, ``fmax``, ``fmin``): the
    running extreme along ``axis`` as a log-step scan -- after the step of
    shift ``s`` each element holds ``ufunc`` of the ``2 s`` elements ending at
    it, the earlier ones first as numpy's accumulation takes them -- so its
    derivative is the elementwise ufunc's: each element's cotangent reaches
    the element the running extreme came from (shared at equal values, as
    the ufunc's rule shares a tie).  Values are numpy's exactly (an extreme
    rounds nothing; a NaN reaches every later element, or none for fmax and
    fmin, as in numpy's loop)."""
    _no_kwargs(f"{ufunc.__name__}.accumulate", {"out": out})
    y = _tracer(a)
    if dtype is not None:
        y = y.astype(dtype)
    if y.ndim == 0:
        raise ValueError(f"{ufunc.__name__}.accumulate of a 0-d array (numpy: cannot "
                         "accumulate on a scalar)")
    axis = _norm_axis(axis, y.ndim)[0]
    n, s = y.shape[axis], 1

    def part(lo, hi):
        return getitem(y, (slice(None),) * axis + (slice(lo, hi),))

    while s < n:
        y = concatenate([part(0, s), ufunc(part(0, n - s), part(s, n))], axis=axis)
        s *= 2
    return y


for _uf in (np.maximum, np.minimum, np.fmax, np.fmin):
    UFUNC_METHODS["accumulate", _uf] = running_extreme


@implements(np.i0)
def i0(x):
    """``np.i0``: the modified Bessel function of order 0 as the ``i0`` op
    (scipy.special's, whose derivative is ``i1``): numpy's Chebyshev series
    and scipy's agree to a few ulps."""
    x = _tracer(x)
    return bind("i0", x if x.dtype.kind == "f" else x.astype(np.float64))
