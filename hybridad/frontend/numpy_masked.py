"""Writes at masks and positions computed from values, one graph for all of them:
``y[mask] = v`` with ``v`` one element's value (:func:`masked_written`), ``y[i] =
v`` at 0-d integers (:func:`traced_put`) -- both ``np.where`` -- and ``y[mask]
op= v`` (:func:`masked_updated`), below.

Python runs ``y[y < 0] *= 0.1`` as three calls: ``sel = y[mask]`` (a selection
whose length is the mask's count), ``sel *= 0.1`` and ``y[mask] = sel``.  The
read takes the mask's values (a decision: a plan made for one mask was
retraced and compiled at every call whose mask differed).  When the value
written back is an elementwise function of that selection (and of numbers or
rows that broadcast to one selected element), the statement is ``np.where(mask,
g(y), y)`` whatever the mask holds: :func:`masked_updated` traces it so, and
marks the read's decision retractable -- dropped once ``f`` is traced
(:func:`hybridad.core.decisions.retract_unread`) when nothing else reads the
selection.  Only the statement's own read is retracted: Python never hands
that selection to the function's code, so its count (a shape, which a
function may turn into a Python int: ``len(sel)``, ``np.zeros_like(sel)``,
with no node of the graph to show it) can reach nothing else.  A selection
the code holds -- ``y[m] = np.sqrt(x[m])``, ``y[m] += 2 * y[m]``'s right side
-- keeps its decision.
"""

from __future__ import annotations

import numpy as np

from ..core.decisions import concrete_index, decide
from ..core.trace import bind
from ..core.tracer import Tracer
from ..ops import REGISTRY
from .numpy_api import _tracer, broadcast_to, getitem, reshape, where
from .objects import assign

__all__ = ["in_range_positions", "masked_read", "masked_updated", "masked_written",
           "traced_put"]


def masked_read(x, index):
    """``x[mask]`` for a traced boolean ``mask`` over ``x``'s leading axes:
    numpy's selection at the mask this call holds (a decision, as before),
    the selection noted in the trace (``trace.masked_reads``: node id ->
    ``(selection, x, mask)``) and the returned tracer marked with its
    decision, for :func:`masked_updated`.  None for any other index, or where
    the trace has no values to decide with."""
    if not (isinstance(index, Tracer) and index.dtype == np.bool_) or index.ndim == 0 or \
            index.shape != x.shape[:index.ndim]:
        return None
    trace = index._trace
    before = len(trace.decisions)
    concrete = concrete_index(index)
    if isinstance(concrete, Tracer):
        return None
    r = getitem(x, concrete)
    made = trace.decisions[before:]
    if len(made) == 1 and made[0].node is index.node and isinstance(r, Tracer) and \
            r._origin is not None:
        trace.masked_reads[r.node.id] = (r.node, x.node, index.node)
        r._origin = (*r._origin[:3], (made[0], r.node, index.node))
    return r


def masked_updated(target, index, value):
    """Whether ``target[index] = value`` -- the write-back of ``target[mask]
    op= v``: ``value`` the very tracer that read ``target[mask]``
    (:func:`masked_read`), ``target`` unchanged since -- was traced as
    ``np.where(mask, g(target, ...), target)``: ``value`` an elementwise
    function ``g`` of selections by this very mask of arrays of ``target``'s
    shape (each as it was when read) and of values of at most one selected
    element's shape made without them.  The statement's read's decision is
    then retractable (the others', kept: see the module's note)."""
    origin = getattr(value, "_origin", None) if isinstance(value, Tracer) else None
    if origin is None or len(origin) < 4 or origin[0]() is not target or \
            origin[1] is not target.node or not isinstance(index, Tracer) or \
            origin[3][2] is not index.node:
        return False
    trace = target._trace
    reads = {k: (sel, base) for k, (sel, base, mask) in trace.masked_reads.items()
             if mask is index.node and base.shape == target.shape}
    item = target.shape[index.ndim:]
    chain, used = _elementwise_chain(value.node, {k: r[0] for k, r in reads.items()}, item)
    decision, selection, _ = origin[3]
    if chain is None or selection.id not in used:
        return False
    made = {k: Tracer(reads[k][1], trace) for k in used}  # (each array as it was read)
    for n in chain:
        made[n.id] = bind(n.op, *[made[a.id] if a.id in made else Tracer(a, trace)
                                  for a in n.args], **n.attrs)
    new = made[value.node.id]
    if new.shape != target.shape or new.dtype.kind == "c" and target.dtype.kind != "c":
        return False  # (complex into real: refused on the general path, as numpy's)
    assign(target, _written_at(target, index, new), "in-place update `a[mask] op= value`")
    trace.retractable.append((decision, selection))
    return True


def _elementwise_chain(node, selections, item):
    """``(chain, used)``: the nodes between the ``selections`` (id -> node,
    of one shape) and ``node``, in the order they were made, when each is an
    elementwise op of the selections' shape whose other operands were made
    without them and broadcast to one selected element (shape ``item``), and
    the ids of the selections it reads; ``(None, None)`` otherwise (a
    reduction of a selection, a reshape, a value per element from elsewhere)."""
    first = min(selections)
    found, stack = {}, [node]
    while stack:  # (which nodes made after the first selection depend on one)
        n = stack[-1]
        if n.id in found:
            stack.pop()
            continue
        if selections.get(n.id) is n:
            found[n.id] = True
            stack.pop()
            continue
        pending = [a for a in n.args if a.id >= first and a.id not in found]
        if pending:
            stack.extend(pending)
            continue
        found[n.id] = any(found.get(a.id, False) for a in n.args)
        stack.pop()
    if selections.get(node.id) is node or not found.get(node.id):
        return None, None
    reached = _made(node, found)
    used = [n.id for n in reached if selections.get(n.id) is n]
    chain = sorted((n for n in reached if selections.get(n.id) is not n), key=lambda n: n.id)
    shape = selections[used[0]].shape
    for n in chain:
        op = REGISTRY.get(n.op)
        if op is None or op.kind != "elementwise" or n.shape != shape:
            return None, None
        for a in n.args:
            if not found.get(a.id, False) and not _broadcasts(a.shape, item):
                return None, None
    return chain, used


def _made(node, found):
    """The nodes ``found`` to depend on the selection, from ``node`` down."""
    out, stack, seen = [], [node], set()
    while stack:
        n = stack.pop()
        if n.id in seen or not found.get(n.id, False):
            continue
        seen.add(n.id)
        out.append(n)
        stack.extend(n.args)
    return out


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
    traces numpy's IndexError).  None for any other index -- no traced part, a
    boolean, a constant out of range, more parts than axes, with ``zero_d``
    a part that is not 0-d -- or where the trace has no values to decide with
    (the general path decides as before)."""
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
        p = p.astype(np.intp)
        inside = np.all((p >= -n) & (p < n))
        ok = inside if ok is None else ok & inside
        pos.append(where(p < 0, p + n, p))
    if decide(ok, "bool") is not True:  # (an index out of range: numpy's error)
        return None
    return pos


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
