"""The traced namespace against array-api-strict, the standard's reference
implementation: every function of the standard is there, and each one the
standard defines on real floating arrays gives strict's values when called
on traced arrays inside ``f`` (through ``x.__array_namespace__()``), with
gradients equal to finite differences where it is differentiable."""

import numpy as np
import pytest

from conftest import assert_grad

import hybridad as ha
from hybridad.frontend.array_api import namespace as NAMESPACE
from hybridad.testing import numerical_gradient

strict = pytest.importorskip("array_api_strict")

#: the library's own switches, not the standard's
STRICT_ONLY = {"set_array_api_strict_flags", "get_array_api_strict_flags",
               "reset_array_api_strict_flags"}

RNG = np.random.default_rng(7)
A = RNG.uniform(0.2, 0.9, (3, 4))  # inside every domain below (acos, atanh, log, ...)
B = RNG.uniform(0.3, 1.2, (3, 4))
M = RNG.uniform(-1.0, 1.0, (4, 2))

UNARY = ["abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "cos", "cosh",
         "exp", "expm1", "floor", "log", "log1p", "log2", "log10", "negative", "positive",
         "reciprocal", "round", "sign", "sin", "sinh", "sqrt", "square", "tan", "tanh",
         "trunc", "real", "conj"]
BINARY = ["add", "atan2", "copysign", "divide", "floor_divide", "hypot", "logaddexp", "nextafter",
          "maximum", "minimum", "multiply", "pow", "remainder", "subtract"]
PIECEWISE_CONSTANT = {"ceil", "floor", "round", "sign", "trunc", "floor_divide"}
#: no gradient check: a float32 round trip (finite differences see its rounding)
VALUES_ONLY = {"astype"}

#: name -> f(xp, a, b): the rest of the standard on real floating arrays
CALLS = {
    **{n: (lambda n: lambda xp, a, b: getattr(xp, n)(a + 1.0 if n == "acosh" else a))(n)
       for n in UNARY},
    **{n: (lambda n: lambda xp, a, b: getattr(xp, n)(a, b))(n) for n in BINARY},
    "clip": lambda xp, a, b: xp.clip(a, 0.3, 0.7),
    "where": lambda xp, a, b: xp.where(a > b, a, b * 2.0),
    "sum": lambda xp, a, b: xp.sum(a * b, axis=1),
    "prod": lambda xp, a, b: xp.prod(a, axis=0),
    "mean": lambda xp, a, b: xp.mean(a, axis=1, keepdims=True),
    "max": lambda xp, a, b: xp.max(a * b, axis=0),
    "min": lambda xp, a, b: xp.min(a - b),
    "std": lambda xp, a, b: xp.std(a, axis=1, correction=1),
    "var": lambda xp, a, b: xp.var(a, axis=0),
    "cumulative_sum": lambda xp, a, b: xp.cumulative_sum(a, axis=1, include_initial=True),
    "cumulative_prod": lambda xp, a, b: xp.cumulative_prod(a, axis=0),
    "diff": lambda xp, a, b: xp.diff(a, axis=1),
    "matmul": lambda xp, a, b: xp.matmul(a, xp.asarray(M)),
    "tensordot": lambda xp, a, b: xp.tensordot(a, b, axes=([1], [1])),
    "vecdot": lambda xp, a, b: xp.vecdot(a, b),
    "matrix_transpose": lambda xp, a, b: xp.matrix_transpose(a) * 2.0,
    "concat": lambda xp, a, b: xp.concat([a, b], axis=0),
    "stack": lambda xp, a, b: xp.stack([a, b], axis=1),
    "expand_dims": lambda xp, a, b: xp.expand_dims(a, axis=1),
    "flip": lambda xp, a, b: xp.flip(a, axis=0),
    "moveaxis": lambda xp, a, b: xp.moveaxis(a, 0, 1),
    "permute_dims": lambda xp, a, b: xp.permute_dims(a, (1, 0)),
    "reshape": lambda xp, a, b: xp.reshape(a, (2, 6)),
    "roll": lambda xp, a, b: xp.roll(a, 2, axis=1),
    "squeeze": lambda xp, a, b: xp.squeeze(xp.expand_dims(a, axis=0), axis=0),
    "tile": lambda xp, a, b: xp.tile(a, (2, 1)),
    "repeat": lambda xp, a, b: xp.repeat(a, 2, axis=1),
    "unstack": lambda xp, a, b: xp.unstack(a, axis=0)[1],
    "broadcast_to": lambda xp, a, b: xp.broadcast_to(a[:1, :], (3, 4)),
    "tril": lambda xp, a, b: xp.tril(a * b),
    "triu": lambda xp, a, b: xp.triu(a, k=1),
    "sort": lambda xp, a, b: xp.sort(a, axis=1, descending=True),
    "argsort": lambda xp, a, b: xp.take_along_axis(
        b, xp.argsort(xp.round(a * 4.0), axis=0, descending=True), axis=0),
    "vecdot_axis": lambda xp, a, b: xp.vecdot(a, b, axis=-2),
    "take": lambda xp, a, b: xp.take(a, xp.asarray([2, 0, 2]), axis=1),
    "take_along_axis": lambda xp, a, b: xp.take_along_axis(
        a, xp.argsort(b, axis=1), axis=1),
    "astype": lambda xp, a, b: xp.astype(a, xp.float32),
    "zeros_like": lambda xp, a, b: xp.zeros_like(a) + a,
    "full_like": lambda xp, a, b: xp.full_like(a, 2.0) * a,
}


