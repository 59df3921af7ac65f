"""hybridad.scipy.minimize / least_squares / Objective: every argument of
scipy.optimize.minimize and least_squares means what scipy's documentation
says.  ``args`` go to f (and to a user jac/hess/hessp) after x; a jac, hess or
hessp of the user's is used as given (f is not traced for it); hybridad
supplies only what is left out.  Results are compared with plain scipy runs
using the analytic derivatives."""

import numpy as np
import pytest
from scipy import optimize

import hybridad.scipy as hs
from hybridad.interop.scipy_least_squares import _Residuals

A = np.diag([1.0, 2.0, 3.0, 4.0]) + 0.1
B = np.array([1.0, -1.0, 2.0, 0.5])
X0 = np.zeros(4)
ARGS = (A, B)


def f(x, A, b):
    return 0.5 * (x @ (A @ x)) - b @ x + 0.25 * np.sum(x ** 4)


def grad(x, A, b):
    return A @ x - b + x ** 3


def hess(x, A, b):
    return A + np.diag(3.0 * x ** 2)


def hessp(x, p, A, b):
    return A @ p + 3.0 * x ** 2 * p


class Counted:
    """Counts the calls scipy makes with real ndarrays (tracing calls do not count)."""

    def __init__(self, g):
        self.g, self.calls = g, 0

    def __call__(self, x, *args):
        if isinstance(x, np.ndarray):
            self.calls += 1
        return self.g(x, *args)


HESSIAN_METHODS = {"newton-cg", "dogleg", "trust-ncg", "trust-constr", "trust-krylov",
                   "trust-exact"}


def reference(method, **kw):
    """scipy's own run with the analytic derivatives (those the method uses)."""
    if method.lower() not in HESSIAN_METHODS:
        kw.pop("hess", None), kw.pop("hessp", None)
    if method.lower() not in ("nelder-mead", "powell", "cobyla"):
        kw.setdefault("jac", grad)
    return optimize.minimize(f, X0, args=ARGS, method=method, **kw)


@pytest.mark.parametrize("method", ["BFGS", "L-BFGS-B", "CG", "SLSQP", "Newton-CG",
                                    "trust-ncg", "trust-krylov", "trust-exact", "dogleg",
                                    "trust-constr", "Nelder-Mead"])
def test_args_keyword_goes_to_f_after_x(method):
    ref = reference(method, hess=hess)
    res = hs.minimize(f, X0, args=ARGS, method=method, backend="numpy")
    np.testing.assert_allclose(res.x, ref.x, atol=1e-6 if method != "Nelder-Mead" else 1e-4)
    if method != "Nelder-Mead":
        assert res.n_evaluations > 0  # jac=None: hybridad's exact gradient
    # a single non-tuple argument is wrapped in a tuple, as scipy does
    res1 = hs.minimize(lambda x, c: np.sum((x - c) ** 2), X0, args=B, method="BFGS",
                       backend="numpy")
    np.testing.assert_allclose(res1.x, B, atol=1e-6)


def test_objective_takes_args_keyword_and_refuses_both_forms():
    obj = hs.Objective(f, X0, args=ARGS, backend="numpy")
    x = np.linspace(-1.0, 1.0, 4)
    assert obj.fun(x) == pytest.approx(f(x, *ARGS), rel=1e-14)
    np.testing.assert_allclose(obj.jac(x), grad(x, *ARGS), rtol=1e-13)
    np.testing.assert_allclose(obj.hessp(x, B), hessp(x, B, *ARGS), rtol=1e-13)
    # scipy's args=, as scipy passes them, reach the objective's callables
    res = optimize.minimize(obj.fun, obj.x0, args=ARGS, jac=obj.jac, hessp=obj.hessp,
                            method="trust-ncg")
    np.testing.assert_allclose(res.x, reference("trust-ncg", hessp=hessp).x, atol=1e-6)
    with pytest.raises(TypeError, match="not both"):
        hs.Objective(f, X0, A, args=(B,), backend="numpy")
    with pytest.raises(TypeError, match="not both"):
        hs.minimize(f, X0, A, args=(B,), backend="numpy")


