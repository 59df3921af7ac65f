"""More of numpy's surface while tracing, built from the primitives and the
core functions of :mod:`hybridad.frontend.numpy_api` (no rules of their own: their
derivatives follow from the primitives they are made of).

Statistics (var, std, average, ptp, cumsum), rounding and clipping, shape
helpers (atleast_*d, stacking, splitting, flip, roll, tile, repeat, pad),
triangles and diagonals, tensordot, einsum, kron and ``np.linalg.norm``;
np.gradient, np.imag/np.angle of real arrays, np.linspace and np.full with
traced values.
"""

from __future__ import annotations

import numbers
import operator
import string

import numpy as np

from .numpy_api import (HANDLED, UFUNC_REDUCERS, _no_kwargs, _norm_axis, _reduce, _tracer, _weak,
                        broadcast_to,
                        concatenate, expand_dims, gather_positions, getitem, implements, matmul,
                        moveaxis, ravel, reshape, squeeze, stack, transpose, where)
from .numpy_reductions import mean
from .numpy_reductions import mean as _mean_of
from ..errors import TracingError, user_location
from .trace import READONLY, Tracer, bind

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
        x = where(x < lo, lo, x)
    if hi is not None:
        x = where(x > hi, hi, x)
    return x


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
# shape helpers
# ----------------------------------------------------------------------------


def _atleast(nd, shape_of):
    def impl(*arys):
        out = []
        for a in arys:
            a = _tracer(a)
            out.append(a if a.ndim >= nd else reshape(a, shape_of(a.shape)))
        return out[0] if len(out) == 1 else tuple(out)

    return impl


HANDLED[np.atleast_1d] = _atleast(1, lambda s: (1,) if not s else s)
HANDLED[np.atleast_2d] = _atleast(2, lambda s: {0: (1, 1), 1: (1,) + s}[len(s)])
HANDLED[np.atleast_3d] = _atleast(3, lambda s: {0: (1, 1, 1), 1: (1,) + s + (1,),
                                                2: s + (1,)}[len(s)])


@implements(np.hstack)
def hstack(tup, *, dtype=None, casting="same_kind"):
    xs = [np.atleast_1d(x) for x in tup]
    return concatenate(xs, axis=0 if xs[0].ndim == 1 else 1)


@implements(np.vstack, np.row_stack) if hasattr(np, "row_stack") else implements(np.vstack)
def vstack(tup, *, dtype=None, casting="same_kind"):
    return concatenate([np.atleast_2d(x) for x in tup], axis=0)


@implements(np.dstack)
def dstack(tup):
    return concatenate([np.atleast_3d(x) for x in tup], axis=2)


@implements(np.column_stack)
def column_stack(tup):
    xs = [_tracer(x) for x in tup]
    return concatenate([reshape(x, (-1, 1)) if x.ndim < 2 else x for x in xs], axis=1)


def _split(ary, indices_or_sections, axis, strict):
    a = _tracer(ary)
    axis = _norm_axis(axis, a.ndim)[0]
    n = a.shape[axis]
    if isinstance(indices_or_sections, numbers.Integral):
        k = int(indices_or_sections)
        if k <= 0:
            raise ValueError("number sections must be larger than 0.")
        if strict and n % k:
            raise ValueError("array split does not result in an equal division")
        each, extra = divmod(n, k)
        sizes = [each + 1] * extra + [each] * (k - extra)
        bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    else:
        bounds = [0] + [min(max(int(i) if i >= 0 else n + int(i), 0), n)
                        for i in indices_or_sections] + [n]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        index = [slice(None)] * a.ndim
        index[axis] = slice(lo, max(lo, hi))
        out.append(getitem(a, tuple(index)))
    return out


@implements(np.split)
def split(ary, indices_or_sections, axis=0):
    return _split(ary, indices_or_sections, axis, strict=True)


@implements(np.array_split)
def array_split(ary, indices_or_sections, axis=0):
    return _split(ary, indices_or_sections, axis, strict=False)


