"""Composite ops (``kind="composite"`` in :mod:`hybridad.ir.registry`): a
matrix-vector product is one node while a plan's trace is recorded and rolled
(a loop of them traces fewer nodes a step), and is lowered to the primitives
it stands for before any later pass -- the graph a trace without composites
holds, node for node."""

import numpy as np
import pytest

import hybridad as ha
from hybridad.core.trace import Trace
from hybridad.ir.registry import REGISTRY
from hybridad.testing import numerical_gradient
from hybridad.transforms.rolling_runs import PRIMITIVES

RNG = np.random.default_rng(7)
A = RNG.standard_normal((5, 4))
B = RNG.standard_normal((4, 4)) / 2
X = RNG.standard_normal(4)
Y = RNG.standard_normal(5)

#: functions of (x, y) with matrix-vector products: a @ x, y @ a, products of
#: one vector (its column made once), chained, mixed with the primitives'
#: own forms (a column, a 2-d product) and with ones that stay primitive
#: (a literal vector, a stack of matrices, a contracted length of 1)
FUNCTIONS = {
    "matvec": lambda x, y: np.sum(np.tanh(A @ x) * y),
    "vecmat": lambda x, y: np.sum(np.sin(y @ A) * x),
    "shared_vector": lambda x, y: np.sum((A @ x) ** 2) + np.sum(np.cos(A @ x + 1.0)),
    "two_matrices": lambda x, y: np.sum(A @ x * y) + np.sum(B @ x),
    "chained": lambda x, y: np.sum(A @ (B @ (B @ x))),
    "both_sides": lambda x, y: (y @ A) @ x + np.sum(A @ x),
    "with_2d": lambda x, y: np.sum(A @ x[:, None]) + np.sum(A @ x),
    "made_vector": lambda x, y: np.sum((A * x[0]) @ np.ones(4)),
    "stacked": lambda x, y: np.sum(np.stack([A, A]) @ x),
    "one_column": lambda x, y: np.sum(A[:, :1] @ x[:1]),
}


def _node(i, shape, op="input", args=()):  # (a matrix-vector product's operands)
    from hybridad.ir.graph import Node
    return Node(i, op, args, {}, shape, np.float64)


def _structure(nodes):
    """The graph by positions (ids differ between two traces' numbering)."""
    pos = {n.id: k for k, n in enumerate(nodes)}
    return [(n.op, tuple(pos[a.id] for a in n.args), n.shape, n.dtype.str,
             repr(sorted((k, v) for k, v in n.attrs.items() if k != "value")))
            for n in nodes]


def _traced(f, args, composites):
    trace = Trace()
    trace.composites = composites
    with trace:
        ins = [trace.input(k, a.shape, a.dtype) for k, a in enumerate(args)]
        f(*ins)
    held = [n.op for n in trace.nodes]
    trace.lower_composites()
    return held, trace.nodes


def test_every_composite_lowers_and_the_thresholds_count_its_primitives():
    composites = {name for name, op in REGISTRY.items() if op.kind == "composite"}
    assert composites == set(PRIMITIVES) and composites
    assert all(REGISTRY[name].lower is not None for name in composites)
    for name in composites:  # (the count declared on the op: what its lowering makes)
        op = REGISTRY[name]
        made = []
        a = _node(0, (3, 2))
        v = _node(1, (2,))
        node = _node(2, (3,), name, (a, v))
        op.lower(node, lambda *spec: made.append(spec) or _node(3 + len(made), spec[3]))
        assert op.primitives == len(made) + 1 == PRIMITIVES[name]


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_lowered_trace_is_the_primitive_trace(name):
    f = FUNCTIONS[name]
    held, lowered = _traced(f, (X, Y), True)
    _, plain = _traced(f, (X, Y), False)
    assert _structure(lowered) == _structure(plain)
    assert not any(REGISTRY[n.op].kind == "composite" for n in lowered
                   if n.op in REGISTRY)
    kept = name in ("stacked", "one_column")  # (primitive as traced)
    assert ("matvec" in held) != kept


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_gradients_through_products_match_differences(name, backend):
    f = FUNCTIONS[name]
    plan = ha.compile(f, X, Y, argnums=(0, 1), backend=backend)
    assert not any(n.op == "matvec" for n in plan.graph.nodes)
    res = plan.gradient(X, Y)
    np.testing.assert_allclose(res.value, f(X, Y), rtol=1e-12)
    for k, g in enumerate(res.gradient):
        want = numerical_gradient(lambda v, k=k: f(*((v, Y) if k == 0 else (X, v))),
                                  (X, Y)[k])
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-8)


def test_float32_products_lower_alike():
    dtype = np.float32
    a = A.astype(dtype)

    def f(x):
        return a @ x

    x = X.astype(dtype)
    held, lowered = _traced(f, (x,), True)
    _, plain = _traced(f, (x,), False)
    assert "matvec" in held and _structure(lowered) == _structure(plain)


def test_jacobian_of_a_product_returned():
    plan = ha.compile(lambda x: A @ np.tanh(x), X, jacobian=True)
    jac = plan.jacobian(X).jacobian
    np.testing.assert_allclose(jac, A * (1 - np.tanh(X) ** 2), rtol=1e-12)


def test_a_decision_on_a_product_checks_its_lowered_value():
    def f(x):
        v = A @ x
        if np.sum(v) > 0:  # a Python decision on the product's value
            return np.sum(v ** 2)
        return np.sum(np.exp(v))

    plan = ha.compile(f, X)
    for x in (X, -X):
        np.testing.assert_allclose(plan.gradient(x).gradient, numerical_gradient(f, x),
                                   rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_recurrences_of_products_roll_and_match(backend):
    w, u = B / 2, A.T / 3  # (4 x 4, 4 x 5)
    xs = RNG.standard_normal((60, 5))

    def rnn(h, w):
        for x in xs:
            h = np.tanh(w @ h + u @ x)
        return np.sum(h ** 2)

    def left(h, w):
        for x in xs:
            h = np.tanh(h @ w + x @ u.T)
        return np.sum(h ** 2)

    for f in (rnn, left):
        plan = ha.compile(f, X, w, argnums=(0, 1), backend=backend)
        assert any(n.op == "loop" for n in plan.graph.nodes)
        gh, gw = plan.gradient(X, w).gradient
        np.testing.assert_allclose(gh, numerical_gradient(lambda h: f(h, w), X),
                                   rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(gw, numerical_gradient(lambda m: f(X, m), w),
                                   rtol=1e-6, atol=1e-8)
