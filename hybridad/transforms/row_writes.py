"""Rows written one at a time, read from the writes that made them.

``out = np.zeros((T, n))`` followed by ``out[k] = x`` at every step of a loop
is traced as a new value of the whole of ``out`` per write (the rows before
``k``, the row, the rows after: :func:`hybridad.frontend.numpy_selection.set_items`
records each such write in the trace's ``row_writes``).  Left so, a loop of T
steps carries an array of T rows and copies it at every step: time in T^2 to
trace, to roll and at every call.  :func:`forward_row_writes` reads the
values off the writes instead:

* a row read ``out[j]`` of an array a chain of writes made is the value last
  written to row ``j`` before it (or the row of the array the chain started
  from);
* any other read of such an array is the stack of its rows, each the last
  value written to it (a concatenation of ``T`` rows, which
  :mod:`hybridad.transforms.rolling` makes one view of a rolled loop's output
  when the rows are a loop's per-step values);

and the writes, then read by nothing, leave the trace.  The values are the
same (each node still computes what it computed), so a plan is as right as
before; only the route to each row changes.  A chain that forks (two writes
into one array) or whose intermediate arrays are read whole more than a few
times is left as traced.
"""

from __future__ import annotations

import bisect
from operator import attrgetter

import numpy as np

from ..core.trace import Trace
from ..core.tracer import Tracer

__all__ = ["forward_row_writes", "row_read", "slab_read", "spliced", "without_dead"]

_ID = attrgetter("id")

#: the most arrays of one chain read whole (each a stack of all its rows)
MAX_WHOLE_READS = 4


class _Chain:
    """Writes into one array along one ``axis``, in order: ``rows`` slab ->
    ``[(seq, slab node)]`` (a slab: a row of axis 0, a column of axis 1, ...)."""

    __slots__ = ("axis", "base", "broken", "last", "rows")

    def __init__(self, base, axis):
        self.base, self.axis, self.rows, self.last, self.broken = base, axis, {}, 0, False

    def row(self, j, seq):
        """The slab node (the slab's shape with a unit axis at :attr:`axis`)
        last written to slab ``j`` up to write ``seq``, or None (the base
        array's slab)."""
        entries = self.rows.get(j)
        if not entries:
            return None
        at = bisect.bisect_right(entries, seq, key=lambda e: e[0])
        return entries[at - 1][1] if at else None


