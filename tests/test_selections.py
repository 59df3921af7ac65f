"""``x[mask]`` at a traced boolean mask, computed with, reduced and written
back (``y[y < 0] *= 0.1``, ``y[m] = np.sqrt(x[m])``): a lazy selection
(:mod:`hybridad.frontend.numpy_selected`), no decision on the mask while its
count reaches nothing, so one plan serves every mask.  Before, the read
decided the mask's values and a plan retraced and compiled at every call
whose mask differed (``np.sum(x[x > 0] ** 2)``: 119 ms a call with new data;
``y[y < 0] *= 0.1`` 250 ms at n = 1000).

Every case: values numpy's own run, gradients the central differences' on
inputs whose masks all differ, no retrace, no decision, no allocation per
call (``conftest.assert_one_graph_for_every_input``).  Code that uses the
count (``len``, a shape, an index, a sort) keeps the decision and is right
on every mask; ``max`` and ``min`` decide only that the mask selects
something; an empty selection sums to 0 with a zero gradient."""

import warnings

import numpy as np
import pytest

import hybridad as ha
from conftest import (assert_float32_follows_float64, assert_one_graph_for_every_input,
                      directional_difference, hessian_fd)
from hybridad.testing import assert_no_alloc


def squares(x):
    return np.sum(x[x > 0] ** 2)


def huber(x):
    r = x - 0.1
    small = np.abs(r) <= 0.5
    return np.sum(0.5 * r[small] ** 2) + np.sum(0.5 * (np.abs(r[~small]) - 0.25))


def mean_of_logs(x):
    return np.log(x[x > 0]).mean() + x[x < 0.3].mean()  # (log: no negative met)


def spread(x):
    s = x[x > -0.5]
    return np.var(s) + s.std(ddof=1) * 0.5


def products(x):
    m = np.abs(x) < 1.2
    return np.prod(1 + 0.1 * x[m]) + x[m] @ np.sin(x[m]) + np.linalg.norm(x[m])


def functions(x):
    s = x[x > -0.3]
    t = np.where(s > 0.5, np.clip(s, 0, 1.2), np.tanh(s)) * np.float64(0.5)
    return np.sum(t ** 2 + np.exp(-s) * (s > 0.1).astype(np.float64))


def rows(X):
    keep = X[:, 0] > 0
    return np.sum(X[keep, :] ** 2, axis=0) @ np.array([1.0, 2.0, 3.0]) + \
        np.mean(X[keep], axis=0, keepdims=True).sum()


def grid(X):
    return np.sum(np.sin(X[X > 0.2])) + np.nansum(X[X < 0]) * 2


def composed(x):
    s = x[x > -1]
    return np.sum(s[s < 1] ** 3)  # (x[m][c]: the selection by m & c)


def updated(x):
    s = x[x > 0]
    s *= 2.0
    s += np.sum(s) * 0.01  # (a reduction of the selection, read as a number)
    s **= 2
    return s.sum() + np.mean(s)


def written(x):
    y = np.cos(x)
    y[x > 0] = np.sqrt(x[x > 0]) * y[x > 0]
    y[x < -0.5] = np.exp(x[x < -0.5]) - y[x < -0.5]
    return np.sum(y * np.arange(x.size))


def flagged(x):
    s = x[x > 0]
    return np.sum(np.where(np.any(s > 1.5), s, 2 * s)) + np.all(s < 3) * np.sum(s)


@ha.elementwise
def _soft_hinge(r):
    if r < 0.5:
        return 0.5 * r * r
    return r - 0.125


def weighted(x):
    m = x > -1
    w = np.cos(x)
    return np.sum(_soft_hinge(x[m]) * w[m]) + np.average(x[m], weights=w[m] ** 2) + \
        np.count_nonzero(x[m] > 0.5) * 0.1


def regression(X):
    keep = X[:, 0] > -0.3
    r = np.tanh(X[:, 1])[keep] - X[keep] @ np.array([1.0, -2.0, 0.5])  # (rows times a vector)
    return np.sum(r ** 2) + np.mean(np.dot(X[keep], np.ones((3, 2)) * 0.3) ** 2)


def per_row(X):
    keep = X[:, 0] > 0
    d = np.linalg.norm(X[keep] - 0.2, axis=1)  # (reductions over the element's axes)
    return np.mean(d ** 2) + np.sum(np.max(X[keep], axis=-1)) + \
        np.std(X[keep], axis=1, ddof=1).sum() + np.mean(X[keep], axis=(1,), keepdims=True).sum() \
        + np.sum(np.median(X[keep], axis=1) * np.percentile(X[keep], 70, axis=-1))


