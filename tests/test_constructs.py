"""Building arrays from traced values (hybridad/frontend/numpy_construct.py):
np.array / asarray / asanyarray / ascontiguousarray of tracers and of lists
mixing them with numbers and arrays, np.r_ / np.c_, np.append, np.select,
np.piecewise and np.einsum's interleaved form.  Values, shapes and dtypes
against numpy's, gradients against finite differences on both backends, and
the interception itself: numpy's own functions are back whenever no trace
runs, on every thread."""

import queue
import threading
import warnings

import numpy as np
import pytest
from conftest import assert_grad
from numpy import array as _bound_before_tracing  # keeps numpy's own function

import hybridad as ha
from hybridad import TracingError
from hybridad.frontend import numpy_construct
from hybridad.testing import assert_no_alloc, numerical_gradient

X = np.array([0.3, -1.2, 0.8, 1.7, -0.4, 0.9])  # away from every break point below
A2 = np.array([0.25, -0.75])  # a global array: read by reference
W3 = np.array([0.5, -1.0, 2.0])

_NUMPY = {"array": np._core.multiarray.array, "asarray": np._core.multiarray.asarray,
          "asanyarray": np._core.multiarray.asanyarray,
          "ascontiguousarray": np._core.multiarray.ascontiguousarray}
_CONCATENATOR = np.lib._index_tricks_impl.AxisConcatenator


def _numpy_is_numpys():
    """Whether numpy's constructors and np.r_'s __getitem__ are numpy's own."""
    getitem = _CONCATENATOR.__dict__["__getitem__"]
    return all(getattr(np, n) is f for n, f in _NUMPY.items()) and \
        getitem.__module__ == "numpy.lib._index_tricks_impl"


CONSTRUCTORS = [
    lambda x: np.asarray(x),
    lambda x: np.array([x[0], 2.0, x[1] ** 2]),
    lambda x: np.array([[x[0], x[1]], [1.0, x[2]]]),
    lambda x: np.array([x[:3], [1.0, 2.0, 3.0], x[3:] * 2]),
    lambda x: np.array((x[:2], A2, (x[2], 5))),
    lambda x: np.array(x.reshape(2, 3), ndmin=3),
    lambda x: np.array(x[4], ndmin=2),
    lambda x: np.ascontiguousarray(x[0]),
    lambda x: np.ascontiguousarray(x.reshape(2, 3).T),
    lambda x: np.asanyarray([[x[1]], [x[2]]]),
    lambda x: np.asarray([x[0], x[1] * x[2]], dtype=np.float64),
    lambda x: np.array(x * 3, dtype=np.int64),  # truncation: zero derivative
    lambda x: np.array([x[0] > 0, x[1] > 0, True]),
    lambda x: np.r_[x, 0:3, 5.0],
    lambda x: np.r_[x[0], x[1:3], [1.0, 2.0], -1:1:3j],
    lambda x: np.c_[x[:3], x[3:] ** 2],
    lambda x: np.c_[x.reshape(2, 3), A2],
    lambda x: np.r_["0,2", x[:3], x[3:]],
    lambda x: np.r_["-1", x.reshape(2, 3), np.ones((2, 1))],
    lambda x: np.r_["0,2,0", x[:3], [1.0, 2.0, 3.0]],
    lambda x: np.r_[x[2]],
    lambda x: np.c_[x[:3], 0:3, -1:1:3j],
    lambda x: np.r_[x[0]:x[3]:4j, 1.0],  # traced ends of a linspace
]

FUNCTIONS = [
    lambda x: np.append(x, [1.0, x[0]]),
    lambda x: np.append(x.reshape(2, 3), x.reshape(2, 3) ** 2, axis=0),
    lambda x: np.append(x.reshape(2, 3), [[7.0], [8.0]], axis=1),
    lambda x: np.append(x[0], 3),
    lambda x: np.select([x > 0.5, x < -0.5], [x ** 2, np.sin(x)], default=x * 0.1),
    lambda x: np.select([x > 0, x > 1], [x ** 3, 10.0]),
    lambda x: np.select([x[:3] > 0], [x[3:] ** 2], default=[1.0, x[0], 2.0]),
    lambda x: np.piecewise(x, [x < -0.5, x > 0.5],
                           [lambda v: v ** 3, lambda v: np.exp(v), lambda v: 2 * v]),
    lambda x: np.piecewise(x, [x < 0, x >= 0], [lambda v: -v, 1.5]),
    lambda x: np.piecewise(x, x > 0, [lambda v, a: a * v ** 2, 0.0], 3.0),
    lambda x: np.piecewise(x[1], [x[1] < 0, x[1] >= 0], [lambda v: v * v, lambda v: v]),
    lambda x: np.piecewise(x * 3, [x > 0, x > 1], [lambda v: v + 1, lambda v: v * v]),
    lambda x: np.einsum(x.reshape(2, 3), [0, 1], x.reshape(3, 2), [1, 2], [0, 2]),
    lambda x: np.einsum(x, [0], x, [0]),
    lambda x: np.einsum(x.reshape(2, 3), [Ellipsis, 1], W3, [1], [Ellipsis]),
    lambda x: np.einsum(x.reshape(2, 3), [27, 3]),  # implicit: sorted as numpy's letters
    lambda x: np.einsum(x.reshape(2, 3), [0, 1], x.reshape(2, 3), [0, 1], [1]),
]


