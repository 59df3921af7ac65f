"""Linear-algebra failures that ``f`` catches (hybridad.core.catching and the
``"raises"`` decisions of hybridad.core.decisions): a ``try`` around a
factorization or a solve takes its ``except`` branch where numpy's would, at
the trace and at every later call of the plan; without a ``try`` nothing is
evaluated and a failure propagates from the call, as numpy's does."""

import sys

import numpy as np
import pytest
import scipy.linalg

import hybridad as ha
from hybridad.core import catching
from hybridad.testing import count_allocations, numerical_gradient

RNG = np.random.default_rng(3)
Q = np.linalg.qr(RNG.standard_normal((5, 5)))[0]
GOOD = Q @ np.diag([1.0, 2.0, 3.0, 4.0, 5.0]) @ Q.T
BAD = Q @ np.diag([-0.05, 2.0, 3.0, 4.0, 5.0]) @ Q.T  # not positive definite
X = RNG.standard_normal(5)


def jitter_chol(A, x):
    """The Gaussian-process idiom: add jitter until the factorization succeeds."""
    jitter = 1e-3
    while True:
        try:
            L = np.linalg.cholesky(A + jitter * np.eye(len(x)))
            break
        except np.linalg.LinAlgError:
            jitter *= 10
    z = np.linalg.solve(L, x)
    return np.sum(z ** 2) + np.sum(np.log(np.abs(np.diag(L))))


def solve_or_lstsq(A, x):
    try:
        y = np.linalg.solve(A, x)
    except np.linalg.LinAlgError:
        y = np.linalg.pinv(A) @ x
    return np.sum(np.tanh(y)) + 0.1 * np.sum(A ** 2)


def _chol_helper(A):  # the try is in the caller of the function that fails
    return scipy.linalg.cholesky(A, lower=True)


def helper_in_try(A, x):
    try:
        L = _chol_helper(A)
    except scipy.linalg.LinAlgError:
        L = _chol_helper(A + 0.2 * np.eye(len(x)))
    return np.sum(scipy.linalg.solve_triangular(L, x, lower=True) ** 2)


def bare_except(A, x):
    try:
        L = np.linalg.cholesky(A)
    except:  # noqa: E722 - the bare form is caught too
        L = np.linalg.cholesky(A + 0.2 * np.eye(len(x)))
    return np.sum(np.linalg.solve(L, x) ** 2)


CASES = {"jitter_chol": (jitter_chol, (GOOD, BAD)),
         "solve_or_lstsq": (solve_or_lstsq, (GOOD, np.zeros((5, 5)) + np.eye(5)[0])),
         "helper_in_try": (helper_in_try, (GOOD, BAD)),
         "bare_except": (bare_except, (GOOD, BAD))}


def _pinv_branch(A, x):
    return np.sum(np.tanh(np.linalg.pinv(A) @ x)) + 0.1 * np.sum(A ** 2)


def _fd(f, A, x):
    """Finite differences of ``f`` at ``A``; at a singular ``A`` (where solve
    fails, a point of no neighbourhood) the gradient of the pinv branch."""
    if f is solve_or_lstsq and np.linalg.matrix_rank(A) < len(A):
        return ha.gradient(_pinv_branch, A, x, backend="numpy").gradient
    return numerical_gradient(lambda a: f(a, x), A)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_caught_failure_takes_numpy_s_branch_at_every_call(name, backend):
    """One plan, traced where the op succeeds, then called where it fails
    and back: each call's value is numpy's and its gradient the finite
    differences'; the failing branch is a second specialization."""
    f, (good, bad) = CASES[name]
    plan = ha.compile(f, good, X, backend=backend, tiered=False)
    assert "succeeds" in plan.explain()
    for A in (good, bad, good, 2.0 * good, bad):
        res = plan.gradient(A, X)
        assert float(res.value) == pytest.approx(f(A, X), rel=1e-12)
        np.testing.assert_allclose(res.gradient, _fd(f, A, X), rtol=2e-5, atol=1e-6)
    assert len(plan._specializations) == 1


@pytest.mark.parametrize("name", sorted(CASES))
def test_traced_first_where_it_fails(name):
    f, (good, bad) = CASES[name]
    for A in (bad, good, bad):
        res = ha.gradient(f, A, X)
        assert float(res.value) == pytest.approx(f(A, X), rel=1e-12)
        np.testing.assert_allclose(res.gradient, _fd(f, A, X), rtol=2e-5, atol=1e-6)


def test_second_order_through_a_caught_failure():
    for A in (GOOD, BAD, GOOD):
        H = ha.hessian(lambda x: jitter_chol(A, x), X).hessian
        L = np.linalg.cholesky(A + (1e-3 if A is GOOD else 1e-1) * np.eye(5))
        Li = np.linalg.inv(L)
        np.testing.assert_allclose(H, 2 * Li.T @ Li, rtol=1e-8, atol=1e-10)


