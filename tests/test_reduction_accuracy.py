"""Reductions are as accurate as numpy's (issue 26, "never silently wrong").

Every path on which a generated kernel accumulates -- a fused region's sum
(full: two-phase blocks, in parallel; over trailing axes: per row; over
leading or middle axes: numpy's order), a standalone ``sum`` node (of an
input; the backward pass's unbroadcast sums, bias gradients), the sums
``mean``, ``var``, ``std``, ``average``, ``norm``, inner products and
``logaddexp.reduce`` are made of, ``prod``, and the same in batched
(``gradient_batch``), Hessian and Jacobian programs and in the GPU backend's
CUDA kernels (run on the host through nvcc) -- on large float32 and float64
arrays: values AND gradients against an exact reference (computed in long
double, pairwise), required to be no worse than numpy's own error on the
same data, or a few units of the last place of the condition-aware scale
(the sum of the absolute terms).  The data: values near 1, centred values
(cancellation), and a sequence ordered against a running sum (large values
first).

cumsum/cumprod (and prod's gradient, made of exclusive cumprods) run
sequentially as numpy does: not held to more.  max/min are exact.
"""

import functools
import textwrap
import warnings

import numpy as np
import pytest

import hybridad as ha

L = np.longdouble
pytestmark = pytest.mark.skipif(np.finfo(L).eps > 1e-18, reason="the exact reference needs "
                                "an extended long double")

N = 1 << 20  # elements of the 1-D cases
ROWS, COLS = 1024, 1024  # the 2-D cases
FEW = 4  # "a few" units of the last place (np.finfo(dtype).eps)
DTYPES = (np.float32, np.float64)
KINDS = ("near1", "centred", "ordered")


@functools.lru_cache(maxsize=None)
@functools.lru_cache(maxsize=4)  # (read-only arrays: shared by the tests of a case)
def data(kind, shape, dtype, seed=0):
    """Read-only test data of ``shape``: ``near1`` 1 + 1e-3 N(0, 1),
    ``centred`` N(0, 1), ``ordered`` positive magnitudes spanning e^-8 to e^8,
    largest first (what a running sum handles worst)."""
    rng = np.random.default_rng(abs(hash((kind, shape, seed))) % 2**32)
    n = int(np.prod(shape))
    if kind == "near1":
        x = 1 + 1e-3 * rng.standard_normal(n)
    elif kind == "centred":
        x = rng.standard_normal(n)
    else:
        x = np.sort(np.exp(rng.uniform(-8, 8, n)))[::-1]
    x = x.astype(dtype).reshape(shape)
    x.flags.writeable = False
    return x


@functools.lru_cache(maxsize=None)
def const(shape, dtype, seed):
    """A constant the functions capture (read-only, in (0.5, 1.5))."""
    c = (0.5 + np.random.default_rng(seed).random(shape)).astype(dtype)
    c.flags.writeable = False
    return c


def lsum(a, axis=None, keepdims=False):
    """Sum in long double, pairwise (numpy sums a contiguous axis pairwise):
    the reduced axes moved last and made contiguous."""
    a = np.asarray(a, L)
    nd = a.ndim
    axes = tuple(range(nd)) if axis is None else \
        tuple(d % nd for d in ((axis,) if np.isscalar(axis) else axis))
    kept = [d for d in range(nd) if d not in axes]
    moved = np.ascontiguousarray(np.transpose(a, kept + list(axes)))
    s = moved.reshape(tuple(a.shape[d] for d in kept) + (-1,)).sum(axis=-1)
    if keepdims:
        s = s.reshape(tuple(1 if d in axes else a.shape[d] for d in range(nd)))
    return s


def _ones(x):
    return np.ones(x.shape, L)


# ----------------------------------------------------------------------------
# the cases: f for hybridad, then exact / numpy's / scale, each (value, gradient)
# ----------------------------------------------------------------------------


def _y(x):
    return const(x.shape, x.dtype, 1)


def _w(x):
    return const(x.shape, x.dtype, 2)


def _var(x):
    lx = np.asarray(x, L)
    m = lsum(lx) / x.size
    return lsum((lx - m) ** 2) / x.size, m


def _spread(x):
    """|x - mean| + |mean|: the scale of x - mean (condition-aware)."""
    m = _var(x)[1]
    return abs(np.asarray(x, L) - m) + abs(m)


