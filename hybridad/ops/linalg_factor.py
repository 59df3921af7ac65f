"""Factorizations, triangular solves and the matrix exponential: qr,
solve_triangular, lu_factor, expm, and ``refuse_if`` (a run-time refusal the
numpy surface places where a value decides what numpy would return).

Operands are stacks ``(batch, m, n)`` of float64 (``solve_triangular``:
float32 too), as the primitives of :mod:`hybridad.ops.linalg`; the kernels are those of
:mod:`hybridad.ops.lapack_more` (which also says how results are packed).

Derivatives:

* ``qr`` (Walter & Lehmann; Townsend's note; JAX's rule for m >= n): with
  ``X = dA R^-1`` and ``C = Q^T X``, ``dQ = Q (Omega - C) + X`` and ``dR = (C -
  Omega) R``, ``Omega = tril(C, -1) - tril(C, -1)^T``; for m < n the leading
  m x m block is factored so and the rest of R follows, ``dR2 = Q^T (dY - dQ
  R2)``.  Defined where R is invertible (full rank).  The columns of a
  complete Q beyond n (m > n) have no derivative (any basis of the
  complement): differentiating through them raises, as for svd's.
* ``solve_triangular``: that of ``op(T)^-1 b``, T the triangle read (the
  other entries, and the diagonal with ``unit``, get derivative 0).
* ``lu_factor`` (``a = P L U``): with ``C = L^-1 P^T dA U^-1``, ``dL = L
  tril(C, -1)``, ``dU = triu(C) U``; the pivots are piecewise constant.
* ``expm``: the Frechet derivative ``L(A, E)``, the upper right block of
  ``expm([[A, E], [0, A]])`` (Mathias 1996; Higham 2008, 10.6), the
  direction scaled by a power of two to the norm of A; the reverse rule is
  ``L(A^T, G)``.  It is the exponential's derivative, to the accuracy of
  expm itself (not the derivative of the Pade approximant).
"""

from __future__ import annotations

import numpy as np

from ..ir.registry import Op, register
from .common import bind as _bind
from .linalg import _mT, _run, _stacked_batch
from .linalg_spectral import _check_stack, _work, refused_cotangent, refused_tangent

# ----------------------------------------------------------------------------
# solve_triangular
# ----------------------------------------------------------------------------


def _tri_abstract(a, b, lower=False, trans=0, unit=False):
    _check_stack(a, "solve_triangular")
    if a.shape[1] != a.shape[2] or len(b.shape) != 3 or b.shape[:2] != a.shape[:2] or \
            b.dtype != a.dtype or trans not in (0, 1, 2):
        raise ValueError(f"solve_triangular: {a.shape} {a.dtype}, right-hand sides {b.shape} "
                         f"{b.dtype}, trans {trans}")
    return b.shape, a.dtype


def _read(n, lower, unit, dtype):
    """(n, n) of ``dtype``: 1 where solve_triangular reads the matrix, else 0."""
    ones = np.ones((n, n), dtype)
    return np.tril(ones, -int(unit)) if lower else np.triu(ones, int(unit))


def _tri_vjp(g, node, active, a, b, ans, lower=False, trans=0, unit=False):
    t = 1 if trans == 0 else 0
    gb = _bind("solve_triangular", a, g, lower=lower, trans=t, unit=unit)
    ga = None
    if active[0]:
        outer = np.matmul(ans, _mT(gb)) if trans else np.matmul(gb, _mT(ans))
        ga = -outer * _read(a.shape[-1], lower, unit, a.dtype)
    return ga, gb if active[1] else None


def _tri_jvp(ts, node, a, b, ans, lower=False, trans=0, unit=False):
    ta, tb = ts
    rhs = tb
    if ta is not None:
        dt = ta * _read(a.shape[-1], lower, unit, a.dtype)
        prod = np.matmul(_mT(dt) if trans else dt, ans)
        rhs = -prod if tb is None else tb - prod
    return _bind("solve_triangular", a, rhs, lower=lower, trans=trans, unit=unit)


register(Op("solve_triangular", "compute", _tri_abstract, run=_run("solve_triangular"),
            vjp=_tri_vjp, jvp=_tri_jvp, batch=_stacked_batch,
            workspace=_work("solve_triangular"), raises=True,
            doc="x with op(T) @ x = b, T the lower (else upper) triangle, unit diagonal "
                "with unit, op the transpose for trans 1 or 2 (LAPACK trtrs, as scipy)"))

# ----------------------------------------------------------------------------
# qr
# ----------------------------------------------------------------------------


