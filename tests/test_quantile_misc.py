"""np.quantile / percentile / nanquantile / nanpercentile (every method),
np.block, np.diagflat, np.linalg.cond, np.ldexp / frexp / modf, np.unwrap,
scipy.integrate.simpson and ufunc.reduceat traced as composites: values
against numpy's (bit for bit where numpy's arithmetic is followed),
gradients against central differences on both backends, ties, refusals and
no allocation per call."""

import warnings

import numpy as np
import pytest

import hybridad as ha
from hybridad.errors import TracingError
from hybridad.frontend.numpy_quantile import METHODS
from hybridad.testing import assert_no_alloc

from conftest import BACKENDS, assert_grad, rand

X = rand((4, 5), seed=11)
X[1, 3] = X[1, 0]  # a tie in a row
W20 = rand((4, 5), seed=12)
#: NaNs where this is off (one row of them only)
MASK = np.ones((4, 5), dtype=bool)
MASK[0, 1] = MASK[2, 4] = MASK[2, 0] = False
MASK[3] = False

#: (q, axis, keepdims) read by every method's value test
LEVELS = [(0, None, False), (1, -1, False), (0.0, 0, True), (1.0, 1, False), (0.3, None, True),
          (0.5, (0, 1), False), (np.float64(0.62), 0, False),
          (np.array([0.0, 0.25, 0.5, 0.9, 1.0]), 1, False),
          ([[0.1, 0.2], [0.7, 1.0]], -1, True), ([0.33, 0.8], (1, 0), True)]


def _stacked(fn, method, levels):
    """Every quantile of ``levels`` of x, flattened into one array."""
    def f(x):
        return np.concatenate([np.ravel(fn(x, q, axis=axis, method=method, keepdims=kd))
                               for q, axis, kd in levels])
    return f


def _same(got, want):
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want, strict=True)


@pytest.mark.parametrize("method", METHODS)
def test_quantile_values_are_numpys_bit_for_bit(method):
    """Every method and level form, NaN where a slice holds one, on both backends."""
    x = X.copy()
    x[3, 2] = np.nan  # (row 3's slices and the whole-array ones are NaN)
    f = _stacked(np.quantile, method, LEVELS)
    want = f(x)
    for backend in BACKENDS:
        _same(ha.jacobian(f, x, backend=backend).value, want)
    for q, axis, kd in LEVELS:  # shapes and dtypes, one by one (the numpy backend)
        g = _stacked(np.quantile, method, [(q, axis, kd)])
        want = np.quantile(x, q, axis=axis, method=method, keepdims=kd)
        got = ha.jacobian(lambda x: np.quantile(x, q, axis=axis, method=method, keepdims=kd) *
                          1.0, x, backend="numpy").value
        assert np.shape(got) == np.shape(want), (q, axis, kd)
        _same(np.ravel(got), g(x))


