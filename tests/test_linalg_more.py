"""numpy.linalg's SVD family (svd, svdvals, pinv, the norms 2, -2 and 'nuc'),
eig/eigvals, qr, lstsq, matrix_power, and scipy.linalg's solves,
factorizations, eigh, expm and structured matrices, traced.

Values are numpy's and scipy's (bit for bit where hybridad makes scipy's own
LAPACK call: solve_triangular, lu_factor, cholesky, eigh), gradients agree
with central differences of numpy's and scipy's functions on both backends,
Hessians with differences of the gradient, a repeated numba call allocates
nothing, and what cannot be traced exactly is refused by name.

numba compiles LAPACK plans slowly: the rows below go through few plans (the
rows side by side in one function), their failures named by row.
"""

import numpy as np
import pytest
import scipy.linalg as sl
from conftest import assert_grad

import hybridad as ha
from hybridad.frontend.numpy_api import HANDLED
from hybridad.ops import REGISTRY
from hybridad.testing import assert_no_alloc, numerical_gradient

RNG = np.random.default_rng(20261125)


def _mat(shape, shift=0.0):
    x = RNG.standard_normal(shape)
    return x + shift * np.eye(shape[-1]) if shift else x


T = _mat((5, 3))  # tall
W = _mat((3, 5))  # wide
A = _mat((4, 4), 4.0)  # square, well conditioned, not symmetric
S = A @ A.T + 4 * np.eye(4)  # symmetric positive definite
N = S + 0.7 * _mat((4, 4))  # not symmetric: both triangles positive definite
_Q = _mat((4, 4), 3.0)
E = _Q @ np.diag([-2.0, -0.5, 1.0, 3.0]) @ np.linalg.inv(_Q)  # real, distinct spectrum
B = _mat((4, 2))
STACK = _mat((2, 5, 3))
RANK1 = np.outer(_mat((5,)), _mat((3,)))  # rank-deficient
CB = np.abs(A) + 5 * np.eye(4)  # upper and lower parts invertible


def _w(shape, seed):
    """Fixed weights: sum(y * w) is the scalar differentiated."""
    return np.random.default_rng(seed).standard_normal(np.shape(shape))


def _dot(y, seed=0):
    return np.sum(y * _w(y, seed))


def _signless(v):
    """Eigenvectors times their first components: independent of their signs."""
    return v * v[..., :1, :]


# ----------------------------------------------------------------------------
# values: one plan per group and backend
# ----------------------------------------------------------------------------

#: name -> (function of the arguments returning arrays, arguments)
NUMPY_ROWS = {
    "svd_full_tall": (np.linalg.svd, (T,)),
    "svd_full_wide": (np.linalg.svd, (W,)),
    "svd_reduced_stack": (lambda a: np.linalg.svd(a, full_matrices=False), (STACK,)),
    "svd_values": (lambda a: np.linalg.svd(a, compute_uv=False), (W,)),
    "svdvals": (np.linalg.svdvals, (STACK,)),
    "pinv": (np.linalg.pinv, (T,)),
    "pinv_wide_rtol": (lambda a: np.linalg.pinv(a, rtol=None), (W,)),
    "pinv_rank1": (np.linalg.pinv, (RANK1,)),
    "pinv_stack_rcond": (lambda a: np.linalg.pinv(a, 1e-3), (STACK,)),
    "eig": (np.linalg.eig, (E,)),
    "eig_stack": (np.linalg.eig, (np.stack([E, S]),)),
    "eigvals": (np.linalg.eigvals, (E,)),
    "qr_tall": (np.linalg.qr, (T,)),
    "qr_wide": (np.linalg.qr, (W,)),
    "qr_complete_tall": (lambda a: np.linalg.qr(a, "complete"), (T,)),
    "qr_complete_wide": (lambda a: np.linalg.qr(a, "complete"), (W,)),
    "qr_r": (lambda a: np.linalg.qr(a, "r"), (STACK,)),
    "lstsq_vector": (lambda a, b: np.linalg.lstsq(a, b), (T, B[:, 0].repeat(2)[:5])),
    "lstsq_matrix": (lambda a, b: np.linalg.lstsq(a, b, rcond=None), (T, _mat((5, 2)))),
    "lstsq_wide": (lambda a, b: np.linalg.lstsq(a, b), (W, _mat((3,)))),
    "lstsq_rank1": (lambda a, b: np.linalg.lstsq(a, b)[::2], (RANK1, _mat((5,)))),
    "tensorsolve": (np.linalg.tensorsolve, (np.eye(6).reshape(2, 3, 6) * 3 + 0.1 * _mat((2, 3, 6)),
                                            _mat((2, 3)))),
    "tensorinv": (np.linalg.tensorinv, (np.eye(6).reshape(2, 3, 6) * 3 + 0.1 * _mat((2, 3, 6)),)),
    "matrix_power": (lambda a: [np.linalg.matrix_power(a, k) for k in (0, 1, 2, 3, 5, 6)],
                     (A / 4,)),
    "matrix_power_negative": (lambda a: [np.linalg.matrix_power(a, k) for k in (-1, -3)],
                              (A,)),
    "multi_dot": (lambda a, b: [np.linalg.multi_dot([a, b, b.T, a]),
                                np.linalg.multi_dot([a[0], a, b]),
                                np.linalg.multi_dot([a[1], a, a[2]])], (A, B)),
    "norms": (lambda a: [np.linalg.norm(a, o) for o in (2, -2, "nuc")], (T,)),
    "cond": (lambda a: [np.linalg.cond(a, p) for p in (None, 2, -2, "fro", "nuc", 1, -1,
                                                        np.inf, -np.inf)], (CB,)),
    "norms_axes": (lambda a: [np.linalg.norm(a, o, axis=(2, 1), keepdims=True)
                              for o in (2, -2, "nuc")], (STACK,)),
    "norms_other": (lambda a: [np.linalg.norm(a, 1), np.linalg.norm(a, -2, axis=1),
                               np.linalg.matrix_norm(a, ord="nuc")], (T,)),
}

