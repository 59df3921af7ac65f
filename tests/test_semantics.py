"""numpy's object semantics while tracing: which results are numpy scalars
(isinstance), in-place operators and aliasing, value-dependent indices, how
arguments are converted (nested lists), ndarray subclasses and dtypes hybridad
does not trace -- each either exactly numpy's or a clear error naming it."""

import copy
import os
import tempfile

import numpy as np
import pytest

import hybridad as ha
import hybridad.scipy as hs
from hybridad import TracingError
from hybridad.testing import numerical_gradient

pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix

X = np.array([0.3, -1.2, 0.8, 2.0])
X2 = np.arange(12.0).reshape(3, 4) / 7.0 - 0.6


def traced(f, *args, backend="numpy", argnums=0):
    """The value and gradient of ``f``; the value checked against plain numpy."""
    res = ha.gradient(f, *args, backend=backend, argnums=argnums)
    np.testing.assert_allclose(float(res.value), float(f(*copy.deepcopy(args))), rtol=1e-12)
    return res


# ----------------------------------------------------------------------------
# numpy scalars and arrays: isinstance answers as with numpy
# ----------------------------------------------------------------------------

RESULTS = {
    "x[0]": lambda x: x[0],
    "x[-1]": lambda x: x[-1],
    "x2[1, 2]": lambda x: x.reshape(2, 2)[1, 1],
    "x2[1]": lambda x: x.reshape(2, 2)[1],
    "x[...]": lambda x: x[...],
    "x[1:]": lambda x: x[1:],
    "x[[0, 2]]": lambda x: x[[0, 2]],
    "sum": lambda x: np.sum(x),
    "sum axis": lambda x: np.sum(x.reshape(2, 2), axis=0),
    "x.sum()": lambda x: x.sum(),
    "mean": lambda x: np.mean(x),
    "max": lambda x: x.max(),
    "argmax": lambda x: x.argmax(),
    "x @ x": lambda x: x @ x,
    "dot": lambda x: np.dot(x, x),
    "norm": lambda x: np.linalg.norm(x),
    "x[0] + 1": lambda x: x[0] + 1,
    "2.0 * x[0]": lambda x: 2.0 * x[0],
    "np.float64 * x[0]": lambda x: np.float64(2.0) * x[0],
    "-x[0]": lambda x: -x[0],
    "+x[0]": lambda x: +x[0],
    "abs(x[0])": lambda x: abs(x[0]),
    "sin(x[0])": lambda x: np.sin(x[0]),
    "x[0] > 0": lambda x: x[0] > 0,
    "all": lambda x: np.all(x > 0),
    "where 0-d": lambda x: np.where(x[0] > 0, x[0], 0.0),
    "copy 0-d": lambda x: np.copy(x[0]),
    "x[0].astype": lambda x: x[0].astype(np.float32),
    "x.astype()[0]": lambda x: x.astype(np.float32)[0],
    "sum float32": lambda x: np.sum(x.astype(np.float32)),
    "sum bool": lambda x: np.sum(x > 0),
    "squeeze": lambda x: np.squeeze(x[:1]),
    "reshape 0-d": lambda x: x[:1].reshape(()),
    "var": lambda x: x.var(),
    "median": lambda x: np.median(x),
    "trace": lambda x: np.trace(x.reshape(2, 2)),
    "round": lambda x: np.round(x[0], 2),
    "builtin round": lambda x: round(x[0], 2),
    "x[0] ** 2": lambda x: x[0] ** 2,
}


@pytest.mark.parametrize("name", sorted(RESULTS))
def test_result_class_is_numpys(name):
    expr = RESULTS[name]
    want = type(expr(X.copy()))
    seen = []

    def f(x):
        r = expr(x)
        seen.append((r.__class__, isinstance(r, float), isinstance(r, np.ndarray),
                     isinstance(r, np.generic), np.isscalar(r)))
        return np.sum(x)

    ha.gradient(f, X, backend="numpy")
    cls, is_float, is_array, is_generic, is_scalar = seen[0]
    assert cls is want
    assert (is_float, is_array, is_generic, is_scalar) == (
        issubclass(want, float), issubclass(want, np.ndarray), issubclass(want, np.generic),
        np.isscalar(expr(X.copy())))


