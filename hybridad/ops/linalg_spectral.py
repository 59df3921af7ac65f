"""Spectral primitives: svd, pinv, eig (real spectra) and scipy's eigh (syevr,
subsets by index).

Operands are stacks ``(batch, m, n)`` of float64, as the primitives of
:mod:`hybridad.ops.linalg`; the kernels are those of
:mod:`hybridad.ops.lapack_more` (which also says how results are packed).

Derivatives (Townsend 2016; JAX's and PyTorch's rules):

* ``svd``: for distinct nonzero singular values (the factor
  ``1 / (s_j**2 - s_i**2)`` is infinite at repeated ones, where U and V are
  not differentiable; the singular values alone are differentiable wherever
  they are distinct or only ``s`` is used, through ``jobz='N'``); for
  m != n the terms that keep U (tall) or V (wide) in the orthogonal
  complement are included.  The columns of a full U beyond min(m, n) (rows of
  a full Vt) are not unique -- any orthonormal basis of the complement -- and
  have no derivative: differentiating through them raises (reverse mode
  when the plan is built; forward mode -- Jacobians, Hessians -- when a plan
  whose result depends on their tangent runs).
* ``pinv``: Golub & Pereyra's formula for the derivative of the
  pseudo-inverse at constant rank, in the pseudo-inverse itself (smooth at
  repeated singular values, unlike a composition through the SVD).
* ``eig``: for real, distinct eigenvalues: with ``C = V^-1 dA V``,
  ``dw = diag(C)`` and ``dV = V (F o C)`` projected so each eigenvector keeps
  unit norm (as LAPACK normalizes it); ``F_ij = 1 / (w_j - w_i)``.
* ``eigh_evr``: for distinct eigenvalues, as ``eigh`` of :mod:`.linalg`, the
  vectors of a subset through the full spectrum (``eigh`` of the same
  triangle); it reads one triangle, as scipy does.
"""

from __future__ import annotations

import numpy as np

from ..ir.registry import Op, register
from .common import bind as _bind
from .linalg import (_check_dtype, _from_triangle, _gapped, _gaps, _mT, _run, _stacked_batch,
                     _to_triangle)


def _check_stack(a, name):
    if len(a.shape) != 3:
        raise ValueError(f"{name}: expected a stack of matrices (batch, m, n), got {a.shape}")
    _check_dtype(a, name)


def _work(op):
    """The op's ``workspace``: its kernel module's ``work_size`` on (the rows of
    the first operand, the columns of the last)."""
    def size(*args, **attrs):
        import importlib

        from .lapack_names import KERNEL_MODULES

        module = importlib.import_module(KERNEL_MODULES[op])
        return module.work_size(op, args[0].shape[1], args[-1].shape[2], **attrs)

    return size


def refused_tangent(node, t, code):
    """The tangent of a node that has none (the complement columns of svd and qr).

    It is computed only where an output depends on it (dead code otherwise),
    and then raises the refusal ``code`` of
    :func:`hybridad.ops.lapack_solve.refuse_if` when the plan runs.

    Parameters
    ----------
    node : Node
        The node (3-D) whose tangent is asked for.
    t : Tracer
        The tangent of its operand (what the refusal depends on).
    code : int
        The refusal: 1 (svd), 2 (qr).

    Returns
    -------
    Tracer
        Shaped like ``node``.
    """
    x = np.broadcast_to(np.sum(t) * 0.0, node.shape)
    return _bind("refuse_if", x, np.ones(node.shape[0]), code=code)


def refused_cotangent(a, g, code):
    """The cotangent of ``a`` through a node that has no derivative (the
    complement columns of svd and qr), whose own cotangent is ``g``: zero, and
    the refusal ``code`` when the plan runs where ``g`` is not -- as where the
    function's result depends on those columns (``q[:, :n]`` of a complete Q
    reaches them only with zeros, which need no derivative).

    Parameters
    ----------
    a : Tracer
        The node's operand (3-D).
    g : Tracer
        The node's cotangent (3-D, one matrix per batch entry).
    code : int
        The refusal: 1 (svd), 2 (qr).

    Returns
    -------
    Tracer
        Shaped like ``a``.
    """
    flag = (np.sum(np.abs(g), axis=(1, 2)) != 0).astype(np.float64)
    return _bind("refuse_if", np.zeros(a.shape), flag, code=code)


