"""Shared helpers: finite-difference checks of hybridad gradients."""

import numpy as np
import pytest

import hybridad as ha
from hybridad.testing import numerical_gradient


def rand(shape, lo=-2.0, hi=2.0, seed=0, dtype=np.float64):
    rng = np.random.default_rng(abs(hash((shape, lo, hi, seed))) % 2**32)
    return rng.uniform(lo, hi, size=shape).astype(dtype)


def assert_grad(f, args, argnums=0, rtol=1e-6, atol=1e-8):
    """Gradient of f w.r.t. argnums against central finite differences (float64)."""
    nums = (argnums,) if isinstance(argnums, int) else argnums
    res = ha.gradient(f, *args, argnums=argnums)
    expected_value = float(f(*args))
    np.testing.assert_allclose(float(res.value), expected_value, rtol=1e-12, atol=1e-300)
    grads = (res.gradient,) if isinstance(argnums, int) else res.gradient
    for k, g in zip(nums, grads, strict=True):
        def fk(xk, k=k):
            a = list(args)
            a[k] = xk
            return f(*a)

        num = numerical_gradient(fk, args[k])
        scale = max(1.0, float(np.max(np.abs(num), initial=0.0)))
        assert g.shape == np.shape(args[k]) and g.dtype == args[k].dtype
        np.testing.assert_allclose(g, num, rtol=0, atol=atol + rtol * scale,
                                   err_msg=f"gradient w.r.t. argument {k}")
    return res


@pytest.fixture(autouse=True)
def _ieee_quiet():
    with np.errstate(all="ignore"):
        yield
