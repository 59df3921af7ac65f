"""Powers by a constant small integer (``x**3``) in compiled regions are
products, not libm's ``pow`` (hybridad.backends.scalar): 30x faster on 10^4
elements, as JAX's ``integer_pow``.  Their partials come from the same rule
(``y * x**(y - 1)``, the ``y - 1`` and the ``y == 0`` test folded on
constants), so the derivative is a product too.  Values agree with numpy's
``pow`` to an ulp or two; gradients and Hessians with finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import hybridad as ha
from hybridad.testing import assert_no_alloc, numerical_gradient

X = np.array([-2.5, -1.0, -0.3, 0.0, 0.4, 1.0, 1.7, 3.0])


@pytest.mark.parametrize("k", [1, 2, 3, 4, 3.0, -1, 2.5, 5])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_values_gradients_and_hessians(k, dtype):
    x = X.astype(dtype) if k != 2.5 else np.abs(X).astype(dtype) + 0.5
    if k == -1:
        x = x + (x == 0)

    def f(x):
        return np.sum(np.sin(x) * x ** k)

    plan = ha.compile(f, x)
    res = plan.gradient(x)
    ref = ha.gradient(f, x, backend="numpy")
    assert_no_alloc(plan.gradient, x, out=ha.GradientResult(x), n=3, warmup=1)
    rtol = 1e-13 if dtype == np.float64 else 1e-5
    assert float(res.value) == pytest.approx(float(ref.value), rel=rtol)
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=rtol, atol=rtol)
    if dtype == np.float64:
        np.testing.assert_allclose(res.gradient, numerical_gradient(f, x), rtol=1e-6,
                                   atol=1e-7)
        h = ha.hessian(f, x).hessian
        h_ref = ha.hessian(f, x, backend="numpy").hessian
        np.testing.assert_allclose(h, h_ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_no_pow_call_in_the_loop(k):
    x = np.linspace(0.1, 1.0, 1000)
    plan = ha.compile(lambda x: np.sum(x ** k), x)
    source = plan.explain()
    body = source[source.index("def plan_fn"):]
    assert "**" not in body, body


def test_special_values_follow_numpy():
    x = np.array([np.inf, -np.inf, np.nan, -0.0, 1e200, -1e-200])
    for k in (2, 3, 4):
        plan = ha.compile(lambda x: np.sum(x ** k), x[:1])
        for xi in x:
            got = plan.value(np.array([xi]))
            with np.errstate(all="ignore"):
                want = np.sum(np.array([xi]) ** k)  # (numpy's: a sum from +0, so -0.0 ** 3 is 0.0)
            assert got == want or (np.isnan(got) and np.isnan(want)), (k, xi, got, want)
            assert np.signbit(got) == np.signbit(want) or np.isnan(want), (k, xi)
        res = ha.gradient(lambda x: np.sum(np.where(np.isfinite(x), x, 0.0) ** k),
                          x)
        with np.errstate(all="ignore"):
            ref = ha.gradient(lambda x: np.sum(np.where(np.isfinite(x), x, 0.0) ** k), x,
                              backend="numpy")
        np.testing.assert_array_equal(np.isnan(res.gradient), np.isnan(ref.gradient))
        finite = np.isfinite(ref.gradient)
        np.testing.assert_allclose(res.gradient[finite], ref.gradient[finite], rtol=1e-14)
