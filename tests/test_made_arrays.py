"""Arrays ``f`` makes with numpy and fills with traced values, as numpy code is
written (hybridad/frontend/numpy_made.py): ``xx = np.zeros(n + 2); xx[1:-1] = x``,
``asarray([...traced...])`` with ``asarray`` imported from numpy before tracing,
element loops into ``np.empty``.  A first trace meets numpy converting a tracer
into its memory; ``f`` is traced again with the arrays it makes traced.
Gradients against finite differences on both backends; arrays ``f`` did not
make stay refused, and numpy's functions are numpy's again afterwards."""

import numpy as np
import pytest
from numpy import asarray, empty, zeros  # bound before any trace, as scipy's old code does

import hybridad as ha
from hybridad.errors import TracingError
from hybridad.testing import assert_no_alloc, numerical_gradient

X = np.random.default_rng(5).uniform(0.2, 1.3, 8)
NUMPY = {n: getattr(np, n) for n in ("zeros", "ones", "empty", "full", "zeros_like", "array",
                                     "asarray", "eye")}
BASE = np.linspace(0.0, 1.0, 8)


def padded_differences(x):  # a boundary-padded stencil (the first example)
    N = x.shape[0]
    xx = np.zeros(N + 2)
    xx[1:-1] = x
    return np.sum((xx[2:] - xx[:-2]) ** 2)


def bound_asarray(x):  # scipy-style: `from numpy import asarray` at the module's top
    y = asarray([0.0, x[0]] + list(x[1::2]))
    return np.sum(y ** 2 * np.arange(1, y.size + 1))


def element_loop(x):
    out = empty(x.size - 1)  # from numpy import empty
    for i in range(x.size - 1):
        out[i] = np.sin(x[i]) * x[i + 1]
    return np.sum(out ** 2)


def rows_of_ones(x):
    J = np.ones((3, x.size))
    J[0] = x ** 2
    J[1, :] = np.cos(x)
    J[2, ::2] = 0.5
    return np.sum(J @ x) + J[2, 1] * x[0]


def python_list_then_writes(x):
    y = np.array([0.0, 0.0, 0.0])
    y[0] = x[0]
    y[2] = x[1] * x[2]
    y[1] += np.sum(x[3:])
    return np.prod(y + 1.0)


def like_a_global_and_full(x):
    base = np.zeros_like(BASE)  # a new array shaped like a global
    base[::2] = x[::2] ** 2
    filled = np.full(x.shape, 2.0)
    filled[1::2] = np.exp(-x[1::2])
    return np.sum(base * filled) + base[0]


def helper_fills(buf, x):
    buf[:] = np.tanh(x)  # the write happens in a helper; the array was made by f
    return buf


def with_a_helper(x):
    b = zeros(x.size)
    return np.sum(helper_fills(b, x) * x)


def eye_with_diagonal(x):
    A = np.eye(x.size)
    A[np.arange(x.size), np.arange(x.size)] = x
    A[0, -1] = x[1]
    return np.sum(np.linalg.solve(A + 3 * np.eye(x.size), np.ones(x.size)))


def out_into_made_arrays(x):
    acc = np.zeros(x.size)
    acc += x ** 2  # np.add(acc, t, out=acc)
    t = np.tanh(x, out=np.empty(x.size))
    np.multiply(t, acc, out=acc)
    return np.sum(acc)


def full_of_traced_values(x):  # np.full / full_like with a traced fill, then written into
    a = np.full(3, np.sum(x))  # (numpy's own asarray of the fill: hybridad's on the retrace)
    b = np.full_like(x, x[1] * x[2])
    c = np.full((2, x.size), x)  # a fill broadcast to the shape
    d = np.full(2, x[0], dtype=np.float64)  # (dtype given: numpy's copyto into its own array)
    a[0] = x[3]
    return np.sum(a ** 2) + np.sum(b * x) + np.sum(c[1] * c[0]) + np.sum(d)


def copied_into(x):  # np.copyto into an array f made, where= too
    a = np.zeros(x.size)
    np.copyto(a, np.tanh(x))
    b = np.ones(x.size)
    np.copyto(b, x ** 2, where=x > 0.7)
    return np.sum(a * b)


