"""A differentiated argument with no elements, and a stack of no directions:
every derivative entry point still computes ``f``'s value (and gradient)
where it has no chunk of tangents to run.  ``jacobian`` of ``prod`` over an
empty array returned 0.0, and ``hessian`` too, without running ``f``
(found by the array-api-tests suite, ``benchmarks/array_api_tests.py
--differentiate``); the empty derivative arrays have their shapes."""

import numpy as np
import pytest

import hybridad as ha

BACKENDS = ["numpy", "numba"]
EMPTY = np.zeros(0)


def f(x):
    return np.prod(x) + 3.0  # 4.0 at an empty x: no element of x is read


def vec(x):
    return np.prod(x) * np.arange(1.0, 4.0)  # [1, 2, 3] at an empty x


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_jacobian_of_an_empty_argument_has_the_value(backend, mode):
    res = ha.jacobian(vec, EMPTY, backend=backend, mode=mode)
    np.testing.assert_array_equal(res.value, [1.0, 2.0, 3.0])
    assert res.jacobian.shape == (3, 0)
    scalar = ha.jacobian(f, EMPTY, backend=backend, mode=mode)
    assert float(scalar.value) == 4.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_hessian_and_hvp_of_an_empty_argument_have_the_value(backend):
    res = ha.hessian(f, EMPTY, backend=backend)
    assert float(res.value) == 4.0 and res.gradient.shape == (0,)
    assert res.hessian.shape == (0, 0)
    plan = ha.compile(f, EMPTY, hessian=True, backend=backend)
    assert float(plan.hessian(EMPTY).value) == 4.0
    for v in (np.zeros(0), np.zeros((2, 0)), np.zeros((0, 0))):
        assert float(plan.hvp(EMPTY, v=v).value) == 4.0
    plan.linearize(EMPTY)
    for v in (np.zeros(0), np.zeros((2, 0)), np.zeros((0, 0))):
        assert float(plan.hvp(v=v).value) == 4.0
    assert float(ha.hvp(f, EMPTY, np.zeros(0), backend=backend).value) == 4.0


def cube(x):
    return np.sum(x ** 3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_directions_still_give_value_and_gradient(backend):
    """``hvp`` of a ``(0, n)`` stack: the value and gradient at the point,
    called with arguments and at a linearized point (whose next ``H v`` is
    unchanged)."""
    x = np.array([1.0, 2.0, 3.0])
    plan = ha.compile(cube, x, hessian=True, backend=backend)
    res = plan.hvp(x, v=np.zeros((0, 3)))
    assert float(res.value) == 36.0
    np.testing.assert_array_equal(res.derivs[0], 3 * x ** 2)
    assert res.derivs[1].shape == (0, 3)
    plan.linearize(2 * x)
    res = plan.hvp(v=np.zeros((0, 3)))
    assert float(res.value) == 288.0
    np.testing.assert_array_equal(res.derivs[0], 12 * x ** 2)
    one = plan.hvp(v=np.ones(3))
    np.testing.assert_allclose(one.hvp, 12 * x, rtol=1e-15)
