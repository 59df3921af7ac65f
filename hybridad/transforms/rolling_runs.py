"""Finding the runs a Python loop left in a trace (for :mod:`.rolling`):
consecutive copies of one node sequence -- the same ops, shapes and dtypes,
each operand the same outer value or the value one period earlier -- found
with whole arrays at a time (a trace of 10^4 iterations has 10^5 nodes and
more, and each candidate period is checked at every node)."""

from __future__ import annotations

from itertools import chain, repeat
from operator import attrgetter

import numpy as np

from ..frontend.signature import attrs_signature
from ..ops import REGISTRY

__all__ = ["MIN_NODES", "MIN_TRIPS", "PRIMITIVES", "primitive_count"]

#: the fewest iterations, and the fewest traced nodes in all, that are rolled
#: (a short loop runs faster unrolled, and compiles about as fast)
MIN_TRIPS = 4
MIN_NODES = 96
#: how many nodes each composite op lowers to (:attr:`hybridad.ir.registry.Op.primitives`):
#: the thresholds count a trace's nodes as its plan will hold them
PRIMITIVES = {name: op.primitives for name, op in REGISTRY.items() if op.kind == "composite"}
#: the most periods tried per search, how many next nodes of a kind give
#: candidate periods
_CANDIDATES = 12
_REACH = 8
_ID, _ARGS = attrgetter("id"), attrgetter("args")
#: the ops that write their first operand in place
_INPLACE = frozenset(name for name, op in REGISTRY.items() if op.kind == "inplace")


def primitive_count(nodes):
    """How many nodes ``nodes`` are once their composites are lowered."""
    return len(nodes) + sum(PRIMITIVES[n.op] - 1 for n in nodes if n.op in PRIMITIVES)


def _attrs_key(node):
    # (as the plan's graph signature compares them: a loop body by its content)
    return attrs_signature(node.attrs)


def _attrs_key_of(node, keys):
    """:func:`_attrs_key` of ``node``, kept in ``keys`` by its attrs dict."""
    k = keys.get(id(node.attrs))
    if k is None:
        k = keys[id(node.attrs)] = _attrs_key(node)
    return k


class _Positions:
    """A node's position by its id (``pos[id]``, ``pos.get(id, default)``,
    ``id in pos``) over an array: a dict of a trace's 10^5 nodes cost more
    to make than the whole search."""

    __slots__ = ("at",)

    def __init__(self, ids):
        ids = np.fromiter(ids, np.int64, len(ids))
        self.at = np.full(int(ids.max(initial=0)) + 1, -1, np.int64)
        self.at[ids] = np.arange(len(ids))

    def get(self, i, default=None):
        q = int(self.at[i]) if 0 <= i < len(self.at) else -1
        return default if q < 0 else q

    def __getitem__(self, i):
        q = self.get(i, -1)
        if q < 0:
            raise KeyError(i)
        return q

    def __contains__(self, i):
        return self.get(i, -1) >= 0