HANDLED[np.hsplit] = lambda ary, ios: _split(ary, ios, 1 if np.ndim(ary) > 1 else 0, True)
HANDLED[np.vsplit] = lambda ary, ios: _split(ary, ios, 0, True)


@implements(np.flip)
def flip(m, axis=None):
    m = _tracer(m)
    axes = _norm_axis(axis, m.ndim)
    return getitem(m, tuple(slice(None, None, -1) if d in axes else slice(None)
                            for d in range(m.ndim)))


HANDLED[np.fliplr] = lambda m: flip(m, 1)
HANDLED[np.flipud] = lambda m: flip(m, 0)


@implements(np.roll)
def roll(a, shift, axis=None):
    a = _tracer(a)
    if axis is None:
        return reshape(roll(ravel(a), shift, 0), a.shape)
    shifts = (shift,) if isinstance(shift, numbers.Integral) else tuple(shift)
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    shifts, axes = np.broadcast_arrays(np.asarray(shifts), np.asarray(axes))
    for s, ax in zip(shifts.ravel().tolist(), axes.ravel().tolist(), strict=True):
        ax = _norm_axis(ax, a.ndim)[0]
        n = a.shape[ax]
        s = s % n if n else 0
        if s:
            head = [slice(None)] * a.ndim
            tail = list(head)
            head[ax], tail[ax] = slice(n - s, n), slice(0, n - s)
            a = concatenate([getitem(a, tuple(head)), getitem(a, tuple(tail))], axis=ax)
    return a


@implements(np.tile)
def tile(A, reps):
    a = _tracer(A)
    reps = (reps,) if isinstance(reps, numbers.Integral) else tuple(reps)
    nd = max(a.ndim, len(reps))
    shape = (1,) * (nd - a.ndim) + a.shape
    reps = (1,) * (nd - len(reps)) + reps
    # (r0, s0, r1, s1, ...): each axis preceded by its repetitions, then merged
    inter = tuple(v for r, s in zip(reps, shape, strict=True) for v in (1, s))
    full = tuple(v for r, s in zip(reps, shape, strict=True) for v in (r, s))
    x = broadcast_to(reshape(a, inter), full)
    return reshape(x + 0 if x.node.op == "broadcast_to" else x,
                   tuple(r * s for r, s in zip(reps, shape, strict=True)))


@implements(np.repeat)
def repeat(a, repeats, axis=None):
    """Integer counts: a broadcast copy (fuses with its neighbours); per-element
    counts: one gather."""
    a = _tracer(a)
    if not isinstance(repeats, numbers.Integral):
        repeats = _const_indices("repeat", repeats)
        return gather_positions(a, lambda pos: np.repeat(pos, repeats, axis))
    if axis is None:
        a, axis = ravel(a), 0
    axis = _norm_axis(axis, a.ndim)[0]
    r = int(repeats)
    x = expand_dims(a, axis + 1)
    shape = a.shape[:axis + 1] + (r,) + a.shape[axis + 1:]
    x = broadcast_to(x, shape) + 0
    return reshape(x, a.shape[:axis] + (a.shape[axis] * r,) + a.shape[axis + 1:])


@implements(np.pad)
def pad(array, pad_width, mode="constant", **kwargs):
    """``np.pad`` in ``mode="constant"`` (``constant_values`` a scalar or
    per-axis pairs of numbers)."""
    if mode != "constant":
        raise NotImplementedError(f"hybridad: np.pad mode={mode!r} is not supported while "
                                  "tracing (only 'constant')")
    a = _tracer(array)
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (a.ndim, 2))
    values = np.broadcast_to(np.asarray(kwargs.pop("constant_values", 0), dtype=a.dtype),
                             (a.ndim, 2))
    if kwargs:
        raise TypeError(f"unexpected keyword arguments {sorted(kwargs)}")
    for ax in range(a.ndim):
        parts = []
        for side in (0, 1):
            w = int(widths[ax, side])
            if w:
                shape = a.shape[:ax] + (w,) + a.shape[ax + 1:]
                parts.append(np.full(shape, values[ax, side], a.dtype))
            if side == 0:
                parts.append(a)
        if len(parts) > 1:
            a = concatenate(parts, axis=ax)
    return a


