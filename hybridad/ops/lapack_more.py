"""LAPACK kernels of the decompositions: svd (gesdd), pinv (gesdd, then
numpy's cutoff), qr (geqrf + orgqr), eig (geev) and scipy's eigh (syevr).
The triangular solves, LU and expm are in :mod:`hybridad.ops.lapack_solve`.

As in :mod:`hybridad.ops.lapack` (whose conventions these follow): operands
are stacks ``(batch, m, n)`` of float64, results go into preallocated
C-contiguous outputs, and LAPACK's matrix copies, its workspace (sized by
LAPACK's own workspace query when the plan is built, as numpy and scipy
size it) and the scalars Fortran takes by pointer are cut from the op's
``work`` slot of the plan's arena: a call allocates nothing.  The routines
are scipy's ``cython_lapack``, registered as LLVM symbols so that cached
machine code stays valid across processes.

Each kernel makes the call numpy (or scipy) makes for the same function:
``gesdd`` with ``jobz`` 'A' (numpy's ``full_matrices=True``), 'S' or 'N';
``geqrf`` then ``orgqr`` for as many columns of Q as numpy's mode asks;
``geev`` with ``jobvl='N'``; ``syevr`` with ``range`` 'A' or 'I' and
``abstol = 0`` (scipy.linalg.eigh's default driver).

Packed results (one array per op, the numpy surface cuts them apart):

* ``svd``: ``(batch, k + m k + k n)`` = s, then U (m x k) and Vt (k x n) row
  by row (k = min(m, n)); with ``complement`` the columns k.. of the full U
  (m > n, ``(batch, m, m - k)``) or rows k.. of the full Vt
  (``(batch, n - k, n)``);
* ``qr``: ``(batch, m k + k n)`` = Q (m x k) then R (k x n); mode 'r' R
  alone; with ``complement`` the columns k.. of the complete Q;
* ``eig``: ``(batch, n + 1, n)`` = eigenvalues, then eigenvectors
  (columns); ``eigh_evr`` likewise with the selected ``s`` columns.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from .lapack import _register_cython_lapack
from .lapack_names import COMPLEX_SPECTRUM
from .._libcache import install

__all__ = ["eig", "eigh_evr", "pinv", "qr", "svd", "work_size"]

_register_cython_lapack("dgesdd", "dgeqrf", "dorgqr", "dgeev", "dsyevr")
_V = types.voidptr
_dgesdd = types.ExternalFunction("hybridad_dgesdd", types.void(*([_V] * 14)))
_dgeqrf = types.ExternalFunction("hybridad_dgeqrf", types.void(*([_V] * 8)))
_dorgqr = types.ExternalFunction("hybridad_dorgqr", types.void(*([_V] * 9)))
_dgeev = types.ExternalFunction("hybridad_dgeev", types.void(*([_V] * 14)))
_dsyevr = types.ExternalFunction("hybridad_dsyevr", types.void(*([_V] * 21)))

#: elements at the end of ``work`` for the scalars LAPACK takes by pointer:
#: 16 int32, 8 chars, 3 doubles
_SCALARS = 12



# ----------------------------------------------------------------------------
# workspace sizes (Python, when the plan is built)
# ----------------------------------------------------------------------------


def _query(value):
    return int(np.ceil(float(value)))


def work_size(op, m, n, **attrs):
    """Elements of float64 workspace the kernel ``op`` needs.

    Parameters
    ----------
    op : str
        ``"svd"``, ``"pinv"``, ``"qr"``, ``"eig"`` or ``"eigh_evr"``.
    m, n : int
        The matrices' shape.
    **attrs
        The op's attributes (``jobz``, ``mode``, ``vectors``, ``uplo``, ...).

    Returns
    -------
    int
        LAPACK's matrix copies, its workspace as LAPACK's workspace query
        sizes it (never below the documented minimum), and the scalars.
    """
    import scipy.linalg.lapack as la

    k = min(m, n)
    if op in ("svd", "pinv"):
        jobz = attrs.get("jobz", "S") if op == "svd" else "S"
        if k == 0:
            return _SCALARS + 1
        full, uv = jobz == "A", jobz != "N"
        lwork = _query(la.dgesdd_lwork(m, n, compute_uv=int(uv), full_matrices=int(full))[0])
        least = 3 * k + max(max(m, n), 7 * k) if not uv else \
            max(3 * k * k + max(max(m, n), 4 * k * k + 4 * k), 4 * k * k + 6 * k + max(m, n))
        return _svd_fixed(m, n, ord(jobz)) + max(lwork, least) + _SCALARS
    if op == "qr":
        mc = m if attrs.get("mode") == "complete" and m > n else k
        if k == 0:
            return m * max(n, mc) + _SCALARS + 1
        lwork = _query(la.dgeqrf_lwork(m, n)[0])
        if attrs.get("mode") != "r":
            q = la.dorgqr(np.zeros((m, mc), order="F"), np.zeros(k), lwork=-1)
            lwork = max(lwork, _query(q[1][0]))
        return m * max(n, mc) + k + max(lwork, max(n, mc, 1)) + _SCALARS
    if op == "eig":
        vectors = attrs.get("vectors", True)
        lwork = _query(la.dgeev_lwork(n, compute_vl=0, compute_vr=int(vectors))[0]) if n else 1
        return n * n + 2 * n + (n * n if vectors else 1) + max(lwork, 4 * n, 1) + _SCALARS
    if op == "eigh_evr":
        from scipy.linalg.lapack import _compute_lwork, get_lapack_funcs

        query = get_lapack_funcs("syevr_lwork", dtype=np.float64)
        lwork, liwork = _compute_lwork(query, n=n, lower=int(attrs["uplo"] == "L"))
        assert liwork <= _evr_liwork(n), (liwork, n)
        s = attrs["hi"] - attrs["lo"] + 1
        return _evr_fixed(n, s, attrs["vectors"]) + max(int(lwork), 26 * n, 1) + _SCALARS
    raise KeyError(op)


install()  # numba's cache of the functions below: stamped with their imports' source


@njit(cache=True, nogil=True)
def _svd_fixed(m, n, jobz):
    """Workspace elements before LAPACK's: the matrix, s, U, Vt, iwork (8k int32)."""
    k = min(m, n)
    ucols = m if jobz == ord("A") else (k if jobz == ord("S") else 0)
    vrows = n if jobz == ord("A") else (k if jobz == ord("S") else 0)
    return m * n + k + max(m * ucols, 1) + max(vrows * n, 1) + 4 * k + 1


