"""np.quantile / percentile / nanquantile / nanpercentile traced as
composites (every method): values against numpy's bit for bit, gradients
against central differences on both backends, ties, refusals and no
allocation per call."""

import warnings

import numpy as np
import pytest

import hybridad as ha
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


@pytest.mark.parametrize("f, error, match", [
    (lambda x: np.quantile(x, x[0, 0] * 0 + 0.5), NotImplementedError, "traced q"),
    (lambda x: np.percentile(x, [10, x[0, 0]]), NotImplementedError, "traced q"),
    (lambda x: np.nanquantile(x, np.abs(x[0]) / 10), NotImplementedError, "traced q"),
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


def test_diag_puts_zeros_beside_an_inf():
    """(np.diag of a 1-D array was v times the identity: inf * 0 = NaN beside it.)"""
    f = lambda v: np.concatenate([np.ravel(np.diag(v, 1)), np.ravel(np.diag(v))])  # noqa: E731
    v = np.array([1.0, np.inf, -2.0, np.nan])
    for backend in BACKENDS:
        np.testing.assert_array_equal(ha.jacobian(f, v, backend=backend).value, f(v))