class _Matcher:
    """Whether node ``i`` and node ``i + p`` are copies of one another."""

    #: operands per node held in the arrays of :meth:`matches` (a node with
    #: more is checked one by one)
    WIDE = 8

    def __init__(self, nodes, keys, fixed=frozenset(), steps=None, rows=None):
        self.nodes = nodes
        self._ids = list(map(_ID, nodes))
        self.pos = _Positions(self._ids)
        self._keys = keys  # id(attrs) -> (attrs, its key) (kept between searches)
        self._fixed = fixed  # ids of nodes no run may hold
        self._scan(steps or {}, rows or {})

    def _scan(self, steps, row_index):
        """One pass over the nodes (a trace of 10^4 iterations has 10^5 of
        them and more), making, per node:

        * ``sig`` -- an int, equal for nodes that may be copies of one another
          (op, shape, dtype and the operands' shapes and dtypes; not
          attributes; inputs, in-place ops and the ``fixed`` nodes unique);
        * the tables of :meth:`matches`: operand positions, -1 padded; whether
          a node is a constant; its attributes' key as an int; the nodes with
          more than :data:`WIDE` operands.

        A node a replayed call made (``steps``: the trace's node id -> step,
        :mod:`hybridad.frontend.replay`) is described by its step's first
        node: the nodes of one step share op, attributes, shape, dtype and
        their operands' -- so Python looks at one node per step, and at the
        nodes no replay made.  The rows ``x[i]`` a loop over an array's rows
        took are numbered too, by the array's shape and dtype (``rows``: node id
        -> ``i``): their attributes are keyed by ``i`` alone."""
        nodes, width, fixed = self.nodes, self.WIDE, self._fixed
        inplace = _INPLACE
        sigs, table, by_attrs = {}, {}, {}  # (by_attrs: the key's int of each attrs dict)

        def describe(i):  # (sig, is a constant, attributes' key, primitives, operands,
            # a read at ints of an array: ``x[j]``)
            n = nodes[i]
            op, a = n.op, n.args
            k = len(a)
            if op == "input" or op in inplace:
                key = i  # (an int: unique, never equal to a tuple)
            elif k == 1:
                x = a[0]
                key = (op, n.shape, n.dtype, x.shape, x.dtype)
            elif k == 2:
                x, y = a
                key = (op, n.shape, n.dtype, x.shape, x.dtype, y.shape, y.dtype)
            else:
                key = (op, n.shape, n.dtype, k, *[(x.shape, x.dtype) for x in a])
            sig = sigs.setdefault(key, len(sigs))
            if op == "const":
                return sig, True, 0, 1, 0, False
            ka = by_attrs.get(id(n.attrs))
            if ka is None:
                ka = by_attrs[id(n.attrs)] = table.setdefault(self.key(i), len(table))
            return sig, False, ka, PRIMITIVES.get(op, 1), k, op == "getitem" and _at_ints(n)

        m = len(nodes)
        # (fromiter, not np.array: np.array is the tracing's own while a trace
        # runs, and looks through every list for a tracer first)
        number = np.fromiter(map(steps.get, self._ids, repeat(-1)), np.int64, m) \
            if steps else np.full(m, -1, np.int64)
        sig, const, keys = np.empty(m, np.int64), np.zeros(m, bool), np.zeros(m, np.int64)
        weight, count, feed = np.ones(m, np.int64), np.zeros(m, np.int64), np.zeros(m, bool)
        numbered = np.flatnonzero(number >= 0)
        _, first, which = np.unique(number[numbered], return_index=True, return_inverse=True)
        told = [describe(i) for i in numbered[first].tolist()]  # (one node per step)
        if told:
            told = np.array(told, np.int64).reshape(-1, 6)[which.reshape(-1)]
            sig[numbered], const[numbered], keys[numbered], weight[numbered], \
                count[numbered], feed[numbered] = told.T
        unnumbered = np.flatnonzero(number < 0).tolist()
        for i in unnumbered:  # (the nodes no replay made)
            sig[i], const[i], keys[i], weight[i], count[i], feed[i] = describe(i)
        self._inputs = [i for i in unnumbered if nodes[i].op == "input"]
        #: the arguments of f at positions 0 to _args_in - 1 (where they lead the
        #: nodes, as a trace makes them; 0: none is read as one an iteration)
        self._args_in = len(self._inputs) if self._inputs == list(range(len(self._inputs))) \
            else 0
        at = self.pos.at
        if row_index:  # rows x[i]: numbered alike, keyed by their i
            rowpos = np.fromiter(row_index, np.int64, len(row_index))
            index = np.fromiter(row_index.values(), np.int64, len(row_index))
            rowpos = np.where(rowpos < len(at), at[np.minimum(rowpos, len(at) - 1)],
                              -1)  # (-1: not among the nodes)
            index, rowpos = index[rowpos >= 0], rowpos[rowpos >= 0]
            _, which = np.unique(index, return_inverse=True)
            keys[rowpos] = len(table) + which.reshape(-1)  # (the table's ints end there)
        for i in [self.pos[j] for j in fixed if j in self.pos]:  # (a copy of no other)
            sig[i] = sigs.setdefault(("fixed", i), len(sigs))
        self.sig, self.sig_array, self._weight = sig.tolist(), sig, weight
        #: the reads of an array at ints (``x[j]``): two copies may read two of one
        #: array made before their run (a loop over ``j``: stacked, one an iteration)
        self._feed = feed
        self._cum = None
        # the operands' positions, a row per node (-1 padded; none for a node
        # of more than WIDE operands), placed all at once
        # (C loops: map and chain, no Python per node; the counts are the steps')
        where = at[np.fromiter(map(_ID, chain.from_iterable(map(_ARGS, nodes))), np.int64,
                               int(count.sum()))]
        node = np.repeat(np.arange(m), count)
        col = np.arange(len(where)) - np.repeat(np.cumsum(count) - count, count)
        narrow = (count <= width)[node]
        used = max(int(count[count <= width].max(initial=1)), 1)  # (the columns needed)
        rows = np.full((m, used), -1, np.int64)
        rows[node[narrow], col[narrow]] = where[narrow]
        self._arrays = (rows, const, keys, np.flatnonzero(count > width))
        self._readers = np.bincount(where[where >= 0], minlength=m)  # (its readers)
        # a read at ints (``x[j]``) counts with its first reader, the step it was
        # made for: moved in front of the run (hoist_constants_and_reads), it is still
        # that step's node in the unrolled program the thresholds weigh
        reads = np.flatnonzero(feed)
        if len(reads):
            first = np.full(m, m, np.int64)
            real = where >= 0
            np.minimum.at(first, where[real], node[real])
            to = first[reads]
            has = to < m
            np.add.at(weight, to[has], weight[reads[has]])
            weight[reads[has]] = 0
        self._columns = self._varies = None  # (:meth:`matches`' own, made on first use)
        self._kinds = self._fed_columns = None
        self._wide_at = {}  # a wide node's position -> its operands' positions

    def hoist_constants_and_reads(self):
        """Move the inputs, then the constants that :data:`MIN_TRIPS` or more
        nodes read, to the front of the nodes (each group in its order), and
        each read at ints (``x[j]``, ``A[i, j]``) to right after the array it
        reads; return the nodes in their new order (the list itself when none
        moves).  The trace makes a literal (``0.5 * dt``) or captures an array
        where the first iteration uses it, and the later ones share it, which
        would keep the first iteration out of the run.  (A constant of one
        iteration -- ``t = k dt`` -- has few readers and stays in place: the
        loop takes its copies as a per-iteration input.)  Likewise the trace
        merges equal reads: in ``out[i] = x[i - 1] - 2 x[i] + x[i + 1]``
        iteration ``i`` makes only ``x[i + 1]`` and reads the other two from
        the iterations before it, two of them back, which no loop carries;
        made right after ``x`` (a read is pure, and no op writes ``x`` in
        place), every iteration reads its three elements made before the run
        -- a per-iteration input, stacked (:meth:`fed_rows`).  The tables
        follow the new order."""
        rows, const, keys, wide = self._arrays
        shared = np.flatnonzero(const & (self._readers >= MIN_TRIPS)).tolist()
        front = self._inputs + shared
        m = len(self.nodes)
        reads = np.flatnonzero(self._feed & (rows[:, 0] >= 0))
        if len(reads):
            written = {self.pos.get(n.args[0].id, -1) for n in self.nodes
                       if n.op in _INPLACE and n.args}
            if written:
                reads = reads[~np.isin(rows[reads, 0], np.fromiter(written, np.int64))]
        # where each node goes: the front first (keys -F..-1), a read half a
        # place after the array it reads (after the front at the earliest:
        # the inputs lead), the rest in order
        key = np.arange(m, dtype=np.float64)
        key[front] = np.arange(-len(front), 0, dtype=np.float64)
        for _ in range(2):  # (a read of a read: after its operand's new place)
            key[reads] = np.maximum(key[rows[reads, 0]], -1.0) + 0.5
        order = np.argsort(key, kind="stable")
        moved = np.flatnonzero(order != np.arange(m))
        if not len(moved):
            return self.nodes
        self._args_in = len(self._inputs)  # (first, in their order)
        k = int(moved[-1]) + 1  # (only the prefix up to the last node moved changes)
        order = order[:k]
        new = np.arange(m)  # old position -> new position
        new[order] = np.arange(k)
        for a in (rows, const, keys, self.sig_array, self._weight, self._feed, self._readers):
            a[:k] = a[order]
        rows[rows >= 0] = new[rows[rows >= 0]]
        self._arrays = (rows, const, keys, np.sort(new[wide]))
        self._columns = self._varies = self._cum = self._kinds = self._fed_columns = None
        self._wide_at = {}
        self.sig[:k] = self.sig_array[:k].tolist()
        order = order.tolist()
        nodes = self.nodes = [self.nodes[q] for q in order] + self.nodes[k:]
        self._ids[:k] = [self._ids[q] for q in order]
        self.pos.at[self._ids[:k]] = np.arange(k)
        return nodes

    def key(self, i):
        node = self.nodes[i]
        k = self._keys.get(id(node.attrs))
        if k is None:  # (by the attrs dict, which the calls a trace replayed share:
            # held beside its key, so that its id is not reused)
            k = self._keys[id(node.attrs)] = (node.attrs, _attrs_key(node))
        return k[1]

    def match(self, i, p):
        """None (no), "same" (copies with equal attributes) or "leaf" (every
        operand invariant, attributes or value differing)."""
        if self.sig[i] != self.sig[i + p]:
            return None
        a, b = self.nodes[i], self.nodes[i + p]
        invariant = True
        for x, y in zip(a.args, b.args, strict=True):
            if x is y:
                continue
            if self.pos[y.id] - self.pos[x.id] < p and not self.varying_input(x, y) and \
                    not self.fed_rows(x, y):
                return None  # (more: a carry's initial value, which the trip count's
            invariant = False  # first iteration reads; see _trim)
        if a.op != "const" and self.key(i) == self.key(i + p):
            return "same"
        return "leaf" if invariant else None

    def primitives(self, s, p):
        """How many nodes positions ``s:s + p`` (arrays of starts, or an int)
        hold once composites are lowered (:data:`PRIMITIVES`)."""
        if self._cum is None:
            self._cum = np.concatenate(([0], np.cumsum(self._weight)))
        return self._cum[s + p] - self._cum[s]

    def varying_input(self, x, y):
        """Whether operands ``x`` and ``y`` of two copies are two arguments of
        ``f`` (``for W in Ws``, ``Ws`` a list argument: the loop reads them
        stacked, a row an iteration).  (The inputs are the first positions.)"""
        n = self._args_in
        return x is not y and self.pos.get(x.id, n) < n and self.pos.get(y.id, n) < n

    def fed_rows(self, x, y, s=None):
        """Whether operands ``x`` and ``y`` of two copies are reads at ints of
        one array (``x[j]``, ``x[j + 1]``) or two constants alike, both made
        before position ``s`` (a run's start: the loop reads them stacked, one
        an iteration; a constant that many nodes of an iteration read -- ``t +
        1`` in a loop over ``t`` around one over ``i`` -- stands before the
        run, :meth:`hoist_constants_and_reads`); ``s`` None: wherever they are."""
        px, py = self.pos.get(x.id, -1), self.pos.get(y.id, -1)
        if s is not None and not (px < s and py < s):
            return False
        return bool(self._fed_pairs(np.array([px]), np.array([py]))[0])

    def _fed_pairs(self, x, y):
        """:meth:`fed_rows` of the operand positions ``x`` and ``y`` (arrays,
        -1 for none), all at once, without the bound on where they are."""
        kind = self._feed_kinds()
        real = (x >= 0) & (y >= 0) & (x != y)
        kx, ky = kind[np.where(real, x, 0)], kind[np.where(real, y, 0)]
        return real & (kx == ky) & (kx != 0)

    def _feed_kinds(self):
        """Per position: what two operands must share to be stacked one an
        iteration (:meth:`fed_rows`) -- a read at ints, its array's position
        plus 1; a constant, minus its kind's number minus 1 -- or 0 (made at
        the positions of the nodes now: after :meth:`hoist_constants_and_reads`)."""
        if self._kinds is None:
            rows, const, _, _ = self._arrays
            self._kinds = np.where(self._feed, rows[:, 0] + 1,
                                   np.where(const, -self.sig_array - 1, 0))
        return self._kinds

    def _tables(self):
        """(operand positions, -1 padded; whether a node is a constant; its
        attributes' key as an int; nodes with more than :data:`WIDE` operands)."""
        return self._arrays

    def matches(self, p):
        """``ok[i]`` for every ``i < len(nodes) - p``: whether :meth:`match`
        ``(i, p)`` is not None, all at once."""
        _, const, keys, wide = self._tables()
        if self._columns is None:  # (an operand position per column, contiguous: its
            # slices are read at each period; 32-bit, half the memory to go through)
            self._columns = np.ascontiguousarray(self._arrays[0].T, np.int32)
            self._varies = ~const
            kind = self._feed_kinds()  # (per column, what its operands must share to be
            self._fed_columns = [np.where(x >= 0, kind[np.maximum(x, 0)], 0)  # stacked)
                                 for x in self._columns]
        sig = self.sig_array
        n = len(sig) - p
        ok = sig[:-p] == sig[p:]
        invariant = np.ones(n, bool)
        d, same, far = np.empty(n, np.int32), np.empty(n, bool), np.empty(n, bool)
        args_in = self._args_in
        for x, fed in zip(self._columns, self._fed_columns, strict=True):  # the operands,
            # copy after copy: the same value, or
            np.subtract(x[p:], x[:-p], out=d)  # one made a period or more later
            np.equal(d, 0, out=same)  # (both -1: no operand)
            np.greater_equal(d, p, out=far)
            far |= same
            if args_in:  # or an argument of f each (``for W in Ws``: stacked)
                far |= (x[:-p] >= 0) & (x[:-p] < args_in) & (x[p:] >= 0) & (x[p:] < args_in)
            # or reads at ints of one array (``x[j]``) or constants alike: stacked
            far |= (fed[:-p] == fed[p:]) & (fed[:-p] != 0)
            ok &= far
            invariant &= same
        ok &= invariant | (self._varies[:-p] & (keys[:-p] == keys[p:]))
        for i in wide[wide < len(ok)].tolist():
            ok[i] = self._wide_match(i, p)
        return ok

    def _wide_match(self, i, p):
        """:meth:`match` ``(i, p)`` is not None, for a node of more than
        :data:`WIDE` operands (a stack of a row's elements: 60 and more), its
        operands compared as arrays (their positions made once per node)."""
        if self.sig[i] != self.sig[i + p]:
            return False
        px, py = self._operand_positions(i), self._operand_positions(i + p)
        same = px == py
        if not same.all():
            bad = ~same & (py - px < p)
            if bad.any():
                n = self._args_in
                if n:
                    bad &= ~((px < n) & (py < n))  # (two arguments of f: varying_input)
                bad &= ~self._fed_pairs(px, py)
                if bad.any():
                    return False
        const = self._arrays[1]
        if not const[i] and self.key(i) == self.key(i + p):
            return True
        return bool(same.all())

    def _operand_positions(self, i):
        got = self._wide_at.get(i)
        if got is None:
            ids = np.fromiter(map(_ID, self.nodes[i].args), np.int64)
            got = self._wide_at[i] = self.pos.at[ids]
        return got


