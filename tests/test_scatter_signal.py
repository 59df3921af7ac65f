"""Scatter and neighbour lists, signal and interpolation (issue 30;
hybridad/frontend/numpy_signal.py): ``ufunc.at`` for add, subtract,
multiply, maximum and minimum, ``a[idx] op= v`` with repeated fancy indices
(numpy's buffered write), np.bincount with weights, np.convolve /
np.correlate, np.trapezoid and scipy.integrate's trapezoid /
cumulative_trapezoid, np.interp.  Values against numpy/scipy, gradients
against central differences on both backends (``assert_grad``), Hessians,
a pair/EAM-like energy over a constant neighbour list, zero allocations per
repeated call, and the refusals."""

import numpy as np
import pytest
import scipy.integrate
from conftest import assert_grad, rand

import hybridad as ha
from hybridad import TracingError
from hybridad.testing import assert_no_alloc, numerical_gradient

IDX = np.array([0, 2, 2, 5, 0, 0, 3])  # repeats: 0 three times, 2 twice; 1 and 4 untouched
ROWS = (np.array([0, 1, 1, 2, 1]), np.array([3, 0, 0, 2, 0]))  # (1, 0) three times
W35 = np.arange(1.0, 16.0).reshape(3, 5) / 7


def ufunc_at(x, w):
    """Every supported ufunc.at: repeated indices, tuples of index arrays,
    slices, scalar and broadcast operands, on 1-D and 2-D accumulators."""
    a = x[:6] * 1.0
    np.add.at(a, IDX, w[:7] * x[1])
    np.subtract.at(a, IDX[:3], 2.0 * w[:3])
    np.add.at(a, slice(1, 3), 0.5)
    np.multiply.at(a, IDX, w[:7])
    np.maximum.at(a, IDX[::-1], w[:7] * 1.5)
    np.minimum.at(a, [4, 4, 1], w[7:10])
    m = np.reshape(x * 2.0, (3, 5))
    np.add.at(m, ROWS, w[:5] ** 2)
    np.multiply.at(m, ROWS, w[5:10])
    np.maximum.at(m, (ROWS[0], slice(None)), w[:5])  # a row of 5 per index, broadcast
    return np.sum(a ** 2 * np.arange(1.0, 7.0)) + np.sum(m * W35) + np.sum(np.sin(m)) + \
        np.sum(np.bincount(IDX, weights=w[3:10] * x[:7], minlength=9) ** 2 * np.arange(9.0))


def test_ufunc_at_values_and_gradients():
    x, w = rand((15,), seed=1), rand((10,), seed=2)
    assert_grad(ufunc_at, (x, w), argnums=(0, 1))
    # zeros where the products repeat: the gradient of a product is exact with zeros
    x[[0, 2, 5]] = 0.0
    w[[0, 4]] = 0.0  # two zero factors into a[0], one into a[2] (w[1] and w[2])
    w[2] = 0.0
    assert_grad(ufunc_at, (x, w), argnums=(0, 1))


def test_ufunc_at_updates_every_name_bound_to_the_array():
    def f(x):
        a = x * 1.0
        alias = a
        np.add.at(a, [1, 1], x[:2])
        return np.sum(alias * np.arange(1.0, 5.0))

    x = rand((4,), seed=3)
    res = ha.gradient(f, x, backend="numpy")
    assert np.isclose(float(res.value), f(x))
    np.testing.assert_allclose(res.gradient, [1 + 2, 2 + 2, 3, 4])


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_maximum_at_ties_split_equally(backend):
    # a[0] = 1 ties with two updates of 1: the derivative splits in three equal
    # shares (np.max's and np.maximum's rule); a[1] keeps its larger value
    def f(x):
        a = x[:2] * 1.0
        np.maximum.at(a, [0, 0, 1], x[2:])
        b = -x[:2]
        np.minimum.at(b, [0, 0, 1], -x[2:])
        return np.sum(a) + 10 * np.sum(b)

    res = ha.gradient(f, np.array([1.0, 3.0, 1.0, 1.0, 2.0]), backend=backend)
    # sum(a): 1/3 to x0, x2, x3 each, 1 to x1; 10 * sum(b): -10/3 each, -10 to x1
    np.testing.assert_allclose(res.gradient, [-3.0, -9.0, -3.0, -3.0, 0.0])


