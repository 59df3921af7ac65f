"""scipy.linalg's functions that are numpy's, or compositions of the traced
ones of :mod:`.scipy_linalg`: eigvalsh, svd, svdvals, pinv, pinvh, lstsq, qr,
solve_banded and solveh_banded (as dense systems), the matrix functions
cosm, sinm, tanm, coshm, sinhm, tanhm (from expm), lu (from lu_factor's
getrf) and the eigenvalues of a symmetric tridiagonal matrix (eigh of the
dense one).

Registered like :mod:`.scipy_linalg`'s (in :data:`.scipy_special.INTERCEPTED`
under ``"scipy.linalg"``).  Values are scipy's to rounding: the same LAPACK
factorization where scipy and numpy call the same one (gesdd, geqrf, syevr),
elsewhere the same function computed another way (each docstring says how).
"""

from __future__ import annotations

import numbers

import numpy as np

from ..core.trace import bind
from ..ops.linalg_factor import lu_parts
from .numpy_api import _tracer, reshape
from .numpy_linalg import _operands, _result, _stack
from .scipy_linalg import eigh, expm, solve, symmetric_from
from .scipy_special import intercepts

__all__ = []

_M = "scipy.linalg"


def _refuse(name, why):
    raise NotImplementedError(f"hybridad: scipy.linalg.{name} {why}")


def _eps(a):
    return np.finfo(np.float32 if a.dtype == np.float32 else np.float64).eps


@intercepts(_M, "eigvalsh")
def eigvalsh(a, b=None, *, lower=True, overwrite_a=False, overwrite_b=False, type=1,  # noqa: A002
             check_finite=True, subset_by_index=None, subset_by_value=None, driver=None):
    """``eigh(..., eigvals_only=True)`` (syevr, scipy's values)."""
    return eigh(a, b, lower=lower, eigvals_only=True, type=type,
                subset_by_index=subset_by_index, subset_by_value=subset_by_value,
                driver=driver)


@intercepts(_M, "svd")
def svd(a, full_matrices=True, compute_uv=True, overwrite_a=False, check_finite=True,
        lapack_driver="gesdd"):
    """gesdd as numpy calls it (``lapack_driver='gesvd'`` is refused): scipy's
    values and signs; a tuple ``(U, s, Vh)``."""
    if lapack_driver != "gesdd":
        _refuse("svd", f"with lapack_driver={lapack_driver!r} is not supported; use 'gesdd'")
    out = np.linalg.svd(_tracer(a), full_matrices=full_matrices, compute_uv=compute_uv)
    return tuple(out) if compute_uv else out


@intercepts(_M, "svdvals")
def svdvals(a, overwrite_a=False, check_finite=True):
    """The singular values (gesdd without vectors)."""
    return np.linalg.svd(_tracer(a), compute_uv=False)


def _cutoff(name, a, atol, rtol):
    """numpy's relative cutoff for scipy's ``atol + rtol * max(s)`` (``atol`` 0)."""
    if atol not in (None, 0, 0.0):
        _refuse(name, "with atol > 0 is not supported (a constant rtol is)")
    if rtol is None:
        rtol = max(a.shape[-2:]) * _eps(a)
    if not isinstance(rtol, numbers.Real) or np.ndim(rtol):
        _refuse(name, "with an array or traced rtol is not supported (a constant scalar is)")
    return float(rtol)


def _rank(a, rtol):
    s = np.linalg.svd(a, compute_uv=False)
    return np.sum(s > rtol * np.max(s, axis=-1, keepdims=True), axis=-1)


@intercepts(_M, "pinv")
def pinv(a, *, atol=None, rtol=None, return_rank=False, check_finite=True):
    """The SVD's pseudo-inverse, singular values at most ``rtol * max(s)``
    dropped (numpy's ``pinv``); its derivative at constant rank."""
    a = _tracer(a)
    rtol = _cutoff("pinv", a, atol, rtol)
    out = np.linalg.pinv(a, rcond=rtol)
    return (out, _rank(a, rtol)) if return_rank else out


@intercepts(_M, "pinvh")
def pinvh(a, atol=None, rtol=None, lower=True, return_rank=False, check_finite=True):
    """The pseudo-inverse of a symmetric matrix from the triangle ``lower``
    names (scipy's eigh; here the SVD of the symmetrized matrix: the same
    matrix to rounding)."""
    return pinv(symmetric_from(_tracer(a), lower), atol=atol, rtol=rtol,
                return_rank=return_rank)


