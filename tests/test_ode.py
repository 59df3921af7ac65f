"""ODEs solved by scipy.integrate.odeint and solve_ivp inside a differentiated
function (hybridad.ops.ode, hybridad.frontend.scipy_integrate): the value is
scipy's, and gradients, Jacobians, Hessians and Hessian-vector products with
respect to the initial value, the extra arguments and values the right-hand
side closes over match finite differences (the derivatives of the ODE, solved
to the solver's tolerances), on both CPU backends."""

import numpy as np
import pytest
from scipy.integrate import odeint, solve_ivp

import hybridad as ha
from hybridad.errors import TracingError
from hybridad.testing import numerical_gradient

T = np.linspace(0.0, 2.0, 9)
TOL = dict(rtol=1e-11, atol=1e-11)
RNG = np.random.default_rng(7)
Y0 = RNG.standard_normal(3)
K = np.array([0.5, 1.0, 1.5])
A = 0.5 * RNG.standard_normal((3, 3))
BACKENDS = ["numpy", "numba"]


def rhs(y, t, k, A):
    return -k * y + np.sin(A @ y) * np.exp(-t)


def by_args(y0, k, A):
    Y = odeint(rhs, y0, T, args=(k, A), **TOL)
    return np.sum(Y ** 2) + np.sum(Y[-1])


def by_closure(k, y0):
    Y = odeint(lambda y, t: -k * y + 0.3 * np.cos(y) * t, y0, T, **TOL)
    return np.sum(Y[::2] ** 3)


def tfirst_form(y0, k):
    return np.sum(odeint(lambda t, y: -k * y ** 2, y0, T, tfirst=True, **TOL))


def ivp(y0, k, method="RK45"):
    sol = solve_ivp(lambda t, y, k: -k * y + np.tanh(y[::-1]), (-0.5, 2.5), y0,
                    method=method, t_eval=T, args=(k,), **TOL)
    return np.sum(sol.y * np.arange(1.0, 4.0)[:, None])


def scalar_args(p, y0):
    """Parameters handed to the right-hand side as 0-d values (``p[0]``)."""
    Y = odeint(lambda y, t, a, b: np.array([a * y[0] - b * y[0] * y[1],
                                            b * y[0] * y[1] - y[1]]),
               y0, T, args=(p[0], p[1]), **TOL)
    return np.sum((Y - 1.0) ** 2)


def _fd(f, args, i):
    def fi(v):
        a = list(args)
        a[i] = v
        return f(*a)
    return numerical_gradient(fi, args[i])