def _ours(name, a, b):
    def f(a, b):  # (finite differences call it on ndarrays: numpy's namespace is theirs)
        xp = NAMESPACE if isinstance(a, np.ndarray) else a.__array_namespace__()
        out = CALLS[name](xp, a, b)
        return xp.sum(xp.astype(out, xp.float64) * xp.asarray(WEIGHTS[name]))

    return f


def _strict(name, a, b):
    out = CALLS[name](strict, strict.asarray(a), strict.asarray(b))
    return np.asarray(strict.astype(out, strict.float64))


WEIGHTS = {n: RNG.uniform(0.5, 1.5, _strict(n, A, B).shape) for n in CALLS}


def test_every_function_of_the_standard_is_in_the_namespace():
    seen = {}

    def f(x):
        seen["xp"] = x.__array_namespace__()
        return np.sum(x)

    ha.gradient(f, A)
    names = {n for n in strict.__all__ if callable(getattr(strict, n)) and
             not isinstance(getattr(strict, n), type)} - STRICT_ONLY
    assert not [n for n in sorted(names) if not hasattr(seen["xp"], n)]
    assert seen["xp"].__array_api_version__ >= "2023.12"


@pytest.mark.parametrize("name", sorted(CALLS))
def test_values_and_gradients_match_the_reference(name):
    f = _ours(name, A, B)
    res = ha.gradient(f, A, B, argnums=(0, 1), backend="numpy")
    want = float(np.sum(_strict(name, A, B) * WEIGHTS[name]))
    tol = 1e-6 if name == "astype" else 1e-13
    assert float(res.value) == pytest.approx(want, rel=tol, abs=tol), name
    if name in PIECEWISE_CONSTANT or name in VALUES_ONLY:
        return
    for k, g in enumerate(res.gradient):
        num = numerical_gradient(lambda z, k=k: f(*((z, B) if k == 0 else (A, z))),
                                 (A, B)[k])
        np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-6, err_msg=f"{name} d/d{k}")


