"""Kernels of the triangular solves and what is built on them:
solve_triangular (trtrs), lu_factor (getrf), expm (Pade scaling and squaring
on BLAS gemm and LAPACK gesv), cholesky's reverse rule ``cholesky_adjoint``
(blocked, on BLAS trsm and gemm) and the run-time refusal ``refuse_if``.

Conventions as in :mod:`hybridad.ops.lapack_more` (shared helpers come from
there): float64 stacks (float32 too for solve_triangular and
cholesky_adjoint: LAPACK's and BLAS's s-routines, chosen by ``kind``),
preallocated outputs, every scratch matrix, pivot and Fortran scalar cut
from the op's ``work`` (of the stack's dtype).

* ``solve_triangular``: trtrs as scipy calls it for a C-ordered matrix (the
  transposed problem, the triangle flipped), trans=2 ('C') on the matrix
  itself: scipy's values bit for bit;
* ``lu_factor``: getrf as scipy's lu_factor, ``(batch, 2 n + 1, n)`` = LU,
  the 0-based pivots (as floats) and the permutation P with ``a = P L U``;
* ``expm``: Higham's (2005) Pade(13) with ``s = ceil(log2(||A||_1 /
  theta13))`` squarings, the scaling exact (a power of two); the Pade
  solve ``(V - U) R = V + U`` on the row-major matrices as LAPACK reads them
  (P and Q commute, so the transposed system has the same solution).
* ``cholesky_adjoint``: the gradient w.r.t. the lower triangle a Cholesky
  factor L was computed from, given the gradient w.r.t. L; Murray's (2016)
  blocked reverse sweep, about twice a Cholesky's multiply-adds (n^3 / 3)
  where the closed form ``L^-T phi(L^T Lbar) L^-1`` takes a triangular
  product and two triangular solves (3 n^3 / 2).
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from .lapack import _gesv, _gesv_into, _getrf, _register_cython_lapack
from .lapack_more import _SCALARS, _colmajor, _from_colmajor, _scalars
from .._libcache import install

__all__ = ["cho_solve", "cholesky_adjoint", "expm", "lu_factor", "lu_factors", "lu_solve",
           "refuse_if", "solve_lu", "solve_triangular", "symmetric", "work_size"]

_register_cython_lapack("dtrtrs", "strtrs", "dgetrs", "dpotrs")
_register_cython_lapack("dgemm", "dtrsm", "sgemm", "strsm", library="cython_blas")
_V = types.voidptr
_dtrtrs = types.ExternalFunction("hybridad_dtrtrs", types.void(*([_V] * 10)))
_strtrs = types.ExternalFunction("hybridad_strtrs", types.void(*([_V] * 10)))
_dgetrs = types.ExternalFunction("hybridad_dgetrs", types.void(*([_V] * 9)))
_dpotrs = types.ExternalFunction("hybridad_dpotrs", types.void(*([_V] * 8)))
_dgemm = types.ExternalFunction("hybridad_dgemm", types.void(*([_V] * 13)))
_sgemm = types.ExternalFunction("hybridad_sgemm", types.void(*([_V] * 13)))
_dtrsm = types.ExternalFunction("hybridad_dtrsm", types.void(*([_V] * 11)))
_strsm = types.ExternalFunction("hybridad_strsm", types.void(*([_V] * 11)))


install()  # numba's cache of the functions below: stamped with their imports' source


@njit(cache=True, nogil=True)
def _trtrs(kind, uplo, trans, diag, n, k, a, lda, b, ldb, info):
    """trtrs in the precision ``kind`` (``ord('d')`` or ``ord('s')``; Fortran
    arguments, all pointers)."""
    if kind == ord("s"):
        _strtrs(uplo, trans, diag, n, k, a, lda, b, ldb, info)
    else:
        _dtrtrs(uplo, trans, diag, n, k, a, lda, b, ldb, info)


@njit(cache=True, nogil=True)
def _trsm(kind, side, uplo, transa, diag, m, n, alpha, a, lda, b, ldb):
    """trsm in the precision ``kind`` (``alpha`` points to a scalar of it)."""
    if kind == ord("s"):
        _strsm(side, uplo, transa, diag, m, n, alpha, a, lda, b, ldb)
    else:
        _dtrsm(side, uplo, transa, diag, m, n, alpha, a, lda, b, ldb)


@njit(cache=True, nogil=True)
def _gemm(kind, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
    """gemm in the precision ``kind`` (``alpha``, ``beta`` point to scalars of it)."""
    if kind == ord("s"):
        _sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
    else:
        _dgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)

#: the block order of :func:`cholesky_adjoint`'s sweep
CHOL_BLOCK = 64

#: the refusals of :func:`refuse_if` (codes 0, 1, 2)
_RANK = ("numpy.linalg.lstsq: the matrix is rank-deficient, where numpy returns empty "
         "residuals: a shape a traced plan cannot take at run time (the solution, rank and "
         "singular values are computed; compute residuals from the solution)")
_SVD = ("numpy.linalg.svd(full_matrices=True): the columns of u (rows of vh) beyond "
        "min(m, n) have no derivative: they are any orthonormal basis of the orthogonal "
        "complement (LAPACK's choice is not a smooth function of the matrix); use "
        "full_matrices=False, or only the first min(m, n) of them")
_QR = ("numpy.linalg.qr(mode='complete'): the columns of q beyond n have no derivative: they "
       "are any orthonormal basis of the orthogonal complement (LAPACK's choice is not a "
       "smooth function of the matrix); use mode='reduced', or only the first n of them")

#: Higham's Pade(13) coefficients and the 1-norm up to which it needs no scaling
_PADE13 = (64764752532480000.0, 32382376266240000.0, 7771770303897600.0,
           1187353796428800.0, 129060195264000.0, 10559470521600.0, 670442572800.0,
           33522128640.0, 1323241920.0, 40840800.0, 960960.0, 16380.0, 182.0, 1.0)
_THETA13 = 5.371920351148152


def work_size(op, m, n, **attrs):
    """Elements of workspace (of the operands' dtype) the kernel ``op`` needs.

    Parameters
    ----------
    op : str
        ``"solve_triangular"``, ``"lu_factor"``, ``"expm"``, ``"cholesky_adjoint"``,
        ``"solve_lu"``, ``"lu_factors"``, ``"lu_solve"`` or ``"cho_solve"``.
    m, n : int
        The matrices' order (m), and the right-hand sides (n) of
        solve_triangular, solve_lu, lu_solve and cho_solve (for the others, n = m).
    **attrs
        The op's attributes (unused).

    Returns
    -------
    int
    """
    if op == "solve_triangular":
        return m * m + m * n + _SCALARS
    if op == "lu_factor":
        return n * n + n + _SCALARS
    if op == "solve_lu":
        return m * m + m * n + m
    if op == "lu_factors":
        return m * m + m
    if op == "lu_solve":
        return m * m + m * n + m + _SCALARS
    if op == "cho_solve":
        return m * m + m * n + m + _SCALARS
    if op == "expm":
        return 8 * n * n + n + 1 + _SCALARS
    if op == "cholesky_adjoint":
        return n * n + CHOL_BLOCK * CHOL_BLOCK + _SCALARS
    raise KeyError(op)


@njit(cache=True, nogil=True)
def solve_triangular(a, b, out, work, kind, lower, trans, unit):
    """out[i] = op(T)^-1 b[i], T the ``lower`` (else upper) triangle of a[i]
    (unit diagonal with ``unit``), op = transpose for ``trans`` 1 or 2.  As
    scipy for a C-ordered matrix: trtrs on a[i].T (which is a[i] read
    column-major), the triangle and the transpose flipped; trans=2 ('C'):
    trtrs on a[i] itself."""
    n, k = a.shape[1], b.shape[2]
    mat, rhs = work[:n * n], work[n * n:n * n + n * k]
    ints, chars, _ = _scalars(work)
    flip = trans != 2
    for i in range(a.shape[0]):
        if n == 0 or k == 0:
            continue
        _colmajor(a[i].T if flip else a[i], mat, n, n)
        _colmajor(b[i], rhs, n, k)
        up = lower if flip else not lower
        chars[0] = ord("U") if up else ord("L")
        chars[1] = ord("C") if not flip else (ord("N") if trans == 1 else ord("T"))
        chars[2] = ord("U") if unit else ord("N")
        ints[0], ints[1], ints[2] = n, k, 0
        _trtrs(kind, chars[0:].ctypes, chars[1:].ctypes, chars[2:].ctypes, ints[0:].ctypes,
               ints[1:].ctypes, mat.ctypes, ints[0:].ctypes, rhs.ctypes, ints[0:].ctypes,
               ints[2:].ctypes)
        if ints[2] > 0:
            raise np.linalg.LinAlgError("singular matrix: a diagonal element of the "
                                        "triangular matrix is exactly zero")
        _from_colmajor(rhs, out[i], n, k)


@njit(cache=True, nogil=True)
def _getrf_of(a, mat, piv, n):
    """getrf of the n x n matrix ``a`` copied column-major into ``mat`` (the
    pivots into ``piv``): LAPACK's info, > 0 at an exactly zero pivot."""
    _colmajor(a, mat, n, n)
    return _getrf(np.int8(ord("d")), n, n, mat.ctypes, n, piv.ctypes)


@njit(cache=True, nogil=True)
def lu_factor(a, out, work, kind):
    """scipy.linalg.lu_factor of each a[i] (getrf): LU in out[i, :n], the
    0-based pivots in out[i, n], P (a = P L U) in out[i, n + 1:].  A singular
    matrix is factored as LAPACK leaves it (scipy warns)."""
    n = a.shape[1]
    mat = work[:n * n]
    piv = work[n * n:n * n + n].view(np.int32)
    for i in range(a.shape[0]):
        if n == 0:
            continue
        _getrf_of(a[i], mat, piv, n)  # (a singular matrix: as LAPACK leaves it)
        for r in range(n):
            for c in range(n):
                out[i, r, c] = mat[r + c * n]
                out[i, n + 1 + r, c] = 0.0
        perm = piv[n:2 * n]  # the second half of the pivots' elements: free
        for j in range(n):
            perm[j] = j
        for j in range(n):
            out[i, n, j] = piv[j] - 1
            p = piv[j] - 1
            perm[j], perm[p] = perm[p], perm[j]
        for r in range(n):
            out[i, n + 1 + perm[r], r] = 1.0


@njit(cache=True, nogil=True)
def solve_lu(a, b, out, work, kind):
    """out[i] = [x | LU | pivots]: x = a[i]^-1 b[i] by gesv, as numpy's solve
    (bit for bit), then the factorization gesv leaves -- LU (L's unit
    diagonal implicit) in out[i, :, k:k + n], LAPACK's 1-based pivots (as
    floats) in out[i, :, k + n] -- for :func:`lu_solve`'s later solves with
    a[i] or its transpose.  A singular matrix raises as numpy's solve does."""
    n, k = a.shape[1], b.shape[2]
    lu, rhs = work[:n * n], work[n * n:n * n + n * k]
    piv = work[n * n + n * k:n * n + n * k + n].view(np.int32)
    for i in range(a.shape[0]):
        if n == 0:
            continue
        if k == 0:  # (gesv returns before factoring when there is no right-hand side)
            if _getrf_of(a[i], lu, piv, n) > 0:
                raise np.linalg.LinAlgError("Singular matrix")
        else:
            _colmajor(a[i], lu, n, n)
            _colmajor(b[i], rhs, n, k)
            _gesv_into(out[i, :, :k], lu, rhs, piv, n, k, ord("d"))
        _from_colmajor(lu, out[i, :, k:k + n], n, n)
        for r in range(n):
            out[i, r, k + n] = piv[r]


@njit(cache=True, nogil=True)
def lu_factors(a, out, work, kind):
    """out[i] = [LU | pivots]: the LU factorization of a[i] (getrf, as gesv
    makes it; gesv itself returns before factoring when there is no
    right-hand side), packed as :func:`solve_lu` packs it after ``x``."""
    n = a.shape[1]
    lu = work[:n * n]
    piv = work[n * n:n * n + n].view(np.int32)
    for i in range(a.shape[0]):
        if n == 0:
            continue
        if _getrf_of(a[i], lu, piv, n) > 0:
            raise np.linalg.LinAlgError("Singular matrix")
        _from_colmajor(lu, out[i, :, :n], n, n)
        for r in range(n):
            out[i, r, n] = piv[r]


@njit(cache=True, nogil=True)
def _solve_parts(work, n, k):
    """The column-major n x n matrix, the n x k right-hand sides, the n int32
    pivots and the Fortran scalars (ints, chars) of a solve, cut from ``work``
    (:func:`work_size`'s ``m * m + m * n + m + _SCALARS``)."""
    mat, rhs = work[:n * n], work[n * n:n * n + n * k]
    piv = work[n * n + n * k:n * n + n * k + n].view(np.int32)[:n]
    ints, chars, _ = _scalars(work)
    return mat, rhs, piv, ints, chars


@njit(cache=True, nogil=True)
def lu_solve(p, b, out, work, kind, trans, at):
    """out[i] = a[i]^-1 b[i] (``trans`` 1: a[i]^-T b[i]) from the factors of
    a[i] that :func:`solve_lu` packed into p[i] from column ``at`` on (getrs:
    the second half of gesv, the factorization made once)."""
    n, k = p.shape[1], b.shape[2]
    mat, rhs, piv, ints, chars = _solve_parts(work, n, k)
    for i in range(p.shape[0]):
        if n == 0 or k == 0:
            continue
        _colmajor(p[i, :, at:at + n], mat, n, n)
        for r in range(n):
            piv[r] = np.int32(p[i, r, at + n])
        _colmajor(b[i], rhs, n, k)
        chars[0] = ord("T") if trans else ord("N")
        ints[0], ints[1], ints[2] = n, k, 0
        _dgetrs(chars[0:].ctypes, ints[0:].ctypes, ints[1:].ctypes, mat.ctypes,
                ints[0:].ctypes, piv.ctypes, rhs.ctypes, ints[0:].ctypes, ints[2:].ctypes)
        _from_colmajor(rhs, out[i], n, k)


#: the tiles symmetric compares (a row of one against a column of the other)
_TILE = 32


@njit(cache=True, nogil=True)
def _is_symmetric(a, n):
    """Whether the n x n matrix ``a`` equals its transpose exactly (a NaN is
    unequal): tile against tile, so the column reads stay in cache."""
    for r0 in range(0, n, _TILE):
        for c0 in range(0, r0 + 1, _TILE):
            for r in range(r0, min(r0 + _TILE, n)):
                for c in range(c0, min(c0 + _TILE, r)):
                    if a[r, c] != a[c, r]:
                        return False
    return True


@njit(cache=True, nogil=True)
def symmetric(a, out, kind):
    """out[i] = 1.0 where a[i] equals its transpose exactly, else 0.0."""
    for i in range(a.shape[0]):
        out[i] = 1.0 if _is_symmetric(a[i], a.shape[1]) else 0.0


@njit(cache=True, nogil=True)
def cho_solve(lo, flags, a, b, out, work, kind, upper):
    """out[i] = a[i]^-1 b[i]: where flags[i] is set (a[i] exactly symmetric)
    by potrs on its Cholesky factor lo[i] (lower, a = L L^T; ``upper``: a = U^T
    U), as scipy's cho_solve; else by gesv on a[i], as numpy's solve (a
    singular matrix raises as numpy's)."""
    n, k = a.shape[1], b.shape[2]
    mat, rhs, piv, ints, chars = _solve_parts(work, n, k)
    for i in range(a.shape[0]):
        if n == 0 or k == 0:
            continue
        _colmajor(b[i], rhs, n, k)
        if flags[i] != 0:
            # lo[i] in C order is, read column-major, its transpose: L^T is upper
            _colmajor(lo[i].T, mat, n, n)
            chars[0] = ord("L") if upper else ord("U")
            ints[0], ints[1], ints[2] = n, k, 0
            _dpotrs(chars[0:].ctypes, ints[0:].ctypes, ints[1:].ctypes, mat.ctypes,
                    ints[0:].ctypes, rhs.ctypes, ints[0:].ctypes, ints[2:].ctypes)
            _from_colmajor(rhs, out[i], n, k)
        else:  # (numpy's solve: gesv, a singular matrix raising as there)
            _colmajor(a[i], mat, n, n)
            _gesv_into(out[i], mat, rhs, piv, n, k, ord("d"))


@njit(cache=True, nogil=True)
def refuse_if(x, flag, out, kind, code):
    """out = x; where a flag is set, raise the refusal ``code`` (0: lstsq's
    residuals of a rank-deficient matrix; 1, 2: a tangent of the complement
    columns of svd, qr)."""
    for i in range(flag.shape[0]):
        if flag[i] != 0:
            if code == 0:
                raise NotImplementedError(_RANK)
            if code == 1:
                raise NotImplementedError(_SVD)
            raise NotImplementedError(_QR)
    out[:] = x


@njit(cache=True, nogil=True)
def _mm(x, y, out, ints, chars, dbl):
    """out = x @ y for n x n row-major matrices (gemm on the transposes:
    out^T = y^T x^T, each of which LAPACK reads column-major)."""
    _dgemm(chars[0:].ctypes, chars[0:].ctypes, ints[0:].ctypes, ints[0:].ctypes,
           ints[0:].ctypes, dbl[0:].ctypes, y.ctypes, ints[0:].ctypes, x.ctypes,
           ints[0:].ctypes, dbl[1:].ctypes, out.ctypes, ints[0:].ctypes)


@njit(cache=True, nogil=True)
def expm(a, out, work, kind):
    """out[i] = exp(a[i]): Pade(13) on a[i] / 2**s, squared s times."""
    b, n = a.shape[0], a.shape[1]
    nn = n * n
    if n == 0:
        return
    xs, x2, x4, x6 = work[:nn], work[nn:2 * nn], work[2 * nn:3 * nn], work[3 * nn:4 * nn]
    u, v, t, r = work[4 * nn:5 * nn], work[5 * nn:6 * nn], work[6 * nn:7 * nn], \
        work[7 * nn:8 * nn]
    piv = work[8 * nn:8 * nn + n // 2 + 1].view(np.int32)
    ints, chars, dbl = _scalars(work)
    ints[0], chars[0], dbl[0], dbl[1] = n, ord("N"), 1.0, 0.0
    c = _PADE13
    for i in range(b):
        norm = 0.0
        for col in range(n):
            acc = 0.0
            for row in range(n):
                acc += abs(a[i, row, col])
            norm = max(norm, acc) if acc == acc else acc
        if not np.isfinite(norm):
            out[i] = np.nan
            continue
        s = 0 if norm <= _THETA13 else int(np.ceil(np.log2(norm / _THETA13)))
        scale = 2.0 ** -s
        for row in range(n):
            for col in range(n):
                xs[row * n + col] = a[i, row, col] * scale
        _mm(xs, xs, x2, ints, chars, dbl)
        _mm(x2, x2, x4, ints, chars, dbl)
        _mm(x4, x2, x6, ints, chars, dbl)
        for k in range(nn):
            t[k] = c[13] * x6[k] + c[11] * x4[k] + c[9] * x2[k]
        _mm(x6, t, r, ints, chars, dbl)
        for k in range(nn):
            r[k] += c[7] * x6[k] + c[5] * x4[k] + c[3] * x2[k]
        for k in range(n):
            r[k * n + k] += c[1]
        _mm(xs, r, u, ints, chars, dbl)
        for k in range(nn):
            t[k] = c[12] * x6[k] + c[10] * x4[k] + c[8] * x2[k]
        _mm(x6, t, v, ints, chars, dbl)
        for k in range(nn):
            v[k] += c[6] * x6[k] + c[4] * x4[k] + c[2] * x2[k]
        for k in range(n):
            v[k * n + k] += c[0]
        for k in range(nn):
            t[k], r[k] = v[k] - u[k], v[k] + u[k]
        if _gesv(np.int8(ord("d")), n, n, t.ctypes, n, piv.ctypes, r.ctypes, n) > 0:
            raise np.linalg.LinAlgError("expm: singular Pade denominator")
        for _ in range(s):
            _mm(r, r, t, ints, chars, dbl)
            r[:] = t
        for row in range(n):
            for col in range(n):
                out[i, row, col] = r[row * n + col]


@njit(cache=True, nogil=True)
def _chol_adjoint_block(lm, g, n, j, k):
    """The unblocked reverse sweep (block size 1) on the diagonal block
    ``j:k``: ``g``'s lower triangle there goes from the gradient w.r.t. the
    factor's block D to the gradient w.r.t. the matrix D was factored from
    (row-major ``lm`` holds L, ``g`` the gradients, both n x n)."""
    for c in range(k - 1, j - 1, -1):
        dcc = lm[c * n + c]
        acc = 0.0
        m = c - j  # the gradients left of c: of row r, and of row c, as 1-d views
        gc, lc = g[c * n + j:c * n + c], lm[c * n + j:c * n + c]
        for r in range(c + 1, k):
            e = g[r * n + c] / dcc
            g[r * n + c] = e
            acc += e * lm[r * n + c]
            gr, lr = g[r * n + j:r * n + c], lm[r * n + j:r * n + c]
            # two loops, not one: each vectorizes (one loop writing two rows of
            # g ran 3x slower, scalar); the same operations in the same order
            for q in range(m):
                gr[q] -= e * lc[q]
            for q in range(m):
                gc[q] -= e * lr[q]
        f = (g[c * n + c] - acc) / (2.0 * dcc)
        g[c * n + c] = f
        for q in range(m):
            gc[q] -= 2.0 * f * lc[q]


@njit(cache=True, nogil=True)
def cholesky_adjoint(lo, gl, out, work, kind):
    """out[i] = the gradient w.r.t. the lower triangle of the matrix whose
    Cholesky factor is lo[i] (potrf 'L' reads that triangle), from gl[i], the
    gradient w.r.t. lo[i] (its upper triangle ignored); out's upper triangle 0.

    Murray's (2016) blocked reverse sweep, blocks of :data:`CHOL_BLOCK` from
    the last: with the block's rows ``j:k`` of L split ``R = L[j:k, :j]``,
    ``D = L[j:k, j:k]``, ``B = L[k:, :j]``, ``C = L[k:, j:k]`` (the forward
    step being ``D = chol(A_D - R R^T)``, ``C = (A_C - B R^T) D^-T``), and
    ``Ebar = Cbar D^-1``: ``Dbar -= Ebar^T C``, ``Bbar -= Ebar R``, ``Rbar -=
    Ebar^T B``, the block's own sweep gives ``Fbar`` from ``Dbar``, then
    ``Rbar -= (Fbar + Fbar^T) R``.  Every product runs on BLAS (trsm, gemm)
    on the row-major arrays, which BLAS reads as their transposes."""
    n = lo.shape[1]
    nb = CHOL_BLOCK
    lm, fs = work[:n * n], work[n * n:n * n + nb * nb]
    ints, chars, dbl = _scalars(work)
    chars[0], chars[1], chars[2], chars[3] = ord("N"), ord("T"), ord("L"), ord("U")
    dbl[0], dbl[1] = 1.0, -1.0
    ints[0] = n
    for i in range(lo.shape[0]):
        if n == 0:
            continue
        g = out[i].reshape(n * n)  # out is C-contiguous
        for r in range(n):
            for c in range(n):
                lm[r * n + c] = lo[i, r, c]
                g[r * n + c] = gl[i, r, c] if c <= r else 0.0
        k = n
        while k > 0:
            j = max(0, k - nb)
            b, m = k - j, n - k
            ints[1], ints[2], ints[3] = b, m, j
            # BLAS's view (column-major, leading dimension n) of a row-major
            # block X[r0:, c0:] is X^T[c0:, r0:], at offset r0 * n + c0
            if m > 0:
                # Ebar^T = D^-T Cbar^T: trsm 'L', 'U', 'N' on the transposes
                _trsm(kind, chars[2:].ctypes, chars[3:].ctypes, chars[0:].ctypes, chars[0:].ctypes,
                      ints[1:].ctypes, ints[2:].ctypes, dbl[0:].ctypes, lm[j * n + j:].ctypes,
                      ints[0:].ctypes, g[k * n + j:].ctypes, ints[0:].ctypes)
                # Dbar^T -= C^T Ebar (both triangles; the upper is dropped below)
                _gemm(kind, chars[0:].ctypes, chars[1:].ctypes, ints[1:].ctypes, ints[1:].ctypes,
                      ints[2:].ctypes, dbl[1:].ctypes, lm[k * n + j:].ctypes, ints[0:].ctypes,
                      g[k * n + j:].ctypes, ints[0:].ctypes, dbl[0:].ctypes,
                      g[j * n + j:].ctypes, ints[0:].ctypes)
                if j > 0:
                    # Bbar^T -= R^T Ebar^T
                    _gemm(kind, chars[0:].ctypes, chars[0:].ctypes, ints[3:].ctypes,
                          ints[2:].ctypes, ints[1:].ctypes, dbl[1:].ctypes,
                          lm[j * n:].ctypes, ints[0:].ctypes, g[k * n + j:].ctypes,
                          ints[0:].ctypes, dbl[0:].ctypes, g[k * n:].ctypes, ints[0:].ctypes)
                    # Rbar^T -= B^T Ebar
                    _gemm(kind, chars[0:].ctypes, chars[1:].ctypes, ints[3:].ctypes,
                          ints[1:].ctypes, ints[2:].ctypes, dbl[1:].ctypes,
                          lm[k * n:].ctypes, ints[0:].ctypes, g[k * n + j:].ctypes,
                          ints[0:].ctypes, dbl[0:].ctypes, g[j * n:].ctypes, ints[0:].ctypes)
            for r in range(j, k):  # the upper triangle of Dbar is not a gradient
                for c in range(r + 1, k):
                    g[r * n + c] = 0.0
            _chol_adjoint_block(lm, g, n, j, k)
            if j > 0:
                # Rbar^T -= R^T (Fbar + Fbar^T), the symmetric block in fs
                for r in range(b):
                    for c in range(r + 1):
                        f = g[(j + r) * n + j + c]
                        fs[r * b + c] = f
                        fs[c * b + r] = f
                    fs[r * b + r] *= 2.0
                _gemm(kind, chars[0:].ctypes, chars[0:].ctypes, ints[3:].ctypes, ints[1:].ctypes,
                      ints[1:].ctypes, dbl[1:].ctypes, lm[j * n:].ctypes, ints[0:].ctypes,
                      fs.ctypes, ints[1:].ctypes, dbl[0:].ctypes, g[j * n:].ctypes,
                      ints[0:].ctypes)
            k = j