def function_out_into_made_arrays(x):  # a numpy function's out= (not a ufunc's): reductions,
    s = np.zeros(2)  # np.dot, methods
    np.sum(x.reshape(2, -1), axis=1, out=s)
    m = np.empty(())
    np.max(x, out=m)
    c = np.empty((2, 2))
    np.dot(x[:4].reshape(2, 2), x[4:8].reshape(2, 2), out=c)
    v = np.zeros(2)
    x.reshape(2, -1).mean(axis=1, out=v)
    return np.sum(np.sin(s)) + 2.0 * m + np.sum(c ** 2) + np.sum(v * s)


FUNCTIONS = [out_into_made_arrays, padded_differences, bound_asarray, element_loop, rows_of_ones,
             python_list_then_writes, like_a_global_and_full, with_a_helper, eye_with_diagonal,
             full_of_traced_values, copied_into, function_out_into_made_arrays]


def _numpy_is_numpys():
    import sys

    mod = sys.modules[__name__]
    return all(getattr(np, n) is f for n, f in NUMPY.items()) and \
        mod.asarray is NUMPY["asarray"] and mod.zeros is NUMPY["zeros"] and \
        mod.empty is NUMPY["empty"]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("f", FUNCTIONS, ids=lambda f: f.__name__)
def test_gradient_against_finite_differences(f, backend):
    if backend == "numba" and f not in (padded_differences, element_loop):
        pytest.skip("numba: two of them (the same tracing; codegen is the backends' own)")
    plan = ha.compile(f, X, backend=backend)
    for x in (X, X[::-1].copy() * 1.1):  # the plan serves other values, not baked ones
        res = plan.gradient(x)
        assert float(res.value) == pytest.approx(float(f(x)), rel=1e-12)
        np.testing.assert_allclose(res.gradient, numerical_gradient(f, x), rtol=1e-6,
                                   atol=1e-8)
    assert _numpy_is_numpys()


def test_repeat_calls_allocate_nothing():
    plan = ha.compile(padded_differences, X)
    assert_no_alloc(plan.gradient, X, out=ha.GradientResult(X))


def test_ha_gradient_and_hessian():
    got = ha.gradient(rows_of_ones, X).gradient
    np.testing.assert_allclose(got, numerical_gradient(rows_of_ones, X), rtol=1e-6, atol=1e-8)
    H = ha.hessian(padded_differences, X).hessian
    G = np.stack([numerical_gradient(lambda x, i=i: ha.gradient(padded_differences, x)
                                     .gradient[i], X) for i in range(X.size)])
    np.testing.assert_allclose(H, G, rtol=1e-5, atol=1e-6)


GLOBAL = np.zeros(8)


def into_a_global(x):
    GLOBAL[:] = x
    return np.sum(GLOBAL ** 2)


def into_a_captured_copy_of_nothing(x):
    view = BASE  # not made by f: the global itself
    view[1] = x[0]
    return np.sum(view)


def copied_into_a_global(x):
    np.copyto(GLOBAL, x)
    return np.sum(GLOBAL ** 2)


def summed_into_a_global(x):
    np.sum(x.reshape(2, -1), axis=1, out=GLOBAL[:2])
    return np.sum(GLOBAL ** 2)


@pytest.mark.parametrize("f", [into_a_global, into_a_captured_copy_of_nothing,
                               copied_into_a_global, summed_into_a_global],
                         ids=lambda f: f.__name__)
def test_arrays_f_did_not_make_stay_refused(f):
    before = (GLOBAL.copy(), BASE.copy())
    with pytest.raises(TracingError, match="not made inside f"):
        ha.gradient(f, X)
    np.testing.assert_array_equal(GLOBAL, before[0])
    np.testing.assert_array_equal(BASE, before[1])
    assert _numpy_is_numpys()


def test_functions_that_need_no_second_trace_trace_once(monkeypatch):
    from hybridad.frontend import numpy_made

    calls = []
    real = numpy_made._arrays_made_traced
    monkeypatch.setattr(numpy_made, "_arrays_made_traced",
                        lambda ns, kinds=(): calls.append(sorted(kinds)) or real(ns, kinds))
    ha.gradient(lambda x: np.sum(np.zeros_like(x) + x ** 2), X)
    assert calls == []
    ha.compile(padded_differences, X, backend="numpy")
    assert calls == [[]]  # (numpy's and math's names in the user's module stay theirs)
    calls.clear()
    ha.compile(lambda x: np.sum(padded_differences(x)) * np.float64(np.sum(x)), X,
               backend="numpy")  # (a made array first, then a scalar type: a third trace)
    assert calls == [[], ["types"]]


