"""``np.roll`` -- a concatenation of two slices of one array -- and other
concatenations of slices of one array are read in place by the fused loops
that consume them (``hybridad/backends/numba/layouts.read_in_place``): no
buffer, no copy per call, for values, tangents (Jacobians, batched) and
cotangents.  Values and derivatives against numpy, the numpy reference
backend and central finite differences; the plan's memory and source; no
allocation per call."""

import re

import numpy as np
import pytest
from conftest import assert_grad, rand

import hybridad as ha
from hybridad.testing import assert_no_alloc

#: ndim -> (shape, [(shift, axis)]): shifts 0, +-1, past the axis' length,
#: negative past it, several axes at once
ROLLS = {
    1: ((7,), [(1, 0), (-1, 0), (3, -1), (9, 0), (-16, 0), (0, 0)]),
    2: ((4, 5), [(1, 0), (-1, 1), (7, -1), (-9, 0), ((1, -2), (0, 1)), (0, 1)]),
    3: ((3, 4, 5), [(1, 0), (-2, 1), (12, 2), (-1, -1), ((1, 1, -1), (0, 1, 2))]),
}


def rolled(x):
    """Every roll of ``ROLLS[x.ndim]``, each read by a nonlinear elementwise chain."""
    out = x * x
    for k, (s, a) in enumerate(ROLLS[x.ndim][1]):
        r = np.roll(x, s, a)
        out = out + (k + 1) * r * (x if k % 2 else np.tanh(r))
    return out


def jacobian_fd(f, x, h=1e-6):
    x = x.astype(np.float64)
    cols = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = h
        cols.append(((f(x + e) - f(x - e)) / (2 * h)).reshape(-1))
    return np.array(cols).T


def _plan(f, x):
    """The numba Jacobian plan ``ha.jacobian(f, x, ...)`` cached."""
    from hybridad.api import cached_plans

    (plan,) = [p for p in cached_plans(f) if p.backend == "numba" and p._shape == x.shape
               and p._dtype == x.dtype]
    return plan