# ----------------------------------------------------------------------------
# svd
# ----------------------------------------------------------------------------


def _svd_abstract(a, jobz="S", complement=False):
    _check_stack(a, "svd")
    b, m, n = a.shape
    k = min(m, n)
    if jobz not in ("N", "S", "A") or complement and (jobz != "A" or m == n):
        raise ValueError(f"svd: jobz {jobz!r}, complement {complement} on {a.shape}")
    if complement:
        return ((b, m, m - k) if m > n else (b, n - k, n)), a.dtype
    return ((b, k) if jobz == "N" else (b, k + m * k + k * n)), a.dtype


def svd_parts(p, m, n):
    """Cut a packed ``svd`` result apart.

    Parameters
    ----------
    p : Tracer
        ``(batch, k + m k + k n)``, the ``svd`` op's result with ``jobz`` 'S'
        or 'A' (k = min(m, n)).
    m, n : int
        The shape of the decomposed matrices.

    Returns
    -------
    s, U, Vt : Tracer
        ``(batch, k)``, ``(batch, m, k)``, ``(batch, k, n)``.
    """
    b, k = p.shape[0], min(m, n)
    return (p[:, :k], np.reshape(p[:, k:k + m * k], (b, m, k)),
            np.reshape(p[:, k + m * k:], (b, k, n)))


def _svd_pack(s, u, vt):
    b = s.shape[0]
    return np.concatenate([s, np.reshape(u, (b, -1)), np.reshape(vt, (b, -1))], axis=1)


def _svd_gaps(s):
    """F_ij = 1 / (s_j**2 - s_i**2) off the diagonal, 0 on it."""
    return _gaps(s * s)


def _svd_vjp(g, node, active, a, ans, jobz="S", complement=False):
    if complement:
        return (refused_cotangent(a, g, 1),)
    m, n = a.shape[1:]
    if jobz == "N":
        _, u, vt = svd_parts(_bind("svd", a, jobz="S"), m, n)
        return (np.matmul(u * g[:, None, :], vt),)
    s, u, vt = svd_parts(ans, m, n)
    gs, gu, gvt = svd_parts(g, m, n)
    v, gv = _mT(vt), _mT(gvt)
    f = _svd_gaps(s)
    j = _gapped(f, np.matmul(_mT(u), gu))
    k = _gapped(f, np.matmul(vt, gv))
    eye = np.eye(s.shape[-1])
    inner = (j + _mT(j)) * s[:, None, :] + s[:, :, None] * (k + _mT(k)) + gs[:, None, :] * eye
    ga = np.matmul(np.matmul(u, inner), vt)
    if m > n:  # (I - U U^T) gU S^-1 V^T
        ga = ga + np.matmul((gu - np.matmul(u, np.matmul(_mT(u), gu))) / s[:, None, :], vt)
    if n > m:  # U S^-1 gV^T (I - V V^T)
        ga = ga + np.matmul(u, _mT(gv - np.matmul(v, np.matmul(vt, gv))) / s[:, :, None])
    return (ga,)


def _svd_jvp(ts, node, a, ans, jobz="S", complement=False):
    if complement:
        return refused_tangent(node, ts[0], 1)
    da, (m, n) = ts[0], a.shape[1:]
    if jobz == "N":
        _, u, vt = svd_parts(_bind("svd", a, jobz="S"), m, n)
        return np.sum(u * np.matmul(da, _mT(vt)), axis=1)
    s, u, vt = svd_parts(ans, m, n)
    v = _mT(vt)
    ds = np.matmul(np.matmul(_mT(u), da), v)
    eye = np.eye(s.shape[-1])
    f = _svd_gaps(s)
    dss, sds = ds * s[:, None, :], s[:, :, None] * ds
    du = np.matmul(u, f * (dss + _mT(dss)))
    dv = np.matmul(v, f * (sds + _mT(sds)))
    if m > n:
        dav = np.matmul(da, v)
        du = du + (dav - np.matmul(u, np.matmul(_mT(u), dav))) / s[:, None, :]
    if n > m:
        dahu = np.matmul(_mT(da), u)
        dv = dv + (dahu - np.matmul(v, np.matmul(vt, dahu))) / s[:, None, :]
    return _svd_pack(np.sum(ds * eye, axis=1), du, _mT(dv))


