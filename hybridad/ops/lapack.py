"""LAPACK kernels for the linear-algebra primitives, shared by both backends.

Each kernel works on a stack of matrices (3-D operands ``(batch, n, n)``, any
layout) and writes into preallocated C-contiguous outputs, using a
preallocated ``work`` vector (the op's workspace, a slot of the plan's arena)
for the factorization and the pivots -- so a call allocates nothing.

LAPACK is reached through numba's LAPACK helpers (``numba_xxgetrf``,
``numba_xgesv``, ``numba_xxpotrf``), which call ``scipy.linalg.cython_lapack``
-- the same routines numpy.linalg uses.  ``syevd`` (eigh) is called straight
from ``scipy.linalg.cython_lapack``: numba's helper for it mallocs the LAPACK
workspace on every call, whereas here the workspace (sized by scipy's
``dsyevd_lwork`` query when the plan is built) is part of ``work``.  The
function pointer scipy exports is registered with LLVM under a symbol of ours
(:func:`_register_cython_lapack`), so the kernels stay cacheable on disk: the
cached machine code refers to the symbol, not to an address of this process.
The numpy backend calls these compiled kernels too (one implementation, one
set of numerics).

LAPACK is column-major: a C-ordered ``n x n`` block is the transpose of the
matrix LAPACK sees.  Kernels therefore copy operands into column-major
scratch (an O(n^2) copy next to the O(n^3) factorization).

Each kernel makes the LAPACK call numpy.linalg's ``_umath_linalg`` makes for
the same function (numpy computes every float type in double precision; the
primitives take float64, see :mod:`hybridad.ops.linalg`): ``gesv`` against
the right-hand sides (``inv``: the identity), ``getrf`` then numpy's sign and
``sum(log|u_ii|)`` (``det = sign * exp(logdet)``, as numpy), ``potrf`` with
``uplo`` on the matrix as given (``'L'``, or ``'U'`` for ``upper=True``),
``syevd`` with ``jobz='V'`` (eigh) or ``'N'`` (eigvalsh: other eigenvalues,
to rounding, than eigh's) and the ``UPLO`` asked for.  Where this LAPACK build
is numpy's (or computes the same), the results are numpy's bit for bit.

Errors follow numpy.linalg: a singular matrix in ``solve``/``inv``, a matrix
that is not positive definite in ``cholesky`` and eigenvalues that do not
converge raise ``LinAlgError``.
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import binding as _llvm
from numba import njit, types
from .._libcache import install
from .lapack_names import (KERNEL_MODULES, LAPACK_OPS, SINGLE_OPS, _more_args,  # noqa: F401
                           kernel_args, kind_of)

__all__ = ["KERNEL_MODULES", "LAPACK_OPS", "SINGLE_OPS", "cholesky", "det", "eigh", "eigvalsh",
           "inv", "kernel", "kernel_args", "kind_of", "slogdet", "solve", "work_size"]

def kernel(op):
    """The compiled kernel of a LAPACK primitive.

    Parameters
    ----------
    op : str
        A name in :data:`LAPACK_OPS`.

    Returns
    -------
    numba dispatcher
        ``kernel(*operands, out, [work,] kind, *kernel_args(op, attrs))``.
    """
    import importlib

    return getattr(importlib.import_module(KERNEL_MODULES[op]), op)


_VOID, _IDX, _CHAR = types.voidptr, types.intp, types.char
_getrf = types.ExternalFunction("numba_xxgetrf",
                                types.intc(_CHAR, _IDX, _IDX, _VOID, _IDX, _VOID))
_gesv = types.ExternalFunction("numba_xgesv",
                               types.intc(_CHAR, _IDX, _IDX, _VOID, _IDX, _VOID, _VOID, _IDX))
_potrf = types.ExternalFunction("numba_xxpotrf", types.intc(_CHAR, _CHAR, _IDX, _VOID, _IDX))


def _register_cython_lapack(*names, library="cython_lapack"):
    """Make the ``scipy.linalg.cython_lapack`` (or ``library``: cython_blas)
    routines ``names`` callable from compiled code as the symbols
    ``hybridad_<name>``."""
    import importlib

    cython_lapack = importlib.import_module(f"scipy.linalg.{library}")
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    for name in names:
        capsule = cython_lapack.__pyx_capi__[name]
        _llvm.add_symbol(f"hybridad_{name}", get_pointer(capsule, get_name(capsule)))


_register_cython_lapack("dsyevd", "ssyevd")
# Fortran calling convention: every argument by pointer
# (jobz, uplo, n, a, lda, w, work, lwork, iwork, liwork, info)
_SYEVD = types.void(*([_VOID] * 11))
_dsyevd = types.ExternalFunction("hybridad_dsyevd", _SYEVD)
_ssyevd = types.ExternalFunction("hybridad_ssyevd", _SYEVD)


def work_size(op, n, k=0):
    """Elements (of the matrix dtype) of workspace op's kernel needs for n x n
    matrices (and k right-hand sides): a column-major copy, the right-hand
    sides, and the int32 pivots (in n elements: an element holds at least one)."""
    if op in ("solve", "inv"):
        return n * n + n * (n if op == "inv" else k) + n
    if op in ("det", "slogdet"):
        return n * n + n
    if op in ("eigh", "eigvalsh"):
        vectors = op == "eigh"
        return n * n + _syevd_lwork(n, vectors) + _syevd_liwork(n, vectors) + _SCALARS
    return 0


#: workspace elements eigh keeps for the scalar arguments LAPACK takes by pointer
_SCALARS = 8


def _syevd_lwork(n, vectors):
    """syevd's ``lwork`` with (``vectors``) or without eigenvectors: LAPACK's
    own answer to the workspace query (through scipy), never below the
    documented minimum."""
    from scipy.linalg.lapack import dsyevd_lwork

    lwork = int(dsyevd_lwork(n, compute_v=int(vectors), lower=1)[0])
    least = (1 + 6 * n + 2 * n * n if vectors else 2 * n + 1) if n > 1 else 1
    return max(lwork, least)


install()  # numba's cache of the functions below: stamped with their imports' source


@njit(cache=True, nogil=True)
def _syevd_liwork(n, vectors):
    """syevd's integer workspace: fixed by LAPACK."""
    return 3 + 5 * n if n > 1 and vectors else 1


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
def _slogdet_one(a, work, kind):
    """(sign, log|det|) of a (n x n) as numpy computes them: the permutation's
    sign times the signs of U's diagonal, and the sum of log|u_jj| in order;
    (0, -inf) when getrf finds an exactly zero pivot."""
    n = a.shape[0]
    sign = _lu_diagonal(a, work, kind)
    if sign == 0:
        return 0.0, -np.inf
    logdet = 0.0
    for j in range(n):
        u = work[j + j * n]
        if u < 0:
            sign = -sign
            u = -u
        logdet += np.log(u)
    return sign, logdet


