"""Chains of data movement read through (hybridad.transforms.views): a slice
of a slice, a slice of a concatenation that is one of its operands, a
reshape of a reshape, a transpose of a transpose.  The rewrites read the same
elements, so results are bitwise those of the plan without the pass; a dense
Hessian through a loop no longer copies its batched tangent carries into a
concatenation and back (its plan holds several times less)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import rk4_final

import hybridad as ha
from hybridad.testing import assert_no_alloc, numerical_gradient
from hybridad.transforms import pipeline

RNG = np.random.default_rng(3)
N = 5
W = RNG.standard_normal((N, N)) / np.sqrt(N)
X0 = RNG.standard_normal(N) / 2


def rk4(x, W, T=60):
    return np.sum(rk4_final(x, W, T) ** 2)


def movement(x, W):
    """Every rule's pattern, written as code does."""
    y = np.concatenate([np.sin(x), np.cos(x) * 2.0, x ** 3])
    a = y[N:][: N]  # a slice of a slice: the cos part of the concatenation
    b = np.reshape(np.reshape(np.outer(x, a), (N * N,)), (N, N))
    c = np.transpose(np.transpose(b)) @ W
    return np.sum(np.tanh(c)) + np.sum(y[2 * N:] * a)


def _without_views(m):
    for name in ("LOWERING", "STAGED_LOWERING"):
        table = {b: tuple(p for p in passes if p != "views")
                 for b, passes in getattr(pipeline, name).items()}
        m.setattr(pipeline, name, table)


