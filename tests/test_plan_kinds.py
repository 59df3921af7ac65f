"""Every public method of every kind of plan either works or raises a
TypeError that names the method and what to build instead -- never a crash
from inside a backend -- and results have the named accessors of their kind."""

import numpy as np
import pytest

import hybridad as ha
from hybridad.optim import SGD

X = np.linspace(0.1, 1.0, 5)
C = np.ones(5)


def _f(x, c):
    return np.sum(np.tanh(x) * c) ** 2


def _vec(x, c):
    return np.tanh(x) * c


KINDS = {
    "gradient": lambda be: ha.compile(_f, X, C, backend=be),
    "hvp": lambda be: ha.compile(_f, X, C, hvp=True, backend=be),
    "update": lambda be: ha.compile(_f, X.copy(), C, update=SGD(0.1), backend=be),
    "hessian": lambda be: ha.compile(_f, X, C, hessian=True, backend=be),
    "jacobian": lambda be: ha.compile(_vec, X, C, jacobian=True, backend=be),
    "two_args": lambda be: ha.compile(_f, X, C, argnums=(0, 1), backend=be),
}

CALLS = {
    "gradient": lambda p: p.gradient(X, C),
    "value": lambda p: p.value(X, C),
    "hvp": lambda p: p.hvp(X, C, v=X),
    "hessian": lambda p: p.hessian(X, C),
    "linearize": lambda p: p.linearize(X, C),
    "jacobian": lambda p: p.jacobian(X, C),
    "step": lambda p: p.step(X.copy(), C),
    "gradient_batch": lambda p: p.gradient_batch(np.stack([X, 2 * X]), C),
    "explain": lambda p: p.explain(),
    "new_result": lambda p: p.new_result(),
}

#: (kind, method) pairs that compute something; every other pair is refused
WORKS = {
    ("gradient", m) for m in ("gradient", "value", "gradient_batch", "explain", "new_result")
} | {("hvp", m) for m in ("hvp", "value", "explain", "new_result")} \
  | {("update", m) for m in ("step", "value", "explain", "new_result")} \
  | {("hessian", m) for m in ("gradient", "value", "hvp", "hessian", "linearize", "explain",
                              "new_result")} \
  | {("jacobian", m) for m in ("jacobian", "value", "explain", "new_result")} \
  | {("two_args", m) for m in ("gradient", "value", "explain", "new_result")}


@pytest.fixture(scope="module", params=["numpy", "numba"])
def plans(request):
    return {k: make(request.param) for k, make in KINDS.items()}


@pytest.mark.parametrize("method", sorted(CALLS))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_method_on_every_plan(plans, kind, method):
    plan = plans[kind]
    if (kind, method) in WORKS:
        CALLS[method](plan)
        return
    with pytest.raises(TypeError) as err:
        CALLS[method](plan)
    text = str(err.value)
    assert method in text, text
    assert "hybridad." in text or "argnums" in text, text  # says what to use instead


def test_results_have_the_accessors_of_their_kind(plans):
    g = plans["gradient"].gradient(X, C)
    assert g.gradient.shape == X.shape
    b = plans["gradient"].gradient_batch(np.stack([X, 2 * X]), C)
    assert isinstance(b, ha.BatchGradientResult)
    assert b.value.shape == (2,) and b.values is b.value and b.gradient.shape == (2, 5)
    np.testing.assert_allclose(b.gradient[1], plans["gradient"].gradient(2 * X, C).gradient,
                               rtol=1e-13)
    h = plans["hessian"].hessian(X, C)
    assert h.hessian.shape == (5, 5) and h.gradient.shape == (5,)
    v = plans["hvp"].hvp(X, C, v=X)
    assert v.hvp.shape == (5,) and v.gradient.shape == (5,)
    j = plans["jacobian"].jacobian(X, C)
    assert j.jacobian.shape == (5, 5) and j.value.shape == (5,)
    # the value program of an HVP plan runs without v
    assert np.isclose(plans["hvp"].value(X, C), _f(X, C))