def _assert_read_in_place(plan, at_least):
    """Every concatenation of the plan that is not a result is read in place:
    no arena slot, no copy loop in the generated source."""
    outputs = {n.id for n in plan.graph.outputs if n is not None}
    concats = [n for n in plan.graph.nodes if n.op == "concatenate" and n.id not in outputs]
    assert len(concats) >= at_least
    for n in concats:
        assert n.id in plan.memory.in_place, f"%{n.id} was materialized"
        assert plan.memory.storage[n.id] == "view" and n.id not in plan.memory.slots
    source = plan._program.source
    for n in concats:  # its comment says so, and no loop writes it
        lines = [t for t in source.splitlines() if f"# %{n.id} = concatenate" in t]
        assert lines and all("read in place" in t for t in lines), lines
        assert f"b{n.id}[" not in source
    return source


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("ndim", sorted(ROLLS))
def test_jacobian_of_rolls(ndim, dtype):
    shape, rolls = ROLLS[ndim]
    x = rand(shape, -1.0, 1.0, seed=ndim, dtype=dtype)
    res = ha.jacobian(rolled, x)
    np.testing.assert_allclose(res.value, rolled(x), rtol=1e-5 if dtype == np.float32 else 1e-14)
    ref = ha.jacobian(rolled, x.astype(np.float64), backend="numpy").jacobian
    if dtype == np.float64:
        np.testing.assert_allclose(res.jacobian, ref, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(res.jacobian, jacobian_fd(rolled, x), rtol=1e-7, atol=1e-7)
    else:
        assert res.jacobian.dtype == np.float32
        np.testing.assert_allclose(res.jacobian, ref, rtol=2e-5, atol=2e-5)
    source = _assert_read_in_place(_plan(rolled, x), at_least=2 * len(rolls) - 2)
    assert "for _sl, _sh, _s0" in source  # the innermost axis cut where a roll wraps
    assert_no_alloc(ha.jacobian, rolled, x, out=res, n=20)


def periodic(x):
    """Ghost cells by concatenation (not np.roll), then a 3-point stencil on them."""
    p = np.concatenate([x[-1:], x, x[:1]], axis=0)
    return np.sin(p[2:] - 2 * p[1:-1] + p[:-2]) * x


def test_concatenated_slices_of_one_array():
    x = rand((9, 3), seed=4)
    res = ha.jacobian(periodic, x)
    np.testing.assert_allclose(res.value, periodic(x), rtol=1e-14)
    np.testing.assert_allclose(res.jacobian, jacobian_fd(periodic, x), rtol=1e-7, atol=1e-7)
    plan = _plan(periodic, x)
    _assert_read_in_place(plan, at_least=2)  # the value's and the tangents'
    # and the slices of it are never made either: read through the same map
    cut = [n for n in plan.graph.nodes if n.op == "getitem" and n.args[0].op == "concatenate"]
    assert cut and all(n.id in plan.memory.in_place for n in cut)


def broadcast(x, b):
    """Rolled operands broadcast against the loop: fewer axes, size-1 axes."""
    return np.roll(x, 2, -1) * b + np.roll(x[:1], -1, 1) * x - \
        np.exp(np.roll(x[:, :1], 1, 0)) + np.roll(x[:, 1:], -3, 1)[:, :1]


def test_broadcast_rolls():
    x, b = rand((4, 5), seed=5), rand((3, 1, 5), seed=6)
    res = ha.jacobian(broadcast, x, b)
    np.testing.assert_allclose(res.value, broadcast(x, b), rtol=1e-14)
    np.testing.assert_allclose(res.jacobian, jacobian_fd(lambda v: broadcast(v, b), x),
                               rtol=1e-7, atol=1e-7)
    _assert_read_in_place(_plan(broadcast, x), at_least=4)
    assert_no_alloc(ha.jacobian, broadcast, x, b, out=res, n=20)


def energy(x, A):
    """Rolls read by a region with no fused reduction (its value feeds a matmul):
    read in place by the forward region, its backward (vjp) and the adjoint's
    accumulation."""
    y = np.tanh(np.roll(x, 1, 0) * x + np.roll(x, -2, 1)) * np.roll(x, 3, 1)
    return np.sum((y @ A) ** 2)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gradient_through_rolls(dtype):
    x, A = rand((5, 6), seed=7, dtype=dtype), rand((6, 3), seed=8, dtype=dtype)
    if dtype == np.float64:
        assert_grad(energy, (x, A))
    plan = ha.compile(energy, x, A)
    res = ha.GradientResult(x)
    plan.gradient(x, A, out=res)
    ref = ha.gradient(energy, x.astype(np.float64), A.astype(np.float64), backend="numpy")
    tol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=tol, atol=tol * np.abs(
        ref.gradient).max())
    assert sum(1 for n in plan.graph.nodes if n.id in plan.memory.in_place and
               n.op == "concatenate") >= 3
    assert_no_alloc(plan.gradient, x, A, out=res, n=20)


def test_parallel_loops_with_cut_axes(monkeypatch):
    # prange loops: the cut innermost axis inside the prange (2-D), or the
    # prange inside the loop over the cuts (1-D)
    from hybridad.backends.numba import threshold

    monkeypatch.setattr(threshold, "PARALLEL_MIN", 16)

    def f(x, w):
        y = np.roll(x, 1, -1) * np.roll(x, -1, 0) + np.roll(x, 2)
        return np.sum(np.tanh(y @ w) ** 2) + np.sum((np.roll(x[0], -5) * x[1]) @ w)

    x, w = rand((6, 40), seed=9), rand((40, 2), seed=10)
    plan = ha.compile(f, x, w, parallel=True)
    source = plan._program.source
    assert "in prange(_sl, _sh)" in source  # 1-D: the prange inside the loop over the cuts
    # 2-D: inside the prange (after the vector-width mark, where the cost table asks for it)
    assert re.search(r"in prange\(\d+\):\n(?: +_simd_wide\(\)\n)? +for _sl, _sh", source)
    res = ha.GradientResult(x)
    plan.gradient(x, w, out=res)
    ref = ha.gradient(f, x, w, backend="numpy")
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-12, atol=1e-12)