@pytest.mark.parametrize("method", METHODS)
def test_nanquantile_values_are_numpys_bit_for_bit(method):
    """The quantiles of each slice's non-NaN values; NaN for a slice of NaNs."""
    def f(x):
        xn = np.where(MASK, x, np.nan)
        return np.concatenate([
            _stacked(np.nanquantile, method, LEVELS[1::2])(xn),
            np.ravel(np.nanpercentile(xn, [0, 40, 100.0], axis=1, method=method)),
            np.ravel(np.nanpercentile(xn, 55, axis=0, method=method, keepdims=True))])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (numpy's All-NaN slice)
        want = f(X)
    for backend in BACKENDS:
        _same(ha.jacobian(f, X, backend=backend).value, want)


def test_percentile_is_quantile_of_q_over_100():
    f = lambda x: np.concatenate([np.ravel(np.percentile(x, q, axis=1, method=m))  # noqa: E731
                                  for q, m in ((30, "linear"), ([0, 12.5, 100], "hazen"),
                                               (np.array([50.0, 99.0]), "nearest"))])
    _same(ha.jacobian(f, X, backend="numpy").value, f(X))


def _weighted(fn, method, levels):
    def f(x):
        total = 0.0
        for k, (q, axis, kd) in enumerate(levels):
            v = fn(x, q, axis=axis, method=method, keepdims=kd)
            total = total + np.sum(v * np.cos(np.arange(np.size(v)) + k).reshape(np.shape(v)))
        return total
    return f


GRAD_LEVELS = [(0.3, None, False), (0.0, 1, False), (np.array([0.2, 0.5, 1.0]), 1, True),
               (0.75, 0, False), ([0.1, 0.9], (0, 1), False)]


@pytest.mark.parametrize("method", METHODS)
def test_quantile_gradient(method):
    x = rand((4, 5), seed=21)  # (no ties: the function is smooth around x)
    assert_grad(_weighted(np.quantile, method, GRAD_LEVELS), (x,))


@pytest.mark.parametrize("method", ["linear", "inverted_cdf", "hazen", "nearest"])
def test_nanquantile_gradient(method):
    mask = MASK.copy()
    mask[3, 1] = True  # (row 3: one value)
    g = _weighted(np.nanquantile, method, GRAD_LEVELS[:3])
    assert_grad(lambda x: g(np.where(mask, x, np.nan)), (rand((4, 5), seed=22),))


def test_nanmedian_is_numpys_to_rounding():
    """``np.nanmedian``: the NaN-ignoring quantile at 0.5 (numpy's own
    averages the two middle values as ``(a + b) / 2``)."""
    def f(x):
        xn = np.where(MASK, x, np.nan)
        return np.concatenate([np.ravel(np.nanmedian(xn, axis=1)), np.ravel(np.nanmedian(xn)),
                               np.ravel(np.nanmedian(xn, axis=0, keepdims=True))])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (numpy's All-NaN slice)
        want = f(X)
    for backend in BACKENDS:
        np.testing.assert_allclose(ha.jacobian(f, X, backend=backend).value, want,
                                   rtol=1e-15, atol=0)
    mask = MASK.copy()
    mask[3, 1] = True  # (row 3: one value)
    assert_grad(lambda x: np.sum(np.nanmedian(np.where(mask, x, np.nan), axis=1) ** 2),
                (rand((4, 5), seed=23),))


TIES = np.array([[0.3, 1.2, -0.5, 1.2, 2.0, 1.2], [0.1, 0.1, 0.1, -1.0, 0.7, 0.1]])


def _tied(method, q=(0.3, 0.5, 0.62)):
    w = np.array([[1.0, -2.0, 0.5], [3.0, 1.5, -1.0]])
    return lambda x: np.sum(np.quantile(x, q, axis=1, method=method).T * w)


@pytest.mark.parametrize("method", METHODS)
def test_gradient_at_ties_is_the_one_sided_derivative_in_numpys_stable_order(method):
    """At tied values the gradient is the derivative along any direction that
    keeps numpy's stable order of the ties (a later tied element a little
    larger): there f is linear in x, and forward differences are exact."""
    f = _tied(method)
    d = np.broadcast_to(np.arange(1.0, 7.0), TIES.shape)  # (increasing along each row)
    h = 1e-7
    one_sided = (f(TIES + h * d) - f(TIES)) / h
    for backend in BACKENDS:
        g = ha.gradient(f, TIES, backend=backend).gradient
        np.testing.assert_allclose(np.sum(g * d), one_sided, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("method", ["linear", "lower", "higher", "midpoint", "nearest",
                                    "inverted_cdf"])
def test_gradient_at_ties_is_jaxs(method):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    w = np.array([[1.0, -2.0, 0.5], [3.0, 1.5, -1.0]])
    want = jax.grad(lambda x: jnp.sum(jnp.quantile(x, jnp.array([0.32, 0.46, 0.62]), axis=1,
                                                   method=method).T * w))(TIES)
    # (levels at no half position: jax's 'nearest' rounds a half otherwise than numpy's)
    g = ha.gradient(_tied(method, (0.32, 0.46, 0.62)), TIES, backend="numpy").gradient
    np.testing.assert_allclose(g, np.asarray(want), rtol=1e-12, atol=1e-15)


_REACHED = "differentiated argument reaches"


@pytest.mark.parametrize("f, error, match", [
    (lambda x: np.quantile(x, x[0, 0] * 0 + 0.5), NotImplementedError, _REACHED),
    (lambda x: np.percentile(x, [10, x[0, 0]]), NotImplementedError, _REACHED),
    (lambda x: np.nanquantile(x, np.abs(x[0]) / 10), NotImplementedError, _REACHED),
    (lambda x: np.quantile(x, 0.5, weights=np.ones((4, 5))), NotImplementedError, "weights"),
    (lambda x: np.quantile(x, 0.5, method="bogus"), ValueError, "not a valid method"),
    (lambda x: np.nanquantile(x, 0.5, method="bogus"), ValueError, "not a valid method"),
    (lambda x: np.quantile(x, 1.5), ValueError, r"range \[0, 1\]"),
    (lambda x: np.percentile(x, -1), ValueError, r"range \[0, 100\]"),
])
def test_quantile_refusals(f, error, match):
    with pytest.raises(error, match=match):
        ha.gradient(lambda x: np.sum(f(x)), X, backend="numpy")


QUANTILE_FAMILIES = {
    "quantile": lambda x: sum(_weighted(np.quantile, m, GRAD_LEVELS[:3])(x) for m in
                              ("linear", "lower", "hazen", "averaged_inverted_cdf")) +
    np.sum(np.percentile(x, [20, 70], axis=0) ** 2),
    "nanquantile": lambda x: _weighted(np.nanquantile, "linear", GRAD_LEVELS[:3])(
        np.where(MASK, x, np.nan)) + np.sum(np.nanpercentile(np.where(MASK, x, np.nan), 30,
                                                              axis=1, method="nearest")),
    "nanmedian": lambda x: np.sum(np.nanmedian(np.where(MASK, x, np.nan), axis=0) ** 2),
}


def _assert_no_alloc(f):
    x = X.copy()
    x[1, 3] += 0.05  # (no tie)
    plan = ha.compile(f, x)
    res = plan.gradient(x)
    assert_no_alloc(plan.gradient, x, out=res, n=10)


@pytest.mark.parametrize("name", sorted(QUANTILE_FAMILIES))
def test_quantile_allocates_nothing_per_call(name):
    _assert_no_alloc(QUANTILE_FAMILIES[name])


# ----------------------------------------------------------------------------
# the other functions
# ----------------------------------------------------------------------------

def _simpson():
    return pytest.importorskip("scipy.integrate").simpson


C23 = np.arange(6.0).reshape(2, 3) / 7
XS = np.array([0.0, 0.1, 0.3, 0.35, 1.0])

MISC = {
    "block": lambda x: np.concatenate([
        np.ravel(np.block([[x, x[:, :2] ** 2], [x[:2, :3], C23, np.ones((2, 1))]])),
        np.block([x[0], 1.0, x[1, :2]]), np.ravel(np.block([[x[0]], [x[1]]])),
        np.ravel(np.block([[[x[:2, :2]]], [[x[2:, 3:]]]])), np.ravel(np.block(x))]),
    "diagflat": lambda x: np.concatenate([np.ravel(np.diagflat(x[:2, :2])),
                                          np.ravel(np.diagflat(x[0], k=2)),
                                          np.ravel(np.diagflat(x[1:3, 1:3] ** 2, -1))]),
    # (finite values and derivatives; below one power of two's range, subnormal results)
    "ldexp": lambda x: np.concatenate([np.ravel(np.ldexp(x, 3)), np.ldexp(x[0] * 1e-300, np.array(
        [-3, 0, 5, 1000, 1020])), np.ldexp(x[1] * 1e300, [-800, -1100, -1500, -1900, -20])]),
    "frexp": lambda x: np.concatenate([np.ravel(np.frexp(x * 1e10)[0]),
                                       np.frexp(x[0] * 1e-300)[0] * 1e-300,
                                       np.frexp(x[1] * 1e300)[1] * 1.0]),
    "modf": lambda x: np.concatenate([np.ravel(np.modf(x * 3)[0]), np.modf(x[0] * 5)[1],
                                      np.modf(x[1] * 7)[0] * np.modf(x[1] * 7)[1]]),
    "unwrap": lambda x: np.concatenate([np.ravel(np.unwrap(x * 4)),
                                        np.ravel(np.unwrap(x * 4, axis=0)),
                                        np.unwrap(x[0] * 4, period=3.0, discont=2.0)]),
    "cond": lambda x: np.stack([np.linalg.cond(x[:, :4] + 2 * np.eye(4), p) for p in
                                (None, 2, -2, "fro", "nuc", 1, -1, np.inf, -np.inf)] +
                               [np.linalg.cond(x), np.linalg.cond(x.T, -2)]),
    "reduceat": lambda x: np.concatenate([
        np.add.reduceat(x[0], [0, 2, 1, 4, 4]), np.ravel(np.add.reduceat(x, [0, 3, 1, 2], 1)),
        np.ravel(np.add.reduceat(x, [0, 2], axis=0)),
        np.ravel(np.multiply.reduceat(x, [0, 3, 1], axis=1)),
        np.ravel(np.maximum.reduceat(x, [1, 3], axis=-1)),
        np.ravel(np.minimum.reduceat(x, [3, 1], axis=1))]),
}


def _simpsons(x):
    simpson = _simpson()
    return np.stack([
        np.sum(simpson(x)), np.sum(simpson(x[:, :4], dx=0.3)), np.sum(simpson(x, x=XS)),
        np.sum(simpson(x[:, :4], x=XS[:4])), np.sum(simpson(x[:3], x=XS[:3], axis=0)),
        np.sum(simpson(x[:, :2], x=XS[:2])), np.sum(simpson(x[:2], axis=0, dx=2.0)),
        np.sum(simpson(x, x=np.cumsum(W20 ** 2, axis=1)))])


MISC["simpson"] = _simpsons


@pytest.mark.parametrize("name", sorted(MISC))
def test_values(name):
    """numpy's (and scipy's) values: bit for bit, np.linalg.cond to LAPACK's
    rounding."""
    f = MISC[name]
    want = f(X)
    for backend in BACKENDS:
        got = ha.jacobian(f, X, backend=backend).value
        if name == "cond":
            np.testing.assert_allclose(got, want, rtol=1e-12)
        else:
            _same(got, want)


@pytest.mark.parametrize("name", sorted(MISC))
def test_gradient(name):
    weights = np.cos(np.arange(MISC[name](X).size))
    x = X.copy()
    x[1, 3] += 0.05  # (no tie: a max of two equal values has no derivative)
    assert_grad(lambda x: np.sum(MISC[name](x) * weights), (x,), rtol=1e-6)


def test_special_values_are_numpys():
    v = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -3e-310, 1.0, -3.0, 0.5,
                  2.0 ** -1022, 1.7976931348623157e308, -2.5, 1e-5])
    n = np.array([-1, 2, 3, -4, 0, 60, -900, 1100, -1100, 1, -1070, -2000, 2100, -2099])
    f = lambda v: np.concatenate([*np.frexp(v), *np.modf(v), np.ldexp(v, n)])  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = f(v)
    for backend in BACKENDS:
        got = ha.jacobian(f, v, backend=backend).value
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))  # (-0.0 as numpy)