def _at_ints(node):
    """Whether getitem ``node`` reads its operand at ints alone (``x[j]``, ``A[i, j]``)."""
    index = node.attrs.get("index")
    return type(index) is tuple and all(type(k) is int for k in index)


def _best_run(nodes, rejected, light=(), keys=None, fixed=frozenset(), steps=None,
              rows=None, matcher=None):
    """``(start, period, trips)`` of the run covering the most nodes (or
    None), and the matcher that found it (its positions and tables serve
    :func:`_roll`).  No run holds a node whose id is in ``fixed``.  ``matcher``:
    one made of ``nodes`` already.

    Whole arrays at a time (numpy): a trace of 10^4 iterations has 10^5
    nodes and more, and each candidate period is checked at every node."""
    n = len(nodes)
    if n < MIN_NODES and primitive_count(nodes) < MIN_NODES:
        return None, None
    m = matcher if matcher is not None else \
        _Matcher(nodes, {} if keys is None else keys, fixed, steps, rows)
    best = None
    for p in _periods(m.sig_array):
        ok = m.matches(p)  # ok[i]: node i + p copies node i
        # the stretches of copies: a run of t trips has (t - 1) p of them
        edges = np.flatnonzero(np.diff(np.concatenate(([0], ok.view(np.int8), [0]))))
        starts, stops = edges[::2], edges[1::2]
        counts = (stops - starts) // p + 1
        long = (counts >= MIN_TRIPS) & \
            (counts * m.primitives(starts, p) >= MIN_NODES)  # (trimming only shortens)
        for i, trips in zip(starts[long].tolist(), counts[long].tolist(), strict=True):
            if best is not None and (trips * p, -p) <= (best[1] * best[2], -best[1]):
                continue  # (nor can it beat the best run: a multiple of its period)
            run = _trim(m, i, p, trips)
            if run is not None and (nodes[run[0]].id, p) not in rejected and \
                    not _in_light(m.pos, run, light):
                covered = run[1] * run[2]
                if best is None or covered > best[1] * best[2] or \
                        covered == best[1] * best[2] and run[1] < best[1]:
                    best = run
    return best, m


