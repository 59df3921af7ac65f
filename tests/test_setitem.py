"""Element writes while tracing: ``a[index] = value`` on a traced array
(``d = np.zeros_like(y); d[1:-1] = ...`` -- how ODE right-hand sides and
stencils are written), with numpy's semantics: every index kind numpy takes,
broadcasting, casting, repeated positions, and the writes numpy would make
into memory the trace does not follow refused by name."""

import numpy as np
import pytest

import hybridad as ha
from hybridad.errors import TracingError
from hybridad.testing import count_allocations, numerical_gradient

RNG = np.random.default_rng(3)
X1 = RNG.uniform(0.2, 1.2, 12)
X2 = RNG.uniform(0.2, 1.2, (4, 5))


def rhs(y, k=30.0):  # a diffusion-reaction chain: how solve_ivp's examples are written
    d = np.zeros_like(y)
    d[1:-1] = y[:-2] - 2 * y[1:-1] + y[2:]
    d[0] = y[1] - y[0]
    d[-1] = y[-2] - y[-1]
    return k * d - y ** 3 + 0.1


def every_index(y):
    a = np.empty_like(y)
    a[...] = 0.0
    a[::3] = np.sin(y[::3])  # a strided slice
    a[-1] = y[0] * y[1]  # a negative integer
    a[[1, 4, 4]] = [y[2], y[3], 2 * y[5]]  # repeated: the last write wins, a list of tracers
    a[np.arange(12) % 5 == 2] = 7.0  # a constant mask, a number
    b = y.copy()
    b[2:5] = a[6:9] ** 2  # a copy of the argument may be written
    return np.sum(a * b) + np.sum(rhs(y) ** 2)


def two_d(x):
    m = np.zeros_like(x)
    m[0] = x[1]  # a row
    m[:, -1] = np.exp(x[:, 0])  # a column
    m[1:3, 1:3] = x[2:, :2].T  # a block from a view
    m[x.shape[0] - 1, [0, 2]] = [[x[0, 0], 3.0]]  # leading unit axes are dropped
    m[3] = m[3] + 1.0  # a row read and written (the view is gone by the write)
    acc = np.zeros_like(x)
    for i in range(3):  # an accumulator
        acc += m * (i + 1)
    return np.sum(acc * x)


def ints(y):
    k = np.arange(y.size)
    out = np.zeros_like(y)
    out[k % 2 == 0] = y[k % 2 == 0] * 3.0
    j = np.zeros_like(y, dtype=np.int64)
    j[:4] = np.floor(y[:4] * 10)  # cast as numpy casts: float into int truncates
    return np.sum(out * y) + np.sum(j)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("f, x", [(every_index, X1), (two_d, X2), (ints, X1)],
                         ids=["every_index", "two_d", "ints"])
def test_values_and_gradients_as_numpy(f, x, backend):
    res = ha.gradient(f, x, backend=backend)
    np.testing.assert_allclose(float(res.value), float(f(x.copy())), rtol=1e-13)
    num = numerical_gradient(f, x)
    np.testing.assert_allclose(res.gradient, num, rtol=1e-6, atol=1e-7 * np.abs(num).max())


def through_views(y):
    m = np.zeros_like(y).reshape(3, 4)
    m[1] += y[:4]  # a basic index: numpy adds through the view m[1]
    m[:, 0] *= 2.0  # a column view, in place
    v = m[2:]  # a live view ...
    m[2, 3] = y[5] ** 2  # ... that this write reaches
    t = m.T  # a transposed view
    t[0, 1] = y[6] * 3  # writes m[1, 0]
    w = v.reshape(-1)  # a view of a view (a reshape numpy makes without a copy)
    w[:2] = np.sin(y[:2])
    d = np.zeros_like(y)
    d[2:][0] = y[0]  # through a temporary view
    return np.sum(m * y.reshape(3, 4)) + np.sum(v * 2) + np.sum(t[1]) + np.sum(d * y)


def reshape_copy(y):
    m = np.zeros_like(y).reshape(3, 4)
    u = m.T.reshape(-1)  # numpy copies here: writes to u do not reach m
    u[0] = y[0]
    m[0, 0] = y[1]
    return np.sum(m * 3.0) + np.sum(u * y)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("f", [through_views, reshape_copy])
