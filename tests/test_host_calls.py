"""Library functions hybridad has no rules for, on values that need no derivative
(hybridad/frontend/host_calls.py, op ``host_call``): they run as numpy runs them,
on every call; a derivative through them is refused naming the function and line."""

import pickle

import numpy as np
import pytest
import scipy.signal as sg
import scipy.special as sc
import scipy.stats as st

import hybridad as ha
from hybridad.ops import REGISTRY
from hybridad.testing import numerical_gradient


def model(x, y):
    w = sc.comb(y, 2.0)                       # scipy Python function: np.asarray inside
    r = st.rankdata(y)                        # scipy.stats module function
    h, _ = np.histogram(y, bins=4, range=(0.0, 8.0))  # numpy, no traced implementation, a tuple
    filt = sg.medfilt(y, 3)  # scipy.signal: traced (its array API path: ndimage.median_filter)
    return np.sum(x * w) + np.sum(x * r) + np.sum(h) * x[0] + np.sum(filt * x ** 2)


X = np.linspace(0.1, 1.0, 6)
Y = np.array([3.0, 5.0, 2.0, 7.0, 1.0, 4.0])


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_functions_of_data_run_on_every_call(backend):
    plan = ha.compile(model, X, Y, backend=backend)
    assert sum(n.op == "host_call" for n in plan.graph.nodes) >= 3  # comb, rankdata, histogram
    res = ha.GradientResult(X)
    for y in (Y, Y[::-1].copy(), Y + 2.0):  # the data change: so do the host values
        plan.gradient(X, y, out=res)
        assert res.value == pytest.approx(model(X, y), rel=1e-13)
        np.testing.assert_allclose(res.gradient, numerical_gradient(lambda x: model(x, y), X),
                                   rtol=1e-7)


def test_hessian_through_a_data_function():
    def f(x, y):
        return np.sum(sc.comb(y, 2.0) * x ** 3)

    res = ha.hessian(f, X, Y, backend="numpy")
    np.testing.assert_allclose(res.hessian, np.diag(6 * X * sc.comb(Y, 2.0)), rtol=1e-13)


def test_derivative_through_it_is_refused_by_name_and_line():
    with pytest.raises(NotImplementedError,
                       match=r"scipy\.special\.comb \(at test_host_calls\.py:\d+"):
        ha.gradient(lambda x: np.sum(sc.comb(x, 2.0)), X)
    with pytest.raises(NotImplementedError, match=r"numpy\.histogram \(at test_host_calls"):
        ha.gradient(lambda x: np.sum(np.histogram(x, bins=5)[1] * x), X)  # float edges
    # integer results (counts) carry no derivative: nothing to refuse
    res = ha.gradient(lambda x: np.sum(np.histogram(x, bins=6)[0] * x), X)
    np.testing.assert_array_equal(res.gradient, np.histogram(X, bins=6)[0])



def test_a_function_drawing_random_numbers_is_probed_without_them(monkeypatch):
    """A library function that draws from numpy's global generator (as scipy's
    randomized norm estimates do), run as a host call: probed on placeholders
    while tracing, it neither reads as ``f`` drawing random numbers nor moves
    the user's stream -- only the call that computes the value draws, as
    numpy's would."""
    import scipy.integrate

    from hybridad.frontend.host_calls import _fallback

    def noisy_double(a):
        scale = len(a.tolist())  # (the values as a list: a tracer raises, so a host call)
        np.random.rand(3)  # (an estimate's draws, discarded)
        return 2.0 * np.asarray(a) + 0.0 * scale

    noisy_double.__module__ = "scipy.integrate"
    monkeypatch.setattr(scipy.integrate, "noisy_double",
                        _fallback(noisy_double, "scipy.integrate.noisy_double"), raising=False)

    def f(x, y):
        return np.sum(x * scipy.integrate.noisy_double(y))

    np.random.seed(7)
    res = ha.gradient(f, X, Y, backend="numpy")
    after = np.random.rand()
    np.random.seed(7)
    f(X, Y)
    assert after == np.random.rand()
    assert res.value == pytest.approx(2 * X @ Y, rel=1e-13)
    np.testing.assert_allclose(res.gradient, 2 * Y)


def test_value_dependent_shapes_are_refused_while_tracing():
    """Where a differentiated argument reaches them; a data argument's are
    taken at the call's values (tests/test_data_values.py)."""
    with pytest.raises(ha.TracingError, match=r"numpy\.unique .*depends on the values"):
        ha.gradient(lambda x, y: np.sum(x) * np.sum(np.unique(np.round(x * y))), X, Y)
    res = ha.gradient(lambda x, y: np.sum(x) * np.sum(np.unique(y)), X, Y, backend="numpy")
    np.testing.assert_allclose(res.gradient, np.full_like(X, np.sum(np.unique(Y))))


def test_a_changed_result_shape_raises_at_the_call():
    run = REGISTRY["host_call"].run
    template = ((("a", 0),), ())
    out = np.empty(3)
    with pytest.raises(ValueError, match=r"numpy\.unique \(at here\) returned .*\(2,\).*\(3,\)"):
        run(out, np.array([1.0, 1.0, 2.0]), func="numpy.unique", template=template, item=None,
            where="here")


def test_arguments_it_cannot_hold_are_named():
    import scipy.ndimage as nd

    with pytest.raises(NotImplementedError, match=r"scipy\.ndimage\.generic_filter .*of type"):
        ha.gradient(lambda x, y: np.sum(x * nd.generic_filter(y, np.mean, size=3)), X, Y)


def test_plans_with_host_calls_pickle():
    plan = ha.compile(model, X, Y, backend="numpy")
    again = pickle.loads(pickle.dumps(plan))
    a, b = ha.GradientResult(X), ha.GradientResult(X)
    plan.gradient(X, Y, out=a)
    again.gradient(X, Y, out=b)
    assert a.value == b.value
    np.testing.assert_array_equal(a.gradient, b.gradient)


def test_calls_outside_traces_are_scipy_s_own():
    assert sc.comb(5, 2) == 10.0
    assert sc.comb.__hybridad_original__ is not None
    np.testing.assert_array_equal(st.rankdata([3, 1, 2]), [3.0, 1.0, 2.0])
