"""hybridad.scipy: the adapter never lets scipy see a buffer it later
overwrites nor aliases scipy's x; its iterates follow the run with scipy's own
Rosenbrock derivatives (first 20 at n = 1000); every method converges at
n = 100 in about the same number of iterations; memoization; bad input."""

import numpy as np
import pytest
from scipy.optimize import minimize, rosen, rosen_der, rosen_hess, rosen_hess_prod

import hybridad as ha
import hybridad.scipy as hs
from hybridad.testing import count_allocations

METHODS = ["BFGS", "L-BFGS-B", "CG", "Newton-CG", "trust-ncg", "trust-krylov", "trust-exact",
           "trust-constr", "SLSQP"]


def rosen_np(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def start(n):
    return np.tile([-1.2, 1.0], n // 2)


_OBJECTIVES = {}


def objective(n):
    """One Objective per size for the module (plans compiled once)."""
    if n not in _OBJECTIVES:
        _OBJECTIVES[n] = hs.Objective(rosen_np, start(n))
    return _OBJECTIVES[n]


class Recorder:
    """Wraps an objective's callables; keeps every array they return, a copy
    of it, and whether it shared memory with the x scipy passed in."""

    def __init__(self, obj):
        self.obj, self.returned, self.aliased = obj, [], 0

    def _keep(self, out, x):
        arrays = [out] if isinstance(out, np.ndarray) else \
            [o for o in out if isinstance(o, np.ndarray)] if isinstance(out, tuple) else []
        for a in arrays:
            self.aliased += np.shares_memory(a, x)
            self.returned.append((a, a.copy()))
        return out

    def fun(self, x):
        return self._keep(self.obj.fun(x), x)

    def jac(self, x):
        return self._keep(self.obj.jac(x), x)

    def hessp(self, x, p):
        return self._keep(self.obj.hessp(x, p), x)

    def hess(self, x):
        return self._keep(self.obj.hess(x), x)

    def overwritten(self):
        return sum(not np.array_equal(a, kept) for a, kept in self.returned)


def _derivs(method, jac, hessp, hess):
    kw = {"jac": jac}
    if method in ("Newton-CG", "trust-ncg", "trust-krylov", "trust-constr"):
        kw["hessp"] = hessp
    if method == "trust-exact":
        kw["hess"] = hess
    return kw


def _run(method, fun, kw, x0, **options):
    iterates = []

    def callback(intermediate_result):
        iterates.append(np.array(intermediate_result.x, copy=True))

    res = minimize(fun, x0, method=method, callback=callback, options=options, **kw)
    return res, np.array(iterates)


@pytest.mark.parametrize("method", METHODS)
def test_first_20_iterates_match_scipys_own_derivatives_n1000(method):
    n = 1000
    x0 = start(n)
    _, ref = _run(method, rosen, _derivs(method, rosen_der, rosen_hess_prod, rosen_hess), x0,
                  maxiter=20)
    rec = Recorder(objective(n))
    _, mine = _run(method, rec.fun, _derivs(method, rec.jac, rec.hessp, rec.hess), x0,
                   maxiter=20)
    assert len(ref) >= 20 and len(mine) == len(ref)
    np.testing.assert_allclose(mine[:20], ref[:20], rtol=0, atol=1e-7)
    # (a) nothing handed to scipy was overwritten later or aliased its x
    assert rec.returned and rec.overwritten() == 0 and rec.aliased == 0


def test_recorder_catches_a_reused_buffer():
    # the checks above can fail: an adapter that hands out its own gradient
    # buffer is caught (and BFGS then stalls far from the minimum)
    obj = hs.Objective(rosen_np, start(100), backend="numpy")

    class Shared(Recorder):
        def jac(self, x):
            self.obj.fun(x)
            return self._keep(self.obj._res.gradient, x)

    rec = Shared(obj)
    res = minimize(rec.fun, start(100), jac=rec.jac, method="BFGS", options={"maxiter": 600})
    assert rec.overwritten() > 0
    assert res.fun > 1.0
    good = minimize(obj.fun, start(100), jac=obj.jac, method="BFGS", options={"maxiter": 600})
    assert good.fun < 1e-8


# options used alike for both runs: Newton-CG's default xtol stops at f ~ 1e-5,
# SLSQP's default 100 iterations are too few from this start
OPTIONS = {"Newton-CG": {"xtol": 1e-12}, "SLSQP": {"maxiter": 2000, "ftol": 1e-14}}


@pytest.mark.parametrize("method", METHODS)
def test_converges_like_the_hand_written_run_n100(method):
    n = 100
    x0 = start(n)
    options = OPTIONS.get(method, {})
    ref = minimize(rosen, x0, method=method, options=options,
                   **_derivs(method, rosen_der, rosen_hess_prod, rosen_hess))
    res = hs.minimize(rosen_np, x0, method=method, options=options)
    if ref.fun < 1e-8:
        assert res.fun < 1e-8
    else:
        # trust-exact and trust-constr stop at the local minimum near
        # (-1, 1, ..., 1) from this start, with scipy's own derivatives too
        assert res.fun == pytest.approx(ref.fun, rel=1e-8)
        np.testing.assert_allclose(res.x, ref.x, atol=1e-5)
    assert abs(res.nit - ref.nit) <= 0.2 * ref.nit
    assert res.n_evaluations <= res.nfev


def test_objectives_share_the_cached_plan():
    a, b = hs.Objective(rosen_np, start(10), backend="numpy"), \
        hs.Objective(rosen_np, start(10) + 1, backend="numpy")
    assert a._plan is b._plan


def test_memoization_shares_one_evaluation_and_sees_in_place_changes():
    obj = hs.Objective(rosen_np, start(10), backend="numpy")
    x = start(10) + 0.1
    f = obj.fun(x)
    g = obj.jac(x)
    fg = obj.value_and_grad(x)
    assert obj.n_evaluations == 1
    assert f == fg[0] == pytest.approx(rosen(x), rel=1e-14)
    np.testing.assert_allclose(g, rosen_der(x), rtol=1e-13)
    assert g is not fg[1] and not np.shares_memory(g, fg[1])
    x[3] += 0.5  # changed in place: the same object, new contents
    np.testing.assert_allclose(obj.jac(x), rosen_der(x), rtol=1e-13)
    assert obj.n_evaluations == 2
    # hessp linearizes at y (forward and backward pass: value and gradient come
    # with it; counted with the Hessian work): fun and jac after it are free
    y = x - 0.2
    hp = obj.hessp(y, np.ones(10))
    np.testing.assert_allclose(hp, rosen_hess_prod(y, np.ones(10)), rtol=1e-13)
    assert obj.fun(y) == pytest.approx(rosen(y), rel=1e-14)
    np.testing.assert_allclose(obj.jac(y), rosen_der(y), rtol=1e-13)
    assert obj.n_evaluations == 2 and obj.n_hvp_evaluations == 1
    hp2 = obj.hessp(y, np.arange(10.0))  # same point: the tangent pass only
    np.testing.assert_allclose(hp2, rosen_hess_prod(y, np.arange(10.0)), rtol=1e-13)
    assert obj.n_evaluations == 2 and obj.n_hvp_evaluations == 2
    h = obj.hess(y)
    np.testing.assert_allclose(h, rosen_hess(y), rtol=1e-13, atol=1e-12)
    assert np.array_equal(h, h.T)


def test_evaluation_allocates_only_the_arrays_handed_out():
    obj = objective(1000)
    x = start(1000) * 0.9
    obj.fun(x), obj.jac(x), obj.hessp(x, x)
    with count_allocations() as counts:
        for k in range(50):
            x[0] = 0.01 * k  # a new point each time
            obj.fun(x)  # evaluates: no numpy allocation
    assert counts.allocations == 0
    with count_allocations() as counts:
        for k in range(50):
            x[1] = 0.01 * k
            obj.jac(x)  # one new array each: scipy may keep it
            obj.hessp(x, x)
    assert counts.allocations == 100


def test_float32_and_shaped_x0():
    # float32 x0 is promoted (evaluated in float64) unless dtype=float32 is asked
    x0 = start(20).astype(np.float32)
    res = hs.minimize(rosen_np, x0, method="L-BFGS-B", backend="numpy")
    assert res.fun < 1e-8
    obj = hs.Objective(rosen_np, x0, dtype=np.float32, backend="numpy")
    g = obj.jac(start(20))
    assert g.dtype == np.float64
    np.testing.assert_allclose(g, rosen_der(start(20)), rtol=1e-5)
    # any shape: scipy sees it flat, f sees it shaped, x comes back shaped
    res = hs.minimize(lambda x, c: np.sum((x - c) ** 2 * np.arange(1.0, 7.0).reshape(2, 3)),
                      np.zeros((2, 3)), np.full((2, 3), 2.0), method="trust-krylov",
                      backend="numpy")
    assert res.x.shape == (2, 3)
    np.testing.assert_allclose(res.x, 2.0, atol=1e-8)


def test_argnums_args_bounds_and_constraints():
    def f(c, x):  # the variable second
        return np.sum((x - c) ** 2) + 0.1 * np.sum(x ** 4)

    c = np.array([1.0, -2.0, 0.5])
    res = hs.minimize(f, np.zeros(3), c, argnums=1, method="L-BFGS-B",
                      bounds=[(0, 0.8)] * 3, backend="numpy")
    assert np.all(res.x >= 0) and np.all(res.x <= 0.8 + 1e-12)
    assert res.x[1] == pytest.approx(0.0, abs=1e-8)
    cons = {"type": "eq", "fun": lambda x: np.sum(x) - 1.0}
    res = hs.minimize(f, np.zeros(3), c, argnums=1, method="SLSQP", constraints=cons,
                      backend="numpy")
    assert np.sum(res.x) == pytest.approx(1.0, abs=1e-8)
    # scipy's args= replaces the stored arguments
    obj = hs.Objective(lambda x, c: np.sum((x - c) ** 2), np.zeros(3), c, backend="numpy")
    r = minimize(obj.fun, obj.x0, args=(2 * c,), jac=obj.jac, method="BFGS")
    np.testing.assert_allclose(r.x, 2 * c, atol=1e-6)


def test_bad_input():
    with pytest.raises(ValueError, match="NaN or infinity"):
        hs.Objective(rosen_np, np.array([1.0, np.nan, 0.0]))
    with pytest.raises(ValueError, match="scalar.*least_squares"):
        hs.Objective(lambda x: x ** 2, np.ones(3), backend="numpy")
    obj = hs.Objective(rosen_np, np.ones(4), backend="numpy")
    with pytest.raises(ValueError, match="x has 5 elements"):
        obj.fun(np.ones(5))
    with pytest.raises(ValueError, match="p has 3 elements"):
        obj.hessp(np.ones(4), np.ones(3))
    with pytest.raises(TypeError, match="x0 must be a non-empty real array"):
        hs.Objective(rosen_np, np.array([], dtype=float))
    with pytest.raises(ValueError, match="NaN or infinity"):
        hs.least_squares(lambda x: x - 1, np.array([0.0, np.inf]))
    # NaN reached during a run: IEEE values come back, scipy stops (no hang)
    assert np.isnan(obj.fun(np.array([np.nan, 1.0, 1.0, 1.0])))
    res = hs.minimize(lambda x: np.sum(np.log(x)), np.ones(3), method="BFGS", backend="numpy")
    assert not res.success


def test_example_script_runs():
    import pathlib
    import runpy

    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "scipy_rosenbrock.py"
    ns = runpy.run_path(str(path), run_name="example")
    results = ns["main"](20)
    for method in ("L-BFGS-B", "Newton-CG", "trust-exact"):
        mine, ref = results[method, "hybridad"], results[method, "scipy"]
        assert mine.fun < 1e-8 if ref.fun < 1e-8 else mine.fun == pytest.approx(ref.fun)


def test_objective_plans_are_serial_unless_an_evaluation_is_heavy(monkeypatch):
    # scipy's multithreaded BLAS between calls and the plan's worker threads
    # slow each other down: small evaluations run in the calling thread
    from hybridad.backends.numba import threshold

    monkeypatch.setattr(threshold, "PARALLEL_MIN", 64)
    x0 = np.tile([-1.2, 1.0], 200)
    obj = hs.Objective(rosen_np, x0)
    assert not obj._plan.parallel and "prange(" not in obj._plan._program.source
    obj.hessp(x0, np.ones_like(x0))
    assert not obj._hvp_plan.parallel
    assert hs.Objective(rosen_np, x0, parallel=True)._plan.parallel
    from hybridad.interop import scipy_objective

    monkeypatch.setattr(scipy_objective, "PARALLEL_WORK", 1000)
    heavy = hs.Objective(rosen_np, x0)
    assert heavy._plan.parallel and "prange(" in heavy._plan._program.source
    np.testing.assert_allclose(heavy.jac(x0), obj.jac(x0), rtol=1e-13)
    assert not hs.Objective(rosen_np, x0, parallel=False)._plan.parallel
    with pytest.raises(TypeError, match="parallel"):
        hs.Objective(rosen_np, x0, parallel="auto")


def _quartic(x, a):  # Hessian diag(12 a x^2)
    return np.sum(a * x ** 4)


def test_objectives_of_one_function_share_its_hessian_plan_but_not_its_point():
    """Two Objectives of one ``f`` at one shape get the cache's one Hessian
    plan; each ``hessp`` is at its own point (the plan linearized again where
    another objective's linearization came in between: it returned the other
    point's H p)."""
    n = 5
    a1, a2, x1, x2 = np.ones(n), np.full(n, 3.0), np.full(n, 1.0), np.full(n, 2.0)
    p = np.arange(1.0, n + 1)
    obj1, obj2 = hs.Objective(_quartic, x1, a1), hs.Objective(_quartic, x2, a2)
    for _ in range(2):
        np.testing.assert_allclose(obj1.hessp(x1, p), 12 * a1 * x1 ** 2 * p, rtol=1e-14)
        np.testing.assert_allclose(obj2.hessp(x2, p), 12 * a2 * x2 ** 2 * p, rtol=1e-14)
    assert obj1._hvp_plan is obj2._hvp_plan


def test_objectives_in_threads_each_at_their_own_point():
    """Threads with an Objective each (one shared plan), and two threads sharing
    one Objective: every ``hessp`` and ``jac`` is at the caller's point."""
    import threading

    n = 30
    wrong = []
    shared = hs.Objective(_quartic, np.ones(n), np.full(n, 2.0))

    def work(i):
        a, x = np.full(n, 1.0 + 2 * i), np.full(n, 1.0 + i)
        own = hs.Objective(_quartic, x, a)
        for k in range(300):
            xk = x + 1e-3 * (k % 7)
            if not np.allclose(own.hessp(xk, np.ones(n)), 12 * a * xk ** 2, rtol=1e-13):
                wrong.append(("own", i, k))
            if not np.allclose(shared.jac(xk), 8.0 * xk ** 3, rtol=1e-13) or \
                    not np.allclose(shared.hessp(xk, np.ones(n)), 24.0 * xk ** 2, rtol=1e-13):
                wrong.append(("shared", i, k))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong, wrong[:5]


def _energy_with_a_decision(u):
    e = 0.5 * np.sum(np.diff(u) ** 2) + 0.25 * np.sum(u ** 4) - \
        np.sum(np.sin(np.arange(u.size)) * u)
    if np.max(u) > 5.0:  # a Python decision on a value
        e = e * 1.0
    return e


def test_sparse_derivatives_meet_a_decision_on_a_value():
    """trust-constr from 200 unknowns reads a sparse Hessian's pattern off a
    trace from shapes alone, which a Python decision on a value cannot take:
    ``sparse=None`` falls back to the dense derivatives (which take the
    call's decisions), ``sparse=True`` refuses saying so."""
    x0 = np.zeros(200)
    res = hs.minimize(_energy_with_a_decision, x0, method="trust-constr")
    dense = hs.minimize(_energy_with_a_decision, x0, method="trust-constr", sparse=False)
    assert res.success and np.allclose(res.x, dense.x, atol=1e-8)
    with pytest.raises(ha.TracingError, match="sparsity pattern.*sparse=False"):
        hs.minimize(_energy_with_a_decision, x0, method="trust-constr", sparse=True)
    lsq = hs.least_squares(lambda u: np.diff(u) * (2.0 if np.max(np.abs(u)) > 100 else 1.0)
                           - 1e-3 + 0.1 * u[1:] ** 3, np.zeros(300), tr_solver="lsmr")
    assert lsq.status > 0
