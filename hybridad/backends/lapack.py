"""LAPACK kernels for the linear-algebra primitives, shared by both backends.

Each kernel works on a stack of matrices (3-D operands ``(batch, n, n)``, any
layout) and writes into preallocated C-contiguous outputs, using a
preallocated ``work`` vector (the op's workspace, a slot of the plan's arena)
for the factorization and the pivots -- so a call allocates nothing.

LAPACK is reached through numba's LAPACK helpers (``numba_xxgetrf``,
``numba_xgesv``, ``numba_xxpotrf``, ``numba_ez_xxxevd``), which call
``scipy.linalg.cython_lapack`` -- the same routines numpy.linalg uses.  The
numpy backend calls these compiled kernels too (one implementation, one set of
numerics).  The one exception to "allocates nothing": ``syevd`` (eigh) gets its
workspace from numba's helper, which mallocs it on each call (C heap; numpy's
allocator never sees it).

LAPACK is column-major: a C-ordered ``n x n`` block is the transpose of the
matrix LAPACK sees.  Kernels therefore copy operands into column-major
scratch (an O(n^2) copy next to the O(n^3) factorization).

Errors follow numpy.linalg: a singular matrix in ``solve``/``inv`` and a matrix
that is not positive definite in ``cholesky`` raise ``LinAlgError``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

__all__ = ["LAPACK_OPS", "cholesky", "det", "eigh", "inv", "kind_of", "slogdet", "solve",
           "work_size"]

#: the primitives whose kernels live here (same names)
LAPACK_OPS = ("solve", "inv", "det", "slogdet", "cholesky", "eigh")

_VOID, _IDX, _CHAR = types.voidptr, types.intp, types.char
_getrf = types.ExternalFunction("numba_xxgetrf",
                                types.intc(_CHAR, _IDX, _IDX, _VOID, _IDX, _VOID))
_gesv = types.ExternalFunction("numba_xgesv",
                               types.intc(_CHAR, _IDX, _IDX, _VOID, _IDX, _VOID, _VOID, _IDX))
_potrf = types.ExternalFunction("numba_xxpotrf", types.intc(_CHAR, _CHAR, _IDX, _VOID, _IDX))
_syevd = types.ExternalFunction("numba_ez_xxxevd",
                                types.intc(_CHAR, _CHAR, _CHAR, _IDX, _VOID, _IDX, _VOID))


def kind_of(dtype):
    """LAPACK's type letter: ``ord('d')`` for float64, ``ord('s')`` for float32."""
    return {np.dtype(np.float64): ord("d"), np.dtype(np.float32): ord("s")}[np.dtype(dtype)]


def work_size(op, n, k=0):
    """Elements (of the matrix dtype) of workspace op's kernel needs for n x n
    matrices (and k right-hand sides): a column-major copy, the right-hand
    sides, and the int32 pivots (in n elements: an element holds at least one)."""
    if op in ("solve", "inv"):
        return n * n + n * (n if op == "inv" else k) + n
    if op in ("det", "slogdet"):
        return n * n + n
    if op == "eigh":
        return n * n
    return 0


@njit(cache=True, nogil=True)
def _colmajor(a, lu, n):
    """lu[r + c * n] = a[r, c]: the matrix as LAPACK reads it."""
    for c in range(n):
        for r in range(n):
            lu[r + c * n] = a[r, c]


@njit(cache=True, nogil=True)
def _gesv_into(out, lu, rhs, piv, n, k, kind):
    """Solve with the column-major matrix ``lu`` against the k column-major
    right-hand sides ``rhs`` (both overwritten); the solution into ``out``
    (n x k)."""
    if n and _gesv(np.int8(kind), n, k, lu.ctypes, n, piv.ctypes, rhs.ctypes, n) > 0:
        raise np.linalg.LinAlgError("Singular matrix")
    for c in range(k):
        for r in range(n):
            out[r, c] = rhs[r + c * n]


