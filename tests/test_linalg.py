"""Every numpy.linalg function hybridad traces, as a table: the forward value
is numpy's (the same LAPACK call, numpy's conventions and dtypes), and the
derivatives are those of the function numpy computes -- gradients against
central differences of numpy's own function, Hessians and Hessian-vector
products against central differences of the gradient -- on both backends,
for single matrices and broadcast stacks, float64 and float32.

``cholesky``, ``eigh`` and ``eigvalsh`` read one triangle of their input: the
inputs here are NOT symmetric, so the unread triangle must get a zero
gradient and the read one its true partials (autograd's ``test_eigvalh_*``
cases).  A new linalg primitive or numpy.linalg function fails
:func:`test_the_table_covers_every_linalg_op` until it has a row here.

Each test runs every row of the table through ONE plan (the rows' arguments
side by side, their results concatenated), so the numba compilations stay
few; failures name the row.
"""

import math

import numpy as np
import pytest
import scipy.linalg.lapack as scipy_lapack
from conftest import BACKENDS, slow_on_numba

import hybridad as ha
from hybridad.ops.lapack import LAPACK_OPS
from hybridad.frontend.numpy_api import HANDLED
from hybridad.ops import REGISTRY
from hybridad.testing import numerical_gradient

N = 3


def _general(rng, shape):
    """Well conditioned, not symmetric."""
    return rng.standard_normal(shape) + 2 * N * np.eye(shape[-1])


def _pd(rng, shape):
    """Not symmetric, but both triangles stand for positive definite matrices."""
    b = rng.standard_normal(shape)
    return b @ np.swapaxes(b, -1, -2) + N * np.eye(shape[-1]) + 0.4 * rng.standard_normal(shape)


def _any(rng, shape):
    """Not symmetric (eigh reads one triangle): distinct eigenvalues either way."""
    return rng.standard_normal(shape) * 2


def _rhs(rng, shape):
    return rng.standard_normal(shape)


#: name -> (function of arrays as numpy computes it, input makers, triangle read
#: by the first argument: "L", "U" or None for all of it)
TABLE = {
    "solve": (np.linalg.solve, (_general, _rhs), None),
    "solve_vector": (np.linalg.solve, (_general, _rhs), None),  # b 1-D: one vector
    "inv": (np.linalg.inv, (_general,), None),
    "det": (np.linalg.det, (_general,), None),
    "slogdet": (lambda a: np.linalg.slogdet(a).logabsdet, (_general,), None),
    "slogdet_sign": (lambda a: np.linalg.slogdet(a)[0], (_general,), None),
    "cholesky": (np.linalg.cholesky, (_pd,), "L"),
    "cholesky_upper": (lambda a: np.linalg.cholesky(a, upper=True), (_pd,), "U"),
    "eigh_values": (lambda a: np.linalg.eigh(a).eigenvalues, (_any,), "L"),
    "eigh_vectors": (lambda a: np.linalg.eigh(a).eigenvectors, (_any,), "L"),
    "eigh_U_values": (lambda a: np.linalg.eigh(a, "U")[0], (_any,), "U"),
    "eigh_U_vectors": (lambda a: np.linalg.eigh(a, UPLO="U")[1], (_any,), "U"),
    "eigvalsh": (np.linalg.eigvalsh, (_any,), "L"),
    "eigvalsh_U": (lambda a: np.linalg.eigvalsh(a, "U"), (_any,), "U"),
    "norm_fro": (lambda a: np.linalg.norm(a, "fro", axis=(-2, -1)), (_any,), None),
    "norm_1": (lambda a: np.linalg.norm(a, 1, axis=(-2, -1)), (_any,), None),
    "norm_-1": (lambda a: np.linalg.norm(a, -1, axis=(-1, -2), keepdims=True), (_any,), None),
    "norm_inf": (lambda a: np.linalg.norm(a, np.inf, axis=(-2, -1)), (_any,), None),
    "norm_-inf": (lambda a: np.linalg.norm(a, -np.inf, axis=(-2, -1)), (_any,), None),
}