def fancy_update(x, v):
    """``a[idx] op= v``: numpy buffers the update, so a repeated index is
    written once, by its last occurrence."""
    a = x * 1.0
    a[IDX] += v[:7] ** 2
    a[[1, 1, 4]] -= v[:3] * x[0]
    a[np.arange(6) % 2 == 0] *= v[3:6]  # a constant boolean mask
    m = np.reshape(x * 1.0, (2, 3))
    m[[1, 0, 1], 1:] += np.reshape(v[:6], (3, 2))
    return np.sum(a ** 2 * np.arange(1.0, 7.0)) + np.sum(m * W35[:2, :3])


def test_fancy_index_update_is_numpy_buffered_write():
    x, v = rand((6,), seed=4), rand((7,), seed=5)
    a = x.copy()
    a[[0, 0]] += v[:2]
    assert a[0] == x[0] + v[1]  # numpy: the last occurrence, once
    assert_grad(fancy_update, (x, v), argnums=(0, 1))  # values are numpy's f(x, v)

    def f(z):
        a = z[:3] * 1.0
        a[[0, 2, 0]] += z[3:]
        return np.sum(a)

    res = ha.gradient(f, v[:6], backend="numpy")
    np.testing.assert_allclose(res.gradient, [1, 1, 1, 0, 1, 1])  # the first write is lost


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_convolve_correlate_values_every_mode_and_length(n):
    # numpy's windows for 'same' and 'valid', the operands swapped when v is
    # longer: random weights on every output tell any misplaced window apart
    rng = np.random.default_rng(n)
    for m in range(1, 6):
        a, v = rng.normal(size=n), rng.normal(size=m)
        ws = [rng.normal(size=64) for _ in range(6)]

        def f(a, v, ws=ws):
            outs = [np.convolve(a, v, mode) for mode in ("full", "same", "valid")] + \
                   [np.correlate(a, v, mode) for mode in ("full", "same", "valid")]
            return sum(np.sum(o * w[:o.shape[0]]) for o, w in zip(outs, ws, strict=True))

        res = ha.gradient(f, a, v, argnums=(0, 1), backend="numpy")
        np.testing.assert_allclose(float(res.value), f(a, v), rtol=1e-13)
        for k, g in enumerate(res.gradient):
            num = numerical_gradient(lambda z, k=k: f(*(z if j == k else arg for j, arg in
                                                         enumerate((a, v)))), (a, v)[k])
            np.testing.assert_allclose(g, num, atol=1e-8)


@pytest.mark.parametrize("n, m", [(200, 50), (50, 200), (100, 100), (333, 34)])
def test_long_kernels_by_fft(n, m):
    # kernels past SHIFTED_TAPS go through real FFTs: numpy's windows, values to
    # rounding, each operand's gradient exact (a bilinear function: any step)
    rng = np.random.default_rng(n + m)
    a, v = rng.normal(size=n), rng.normal(size=m)
    for fn in (np.convolve, np.correlate):
        for mode in ("full", "same", "valid"):
            w = rng.normal(size=fn(a, v, mode).shape)

            def f(a, v, fn=fn, mode=mode, w=w):
                return np.sum(fn(a, v, mode) * w)

            res = ha.gradient(f, a, v, argnums=(0, 1))
            assert float(res.value) == pytest.approx(f(a, v), rel=1e-12, abs=1e-12)
            da, dv = rng.normal(size=n), rng.normal(size=m)
            assert res.gradient[0] @ da == pytest.approx(f(a + da, v) - f(a, v), rel=1e-10)
            assert res.gradient[1] @ dv == pytest.approx(f(a, v + dv) - f(a, v), rel=1e-10)


def signal(a, v):
    return np.sum(np.convolve(a, v) ** 2) + np.sum(np.convolve(v, a, "same") * a) + \
        np.sum(np.correlate(a, v ** 2, "valid") ** 3) + np.sum(np.correlate(v, a, "same") * 3) + \
        np.sum(np.convolve(a, [0.25, 0.5, 0.25], "valid") ** 2)


def test_convolve_correlate_gradients():
    assert_grad(signal, (rand((7,), seed=6), rand((4,), seed=7)), argnums=(0, 1))