def test_hvp_and_value_plans_follow_the_failure():
    """An ``hvp=True`` plan and ``value`` take the branch numpy takes (the
    derivatives with respect to ``x``: the Hessian is ``2 L^-T L^-1``)."""
    v = np.linspace(-1.0, 1.0, 5)
    plan = ha.compile(lambda x, A: jitter_chol(A, x), X, GOOD, hvp=True)
    res = ha.HvpResult(X)
    for A, jitter in ((GOOD, 1e-3), (BAD, 1e-1), (GOOD, 1e-3), (BAD, 1e-1)):
        Li = np.linalg.inv(np.linalg.cholesky(A + jitter * np.eye(5)))
        plan.hvp(X, A, v=v, out=res)
        np.testing.assert_allclose(res.hvp, 2 * Li.T @ (Li @ v), rtol=1e-10)
        np.testing.assert_allclose(res.gradient, 2 * Li.T @ (Li @ X), rtol=1e-10)
        assert float(res.value) == pytest.approx(jitter_chol(A, X), rel=1e-12)
    gplan = ha.compile(jitter_chol, GOOD, X)
    for A in (BAD, GOOD, BAD):
        assert gplan.value(A, X) == pytest.approx(jitter_chol(A, X), rel=1e-12)


def test_no_allocation_per_call_on_either_branch():
    plan = ha.compile(jitter_chol, GOOD, X)
    res = ha.GradientResult(GOOD)
    for A in (GOOD, BAD):
        plan.gradient(A, X, out=res)
        plan.gradient(A, X, out=res)
        with count_allocations() as counts:
            for _ in range(3):
                plan.gradient(A, X, out=res)
        assert counts.allocations == 0, (counts, plan.explain())


def uncaught(A, x):
    return np.sum(np.linalg.solve(np.linalg.cholesky(A), x) ** 2)


def in_finally(A, x):
    try:
        L = np.linalg.cholesky(A)
    finally:
        pass
    return np.sum(np.linalg.solve(L, x) ** 2)


def in_with(A, x):
    with np.errstate(divide="ignore"):
        L = np.linalg.cholesky(A)
    return np.sum(np.linalg.solve(L, x) ** 2)


@pytest.mark.parametrize("f", [uncaught, in_finally, in_with])
def test_an_uncaught_failure_propagates_and_costs_no_check(f):
    """Without an ``except`` around it (a ``finally`` or a ``with`` re-raises)
    nothing is evaluated while tracing (no decision: no check per call), and
    a call where the op fails raises numpy's LinAlgError."""
    plan = ha.compile(f, GOOD, X)
    assert plan._decision_check is None
    with pytest.raises(np.linalg.LinAlgError):
        plan.gradient(BAD, X)
    with pytest.raises(np.linalg.LinAlgError):
        ha.gradient(f, BAD, X)
    np.testing.assert_allclose(plan.gradient(GOOD, X).gradient, _fd(f, GOOD, X), rtol=2e-5)


def constant_failure(x):
    try:
        np.linalg.cholesky(-np.eye(3))  # fails at every call: no decision
        k = 1.0
    except np.linalg.LinAlgError:
        k = 2.0
    return k * np.sum(np.linalg.solve(GOOD[:3, :3], x) ** 2)


def test_a_failure_no_argument_reaches_is_taken_once():
    plan = ha.compile(constant_failure, X[:3])
    assert plan._decision_check is None
    assert float(plan.gradient(X[:3]).value) == pytest.approx(constant_failure(X[:3]))


_seen = {}


def _probe(tag):
    frame = sys._getframe(1)
    _seen[tag] = catching._caught(frame.f_code, frame.f_lasti)


def _shapes():
    _probe("plain")
    try:
        _probe("except")
    except ValueError:
        pass
    try:
        _probe("bare")
    except:  # noqa: E722
        pass
    try:
        _probe("finally")
    finally:
        pass
    with open(__file__):
        _probe("with")
    try:
        with open(__file__):
            _probe("with in try")
    except OSError:
        pass
    try:
        try:
            _probe("finally in try")
        finally:
            pass
    except Exception:  # noqa: BLE001
        pass
    try:
        raise KeyError
    except KeyError:
        _probe("in an except clause")
    [_probe("comprehension") for _ in range(1)]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception tables: Python 3.11+")
def test_which_statements_catch():
    _seen.clear()
    _shapes()
    assert _seen == {"plain": False, "except": True, "bare": True, "finally": False,
                     "with": False, "with in try": True, "finally in try": True,
                     "in an except clause": False, "comprehension": False}