@pytest.mark.parametrize("method", ["BFGS", "L-BFGS-B", "trust-ncg", "trust-exact"])
def test_jac_true_uses_the_gradient_f_returns(method):
    seen = []

    def fg(x, A, b):
        if isinstance(x, np.ndarray):
            seen.append(1)
        return f(x, A, b), grad(x, A, b)

    ref = reference(method, hess=hess)
    res = hs.minimize(fg, X0, args=ARGS, jac=True, method=method, backend="numpy")
    np.testing.assert_allclose(res.x, ref.x, atol=1e-6)
    assert res.n_evaluations == 0  # hybridad computed no gradient
    if method in ("trust-ncg", "trust-exact"):  # the Hessian: hybridad's, of fg(x)[0]
        assert res.n_hvp_evaluations > 0
        assert len(seen) >= res.nfev > 0  # (building the plans ran fg too)
    else:
        assert len(seen) == res.nfev > 0  # f's own (value, gradient) served scipy


def test_jac_callable_is_used_and_f_is_called_by_scipy():
    fc, gc = Counted(f), Counted(grad)
    ref = reference("BFGS")
    res = hs.minimize(fc, X0, args=ARGS, jac=gc, method="BFGS", backend="numpy")
    np.testing.assert_allclose(res.x, ref.x, atol=1e-6)
    assert gc.calls == res.njev > 0 and fc.calls == res.nfev > 0
    assert res.n_evaluations == 0
    # with a Hessian method and no hess: the user's gradient, hybridad's hessp
    gc = Counted(grad)
    res = hs.minimize(f, X0, args=ARGS, jac=gc, method="Newton-CG", backend="numpy")
    np.testing.assert_allclose(res.x, reference("Newton-CG", hessp=hessp).x, atol=1e-6)
    assert gc.calls > 0 and res.n_hvp_evaluations > 0


@pytest.mark.parametrize("jac", ["2-point", "3-point", "cs", False])
def test_finite_difference_jac_goes_to_scipy(jac):
    fc = Counted(f)
    ref = optimize.minimize(f, X0, args=ARGS, jac=jac, method="BFGS")
    res = hs.minimize(fc, X0, args=ARGS, jac=jac, method="BFGS", backend="numpy")
    # the very same run as scipy's: f itself, scipy's differences
    np.testing.assert_array_equal(res.x, ref.x)
    assert res.nfev == ref.nfev and fc.calls == res.nfev
    assert res.n_evaluations == 0
    np.testing.assert_allclose(res.x, reference("BFGS").x, atol=1e-5)


def test_hess_and_hessp_callables_are_used():
    hc, hpc = Counted(hess), Counted(lambda x, p, A, b: hessp(x, p, A, b))
    for method in ("trust-exact", "dogleg", "trust-ncg"):
        hc.calls = 0
        res = hs.minimize(f, X0, args=ARGS, hess=hc, method=method, backend="numpy")
        np.testing.assert_allclose(res.x, reference(method, hess=hess).x, atol=1e-6)
        assert hc.calls > 0 and res.n_hvp_evaluations == 0
    for method in ("Newton-CG", "trust-krylov", "trust-constr"):
        hpc.calls = 0
        res = hs.minimize(f, X0, args=ARGS, hessp=hpc, method=method, backend="numpy")
        np.testing.assert_allclose(res.x, reference(method, hessp=hessp).x, atol=1e-6)
        assert hpc.calls > 0 and res.n_hvp_evaluations == 0


@pytest.mark.parametrize("strategy", [optimize.BFGS, optimize.SR1, "2-point"])
def test_hessian_update_strategies_pass_through(strategy):
    h = strategy() if callable(strategy) else strategy
    ref = reference("trust-constr", hess=strategy() if callable(strategy) else strategy)
    res = hs.minimize(f, X0, args=ARGS, method="trust-constr", hess=h, backend="numpy")
    np.testing.assert_allclose(res.x, ref.x, atol=1e-6)
    assert res.n_hvp_evaluations == 0 and res.n_evaluations > 0