def test_isinstance_branches_take_numpys_path():
    def f(x):
        v = x[0]  # a numpy scalar: a float
        if isinstance(v, float):
            return v * 10.0 + np.sum(x)
        return np.sum(x)

    assert float(traced(f, X).value) == pytest.approx(f(X))
    res = traced(lambda x: np.sum(x) if isinstance(x, np.ndarray) else 0.0 * x[0], X)
    np.testing.assert_array_equal(res.gradient, np.ones(4))


def test_type_is_still_the_tracer():
    from hybridad.core.tracer import Tracer

    def f(x):
        assert type(x) is Tracer and isinstance(x, Tracer) and isinstance(x[0], Tracer)
        assert isinstance(x, np.ndarray) and not isinstance(x[0], np.ndarray)
        return np.sum(x)

    ha.gradient(f, X, backend="numpy")


def test_str_and_print_show_the_traced_value_and_a_format_spec_is_refused():
    """``print(x)``, ``str(x)``, ``f"{x}"`` and ``"%s" % x`` inside ``f`` (a
    debugging print) show what the value is, as ``repr`` does, and the
    function runs; a format spec needs the value and is refused."""
    seen = []
    for conv in (str, lambda t: f"{t}", print, lambda t: "%s" % t):
        seen.clear()
        res = ha.gradient(lambda x: (seen.append(conv(x[0])), np.sum(x))[1], X,
                          backend="numpy")
        np.testing.assert_array_equal(res.gradient, np.ones_like(X))
        assert seen and (seen[0] is None or seen[0].startswith("Tracer("))
    with pytest.raises(TracingError, match="format"):
        ha.gradient(lambda x: (format(x[0], ".2f"), np.sum(x))[1], X, backend="numpy")

    def f(x):
        assert repr(x[0]).startswith("Tracer(") and "float64" in repr(x[0])
        return np.sum(x)

    ha.gradient(f, X, backend="numpy")


# ----------------------------------------------------------------------------
# in-place operators and methods
# ----------------------------------------------------------------------------


def _aliases(x):
    y = x * 2.0
    z = y  # the same array: sees the update
    items = [y]
    y += 1.0
    y *= x
    return np.sum(z) + np.sum(items[0] ** 2)


def _copy_unaffected(x):
    y = x * 2.0
    z = y.copy()
    w = copy.copy(y)
    y -= 5.0
    return np.sum(z) + np.sum(w) + np.sum(y)


def _scalar_rebinds(x):
    s = np.sum(x)  # a numpy scalar: immutable
    t = s
    s += 1.0
    s *= 3.0
    u = x[0]
    v = u
    u -= 2.0
    return t + s + u * v


def _base_gone(x):
    y = (x * 2.0).reshape(2, 2)  # a view of a temporary nobody else holds
    y += 1.0
    return np.sum(y * y)


def _float32_stays(x):
    y = x.astype(np.float32)
    y += x  # float64 operand: computed, then cast to y's float32 (same_kind)
    return np.sum(y.astype(np.float64)) + float(y.dtype == np.float32)


def _sort_in_place(x):
    y = x * 1.0
    z = y
    y.sort()
    return np.sum(z * np.arange(4.0))


def _fill_in_place(x):
    y = x * 1.0
    y.fill(x[1])
    return np.sum(y * np.arange(4.0))


def _matmul_in_place(x):
    y = x.reshape(2, 2) * 1.0
    y @= np.array([[1.0, 2.0], [0.5, -1.0]])
    return np.sum(y * y)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("f", [_aliases, _copy_unaffected, _scalar_rebinds, _base_gone,
                               _sort_in_place, _fill_in_place,
                               _matmul_in_place], ids=lambda f: f.__name__)
def test_in_place_as_numpy(f, backend):
    res = traced(f, X, backend=backend)
    np.testing.assert_allclose(res.gradient, numerical_gradient(f, X), atol=1e-6)