def test_what_stays_a_copy():
    # a roll read by a fused reduction, one that is a result, a pad with constants
    # and a concatenation of two arrays keep their buffer (and stay right)
    def f(x):
        return np.sum(np.roll(x, 1) * x) * np.concatenate([x, 2 * x])[3:-3] + \
            np.pad(x, 1)[2:] * np.concatenate([x[::-1], x])[:x.size]

    def g(x):
        return np.roll(x, 2)

    x = rand((6,), seed=11)
    res = ha.jacobian(f, x)
    np.testing.assert_allclose(res.value, f(x), rtol=1e-14)
    np.testing.assert_allclose(res.jacobian, jacobian_fd(f, x), rtol=1e-7, atol=1e-7)
    plan = _plan(f, x)
    kept = [n for n in plan.graph.nodes if n.op == "concatenate" and n.phase == "forward"
            and n.id not in plan.memory.in_place]
    assert len(kept) >= 3
    res = ha.jacobian(g, x)
    np.testing.assert_array_equal(res.value, np.roll(x, 2))
    np.testing.assert_array_equal(res.jacobian, np.roll(np.eye(6), 2, axis=0))


def test_brusselator_sparse_jacobian_reads_its_laplacian_in_place():
    from hybridad.bench.sparse_workloads import brusselator, make_brusselator_jacobian

    n = 8
    y = rand((2 * n * n,), 0.5, 3.5, seed=12)
    res = ha.SparseJacobianResult(brusselator, y, n)
    ha.jacobian(brusselator, y, n, out=res)
    ref = make_brusselator_jacobian(n)(y, n)
    assert abs(res.jacobian - ref).max() <= 1e-13 * abs(ref).max()
    plan = res._bound.plan
    # 4 rolls of u and of v, in the value and in the tangents; the result's
    # concatenation stays (it is the output)
    _assert_read_in_place(plan, at_least=16)
    assert_no_alloc(ha.jacobian, brusselator, y, n, out=res, n=20)


def membrane(h0, k):
    """A 2-D explicit scheme with np.roll neighbours, in a Python loop (rolled)."""
    h, v = h0.copy(), np.zeros_like(h0)
    for _ in range(30):
        lap = np.roll(h, 1, 0) + np.roll(h, -1, 0) + np.roll(h, 1, 1) + np.roll(h, -1, 1) - 4 * h
        v = v + 0.05 * (k * lap - 0.1 * v - 0.01 * h ** 3)
        h = h + 0.05 * v
    return np.mean(h ** 2) + np.mean(v ** 2)


def test_a_rolled_loops_reverse_reads_its_rolls_cotangents_in_place():
    """The reverse body of a loop (a functional pass) sums the two halves of
    each roll's cotangent as one concatenation -- read in place by the loop
    that sums them -- where each half was a scatter (zeros, then a write)."""
    from hybridad.backends.loops import lower_body

    h0 = rand((12, 12), seed=5)
    k = np.array(0.7)
    plan = ha.compile(membrane, h0, k, argnums=(0, 1))
    reverse = [n for n in plan.graph.nodes if n.op == "loop" and n.attrs["reverse"]]
    assert reverse
    ops = [m.op for n in reverse for m in lower_body(n.attrs["body"].graph, "numba").nodes]
    assert "scatter" not in ops and ops.count("concatenate") >= 4
    res = plan.gradient(h0, k)
    assert_grad(membrane, (h0, k), argnums=(0, 1))
    plain = ha.compile(membrane, h0, k, argnums=(0, 1), backend="numpy").gradient(h0, k)
    for a, b in zip(res.gradient, plain.gradient, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
    assert_no_alloc(plan.gradient, h0, k, out=plan.new_result())