@njit(cache=True, nogil=True)
def det(a, out, work, kind):
    """out[i] = det(a[i]) = sign * exp(log|det|), as numpy computes it (0 for
    an exactly singular matrix)."""
    for i in range(a.shape[0]):
        sign, logdet = _slogdet_one(a[i], work, kind)
        out[i] = sign * np.exp(logdet)


@njit(cache=True, nogil=True)
def slogdet(a, out, work, kind):
    """out[i] = (sign, log|det|) of a[i]; (0, -inf) when singular, as numpy."""
    for i in range(a.shape[0]):
        sign, logdet = _slogdet_one(a[i], work, kind)
        out[i, 0] = sign
        out[i, 1] = logdet


@njit(cache=True, nogil=True)
def cholesky(a, out, kind, upper):
    """out[i] = L with a[i] = L @ L.T from a's lower triangle (potrf 'L', as
    numpy), or with ``upper``: U with a[i] = U.T @ U from its upper triangle
    (potrf 'U', as numpy's ``upper=True``); the other triangle zero."""
    n = a.shape[1]
    uplo = np.int8(ord("U") if upper else ord("L"))
    for i in range(a.shape[0]):
        # out[i] holds a[i].T in C order: LAPACK (column-major) reads a[i]
        for r in range(n):
            for c in range(n):
                out[i, c, r] = a[i, r, c]
        if n and _potrf(np.int8(kind), uplo, n, out[i].ctypes, n) > 0:
            raise np.linalg.LinAlgError("Matrix is not positive definite")
        # LAPACK's element (r, c) is out[i, c, r]: transpose back, zero the rest
        for r in range(n):
            for c in range(r):
                below, above = out[i, c, r], out[i, r, c]  # LAPACK's (r, c) and (c, r)
                out[i, r, c], out[i, c, r] = (0.0, above) if upper else (below, 0.0)


