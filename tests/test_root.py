"""Roots by scipy.optimize inside a differentiated function (hybridad.ops.root,
hybridad.frontend.scipy_optimize): scipy's root, and derivatives by the
implicit function theorem -- in the residual's arguments and closures, of
scalar roots (brentq & co) and systems (fsolve) -- checked against finite
differences and closed forms, first and second order, on both CPU backends."""

import numpy as np
import pytest
import scipy.optimize as so

import hybridad as ha
from hybridad.errors import TracingError
from hybridad.testing import numerical_gradient
from solver_checks import check_gradient, check_second_order

BACKENDS = ["numpy", "numba"]
P = np.array([0.3, 1.2, 2.0])


def kepler(p, solver="brentq"):
    """The eccentric anomaly: ``E - e sin E = M`` (e, M as args)."""
    E = getattr(so, solver)(lambda E, e, M: E - e * np.sin(E) - M, 0.0, 2 * np.pi,
                            args=(p[0], p[1]), xtol=1e-14)
    return np.cos(E) * p[2]


def closure(p):  # the residual reads p itself; a traced bracket moves nothing
    x = so.brentq(lambda x: np.exp(p[0] * x) - p[1] - x, -5.0, p[2] * 0.0 + 5.0, xtol=1e-14)
    return x ** 2


def system(p):
    p = p * np.array([8.0 / 3.0, 1.0 / 3.0, 1.0])  # (at P: p[0] 0.8, p[1] 0.4)
    x = so.fsolve(lambda x: np.array([x[0] ** 2 + p[0] * x[1] - 3.0,
                                      np.sin(x[1]) + x[0] * p[1] - 1.0]),
                  np.array([1.0, 1.0]), xtol=1e-13)
    return 2.0 * x[0] + x[1] ** 2 + p[2] * x[0] * x[1]


def matrix_system(p):  # a nonlinear system of 4, an array parameter
    A = np.outer(p, p)[:, :2] + np.eye(3, 2)
    x = so.fsolve(lambda x, A: np.tanh(A @ x[:2]) + x - np.arange(3.0) * 0.1, np.zeros(3),
                  args=(A,), xtol=1e-13)
    return np.sum(x ** 2)


def via_root_scalar(p):  # root_scalar's bracketing methods are brentq & co
    r = so.root_scalar(lambda E, e: E - e * np.sin(E) - p[1], args=(p[0],),
                       bracket=[0.0, 2 * np.pi], xtol=1e-14)
    assert r.converged and r.method == "brentq"
    return np.cos(r.root) * p[2]


CASES = {"brentq": kepler, "root_scalar": via_root_scalar, "brenth": lambda p: kepler(p, "brenth"),
         "ridder": lambda p: kepler(p, "ridder"), "toms748": lambda p: kepler(p, "toms748"),
         "bisect": lambda p: kepler(p, "bisect"),
         "closure": closure, "fsolve": system, "fsolve_matrix": matrix_system}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_finite_differences(name, backend):
    check_gradient(CASES[name], P, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["brentq", "closure", "fsolve", "fsolve_matrix"])
def test_second_order(name, backend):
    check_second_order(CASES[name], P, backend)


def test_closed_form_and_a_plan_that_follows_new_values():
    def cube_root(c):  # x^3 = c: dx/dc = 1 / (3 x^2)
        return so.brentq(lambda x: x ** 3 - c[0], 0.0, 10.0, xtol=1e-15)
    plan = ha.compile(cube_root, np.array([2.0]))
    for c in (2.0, 8.0, 27.0):
        res = plan.gradient(np.array([c]))
        assert float(res.value) == pytest.approx(c ** (1 / 3), rel=1e-13)
        assert float(res.gradient[0]) == pytest.approx(1.0 / (3.0 * c ** (2 / 3)), rel=1e-10)


def test_a_root_of_no_traced_value_is_scipy_s_on_values():
    def f(x):
        r = so.brentq(lambda t: t ** 2 - 2.0, 0.0, 2.0)
        assert type(r) is float
        return r * np.sum(x)
    assert float(ha.gradient(f, np.ones(2)).gradient[0]) == pytest.approx(np.sqrt(2.0))


def test_refusals_and_failures():
    with pytest.raises(TracingError, match="full_output"):
        ha.gradient(lambda k: so.brentq(lambda x: x - k[0], -1, 1, full_output=True)[0],
                    np.zeros(1))
    with pytest.raises(TracingError, match="fprime"):
        ha.gradient(lambda k: so.fsolve(lambda x: x - k, np.zeros(2), fprime=lambda x: 1.0),
                    np.zeros(2))
    plan = ha.compile(lambda k: so.brentq(lambda x: x - k[0], -1.0, 1.0), np.zeros(1))
    with pytest.raises(ValueError):  # no sign change in the bracket: scipy's error
        plan.gradient(np.array([5.0]))


A2 = np.array([[3.0, 0.5], [0.5, 2.0]])


def _inner(w, lam):
    return 0.5 * w @ A2 @ w - np.sum(np.log1p(np.exp(w))) + lam[0] * np.sum(w ** 4) - \
        lam[1] * w[0]


