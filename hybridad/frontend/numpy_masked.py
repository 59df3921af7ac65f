"""Reads and writes at masks and positions computed from values, one graph
for all of them: ``x[mask]`` a lazy selection (:func:`masked_read`,
:mod:`.numpy_selected`), ``y[mask] = selection`` (:func:`selection_written`:
the write-back of ``y[y < 0] *= 0.1`` too), ``y[mask] = v`` with ``v`` one
element's value (:func:`masked_written`) and ``y[i] = v`` at 0-d integers
(:func:`traced_put`) -- each ``np.where``, no decision on the mask or index
(a plan made for one mask was retraced and compiled at every call whose mask
differed).
"""

from __future__ import annotations

import numpy as np

from ..core.decisions import decide
from ..core.trace import bind
from ..core.tracer import Tracer
from .numpy_api import _tracer, broadcast_to, reshape, where
from .numpy_selected import pending, positions_mask, selected
from .objects import assign

__all__ = ["in_range_positions", "masked_read", "masked_written", "selection_written",
           "traced_put"]


def masked_read(x, index):
    """``x[mask]`` for a traced boolean ``mask`` over ``x``'s leading axes (or
    ``x[mask, :]``): a :class:`~.numpy_selected.Selection`, no decision on the
    mask until its count is used.  None for any other index, or where the
    trace has no values to decide with."""
    if type(index) is tuple and index and all(
            k is Ellipsis or type(k) is slice and k == slice(None) for k in index[1:]) and \
            sum(k is Ellipsis for k in index[1:]) <= 1:
        index = index[0]  # (x[m, :], x[m, ...]: x[m])
    at = positions_mask(index)
    if at is not None:  # (x[np.nonzero(m)]: x[m])
        index = at
    if not (isinstance(index, Tracer) and index.dtype == np.bool_) or index.ndim == 0 or \
            index.shape != x.shape[:index.ndim]:
        return None
    return selected(x, index)


def selection_written(target, index, value):
    """Whether ``target[index] = value`` -- ``value`` a selection by this very
    mask not materialized (``y[m] = np.sqrt(x[m])``, the write-back of ``y[m]
    op= v``) -- was traced as ``np.where(mask, value's whole array,
    target)``: numpy's write, whatever the mask holds."""
    if not pending(value) or not isinstance(index, Tracer) or \
            index.node is not value._mask.node or \
            target.shape[:index.ndim] != index.shape:
        return False
    full = value._full
    item = target.shape[index.ndim:]
    if full.ndim - index.ndim > len(item) or not _broadcasts(full.shape[index.ndim:], item) \
            or full.dtype.kind == "c" and target.dtype.kind != "c":
        return False  # (numpy's error or cast refusal, on the general path)
    assign(target, _written_at(target, index, full), "assignment `a[mask] = a selection`")
    return True


def _broadcasts(shape, item):
    """Whether an operand of ``shape`` broadcasts to one selected element."""
    return len(shape) <= len(item) and \
        all(a in (1, b) for a, b in zip(shape[::-1], item[::-1], strict=False))


# ----------------------------------------------------------------------------
# y[mask] = value and y[i] = value: np.where, no decision on the mask or index
# ----------------------------------------------------------------------------

def masked_written(target, index, value):
    """Whether ``target[index] = value`` was traced as :func:`_masked` makes
    it (``y[y < 0] = 0``: one graph for every mask, no decision)."""
    new = _masked(target, index, value)
    if new is None:
        return False
    assign(target, new, "in-place assignment `a[mask] = value`")
    return True


def _masked(target, mask, value):
    """``target`` with ``value`` written where the traced boolean ``mask`` is
    True -- ``np.where(mask, value, target)`` -- when ``mask`` covers
    ``target``'s leading axes (numpy's mask index) and ``value`` broadcasts to
    one selected element (a number, ``x[x < 0] = 0``, ``X[rows] = row``):
    then numpy's write is the same whatever the mask holds, and no decision
    on its values is taken (a plan made for one mask retraced at every new
    one).  None otherwise (a value per selected element: its count decides)."""
    if not (isinstance(mask, Tracer) and mask.dtype == np.bool_) or \
            mask.ndim == 0 or mask.shape != target.shape[:mask.ndim] or \
            not _fits(target, mask.ndim, value):
        return None
    return _written_at(target, mask, value)


def _fits(target, lead, value):
    """Whether numpy writes ``value`` whole at each selected element of
    ``target``'s first ``lead`` axes: not a list, broadcast to one element,
    not complex into a real array (refused on the general path, as numpy's)."""
    if isinstance(value, (list, tuple)):
        return False
    shape = np.shape(value) if not isinstance(value, Tracer) else value.shape
    if not _broadcasts(shape, target.shape[lead:]):
        return False
    kind = value.dtype.kind if hasattr(value, "dtype") else np.asarray(value).dtype.kind
    return not (kind == "c" and target.dtype.kind != "c")