def _qr_abstract(a, mode="reduced", complement=False):
    _check_stack(a, "qr")
    b, m, n = a.shape
    k = min(m, n)
    if mode not in ("r", "reduced", "complete") or complement and (mode != "complete" or
                                                                   m <= n):
        raise ValueError(f"qr: mode {mode!r}, complement {complement} on {a.shape}")
    if complement:
        return (b, m, m - k), a.dtype
    return ((b, k, n) if mode == "r" else (b, m * k + k * n)), a.dtype


def qr_parts(p, m, n):
    """Cut a packed ``qr`` result (mode 'reduced' or 'complete') apart.

    Parameters
    ----------
    p : Tracer
        ``(batch, m k + k n)`` (k = min(m, n)).
    m, n : int
        The shape of the factored matrices.

    Returns
    -------
    Q, R : Tracer
        ``(batch, m, k)`` and ``(batch, k, n)``.
    """
    b, k = p.shape[0], min(m, n)
    return np.reshape(p[:, :m * k], (b, m, k)), np.reshape(p[:, m * k:], (b, k, n))


def _right_rinv(x, r):
    """x R^-1 for upper triangular R: (R^-T x^T)^T."""
    return _mT(_bind("solve_triangular", r, _mT(x), lower=False, trans=1, unit=False))


def _square_vjp(q, r, gq, gr):
    """The gradient w.r.t. A = QR (m >= n) from those w.r.t. Q and R."""
    m = -np.matmul(gr, _mT(r)) if gq is None else np.matmul(_mT(q), gq) - np.matmul(gr, _mT(r))
    gx = np.matmul(q, np.tril(m - _mT(m), -1) - m)
    if gq is not None:
        gx = gx + gq
    # gX R^-T
    return _mT(_bind("solve_triangular", r, _mT(gx), lower=False, trans=0, unit=False))


def _square_jvp(q, r, da):
    x = _right_rinv(da, r)
    c = np.matmul(_mT(q), x)
    low = np.tril(c, -1)
    omega = low - _mT(low)
    return np.matmul(q, omega - c) + x, np.matmul(c - omega, r)


def _qr_vjp(g, node, active, a, ans, mode="reduced", complement=False):
    if complement:
        return (refused_cotangent(a, g, 2),)
    m, n = a.shape[1:]
    if mode == "r":
        q, r = qr_parts(_bind("qr", a, mode="reduced"), m, n)
        gq, gr = None, g
    else:
        (q, r), (gq, gr) = qr_parts(ans, m, n), qr_parts(g, m, n)
    if m >= n:
        return (_square_vjp(q, r, gq, gr),)
    r1, r2, gr1, gr2 = r[:, :, :m], r[:, :, m:], gr[:, :, :m], gr[:, :, m:]
    shift = -np.matmul(np.matmul(q, gr2), _mT(r2))
    gq = shift if gq is None else gq + shift
    return (np.concatenate([_square_vjp(q, r1, gq, gr1), np.matmul(q, gr2)], axis=2),)


def _qr_jvp(ts, node, a, ans, mode="reduced", complement=False):
    if complement:
        return refused_tangent(node, ts[0], 2)
    m, n = a.shape[1:]
    q, r = qr_parts(_bind("qr", a, mode="reduced") if mode == "r" else ans, m, n)
    da = ts[0]
    if m >= n:
        dq, dr = _square_jvp(q, r, da)
    else:
        dq, dr1 = _square_jvp(q, r[:, :, :m], da[:, :, :m])
        dr2 = np.matmul(_mT(q), da[:, :, m:] - np.matmul(dq, r[:, :, m:]))
        dr = np.concatenate([dr1, dr2], axis=2)
    if mode == "r":
        return dr
    b = a.shape[0]
    return np.concatenate([np.reshape(dq, (b, -1)), np.reshape(dr, (b, -1))], axis=1)


register(Op("qr", "compute", _qr_abstract, run=_run("qr"), vjp=_qr_vjp, jvp=_qr_jvp,
            batch=_stacked_batch, workspace=_work("qr"), raises=True,
            doc="QR decomposition as numpy.linalg.qr (LAPACK geqrf + orgqr): Q and R "
                "packed, R alone for mode 'r'; complement: the columns of the complete Q "
                "beyond n"))

# ----------------------------------------------------------------------------
# lu_factor
# ----------------------------------------------------------------------------


def _square_stack(a, name):
    """``(batch, n)`` of a stack of square matrices, else a ValueError naming ``name``."""
    _check_stack(a, name)
    b, n, n2 = a.shape
    if n != n2:
        raise ValueError(f"{name}: expected square matrices, got {a.shape}")
    return b, n