def _lse(x):
    lx = np.asarray(x, L)
    m = lx.max()
    return m + np.log(lsum(np.exp(lx - m)))


def _np_lse_grad(x, v):
    return np.exp(x - v)


class Case:
    """One reduction path: ``f(x)`` (numpy code hybridad traces; constants
    from :func:`const`), ``exact(x)``, ``numpy(x)`` (numpy's own evaluation,
    the gradient as written by hand) and ``scale(x)`` each returning
    ``(value, gradient)``; ``covers``: the numpy names it exercises;
    ``kinds``: data it runs on; ``grad``: whether the gradient is checked."""

    def __init__(self, f, exact, numpy, scale, covers=(), shape=(N,), kinds=KINDS, grad=True):
        self.f, self.exact, self.numpy, self.scale = f, exact, numpy, scale
        self.covers, self.shape, self.kinds, self.grad = covers, shape, kinds, grad


def _rows_f(x):
    return np.sum(np.sum(x, axis=1) ** 2) / 2


def _cols_f(x):
    return np.sum(np.sum(x, axis=0) ** 2) / 2


_ROWS_PARTS = (lambda x: (lsum(lsum(x, axis=1) ** 2) / 2,
                          lsum(x, axis=1, keepdims=True) * _ones(x)),
               lambda x: (_rows_f(x), np.sum(x, axis=1, keepdims=True) * _ones(x)),
               lambda x: (lsum(lsum(abs(x), axis=1) ** 2) / 2,
                          lsum(abs(x), axis=1, keepdims=True)))


def _sq_rows(x):
    r = lsum(np.asarray(x, L) ** 2, axis=1, keepdims=True)
    return lsum(r ** 2) / 2, 2 * np.asarray(x, L) * r


