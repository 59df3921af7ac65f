"""np.add.at, np.subtract.at and np.bincount at integer indices passed to f
as an argument (an edge list, group labels): scatter-adds at positions the
plan reads at every call, as a gather ``u[g]`` at them already was -- one plan
for every index array of the shape, numpy's errors for indices out of range
or negative bins, derivatives against finite differences, nothing allocated
per call."""

import numpy as np
import pytest

import hybridad as ha
from hybridad.testing import count_allocations
from conftest import rand

BACKENDS = ["numpy", "numba"]


def springs(P, edges, k):
    """Spring energy of a network, node forces accumulated per edge."""
    d = P[edges[:, 0]] - P[edges[:, 1]]
    e = k * d ** 2
    node = np.zeros(P.shape[0])
    np.add.at(node, edges[:, 0], e)
    np.subtract.at(node, edges[:, 1], 0.5 * e)
    return np.sum(node ** 2) + np.sum(np.tanh(P) ** 2)


def rows_at(X, i):
    """Rows of a matrix accumulated at repeated, negative row indices."""
    acc = np.zeros((4, X.shape[1]))
    np.add.at(acc, i, np.sin(X))
    return np.sum(acc ** 3)


def pairs_at(A, i, j):
    """Two index arrays: elements (i, j) of a matrix."""
    acc = np.zeros((3, 3))
    np.add.at(acc, (i, j), A ** 2)
    return np.sum(np.exp(acc))


def group_means(u, x, g, G):
    """Per-group sums of squares with labels passed in (a random-effects loss)."""
    r = x - u[g]
    s = np.bincount(g, weights=r ** 2, minlength=G)
    n = np.bincount(g, minlength=G)
    return np.sum(s / np.maximum(n, 1)) + 0.1 * np.sum(u ** 2)


def _fd(f, x, *args, eps=1e-6):
    g = np.zeros_like(x)
    for k in range(x.size):
        e = np.zeros_like(x)
        e.flat[k] = eps
        g.flat[k] = (f(x + e, *args) - f(x - e, *args)) / (2 * eps)
    return g


def _cases():
    rng = np.random.default_rng(3)
    edges = rng.integers(0, 6, (9, 2))
    return {
        "springs": (springs, rng.standard_normal(6), (edges, 1.5),
                    (rng.integers(0, 6, (9, 2)), 1.5)),
        "rows": (rows_at, rng.standard_normal((7, 3)), (np.array([0, 1, 1, -1, 3, 3, -4]),),
                 (np.array([2, 2, 2, 0, -1, 1, 3]),)),
        "pairs": (pairs_at, rng.standard_normal(5) * 0.3,
                  (np.array([0, 1, 1, 2, 0]), np.array([2, 0, 0, 1, -1])),
                  (np.array([1, 1, 1, 0, 2]), np.array([0, 0, 2, 1, 1]))),
        "groups": (group_means, rng.standard_normal(4), (rng.standard_normal(30),
                                                          rng.integers(0, 4, 30), 4),
                   (rng.standard_normal(30), rng.integers(0, 3, 30), 4)),
    }


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(_cases()))
def test_one_plan_for_every_index_array_matches_finite_differences(name, backend):
    f, x, args, other = _cases()[name]
    plan = ha.compile(f, x, *args, backend=backend)
    for a in (args, other, args):
        res = plan.gradient(x, *a)
        assert float(res.value) == pytest.approx(f(x, *a), rel=1e-13)
        np.testing.assert_allclose(res.gradient, _fd(f, x, *a), rtol=2e-7, atol=1e-7)
    assert plan._specialized_count == 0  # (the indices' values decided nothing)


@pytest.mark.parametrize("name", ["springs", "groups"])
def test_the_hessian_through_the_scatter(name):
    f, x, args, _ = _cases()[name]
    h = ha.hessian(f, x, *args).hessian
    fd = np.array([_fd(lambda y, *a: float(ha.gradient(f, y, *a).gradient[k]), x, *args)
                   for k in range(x.size)])
    np.testing.assert_allclose(h, fd, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(h, h.T, rtol=1e-12, atol=1e-12)


def test_values_are_the_constant_index_plans_bit_for_bit():
    """The same values as a plan of the same function with the indices as
    constants (and numpy's to rounding: numpy's subtract.at subtracts each
    update in turn, a plan the sum of them)."""
    for f, x, args, other in _cases().values():
        plan = ha.compile(f, x, *args)
        for a in (args, other):
            fixed = ha.compile(lambda x, a=a: f(x, *a), x)
            got = plan.gradient(x, *a)
            want = fixed.gradient(x)
            assert float(got.value) == float(want.value)
            np.testing.assert_array_equal(got.gradient, want.gradient)
            assert float(got.value) == pytest.approx(f(x, *a), rel=1e-14)


def test_numpys_errors_for_indices_out_of_range_and_negative_bins():
    f, x, args, _ = _cases()["rows"]
    bad = (np.array([0, 1, 1, 4, 3, 3, 0]),)
    with pytest.raises(IndexError):
        f(x, *bad)
    with pytest.raises(IndexError):
        ha.gradient(f, x, *bad)
    plan = ha.compile(f, x, *args)
    with pytest.raises(IndexError):
        plan.gradient(x, *bad)
    u, xs, g, G = _cases()["groups"][1], *_cases()["groups"][2]
    with pytest.raises(ValueError, match="negative"):
        ha.gradient(group_means, u, xs, np.where(g == 0, -1, g), G)


def test_bins_past_minlength_make_more_bins():
    def f(w, g):
        return np.sum(np.bincount(g, weights=np.exp(w)) ** 2)

    w = rand((6,), seed=4)
    for g in (np.array([0, 1, 1, 2, 0, 2]), np.array([0, 4, 1, 2, 0, 4]),
              np.array([0, 1, 1, 2, 0, 2])):
        res = ha.gradient(f, w, g)
        assert float(res.value) == pytest.approx(f(w, g), rel=1e-14)
        np.testing.assert_allclose(res.gradient, _fd(f, w, g), rtol=1e-7)
    counts = ha.compile(lambda w, g: np.sum(w) + 0 * np.sum(np.bincount(g)), w, g)
    assert float(counts.gradient(w, g).value) == pytest.approx(np.sum(w))


def test_multiply_at_argument_indices_takes_their_values():
    """multiply.at (its updates grouped by target at trace time) decides on
    the indices' values: right for each, traced again for others."""
    def f(x, i):
        acc = np.ones(3)
        np.multiply.at(acc, i, x)
        return np.sum(acc ** 2)

    x = rand((4,))
    for i in (np.array([0, 1, 1, 2]), np.array([2, 2, 0, 2])):
        res = ha.gradient(f, x, i)
        assert float(res.value) == pytest.approx(f(x, i), rel=1e-14)
        np.testing.assert_allclose(res.gradient, _fd(f, x, i), rtol=1e-7)


@pytest.mark.parametrize("name", ["springs", "groups"])
def test_nothing_allocated_per_call(name):
    f, x, args, other = _cases()[name]
    plan = ha.compile(f, x, *args)
    res = ha.GradientResult(x)
    for a in (args, other):
        plan.gradient(x, *a, out=res)
    with count_allocations() as counts:
        for a in (args, other):
            plan.gradient(x, *a, out=res)
    assert counts.allocations == 0