def _lu_abstract(a):
    b, n = _square_stack(a, "lu_factor")
    return (b, 2 * n + 1, n), a.dtype


def lu_parts(p):
    """Cut a packed ``lu_factor`` result apart.

    Parameters
    ----------
    p : Tracer
        ``(batch, 2 n + 1, n)``.

    Returns
    -------
    LU, P : Tracer
        ``(batch, n, n)`` each: L (unit diagonal implicit) and U in one
        matrix, as scipy's ``lu``, and the permutation with ``a = P L U``.
    """
    n = p.shape[-1]
    return p[:, :n, :], p[:, n + 1:, :]


def _lu_vjp(g, node, active, a, ans):
    lu, p = lu_parts(ans)
    n = a.shape[-1]
    g = g[:, :n, :]
    low = np.tril(lu, -1) + np.eye(n)
    # gA = P L^-T (tril(L^T gL, -1) + triu(gU U^T)) U^-T
    k = np.tril(np.matmul(_mT(low), np.tril(g, -1)), -1) + np.triu(np.matmul(np.triu(g),
                                                                            _mT(np.triu(lu))))
    z = _mT(_bind("solve_triangular", lu, _mT(k), lower=False, trans=0, unit=False))
    w = _bind("solve_triangular", lu, z, lower=True, trans=1, unit=True)
    return (np.matmul(p, w),)


def _lu_jvp(ts, node, a, ans):
    lu, p = lu_parts(ans)
    n = a.shape[-1]
    y = _bind("solve_triangular", lu, np.matmul(_mT(p), ts[0]), lower=True, trans=0, unit=True)
    c = _right_rinv(y, lu)
    dlu = np.matmul(np.tril(lu, -1) + np.eye(n), np.tril(c, -1)) + \
        np.matmul(np.triu(c), np.triu(lu))
    return np.concatenate([dlu, np.zeros((a.shape[0], n + 1, n))], axis=1)


register(Op("lu_factor", "compute", _lu_abstract, run=_run("lu_factor"), vjp=_lu_vjp,
            jvp=_lu_jvp, batch=_stacked_batch, workspace=_work("lu_factor"),
            doc="LU factorization with partial pivoting as scipy.linalg.lu_factor (LAPACK "
                "getrf): LU, the 0-based pivots and P (a = P L U) packed"))

# ----------------------------------------------------------------------------
# expm
# ----------------------------------------------------------------------------


def _expm_abstract(a):
    _check_stack(a, "expm")
    if a.shape[1] != a.shape[2]:
        raise ValueError(f"expm: expected square matrices, got {a.shape}")
    return a.shape, a.dtype


def _norm1(x):
    return np.max(np.sum(np.abs(x), axis=1), axis=1)


def _frechet(a, e):
    """L(a, e): the derivative of expm at a in the direction e."""
    n = a.shape[-1]
    # a power of two (exact, derivative 0) bringing ||e|| near ||a||
    c = np.exp2(np.round(np.log2((_norm1(a) + 1) / (_norm1(e) + 1))))[:, None, None]
    zero = np.zeros(a.shape)
    big = np.concatenate([np.concatenate([a, e * c], axis=2),
                          np.concatenate([zero, a], axis=2)], axis=1)
    return _bind("expm", big)[:, :n, n:] / c


register(Op("expm", "compute", _expm_abstract, run=_run("expm"),
            vjp=lambda g, node, active, a, ans: (_frechet(_mT(a), g),),
            jvp=lambda ts, node, a, ans: _frechet(a, ts[0]),
            batch=_stacked_batch, workspace=_work("expm"), raises=True,
            doc="matrix exponential: Pade(13) scaling and squaring (Higham 2005) on BLAS "
                "gemm and LAPACK gesv"))

# ----------------------------------------------------------------------------
# refuse_if
# ----------------------------------------------------------------------------


def _refuse_abstract(x, flag, code=0):
    if len(x.shape) != 3 or len(flag.shape) != 1 or flag.shape[0] != x.shape[0] or \
            x.dtype != np.float64 or flag.dtype != np.float64:
        raise ValueError(f"refuse_if: {x.shape} {x.dtype}, flags {flag.shape} {flag.dtype}")
    return x.shape, x.dtype


register(Op("refuse_if", "compute", _refuse_abstract, run=_run("refuse_if"),
            vjp=lambda g, node, active, x, flag, ans, code=0: (g, None),
            jvp=lambda ts, node, x, flag, ans, code=0: ts[0],
            batch=_stacked_batch, raises=True,
            doc="x, unless a flag is set: then raise the refusal code (what numpy would "
                "return depends on a value in a way a traced plan cannot follow)"))