CASES = {
    "sum": Case(lambda x: np.sum(x), lambda x: (lsum(x), _ones(x)),
                lambda x: (np.sum(x), _ones(x)), lambda x: (lsum(abs(x)), 1),
                covers=("numpy.sum", "numpy.add.reduce", "sum")),
    "mean": Case(lambda x: np.mean(x), lambda x: (lsum(x) / x.size, _ones(x) / x.size),
                 lambda x: (np.mean(x), _ones(x) / x.size),
                 lambda x: (lsum(abs(x)) / x.size, 1 / x.size), covers=("numpy.mean",)),
    # a fused multiply + sum: 1-D @ 1-D, np.dot, np.inner, np.vdot
    "dot": Case(lambda x: x @ _y(x), lambda x: (lsum(np.asarray(x, L) * _y(x)), _y(x)),
                lambda x: (x @ _y(x), _y(x)), lambda x: (lsum(abs(x * _y(x))), _y(x)),
                covers=("numpy.matmul", "numpy.dot", "numpy.inner", "numpy.vdot")),
    "norm": Case(lambda x: np.linalg.norm(x),
                 lambda x: (np.sqrt(lsum(np.asarray(x, L) ** 2)),
                            np.asarray(x, L) / np.sqrt(lsum(np.asarray(x, L) ** 2))),
                 lambda x: (np.linalg.norm(x), x / np.linalg.norm(x)),
                 lambda x: (np.linalg.norm(x), abs(x) / np.linalg.norm(x)),
                 covers=("numpy.linalg.norm",)),
    "var": Case(lambda x: np.var(x),
                lambda x: (_var(x)[0], 2 * (np.asarray(x, L) - _var(x)[1]) / x.size),
                lambda x: (np.var(x), 2 * (x - np.mean(x)) / x.size),
                lambda x: (_var(x)[0], 2 * _spread(x) / x.size),
                covers=("numpy.var",)),
    "std": Case(lambda x: np.std(x),
                lambda x: (np.sqrt(_var(x)[0]),
                           (np.asarray(x, L) - _var(x)[1]) / (x.size * np.sqrt(_var(x)[0]))),
                lambda x: (np.std(x), (x - np.mean(x)) / (x.size * np.std(x))),
                lambda x: (np.sqrt(_var(x)[0]),
                           _spread(x) / (x.size * np.sqrt(_var(x)[0]))),
                covers=("numpy.std",)),
    "average": Case(lambda x: np.average(x, weights=_w(x)),
                    lambda x: (lsum(np.asarray(x, L) * _w(x)) / lsum(_w(x)),
                               _w(x) / lsum(_w(x))),
                    lambda x: (np.average(x, weights=_w(x)), _w(x) / np.sum(_w(x))),
                    lambda x: (lsum(abs(x) * _w(x)) / lsum(_w(x)), _w(x) / lsum(_w(x))),
                    covers=("numpy.average",)),
    "logaddexp_reduce": Case(lambda x: np.logaddexp.reduce(x),
                             lambda x: (_lse(x), np.exp(np.asarray(x, L) - _lse(x))),
                             lambda x: (np.logaddexp.reduce(x),
                                        _np_lse_grad(x, np.logaddexp.reduce(x))),
                             lambda x: (abs(_lse(x)) + 1, np.exp(np.asarray(x, L) - _lse(x))
                                        * (abs(np.asarray(x, L)) + abs(_lse(x)) + 1)),
                             covers=("numpy.logaddexp.reduce",), kinds=("near1", "centred")),
    # numpy multiplies in order, as float64 plans do; float32 accumulates in float64
    # (prod's gradient is exclusive cumprods, sequential like numpy's: not checked)
    "prod": Case(lambda x: np.prod(x),
                 lambda x: (np.exp(lsum(np.log(np.asarray(x, L)))), None),
                 lambda x: (np.prod(x), None), lambda x: (abs(np.prod(x)), None),
                 covers=("numpy.prod", "numpy.multiply.reduce", "prod"), kinds=("near1",),
                 grad=False),
    "trace": Case(lambda x: np.trace(x), lambda x: (lsum(np.diagonal(x)), np.eye(COLS)),
                  lambda x: (np.trace(x), np.eye(COLS)),
                  lambda x: (lsum(abs(np.diagonal(x))), 1), covers=("numpy.trace",),
                  shape=(ROWS, COLS)),
    # sums over one axis: the gradient is the sums, broadcast
    "rows": Case(_rows_f, *_ROWS_PARTS, shape=(ROWS, COLS)),
    # short rows: compensated in scalar locals (16), in order as numpy (5)
    "short_rows": Case(_rows_f, *_ROWS_PARTS, shape=(1 << 16, 16)),
    "tiny_rows": Case(_rows_f, *_ROWS_PARTS, shape=(1 << 18, 5)),
    "columns": Case(_cols_f,
                    lambda x: (lsum(lsum(x, axis=0) ** 2) / 2,
                               lsum(x, axis=0, keepdims=True) * _ones(x)),
                    lambda x: (_cols_f(x), np.sum(x, axis=0, keepdims=True) * _ones(x)),
                    lambda x: (lsum(lsum(abs(x), axis=0) ** 2) / 2,
                               lsum(abs(x), axis=0, keepdims=True)),
                    shape=(ROWS, COLS)),
    # fused: the squares summed in the region's loop, over trailing / leading / middle axes
    "rows_fused": Case(lambda x: np.sum(np.sum(x * x, axis=1) ** 2) / 2, _sq_rows,
                       lambda x: (np.sum(np.sum(x * x, axis=1) ** 2) / 2,
                                  2 * x * np.sum(x * x, axis=1, keepdims=True)),
                       lambda x: _sq_rows(abs(x)), shape=(ROWS, COLS)),
    "columns_fused": Case(lambda x: np.sum(np.sum(x * x, axis=0, keepdims=True) ** 2) / 2,
                          lambda x: _sq_rows(np.asarray(x, L).T)[:1] +
                          (_sq_rows(np.asarray(x, L).T)[1].T,),
                          lambda x: (np.sum(np.sum(x * x, axis=0) ** 2) / 2,
                                     2 * x * np.sum(x * x, axis=0, keepdims=True)),
                          lambda x: (_sq_rows(abs(np.asarray(x, L)).T)[0],
                                     _sq_rows(abs(np.asarray(x, L)).T)[1].T),
                          shape=(ROWS, COLS)),
    "middle_fused": Case(lambda x: np.sum(np.sum(x * x, axis=(0, 2)) ** 2) / 2,
                         lambda x: _middle(x, np.asarray(x, L)),
                         lambda x: (np.sum(np.sum(x * x, axis=(0, 2)) ** 2) / 2,
                                    2 * x * np.sum(x * x, axis=(0, 2), keepdims=True)),
                         lambda x: _middle(x, abs(np.asarray(x, L))), shape=(64, 128, 128)),
    # the backward pass sums the cotangent over broadcast axes (a bias gradient)
    "bias": Case(lambda b: np.sum((_big(b) + b) ** 2) / 2,
                 lambda b: (lsum((_big(b) + np.asarray(b, L)) ** 2) / 2,
                            lsum(_big(b) + np.asarray(b, L), axis=0)),
                 lambda b: (np.sum((_big(b) + b) ** 2) / 2, np.sum(_big(b) + b, axis=0)),
                 lambda b: (lsum((_big(b) + abs(np.asarray(b, L))) ** 2) / 2,
                            lsum(_big(b) + abs(np.asarray(b, L)), axis=0)),
                 shape=(64,), kinds=("centred",)),
    # a scalar bias: numpy sums the cotangent pairwise (one contiguous axis)
    "scalar_bias": Case(lambda b: np.sum((_flat(b) + b) ** 2) / 2,
                        lambda b: (lsum((_flat(b) + np.asarray(b, L)) ** 2) / 2,
                                   lsum(_flat(b) + np.asarray(b, L), keepdims=True)),
                        lambda b: (np.sum((_flat(b) + b) ** 2) / 2,
                                   np.sum(_flat(b) + b, keepdims=True)),
                        lambda b: (lsum((_flat(b) + abs(np.asarray(b, L))) ** 2) / 2,
                                   lsum(_flat(b) + abs(np.asarray(b, L)), keepdims=True)),
                        shape=(1,), kinds=("centred",)),
    "row_bias": Case(lambda c: np.sum((_big(c).T + c[:, None]) ** 2) / 2,
                     lambda c: (lsum((_big(c).T + np.asarray(c, L)[:, None]) ** 2) / 2,
                                lsum(_big(c).T + np.asarray(c, L)[:, None], axis=1)),
                     lambda c: (np.sum((_big(c).T + c[:, None]) ** 2) / 2,
                                np.sum(_big(c).T + c[:, None], axis=1)),
                     lambda c: (lsum((_big(c).T + abs(np.asarray(c, L))[:, None]) ** 2) / 2,
                                lsum(_big(c).T + abs(np.asarray(c, L))[:, None], axis=1)),
                     shape=(64,), kinds=("centred",)),
}

