"""Sparse derivatives for scipy (hybridad/interop/scipy_ivp.py,
scipy_sparse.py): solve_ivp's implicit methods with the exact sparse
Jacobian, least_squares with a sparse Jacobian, trust-constr with sparse
Hessians and constraint Jacobians."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import integrate

import hybridad as ha
import hybridad.scipy as hs
from hybridad.testing import count_allocations

from sparse_problems import bratu, brusselator

N = 4


def rhs(t, y, n):
    return brusselator(y, n) * (1.0 + 0.1 * np.sin(t))


def _y0(n=N):
    x = np.arange(n) / n
    u = 1.0 + np.sin(2 * np.pi * x)[None, :] * np.ones((n, 1))
    v = np.full((n, n), 3.0)
    return np.concatenate([u.ravel(), v.ravel()])


@pytest.fixture(scope="module")
def ode_jac():
    return hs.OdeJacobian(rhs, 0.0, _y0(), N, sparse=True)


def test_ode_jacobian_is_exact_and_allocates_nothing(ode_jac):
    y = _y0() + 0.1
    jac = ode_jac(0.3, y, N)
    assert isinstance(jac, sp.csr_array) and jac is ode_jac.result.jacobian
    dense = ha.jacobian(lambda y: rhs(np.float64(0.3), y, N), y).jacobian
    np.testing.assert_allclose(jac.toarray(), dense, rtol=1e-12, atol=1e-12)
    for _ in range(3):
        ode_jac(0.3, y, N)
    with count_allocations() as counts:
        for _ in range(20):
            ode_jac(0.4, y, N)
    assert counts.allocations == 0


def test_bdf_with_the_exact_jacobian(ode_jac):
    y0 = _y0()
    opts = dict(method="BDF", args=(N,), rtol=1e-8, atol=1e-10)
    sol = integrate.solve_ivp(rhs, (0.0, 2.0), y0, jac=ode_jac, **opts)
    ref = integrate.solve_ivp(rhs, (0.0, 2.0), y0, **opts)  # scipy's finite differences
    assert sol.success and ref.success
    np.testing.assert_allclose(sol.y[:, -1], ref.y[:, -1], rtol=1e-5)


def test_scipy_keeps_a_converted_copy(ode_jac):
    solver = integrate.BDF(lambda t, y: rhs(t, y, N), 0.0, _y0(), 1.0,
                           jac=lambda t, y: ode_jac(t, y, N))
    held = solver.J.toarray()
    ode_jac.result.jacobian.data[:] = 123.0  # the next call overwrites ours ...
    np.testing.assert_array_equal(solver.J.toarray(), held)  # ... scipy's is its own


def robertson(t, y):
    a, b, c = y[0], y[1], y[2]
    return np.stack([-0.04 * a + 1e4 * b * c, 0.04 * a - 1e4 * b * c - 3e7 * b * b,
                     3e7 * b * b])


@pytest.mark.parametrize("method", ["Radau", "LSODA", "BDF"])
def test_other_implicit_methods(method):
    y0 = np.array([1.0, 0.0, 0.0])
    opts = dict(method=method, rtol=1e-6, atol=1e-10)
    sol = hs.solve_ivp(robertson, (0.0, 1e3), y0, sparse=True, **opts)  # LSODA: dense
    ref = integrate.solve_ivp(robertson, (0.0, 1e3), y0, **opts)
    assert sol.success and sol.jacobian is not None and sol.jacobian.n_evaluations > 0
    assert sol.jacobian.sparse is (method != "LSODA")
    np.testing.assert_allclose(sol.y[:, -1], ref.y[:, -1], rtol=1e-4, atol=1e-9)


def test_dense_jacobian_is_a_fresh_copy_for_bdf():
    jac = hs.OdeJacobian(rhs, 0.0, _y0(3), 3, sparse=False)
    a = jac(0.0, _y0(3), 3)
    b = jac(0.5, _y0(3) + 1.0, 3)
    assert isinstance(a, np.ndarray) and a is not b
    assert not np.array_equal(a, b)
    with pytest.raises(ValueError, match="method"):
        hs.OdeJacobian(rhs, 0.0, _y0(3), 3, method="RK45")


def test_explicit_methods_and_own_jac_are_left_alone():
    sol = hs.solve_ivp(rhs, (0.0, 0.1), _y0(3), method="RK45", args=(3,))
    assert sol.success and sol.jacobian is None


def broyden(x):
    """Broyden's tridiagonal system, as residuals."""
    full = np.concatenate([np.zeros(1), x, np.zeros(1)])
    return (3.0 - 2.0 * x) * x - full[:-2] - 2.0 * full[2:] + 1.0


def test_least_squares_with_a_sparse_jacobian():
    x0 = -np.ones(300)
    res = hs.least_squares(broyden, x0, sparse=True)
    ref = hs.least_squares(broyden, x0, sparse=False)
    assert res.success and ref.success and res.n_evaluations > 0
    assert sp.issparse(res.jac) and not sp.issparse(ref.jac)
    np.testing.assert_allclose(res.x, ref.x, rtol=1e-7, atol=1e-9)
    auto = hs.least_squares(broyden, -np.ones(20))  # small: dense, as before
    assert not sp.issparse(auto.jac)


def test_trust_constr_with_a_sparse_hessian():
    u0 = np.zeros(49)
    sparse = hs.minimize(bratu, u0, method="trust-constr", sparse=True)
    hessp = hs.minimize(bratu, u0, method="trust-constr", sparse=False)
    assert sparse.success and hessp.success
    np.testing.assert_allclose(sparse.x, hessp.x, rtol=1e-6, atol=1e-8)


def test_trust_constr_with_sparse_constraint_jacobians():
    con = hs.NonlinearConstraint(lambda x: x[:-1] ** 2 + x[1:] ** 2, 0.0, 1.0, sparse=True)
    res = hs.minimize(lambda x: np.sum((x - 2.0) ** 2), np.zeros(12), method="trust-constr",
                      constraints=[con])
    assert res.success or res.status in (1, 2)
    assert np.all(res.x[:-1] ** 2 + res.x[1:] ** 2 <= 1.0 + 1e-6)
    assert con.jacobian.n_evaluations > 0 and con.hessian.n_evaluations > 0
    j = con.jac(np.ones(12))
    assert sp.issparse(j) and j.nnz == 22
    h = con.hess(np.ones(12), np.ones(11))
    np.testing.assert_allclose(h.toarray(), np.diag([2.0] + [4.0] * 10 + [2.0]))