SCIPY_ROWS = {
    "solve_triangular": (lambda a, b: [sl.solve_triangular(a, b, lower=lo, trans=t,
                                                           unit_diagonal=u)
                                       for lo in (False, True) for t in (0, 1, "C")
                                       for u in (False, True)], (CB, B)),
    # a traced transpose is Fortran-ordered for scipy, which hands it to trtrs as
    # it is: hybridad makes that call on the matrix itself (no copy)
    "solve_triangular_transposed": (lambda a, b: [sl.solve_triangular(a.T, b, lower=lo, trans=t)
                                                  for lo in (False, True)
                                                  for t in (0, 1, "C")], (CB, B)),
    "solve_triangular_vector_stack": (lambda a, b: sl.solve_triangular(a, b, lower=True),
                                      (np.stack([CB, CB.T]), B[:, 0])),
    "cholesky": (lambda a: [sl.cholesky(a), sl.cholesky(a, lower=True)], (N,)),
    "cho_factor": (lambda a: [sl.cho_factor(a)[0], sl.cho_factor(a, lower=True)[0]], (N,)),
    "cho_solve": (lambda a, b: [sl.cho_solve(sl.cho_factor(a), b),
                                sl.cho_solve(sl.cho_factor(a, lower=True), b[:, 0])], (N, B)),
    "lu_factor": (lambda a: [x.astype(float) for x in sl.lu_factor(a)], (A,)),
    "lu_solve": (lambda a, b: [sl.lu_solve(sl.lu_factor(a), b, trans=t) for t in (0, 1, 2)],
                 (A, B)),
    "lu_solve_constant": (lambda b: [sl.lu_solve(sl.lu_factor(A), b, trans=t)
                                     for t in (0, 1)], (B,)),
    "solve": (lambda a, b: [sl.solve(a, b, assume_a=k, transposed=t)
                            for k in (None, "gen", "diagonal", "tridiagonal",
                                      "upper triangular", "lower triangular")
                            for t in (False, True)], (CB, B)),
    "solve_symmetric": (lambda a, b: [sl.solve(a, b, assume_a=k, lower=lo)
                                      for k in ("sym", "pos", "her") for lo in (False, True)],
                        (N, B)),
    "solve_broadcast": (lambda a, b: sl.solve(a, b), (np.stack([A, CB]), B[:, 0])),
    "eigh": (lambda a: [*sl.eigh(a), *sl.eigh(a, lower=False)], (N,)),
    "eigh_subset": (lambda a: [*sl.eigh(a, subset_by_index=[1, 2]),
                               sl.eigh(a, eigvals_only=True, subset_by_index=(0, 3)),
                               sl.eigh(a, eigvals_only=True, lower=False)], (N,)),
    "eigh_evd": (lambda a: [*sl.eigh(a, driver="evd"), sl.eigh(a, eigvals_only=True,
                                                                 driver="evd")], (N,)),
    "expm": (lambda a: [sl.expm(a), sl.expm(3 * a), sl.expm(a[:1, :1])], (A / 4,)),
    "expm_stack": (sl.expm, (np.stack([A, -A.T]) / 5,)),
    "block_diag": (lambda a, b: sl.block_diag(a, b, 2.0, a[0]), (A, B)),
    "toeplitz": (lambda c, r: [sl.toeplitz(c, r), sl.toeplitz(c), sl.toeplitz(r[:2], c)],
                 (A[0], B[:, 1].repeat(2))),
    "circulant": (lambda c: [sl.circulant(c), sl.circulant(np.stack([c, 2 * c]))], (A[1],)),
}

#: rows making the LAPACK call scipy makes, on the same layout: bit for bit
EXACT = {"solve_triangular", "solve_triangular_transposed",
         "solve_triangular_vector_stack", "cholesky", "cho_factor",
         "lu_factor", "eigh", "eigh_subset", "eigh_evd"}


