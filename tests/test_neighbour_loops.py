"""Loops over elements that read their neighbours, as finite-difference code
ported from C or Fortran writes them: ``out[i] = x[i - 1] - 2 x[i] + x[i + 1]``,
a five-point stencil in two nested loops, a recurrence that reads the
elements beside the one it writes.

The trace merges equal reads: iteration ``i`` makes only ``x[i + 1]`` and
reads ``x[i - 1]`` and ``x[i]`` from the iterations before it, so the steps
were not copies of one another and such a loop stayed unrolled (a node per
element: 922 nodes at n = 300).  Reads at ints are moved to right after the
array they read before the run search (:mod:`hybridad.transforms.rolling_runs`),
so each step reads its elements as per-iteration inputs, and the plan's size
does not grow with n.  Every result is compared with the plan that keeps the
loop as traced (``HYBRIDAD_ROLL=0``) and with central differences, on both
CPU backends.
"""

import numpy as np
import pytest

import hybridad as ha
from conftest import assert_float32_follows_float64
from hybridad.testing import count_allocations, numerical_gradient


def laplacian(x):
    out = np.zeros_like(x)
    for i in range(1, len(x) - 1):
        out[i] = x[i - 1] - 2 * x[i] + x[i + 1]
    return np.sum(out ** 2)


def five_point(x):
    out = np.zeros(len(x))
    for i in range(2, len(x) - 2):
        out[i] = -x[i - 2] + 16 * x[i - 1] - 30 * x[i] + 16 * x[i + 1] - x[i + 2]
    return np.sum(np.tanh(out))


def upwind(x):
    out = np.zeros_like(x)
    for i in range(1, len(x)):
        out[i] = np.sin(x[i]) * x[i - 1]
    return np.sum(out)


def backwards(x):
    out = np.zeros_like(x)
    for i in range(len(x) - 2, 0, -1):
        out[i] = x[i + 1] * x[i - 1] - x[i]
    return np.sum(out ** 2)


def filtered(x):
    s = np.zeros(())
    y = np.zeros_like(x)
    for i in range(1, len(x) - 1):
        s = 0.9 * s + x[i - 1] * x[i + 1]
        y[i] = s
    return np.sum(y ** 2)


def fluxes(x):
    out = np.zeros_like(x)
    for i in range(1, len(x) - 1):
        left, right = (x[i] + x[i - 1]) ** 2, (x[i + 1] + x[i]) ** 2
        out[i] = right - left
    return np.sum(out ** 2)


def grid(x):
    n = int(round(np.sqrt(x.size)))
    u = x.reshape(n, n)
    out = np.zeros((n, n))
    for i in range(1, n - 1):
        for j in range(1, n - 1):
            out[i, j] = u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4 * u[i, j]
    return np.sum(out ** 2)


LOOPS = [laplacian, five_point, upwind, backwards, filtered, fluxes, grid]
SIZES = {grid: (100, 196)}  # (10 x 10 and 14 x 14)


def _x(f, k=0, seed=0):
    n = SIZES.get(f, (100, 200))[k]
    return np.random.default_rng(seed).uniform(0.2, 1.0, n)