@pytest.mark.filterwarnings("ignore:delta_grad == 0.0")  # the constraint's BFGS Hessian
def test_bounds_constraints_tol_options():
    bounds = [(-0.2, 0.3)] * 4
    for method in ("L-BFGS-B", "TNC", "SLSQP", "trust-constr"):
        ref = reference(method, bounds=bounds, hessp=hessp)
        res = hs.minimize(f, X0, args=ARGS, method=method, bounds=bounds, backend="numpy")
        np.testing.assert_allclose(res.x, ref.x, atol=1e-5 if method == "TNC" else 1e-6)
    eq = {"type": "eq", "fun": lambda x: np.sum(x) - 1.0}
    ineq = {"type": "ineq", "fun": lambda x: x[0] - 0.9, "jac": lambda x: np.eye(4)[0]}
    ref = reference("SLSQP", constraints=[eq, ineq])
    res = hs.minimize(f, X0, args=ARGS, method="SLSQP", constraints=[eq, ineq],
                      backend="numpy")
    np.testing.assert_allclose(res.x, ref.x, atol=1e-6)
    assert np.sum(res.x) == pytest.approx(1.0) and res.x[0] >= 0.9 - 1e-9
    cons = [optimize.NonlinearConstraint(lambda x: x @ x, 0.0, 0.5),
            optimize.LinearConstraint(np.ones((1, 4)), 0.2, 0.2)]
    ref = reference("trust-constr", hessp=hessp, constraints=cons)
    res = hs.minimize(f, X0, args=ARGS, method="trust-constr", constraints=cons,
                      backend="numpy")
    np.testing.assert_allclose(res.x, ref.x, atol=1e-6)
    # tol and options reach scipy
    ref = reference("BFGS", tol=1e-2, options={"maxiter": 50})
    res = hs.minimize(f, X0, args=ARGS, method="BFGS", tol=1e-2, options={"maxiter": 50},
                      backend="numpy")
    assert res.nit == ref.nit
    np.testing.assert_allclose(res.x, ref.x, atol=1e-6)
    res = hs.minimize(f, X0, args=ARGS, method="BFGS", options={"maxiter": 2},
                      backend="numpy")
    assert res.nit == 2 and not res.success


@pytest.mark.parametrize("method", ["BFGS", "trust-ncg", "trust-constr", "Nelder-Mead"])
def test_callback_both_forms(method):
    def run(minimize, **kw):
        old, new = [], []
        if method == "trust-constr":
            def cb_old(xk, state):
                old.append(np.copy(xk))
        else:
            def cb_old(xk):
                old.append(np.copy(xk))

        def cb_new(intermediate_result):
            new.append((np.copy(intermediate_result.x), intermediate_result.fun))

        minimize(f, X0, args=ARGS, method=method, callback=cb_old, **kw)
        minimize(f, X0, args=ARGS, method=method, callback=cb_new, **kw)
        return old, new

    kw = {} if method == "Nelder-Mead" else {"jac": grad} if method == "BFGS" else \
        {"jac": grad, "hess": hess}
    ref_old, ref_new = run(optimize.minimize, **kw)
    old, new = run(hs.minimize, backend="numpy")
    assert len(old) == len(ref_old) > 0 and len(new) == len(ref_new) == len(old)
    np.testing.assert_allclose(old, ref_old, atol=1e-6)
    np.testing.assert_allclose([x for x, _ in new], [x for x, _ in ref_new], atol=1e-6)
    np.testing.assert_allclose([v for _, v in new], [v for _, v in ref_new], rtol=1e-9)


def test_custom_method_gets_the_exact_gradient():
    def descent(fun, x0, args=(), jac=None, callback=None, **_):
        assert callable(jac)
        x = np.array(x0)
        for _ in range(2000):
            x = x - 0.1 * jac(x, *args)
        return optimize.OptimizeResult(x=x, fun=fun(x, *args), success=True, nit=2000)

    res = hs.minimize(f, X0, args=ARGS, method=descent, backend="numpy")
    np.testing.assert_allclose(res.x, reference("BFGS", tol=1e-12).x, atol=1e-9)