register(Op("svd", "compute", _svd_abstract, run=_run("svd"), vjp=_svd_vjp, jvp=_svd_jvp,
            batch=_stacked_batch, workspace=_work("svd"), raises=True,
            doc="singular value decomposition (LAPACK gesdd, jobz 'A', 'S' or 'N' as "
                "numpy): s, U, Vt packed; complement: the columns of the full U (rows of "
                "the full Vt) beyond min(m, n)"))

# ----------------------------------------------------------------------------
# pinv
# ----------------------------------------------------------------------------


def _pinv_abstract(a, rcond=1e-15):
    _check_stack(a, "pinv")
    return (a.shape[0], a.shape[2], a.shape[1]), a.dtype


def _pinv_vjp(g, node, active, a, ans, rcond=1e-15):
    # -P^T G P^T + (I - A P) G^T P P^T + P^T P G^T (I - P A)
    p, pt, gt = ans, _mT(ans), _mT(g)
    x = np.matmul(gt, np.matmul(p, pt))
    y = np.matmul(np.matmul(pt, p), gt)
    return (-np.matmul(np.matmul(pt, g), pt) + x - np.matmul(a, np.matmul(p, x)) +
            y - np.matmul(np.matmul(y, p), a),)


def _pinv_jvp(ts, node, a, ans, rcond=1e-15):
    # dP = -P dA P + P P^T dA^T (I - A P) + (I - P A) dA^T P^T P
    p, pt, dat = ans, _mT(ans), _mT(ts[0])
    return (-np.matmul(np.matmul(p, ts[0]), p) +
            np.matmul(np.matmul(p, pt), dat - np.matmul(np.matmul(dat, a), p)) +
            np.matmul(dat - np.matmul(p, np.matmul(a, dat)), np.matmul(pt, p)))


register(Op("pinv", "compute", _pinv_abstract, run=_run("pinv"), vjp=_pinv_vjp,
            jvp=_pinv_jvp, batch=_stacked_batch, workspace=_work("pinv"), raises=True,
            doc="pseudo-inverse as numpy.linalg.pinv (gesdd, singular values at most "
                "rcond * max(s) dropped)"))

# ----------------------------------------------------------------------------
# eig (real spectra)
# ----------------------------------------------------------------------------


def _eig_abstract(a, vectors=True):
    _check_stack(a, "eig")
    b, n, n2 = a.shape
    if n != n2:
        raise ValueError(f"eig: expected square matrices, got {a.shape}")
    return ((b, n + 1, n) if vectors else (b, n)), a.dtype


def _eig_vjp(g, node, active, a, ans, vectors=True):
    n = a.shape[-1]
    eye = np.eye(n)
    if not vectors:  # V^-T diag(gw) V^T
        vt = _mT(_bind("eig", a, vectors=True)[:, 1:, :])
        return (_bind("solve", vt, g[:, :, None] * vt),)
    w, v = ans[:, 0, :], ans[:, 1:, :]
    gw, gv = g[:, 0, :], g[:, 1:, :]
    h = gv - v * np.sum(v * gv, axis=1)[:, None, :]  # unit-norm eigenvectors
    k = gw[:, None, :] * eye + _gapped(_gaps(w), np.matmul(_mT(v), h))
    return (_bind("solve", _mT(v), np.matmul(k, _mT(v))),)