#: the numpy.linalg functions in the table (and what else exercises them)
FUNCTIONS = {np.linalg.solve, np.linalg.inv, np.linalg.det, np.linalg.slogdet,
             np.linalg.cholesky, np.linalg.eigh, np.linalg.eigvalsh, np.linalg.norm}

#: shape of each argument: one matrix, and stacks that broadcast
SHAPES = {
    "single": [(N, N), (N, 2)],
    "stack": [(2, 3, N, N), (2, 3, N, 2)],
    "broadcast": [(3, N, N), (2, 1, N, 2)],
}


def _args(name, shape="single", seed=0):
    _, makers, _ = TABLE[name]
    rng = np.random.default_rng([seed, sum(map(ord, name + shape))])
    shapes = [(N,)] if name == "solve_vector" else SHAPES[shape][1:]
    return tuple(make(rng, s) for make, s in zip(makers, SHAPES[shape][:1] + shapes,
                                                 strict=False))


def _weights(f, args, seed=7):
    """A fixed cotangent: s(args) = sum(f(args) * W) is the scalar differentiated."""
    y = np.asarray(f(*args))
    return np.random.default_rng(seed).standard_normal(y.shape)


def _scalar(f, w):
    return lambda *a: np.sum(f(*a) * w)


class Rows:
    """The table's rows (``names``) side by side: all their arguments in one
    tuple (:attr:`args`), and functions of that tuple."""

    def __init__(self, names, shape="single", dtype=np.float64, seed=0, make=_args):
        self.names, self.spans, args = list(names), [], []
        for name in self.names:
            a = tuple(x.astype(dtype) for x in make(name, shape, seed))
            self.spans.append((len(args), len(a)))
            args += a
        self.args = tuple(args)

    def split(self, args):
        return [args[i:i + k] for i, k in self.spans]

    def values(self, *args):
        """Every row's value, raveled and concatenated (hybridad traces this)."""
        return np.concatenate([np.ravel(TABLE[n][0](*a)) for n, a in
                               zip(self.names, self.split(args), strict=True)])

    def scalars(self, seed=7):
        """Each row's s(args) = sum(f(args) * W)."""
        return [_scalar(TABLE[n][0], _weights(TABLE[n][0], a, seed)) for n, a in
                zip(self.names, self.split(self.args), strict=True)]

    def scalar(self, seed=7):
        """The sum of :meth:`scalars`, a function of all the arguments."""
        parts = self.scalars(seed)
        return lambda *args: sum(s(*a) for s, a in zip(parts, self.split(args), strict=True))


def _values(rows, backend):
    """Each row's value as hybridad computes it (the primal program of a
    Jacobian plan of :meth:`Rows.values`), unraveled."""
    got = ha.compile(rows.values, *rows.args, backend=backend, jacobian=True).value(*rows.args)
    out, at = [], 0
    for name, a in zip(rows.names, rows.split(rows.args), strict=True):
        shape = np.shape(TABLE[name][0](*a))
        size = int(np.prod(shape, dtype=np.int64))
        out.append(got[at:at + size].reshape(shape))
        at += size
    return out


# ----------------------------------------------------------------------------
# the table covers every op
# ----------------------------------------------------------------------------


def test_the_table_covers_every_linalg_op():
    # the SVD family, QR, eig, scipy's LAPACK calls: tests/test_linalg_more.py's rows
    from test_linalg_more import FUNCTIONS as MORE_FUNCTIONS
    from test_linalg_more import OPS as MORE_OPS

    linalg_ops = {name for name, op in REGISTRY.items()
                  if op.abstract.__module__ == "hybridad.ops.linalg"}
    assert linalg_ops | MORE_OPS == set(LAPACK_OPS)
    rows = Rows(TABLE)
    # every argument differentiated: the reverse rules' own ops (cholesky_adjoint) count
    plan = ha.compile(rows.scalar(), *rows.args, backend="numpy",
                      argnums=tuple(range(len(rows.args))))
    traced = {n.op for n in plan.graph.nodes}
    if traced & {"solve_lu", "lu_factors", "cho_solve"}:  # (a matrix's solves share one
        traced.add("solve")  # factorization: hybridad/transforms/factors.py)
    assert linalg_ops <= traced, f"no row for {linalg_ops - traced}"
    # (numpy 2's array-API spellings -- np.linalg.outer, vector_norm, ... -- are the
    # top-level functions' traces: tests/test_array_api_strict.py)
    from hybridad.frontend.numpy_linalg import _LINALG_SPELLINGS

    spellings = {getattr(np.linalg, name) for name in _LINALG_SPELLINGS
                 if hasattr(np.linalg, name)}
    implemented = {f for f in HANDLED if getattr(f, "__module__", "").startswith("numpy.linalg")
                   and f not in spellings}
    assert implemented == FUNCTIONS | MORE_FUNCTIONS, \
        f"no row for {implemented ^ (FUNCTIONS | MORE_FUNCTIONS)}"


