"""``y[mask] op= v`` and ``y[mask] = g(a[mask])`` with a traced boolean mask:
Python reads the selection ``y[mask]`` first (its length the mask's count, a
decision on the mask's values), and the plan retraced and compiled at every
call whose mask differed (250 ms a call against 0.09 ms, n = 1000).  When the
value written is an elementwise function of selections by that very mask
(and of numbers or rows), the statement is traced as ``np.where(mask, g(a),
y)`` and the selection's decision is dropped once nothing else reads it
(:mod:`hybridad.frontend.numpy_masked`).  Values are numpy's own run,
gradients agree with central differences on inputs whose masks all differ,
and no call retraces; a selection read elsewhere keeps its decision."""

import warnings

import numpy as np
import pytest

import hybridad as ha
from conftest import directional_difference
from hybridad.testing import count_allocations


def leaky(x):
    y = np.sin(3 * x) * 2
    y[y < 0] *= 0.1
    return np.sum(y ** 2 * np.arange(x.size))


def shifted(x):
    y = x * 2
    y[y > 1] -= 1
    y[y < -1] += 2.0 * y[y < -1] + x[0]  # (a second selection, and a traced number)
    return np.sum(y ** 3)


def rows(X):
    Y = np.tanh(X)
    Y[X[:, 0] > 0] *= np.array([1.0, 2.0, 3.0])  # (a row broadcast into each selected row)
    return np.sum(Y ** 2)


def from_another(x):
    y = np.cos(x)
    y[x > 0] = np.sqrt(x[x > 0]) * y[x > 0]
    return np.sum(y * np.arange(x.size))


def read_before_a_write(x):
    y = x * 2
    m = y > 0
    s = y[m]
    y[0] = 5.0  # (numpy's s holds the values before this write)
    y[m] = s * 3
    return np.sum(y ** 2)


def logs_with_zeros(x):
    y = np.maximum(x, 0.0)  # (exact zeros: log is not taken there, nor its derivative)
    y[y > 0] = np.log(y[y > 0])
    return np.sum(y ** 2 + x)


def in_a_loop(x):
    for _ in range(4):
        x = x + 0.3 * np.sin(x)
        x[x > 0.8] *= 0.5
    return np.sum(x ** 2)


CASES = [(leaky, (40,)), (shifted, (30,)), (rows, (12, 3)), (from_another, (25,)),
         (read_before_a_write, (20,)), (logs_with_zeros, (24,)), (in_a_loop, (16,))]


def _inputs(shape, k):
    return [np.random.default_rng(k + j).standard_normal(shape) for j in range(4)]


@pytest.mark.parametrize("f, shape", CASES, ids=[f.__name__ for f, _ in CASES])
def test_a_masked_update_is_one_graph_for_every_mask(f, shape):
    xs = _inputs(shape, 11)
    plan = ha.compile(f, xs[0])
    res = ha.GradientResult(xs[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (a retrace warns, and so would a log of a zero)
        for x in xs:
            plan.gradient(x, out=res)
            assert res.value == pytest.approx(f(x), rel=1e-12)
            d, slope = directional_difference(f, [x], 0)
            assert float(np.sum(res.gradient * d)) == pytest.approx(slope, rel=1e-6, abs=1e-7)
    assert "decisions on values" not in plan.explain()
    with count_allocations() as counts:
        plan.gradient(xs[1], out=res)
    assert counts.allocations == 0, counts


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("f, shape", CASES[:4], ids=[f.__name__ for f, _ in CASES[:4]])
def test_a_masked_update_in_float32_on_both_cpu_backends(f, shape, backend):
    xs = [x.astype(np.float32) for x in _inputs(shape, 21)]
    plan = ha.compile(f, xs[0], backend=backend)
    res = ha.GradientResult(xs[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for x in xs:
            plan.gradient(x, out=res)
            want = ha.gradient(f, x.astype(np.float64), backend="numpy").gradient
            assert res.gradient.dtype == np.float32
            np.testing.assert_allclose(res.gradient, want, rtol=2e-5,
                                       atol=2e-5 * np.abs(want).max())


def test_a_selection_read_elsewhere_keeps_its_decision():
    """``sel.sum()`` reads the selection itself (its count matters): the
    mask stays a decision, and a new mask traces again -- right either way."""
    def used(x):
        y = np.sin(x)
        sel = y[y > 0]
        sel *= 2
        y[y > 0] = sel
        return np.sum(y) + sel.sum() * sel.size
    xs = _inputs((15,), 31)
    plan = ha.compile(used, xs[0])
    assert "decisions on values" in plan.explain()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (new masks retrace)
        for x in xs:
            res = plan.gradient(x)
            assert res.value == pytest.approx(used(x), rel=1e-12)
            d, slope = directional_difference(used, [x], 0)
            assert float(np.sum(res.gradient * d)) == pytest.approx(slope, rel=1e-6, abs=1e-7)


def test_a_value_that_is_not_elementwise_in_the_selection_keeps_the_decision():
    """A value from a reduction of the selection (its mean), or reordered
    (``sel[::-1]``), is not one element's function: decided, and right."""
    def centred(x):
        y = x * 1.0
        y[y > 0] -= np.mean(y[y > 0])
        return np.sum(y ** 2)

    def reversed_(x):
        y = x * 1.0
        y[y > 0] = y[y > 0][::-1]
        return np.sum(y ** 2 * np.arange(x.size))
    for f in (centred, reversed_):
        xs = _inputs((12,), 41)
        plan = ha.compile(f, xs[0])
        assert "decisions on values" in plan.explain()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for x in xs:
                res = plan.gradient(x)
                assert res.value == pytest.approx(f(x), rel=1e-12)
                d, slope = directional_difference(f, [x], 0)
                assert float(np.sum(res.gradient * d)) == pytest.approx(slope, rel=1e-6,
                                                                        abs=1e-7)
