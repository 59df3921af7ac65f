"""A Hessian or Jacobian of one chunk runs the primal and the chunk program as
one compiled program (hybridad.plans.staged ``StagedPlan._run_whole``): one
program compiled and run where there were two, with the results of the two
(to rounding), the derivatives of finite differences, nothing allocated per
call, and the staged programs serving every other call (``gradient``,
``linearize`` + ``hvp``, Hessians of several chunks)."""

from __future__ import annotations

import numpy as np
import pytest

import hybridad as ha
from hybridad.plans.staged import WHOLE
from hybridad.testing import count_allocations

from test_views import rk4 as rk4_loop

RNG = np.random.default_rng(21)
W = RNG.standard_normal((6, 6)) / np.sqrt(6)
X = RNG.standard_normal(6)


def rk4(x, W):
    """An RK4 loop's (test_views') plus a term of x itself: a dense Hessian."""
    return rk4_loop(x, W, T=12) + np.sum(np.sin(x) * x[::-1])


def field(x, W):
    return np.tanh(W @ x) * np.exp(-0.5 * x) + x[::-1] ** 3


def _fd_hessian(x, eps=1e-6):
    g = lambda z: ha.gradient(rk4, z, W, backend="numpy").gradient  # noqa: E731
    return np.stack([(g(x + eps * e) - g(x - eps * e)) / (2 * eps) for e in np.eye(x.size)])


