"""``y[mask] op= v`` with a traced boolean mask: Python reads the selection
``y[mask]`` first (its length the mask's count), updates it and writes it
back; the plan retraced and compiled at every call whose mask differed (250
ms a call against 0.09 ms, n = 1000).  The selection is now lazy
(:mod:`hybridad.frontend.numpy_selected`): an elementwise update of it, and
the write-back, are ``np.where(mask, g(y), y)``, one graph for every mask.
Values are numpy's own run, gradients agree with central differences on
inputs whose masks all differ, and no call retraces.  A selection whose count
the code uses (``sel.size``, a reversed selection) keeps its decision."""

import warnings

import numpy as np
import pytest

import hybridad as ha
from conftest import (assert_float32_follows_float64, assert_one_graph_for_every_input,
                      directional_difference)


def leaky(x):
    y = np.sin(3 * x) * 2
    y[y < 0] *= 0.1
    return np.sum(y ** 2 * np.arange(x.size))


def shifted(x):
    y = x * 2
    y[y > 1] -= 1
    y[y < -1] += 0.5 * x[0]  # (a traced number)
    return np.sum(y ** 3)


def rows(X):
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


CASES = [(leaky, (40,)), (shifted, (30,)), (rows, (12, 3)), (reciprocal_roots, (24,)),
         (in_a_loop, (16,)), (from_another, (15,)), (doubled, (15,)), (centred, (15,))]


def _inputs(shape, k):
    return [np.random.default_rng(k + j).standard_normal(shape) for j in range(4)]


@pytest.mark.parametrize("f, shape", CASES, ids=[f.__name__ for f, _ in CASES])
def test_a_masked_update_is_one_graph_for_every_mask(f, shape):
    assert_one_graph_for_every_input(f, _inputs(shape, 11), abs=1e-7)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("f, shape", CASES[:4], ids=[f.__name__ for f, _ in CASES[:4]])
def test_a_masked_update_in_float32_on_both_cpu_backends(f, shape, backend):
    assert_float32_follows_float64(f, [x.astype(np.float32) for x in _inputs(shape, 21)],
                                   backend)


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


@pytest.mark.parametrize("f", [used, read_before_a_write, reversed_],
                         ids=lambda f: f.__name__)
def test_a_selection_whose_count_is_used_keeps_its_decision(f):
    """The mask stays a decision (a new mask traces again), and every call is
    right: values numpy's, gradients the differences'."""
    xs = _inputs((15,), 31)
    plan = ha.compile(f, xs[0])
    assert "decisions on values" in plan.explain()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (new masks retrace)
        for x in xs:
            res = plan.gradient(x)
            assert res.value == pytest.approx(f(x), rel=1e-12)
            d, slope = directional_difference(f, [x], 0)
            assert float(np.sum(res.gradient * d)) == pytest.approx(slope, rel=1e-6, abs=1e-7)
