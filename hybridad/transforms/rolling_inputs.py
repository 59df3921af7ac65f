"""A rolled run's per-iteration inputs (for :mod:`.rolling`): the values each
iteration reads that differ from one iteration to the next -- a literal ``t =
k * dt``, a row ``forcing[k]``, an argument of ``f`` (``for W in Ws``), an
element ``x[j]`` made before the run -- stacked along a new first axis, as
views of one array where they are (``x[i]`` for ``i = a, a + b, ...``), else
one gather, else stacked when the plan runs."""

from __future__ import annotations

from operator import attrgetter, itemgetter

import numpy as np

from ..core.tracer import Tracer
from ..frontend.guards import SMALL_BYTES
from ..frontend.signature import attr_signature
from .rolling_runs import _ARGS

__all__ = []

_OP, _ATTRS, _FIRST, _INDEX = attrgetter("op"), attrgetter("attrs"), itemgetter(0), \
    itemgetter("index")


def _distinct_slots(nodes, table, wide, fed, s, p, trips):
    """``(slots, alias)``: the operand slots of ``fed`` (``(offset, operand)``,
    each reading another value made before the run at every iteration) that
    read distinct values -- one per-iteration input each -- and each slot's
    one among them (many nodes of a step read its constant ``t + 1``: one
    input, not one per reader)."""
    distinct, alias, seen = [], {}, {}
    copies_at = s + p * np.arange(trips)
    for o, j in fed:
        rows = copies_at + o
        if int(rows[0]) in wide:
            column = tuple(nodes[r].args[j].id for r in rows.tolist())
        else:
            column = ("at", table[rows, j].tobytes())
        first = seen.setdefault(column, (o, j))
        if first == (o, j):
            distinct.append(first)
        alias[o, j] = first
    return distinct, alias


def _initial(nodes, s, p, leaf, pos):
    """Offset in the period -> the value the run's first iteration reads for
    what later ones read from the iteration before (a carry's initial value);
    None where two reads disagree."""
    init = {}
    for i in range(s, s + p):
        if leaf[i - s]:
            continue
        for x, y in zip(nodes[i].args, nodes[i + p].args, strict=True):
            if x is not y and s <= pos[y.id] < s + p:
                if init.setdefault(pos[y.id] - s, x) is not x:
                    return None
    return init


def _outer_xs(trace, s, p, trips, xs, init, keep, kept, pos):
    """The per-iteration inputs ``xs`` stacked, one tracer each; the copies
    the stacks read, made in the run, added to ``keep`` (ids in ``kept``)."""
    nodes, x_outer = trace.nodes, []
    for when, o in xs:
        copies = [nodes[s + k * p + o[0]].args[o[1]] if when == "arg" else
                  nodes[s + k * p + o] for k in range(trips)]
        if when == "before":
            copies = [init[o]] + copies[:-1]
        stacked, outside = _stack(trace, copies)
        x_outer.append(stacked)
        outside = [c for c in outside if c.id not in kept and pos.get(c.id, s) >= s]  # (an
        keep.extend(outside)  # initial value before the run stays where it is)
        kept.update(c.id for c in outside)
    return x_outer


def _differs(nodes, table, wide, rows, j, q):
    """Whether operand ``j`` of the nodes at ``rows`` (a node's copies, one an
    iteration) is another node than position ``q`` in some copy (the matcher's
    operand table at once; a node of many operands one by one)."""
    if int(rows[0]) not in wide:
        return bool((table[rows, j] != q).any())
    first = nodes[int(rows[0])].args[j]
    return any(nodes[r].args[j] is not first for r in rows.tolist())


def _stack(trace, copies):
    """The values of ``copies`` (one per iteration) stacked along a new first
    axis, as a tracer, and the copies the outer graph must keep for it."""
    first = copies[0]
    if all(c.op == "const" for c in copies):
        values = [c.attrs["value"] for c in copies]
        if all(c.is_literal for c in copies):
            return Tracer(trace.const(np.stack(values), True), trace), []
        rows = _rows_of_one_array(values)
        if rows is not None:  # forcing[k]: one view of the captured array's memory
            return Tracer(trace.const(rows, False), trace), []
        if all(v.nbytes <= SMALL_BYTES for v in values):
            # small arrays a plan compares by content before every call (a change
            # rebuilds it), or arrays made while tracing: their values, stacked
            return Tracer(trace.const(np.stack(values), False), trace), []
    elif set(map(_OP, copies)) == {"getitem"} and \
            len(set(map(_FIRST, map(_ARGS, copies)))) == 1:  # (C loops)
        indices = list(map(_INDEX, map(_ATTRS, copies)))
        view = _strided_items(trace, first.args[0], indices)
        if view is not None:  # x[i] for i = a, a + b, ...: one view of x
            return view, []
        if all(type(i) is tuple and len(i) == len(indices[0]) and
               all(type(k) is int for k in i) for i in indices):  # (elements x[i, j]
            # read in any order: one gather)
            at = tuple(np.array(column, np.intp) for column in zip(*indices, strict=True))
            return Tracer(first.args[0], trace)[at], []
    return np.stack([Tracer(c, trace) for c in copies]), copies  # stacked when it runs


def _strided_items(trace, source, indices):
    """``source[index]`` for each index, stacked, as one basic-indexing view:
    when the indices differ in one integer position only, by a constant step."""
    first = indices[0]
    if set(map(len, indices)) != {len(first)}:
        return None
    differ = []
    for j, column in enumerate(zip(*indices, strict=True)):  # (C loops for Python ints)
        if set(map(type, column)) == {int}:
            if min(column) != max(column):
                differ.append(j)
        else:
            signed = attr_signature(first[j])
            if any(attr_signature(k) != signed for k in column):
                differ.append(j)
    if len(differ) != 1:
        return None
    j = differ[0]
    ks = list(map(itemgetter(j), indices))
    if not set(map(type, ks)) <= {int} and not all(
            isinstance(k, (int, np.integer)) and not isinstance(k, bool) for k in ks):
        return None
    ks = np.fromiter(map(int, ks), np.int64, len(ks))
    step = int(ks[1] - ks[0]) if len(ks) > 1 else 1
    if step == 0 or (np.diff(ks) != step).any() or (ks < 0).any():
        return None
    stop = int(ks[-1]) + step
    index = list(first)
    index[j] = slice(int(ks[0]), stop if stop >= 0 else None, step)
    view = Tracer(source, trace)[tuple(index)]
    axis = sum(1 for x in first[:j] if not isinstance(x, (int, np.integer)))
    return np.moveaxis(view, axis, 0) if axis else view


def _rows_of_one_array(values):
    """The arrays ``values`` (captured by reference: ``forcing[k]`` for each
    step ``k``) as ONE strided view of the memory they share -- so the loop
    reads the caller's array in place, as the unrolled plan did -- or None
    when they are not equally spaced views of one array."""
    first = values[0]
    base = first.base
    if base is None or any(v.base is not base or v.shape != first.shape or
                           v.strides != first.strides or v.dtype != first.dtype
                           for v in values):
        return None
    ptrs = [v.__array_interface__["data"][0] for v in values]
    step = ptrs[1] - ptrs[0] if len(ptrs) > 1 else 0
    if any(b - a != step for a, b in zip(ptrs, ptrs[1:], strict=False)):
        return None
    return np.lib.stride_tricks.as_strided(first, (len(values), *first.shape),
                                           (step, *first.strides), writeable=False)
