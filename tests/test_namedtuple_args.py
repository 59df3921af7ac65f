"""Namedtuples of arrays as differentiated arguments, as JAX takes them: the
gradient comes back as the same namedtuple, the plan's fast path takes them
apart without flattening, and nothing is allocated per call."""

import collections

import numpy as np
import pytest

import hybridad as ha
from hybridad.plans.plan import Plan
from hybridad.testing import count_allocations, numerical_gradient
from conftest import rand

Params = collections.namedtuple("Params", ["W", "b"])
Layer = collections.namedtuple("Layer", ["inner", "scale"])


def loss(p, X, y):
    return np.mean((np.tanh(X @ p.W + p.b) - y) ** 2)


def nested(q, X, y):
    return loss(q.inner, X, y) * q.scale[0] + np.sum(q.scale ** 2)


def _data():
    return rand((9, 4), seed=1), rand((9, 3), seed=2)


def _fd(f, tree, *args):
    """Central differences leaf by leaf, as the same namedtuple."""
    leaves, td = ha._tree.flatten(tree)
    out = []
    for k, leaf in enumerate(leaves):
        def fk(v, k=k):
            new = list(leaves)
            new[k] = v
            return f(ha._tree.unflatten(td, new), *args)
        out.append(numerical_gradient(fk, leaf))
    return ha._tree.unflatten(td, out)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_gradient_comes_back_as_the_namedtuple(backend):
    X, y = _data()
    for seed in (3, 4):
        p = Params(rand((4, 3), seed=seed), rand((3,), seed=seed + 10))
        res = ha.gradient(loss, p, X, y, backend=backend)
        assert type(res.gradient) is Params
        want = _fd(loss, p, X, y)
        for got, fd in zip(res.gradient, want, strict=True):
            np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-9)
    q = Layer(p, np.array([1.5, 0.2]))
    res = ha.gradient(nested, q, X, y, backend=backend)
    assert type(res.gradient) is Layer and type(res.gradient.inner) is Params
    want = _fd(nested, q, X, y)
    for got, fd in zip(ha._tree.flatten(res.gradient)[0], ha._tree.flatten(want)[0],
                       strict=True):
        np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-9)


def test_the_plan_takes_them_on_its_fast_path_allocating_nothing(monkeypatch):
    X, y = _data()
    p = Params(rand((4, 3), seed=5), rand((3,), seed=6))
    plan = ha.compile(loss, p, X, y)
    out = ha.GradientResult(p)
    assert type(out.gradient) is Params
    checks, calls = Plan._check_out, []
    monkeypatch.setattr(Plan, "_check_out", lambda *a, **k: calls.append(1) or checks(*a, **k))
    for _ in range(3):
        plan.gradient(p, X, y, out=out)
        ha.gradient(loss, p, X, y, out=out)
    with count_allocations() as counts:
        plan.gradient(p, X, y, out=out)
        ha.gradient(loss, p, X, y, out=out)
    assert counts.allocations == 0 and not calls
    # a plain tuple of the same arrays is another structure: the general path says so
    with pytest.raises((TypeError, ValueError)):
        plan.gradient(tuple(p), X, y, out=out)


def test_hvp_and_argnums_with_a_namedtuple():
    X, y = _data()
    p = Params(rand((4, 3), seed=7), rand((3,), seed=8))
    v = Params(rand((4, 3), seed=9), rand((3,), seed=10))
    res = ha.hvp(loss, p, v, X, y)
    assert type(res.hvp) is Params
    step = 1e-6
    up = ha.gradient(loss, Params(p.W + step * v.W, p.b + step * v.b), X, y).gradient
    down = ha.gradient(loss, Params(p.W - step * v.W, p.b - step * v.b), X, y).gradient
    for got, a, b in zip(res.hvp, up, down, strict=True):
        np.testing.assert_allclose(got, (a - b) / (2 * step), rtol=1e-5, atol=1e-8)
    res = ha.gradient(lambda X, p, y: loss(p, X, y), X, p, y, argnums=(1, 0))
    assert type(res.gradient[0]) is Params
    np.testing.assert_allclose(res.gradient[1], numerical_gradient(lambda X: loss(p, X, y), X),
                               rtol=1e-6, atol=1e-9)
