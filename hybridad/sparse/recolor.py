"""Fewer colors than a greedy gives: the improvement passes behind the
``"best"`` colorings of :mod:`hybridad.sparse.coloring` (distance-1
colorings of a graph in CSR form, no diagonal), in this order:

* **Lattice colorings** (structure-aware): patterns of stencils on grids are
  translation invariant in the flat index, so a coloring that depends only on
  ``(v mod k, floor(v / r) mod k, ...)`` for the pattern's frequent index
  offsets ``r`` (its row lengths, its block sizes) can work: the *quotient*
  graph of those residue classes (``k^d`` vertices) is colored instead, and
  any proper coloring of it lifts to a proper coloring of the graph (every
  edge maps to a quotient edge).  ``k`` runs up from the lower bound, so a
  5-point stencil gets the perfect 5-coloring ``(i + 2 j) mod 5``.  Tried on
  a sample of the vertices first (cheap: most tries end there).
* **Recursive largest first** (the costliest start: only where colors times
  edges stays below :data:`RLF_WORK`); of as many colors, the coloring with
  the smaller smallest class is kept (it starts the tabu search better).
* **Iterated greedy** (Culberson 1992): the greedy again, visiting the
  vertices grouped by color class (the classes in reverse order, or by
  decreasing size) -- never more colors than before; a few passes.
* **Tabu search** (TabuCol, Hertz & de Werra 1987, with Galinier & Hao's
  tenure): drop the smallest color class onto the others (the fewest
  conflicts), then move conflicting vertices to their best non-tabu color
  (among 64 of them drawn at random while there are more) until no edge is
  monochromatic; repeat one color fewer at a time.  Work (vertex-colors
  scanned plus edges updated) is budgeted and a stall ends a try, so the time
  stays bounded; the pseudo-random tie-breaks are seeded.

Everything is deterministic and bounded by work counts, never by the clock.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from .._libcache import install

__all__ = ["improve"]

#: work (vertex-colors scanned and edges updated) that all tabu tries may
#: spend together: ``TABU_WORK * nnz + TABU_BASE`` (about 0.1 s per 10^7 on
#: one core)
TABU_WORK, TABU_BASE = 12, 4_000_000
#: a tabu try ends after this many moves without fewer conflicts
#: (``max(TABU_PATIENCE, n // 8)``)
TABU_PATIENCE = 20_000
#: recursive largest first runs where colors (so far) times edges is at most
#: ``RLF_WORK`` and the edges at most ``RLF_NNZ`` (it takes about 1 s at 10^8 on
#: a stencil's graph, several on a random graph of 10^7 edges)
RLF_WORK, RLF_NNZ = 200_000_000, 1 << 24
#: a move is the best among all conflicting vertices' while there are at most
#: this many, else among this many drawn at random
TABU_SCAN = 64
#: the most ``vertices * colors`` a tabu search holds tables for (two int32)
TABU_CELLS = 1 << 24
#: the most quotient-graph vertices (residue classes) a lattice coloring tries
QUOTIENT_MAX = 2048
#: the most quotient graphs a lattice coloring makes
LATTICE_TRIES = 200
#: sample windows of consecutive vertices (count, length) for offsets and the
#: quick quotient check
WINDOWS, WINDOW = 8, 2048
#: iterated greedy's passes (it stops after two without fewer colors)
IG_PASSES = 6
#: the most frequent index offsets tried as radices of lattice colorings
RADICES = 8


# ----------------------------------------------------------------------------
# iterated greedy
# ----------------------------------------------------------------------------
def _class_order(colors, rule):
    k = int(colors.max()) + 1
    if rule == 0:  # the classes in reverse order
        rank = np.arange(k - 1, -1, -1)
    else:  # the largest classes first
        sizes = np.bincount(colors, minlength=k)
        rank = np.empty(k, np.int64)
        rank[np.argsort(-sizes, kind="stable")] = np.arange(k)
    return np.argsort(rank[colors], kind="stable").astype(np.int64)


def iterated_greedy(indptr, indices, colors, greedy, passes=IG_PASSES):
    """Culberson's iterated greedy: each pass never uses more colors; stops after
    two passes without fewer."""
    best, stale = colors, 0
    for t in range(passes):
        colors = greedy(indptr, indices, _class_order(colors, t % 2))
        if colors.max() < best.max():
            best, stale = colors, 0
        else:
            stale += 1
            if stale >= 2:
                break
    return best


# ----------------------------------------------------------------------------
# tabu search
# ----------------------------------------------------------------------------
install()  # numba's cache of the functions below: stamped with their imports' source


@njit(cache=True)
def _drop(indptr, indices, colors):  # pragma: no cover - numba
    """``colors`` (``0 .. k - 1``) less its smallest class: those vertices take,
    in index order, the color with the fewest neighbors (the lowest of ties)."""
    n = colors.size
    k = 0
    for v in range(n):
        k = max(k, colors[v] + 1)
    sizes = np.zeros(k, np.int64)
    for v in range(n):
        sizes[colors[v]] += 1
    s = 0
    for c in range(k):
        if sizes[c] < sizes[s]:
            s = c
    out = np.empty(n, np.int64)
    for v in range(n):
        c = colors[v]
        out[v] = -1 if c == s else (c if c < s else c - 1)
    count = np.zeros(k, np.int64)
    for v in range(n):
        if out[v] >= 0:
            continue
        count[:] = 0
        for p in range(indptr[v], indptr[v + 1]):
            c = out[indices[p]]
            if c >= 0:
                count[c] += 1
        b = 0
        for c in range(k - 1):
            if count[c] < count[b]:
                b = c
        out[v] = b
    return out


@njit(cache=True)
def _tabu(indptr, indices, colors, k, budget, patience, seed):  # pragma: no cover - numba
    """TabuCol from ``colors`` (``0 .. k - 1``, conflicts allowed): returns the
    colors, the conflicts left (0: a proper ``k``-coloring) and the work done."""
    n = indptr.size - 1
    colors = colors.copy()
    gamma = np.zeros((n, k), np.int32)  # neighbors of v with color c
    for v in range(n):
        for p in range(indptr[v], indptr[v + 1]):
            gamma[v, colors[indices[p]]] += 1
    tabu = np.zeros((n, k), np.int32)  # (v, c) tabu before this move
    pos = np.full(n, -1, np.int64)
    conflicted = np.empty(n, np.int64)
    cnt = 0
    conf = 0
    for v in range(n):
        g = gamma[v, colors[v]]
        if g > 0:
            conf += g
            pos[v] = cnt
            conflicted[cnt] = v
            cnt += 1
    conf //= 2
    work = indptr[n] + n
    best, since, it = conf, 0, 0
    state = np.uint64(0x9E3779B97F4A7C15) ^ np.uint64(seed)
    while conf > 0 and work < budget and since < patience and it < 2_000_000_000:
        it += 1
        bd, bv, bc, ties = 1 << 30, -1, -1, 0
        sampled = cnt > TABU_SCAN
        for t in range(TABU_SCAN if sampled else cnt):
            if sampled:  # many conflicts: the best move among a random few
                state ^= state << np.uint64(13)
                state ^= state >> np.uint64(7)
                state ^= state << np.uint64(17)
                v = conflicted[np.int64(state % np.uint64(cnt))]
            else:
                v = conflicted[t]
            cv = colors[v]
            gv = gamma[v, cv]
            for c in range(k):
                if c == cv:
                    continue
                d = gamma[v, c] - gv
                if d > bd or tabu[v, c] >= it and conf + d >= best:
                    continue  # (a tabu move only where it beats the best: aspiration)
                if d < bd:
                    bd, bv, bc, ties = d, v, c, 1
                else:
                    ties += 1
                    state ^= state << np.uint64(13)
                    state ^= state >> np.uint64(7)
                    state ^= state << np.uint64(17)
                    if state % np.uint64(ties) == 0:
                        bv, bc = v, c
        work += TABU_SCAN * k * 4 if sampled else cnt * k  # (random picks: cache misses)
        if bv < 0:  # every move tabu: let the tenures run out
            since += 1
            continue
        old = colors[bv]
        colors[bv] = bc
        conf += bd
        for p in range(indptr[bv], indptr[bv + 1]):
            w = indices[p]
            gamma[w, old] -= 1
            gamma[w, bc] += 1
            hot = gamma[w, colors[w]] > 0
            if hot and pos[w] < 0:
                pos[w] = cnt
                conflicted[cnt] = w
                cnt += 1
            elif not hot and pos[w] >= 0:
                q, last = pos[w], conflicted[cnt - 1]
                conflicted[q] = last
                pos[last] = q
                cnt -= 1
                pos[w] = -1
        work += indptr[bv + 1] - indptr[bv]
        hot = gamma[bv, bc] > 0
        if hot and pos[bv] < 0:
            pos[bv] = cnt
            conflicted[cnt] = bv
            cnt += 1
        elif not hot and pos[bv] >= 0:
            q, last = pos[bv], conflicted[cnt - 1]
            conflicted[q] = last
            pos[last] = q
            cnt -= 1
            pos[bv] = -1
        state ^= state << np.uint64(13)
        state ^= state >> np.uint64(7)
        state ^= state << np.uint64(17)
        tabu[bv, old] = it + cnt * 6 // 10 + np.int64(state % np.uint64(10))
        if conf < best:
            best, since = conf, 0
        else:
            since += 1
    return colors, conf, work


def _tabu_fits(n, k):
    return n * k <= TABU_CELLS


# ----------------------------------------------------------------------------
# lattice colorings: a coloring of residue classes
# ----------------------------------------------------------------------------
@njit(cache=True)
def _class_of(v, k, radices):  # pragma: no cover - numba
    c, mul = v % k, k
    for r in radices:
        c += mul * ((v // r) % k)
        mul *= k
    return c


@njit(cache=True)
def _classes(n, k, radices):  # pragma: no cover - numba
    cls = np.empty(n, np.int64)
    for v in range(n):
        cls[v] = _class_of(v, k, radices)
    return cls


@njit(cache=True)
def _quotient(indptr, indices, k, radices, size, starts, length):  # pragma: no cover - numba
    """The quotient graph's adjacency (``size x size`` booleans) over the
    vertices ``starts[i] .. starts[i] + length - 1``; ``ok`` False when an edge
    joins two vertices of one class (no coloring of the classes then)."""
    adj = np.zeros((size, size), np.bool_)
    n = indptr.size - 1
    for s in starts:
        for v in range(s, min(s + length, n)):
            a = _class_of(v, k, radices)
            for p in range(indptr[v], indptr[v + 1]):
                b = _class_of(indices[p], k, radices)
                if a == b:
                    return adj, False
                adj[a, b] = True
                adj[b, a] = True
    return adj, True


@njit(cache=True)
def _quotient_of(indptr, indices, cls, size):  # pragma: no cover - numba
    """:func:`_quotient` over all vertices, their classes ``cls`` given."""
    adj = np.zeros((size, size), np.bool_)
    for v in range(indptr.size - 1):
        a = cls[v]
        for p in range(indptr[v], indptr[v + 1]):
            b = cls[indices[p]]
            if a == b:
                return adj, False
            adj[a, b] = True
    return adj, True


def _csr_of(adj):
    rows, cols = np.nonzero(adj)
    indptr = np.zeros(adj.shape[0] + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=adj.shape[0]), out=indptr[1:])
    return indptr, cols.astype(np.int64)


def _color_small(indptr, indices, k, rlf):
    """A proper coloring of a small graph with at most ``k`` colors, or None."""
    order = np.argsort(-np.diff(indptr), kind="stable").astype(np.int64)
    colors = rlf(indptr, indices, order)
    budget = 40 * int(indptr[-1]) + 20_000
    while colors.max(initial=-1) + 1 > k:
        start = _drop(indptr, indices, colors)
        colors, conf, _ = _tabu(indptr, indices, start, int(start.max()) + 1, budget, 500, 1)
        if conf:
            return None
    return colors


def _windows(n):
    if n <= WINDOWS * WINDOW:
        return np.zeros(1, np.int64), n
    return np.linspace(0, n - WINDOW, WINDOWS).astype(np.int64), WINDOW


def _offsets(indptr, indices, starts, length, top=RADICES):
    """The index offsets ``w - v > 1`` (``v`` in the sample windows) that at
    least a quarter of the sampled vertices have: the grid's row lengths, its
    block sizes -- the most frequent first (ties: the smallest)."""
    n = indptr.size - 1
    found, sampled = [], 0
    for s in starts:
        e = min(int(s) + length, n)
        rows = np.repeat(np.arange(s, e), np.diff(indptr[s:e + 1]))
        d = indices[indptr[s]:indptr[e]] - rows
        found.append(d[d > 1])
        sampled += e - int(s)
    d = np.concatenate(found)
    if d.size == 0:
        return []
    values, counts = np.unique(d, return_counts=True)
    keep = np.argsort(-counts, kind="stable")[:top]
    return [int(values[i]) for i in keep if counts[i] * 4 >= sampled]


def _radix_sets(radices):
    sets = [()] + [(r,) for r in radices]
    sets += [(a, b) for i, a in enumerate(radices) for b in radices[i + 1:]]
    return sets


def lattice(indptr, indices, bound, upper, rlf):
    """A lattice coloring with fewer than ``upper`` colors (the fewest tried,
    from ``bound`` up), or None.  Each try colors the quotient graph of a
    sample of the vertices first; only where that works is the whole graph's
    quotient made and colored."""
    n = indptr.size - 1
    starts, length = _windows(n)
    radices = _offsets(indptr, indices, starts, length)
    tries = 0
    for k in range(max(bound, 1), upper):
        for rs in _radix_sets(radices):
            size = k ** (len(rs) + 1)
            if size > QUOTIENT_MAX:
                continue
            tries += 1
            if tries > LATTICE_TRIES:
                return None
            rad = np.array(rs, np.int64)
            adj, ok = _quotient(indptr, indices, k, rad, size, starts, length)
            found = _color_small(*_csr_of(adj), k, rlf) if ok else None
            if found is None:
                continue
            cls = _classes(n, k, rad)
            if length < n:  # (the sample's: now all vertices')
                adj, ok = _quotient_of(indptr, indices, cls, size)
                found = _color_small(*_csr_of(adj), k, rlf) if ok else None
            if found is not None:
                return found[cls]
    return None


# ----------------------------------------------------------------------------
# all together
# ----------------------------------------------------------------------------
def _key(colors):
    """Fewer colors first; then the smallest class: the fewest vertices to move
    when it is dropped."""
    return int(colors.max()) + 1, int(np.bincount(colors).min())


def improve(indptr, indices, colors, bound, greedy, rlf, rlf_start):
    """Fewer colors for the proper coloring ``colors`` of the graph (CSR
    without diagonal), never below ``bound``: a lattice coloring; else the
    better of ``colors`` and ``rlf_start()`` (recursive largest first, the
    costliest start, made only here); iterated greedy; then tabu search, one
    color fewer at a time."""
    n = indptr.size - 1
    bound = max(bound, 1)
    if n == 0 or colors.max() + 1 <= bound:
        return colors
    found = lattice(indptr, indices, bound, int(colors.max()) + 1, rlf)
    if found is not None:
        colors = found
    if colors.max() + 1 > bound:
        nnz = int(indptr[n])
        if (colors.max() + 1) * nnz <= RLF_WORK and nnz <= RLF_NNZ:
            other = rlf_start()  # (as many colors: the smaller last class starts tabu better)
            if _key(other) < _key(colors):
                colors = other
        colors = iterated_greedy(indptr, indices, colors, greedy)
    k = int(colors.max()) + 1
    budget = TABU_WORK * int(indptr[n]) + TABU_BASE
    patience = max(TABU_PATIENCE, n // 8)
    tries = 0
    while k > bound and budget > 0 and _tabu_fits(n, k - 1):
        new, conf, work = _tabu(indptr, indices, _drop(indptr, indices, colors), k - 1, budget,
                                patience, tries)
        budget -= work
        tries += 1
        if conf:
            break
        colors, k = new, k - 1
    return colors
