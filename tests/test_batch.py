"""``plan.gradient_batch``: values and gradients at B stacked inputs in one
compiled call, against B single gradients, with zero allocations per call and
bad input rejected before anything is written."""

import numpy as np
import pytest
from conftest import rand

import hybridad as ha
from hybridad.testing import assert_no_alloc


def expsum(x, a):
    r = np.sum(np.exp(-a * (x + 1)))
    return r ** 2 + r ** 3 + r ** 4 / 4


def model(x, A, b):
    # a matmul, a reduction over an axis, a max and slices: every op batched
    h = np.tanh(A @ x + b)
    return np.sum(h ** 2) + np.max(x[1:] * x[:-1]) + 0.5 * x @ x


CASES = {
    "expsum": (expsum, lambda: (rand((20,)), 3.0)),
    "model": (model, lambda: (rand((6,)), rand((4, 6), seed=2), rand((4,), seed=3))),
}


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_single_gradients(name, backend):
    f, make = CASES[name]
    x, *rest = make()
    X = np.stack([rand(x.shape, seed=10 + b) for b in range(37)])
    plan = ha.compile(f, x, *rest, backend=backend)
    res = plan.gradient_batch(X, *rest)
    values, grads = res.value, res.derivs[0]
    assert values.shape == (37,) and grads.shape == X.shape
    for b in range(len(X)):
        single = plan.gradient(X[b], *rest)
        assert values[b] == pytest.approx(float(single.value), rel=1e-13)
        np.testing.assert_allclose(grads[b], single.gradient, rtol=1e-12, atol=1e-14)


def linear(x, c):  # a gradient that does not depend on x
    return np.sum(x * c) + 2.0 * np.sum(c)


def affine_value_only(x, c):  # the value depends on x only through a linear term
    return np.sum(c * c) + np.sum(x) * 0.5


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("f", [linear, affine_value_only])
def test_gradients_that_do_not_depend_on_x_are_each_rows(f, backend):
    """A gradient computed without x (f linear in it) is every row's: it
    came back all zeros (the batch pass found no batched gradient and wrote
    none)."""
    c = rand((5,), seed=4)
    X = np.stack([rand((5,), seed=20 + b) for b in range(7)])
    res = _batch_as_single(f, X, c, backend)
    np.testing.assert_allclose(res.derivs[0], np.broadcast_to(
        c if f is linear else 0.5, X.shape), rtol=1e-15)


def _batch_as_single(f, X, c, backend):
    """``gradient_batch`` at ``X``: each row's value (to rounding) and gradient
    (bitwise) those of the single call there; the batch result."""
    plan = ha.compile(f, X[0], c, backend=backend)
    res = plan.gradient_batch(X, c)
    for b in range(len(X)):
        single = plan.gradient(X[b], c)
        assert res.value[b] == pytest.approx(float(single.value), rel=1e-13)
        np.testing.assert_array_equal(res.derivs[0][b], single.gradient)
    return res


SORTED = {
    "sort": lambda x, c: np.sum(np.sort(x) * c),
    "median": lambda x, c: np.median(x * c) + np.sum(x ** 2),
    "sort-axes": lambda x, c: np.sum(np.sort(x.reshape(3, 4), axis=0)[0] * c[:4]) +
    np.sum(np.sort(x.reshape(3, 4), axis=1) ** 2),
    "trimmed": lambda x, c: np.sum(np.sort(x)[3:9] ** 3),
}


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("name", sorted(SORTED))
def test_sorts_batch_as_single_gradients(name, backend):
    """np.sort and np.median in a batch (refused: no batch rule for sorts);
    each point's gradient goes back along its own permutation (the scatter's
    positions a row per point)."""
    X, c = np.stack([rand((12,), seed=30 + b) for b in range(7)]), rand((12,), seed=5)
    res = _batch_as_single(SORTED[name], X, c, backend)
    plan = ha.compile(SORTED[name], X[0], c, backend=backend)
    assert_no_alloc(plan.gradient_batch, X, c, out=res, n=10)


def test_an_empty_batch_gives_empty_results():
    c = rand((5,), seed=4)
    plan = ha.compile(expsum, c, 3.0)
    res = plan.gradient_batch(np.zeros((0, 5)), 3.0)
    assert res.value.shape == (0,) and res.derivs[0].shape == (0, 5)
    with pytest.raises(ValueError, match="X must be"):
        plan.gradient_batch(np.zeros((0, 4)), 3.0)


def test_no_allocation_per_call_and_one_plan_per_batch_size():
    x = rand((50,))
    plan = ha.compile(expsum, x, 3.0)
    X = np.stack([x * (1 + 0.01 * b) for b in range(64)])
    res = ha.DiffResult(np.zeros(64), np.zeros_like(X))
    assert_no_alloc(plan.gradient_batch, X, 3.0, out=res, n=20)
    plan.gradient_batch(X[:8], 3.0)
    assert sorted(plan._batch_plans) == [8, 64]


def test_bad_input_is_rejected_before_any_write():
    x = rand((5,))
    plan = ha.compile(expsum, x, 3.0)
    X = np.stack([x, x + 1])
    res = ha.DiffResult(np.full(2, 7.0), np.full((2, 5), 7.0))
    for bad in (np.zeros((2, 4)), np.zeros(5), X.astype(np.float32)):
        with pytest.raises(ValueError, match="stack"):
            plan.gradient_batch(bad, 3.0, out=res)
    with pytest.raises(ValueError, match="out"):
        plan.gradient_batch(X, 3.0, out=ha.DiffResult(np.zeros(3), np.zeros((2, 5))))
    with pytest.raises(ValueError, match="share memory"):
        plan.gradient_batch(X, 3.0, out=ha.DiffResult(np.zeros(2), X))
    assert np.all(res.value == 7.0) and np.all(res.derivs[0] == 7.0)
    with pytest.raises(TypeError, match="one array argument"):
        ha.compile(lambda x, y: np.sum(x * y), x, x, argnums=(0, 1)).gradient_batch(X, x)


def test_bound_methods_and_callables():
    class Model:
        def __init__(self, a):
            self.a = a

        def energy(self, x):
            return np.sum(np.exp(-self.a * x))

    m = Model(2.0)
    X = np.stack([rand((4,), seed=s) for s in range(3)])
    plan = ha.compile(m.energy, X[0])
    res = plan.gradient_batch(X)
    np.testing.assert_allclose(res.derivs[0], -2.0 * np.exp(-2.0 * X), rtol=1e-13)
