"""numpy's choose, insert, resize, put, putmask, logspace, geomspace,
linalg.tensorsolve / tensorinv, apply_over_axes, histogram2d / histogramdd
(weights) and interp(period=) on traced arrays (hybridad.frontend.numpy_more):
numpy's values and shapes, derivatives against central differences, on both
CPU backends, nothing allocated per call."""

import numpy as np
import pytest
from conftest import BACKENDS

import hybridad as ha
from hybridad.testing import assert_no_alloc, numerical_gradient

X = np.array([0.7, -0.4, 0.9, 0.3, -0.8, 0.5])


def _put(x):
    y = x.copy()
    np.put(y, [0, 2, -1], x[:2] * 5)
    return y


def _put_wrap(x):
    y = x.copy()
    np.put(y, [7, 8], x[:1] * 5, mode="wrap")
    return y


def _putmask(x):
    y = x.copy()
    np.putmask(y, np.arange(6) % 2 == 0, x[:2] ** 2)
    return y


CASES = {
    "choose": lambda x: np.choose([0, 1, 0, 1, 1, 0], [x, x ** 2]),
    "choose wrap 2-D": lambda x: np.choose(np.array([[0, 3], [1, 2], [2, 5]]),
                                           [x[:2], x[2:4] ** 2, x[4:] * 3], mode="wrap"),
    "choose clip": lambda x: np.choose(np.array([-1, 0, 5]), [x[:3], x[3:]], mode="clip"),
    "insert scalar": lambda x: np.insert(x, 2, x[0] * 3),
    "insert list": lambda x: np.insert(x, [1, 1, 4], [x[0], 2.0, x[5]]),
    "insert negative": lambda x: np.insert(x, -1, 7.0),
    "insert column": lambda x: np.insert(x.reshape(2, 3), 1, x[:2] * 2, axis=1),
    "insert columns": lambda x: np.insert(x.reshape(2, 3), [0, 2], x[:2] * 2, axis=1),
    "insert block": lambda x: np.insert(x.reshape(2, 3), 1, x[:4].reshape(2, 2), axis=1),
    "insert row": lambda x: np.insert(x.reshape(2, 3), 2, x[3:] + 1, axis=0),
    "insert flattened": lambda x: np.insert(x.reshape(2, 3), 3, x[:2] * 2),
    "resize": lambda x: np.resize(x, 9),
    "resize 2-D": lambda x: np.resize(x.reshape(2, 3), (4, 4)),
    "put": _put,
    "put wrap": _put_wrap,
    "putmask": _putmask,
    "logspace": lambda x: np.logspace(x[0], x[1], 5),
    "logspace base": lambda x: np.logspace(0, 1, 4, base=np.abs(x[2]) + 1, endpoint=False),
    "geomspace": lambda x: np.geomspace(np.abs(x[0]) + 1, np.abs(x[1]) + 2, 5),
    "geomspace open": lambda x: np.geomspace(np.abs(x[0]) + 1, np.abs(x[1]) + 2, 4,
                                             endpoint=False),
    "tensorsolve": lambda x: np.linalg.tensorsolve(
        np.eye(6).reshape(2, 3, 6) * 2 + np.outer(x, x).reshape(2, 3, 6) * 0.1, x.reshape(2, 3)),
    "tensorinv": lambda x: np.linalg.tensorinv((np.outer(x, x) + 5 * np.eye(6)).reshape(2, 3, 6)),
    "interp period": lambda x: np.interp(np.linspace(-100, 720, 9),
                                         [350, 10, 50, 120, 200, 290], x, period=360),
    "apply_over_axes": lambda x: np.apply_over_axes(np.sum, x.reshape(2, 3), [1]),
    "apply_over_axes mean": lambda x: np.apply_over_axes(np.mean, x.reshape(1, 2, 3), [0, 2]),
    "histogram2d weights": lambda x: np.histogram2d(np.arange(6.0), np.arange(6.0) % 3,
                                                    bins=2, weights=x)[0],
    "histogramdd density": lambda x: np.histogramdd(
        np.stack([np.arange(6.0), np.arange(6.0) % 3], 1), bins=(3, 2), weights=x ** 2,
        density=True)[0],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_shapes_and_derivatives(name):
    f = CASES[name]
    seen = []

    def traced(x):
        out = f(x)
        seen.append(out.shape)
        return np.ravel(out)

    res = ha.jacobian(traced, X, backend="numpy")
    expected = f(X)
    assert seen[0] == expected.shape
    np.testing.assert_allclose(res.value, np.ravel(expected), rtol=1e-13, atol=1e-15)

    def g(x):
        out = np.ravel(f(x))
        return np.sum(out * np.linspace(0.5, 1.5, out.size))

    grad = ha.gradient(g, X, backend="numpy")
    np.testing.assert_allclose(grad.gradient, numerical_gradient(g, X), rtol=1e-6, atol=1e-8,
                               err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_compiled_plan_allocates_nothing(backend):
    def f(x):
        return (np.sum(np.choose([0, 1, 0, 1, 1, 0], [x, x ** 2]) ** 2)
                + np.sum(np.insert(x, [1, 4], x[:2] * 2) ** 2) + np.sum(_put(x) ** 2)
                + np.sum(np.geomspace(np.abs(x[0]) + 1, 3.0, 5))
                + np.sum(np.interp(np.linspace(0, 720, 9), [10, 50, 120, 200, 290, 350], x,
                                   period=360) ** 2))

    plan = ha.compile(f, X, backend=backend)
    out = ha.GradientResult(X)
    plan.gradient(X, out=out)
    np.testing.assert_allclose(out.value, f(X), rtol=1e-12)
    np.testing.assert_allclose(out.gradient, numerical_gradient(f, X), rtol=1e-6, atol=1e-8)
    if backend == "numba":
        assert_no_alloc(lambda: plan.gradient(X, out=out))


def test_positions_must_be_constants():
    with pytest.raises(NotImplementedError, match="traced `obj`"):
        ha.gradient(lambda x: np.sum(np.insert(x, np.argmax(x), 1.0)), X, backend="numpy")
    with pytest.raises(NotImplementedError, match="numpy.put of a traced value into a numpy"):
        ha.gradient(lambda x: (np.put(np.zeros(6), [0], x[0]), np.sum(x))[1], X,
                    backend="numpy")
    with pytest.raises(NotImplementedError, match="histogramdd of traced samples"):
        ha.gradient(lambda x: np.sum(np.histogram2d(x, x, weights=x)[0]), X, backend="numpy")
