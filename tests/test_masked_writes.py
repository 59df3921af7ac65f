"""``a[mask] = value`` with a traced boolean mask and a value that broadcasts
to one selected element (``y[y < 0] = 0``, ``x[np.isnan(x)] = 0``, ``X[rows]
= row``) is traced as ``np.where(mask, value, a)``: numpy's write is the same
whatever the mask holds, so the plan takes no decision on the mask's values.
Before, every call whose mask differed traced and compiled the function again
(116 ms a call against 8.5 us, n = 10^4).  Values are numpy's own run of the
function, gradients agree with central differences, on inputs whose masks
all differ, and no call retraces."""

import warnings

import numpy as np
import pytest

import hybridad as ha
from conftest import (assert_float32_follows_float64, assert_one_graph_for_every_input,
                      directional_difference)
from hybridad.testing import count_allocations

RNG = np.random.default_rng(5)


def relu_sq(x):
    y = x.copy()
    y[y < 0] = 0.0
    return np.sum(y ** 2 * np.arange(x.size))


def clip_both(x):
    y = np.sin(3 * x)
    y[y > 0.5] = 0.5
    y[y < -0.25] = -0.25 * x[0]  # (a traced value: its gradient is the selection's sum)
    return np.sum(np.exp(y) * x)


def rows(X, w):
    """A mask over the leading axis, a row broadcast into each selected row."""
    Y = np.tanh(X)
    Y[X[:, 0] > 0] = w
    return np.sum(Y ** 2 * np.arange(X.shape[1]))


def through_a_view(x):
    y = x * 2
    v = y[3:]
    v[v > 0.3] = 0.3
    return np.sum(np.cos(y) * x)


def in_a_loop(x):
    for _ in range(5):
        x = x + 0.2 * np.sin(x)
        x[x > 1.0] = 1.0
    return np.sum(x ** 2)


def _inputs(shape, k):
    return [np.random.default_rng(k + j).standard_normal(shape) for j in range(4)]


CASES = [(relu_sq, [(60,)]), (clip_both, [(40,)]), (through_a_view, [(30,)]),
         (in_a_loop, [(25,)])]


@pytest.mark.parametrize("f, shapes", CASES, ids=[f.__name__ for f, _ in CASES])
def test_a_mask_write_is_one_graph_for_every_mask(f, shapes):
    (shape,) = shapes
    assert_one_graph_for_every_input(f, _inputs(shape, 3), abs=1e-8)


def test_a_row_mask_with_a_traced_row():
    X = RNG.standard_normal((12, 5))
    w = RNG.standard_normal(5)
    plan = ha.compile(rows, X, w, argnums=(0, 1))
    for k in range(3):
        Xk = np.random.default_rng(k).standard_normal((12, 5))
        res = plan.gradient(Xk, w)
        assert res.value == pytest.approx(rows(Xk, w), rel=1e-12)
        for j in (0, 1):
            d, slope = directional_difference(rows, [Xk, w], j)
            assert float(np.sum(res.gradient[j] * d)) == pytest.approx(slope, rel=1e-6, abs=1e-8)
    assert "decisions on values" not in plan.explain()


def test_integer_and_nan_masks_and_a_value_per_element():
    """An int array, a mask of NaNs (the value numpy's), and a value with one
    element per selected one (its count: still a decision, still right)."""
    def counts(x):
        a = np.zeros(x.size, dtype=np.int64)
        a[x > 0] = 2
        return np.sum(a * x)

    def nans(x):
        y = np.log(x)  # (NaN where x < 0)
        y[np.isnan(y)] = 0.0
        return np.sum(y)

    def per_element(x):
        y = x.copy()
        y[x > 0] = np.sqrt(x[x > 0])
        return np.sum(y * np.arange(x.size))
    for f in (counts, nans, per_element):
        x = RNG.standard_normal(20)
        x2 = RNG.standard_normal(20)
        plan = ha.compile(f, x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (per_element retraces: its count decides)
            for z in (x, x2):
                res = plan.gradient(z)
                assert res.value == pytest.approx(f(z), rel=1e-12)
                d, slope = directional_difference(f, [z], 0)
                assert float(np.sum(res.gradient * d)) == pytest.approx(slope, rel=1e-5,
                                                                        abs=1e-8)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("f, shapes", CASES, ids=[f.__name__ for f, _ in CASES])
def test_a_mask_write_in_float32_on_both_cpu_backends(f, shapes, backend):
    """float32 arguments on either CPU backend: the float64 gradient to
    float32 rounding, no retrace over new masks, nothing allocated per call."""
    (shape,) = shapes
    xs = [x.astype(np.float32) for x in _inputs(shape, 7)]
    plan, res = assert_float32_follows_float64(f, xs, backend)
    with count_allocations() as counts:
        plan.gradient(xs[1], out=res)
    assert counts.allocations == 0, counts
