"""Elementwise ops of broadcast one-element values computed once
(``transforms/broadcasts.py``): the reverse sweep's cotangent of a sum,
broadcast over the summed shape and multiplied by a literal, is no longer
an array of one repeated value written and read back (a Rosenbrock
Hessian's tangent program read ``100 * ones(n)``).  The bits do not change."""

from __future__ import annotations

import numpy as np
import pytest

import hybridad as ha
from hybridad.testing import count_allocations
from hybridad.transforms import pipeline

RNG = np.random.default_rng(11)


def rosen(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def cubic(x):
    return np.sum(2.5 * np.cos(x) + 0.5 * x ** 3)


def _scalar_like(a):
    return a.size == 1 or a.op == "broadcast_to" and a.args[0].size == 1


def _repeated_values(graph):
    """Nodes of more than one element computed from one-element values only."""
    from hybridad.ir.registry import REGISTRY

    return [n for n in graph.nodes if n.size > 1 and n.args and (
        n.op == "region" or n.op in REGISTRY and REGISTRY[n.op].kind == "elementwise") and
        all(_scalar_like(a) for a in n.args)]


def _without_the_pass(monkeypatch):
    passes = dict(pipeline.PASSES)
    passes["scalar_broadcasts"] = (passes["scalar_broadcasts"][0],
                                   lambda nodes, ins, outs, upd, mach: nodes)
    monkeypatch.setattr(pipeline, "PASSES", passes)


@pytest.mark.parametrize("f", [rosen, cubic], ids=lambda f: f.__name__)
def test_no_array_of_one_repeated_value_and_the_same_bits(f, monkeypatch):
    x = RNG.uniform(-1, 1, 200_000)  # (large: smaller constants are folded)
    v = RNG.standard_normal(x.size)
    hess = ha.compile(f, x, hessian=True)
    grad = ha.compile(f, x)
    hvp = ha.compile(f, x, hvp=True)
    for plan in (hess, grad, hvp):
        assert _repeated_values(plan.graph) == [], _repeated_values(plan.graph)
    hess.linearize(x)
    res = ha.HvpResult(x)
    hess.hvp(v=v, out=res)
    with count_allocations() as counts:
        hess.hvp(v=v, out=res)
    assert counts.allocations == 0, counts
    full = hvp.hvp(x, v=v)
    np.testing.assert_allclose(res.hvp, full.hvp, rtol=1e-12, atol=1e-12)
    # H v against central differences of the gradient along v
    h = 1e-6
    g_up, g_down = grad.gradient(x + h * v).gradient.copy(), grad.gradient(x - h * v).gradient
    np.testing.assert_allclose(res.hvp, (g_up - g_down) / (2 * h), rtol=1e-5, atol=1e-5)
    # the same plans without the pass: the same bits
    _without_the_pass(monkeypatch)
    old_hess = ha.compile(f, x, hessian=True)
    assert _repeated_values(old_hess.graph)  # (what the pass removes)
    old_hess.linearize(x)
    np.testing.assert_array_equal(old_hess.hvp(v=v).hvp, res.hvp)
    ref = ha.compile(f, x, hvp=True).hvp(x, v=v)
    np.testing.assert_array_equal(full.hvp, ref.hvp)
    np.testing.assert_array_equal(full.gradient, ref.gradient)
    old_grad = ha.compile(f, x)
    np.testing.assert_array_equal(grad.gradient(x).gradient, old_grad.gradient(x).gradient)


def test_equal_partials_are_one_node_and_the_bits_stay(monkeypatch):
    """The reverse and tangent sweeps emit their partials op by op: the
    Rosenbrock Hessian computed and stored ``2 * x[:-1]`` twice (two literal
    ``2`` nodes).  One node each (``transforms/cse.py``): one array less in
    the plan's workspace, the same bits."""
    from hybridad.transforms.cse import _key

    x = RNG.uniform(-1, 1, 100_000)
    v = RNG.standard_normal(x.size)
    plan = ha.compile(rosen, x, hessian=True)
    keys = [_key(n) for n in plan.graph.nodes]
    keys = [k for k in keys if k is not None]
    assert len(keys) == len(set(keys))
    plan.linearize(x)
    got = plan.hvp(v=v).hvp.copy()
    passes = dict(pipeline.PASSES)
    passes["cse"] = (passes["cse"][0], lambda nodes, ins, outs, upd, mach: nodes)
    monkeypatch.setattr(pipeline, "PASSES", passes)
    old = ha.compile(rosen, x, hessian=True)
    assert plan.memory.total_bytes <= old.memory.total_bytes - x.nbytes + 8
    old.linearize(x)
    np.testing.assert_array_equal(old.hvp(v=v).hvp, got)


def test_no_merges_where_a_value_is_read_before_an_in_place_write():
    """``a`` read, then added into: the Hessian plan (with its merges) agrees
    with the numpy reference and with differences of the gradient."""

    def f(x):
        a = x * 2.0
        b = np.sum(np.sin(a) ** 2) + np.sum(2.0 * x * x)
        a += x * x
        return b + np.sum(np.cos(a) * 2.0 * x)

    x = RNG.uniform(-1, 1, 5)
    plan = ha.compile(f, x, hessian=True)
    want = ha.compile(f, x, hessian=True, backend="numpy").hessian(x).hessian
    np.testing.assert_allclose(plan.hessian(x).hessian, want, rtol=1e-12, atol=1e-12)
    h = 1e-5
    grad = ha.compile(f, x)
    fd = np.array([(grad.gradient(x + h * e).gradient - grad.gradient(x - h * e).gradient) /
                   (2 * h) for e in np.eye(x.size)])
    np.testing.assert_allclose(want, fd, rtol=1e-6, atol=1e-6)


def test_no_merges_in_a_graph_that_reads_a_parameter_before_its_update():
    """An optimizer's fused update writes a parameter in place after the
    forward and backward sweeps read it: ``cse`` leaves such a graph as it is
    (merges there once had a fused region read the parameter after its
    update) -- and a graph whose in-place writes are only accumulations is
    merged."""
    from hybridad.ir.registry import InPlaceWrites
    from hybridad.optim import SGD
    from hybridad.transforms.cse import _old_values_read, eliminate_common

    W = RNG.standard_normal((4, 3))
    X = RNG.standard_normal((50, 4))

    def loss(W, X):
        return np.mean(np.tanh(X @ W) ** 2)

    step = ha.compile(loss, W.copy(), X, update=SGD(0.1))
    nodes = step.graph.nodes
    assert _old_values_read(nodes, InPlaceWrites(nodes))
    assert eliminate_common(nodes, step.graph.outputs) is nodes
    hess = ha.compile(rosen, RNG.uniform(-1, 1, 50), hessian=True)
    assert not _old_values_read(hess.graph.nodes, InPlaceWrites(hess.graph.nodes))


# ----------------------------------------------------------------------------
# matrix products of an operand that repeats one value along a matrix axis
# ----------------------------------------------------------------------------

_M, _N = RNG.standard_normal((4, 5, 6)), RNG.standard_normal((4, 30, 6))
PRODUCTS = {  # x: (4, 5)
    "rows of the left": lambda x: np.sum(np.tanh(np.broadcast_to(x[:, None, :], (4, 30, 5))
                                                 @ _M)),
    "columns of the right": lambda x: np.sum(np.tanh(np.swapaxes(_M, 1, 2) @ np.broadcast_to(
        x[:, :, None], (4, 5, 7)))),
    "contracted, left": lambda x: np.sum(np.tanh(np.swapaxes(np.broadcast_to(
        x[:, None, :], (4, 30, 5)), 1, 2) @ _N)),
    "contracted, right": lambda x: np.sum(np.tanh(np.swapaxes(_N, 1, 2) @ np.broadcast_to(
        x[:, None, :1], (4, 30, 5)))),
}


def _repeating_products(graph):
    from hybridad.transforms.broadcasts import _repeats

    bad = []
    for n in graph.nodes:
        if n.op == "matmul" and min(len(a.shape) for a in n.args) >= 2:
            (A, B), (ra, rb) = n.args, (_repeats(a) for a in n.args)
            if ra and ({len(A.shape) - 2, len(A.shape) - 1} & ra[1]) or \
                    rb and ({len(B.shape) - 2, len(B.shape) - 1} & rb[1]):
                bad.append(n)
    return bad


@pytest.mark.parametrize("name", sorted(PRODUCTS))
def test_a_product_of_a_repeated_value_is_computed_on_the_value(name):
    """``matmul`` of a broadcast along a matrix axis (a broadcast mean's
    tangent in a mixture's HVP) becomes the product of the one row or column
    (broadcast), or, along the contracted axis, the one column times the
    other operand's sum: no product of repeated rows is left in the gradient,
    HVP and Hessian plans; their values match the numpy backend's and finite
    differences, with 0 allocations per call."""
    f = PRODUCTS[name]
    x = RNG.standard_normal((4, 5))
    v = RNG.standard_normal(x.shape)
    ref = ha.gradient(f, x, backend="numpy")
    grad, hvp = ha.compile(f, x), ha.compile(f, x, hvp=True)
    hess = ha.compile(f, x, hessian=True)
    for plan in (grad, hvp, hess):
        assert _repeating_products(plan.graph) == [], _repeating_products(plan.graph)
    got = grad.gradient(x)
    np.testing.assert_allclose(got.value, ref.value, rtol=1e-13)
    np.testing.assert_allclose(got.gradient, ref.gradient, rtol=1e-11, atol=1e-13)
    from hybridad.testing import check_grads
    check_grads(f, x)
    h = 1e-6
    fd = (grad.gradient(x + h * v).gradient.copy() - grad.gradient(x - h * v).gradient) / (2 * h)
    res = hvp.hvp(x, v=v)
    np.testing.assert_allclose(res.hvp, fd, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(hess.hessian(x).hessian @ v.ravel(), res.hvp.ravel(),
                               rtol=1e-10, atol=1e-12)
    with count_allocations() as counts:
        hvp.hvp(x, v=v, out=res)
        grad.gradient(x, out=got)
    assert counts.allocations == 0, counts


def test_an_adjoint_started_by_a_product_of_a_repeated_value_is_a_buffer_of_its_own():
    """The cotangent of ``sum(A @ U)`` with respect to ``U`` is ``A^T @
    ones``: a product of a repeated value, computed on the one value and
    broadcast -- but ``U``'s adjoint takes its other contributions in place
    (``sum(U ** 2 * W)``), so it stays a buffer: adding into the broadcast
    view gave scipy.linalg.lu's gradient wrong on the numba backend.  The
    same for the scalar broadcasts' pass."""
    rng = np.random.default_rng(2)
    A, W, U = (rng.standard_normal((3, 3)) for _ in range(3))

    def f(u):  # (the product last: its vjp starts the adjoint the others add into)
        return np.sum(u ** 2 * W) + 2.5 * np.sum(u) + np.sum(np.cos(A) @ u)

    want = np.cos(A).sum(axis=0)[:, None] + 2 * U * W + 2.5
    for backend in ("numba", "numpy"):
        np.testing.assert_allclose(ha.gradient(f, U, backend=backend).gradient, want,
                                   rtol=1e-13)
        v = rng.standard_normal(U.shape)
        np.testing.assert_allclose(ha.hvp(f, U, v, backend=backend).hvp, 2 * W * v, rtol=1e-13)
