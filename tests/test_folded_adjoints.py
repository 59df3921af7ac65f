"""Cotangents that fold into constants are never accumulated into in place.

The reverse pass adds a node's cotangents as they arrive, into the first
one's buffer where that buffer is its own.  Two literal cotangents -- the
slices of a sum's cotangent that a concatenation of one array with itself
hands back -- fold into a constant of the plan; adding the third into it in
place changed the constant, and every later call's gradient with it
(``np.sum(np.concatenate([x, x, x]))``: 3, then 4, then 5).  Each function
here is called three times on both CPU backends: the same bits every call,
and the derivative numpy's finite differences give.
"""

from __future__ import annotations

import numpy as np
import pytest

import hybridad as ha
from hybridad.ir.graph import Graph, Node, check
from hybridad.testing import assert_no_alloc, numerical_gradient

X = np.array([0.3, -1.2, 0.8])
M = np.array([[0.3, -1.2, 0.8], [1.1, 0.4, -0.6]])

CASES = {
    "three copies": (lambda x: np.sum(np.concatenate([x, x, x])), X),
    "four copies": (lambda x: np.sum(np.concatenate([x] * 4)), X),
    "a square between": (lambda x: np.sum(np.concatenate([x, x ** 2, x])), X),
    "a sum beside two copies": (lambda x: np.sum(x) + np.sum(np.concatenate([x, x])), X),
    "append": (lambda x: np.sum(x) + np.sum(np.append(x, x)), X),
    "r_": (lambda x: np.sum(x) + np.sum(np.r_[x, x]), X),
    "means": (lambda x: np.mean(x) + np.mean(np.concatenate([x, x])), X),
    "axis 1": (lambda m: np.sum(m) + np.sum(np.concatenate([m, m], axis=1)), M),
    "scaled": (lambda x: np.sum(3.0 * np.concatenate([x, x, x])), X),
}


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_of_self_concatenations_are_the_same_every_call(name, backend):
    f, x = CASES[name]
    want = numerical_gradient(f, x)
    plan = ha.compile(f, x, backend=backend)
    out = ha.GradientResult(x)
    first = None
    for _ in range(3):
        got = plan.gradient(x, out=out).gradient.copy()
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-8)
        if first is None:
            first = got
        assert np.array_equal(got, first)
    assert_no_alloc(plan.gradient, x, out=out, n=10)
    np.testing.assert_array_equal(out.gradient, first)  # (the same bits after those calls)
    for _ in range(3):  # (the convenience function: its cached plan, called again)
        np.testing.assert_array_equal(ha.gradient(f, x, backend=backend).gradient, first)


def test_a_graph_that_writes_into_a_constant_in_place_is_refused():
    c = Node(0, "const", (), {"value": np.ones(3), "literal": True}, (3,), np.dtype("f8"))
    d = Node(1, "const", (), {"value": np.ones(3), "literal": True}, (3,), np.dtype("f8"))
    view = Node(2, "getitem", (c,), {"index": (slice(0, 3, None),)}, (3,), np.dtype("f8"))
    acc = Node(3, "iadd", (view, d), {}, (3,), np.dtype("f8"))
    with pytest.raises(AssertionError, match="in place into the constant %0"):
        check(Graph([c, d, view, acc], [], [acc]))