# numpy's NaN-ignoring reductions, on data without NaN: numpy's sum, mean, var,
# std and prod (their NaNs are filled with the identity, then the same paths)
for _nan, _base in (("nansum", "sum"), ("nanmean", "mean"), ("nanvar", "var"),
                    ("nanstd", "std"), ("nanprod", "prod")):
    _b, _f = CASES[_base], getattr(np, _nan)
    CASES[_nan] = Case(_f, _b.exact, lambda x, _f=_f, _n=_b.numpy: (_f(x), _n(x)[1]),
                       _b.scale, covers=(f"numpy.{_nan}",), shape=_b.shape, kinds=_b.kinds,
                       grad=_b.grad)


def _middle(x, lx):
    m = lsum(lx ** 2, axis=(0, 2), keepdims=True)
    return lsum(m ** 2) / 2, 2 * lx * m


def _flat(b):
    """The (N,) constant a scalar bias is added to."""
    return const((N,), b.dtype, 4)


def _big(b):
    """The (16384, len(b)) constant a bias is added to."""
    return const((1 << 14, b.shape[0]), b.dtype, 3)


@functools.lru_cache(maxsize=None)
def plan(name, dtype, backend, parallel=True):
    case = CASES[name]
    x = data("near1", case.shape, dtype)
    return ha.compile(case.f, x, backend=backend, parallel=parallel)


def run(name, dtype, backend, kind, parallel=True):
    x = data(kind, CASES[name].shape, dtype)
    return x, plan(name, dtype, backend, parallel).gradient(x)


def assert_as_accurate(got, exact, numpy_value, scale, dtype, what):
    """Each element's ``|got - exact| <= max(numpy's largest error, FEW eps
    scale)`` (``scale`` per element or one for all)."""
    eps = float(np.finfo(dtype).eps)
    exact = np.asarray(exact, L)
    err = np.abs(np.asarray(got, L) - exact)
    np_err = float(np.max(np.abs(np.asarray(numpy_value, L) - exact)))
    allowed = np.broadcast_to(np.maximum(np_err, FEW * eps * np.asarray(scale, L)), err.shape)
    err, allowed = err.ravel(), allowed.ravel()
    worst = int(np.argmax(err - allowed))
    assert err[worst] <= allowed[worst], \
        f"{what}: error {float(err[worst]):.3g} at element {worst}; numpy's largest " \
        f"{np_err:.3g}, {FEW} eps x scale {float(allowed[worst]):.3g}"