# ---------------------------------------------------------------------------
# lists of traced values handed to numpy's functions (np.mean([a, b]))
# ---------------------------------------------------------------------------
from numpy import mean as bound_mean  # noqa: E402  (bound before any trace)
from numpy.linalg import norm as bound_norm  # noqa: E402

LISTS = {
    # numpy converts the list itself (no tracer at the top): the second trace
    "mean of scalars": lambda x: np.mean([x[0], x[1] + 2.0]),
    "std of a tuple": lambda x: np.std((x[0], x[1] ** 2, 1.0)),
    "var": lambda x: np.var([x[2], x[0] * x[1]]),
    "max, min, prod": lambda x: np.max((x[0], x[1])) + np.min([x[3], x[4], 0.2])
    + np.prod([x[0], x[5]]),
    "sum of arrays": lambda x: np.sum([x[:3], x[3:6] ** 2]),
    "median, percentile": lambda x: np.median([x[0], x[1], x[2]]) + np.percentile([x[3], x[4]],
                                                                                  30),
    "cumsum, diff, sort": lambda x: np.sum(np.cumsum([x[0], x[1], x[2]]) ** 2)
    + np.sum(np.diff([x[3], x[4] ** 2, x[5]]) ** 2) + np.sum(np.sort([x[6], x[7]]) * [1, 3]),
    "linalg.norm": lambda x: np.linalg.norm([x[0] - x[1], x[2] - x[3]])
    + np.linalg.norm([[x[4], 1.0], [x[5], x[6]]]),
    "names bound before tracing": lambda x: bound_mean([x[0], x[7]]) + bound_norm([x[1], x[2]]),
    "nested in a helper": lambda x: _pairwise([x[0], x[1], x[2]]),
    # a tracer at the top (dispatched) with a list beside it: the impls take the list
    "dot with a list": lambda x: np.dot([x[0], 1.0, x[1]], x[:3]),
    "ufunc with a list": lambda x: np.sum(np.maximum([x[0], 0.7], x[:2]) * np.add(x[2:4],
                                                                                 [x[5], 1.0])),
    "where with lists": lambda x: np.sum(np.where(x[:2] > 0.5, [x[3], 3.0], x[:2])),
    "operators with lists": lambda x: np.sum(x[:2] * [x[4], 2.0] - [1.0, x[6]]),
}


def _pairwise(values):
    return np.mean(values) * np.max(values)


@pytest.mark.parametrize("name, backend", [(name, "numpy") for name in sorted(LISTS)] + [
    (name, "numba") for name in ("mean of scalars", "linalg.norm", "ufunc with a list")])
def test_lists_of_traced_values(name, backend):
    """(numba: three of them -- the same tracing; codegen is the backends' own)"""
    f = LISTS[name]
    res = ha.gradient(f, X, backend=backend)
    assert float(res.value) == pytest.approx(float(f(X)), rel=1e-13)
    np.testing.assert_allclose(res.gradient, numerical_gradient(f, X), rtol=1e-6, atol=1e-8)
    assert _numpy_is_numpys()
    import sys

    mod = sys.modules[__name__]
    assert mod.bound_mean is np.mean and mod.bound_norm is np.linalg.norm


def test_lists_of_traced_scalars_hessian_and_no_allocation():
    """autograd's own cases (``np.mean([x, x + 2])`` of a float): values and
    derivatives; a plan of them allocates nothing per call."""
    for f, want in ((lambda x: np.mean([x, x + 2]), 1.0), (lambda x: np.std((x, x + 2)), 0.0),
                    (lambda x: np.var([x, x + 2]), 0.0)):
        assert ha.gradient(f, 0.0).gradient == want
    f = LISTS["std of a tuple"]
    H = ha.hessian(f, X).hessian
    G = np.stack([numerical_gradient(lambda x, i=i: ha.gradient(f, x).gradient[i], X)
                  for i in range(X.size)])
    np.testing.assert_allclose(H, G, rtol=1e-5, atol=1e-6)
    plan = ha.compile(LISTS["mean of scalars"], X, backend="numba")
    assert_no_alloc(plan.gradient, X, out=ha.GradientResult(X))
