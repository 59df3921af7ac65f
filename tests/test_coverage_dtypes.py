"""Every function of :data:`test_coverage.CASES` in float32 and from
non-contiguous input (a file of its own so that pytest-xdist runs it beside
test_coverage.py)."""

import numpy as np
import pytest
from conftest import rand
from test_coverage import CASES

import hybridad as ha


# compiled (numba) float32 plans for one case per kind of kernel: regions,
# reductions, scans, gathers, sorts, BLAS and LAPACK (every case runs in
# float32 on the numpy backend below)
@pytest.mark.parametrize("name", ["var_std", "einsum_ellipsis", "fancy_indexing", "cumprod",
                                  "sort", "gradient_edge_order_spacing", "linalg_solve_inv",
                                  "linalg_eigh"])
def test_function_float32_and_noncontiguous(name):
    f = CASES[name]
    x = np.asfortranarray(rand((4, 5), seed=3))
    assert not x.flags.c_contiguous
    res = ha.gradient(f, x, backend="numba")
    ref = ha.gradient(f, np.ascontiguousarray(x), backend="numpy")
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-11, atol=1e-12)
    x32 = x.astype(np.float32)
    r32 = ha.gradient(f, x32, backend="numba")
    assert r32.gradient.dtype == np.float32
    np.testing.assert_allclose(r32.gradient, ref.gradient, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_function_float32_and_noncontiguous_numpy_backend(name):
    """Every case in float32 and from a non-contiguous input, on the numpy
    reference backend (no compile cost): the gradient keeps the input's
    dtype and agrees with the float64 one to float32 precision."""
    f = CASES[name]
    x64 = rand((4, 5), seed=sum(map(ord, name)))
    ref = ha.gradient(f, x64, backend="numpy")
    xf = np.asfortranarray(x64)
    res = ha.gradient(f, xf, backend="numpy")
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-12, atol=1e-14)
    x32 = np.asfortranarray(x64.astype(np.float32))
    r32 = ha.gradient(f, x32, backend="numpy")
    assert r32.gradient.dtype == np.float32
    scale = max(1.0, float(np.max(np.abs(ref.gradient))))
    np.testing.assert_allclose(r32.gradient, ref.gradient, rtol=2e-3, atol=2e-3 * scale)
