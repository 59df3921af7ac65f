"""Checks shared by the tests of scipy's solvers inside a differentiated
function (test_quad, test_root): a gradient against finite differences, a
Hessian against finite differences of the gradient and ``hvp`` against it."""

import numpy as np
import pytest

import hybridad as ha
from hybridad.testing import numerical_gradient


def check_gradient(f, x, backend):
    """The value is ``f``'s and the gradient the finite differences'."""
    res = ha.gradient(f, x, backend=backend)
    assert float(res.value) == pytest.approx(f(x), rel=1e-12)
    np.testing.assert_allclose(res.gradient, numerical_gradient(f, x), rtol=1e-6, atol=1e-8)


def check_second_order(f, x, backend):
    """The Hessian against finite differences of the (numpy backend's)
    gradient, and ``hvp`` along ``[1, -0.5, 0.25]`` against ``H v``."""
    H = ha.hessian(f, x, backend=backend).hessian
    Hfd = np.array([numerical_gradient(
        lambda q: ha.gradient(f, q, backend="numpy").gradient[i], x) for i in range(x.size)])
    np.testing.assert_allclose(H, Hfd, rtol=1e-5, atol=1e-7)
    v = np.array([1.0, -0.5, 0.25])[:x.size]
    np.testing.assert_allclose(ha.hvp(f, x, v, backend=backend).hvp, H @ v, rtol=1e-8,
                               atol=1e-10)
