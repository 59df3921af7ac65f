"""Tracing: common subexpressions."""

import numpy as np

import hybridad as ha

def test_common_subexpressions_are_merged():
    from hybridad.core.trace import Trace

    trace = Trace()
    with trace:
        x = trace.input(0, (5,), np.dtype(np.float64))
        a, b = x[:-1], x[:-1]
        c = x[1:]
        e1, e2 = np.exp(a), np.exp(b)
        k1, k2 = x * 2.0, x * 2.0
    assert a.node is b.node and c.node is not a.node
    assert e1.node is e2.node and k1.node is k2.node
    ops = [n.op for n in trace.nodes]
    assert ops.count("getitem") == 2 and ops.count("exp") == 1 and ops.count("multiply") == 1
    assert ops.count("const") == 1  # the literal 2.0, once


def test_backward_nodes_are_never_merged():
    # the reverse pass adds into buffers it created: two equal products there are two buffers
    def f(x):
        return np.sum(x * x) + np.sum(x * x * 1.5)

    x = np.linspace(-1.0, 1.0, 7)
    res = ha.gradient(f, x)
    np.testing.assert_allclose(res.gradient, 2 * x + 3 * x, rtol=1e-14)