PARAMS = [(name, kind) for name, case in CASES.items() for kind in case.kinds]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize(("name", "kind"), PARAMS)
def test_value_and_gradient_as_accurate_as_numpy(name, kind, dtype, backend):
    case = CASES[name]
    x, res = run(name, dtype, backend, kind)
    exact, numpy_value, scale = _references(name, kind, dtype)
    assert res.value.dtype == dtype and res.gradient.dtype == dtype
    assert_as_accurate(res.value, exact[0], numpy_value[0], scale[0], dtype, "value")
    if case.grad:
        assert_as_accurate(res.gradient, exact[1], numpy_value[1], scale[1], dtype, "gradient")


@functools.lru_cache(maxsize=1)  # (the backends of one case run one after the other)
def _references(name, kind, dtype):
    """The exact (long double) value and gradient, numpy's, and their scale, of
    one case's data: computed once for both backends' tests."""
    case = CASES[name]
    x = data(kind, case.shape, dtype)
    return case.exact(x), case.numpy(x), case.scale(x)


def test_parallel_and_serial_plans_give_the_same_bits():
    """The order of additions is fixed by the plan, not by the threads: a
    plan's parallel loops (full sums over blocks, rows, bias gradients) give
    the serial plan's results bit for bit, call after call."""
    for name in ("sum", "dot", "var", "rows", "columns", "rows_fused", "bias"):
        for dtype in DTYPES:
            x, par = run(name, dtype, "numba", "centred")
            serial = plan(name, dtype, "numba", parallel=False).gradient(x)
            again = plan(name, dtype, "numba").gradient(x)
            for a, b in ((par, serial), (par, again)):
                assert a.value.tobytes() == b.value.tobytes(), name
                assert a.gradient.tobytes() == b.gradient.tobytes(), name


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_fewer_than_eight_values_are_added_in_order_as_numpy_does(backend):
    """numpy adds fewer than 8 values in order (its pairwise sum's base case):
    so does a plan's full sum, of a fused region, an inner product and an
    input, bit for bit.  The fold's pairs summed ``[1e17, -1e17, 1]`` to 0 and
    ``[M, -M, 2e300, -2e300, 1]`` (M the largest float) to NaN; numpy: 1."""
    big = np.finfo(np.float64).max
    rng = np.random.default_rng(4)
    cases = [np.array([1e17, -1e17, 1.0]), np.array([big, -big, 2e300, -2e300, 1.0])]
    cases += [rng.standard_normal(n) * 10.0 ** rng.integers(-3, 17, n) for n in range(1, 8)
              for _ in range(6)]
    for x in cases:
        for f, want in ((lambda x: np.sum(np.nan_to_num(x)), np.sum(x)),
                        (lambda x: np.sum(x * 1.0), np.sum(x)),
                        (lambda x: x @ np.ones(x.size), np.sum(x))):
            with np.errstate(all="ignore"):
                got = ha.compile(f, x, backend=backend).gradient(x).value
            assert float(got) == float(want) or np.isnan(want) and np.isnan(got), (x, got, want)


def test_special_values_propagate_as_in_numpy():
    """Compensation never turns an infinity into NaN: a sum that reaches
    inf, or overflows, is numpy's inf; NaN stays NaN."""
    for dtype in DTYPES:
        big = np.finfo(dtype).max
        for special, want in ((np.inf, np.inf), (-np.inf, -np.inf), (np.nan, np.nan),
                              (big, np.inf)):
            for name in ("sum", "dot", "rows", "columns", "rows_fused"):
                case = CASES[name]
                x = np.array(data("near1", case.shape, dtype))
                x.flat[[7, 1000]] = special
                for backend in ("numpy", "numba"):
                    with np.errstate(all="ignore"):
                        got = plan(name, dtype, backend).gradient(x).value
                    if np.isnan(want) or (name in ("rows", "columns", "rows_fused") and
                                          np.isinf(want)):
                        assert np.isnan(got) or np.isinf(got), (name, special, backend, got)
                    else:
                        assert got == want, (name, special, backend, got)


# ----------------------------------------------------------------------------
# batched, Hessian and Jacobian programs
# ----------------------------------------------------------------------------


