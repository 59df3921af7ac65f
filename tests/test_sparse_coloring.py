"""Colorings and decompression (hybridad/sparse/coloring.py): every coloring
is valid, star colorings are star colorings (checked by brute force on small
graphs), and decompressing ``J @ S`` / ``H @ S`` gives back every nonzero."""

import numpy as np
import pytest
import scipy.sparse as sp

from hybridad.sparse import coloring as col


def _random_pattern(m, n, density, seed):
    rng = np.random.default_rng(seed)
    p = sp.random_array((m, n), density=density, rng=rng, format="csr") != 0
    return sp.csr_array(p, dtype=bool)


def _random_symmetric(n, density, seed):
    p = _random_pattern(n, n, density, seed)
    p = p + p.T + sp.eye_array(n, dtype=bool)
    return sp.csr_array(p, dtype=bool)


def _grid(n):
    """The 5-point stencil on an n x n grid (a Hessian pattern)."""
    one = sp.diags_array([np.ones(n - 1), np.ones(n), np.ones(n - 1)], offsets=[-1, 0, 1])
    eye = sp.eye_array(n)
    return sp.csr_array(sp.kron(one, eye) + sp.kron(eye, one), dtype=bool)


def _columns_valid(pattern, colors):
    p = sp.csr_array(pattern)
    for i in range(p.shape[0]):
        cs = colors[p.indices[p.indptr[i]:p.indptr[i + 1]]]
        if len(np.unique(cs)) != len(cs):
            return False
    return True


@pytest.mark.parametrize("method", [*col.METHODS, "best"])
@pytest.mark.parametrize("seed", range(4))
def test_column_and_row_colorings_are_valid(method, seed):
    p = _random_pattern(40, 30, 0.08, seed)
    c = col.color_columns(p, method)
    assert c.shape == (30,) and _columns_valid(p, c)
    assert c.max() + 1 >= col.lower_bound(p, 1)
    r = col.color_rows(p, method)
    assert r.shape == (40,) and _columns_valid(p.T, r)
    assert r.max() + 1 >= col.lower_bound(p, 0)


def test_best_is_no_worse_than_each_order():
    p = _random_pattern(200, 150, 0.03, 7)
    best = col.color_columns(p, "best").max()
    assert all(best <= col.color_columns(p, m).max() for m in col.METHODS)


def test_diagonal_pattern_needs_one_color_and_empty_none():
    assert col.color_columns(sp.eye_array(5, format="csr")).max() == 0
    empty = sp.csr_array((3, 4), dtype=bool)
    assert col.lower_bound(empty) == 0
    assert col.jacobian_sources(empty, np.zeros(4, np.int64), "forward").size == 0


def _is_star(pattern, colors):
    """Brute force: a distance-1 coloring in which every path on four vertices
    uses at least three colors."""
    g = col._without_diagonal(pattern)
    adj = [set(g.indices[g.indptr[v]:g.indptr[v + 1]]) for v in range(g.shape[0])]
    for v in range(len(adj)):
        if any(colors[w] == colors[v] for w in adj[v]):
            return False
    for a in range(len(adj)):
        for b in adj[a]:
            for c in adj[b] - {a}:
                for d in adj[c] - {a, b}:
                    if colors[a] == colors[c] and colors[b] == colors[d]:
                        return False
    return True


@pytest.mark.parametrize("order", [*col.ORDERS, "best"])
@pytest.mark.parametrize("seed", range(5))
def test_star_colorings_are_star_colorings(order, seed):
    p = _random_symmetric(25, 0.08, seed)
    c = col.star_coloring(p, order)
    assert _is_star(p, c)
    col.hessian_sources(p, c)  # every nonzero readable directly


def test_star_coloring_of_a_grid_is_near_the_bound():
    p = _grid(12)
    c = col.star_coloring(p)
    assert _is_star(p, c)
    assert col.lower_bound(p) == 5 and c.max() + 1 <= 6


def test_star_coloring_leaves_the_pattern_untouched():
    p = _grid(4)
    before = p.nnz
    col.star_coloring(p)
    assert p.nnz == before  # (the diagonal is dropped from a copy)


