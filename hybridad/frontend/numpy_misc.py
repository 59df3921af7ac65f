"""More of numpy (and scipy.integrate.simpson) on traced arrays, built from the
primitives while tracing (no rules of their own: their derivatives follow
from what they are made of, as in :mod:`.numpy_stats`).

``np.block`` (nested lists of traced and constant arrays), ``np.diagflat``,
``np.linalg.cond`` (every ``p`` numpy takes), the ufuncs ``np.ldexp``,
``np.frexp`` and ``np.modf`` (exact: powers of two and truncation),
``np.unwrap``, ``scipy.integrate.simpson`` (scipy's formulas for odd and even
sample counts) and the ``reduceat`` method of ``np.add``, ``np.multiply``,
``np.maximum`` and ``np.minimum`` (constant indices, numpy's rules).
"""

from __future__ import annotations

import operator

import numpy as np

from ..core.tracer import Tracer
from ..errors import user_location
from .numpy_api import (
    GUFUNCS,
    UFUNC_METHODS,
    _no_kwargs,
    _norm_axis,
    _tracer,
    concatenate,
    gather_positions,
    getitem,
    implements,
    moveaxis,
    ravel,
    reshape,
    where,
)
from .numpy_math import _scan, diff
from .numpy_signal import _GROUPED, _constant, _grouped
from .numpy_shapes import diag
from .scipy_special import intercepts

__all__ = ["block", "common_type", "cond", "diagflat", "frexp", "iscomplexobj", "isrealobj",
           "ldexp", "modf", "reduceat", "simpson", "unwrap"]


def _value(name, arg, v):
    """``v`` (an argument that sets positions or formulas) as a constant: a
    constant's tracer is its value; a traced one raises naming ``arg``."""
    if isinstance(v, Tracer):
        if v.node.is_const:
            return np.array(v.node.attrs["value"])
        raise NotImplementedError(
            f"hybridad: {name} with a traced `{arg}` at {user_location()}: `{arg}` must be a "
            "constant (known when f is traced)")
    return v


# ----------------------------------------------------------------------------
# dtype queries: answered from the dtypes (known while tracing), not the values
# ----------------------------------------------------------------------------


def _dtype_of(a):
    return a.dtype if hasattr(a, "dtype") else np.asarray(a).dtype


@implements(np.iscomplexobj)
def iscomplexobj(x):
    """Whether ``x``'s dtype is complex (a real tracer's is not)."""
    return _dtype_of(x).kind == "c"


@implements(np.isrealobj)
def isrealobj(x):
    """Whether ``x``'s dtype is not complex."""
    return _dtype_of(x).kind != "c"