def test_diag_and_diagflat_put_zeros_beside_an_inf():
    """(np.diag of a 1-D array was v times the identity: inf * 0 = NaN beside it.)"""
    f = lambda v: np.concatenate([np.ravel(np.diag(v, 1)),  # noqa: E731
                                  np.ravel(np.diagflat(v))])
    v = np.array([1.0, np.inf, -2.0, np.nan])
    for backend in BACKENDS:
        np.testing.assert_array_equal(ha.jacobian(f, v, backend=backend).value, f(v))


def test_derivatives_of_frexp_modf_ldexp():
    x = rand((6,), seed=5) * 40
    res = ha.jacobian(lambda x: np.concatenate([np.frexp(x)[0], np.modf(x)[0], np.modf(x)[1],
                                                np.ldexp(x, 7)]), x, backend="numpy")
    e = np.frexp(x)[1]
    want = np.concatenate([np.diag(2.0 ** -e), np.eye(6), np.zeros((6, 6)), 128 * np.eye(6)])
    np.testing.assert_array_equal(res.jacobian, want)


def test_unwrap_derivative_is_the_identity():
    p = np.cumsum(rand((12,), seed=6)) * 3
    res = ha.jacobian(lambda p: np.unwrap(p), p, backend="numba")
    np.testing.assert_array_equal(res.value, np.unwrap(p))
    np.testing.assert_array_equal(res.jacobian, np.eye(12))