def _periods(sig):
    """Candidate periods, most frequent first (ties: the shorter): distances
    from each node to the next :data:`_REACH` of its kind (a step that calls
    one function four times repeats its nodes within the step: the step's
    period is the distance to the fourth next one) that leave room for
    :data:`MIN_TRIPS` trips."""
    n = len(sig)
    order = np.argsort(sig, kind="stable")  # positions grouped by kind, increasing
    kinds = sig[order]
    gaps = []
    for k in range(1, _REACH + 1):
        if k >= n:
            break
        d = order[k:] - order[:-k]
        gaps.append(d[(kinds[k:] == kinds[:-k]) & (d * MIN_TRIPS <= n)])
    if not gaps:
        return []
    counts = np.bincount(np.concatenate(gaps))  # (gaps < n: counted, not sorted)
    values = np.flatnonzero(counts >= MIN_TRIPS - 1)
    counts = counts[values]
    top = values[np.lexsort((values, -counts))[:_CANDIDATES]].tolist()
    tried = set(top)
    return top + [p for p in _regular_gaps(order, kinds, n) if p not in tried]


def _regular_gaps(order, kinds, n):
    """The distance between consecutive nodes of a kind that recurs at one
    distance only, :data:`MIN_TRIPS` times or more (the longest first, at
    most :data:`_CANDIDATES`): a step that differs every k-th iteration
    (``if k % 10 == 0``) repeats k steps at a time, a period the nodes of
    every step -- each of its kind k times a period, past :data:`_REACH` --
    do not show, but the nodes of the odd step do."""
    if len(order) < 2:
        return []
    d = order[1:] - order[:-1]
    same = kinds[1:] == kinds[:-1]
    d, group = d[same], kinds[1:][same]
    if not len(d):
        return []
    starts = np.flatnonzero(np.concatenate(([True], group[1:] != group[:-1])))
    lo, hi = np.minimum.reduceat(d, starts), np.maximum.reduceat(d, starts)
    count = np.diff(np.concatenate((starts, [len(d)])))
    regular = (lo == hi) & (count >= MIN_TRIPS - 1) & (lo > _REACH) & (lo * MIN_TRIPS <= n)
    return sorted(set(lo[regular].tolist()), reverse=True)[:_CANDIDATES]


