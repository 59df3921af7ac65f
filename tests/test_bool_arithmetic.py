"""numpy's arithmetic of booleans and integers, on every backend.

In numpy, ``+`` of two boolean arrays is logical or and ``*`` logical and
(``True + True`` is ``True``); a sum, product, cumulative sum or product
with ``dtype=bool`` reduces with them, and ``np.einsum`` of boolean operands
is an or of ands.  ``np.fmod`` of integers takes the sign of the dividend
(C's fmod).  The compiled backends count with Python's and numba's ``+``,
and numba's integer ``np.fmod`` is Python's ``%``: each case is compared
with numpy's value and the derivative finite differences give, on both CPU
backends (found by a fuzz against JAX).
"""

from __future__ import annotations

import numpy as np
import pytest

import hybridad as ha
from hybridad.backends.cuda.source import cuda_apply
from hybridad.testing import assert_no_alloc, numerical_gradient

X = np.array([-1.1, 0.2, 0.8, 1.5, -0.4])

CASES = {
    "bool add": lambda x: np.sum(((x > 0) + (x > 0.5)) * x),
    "bool add of one mask": lambda x: np.sum(((x > 0) + (x > 0)) * x),
    "bool multiply": lambda x: np.sum(((x > 0) * (x > 0.5)) * x),
    "bool add out=": lambda x: _added_out(x),
    "bool add in a chain": lambda x: np.sum(np.where((x > 0) + (x < -0.5), np.sin(x), x ** 2)),
    "sum dtype=bool": lambda x: np.sum(np.sum(np.stack([x > 0, x > 1]), axis=0, dtype=bool) * x),
    "sum dtype=bool initial": lambda x: np.sum(x > 5, dtype=bool, initial=True) * np.sum(x),
    "prod dtype=bool": lambda x: np.sum(np.prod(np.stack([x > 0, x > 1]), axis=0, dtype=bool) * x),
    "cumsum dtype=bool": lambda x: np.sum(np.cumsum(x > 0.5, dtype=bool) * x),
    "cumprod dtype=bool": lambda x: np.sum(np.cumprod(x > -0.5, dtype=bool) * x),
    "einsum of bools": lambda x: np.einsum("i->", x > 0) * np.sum(x),
    "einsum of bool matrices": lambda x: np.sum(
        np.einsum("ij,jk->ik", (x[:, None] > 0), (x[None, :] > 0.5)) * x[:, None]),
    "integer fmod": lambda x: np.sum(np.fmod(np.floor(x * 3).astype(np.int64), 2) * x),
    "integer fmod, negative divisor": lambda x: np.sum(
        np.fmod(np.floor(x * 3).astype(np.int64), -2) * x),
    "int32 fmod": lambda x: np.sum(np.fmod(np.floor(x * 3).astype(np.int32), np.int32(3)) * x),
}


def _added_out(x):
    b = np.zeros(x.shape)
    np.add(x > 0, x > 0.5, out=b)
    return np.sum(b * x)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_boolean_and_integer_arithmetic_as_numpy_does_it(name, backend):
    f = CASES[name]
    res = ha.gradient(f, X, backend=backend)
    assert float(res.value) == pytest.approx(float(f(X)), rel=1e-14, abs=1e-15)
    np.testing.assert_allclose(res.gradient, numerical_gradient(f, X), rtol=1e-7, atol=1e-9)
    plan = ha.compile(f, X, backend=backend)
    assert_no_alloc(plan.gradient, X, out=ha.GradientResult(X), n=10)


def test_the_gpu_dialect_spells_boolean_add_and_multiply_as_logic():
    assert cuda_apply("add", ["a", "b"], np.dtype(bool)) == "(a || b)"
    assert cuda_apply("multiply", ["a", "b"], np.dtype(bool)) == "(a && b)"
    assert cuda_apply("add", ["a", "b"], np.dtype("f8")) == "(a + b)"