def _parts(y):
    """A row's results as a list (integers as floats)."""
    return [p.astype(np.float64) if hasattr(p, "astype") else np.float64(p)
            for p in (y if isinstance(y, (tuple, list)) else [y])]


def _flat(rows):
    """All rows side by side: their arguments in one tuple, their values in one vector."""
    names, spans, args = list(rows), [], []
    for name in names:
        spans.append((len(args), len(rows[name][1])))
        args += rows[name][1]

    def values(z, *a):  # z: the one differentiated argument (the rows' are data)
        return np.concatenate([np.ravel(p) for name, (i, k) in zip(names, spans, strict=True)
                               for p in _parts(rows[name][0](*a[i:i + k]))] + [z])

    return names, spans, tuple(args), values


def _primal(rows, backend):
    """Every row's value as hybridad computes it, and the rows' arguments: the
    primal program of a Jacobian plan of the rows side by side."""
    names, spans, args, values = _flat(rows)
    plan = ha.compile(values, np.zeros(1), *args, backend=backend, jacobian=True)
    return plan, plan.value(np.zeros(1), *args)[:-1]


#: the rows the numba value plan computes (one or two per function: the kernels
#: are the ones the numpy backend calls, with every variant, above)
NUMBA_ROWS = ["svd_full_tall", "svd_reduced_stack", "svd_values", "pinv", "eig_stack",
              "eigvals", "qr_complete_tall", "qr_r", "lstsq_vector", "matrix_power_negative",
              "norms_axes", "solve_triangular_vector_stack", "cho_solve", "lu_factor",
              "lu_solve_constant", "solve_broadcast", "eigh_subset", "expm_stack",
              "block_diag", "toeplitz"]


# numba: 34 s of compiles, slow (the same kernels as the numpy cases; numba's
# code generation for them: test_numba_gradient)
@pytest.mark.parametrize("group", ["numpy", "scipy", pytest.param("numba", marks=pytest.mark.slow)])
def test_values_are_numpys_and_scipys(group):
    every = {**NUMPY_ROWS, **SCIPY_ROWS}
    rows = NUMPY_ROWS if group == "numpy" else SCIPY_ROWS if group == "scipy" else \
        {name: every[name] for name in NUMBA_ROWS}
    backend = "numba" if group == "numba" else "numpy"
    names, spans, args, _ = _flat(rows)
    got = _primal(rows, backend)[1]
    at = 0
    for name, (i, k) in zip(names, spans, strict=True):
        for want in map(np.asarray, _parts(rows[name][0](*args[i:i + k]))):
            part = got[at:at + want.size].reshape(want.shape)
            at += want.size
            if name in EXACT:
                np.testing.assert_array_equal(part, want, err_msg=name)
            else:
                np.testing.assert_allclose(part, want, rtol=1e-12,
                                           atol=1e-12 * max(1.0, np.abs(want).max(initial=0)),
                                           err_msg=name)
    assert at == got.size


def test_result_types_are_numpys():
    """Named tuples, dtypes (float32 stays float32), shapes and lstsq's integer rank."""
    def f(a, b):
        u, s, vh = np.linalg.svd(a)
        q, r = np.linalg.qr(a)
        w, v = np.linalg.eig(b @ b.T)
        x, res, rank, sv = np.linalg.lstsq(a, a[:, 0])
        assert np.linalg.svd(a).S.shape == s.shape and np.linalg.qr(a).R.shape == r.shape
        assert (u.dtype, s.dtype, q.dtype, w.dtype, x.dtype) == (a.dtype,) * 5
        assert np.linalg.eig(b @ b.T).eigenvectors.shape == (3, 3)
        assert rank.dtype == np.int32 and rank.shape == () and res.shape == (1,)
        assert sl.lu_factor(b)[1].dtype == np.int32
        return np.sum(s) + np.sum(r) + np.sum(sv) + np.sum(x) + np.sum(w) + np.sum(vh)

    a, b = T.astype(np.float32), A[:3, :3].astype(np.float32)
    res = ha.gradient(f, a, b, argnums=(0, 1), backend="numpy")
    np.testing.assert_allclose(res.value, f(a, b), rtol=1e-5)
    assert res.gradient[0].dtype == np.float32


def _single(a, t, b):
    """scipy.linalg in float32 (scipy's LAPACK calls in single precision), and
    numpy's cholesky (computed in double precision, rounded).  The first six
    take the C-ordered arguments (scipy's calls depend on the layout: its
    factors are Fortran-ordered), the rest chain them."""
    lo, up = sl.cholesky(a, lower=True), sl.cholesky(a)
    c, low = sl.cho_factor(a, lower=True)
    return [lo, up, c, sl.solve_triangular(t, b, lower=True),
            sl.solve_triangular(t.T, b[:, 0], lower=False), np.linalg.cholesky(a),
            sl.solve_triangular(lo.T, b[:, 0], lower=False), sl.solve_triangular(up, b, trans=1),
            sl.solve_triangular(up.T, b, lower=True, trans="C"), sl.cho_solve((c, low), b)]