def _written_at(target, at, value):
    """``np.where(at, value, target)``: ``target`` with ``value`` (cast to its
    dtype) where the traced boolean ``at`` over its leading axes holds."""
    m = reshape(at, at.shape + (1,) * (target.ndim - at.ndim))
    return where(m, _as_written(value, target.dtype), Tracer(target.node, target._trace))


def _as_written(value, dtype, shape=None):
    """``value`` as numpy's element write stores it: cast to the target's
    ``dtype`` and, given the selection's ``shape``, broadcast to it (numpy
    drops the value's leading unit axes first)."""
    v = _tracer(value)
    if v.dtype != dtype:
        v = bind("cast", v, dtype=dtype)
    if shape is None:
        return v
    while v.ndim > len(shape) and v.shape[0] == 1:
        v = reshape(v, v.shape[1:])
    return broadcast_to(v, shape)


def in_range_positions(shape, index, zero_d=False):
    """The positions of ``index``'s integers along the leading axes of an
    array of ``shape``, some computed from values (traced): each part's
    position, negatives wrapped as numpy's (a tracer, or an int for a
    constant part), after the one decision taken, that every traced part is
    in range (a guard: an out-of-range call takes the general path, which
    traces numpy's IndexError) -- none for parts known to be in range
    (``np.argmax(x)`` into an axis as long as ``x``'s: ``Trace.bounded``).
    None for any other index -- no traced part, a boolean, a constant out of
    range, more parts than axes, with ``zero_d`` a part that is not 0-d -- or
    where the trace has no values to decide with (the general path decides
    as before)."""
    parts = index if type(index) is tuple else (index,)
    if not any(isinstance(p, Tracer) for p in parts) or len(parts) > len(shape) or \
            not all(isinstance(p, Tracer) and p.dtype.kind in "iu" and
                    (not zero_d or p.ndim == 0) or
                    isinstance(p, (int, np.integer)) and not isinstance(p, (bool, np.bool_))
                    for p in parts):
        return None
    ok, pos = None, []
    for a, p in enumerate(parts):
        n = shape[a]
        if not isinstance(p, Tracer):
            if not -n <= int(p) < n:
                return None  # (numpy's IndexError, on the general path)
            pos.append(int(p) % n)
            continue
        if p._trace.bounded.get(p.node.id, n + 1) <= n:  # (np.argmax(x): in range)
            pos.append(p.astype(np.intp))
            continue
        p = p.astype(np.intp)
        inside = np.all((p >= -n) & (p < n))
        ok = inside if ok is None else ok & inside
        pos.append(where(p < 0, p + n, p))
    if ok is not None and decide(ok, "bool") is not True:  # (out of range: numpy's error)
        return None
    return pos


def traced_flat(shape, index):
    """The flat positions, in an array of ``shape``, of the elements of
    ``a[index]`` -- ``index`` integer arrays some of which are traced, along
    the leading axes, as numpy's advanced indexing -- a traced ``intp``
    array of ``a[index]``'s shape, after :func:`in_range_positions`' one
    decision (every index in range); None where that gives none."""
    pos = in_range_positions(shape, index)
    if pos is None:
        return None
    m = len(pos)
    stride, flat = 1, 0
    for a in range(len(shape) - 1, -1, -1):
        if a < m:
            flat = flat + pos[a] * stride
        stride *= shape[a]
    rest = shape[m:]
    if rest:
        flat = np.expand_dims(flat, -1) + np.arange(int(np.prod(rest)), dtype=np.intp)
        flat = reshape(flat, np.shape(flat)[:-1] + tuple(rest))
    return _tracer(flat) if isinstance(flat, Tracer) else flat


def traced_put(target, index, value):
    """Whether ``target[index] = value`` was traced as ``np.where(at,
    value, target)`` for ``index`` 0-d integers computed from values along
    ``target``'s leading axes (``y[np.argmax(y)] = 0``, ``A[i, j] = v``,
    ``X[i] = row``; ``at`` true at that element or slab) and a ``value`` that
    broadcasts to it: the write is then the same whatever the index holds,
    and the one decision is that it is in range (:func:`in_range_positions`),
    as for reads (:func:`hybridad.frontend.numpy_selection.traced_take`).
    Before, a plan retraced and compiled at every call whose index differed."""
    parts = index if type(index) is tuple else (index,)
    lead = len(parts)
    if not any(isinstance(p, Tracer) for p in parts) or lead > target.ndim or \
            not _fits(target, lead, value):
        return False
    pos = in_range_positions(target.shape, index, zero_d=True)
    if pos is None:
        return False
    at = None
    for a, p in enumerate(pos):
        n = target.shape[a]
        hit = np.arange(n, dtype=np.intp).reshape((n,) + (1,) * (lead - 1 - a)) == p
        at = hit if at is None else at & hit
    assign(target, _written_at(target, at, value), "in-place assignment `a[i] = value`")
    return True