def test_numpy2_array_api_functions_on_numba_without_allocations():
    """numpy 2's array-API names hybridad traces (cumulative_sum/prod,
    matrix_transpose, unstack, vecdot), compiled on numba: finite differences,
    float32 and float64, no allocation per call."""
    from hybridad.testing import assert_no_alloc

    def f(a, b):
        c = np.cumulative_sum(a, axis=1, include_initial=True)
        p = np.cumulative_prod(b, axis=0)
        t = np.matrix_transpose(a) @ b
        u = np.unstack(a, axis=0)
        return np.sum(c ** 2) + np.sum(p) + np.sum(t) + np.sum(u[1] * u[2]) + \
            np.sum(np.vecdot(a, b))

    for dtype, rtol in ((np.float64, 1e-6), (np.float32, 2e-2)):
        a, b = A.astype(dtype), B.astype(dtype)
        plan = ha.compile(f, a, b, argnums=(0, 1), backend="numba")
        res = plan.gradient(a, b)
        assert res.gradient[0].dtype == dtype
        for k, g in enumerate(res.gradient):
            num = numerical_gradient(lambda z, k=k: f(*((z, B) if k == 0 else (A, z))),
                                     (A, B)[k])
            np.testing.assert_allclose(g, num, rtol=rtol, atol=rtol)
        assert_no_alloc(plan.gradient, a, b, out=res)


@pytest.mark.parametrize("name,a,b", [("vecdot", (2,), (1,)), ("vecdot", (3, 2), (3, 1)),
                                      ("matvec", (3, 2), (1,)), ("vecmat", (2,), (3, 2))])
def test_a_contracted_axis_is_never_broadcast(name, a, b):
    """numpy's vector gufuncs refuse contracted axes of unequal lengths (a
    core dimension is never broadcast); traced, ``vecdot`` of lengths 2 and
    1 summed a broadcast product instead (found by array-api-tests)."""
    fn = getattr(np, name)
    x, y = np.ones(a), np.ones(b)
    with pytest.raises(ValueError):
        fn(x, y)
    with pytest.raises(ValueError, match="contracted axes have lengths"):
        ha.gradient(lambda x, y: np.sum(fn(x, y)), x, y, backend="numpy")


_X3 = np.linspace(0.2, 1.4, 24).reshape(2, 3, 4)
_LINALG = {
    "matrix_transpose": lambda X: np.sum(np.linalg.matrix_transpose(X) * np.arange(12.0)
                                         .reshape(1, 4, 3)),
    "outer": lambda X: np.sum(np.linalg.outer(X[0, 0], X[1, 1] ** 2)),
    "vector_norm": lambda X: np.linalg.vector_norm(X),
    "vector_norm_axes": lambda X: np.sum(np.linalg.vector_norm(X, axis=(0, 2), keepdims=True,
                                                               ord=3) * np.arange(3.0)
                                         .reshape(1, 3, 1)),
    "vector_norm_l1": lambda X: np.sum(np.linalg.vector_norm(X, axis=1, ord=1) ** 2),
    "tensordot": lambda X: np.linalg.tensordot(X[0], X[1], axes=2),
    "trace": lambda X: np.sum(np.linalg.trace(X[:, :, :3], offset=1) ** 2),
    "vecdot": lambda X: np.sum(np.linalg.vecdot(X, X[:, :1, :])),
    "matmul": lambda X: np.sum(np.linalg.matmul(X[0], X[1].T) ** 2),
    "diagonal": lambda X: np.sum(np.linalg.diagonal(X, offset=1) ** 2),
    "cross": lambda X: np.sum(np.linalg.cross(X[0, :, :3], X[1, :, 1:] ** 2) *
                              np.arange(1.0, 10.0).reshape(3, 3)),
}


@pytest.mark.parametrize("name", sorted(_LINALG))
def test_numpy_2_linalg_spellings(name):
    """numpy 2's array-API spellings in ``np.linalg`` (``xp.linalg.vector_norm``,
    ``outer``, ``matrix_transpose``, ...) trace as the top-level functions do:
    they had no rule (found by array-api-tests with ``--differentiate``).
    Values as numpy's, gradients against central differences, both backends."""
    f = _LINALG[name]
    assert float(ha.gradient(f, _X3, backend="numpy").value) == pytest.approx(f(_X3), rel=1e-13)
    assert_grad(f, (_X3,), 0)
