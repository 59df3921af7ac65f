"""Coloring: which columns (or rows) of a sparse Jacobian, and which columns of
a sparse Hessian, can share one seed of a compressed pass; and the index
arrays that read each structural nonzero back out of the compressed result.

* **Jacobians** -- a distance-1 coloring of the *column intersection graph*
  (columns adjacent when some row holds both; ``P^T P``): same-colored
  columns never meet in a row, so ``J @ S`` (``S`` the ``n x c`` seed matrix,
  ``S[j, color[j]] = 1``) holds each ``J[i, j]`` alone at ``(i, color[j])``.
  Rows are the same on ``P P^T`` (``S^T @ J`` in reverse mode).  Greedy, in
  a vertex order: ``largest_first`` (by degree), ``smallest_last``
  (Matula-Beck degeneracy order) or ``natural``; or recursive largest first
  (``rlf``, Leighton 1979: one color class at a time, a maximal independent
  set that excludes as many already-excluded vertices as it can -- two
  colors fewer than any greedy order on the Brusselator's coupled 5-point
  stencils); ``best`` tries the greedy orders, then improves on the fewest
  (:mod:`.recolor`: a lattice coloring of the index's residue classes, RLF,
  Culberson's iterated greedy, tabu search -- 7 colors on the Brusselator,
  where the densest row has 6).
* **Hessians** -- a *star coloring* of the adjacency graph of ``H`` (a
  distance-1 coloring in which every path on four vertices uses at least
  three colors; Gebremedhin, Manne & Pothen, SIAM Review 47 (2005), the
  greedy of their algorithm 4.1): for every ``H[i, j]`` either ``j``'s color
  appears only at ``j`` among the neighbors of ``i``, or ``i``'s only at
  ``i`` among those of ``j`` -- so ``H @ S`` holds ``H[i, j]`` alone at
  ``(i, color[j])`` or at ``(j, color[i])`` (direct decompression; symmetry
  halves the colors of a distance-2 coloring).  ``best`` also tries a
  distance-2 coloring -- a star coloring too, the column coloring of the
  pattern with its diagonal, improved as above -- and keeps the fewer colors:
  the perfect ``(i + 2 j) mod 5`` on a 5-point stencil, 7 colors on the
  7-point one.

A column coloring (and a distance-2 one) needs at least as many colors as
the densest row has nonzeros (those columns are pairwise adjacent):
:func:`lower_bound`.  (A star coloring can need fewer: an arrow pattern takes
two.)

The loops are numba functions (compiled once, cached on disk): a greedy
coloring of a graph of 10^6 vertices takes tens of milliseconds; ``best``
spends work-bounded, deterministic effort on top (about 1.5 s for the
512 x 512 Brusselator's 524288 columns).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit

from .recolor import improve
from .._libcache import install

__all__ = ["METHODS", "ORDERS", "color_columns", "color_rows", "hessian_sources",
           "jacobian_sources", "lower_bound", "star_coloring"]

#: the vertex orders of the greedy colorings
ORDERS = ("natural", "largest_first", "smallest_last")
#: star colorings (``"best"``) also try a distance-2 coloring where its graph
#: has at most this many edges (the sum of the squared row lengths bounds them)
D2_MAX = 1 << 26
#: the Jacobian colorings: greedy in each order, and recursive largest first
#: (``"best"``: whichever gives the fewest colors)
METHODS = ORDERS + ("rlf",)


# ----------------------------------------------------------------------------
# the greedy loops
# ----------------------------------------------------------------------------
install()  # numba's cache of the functions below: stamped with their imports' source


@njit(cache=True)
def _greedy(indptr, indices, order):  # pragma: no cover - numba
    n = order.size
    colors = np.full(n, -1, np.int64)
    forbidden = np.full(n + 1, -1, np.int64)
    for v in order:
        for p in range(indptr[v], indptr[v + 1]):
            c = colors[indices[p]]
            if c >= 0:
                forbidden[c] = v
        c = 0
        while forbidden[c] == v:
            c += 1
        colors[v] = c
    return colors


@njit(cache=True)
def _star(indptr, indices, order):  # pragma: no cover - numba
    n = order.size
    colors = np.full(n, -1, np.int64)
    forbidden = np.full(n + 1, -1, np.int64)
    for v in order:
        for p in range(indptr[v], indptr[v + 1]):
            w = indices[p]
            if w != v and colors[w] >= 0:
                forbidden[colors[w]] = v
        for p in range(indptr[v], indptr[v + 1]):
            w = indices[p]
            if w == v:
                continue
            cw = colors[w]
            for q in range(indptr[w], indptr[w + 1]):
                x = indices[q]
                if x == v or x == w:
                    continue
                cx = colors[x]
                if cx < 0 or forbidden[cx] == v:
                    continue
                if cw < 0:
                    # w is colored later: v and x (both its neighbors) must differ
                    forbidden[cx] = v
                else:
                    # v-w-x-y two-colored if some y (another neighbor of x) has w's color
                    for r in range(indptr[x], indptr[x + 1]):
                        y = indices[r]
                        if y != w and y != x and colors[y] == cw:
                            forbidden[cx] = v
                            break
        c = 0
        while forbidden[c] == v:
            c += 1
        colors[v] = c
    return colors


@njit(cache=True)
def _smallest_last(indptr, indices):  # pragma: no cover - numba
    n = indptr.size - 1
    deg = np.empty(n, np.int64)
    top = 0
    for v in range(n):
        deg[v] = indptr[v + 1] - indptr[v]
        top = max(top, deg[v])
    head = np.full(top + 2, -1, np.int64)
    nxt = np.full(n, -1, np.int64)
    prv = np.full(n, -1, np.int64)
    for v in range(n):
        d = deg[v]
        nxt[v] = head[d]
        if head[d] >= 0:
            prv[head[d]] = v
        head[d] = v
    done = np.zeros(n, np.bool_)
    order = np.empty(n, np.int64)
    low = 0
    for k in range(n - 1, -1, -1):
        while head[low] < 0:
            low += 1
        v = head[low]
        head[low] = nxt[v]
        if nxt[v] >= 0:
            prv[nxt[v]] = -1
        done[v] = True
        order[k] = v
        for p in range(indptr[v], indptr[v + 1]):
            w = indices[p]
            if done[w]:
                continue
            d = deg[w]
            # unlink w from bucket d, push it onto bucket d - 1
            if prv[w] >= 0:
                nxt[prv[w]] = nxt[w]
            else:
                head[d] = nxt[w]
            if nxt[w] >= 0:
                prv[nxt[w]] = prv[w]
            deg[w] = d - 1
            prv[w] = -1
            nxt[w] = head[d - 1]
            if head[d - 1] >= 0:
                prv[head[d - 1]] = w
            head[d - 1] = w
        low = max(low - 1, 0)
    return order


@njit(cache=True)
def _rlf(indptr, indices, order):  # pragma: no cover - numba
    """Recursive largest first (Leighton 1979): one color class at a time, each a
    maximal independent set grown by taking the candidate with the most
    neighbors among the vertices it already excludes (ties: the fewest among
    the candidates, then ``order``)."""
    n = indptr.size - 1
    top_deg = 0
    for v in range(n):
        top_deg = max(top_deg, indptr[v + 1] - indptr[v])
    width = top_deg + 1
    colors = np.full(n, -1, np.int64)
    state = np.zeros(n, np.int64)  # 0: candidate, 1: excluded from this class, 2: colored
    d_ex = np.zeros(n, np.int64)
    d_cand = np.zeros(n, np.int64)
    key = np.zeros(n, np.int64)
    head = np.full(width * width, -1, np.int64)
    nxt = np.full(n, -1, np.int64)
    prv = np.full(n, -1, np.int64)
    uncolored = np.empty(n, np.int64)  # uncolored neighbors: the candidates a class starts with
    for v in range(n):
        uncolored[v] = indptr[v + 1] - indptr[v]
    left, color = n, 0
    while left > 0:
        head[:] = -1
        for v in range(n):
            if state[v] != 2:
                state[v] = 0
                d_cand[v] = uncolored[v]
                d_ex[v] = 0
        top = 0
        for k in range(n - 1, -1, -1):
            v = order[k]
            if state[v] != 0:
                continue
            # where a class starts: the first, at a vertex of the largest degree;
            # the later ones where the fewest uncolored vertices are left around
            kk = d_cand[v] if color == 0 else top_deg - d_cand[v]
            key[v] = kk
            prv[v] = -1
            nxt[v] = head[kk]
            if head[kk] >= 0:
                prv[head[kk]] = v
            head[kk] = v
            top = max(top, kk)
        while True:
            while top >= 0 and head[top] < 0:
                top -= 1
            if top < 0:
                break
            v = head[top]
            head[top] = nxt[v]
            if nxt[v] >= 0:
                prv[nxt[v]] = -1
            colors[v] = color
            state[v] = 2
            left -= 1
            for p in range(indptr[v], indptr[v + 1]):
                w = indices[p]
                uncolored[w] -= 1
                if state[w] != 0:
                    continue
                kk = key[w]  # w leaves the candidates
                if prv[w] >= 0:
                    nxt[prv[w]] = nxt[w]
                else:
                    head[kk] = nxt[w]
                if nxt[w] >= 0:
                    prv[nxt[w]] = prv[w]
                state[w] = 1
                for q in range(indptr[w], indptr[w + 1]):
                    x = indices[q]
                    if state[x] != 0:
                        continue
                    d_ex[x] += 1
                    d_cand[x] -= 1
                    kk = key[x]
                    if prv[x] >= 0:
                        nxt[prv[x]] = nxt[x]
                    else:
                        head[kk] = nxt[x]
                    if nxt[x] >= 0:
                        prv[nxt[x]] = prv[x]
                    kk = d_ex[x] * width + (top_deg - d_cand[x])
                    key[x] = kk
                    prv[x] = -1
                    nxt[x] = head[kk]
                    if head[kk] >= 0:
                        prv[head[kk]] = x
                    head[kk] = x
                    top = max(top, kk)
        color += 1
    return colors


# ----------------------------------------------------------------------------
# orders and graphs
# ----------------------------------------------------------------------------
def _order(graph, name):
    n = graph.shape[0]
    if name == "natural":
        return np.arange(n, dtype=np.int64)
    if name == "largest_first":
        return np.argsort(-np.diff(graph.indptr), kind="stable").astype(np.int64)
    if name == "smallest_last":
        return _smallest_last(graph.indptr.astype(np.int64), graph.indices.astype(np.int64))
    raise ValueError(f"order must be one of {ORDERS} or 'best'; got {name!r}")


def _without_diagonal(g):
    g = sp.csr_array(g, dtype=bool, copy=True)
    g.setdiag(False)
    g.eliminate_zeros()
    g.sort_indices()
    return g


def _best(graph, order, color, names=ORDERS, bound=0):
    """The coloring ``order`` gives, or (``"best"``) the fewest colors of
    ``names``, tried in turn until one reaches ``bound`` -- for distance-1
    colorings, the cheap greedy orders, then :func:`.recolor.improve` (a lattice
    coloring, recursive largest first, iterated greedy, tabu search)."""
    if order != "best" and order not in names:
        raise ValueError(f"order must be one of {names} or 'best'; got {order!r}")
    indptr, indices = graph.indptr.astype(np.int64), graph.indices.astype(np.int64)

    def run(name):
        if name == "rlf":
            return _rlf(indptr, indices, _order(graph, "largest_first"))
        return color(indptr, indices, _order(graph, name))

    if order != "best":
        return run(order)
    best = None
    for name in names:
        if name == "rlf":
            continue  # (improve's start, where it is needed)
        colors = run(name)
        if best is None or colors.max(initial=-1) < best.max(initial=-1):
            best = colors
        if best.max(initial=-1) + 1 <= bound:
            return best
    if "rlf" in names:
        best = improve(indptr, indices, best, bound, _greedy, _rlf, lambda: run("rlf"))
    return best


def _uncolor_empty(colors, counts):
    """Columns without a nonzero need no seed: color -1, and the colors that
    are left renumbered ``0 .. c - 1``."""
    colors = np.where(counts > 0, colors, -1)
    used = np.unique(colors[colors >= 0])
    renumber = np.full(int(colors.max(initial=-1)) + 2, -1, np.int64)
    renumber[used] = np.arange(used.size)
    return renumber[colors]


def color_columns(pattern, order="best"):
    """Colors of the columns of a Jacobian pattern: no two columns of one color
    share a row.

    Parameters
    ----------
    pattern : scipy.sparse array or matrix, shape (m, n)
    order : {"best", "largest_first", "smallest_last", "natural", "rlf"}
        The greedy's vertex order, or ``"rlf"``: recursive largest first.

    Returns
    -------
    ndarray of int64, shape (n,)
        Colors ``0 .. c - 1`` (-1 for an empty column: it needs no seed).
    """
    p = sp.csr_array(pattern, dtype=bool)
    graph = _without_diagonal(p.T @ p)
    colors = _best(graph, order, _greedy, METHODS, lower_bound(p, 1))
    return _uncolor_empty(colors, np.bincount(p.indices, minlength=p.shape[1]))


def color_rows(pattern, order="best"):
    """Colors of the rows of a Jacobian pattern: no two rows of one color share a
    column (reverse mode's seeds).  See :func:`color_columns`."""
    return color_columns(sp.csr_array(pattern, dtype=bool).T, order)


def star_coloring(pattern, order="best"):
    """A star coloring of a symmetric (Hessian) pattern's adjacency graph.

    Parameters
    ----------
    pattern : scipy.sparse array or matrix, shape (n, n)
        Symmetric; the diagonal is ignored.
    order : {"best", "largest_first", "smallest_last", "natural"}

    Returns
    -------
    ndarray of int64, shape (n,)
    """
    graph = _without_diagonal(pattern)
    # (the densest row bounds distance-2 colorings, not star colorings: all orders run)
    colors = _best(graph, order, _star, ORDERS)
    if order == "best":
        colors = _distance2_if_fewer(pattern, colors)
    return _uncolor_empty(colors, np.diff(sp.csr_array(pattern).indptr))


def _distance2_if_fewer(pattern, colors):
    """A distance-2 coloring -- a star coloring too: the column coloring of the
    pattern with its diagonal, whose improvement passes reach stencils' bounds
    -- where it can have fewer colors than ``colors`` (and its graph is not too
    big); else ``colors``."""
    p = sp.csr_array(pattern, dtype=bool)
    p = sp.csr_array(p + sp.eye_array(p.shape[0], dtype=bool, format="csr"), dtype=bool)
    row = np.diff(p.indptr)
    if colors.max(initial=-1) + 1 <= lower_bound(p, 1) or int(np.dot(row, row)) > D2_MAX:
        return colors
    d2 = _best(_without_diagonal(p.T @ p), "best", _greedy, METHODS, lower_bound(p, 1))
    return d2 if d2.max(initial=-1) < colors.max(initial=-1) else colors


def lower_bound(pattern, axis=1):
    """The fewest colors any coloring needs: the most nonzeros in a row
    (``axis=1``, column colorings) or a column (``axis=0``, row colorings)."""
    p = sp.csr_array(pattern, dtype=bool)
    if p.nnz == 0:
        return 0
    counts = np.diff(p.indptr) if axis == 1 else np.bincount(p.indices, minlength=p.shape[1])
    return int(counts.max())


# ----------------------------------------------------------------------------
# decompression: where each stored nonzero sits in the compressed result
# ----------------------------------------------------------------------------
def seed_matrix(colors, n, dtype):
    """The ``(c, n)`` seeds of a coloring: row ``k`` is 1 at the columns (or
    rows) of color ``k``; an uncolored one (``-1``, empty) is in none."""
    seed = np.zeros((int(colors.max(initial=-1)) + 1, n), dtype)
    colored = np.flatnonzero(colors >= 0)
    seed[colors[colored], colored] = 1
    return seed


def coo(pattern):
    """``(rows, cols)`` of the stored nonzeros of ``pattern``, in csr order."""
    p = sp.csr_array(pattern)
    rows = np.repeat(np.arange(p.shape[0], dtype=np.int64), np.diff(p.indptr))
    return rows, p.indices.astype(np.int64)


def jacobian_sources(pattern, colors, mode):
    """For each stored nonzero of ``pattern`` (csr order), its flat position in
    the compressed result: ``(c, m)`` (``mode="forward"``, ``J @ S`` as rows
    ``S[:, k]^T J^T``) or ``(c, n)`` (``"reverse"``, ``S^T @ J``)."""
    m, n = pattern.shape
    rows, cols = coo(pattern)
    if mode == "forward":
        return colors[cols] * m + rows
    return colors[rows] * n + cols


def hessian_sources(pattern, colors):
    """For each stored nonzero of a symmetric ``pattern`` (csr order), its flat
    position in ``(H @ S)^T``, shape ``(c, n)``, under a star coloring.

    Raises
    ------
    ValueError
        When some nonzero cannot be read directly (``colors`` is not a star
        coloring of ``pattern``).
    """
    n = pattern.shape[0]
    ncolors = int(colors.max(initial=-1)) + 1
    rows, cols = coo(pattern)
    # how many neighbors (the vertex itself included) of each vertex have each color
    count = np.bincount(rows * ncolors + colors[cols], minlength=n * ncolors) if rows.size \
        else np.zeros(n * ncolors, np.int64)
    direct = count[rows * ncolors + colors[cols]] == 1
    swapped = count[cols * ncolors + colors[rows]] == 1
    if not np.all(direct | swapped) or np.any((rows != cols) & (colors[rows] == colors[cols])):
        raise ValueError("the coloring is not a star coloring of the Hessian's pattern")
    return np.where(direct, colors[cols] * n + rows, colors[rows] * n + cols)