@njit(cache=True, nogil=True)
def _evr_liwork(n):
    return max(1, 10 * n)


@njit(cache=True, nogil=True)
def _evr_fixed(n, s, vectors):
    """syevr's workspace before ``work``: the matrix, w, Z, isuppz (2n int32),
    iwork (int32)."""
    return n * n + n + (n * s if vectors else 1) + n + 1 + _evr_liwork(n) // 2 + 1


# ----------------------------------------------------------------------------
# shared pieces
# ----------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _scalars(work):
    """The int32, char and double scalars at the end of ``work``."""
    end = work.shape[0]
    return (work[end - _SCALARS:end - 4].view(np.int32),
            work[end - 4:end - 3].view(np.uint8), work[end - 3:end])


@njit(cache=True, nogil=True)
def _colmajor(a, buf, m, n):
    """buf[r + c m] = a[r, c]: the m x n matrix as LAPACK reads it."""
    for c in range(n):
        for r in range(m):
            buf[r + c * m] = a[r, c]


@njit(cache=True, nogil=True)
def _from_colmajor(buf, out, m, n):
    """out[r, c] = buf[r + c m]: an m x n matrix LAPACK wrote, into ``out``
    (:func:`_colmajor`'s inverse)."""
    for c in range(n):
        for r in range(m):
            out[r, c] = buf[r + c * m]


# ----------------------------------------------------------------------------
# svd and pinv: gesdd
# ----------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _gesdd(a, work, jobz):
    """gesdd on a (m x n) with ``jobz``; the column-major matrix, s, U, Vt
    (leading dimensions m and n or k), cut from ``work``."""
    m, n = a.shape
    k = min(m, n)
    ucols = m if jobz == ord("A") else (k if jobz == ord("S") else 0)
    vrows = n if jobz == ord("A") else (k if jobz == ord("S") else 0)
    at = m * n
    mat, s = work[:at], work[at:at + k]
    at += k
    u = work[at:at + max(m * ucols, 1)]
    at += max(m * ucols, 1)
    vt = work[at:at + max(vrows * n, 1)]
    at += max(vrows * n, 1)
    iw = work[at:at + 4 * k + 1].view(np.int32)
    at += 4 * k + 1
    lw = work[at:work.shape[0] - _SCALARS]
    ints, chars, _ = _scalars(work)
    _colmajor(a, mat, m, n)
    ints[0], ints[1], ints[2], ints[3], ints[4] = m, n, max(m, 1), max(m, 1), max(vrows, 1)
    ints[5], ints[6] = lw.shape[0], 0
    chars[0] = jobz
    _dgesdd(chars.ctypes, ints[0:].ctypes, ints[1:].ctypes, mat.ctypes, ints[2:].ctypes,
            s.ctypes, u.ctypes, ints[3:].ctypes, vt.ctypes, ints[4:].ctypes, lw.ctypes,
            ints[5:].ctypes, iw.ctypes, ints[6:].ctypes)
    if ints[6] != 0:
        raise np.linalg.LinAlgError("SVD did not converge")
    return s, u, vt, max(vrows, 1)


