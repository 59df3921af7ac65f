"""numpy's selection and sorting functions built from the primitives while tracing.

Selections with constant indices, one gather each (np.take,
np.take_along_axis, np.compress, np.extract, np.delete), and sorting through
one ``sort_pack`` primitive (np.sort, np.argsort, np.partition, np.median).
"""

from __future__ import annotations

import numbers

import numpy as np

from ..errors import TracingError, user_location
from ..core.decisions import concrete_index, decide
from ..ops.batch_helpers import contiguous
from .numpy_api import (
    HANDLED,
    _no_kwargs,
    concatenate,
    _norm_axis,
    _tracer,
    gather_positions,
    getitem,
    implements,
    ravel,
    reshape,
    transpose,
    where,
)
from .numpy_masked import _as_written, masked_read, traced_flat
from .numpy_math import _float
from .numpy_reductions import mean as _mean_of
from .objects import assign, settle
from .replay import basic_key, replayed
from ..core.trace import bind
from ..core.tracer import SURFACE, TRACED_INDEX, Tracer

__all__ = ["set_items"]


# ----------------------------------------------------------------------------
# a[index] = value: numpy's element write, as a new value of the whole array
# ----------------------------------------------------------------------------

def set_items(target, index, value):
    """``target[index] = value`` while tracing (``d = np.zeros_like(y);
    d[1:-1] = ...``, ``out = x.copy(); out[mask] = 0``).

    The index must be known when ``f`` is traced (slices, integers, constant
    integer arrays and boolean masks, as numpy takes them); ``value`` is
    broadcast to the selection's shape and cast to ``target``'s dtype as
    numpy does (a repeated position is written by its last occurrence).  The
    write becomes one gather -- every element of the new array from
    ``value`` where written, from ``target`` elsewhere -- which the tracer
    object then holds (:func:`hybridad.frontend.objects.assign`), so the
    derivative flows to ``value`` at the written positions and to
    ``target`` at the others; views of ``target`` see the write as in numpy.
    Refused, as numpy's in-place operators are, where the write would reach
    memory the trace does not follow (an argument of ``f`` or a view of one).
    """
    index = concrete_index(index)  # (computed from values: this call's, guarded)
    if isinstance(index, Tracer) or (isinstance(index, tuple) and
                                     any(isinstance(i, Tracer) for i in index)):
        raise TracingError(f"`a[index] = value` at {user_location()} with an index computed "
                           "from traced values: the written positions must be known when f "
                           "is traced; use np.where(condition, value, a)")
    if isinstance(value, (list, tuple)):  # np.array's traced form (np.stack of the items)
        value = np.array(value)
    kind = value.dtype.kind if hasattr(value, "dtype") else np.asarray(value).dtype.kind
    if kind == "c" and target.dtype.kind != "c":
        raise TypeError(f"`a[index] = value` at {user_location()}: a complex value into a "
                        f"{target.dtype} array would drop its imaginary part")
    basic = basic_key(index)
    if basic is not None and type(value) is Tracer and _is_view_at(value, target, basic):
        return True  # `a[i] = a[i]`, numpy's write-back of `a[i] += v`: nothing changes
    new = slab_written(target, index, value)
    if new is not None:
        assign(target, new, "in-place assignment `a[index] = value`")
        return True
    if basic is None:
        new = _written(target, index, value)
    else:  # (a loop's `u[1:-1] = ...`: the same nodes at every step, replayed)
        new = replayed(("set_items", basic), (target, value),
                       lambda: _written(target, index, value, block=True))
    assign(target, new, "in-place assignment `a[index] = value`")
    return True


def _is_view_at(value, target, basic):
    """Whether ``value`` is ``target[index]`` (``basic``: the index's
    :func:`~hybridad.frontend.replay.basic_key`) -- its node, or a live view of
    ``target`` at that index, whose memory numpy's write would copy onto
    itself."""
    def at(attrs):  # (a view's index, the user's: the same parts)
        return (basic_key(attrs.get("index")) or (None,))[1:] == basic[1:]

    node, link = value.node, value._base
    return node.op == "getitem" and node.args[0] is target.node and at(node.attrs) or \
        link is not None and link[0] is target and len(link[1]) == 1 and \
        link[1][0][0] == "getitem" and at(link[1][0][1])