# ----------------------------------------------------------------------------
# values: numpy's
# ----------------------------------------------------------------------------


# numba: float64, one shape by default (both backends call the same kernels; the
# numba case adds its code generation, 8-23 s a case to compile), the rest slow
@pytest.mark.parametrize("dtype, shape, backend", [
    pytest.param(d, s, b, id=f"{d.__name__}-{s}-{b}",
                 marks=slow_on_numba((np.float64, "single"))(b, (d, s)))
    for d in (np.float64, np.float32) for s in sorted(SHAPES) for b in BACKENDS])
def test_value_is_numpys(dtype, shape, backend):
    rows = Rows(TABLE, shape, dtype)
    for name, a, got in zip(rows.names, rows.split(rows.args), _values(rows, backend),
                            strict=True):
        expected = np.asarray(TABLE[name][0](*a))
        assert got.dtype == expected.dtype and got.shape == expected.shape, name
        # the same LAPACK routine and arguments as numpy (float32 computed in
        # float64, as numpy does): numpy's value to rounding -- the same
        # eigenvector signs, the same branch -- whichever LAPACK build each links
        tol = 1e-12 if dtype == np.float64 else 1e-6
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * np.abs(expected).max(),
                                   err_msg=name)


def _syevd(a, vectors, uplo):
    w, v, info = scipy_lapack.dsyevd(a, compute_v=int(vectors), lower=int(uplo == "L"))
    assert info == 0
    return (w, v) if vectors else w


def _slogdet(a):
    lu, piv, info = scipy_lapack.dgetrf(a)
    assert info == 0
    d = np.diagonal(lu)
    sign = (-1.0) ** int(np.sum(piv != np.arange(len(d)))) * np.prod(np.sign(d))
    logdet = 0.0
    for u in np.abs(d):  # in order, with the C library's log, as numpy
        logdet += math.log(u)
    return sign, logdet


#: each function as the LAPACK call numpy.linalg makes, through scipy: the
#: library hybridad's kernels call, so the results must agree bit for bit
LAPACK_CALLS = {
    "solve": lambda a, b: scipy_lapack.dgesv(a, b)[2],
    "inv": lambda a: scipy_lapack.dgesv(a, np.eye(len(a)))[2],
    "det": lambda a: _slogdet(a)[0] * math.exp(_slogdet(a)[1]),
    "slogdet": lambda a: _slogdet(a)[1],
    "slogdet_sign": lambda a: _slogdet(a)[0],
    "cholesky": lambda a: np.tril(scipy_lapack.dpotrf(a, lower=1, clean=0)[0]),
    "cholesky_upper": lambda a: np.triu(scipy_lapack.dpotrf(a, lower=0, clean=0)[0]),
    "eigh_values": lambda a: _syevd(a, True, "L")[0],
    "eigh_vectors": lambda a: _syevd(a, True, "L")[1],
    "eigh_U_values": lambda a: _syevd(a, True, "U")[0],
    "eigh_U_vectors": lambda a: _syevd(a, True, "U")[1],
    "eigvalsh": lambda a: _syevd(a, False, "L"),
    "eigvalsh_U": lambda a: _syevd(a, False, "U"),
}


def _lapack_args(n):
    def make(name, shape, seed):
        rng = np.random.default_rng([n, sum(map(ord, name))])
        a = TABLE[name][1][0](rng, (2, n, n))
        return (a, rng.standard_normal((2, n, 2))) if name == "solve" else (a,)
    return make


