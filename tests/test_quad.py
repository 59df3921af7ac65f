"""Integrals by scipy.integrate.quad inside a differentiated function
(hybridad.ops.quad): scipy's value, and Leibniz's rule for the derivatives --
in the integrand's parameters (arguments and closures), in the limits,
finite or not, with quad's options -- checked against finite differences
and closed forms, first and second order, on both CPU backends."""

import numpy as np
import pytest
from scipy.integrate import quad

import hybridad as ha
from hybridad.errors import TracingError
from solver_checks import check_gradient, check_second_order

BACKENDS = ["numpy", "numba"]
P = np.array([0.7, 1.3, 2.0])


def gauss_cos(p):  # params by args and by closure, a traced upper limit
    v, _ = quad(lambda x, a: np.exp(-a * x ** 2) * np.cos(p[1] * x), 0.0, p[2], args=(p[0],))
    return v ** 2


def both_limits(p):
    return quad(lambda x: np.sin(p[0] * x) + x ** 2, p[1] - 1.0, p[2])[0]


def infinite(p):  # a normalizing constant over the real line
    return quad(lambda x: np.exp(-0.5 * (x / p[0]) ** 2 - p[1] * np.abs(x)), -np.inf,
                np.inf)[0] * p[2]


def options(p):  # points of a kink, and a weight function (quad's QAWO)
    kink = quad(lambda x: np.abs(x - 0.5) * p[0] + p[1] * x, 0.0, 1.0, points=[0.5],
                epsabs=1e-12)[0]
    weighted = quad(lambda x: np.exp(-p[2] * x) * p[0], 0.0, 3.0, weight="cos", wvar=2.0)[0]
    return kink * weighted


def matrix_param(p):  # an array parameter, a vector-valued derivative integrand
    A = np.outer(p, p)
    return quad(lambda x: np.sum(np.tanh(A * x)), 0.0, 1.0)[0]


def vector(p):  # quad_vec: an array-valued integrand
    from scipy.integrate import quad_vec

    v, _ = quad_vec(lambda x: np.array([np.exp(-p[0] * x), np.sin(p[1] * x)]) * p[2], 0.0, 2.0)
    return np.sum(v ** 2)


def double(p):  # dblquad: a quad inside a quad, a traced limit of the outer one
    from scipy.integrate import dblquad

    return dblquad(lambda y, x: np.exp(-p[0] * x * y) * np.cos(p[1] * y), 0.0, p[2],
                   lambda x: 0.0, lambda x: x)[0]


def triple(p):  # tplquad: a quad inside a dblquad, limits of the inner ones moving
    from scipy.integrate import tplquad

    return tplquad(lambda z, y, x: np.exp(-p[0] * x * y * z) + p[1] * z, 0.0, 1.0,
                   lambda x: 0.0, lambda x: p[2] * x, lambda x, y: 0.0, lambda x, y: x + y)[0]


CASES = {f.__name__: f for f in (gauss_cos, both_limits, infinite, options, matrix_param,
                                 vector, double, triple)}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_finite_differences(name, backend):
    check_gradient(CASES[name], P, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["gauss_cos", "both_limits", "infinite", "double"])
def test_second_order(name, backend):
    check_second_order(CASES[name], P, backend)


def test_closed_forms_and_the_error_bound():
    s = np.array(1.5)
    g = ha.gradient(lambda s: quad(lambda x: np.exp(-x ** 2 / (2 * s ** 2)), -np.inf,
                                   np.inf)[0], s)
    assert float(g.gradient) == pytest.approx(np.sqrt(2 * np.pi), rel=1e-9)

    def with_err(k):
        value, err = quad(lambda x: k[0] * x, 0.0, 1.0)
        assert err.shape == ()  # a 0-d value, no derivative
        return value + 0.0 * err
    assert float(ha.gradient(with_err, np.ones(1)).gradient[0]) == pytest.approx(0.5)


def test_an_integral_of_no_traced_value_is_scipy_s_on_values():
    def f(x):
        v, err = quad(lambda t: t ** 2, 0.0, 1.0)
        assert type(v) is float
        return v * np.sum(x)
    assert float(ha.gradient(f, np.ones(2)).gradient[0]) == pytest.approx(1.0 / 3.0)


def test_refusals():
    with pytest.raises(TracingError, match="full_output"):
        ha.gradient(lambda k: quad(lambda x: k[0] * x, 0.0, 1.0, full_output=1)[0], np.ones(1))
    with pytest.raises(TracingError):  # a Python decision on x inside the integrand
        ha.gradient(lambda k: quad(lambda x: k[0] if x > 0.5 else x, 0.0, 1.0)[0],
                    np.ones(1))