def test_decompression_of_hessians():
    rng = np.random.default_rng(3)
    for seed in range(4):
        p = _random_symmetric(30, 0.1, seed)
        h = sp.csr_array(p, dtype=np.float64)
        h.data = rng.normal(size=h.nnz)
        h = sp.csr_array(h + h.T)  # symmetric values on the symmetric pattern
        c = col.star_coloring(p)
        seeds = np.zeros((c.max() + 1, 30))
        seeds[c, np.arange(30)] = 1
        comp = (h @ seeds.T).T  # (colors, n): H s_k as rows
        src = col.hessian_sources(h, c)
        np.testing.assert_array_equal(comp.reshape(-1)[src], h.data)


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_decompression_of_jacobians(mode):
    rng = np.random.default_rng(5)
    p = _random_pattern(35, 25, 0.1, 11)
    j = sp.csr_array(p, dtype=np.float64)
    j.data = rng.normal(size=j.nnz)
    if mode == "forward":
        c = col.color_columns(p)
        seeds = np.zeros((c.max() + 1, 25))
        seeds[c, np.arange(25)] = 1
        comp = (j @ seeds.T).T  # (colors, m)
    else:
        c = col.color_rows(p)
        seeds = np.zeros((c.max() + 1, 35))
        seeds[c, np.arange(35)] = 1
        comp = seeds @ j  # (colors, n)
    src = col.jacobian_sources(j, c, mode)
    np.testing.assert_array_equal(np.asarray(comp).reshape(-1)[src], j.data)


def test_a_coloring_that_is_not_star_is_refused():
    path = sp.csr_array(sp.diags_array([np.ones(3), np.ones(4), np.ones(3)],
                                       offsets=[-1, 0, 1]), dtype=bool)
    with pytest.raises(ValueError, match="not a star coloring"):
        col.hessian_sources(path, np.array([0, 1, 0, 1]))  # a two-colored path of four


def test_smallest_last_is_a_permutation():
    g = col._without_diagonal(_random_symmetric(60, 0.05, 2))
    order = col._order(g, "smallest_last")
    assert sorted(order.tolist()) == list(range(60))


def test_bad_order_is_refused():
    with pytest.raises(ValueError, match="order must be"):
        col.color_columns(sp.eye_array(3, format="csr"), "random")
    with pytest.raises(ValueError, match="order must be"):
        col.star_coloring(sp.eye_array(3, format="csr"), "rlf")


def test_all_pairs_of_a_dense_row_get_distinct_colors():
    p = sp.csr_array(np.ones((1, 6), bool))
    for method in col.METHODS:
        assert sorted(col.color_columns(p, method).tolist()) == list(range(6))


# ----------------------------------------------------------------------------
# "best": lattice colorings, iterated greedy, tabu search (hybridad/sparse/recolor.py)
# ----------------------------------------------------------------------------
def _periodic_laplacian(n):
    """The 5-point stencil on an n x n periodic grid (np.roll's Laplacian)."""
    ring = sp.diags_array([np.ones(n - 1), np.ones(n), np.ones(n - 1)], offsets=[-1, 0, 1],
                          format="lil")
    ring[0, n - 1] = ring[n - 1, 0] = 1
    eye = sp.eye_array(n)
    return sp.csr_array(sp.kron(ring, eye) + sp.kron(eye, ring), dtype=bool)


def _brusselator_pattern(n):
    """The 2-D Brusselator's Jacobian pattern: each species' row reads its own
    5-point stencil and the other species at the same point (6 per row)."""
    lap, eye = _periodic_laplacian(n), sp.eye_array(n * n, dtype=bool)
    return sp.csr_array(sp.block_array([[lap, eye], [eye, lap]]), dtype=bool)


def _triangular(n):
    """The 7-point (forward-difference) stencil on an n x n grid: the neighbors
    of (i, j) are (i +- 1, j), (i, j +- 1), (i + 1, j - 1) and (i - 1, j + 1)."""
    one = sp.diags_array([np.ones(n - 1), np.ones(n - 1)], offsets=[-1, 1])
    eye = sp.eye_array(n)
    up = sp.diags_array([np.ones(n - 1)], offsets=[1])
    diag = sp.kron(up, up.T) + sp.kron(up.T, up)
    return sp.csr_array(sp.kron(one, eye) + sp.kron(eye, one) + diag + sp.eye_array(n * n),
                        dtype=bool)


