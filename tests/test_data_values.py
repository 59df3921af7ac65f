"""Values of data arguments -- arguments a plan does not differentiate --
where numpy code needs them as numbers: ``float(np.std(y))``, an ODE's
output times ``t``, ``np.gradient``'s coordinates, quantile levels, ``np.unique`` of labels.

They were refused like a differentiated value's ("float() of a traced
array", "the output times are traced values"), although nothing is lost:
no derivative flows to a data argument.  They are now taken at the traced
call's values and guarded (:func:`hybridad.core.decisions.decide_constant`):
a call with other data values runs, or traces, a specialization of its own.
A value a differentiated argument reaches is still refused.
"""

import math
import warnings

import numpy as np
import pytest
from scipy.integrate import odeint, solve_ivp

import hybridad as ha
from hybridad.errors import TracingError

W = np.array([0.7, -1.2, 2.0])
Y = np.array([1.0, 2.0, 4.5])


def _fd(f, w, *data, eps=1e-6):
    return np.array([(f(w + eps * e, *data) - f(w - eps * e, *data)) / (2 * eps)
                     for e in np.eye(w.size)])


def _float_of_data(w, y):
    return np.sum(w ** 2) / float(np.std(y)) + float(y[0]) * w[1]


def _gradient_coordinates(w, y):
    return np.sum(np.gradient(w * y, y) ** 2)


def _quantile_level(w, q):
    return np.sum(np.quantile(w * np.arange(1.0, 4.0), q) ** 2)


def _ode_times(w, t):
    def rhs(c, tt, k1, k2):
        return np.array([-k1 * c[0], k1 * c[0] - k2 * c[1]])
    return np.sum(odeint(rhs, np.array([1.0, 0.0]), t, args=(w[0] ** 2, w[1] ** 2)) ** 2)


def _unique_labels(w, labels):
    """Group sums by label: ``np.unique`` of a data argument (its result's
    shape is the values')."""
    u, inverse = np.unique(labels, return_inverse=True)
    sums = np.array([np.sum(w[inverse == k]) for k in range(len(u))])
    return np.sum(sums ** 2) + np.sum(w[np.searchsorted(u, labels)] ** 3)


def _ivp_times(w, t):
    sol = solve_ivp(lambda tt, c: -(w[0] ** 2) * c, (t[0], t[-1]), np.array([1.0, w[1]]),
                    t_eval=t, rtol=1e-10, atol=1e-12)
    return np.sum(sol.y ** 2)


CASES = {
    "float": (_float_of_data, [Y, Y * 1.5]),
    "gradient coordinates": (_gradient_coordinates, [Y, np.array([0.0, 0.5, 3.0])]),
    "quantile levels": (_quantile_level, [np.array([0.25, 0.5]), np.array([0.1, 0.9])]),
    "odeint times": (_ode_times, [np.linspace(0.0, 2.0, 5), np.linspace(0.0, 3.0, 5)]),
    "solve_ivp times": (_ivp_times, [np.linspace(0.0, 1.0, 4), np.linspace(0.5, 2.0, 4)]),
    "unique labels": (_unique_labels, [np.array([3, 1, 3]), np.array([2, 2, 2])]),
}


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_data_argument_s_values_are_taken_and_guarded(case, backend):
    """One plan, data values that change between calls and back: each call's
    value is numpy's and its gradient finite differences' (the second data
    value runs a specialization of its own)."""
    f, datas = CASES[case]
    plan = ha.compile(f, W, datas[0], backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ha.RetraceWarning)
        for data in (*datas, datas[0]):
            for w in (W, W + 0.3):
                res = plan.gradient(w, data)
                np.testing.assert_allclose(res.value, f(w, data), rtol=1e-12)
                np.testing.assert_allclose(res.gradient, _fd(f, w, data), rtol=2e-6,
                                           atol=1e-7)


def test_a_data_argument_s_float_in_a_hessian():
    h = ha.hessian(_float_of_data, W, Y).hessian
    np.testing.assert_allclose(h, 2 * np.eye(3) / np.std(Y), rtol=1e-13)


@pytest.mark.parametrize("f, match", [
    (lambda w, y: np.sum(w) * float(np.std(w)), r"float\(\).*differentiated argument"),
    (lambda w, y: _gradient_coordinates(w, y * w), "differentiated argument reaches"),
    (lambda w, y: _quantile_level(w, w[:2] ** 2 / 10), "differentiated argument reaches"),
    (lambda w, y: _ode_times(w, np.cumsum(np.abs(w))), "differentiated argument"),
    (lambda w, y: np.sum(np.unique(np.round(w)) ** 2), "depends on the values"),
])
def test_a_value_a_differentiated_argument_reaches_is_still_refused(f, match):
    with pytest.raises((TracingError, NotImplementedError), match=match):
        ha.gradient(f, W, Y, backend="numpy")


def test_the_same_argument_differentiated_is_refused():
    """``argnums=(0, 1)``: ``y`` is differentiated, and ``float(np.std(y))``
    would drop its derivative."""
    with pytest.raises(TracingError, match=r"float\(\)"):
        ha.gradient(_float_of_data, W, Y, argnums=(0, 1), backend="numpy")


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_plans_of_the_new_paths_allocate_nothing(backend):
    """Repeated calls allocate no numpy memory: a data argument's float
    (whose guard compared the sign by np.signbit, a 0-d array each call, on
    the numpy backend), a window product, np.convolve, math's functions, a
    dataclass argument."""
    import dataclasses

    from hybridad.testing import count_allocations

    @dataclasses.dataclass
    class Pair:
        W: np.ndarray
        b: np.ndarray

    k = np.linspace(-1.0, 1.0, 9)
    swv = np.lib.stride_tricks.sliding_window_view
    cases = [
        (_float_of_data, (W, Y)),
        (lambda x: np.sum(np.tanh(swv(x, 9) @ k) ** 2), (np.linspace(0.0, 3.0, 60),)),
        (lambda x: np.sum(np.tanh(np.convolve(x, k, mode="valid")) ** 2),
         (np.linspace(0.0, 3.0, 60),)),
        (lambda p: p[0] * math.sqrt(p[1]) + math.exp(-p[2]), (np.array([1.0, 2.0, 0.5]),)),
        (lambda p: np.sum(np.tanh(p.W @ p.b)), (Pair(np.ones((3, 2)), np.ones(2)),)),
    ]
    for f, args in cases:
        plan = ha.compile(f, *args, backend=backend)
        out = ha.GradientResult(args[0])
        for _ in range(3):
            plan.gradient(*args, out=out)
        with count_allocations() as counts:
            plan.gradient(*args, out=out)
        assert counts.allocations == 0, f
