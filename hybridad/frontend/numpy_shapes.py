"""numpy's shape functions built from the primitives while tracing: joining,
splitting and rearranging arrays, triangles and diagonals.

np.atleast_*d, np.hstack / vstack / dstack / column_stack, np.split and
friends, np.flip, np.roll, np.tile, np.repeat, np.pad, np.rot90,
np.rollaxis, np.tril / np.triu, np.diagonal, np.trace and np.diag (no rules
of their own: their derivatives follow from the primitives they are made of).
"""

from __future__ import annotations

import numbers

import numpy as np

from .numpy_api import (
    HANDLED,
    _no_kwargs,
    _norm_axis,
    _reduce,
    _tracer,
    broadcast_to,
    concatenate,
    expand_dims,
    gather_positions,
    getitem,
    implements,
    moveaxis,
    ravel,
    reshape,
    transpose,
    where,
)
from .numpy_selection import _const_indices
from ..core.tracer import READONLY, Tracer

__all__ = []


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


HANDLED[np.dsplit] = lambda ary, ios: _split(ary, ios, 2, True)


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


#: np.pad's modes whose padding only copies elements of the array: numpy pads
#: the array's position grid, and the result is one gather
_MOVING_PADS = frozenset({"edge", "reflect", "symmetric", "wrap"})


@implements(np.pad)
def pad(array, pad_width, mode="constant", **kwargs):
    """``np.pad`` in ``mode="constant"`` (``constant_values`` a scalar or
    per-axis pairs of numbers), and the modes that copy elements --
    ``"edge"``, ``"reflect"``, ``"symmetric"``, ``"wrap"`` (``reflect_type``
    ``"even"``) -- as one gather of the positions numpy's own ``np.pad``
    gives them (its semantics and errors)."""
    if mode in _MOVING_PADS:
        if kwargs.get("reflect_type", "even") != "even" or set(kwargs) - {"reflect_type"}:
            raise NotImplementedError(
                f"hybridad: np.pad mode={mode!r} with {sorted(kwargs)} is not supported "
                "while tracing (reflect_type='odd' computes values; only 'even' copies them)")
        return gather_positions(_tracer(array),
                                lambda pos: np.pad(pos, pad_width, mode=mode, **kwargs))
    if mode != "constant":
        raise NotImplementedError(f"hybridad: np.pad mode={mode!r} is not supported while "
                                  "tracing ('constant', 'edge', 'reflect', 'symmetric' and "
                                  "'wrap' are)")
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


@implements(np.lib.stride_tricks.sliding_window_view)
def sliding_window_view(x, window_shape, axis=None, *, subok=False, writeable=False):
    """``np.lib.stride_tricks.sliding_window_view``: the windows as one gather
    of the positions numpy's own function gives (its shape and errors); a
    copy, not a view -- read-only as numpy's is by default, so the same
    values (``writeable=True`` is refused)."""
    if writeable:
        raise NotImplementedError("hybridad: sliding_window_view(..., writeable=True) of a "
                                  "traced array is not supported (its windows share "
                                  "elements: write to the array itself)")
    x = _tracer(x)
    out = gather_positions(x, lambda pos: np.lib.stride_tricks.sliding_window_view(
        pos, window_shape, axis))
    from .windows import remember  # (times a kernel: a correlation, frontend/windows.py)

    shape = (window_shape,) if np.ndim(window_shape) == 0 else tuple(window_shape)
    axes = range(x.ndim) if axis is None else (axis,) if np.ndim(axis) == 0 else axis
    remember(out, x, [int(a) % x.ndim for a in axes][:len(shape)])
    return out


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
    # one gather of v and a zero (v times the identity put NaN beside an inf)
    n = v.shape[0]
    at = np.full((n + abs(k),) * 2, n, dtype=np.intp)
    i = np.arange(n)
    at[(i, i + k) if k >= 0 else (i - k, i)] = i
    return gather_positions(concatenate([v, np.zeros(1, v.dtype)]), lambda p: p[at])


@implements(np.broadcast_arrays)
def broadcast_arrays(*args, subok=False):
    """``np.broadcast_arrays``: each argument broadcast to the common shape (a
    tuple, as numpy 2 returns; untraced arguments as numpy's read-only views)."""
    shape = np.broadcast_shapes(*(np.shape(a) for a in args))
    return tuple(broadcast_to(a, shape) if isinstance(a, Tracer) else
                 np.broadcast_to(np.asarray(a), shape) for a in args)


# dtype queries: a traced array stands for its dtype
HANDLED[np.result_type] = lambda *a: np.result_type(*(x.dtype if isinstance(x, Tracer) else x
                                                      for x in a))
HANDLED[np.can_cast] = lambda from_, to, casting="safe": np.can_cast(
    from_.dtype if isinstance(from_, Tracer) else from_, to, casting)


# ----------------------------------------------------------------------------
# constructors of constants from traced shapes
# ----------------------------------------------------------------------------


def _like(fill):
    def impl(a, dtype=None, order="K", subok=True, shape=None, **kw):
        a = _tracer(a)
        # a constant, as a traced array: element writes into it are traced
        # (`d = np.zeros_like(y); d[1:-1] = ...`, `acc = np.zeros_like(x); acc += ...`)
        return _tracer(np.full(a.shape if shape is None else shape, fill, dtype or a.dtype))

    return impl


HANDLED[np.zeros_like] = _like(0)
HANDLED[np.empty_like] = _like(0)  # numpy leaves the values unspecified: zeros are some
HANDLED[np.ones_like] = _like(1)


@implements(np.full_like)
def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None):
    a = _tracer(a)
    if isinstance(fill_value, Tracer):
        return broadcast_to(fill_value.astype(dtype or a.dtype), a.shape) + 0
    return _tracer(np.full(a.shape if shape is None else shape, fill_value, dtype or a.dtype))


if hasattr(np, "matrix_transpose"):  # numpy >= 2.0: the array API's names
    @implements(np.matrix_transpose)
    def matrix_transpose(x, /):
        """``np.matrix_transpose``: the last two axes swapped (a view)."""
        x = _tracer(x)
        if x.ndim < 2:
            raise ValueError("Input array must be at least 2-dimensional")
        return np.swapaxes(x, -1, -2)

if hasattr(np, "unstack"):  # numpy >= 2.1
    @implements(np.unstack)
    def unstack(x, /, *, axis=0):
        """``np.unstack``: the views along ``axis``, a tuple."""
        x = np.moveaxis(_tracer(x), axis, 0)
        return tuple(x[i] for i in range(x.shape[0]))