def test_shaped_x0_and_argnums_with_user_derivatives():
    c = B.reshape(2, 2)

    def fg(x, c):  # x arrives in x0's shape, its gradient may be shaped too
        assert x.shape == (2, 2)
        return np.sum((x - c) ** 4) + np.sum((x - c) ** 2), 4 * (x - c) ** 3 + 2 * (x - c)

    res = hs.minimize(fg, np.zeros((2, 2)), args=(c,), jac=True, method="BFGS")
    assert res.x.shape == (2, 2) and res.n_evaluations == 0
    np.testing.assert_allclose(res.x, c, atol=1e-5)

    def f_second(c, x):
        return np.sum((x - c) ** 2)

    res = hs.minimize(f_second, X0, args=(B,), argnums=1, jac="3-point", method="BFGS",
                      backend="numpy")
    np.testing.assert_allclose(res.x, B, atol=1e-6)
    with pytest.raises(TypeError, match="argnums=0"):
        hs.minimize(f_second, X0, args=(B,), argnums=1, jac=lambda x, c: 2 * (x - c))


# ---------------------------------------------------------------- least_squares
T = np.linspace(0.0, 2.0, 30)
Y = 2.0 * np.exp(-1.3 * T) + 0.05 * np.sin(7 * T)
P0 = np.array([1.0, -0.5, 0.1])


def model(p, t, y):
    return p[0] * np.exp(p[1] * t) + p[2] - y


def model_jac(p, t, y):
    e = np.exp(p[1] * t)
    return np.stack([e, p[0] * t * e, np.ones_like(t)], axis=1)


@pytest.mark.parametrize("options", [{}, {"method": "lm"}, {"method": "dogbox"},
                                     {"loss": "soft_l1", "f_scale": 0.1},
                                     {"bounds": ([0, -1, -1], [3, 0, 0.2]),
                                      "x_scale": "jac", "max_nfev": 50}])
def test_least_squares_exact_jacobian(options):
    ref = optimize.least_squares(model, P0, jac=model_jac, args=(T, Y), **options)
    res = hs.least_squares(model, P0, args=(T, Y), backend="numpy", **options)
    np.testing.assert_allclose(res.x, ref.x, atol=1e-6)
    np.testing.assert_allclose(res.jac, ref.jac, rtol=1e-10, atol=1e-12)
    assert res.n_evaluations >= res.njev > 0  # (lm counts its Jacobians its own way)


def test_least_squares_user_jac_kwargs_and_copies():
    jc = Counted(model_jac)
    res = hs.least_squares(model, P0, jac=jc, args=(T, Y), backend="numpy")
    assert jc.calls == res.njev > 0 and res.n_evaluations == 0
    fc = Counted(model)
    ref = optimize.least_squares(model, P0, jac="3-point", args=(T, Y))
    res = hs.least_squares(fc, P0, jac="3-point", args=(T, Y))
    np.testing.assert_array_equal(res.x, ref.x)
    assert fc.calls == ref.nfev + 6 * ref.njev  # f itself, scipy's differences
    # kwargs= go to fun as keywords; positional args after x0 are args=
    res = hs.least_squares(lambda p, t, y=None: model(p, t, y), P0, T, kwargs={"y": Y},
                           backend="numpy")
    np.testing.assert_allclose(res.x, optimize.least_squares(
        model, P0, jac=model_jac, args=(T, Y)).x, atol=1e-6)
    # every Jacobian handed to scipy is a new array, never overwritten later
    obj = _Residuals(model, P0, (T, Y), "numpy", False)
    j1 = obj.jac(P0, T, Y)
    kept = j1.copy()
    j2 = obj.jac(P0 + 0.1, T, Y)
    assert not np.shares_memory(j1, j2) and np.array_equal(j1, kept)
    np.testing.assert_allclose(j2, model_jac(P0 + 0.1, T, Y), rtol=1e-13)