def _mean_squared(x):
    return np.mean(x) ** 2


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
def test_batched_sums(dtype):
    """gradient_batch: one sum per row of the batch (a prange over the rows)."""
    X = data("ordered", (32, 1 << 15), dtype)
    for backend in ("numpy", "numba"):
        f = ha.compile(_mean_squared, X[0], backend=backend)
        res = f.gradient_batch(X)
        m = lsum(X, axis=1) / X.shape[1]
        scale = lsum(abs(X), axis=1) / X.shape[1]
        npm = np.mean(X, axis=1)
        assert_as_accurate(res.value, m ** 2, npm ** 2, 2 * scale ** 2, dtype, "values")
        assert_as_accurate(res.derivs[0], (2 * m / X.shape[1])[:, None] * _ones(X),
                           (2 * npm / X.shape[1])[:, None] * np.ones_like(X),
                           (2 * scale / X.shape[1])[:, None], dtype, "gradients")


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
def test_hessian_sums(dtype):
    """A Hessian program's tangent sweep sums over a large constant:
    f = sum((a W + b)^2) / 2, H = [[sum W^2, sum W], [sum W, n]]."""
    W = data("ordered", (N,), dtype)
    lw = np.asarray(W, L)
    exact = np.array([[lsum(lw * lw), lsum(lw)], [lsum(lw), N]], L)
    numpy_h = np.array([[np.sum(W * W), np.sum(W)], [np.sum(W), N]])
    scale = np.array([[lsum(lw * lw), lsum(abs(lw))], [lsum(abs(lw)), N]], L)
    x = np.array([0.5, -0.25], dtype)
    for backend in ("numpy", "numba"):
        res = ha.hessian(lambda x: np.sum((x[0] * W + x[1]) ** 2) / 2, x, backend=backend)
        assert_as_accurate(res.hessian, exact, numpy_h, scale, dtype, f"Hessian ({backend})")


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
def test_jacobian_sums(dtype):
    """A Jacobian program: y_k = x_k sum_j W_kj, J = diag(sum_j W_kj) -- the
    sums of the reverse (and forward) sweep, and the value's."""
    W = data("ordered", (4, 1 << 18), dtype)
    x = np.array([1.0, -2.0, 0.5, 3.0], dtype)
    rows = lsum(W, axis=1)
    scale = lsum(abs(W), axis=1)
    for backend in ("numpy", "numba"):
        for mode in ("reverse", "forward"):
            res = ha.jacobian(lambda x: np.sum(W * x[:, None], axis=1), x, mode=mode,
                              backend=backend)
            assert_as_accurate(np.diag(res.jacobian), rows, np.sum(W, axis=1), scale, dtype,
                               f"Jacobian ({backend}, {mode})")
            assert_as_accurate(res.value, rows * np.asarray(x, L), np.sum(W * x[:, None], 1),
                               scale * abs(np.asarray(x, L)), dtype, "value")


# ----------------------------------------------------------------------------
# the GPU backend's CUDA kernels, built for the host with nvcc
# ----------------------------------------------------------------------------


def _nvcc():
    from cuda_host import NVCC

    return NVCC


def _cuda_sum_cases():
    """Every sum kind in float64; float32 (the same kernels, another type) for
    two of them, the rest in the slow suite (each case is an nvcc build)."""
    for name in ["sum", "dot", "var", "rows", "columns_fused", "middle_fused", "bias"]:
        for dtype, dname in zip(DTYPES, ["float32", "float64"], strict=True):
            slow = dname == "float32" and name not in ("sum", "columns_fused")
            yield pytest.param(name, dtype, id=f"{name}-{dname}",
                               marks=[pytest.mark.slow] if slow else [])


@pytest.mark.skipif(_nvcc() is None, reason="nvcc is not installed")
@pytest.mark.parametrize("name, dtype", list(_cuda_sum_cases()))
def test_cuda_sums_on_the_host(name, dtype, monkeypatch):
    """The cupy backend's sums (a fused region's reduction over its scratch,
    a sum node over a view) by the generated kernels of
    :mod:`hybridad.backends.cuda.reduce`, compiled by nvcc and run on the
    CPU: the GPU's arithmetic, as accurate as the CPU backends."""
    from cuda_host import HostLauncher
    from cupy_strict import STRICT

    from hybridad.backends.cuda import program as cupy_backend

    launcher = HostLauncher()
    monkeypatch.setattr(cupy_backend, "device", lambda: (STRICT or np, launcher))
    case = CASES[name]
    p = ha.compile(case.f, data("near1", case.shape, dtype), backend="cupy")
    assert "hybridad_sum_" in "".join(launcher.built)
    for kind in case.kinds:
        x = data(kind, case.shape, dtype)
        res = p.gradient(x)
        exact, numpy_value, scale = case.exact(x), case.numpy(x), case.scale(x)
        assert_as_accurate(res.value, exact[0], numpy_value[0], scale[0], dtype, "value")
        assert_as_accurate(res.gradient, exact[1], numpy_value[1], scale[1], dtype, "gradient")