def quadrature(y, x):
    """np.trapezoid and scipy.integrate's trapezoid and cumulative_trapezoid."""
    xs = np.cumsum(np.exp(x))  # increasing sample points, traced
    y2 = np.reshape(y, (3, 4))
    return np.trapezoid(y2 ** 2, xs[:4]) @ np.arange(1.0, 4.0) + \
        np.sum(np.trapezoid(y2, dx=0.3, axis=0) ** 2) + np.trapezoid(y[:4], dx=x[0]) + \
        np.sum(np.trapezoid(np.sin(y2), np.reshape(xs, (3, 4)), axis=1)) + \
        scipy.integrate.trapezoid(y ** 2, xs) + \
        np.sum(scipy.integrate.trapezoid(y2, xs[:3, None], axis=0)) + \
        np.sum(scipy.integrate.cumulative_trapezoid(y, xs) ** 2) + \
        np.sum(scipy.integrate.cumulative_trapezoid(y2, dx=0.5, axis=0, initial=0) * y2)


def test_trapezoid_and_scipy_integrate():
    assert_grad(quadrature, (rand((12,), seed=8), rand((12,), seed=9)), argnums=(0, 1))
    # outside a trace scipy's own functions run (the interception passes through)
    y = rand((5,), seed=1)
    assert scipy.integrate.trapezoid(y) == pytest.approx(np.trapezoid(y))


XP = np.array([-1.0, -0.25, 0.0, 0.6, 1.0])


def interpolate(x, fp):
    left, right = fp[1] * 2.0, 3.0
    return np.sum(np.interp(x, XP, fp ** 2) * np.arange(x.size)) + \
        np.sum(np.interp(x * 0.5, XP, np.cos(XP), left=left, right=right) ** 2) + \
        np.sum(np.interp(0.3, XP, fp) * fp) + np.sum(np.interp(x, [0.5], fp[:1]))


def test_interp_values_and_gradients():
    # points inside, left and right of XP (off the knots: a derivative there
    # is one-sided)
    x = np.array([-1.7, -0.9, -0.1, 0.3, 0.8, 1.4, 2.5, -0.6])
    assert_grad(interpolate, (x, rand((5,), seed=10)), argnums=(0, 1))


def traced_points(xp, x):
    """np.interp with traced sample points: the segment found by searchsorted
    on them while the plan runs, their derivatives through the slope and the
    segment's start (as jnp.interp's); ``left``/``right`` from them, and
    periodic."""
    fp = np.cos(3.0 * xp) + xp
    return np.sum(np.interp(x, xp, fp) ** 2) + \
        np.sum(np.interp(x * 1.3, xp, XP, left=xp[0] * 2.0, right=xp[-1]) * np.arange(x.size)) + \
        np.sum(np.interp(x * 4.1, xp, fp, period=2.5) ** 2)


def test_interp_traced_sample_points():
    x = np.array([-1.7, -0.9, -0.1, 0.3, 0.8, 1.4, 2.5, -0.6])
    xp = np.array([-1.1, -0.3, 0.05, 0.55, 1.2])
    assert_grad(traced_points, (xp, x), argnums=(0, 1))
    plan = ha.compile(traced_points, xp, x, argnums=(0, 1), backend="numba")
    out = plan.gradient(xp, x)
    assert_no_alloc(lambda: plan.gradient(xp, x, out=out))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_interp_at_the_sample_points(backend):
    # values exactly numpy's at knots (fp[j] itself, fp[-1] at xp[-1]), NaN
    # for NaN; the derivative in x is the slope of the segment to the right
    # of a knot, the last segment's at xp[-1], 0 outside
    fp = np.array([0.0, 1.5, -1.0, 2.0, 4.0])
    slopes = np.diff(fp) / np.diff(XP)
    x = np.concatenate([XP, [-2.0, 1.5, 0.1]])
    w = np.arange(1.0, 9.0)

    def f(x):
        return np.sum(np.interp(x, XP, fp) * w)

    res = ha.gradient(f, x, backend=backend)
    assert float(res.value) == np.sum(np.interp(x, XP, fp) * w)
    np.testing.assert_allclose(res.gradient / w, [*slopes, slopes[-1], 0, 0, slopes[2]])
    assert np.isnan(ha.gradient(f, np.full(8, np.nan), backend=backend).value)


def test_hessians():
    x, w = rand((15,), seed=11), rand((10,), seed=12)

    def at(x):
        return ufunc_at(x, w)

    def sig(a):
        return signal(a[:7], a[7:11]) + quadrature(a[:12], a[3:]) + interpolate(a[[0, 1]], a[2:7])

    for f, z in ((at, x), (sig, rand((15,), seed=13) * 0.9)):
        res = ha.hessian(f, z, backend="numpy")
        eps, cols = 1e-5, []
        for k in range(z.size):
            e = np.zeros(z.size)
            e[k] = eps
            cols.append((ha.gradient(f, z + e, backend="numpy").gradient -
                         ha.gradient(f, z - e, backend="numpy").gradient) / (2 * eps))
        fd = np.array(cols).T
        np.testing.assert_allclose(res.hessian, fd, rtol=2e-6,
                                   atol=2e-6 * max(1.0, np.abs(fd).max()))
        np.testing.assert_allclose(res.hessian, res.hessian.T, rtol=1e-10, atol=1e-10)