@implements(np.rot90)
def rot90(m, k=1, axes=(0, 1)):
    m = _tracer(m)
    a0, a1 = (ax % m.ndim for ax in axes)
    k %= 4
    if k == 0:
        return m
    if k == 2:
        return flip(flip(m, a0), a1)
    perm = list(range(m.ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    return transpose(flip(m, a1), perm) if k == 1 else flip(transpose(m, perm), a1)


@implements(np.rollaxis)
def rollaxis(a, axis, start=0):
    a = _tracer(a)
    axis %= a.ndim
    start = start % (a.ndim + 1) if start < 0 else start
    dest = start - 1 if axis < start else start
    return moveaxis(a, axis, dest)


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


@implements(np.gradient)
def gradient(f, *varargs, axis=None, edge_order=1):
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
    if isinstance(d, Tracer):
        raise NotImplementedError("hybridad: np.gradient with traced coordinate arrays is not "
                                  "supported (numpy checks their values for uniform "
                                  "spacing); pass scalar spacings or constant coordinates")
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


@implements(np.cross)
def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """``np.cross`` of 3-vectors (2-vectors taken with a zero third component)."""
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = moveaxis(_tracer(a), axisa, -1), moveaxis(_tracer(b), axisb, -1)
    if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
        raise ValueError("incompatible dimensions for cross product (dimension must be 2 or 3)")
    if a.shape[-1] == 2 and b.shape[-1] == 2:
        return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]
    a, b = (pad(v, [(0, 0)] * (v.ndim - 1) + [(0, 1)]) if v.shape[-1] == 2 else v
            for v in (a, b))
    c = [a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1],
         a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2],
         a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]]
    return moveaxis(stack(c, axis=-1), -1, axisc)


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


@implements(np.sinc)
def sinc(x):
    """``sin(pi x) / (pi x)``, 1 at 0 (derivative 0 there)."""
    x = _float(x)
    t = x * x.dtype.type(np.pi)
    zero = x == 0
    safe = where(zero, x.dtype.type(1), t)
    return where(zero, x.dtype.type(1), np.sin(safe) / safe)


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
HANDLED[np.dsplit] = lambda ary, ios: _split(ary, ios, 2, True)


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


# ----------------------------------------------------------------------------
# triangles, diagonals
# ----------------------------------------------------------------------------


def _tri_mask(shape, k, lower):
    n, m = shape[-2:]
    mask = np.tri(n, m, k, dtype=bool) if lower else ~np.tri(n, m, k - 1, dtype=bool)
    return mask


@implements(np.tril)
def tril(m, k=0):
    m = _tracer(m)
    return where(_tri_mask(m.shape, k, True), m, m.dtype.type(0))


@implements(np.triu)
def triu(m, k=0):
    m = _tracer(m)
    return where(_tri_mask(m.shape, k, False), m, m.dtype.type(0))


@implements(np.diagonal)
def diagonal(a, offset=0, axis1=0, axis2=1):
    """One gather of the diagonal's elements (read-only, as numpy's view)."""
    a = _tracer(a)
    d = gather_positions(a, lambda pos: np.diagonal(pos, offset, axis1, axis2))
    d._flags |= READONLY
    return d


@implements(np.trace)
def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    _no_kwargs("trace", {"dtype": dtype, "out": out})
    return _reduce("sum", diagonal(a, offset, axis1, axis2), -1, False)


@implements(np.diag)
def diag(v, k=0):
    v = _tracer(v)
    if v.ndim == 2:
        return diagonal(v, k)
    if v.ndim != 1:
        raise ValueError("Input must be 1- or 2-d.")
    n = v.shape[0]
    square = reshape(v, (n, 1)) * np.eye(n, dtype=v.dtype)
    if k == 0:
        return square
    w = abs(k)
    return pad(square, ((0, w), (w, 0)) if k > 0 else ((w, 0), (0, w)))