@pytest.mark.parametrize("trans", [0, 1, 2])
def test_single_precision_triangular_kernel_is_scipys(trans):
    """strtrs at an order past LAPACK's blocking, against scipy's float32 bits."""
    from hybridad.ops.lapack import kernel_args, kind_of
    from hybridad.ops.lapack_solve import solve_triangular, work_size

    rng = np.random.default_rng(trans)
    n, k = 150, 3
    a = (rng.standard_normal((n, n)) + 4 * np.sqrt(n) * np.eye(n)).astype(np.float32)
    b = rng.standard_normal((n, k)).astype(np.float32)
    for lower in (False, True):
        out = np.empty((1, n, k), np.float32)
        work = np.empty(work_size("solve_triangular", n, k), np.float32)
        attrs = dict(lower=lower, trans=trans, unit=False)
        solve_triangular(a[None], b[None], out, work, kind_of(np.float32),
                         *kernel_args("solve_triangular", attrs))
        want = sl.solve_triangular(a, b, lower=lower, trans=trans)
        assert want.dtype == np.float32
        np.testing.assert_array_equal(out[0], want)


@pytest.mark.parametrize("backend", ["numpy", pytest.param("numba", marks=pytest.mark.slow)])
def test_single_precision_is_scipys(backend):
    """float32 operands of scipy.linalg's solve_triangular, cholesky, cho_factor
    and cho_solve are computed in float32, as scipy computes them: LAPACK's
    s-routines, scipy's values bit for bit where hybridad makes scipy's call,
    and the gradient (through cholesky's float32 reverse sweep) agrees with
    float64's to float32's precision; numpy.linalg.cholesky still computes in
    float64, as numpy."""
    from hybridad.ops.lapack import LAPACK_OPS

    args = tuple(x.astype(np.float32) for x in (N, CB, B))
    want = _single(*args)
    assert all(w.dtype == np.float32 for w in want)
    assert not np.array_equal(want[0], want[5])  # numpy's cholesky: not float32's

    def values(z, *args):
        return np.concatenate([np.ravel(p) for p in _single(*args)] + [z])

    plan = ha.compile(values, np.zeros(1, np.float32), *args, backend=backend, jacobian=True)
    got = plan.value(np.zeros(1, np.float32), *args)
    assert got.dtype == np.float32
    at = 0
    for k, w in enumerate(want):
        part = got[at:at + w.size].reshape(w.shape)
        at += w.size
        if k < 6:
            np.testing.assert_array_equal(part, w, err_msg=f"result {k}")
        else:
            np.testing.assert_allclose(part, w, rtol=1e-5, atol=1e-6, err_msg=f"result {k}")

    def f(a, t, b):
        return sum(_dot(p, k) for k, p in enumerate(_single(a, t, b)))

    nums = (0, 1, 2)
    res = ha.gradient(f, *args, argnums=nums, backend=backend)
    graph = ha.compile(f, *args, argnums=nums, backend=backend).graph
    single = {n.op: n.dtype for n in graph.nodes if n.op in LAPACK_OPS and n.dtype == np.float32}
    assert set(single) == {"cholesky", "solve_triangular", "cholesky_adjoint"}, single
    ref = ha.gradient(f, N, CB, B, argnums=nums, backend="numpy")
    np.testing.assert_allclose(res.value, ref.value, rtol=1e-5)
    for g, g64 in zip(res.gradient, ref.gradient, strict=True):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, g64, rtol=0, atol=1e-4 * np.abs(g64).max())
    if backend == "numba":
        assert_no_alloc(ha.gradient, f, *args, argnums=nums, backend="numba", out=res)


@pytest.mark.parametrize("backend", ["numpy", pytest.param("numba", marks=pytest.mark.slow)])
def test_single_precision_hessian(backend):
    """The float32 Hessian through scipy.linalg's single-precision cholesky,
    solve_triangular (both triangles, a transposed factor) and cho_factor /
    cho_solve -- forward over the float32 reverse sweep -- agrees with the
    float64 Hessian to float32's precision."""

    def make(dtype):
        n, b = N.astype(dtype), B[:, 0].astype(dtype)

        def f(x):
            a = n + np.outer(x, x) + np.diag(x * x)
            low = sl.cholesky(a, lower=True)
            z = sl.solve_triangular(low, b, lower=True)
            y = sl.solve_triangular(low.T, z, lower=False)
            w = sl.cho_solve(sl.cho_factor(a), b * x)
            return z @ z + w @ x + y @ b

        return f

    x = np.array([0.3, -0.5, 0.8, 0.1])
    want = ha.hessian(make(np.float64), x, backend="numpy").hessian
    got = ha.hessian(make(np.float32), x.astype(np.float32), backend=backend)
    assert got.hessian.dtype == np.float32 and got.gradient.dtype == np.float32
    assert np.abs(want - np.diag(np.diag(want))).max() > 0.01  # (coupled, not trivial)
    np.testing.assert_allclose(got.hessian, want, rtol=0, atol=2e-6 * np.abs(want).max())