def _objective(builders, seen):
    """sum_k sum(sin(builder_k(x)) * W_k), recording each result's shape and dtype."""
    def f(x):
        total = 0.0
        for k, build in enumerate(builders):
            r = build(x)
            if seen is not None:
                seen.append((np.shape(r), r.dtype))
            w = np.cos(np.arange(np.size(r)) + k).reshape(np.shape(r))
            total = total + np.sum(np.sin(r * 1.0) * w)
        return total

    return f


@pytest.mark.parametrize("builders", [CONSTRUCTORS, FUNCTIONS], ids=["constructors",
                                                                      "functions"])
def test_values_shapes_dtypes_and_gradients(builders):
    expected = [(np.shape(b(X)), np.asarray(b(X)).dtype) for b in builders]
    for k, b in enumerate(builders):  # values: every result as numpy's
        got = ha.gradient(lambda x, b=b: np.sum(np.asarray(b(x)) * 1.0), X,
                          backend="numpy").value
        np.testing.assert_allclose(got, np.sum(b(X) * 1.0), rtol=1e-13, err_msg=f"case {k}")
    seen = []
    assert_grad(_objective(builders, seen), (X,))  # value and gradient, both backends
    n = len(builders)
    wrong = [(k, s, e) for k, (s, e) in enumerate(zip(seen[:n], expected, strict=True))
             if s != e]
    assert not wrong, wrong  # (case, traced shape and dtype, numpy's)
    assert _numpy_is_numpys()


def test_object_semantics():
    """asarray returns a traced array itself; array copies; numpy scalars become
    0-d arrays; dtype= casts (copy=False refuses a cast, as numpy)."""
    def f(x):
        assert np.asarray(x) is x and np.asanyarray(x) is x
        assert np.ascontiguousarray(x) is x and np.array(x, copy=False) is x
        assert np.asarray(x, dtype=x.dtype) is x
        y = np.array(x)
        assert y is not x
        y += 1.0  # a copy: in place is fine, x is untouched
        s = x[0]
        assert isinstance(s, np.float64) and not isinstance(s, np.ndarray)
        a = np.asarray(s)
        assert isinstance(a, np.ndarray) and a.shape == () and a is not s
        z = np.asarray(x, dtype=np.float32)
        assert z.dtype == np.float32 and z is not x
        assert np.array([x[0], 1.0]).dtype == np.float64
        assert np.array([z[0], 1.0]).dtype == np.float64  # Python floats: float64, as numpy
        assert np.array([z[0], np.float32(1.0)]).dtype == np.float32
        assert np.array([z[0], 1]).dtype == np.float64
        assert np.array([x > 0, [True] * 6]).dtype == np.bool_
        with pytest.raises(TracingError, match="argument"):  # numpy would write into x
            v = np.asarray(x)
            v += 1.0
        return np.sum(y * y) + np.sum(x)

    res = ha.gradient(f, X, backend="numpy")
    np.testing.assert_allclose(res.gradient, 2 * (X + 1) + 1, rtol=1e-13)