def _slab_index(index, shape, prefer=None, before=None):
    """``(axis, k, rest, parts)`` when ``index`` (a user's: ints, slices, one
    Ellipsis) holds an int ``k`` at ``axis`` of an array of ``shape`` -- it
    writes into the slab ``a[:, ..., k]`` (``axis`` colons) at ``rest``, the
    index without that int (ellipsis spelled out) -- else None.  Of several
    ints: the one at ``prefer`` (the axis of the write that made the array),
    unless that write was the first of several ints (``before``: its whole
    index, the ``parts`` returned where the axis was the first int by
    default, else None) and this one holds one of them again (a loop over
    the others, ``A[i, j]`` for ``i`` = 0, 1, ...: column ``j``); else the
    first (a loop nest in C order: ``K[i, j]`` for ``j`` = 0, 1, ... writes
    into row ``i``).  Of one int, the one along the longest axis (a record
    of steps over a grid).  Raises IndexError for ``k`` out of range, as
    numpy."""
    parts = index if type(index) is tuple else (index,)
    ndim = len(shape)
    at = [j for j, p in enumerate(parts) if p is Ellipsis]
    if at:
        if len(at) > 1 or len(parts) - 1 > ndim:
            return None
        parts = parts[:at[0]] + (slice(None),) * (ndim - len(parts) + 1) + parts[at[0] + 1:]
    if len(parts) > ndim:
        return None
    parts, ints = list(parts) + [slice(None)] * (ndim - len(parts)), []
    for j, p in enumerate(parts):
        t = type(p)
        if t is int or isinstance(p, np.integer) and t is not np.bool_:
            parts[j] = int(p)
            ints.append(j)
        elif t is not slice or basic_key(p) is None:
            return None
    if not ints:
        return None
    for j in ints:
        if not -shape[j] <= parts[j] < shape[j]:
            raise IndexError(f"index {parts[j]} is out of bounds for axis {j} with size "
                             f"{shape[j]}")
        parts[j] %= shape[j]
    if len(ints) > 1 and before is not None and len(before) == ndim:
        same = [j for j in ints if before[j] == parts[j]]
        if len(same) == 1:
            prefer = same[0]
    by_default = len(ints) > 1 and prefer not in ints
    axis = ints[0] if by_default else prefer if prefer in ints else \
        max(ints, key=lambda j: (shape[j], -j))
    return axis, parts[axis], tuple(parts[:axis] + parts[axis + 1:]), \
        tuple(parts) if by_default else None


def slab_written(target, index, value):
    """``target`` with ``value`` written at ``index`` when the index holds an
    int (``out[k] = x``, ``U[k + 1, 1:-1] = v``, ``U[1:-1, k] = v``): the
    slab of that int read, written at the rest of the index, and written back
    whole between the slabs before and after it (:func:`_slab_written`), so
    that a loop that writes one slab a step holds no constant the size of
    the array per write -- else None (numpy's general write)."""
    trace = target._trace
    made = trace.row_writes.get(target.node.id) if trace.phase == "forward" else None
    slab = _slab_index(index, target.shape, made[4] if made else None,
                       made[5] if made else None)
    if slab is None:
        return None
    axis, k, rest, parts = slab
    if any(type(p) is not slice or p != _FULL for p in rest):  # (part of the slab)
        row = made[2] if made and made[1] == k and made[4] == axis else None
        if row is not None and row.op == "reshape" and \
                row.args[0].shape == target.shape[:axis] + target.shape[axis + 1:]:
            part = Tracer(row.args[0], trace)  # (the slab the write before wrote: that
            # value, so that the writes into one slab are one chain, `K[i, j] = v`)
        else:
            whole = Tracer(target.node, trace)  # (the slab as it is: no view links)
            part = whole[(_FULL,) * axis + (k,)]
            part = Tracer(part.node, trace)
        # (an int in the rest too, `K[i, j] = v`: the slab's own slab write, so that
        # a loop over j writes the row as a loop over i writes the rows)
        inner = slab_written(part, rest, value)
        value = inner if inner is not None else \
            replayed(("set_items", basic_key(rest)), (part, value),
                     lambda: _written(part, rest, value, block=True))
    return _slab_written(target, axis, k, value, parts)