# ----------------------------------------------------------------------------
# gradients: groups of rows, one plan per group and backend
# ----------------------------------------------------------------------------

GRADIENTS = {
    "svd": (lambda t, w, s: _dot(np.linalg.svd(t, full_matrices=False)[0], 1) +
            _dot(np.linalg.svd(t)[1], 2) + _dot(np.linalg.svd(t, full_matrices=False)[2], 3) +
            _dot(np.linalg.svd(w, full_matrices=False)[0], 4) +
            _dot(np.linalg.svd(w, full_matrices=False)[2], 5) +
            _dot(np.linalg.svd(w, compute_uv=False), 6) +
            _dot(np.linalg.svd(s, full_matrices=False)[0], 7) + _dot(np.linalg.svd(s)[2], 8),
            (T, W, STACK)),
    "pinv_norms": (lambda t, w, a: _dot(np.linalg.pinv(t), 1) + _dot(np.linalg.pinv(w), 2) +
                   _dot(np.linalg.pinv(a), 3) + np.linalg.norm(t, 2) +
                   np.linalg.norm(w, -2) + np.linalg.norm(t, "nuc") +
                   _dot(np.linalg.norm(STACK * t[0], 2, axis=(1, 2)), 4),
                   (T, W, A)),
    "qr_lstsq_power": (lambda t, w, a: _dot(np.linalg.qr(t)[0], 1) + _dot(np.linalg.qr(t)[1], 2)
                       + _dot(np.linalg.qr(w)[0], 3) + _dot(np.linalg.qr(w)[1], 4) +
                       _dot(np.linalg.qr(w, "r"), 5) + _dot(np.linalg.qr(t, "complete")[1], 6) +
                       _dot(np.linalg.lstsq(t, a[0, :3] @ w)[0], 7) +
                       _dot(np.linalg.lstsq(t, w.T)[1], 8) +
                       _dot(np.linalg.lstsq(w, t[:3, 0])[0], 9) +
                       _dot(np.linalg.matrix_power(a / 4, 5), 10) +
                       _dot(np.linalg.matrix_power(a, -2), 11) +
                       _dot(np.linalg.matrix_power(a, 0), 12),
                       (T, W, A)),
    # syevr's full-range eigenvector signs flip within a difference step of N: a
    # sign-free function of them there
    "eig_eigh": (lambda e, n: _dot(np.linalg.eig(e)[0], 1) + _dot(np.linalg.eig(e)[1], 2) +
                 _dot(np.linalg.eigvals(e), 3) + _dot(sl.eigh(n)[0], 4) +
                 _dot(_signless(sl.eigh(n)[1]), 5) +
                 _dot(_signless(sl.eigh(n, lower=False)[1]), 6) +
                 _dot(sl.eigh(n, subset_by_index=[1, 2])[1], 7) +
                 _dot(sl.eigh(n, eigvals_only=True, subset_by_index=[2, 3]), 8) +
                 _dot(sl.eigh(n, driver="evd")[1], 9),
                 (E, N)),
    "scipy_solves": (lambda a, n, b: sum(
        _dot(sl.solve_triangular(a, b, lower=lo, trans=t, unit_diagonal=u), 10 * lo + 3 * t + u)
        for lo in (0, 1) for t in (0, 1) for u in (False, True)) +
        _dot(sl.cho_solve(sl.cho_factor(n), b), 20) + _dot(sl.cho_factor(n, lower=True)[0], 21) +
        _dot(sl.cholesky(n), 22) + _dot(sl.lu_factor(a)[0], 23) +
        _dot(sl.lu_solve(sl.lu_factor(a), b), 24) + _dot(sl.lu_solve(sl.lu_factor(a), b, 1), 25) +
        _dot(sl.lu_solve(sl.lu_factor(CB), b), 26) + _dot(sl.solve(a, b), 27) +
        _dot(sl.solve(a, b, transposed=True), 28) + _dot(sl.solve(n, b, assume_a="sym"), 29) +
        _dot(sl.solve(n, b, assume_a="pos", lower=True), 30) +
        _dot(sl.solve(a, b, assume_a="tridiagonal"), 31) +
        _dot(sl.solve(a, b, assume_a="diagonal"), 32),
        (CB, N, B)),
    "scipy_expm_structured": (lambda a, b: _dot(sl.expm(a / 3), 1) + _dot(sl.expm(2 * a), 2) +
                              _dot(sl.expm(np.stack([a, b @ b.T]) / 4), 3) +
                              _dot(sl.block_diag(a, b, 1.5), 4) +
                              _dot(sl.toeplitz(a[0], b[:, 0]), 5) + _dot(sl.circulant(b[:, 1]), 6),
                              (A / 2, B)),
    # numpy's, under scipy's names (a helper found scipy.linalg.inv refused,
    # its message blaming a singular placeholder matrix)
    "scipy_inv_det_norm": (lambda a, b: _dot(sl.inv(a + 3 * np.eye(a.shape[0])), 1) +
                           sl.det(a + 2 * np.eye(a.shape[0])) + sl.norm(b) +
                           sl.norm(b, 1, axis=0) @ np.arange(1.0, b.shape[1] + 1),
                           (A / 2, B)),
}