def test_writes_reach_views_as_in_numpy(f, backend):
    res = ha.gradient(f, X1, backend=backend)
    np.testing.assert_allclose(float(res.value), float(f(X1.copy())), rtol=1e-13)
    num = numerical_gradient(f, X1)
    np.testing.assert_allclose(res.gradient, num, rtol=1e-6, atol=1e-7 * np.abs(num).max())


def test_jacobian_and_sparsity_of_a_stencil_written_by_elements():
    jac = ha.jacobian(rhs, X1).jacobian
    diagonal = np.full(12, -60.0)  # -2k inside, -k at the ends; then -3 y^2
    diagonal[[0, -1]] = -30.0
    exact = np.diag(diagonal - 3 * X1 ** 2)
    exact[np.arange(11), np.arange(1, 12)] = 30.0
    exact[np.arange(1, 12), np.arange(11)] = 30.0
    np.testing.assert_allclose(jac, exact, rtol=1e-13, atol=1e-13)
    pattern = ha.jacobian_sparsity(rhs, X1)
    assert (pattern.toarray() == (exact != 0)).all()  # no missing, no spurious nonzero


def test_repeated_calls_allocate_nothing():
    plan = ha.compile(every_index, X1)
    res = ha.GradientResult(X1)
    plan.gradient(X1, out=res)
    with count_allocations() as counts:
        for _ in range(5):
            plan.gradient(X1, out=res)
    assert counts.allocations == 0


def _argument(y):
    y[0] = 1.0
    return np.sum(y)


def _argument_view(y):
    v = y[1:]
    v += 1.0  # numpy would change the caller's array
    return np.sum(v)


def _broadcast_view(y):
    b = np.broadcast_to(y * 1.0, (2, 12))
    b[0, 0] = 1.0  # numpy: read-only
    return np.sum(b)


def _traced_index(y):
    d = np.zeros_like(y)
    d[np.argmax(y)] = 1.0
    return np.sum(d * y)


def _complex(y):
    d = np.zeros_like(y)
    d[0] = y[0] * 1j
    return np.sum(d)


_GLOBAL = np.zeros(12)


def _numpy_array(y):  # an array f did not make (np.zeros(...) inside f is traced:
    _GLOBAL[1:] = y[:-1]  # tests/test_made_arrays.py)
    return np.sum(_GLOBAL)


@pytest.mark.parametrize("f, error, match", [
    (_argument, TracingError, r"in-place assignment `a\[index\] = value`.*argument of the "
                              r"traced function"),
    (_argument_view, TracingError, r"`\+=` on a traced array.*argument of the traced"),
    (_broadcast_view, ValueError, r"read-only"),
    (_complex, TypeError, r"drop its imaginary part"),
    (_numpy_array, TracingError, r"written into a numpy array.*np.zeros_like\(x\).*not made "
                                 r"inside f"),
])
def test_writes_numpy_would_make_elsewhere_are_refused(f, error, match):
    with pytest.raises(error, match=match):
        ha.gradient(f, X1.copy(), backend="numpy")


def test_index_errors_as_numpy():
    def f(y):
        d = np.zeros_like(y)
        d[20] = y[0]
        return np.sum(d)

    with pytest.raises(IndexError):
        ha.gradient(f, X1, backend="numpy")

    def g(y):
        d = np.zeros_like(y)
        d[:3] = y[:2]
        return np.sum(d)

    with pytest.raises(ValueError, match="broadcast"):
        ha.gradient(g, X1, backend="numpy")


def test_write_at_a_position_computed_from_values():
    """``d[np.argmax(y)] = 1`` takes the call's argmax, guarded
    (hybridad.core.decisions): another argmax runs another specialization."""
    plan = ha.compile(_traced_index, X1.copy(), backend="numpy")
    for y in (X1, X1[::-1].copy()):
        res = plan.gradient(y)
        assert float(res.value) == pytest.approx(_traced_index(y.copy()))
        want = np.zeros_like(y)
        want[np.argmax(y)] = 1.0
        np.testing.assert_array_equal(res.gradient, want)