def test_in_place_keeps_the_dtype():
    for backend in ("numpy", "numba"):
        traced(_float32_stays, X, backend=backend)  # value (float32: no finite differences)


def _argument_in_place(x):
    y = x  # the caller's array: numpy would modify it
    y += 1.0
    return np.sum(x)


def _view_then_base(x):
    y = x * 2.0
    v = y[1:]
    y += 1.0  # numpy: v changes too
    return np.sum(v)


def _view_in_place(x):
    y = x * 2.0
    v = y[1:]
    v += 1.0  # numpy: y changes too
    return np.sum(y)


def _reshape_view(x):
    y = x * 2.0
    r = y.reshape(2, 2)
    r *= 3.0
    return np.sum(y)


def _sort_argument(x):
    x.sort()
    return np.sum(x * np.arange(4.0))


def _view_of_argument(x):
    v = x[:2]
    v += 1.0
    return np.sum(x)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("f", [_view_then_base, _view_in_place, _reshape_view])
def test_in_place_writes_reach_views_as_in_numpy(f, backend):
    x = np.array([0.3, -1.2, 2.0, 0.7])
    res = ha.gradient(f, x, backend=backend)
    np.testing.assert_allclose(float(res.value), float(f(x.copy())), rtol=1e-14)
    np.testing.assert_allclose(res.gradient, numerical_gradient(f, x), rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("f", [_argument_in_place, _sort_argument, _view_of_argument],
                         ids=lambda f: f.__name__)
def test_in_place_the_trace_cannot_follow_is_refused(f):
    with pytest.raises(TracingError, match="on a traced array at .*test_semantics.py"):
        ha.gradient(f, X, backend="numpy")


def test_in_place_errors_are_numpys():
    def int_target(x):
        k = (x > 0).astype(np.int64)
        k += 0.5  # numpy: cannot cast float64 to int64 under same_kind
        return np.sum(x)

    def grows(x):
        y = x[:2] * 1.0
        y += x.reshape(2, 2)  # numpy: non-broadcastable output operand
        return np.sum(y)

    def read_only(x):
        b = np.broadcast_to(x[0] * 1.0, (4,))
        b += 1.0  # numpy: a read-only view
        return np.sum(b)

    def diagonal_read_only(x):
        d = x.reshape(2, 2).diagonal()
        d += 1.0  # numpy: a read-only view
        return np.sum(d)

    def into_numpy_array(x):
        a = _OUT
        a += x  # a numpy array f did not make cannot hold traced values
        return np.sum(a)

    for f, err, match in [(int_target, TypeError, "Cannot cast"),
                          (grows, ValueError, "non-broadcastable"),
                          (read_only, ValueError, "read-only"),
                          (diagonal_read_only, ValueError, "read-only"),
                          (into_numpy_array, TracingError, "out=")]:
        if err is not TracingError:
            with pytest.raises(err):  # numpy raises it too
                f(X.copy())
        with pytest.raises(err, match=match):
            ha.gradient(f, X, backend="numpy")


# ----------------------------------------------------------------------------
# value-dependent indices, bitwise operators
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("use", [
    lambda x, i: x[i], lambda x, i: x[i:], lambda x, i: np.take(x, i),
    lambda x, i: x[[i, 0]], lambda x, i: range(i), lambda x, i: int(i)],
    ids=["index", "slice", "take", "list", "range", "int"])
def test_value_dependent_index_takes_the_call_s_value(use, request):
    """A slice bound, a list of indices, ``range`` or ``int()`` computed from
    values takes the traced call's value, guarded (hybridad.core.decisions):
    a call whose argmax differs runs another specialization, never the old
    one.  An integer index into a traced array (``x[i]``, ``np.take(x, i)``)
    is gathered where the plan runs, one graph for every argmax (only its
    range is guarded): no specialization."""
    def f(x):
        r = use(x, np.argmax(x))
        if isinstance(r, (range, int)):  # a number: it scales x[0]
            return (len(r) if isinstance(r, range) else r) * x[0] + np.sum(x ** 2)
        return np.sum(r * x[0]) + np.sum(x ** 2)

    plan = ha.compile(f, X, backend="numpy")
    for x in (X, X[::-1].copy(), np.array([5.0, 0.1, 0.2, 0.3])):
        res = plan.gradient(x)
        assert float(res.value) == pytest.approx(f(x), rel=1e-13)
        np.testing.assert_allclose(res.gradient, numerical_gradient(f, x), rtol=1e-6,
                                   atol=1e-8)
    gathered = request.node.callspec.id in ("index", "take")
    assert (len(plan._specializations) == 0) if gathered else \
        (1 <= len(plan._specializations) <= 2)


def test_argmax_values_used_in_arithmetic():
    f = lambda x: np.sum(x) + 0.25 * x.argmax() + np.sum(x.reshape(2, 2).argmin(axis=1))  # noqa: E731
    for backend in ("numpy", "numba"):
        traced(f, np.array([0.3, np.nan, 0.8, np.nan]), backend=backend)  # first NaN
        traced(f, np.array([1.0, 3.0, 3.0, -1.0]), backend=backend)  # first of ties


def test_bitwise_operators():
    f = lambda x: np.sum(np.where((x > 0) & ~(x > 1) | (x < -1) ^ False, x, 0.0))  # noqa: E731
    traced(f, X)
    with pytest.raises(NotImplementedError, match="bitwise_and of integer"):
        ha.gradient(lambda x: np.sum(x) + np.sum((x > 0).astype(np.int64) & 3), X,
                    backend="numpy")
    with pytest.raises(NotImplementedError, match="invert of integer"):
        ha.gradient(lambda x: np.sum(x) + np.sum(~(x > 0).astype(np.int8)), X, backend="numpy")
    with pytest.raises(TypeError, match="bitwise_and"):  # as numpy: no float loop
        ha.gradient(lambda x: np.sum(x & x), X, backend="numpy")


# ----------------------------------------------------------------------------
# arguments: lists of numbers, ndarray subclasses, dtypes
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_nested_list_argument_is_one_array(backend):
    rows = [[1.0, 2.0], [3.0, 4.0]]

    def f(x):
        assert isinstance(x, np.ndarray) and x.shape == (2, 2)
        return np.sum((x + 1) ** 2) + x[1, 0] * x[0, 1]

    res = ha.gradient(f, rows, backend=backend)
    a = np.asarray(rows)
    assert float(res.value) == pytest.approx(f(a))
    np.testing.assert_allclose(res.gradient, 2 * (a + 1) + np.array([[0, 3.0], [2.0, 0]]))
    out = ha.GradientResult(rows)
    assert out.gradient.shape == (2, 2)
    ha.gradient(f, rows, out=out, backend=backend)
    np.testing.assert_allclose(out.gradient, res.gradient)
    res = ha.gradient(lambda x: np.sum(x * x), ((1, 2), (3, 4)), backend=backend)  # ints
    np.testing.assert_allclose(res.gradient, [[2.0, 4.0], [6.0, 8.0]])


def test_lists_holding_arrays_or_ragged_are_containers():
    res = ha.gradient(lambda x: x[1:][0] * 3.0, [[1.0], 2.0, 1.5], backend="numpy")
    assert isinstance(res.gradient, list) and len(res.gradient) == 3
    np.testing.assert_allclose(res.gradient[1], 3.0)
    res = ha.gradient(lambda p: np.sum(p[0] * p[1]), [np.array([1.0, 2.0]), np.array([3.0,
                                                                                     4.0])])
    assert isinstance(res.gradient, list)
    np.testing.assert_allclose(res.gradient[0], [3.0, 4.0])
    res = ha.gradient(lambda x, c: np.sum(x * np.asarray(c)), X[:2], [[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_allclose(res.gradient, [4.0, 6.0])  # a constant nested list: as given


class _Plain(np.ndarray):  # no overrides: numpy computes with it as with an ndarray
    pass


class _Odd(np.ndarray):
    def __mul__(self, other):
        return np.add(self, other)


def _masked(a):
    return np.ma.array(a, mask=np.arange(a.size).reshape(a.shape) % 3 == 0)


SUBCLASSES = {"masked": _masked, "matrix": lambda a: np.matrix(a), "odd": lambda a: a.view(_Odd),
              "recarray": lambda a: a.view(np.recarray)}


@pytest.mark.parametrize("kind", sorted(SUBCLASSES))
def test_subclass_arguments_are_refused(kind):
    make = SUBCLASSES[kind]
    a = make(X2.copy())
    f = lambda x, c: np.sum(x * c) + np.sum(x * x)  # noqa: E731
    name = "'x'"
    entry_points = [
        lambda: ha.gradient(f, a, X2),
        lambda: ha.gradient(f, X2, a),  # a constant argument
        lambda: ha.compile(f, a, X2),
        lambda: ha.hessian(f, a, X2),
        lambda: ha.jacobian(lambda x, c: x * c, a, X2),
        lambda: ha.hvp(f, a, X2, X2),
        lambda: hs.minimize(lambda x, c: np.sum(x * c) + np.sum(x * x), X2, a,
                            method="BFGS"),
    ]
    for k, call in enumerate(entry_points):
        with pytest.raises(TypeError, match="ndarray subclass") as info:
            call()
        assert (name if k in (0, 2, 3, 4, 5) else "'c'") in str(info.value)
    with pytest.raises(TypeError, match="x0 is a .*ndarray subclass"):
        hs.minimize(lambda x: np.sum(x * x), a, method="BFGS")


@pytest.mark.parametrize("kind", sorted(SUBCLASSES))
def test_captured_subclass_is_refused(kind):
    c = SUBCLASSES[kind](X2.copy())

    def f(x):
        return np.sum(x * c)

    with pytest.raises(TypeError, match="used in the traced function at .*ndarray subclass"):
        ha.gradient(f, X2, backend="numpy")


def test_masked_and_matrix_were_silently_wrong():
    # the cases: numpy's answers differ from the plain-array trace
    m = _masked(X2.copy())
    assert float(np.sum(m * m)) != pytest.approx(float(np.sum(X2 * X2)))
    M = np.matrix([[1.0, 2.0], [3.0, 0.0]])
    assert float(np.sum(M * M)) != pytest.approx(float(np.sum(np.asarray(M) ** 2)))
    for a in (m, M):
        with pytest.raises(TypeError, match="argument 'x' is a numpy"):
            ha.gradient(lambda x: np.sum(x * x), a)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_plain_subclasses_and_memmap_work(backend, tmp_path):
    mm = np.memmap(tmp_path / "m.dat", dtype=np.float64, mode="w+", shape=X2.shape)
    mm[...] = X2
    for a in (mm, X2.copy().view(_Plain)):
        def g(x, a=a):
            return np.sum(np.sin(x) * a)

        res = ha.gradient(g, X2, backend=backend)
        np.testing.assert_allclose(res.gradient, np.cos(X2) * X2, rtol=1e-13)
        res = ha.gradient(lambda x, c: np.sum(np.sin(x) * c), a, X2, backend=backend)
        np.testing.assert_allclose(res.gradient, np.cos(X2) * X2, rtol=1e-13)
        out = ha.DiffResult(np.zeros(()), np.zeros_like(X2).view(type(a)) if type(a) is _Plain
                            else np.memmap(tmp_path / "g.dat", dtype=np.float64, mode="w+",
                                           shape=X2.shape))
        ha.gradient(lambda x: np.sum(x ** 3), X2, out=out, backend=backend)
        np.testing.assert_allclose(out.derivs[0], 3 * X2 ** 2, rtol=1e-13)


@pytest.mark.parametrize("kind", ["masked", "matrix", "odd"])
def test_subclass_result_buffers_are_refused_untouched(kind):
    make = SUBCLASSES[kind]
    grad = make(np.full_like(X2, 7.0))
    outs = [ha.DiffResult(np.zeros(()), grad)]
    if kind != "matrix":  # (a matrix is never 0-d)
        outs.append(ha.DiffResult(make(np.zeros((1, 1))).reshape(()), np.zeros_like(X2)))
    for out in outs:
        for backend in ("numpy", "numba"):
            with pytest.raises(ValueError, match="ndarray subclass"):
                ha.gradient(lambda x: np.sum(x * x), X2, out=out, backend=backend)
        assert float(np.asarray(out.value)) == 0.0
    np.testing.assert_array_equal(np.asarray(grad), 7.0)


UNSUPPORTED = [np.float16, np.longdouble, object, "datetime64[s]", "U3"]


@pytest.mark.parametrize("dtype", UNSUPPORTED, ids=str)
def test_unsupported_dtypes_are_named(dtype):
    a = np.ones(4).astype(dtype)
    f = lambda x, c: np.sum(x) + 0.0 * np.sum(x)  # noqa: E731
    error = TypeError
    for backend in ("numpy", "numba"):
        with pytest.raises(error, match="argument 'x' must have a floating-point dtype "
                                            "|argument 'x' must be a floating-point"):
            ha.gradient(f, a, X, backend=backend)
        with pytest.raises(error, match="argument 'c' has dtype .*hybridad traces arrays "
                                            "of dtype bool, .*float64"):
            ha.gradient(f, X, a, backend=backend)


@pytest.mark.parametrize("dtype", [np.float16, np.longdouble, object])
def test_unsupported_captured_and_cast_dtypes_are_named(dtype):
    c = np.ones(4).astype(dtype)
    error = TypeError
    with pytest.raises(error, match="array captured by the traced function .* has dtype"):
        ha.gradient(lambda x: np.sum(np.exp(x) * c), X)
    if dtype is not object:
        with pytest.raises(error, match="astype's target at .* has dtype"):
            ha.gradient(lambda x: np.sum(x.astype(dtype)), X)


def test_float16_and_longdouble_were_backend_crashes():
    # the cases: a bare NotImplementedError('float16') and a numba TypingError
    for dt, hint in [(np.float16, "float32"), (np.longdouble, "float64")]:
        with pytest.raises(TypeError, match=f"argument 'x' must have a floating-point dtype"
                                            f".*{np.dtype(dt)}"):
            ha.gradient(lambda x: np.sum(x * 2), X.astype(dt), backend="numba")
        with pytest.raises(TypeError, match=f"argument 'c' has dtype .*{hint}"):
            ha.gradient(lambda x, c: np.sum(x * c), X, X.astype(dt), backend="numba")


def test_unsupported_value_buffer_is_refused_untouched():
    for dt in (np.float16, np.longdouble):
        out = ha.DiffResult(np.full((), 3.0, dt), np.zeros(4))
        for backend in ("numpy", "numba"):
            with pytest.raises(ValueError, match="float32 or float64"):
                ha.gradient(lambda x: np.sum(x * x), X, out=out, backend=backend)
        assert float(out.value) == 3.0 and not out.derivs[0].any()


def test_complex_arguments_and_constants_are_traced():
    """Complex values are pairs of real tracers (tests/test_complex_fft.py)."""
    c = np.ones(4) * (1 + 2j)
    res = ha.gradient(lambda x: np.sum(np.abs(x * c) ** 2), X)
    np.testing.assert_allclose(res.gradient, 10 * X, rtol=1e-14)
    # x.astype(complex) is a complex value (zero imaginary part); a complex
    # scalar output is refused, as autograd's and JAX's grad refuse it
    res = ha.gradient(lambda x: np.sum(np.abs(x.astype(np.complex128) * c) ** 2), X)
    np.testing.assert_allclose(res.gradient, 10 * X, rtol=1e-14)
    with pytest.raises(TypeError, match="scalar"):
        ha.gradient(lambda x: np.sum(x.astype(np.complex128)), X)


def test_nested_differentiation_composes():
    def outer(x):
        return ha.gradient(lambda y: np.sum(y * y), x).value

    np.testing.assert_allclose(ha.gradient(outer, X).gradient, 2 * X, rtol=1e-15)


def test_memmap_argument_file_is_plain_data():
    with tempfile.TemporaryDirectory() as d:
        mm = np.memmap(os.path.join(d, "x.dat"), dtype=np.float64, mode="w+", shape=(4,))
        mm[:] = X
        res = traced(lambda x: np.sum(x ** 2), mm)
        np.testing.assert_allclose(res.gradient, 2 * X)
        del mm


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("lo, hi", [
    (np.nan, 0.5), (-0.5, np.nan), (np.array([0.0, np.nan, 0.0, 0.0]), 1.0),
    (-0.5, np.array([1.0, 1.0, np.nan, 1.0])), (-1.0, 1.0), (None, 0.5)])
def test_clip_follows_numpy_with_nan_bounds(lo, hi, backend):
    """np.clip is minimum(maximum(a, lo), hi): a NaN bound gives NaN where it
    applies (it gave a number, on both backends)."""
    def f(x):
        return np.clip(x, lo, hi) * np.arange(1.0, 5.0)

    plan = ha.compile(lambda x: np.sum(f(x)), X, backend=backend)
    res = plan.gradient(X)
    want = np.sum(f(X))
    assert (np.isnan(res.value) and np.isnan(want)) or res.value == pytest.approx(want, rel=1e-14)
    jac = ha.jacobian(f, X, backend=backend)
    np.testing.assert_array_equal(np.isnan(jac.value), np.isnan(f(X)))
    np.testing.assert_allclose(jac.value, f(X), rtol=1e-15)
    # a traced bound: NaN there too
    g = ha.gradient(lambda x: np.sum(np.clip(x[:3], x[3] * np.nan, 5.0)), X, backend=backend)
    assert np.isnan(g.value)


_RNG = np.random.default_rng(11)
_W1, _W2 = _RNG.standard_normal((3, 5)), _RNG.standard_normal((5, 4))
_LABELS = _RNG.integers(0, 4, 6)


_OUT = np.empty(4)


def _sklearn_mlp_loss(x):
    """scikit-learn's MLP forward pass as it is written: every activation in place."""
    a = x @ _W1
    np.maximum(a, 0, out=a)  # relu
    b = a @ _W2
    np.tanh(b, out=b)
    tmp = b - b.max(axis=1)[:, np.newaxis]  # softmax
    np.exp(tmp, out=b)
    b /= b.sum(axis=1)[:, np.newaxis]
    return -np.sum(np.log(b[np.arange(6), _LABELS]))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_out_into_arrays_made_inside_f(backend):
    """out= into a traced array made inside f is numpy's in-place write (views
    of it see it, where= keeps the old values, functions' out= too); into an
    argument or a plain numpy array it is refused by name."""
    x = _RNG.standard_normal((6, 3))
    res = traced(_sklearn_mlp_loss, x, backend=backend)
    np.testing.assert_allclose(res.gradient, numerical_gradient(_sklearn_mlp_loss, x),
                               rtol=1e-5, atol=1e-7)

    def g(x):
        a = x * 2.0
        v = a[1:]  # a view: sees the write
        np.exp(a, out=a, where=a > 0)
        s = np.zeros(2) * x[0]
        np.sum(np.stack([a[:2], v[:2]]), axis=0, out=s)
        d = x.copy()
        np.clip(x, 0.1, 0.5, out=d)
        return np.sum(v) + np.sum(a) + np.sum(s ** 2) + np.sum(d)

    res = traced(g, X, backend=backend)
    np.testing.assert_allclose(res.gradient, numerical_gradient(g, X), rtol=1e-6, atol=1e-8)
    with pytest.raises(TracingError, match="out= of np.tanh .* argument"):
        ha.gradient(lambda x: np.sum(np.tanh(x, out=x)), X, backend=backend)
    with pytest.raises(TracingError, match="out= a numpy array"):  # not made by f
        ha.gradient(lambda x: np.sum(np.tanh(x, out=_OUT)), X, backend=backend)