@pytest.mark.parametrize("name", sorted(GRADIENTS))
def test_gradient_is_the_derivative(name):
    f, args = GRADIENTS[name]
    assert_grad(f, args, argnums=tuple(range(len(args))), backends=("numpy",))


#: every primitive through a numba plan (two plans): the gradient agrees with
#: differences and with the numpy backend's
NUMBA_GRADIENTS = {
    "decompositions": (lambda t, w, a: _dot(np.linalg.svd(t, full_matrices=False)[0], 1) +
                       _dot(np.linalg.svd(w)[1], 2) + _dot(np.linalg.pinv(w), 3) +
                       _dot(np.linalg.qr(t)[1], 4) + _dot(np.linalg.lstsq(t, w.T)[1], 5) +
                       _dot(np.linalg.eig(a @ a.T)[1], 6),
                       (T, W, A)),
    "scipy": (lambda a, n, b: _dot(sl.solve_triangular(a, b, trans=1), 1) +
              _dot(sl.lu_solve(sl.lu_factor(a), b), 2) + _dot(sl.solve(n, b, assume_a="pos"), 3)
              + _dot(sl.eigh(n, subset_by_index=[1, 2])[1], 4) + _dot(sl.expm(a / 8), 5) +
              _dot(sl.toeplitz(b[:, 0], a[0]), 6),
              (CB, N, B)),
}


@pytest.mark.parametrize("name", sorted(NUMBA_GRADIENTS))
def test_numba_gradient(name):
    f, args = NUMBA_GRADIENTS[name]
    nums = tuple(range(len(args)))
    res = assert_grad(f, args, argnums=nums)
    # the numba plan, called again into the same result: allocates nothing
    res = ha.gradient(f, *args, argnums=nums, backend="numba")
    assert_no_alloc(ha.gradient, f, *args, argnums=nums, backend="numba", out=res)
    np.testing.assert_allclose(res.value, f(*args), rtol=1e-12)


# ----------------------------------------------------------------------------
# Hessians: forward over reverse through every rule's jvp
# ----------------------------------------------------------------------------

HESSIANS = {
    "svd": (lambda t: _dot(np.linalg.svd(t, full_matrices=False)[0], 1) +
            _dot(np.linalg.svd(t)[1], 2), T),
    "pinv": (lambda w: _dot(np.linalg.pinv(w), 3), W),
    "qr": (lambda w: _dot(np.linalg.qr(w)[0], 4) + _dot(np.linalg.qr(w.T)[1], 5), W),
    "eig": (lambda e: _dot(np.linalg.eig(e)[1], 6) + _dot(np.linalg.eigvals(e), 7), E),
    "eigh_evr": (lambda n: _dot(sl.eigh(n, subset_by_index=[1, 2])[1], 8) +
                 _dot(sl.eigh(n, eigvals_only=True), 9), N),
    "triangular_lu": (lambda a: _dot(sl.solve_triangular(a, B, trans=1), 10) +
                      _dot(sl.lu_factor(a)[0], 11), CB),
    "expm": (lambda a: _dot(sl.expm(a / 2), 12), A),
}


def _hessian_of(names):
    """One function of one flat vector (the rows' arguments), its point."""
    sizes = np.cumsum([0] + [HESSIANS[n][1].size for n in names])

    def f(x):
        return sum(HESSIANS[n][0](np.reshape(x[sizes[j]:sizes[j + 1]], HESSIANS[n][1].shape))
                   for j, n in enumerate(names))

    return f, np.concatenate([HESSIANS[n][1].ravel() for n in names])


@pytest.mark.parametrize("backend, names", [
    pytest.param("numpy", sorted(HESSIANS), id="numpy"),
    pytest.param("numba", ["pinv", "triangular_lu"], id="numba", marks=pytest.mark.slow)])
def test_hessian(backend, names):
    f, x = _hessian_of(names)
    grad = ha.compile(f, x, backend="numpy")
    expected = np.empty((x.size, x.size))
    for j in range(x.size):
        step = 1e-5 * max(1.0, abs(x[j]))
        up, down = x.copy(), x.copy()
        up[j] += step
        down[j] -= step
        expected[:, j] = (grad.gradient(up).gradient - grad.gradient(down).gradient) / (2 * step)
    h = ha.hessian(f, x, backend=backend).hessian
    np.testing.assert_allclose(h, expected, rtol=0, atol=2e-6 * np.abs(expected).max())


# ----------------------------------------------------------------------------
# refusals and errors
# ----------------------------------------------------------------------------


def _grad(f, *args):
    return ha.gradient(f, *args, argnums=tuple(range(len(args))), backend="numpy")


