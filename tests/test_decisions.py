"""Python decisions on traced values, by guarded specialization
(hybridad.core.decisions): code as people ship it -- the benchmark
collection's ``if`` on values, builtin ``max``, ``float()``/``int()``,
pairwise loops with a branch, scikit-learn's Huber loss with its mask --
traces unchanged; each gradient is the branch's, checked against finite
differences (and autograd's where it is installed); a call that decides
otherwise runs another specialization, never the old branch."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import hybridad as ha
import hybridad.scipy as hs
from hybridad.errors import RetraceWarning
from hybridad.core.decisions import MAX_SPECIALIZATIONS
from hybridad.testing import count_allocations, numerical_gradient

BACKENDS = ("numpy", "numba")


def _check(f, x, backend, plan=None):
    """The plan's (or ha.gradient's) value and gradient at x against f and
    central differences."""
    res = plan.gradient(x) if plan is not None else ha.gradient(f, x, backend=backend)
    want = f(x.copy())
    assert float(res.value) == pytest.approx(float(want), rel=1e-12, abs=1e-14)
    np.testing.assert_allclose(res.gradient, numerical_gradient(f, x), rtol=1e-6, atol=1e-7)
    return res


# -- the collection's functions, as their authors wrote them ------------------------------

def near_point(x, zj=0.3, j=0):  # `if abs(x[j] - zj) < 0.05:`
    if abs(x[j] - zj) < 0.05:
        return np.sum(x ** 2)
    return np.sum(np.sin(x)) + x[j] ** 3


def threshold_loop(x, eye=0.5):  # `for val in x: if abs(val) >= eye`
    total = 0.0
    for val in x:
        if abs(val) >= eye:
            total = total + val ** 2
        else:
            total = total + np.cos(val)
    return total


def lennard_jones(x):  # `if ed > 0.0:` inside a pairwise loop
    pts = x.reshape(-1, 2)
    e = 0.0
    for i in range(len(pts)):
        for j in range(i + 1, len(pts)):
            d = pts[i] - pts[j]
            ed = np.sum(d * d)
            if ed > 0.0:
                e = e + 1.0 / ed ** 6 - 2.0 / ed ** 3
    return e


def builtin_max(x):  # builtin max(a, b) of traced scalars and max(abs(x)) over an array
    return max(x[0], x[1]) ** 2 + max(abs(x)) + min(x[2], 0.25) * x[3]


def conversions(x):  # float(x[0] >= 0), int(x[0]), x.item()
    return float(x[0] >= 0) * np.sum(x ** 2) + int(x[1] * 3) * x[2] + (x[3] > 1).item() + \
        np.sum(np.tanh(x))


def early_return(x):  # `if abs(sum(x)) < 3e-16: return 0.0`
    if abs(sum(x)) < 3e-16:
        return 0.0
    return np.sum(x ** 2) / sum(x)


HUBER_X = np.linspace(-2, 2, 40).reshape(20, 2)
HUBER_Y = HUBER_X @ np.array([1.0, -2.0]) + np.sin(np.arange(20.0)) * 2.0


def huber(w, X=HUBER_X, y=HUBER_Y, epsilon=1.35, alpha=1e-4):
    """scikit-learn's _huber_loss_and_gradient's loss, as written there
    (unweighted): continuous in w, with a kink where a residual becomes an
    outlier."""
    sigma, coef = w[-1], w[:-1]
    linear_loss = y - X @ coef
    abs_linear_loss = np.abs(linear_loss)
    outliers_mask = abs_linear_loss > epsilon * sigma
    outliers = abs_linear_loss[outliers_mask]
    num_outliers = np.count_nonzero(outliers_mask)
    outlier_loss = 2.0 * epsilon * np.sum(outliers) - sigma * num_outliers * epsilon ** 2
    non_outliers = linear_loss[~outliers_mask]
    squared_loss = np.dot(non_outliers.T, non_outliers) / sigma
    return X.shape[0] * sigma + squared_loss + outlier_loss + alpha * np.dot(coef, coef)


CASES = {
    "near_point": (near_point, [np.array([0.31, 1.0, 2.0]), np.array([0.9, 1.0, 2.0])]),
    "threshold_loop": (threshold_loop, [np.array([0.1, -0.7, 0.9, 0.2]),
                                        np.array([0.8, 0.1, -0.1, 0.6])]),
    "lennard_jones": (lennard_jones, [np.array([0.0, 0.0, 1.1, 0.1, 0.3, 1.2]),
                                      np.array([0.0, 0.0, 1.0, 0.0, 0.0, 1.0])]),
    "builtin_max": (builtin_max, [np.array([0.5, -1.5, 0.1, 2.0]),
                                  np.array([-0.5, 1.5, 0.7, -3.0])]),
    "conversions": (conversions, [np.array([0.5, 0.2, 0.9, 1.3]),
                                  np.array([-0.5, 0.7, 0.9, 1.3])]),
    "early_return": (early_return, [np.array([0.5, 0.2, 0.9]), np.array([1.0, -2.0, 1.5])]),
    "huber": (huber, [np.array([0.5, -1.0, 1.0]), np.array([1.0, -2.0, 0.3])]),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CASES))
def test_decisions_trace_unchanged(name, backend):
    f, points = CASES[name]
    for x in points:  # ha.gradient: a plan per outcome, from its cache
        _check(f, x, backend)
    plan = ha.compile(f, points[0], backend=backend)
    # (huber's masked selections are lazy -- hybridad.frontend.numpy_selected --
    # summed and dotted: no decision, one graph for both points)
    assert ("decisions on values" in plan.explain()) == (name != "huber")
    for x in points + points[::-1]:  # one explicit plan, both outcomes, back and forth
        _check(f, x, backend, plan)
    if name not in ("early_return", "lennard_jones", "huber"):  # (their points decide alike)
        assert len(plan._specializations) >= 1


def test_coincident_points_skip_their_pair():
    """Two coincident points: the branch skips the pair (its value is finite, the
    other pairs' gradient only), as numpy and autograd compute it."""
    x = np.array([0.0, 0.0, 1.1, 0.1, 1.1, 0.1])
    plan = ha.compile(lennard_jones, np.array([0.0, 0.0, 1.1, 0.1, 0.3, 1.2]), backend="numpy")
    res = plan.gradient(x)
    assert float(res.value) == pytest.approx(lennard_jones(x), rel=1e-13)
    assert np.isfinite(res.gradient).all() and len(plan._specializations) == 1


def test_early_return_at_the_guard():
    x = np.array([1.0, -2.0, 1.0])  # sum == 0: the early branch
    plan = ha.compile(early_return, x, backend="numpy")
    assert plan.gradient(x).value == 0.0 and not plan.gradient(x).gradient.any()
    y = np.array([1.0, -2.0, 1.5])
    assert plan.gradient(y).value == pytest.approx(early_return(y))


def test_against_autograd():
    import autograd as ag  # (a test dependency: pyproject's test extra)
    import autograd.numpy as anp

    def f(x, np=np):
        e = 0.0
        for v in x:
            if v > 0.2:
                e = e + np.exp(-v) * v
            else:
                e = e + v ** 3
        return e + max(x[0], x[1]) ** 2

    for x in (np.array([0.5, -0.3, 0.9]), np.array([-0.5, 0.3, 0.1])):
        mine = ha.gradient(f, x).gradient
        theirs = ag.grad(lambda x: f(x, np=anp))(x)
        np.testing.assert_allclose(mine, theirs, rtol=1e-14)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_call_never_runs_the_wrong_branch(backend):
    """Alternating outcomes, many calls: every result is its own branch's."""
    plan = ha.compile(near_point, np.array([0.3, 1.0, 2.0]), backend=backend)
    rng = np.random.default_rng(3)
    for _ in range(40):
        x = np.array([0.3 + rng.choice([-0.2, 0.01, 0.2]), rng.normal(), rng.normal()])
        res = plan.gradient(x)
        assert float(res.value) == pytest.approx(near_point(x), rel=1e-13)
    assert len(plan._specializations) <= 2  # (three points, two outcomes)


def test_the_fast_path_checks_the_decisions_before_it_writes():
    """A numba plan that decided on values keeps its generated fast path: the
    decisions are evaluated on the call's arrays first, and a call that decides
    otherwise runs the specialization whose decisions hold (its own fast path),
    or the general path, which makes one -- with ``out=``, alternating
    outcomes, every result its own branch's."""
    x0 = np.array([0.3, 1.0, 2.0])
    plan = ha.compile(near_point, x0)
    assert "_route(" in plan.gradient.source
    res = ha.GradientResult(x0)
    rng = np.random.default_rng(4)
    general = []
    for k in range(60):
        if k == 30:  # both outcomes have their plans by now: no general path after
            plan._specialized = lambda *a, **kw: general.append(1)
        x = np.array([0.3 + rng.choice([-0.2, 0.01, 0.2]), rng.normal(), rng.normal()])
        res.gradient[:] = np.nan
        assert plan.gradient(x, out=res) is res
        assert float(res.value) == pytest.approx(near_point(x), rel=1e-13)
        ref = ha.gradient(near_point, x, backend="numpy").gradient
        np.testing.assert_allclose(res.gradient, ref, rtol=1e-13, atol=1e-15)
    assert general == [] and len(plan._specializations) == 1


def test_specializations_are_bounded_and_the_warning_names_the_decision():
    def f(x):
        k = int(np.floor(x[0]))  # a new outcome for every integer part
        return k * np.sum(x ** 2)

    plan = ha.compile(f, np.array([0.5, 1.0]), backend="numpy")
    with pytest.warns(RetraceWarning, match=r"int\(%\d+\) == .* at test_decisions.py:\d+"):
        for k in range(2 * MAX_SPECIALIZATIONS):
            x = np.array([k + 0.5, 1.0])
            assert plan.gradient(x).value == pytest.approx(f(x))
    assert len(plan._specializations) < MAX_SPECIALIZATIONS
    x = np.array([3.5, 1.0])  # dropped long ago: traced again, still right
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RetraceWarning)
        np.testing.assert_allclose(plan.gradient(x).gradient, 2 * 3 * x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_guarded_calls_allocate_nothing(backend):
    for f, x in ((near_point, np.array([0.31, 1.0, 2.0])),
                 (huber, np.array([0.5, -1.0, 1.0])),
                 (builtin_max, np.array([0.5, -1.5, 0.1, 2.0]))):
        plan = ha.compile(f, x, backend=backend)
        res = ha.GradientResult(x)
        plan.gradient(x, out=res)
        with count_allocations() as counts:
            for _ in range(5):
                plan.gradient(x, out=res)
        assert counts.allocations == 0, (f.__name__, counts)


def test_value_hvp_and_scipy_minimize_follow_the_branch():
    x = np.array([0.5, -1.0, 1.0])
    plan = ha.compile(huber, x, backend="numpy")
    for w in (x, np.array([1.0, -2.0, 0.3])):
        assert plan.value(w) == pytest.approx(huber(w), rel=1e-13)
    h = ha.hvp(near_point, np.array([0.31, 1.0, 2.0]), np.ones(3))
    np.testing.assert_allclose(h.hvp, 2 * np.ones(3), rtol=1e-13)  # the x**2 branch
    h = ha.hvp(near_point, np.array([0.9, 1.0, 2.0]), np.ones(3))
    want = -np.sin(np.array([0.9, 1.0, 2.0])) + np.array([6 * 0.9, 0.0, 0.0])
    np.testing.assert_allclose(h.hvp, want, rtol=1e-12)
    # scikit-learn's own fit: L-BFGS-B with sigma bounded away from 0
    bounds = [(None, None), (None, None), (10 * np.finfo(float).eps, None)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RetraceWarning)
        res = hs.minimize(huber, x, method="L-BFGS-B", bounds=bounds)
    from scipy.optimize import minimize
    ref = minimize(huber, x, method="L-BFGS-B", bounds=bounds)
    assert res.success and ref.success, (res.message, ref.message)
    assert res.fun == pytest.approx(huber(res.x), rel=1e-13)  # the branch of res.x
    assert res.fun == pytest.approx(ref.fun, rel=1e-9)
    np.testing.assert_allclose(res.x, ref.x, rtol=1e-4)


def test_a_python_float_of_a_traced_float_is_refused():
    """It would carry the value and drop the derivative: math.exp(x[0]) would
    differentiate to 0.  A comparison on it, or int() of it, is traced."""
    import math

    for f in (lambda x: math.exp(x[0]) + np.sum(x), lambda x: float(np.sum(x)) * x[0],
              lambda x: x[0].item() * x[1]):
        with pytest.raises(ha.TracingError, match=r"float\(\)|\.item\(\)"):
            ha.gradient(f, np.array([0.5, 1.0]))


def test_a_trace_without_values_still_refuses():
    """An optimizer step's plan (``update=``) traces from shapes alone: a
    decision on a value is refused there, with the way out.  (Hessian and
    Jacobian plans decide as gradient plans do: test_decisions_second_order.)"""
    with pytest.raises(ha.TracingError, match="np.where"):
        ha.compile(near_point, np.array([0.31, 1.0, 2.0]), update=ha.optim.SGD(lr=0.1))


def test_a_decision_on_a_constant_is_no_guard():
    """A value no argument reaches is the same on every call: it decides with
    no guard (a float() of it too: it has no derivative to drop)."""
    W = np.array([[0.5, 0.1], [0.2, 0.3]])

    def f(x):
        c = np.zeros_like(x) + np.sum(W)  # traced, but constant
        scale = float(np.sum(c))           # a Python float of a constant
        if np.max(c) > 1.0:
            return scale * np.sum(x ** 2)
        return np.sum(x)

    x = np.array([0.3, -0.7])
    plan = ha.compile(f, x, backend="numpy")
    assert plan._decision_check is None
    _check(f, x, "numpy", plan)


def test_decisions_along_a_long_loop():
    """A decision at every step of a time-stepping loop: each evaluates only
    the steps new since the last (the walk stops at values already known),
    and the plan checks every one."""
    def f(x, steps=300):
        for _ in range(steps):
            if np.max(np.abs(x)) > 2.0:
                x = x * 0.5
            x = x + 0.01 * np.tanh(x)
        return np.sum(x ** 2)

    x = np.array([0.5, -1.9, 1.2])
    plan = ha.compile(f, x, backend="numpy")
    assert len(plan._decision_check.decisions) == 300
    _check(f, x, "numpy", plan)
    _check(f, np.array([0.1, 0.2, 0.3]), "numpy", plan)  # another outcome: traced again


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_recorded_loop_after_a_decision_rolls(backend):
    """Rows recorded by a loop (``out[k] = x``) are read from their writes
    and the loop rolls though ``f`` decided on values before it (a mask of an
    argument); a chain a decision reads stays as traced (its check recomputes
    it), and a call that decides otherwise gets its own specialization."""
    W = np.random.default_rng(4).standard_normal((6, 6)) / 3

    def f(x, c, steps=120):
        x = x.copy()
        x[c < 0] *= 2.0  # (the mask: a decision on c's values)
        out = np.zeros((steps, 6))
        for k in range(steps):
            x = x + 0.01 * np.tanh(W @ x + c)
            out[k] = x
        return np.sum(np.sin(x) * c) + np.sum(out[steps // 2]) + np.mean(out)

    def g(x, c, steps=16):  # a decision on a recorded row: that chain stays as traced
        # (unrolled, compiled twice: few steps)
        out = np.zeros((steps, 6))
        for k in range(steps):
            x = x + 0.01 * np.tanh(W @ x)
            out[k] = x
        return np.sum(out ** 2) if out[10, 0] > 0 else np.sum(out)

    x, c = np.linspace(-1.0, 1.0, 6), np.array([0.3, -0.2, 0.5, -0.7, 0.1, 0.4])
    plan = ha.compile(f, x, c, backend=backend)
    assert sum(n.op == "loop" for n in plan.graph.nodes) == 2
    for cc in (c, -c):  # (the other mask: another specialization)
        res = plan.gradient(x, cc)
        assert float(res.value) == pytest.approx(f(x, cc), rel=1e-12)
        np.testing.assert_allclose(res.gradient, numerical_gradient(lambda z: f(z, cc), x),
                                   rtol=1e-6, atol=1e-8)
    for xx in (x, -x):
        _check(lambda z: g(z, c), xx, backend)


def test_wrong_arguments_get_the_plan_s_own_error():
    """Arguments not of the plan's shapes and dtypes never reach the decision
    check: the plan says why, as a plan without decisions does."""
    plan = ha.compile(near_point, np.array([0.3, 1.0, 2.0]), backend="numpy")
    plain = ha.compile(lambda x: np.sum(x ** 2), np.array([0.3, 1.0, 2.0]), backend="numpy")
    for p in (plan, plain):
        with pytest.raises(ValueError, match=r"shape \(4,\).*compiled for shape \(3,\)"):
            p.gradient(np.ones(4))
        with pytest.raises(ValueError, match=r"dtype float32.*compiled for .*float64"):
            p.gradient(np.ones(3, np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_float32_decides_as_float64(backend):
    """float32 arguments decide on their own values (guards compare float32
    values) and give the float64 plan's gradient to float32 rounding."""
    for f, points in (CASES["near_point"], CASES["builtin_max"], CASES["huber"]):
        plan32 = ha.compile(f, points[0].astype(np.float32), backend=backend)
        for x in points:
            r32 = plan32.gradient(x.astype(np.float32))
            r64 = ha.gradient(f, x, backend=backend)
            assert r32.gradient.dtype == np.float32
            np.testing.assert_allclose(r32.gradient, r64.gradient, rtol=2e-5, atol=2e-5)


# -- decisions on what linear algebra computed ------------------------------------------

_M = np.array([[2.0, 0.3, 0.1], [0.2, 1.5, -0.4], [0.0, 0.3, 1.8]])
_LINALG = {  # a number from each routine's value (its check runs the routine too)
    "inv": lambda W: np.linalg.inv(W)[0, 0],
    "solve": lambda W: np.sum(np.linalg.solve(W, np.ones(3))),
    "det": np.linalg.det,
    "slogdet": lambda W: np.linalg.slogdet(W)[1],
    "eigh": lambda W: np.linalg.eigh(W + W.T)[0][0],
    "eigvalsh": lambda W: np.linalg.eigvalsh(W + W.T)[-1],
    "svd": lambda W: np.linalg.svd(W)[1][0],
    "svdvals": lambda W: np.linalg.svd(W, compute_uv=False)[-1],
    "qr": lambda W: np.abs(np.linalg.qr(W)[1][0, 0]),
    "pinv": lambda W: np.sum(np.linalg.pinv(W)),
    "lstsq": lambda W: np.sum(np.linalg.lstsq(W, np.ones(3), rcond=None)[0]),
    "norm2": lambda W: np.linalg.norm(W, 2),
    "cholesky": lambda W: np.linalg.cholesky(W @ W.T + np.eye(3))[1, 1],
    "matrix_power": lambda W: np.sum(np.linalg.matrix_power(W, 3)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(_LINALG))
def test_a_decision_on_what_linear_algebra_computed(name, backend):
    """The check of a decision runs the routine again (LAPACK's, with its
    working memory): on the differentiated matrix, and on a constant one."""
    value = _LINALG[name]

    def f(W):
        if value(W) > 0.2:
            return np.sum(np.linalg.inv(W) ** 2)
        return np.sum(W ** 3)

    def g(x, A):
        return np.sum(x ** 2) * (2.0 if value(A) > 0.2 else 1.0)

    _check(f, _M.copy(), backend)
    flipped = -_M if value(-_M) <= 0.2 else 0.1 * _M  # (the other branch, where it exists)
    _check(f, flipped, backend)
    x = np.linspace(0.5, 1.5, 3)
    res = ha.gradient(g, x, _M, backend=backend)
    np.testing.assert_allclose(res.gradient, 2 * x * (2.0 if value(_M) > 0.2 else 1.0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_decision_on_a_chain_a_lowering_pass_reads_through(backend):
    """``np.diff`` of a concatenation slices it, and the views pass reads one
    slice as the concatenation's operand it is: a region fused before (the
    numba plan fuses the forward graph first) then reads that operand, and
    the region evaluated inside its reader must read it too."""
    c = np.array([0.7, -1.2, 0.4, 0.2])

    def f(x, c):
        t = np.diff(np.concatenate([c[:1] * 0.0, np.cumsum(c)]))
        u = t * 2.0 if t[0] > t[1] else np.sin(t)
        return np.sum(u ** 2) + np.sum(x ** 2) + np.sum(x * t)

    x = np.array([0.1, -0.5, 0.3, 0.8])
    res = ha.gradient(f, x, c, backend=backend)
    np.testing.assert_allclose(res.gradient, 2 * x + c, rtol=1e-14)
    assert float(res.value) == pytest.approx(f(x, c), rel=1e-14)