CASES = {"by_args": (by_args, (Y0, K, A)), "by_closure": (by_closure, (K, Y0)),
         "tfirst": (tfirst_form, (np.abs(Y0) + 0.5, K)), "ivp_rk45": (ivp, (Y0, K)),
         "ivp_radau": (lambda y0, k: ivp(y0, k, "Radau"), (Y0, K)),
         "ivp_lsoda": (lambda y0, k: ivp(y0, k, "LSODA"), (Y0, K)),
         "scalar_args": (scalar_args, (np.array([1.1, 0.4]), np.array([1.0, 0.5])))}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_finite_differences(name, backend):
    f, args = CASES[name]
    argnums = tuple(range(len(args)))
    res = ha.gradient(f, *args, argnums=argnums, backend=backend)
    assert float(res.value) == pytest.approx(f(*args), rel=1e-9)
    for i, g in enumerate(res.derivs[0]):
        np.testing.assert_allclose(g, _fd(f, args, i), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("sweep", ["forward", "adjoint"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_each_argument_alone(name, sweep, monkeypatch):
    """A gradient in one argument (the parameters of a fit, not its initial
    value; or the initial value alone), by forward sensitivities and by the
    adjoint sweep (the choice is by size: ``FORWARD_SENSITIVITIES`` 0 forces
    the adjoint)."""
    import hybridad.ops.ode as ode

    if sweep == "adjoint":
        monkeypatch.setattr(ode, "FORWARD_SENSITIVITIES", 0)
    f, args = CASES[name]
    for i in range(len(args)):
        plan = ha.compile(f, *args, argnums=i, backend="numpy")
        ops = {n.op for n in plan.graph.nodes}
        assert ("ode_adjoint" in ops) == (sweep == "adjoint"), ops
        res = plan.gradient(*args)
        np.testing.assert_allclose(res.gradient, _fd(f, args, i), rtol=1e-6, atol=1e-7)


def test_the_value_is_scipy_s_and_a_plan_follows_new_values():
    plan = ha.compile(by_args, Y0, K, A, argnums=(0, 1, 2))
    for scale in (1.0, 0.5, 2.0):
        args = (scale * Y0, K / scale, A)
        res = plan.gradient(*args)
        assert float(res.value) == pytest.approx(by_args(*args), rel=1e-10)
        np.testing.assert_allclose(res.derivs[0][1], _fd(by_args, args, 1), rtol=1e-6)
    ref = ha.gradient(by_args, Y0, K, A, backend="numpy")
    assert float(ref.value) == pytest.approx(by_args(Y0, K, A), rel=1e-13)


def damped(p):
    Y = odeint(lambda y, t: np.array([y[1], -p[0] * y[0] - p[1] * y[1] + np.sin(t)]),
               np.array([1.0, 0.0]), T, **TOL)
    return np.sum(Y[:, 0] ** 2) + 0.5 * np.sum(Y[-1])


@pytest.mark.parametrize("sweep", ["forward", "adjoint"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_second_order_and_jacobians(backend, sweep, monkeypatch):
    """Hessians and ``hvp`` (forward over reverse: the tangent of the forward
    sensitivities, or of the adjoint sweep) and Jacobians."""
    import hybridad.ops.ode as ode

    if sweep == "adjoint":
        monkeypatch.setattr(ode, "FORWARD_SENSITIVITIES", 0)
    p = np.array([2.0, 0.3])
    plan = ha.compile(damped, p, hessian=True, backend=backend)
    assert ("ode_adjoint" in str(plan.explain())) == (sweep == "adjoint")
    H = plan.hessian(p).hessian
    Hfd = np.array([numerical_gradient(
        lambda q: ha.gradient(damped, q, backend="numpy").gradient[i], p) for i in range(2)])
    np.testing.assert_allclose(H, Hfd, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(H, H.T, rtol=1e-7)
    v = np.array([0.7, -1.3])
    hv = ha.compile(lambda q: damped(q), p, hvp=True, backend=backend).hvp(p, v=v)
    np.testing.assert_allclose(hv.hvp, H @ v, rtol=1e-7)

    def final(q):
        return odeint(lambda y, t: -q[0] * y + q[1], np.array([1.0, 2.0]), T, **TOL)[-1]
    J = ha.jacobian(final, p, backend=backend).jacobian
    tf = T[-1]
    e = np.exp(-p[0] * tf)
    want = [[-tf * 1.0 * e + p[1] * (tf * e / p[0] - (1 - e) / p[0] ** 2), (1 - e) / p[0]],
            [-tf * 2.0 * e + p[1] * (tf * e / p[0] - (1 - e) / p[0] ** 2), (1 - e) / p[0]]]
    np.testing.assert_allclose(J, want, rtol=1e-7)


def test_an_initial_value_listed_with_traced_numbers():
    def f(p):
        return np.sum(odeint(lambda y, t: -y, [p[0], 1.0], T, **TOL))
    g = ha.gradient(f, np.array([2.0])).gradient
    assert float(g[0]) == pytest.approx(np.sum(np.exp(-T)), rel=1e-9)


def test_an_ode_of_no_traced_value_is_scipy_s_on_values():
    def f(x):
        Y = odeint(lambda y, t: -y, np.ones(2), T)
        assert type(Y) is np.ndarray
        return np.sum(x * Y[-1])
    res = ha.gradient(f, np.ones(2))
    np.testing.assert_allclose(res.gradient, odeint(lambda y, t: -y, np.ones(2), T)[-1])


def test_refusals_name_what_to_change():
    with pytest.raises(TracingError, match="t_eval"):
        ha.gradient(lambda k: np.sum(solve_ivp(lambda t, y: -k * y, (0, 1), np.ones(3)).y), K)
    with pytest.raises(TracingError, match="Dfun"):
        ha.gradient(lambda k: np.sum(odeint(lambda y, t: -k * y, np.ones(3), T,
                                            Dfun=lambda y, t: -np.diag(k))), K)
    with pytest.raises(TracingError, match="times"):
        ha.gradient(lambda s: np.sum(odeint(lambda y, t: -y, np.ones(3), T * s)), np.ones(1))
    with pytest.raises(TracingError):  # a Python decision on the state, inside the body
        ha.gradient(lambda k: np.sum(odeint(lambda y, t: -k * y if y[0] > 0 else k * y,
                                            np.ones(3), T)), K)


def test_a_name_bound_before_hybridad_wrapped_scipy_is_named():
    """``from scipy.integrate import odeint`` ahead of ``import hybridad``
    holds scipy's own function: the error says so and what to do."""
    import scipy.integrate

    early = getattr(scipy.integrate.odeint, "__hybridad_original__", scipy.integrate.odeint)
    with pytest.raises(TracingError, match="bound before hybridad wrapped it.*Import hybridad "
                                           "first, or call scipy.integrate.odeint"):
        ha.gradient(lambda k: np.sum(early(lambda y, t: -y, np.ones(3) * k, T)), K)


def test_threads_solving_one_right_hand_side_at_once():
    """Two plans of one model (one compiled right-hand side, shared) called
    from two threads at once give each call's own answer."""
    import threading

    plans = [ha.compile(by_args, Y0, K, A, argnums=1) for _ in range(2)]
    points = [K * s for s in (0.5, 0.75, 1.0, 1.25, 1.5, 2.0)]
    want = [by_args(Y0, k, A) for k in points]
    got, errors = {}, []

    def work(j):
        try:
            for i, k in enumerate(points):
                got[j, i] = float(plans[j].gradient(Y0, k, A).value)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=work, args=(j,)) for j in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for (j, i), v in got.items():
        assert v == pytest.approx(want[i], rel=1e-9), (j, i)