# ----------------------------------------------------------------------------
# solve_lu and lu_solve: one factorization for several solves with a matrix
# ----------------------------------------------------------------------------


def _solve_lu_abstract(a, b):
    batch, n = _square_stack(a, "solve_lu")
    if len(b.shape) != 3 or tuple(b.shape[:2]) != (batch, n) or b.dtype != a.dtype:
        raise ValueError(f"solve_lu: {a.shape} {a.dtype} and right-hand side {b.shape} "
                         f"{b.dtype} do not match")
    return (batch, n, b.shape[2] + n + 1), a.dtype


def _lu_solve_abstract(p, b, trans=0, at=0):
    n = p.shape[1] if len(p.shape) == 3 else -1
    if len(p.shape) != 3 or p.shape[2] != at + n + 1 or len(b.shape) != 3 or \
            tuple(b.shape[:2]) != (p.shape[0], n) or b.dtype != p.dtype:
        raise ValueError(f"lu_solve: factors {p.shape} {p.dtype} (from column {at}) and "
                         f"right-hand side {b.shape} {b.dtype} do not match")
    return b.shape, p.dtype


def _lowered_only(*args, **attrs):
    raise NotImplementedError("solve_lu, lu_factors, lu_solve, symmetric and cho_solve are made "
                              "by the lowering pass share_factorizations, after every "
                              "derivative is taken: they have no derivative rules of their own")


def _lu_factors_abstract(a):
    batch, n = _square_stack(a, "lu_factors")
    return (batch, n, n + 1), a.dtype


register(Op("solve_lu", "compute", _solve_lu_abstract, run=_run("solve_lu"),
            vjp=_lowered_only, jvp=_lowered_only, batch=_stacked_batch,
            workspace=_work("solve_lu"), raises=True,
            doc="x with a @ x = b by gesv (numpy's solve, bit for bit), and the LU factors "
                "and pivots gesv leaves, packed after x for lu_solve"))
register(Op("lu_factors", "compute", _lu_factors_abstract, run=_run("lu_factors"),
            vjp=_lowered_only, jvp=_lowered_only, batch=_stacked_batch,
            workspace=_work("lu_factors"), raises=True,
            doc="gesv's LU factors and pivots of a (no right-hand side), packed as solve_lu "
                "packs them, for lu_solve"))
register(Op("lu_solve", "compute", _lu_solve_abstract, run=_run("lu_solve"),
            vjp=_lowered_only, jvp=_lowered_only, batch=_stacked_batch,
            workspace=_work("lu_solve"),
            doc="x with a @ x = b (trans 1: a^T @ x = b) from the factors of a that solve_lu "
                "packed from column `at` on (LAPACK getrs)"))

# ----------------------------------------------------------------------------
# symmetric and cho_solve: a solve with a matrix that is also Cholesky-factored
# ----------------------------------------------------------------------------


def _symmetric_abstract(a):
    batch, _ = _square_stack(a, "symmetric")
    return (batch,), np.dtype(np.float64)


def _cho_solve_abstract(lo, flags, a, b, upper=False):
    batch, n = _square_stack(a, "cho_solve")
    if tuple(lo.shape) != tuple(a.shape) or tuple(flags.shape) != (batch,) or \
            len(b.shape) != 3 or tuple(b.shape[:2]) != (batch, n) or \
            not a.dtype == lo.dtype == b.dtype:
        raise ValueError(f"cho_solve: factor {lo.shape} {lo.dtype}, flags {flags.shape}, "
                         f"matrix {a.shape} {a.dtype} and right-hand side {b.shape} {b.dtype} "
                         "do not match")
    return b.shape, a.dtype


register(Op("symmetric", "compute", _symmetric_abstract, run=_run("symmetric"),
            vjp=_lowered_only, jvp=_lowered_only, batch=_stacked_batch,
            doc="1.0 for each matrix of the stack equal to its transpose (exactly), else 0.0"))
register(Op("cho_solve", "compute", _cho_solve_abstract, run=_run("cho_solve"),
            vjp=_lowered_only, jvp=_lowered_only, batch=_stacked_batch,
            workspace=_work("cho_solve"), raises=True,
            doc="x with a @ x = b: by the Cholesky factor lo of a (potrs; upper: a = lo^T lo) "
                "where flags says a is exactly symmetric (then the factor, made from one "
                "triangle, is a's), else by gesv on a, as numpy's solve"))