def bilevel(lam, method="BFGS"):
    """An outer loss of an inner minimizer (hyperparameters of a fit)."""
    options = {"gtol": 1e-9} if method in ("BFGS", "CG") else None
    res = so.minimize(_inner, np.zeros(2), args=(lam,), method=method, options=options,
                      tol=None if options else 1e-13)
    return np.sum((res.x - 1.0) ** 2) + res.fun


def _bilevel_exact(lam):
    """The same with the inner minimum solved to rounding (its gradient's
    root by fsolve from BFGS's answer): what finite differences can use."""
    def grad(w, *_):
        return A2 @ w - 1.0 / (1.0 + np.exp(-w)) + 4 * lam[0] * w ** 3 - lam[1] * np.eye(2)[0]
    start = so.minimize(_inner, np.zeros(2), args=(lam,), jac=grad, method="BFGS").x
    w = so.fsolve(grad, start, xtol=1e-13)
    return np.sum((w - 1.0) ** 2) + _inner(w, lam)


LAM = np.array([0.3, 1.2])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", ["BFGS", "L-BFGS-B", "SLSQP"])
def test_a_minimizer_inside_f(method, backend):
    """The implicit function theorem on the optimality condition: the
    gradient of an outer loss of ``minimize``'s result."""
    res = ha.gradient(lambda lam: bilevel(lam, method), LAM, backend=backend)
    np.testing.assert_allclose(res.gradient, numerical_gradient(_bilevel_exact, LAM),
                               rtol=1e-6, atol=1e-8)


def test_a_minimizer_s_second_order_and_a_derivative_free_method():
    H = ha.hessian(bilevel, LAM).hessian
    Hfd = np.array([numerical_gradient(
        lambda q: ha.gradient(bilevel, q, backend="numpy").gradient[i], LAM) for i in range(2)])
    np.testing.assert_allclose(H, Hfd, rtol=1e-5, atol=1e-7)

    def nelder_mead(lam):  # separable: w0 solves 2 (w - lam0) + 4 w^3 = 0
        return so.minimize(lambda w: np.sum((w - lam) ** 2) + np.sum(w ** 4), np.zeros(2),
                           method="Nelder-Mead",
                           options={"xatol": 1e-12, "fatol": 1e-14, "maxiter": 5000}).x[0]
    w0 = so.brentq(lambda w: 2 * (w - LAM[0]) + 4 * w ** 3, -5, 5, xtol=1e-15)
    g = ha.gradient(nelder_mead, LAM).gradient
    np.testing.assert_allclose(g, [2 / (2 + 12 * w0 ** 2), 0.0], rtol=1e-7, atol=1e-12)


def test_root_of_a_system():
    def f(p):
        r = so.root(lambda x: np.array([x[0] + 0.5 * np.sin(x[1]) - p[0],
                                        x[1] - 0.3 * x[0] ** 2 - p[1]]), np.zeros(2), tol=1e-13)
        assert r.success
        return np.sum(r.x ** 2) + np.sum(r.fun)
    res = ha.gradient(f, LAM)
    np.testing.assert_allclose(res.gradient, numerical_gradient(f, LAM), rtol=1e-6)


def test_minimize_refusals():
    with pytest.raises(TracingError, match="bounds="):
        ha.gradient(lambda lam: so.minimize(_inner, np.zeros(2), args=(lam,),
                                            bounds=[(0, 1)] * 2).x[0], LAM)
    with pytest.raises(TracingError, match="Newton-CG"):
        ha.gradient(lambda lam: so.minimize(_inner, np.zeros(2), args=(lam,),
                                            method="Newton-CG").x[0], LAM)


def test_a_traced_function_s_value_reshaped_or_cast_by_every_solver():
    """A residual, objective, integrand or right-hand side whose value scipy
    reshapes or casts (a column, float32, a one-element array): the cast is
    traced inside the function's body (it escaped to the outer trace and
    raised before)."""
    from scipy.integrate import odeint, quad

    p = np.array([0.8, 0.4])
    root = ha.gradient(lambda p: np.sum(so.fsolve(lambda x: (x ** 3 - p).reshape(2, 1),
                                                  np.ones(2), xtol=1e-13)), p).gradient
    np.testing.assert_allclose(root, 1 / (3 * p ** (2 / 3)), rtol=1e-9)
    integral = ha.gradient(lambda p: quad(lambda x: (p[0] * x).astype(np.float32), 0.0,
                                          1.0)[0], p).gradient
    np.testing.assert_allclose(integral, [0.5, 0.0], rtol=1e-6)
    argmin = ha.gradient(lambda p: so.minimize(lambda w: np.sum((w - p) ** 2, keepdims=True),
                                               np.zeros(2)).x[0], p).gradient
    np.testing.assert_allclose(argmin, [1.0, 0.0], atol=1e-6)
    ode = ha.gradient(lambda p: np.sum(odeint(lambda y, t: (-p * y).reshape(2, 1), np.ones(2),
                                              [0.0, 1.0], rtol=1e-11, atol=1e-11)), p).gradient
    np.testing.assert_allclose(ode, -np.exp(-p), rtol=1e-8)