_FULL = slice(None)


def _slab_written(target, axis, k, value, parts=None):
    """``target`` with ``value`` written into its slab ``k`` along ``axis``
    (an int in range), as the slabs before, the slab and the slabs after,
    concatenated: a trace of ``out[k] = x`` for ``k`` = 0, 1, ... then holds
    no constant the size of ``out`` per write, and
    :mod:`hybridad.transforms.row_writes` reads each slab from the write that
    made it (recorded in the trace's ``row_writes``)."""
    shape = target.shape
    n = shape[axis]
    trace = target._trace
    node, dt = target.node, target.dtype
    slab_shape, unit = shape[:axis] + shape[axis + 1:], shape[:axis] + (1,) + shape[axis + 1:]
    lead = (_FULL,) * axis
    if type(value) is Tracer and value._trace is trace and value.shape == slab_shape and \
            value.dtype == dt and not node.is_literal and trace.phase == "forward":
        # (the usual write, `out[k] = x`: its nodes made directly, as the surface's
        # getitem, reshape and concatenate would make them -- a loop writes one a step;
        # never merged, as none can be: each reads the array as this write found it)
        def add(op, args, attrs, shape):
            return trace.add(op, args, attrs, shape, dt, False)
        row = add("reshape", (value.node,), {"shape": unit}, unit)
        lo = add("getitem", (node,), {"index": lead + (slice(None, k, None),)},
                 shape[:axis] + (k,) + shape[axis + 1:]) if k else None
        hi = add("getitem", (node,), {"index": lead + (slice(k + 1, None, None),)},
                 shape[:axis] + (n - k - 1,) + shape[axis + 1:]) if k + 1 < n else None

        def joined(parts):
            return add("concatenate", tuple(parts), {"axis": axis}, shape)
    else:
        row = reshape(_as_written(value, dt, slab_shape), unit).node
        whole = Tracer(node, trace)  # (no view links: the write's own reads)
        lo = whole[lead + (slice(None, k),)].node if k else None
        hi = whole[lead + (slice(k + 1, None),)].node if k + 1 < n else None

        def joined(parts):
            return concatenate([Tracer(p, trace) for p in parts], axis=axis).node
    slices = tuple(s for s in (lo, hi) if s is not None)
    if not slices:  # (an array of one slab)
        return Tracer(row, trace)
    new = joined([p for p in (lo, row, hi) if p is not None])
    if trace.phase == "forward":
        trace.row_writes[new.id] = (node, k, row, slices, axis, parts)
    return Tracer(new, trace)


def _block_bounds(shape, index):
    """``(bounds, cut)`` when ``index`` selects a block of slices of step 1 of
    an array of ``shape`` that is not the whole array -- each axis's ``(start,
    stop, 1)`` and the axes it cuts -- else None."""
    parts = index if type(index) is tuple else (index,)
    ndim = len(shape)
    if sum(p is Ellipsis for p in parts) == 1:
        at = parts.index(Ellipsis)
        parts = parts[:at] + (slice(None),) * (ndim - len(parts) + 1) + parts[at + 1:]
    if len(parts) > ndim or not all(type(p) is slice for p in parts):
        return None
    parts = list(parts) + [slice(None)] * (ndim - len(parts))
    bounds = [p.indices(n) for p, n in zip(parts, shape, strict=True)]
    if any(step != 1 or stop <= start for start, stop, step in bounds):
        return None  # (a strided or empty selection)
    cut = [j for j, (start, stop, _) in enumerate(bounds) if (start, stop) != (0, shape[j])]
    return (bounds, cut) if cut else None  # (the whole array: numpy's copy, by the gather)


