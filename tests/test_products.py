"""Backward products taken from the forward sweep
(:func:`hybridad.transforms.products.hoist_transposed_products`): a backward
``A^T (c w)`` becomes ``c (A^T w)``, ``A^T w`` computed beside the forward's
product that reads ``A`` -- for matrices larger than the cache; the gradients
(and Hessians) stay those of the numpy backend and of finite differences, in
every form the rewrite takes and in the forms it must leave alone."""

import numpy as np
import pytest
from conftest import rand

import hybridad as ha
from hybridad.testing import count_allocations, numerical_gradient
from hybridad.transforms.costs import CACHE_BYTES

D = 400  # a 400 x 400 float64 matrix: 1.28 MB, over the cache bytes
As = [rand((D, D), seed=s) / D for s in range(3)]
assert As[0].nbytes > CACHE_BYTES


def _hoisted(plan):
    """Forward products of a transposed matrix (alone, or paired with the
    forward's product of the matrix into one matvec_pair), backward products."""
    g = plan.graph.nodes
    fwd = [n for n in g if n.op == "matmul" and n.phase == "forward" and
           any(a.op == "transpose" for a in n.args) or n.op == "matvec_pair"]
    bwd = [n for n in g if n.op == "matmul" and n.phase == "backward"]
    return len(fwd), len(bwd)


def quadratic_forms(x, As):  # x^T A x, K times: the cotangent c is 1
    return sum(x @ (A @ x) for A in As)


def log_energy(x, As):  # c = 2 e / (1 + e^2), e = x^T A0 x + (x A1) x (a row vector form)
    e = x @ (As[0] @ x) + (x @ As[1]) @ x
    return np.log1p(e * e)


def bilinear(x, u, As):  # u^T A x: both w.r.t. x (A^T u hoisted) and u (A x, no rewrite)
    return np.tanh(u @ (As[2] @ x)) + 0.5 * (u @ u)


CASES = {
    "quadratic_forms": (quadratic_forms, (rand((D,), seed=7), As), 0, (3, 0)),
    "log_energy": (log_energy, (rand((D,), seed=8), As), 0, (2, 0)),
    "bilinear": (bilinear, (rand((D,), seed=9), rand((D,), seed=10), As), (0, 1), (1, 0)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hoisted_products_keep_the_gradient(name):
    f, args, argnums, hoisted = CASES[name]
    plan = ha.compile(f, *args, argnums=argnums, tiered=False)
    assert _hoisted(plan) == hoisted, str(plan.graph)
    assert "hoist_transposed_products" in plan.explain()
    res = plan.gradient(*args)
    ref = ha.gradient(f, *args, argnums=argnums, backend="numpy")
    assert float(res.value) == pytest.approx(float(ref.value), rel=1e-13)
    grads = res.gradient if isinstance(argnums, tuple) else (res.gradient,)
    refs = ref.gradient if isinstance(argnums, tuple) else (ref.gradient,)
    for k, g, r in zip((argnums,) if isinstance(argnums, int) else argnums, grads, refs,
                       strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-11, atol=1e-13 * np.abs(r).max())

        def fk(xk, k=k):
            a = list(args)
            a[k] = xk
            return f(*a)

        num = numerical_gradient(fk, args[k])
        np.testing.assert_allclose(g, num, rtol=0, atol=1e-6 * max(1.0, np.abs(num).max()))
    with count_allocations() as counts:  # the hoisted products allocate nothing either
        for _ in range(10):
            plan.gradient(*args, out=res)
    assert counts.allocations == 0


def test_float32_and_the_serial_plan():
    x = rand((600,), seed=3).astype(np.float32)  # 600 x 600 float32: 1.44 MB
    Bs = [A.astype(np.float32) for A in (rand((600, 600), seed=4) / 600,
                                         rand((600, 600), seed=5) / 600)]
    for parallel in (True, False):
        plan = ha.compile(quadratic_forms, x, Bs, parallel=parallel, tiered=False)
        assert _hoisted(plan) == (2, 0)
        res = plan.gradient(x, Bs)
        want = sum(B.astype(np.float64) @ x + B.T.astype(np.float64) @ x for B in Bs)
        np.testing.assert_allclose(res.gradient, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_left_alone(rates):
    """No rewrite for a matrix in cache unless its two products pair (the
    cost model's call), for a cotangent that is not a scalar times a
    forward value, or with no forward product of the matrix."""
    small = [A[:100, :100] * 1.0 for A in As]
    x = rand((D,), seed=11)
    rates(blas=0.05, dot=1.0, axpy=1.0)  # gemv cheaper than any loop: no pair
    plan = ha.compile(quadratic_forms, x[:100], small, tiered=False)
    assert _hoisted(plan) == (0, 3)
    rates(blas=1.0, dot=0.3, axpy=0.3)  # one read cheaper than two: hoisted and paired
    plan = ha.compile(quadratic_forms, x[:100], small, tiered=False)
    assert _hoisted(plan) == (3, 0)
    assert sum(n.op == "matvec_pair" for n in plan.graph.nodes) == 3
    np.testing.assert_allclose(plan.gradient(x[:100], small).gradient,
                               sum(A @ x[:100] + A.T @ x[:100] for A in small), rtol=1e-12)

    def squashed(x, A):  # the cotangent of A x is (1 - tanh^2) * x: not c * w
        return np.sum(np.tanh(A @ x) * x)

    plan = ha.compile(squashed, x, As[0], tiered=False)
    assert _hoisted(plan) == (0, 1)
    np.testing.assert_allclose(plan.gradient(x, As[0]).gradient,
                               ha.gradient(squashed, x, As[0], backend="numpy").gradient,
                               rtol=1e-12)

    def transposed_only(x, w, A):  # A^T (c x): no forward product reads A
        return (w @ x) * np.sum(x) + x @ (A.T @ w)

    w = rand((D,), seed=12)
    plan = ha.compile(transposed_only, x, w, As[0], argnums=(0, 1), tiered=False)
    res = plan.gradient(x, w, As[0])
    ref = ha.gradient(transposed_only, x, w, As[0], argnums=(0, 1), backend="numpy")
    for g, r in zip(res.gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-12)


def test_hessian_vector_products_through_hoisted_products():
    """Forward over reverse: the tangent sweep runs over the rewritten backward
    (the plan ``hvp=True`` lowers it; ``hybridad.hessian``'s plan does not):
    H v of log_energy against the numpy backend's, and the rewrite made."""
    x, v = rand((D,), seed=8) / 4, rand((D,), seed=13)
    plan = ha.compile(log_energy, x, As, hvp=True, tiered=False)
    assert _hoisted(plan) == (2, 0)
    got = plan.hvp(x, As, v=v)
    ref = ha.hvp(log_energy, x, v, As, backend="numpy")
    np.testing.assert_allclose(got.gradient, ref.gradient, rtol=1e-11,
                               atol=1e-13 * np.abs(ref.gradient).max())
    np.testing.assert_allclose(got.hvp, ref.hvp, rtol=1e-10, atol=1e-12 * np.abs(ref.hvp).max())