def test_complex_spectrum_is_refused_when_the_plan_runs():
    rotation = np.array([[0.0, -1.0], [1.0, 0.0]])
    plan = ha.compile(lambda e: _dot(np.linalg.eigvals(e)), S[:2, :2], backend="numpy")
    with pytest.raises(NotImplementedError, match="eig.*complex eigenvalues"):
        plan.gradient(rotation)
    with pytest.raises(NotImplementedError, match="complex eigenvalues"):
        _grad(lambda e: _dot(np.linalg.eig(e)[1]), rotation + 0.1)


def test_full_matrix_complements_have_no_derivative():
    with pytest.raises(NotImplementedError, match="full_matrices=True.*orthogonal"):
        _grad(lambda t: _dot(np.linalg.svd(t)[0]), T)
    with pytest.raises(NotImplementedError, match="full_matrices=True"):
        _grad(lambda w: _dot(np.linalg.svd(w)[2][3:]), W)
    with pytest.raises(NotImplementedError, match="mode='complete'.*orthogonal"):
        _grad(lambda t: _dot(np.linalg.qr(t, "complete")[0][:, 3:]), T)
    with pytest.raises(NotImplementedError, match="mode='complete'"):
        _grad(lambda t: _dot(np.linalg.qr(t, "complete")[0]), T)
    # forward mode (a Jacobian): refused when a result depending on them is computed
    plan = ha.compile(lambda t: np.ravel(np.linalg.svd(t)[0]), T, backend="numpy",
                      jacobian=True, mode="forward")
    np.testing.assert_allclose(np.abs(plan.value(T)), np.abs(np.linalg.svd(T)[0].ravel()),
                               atol=1e-12)
    with pytest.raises(NotImplementedError, match="full_matrices=True"):
        plan.jacobian(T)
    # only the parts that are defined: fine -- the singular values, and the first
    # min(m, n) columns of a full U (rows of a full Vh), of a complete Q
    np.testing.assert_allclose(_grad(lambda t: _dot(np.linalg.svd(t)[1]), T).value,
                               _dot(np.linalg.svd(T)[1]))
    for f, x in ((lambda w: _dot(_signless(np.linalg.svd(w)[2][:3].T)), W),
                 (lambda t: _dot(_signless(np.linalg.svd(t)[0][:, :3])), T),
                 (lambda t: _dot(np.linalg.qr(t, "complete")[0][:, :3]), T)):
        res = _grad(f, x)
        np.testing.assert_allclose(res.value, f(x), rtol=1e-12)
        np.testing.assert_allclose(res.gradient[0], numerical_gradient(f, x), rtol=1e-6,
                                   atol=1e-8)


def test_lstsq_rank_deficiency_is_refused_only_for_residuals():
    b = _mat((5,))
    x = _grad(lambda a, b: _dot(np.linalg.lstsq(a, b)[0]), RANK1, b)
    np.testing.assert_allclose(x.value, _dot(np.linalg.lstsq(RANK1, b)[0]), rtol=1e-10)
    plan = ha.compile(lambda a, b: np.sum(np.linalg.lstsq(a, b)[1]), T, b, backend="numpy")
    np.testing.assert_allclose(plan.gradient(T, b).value, np.linalg.lstsq(T, b)[1][0])
    with pytest.raises(NotImplementedError, match="lstsq.*rank-deficient"):
        plan.gradient(RANK1, b)


@pytest.mark.parametrize("f, error, match", [
    (lambda a: np.linalg.svd(a, hermitian=True)[1], NotImplementedError, "svd.*hermitian"),
    (lambda a: np.linalg.pinv(a, hermitian=True), NotImplementedError, "pinv.*hermitian"),
    (lambda a: np.linalg.qr(a, "raw")[0], NotImplementedError, "qr.*raw"),
    (lambda a: np.linalg.qr(a, "bad")[0], ValueError, "mode"),
    (lambda a: np.linalg.pinv(a, a[0]), NotImplementedError, "pinv.*rcond"),
    (lambda a: np.linalg.matrix_power(a, 1.5), TypeError, "integer"),
    (lambda a: sl.eigh(a, a), NotImplementedError, "eigh.*generalized"),
    (lambda a: sl.eigh(a, subset_by_value=(0, 1))[0], NotImplementedError, "subset_by_value"),
    (lambda a: sl.eigh(a, driver="evx")[0], NotImplementedError, "evx"),
    (lambda a: sl.eigh(a, subset_by_index=[2, 9])[0], ValueError, "indices"),
    (lambda a: sl.solve(a, a, assume_a="banded"), NotImplementedError, "banded"),
    (lambda a: sl.solve(a, a, assume_a="bad"), ValueError, "structure"),
    (lambda a: sl.lu_solve((a, np.zeros(4, np.int32) + a[0].astype(np.int32)), a),
     NotImplementedError, "lu_solve.*piv"),
    (lambda a: sl.lu_factor(a[:3]), NotImplementedError, "lu_factor.*non-square"),
])
def test_refused_clearly(f, error, match):
    with pytest.raises(error, match=match):
        _grad(lambda a: np.sum(f(a)), A)


