"""Python decisions on traced values in Hessian and Jacobian plans, as in
gradient plans (hybridad.core.decisions): the traced call's outcome is a
guard; a call that decides otherwise runs a specialization traced for its
outcome.  Every method of the plan -- ``hessian``, ``hvp`` with arguments and
at a linearized point, ``linearize``, ``gradient``, ``value``, ``jacobian``
-- gives the derivatives of the branch its arguments take, on both CPU
backends, against finite differences; the point of the last ``linearize``
is the one ``hvp(v=)`` differentiates at, whichever branch it took; calls
allocate nothing once both outcomes have plans."""

from __future__ import annotations

import numpy as np
import pytest

import hybridad as ha
from hybridad.testing import count_allocations, numerical_gradient

BACKENDS = ["numpy", "numba"]
POS = np.array([0.5, 1.0, 2.0, -0.3])
NEG = np.array([-0.5, 1.0, 2.0, 0.4])
V = np.array([1.0, -2.0, 0.5, 0.25])


def branchy(x):
    if x[0] > 0:  # a decision on a value: one specialization per outcome
        return np.sum(x ** 3) + x[1] * x[2]
    return np.sum(np.sin(x) * x[::-1])


def fd_hessian(f, x, eps=1e-5):
    g = lambda z: ha.gradient(f, z, backend="numpy").gradient  # noqa: E731
    return np.stack([(g(x + eps * e) - g(x - eps * e)) / (2 * eps) for e in np.eye(x.size)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_hessian_plan_methods_follow_the_branch_each_call_takes(backend):
    plan = ha.compile(branchy, POS, hessian=True, backend=backend)
    for x in (POS, NEG, POS + 0.1, NEG - 0.2):
        want = fd_hessian(branchy, x)
        res = plan.hessian(x)
        np.testing.assert_allclose(res.hessian, want, rtol=1e-6, atol=1e-7)
        assert float(res.value) == pytest.approx(branchy(x), rel=1e-14)
        np.testing.assert_allclose(plan.gradient(x).gradient,
                                   numerical_gradient(branchy, x), rtol=1e-7, atol=1e-9)
        assert plan.value(x) == pytest.approx(branchy(x), rel=1e-14)
        np.testing.assert_allclose(plan.hvp(x, v=V).hvp, want @ V, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(res.gradient, plan.gradient(x).gradient, rtol=1e-13)
    assert len(plan._specializations) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_hvp_at_the_point_of_the_last_linearize_whichever_branch(backend):
    plan = ha.compile(branchy, POS, hessian=True, backend=backend)
    out = ha.HvpResult(POS)
    for x in (POS, NEG, POS, NEG, NEG + 0.1, POS - 0.2):  # branches alternating and not
        plan.linearize(x)
        plan.hessian(NEG if x[0] > 0 else POS)  # (a call at the other branch between)
        plan.hvp(v=V, out=out)
        np.testing.assert_allclose(out.hvp, fd_hessian(branchy, x) @ V, rtol=1e-6, atol=1e-7)
        assert float(out.value) == pytest.approx(branchy(x), rel=1e-14)
    for x in (POS, NEG, POS, NEG):  # linearize after linearize, nothing between
        plan.linearize(x)
        plan.hvp(v=V, out=out)
        np.testing.assert_allclose(out.hvp, fd_hessian(branchy, x) @ V, rtol=1e-6, atol=1e-7)


def test_both_outcomes_allocate_nothing_once_made():
    plan = ha.compile(branchy, POS, hessian=True)
    res, hv = ha.HessianResult(POS), ha.HvpResult(POS)
    for x in (POS, NEG):  # (both specializations made and compiled)
        plan.hessian(x, out=res)
        plan.hvp(x, v=V, out=hv)
    with count_allocations() as counts:
        for x in (POS, NEG, POS):
            plan.hessian(x, out=res)
            plan.hvp(x, v=V, out=hv)
    assert counts.allocations == 0, counts


def branchy_field(x):
    if x[1] > 0:
        return np.tanh(x) * x[0]
    return x ** 2 - x[::-1]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_jacobian_plan_follows_the_branch(backend, mode):
    plan = ha.compile(branchy_field, POS, jacobian=True, mode=mode, backend=backend)
    eps = 1e-6
    other = POS * np.array([1.0, -1.0, 1.0, 1.0])  # x[1] < 0: the other branch
    for x in (POS, other, other + 0.1, POS):
        fd = np.stack([(branchy_field(x + eps * e) - branchy_field(x - eps * e)) / (2 * eps)
                       for e in np.eye(x.size)], axis=1)
        res = plan.jacobian(x)
        np.testing.assert_allclose(res.value, branchy_field(x), rtol=1e-14)
        np.testing.assert_allclose(res.jacobian, fd, rtol=1e-6, atol=1e-8)
    assert len(plan._specializations) == 1


def test_convenience_functions_trace_value_dependent_branches():
    np.testing.assert_allclose(ha.hessian(branchy, NEG).hessian, fd_hessian(branchy, NEG),
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ha.hvp(branchy, NEG, V).hvp, fd_hessian(branchy, NEG) @ V,
                               rtol=1e-6, atol=1e-7)
    x = POS * np.array([1.0, -1.0, 1.0, 1.0])
    fd = np.stack([(branchy_field(x + 1e-6 * e) - branchy_field(x - 1e-6 * e)) / 2e-6
                   for e in np.eye(x.size)], axis=1)
    np.testing.assert_allclose(ha.jacobian(branchy_field, x).jacobian, fd, rtol=1e-6, atol=1e-8)