@njit(cache=True, nogil=True)
def svd(a, out, work, kind, jobz, complement):
    """numpy.linalg.svd of each a[i] (gesdd with ``jobz`` = ord('A'), ord('S')
    or ord('N')), packed as the module docstring says."""
    b, m, n = a.shape
    k = min(m, n)
    if b == 0:
        return
    o = out.reshape(b, -1)  # each result's row (a complement is (rows, cols))
    cols = out.shape[-1]
    for i in range(b):
        if k == 0:
            if complement:  # numpy: the identity
                o[i] = 0
                for j in range(cols):
                    o[i, j * cols + j] = 1
            continue
        s, u, vt, ldvt = _gesdd(a[i], work, jobz)
        if complement:
            if m > n:
                for r in range(m):
                    for c in range(k, m):
                        o[i, r * cols + c - k] = u[r + c * m]
            else:
                for r in range(k, n):
                    for c in range(n):
                        o[i, (r - k) * cols + c] = vt[r + c * ldvt]
            continue
        for j in range(k):
            o[i, j] = s[j]
        if jobz == ord("N"):
            continue
        for r in range(m):
            for c in range(k):
                o[i, k + r * k + c] = u[r + c * m]
        at = k + m * k
        for r in range(k):
            for c in range(n):
                o[i, at + r * n + c] = vt[r + c * ldvt]


@njit(cache=True, nogil=True)
def pinv(a, out, work, kind, rcond):
    """out[i] = numpy.linalg.pinv(a[i], rcond): gesdd 'S', singular values at
    most rcond * max(s) dropped, ``Vt.T @ (s_inv[:, None] * U.T)``."""
    b, m, n = a.shape
    k = min(m, n)
    for i in range(b):
        if k == 0:
            continue
        s, u, vt, ldvt = _gesdd(a[i], work, ord("S"))
        cutoff = rcond * s[0]
        for j in range(k):
            cutoff = max(cutoff, rcond * s[j])
        for j in range(k):
            s[j] = 1.0 / s[j] if s[j] > cutoff else 0.0
        for r in range(n):
            for c in range(m):
                acc = 0.0
                for j in range(k):
                    acc += vt[j + r * ldvt] * (s[j] * u[c + j * m])
                out[i, r, c] = acc


# ----------------------------------------------------------------------------
# qr: geqrf + orgqr
# ----------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def qr(a, out, work, kind, mode, complement):
    """numpy.linalg.qr of each a[i]: ``mode`` 0 ('r': R alone), 1 ('reduced')
    or 2 ('complete': orgqr for all m columns), packed as the module
    docstring says."""
    b, m, n = a.shape
    k = min(m, n)
    mc = m if mode == 2 and m > n else k
    at = m * max(n, mc)
    mat, tau = work[:at], work[at:at + k]
    lw = work[at + k:work.shape[0] - _SCALARS]
    ints, _, _ = _scalars(work)
    if b == 0:
        return
    o = out.reshape(b, -1)
    for i in range(b):
        if k == 0:
            if complement:
                o[i] = 0
                for j in range(m):
                    o[i, j * m + j] = 1
            continue
        _colmajor(a[i], mat, m, n)
        ints[0], ints[1], ints[2], ints[3], ints[4] = m, n, m, lw.shape[0], 0
        ints[5], ints[6] = mc, k
        _dgeqrf(ints[0:].ctypes, ints[1:].ctypes, mat.ctypes, ints[2:].ctypes, tau.ctypes,
                lw.ctypes, ints[3:].ctypes, ints[4:].ctypes)
        if ints[4] != 0:
            raise np.linalg.LinAlgError("QR factorization failed (LAPACK geqrf)")
        rat = 0 if mode == 0 else m * k
        if not complement:
            for r in range(k):
                for c in range(n):
                    o[i, rat + r * n + c] = mat[r + c * m] if c >= r else 0.0
        if mode == 0:
            continue
        _dorgqr(ints[0:].ctypes, ints[5:].ctypes, ints[6:].ctypes, mat.ctypes,
                ints[2:].ctypes, tau.ctypes, lw.ctypes, ints[3:].ctypes, ints[4:].ctypes)
        if ints[4] != 0:
            raise np.linalg.LinAlgError("QR factorization failed (LAPACK orgqr)")
        if complement:
            for r in range(m):
                for c in range(k, mc):
                    o[i, r * (mc - k) + c - k] = mat[r + c * m]
        else:
            for r in range(m):
                for c in range(k):
                    o[i, r * k + c] = mat[r + c * m]