def forward_row_writes(trace: Trace, outs, fixed=frozenset()):
    """Read the rows of ``trace``'s row writes from the writes (see the
    module); ``trace.nodes`` rewritten in place.  Returns ``outs`` with any
    replaced node replaced.  ``fixed``: ids of the nodes a Python decision
    on a value read (its check recomputes them as traced): a chain they read,
    or that holds one, is left as traced."""
    writes = trace.row_writes
    if not writes:
        return outs
    nodes = trace.nodes
    # slices feeding a write, and the slabs written (a reshape of the value: a write
    # into a slab of another chain, `K[i, j] = v`, is not a read of that slab whole)
    internal = {s.id for w in writes.values() for s in (*w[3], w[2])}
    at = {}  # write node id -> (chain, seq)
    whole = {}  # write node id -> the nodes that read it whole
    for n in nodes:
        w = writes.get(n.id)
        if w is not None:
            prev = at.get(w[0].id)
            if prev is None or prev[0].axis != w[4]:  # (along another axis than the
                chain, seq = _Chain(w[0], w[4]), 1  # write before: a chain from its array)
            else:
                chain, seq = prev[0], prev[1] + 1
                if chain.last != prev[1]:  # (a second write into one array: a fork)
                    chain.broken = True
            chain.last = seq
            chain.rows.setdefault(w[1], []).append((seq, w[2]))
            at[n.id] = (chain, seq)
        for a in n.args:
            if a.id in at and n.id not in internal and slab_read(n, at[a.id][0].axis) is None:
                whole.setdefault(a.id, []).append(n)
            if a.id in at and (n.id in fixed or a.id in fixed):  # (a decision reads it)
                at[a.id][0].broken = True
    for o in outs:
        if o.id in at:
            whole.setdefault(o.id, []).append(None)
    per_chain = {}
    for wid in whole:
        per_chain[id(at[wid][0])] = per_chain.get(id(at[wid][0]), 0) + 1
    broken = {id(c) for c, _ in at.values()
              if c.broken or per_chain.get(id(c), 0) > MAX_WHOLE_READS}
    replace, kept, made = {}, [], {}
    stacked = _Stacks(trace, at, broken, replace, kept)
    for n in nodes:
        if replace and any(a.id in replace for a in n.args):
            n.args = tuple(replace.get(a.id, a) for a in n.args)
        src = n.args[0] if n.args else None
        read = None
        if src is not None and src.id in at and id(at[src.id][0]) not in broken:
            read = slab_read(n, at[src.id][0].axis)
        if read is not None:
            chain, seq = at[src.id]
            j, rest = read
            row = chain.row(j, seq)
            if row is None:  # (the slab of the array the writes started from: itself
                # forwarded, where it is a slab of another chain's, `K[i, j] = v`)
                n.args = (replace.get(chain.base.id, chain.base),)
            else:
                value = _slab_value(trace, row, chain.axis, made, kept, stacked)
                if rest is not None:
                    value = spliced(trace, kept, lambda v=value, r=rest: Tracer(v, trace)[r])
                if value.shape == n.shape and value.dtype == n.dtype:
                    replace[n.id] = value
                    continue
        kept.append(n)
        if n.id in whole and id(at[n.id][0]) not in broken:
            replace[n.id] = stacked(n)
    outs = [replace.get(o.id, o) for o in outs]
    # (and the arrays the chains started from, their slabs all read from writes now)
    bases = {c.base.id for c, _ in at.values() if id(c) not in broken}
    trace.nodes = without_dead(kept, outs, set(writes) | internal | bases, trace)
    trace.row_writes = {}
    return outs


class _Stacks:
    """``stacked(v)``: ``v``, or -- a write of a chain forwarded -- the stack
    of its slabs (a slab written by writes of its own, ``K[i, j] = v``: the
    row's values), made once.  (An object, not a closure calling itself: no
    reference cycle holding the pass's tables of every write.)"""

    def __init__(self, trace, at, broken, replace, kept):
        self.trace, self.at, self.broken, self.replace, self.kept = \
            trace, at, broken, replace, kept
        self.made = {}

    def __call__(self, v):
        hit = self.at.get(v.id)
        if hit is None or id(hit[0]) in self.broken:
            return v
        if v.id not in self.made:
            chain, seq = hit
            self.made[v.id] = _stacked(self.trace, chain, seq, v, self.kept,
                                       self.replace.get(chain.base.id, chain.base), self)
        return self.made[v.id]


def row_read(n):
    """Whether ``n`` is ``x[j]`` for an int ``j`` (a row of ``x``)."""
    if n.op != "getitem":
        return False
    index = n.attrs.get("index")
    return type(index) is tuple and len(index) == 1 and type(index[0]) is int


def spliced(trace, kept, make):
    """The node of ``make()``'s tracer, made in ``trace`` with its new nodes
    appended to ``kept`` (a pass's list of the nodes so far), not to the end
    of the trace.  Nothing is merged with a node traced before (which may
    stand after this point in the pass's order): the trace's memo is set
    aside meanwhile."""
    mark, memo = len(trace.nodes), trace._seen
    trace._seen = {}
    try:
        with trace:
            t = make()
    finally:
        trace._seen = memo
    kept.extend(trace.nodes[mark:])
    del trace.nodes[mark:]
    return t.node


def slab_read(n, axis):
    """``(j, rest)`` when ``n`` reads slab ``j`` along ``axis`` of its operand
    (``x[j]``, ``x[:, j]``, ``x[1:-1, j]``): an int ``j`` at ``axis`` of its
    index and ints or slices elsewhere -- ``rest`` the index without ``j``
    (None: the whole slab) -- else None."""
    if n.op != "getitem":
        return None
    index = n.attrs.get("index")
    if type(index) is not tuple or len(index) <= axis or type(index[axis]) is not int:
        return None
    rest = index[:axis] + index[axis + 1:]
    for p in rest:
        if type(p) is not int and type(p) is not slice:
            return None
    whole = all(type(p) is slice and p == _FULL for p in rest)
    return index[axis], None if whole else rest