def test_one_chunk_hessian_runs_one_program_with_the_staged_results():
    plan = ha.compile(rk4, X, W, hessian=True)
    assert plan.chunk >= X.size
    res = plan.hessian(X, W)
    assert set(plan._programs) == {"chunk" + WHOLE}  # no primal program compiled
    staged = ha.compile(rk4, X, W, hessian=True)
    val, g = np.zeros(()), np.zeros(6)
    h = np.zeros((6, 6))
    staged._primal([X, W], val, g)
    staged._chunks([X, W], val, g, None, h)
    np.testing.assert_allclose(res.value, val, rtol=1e-14)
    np.testing.assert_allclose(res.gradient, g, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(res.hessian, h, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(res.hessian, _fd_hessian(X), rtol=1e-6, atol=1e-7)
    # the other calls run the staged programs, and agree
    grad = plan.gradient(X, W)
    np.testing.assert_allclose(grad.gradient, res.gradient, rtol=1e-13, atol=1e-15)
    v = RNG.standard_normal(6)
    plan.linearize(X, W)
    np.testing.assert_allclose(plan.hvp(v=v).hvp, res.hessian @ v, rtol=1e-12, atol=1e-14)
    # repeated: the same bits, nothing allocated
    again = ha.HessianResult(X)
    with count_allocations() as counts:
        plan.hessian(X, W, out=again)
    assert counts.allocations == 0, counts
    np.testing.assert_array_equal(again.hessian, res.hessian)
    assert float(again.value) == float(res.value)


def test_several_chunks_run_the_primal_once_and_the_chunk_program():
    plan = ha.compile(rk4, X, W, hessian=True, chunk=4)
    res = plan.hessian(X, W)
    assert "primal" in plan._programs and "chunk" + WHOLE not in plan._programs
    one = ha.hessian(rk4, X, W, backend="numpy")
    np.testing.assert_allclose(res.hessian, one.hessian, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_one_chunk_jacobian_runs_one_program(mode):
    plan = ha.compile(field, X, W, jacobian=True, mode=mode)
    res = plan.jacobian(X, W)
    assert set(plan._programs) == {"chunk" + WHOLE}
    ref = ha.jacobian(field, X, W, backend="numpy", mode=mode)
    np.testing.assert_allclose(res.value, ref.value, rtol=1e-14)
    np.testing.assert_allclose(res.jacobian, ref.jacobian, rtol=1e-12, atol=1e-14)
    eps = 1e-6
    fd = np.stack([(field(X + eps * e, W) - field(X - eps * e, W)) / (2 * eps)
                   for e in np.eye(6)], axis=1)
    np.testing.assert_allclose(res.jacobian, fd, rtol=1e-6, atol=1e-7)
    again = ha.JacobianResult(res.value, X)
    with count_allocations() as counts:
        plan.jacobian(X, W, out=again)
    assert counts.allocations == 0, counts
    np.testing.assert_array_equal(again.jacobian, res.jacobian)


FAST_CASES = {  # the plan, its method, its result, its derivatives' names, a result over x
    "hessian": (lambda: ha.compile(rk4, X, W, hessian=True), "hessian",
                lambda: ha.HessianResult(X), ("gradient", "hessian"),
                lambda x: ha.DiffResult(np.zeros(()), x, np.zeros((6, 6)))),
    "reverse jacobian": (lambda: ha.compile(field, X, W, jacobian=True, mode="reverse"),
                         "jacobian", lambda: ha.JacobianResult(field(X, W), X), ("jacobian",),
                         lambda x: ha.DiffResult(x, np.zeros((6, 6)))),
}


@pytest.mark.parametrize("case", FAST_CASES)
def test_one_chunk_fast_path_matches_the_general_path_and_refuses_what_it_cannot_take(
        case, monkeypatch):
    """A dense Hessian or a reverse Jacobian of one chunk on plain arrays goes
    straight to the whole program (``StagedPlan._one_chunk_fast``): the general
    path's bits, nothing allocated; a buffer the program cannot take
    (read-only, another dtype, overlapping the argument) goes to the general
    path, which names it and writes nothing."""
    make, method, result, names, over_x = FAST_CASES[case]
    plan = make()
    call = getattr(plan, method)
    general = call(X, W)  # (out=None: the general path; compiles)
    res = result()
    with monkeypatch.context() as m:
        def refused(*a, **k):
            raise AssertionError("the general path ran")
        m.setattr(plan, "_check", refused)
        call(X, W, out=res)
    for name in ("value", *names):
        np.testing.assert_array_equal(getattr(res, name), getattr(general, name))
    with count_allocations() as counts:
        call(X, W, out=res)
    assert counts.allocations == 0, counts
    bad = result()
    getattr(bad, names[-1]).flags.writeable = False
    before = bad.value.copy()
    with pytest.raises(ValueError, match=names[-1]):
        call(X, W, out=bad)
    np.testing.assert_array_equal(bad.value, before)
    odd = result()
    odd = ha.DiffResult(odd.value, *[getattr(odd, n).astype(np.float32) for n in names])
    with pytest.raises((TypeError, ValueError), match="|".join(names)):
        call(X, W, out=odd)
    x = X.copy()  # a result over the argument itself: refused, nothing written
    with pytest.raises(ValueError):
        call(x, W, out=over_x(x))
    np.testing.assert_array_equal(x, X)


@pytest.mark.parametrize("kind", ["hessian", "reverse jacobian"])
def test_one_chunk_fast_path_in_float32(kind):
    """The fast path's unit seeds take the plan's dtype: float32 plans give
    the numpy reference's derivatives to float32 rounding, allocating nothing."""
    x, w = X.astype(np.float32), W.astype(np.float32)
    if kind == "hessian":
        plan, ref = (ha.compile(rk4, x, w, hessian=True, backend=b) for b in ("numba", "numpy"))
        res, want = ha.HessianResult(x), ref.hessian(x, w)
        call, name = plan.hessian, "hessian"
    else:
        plan, ref = (ha.compile(field, x, w, jacobian=True, mode="reverse", backend=b)
                     for b in ("numba", "numpy"))
        res, want = ha.JacobianResult(field(x, w), x), ref.jacobian(x, w)
        call, name = plan.jacobian, "jacobian"
    call(x, w, out=res)  # (the general path: compiles)
    with count_allocations() as counts:
        call(x, w, out=res)  # the fast path
    assert counts.allocations == 0, counts
    assert getattr(res, name).dtype == np.float32
    np.testing.assert_allclose(getattr(res, name), getattr(want, name), rtol=2e-4, atol=2e-5)
