"""A Hessian plan's ``hvp`` on its plain path (hybridad.plans.hessian
``_fast_hvp``): plain arrays and an HvpResult of exact arrays go straight to
the compiled programs -- after ``linearize``, the tangent program alone --
with the results of the general path, no allocation, and anything else
(read-only or overlapping buffers, other dtypes) on the general path, which
checks before it writes."""

from __future__ import annotations

import numpy as np
import pytest

import hybridad as ha
from hybridad.testing import count_allocations

RNG = np.random.default_rng(8)
N = 60
X = RNG.uniform(-1.0, 1.0, N)
Y = RNG.uniform(-1.0, 1.0, N)
V = RNG.standard_normal(N)


def rosen(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def _fd_hvp(x, v, eps=1e-6):
    g = lambda z: ha.gradient(rosen, z, backend="numpy").gradient  # noqa: E731
    return (g(x + eps * v) - g(x - eps * v)) / (2 * eps)


@pytest.fixture
def plan():
    p = ha.compile(rosen, X, hessian=True)
    p.hvp(X, v=V)  # (compiles the primal and tangent programs)
    return p


def _no_general_path(plan, monkeypatch):
    def general(*a, **k):
        raise AssertionError("the general path ran")
    monkeypatch.setattr(plan, "_check", general)


def test_plain_calls_take_the_plain_path_with_the_general_paths_results(plan, monkeypatch):
    general = plan.hvp(X, v=V)  # out=None: the general path
    ref = ha.hvp(rosen, X, V, backend="numpy")
    res = ha.HvpResult(X)
    with monkeypatch.context() as m:
        _no_general_path(plan, m)
        plan.hvp(X, v=V, out=res)
    assert float(res.value) == float(general.value)
    np.testing.assert_array_equal(res.gradient, general.gradient)
    np.testing.assert_array_equal(res.hvp, general.hvp)
    np.testing.assert_allclose(res.hvp, ref.hvp, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res.hvp, _fd_hvp(X, V), rtol=1e-6, atol=1e-6)
    # at a linearized point: the tangent program only, after calls elsewhere
    plan.linearize(Y)
    at_y = ha.HvpResult(X)
    plan.gradient(X)  # (the arena no longer holds Y's values: the general path)
    plan.hvp(v=V, out=at_y)
    with monkeypatch.context() as m:
        _no_general_path(plan, m)
        again = ha.HvpResult(X)
        plan.hvp(v=V, out=again)
    np.testing.assert_array_equal(again.hvp, at_y.hvp)
    np.testing.assert_allclose(again.hvp, _fd_hvp(Y, V), rtol=1e-6, atol=1e-6)
    assert float(again.value) == pytest.approx(rosen(Y), rel=1e-13)


def test_no_allocation_per_call(plan):
    res = ha.HvpResult(X)
    plan.linearize(X)
    plan.hvp(v=V, out=res)
    plan.hvp(X, v=V, out=res)
    with count_allocations() as counts:
        for _ in range(5):
            plan.hvp(v=V, out=res)
            plan.hvp(X, v=V, out=res)
    assert counts.allocations == 0, counts


@pytest.mark.parametrize("bad, at", [
    (bad, at) for bad in ("read-only hvp", "hvp is the gradient", "hvp is v",
                          "gradient is x", "v of another shape")
    for at in ("x", "the linearized point") if bad != "gradient is x" or at == "x"])
def test_bad_buffers_are_refused_before_anything_is_written(plan, bad, at):
    # at the linearized point (plan.hvp(v=, out=)) the compiled tangent
    # program's own checks turn the call down, and the general path says why
    plan.linearize(X)
    res = ha.HvpResult(X)
    res.value[()] = -7.0
    res.gradient[:] = -7.0
    v, x = V.copy(), X.copy()
    if bad == "read-only hvp":
        res.hvp.flags.writeable = False
    elif bad == "hvp is the gradient":
        res = ha.DiffResult(res.value, res.gradient, res.gradient)
    elif bad == "hvp is v":
        res = ha.DiffResult(res.value, res.gradient, v)
    elif bad == "gradient is x":
        res = ha.DiffResult(res.value, x, res.hvp)
    else:
        v = np.ones(N + 1)
    before = [np.array(b, copy=True) for b in (res.value, *res.derivs)]
    with pytest.raises(ValueError, match="out|v must have shape"):
        if at == "x":
            plan.hvp(x, v=v, out=res)
        else:
            plan.hvp(v=v, out=res)
    for b, was in zip((res.value, *res.derivs), before, strict=True):
        np.testing.assert_array_equal(b, was)


def test_a_direction_of_another_dtype_at_the_linearized_point_is_converted(plan):
    plan.linearize(X)
    res = ha.HvpResult(X)
    plan.hvp(v=V.astype(np.float32), out=res)  # (as documented: the general path)
    np.testing.assert_allclose(res.hvp, plan.hvp(X, v=V.astype(np.float32)).hvp, rtol=1e-12)


def test_other_value_dtypes_go_the_general_way(plan):
    res = ha.DiffResult(np.zeros((), np.float32), np.zeros(N), np.zeros(N))
    plan.hvp(X, v=V, out=res)
    ref = plan.hvp(X, v=V)
    assert res.value.dtype == np.float32 and float(res.value) == pytest.approx(float(ref.value))
    np.testing.assert_array_equal(res.derivs[1], ref.hvp)


SCALE = 1.0


def scaled(x):
    return SCALE * rosen(x)


def test_ha_hvp_reuses_its_recent_plan_and_sees_a_changed_function():
    """``ha.hvp`` with ``out=`` takes the function's recent plan first (no
    allocation), and still rebuilds when what the function reads changed."""
    global SCALE
    res = ha.HvpResult(X)
    ha.hvp(scaled, X, V, out=res)
    with count_allocations() as counts:
        for _ in range(5):
            ha.hvp(scaled, X, V, out=res)
    assert counts.allocations == 0, counts
    first = res.hvp.copy()
    SCALE = 3.0
    try:
        ha.hvp(scaled, X, V, out=res)
    finally:
        SCALE = 1.0
    np.testing.assert_allclose(res.hvp, 3.0 * first, rtol=1e-13)
    complex_x = X + 0.5j
    got = ha.hvp(lambda z: np.sum(np.abs(z) ** 2), complex_x, V + 0j)
    np.testing.assert_allclose(got.hvp, 2 * (V + 0j), rtol=1e-13)


def test_overlapping_views_are_refused_before_anything_is_written(plan):
    # two view objects of one memory (neither owns it): the overlap checks run
    memory = np.zeros(2 * N)
    x = memory[:N]
    x[:] = X
    res = ha.DiffResult(np.full((), -7.0), np.full(N, -7.0), memory[N // 2:N // 2 + N])
    before = [np.array(b, copy=True) for b in (res.value, *res.derivs)]
    with pytest.raises(ValueError, match="out"):
        plan.hvp(x, v=V, out=res)
    for b, was in zip((res.value, *res.derivs), before, strict=True):
        np.testing.assert_array_equal(b, was)


def test_the_plain_paths_check_the_guards_first():
    """The compiled entries of the plain paths run after the guards: a global
    that changed the function refuses the call (as the general path does)
    with the caller's buffers untouched, on both plain paths; restored, the
    plain paths serve again."""
    global SCALE
    p = ha.compile(scaled, X, hessian=True)
    res, at = ha.HvpResult(X), ha.HvpResult(X)
    p.hvp(X, v=V, out=res)
    p.linearize(X)
    p.hvp(v=V, out=at)
    p.hvp(X, v=V, out=res)  # (the plain paths from here on)
    first = res.hvp.copy()
    np.testing.assert_array_equal(at.hvp, first)
    SCALE = 3.0
    try:
        for call in (lambda: p.hvp(X, v=V, out=res), lambda: p.hvp(v=V, out=at)):
            before = [np.array(b, copy=True) for b in (res.value, *res.derivs,
                                                       at.value, *at.derivs)]
            with pytest.raises(ha.StalePlanError, match="SCALE"):
                call()
            for b, was in zip((res.value, *res.derivs, at.value, *at.derivs), before,
                              strict=True):
                np.testing.assert_array_equal(b, was)
    finally:
        SCALE = 1.0
    p.hvp(X, v=V, out=res)
    np.testing.assert_array_equal(res.hvp, first)


def test_hvp_with_arguments_runs_the_fused_hvp_program(plan):
    """``plan.hvp(x, v=v)`` of one direction runs the fused program of an
    ``hvp=True`` plan built from this plan's trace (value, gradient and
    ``H v`` in one pass; its own arena): equal to the staged tangent program
    to rounding and to the ``hvp=True`` plan exactly, and a linearized point
    stays where it was."""
    plan.linearize(Y)
    at_y = plan.hvp(v=V)
    res = ha.HvpResult(X)
    plan.hvp(X, v=V, out=res)
    assert isinstance(plan._fused, ha.Plan) and plan._fused.order == 2
    own = ha.compile(rosen, X, hvp=True).hvp(X, v=V)
    assert float(res.value) == float(own.value)
    np.testing.assert_array_equal(res.gradient, own.gradient)
    np.testing.assert_array_equal(res.hvp, own.hvp)
    plan.linearize(X)
    np.testing.assert_allclose(plan.hvp(v=V).hvp, res.hvp, rtol=1e-13, atol=1e-12)
    plan.linearize(Y)
    plan.hvp(X, v=V, out=res)  # (not the linearized point's arena)
    np.testing.assert_array_equal(plan.hvp(v=V).hvp, at_y.hvp)


def test_a_stack_of_directions_with_arguments_after_the_fused_plan_is_made(plan):
    plan.hvp(X, v=V, out=ha.HvpResult(X))  # (the fused plan serves one direction)
    vs = np.stack([V, 2 * V, -V])
    got = plan.hvp(X, v=vs)
    one = plan.hvp(X, v=V).hvp
    np.testing.assert_allclose(got.derivs[1], np.stack([one, 2 * one, -one]), rtol=1e-12,
                               atol=1e-12)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_h_v_alone_into_an_array(backend, monkeypatch):
    """``plan.hvp(v=v, out=array)``: ``H v`` alone.  At the linearized point on
    numba the tangent program skips the copies of the value and gradient (its
    ``lean_parts``) -- the bits of the full call's ``H v``, with no allocation;
    with arguments, a stack of directions or on numpy, the general path
    through a result of the plan's own.  An array that does not fit is refused
    by name and left untouched."""
    p = ha.compile(rosen, X, hessian=True, backend=backend)
    full = p.hvp(X, v=V)
    hv = np.zeros(N)
    assert p.hvp(X, v=V, out=hv) is hv
    np.testing.assert_array_equal(hv, full.hvp)
    np.testing.assert_allclose(hv, _fd_hvp(X, V), rtol=1e-6, atol=1e-6)
    p.linearize(Y)
    at_y = p.hvp(v=V)
    hv2 = np.zeros(N)
    p.hvp(v=V, out=hv2)
    if backend == "numba":  # (the lean entry: the general path never runs)
        assert "if _wout != 0:" in p._programs["tangent"].source
        with monkeypatch.context() as m:
            m.setattr(type(p), "_hv_only", lambda *a: pytest.fail("general path"))
            p.hvp(v=V, out=hv2)
    np.testing.assert_array_equal(hv2, at_y.hvp)
    np.testing.assert_allclose(hv2, _fd_hvp(Y, V), rtol=1e-6, atol=1e-6)
    with count_allocations() as counts:
        for _ in range(3):
            p.hvp(v=V, out=hv2)
    assert counts.allocations == 0, counts
    stack = np.stack([V, 2 * V])
    many = np.zeros((2, N))
    p.hvp(v=stack, out=many)
    np.testing.assert_allclose(many, np.stack([at_y.hvp, 2 * at_y.hvp]), rtol=1e-12, atol=1e-9)
    for bad in (np.zeros(N + 1), np.zeros(N, np.float32), np.zeros(N)[::1].copy()):
        if bad.shape == (N,) and bad.dtype == np.float64:
            bad.flags.writeable = False
        before = bad.copy()
        with pytest.raises(ValueError, match="out"):
            p.hvp(v=V, out=bad)
        np.testing.assert_array_equal(bad, before)


def test_h_v_alone_from_a_parallel_tangent_program():
    """A tangent program large enough for the lock and threads: the lean call
    goes through its ``invoke_lean``."""
    x = RNG.uniform(-1.0, 1.0, 1 << 17)
    v = RNG.standard_normal(x.size)
    p = ha.compile(rosen, x, hessian=True)
    p.linearize(x)
    want = p.hvp(v=v).hvp
    assert p._programs["tangent"].heavy
    hv = np.zeros_like(x)
    p.hvp(v=v, out=hv)
    np.testing.assert_array_equal(hv, want)


def test_h_v_alone_in_float32():
    """float32: the lean tangent call's ``H v`` is the full call's, in float32,
    and a float64 array is refused by name (the plan's dtype is float32)."""
    x, v, y = X.astype(np.float32), V.astype(np.float32), Y.astype(np.float32)
    p = ha.compile(rosen, x, hessian=True)
    p.linearize(y)
    full = p.hvp(v=v)
    hv = np.zeros(N, np.float32)
    p.hvp(v=v, out=hv)
    p.hvp(v=v, out=hv)  # (the lean entry, made by the first call)
    assert hv.dtype == np.float32
    np.testing.assert_array_equal(hv, full.hvp)
    np.testing.assert_allclose(hv, _fd_hvp(Y, V), rtol=2e-3, atol=2e-2)
    with pytest.raises(ValueError, match="out"):
        p.hvp(v=v, out=np.zeros(N))


@pytest.mark.parametrize("bad", ["float32", "shape"])
def test_a_first_hvp_with_wrong_arguments_is_refused_and_harms_nothing(bad):
    """The numba Hessian plan builds its fused HVP plan at the first
    ``plan.hvp(x, v=v)`` with arguments, from those arguments: checked as the
    plan's first (a float32 ``x`` ran a plan built for it, wrong values, and
    every right call after was refused).  Refused by name; the next right
    call is right."""
    p = ha.compile(rosen, X, hessian=True)
    x = X.astype(np.float32) if bad == "float32" else np.ones(N + 1)
    with pytest.raises(ValueError, match="argument 'x' has shape"):
        p.hvp(x, v=V if bad == "float32" else np.ones(N + 1))
    got = p.hvp(X, v=V)
    want = ha.compile(rosen, X, hessian=True, backend="numpy").hvp(X, v=V)
    np.testing.assert_allclose(got.hvp, want.hvp, rtol=1e-12, atol=1e-12)
    assert float(got.value) == pytest.approx(float(want.value), rel=1e-14)


def flip(x):  # a Python decision on a value: a specialization per branch
    if x[0] > 0:
        return x[0] ** 3 * np.sum(x ** 2)
    return -x[0] * np.sum(np.sin(x)) + np.sum(x ** 4)


@pytest.mark.parametrize("out", ["array", "result"])
def test_hvp_at_a_point_that_another_specialization_holds(out):
    """``linearize`` at a point on the other branch: the specialization for
    it holds the point, and ``hvp(v=v)`` is its (the plain path, made by an
    earlier call with arguments, read this plan's point and failed)."""
    xa, xb = np.array([0.8, -0.3, 0.5, 1.1]), np.array([-0.6, 0.4, -0.2, 0.9])
    v = np.array([1.0, -2.0, 0.5, 0.3])
    plan = ha.compile(flip, xa, hessian=True)
    plan.hvp(xa, v=v)  # (the example's branch, with arguments)
    plan.linearize(xb)
    res = np.zeros(4) if out == "array" else ha.HvpResult(xa)
    plan.hvp(v=v, out=res)
    want = ha.hessian(flip, xb, backend="numpy").hessian @ v
    np.testing.assert_allclose(res if out == "array" else res.hvp, want, rtol=1e-12)
    fresh = ha.compile(flip, xa, hessian=True)
    fresh.hvp(xa, v=v)
    with pytest.raises(ValueError, match="needs a point"):
        fresh.hvp(v=v, out=np.zeros(4))