def _in_light(pos, run, light):
    """Whether ``run`` repeats, a few steps at a time, a run found too light
    to roll (a body of k light steps would only hide the per-step cost)."""
    s, p, _ = run
    return any(p % p0 == 0 and pos[first] <= s <= pos[last] for first, last, p0 in light)


def _trim(m, s, p, trips):
    """The run of ``trips`` iterations of ``p`` nodes from ``s``, less the
    leading iterations up to an invariant that the run itself computes (the
    trace merged its copies into the first), or None when what is left is too
    short or an iteration reads a value made two or more iterations before."""
    while trips >= MIN_TRIPS and trips * int(m.primitives(s, p)) >= MIN_NODES:
        cut = _invariant_cut(m, s, p, s + trips * p)
        if cut is None:
            return None
        if cut < s:
            return s, p, trips
        shift = (cut - s) // p + 1
        s, trips = s + shift * p, trips - shift
    return None


def _invariant_cut(m, s, p, end):
    """The last position of an invariant operand that nodes ``s:end`` read
    (-1 if none), or None when an iteration reads what it may not: a value
    made two or more iterations before, or a carry's initial value other
    than in the first iteration (each node compared with its copy in the
    next iteration; the last iteration's with the one before)."""
    args, _, _, wide = m._tables()
    rows = np.arange(s, end)
    it = (rows - s) // p
    partner = np.where(rows + p < end, rows + p, rows - p)
    x, y = args[rows], args[partner]
    real = x >= 0
    inv = real & (x == y)
    first = (it == 0)[:, None] & (x < s)  # a carry's initial value, made before the run
    args_in = m._args_in  # (arguments of f, one an iteration: stacked, not carried)
    fed = m._fed_pairs(x, y) & (x < s) & (y < s)  # (x[j] of one array, one an iteration)
    moving = real & ~inv & ~((x < args_in) & (y >= 0) & (y < args_in)) & ~fed
    bad = moving & first & ((y < s) | (y >= s + p))
    bad |= moving & ~first & ((x < s + (it[:, None] - 1) * p) |
                              ((it[:, None] > 0) & (y - x != p) & (y - x != -p)))
    narrow = np.ones(len(rows), bool)
    inside = wide[(wide >= s) & (wide < end)]
    narrow[inside - s] = False
    if (bad & narrow[:, None]).any():
        return None
    cut = int(x[inv & narrow[:, None]].max(initial=-1))
    rest = _node_cut(m, s, p, end, inside.tolist())  # nodes with many operands
    return None if rest is None else max(cut, rest)


def _node_cut(m, s, p, end, rows):
    """:func:`_invariant_cut` of the nodes at ``rows`` alone, one by one
    (its definition)."""
    nodes, pos, cut = m.nodes, m.pos, -1
    for i in rows:
        k = (i - s) // p
        j = i + p if i + p < end else i - p
        for a, b in zip(nodes[i].args, nodes[j].args, strict=True):
            q = pos[a.id]
            if a is b:
                cut = max(cut, q)
            elif m.varying_input(a, b) or m.fed_rows(a, b, s):
                continue
            elif k == 0 and q < s:
                if not s <= pos[b.id] < s + p:
                    return None
            elif q < s + (k - 1) * p or k > 0 and pos[b.id] - q not in (p, -p):
                return None
    return cut