def _written_block(target, index, value):
    """``target`` with ``value`` written into the block ``index`` selects --
    slices of step 1 (``lap[1:-1] = ...``, ``u[1:-1, 1:-1] = ...``) -- as
    the concatenation of the block and the parts of ``target`` around it,
    one sliced axis at a time from the last (the derivative: slices of the
    cotangent; a region reads the concatenation in place), or None for any
    other index (the gather of :func:`_written`)."""
    block_of = _block_bounds(target.shape, index)
    if block_of is None:
        return None
    bounds, cut = block_of
    ndim, shape = target.ndim, target.shape
    block = _as_written(value, target.dtype, tuple(stop - start for start, stop, _ in bounds))
    for k in range(len(cut) - 1, -1, -1):  # (the block spans the later axes whole)
        ax = cut[k]
        around = [slice(None)] * ndim
        for j in cut[:k]:
            around[j] = slice(bounds[j][0], bounds[j][1])
        start, stop, _ = bounds[ax]
        pieces = []
        if start > 0:
            pieces.append(getitem(target, tuple(around[:ax] + [slice(0, start)] +
                                                around[ax + 1:])))
        pieces.append(block)
        if stop < shape[ax]:
            pieces.append(getitem(target, tuple(around[:ax] + [slice(stop, None)] +
                                                around[ax + 1:])))
        block = concatenate(pieces, axis=ax)
    return Tracer(block.node, target._trace)  # (no view links)


def block_written(target, index, value):
    """``target`` with ``value`` written into the block of slices of step 1
    at ``index`` (:func:`_written_block`; replayed in a loop), or None for
    another index: a write through a view of ``target``, ``w = u[1:-1]; w +=
    ...`` (numpy's ``u[1:-1] += ...``), :mod:`.objects`."""
    basic = basic_key(index)
    if basic is None or _block_bounds(target.shape, index) is None:
        return None
    return replayed(("set_items", basic), (target, value),
                    lambda: _written(target, index, value, block=True))


def _written(target, index, value, block=False):
    """``target`` with ``value`` written at ``index``: a new tracer (``block``:
    as :func:`_written_block` makes it where it can)."""
    if block:
        new = _written_block(target, index, value)
        if new is not None:
            return new
    positions = np.arange(target.size, dtype=np.intp).reshape(target.shape)
    chosen = positions[index]  # numpy checks the index (IndexError, shapes)
    v = _as_written(value, target.dtype, np.shape(chosen))
    return Tracer(write_positions(target, chosen, v).node, target._trace)  # (no view links)


def write_positions(a, at, value, key=None):
    """``a`` with its elements at flat positions ``at`` (a constant integer
    array) taken from ``value`` (shaped like ``at``; a position repeated is
    written by its last occurrence), as one gather of ``a`` and ``value``.
    ``key``: a hashable that determines ``at`` given ``a``'s shape (a write
    through views, :func:`hybridad.frontend.objects.assign`): the nodes are
    then replayed from the trace's recipes when the write comes again.  ``at``
    may be a function that makes it (called only when not replayed)."""
    if key is not None:
        return replayed(("write_positions", key), (a, value),
                        lambda: Tracer(write_positions(a, at, value).node, a._trace))
    at = np.ravel(at() if callable(at) else at)
    last = np.full(a.size, -1, dtype=np.intp)
    last[at] = np.arange(at.size, dtype=np.intp)  # numpy's last write wins
    src = np.where(last >= 0, a.size + last, np.arange(a.size))
    both = concatenate([ravel(a), ravel(value)])
    return reshape(gather_positions(both, lambda p: p[src]), a.shape)


SURFACE.write_positions = write_positions
SURFACE.slab_written = slab_written
SURFACE.block_written = block_written