@implements(np.common_type)
def common_type(*arrays):
    """numpy's common scalar type of the arrays' dtypes (integers count as
    float64): what numpy's polynomial package converts coefficients to."""
    complex_, size = False, 0
    for a in arrays:
        dt = _dtype_of(a)
        if dt.kind not in "iubfc":
            raise TypeError("can't get common type for non-numeric array")
        complex_ |= dt.kind == "c"
        size = max(size, 8 if dt.kind in "iub" else dt.itemsize // (2 if dt.kind == "c" else 1))
    base = {2: np.half, 4: np.single, 8: np.double}.get(size, np.longdouble)
    return {np.half: np.csingle, np.single: np.csingle, np.double: np.cdouble}.get(
        base, np.clongdouble) if complex_ else base


# ----------------------------------------------------------------------------
# np.block, np.diagflat
# ----------------------------------------------------------------------------

def _block_depth(arrays, index=()):
    """``(depth of the nested lists, largest ndim of a leaf)``; numpy's errors
    for tuples, empty lists and lists of mismatched depths."""
    if type(arrays) is tuple:
        raise TypeError(f"arrays{''.join(f'[{i}]' for i in index)} is a tuple. Only lists "
                        "can be used to arrange blocks, and np.block does not allow implicit "
                        "conversion from tuple to ndarray.")
    if type(arrays) is not list:
        return 0, np.ndim(arrays) if not isinstance(arrays, Tracer) else arrays.ndim
    if not arrays:
        raise ValueError("Lists cannot be empty")
    found = [_block_depth(a, index + (i,)) for i, a in enumerate(arrays)]
    if len({d for d, _ in found}) > 1:
        raise ValueError("List depths are mismatched. First element was at depth "
                         f"{found[0][0] + len(index) + 1}, but there is an element at "
                         f"depth {[d for d, _ in found if d != found[0][0]][0] + len(index) + 1}")
    return found[0][0] + 1, max(n for _, n in found)


def _block_join(arrays, depth, ndim):
    if type(arrays) is not list:
        a = _tracer(arrays)
        return reshape(a, (1,) * (ndim - a.ndim) + a.shape) if a.ndim < ndim else a
    parts = [_block_join(a, depth - 1, ndim) for a in arrays]
    return concatenate(parts, axis=-depth)


@implements(np.block)
def block(arrays):
    """``np.block``: the blocks (traced or constant) brought to a common
    number of dimensions (leading axes of 1) and concatenated, the innermost
    lists along the last axis, as numpy.

    Parameters
    ----------
    arrays : nested list of array_like or Tracer

    Returns
    -------
    Tracer
        Built of ``reshape`` and ``concatenate``: numpy's values exactly.
    """
    depth, ndim = _block_depth(arrays)
    if depth == 0:
        return np.copy(_tracer(arrays))
    return _block_join(arrays, depth, max(depth, ndim))


@implements(np.diagflat)
def diagflat(v, k=0):
    """``np.diagflat``: ``np.diag`` of the flattened input (one gather of it
    and a zero: numpy's values exactly).

    Parameters
    ----------
    v : Tracer
    k : int

    Returns
    -------
    Tracer
    """
    return diag(ravel(_tracer(v)), operator.index(k))


# ----------------------------------------------------------------------------
# np.linalg.cond
# ----------------------------------------------------------------------------

@implements(np.linalg.cond)
def cond(x, p=None):
    """``np.linalg.cond`` as numpy computes it.

    Parameters
    ----------
    x : Tracer, (..., M, N)
    p : None, 2, -2, 'fro', 'nuc', 1, -1, inf, -inf

    Returns
    -------
    Tracer
        ``None``, 2, -2: the ratio of the largest and smallest singular values
        (``np.linalg.svd``); the others: ``norm(x, p) * norm(inv(x), p)``
        (``np.linalg.inv`` and ``np.linalg.norm``); NaN turned to inf unless
        ``x`` holds a NaN, as numpy.  The values are numpy's to LAPACK's
        rounding; an exactly singular ``x`` with ``p`` not None, 2 or -2 raises
        as ``np.linalg.inv`` does (numpy returns inf).
    """
    x = _tracer(x)
    if x.ndim < 2:
        raise np.linalg.LinAlgError(f"{x.ndim}-dimensional array given. Array must be at "
                                    "least two-dimensional")
    if x.size == 0:
        raise np.linalg.LinAlgError("cond is not defined on empty arrays")
    if p is None or (not isinstance(p, str) and p in {2, -2}):
        s = np.linalg.svd(x, compute_uv=False)
        first, last = getitem(s, (Ellipsis, 0)), getitem(s, (Ellipsis, -1))
        r = last / first if p == -2 else first / last
    else:
        if x.shape[-1] != x.shape[-2]:
            raise np.linalg.LinAlgError("Last 2 dimensions of the array must be square")
        r = np.linalg.norm(x, p, axis=(-2, -1)) * \
            np.linalg.norm(np.linalg.inv(x), p, axis=(-2, -1))
    nan = np.isnan(r)
    if x.dtype.kind in "fc":
        nan = np.logical_and(nan, np.logical_not(np.any(np.isnan(x), axis=(-2, -1))))
    return where(nan, np.asarray(np.inf, r.dtype), r)


# ----------------------------------------------------------------------------
# ldexp, frexp, modf: exact, from powers of two and truncation
# ----------------------------------------------------------------------------

def _pow2_factors(n, dtype):
    """Constant arrays whose product, applied in order, scales by ``2**n``
    exactly: powers of two ``dtype`` holds, the one nearest 1 first, so that
    only the last product can round (an exponent beyond a factor's range:
    ``2**(n + 1074) * 2**-1074`` in float64)."""
    info = np.finfo(dtype)
    lo, hi = int(info.minexp) - int(info.nmant), int(info.maxexp) - 1  # (-1074, 1023)
    # beyond these every finite x gives 0 or inf (or stays 0): the same from the clipped n
    n = np.clip(np.asarray(n, dtype=np.int64), lo - hi - 2, hi + 1 - lo)
    steps = np.where(n > hi, -((hi - n) // hi), np.where(n < lo, -((n - lo) // -lo), 0))
    chunk = np.where(n < 0, lo, hi)
    factors = [np.ldexp(np.ones((), dtype), n - chunk * steps)]
    factors += [np.ldexp(np.ones((), dtype), np.where(steps > k, chunk, 0))
                for k in range(int(steps.max(initial=0)))]
    return [f.astype(dtype) for f in factors]


def ldexp(x, n, **kwargs):
    """``np.ldexp(x, n)``: ``x * 2.0**n``.

    Parameters
    ----------
    x : Tracer
    n : int or array_like of int
        Constant exponents (a traced one raises NotImplementedError naming
        ``n``).

    Returns
    -------
    Tracer
        ``x`` times constant powers of two: one product, or two or three
        where ``2.0**n`` is beyond the dtype's range, only the last one
        rounding -- numpy's values bit for bit.  The derivative is ``2.0**n``
        (inf where that overflows, as for a subnormal ``x`` scaled up).
    """
    _no_kwargs("ldexp", kwargs)
    n = _value("numpy.ldexp", "n", n)
    dtype = np.ldexp(np.zeros(1, _tracer(x).dtype), np.zeros(1, np.asarray(n).dtype)).dtype
    y = _tracer(x).astype(dtype)
    for f in _pow2_factors(n, dtype):
        y = y * f
    return y


def frexp(x, **kwargs):
    """``np.frexp(x)``: ``(m, e)`` with ``x = m * 2**e``, ``0.5 <= |m| < 1``
    (``m = x``, ``e = 0`` for 0, inf and NaN).

    Parameters
    ----------
    x : Tracer

    Returns
    -------
    m : Tracer
        ``x`` scaled by constant powers of two, ``2**-s`` where ``|x| >=
        2**s`` (s = 512, 256, ..., 1 for float64), then ``2**s`` where the
        result stays below 2, then halved (``np.where`` and products, each
        exact): numpy's values bit for bit.  Derivative ``2**-e``.
    e : Tracer of int32
        The sum of the scalings; no derivative.
    """
    _no_kwargs("frexp", kwargs)
    x = _tracer(x)
    dtype = np.frexp(np.zeros(1, x.dtype))[0].dtype
    m = x.astype(dtype)
    info = np.finfo(dtype)
    big = [1 << j for j in range(int(np.log2(int(info.maxexp) - 1)), -1, -1)]  # 512, ..., 1
    up = list(big)
    while sum(up) <= int(info.nmant) - int(info.minexp):  # (down to the least subnormal)
        up.insert(0, big[0])
    e = np.zeros((), dtype)
    for s, down in [(s, True) for s in big] + [(s, False) for s in up]:
        scale = np.asarray(2.0 ** (-s if down else s), dtype)
        if down:
            hit = np.abs(m) >= np.asarray(2.0 ** s, dtype)
        else:
            hit = np.abs(m * scale) < np.asarray(2, dtype)
        m = where(hit, m * scale, m)
        e = e + where(hit, np.asarray(s if down else -s, dtype), np.asarray(0, dtype))
    plain = np.logical_or(np.equal(x, 0), np.logical_not(np.isfinite(x)))
    m = where(plain, x.astype(dtype), m * np.asarray(0.5, dtype))
    e = where(plain, np.asarray(0, dtype), e + np.asarray(1, dtype))
    return m, e.astype(np.intc)


def modf(x, **kwargs):
    """``np.modf(x)``: the fractional and integral parts, both with ``x``'s sign.

    Parameters
    ----------
    x : Tracer

    Returns
    -------
    fractional : Tracer
        ``s * (|x| - trunc(|x|))``, ``s`` = +-1 from ``x``'s sign bit (+-0
        for an infinite ``x``), as C's modf: numpy's values bit for bit,
        signed zeros included.  Derivative 1.
    integral : Tracer
        ``np.trunc(x)``; derivative 0.
    """
    _no_kwargs("modf", kwargs)
    x = _tracer(x)
    dtype = np.modf(np.zeros(1, x.dtype))[0].dtype
    x = x.astype(dtype)
    sign = where(np.signbit(x), np.asarray(-1, dtype), np.asarray(1, dtype))
    a = x * sign  # |x|, with the derivative's sign
    frac = where(np.isinf(x), np.asarray(0, dtype), a - np.trunc(a))
    return frac * sign, np.trunc(x)


GUFUNCS.update({np.ldexp: ldexp, np.frexp: frexp, np.modf: modf})


# ----------------------------------------------------------------------------
# np.unwrap
# ----------------------------------------------------------------------------

@implements(np.unwrap)
def unwrap(p, discont=None, axis=-1, *, period=2 * np.pi):
    """``np.unwrap`` as numpy computes it: the differences along ``axis``
    wrapped into ``[-period/2, period/2]`` (``np.mod``), the corrections where
    a jump is at least ``discont``, their running sum added.

    Parameters
    ----------
    p : Tracer
    discont, period : float
        Constants (traced ones raise NotImplementedError naming them).
    axis : int

    Returns
    -------
    Tracer
        numpy's values bit for bit.  The correction is piecewise constant
        in ``p``: its derivative is 0 (the wrapped difference minus the
        difference), so the derivative of ``unwrap(p)`` is the identity.
    """
    discont = _value("numpy.unwrap", "discont", discont)
    period = _value("numpy.unwrap", "period", period)
    p = _tracer(p)
    axis = _norm_axis(axis, p.ndim)[0]
    dd = diff(p, axis=axis)
    if discont is None:
        discont = period / 2
    dtype = np.result_type(dd.dtype, period)
    if np.issubdtype(dtype, np.integer):
        interval_high, rem = divmod(period, 2)
        boundary_ambiguous = rem == 0
    else:
        interval_high = period / 2
        boundary_ambiguous = True
    interval_low = -interval_high
    ddmod = np.mod(dd - interval_low, period) + interval_low
    if boundary_ambiguous:
        ddmod = where(np.logical_and(np.equal(ddmod, interval_low), dd > 0),
                      np.asarray(interval_high).astype(ddmod.dtype), ddmod)
    correct = ddmod - dd
    correct = where(np.abs(dd) < discont, np.asarray(0, correct.dtype), correct)
    head = [slice(None)] * p.ndim
    tail = list(head)
    head[axis], tail[axis] = slice(None, 1), slice(1, None)
    rest = getitem(p, tuple(tail)) + _scan("cumsum", correct, axis, None, None)
    return concatenate([getitem(p, tuple(head)).astype(dtype), rest.astype(dtype)], axis=axis)


# ----------------------------------------------------------------------------
# scipy.integrate.simpson
# ----------------------------------------------------------------------------

def _at(nd, axis, index):
    parts = [slice(None)] * nd
    parts[axis] = index
    return tuple(parts)


def _basic_simpson(y, start, stop, x, dx, axis):
    """scipy's ``_basic_simpson``: the constants (``x`` and ``dx`` are) from
    scipy's formulas, the samples traced."""
    nd = y.ndim
    s0, s1, s2 = (_at(nd, axis, slice(start + j, stop + j, 2)) for j in range(3))
    y0, y1, y2 = getitem(y, s0), getitem(y, s1), getitem(y, s2)
    if x is None:
        return np.sum(y0 + 4.0 * y1 + y2, axis=axis) * (dx / 3.0)
    h = np.diff(x, axis=axis)
    h0 = h[s0].astype(float, copy=False)
    h1 = h[s1].astype(float, copy=False)
    hsum = h0 + h1
    hprod = h0 * h1
    h0divh1 = _ratio(h0, h1)
    c0, c1, c2 = 2.0 - _ratio(1.0, h0divh1), hsum * _ratio(hsum, hprod), 2.0 - h0divh1
    return np.sum(hsum / 6.0 * (y0 * c0 + y1 * c1 + y2 * c2), axis=axis)


def _ratio(num, den):
    return np.true_divide(num, den, out=np.zeros_like(den), where=den != 0)


@intercepts("scipy.integrate", "simpson")
def simpson(y, x=None, *, dx=1.0, axis=-1):
    """``scipy.integrate.simpson`` (scipy >= 1.11): the composite Simpson's
    rule, and for an even number of samples Cartwright's correction of the
    last interval, with scipy's formulas.

    Parameters
    ----------
    y : Tracer
    x : array_like, optional
        Constant sample points, 1-D or ``y``'s shape.
    dx : float
        Constant spacing when ``x`` is None.
    axis : int

    Returns
    -------
    Tracer
        Linear in ``y``; the weights computed from ``x`` or ``dx`` by scipy's
        formulas at trace time, the sum along ``axis`` hybridad's (scipy's
        values to the last bits of the sum).  A traced ``x`` or ``dx`` raises
        NotImplementedError naming it.
    """
    x = _value("scipy.integrate.simpson", "x", x)
    dx = _value("scipy.integrate.simpson", "dx", dx)
    y = _tracer(y)
    nd = y.ndim
    n = y.shape[axis]
    axis = _norm_axis(axis, nd)[0]
    last_dx = dx
    if x is not None:
        x = np.asarray(x)
        if x.ndim == 1:
            shape = [1] * nd
            shape[axis] = x.shape[0]
            x = x.reshape(tuple(shape))
        elif x.ndim != nd:
            raise ValueError("If given, shape of x must be 1-D or the same as y.")
        if x.shape[axis] != n:
            raise ValueError("If given, length of x along axis must be the same as y.")
    if n % 2 == 1:
        return _basic_simpson(y, 0, n - 2, x, dx, axis)
    last, second, third = (_at(nd, axis, j) for j in (-1, -2, -3))
    if n == 2:
        if x is not None:
            last_dx = x[last] - x[second]
        return 0.5 * last_dx * (getitem(y, last) + getitem(y, second))
    result = _basic_simpson(y, 0, n - 3, x, dx, axis)
    h = np.asarray([dx, dx], dtype=np.float64)
    if x is not None:
        diffs = np.float64(np.diff(x, axis=axis))
        h = [np.squeeze(diffs[_at(nd, axis, slice(-2, -1, 1))], axis=axis),
             np.squeeze(diffs[_at(nd, axis, slice(-1, None, 1))], axis=axis)]
    alpha = _ratio(2 * h[1] ** 2 + 3 * h[0] * h[1], 6 * (h[1] + h[0]))
    beta = _ratio(h[1] ** 2 + 3.0 * h[0] * h[1], 6 * h[0])
    eta = _ratio(1 * h[1] ** 3, 6 * h[0] * (h[0] + h[1]))
    return result + (alpha * getitem(y, last) + beta * getitem(y, second) -
                     eta * getitem(y, third))


# ----------------------------------------------------------------------------
# ufunc.reduceat
# ----------------------------------------------------------------------------

#: ufunc -> (reduction, identity as a function of the dtype)
_REDUCEAT = {np.add: ("sum", lambda dt: 0), **_GROUPED}


def reduceat(ufunc, a, indices, axis=0, dtype=None, out=None):
    """``ufunc.reduceat(a, indices, axis)`` of add, multiply, maximum and
    minimum.

    Parameters
    ----------
    ufunc : numpy.ufunc
    a : Tracer
    indices : array_like of int
        Constant, numpy's rules: output ``i`` reduces ``a[indices[i]:indices[i
        + 1]]`` along ``axis``, or is ``a[indices[i]]`` where ``indices[i] >=
        indices[i + 1]``; the last reduces to the end.
    axis : int

    Returns
    -------
    Tracer
        Built as ``ufunc.at`` is (:func:`.numpy_signal._grouped`): each
        slice's elements gathered into a row, first element first, padded
        with the reduction's identity, reduced along the rows (sum, prod,
        max, min): numpy's values, but for a sum of more than a few
        elements, which numpy adds pairwise (the last bits may differ).  A
        traced ``indices`` raises TracingError naming it.
    """
    name = f"numpy.{ufunc.__name__}.reduceat"
    if dtype is not None or out is not None:
        raise NotImplementedError(f"hybridad: {name} with dtype= or out= is not supported "
                                  "while tracing")
    indices = np.asarray(_constant(name, indices))
    a = _tracer(a)
    ufunc.reduceat(np.zeros(a.shape, a.dtype), indices, axis=axis)  # numpy's checks, errors
    axis = _norm_axis(axis, a.ndim)[0]
    x = moveaxis(a, axis, -1)
    indices = indices.astype(np.intp).ravel()
    ends = np.append(indices[1:], x.shape[-1])
    more = np.maximum(ends - indices - 1, 0)  # each slice's elements after its first
    first = gather_positions(x, lambda p: p[..., indices])  # a[indices[i]], each row's start
    if more.any():
        slot = np.repeat(np.arange(indices.size), more)  # the slice of each further element
        start = np.cumsum(more) - more
        at = indices[slot] + 1 + np.arange(slot.size) - start[slot]  # and its position
        rows = np.arange(first.size, dtype=np.intp).reshape(first.shape)
        b = gather_positions(x, lambda p: p[..., at].ravel())
        first = _grouped(*_REDUCEAT[ufunc], first, rows[..., slot].ravel(), b)
    return moveaxis(first, -1, axis)


for _uf in _REDUCEAT:
    UFUNC_METHODS["reduceat", _uf] = reduceat