# ----------------------------------------------------------------------------
# eig: geev; scipy's eigh: syevr
# ----------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def eig(a, out, work, kind, vectors):
    """numpy.linalg.eig (``vectors``) or eigvals of each a[i] (geev, jobvl='N'):
    eigenvalues in out[i, 0] (or out[i]), right eigenvectors below.  A
    complex spectrum is refused: numpy would return complex arrays."""
    b, n = a.shape[0], a.shape[1]
    mat, wr, wi = work[:n * n], work[n * n:n * n + n], work[n * n + n:n * n + 2 * n]
    at = n * n + 2 * n
    vr = work[at:at + (n * n if vectors else 1)]
    at += n * n if vectors else 1
    lw = work[at:work.shape[0] - _SCALARS]
    ints, chars, _ = _scalars(work)
    if b == 0 or n == 0:
        return
    o = out.reshape(b, -1)  # eigenvalues, then the eigenvectors' rows
    for i in range(b):
        for r in range(n):
            for c in range(n):
                if not np.isfinite(a[i, r, c]):
                    raise np.linalg.LinAlgError("Array must not contain infs or NaNs")
        _colmajor(a[i], mat, n, n)
        ints[0], ints[1], ints[2], ints[3], ints[4] = n, 1, n if vectors else 1, lw.shape[0], 0
        chars[0], chars[1] = ord("N"), ord("V") if vectors else ord("N")
        _dgeev(chars[0:].ctypes, chars[1:].ctypes, ints[0:].ctypes, mat.ctypes,
               ints[0:].ctypes, wr.ctypes, wi.ctypes, vr.ctypes, ints[1:].ctypes, vr.ctypes,
               ints[2:].ctypes, lw.ctypes, ints[3:].ctypes, ints[4:].ctypes)
        if ints[4] != 0:
            raise np.linalg.LinAlgError("Eigenvalues did not converge")
        for j in range(n):
            if wi[j] != 0:
                raise NotImplementedError(COMPLEX_SPECTRUM)
        for j in range(n):
            o[i, j] = wr[j]
        if vectors:
            for r in range(n):
                for c in range(n):
                    o[i, n + r * n + c] = vr[r + c * n]


@njit(cache=True, nogil=True)
def eigh_evr(a, out, work, kind, uplo, lo, hi, vectors, subset):
    """scipy.linalg.eigh of the symmetric matrix a[i]'s triangle ``uplo``
    stands for: syevr (range 'I' for eigenvalues lo..hi, 0-based, with
    ``subset``, else 'A'),
    eigenvalues in out[i, 0] (or out[i]), their eigenvectors below."""
    b, n = a.shape[0], a.shape[1]
    s = hi - lo + 1
    if n == 0 or b == 0:
        return
    o = out.reshape(b, -1)
    mat, w = work[:n * n], work[n * n:n * n + n]
    at = n * n + n
    z = work[at:at + (n * s if vectors else 1)]
    at += n * s if vectors else 1
    isuppz = work[at:at + n + 1].view(np.int32)
    at += n + 1
    iw = work[at:at + _evr_liwork(n) // 2 + 1].view(np.int32)
    at += _evr_liwork(n) // 2 + 1
    lw = work[at:work.shape[0] - _SCALARS]
    ints, chars, dbl = _scalars(work)
    for i in range(b):
        _colmajor(a[i], mat, n, n)
        ints[0], ints[1], ints[2], ints[3], ints[4] = n, lo + 1, hi + 1, 0, n if vectors else 1
        ints[5], ints[6], ints[7] = lw.shape[0], _evr_liwork(n), 0
        chars[0], chars[1], chars[2] = ord("V") if vectors else ord("N"), \
            ord("I") if subset else ord("A"), uplo
        dbl[0], dbl[1], dbl[2] = 0.0, 1.0, 0.0
        _dsyevr(chars[0:].ctypes, chars[1:].ctypes, chars[2:].ctypes, ints[0:].ctypes,
                mat.ctypes, ints[0:].ctypes, dbl[0:].ctypes, dbl[1:].ctypes, ints[1:].ctypes,
                ints[2:].ctypes, dbl[2:].ctypes, ints[3:].ctypes, w.ctypes, z.ctypes,
                ints[4:].ctypes, isuppz.ctypes, lw.ctypes, ints[5:].ctypes, iw.ctypes,
                ints[6:].ctypes, ints[7:].ctypes)
        if ints[7] != 0 or ints[3] != s:
            raise np.linalg.LinAlgError("Internal Error.")
        for j in range(s):
            o[i, j] = w[j]
        if vectors:
            for r in range(n):
                for c in range(s):
                    o[i, s + r * s + c] = z[r + c * n]