# ----------------------------------------------------------------------------
# every reduction is covered; nothing allocates
# ----------------------------------------------------------------------------


def _accumulating_numpy_functions():
    """Names of the coverage list's functions and ufunc methods whose traced
    graph (on a vector, a matrix, or two of them) holds a sum or a product."""
    from hybridad.coverage import rows
    from hybridad.frontend.numpy_api import HANDLED
    from hybridad.core.trace import Trace

    by_name = {}
    for f in HANDLED:
        from hybridad.coverage import _name

        by_name.setdefault(_name(f), f)
    found = set()
    for section, name, *_ in rows():
        if section not in ("functions", "ufunc methods", "ufuncs"):
            continue
        f = by_name.get(name)
        if f is None:
            parts = name.split(".")[1:]
            f = getattr(np, parts[0], None)
            for p in parts[1:]:
                f = getattr(f, p, None)
        if f is None:
            continue
        for shapes in (((COLS,),), ((4, 5),), ((5,), (5,)), ((4, 5), (4, 5)), ((4, 4),)):
            t = Trace()
            with t, np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # deprecated aliases (np.row_stack)
                args = [t.input(i, s, np.dtype(np.float64)) for i, s in enumerate(shapes)]
                try:
                    f(*args)
                except Exception:  # noqa: BLE001 - not a call of this form
                    continue
            if any(n.op in ("sum", "prod") for n in t.nodes):
                found.add(name)
                break
    return found


#: accumulating functions not held to numpy's accuracy by a case above, and why
EXEMPT = {"numpy.median": "adds at most the two middle values",
          "numpy.nanmedian": "counts the non-NaN elements (an integer-valued sum, exact) and "
                             "reads each middle value by a one-hot sum (one nonzero term)",
          "numpy.cov": "the rows' means (the mean case's path), then one matrix product "
                       "(BLAS, as numpy's cov)",
          "numpy.corrcoef": "numpy.cov over the outer product of its diagonal's roots",
          "numpy.searchsorted": "counts comparisons: an integer sum, exact",
          "numpy.count_nonzero": "counts nonzero elements: an integer sum, exact",
          "numpy.convolve": "short sums over the trailing axis of a gathered matrix (the "
                            "per-row path of the cases above); numpy's are plain dot products",
          "numpy.correlate": "as numpy.convolve",
          "numpy.trapezoid": "one sum over an axis of elementwise terms: the paths of the "
                             "sum cases above",
          "numpy.linalg.lstsq": "pinv(a) @ b: LAPACK (gesdd) and one BLAS product, as numpy's "
                                "own lstsq is LAPACK",
          "numpy.linalg.matrix_norm": "ord 2/-2 are one singular value (LAPACK), 'nuc' sums "
                                      "min(m, n) of them; the other orders are the sum paths",
          "max": "exact: the result is one of the elements", "min": "exact, as max",
          # numpy 2's array-API spellings: the top-level functions' own traces
          **{f"numpy.linalg.{name}": f"traces as {top}, whose cases are above" for name, top in (
              ("matmul", "numpy.matmul"), ("trace", "numpy.trace"),
              ("vecdot", "numpy.vecdot"), ("vector_norm", "numpy.linalg.norm"))}}


def test_every_reduction_has_an_accuracy_case():
    """Driven by the op registry and the coverage list: every reduction
    primitive, and every numpy function whose trace sums or multiplies, is
    exercised by a case above (or exempt, saying why) -- a new one fails
    here until it is."""
    from hybridad.ops import REGISTRY

    covered = {c for case in CASES.values() for c in case.covers} | set(EXEMPT)
    reducing = {name for name, op in REGISTRY.items() if op.kind == "reduce"}
    assert {"sum", "prod", "max", "min"} <= reducing
    missing = sorted((reducing | _accumulating_numpy_functions()) - covered)
    assert not missing, f"reductions without an accuracy case: {missing}"