@pytest.mark.parametrize("n", [16, 32, 64])
def test_brusselator_columns_within_a_fifth_of_the_bound(n):
    p = _brusselator_pattern(n)
    assert col.lower_bound(p) == 6
    c = col.color_columns(p)
    assert _columns_valid(p, c)
    assert c.max() + 1 <= 7  # (greedy orders: 10 to 13, RLF: 7 or 8)
    assert all(c.max() <= col.color_columns(p, m).max() for m in col.METHODS)


@pytest.mark.parametrize("n", [12, 40])
def test_star_colorings_of_stencils_reach_the_bound(n):
    for p, bound in ((_grid(n), 5), (_triangular(n), 7)):
        assert col.lower_bound(p) == bound
        c = col.star_coloring(p)
        assert c.max() + 1 == bound  # the perfect distance-2 (lattice) colorings
        col.hessian_sources(p, c)
        if n <= 12:
            assert _is_star(p, c)
        assert all(c.max() <= col.star_coloring(p, o).max() for o in col.ORDERS)


def test_best_colorings_are_deterministic():
    p = _brusselator_pattern(16)
    np.testing.assert_array_equal(col.color_columns(p), col.color_columns(p))
    h = _triangular(20)
    np.testing.assert_array_equal(col.star_coloring(h), col.star_coloring(h))


def test_star_best_is_no_worse_than_each_order():
    # (an arrow: star colorings need 2 colors, far below the densest row)
    arrow = sp.eye_array(30, format="lil", dtype=bool)
    arrow[0, :] = arrow[:, 0] = True
    arrow = sp.csr_array(arrow)
    assert col.star_coloring(arrow).max() + 1 == 2
    for seed in range(3):
        p = _random_symmetric(120, 0.04, seed)
        best = col.star_coloring(p)
        assert _is_star(p, best)
        assert all(best.max() <= col.star_coloring(p, o).max() for o in col.ORDERS)


def _proper(g, colors):
    rows = np.repeat(np.arange(g.shape[0]), np.diff(g.indptr))
    return not np.any(colors[rows] == colors[g.indices])


def test_tabu_search_finds_a_coloring_with_one_color_fewer():
    from hybridad.sparse import recolor

    p = _brusselator_pattern(16)
    g = col._without_diagonal(p.T @ p)
    ip, ix = g.indptr.astype(np.int64), g.indices.astype(np.int64)
    start = col._rlf(ip, ix, col._order(g, "largest_first"))
    k = start.max() + 1
    dropped = recolor._drop(ip, ix, start)
    assert dropped.max() + 1 == k - 1 and not _proper(g, dropped)
    colors, conflicts, work = recolor._tabu(ip, ix, dropped, k - 1, 10**8, 10**5, 0)
    assert conflicts == 0 and _proper(g, colors) and colors.max() + 1 <= k - 1 and work > 0
    # six colors (the bound) do not fit: the budget ends the try, conflicts left
    colors, conflicts, work = recolor._tabu(ip, ix, recolor._drop(ip, ix, colors), 6,
                                            200_000, 10**5, 0)
    assert conflicts > 0 and 200_000 <= work < 300_000


def test_iterated_greedy_never_adds_colors():
    from hybridad.sparse import recolor

    for seed in range(3):
        g = col._without_diagonal(_random_symmetric(300, 0.03, seed))
        ip, ix = g.indptr.astype(np.int64), g.indices.astype(np.int64)
        start = col._greedy(ip, ix, col._order(g, "natural"))
        better = recolor.iterated_greedy(ip, ix, start, col._greedy)
        assert _proper(g, better) and better.max() <= start.max()


def test_lattice_coloring_of_a_grid_and_none_for_a_random_graph():
    from hybridad.sparse import recolor

    p = _grid(30)  # distance-2 on the 5-point stencil: (i + 2 j) mod 5
    g = col._without_diagonal(p.T @ p)
    ip, ix = g.indptr.astype(np.int64), g.indices.astype(np.int64)
    colors = recolor.lattice(ip, ix, 5, 9, col._rlf)
    assert colors is not None and colors.max() + 1 == 5 and _proper(g, colors)
    g = col._without_diagonal(_random_symmetric(200, 0.05, 1))
    ip, ix = g.indptr.astype(np.int64), g.indices.astype(np.int64)
    assert recolor.lattice(ip, ix, 3, 6, col._rlf) is None
