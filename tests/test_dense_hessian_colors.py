"""Dense Hessians from colored seeds (hybridad.sparse.dense): a Hessian plan
whose Hessian is structurally sparse runs one chunk of a star coloring's
seeds and scatters ``H S`` into the caller's dense result.  Checked against
the plan that runs every column (chunk given, so no coloring), against
finite differences of the gradient, with exact zeros outside the pattern,
no allocation per call, and the plans that must not color (dense Hessians,
small n, an explicit chunk)."""

from __future__ import annotations

import numpy as np
import pytest

import hybridad as ha
from hybridad.plans.hessian import COLORS_MIN_N
from hybridad.testing import count_allocations

RNG = np.random.default_rng(21)


def rosen(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def banded(x):  # pairs two apart, a wrap-around pair, and a diagonal
    return np.sum(np.exp(x[:-2] * x[2:])) + np.sum(np.sin(x) ** 2) + x[0] * x[-1]


def grid(x):  # a 2-D five-point stencil energy
    u = x.reshape(8, -1)
    return np.sum((u[1:] - u[:-1]) ** 2 * np.cosh(u[1:])) + \
        np.sum((u[:, 1:] - u[:, :-1]) ** 2) + np.sum(np.log1p(u ** 2))


def steps(x):  # a short loop: the band widens with each step
    for _ in range(3):
        x = x + 0.1 * np.tanh(x * np.roll(x, 1))
    return np.sum(x ** 2)


def logsumexp(x):  # dense
    return np.log(np.sum(np.exp(x)))


def _fd(f, x, eps=1e-6):
    g = lambda z: ha.gradient(f, z, backend="numpy").gradient  # noqa: E731
    h = np.empty((x.size, x.size))
    for j in range(x.size):
        e = np.zeros(x.size)
        e[j] = eps
        h[:, j] = (g(x + e) - g(x - e)) / (2 * eps)
    return h


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("f, n", [(rosen, 96), (rosen, 400), (banded, 120), (grid, 128),
                                  (steps, 200)])
def test_colored_hessian_equals_the_dense_one(f, n, backend):
    x = RNG.uniform(-1.0, 1.0, n)
    plan = ha.compile(f, x, hessian=True, backend=backend)
    assert plan._compression is not None and plan.chunk == plan._compression.colors
    assert plan._compression.colors * 4 <= n
    every = ha.compile(f, x, hessian=True, backend=backend, chunk=16)  # (no coloring)
    assert every._compression is None
    res = ha.HessianResult(x)
    res.hessian[:] = np.nan  # (every entry is written: zeros outside the pattern)
    plan.hessian(x, out=res)
    ref = every.hessian(x)
    np.testing.assert_allclose(res.hessian, ref.hessian, rtol=1e-13, atol=1e-13)
    assert float(res.value) == float(ref.value)
    np.testing.assert_array_equal(res.gradient, ref.gradient)
    zero = ref.hessian == 0
    assert np.all(res.hessian[zero] == 0)
    if n <= 128:
        np.testing.assert_allclose(res.hessian, _fd(f, x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(res.hessian, res.hessian.T, rtol=1e-13, atol=1e-13)
    assert "colored seeds" in plan.explain()


def test_no_allocation_per_call_and_other_entry_points_unchanged():
    n = 300
    x, y, v = RNG.uniform(-1, 1, n), RNG.uniform(-1, 1, n), RNG.standard_normal(n)
    plan = ha.compile(rosen, x, hessian=True)
    res = ha.HessianResult(x)
    plan.hessian(x, out=res)
    with count_allocations() as counts:
        for z in (x, y, x):
            plan.hessian(z, out=res)
    assert counts.allocations == 0, counts
    # hvp of many directions runs the same chunk program (k = the colors)
    vs = RNG.standard_normal((7, n))
    got = plan.hvp(x, v=vs)
    full = plan.hessian(x).hessian
    np.testing.assert_allclose(got.derivs[1], vs @ full, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(plan.hvp(x, v=v).hvp, full @ v, rtol=1e-12, atol=1e-12)
    # ha.hessian colors too, and a strided result is filled as well
    out = ha.DiffResult(np.zeros(()), np.zeros(n), np.zeros((n, 2 * n))[:, ::2])
    ha.hessian(rosen, x, out=out)
    np.testing.assert_array_equal(out.derivs[1], full)


def test_plans_that_do_not_color():
    small = RNG.uniform(-1, 1, COLORS_MIN_N - 1)
    assert ha.compile(rosen, small, hessian=True)._compression is None
    x = RNG.uniform(-1, 1, 200)
    dense = ha.compile(logsumexp, x, hessian=True)
    assert dense._compression is None and "colored" not in dense.explain()
    np.testing.assert_allclose(dense.hessian(x).hessian, _fd(logsumexp, x), atol=1e-6)
    assert ha.compile(rosen, x, hessian=True, chunk=8)._compression is None


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_float32_colored_hessian(backend):
    x = RNG.uniform(-1.0, 1.0, 128).astype(np.float32)
    plan = ha.compile(grid, x, hessian=True, backend=backend)
    assert plan._compression is not None
    res = plan.hessian(x)
    ref = ha.compile(grid, x, hessian=True, backend=backend, chunk=16).hessian(x)
    assert res.hessian.dtype == np.float32
    np.testing.assert_allclose(res.hessian, ref.hessian, rtol=1e-5, atol=1e-5)
    assert np.all(res.hessian[ref.hessian == 0] == 0)
    with count_allocations() as counts:
        plan.hessian(x, out=res)
    assert counts.allocations == 0, counts


def test_bad_results_are_refused_by_name_and_left_untouched():
    x = RNG.uniform(-1.0, 1.0, 100)
    plan = ha.compile(rosen, x, hessian=True)
    assert plan._compression is not None
    res = ha.HessianResult(x)
    res.hessian[:] = -7.0
    res.hessian.flags.writeable = False
    with pytest.raises(ValueError, match="out.hessian"):
        plan.hessian(x, out=res)
    wrong = ha.DiffResult(np.zeros(()), np.zeros(100), np.full((100, 99), -7.0))
    with pytest.raises(ValueError, match="out.hessian"):
        plan.hessian(x, out=wrong)
    assert np.all(res.hessian == -7.0) and np.all(wrong.derivs[1] == -7.0)
    assert float(wrong.value) == 0.0 and not wrong.derivs[0].any()


def test_a_dense_scan_gives_up_before_its_pattern_is_made():
    """A Hessian plan of ``sum(cumsum(x)**2)`` at n = 20000 (a dense Hessian:
    the scan's pattern would hold 2e8 nonzeros) gives up coloring before the
    scan's triangle is made (it allocated n^2 booleans, then a sparse copy:
    5.6 GB; a MemoryError at 30000), and serves linearize + hvp(v=)."""
    import tracemalloc

    n = 20000
    x = np.sin(np.linspace(0.0, 6.0, n))
    v = np.cos(np.linspace(0.0, 3.0, n))

    def f(x):
        return 0.5 * np.sum(np.cumsum(x) ** 2) + np.sum(np.cos(x))
    tracemalloc.start()
    try:
        plan = ha.compile(f, x, hessian=True, backend="numpy")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100e6, f"{peak / 1e6:.0f} MB while building"
    plan.linearize(x)
    hv = np.empty(n)
    plan.hvp(v=v, out=hv)
    want = np.cumsum(np.cumsum(v)[::-1])[::-1] - np.cos(x) * v  # (L^T L - diag cos x) v
    np.testing.assert_allclose(hv, want, rtol=1e-10)