def _eig_jvp(ts, node, a, ans, vectors=True):
    n = a.shape[-1]
    eye = np.eye(n)
    v = _bind("eig", a, vectors=True)[:, 1:, :] if not vectors else ans[:, 1:, :]
    c = _bind("solve", v, np.matmul(ts[0], v))
    dw = np.sum(c * eye, axis=1)
    if not vectors:
        return dw
    dv = np.matmul(v, _gaps(ans[:, 0, :]) * c)
    dv = dv - v * np.sum(v * dv, axis=1)[:, None, :]
    return np.concatenate([dw[:, None, :], dv], axis=1)


register(Op("eig", "compute", _eig_abstract, run=_run("eig"), vjp=_eig_vjp, jvp=_eig_jvp,
            batch=_stacked_batch, workspace=_work("eig"), raises=True,
            doc="eigenvalues (row 0) and right eigenvectors (rows 1..n) of a real matrix "
                "with a real spectrum (LAPACK geev; a complex spectrum raises at run "
                "time)"))

# ----------------------------------------------------------------------------
# scipy.linalg.eigh: syevr
# ----------------------------------------------------------------------------


def _evr_abstract(a, uplo="L", lo=0, hi=0, vectors=True, subset=False):
    _check_stack(a, "eigh")
    b, n, n2 = a.shape
    if n != n2 or uplo not in ("L", "U") or not 0 <= lo <= hi < max(n, 1):
        raise ValueError(f"eigh: matrices {a.shape}, uplo {uplo!r}, subset {lo}..{hi}")
    s = hi - lo + 1 if n else 0
    return ((b, n + 1, s) if vectors else (b, s)), a.dtype


def _subset_gaps(a, uplo, lo, hi):
    """The full eigenvectors V (eigh of the same triangle) and F_ij =
    1 / (w_{lo+j} - w_i), 0 where i = lo + j."""
    full = _bind("eigh", a, uplo=uplo)
    w, v = full[:, 0, :], full[:, 1:, :]
    n, s = a.shape[-1], hi - lo + 1
    same = (np.arange(n)[:, None] == lo + np.arange(s)[None, :]).astype(np.float64)
    return v, (1 - same) / (w[:, lo:hi + 1][:, None, :] - w[:, :, None] + same)


def _evr_vjp(g, node, active, a, ans, uplo="L", lo=0, hi=0, vectors=True, subset=False):
    attrs = dict(uplo=uplo, lo=lo, hi=hi, subset=subset)
    if not vectors:
        z = _bind("eigh_evr", a, vectors=True, **attrs)[:, 1:, :]
        return (_to_triangle(np.matmul(z * g[:, None, :], _mT(z)), uplo == "L"),)
    z, gw, gz = ans[:, 1:, :], g[:, 0, :], g[:, 1:, :]
    v, f = _subset_gaps(a, uplo, lo, hi)
    gs = np.matmul(np.matmul(v, _gapped(f, np.matmul(_mT(v), gz))) + z * gw[:, None, :], _mT(z))
    return (_to_triangle(gs, uplo == "L"),)


def _evr_jvp(ts, node, a, ans, uplo="L", lo=0, hi=0, vectors=True, subset=False):
    ds = _from_triangle(ts[0], uplo == "L")
    z = ans[:, 1:, :] if vectors else \
        _bind("eigh_evr", a, uplo=uplo, lo=lo, hi=hi, vectors=True, subset=subset)[:, 1:, :]
    dsz = np.matmul(ds, z)
    dw = np.sum(z * dsz, axis=1)
    if not vectors:
        return dw
    v, f = _subset_gaps(a, uplo, lo, hi)
    dz = np.matmul(v, f * np.matmul(_mT(v), dsz))
    return np.concatenate([dw[:, None, :], dz], axis=1)


register(Op("eigh_evr", "compute", _evr_abstract, run=_run("eigh_evr"), vjp=_evr_vjp,
            jvp=_evr_jvp, batch=_stacked_batch, workspace=_work("eigh_evr"), raises=True,
            doc="eigenvalues lo..hi (row 0) and their eigenvectors of the symmetric matrix "
                "the triangle uplo stands for, as scipy.linalg.eigh (LAPACK syevr)"))
