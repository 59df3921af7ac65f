"""``x[i]`` and ``x[i] = v`` with integer indices computed from traced values --
``table[np.searchsorted(grid, x)]``, ``x[np.argmax(x)]``, ``A[i, j]``,
``X[idx]`` rows, ``np.take(table, j)`` -- is one gather at positions the plan computes at every
call; the one decision taken is that every index is in range.  Before, a
plan retraced and compiled at every call whose indices differed (a lookup
table's gradient 22.6 ms a call, ``x[np.argmax(x)]`` 123 ms, against 0.16 ms
and 0.03 ms now).  Values are numpy's own run of the function, gradients
agree with central differences on inputs whose indices all differ, and no
call retraces; an index out of range raises numpy's IndexError."""

import warnings

import numpy as np
import pytest

import hybridad as ha
from hybridad.testing import assert_no_alloc
from conftest import directional_difference
from hybridad.testing import count_allocations

def lookup(x, table):
    """A hand-written piecewise-linear table on a uniform grid of [0, 1] (its
    gradient reaches the table and x)."""
    n = table.size
    j = np.clip(np.floor(x * (n - 1)).astype(np.int64), 0, n - 2)
    t = x * (n - 1) - j
    return np.sum((1 - t) * table[j] + t * np.take(table, j + 1))


def best(x, w):
    i = np.argmax(x)
    return x[i] * w[0] + np.sum(x ** 2) * w[1]


def pair(x, A):
    """Two traced ints into a matrix (an element), and a negative index."""
    i, j = np.argmin(x[:4]), np.argmax(x[4:8]) - 4
    return A[i, j] * np.sum(x) + A[j, i] ** 2


def rows(x, X):
    """Rows of a matrix at traced indices, some repeated (their gradients add)."""
    idx = np.argsort(x)[:5] % 3
    return np.sum(np.tanh(X[idx]) * x[:5, None])


def put_at_extremes(x, w):
    """Writes at traced ints (``y[i] = v``, ``y[j] += v``): ``np.where`` at
    the position, guarded in range only (245 ms -> 0.01 ms a call, n = 2000)."""
    y = x * 1.0
    y[np.argmax(x)] = w[0]
    y[np.argmin(x)] += w[1] * x[0]
    return np.sum(y ** 2 * np.arange(x.size))


def put_rows(x, X):
    """A traced row written at a traced int, an element at two (one negative)."""
    Y = np.tanh(X)
    Y[np.argmin(x[:3])] = x[3:3 + X.shape[1]] ** 2
    Y[-1 - np.argmax(x[:3]), np.argmin(x[3:5])] *= 2.0
    return np.sum(Y ** 2 * x[0])


CASES = [
    (lookup, lambda r: [r.uniform(0.0, 1.0, 30), np.sin(np.arange(41.0))]),
    (best, lambda r: [r.standard_normal(25), np.array([2.0, 0.5])]),
    (pair, lambda r: [r.standard_normal(8), r.standard_normal((4, 4))]),
    (rows, lambda r: [r.standard_normal(7), r.standard_normal((3, 6))]),
    (put_at_extremes, lambda r: [r.standard_normal(20), np.array([1.5, -0.5])]),
    (put_rows, lambda r: [r.standard_normal(9), r.standard_normal((3, 4))]),
]


@pytest.mark.parametrize("f, make", CASES, ids=[f.__name__ for f, _ in CASES])
def test_traced_indices_are_one_graph_for_every_value(f, make):
    args = make(np.random.default_rng(0))
    plan = ha.compile(f, *args, argnums=(0, 1))
    res = ha.GradientResult(tuple(args))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (a retrace warns: none may happen)
        for k in range(1, 6):
            args = make(np.random.default_rng(k))
            plan.gradient(*args, out=res)
            assert res.value == pytest.approx(f(*args), rel=1e-12)
            for j in (0, 1):
                d, slope = directional_difference(f, args, j)
                got = float(np.sum(res.gradient[j] * d))
                assert got == pytest.approx(slope, rel=1e-5, abs=1e-7), (k, j)
    assert len(plan._specializations) == 0
    with count_allocations() as counts:
        plan.gradient(*args, out=res)
    assert counts.allocations == 0, counts


def _read_past_the_end(x):
    return x[np.argmax(x) + 2 * (x[0] > 0.5)] ** 2


def _write_past_the_end(x):
    y = x * 2
    y[np.argmax(x) + 2 * (x[0] > 0.5)] = 0.0
    return np.sum(y ** 2)


@pytest.mark.parametrize("f", [_read_past_the_end, _write_past_the_end],
                         ids=["read", "write"])
def test_an_index_out_of_range_raises_numpys_error(f):
    """The guard: an index in range at the traced call and out of range at
    the next (argmax + 2 past the end) raises IndexError, as numpy, and the
    result is left untouched -- reading ``x[i]`` or writing ``y[i] = 0``."""
    x = np.array([0.1, 0.5, 0.2, 0.9])
    plan = ha.compile(f, x)
    res = plan.gradient(x)
    assert res.value == pytest.approx(f(x))
    before = res.gradient.copy()
    bad = np.array([0.9, 0.5, 0.2, 1.5])
    with pytest.raises(IndexError):
        f(bad)  # (numpy's own)
    with pytest.raises(IndexError):
        plan.gradient(bad, out=res)
    np.testing.assert_array_equal(res.gradient, before)


