"""numpy's polynomial package on traced coefficients and points: its Python
code is traced as the user's (hybridad.errors.traced_as_users), its dispatched
functions through their own Python (numpy_stats.polynomial_dispatched).
numpy's values, derivatives against central differences on both CPU backends,
nothing allocated per call."""

import numpy as np
import numpy.polynomial as P
import pytest
from conftest import BACKENDS

import hybridad as ha
from hybridad.testing import assert_no_alloc, numerical_gradient

T = np.linspace(-0.9, 0.9, 9)
C = np.array([0.3, -0.5, 0.8, 0.2])
FAMILIES = {"polynomial": "poly", "chebyshev": "cheb", "legendre": "leg", "hermite": "herm",
            "hermite_e": "herme", "laguerre": "lag"}


def _family(module):
    return getattr(P, module), FAMILIES[module]


CASES = {}
for _module in FAMILIES:
    _m, _p = _family(_module)
    CASES[f"{_p}val of c"] = (lambda c, m=_m, p=_p: np.sum(getattr(m, f"{p}val")(T, c) ** 2), C)
    CASES[f"{_p}val of x and c"] = (
        lambda c, m=_m, p=_p: np.sum(getattr(m, f"{p}val")(c / 2, c[::-1]) ** 2), C)
    CASES[f"{_p}val2d"] = (lambda c, m=_m, p=_p: np.sum(
        getattr(m, f"{p}val2d")(T, T[::-1], c.reshape(2, 2)) ** 2), C)
    CASES[f"{_p}grid2d"] = (lambda c, m=_m, p=_p: np.sum(
        getattr(m, f"{p}grid2d")(T[:3], T[:4], c.reshape(2, 2)) ** 2), C)
    CASES[f"{_p}der"] = (lambda c, m=_m, p=_p: np.sum(getattr(m, f"{p}der")(c, 2) ** 2), C)
    CASES[f"{_p}int"] = (lambda c, m=_m, p=_p: np.sum(
        getattr(m, f"{p}int")(c, lbnd=0.5, k=[c[0]]) ** 2), C)
    CASES[f"{_p}mul"] = (lambda c, m=_m, p=_p: np.sum(getattr(m, f"{p}mul")(c, c[1:]) ** 2), C)
    CASES[f"{_p}fit of y"] = (lambda c, m=_m, p=_p: np.sum(
        getattr(m, f"{p}fit")(T, np.sin(T) * c[0] + c[1] * T ** 2, 3) ** 2), C)
CASES.update({
    "Polynomial(c)(x)": (lambda c: np.sum(P.Polynomial(c)(T) ** 2), C),
    "Chebyshev on a domain": (lambda c: np.sum(P.Chebyshev(c, domain=[0, 2])(T + 1) ** 2), C),
    "Legendre.deriv": (lambda c: np.sum(P.Legendre(c).deriv()(T) ** 2), C),
    "Polynomial.integ": (lambda c: np.sum(P.Polynomial(c).integ(lbnd=0.2)(T) ** 2), C),
    "series arithmetic": (lambda c: np.sum(((P.Polynomial(c) * P.Polynomial(c[:2]) - 2.0)
                                            ** 2)(T)), C),
    "Polynomial.fit": (lambda c: np.sum(P.Polynomial.fit(T, np.cos(T) * c[0] + c[2] * T, 3)
                                        .coef ** 2), C),
    "Polynomial.fit(x)": (lambda c: np.sum(P.Polynomial.fit(T, np.cos(T) * c[0] + c[2] * T, 3)
                                           (T[::2]) ** 2), C),
    "poly2cheb": (lambda c: np.sum(P.chebyshev.poly2cheb(c) * np.arange(1, 5)), C),
    "chebvander": (lambda c: np.sum((P.chebyshev.chebvander(c / 2, 3) @ C) ** 2), C),
    "np.polyval": (lambda c: np.sum(np.polyval(c, T) ** 2), C),
})


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_derivatives(name):
    f, c = CASES[name]
    res = ha.gradient(f, c, backend="numpy")
    np.testing.assert_allclose(res.value, f(c), rtol=1e-12)
    np.testing.assert_allclose(res.gradient, numerical_gradient(f, c), rtol=1e-6, atol=1e-8,
                               err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_compiled_plan_of_the_package_allocates_nothing(backend):
    def f(c):
        return (np.sum(P.chebyshev.chebval(T, c) ** 2) + np.sum(P.Legendre(c).deriv()(T))
                + np.sum(P.polynomial.polyval2d(T, T, c.reshape(2, 2)))
                + np.sum(P.hermite_e.hermemul(c, c)))

    plan = ha.compile(f, C, backend=backend)
    out = ha.GradientResult(C)
    plan.gradient(C, out=out)
    np.testing.assert_allclose(out.value, f(C), rtol=1e-12)
    np.testing.assert_allclose(out.gradient, numerical_gradient(f, C), rtol=1e-6, atol=1e-8)
    c2 = C[::-1].copy()
    np.testing.assert_allclose(plan.gradient(c2, out=out).value, f(c2), rtol=1e-12)
    if backend == "numba":
        assert_no_alloc(lambda: plan.gradient(C, out=out))


def test_dtype_queries_answer_from_the_dtype():
    seen = []

    def f(x):
        seen.append((np.iscomplexobj(x), np.isrealobj(x), np.common_type(x),
                     np.common_type(x.astype(np.float32)), np.common_type(x, np.ones(2, int)),
                     np.iscomplexobj(x + 1j * x)))
        return np.sum(x)

    ha.gradient(f, C, backend="numpy")
    assert seen == [(False, True, np.float64, np.float32, np.float64, True)]


def test_a_leading_zero_trimmed_by_value_is_refused_by_name():
    with pytest.raises(Exception, match="trim_zeros"):
        ha.gradient(lambda c: np.sum(np.poly1d(c)(T)), C, backend="numpy")