@intercepts(_M, "lstsq")
def lstsq(a, b, cond=None, overwrite_a=False, overwrite_b=False, check_finite=True,
          lapack_driver=None):
    """``(x, residues, rank, s)`` as scipy (gelsd's minimum-norm solution, by
    numpy's ``lstsq`` with scipy's default ``cond`` (eps)); ``residues`` a scalar
    for a vector ``b`` (see numpy's for the rank-deficient case)."""
    if lapack_driver not in (None, "gelsd", "gelsy", "gelss"):
        raise ValueError(f'LAPACK driver "{lapack_driver}" is not found')
    a, b = _tracer(a), _tracer(b)
    rcond = float(_eps(a)) if cond is None else cond
    x, res, rank, s = np.linalg.lstsq(a, b, rcond=rcond)
    if b.ndim == 1 and a.shape[0] > a.shape[1]:
        res = res[0]
    return x, res, rank, s


@intercepts(_M, "qr")
def qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True):
    """geqrf + orgqr (numpy's calls, scipy's values): modes 'full', 'economic'
    and 'r' (a tuple ``(R,)``, R of shape (M, N)); pivoting and 'raw' are refused."""
    if pivoting:
        _refuse("qr", "with pivoting=True is not supported (its permutation is chosen by the "
                "values)")
    if mode not in ("full", "r", "economic", "raw"):
        raise ValueError("Mode argument should be one of ['full', 'r', 'economic', 'raw']")
    if mode == "raw":
        _refuse("qr", "with mode='raw' (LAPACK's Householder reflectors) is not supported")
    a = _tracer(a)
    if mode == "economic":
        return tuple(np.linalg.qr(a, mode="reduced"))
    q, r = np.linalg.qr(a, mode="complete")
    return (r,) if mode == "r" else (q, r)


def _dense_band(ab, lower_bands, upper_bands):
    """The (n, n) matrix of LAPACK's band storage ``ab`` (rows: diagonals from the
    uppermost; ``a[i, j] = ab[u + i - j, j]``)."""
    ab = _tracer(ab)
    rows, n = ab.shape
    if rows != lower_bands + upper_bands + 1:
        raise ValueError(f"invalid values for the number of lower and upper diagonals: l+u+1 "
                         f"({lower_bands + upper_bands + 1}) does not equal ab.shape[0] ({rows})")
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    row = upper_bands + i - j
    inside = (row >= 0) & (row < rows)
    return ab[np.clip(row, 0, rows - 1), np.broadcast_to(j, (n, n))] * inside.astype(ab.dtype)


@intercepts(_M, "solve_banded")
def solve_banded(l_and_u, ab, b, overwrite_ab=False, overwrite_b=False, check_finite=True):
    """The banded system as a dense one (scipy's gbsv and the dense gesv both
    factor with partial pivoting: the same solution to rounding; the cost is the
    dense solve's, O(n**3))."""
    lo, up = (int(v) for v in l_and_u)
    return solve(_dense_band(ab, lo, up), b)


@intercepts(_M, "solveh_banded")
def solveh_banded(ab, b, overwrite_ab=False, overwrite_b=False, lower=False,
                  check_finite=True):
    """The symmetric positive definite banded system as a dense one: the
    Cholesky factor of the triangle the band stores (as scipy's pbsv; dense cost)."""
    ab = _tracer(ab)
    bands = ab.shape[0] - 1  # lower: a[i, j] = ab[i - j, j] for i >= j
    dense = _dense_band(ab, bands, 0) if lower else _dense_band(ab, 0, bands)
    return solve(dense, b, assume_a="pos", lower=lower)


def _trig(name, a):
    """``(cos A, sin A)`` from the exponential of ``[[0, -A], [A, 0]]``
    (``expm(iA)``'s real and imaginary parts, as scipy computes them)."""
    a = _tracer(a)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"scipy.linalg.{name}: expected a square matrix, got shape {a.shape}")
    n = a.shape[0]
    zero = np.zeros((n, n), a.dtype)
    e = expm(np.concatenate([np.concatenate([zero, -a], axis=1),
                             np.concatenate([a, zero], axis=1)], axis=0))
    return e[:n, :n], e[n:, :n]


def _hyperbolic(a):
    a = _tracer(a)
    plus, minus = expm(a), expm(-a)
    return 0.5 * (plus + minus), 0.5 * (plus - minus)