_FULL = slice(None)


def _written_value(row, shape):
    """The value written that the slab node ``row`` (a unit axis added) is a
    reshape of, when it is one of ``shape``; else None."""
    return row.args[0] if row.op == "reshape" and row.args[0].shape == shape else None


def _slab_value(trace, row, axis, made, kept, stacked):
    """The slab node ``row`` (a unit axis at ``axis``) without its unit axis:
    the value written itself (``stacked(value)``), where the write reshaped it."""
    shape = row.shape[:axis] + row.shape[axis + 1:]
    value = _written_value(row, shape)
    if value is not None:
        return stacked(value)
    if row.id not in made:
        made[row.id] = spliced(trace, kept, lambda: Tracer(row, trace).reshape(shape))
    return made[row.id]


def _stacked(trace, chain, seq, n, kept, base, stacked):
    """The array write ``seq`` of ``chain`` made (node ``n``), as the stack of
    its slabs along the chain's axis: each the last slab written to it, and
    the slabs of ``base`` (the chain's base array, as forwarded) between
    them, a run of them as one slice (a boundary written into a state of
    10^4 points: three parts, not 10^4).  ``stacked(v)``: a value written,
    as it is read (itself, or the stack of the slabs written into it)."""
    axis = chain.axis
    slab_shape = n.shape[:axis] + n.shape[axis + 1:]
    lead = (_FULL,) * axis

    def unwritten(j0, j1):  # base's slabs j0 .. j1 - 1, end to end
        r = Tracer(base, trace)[lead + (slice(j0, j1),)]
        if axis:
            r = np.moveaxis(r, axis, 0)
        return r.reshape(((j1 - j0) * slab_shape[0], *slab_shape[1:])) if slab_shape else r

    def make():
        parts, start, count = [], 0, n.shape[axis]
        rows = [chain.row(j, seq) for j in range(count)]  # (the last slab written to each)
        if not slab_shape:  # (elements of a 1-D array: where two runs or more of them are
            # unwritten -- a band around the diagonal in each row of a matrix -- one gather
            # of the base and the elements, whose shapes do not move with the positions)
            written = [j for j, row in enumerate(rows) if row is not None]
            if sum(1 for j in range(count) if rows[j] is None and
                   (j + 1 == count or rows[j + 1] is not None)) >= 2:
                src = np.arange(count)
                src[written] = count + np.arange(len(written))
                both = np.concatenate([Tracer(base, trace)] +
                                      [Tracer(rows[j], trace) for j in written])
                return both[src]
        for j, row in enumerate(rows):
            if row is None:
                continue
            if start < j:
                parts.append(unwritten(start, j))
            start = j + 1
            if not slab_shape:  # (numbers: their rows of one element, concatenated)
                parts.append(Tracer(row, trace))
                continue
            value = _written_value(row, slab_shape)  # (the value written itself, or its slab)
            parts.append(Tracer(stacked(value), trace) if value is not None else
                         Tracer(row, trace).reshape(slab_shape))
        if start < count:
            parts.append(unwritten(start, count))
        # the slabs themselves, end to end: a loop's per-step values, not views of them
        # (a rolled loop then keeps the states it carries, not a copy of each as well);
        # along another axis than the first, that stack's axes moved (a view)
        joined = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
        if not slab_shape:
            return joined
        out = joined.reshape((n.shape[axis], *slab_shape))
        return np.moveaxis(out, 0, axis) if axis else out
    return spliced(trace, kept, make)


def without_dead(nodes, outs, candidates, trace):
    """``nodes`` without those of ``candidates`` that nothing live reads."""
    live = {o.id for o in outs}
    dropped, out = [], []
    for n in reversed(nodes):
        if n.id in candidates and n.id not in live:
            dropped.append(n)
            continue
        out.append(n)
        live.update(map(_ID, n.args))  # (a C loop: a trace of 10^5 nodes)
    if dropped:
        trace.forget(dropped)
    out.reverse()
    return out