# ----------------------------------------------------------------------------
# selections with constant indices: one gather each
# ----------------------------------------------------------------------------


def _const_indices(name, indices):
    if isinstance(indices, Tracer):
        raise TracingError(f"np.{name} with traced indices at {user_location()}: indices "
                           "must be known at trace time (constant arrays)")
    return np.asarray(indices)


@implements(np.take)
def take(a, indices, axis=None, out=None, mode="raise"):
    _no_kwargs("take", {"out": out})
    indices = _const_indices("take", indices)
    return gather_positions(a, lambda pos: np.take(pos, indices, axis=axis, mode=mode))


@implements(np.take_along_axis)
def take_along_axis(arr, indices, axis=-1):
    indices = _const_indices("take_along_axis", indices)
    return gather_positions(arr, lambda pos: np.take_along_axis(pos, indices, axis))


@implements(np.compress)
def compress(condition, a, axis=None, out=None):
    _no_kwargs("compress", {"out": out})
    condition = _const_indices("compress", condition)
    return gather_positions(a, lambda pos: np.compress(condition, pos, axis))


@implements(np.extract)
def extract(condition, arr):
    condition = _const_indices("extract", condition)
    return gather_positions(arr, lambda pos: np.extract(condition, pos))


@implements(np.delete)
def delete(arr, obj, axis=None):
    obj = obj if isinstance(obj, (slice, numbers.Integral)) else _const_indices("delete", obj)
    return gather_positions(arr, lambda pos: np.delete(pos, obj, axis))


# ----------------------------------------------------------------------------
# sorting: one sort_pack (the rows as sorted (value, index) pairs), read back
# ----------------------------------------------------------------------------


def _sort_pack(name, a, axis):
    """``(a as sorted, its sort_pack, axis, dtype to cast back to)``."""
    a = _tracer(a)
    if axis is None:  # sorts the flattened array
        a, axis = ravel(a), 0
    axis = _norm_axis(axis, a.ndim)[0]
    dt = a.dtype
    if dt.kind == "c" or (dt.kind == "f" and dt.itemsize > 8) or \
            (dt.kind in "iu" and dt.itemsize > 4):
        raise NotImplementedError(f"hybridad: numpy.{name} of {dt} arrays is not supported "
                                  "while tracing (real floats, bool and integers of up to 32 "
                                  "bits are)")
    back = None
    if dt.kind != "f":  # exact in float64; no derivative either way
        a, back = a.astype(np.float64), dt
    return a, bind("sort_pack", a, axis=axis), axis, back


@implements(np.sort)
def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    """``np.sort`` (``axis=None``: the flattened array).  ``kind`` and
    ``stable`` do not change the values; the derivative sends the cotangent
    of each sorted element to the element it came from, ties in numpy's
    stable order (NaNs sort last)."""
    _no_kwargs("sort", {"order": order})
    a, packed, axis, back = _sort_pack("sort", a, axis)
    out = bind("sort_values", a, packed, axis=axis)
    return out if back is None else out.astype(back)


@implements(np.argsort)
def argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    """``np.argsort``, always in the stable order (any kind is a valid order)."""
    _no_kwargs("argsort", {"order": order})
    _, packed, axis, _ = _sort_pack("argsort", a, axis)
    return bind("sort_index", packed, axis=axis)


@implements(np.partition)
def partition(a, kth, axis=-1, kind="introselect", order=None):
    """``np.partition`` as the fully sorted array: it meets the contract (each
    ``kth`` element in its sorted place, nothing larger before it, nothing
    smaller after it); numpy leaves the order inside the partitions undefined."""
    _no_kwargs("partition", {"order": order})
    a = _tracer(a)
    n = a.size if axis is None else a.shape[_norm_axis(axis, a.ndim)[0]]
    for k in np.atleast_1d(np.asarray(kth)).tolist():
        if not isinstance(k, numbers.Integral) or isinstance(k, bool):
            raise TypeError("Partition index must be integer")
        if not -n <= k < n:
            raise ValueError(f"kth(={k}) out of bounds ({n})")
    return sort(a, axis)