@njit(cache=True, nogil=True)
def solve(a, b, out, work, kind):
    """out[i] = inv(a[i]) @ b[i] for a (batch, n, n), b (batch, n, k)."""
    n, k = a.shape[1], b.shape[2]
    lu, rhs = work[:n * n], work[n * n:n * n + n * k]
    piv = work[n * n + n * k:n * n + n * k + n].view(np.int32)
    for i in range(a.shape[0]):
        _colmajor(a[i], lu, n)
        for c in range(k):
            for r in range(n):
                rhs[r + c * n] = b[i, r, c]
        _gesv_into(out[i], lu, rhs, piv, n, k, kind)


@njit(cache=True, nogil=True)
def inv(a, out, work, kind):
    """out[i] = inv(a[i]) (gesv against the identity)."""
    n = a.shape[1]
    lu, rhs = work[:n * n], work[n * n:2 * n * n]
    piv = work[2 * n * n:2 * n * n + n].view(np.int32)
    for i in range(a.shape[0]):
        _colmajor(a[i], lu, n)
        rhs[:] = 0
        for r in range(n):
            rhs[r + r * n] = 1
        _gesv_into(out[i], lu, rhs, piv, n, n, kind)


@njit(cache=True, nogil=True)
def _lu_diagonal(a, work, kind):
    """LU-factor a (n x n) into work; the sign of the permutation, or 0 when a
    diagonal element of U is exactly zero (a singular matrix)."""
    n = a.shape[0]
    lu = work[:n * n]
    piv = work[n * n:n * n + n].view(np.int32)
    _colmajor(a, lu, n)
    if n == 0:
        return 1.0
    info = _getrf(np.int8(kind), n, n, lu.ctypes, n, piv.ctypes)
    if info > 0:
        return 0.0
    sign = 1.0
    for j in range(n):
        if piv[j] != j + 1:  # LAPACK pivots are 1-based
            sign = -sign
    return sign


@njit(cache=True, nogil=True)
def det(a, out, work, kind):
    """out[i] = det(a[i]) (0 for an exactly singular matrix, as numpy)."""
    n = a.shape[1]
    for i in range(a.shape[0]):
        d = _lu_diagonal(a[i], work, kind)
        for j in range(n):
            d *= work[j + j * n]
        out[i] = d


@njit(cache=True, nogil=True)
def slogdet(a, out, work, kind):
    """out[i] = (sign, log|det|) of a[i]; (0, -inf) when singular, as numpy."""
    n = a.shape[1]
    for i in range(a.shape[0]):
        sign = _lu_diagonal(a[i], work, kind)
        logdet = 0.0
        for j in range(n):
            u = work[j + j * n]
            if u < 0:
                sign = -sign
            logdet += np.log(np.abs(u))
        if sign == 0:
            logdet = -np.inf
        out[i, 0] = sign
        out[i, 1] = logdet


@njit(cache=True, nogil=True)
def cholesky(a, out, kind):
    """out[i] = L with a[i] = L @ L.T, from a's lower triangle (as numpy)."""
    n = a.shape[1]
    for i in range(a.shape[0]):
        # out[i] in C order is what LAPACK reads as a[i].T, whose upper
        # triangle holds a's lower one: potrf('U') leaves U = L.T there.
        for r in range(n):
            for c in range(n):
                out[i, r, c] = a[i, r, c] if c <= r else 0.0
        if n and _potrf(np.int8(kind), np.int8(ord("U")), n, out[i].ctypes, n) > 0:
            raise np.linalg.LinAlgError("Matrix is not positive definite")


@njit(cache=True, nogil=True)
def eigh(a, out, work, kind):
    """out[i, 0] = eigenvalues (ascending), out[i, 1:] = eigenvectors (columns),
    from a's lower triangle (as numpy's default UPLO='L')."""
    n = a.shape[1]
    vecs = work[:n * n]
    for i in range(a.shape[0]):
        # vecs column-major = a[i]; its lower triangle is a's lower triangle
        _colmajor(a[i], vecs, n)
        w = out[i, 0]
        if n and _syevd(np.int8(kind), np.int8(ord("V")), np.int8(ord("L")), n,
                        vecs.ctypes, n, w.ctypes) > 0:
            raise np.linalg.LinAlgError("Eigenvalues did not converge")
        for r in range(n):
            for c in range(n):
                out[i, 1 + r, c] = vecs[r + c * n]
