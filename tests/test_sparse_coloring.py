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