@njit(cache=True, nogil=True)
def _syevd_parts(work, n, vectors, uplo):
    """``work`` cut for syevd: the n x n column-major matrix LAPACK overwrites
    (with the eigenvectors when ``vectors``), syevd's ``work`` and ``iwork``
    (one int32 per element), and the scalars LAPACK takes by pointer (n = lda,
    lwork, liwork, info as int32; jobz, uplo as bytes), set up."""
    # work_size gave exactly n*n + lwork + liwork + _SCALARS elements, liwork
    # being fixed by n: syevd's work is what remains
    liwork = _syevd_liwork(n, vectors)
    lwork = work.shape[0] - n * n - liwork - _SCALARS
    mat = work[:n * n]
    lw = work[n * n:n * n + lwork]
    iw = work[n * n + lwork:n * n + lwork + liwork].view(np.int32)
    scalars = work[n * n + lwork + liwork:n * n + lwork + liwork + _SCALARS]
    ints = scalars[:4].view(np.int32)
    chars = scalars[4:].view(np.uint8)
    ints[0], ints[1], ints[2], ints[3] = n, lwork, liwork, 0
    chars[0], chars[1] = ord("V") if vectors else ord("N"), uplo
    return mat, lw, iw, ints, chars


@njit(cache=True, nogil=True)
def _syevd(a, w, mat, lw, iw, ints, chars, kind):
    """syevd on ``a`` (n x n, copied column-major into ``mat``: LAPACK reads
    the matrix as given, its ``uplo`` triangle), eigenvalues into ``w``."""
    n = a.shape[0]
    _colmajor(a, mat, n)
    ints[3] = 0
    if kind == ord("d"):
        _dsyevd(chars[0:].ctypes, chars[1:].ctypes, ints[0:].ctypes, mat.ctypes,
                ints[0:].ctypes, w.ctypes, lw.ctypes, ints[1:].ctypes, iw.ctypes,
                ints[2:].ctypes, ints[3:].ctypes)
    else:
        _ssyevd(chars[0:].ctypes, chars[1:].ctypes, ints[0:].ctypes, mat.ctypes,
                ints[0:].ctypes, w.ctypes, lw.ctypes, ints[1:].ctypes, iw.ctypes,
                ints[2:].ctypes, ints[3:].ctypes)
    if ints[3] != 0:
        raise np.linalg.LinAlgError("Eigenvalues did not converge")


@njit(cache=True, nogil=True)
def eigh(a, out, work, kind, uplo):
    """out[i, 0] = eigenvalues (ascending), out[i, 1:] = eigenvectors (columns)
    of the symmetric matrix a[i]'s triangle ``uplo`` (``ord('L')`` or
    ``ord('U')``) stands for: syevd with jobz='V', as numpy.linalg.eigh."""
    n = a.shape[1]
    if n == 0:
        return
    mat, lw, iw, ints, chars = _syevd_parts(work, n, True, uplo)
    for i in range(a.shape[0]):
        _syevd(a[i], out[i, 0], mat, lw, iw, ints, chars, kind)
        for r in range(n):
            for c in range(n):
                out[i, 1 + r, c] = mat[r + c * n]


@njit(cache=True, nogil=True)
def eigvalsh(a, out, work, kind, uplo):
    """out[i] = eigenvalues (ascending) of the symmetric matrix a[i]'s triangle
    ``uplo`` stands for: syevd with jobz='N', as numpy.linalg.eigvalsh (to
    rounding other values than eigh's, which also computes vectors)."""
    n = a.shape[1]
    if n == 0:
        return
    mat, lw, iw, ints, chars = _syevd_parts(work, n, False, uplo)
    for i in range(a.shape[0]):
        _syevd(a[i], out[i], mat, lw, iw, ints, chars, kind)
