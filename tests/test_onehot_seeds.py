"""Products of a dense Hessian's or Jacobian's unit seeds: rows of the matrix.

A chunk of unit seeds ``S`` times a matrix ``B`` is rows of ``B``
(:mod:`hybridad.backends.numba.onehot`): the plans mark such products
(:func:`hybridad.transforms.products.mark_seed_products`) and the numba
program gathers the rows when every seed row holds one nonzero or none, and
runs the gemm otherwise (the HVPs of many directions share the program).
Checked: the kernel against ``a @ b`` (and that it declines), and Hessians,
HVPs of many directions and Jacobians (forward, and reverse: the cotangent
seeds times the partials keep one nonzero a row) through marked products
against the numpy backend and central differences, with zero allocations.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_higher import assert_fd, fd_hessian, fd_jacobian

import hybridad as ha
from hybridad.backends.numba.onehot import onehot_rows
from hybridad.testing import count_allocations

RNG = np.random.default_rng(11)
A = RNG.standard_normal((5, 9)) / 3
X = RNG.uniform(-1.0, 1.0, 9)


def dense(x, a):  # log-sum-exp, a product inside tanh, a quartic: every entry nonzero
    return np.log(np.sum(np.exp(x))) + np.sum(np.tanh(a @ x) ** 2) + 0.1 * np.sum(x ** 4)


def layer(x):  # R^9 -> R^5: a product, then elementwise
    return np.tanh(A @ x) * x[:5]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("order", ["C", "F"])
def test_the_kernel_is_the_product_or_declines(dtype, order):
    k, n, m = 12, 30, 7
    a = np.zeros((k, n), dtype)
    cols = RNG.integers(0, n, k)
    a[np.arange(k), cols] = RNG.uniform(-2.0, 2.0, k)
    a[3] = 0  # a zero row
    a[5, cols[5]] = np.nan  # a NaN seed: counted as a nonzero, propagated as the gemm does
    b = np.asarray(RNG.standard_normal((n, m)), dtype, order=order)
    out = np.full((k, m), 7.0, dtype)
    assert onehot_rows(a, b, out, 0.0)
    np.testing.assert_array_equal(out, a @ b)  # (one term per entry: exact)
    acc = RNG.standard_normal((k, m)).astype(dtype)
    out[:] = acc
    assert onehot_rows(a, b, out, 1.0)  # added into (a reverse sweep's accumulation)
    np.testing.assert_array_equal(out, a @ b + acc)
    a[8, (cols[8] + 1) % n] = 1.0  # two nonzeros in a row: the gemm's, nothing written
    before = out.copy()
    assert not onehot_rows(a, b, out, 0.0) and not onehot_rows(a, b, out, 1.0)
    np.testing.assert_array_equal(out, before)


def _source(plan, stage):
    return plan._program_for(stage).source


def test_float32_hessian_through_seed_products():
    """float32 seeds and matrices: the kernel's gather in float32, as the gemm's."""
    x, a = X.astype(np.float32), A.astype(np.float32)
    plan = ha.compile(dense, x, a, hessian=True, chunk=4)
    res = ha.HessianResult(x)
    plan.hessian(x, a, out=res)
    assert res.hessian.dtype == np.float32 and "_onehot_rows(" in _source(plan, "chunk")
    ref = ha.compile(dense, X, A, hessian=True, backend="numpy").hessian(X, A)
    np.testing.assert_allclose(res.hessian, ref.hessian, rtol=2e-5, atol=2e-5)
    with count_allocations() as counts:
        for _ in range(5):
            plan.hessian(x, a, out=res)
    assert counts.allocations == 0


@pytest.mark.parametrize("chunk", [4, 9])  # chunks 4, 4, 1 (a last one part empty), one
def test_dense_hessian_and_many_hvps_through_seed_products(chunk):
    plan = ha.compile(dense, X, A, hessian=True, chunk=chunk)
    ref = ha.compile(dense, X, A, hessian=True, backend="numpy").hessian(X, A)
    res = ha.HessianResult(X)
    plan.hessian(X, A, out=res)
    assert "_onehot_rows(" in _source(plan, "chunk") or "_onehot_rows(" in \
        _source(plan, "chunk_whole")
    np.testing.assert_allclose(res.hessian, ref.hessian, rtol=1e-13, atol=1e-15)
    assert_fd(res.hessian, fd_hessian(lambda x: dense(x, A), X))
    vs = RNG.standard_normal((5, 9))  # dense seeds through the same program: the gemm
    many = plan.hvp(X, A, v=vs)
    np.testing.assert_allclose(many.derivs[1], vs @ ref.hessian.T, rtol=1e-12, atol=1e-13)
    with count_allocations() as counts:
        for _ in range(5):
            plan.hessian(X, A, out=res)
    assert counts.allocations == 0


@pytest.mark.parametrize("mode", ["forward", "reverse"])  # (reverse: seeds times partials)
def test_jacobians_through_seed_products(mode):
    plan = ha.compile(layer, X, jacobian=True, mode=mode, chunk=4)
    y = np.asarray(layer(X))
    res = ha.JacobianResult(y, X)
    plan.jacobian(X, out=res)
    assert "_onehot_rows(" in _source(plan, "chunk")
    ref = ha.compile(layer, X, jacobian=True, mode=mode, backend="numpy").jacobian(X)
    np.testing.assert_allclose(res.jacobian, ref.jacobian, rtol=1e-13, atol=1e-15)
    assert_fd(res.jacobian, fd_jacobian(layer, X))