# ----------------------------------------------------------------------------
# a realistic case: an EAM-like energy over a constant neighbour list
# ----------------------------------------------------------------------------

N_ATOMS = 16
_rng = np.random.default_rng(30)
R0 = np.stack(np.meshgrid(*[np.arange(3.0)] * 3, indexing="ij"), -1).reshape(-1, 3)[:N_ATOMS]
R0 = R0 * 1.1 + _rng.uniform(-0.1, 0.1, R0.shape)
_FIRST, _SECOND = np.triu_indices(N_ATOMS, 1)
_near = np.linalg.norm(R0[_FIRST] - R0[_SECOND], axis=1) < 2.0
PI, PJ = _FIRST[_near], _SECOND[_near]  # the neighbour list: constant, built once


def eam_energy(R):
    """Pair term plus an embedding function of each atom's density, the
    densities accumulated over the pairs with np.bincount and np.add.at."""
    d = R[PI] - R[PJ]
    r = np.sqrt(np.sum(d * d, axis=1))
    f = np.exp(-2.0 * (r - 1.1))  # density contribution of a neighbour
    pair = 0.5 * np.exp(-3.0 * (r - 1.2)) - np.exp(-1.5 * (r - 1.2))
    rho = np.bincount(PI, weights=f, minlength=N_ATOMS)
    np.add.at(rho, PJ, f)  # the other end of each pair
    peak = rho * 0.0
    np.maximum.at(peak, PI, f)  # the strongest bond of each atom
    return np.sum(-np.sqrt(rho)) + np.sum(pair) + 0.1 * np.sum(peak ** 2)


def test_eam_energy_forces_and_no_allocation():
    assert np.all(np.bincount(np.concatenate([PI, PJ]), minlength=N_ATOMS) > 0)
    num = numerical_gradient(eam_energy, R0)
    ref = ha.gradient(eam_energy, R0, backend="numpy")
    np.testing.assert_allclose(float(ref.value), eam_energy(R0), rtol=1e-12)
    np.testing.assert_allclose(ref.gradient, num, atol=1e-7)
    plan = ha.compile(eam_energy, R0, backend="numba")
    res = ha.GradientResult(R0)
    plan.gradient(R0, out=res)
    np.testing.assert_allclose(float(res.value), float(ref.value), rtol=1e-12)
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-10, atol=1e-12)
    assert_no_alloc(plan.gradient, R0, out=res, n=50)
    numpy_plan = ha.compile(eam_energy, R0, backend="numpy")
    assert_no_alloc(numpy_plan.gradient, R0, out=ha.GradientResult(R0), n=50)


# ----------------------------------------------------------------------------
# refusals name the numpy function
# ----------------------------------------------------------------------------

_GLOBAL_ACCUMULATOR = np.zeros(3)


def _numpy_accumulator(x):  # (an array f did not make: a global)
    np.add.at(_GLOBAL_ACCUMULATOR, [0, 0], x[:2])
    return np.sum(_GLOBAL_ACCUMULATOR)


def _argument_updated(x):
    np.add.at(x, [0], 1.0)
    return np.sum(x)


def _traced_indices(x):
    a = x * 1.0
    np.add.at(a, np.argsort(x), 1.0)
    return np.sum(a)


def _divide_at(x):
    a = x * 1.0
    np.divide.at(a, [0], 2.0)
    return np.sum(a)


@pytest.mark.parametrize("f, error, match", [
    (_numpy_accumulator, TracingError, r"numpy.add.at.*numpy array.*np.bincount"),
    (_argument_updated, TracingError, r"numpy.add.at.*argument of the traced function"),
    (_divide_at, NotImplementedError, r"numpy.divide.at"),
    (lambda x: np.sum(np.interp(x, [0.0, 1.0, 2.0], x, period=0.0)), ValueError,
     r"period must be a non-zero value"),  # (period= itself: tests/test_numpy_more.py)
    (lambda x: np.sum(np.interp(x, [0.0, 2.0, 1.0], x)), ValueError, r"increasing"),
    (lambda x: np.sum(np.convolve(x, x[:2], "middle")), ValueError, r"mode"),
    (lambda x: np.sum(np.correlate(x, x[:2], 3)), ValueError, r"mode must be 0, 1, or 2"),
    (lambda x: np.sum(np.convolve(x, x[:0])), ValueError, r"v cannot be empty"),
])
def test_refusals(f, error, match):
    with pytest.raises(error, match=match):
        ha.gradient(f, rand((3,), seed=1), backend="numpy")


