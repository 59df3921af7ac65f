"""Python's ``math`` module on traced values (:mod:`hybridad.frontend.math_calls`).

``math.sqrt(T)``, ``math.exp(-r * T)``, ``from math import log`` -- code as
people ship it -- called ``float()`` on a traced scalar and were refused ("a
Python float would drop its derivative"), as in JAX and autograd.  A plan now
traces such a function again with the user's names for ``math`` and its
functions bound to numpy's functions of traced values: the derivative flows
through them.  ``float()`` itself is still refused; ``math.floor`` and kin
are Python ints decided on the traced call's values.
"""

import math
import threading
from math import erf, exp, log
from math import sqrt as root

import numpy as np
import pytest
import scipy.special as sp

import hybridad as ha
from hybridad.errors import TracingError

P = np.array([100.0, 95.0, 0.7, 0.02, 0.25])


def black_scholes(p):
    S, K, T, r, sig = p
    d1 = (np.log(S / K) + (r + sig * sig / 2) * T) / (sig * math.sqrt(T))
    return S * sp.ndtr(d1) - K * exp(-r * T) * sp.ndtr(d1 - sig * root(T))


def _fd(f, x, eps=1e-6):
    steps = eps * np.maximum(np.abs(x), 1.0)
    return np.array([(f(x + h * e) - f(x - h * e)) / (2 * h)
                     for e, h in zip(np.eye(x.size), steps, strict=True)])


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_black_scholes_written_with_math(backend):
    """The price's delta is N(d1) (closed form) and its gradient finite
    differences', at two points through one plan; its Hessian is symmetric
    and matches finite differences of the gradient."""
    plan = ha.compile(black_scholes, P, backend=backend)
    for p in (P, P * np.array([1.1, 0.9, 1.2, 1.5, 0.8])):
        res = plan.gradient(p)
        assert res.value == pytest.approx(black_scholes(p), rel=1e-14)
        S, K, T, r, sig = p
        d1 = (np.log(S / K) + (r + sig * sig / 2) * T) / (sig * np.sqrt(T))
        assert res.gradient[0] == pytest.approx(sp.ndtr(d1), rel=1e-13)
        np.testing.assert_allclose(res.gradient, _fd(black_scholes, p), rtol=1e-6, atol=1e-8)
    h = ha.hessian(black_scholes, P, backend=backend).hessian
    np.testing.assert_allclose(h, h.T, rtol=1e-12, atol=1e-14)
    fd = _fd(lambda p: ha.gradient(black_scholes, p, backend="numpy").gradient, P)
    np.testing.assert_allclose(h, fd, rtol=1e-5, atol=1e-7)


UNARY = {
    "sqrt": 1.3, "exp": 0.4, "expm1": 0.4, "log": 1.3, "log2": 1.3, "log10": 1.3,
    "log1p": 0.4, "sin": 0.4, "cos": 0.4, "tan": 0.4, "asin": 0.4, "acos": 0.4,
    "atan": 0.4, "sinh": 0.4, "cosh": 0.4, "tanh": 0.4, "asinh": 0.4, "acosh": 1.3,
    "atanh": 0.4, "fabs": -0.4, "erf": 0.4, "erfc": 0.4, "gamma": 1.3, "lgamma": 1.3,
    "degrees": 0.4, "radians": 0.4, "exp2": 0.4, "cbrt": 1.3,
}
BINARY = {"atan2": (0.4, -1.3), "pow": (1.3, 0.7), "hypot": (0.4, -1.3),
          "copysign": (0.4, -1.3), "fmod": (1.3, 0.4), "log": (1.3, 2.5)}


@pytest.mark.parametrize("name", sorted(n for n in UNARY if hasattr(math, n)))
def test_each_unary_function_differentiates_as_numpy_s(name):
    def f(x):  # (math.<name>, read from the module this function's globals name)
        return getattr(math, name)(x[0]) * x[1] + getattr(math, name)(x[0] * 1.1)

    x = np.array([UNARY[name], 0.9])
    res = ha.gradient(f, x, backend="numpy")
    assert res.value == pytest.approx(f(x), rel=1e-13)
    np.testing.assert_allclose(res.gradient, _fd(f, x), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_each_binary_function_differentiates_as_numpy_s(name):
    def f(x):
        return getattr(math, name)(x[0], x[1]) + getattr(math, name)(x[0] * 2.0, 1.5)

    x = np.array(BINARY[name])
    res = ha.gradient(f, x, backend="numpy")
    assert res.value == pytest.approx(f(x), rel=1e-13)
    np.testing.assert_allclose(res.gradient, _fd(f, x), rtol=1e-6, atol=1e-9)


def test_iterables_predicates_and_whole_numbers():
    """``fsum``, ``prod`` and ``dist`` of traced values; ``isnan`` and
    ``isfinite`` in an ``if``; ``floor`` / ``ceil`` / ``trunc`` are Python
    ints decided on the call's values (a plan follows them to new values)."""
    def f(x):
        s = math.fsum([x[0], x[1] ** 2]) + math.prod([x[0], x[1]]) + math.dist(x, [0.0, 1.0])
        if math.isnan(x[0]) or not math.isfinite(x[1]):
            return s
        return s * (math.floor(x[0] * 2) + math.ceil(x[1]) + math.trunc(-x[0]))

    plan = ha.compile(f, np.array([0.8, 1.7]), backend="numpy")
    for x in (np.array([0.8, 1.7]), np.array([1.6, 2.2])):
        res = plan.gradient(x)
        assert res.value == pytest.approx(f(x), rel=1e-14)
        np.testing.assert_allclose(res.gradient, _fd(f, x), rtol=1e-6, atol=1e-9)


def test_float32_keeps_its_dtype():
    x = np.array([1.5, 0.5], np.float32)
    res = ha.gradient(lambda x: np.sum(x * math.sqrt(x[0])), x, backend="numpy")
    assert res.gradient.dtype == np.float32
    np.testing.assert_allclose(res.gradient, [math.sqrt(1.5) + 2.0 / (2 * math.sqrt(1.5)),
                                              math.sqrt(1.5)], rtol=1e-6)


def test_float_itself_is_still_refused_and_math_is_restored():
    def f(x):
        return float(np.sum(x)) * log(x[0])

    with pytest.raises(TracingError, match=r"float\(\)"):
        ha.gradient(f, P, backend="numpy")
    with pytest.raises(TracingError, match=r"float\(\)"):  # (erf of a float of it)
        ha.gradient(lambda x: erf(float(x[0])), P, backend="numpy")
    assert globals()["math"] is math and globals()["log"] is math.log
    assert globals()["root"] is math.sqrt and globals()["erf"] is math.erf


def test_numbers_and_other_threads_get_math_s_own():
    """Inside the second trace, math of a Python number is math's (a float),
    and another thread calling the user's names meanwhile gets math's."""
    seen = []

    def other():
        seen.append(type(root(4.0)))

    def f(x):
        t = threading.Thread(target=other)
        t.start()
        t.join()
        seen.append(type(math.sqrt(2.0)))
        return math.exp(x[0]) * math.sqrt(2.0)

    res = ha.gradient(f, P, backend="numpy")
    assert res.gradient[0] == pytest.approx(math.exp(P[0]) * math.sqrt(2.0), rel=1e-14)
    assert set(seen) == {float}