# numba: n = 2 by default (6-13 s a case to compile), the other sizes slow
@pytest.mark.parametrize("n, backend", [
    pytest.param(n, b, id=f"{n}-{b}", marks=slow_on_numba(2)(b, n))
    for n in (1, 2, 5, 12) for b in BACKENDS])
def test_the_lapack_call_is_numpys(n, backend):
    """Bit for bit the LAPACK routine, ``uplo`` and ``jobz`` numpy.linalg uses
    (for float32 too: numpy computes it in float64, then rounds)."""
    for dtype in (np.float64, np.float32):
        rows = Rows(LAPACK_CALLS, dtype=dtype, make=_lapack_args(n))
        for name, a, got in zip(rows.names, rows.split(rows.args), _values(rows, backend),
                                strict=True):
            want = np.stack([LAPACK_CALLS[name](*(x[i].astype(np.float64) for x in a))
                             for i in range(2)]).astype(dtype)
            np.testing.assert_array_equal(got, want, err_msg=f"{name}, {np.dtype(dtype)}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_matrices_and_stacks(backend):
    names = ["solve", "inv", "det", "slogdet", "cholesky", "eigh_vectors", "eigvalsh_U"]
    for shape in ((0, 0), (2, 0, 0), (0, 2, 2)):
        def make(name, _, __, shape=shape):
            a = np.eye(shape[-1]) + np.zeros(shape)
            return (a, np.ones(shape[:-1] + (1,))) if name == "solve" else (a,)
        rows = Rows(names, make=make)
        for name, a, got in zip(names, rows.split(rows.args), _values(rows, backend),
                                strict=True):
            expected = np.asarray(TABLE[name][0](*a))
            assert got.shape == expected.shape and got.dtype == expected.dtype, name
            np.testing.assert_array_equal(got, expected, err_msg=name)


# ----------------------------------------------------------------------------
# derivatives: those of numpy's function
# ----------------------------------------------------------------------------


def _numerical(f, args, k):
    def fk(xk):
        a = list(args)
        a[k] = xk
        return f(*a)

    return numerical_gradient(fk, args[k])


def _unread(name, a):
    """Mask of the entries of ``a`` the row's numpy function never reads."""
    triangle, n = TABLE[name][2], a.shape[-1]
    if triangle is None:
        return np.zeros(a.shape, bool)
    mask = np.triu(np.ones((n, n), bool), 1) if triangle == "L" else \
        np.tril(np.ones((n, n), bool), -1)
    return np.broadcast_to(mask, a.shape)


def _check_gradients(rows, grads):
    for name, a, s, g in zip(rows.names, rows.split(rows.args), rows.scalars(),
                             rows.split(grads), strict=True):
        for k in range(len(a)):
            num = _numerical(s, a, k)
            np.testing.assert_allclose(g[k], num, rtol=0, atol=1e-7 * max(1.0, np.abs(num).max()),
                                       err_msg=f"{name}, argument {k}")
        # numpy never reads the other triangle: its partials are exactly 0
        assert np.all(g[0][_unread(name, a[0])] == 0), name


@pytest.mark.parametrize("shape, backend", [
    pytest.param(shape, backend, id=f"{shape}-{backend}",
                 # numba: one shape by default (40 s a shape to compile), the others slow
                 marks=[pytest.mark.slow] if backend == "numba" and shape != "single" else [])
    for shape in sorted(SHAPES) for backend in BACKENDS])
def test_gradient_is_numpys_derivative(shape, backend):
    rows = Rows(TABLE, shape)
    s = rows.scalar()
    res = ha.gradient(s, *rows.args, argnums=tuple(range(len(rows.args))), backend=backend)
    np.testing.assert_allclose(float(res.value), s(*rows.args), rtol=1e-12)
    _check_gradients(rows, res.gradient)


@pytest.mark.parametrize("backend", [  # numba: 18 s of compiles, slow
    pytest.param(b, marks=slow_on_numba()(b)) for b in BACKENDS])
def test_gradient_on_symmetric_input(backend):
    def symmetric(name, shape, seed):
        (a,) = _args(name, shape, seed)
        return ((a + np.swapaxes(a, -1, -2)) / 2,)

    rows = Rows([n for n, row in TABLE.items() if row[2] is not None], "stack",
                make=symmetric)
    res = ha.gradient(rows.scalar(), *rows.args, argnums=tuple(range(len(rows.args))),
                      backend=backend)
    _check_gradients(rows, res.gradient)


@pytest.mark.slow  # 55 s of compiles; float32 values: test_value_is_numpys
def test_float32_gradient_is_the_float64_one_rounded():
    rows64, rows32 = Rows(TABLE, "stack"), Rows(TABLE, "stack", np.float32)
    nums = tuple(range(len(rows64.args)))
    g64 = ha.gradient(rows64.scalar(), *rows64.args, argnums=nums, backend="numpy").gradient
    for backend in BACKENDS:
        g32 = ha.gradient(rows32.scalar(), *rows32.args, argnums=nums, backend=backend).gradient
        for name, a, b in zip(rows64.names, rows64.split(g64), rows32.split(g32), strict=True):
            for x, y in zip(a, b, strict=True):
                assert y.dtype == np.float32, name
                np.testing.assert_allclose(y, x, rtol=0, atol=1e-4 * max(1.0, np.abs(x).max()),
                                           err_msg=f"{name} ({backend})")


#: the table in groups of rows, one numba plan each (one plan of every row took
#: ~500 s of numba compilation: its time grows faster than the function's size)
_HESSIAN_GROUPS = [list(TABLE)[i::4] for i in range(4)]


@pytest.mark.parametrize("backend, names", [pytest.param("numpy", list(TABLE), id="numpy")] + [
    # numba: 45-50 s a quarter of the table, all slow (forward over reverse on
    # numba: tests/test_higher.py; these rules' jvps: the numpy case)
    pytest.param("numba", g, id=f"numba-{i}", marks=[pytest.mark.slow])
    for i, g in enumerate(_HESSIAN_GROUPS)])
def test_hessian_and_hvp(backend, names):
    """Forward over reverse: every op's jvp rule, through its vjp rule.  The
    rows' first arguments are one flat vector ``x`` (the Hessian is
    block-diagonal); the reference is central differences of the
    (finite-difference checked) numpy-backend gradient."""
    rows = Rows(names, "broadcast", seed=1)
    s, split = rows.scalar(), rows.split(rows.args)
    firsts = [a[0] for a in split]
    sizes = np.cumsum([0] + [a.size for a in firsts])

    def f(x, *rest):
        args, it = [], iter(rest)
        for j, a in enumerate(split):
            args.append(np.reshape(x[sizes[j]:sizes[j + 1]], a[0].shape))
            args += [next(it) for _ in a[1:]]
        return s(*args)

    x = np.concatenate([a.ravel() for a in firsts])
    rest = [b for a in split for b in a[1:]]
    grad = ha.compile(f, x, *rest, backend="numpy")
    expected = np.zeros((x.size, x.size))
    for j in range(x.size):
        step = 1e-5 * max(1.0, abs(x[j]))
        up, down = x.copy(), x.copy()
        up[j] += step
        down[j] -= step
        expected[:, j] = (grad.gradient(up, *rest).gradient -
                          grad.gradient(down, *rest).gradient) / (2 * step)
    h = ha.hessian(f, x, *rest, backend=backend).hessian
    for j, name in enumerate(rows.names):
        block = slice(sizes[j], sizes[j + 1])
        ref = expected[block, block]
        np.testing.assert_allclose(h[block, block], ref, rtol=0,
                                   atol=1e-6 * max(1.0, np.abs(ref).max()), err_msg=name)
    np.testing.assert_allclose(h, expected, rtol=0, atol=1e-6 * max(1.0, np.abs(expected).max()))
    v = np.random.default_rng(3).standard_normal(x.shape)
    hv = ha.hvp(f, x, v, *rest, backend=backend).hvp
    np.testing.assert_allclose(hv, h @ v, rtol=0, atol=1e-10 * np.abs(h).max() * np.abs(v).sum())


# ----------------------------------------------------------------------------
# cholesky's reverse rule: the blocked sweep against the closed form, and the
# rules of cholesky_adjoint itself (second order), at orders spanning blocks
# ----------------------------------------------------------------------------


def _closed_form_adjoint(lo, g):
    """The lower triangle of S + S^T (diagonal S_ii), S = L^-T phi(L^T tril(g)) L^-1."""
    import scipy.linalg as sl

    n = lo.shape[-1]
    p = np.tril(lo.T @ np.tril(g)) * (1 - 0.5 * np.eye(n))
    x = sl.solve_triangular(lo, p, lower=True, trans=1)
    s = sl.solve_triangular(lo, x.T, lower=True, trans=1).T
    return np.tril(s + s.T) * (1 - 0.5 * np.eye(n))


def _factor(rng, n):
    a = rng.standard_normal((n, n))
    return np.linalg.cholesky(a @ a.T / n + np.eye(n))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [1, 2, 63, 64, 65, 150])
