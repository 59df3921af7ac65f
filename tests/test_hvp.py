"""Hessian-vector products (forward over reverse): every coverage case against
central differences of the gradient on the numpy backend, analytic Hessians
(Rosenbrock, quadratic forms, log-sum-exp, tanh(Mx)|x|^2) on both backends,
zero allocations per repeated call, and the error guarantees of the core."""

import numpy as np
import pytest
from conftest import rand
from scipy.optimize import rosen, rosen_der, rosen_hess, rosen_hess_prod
from test_coverage import CASES

import hybridad as ha
from hybridad.testing import count_allocations

X20 = rand((4, 5), seed=3)
V20 = rand((4, 5), seed=4)


def _fd_hvp(f, x, v, eps=1e-5, backend="numpy"):
    gp = ha.gradient(f, x + eps * v, backend=backend).gradient
    gm = ha.gradient(f, x - eps * v, backend=backend).gradient
    return (gp - gm) / (2 * eps)


def rosen_np(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


M = rand((6, 5), seed=5)
Q = rand((5, 5), seed=6)


def tanh_mx(x):
    return np.sum(np.tanh(M @ x)) * np.sum(x ** 2)


def lse(x):
    return np.log(np.sum(np.exp(x)))


def _tanh_mx_hessian(x):
    t = np.tanh(M @ x)
    dt = 1 - t ** 2
    s, r = np.sum(t), np.sum(x ** 2)
    g_s = M.T @ dt
    h_s = M.T @ np.diag(-2 * t * dt) @ M
    return h_s * r + 2 * (np.outer(g_s, x) + np.outer(x, g_s)) + 2 * s * np.eye(x.size)


ANALYTIC = {
    "rosenbrock": (rosen_np, rand((12,), seed=7), rosen_hess),
    "quadratic": (lambda x: x @ (Q @ x) + 0.5 * np.sum(x), rand((5,), seed=8),
                  lambda x: Q + Q.T),
    "logsumexp": (lse, rand((7,), seed=9),
                  lambda x: np.diag(np.exp(x) / np.sum(np.exp(x))) -
                  np.outer(np.exp(x), np.exp(x)) / np.sum(np.exp(x)) ** 2),
    "tanh_mx_norm": (tanh_mx, rand((5,), seed=10), _tanh_mx_hessian),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_coverage_case_against_finite_differences(name):
    f = CASES[name]
    res = ha.hvp(f, X20, V20, backend="numpy")
    g = ha.gradient(f, X20, backend="numpy")
    np.testing.assert_allclose(float(res.value), float(g.value), rtol=1e-13)
    np.testing.assert_allclose(res.gradient, g.gradient, rtol=1e-12, atol=1e-13)
    fd = _fd_hvp(f, X20, V20)
    np.testing.assert_allclose(res.hvp, fd, rtol=2e-6, atol=2e-6 * max(1, np.abs(fd).max()))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("name", sorted(ANALYTIC))
def test_analytic_hessians(name, backend):
    f, x, hess = ANALYTIC[name]
    h = hess(x)
    plan = ha.compile(f, x, backend=backend, hvp=True)
    res = ha.HvpResult(x)
    for k in range(x.size):  # H e_k column by column: the Hessian, to rounding
        plan.hvp(x, v=np.eye(x.size)[k], out=res)
        np.testing.assert_allclose(res.hvp, h[:, k], rtol=1e-12, atol=1e-12 * np.abs(h).max())
    v = rand(x.shape, seed=11)
    plan.hvp(x, v=v, out=res)
    np.testing.assert_allclose(res.hvp, h @ v, rtol=1e-11, atol=1e-12 * np.abs(h).max())


def test_rosenbrock_against_scipy_and_symmetry():
    x, v, w = rand((30,), seed=12), rand((30,), seed=13), rand((30,), seed=14)
    plan = ha.compile(rosen_np, x, hvp=True)
    hv, hw = plan.hvp(x, v=v), plan.hvp(x, v=w)
    assert float(hv.value) == pytest.approx(rosen(x), rel=1e-14)
    np.testing.assert_allclose(hv.gradient, rosen_der(x), rtol=1e-13, atol=1e-12)
    np.testing.assert_allclose(hv.hvp, rosen_hess_prod(x, v), rtol=1e-13, atol=1e-11)
    assert w @ hv.hvp == pytest.approx(v @ hw.hvp, rel=1e-13)  # w'Hv = v'Hw


def test_second_order_through_products_with_zeros():
    # prod and cumprod differentiate twice without dividing: exact with zeros
    x = np.array([[1.0, 0.0, 2.0, 3.0], [0.0, 0.0, 1.5, 2.0], [1.0, 2.0, 0.5, 0.7]])
    v = rand(x.shape, seed=15)

    def f(x):
        return np.prod(x) + np.sum(np.prod(x, axis=0) ** 2) + np.sum(np.cumprod(x, axis=1) ** 2)

    res = ha.hvp(f, x, v, backend="numpy")
    assert np.all(np.isfinite(res.hvp))
    fd = _fd_hvp(f, x, v)
    np.testing.assert_allclose(res.hvp, fd, rtol=1e-7, atol=1e-7)
    # single-element axes (the shifted scans move everything out)
    y = rand((1, 3), seed=16)
    g = ha.hvp(lambda y: np.sum(np.cumprod(y, axis=0) ** 3) + np.sum(np.prod(y, axis=0) ** 2),
               y, v[:1, :3], backend="numpy")
    np.testing.assert_allclose(g.hvp, _fd_hvp(lambda y: np.sum(np.cumprod(y, axis=0) ** 3) +
                                              np.sum(np.prod(y, axis=0) ** 2), y, v[:1, :3]),
                               rtol=1e-7, atol=1e-7)


def test_several_arguments_and_structures():
    def f(p, x):
        return np.sum(np.tanh(x @ p["W"] + p["b"]) ** 2) + np.sum(p["W"] ** 4)

    p = {"W": rand((3, 2), seed=17), "b": rand((2,), seed=18)}
    x = rand((4, 3), seed=19)
    v = ({"W": rand((3, 2), seed=20), "b": rand((2,), seed=21)}, rand((4, 3), seed=22))
    res = ha.hvp(f, p, v, x, argnums=(0, 1), backend="numpy")
    eps = 1e-5

    def grad_at(s):
        pp = {k: p[k] + s * v[0][k] for k in p}
        return ha.gradient(f, pp, x + s * v[1], argnums=(0, 1), backend="numpy").gradient

    gp, gm = grad_at(eps), grad_at(-eps)
    for k in p:
        np.testing.assert_allclose(res.hvp[0][k], (gp[0][k] - gm[0][k]) / (2 * eps),
                                   rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(res.hvp[1], (gp[1] - gm[1]) / (2 * eps), rtol=1e-6, atol=1e-7)


def test_constant_in_x_gives_zero_hvp():
    x = rand((3,), seed=23)
    res = ha.hvp(lambda x, c: np.sum(x * c), x, np.ones(3), np.arange(3.0), backend="numpy")
    np.testing.assert_array_equal(res.hvp, 0)
    np.testing.assert_array_equal(res.gradient, np.arange(3.0))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_zero_allocations(backend):
    x, v = rand((50,), seed=24), rand((50,), seed=25)
    plan = ha.compile(rosen_np, x, backend=backend, hvp=True)
    res = ha.HvpResult(x)
    for _ in range(3):
        plan.hvp(x, v=v, out=res)
        ha.hvp(rosen_np, x, v, out=res, backend=backend)
    with count_allocations() as counts:
        for _ in range(200):
            plan.hvp(x, v=v, out=res)
            ha.hvp(rosen_np, x, v, out=res, backend=backend)
    assert counts.allocations == 0, f"{counts.allocations} allocations in 400 calls"
    np.testing.assert_allclose(res.hvp, rosen_hess_prod(x, v), rtol=1e-13, atol=1e-11)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_bad_input_leaves_the_result_untouched(backend):
    x = rand((5,), seed=26)
    plan = ha.compile(rosen_np, x, backend=backend, hvp=True)
    res = ha.HvpResult(x)
    res.value[...], res.gradient[:], res.hvp[:] = 7.0, 8.0, 9.0
    with pytest.raises(ValueError, match="v for argument 'x' has shape"):
        plan.hvp(x, v=np.ones(4), out=res)
    with pytest.raises(ValueError, match="argument 'x' has shape"):
        plan.hvp(np.ones(4), v=np.ones(5), out=res)
    with pytest.raises(ValueError, match=r"out.hvp for argument 'x'"):
        plan.hvp(x, v=np.ones(5), out=ha.DiffResult(np.zeros(()), np.zeros(5), np.zeros(4)))
    with pytest.raises(ValueError, match="gradient and a Hessian-vector product"):
        plan.hvp(x, v=np.ones(5), out=ha.GradientResult(x))
    with pytest.raises(ValueError, match="share memory with v"):
        plan.hvp(x, v=res.hvp, out=res)
    with pytest.raises(ValueError, match="share memory with argument 'x'"):
        plan.hvp(res.gradient, v=np.ones(5), out=res)
    with pytest.raises(ValueError, match="out.hvp for argument 'x'"):
        plan.hvp(x, v=np.ones(5), out=ha.DiffResult(np.zeros(()), np.zeros(5),
                                                    np.zeros(5, np.float32)))
    with pytest.raises(TypeError, match="Hessian-vector products"):
        plan.gradient(x, out=ha.GradientResult(x))
    with pytest.raises(TypeError, match="hvp=True"):
        ha.compile(rosen_np, x, backend=backend).hvp(x, v=x)
    assert float(res.value) == 7.0 and np.all(res.gradient == 8.0) and np.all(res.hvp == 9.0)
    plan.hvp(x, v=[1.0, 0, 0, 0, 0], out=res)  # a list is converted
    np.testing.assert_allclose(res.hvp, rosen_hess(x)[:, 0], rtol=1e-13)


def _trig(x, A):  # sin and cos whose derivatives the sweeps need again
    return np.sum(np.tanh(A @ (x * np.cos(x))) ** 2) + np.sum(np.sin(x) * x)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_sweeps_share_each_transcendental_value(dtype):
    """The forward's ``cos(x)`` and the backward's ``sin(x)`` (the partial of
    ``cos``) are the tangent sweep's too: each computed by one region of the
    numba plan, where the tangent sweep had computed both again (the equal
    nodes the sweeps emit merged before regions are fused); the value,
    gradient and ``H v`` those of the numpy backend and of finite
    differences of the gradient; parallel and serial plans alike to the bit;
    nothing allocated per call."""
    x, A, v = rand((3000,), seed=1), rand((64, 3000), seed=2) / 40, rand((3000,), seed=3)
    x, A, v = x.astype(dtype), A.astype(dtype), v.astype(dtype)
    results = []
    for parallel in (True, False):
        plan = ha.compile(_trig, x, A, hvp=True, parallel=parallel, tiered=False)
        bodies = [[m.op for m in n.attrs["body"].nodes] for n in plan.graph.nodes
                  if n.op == "region"]
        for fn in ("sin", "cos"):
            assert sum(body.count(fn) for body in bodies) == 1, (fn, bodies)
        res = plan.hvp(x, A, v=v)
        with count_allocations() as counts:
            for _ in range(3):
                plan.hvp(x, A, v=v, out=res)
        assert counts.allocations == 0
        results.append(res)
    a, b = results
    assert float(a.value) == float(b.value)
    np.testing.assert_array_equal(a.gradient, b.gradient)
    np.testing.assert_array_equal(a.hvp, b.hvp)
    ref = ha.hvp(_trig, x, v, A, backend="numpy")
    tol = 1e-11 if dtype == np.float64 else 2e-4
    np.testing.assert_allclose(a.gradient, ref.gradient, rtol=tol,
                               atol=tol * np.abs(ref.gradient).max())
    np.testing.assert_allclose(a.hvp, ref.hvp, rtol=tol, atol=tol * np.abs(ref.hvp).max())
    if dtype == np.float64:
        fd = _fd_hvp(lambda z: _trig(z, A), x, v, eps=1e-6)
        np.testing.assert_allclose(a.hvp, fd, rtol=0, atol=1e-6 * np.abs(fd).max())
