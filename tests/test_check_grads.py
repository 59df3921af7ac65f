"""hybridad.testing.check_grads: what users check their own functions with.
A float32 point (its value compared at float32's rounding, not float64's), a
tuple, list or dict argument (each leaf against finite differences in that
leaf), and a wrong gradient caught, naming the leaf."""

from __future__ import annotations

import numpy as np
import pytest

import hybridad as ha
from hybridad.testing import check_grads


def test_float32_points_are_checked_at_their_precision():
    x = np.linspace(0.1, 2.0, 300, dtype=np.float32)
    res = check_grads(lambda a: np.sum(np.sin(a) * a), x, rtol=1e-3, atol=1e-3)
    assert res.gradient.dtype == np.float32


def test_pytree_arguments_leaf_by_leaf():
    def f(p, s):
        return s * np.sum(p["W"] @ p["b"][0] ** 2) + np.sum(np.tanh(p["b"][1]))
    rng = np.random.default_rng(0)
    p = {"W": rng.standard_normal((3, 4)), "b": [rng.standard_normal(4), rng.standard_normal(2)]}
    res = check_grads(f, p, 0.5)
    np.testing.assert_allclose(res.gradient["b"][1], 1 - np.tanh(p["b"][1]) ** 2)


def test_a_wrong_gradient_is_caught_and_its_leaf_named():
    @ha.elementwise
    def bad(x):
        return x * x

    @bad.defderiv
    def _(x):
        return 3.0 * x  # (should be 2 x)
    p = {"a": np.ones(3), "b": np.linspace(0.5, 1.0, 3)}
    with pytest.raises(AssertionError, match=r"gradient mismatch of x\['b'\]"):
        check_grads(lambda p: np.sum(p["a"] ** 2) + np.sum(bad(p["b"])), p)
    with pytest.raises(TypeError, match="f must be a callable"):
        check_grads(np.ones(2), np.ones(2))