def test_cholesky_adjoint_is_the_closed_form(n, dtype):
    """The blocked sweep (LAPACK's d- or s-routines: trsm, gemm) against the
    closed form in float64, to the precision of the dtype."""
    from hybridad.ops.lapack import kind_of
    from hybridad.ops.lapack_solve import CHOL_BLOCK, cholesky_adjoint, work_size

    assert CHOL_BLOCK == 64  # the orders above straddle one and two blocks
    rng = np.random.default_rng(n)
    lo = np.stack([_factor(rng, n) for _ in range(2)]).astype(dtype)
    g = rng.standard_normal((2, n, n)).astype(dtype)  # upper triangle: ignored
    out = np.full((2, n, n), np.nan, dtype)
    cholesky_adjoint(lo, g, out, np.empty(work_size("cholesky_adjoint", n, n), dtype),
                     kind_of(dtype))
    tol = 1e-13 if dtype == np.float64 else 2e-5
    for i in range(2):
        ref = _closed_form_adjoint(lo[i].astype(float), g[i].astype(float))
        np.testing.assert_allclose(out[i], ref, rtol=0, atol=tol * np.abs(ref).max())
        assert np.all(np.triu(out[i], 1) == 0)


def _directional(f, x, v, eps=1e-6):
    return (f(x + eps * v) - f(x - eps * v)) / (2 * eps)