# ----------------------------------------------------------------------------
# x[i] with integers computed from values: one gather at positions the plan computes
# ----------------------------------------------------------------------------

def traced_take(x, index):
    """``x[index]`` where ``index`` holds integer arrays computed from traced
    values (``table[np.searchsorted(grid, x)]``, ``x[np.argmax(x)]``,
    ``A[i, j]``) along ``x``'s leading axes -- numpy's advanced indexing, a
    copy; or a 0-d one per axis of ``x``, an element -- as one ``gather`` at
    flat positions the plan computes from them at every call (negative ones
    wrapped, as numpy).  The one decision taken is that every index is in
    range (a guard: an out-of-range call traces numpy's own IndexError),
    not each index's value: before, a plan retraced and compiled at every
    call whose indices differed.  None for any other index, or where the
    trace has no values to guard with (the general path decides as before).
    The derivative flows to ``x`` by a scatter-add (a repeated index adds).
    A traced boolean mask: :func:`hybridad.frontend.numpy_masked.masked_read`."""
    masked = masked_read(x, index)
    if masked is not None:
        return masked
    parts = index if type(index) is tuple else (index,)
    if not any(isinstance(p, Tracer) for p in parts):
        return None  # (every x[i] a trace reads passes here: the common case first)
    if len(parts) < x.ndim and all(np.ndim(p) == 0 for p in parts):
        return None  # (x[i] of a row: a view in numpy)
    flat = traced_flat(x.shape, index)
    if flat is None:
        return None
    r = bind("gather", contiguous(x), _tracer(flat))
    return settle(r, [x], "array" if np.ndim(flat) else "new")


SURFACE.traced_take = traced_take


# ----------------------------------------------------------------------------
# selections with constant indices: one gather each
# ----------------------------------------------------------------------------

def _const_indices(name, indices):
    if isinstance(indices, Tracer):
        value = decide(indices, "array")  # (computed from values: this call's, guarded)
        if value is not None:
            return value
        raise TracingError(f"np.{name} with traced indices at {user_location()}: "
                           f"{TRACED_INDEX}")
    return np.asarray(indices)


@implements(np.put_along_axis)
def put_along_axis(arr, indices, values, axis):
    """``np.put_along_axis``: ``arr[index] = values`` at the fancy index numpy
    builds from ``indices`` (constant integers) -- a write into a traced array
    or one ``f`` made, as numpy's own function writes it."""
    indices = _const_indices("put_along_axis", indices)
    shape = np.shape(arr)
    if axis is None:
        if len(shape) != 1:
            raise NotImplementedError(
                f"hybridad: np.put_along_axis(..., axis=None) of a {len(shape)}-D array (at "
                f"{user_location()}): write into its np.ravel view instead")
        axis = 0
    if indices.ndim != len(shape):
        raise ValueError("`indices` and `arr` must have the same number of dimensions")
    if not np.issubdtype(indices.dtype, np.integer):
        raise IndexError("`indices` must be an integer array")
    axis = _norm_axis(axis, len(shape))[0]
    index = tuple(indices if d == axis else
                  np.arange(n).reshape([1] * d + [n] + [1] * (len(shape) - d - 1))
                  for d, n in enumerate(shape))
    arr[index] = values


@implements(np.take)
def take(a, indices, axis=None, out=None, mode="raise"):
    _no_kwargs("take", {"out": out})
    if isinstance(a, Tracer) and isinstance(indices, Tracer) and mode == "raise" and \
            axis in (None, 0, -a.ndim):  # (integers computed from values: gathered, guarded
        got = traced_take(a if axis is not None else ravel(a), indices)  # in range)
        if got is not None:
            return got
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
    sorted_, packed, axis, _ = _sort_pack("argsort", a, axis)
    r = bind("sort_index", packed, axis=axis)
    r._trace.bounded[r.node.id] = sorted_.shape[axis]  # (positions along the axis)
    return r


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