@intercepts(_M, "cosm")
def cosm(A):  # noqa: N803 - scipy's name
    """``Re expm(iA)`` (see :func:`_trig`)."""
    return _trig("cosm", A)[0]


@intercepts(_M, "sinm")
def sinm(A):  # noqa: N803
    """``Im expm(iA)``."""
    return _trig("sinm", A)[1]


@intercepts(_M, "tanm")
def tanm(A):  # noqa: N803
    """``solve(cosm(A), sinm(A))``, as scipy."""
    c, s = _trig("tanm", A)
    return solve(c, s)


@intercepts(_M, "coshm")
def coshm(A):  # noqa: N803
    """``(expm(A) + expm(-A)) / 2``, as scipy."""
    return _hyperbolic(A)[0]


@intercepts(_M, "sinhm")
def sinhm(A):  # noqa: N803
    """``(expm(A) - expm(-A)) / 2``, as scipy."""
    return _hyperbolic(A)[1]


@intercepts(_M, "tanhm")
def tanhm(A):  # noqa: N803
    """``solve(coshm(A), sinhm(A))``, as scipy."""
    c, s = _hyperbolic(A)
    return solve(c, s)


@intercepts(_M, "lu")
def lu(a, permute_l=False, overwrite_a=False, check_finite=True, p_indices=False):
    """getrf of a square matrix (or a stack of them), as ``lu_factor``: ``(P,
    L, U)`` with ``a = P L U``; ``permute_l``: ``(P L, U)``; ``p_indices``:
    the rows ``perm`` with ``a = L[perm] U`` instead of ``P`` (an integer array,
    no derivative).  Rectangular matrices are refused."""
    (a,), dtype = _operands(a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        _refuse("lu", f"of a non-square matrix {a.shape} is not supported")
    batch, n = a.shape[:-2], a.shape[-1]
    packed, perm = lu_parts(bind("lu_factor", _stack(a, batch)))
    unit = np.eye(n, dtype=packed.dtype)
    lower = _result(reshape(np.tril(packed, -1) + unit, a.shape), dtype)
    upper = _result(reshape(np.triu(packed), a.shape), dtype)
    perm = reshape(perm, a.shape)
    if permute_l:
        return np.matmul(perm.astype(lower.dtype), lower), upper
    if p_indices:
        return np.argmax(perm, axis=-1), lower, upper
    return _result(perm, dtype), lower, upper


def _tridiagonal(d, e):
    d, e = _tracer(d), _tracer(e)
    if d.ndim != 1 or e.ndim != 1 or e.shape[0] != max(d.shape[0] - 1, 0):
        raise ValueError(f"d ({d.shape}) and e ({e.shape}) must be 1-D, e one shorter")
    return np.diag(d) + np.diag(e, 1) + np.diag(e, -1)


@intercepts(_M, "eigvalsh_tridiagonal")
def eigvalsh_tridiagonal(d, e, select="a", select_range=None, check_finite=True, tol=0.0,
                         lapack_driver="auto"):
    """The eigenvalues of the symmetric tridiagonal matrix of ``d`` and ``e``:
    syevr of the dense matrix (scipy's stemr/stebz values to rounding);
    ``select`` 'a' or 'i' (by index)."""
    if select in ("v", 1):
        _refuse("eigvalsh_tridiagonal", "with select='v' is not supported (how many "
                "eigenvalues it selects depends on the values); use select='i'")
    subset = None if select in ("a", 0) else tuple(select_range)
    return eigh(_tridiagonal(d, e), eigvals_only=True, subset_by_index=subset)


@intercepts(_M, "eigh_tridiagonal")
def eigh_tridiagonal(d, e, eigvals_only=False, select="a", select_range=None,
                     check_finite=True, tol=0.0, lapack_driver="auto"):
    """``eigvals_only=True``: :func:`eigvalsh_tridiagonal`.  The eigenvectors
    are refused (a dense solver's would differ from scipy's stemr in sign)."""
    if not eigvals_only:
        _refuse("eigh_tridiagonal", "with eigenvectors is not supported; pass "
                "eigvals_only=True, or scipy.linalg.eigh the dense matrix (np.diag(d) + "
                "np.diag(e, 1) + np.diag(e, -1))")
    return eigvalsh_tridiagonal(d, e, select, select_range)