def test_singular_triangular_matrix_raises_numpys_error():
    plan = ha.compile(lambda a: np.sum(sl.solve_triangular(a, B)), CB, backend="numpy")
    singular = np.triu(CB)
    singular[2, 2] = 0.0
    with pytest.raises(np.linalg.LinAlgError, match="singular"):
        plan.gradient(singular)


def test_scipy_outside_tracing_is_scipys():
    ha.gradient(lambda a: np.sum(sl.expm(a)), A / 4, backend="numpy")
    assert sl.expm.__hybridad_original__ is not None
    np.testing.assert_array_equal(sl.solve(A, B), sl.solve.__hybridad_original__(A, B))


# ----------------------------------------------------------------------------
# every new primitive and numpy.linalg function has rows here
# ----------------------------------------------------------------------------

#: the numpy.linalg functions of this file (tests/test_linalg.py: the others)
FUNCTIONS = {np.linalg.svd, np.linalg.svdvals, np.linalg.pinv, np.linalg.eig,
             np.linalg.eigvals, np.linalg.qr, np.linalg.lstsq, np.linalg.matrix_power,
             np.linalg.matrix_norm, np.linalg.multi_dot, np.linalg.cond,
             np.linalg.tensorsolve, np.linalg.tensorinv}  # (those two: tests/test_numpy_more.py)
#: the primitives of this file
OPS = {"svd", "pinv", "qr", "eig", "eigh_evr", "solve_triangular", "lu_factor", "expm",
       "refuse_if", "solve_lu", "lu_factors", "lu_solve", "symmetric", "cho_solve"}
#: made by the lowering (one factorization for several solves: tests/test_factors.py)
LOWERED = {"solve_lu", "lu_factors", "lu_solve", "symmetric", "cho_solve"}


def test_every_primitive_and_function_has_rows():
    ops = {name for name, op in REGISTRY.items() if op.abstract.__module__ in
           ("hybridad.ops.linalg_spectral", "hybridad.ops.linalg_factor")}
    assert ops == OPS
    traced = set()
    for rows in (NUMPY_ROWS, SCIPY_ROWS):
        traced |= {n.op for n in _primal(rows, "numpy")[0].graph.nodes}
    assert OPS - {"refuse_if"} - LOWERED <= traced, OPS - traced
    assert FUNCTIONS <= set(HANDLED)
    from hybridad.frontend.scipy_special import INTERCEPTED

    assert {name for module, name in INTERCEPTED if module == "scipy.linalg"} == {
        "solve", "solve_triangular", "cholesky", "cho_factor", "cho_solve", "lu_factor",
        "lu_solve", "eigh", "expm", "block_diag", "toeplitz", "circulant", "inv", "det", "norm",
        # scipy_linalg_more (tests/test_scipy_linalg_more.py)
        "eigvalsh", "svd", "svdvals", "pinv", "pinvh", "lstsq", "qr", "solve_banded",
        "solveh_banded", "cosm", "sinm", "tanm", "coshm", "sinhm", "tanhm", "lu",
        "eigvalsh_tridiagonal", "eigh_tridiagonal",
        # scipy_linalg_matfuncs (tests/test_scipy_linalg_matfuncs.py)
        "sqrtm", "logm", "fractional_matrix_power",
        # scipy_linalg_extra (tests/test_scipy_linalg_extra.py)
        "companion", "hankel", "convolution_matrix", "khatri_rao", "expm_frechet",
        "solve_sylvester", "solve_continuous_lyapunov", "solve_discrete_lyapunov", "polar",
        "signm", "eig", "eigvals", "solve_continuous_are", "solve_discrete_are"}


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("case", ["eigh", "scipy eigh", "svd", "eig"])
def test_a_function_of_the_spectrum_alone_at_repeated_values(case, backend):
    """``w, V = eigh(A)`` (or the full ``svd``, ``eig``) with only the
    eigenvalues (singular values) read, at a matrix whose values repeat (an
    identity, ``diag(2, 1, 1)``): the reverse rule's eigenvector term is
    ``F * (V^T gV)`` with ``F`` infinite at the repeated pairs and ``gV`` 0,
    and gave NaN in every entry (JAX gives the finite gradient).  The term
    is 0 where the projected cotangent is."""
    import scipy.linalg as sl

    A = np.diag([2.0, 1.0, 1.0])
    f, want = {
        "eigh": (lambda A: np.sum(np.linalg.eigh(A)[0] ** 2), 2 * A),
        "scipy eigh": (lambda A: np.sum(sl.eigh(A)[0] ** 3), 3 * A @ A),
        "svd": (lambda A: np.sum(np.linalg.svd(A)[1]), np.eye(3)),
        "eig": (lambda A: np.sum(np.real(np.linalg.eig(A)[0]) ** 2), 2 * A),
    }[case]
    res = ha.gradient(f, A, backend=backend)
    assert res.value == pytest.approx(f(A), rel=1e-14)
    np.testing.assert_allclose(res.gradient, want, atol=1e-12)