@pytest.mark.parametrize("f, error, match", [
    (lambda x: np.add.reduceat(x[0], (x[1] > 0).astype(np.int64)), TracingError, "indices"),
    (lambda x: np.add.reduceat(x[0], [0, 7]), IndexError, "out-of-bounds"),
    (lambda x: np.add.reduceat(x, [0, 1], dtype=np.float32), NotImplementedError, "dtype"),
    (lambda x: np.ldexp(x, (x > 0).astype(np.int64)), NotImplementedError, "`n`"),
    (lambda x: np.ldexp(x, 1.5), TypeError, "ldexp"),
    (lambda x: _simpson()(x[0], x=x[1]), NotImplementedError, "`x`"),
    (lambda x: _simpson()(x[0], dx=x[1, 0]), NotImplementedError, "`dx`"),
    (lambda x: np.unwrap(x[0], period=x[1, 0] + 6), NotImplementedError, "`period`"),
    (lambda x: np.unwrap(x[0], discont=x[1, 0]), NotImplementedError, "`discont`"),
    (lambda x: np.block([[x[0]], x[1]]), ValueError, "depths are mismatched"),
    (lambda x: np.block((x, x)), TypeError, "tuple"),
    (lambda x: np.linalg.cond(x, 1), np.linalg.LinAlgError, "square"),
])
def test_refusals(f, error, match):
    with pytest.raises(error, match=match):
        ha.gradient(lambda x: np.sum(f(x)), X, backend="numpy")


@pytest.mark.parametrize("name", sorted(MISC))
def test_no_allocation_per_call(name):
    _assert_no_alloc(lambda x: np.sum(MISC[name](x) ** 2))