def test_a_traced_int_into_a_row_keeps_the_view_and_decides():
    """``X[i]`` with a 0-d traced ``i`` of a matrix is a view of a row in numpy
    (a write through it reaches ``X``): decided as before, still right."""
    def f(x, X):
        Y = X * 1.0
        row = Y[np.argmax(x)]
        row[0] = 0.0  # (reaches Y)
        return np.sum(Y ** 2) + np.sum(row * x[:3])
    rng = np.random.default_rng(3)
    x, X = rng.standard_normal(3), rng.standard_normal((3, 3))
    res = ha.gradient(f, x, X, argnums=(0, 1))
    assert res.value == pytest.approx(f(x, X), rel=1e-12)
    d, slope = directional_difference(f, [x, X], 1)
    assert float(np.sum(res.gradient[1] * d)) == pytest.approx(slope, rel=1e-6)


@pytest.mark.parametrize("m", [5, 32, 33, 100, 1000])
def test_searchsorted_is_numpys_and_a_long_array_is_searched_in_halves(m):
    """``np.searchsorted`` of a sorted array of m samples (NaNs last, both
    sides, constant or traced): numpy's indices exactly (read off a
    Jacobian's diagonal); past SEARCH_LINEAR_MAX samples a binary search --
    log2 m gathers, no (n, m) comparison -- which made ``np.interp`` on 101
    samples 4.7x faster (668 -> 140 us at n = 10^4)."""
    from hybridad.frontend.numpy_reductions import SEARCH_LINEAR_MAX

    rng = np.random.default_rng(m)
    a = np.sort(rng.integers(-20, 20, m).astype(float) * 0.5)
    if m > 5:
        a[-2:] = np.nan
    v = rng.integers(-25, 25, 40) * 0.5
    v[::7] = np.nan
    for side in ("left", "right"):
        for traced in (False, True):
            def f(v, side=side, traced=traced):
                aa = np.sin(v[1:2]) * 0 + a if traced else a
                return np.searchsorted(aa, v, side=side) * v
            plan = ha.compile(f, v, jacobian=True)
            got = np.diag(plan.jacobian(v).jacobian)
            np.testing.assert_array_equal(got, np.searchsorted(a, v, side=side))
            gathers = sum(n.op == "gather" for n in plan.graph.nodes)
            wide = [n for n in plan.graph.nodes if n.shape[-1:] == (m,) and len(n.shape) == 2]
            if m > SEARCH_LINEAR_MAX:
                assert 0 < gathers <= m.bit_length() + 1 and not wide


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("f, make", CASES, ids=[f.__name__ for f, _ in CASES])
def test_traced_indices_in_float32_on_both_cpu_backends(f, make, backend):
    """float32 arguments on either CPU backend: the float64 gradients to
    float32 rounding, one graph for every index, nothing allocated per call."""
    args = [a.astype(np.float32) for a in make(np.random.default_rng(0))]
    plan = ha.compile(f, *args, argnums=(0, 1), backend=backend)
    res = ha.GradientResult(tuple(args))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k in range(1, 4):
            args = [a.astype(np.float32) for a in make(np.random.default_rng(k))]
            plan.gradient(*args, out=res)
            want = ha.gradient(f, *[a.astype(np.float64) for a in args], argnums=(0, 1),
                               backend="numpy").gradient
            for g, w in zip(res.gradient, want, strict=True):
                assert g.dtype == np.float32
                np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5 * np.abs(w).max())
    with count_allocations() as counts:
        plan.gradient(*args, out=res)
    assert counts.allocations == 0, counts


def test_an_argmax_index_needs_no_range_check():
    """``np.argmax`` / ``np.argmin`` / ``np.argsort`` (and slices of it) lie in
    ``[0, n)``: an index by one into an axis of ``n`` or more holds no
    decision (its check recomputed the argmax or the sort at every call); into
    a shorter axis, or shifted, the range guard stays."""
    x = np.random.default_rng(3).standard_normal(12)
    for f in (lambda x: x[np.argmax(x)] ** 2 + x[np.argmin(x[:5])],
              lambda x: np.sum(np.where(np.arange(12) == 0, 0.0, x)[np.argmax(x ** 2)] * x),
              lambda x: np.sum(x[np.argsort(x)[-5:]] ** 2) + np.sum(x[np.argsort(x)[::-2]] * x[:6]),
              lambda x: np.sum(np.sort(x)[np.argsort(x.reshape(3, 4), axis=None)] * x)):
        plan = ha.compile(f, x)
        assert "decisions on values" not in plan.explain()
        for k in range(3):
            xk = np.random.default_rng(10 + k).standard_normal(12)
            res = plan.gradient(xk)
            assert res.value == pytest.approx(f(xk), rel=1e-14)
            d, slope = directional_difference(f, [xk], 0)
            assert float(np.sum(res.gradient * d)) == pytest.approx(slope, rel=1e-6, abs=1e-7)
        res = plan.gradient(x)
        assert_no_alloc(plan.gradient, x, out=res, n=10)
    y = np.array([0.0, 5.0, 1.0, 2.0, 3.0, 4.0])
    for f in (lambda x: x[:4][np.argmax(x)], lambda x: x[np.argmax(x) - 3]):
        assert "decisions on values" in ha.compile(f, y).explain()