def positions(x):
    y = x * 1.0
    y[np.nonzero(x > 1)] *= 3  # (a write at np.nonzero's positions: at the mask)
    idx = np.where(x > 0)  # (one argument: the positions)
    j = np.flatnonzero(x < -0.5)
    return np.sum(x[idx] ** 2) + np.sum(np.exp(x[j])) + np.sum(y ** 2 * np.arange(x.size))


def grid_positions(X):
    rows, cols = np.nonzero(X > 0.3)
    at = np.argwhere(X < -0.2)  # (count x 2 positions: rows times a vector below)
    return np.sum(X[rows, cols] ** 3) + np.sum(np.sin(X[np.nonzero(X < 0)])) + \
        np.sum(at @ np.array([0.5, 0.25])) * 0.1 + np.sum(rows * X[rows, cols])


def robust(x):
    r = x[np.abs(x) < 1.5]  # (order statistics: NaN-ignoring ones of the whole array)
    mad = np.median(np.abs(r - np.median(r)))
    return mad + np.percentile(r, 80) + np.quantile(x[x > -1], [0.25, 0.5]).sum()


# -- updates in place at a mask: Python reads the selection, updates it and
# writes it back (``y[mask] op= v``)

def leaky(x):
    y = np.sin(3 * x) * 2
    y[y < 0] *= 0.1
    return np.sum(y ** 2 * np.arange(x.size))


def shifted(x):
    y = x * 2
    y[y > 1] -= 1
    y[y < -1] += 0.5 * x[0]  # (a traced number)
    return np.sum(y ** 3)


def row_update(X):
    Y = np.tanh(X)
    Y[X[:, 0] > 0] *= np.array([1.0, 2.0, 3.0])  # (a row broadcast into each selected row)
    return np.sum(Y ** 2)


def reciprocal_roots(x):
    y = np.maximum(x, 0.0)  # (exact zeros: inf where not selected, nor its derivative)
    y[y > 0] **= -0.5
    return np.sum(y + x)


def in_a_loop(x):
    for _ in range(4):
        x = x + 0.3 * np.sin(x)
        x[x > 0.8] *= 0.5
    return np.sum(x ** 2)


def from_another(x):
    y = np.cos(x)
    y[x > 0] = np.sqrt(x[x > 0]) * y[x > 0]  # (a selection by the mask of another array)
    return np.sum(y * np.arange(x.size))


def doubled(x):
    y = x * 1.0
    y[y < 0] += 2 * y[y < 0]  # (the right side's selection: the same mask)
    return np.sum(y ** 2)


def centred(x):
    y = x * 1.0
    y[y > 0] -= np.mean(y[y > 0])  # (a reduction of the selection: a number)
    return np.sum(y ** 2)


CASES = [(squares, (40,)), (huber, (40,)), (mean_of_logs, (40,)), (spread, (30,)),
         (products, (30,)), (functions, (30,)), (rows, (12, 3)), (grid, (6, 7)),
         (composed, (30,)), (updated, (30,)), (written, (20,)), (flagged, (20,)),
         (weighted, (25,)), (regression, (15, 3)), (per_row, (15, 3)), (positions, (30,)),
         (grid_positions, (5, 6)),
         (leaky, (40,)), (shifted, (30,)), (row_update, (12, 3)), (reciprocal_roots, (24,)),
         (in_a_loop, (16,)), (from_another, (15,)), (doubled, (15,)), (centred, (15,))]
#: the float32 cases (both CPU backends)
FLOAT32 = [c for c in CASES if c[0] in (squares, huber, mean_of_logs, spread, products, functions,
                                        rows, leaky, shifted, row_update, reciprocal_roots)]


def _inputs(shape, k, n=4):
    return [np.random.default_rng(k + j).standard_normal(shape) for j in range(n)]


@pytest.mark.parametrize("f, shape", CASES, ids=[f.__name__ for f, _ in CASES])
def test_a_selection_reduced_is_one_graph_for_every_mask(f, shape):
    assert_one_graph_for_every_input(f, _inputs(shape, 5), abs=1e-7)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("f, shape", FLOAT32, ids=[f.__name__ for f, _ in FLOAT32])
def test_a_selection_in_float32_on_both_cpu_backends(f, shape, backend):
    assert_float32_follows_float64(f, [x.astype(np.float32) for x in _inputs(shape, 9)],
                                   backend)