NRT_SCRIPT = textwrap.dedent("""
    import numpy as np
    import hybridad as ha
    from numba.core.registry import cpu_target
    from numba.core.runtime import rtsys

    rtsys.initialize(cpu_target.target_context)  # (a plan hybridad compiles never starts it)

    rng = np.random.default_rng(0)
    x = rng.random(1 << 17)
    X = rng.random((256, 512))
    b = rng.random(512)
    cases = {
        "full": (lambda x: np.sum(x * x) + np.sum(x), x),
        "rows": (lambda X: np.sum(np.sum(np.exp(X), axis=1) ** 2), X),
        "columns": (lambda X: np.sum(np.sum(X * X, axis=0) ** 2) + np.sum(np.sum(X, 0) ** 2), X),
        "bias": (lambda b: np.sum(np.tanh(X + b)), b),
    }
    for dtype in (np.float64, np.float32):
        for name, (f, a) in cases.items():
            a = a.astype(dtype)
            plan = ha.compile(f, a)
            res = plan.new_result()
            plan.gradient(a, out=res)
            s0 = rtsys.get_allocation_stats()
            for _ in range(50):
                plan.gradient(a, out=res)
            s1 = rtsys.get_allocation_stats()
            print(name, s1.alloc - s0.alloc, s1.free - s0.free)
""")


def test_no_allocation_per_call():
    """The new loops (blocks per row, per-thread scratch, the side arrays of
    column sums, the blocks' sums of a parallel full sum) allocate nothing:
    numpy's counter and numba's runtime (NUMBA_NRT_STATS) both see zero."""
    from hybridad.testing import assert_no_alloc

    for name in ("sum", "var", "rows", "columns", "rows_fused", "bias"):
        for dtype in DTYPES:
            case = CASES[name]
            x = data("near1", case.shape, dtype)
            p = plan(name, dtype, "numba")
            res = p.new_result()
            assert_no_alloc(p.gradient, x, out=res, n=5)
    _no_nrt_allocation("1")


@pytest.mark.slow
def test_no_nrt_allocation_per_call_by_numba():
    """The same loops compiled by numba (what hybridad's compiler refuses gets
    them): numba's runtime counts no allocation either."""
    _no_nrt_allocation("0")


def _no_nrt_allocation(jit):
    from conftest import nrt_rows

    rows = nrt_rows(NRT_SCRIPT, jit)
    assert len(rows) == 8, rows
    for name, allocs, frees in rows:
        assert allocs == "0" and frees == "0", (jit, name, allocs, frees)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
def test_ten_million(dtype):
    """The issue's example: the mean of 1e7 float32 values (a running float32
    sum was off by ~1e-3 relative, here and on the gradient of the var)."""
    x = data("near1", (10 ** 7,), dtype)
    for backend in ("numpy", "numba"):
        for name in ("mean", "var"):
            res = ha.compile(CASES[name].f, x, backend=backend).gradient(x)
            exact, numpy_value, scale = (c(x) for c in (CASES[name].exact, CASES[name].numpy,
                                                        CASES[name].scale))
            assert_as_accurate(res.value, exact[0], numpy_value[0], scale[0], dtype, name)
            assert_as_accurate(res.gradient, exact[1], numpy_value[1], scale[1], dtype, name)


def test_leading_sums_run_in_chunks_within_a_memory_cap():
    # a bias gradient's sum over the batch: chunks of axis 0 (a prange in
    # parallel plans; the same bits serial, test above), partials capped
    from hybridad.backends.numba.reduce import MAX_PARTIALS, leading_chunks

    assert leading_chunks("sum", np.float64, (10000, 16), (0,)) == 16
    assert leading_chunks("sum", np.float32, (100000, 1), (0,)) == 16
    assert 1 < leading_chunks("sum", np.float64, (1024, 1024), (0,)) * 1024 <= MAX_PARTIALS
    assert leading_chunks("sum", np.float64, (2048, 100000), (0,)) == 1  # wide: no copies
    assert leading_chunks("max", np.float64, (10000, 16), (0,)) == 1  # exact in any order
    assert leading_chunks("sum", np.float64, (16, 10000), (1,)) == 1  # trailing: row blocks