@pytest.mark.parametrize("f", [_traced_indices,
                               lambda x: np.sum(np.bincount(np.argsort(x), weights=x ** 3))],
                         ids=["add.at", "bincount"])
def test_indices_computed_from_values(f):
    """Indices computed from values (an argsort) are read by the plan at
    every call (tests/test_scatter_indices.py: indices passed as arguments)."""
    plan = ha.compile(f, rand((5,), seed=1))
    for seed in (1, 2, 3):
        x = rand((5,), seed=seed)
        res = plan.gradient(x)
        assert float(res.value) == pytest.approx(f(x), rel=1e-14)
        np.testing.assert_allclose(res.gradient, numerical_gradient(f, x),
                                   rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("ufunc", [np.add, np.subtract, np.multiply, np.minimum])
def test_ufunc_at_into_an_array_f_makes(ufunc):
    """``y = np.ones(n); np.add.at(y, idx, b)``: ``f`` is traced again with
    the arrays it makes traced, as for ``y[idx] += b``."""
    def f(x):
        y = np.ones(5)
        ufunc.at(y, [0, 2, 2, 3], x ** 2)
        return np.sum(y ** 2)

    _gradients_without_allocation(f, np.array([0.5, 1.1, -0.3, 2.0]))
    assert np.array_equal(_GLOBAL_ACCUMULATOR, np.zeros(3))  # (the refusal wrote nothing)


@pytest.mark.parametrize("make", [
    lambda: np.array([2, 0, 0, 3]),
    lambda: np.arange(4)[::-1] % 3,
    lambda: (np.array([1, 0, 1, 0]), np.array([2, 2, 0, 1])),
], ids=["np.array", "computed", "tuple"])
def test_ufunc_at_with_indices_f_makes(make):
    """The indices made inside ``f`` (traced where ``f``'s made arrays are:
    constants, their values known) are indices, not traced values."""
    def f(x):
        idx = make()
        y = np.zeros((3, 4)) if isinstance(idx, tuple) else np.zeros(4)
        np.add.at(y, idx, np.sin(x))
        return np.sum(y ** 2)

    _gradients_without_allocation(f, np.array([0.5, -1.0, 2.0, 0.7]))


def _gradients_without_allocation(f, x):
    """``f``'s value and gradient at ``x`` against numpy and finite differences,
    and its plan's calls without allocation, on both CPU backends."""
    for backend in ("numpy", "numba"):
        res = ha.gradient(f, x, backend=backend)
        assert float(res.value) == pytest.approx(f(x), rel=1e-14)
        np.testing.assert_allclose(res.gradient, numerical_gradient(f, x), rtol=1e-6,
                                   atol=1e-8)
        plan = ha.compile(f, x, backend=backend)
        assert_no_alloc(plan.gradient, x, out=ha.GradientResult(x), n=20)


def test_scratch_accumulator_advice_works():
    # the error's advice: an exact 0 added makes the accumulator traced
    def f(x):
        a = np.zeros(3) + x.flat[:0].sum()
        np.add.at(a, [0, 0, 2], x)
        return np.sum(a * np.arange(1.0, 4.0))

    res = ha.gradient(f, rand((3,), seed=1), backend="numpy")
    np.testing.assert_allclose(res.gradient, [1.0, 1.0, 3.0])


def test_uneven_repeats_group_rows_by_their_number_of_updates():
    # one position updated 200 times, 100 once: rows padded to 200 would be
    # mostly padding, so they are grouped by count (rounded up to a power of 2)
    idx = np.concatenate([np.arange(100), np.full(200, 100), [7, 7, 7]])
    rng = np.random.default_rng(31)
    x, b = rng.normal(size=101), 1 + 0.01 * rng.normal(size=idx.size)

    def f(x, b):
        p = x * 1.0
        np.multiply.at(p, idx, b)
        m = x * 1.0
        np.maximum.at(m, idx, b - 1.0)
        return np.sum(p * np.arange(101.0)) + np.sum(m ** 2)

    assert_grad(f, (x, b), argnums=(0, 1), backends=("numpy",))
