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


# ----------------------------------------------------------------------------
# dataclasses: the same, by their fields
# ----------------------------------------------------------------------------

import dataclasses  # noqa: E402


@dataclasses.dataclass
class DParams:
    W: np.ndarray
    b: np.ndarray
    scale: float = 1.5  # (a number in a differentiated structure: differentiated)

    def predict(self, X):
        return np.tanh(X @ self.W + self.b) * self.scale


@dataclasses.dataclass(frozen=True)
class DData:
    X: np.ndarray
    y: np.ndarray
    lam: float = 0.1
    n: int = dataclasses.field(init=False, default=0)  # (set by __post_init__)

    def __post_init__(self):
        object.__setattr__(self, "n", len(self.y))


def dloss(p, d):
    return np.sum((p.predict(d.X) - d.y) ** 2) / d.n + d.lam * np.sum(p.W ** 2)


def _dflat(p):
    return np.concatenate([p.W.ravel(), p.b, [p.scale]])


def _dtree(v):
    return DParams(v[:12].reshape(4, 3), v[12:15], float(v[15]))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_dataclasses_as_differentiated_and_data_arguments(backend):
    """A dataclass of arrays (and numbers) is a pytree by its fields, as a
    namedtuple is: the gradient is the same dataclass; a frozen one of data,
    with a field its ``__post_init__`` sets, is read anew at each call; a
    result made from it takes the gradient; ``hvp`` takes ``v`` as one; a
    dataclass of another class does not match the plan.  Both raised
    (\"neither an array ... nor hashable\" / \"must be a floating-point
    array\")."""
    X, y = _data()
    p = DParams(rand((4, 3), seed=3), rand(3, seed=4))
    data = DData(X, y)
    plan = ha.compile(dloss, p, data, backend=backend)
    for d in (data, DData(X * 0.5, y, lam=0.1)):
        res = plan.gradient(p, d)
        assert isinstance(res.gradient, DParams) and res.value == pytest.approx(dloss(p, d))
        want = numerical_gradient(lambda v, d=d: dloss(_dtree(v), d), _dflat(p))
        np.testing.assert_allclose(_dflat(res.gradient), want, rtol=1e-6, atol=1e-8)
    out = ha.GradientResult(p)
    assert isinstance(out.gradient, DParams)
    plan.gradient(p, data, out=out)
    np.testing.assert_array_equal(out.gradient.W, plan.gradient(p, data).gradient.W)
    v = DParams(np.ones((4, 3)), np.ones(3), 1.0)
    hv = ha.hvp(dloss, p, v, data, backend=backend).hvp
    step = 1e-6
    g = [_dflat(ha.gradient(dloss, _dtree(_dflat(p) + s * _dflat(v)), data,
                            backend="numpy").gradient) for s in (step, -step)]
    np.testing.assert_allclose(_dflat(hv), (g[0] - g[1]) / (2 * step), rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="does not match the plan"):
        plan.gradient(p, Params(X, y))