def test_cholesky_adjoint_rules_across_blocks():
    """cholesky_adjoint's own vjp (gradient of a function of it) and jvp (the
    Hessian-vector product of a function of cholesky at n = 150, forward over
    reverse) against central differences along random directions."""
    from hybridad.ops.common import bind

    n = 150
    rng = np.random.default_rng(5)
    lo, g, w = _factor(rng, n)[None], rng.standard_normal((1, n, n)), rng.standard_normal((n, n))

    def h(lo, g):
        return np.sum(w * bind("cholesky_adjoint", lo, g)[0])

    res = ha.gradient(h, lo, g, argnums=(0, 1), backend="numpy")
    vl, vg = np.tril(rng.standard_normal(lo.shape)), rng.standard_normal(g.shape)
    plain = ha.compile(h, lo, g, backend="numpy", argnums=(0, 1))
    dl = _directional(lambda x: plain.value(x, g), lo, vl)
    dg = _directional(lambda x: plain.value(lo, x), g, vg)
    np.testing.assert_allclose(np.vdot(res.gradient[0], vl), dl, rtol=1e-6)
    np.testing.assert_allclose(np.vdot(res.gradient[1], vg), dg, rtol=1e-6)

    k = lo[0] @ lo[0].T

    def f(x):
        return np.sum(w * np.linalg.cholesky(np.reshape(x, (n, n))))

    grad = ha.compile(f, k.ravel(), backend="numpy")
    v = rng.standard_normal(n * n)
    hv = ha.hvp(f, k.ravel(), v, backend="numpy").hvp
    num = _directional(lambda x: grad.gradient(x).gradient.copy(), k.ravel(), v, eps=1e-5)
    np.testing.assert_allclose(hv, num, rtol=0, atol=1e-6 * np.abs(num).max())