def test_a_hessian_through_selections():
    x = _inputs((8,), 3)[0]
    for f in (squares, huber, spread):
        plan = ha.compile(f, x, hessian=True)
        np.testing.assert_allclose(plan.hessian(x).hessian, hessian_fd(f, x), atol=1e-5)
        assert "decisions on values" not in plan.explain()


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_an_empty_selection_sums_to_zero_with_a_zero_gradient(backend):
    """The plan made at a mask selecting some; a call whose mask selects
    none: numpy's 0 (and nan for a mean), a gradient of zeros -- no nan from
    the unselected values' singular derivatives (sqrt at 0, log below it)."""
    def f(x):
        return np.sum(np.sqrt(x[x > 0])) + np.sum(np.log(x[x > 0]) ** 2)

    plan = ha.compile(f, np.array([-1.0, 0.5, 2.0, 0.0]), backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for x in (np.array([0.0, -1.0, -2.0, 0.0]), np.array([-3.0, 0.0, -1.0, -0.5])):
            res = plan.gradient(x)
            assert res.value == 0.0
            assert np.array_equal(res.gradient, np.zeros(4))
        res = plan.gradient(np.array([0.0, 4.0, -1.0, 0.25]))
        assert res.value == pytest.approx(f(np.array([0.0, 4.0, -1.0, 0.25])), rel=1e-14)
        assert res.gradient == pytest.approx([0.0, 0.25 + 2 * np.log(4) / 4, 0.0,
                                              1.0 + 2 * np.log(0.25) / 0.25])


def test_order_statistics_of_selections_decide_only_that_something_is_selected():
    """``np.median``, ``np.percentile``, ``np.quantile`` of a selection (a
    median absolute deviation): one plan for every non-empty mask; NaN where
    the selection holds one, as numpy's."""
    xs = _inputs((30,), 71)
    plan, res = assert_one_graph_for_every_input(robust, xs, abs=1e-7, rel=1e-13, decides=True)
    assert_no_alloc(plan.gradient, xs[1], out=res, n=10)

    def nan_inside(x):
        return np.median(x[~(x > 10)])  # (NaN > 10 is False: a NaN is selected)

    y = np.where(np.arange(30) == 5, np.nan, xs[2])
    plan = ha.compile(nan_inside, xs[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (numpy's, of the NaN)
        assert np.isnan(plan.gradient(y).value) and np.isnan(nan_inside(y))
        assert plan.gradient(xs[2]).value == pytest.approx(nan_inside(xs[2]), rel=1e-14)


def test_max_and_min_decide_only_that_something_is_selected():
    def f(x):
        return np.max(np.exp(x[x < 0])) + x[x > 0].min() * 2

    xs = _inputs((20,), 41)
    plan = ha.compile(f, xs[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (no retrace on a new non-empty mask)
        for x in xs:
            res = plan.gradient(x)
            assert res.value == pytest.approx(f(x), rel=1e-14)
            want = np.zeros_like(x)
            i, j = np.flatnonzero(x < 0), np.flatnonzero(x > 0)
            k, m = i[np.argmax(x[i])], j[np.argmin(x[j])]
            want[k] += np.exp(x[k])
            want[m] += 2.0
            np.testing.assert_allclose(res.gradient, want, rtol=1e-14)
        assert_no_alloc(plan.gradient, xs[1], out=res, n=10)
    positive = np.abs(xs[0]) + 0.1
    with pytest.raises(ValueError, match="zero-size array"):
        f(positive)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the decision changed: a retrace)
        with pytest.raises(ValueError, match="zero-size array"):
            plan.gradient(positive)


def test_repr_of_a_selection_takes_no_decision():
    def f(x):
        s = x[x > 0]
        assert repr(s).endswith(": float64[?])"), repr(s)  # (the count unknown, not taken)
        return np.sum(s ** 2)

    assert "decisions on values" not in ha.compile(f, _inputs((9,), 81)[0]).explain()


def _count_used(x):
    s = x[x > 0]
    return np.sum(s ** 2) / len(s)


def _shape_used(x):
    s = np.exp(x[x > 0])
    return np.sum(s * np.arange(s.shape[0]))


def _like_used(x):
    s = x[x > 0]
    return np.sum(s * np.linspace(0, 1, s.size)) + np.sum(np.ones_like(s) * s)


def _sorted(x):
    s = np.sort(x[x > 0])
    return np.sum(s[-3:] ** 2) + np.cumsum(x[x < 0])[-1]


def _indexed(x):
    s = x[x > 0]
    return s[0] * s[-1] + np.sum(s[::2])


def _python_sum(x):
    return sum(x[x > 1] ** 2)


def used(x):
    """``sel.sum()`` reads the selection itself (its count matters)."""
    y = np.sin(x)
    sel = y[y > 0]
    sel *= 2
    y[y > 0] = sel
    return np.sum(y) + sel.sum() * sel.size


def read_before_a_write(x):
    y = x * 2
    m = y > 0
    s = y[m]
    y[0] = 5.0  # (numpy's s holds the values before this write)
    y[m] = s * 3
    return np.sum(y ** 2) + s.size


def reversed_(x):
    y = x * 1.0
    y[y > 0] = y[y > 0][::-1]
    return np.sum(y ** 2 * np.arange(x.size))


def _positions_counted(x):
    i = np.nonzero(x > 0)[0]
    return np.sum(x[i] ** 2) * i.size + np.sum(x[i[:2]])  # (np.nonzero's count, its first two)


@pytest.mark.parametrize("f", [_count_used, _shape_used, _like_used, _sorted, _indexed,
                               _python_sum, _positions_counted, used, read_before_a_write,
                               reversed_],
                         ids=lambda f: f.__name__.strip("_"))
def test_a_selection_whose_count_is_used_keeps_its_decision(f):
    """The count reaches Python (a length, a shape, a new array of its size,
    an index, a sort, iteration): the mask is decided as numpy's selection
    always was, and every call is right on a new mask (a retrace)."""
    xs = _inputs((15,), 51)
    plan = ha.compile(f, xs[0])
    assert "decisions on values" in plan.explain()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (new masks retrace)
        for x in xs:
            res = plan.gradient(x)
            assert res.value == pytest.approx(f(x), rel=1e-12)
            d, slope = directional_difference(f, [x], 0)
            assert float(np.sum(res.gradient * d)) == pytest.approx(slope, rel=1e-6, abs=1e-7)


def test_what_the_mask_drops_reaches_no_value_nor_gradient():
    """numpy never takes the log of what the mask drops; the plan computes it
    and ``np.where`` drops it: no warning, finite values and gradients, on the
    numpy backend too."""
    def f(x):
        s = x[x > 0]
        return np.sum(np.log(s) * np.sqrt(s)) + np.sum(1 / x[x != 0])

    x = np.array([-1.0, 0.0, 2.0, -3.0, 0.5, 0.0])
    for backend in ("numba", "numpy"):
        plan = ha.compile(f, x, backend=backend)
        with warnings.catch_warnings(), np.errstate(all="raise"):
            warnings.simplefilter("error")
            res = plan.gradient(x)
        assert res.value == pytest.approx(f(x), rel=1e-14)
        assert np.isfinite(res.gradient).all()
        assert res.gradient[[0, 1, 3, 5]].tolist() == [-1.0, 0.0, -1 / 9, 0.0]


def test_a_selection_read_before_its_array_is_written():
    """``s = y[m]`` holds the values at the read, as numpy's copy does."""
    def f(x):
        y = x * 2
        m = y > 0
        s = y[m]
        y *= 3
        y[0] = 1.0
        return np.sum(s ** 2) + np.sum(y[m])

    assert_one_graph_for_every_input(f, _inputs((12,), 61), abs=1e-7)


def test_errors_are_numpys():
    def mismatched(x):
        return np.sum(x[x > 0] + x[x < 0])  # (two counts: numpy's broadcast error)

    def wrong_axis(X):
        return np.sum(X[X[:, 0] > 0], axis=1).sum()  # (an axis of the element: general)

    x = np.array([1.0, -2.0, 3.0, -4.0, 5.0])
    with pytest.raises(ValueError, match="broadcast"):
        ha.gradient(mismatched, x)
    X = np.arange(12.0).reshape(4, 3) - 5
    res = ha.gradient(wrong_axis, X)
    assert res.value == wrong_axis(X)
    np.testing.assert_array_equal(res.gradient, np.where(X[:, :1] > 0, 1.0, 0.0) + 0 * X)


def test_max_of_an_empty_array_raises_numpys_error():
    """(It traced -inf before, silently.)"""
    x = np.array([1.0, 2.0])
    for f in (lambda x: np.max(x[:0]), lambda x: np.min(x[1:1] * 2),
              lambda x: np.sum(np.max(np.zeros((0, 2)) + x, axis=0))):
        with pytest.raises(ValueError, match="zero-size array to reduction operation"):
            ha.gradient(f, x)
    assert ha.gradient(lambda x: np.sum(np.max(x[:, None][:, :0], axis=0)) + x[0],
                       x[:, None][:, 0]).value == 1.0  # (nothing reduced over a 0 axis)