@pytest.mark.parametrize("f", LOOPS, ids=lambda f: f.__name__)
def test_a_loop_reading_neighbours_rolls_and_does_not_grow_with_n(f):
    sizes = []
    for k in (0, 1):
        x = _x(f, k)
        plan = ha.compile(f, x, backend="numpy")
        np.testing.assert_allclose(plan.gradient(x).gradient, numerical_gradient(f, x),
                                   rtol=1e-6, atol=1e-8)
        sizes.append(len(plan.graph.nodes))
    assert sizes[1] == sizes[0] and sizes[0] < 120, sizes


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("f", LOOPS, ids=lambda f: f.__name__)
def test_a_loop_reading_neighbours_matches_the_loop_as_traced(f, backend, monkeypatch):
    x = _x(f)
    monkeypatch.setenv("HYBRIDAD_ROLL", "0")
    traced = ha.compile(f, x, backend="numpy")
    monkeypatch.delenv("HYBRIDAD_ROLL")
    plan = ha.compile(f, x, backend=backend)
    for seed in (1, 2):  # (new values: no retrace, the same plan)
        y = _x(f, seed=seed)
        got, want = plan.gradient(y), traced.gradient(y)
        np.testing.assert_allclose(got.value, f(y), rtol=1e-13)
        np.testing.assert_allclose(got.gradient, want.gradient, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(got.gradient, numerical_gradient(f, y), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("f", [laplacian, five_point, filtered, grid], ids=lambda f: f.__name__)
def test_a_neighbour_loop_in_float32(f, backend):
    """float32 arguments: the rolled plan's gradient is float64's to float32
    rounding at new values, without a retrace."""
    assert_float32_follows_float64(f, [_x(f, seed=s).astype(np.float32) for s in (0, 1, 2)],
                                   backend)


@pytest.mark.parametrize("f", [laplacian, filtered, grid], ids=lambda f: f.__name__)
def test_a_numba_plan_of_a_neighbour_loop_allocates_nothing(f):
    x = _x(f)
    plan = ha.compile(f, x)
    res = ha.GradientResult(x)
    plan.gradient(x, out=res)
    with count_allocations() as counts:
        for _ in range(5):
            plan.gradient(x, out=res)
    assert counts.allocations == 0, counts


def test_hessian_through_a_neighbour_loop():
    x = _x(fluxes)[:40]
    plan = ha.compile(fluxes, x, hessian=True, backend="numpy")
    h = plan.hessian(x).hessian
    fd = np.stack([numerical_gradient(lambda z: ha.gradient(fluxes, z).gradient[i], x)
                   for i in range(3)])
    np.testing.assert_allclose(h[:3], fd, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(h, h.T, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("f", [five_point, fluxes, laplacian], ids=lambda f: f.__name__)
def test_steps_that_share_a_number_are_one_batched_step(f):
    """``16 x[i + 1]`` of step ``i`` is ``16 x[j - 1]`` of step ``j = i + 2``
    (``(x[i + 1] + x[i])**2`` of a flux, the next step's left one): the trace
    makes it once, and each step gets its own copy before the search, so the
    steps read nothing of one another -- one batched step over all of them,
    no loop carrying the shared numbers (five_point: 62 -> 9 us a call at
    n = 2000)."""
    plan = ha.compile(f, _x(f), backend="numpy")
    assert not any(n.op == "loop" for n in plan.graph.nodes)


def gauss_seidel(x, sweeps=3):
    y = x.copy()
    for _ in range(sweeps):
        for i in range(1, len(y) - 1):
            y[i] = 0.5 * (y[i - 1] + y[i + 1]) + 0.1 * x[i]
    return np.sum(y ** 2)


def test_a_sweep_of_light_steps_counts_its_reads_and_rolls():
    """A Gauss-Seidel sweep -- each step reads the element the step before
    wrote (carried) and the old one beside it (read in front of the run) --
    is light; whether it rolls weighs its unrolled program, whose steps still
    hold their reads (one sweep of 60: 31 nodes; three: 127, where the base
    had 1077, and 828 nodes for one sweep once the reads had moved out of
    the steps' count)."""
    x = _x(laplacian)[:60]
    for sweeps, most in ((1, 40), (3, 160)):
        def f(z, sweeps=sweeps):
            return gauss_seidel(z, sweeps)
        plan = ha.compile(f, x, backend="numpy")
        assert len(plan.graph.nodes) <= most, (sweeps, len(plan.graph.nodes))
        np.testing.assert_allclose(plan.gradient(x).gradient, numerical_gradient(f, x),
                                   rtol=1e-6, atol=1e-8)