if hasattr(np, "msort"):  # removed in numpy 2.0
    HANDLED[np.msort] = lambda a: sort(a, axis=0)


@implements(np.median)
def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """The middle element (mean of the two middle ones) of the sorted array;
    NaN where a NaN is present, as numpy.  ``axis``: None, an int or a tuple."""
    _no_kwargs("median", {"out": out})
    a = _float(a)
    axes = _norm_axis(axis, a.ndim)
    rest = [d for d in range(a.ndim) if d not in axes]
    x = transpose(a, rest + list(axes)) if list(axes) != list(range(a.ndim))[-len(axes):] \
        else a
    m = int(np.prod([a.shape[d] for d in axes], dtype=np.int64))
    if m == 0:
        raise ValueError("median of an empty selection is not supported while tracing")
    x = sort(reshape(x, tuple(a.shape[d] for d in rest) + (m,)), -1)
    mid = getitem(x, (Ellipsis, slice((m - 1) // 2, m // 2 + 1)))
    med = _mean_of(mid, axis=-1)
    med = where(np.isnan(getitem(x, (Ellipsis, m - 1))), np.nan, med)  # NaNs sort last
    if keepdims:
        med = reshape(med, tuple(1 if d in axes else s for d, s in enumerate(a.shape)))
    return med


# ----------------------------------------------------------------------------
# products
# ----------------------------------------------------------------------------


@implements(np.tensordot)
def tensordot(a, b, axes=2):
    a, b = _tracer(a), _tracer(b)
    if isinstance(axes, numbers.Integral):
        ax_a = list(range(a.ndim - axes, a.ndim))
        ax_b = list(range(axes))
    else:
        ax_a, ax_b = ([operator.index(x)] if isinstance(x, numbers.Integral) else list(x)
                      for x in axes)
    ax_a = [x % a.ndim for x in ax_a]
    ax_b = [x % b.ndim for x in ax_b]
    if [a.shape[i] for i in ax_a] != [b.shape[i] for i in ax_b]:
        raise ValueError("shape-mismatch for sum")
    free_a = [i for i in range(a.ndim) if i not in ax_a]
    free_b = [i for i in range(b.ndim) if i not in ax_b]
    k = int(np.prod([a.shape[i] for i in ax_a], dtype=np.int64))
    a2 = reshape(transpose(a, free_a + ax_a), (-1, k))
    b2 = reshape(transpose(b, ax_b + free_b), (k, -1))
    return reshape(matmul(a2, b2), tuple(a.shape[i] for i in free_a) +
                   tuple(b.shape[i] for i in free_b))


@implements(np.kron)
def kron(a, b):
    a, b = _tracer(a), _tracer(b)
    nd = max(a.ndim, b.ndim)
    sa = (1,) * (nd - a.ndim) + a.shape
    sb = (1,) * (nd - b.ndim) + b.shape
    x = reshape(a, tuple(v for s in sa for v in (s, 1)))
    y = reshape(b, tuple(v for s in sb for v in (1, s)))
    return reshape(x * y, tuple(p * q for p, q in zip(sa, sb, strict=True)))


@implements(np.einsum)
def einsum(*operands, out=None, optimize=False, **kw):
    """``np.einsum`` with explicit or implicit output subscripts (letters, and
    ``...`` spelled as unused letters, broadcast like numpy: see
    :func:`_einsum_ellipsis`): a contraction of two operands without shared output letters
    is one matmul (:func:`tensordot`); anything else is a broadcast multiply
    summed over the contracted letters, which the partitioner fuses into one
    region (no product temporary on the numba backend)."""
    _no_kwargs("einsum", {"out": out, **kw})
    if not isinstance(operands[0], str):
        raise NotImplementedError("hybridad: np.einsum in the interleaved (sublist) form is "
                                  "not supported; pass a subscripts string")
    subscripts, *arrays = operands
    subscripts = subscripts.replace(" ", "")
    if "." in subscripts:
        subscripts = _einsum_ellipsis(subscripts, [np.ndim(x) if not isinstance(x, Tracer)
                                                   else x.ndim for x in arrays])
    lhs, arrow, rhs = subscripts.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(arrays):
        raise ValueError("more operands provided to einstein sum function than specified "
                         "in the subscripts string" if len(arrays) > len(ins) else
                         "fewer operands provided to einstein sum function than specified "
                         "in the subscripts string")
    if not arrow:
        letters = "".join(ins)
        rhs = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    xs = [_tracer(x) for x in arrays]
    sizes = {}
    for spec, x in zip(ins, xs, strict=True):
        if len(spec) != x.ndim:
            raise ValueError(f"einstein sum subscripts string contains too many subscripts "
                             f"for operand: {spec!r} for shape {x.shape}")
        for c, s in zip(spec, x.shape, strict=True):
            if c not in string.ascii_letters:
                raise ValueError(f"invalid subscript {c!r} in einstein sum subscripts string")
            if sizes.setdefault(c, s) != s and 1 not in (s, sizes[c]):
                raise ValueError(f"operands could not be broadcast together: subscript {c!r} "
                                 f"has sizes {sizes[c]} and {s}")
            sizes[c] = max(sizes[c], s)
    # repeated letters within an operand take its diagonal first
    for j, (spec, x) in enumerate(zip(ins, xs, strict=True)):
        while len(set(spec)) != len(spec):
            c = next(c for c in spec if spec.count(c) > 1)
            p, q = spec.index(c), spec.index(c, spec.index(c) + 1)
            x = diagonal(x, 0, p, q)  # the repeated axis goes last
            spec = "".join(ch for i, ch in enumerate(spec) if i not in (p, q)) + c
        ins[j], xs[j] = spec, x
    if len(xs) == 2 and not set(ins[0]) & set(ins[1]) & set(rhs):
        shared = [c for c in ins[0] if c in ins[1]]
        if shared and all(sizes[c] == xs[0].shape[ins[0].index(c)] ==
                          xs[1].shape[ins[1].index(c)] for c in shared):
            # one matmul over the shared letters; letters only one operand has
            # and the output does not are summed first
            a = _sum_out(xs[0], ins[0], rhs + ins[1])
            b = _sum_out(xs[1], ins[1], rhs + ins[0])
            sa, sb = _kept(ins[0], rhs + ins[1]), _kept(ins[1], rhs + ins[0])
            r = tensordot(a, b, ([sa.index(c) for c in shared], [sb.index(c) for c in shared]))
            got = [c for c in sa if c not in shared] + [c for c in sb if c not in shared]
            return transpose(r, [got.index(c) for c in rhs]) if got else r
    order = list(rhs) + sorted({c for s in ins for c in s} - set(rhs))
    prod = None
    for spec, x in zip(ins, xs, strict=True):
        perm = sorted(range(len(spec)), key=lambda i: order.index(spec[i]))
        x = transpose(x, perm)
        present = {spec[i] for i in perm}
        shape, it = [], iter(x.shape)
        for c in order:
            shape.append(next(it) if c in present else 1)
        x = reshape(x, tuple(shape))
        prod = x if prod is None else prod * x
    prod = broadcast_to(prod, tuple(sizes[c] for c in order)) if prod.shape != tuple(
        sizes[c] for c in order) else prod
    if len(order) > len(rhs):
        prod = _reduce("sum", prod, tuple(range(len(rhs), len(order))), False)
    return prod


def _einsum_ellipsis(subscripts, ndims):
    """``subscripts`` with each ``...`` spelled as unused letters, one per
    broadcast dimension, right-aligned across the operands as numpy broadcasts
    them (an operand whose ``...`` covers fewer dimensions gets the last
    ones), and with an explicit output (the implicit one puts them first)."""
    lhs, arrow, rhs = subscripts.partition("->")
    ins = lhs.split(",")
    for spec in ins + ([rhs] if arrow else []):
        if spec.count(".") != (3 if "..." in spec else 0):
            raise ValueError("einstein sum subscripts string contains a '.' that is not part "
                             "of an ellipsis ('...')")
    if len(ins) != len(ndims):
        return subscripts  # the caller raises numpy's error
    counts = []
    for spec, nd in zip(ins, ndims, strict=True):
        k = nd - (len(spec) - 3) if "..." in spec else 0
        if k < 0:
            raise ValueError(f"einstein sum subscripts string contains too many subscripts "
                             f"for operand: {spec!r} for {nd} dimensions")
        counts.append(k)
    n = max(counts, default=0)
    fresh = "".join(c for c in string.ascii_letters if c not in subscripts)[:n]
    if len(fresh) < n:
        raise ValueError("too many subscripts in einsum: the broadcast dimensions of '...' "
                         "need more unused letters than remain")
    ins = [spec.replace("...", fresh[n - k:]) for spec, k in zip(ins, counts, strict=True)]
    if arrow:
        if n and "..." not in rhs:
            raise ValueError("output has more dimensions than subscripts given in einstein "
                             "sum, but no '...' ellipsis provided to broadcast the extra "
                             "dimensions.")
        rhs = rhs.replace("...", fresh)
    else:
        letters = lhs.replace(".", "").replace(",", "")
        rhs = fresh + "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return ",".join(ins) + "->" + rhs


def _kept(spec, others):
    return "".join(c for c in spec if c in others)


def _sum_out(x, spec, others):
    axes = tuple(i for i, c in enumerate(spec) if c not in others)
    return _reduce("sum", x, axes, False) if axes else x


# ----------------------------------------------------------------------------
# np.linalg.norm
# ----------------------------------------------------------------------------


@implements(np.linalg.norm)
def norm(x, ord=None, axis=None, keepdims=False):  # noqa: A002
    """Vector norms (``ord`` None/2, 1, inf, -inf, 0, any p) and matrix norms
    ('fro', 1, -1, inf, -inf); the 2-norm's derivative is NaN at 0 (0/0), as
    the formula sqrt(sum x**2) gives."""
    x = _float(x)
    if axis is None:
        if ord is not None and x.ndim == 2:
            axis = (0, 1)
        elif ord is not None and x.ndim != 1:
            raise ValueError("Improper number of dimensions to norm.")
        else:
            axis = tuple(range(x.ndim))
            if ord is None:
                return _reduce_norm2(x, axis, keepdims)
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    axes = tuple(a % x.ndim for a in axes)
    if len(axes) == 1:
        if ord is None or ord == 2:
            return _reduce_norm2(x, axes, keepdims)
        if ord == np.inf:
            return _reduce("max", np.absolute(x), axes, keepdims)
        if ord == -np.inf:
            return _reduce("min", np.absolute(x), axes, keepdims)
        if ord == 0:
            return _reduce("sum", (x != 0).astype(x.dtype), axes, keepdims)
        if ord == 1:
            return _reduce("sum", np.absolute(x), axes, keepdims)
        if isinstance(ord, str):
            raise ValueError(f"Invalid norm order '{ord}' for vectors")
        p = x.dtype.type(ord)
        return _reduce("sum", np.absolute(x) ** p, axes, keepdims) ** (1 / p)
    if len(axes) != 2:
        raise ValueError("Improper number of dimensions to norm.")
    r, c = axes
    if ord in (None, "fro", "f"):
        return _reduce_norm2(x, axes, keepdims)
    if ord in (1, -1, np.inf, -np.inf):
        inner, outer = (r, c) if ord in (1, -1) else (c, r)
        s = _reduce("sum", np.absolute(x), (inner,), True)
        out = _reduce("max" if ord > 0 else "min", s, (outer,), True)
        return out if keepdims else squeeze(out, axes)
    raise NotImplementedError(f"hybridad: np.linalg.norm with ord={ord!r} for matrices (it "
                              "needs singular values) is not supported yet")


def _reduce_norm2(x, axes, keepdims):
    return np.sqrt(_reduce("sum", x * x, axes, keepdims))