def test_refused_and_numpy_errors():
    def run(f):
        return ha.gradient(f, X, backend="numpy")

    with pytest.raises(ValueError, match="Unable to avoid copy"):
        run(lambda x: np.sum(np.array(x, dtype=np.float32, copy=False)))
    with pytest.raises(ValueError, match="Unable to avoid copy"):
        run(lambda x: np.sum(np.array([x[0], 1.0], copy=False)))
    with pytest.raises(ValueError, match="inhomogeneous shape"):
        run(lambda x: np.sum(np.array([x, x[:2]])))
    with pytest.raises(NotImplementedError, match=r"np\.r_\['r'"):
        run(lambda x: np.sum(np.r_["r", x, x]))
    with pytest.raises(NotImplementedError, match=r"np\.c_\['c'"):
        run(lambda x: np.sum(np.c_["c", x]))
    with pytest.raises(ValueError, match="unknown special directive"):
        run(lambda x: np.sum(np.r_["a,b", x]))
    with pytest.raises(ValueError, match="special directives must be the first entry"):
        run(lambda x: np.sum(np.r_[x, "0"]))
    with pytest.raises(ValueError, match="elementwise"):
        run(lambda x: np.sum(np.piecewise(x, [x > 0], [lambda v: np.outer(v, v)])))
    with pytest.raises(ValueError, match="either 1 or 2 functions"):
        run(lambda x: np.sum(np.piecewise(x, [x > 0], [1.0, 2.0, 3.0])))
    with pytest.raises(TypeError, match="invalid entry 0 in condlist"):
        run(lambda x: np.sum(np.select([x], [x])))
    with pytest.raises(ValueError, match="same length"):
        run(lambda x: np.sum(np.select([x > 0], [x, x])))
    with pytest.raises(ValueError, match=r"valid range \[0, 52\)"):
        run(lambda x: np.einsum(x, [52]))
    with pytest.raises(TypeError, match="integer or an ellipsis"):
        run(lambda x: np.einsum(x, ["i"]))
    # a name of the user's module bound before tracing is numpy's own: the tracer
    # refuses to become memory, and f is traced again with that name served
    # (tests/test_made_arrays.py); numpy's own function is back after
    want = run(lambda x: np.sum(np.array([x[0], x[1]]) ** 2))
    got = run(lambda x: np.sum(_bound_before_tracing([x[0], x[1]]) ** 2))
    np.testing.assert_array_equal(got.gradient, want.gradient)
    assert _bound_before_tracing is np._core.multiarray.array
    # a traced bound of a range has no value to count with
    with pytest.raises(TracingError):
        run(lambda x: np.sum(np.r_[0:x[0]]))
    assert _numpy_is_numpys()


def test_hessian():
    def f(x):
        a = np.array([x[0] * x[1], x[2] ** 2, 1.0])
        b = np.r_[x, x[0] ** 3]
        c = np.piecewise(x, [x > 0], [lambda v: v ** 3, lambda v: np.sin(v)])
        d = np.select([x > 0.5], [x * x[1]], default=x ** 2)
        return np.sum(a ** 2) + np.sum(b * b[::-1]) + np.sum(c) + np.sum(d)

    res = ha.hessian(f, X)
    np.testing.assert_allclose(res.gradient, numerical_gradient(f, X), rtol=1e-6, atol=1e-8)
    grad = ha.compile(f, X, backend="numpy")
    H = np.stack([numerical_gradient(lambda x, i=i: grad.gradient(x).gradient[i], X)
                  for i in range(X.size)])
    np.testing.assert_allclose(res.hessian, H, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(res.hessian, res.hessian.T, rtol=1e-12, atol=1e-12)


def test_repeated_compiled_calls_allocate_nothing():
    def f(x):
        v = np.array([[x[0], 2.0 * x[1]], [x[2] ** 2, 1.0]])
        w = np.r_[x[:2], 0.5, x[3:]]
        return np.sum(v @ v) + np.sum(np.select([w > 0], [w ** 2], default=-w)) + \
            np.einsum(x, [0], x, [0])

    plan = ha.compile(f, X)
    res = ha.GradientResult(X)
    assert_no_alloc(plan.gradient, X, out=res, n=50)
    np.testing.assert_allclose(res.value, f(X), rtol=1e-13)
    np.testing.assert_allclose(res.gradient, numerical_gradient(f, X), rtol=1e-6, atol=1e-8)


def test_numpy_functions_are_numpys_when_no_trace_runs():
    inside = []

    def f(x):
        inside.append(_numpy_is_numpys())
        return np.sum(np.asarray([x[0], x[1]]) ** 2)

    assert _numpy_is_numpys()
    ha.gradient(f, X, backend="numpy")
    assert inside == [False] and _numpy_is_numpys()
    with pytest.raises(ZeroDivisionError):  # a trace that fails restores them too
        ha.gradient(lambda x: np.sum(np.array([x[0], 1 / 0])), X, backend="numpy")
    assert _numpy_is_numpys() and not numpy_construct.installed()
    other = []
    t = threading.Thread(target=lambda: other.append(_numpy_is_numpys()))
    t.start()
    t.join()
    assert other == [True]
    # outside a trace, numpy's functions behave as numpy's
    assert np.array([1, 2]).dtype == np.int64 and np.r_[1:3, 7].tolist() == [1, 2, 7]


def test_a_thread_keeps_tracing_while_another_ends_its_trace():
    """Thread A is inside its trace when thread B's trace begins and ends: A's
    np.array still reaches hybridad, and numpy's functions come back only after
    A ends."""
    # (library objects: the plan's guards watch them by identity only)
    a_inside, b_done, during = threading.Event(), threading.Event(), queue.Queue()
    errors = []

    def fa(x):
        a_inside.set()
        assert b_done.wait(60)
        during.put(_numpy_is_numpys())
        return np.sum(np.array([x[0], x[1] * 2.0, 1.0]) ** 2) + np.sum(np.r_[x[2], 3.0] ** 2)

    def run_a():
        try:
            plan = ha.compile(fa, X, backend="numpy")
            during.put(_numpy_is_numpys())
            g = plan.gradient(X).gradient
            np.testing.assert_allclose(g[:3], [2 * X[0], 8 * X[1], 2 * X[2]], rtol=1e-13)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=run_a)
    t.start()
    assert a_inside.wait(60)
    plan_b = ha.compile(lambda x: np.sum(np.asarray([x[3], 1.0]) ** 3), X, backend="numpy")
    assert not _numpy_is_numpys()  # A still traces
    b_done.set()
    t.join(120)
    assert not errors, errors
    assert [during.get_nowait() for _ in range(2)] == [False, True]
    assert _numpy_is_numpys()
    np.testing.assert_allclose(plan_b.gradient(X).gradient[3], 3 * X[3] ** 2, rtol=1e-13)