def _ops(plan):
    return [n.op for n in plan.graph.nodes]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_loop_hessian_reads_its_batched_parts_in_place(backend, monkeypatch):
    plan = ha.compile(rk4, X0, W, hessian=True, backend=backend)
    h = plan.hessian(X0, W).hessian.copy()
    with monkeypatch.context() as m:
        _without_views(m)
        full = ha.compile(rk4, X0, W, hessian=True, backend=backend)
        h_ref = full.hessian(X0, W).hessian
    np.testing.assert_array_equal(h, h_ref)
    assert "concatenate" in _ops(full) and "concatenate" not in _ops(plan)
    assert_no_alloc(plan.hessian, X0, W, out=ha.HessianResult(X0), n=3, warmup=1)
    assert plan.memory.total_bytes * 2 < full.memory.total_bytes
    g = lambda x: ha.gradient(rk4, x, W, backend="numpy").gradient  # noqa: E731
    eps = 1e-6
    for j in range(N):
        e = np.zeros(N)
        e[j] = eps
        np.testing.assert_allclose(h[:, j], (g(X0 + e) - g(X0 - e)) / (2 * eps),
                                   rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_gradient_hessian_and_jacobian_bitwise_without_the_pass(backend, monkeypatch):
    grad = ha.compile(movement, X0, W, backend=backend).gradient(X0, W)
    hess = ha.compile(movement, X0, W, hessian=True, backend=backend).hessian(X0, W)
    jac = ha.jacobian(lambda x, W: ha.fori_loop(0, 20, lambda i, v: np.tanh(W @ v), x),
                      X0, W, backend=backend)
    with monkeypatch.context() as m:
        _without_views(m)
        ha.clear_cache()
        grad_ref = ha.compile(movement, X0, W, backend=backend).gradient(X0, W)
        hess_ref = ha.compile(movement, X0, W, hessian=True, backend=backend).hessian(X0, W)
        jac_ref = ha.jacobian(lambda x, W: ha.fori_loop(0, 20, lambda i, v: np.tanh(W @ v), x),
                              X0, W, backend=backend)
    ha.clear_cache()
    assert float(grad.value) == float(grad_ref.value)
    np.testing.assert_array_equal(grad.gradient, grad_ref.gradient)
    np.testing.assert_array_equal(hess.hessian, hess_ref.hessian)
    np.testing.assert_array_equal(jac.jacobian, jac_ref.jacobian)
    np.testing.assert_allclose(grad.gradient, numerical_gradient(movement, X0, W),
                               rtol=1e-6, atol=1e-8)


def test_what_an_in_place_op_writes_is_not_read_through():
    """Storage an in-place op writes (an adjoint accumulated in place, an
    optimizer's fused step) is left as it is: a reader of the reshape of a
    reshape of it keeps reading that view, while the same chain on storage
    no one writes reads its source."""
    from hybridad.core.trace import Trace, bind
    from hybridad.transforms.views import simplify_views

    trace = Trace()
    with trace:
        x = trace.input(0, (6,), np.dtype(np.float64))
        a, b = x * 2.0, x * 3.0
        ra = np.reshape(np.reshape(a, (2, 3)), (6,))
        rb = np.reshape(np.reshape(b, (2, 3)), (6,))
        bind("iadd", a, x)  # a is written in place
        out_a, out_b = np.sin(ra), np.sin(rb)
    simplify_views(trace.nodes, [out_a.node, out_b.node])
    assert out_a.node.args[0] is ra.node  # (a is written: not read through)
    assert out_b.node.args[0] is b.node


def dense_model(x, A):
    return np.log(np.sum(np.exp(x))) + np.sum(np.tanh(A @ x) ** 2) + 0.1 * np.sum(x ** 4)


def _with_and_without_views(monkeypatch, make):
    """``(make(), make() with the views pass left out of every pipeline)``."""
    plan = make()
    with monkeypatch.context() as m:
        _without_views(m)
        return plan, make()


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_chunk_of_matrix_vector_products_is_one_gemm_on_its_rows(backend, monkeypatch):
    """The chunk program of a Hessian with a product ``A @ x`` runs the K
    tangents as one gemm of their rows times ``A^T`` (a view: matmul's batch
    rule), batch-first as the passes after it read them: no transposed copy
    in or out; the Hessian is the every-column one, bitwise with or without
    the views pass, and finite differences of the gradient's."""
    n = 40
    x, A = RNG.uniform(-1, 1, n), RNG.standard_normal((7, n)) / np.sqrt(n)
    plan, full = _with_and_without_views(
        monkeypatch, lambda: ha.compile(dense_model, x, A, hessian=True, backend=backend))
    h = plan.hessian(x, A).hessian.copy()
    np.testing.assert_array_equal(h, full.hessian(x, A).hessian)
    products = [nd for nd in plan.graph.nodes if nd.op == "matmul" and nd.shape == (n, 7)]
    assert products and products[0].args[1].op == "transpose"  # (rows of K x n, times A^T)
    assert not [nd for nd in plan.graph.nodes if nd.op == "transpose" and nd.shape == (7, n)]
    assert_no_alloc(plan.hessian, x, A, out=ha.HessianResult(x), n=3, warmup=1)
    g = lambda z: ha.gradient(dense_model, z, A, backend="numpy").gradient  # noqa: E731
    e = np.zeros(n)
    e[3] = 1e-6
    np.testing.assert_allclose(h[:, 3], (g(x + e) - g(x - e)) / 2e-6, rtol=1e-6, atol=1e-7)


def test_a_reshape_of_a_transpose_across_unit_axes_is_a_transposed_view():
    """``reshape(transpose(reshape(y)))`` whose reshapes only insert or drop
    axes of length 1 reads ``y`` transposed (a view), where it was a copy;
    a reshape that merges axes is left alone."""
    from hybridad.core.trace import Trace
    from hybridad.transforms.views import simplify_views

    trace = Trace()
    with trace:
        y = trace.input(0, (5, 3), np.dtype(np.float64))
        t = np.transpose(np.reshape(y, (5, 3, 1)), (1, 0, 2))
        moved = np.reshape(t, (3, 5))
        merged = np.reshape(np.transpose(np.reshape(y, (5, 3, 1)), (2, 1, 0)), (15,))
        out_a, out_b = np.sin(moved), np.sin(merged)
    simplify_views(trace.nodes, [out_a.node, out_b.node])
    node = out_a.node.args[0]
    assert node.op == "transpose" and node.args[0] is y.node and node.attrs["axes"] == (1, 0)
    assert out_b.node.args[0].op == "reshape"
