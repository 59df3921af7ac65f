"""Sliding windows times a kernel (:mod:`hybridad.frontend.windows`):
``sliding_window_view(x, 9) @ w`` and ``np.einsum("ijkl,kl->ij",
sliding_window_view(X, (3, 3)), K)`` -- convolutions as numpy code writes
them -- run as scipy.signal's correlation (shifted slices, one fused pass)
instead of a gather of every window; values and gradients as numpy's and
finite differences', a traced kernel too; any other use of the windows reads
them as before."""

import numpy as np
import pytest

import hybridad as ha

swv = np.lib.stride_tricks.sliding_window_view
RNG = np.random.default_rng(5)
W, K = RNG.standard_normal(9), RNG.standard_normal((3, 3))

CASES = {
    "1-D @ kernel": (lambda x: np.sum(np.tanh(swv(x, 9) @ W) ** 2), (50,)),
    "1-D @ traced kernel": (lambda x: np.sum(np.tanh(swv(x[:40], 9) @ x[40:49]) ** 2), (50,)),
    "2-D einsum": (lambda X: np.sum(np.maximum(np.einsum("ijkl,kl->ij", swv(X, (3, 3)), K),
                                               0.0) ** 2), (8, 7)),
    "axis=1 @": (lambda X: np.sum(np.sin(swv(X, 3, axis=1) @ W[:3]) ** 2), (4, 9)),
    "windows read otherwise": (lambda x: np.sum(swv(x, 4).max(axis=1)) +
                               np.sum(swv(x, 4) @ np.ones((4, 2))), (20,)),
}


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_window_products(case, backend):
    f, shape = CASES[case]
    x = RNG.standard_normal(shape)
    res = ha.gradient(f, x, backend=backend)
    assert res.value == pytest.approx(f(x), rel=1e-13)
    flat, eps = x.reshape(-1), 1e-6
    fd = np.array([(f((flat + eps * e).reshape(shape)) - f((flat - eps * e).reshape(shape)))
                   / (2 * eps) for e in np.eye(flat.size)])
    np.testing.assert_allclose(res.gradient.reshape(-1), fd, rtol=1e-6, atol=1e-7)


def test_a_window_product_is_no_matrix_product():
    plan = ha.compile(CASES["1-D @ kernel"][0], RNG.standard_normal(50), backend="numpy")
    assert not any(n.op == "matmul" for n in plan.graph.nodes)