def test_nested_traces_count_once():
    """A trace inside a trace on one thread (a gradient of a function that
    builds another plan is refused, but Trace objects nest) counts once."""
    from hybridad.core.trace import Trace

    with Trace():
        with Trace():
            assert numpy_construct.installed()
        assert numpy_construct.installed() and not _numpy_is_numpys()
    assert not numpy_construct.installed() and _numpy_is_numpys()


def test_library_callers_keep_numpys_behaviour():
    """numpy's and scipy's own code calling np.asarray on a tracer is not served by
    the np.array wrappers: scipy's function then runs on the values as a host call
    (tests/test_host_calls.py), and a derivative through it is refused naming it and
    the user's line."""
    sp = pytest.importorskip("scipy.special")
    if getattr(sp, "lqn", None) is None:
        pytest.skip("scipy.special.lqn (which calls np.asarray through the module) is gone")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # (lqn is deprecated)
        with pytest.raises(NotImplementedError,
                           match=r"scipy\.special\.lqn \(at test_constructs\.py:\d+"):
            ha.gradient(lambda x: np.sum(sp.lqn(2, x[0])[0]), np.full(3, 0.5), backend="numpy")
        res = ha.gradient(lambda x, y: np.sum(sp.lqn(2, y[0])[0]) * np.sum(x), np.ones(2),
                          np.full(3, 0.5), backend="numpy")
        np.testing.assert_allclose(res.value, 2 * np.sum(sp.lqn(2, 0.5)[0]), rtol=1e-14)


def test_numba_compiles_while_the_wrappers_are_in():
    """numba compiles njit code calling np.asarray (its own np.broadcast_to
    does) while a trace runs -- here inside the traced function, as another
    thread's compile would -- and after it."""
    numba = pytest.importorskip("numba")

    @numba.njit
    def during(a):
        return np.broadcast_to(np.asarray(a), (3, 2)).sum() + np.ascontiguousarray(a)[1]

    @numba.njit
    def after(a):
        return np.asarray(a).sum() + np.array((1.0, 2.0)).sum()

    got = queue.Queue()

    def f(x):
        got.put((_numpy_is_numpys(), during(np.arange(2.0))))
        return np.sum(np.array([x[0], 1.0]) ** 2)

    res = ha.gradient(f, X, backend="numpy")
    assert got.get_nowait() == (False, 4.0)
    assert res.gradient[0] == 2 * X[0] and _numpy_is_numpys()
    assert after(np.arange(3.0)) == 6.0
    assert during(np.arange(2.0, dtype=np.float32)) == 4.0
