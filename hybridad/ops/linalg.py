"""Linear-algebra primitives: solve, inv, det, slogdet, cholesky, eigh, eigvalsh.

Operands are stacks of square float64 matrices, exactly 3-D ``(batch, n, n)``
(the numpy surface reshapes ``(..., n, n)`` operands, broadcasts batches and
computes float32 in float64, as numpy.linalg does); ``cholesky`` and
``cholesky_adjoint`` also take float32 stacks (:data:`.lapack.SINGLE_OPS`:
scipy.linalg's cholesky computes float32 in single precision).  The reference ``run`` of
each is a LAPACK kernel of :mod:`hybridad.ops.lapack` writing into the
preallocated result with a preallocated ``work`` slot; the numba backend
calls the same kernels.  Each makes numpy's LAPACK call (routine, ``uplo``,
``jobz``), so values, signs and conventions are numpy's.

Results with two parts are packed into one array: ``slogdet`` gives
``(batch, 2)`` = (sign, log|det|), ``eigh`` gives ``(batch, n + 1, n)`` =
eigenvalues in row 0, eigenvectors (columns) below.

Adjoints are the standard ones (Giles 2008; Murray 2016 for Cholesky).
``cholesky``, ``eigh`` and ``eigvalsh`` read one triangle of the matrix, as
numpy does (``uplo``: ``"L"`` or ``"U"``; cholesky's ``upper``): the function
they compute is ``F(S(a))`` with ``S`` the symmetric matrix the triangle
stands for.  Their derivatives are that function's: 0 for every entry of the
unread triangle, and an off-diagonal entry of the read triangle moves both
symmetric positions of ``S`` (:func:`_from_triangle`, :func:`_to_triangle`).
"""

from __future__ import annotations

import numpy as np

from ..ir.registry import Op, register
from .common import bind as _bind


def _kernel(name):
    from . import lapack

    return lapack.kernel(name), lapack


def _mT(x):
    return np.swapaxes(x, -1, -2)


def _inv_T(a):
    return _mT(_bind("inv", a))


def _work(name):
    """The op's ``workspace``: its kernel module's ``work_size`` on (the order
    of ``a``, the columns of ``b``)."""
    def size(a, b=None, **attrs):
        import importlib

        from .lapack_names import KERNEL_MODULES

        module = importlib.import_module(KERNEL_MODULES[name])
        return module.work_size(name, a.shape[-1], 0 if b is None else b.shape[-1])

    return size


def _stacked_batch(node, batched, *args, **attrs):
    """Every operand batched (a copy where it was not), the batch axis folded
    into the stack axis: one call on (K * batch, ...), unfolded after."""
    k = next(x.shape[0] for x, b in zip(args, batched, strict=True) if b)
    wide = [x if b else np.broadcast_to(x, (k, *x.shape)) for x, b in zip(args, batched,
                                                                         strict=True)]
    flat = [np.reshape(x, (-1, *x.shape[2:])) for x in wide]
    return np.reshape(_bind(node.op, *flat, **attrs), (k, *node.shape))


def _check_dtype(a, name):
    """float64, or float32 for the primitives of :data:`.lapack.SINGLE_OPS`."""
    from .lapack_names import SINGLE_OPS

    if a.dtype != np.float64 and not (a.dtype == np.float32 and name in SINGLE_OPS):
        raise TypeError(f"{name}: the LAPACK primitive computes in float64"
                        f"{' or float32' if name in SINGLE_OPS else ''}; got {a.dtype}")


def _check_square(a, name):
    if len(a.shape) != 3 or a.shape[1] != a.shape[2]:
        raise ValueError(f"{name}: expected a stack of square matrices (batch, n, n), got "
                         f"{a.shape}")
    _check_dtype(a, name)


# ----------------------------------------------------------------------------
# solve and inv
# ----------------------------------------------------------------------------


def _solve_abstract(a, b):
    _check_square(a, "solve")
    if len(b.shape) != 3 or b.shape[:2] != a.shape[:2] or b.dtype != a.dtype:
        raise ValueError(f"solve: right-hand side {b.shape} {b.dtype} does not match "
                         f"{a.shape} {a.dtype}")
    return b.shape, a.dtype


def _run(name):
    """The reference ``run``: the LAPACK kernel ``name`` into ``out`` with the
    op's attributes as the kernel's trailing arguments."""
    def run(out, *args, work=None, **attrs):
        fn, la = _kernel(name)
        fn(*args, out, *(() if work is None else (work,)), la.kind_of(out.dtype),
           *la.kernel_args(name, attrs))

    return run


def _solve_vjp(g, node, active, a, b, ans):
    gb = _bind("solve", _mT(a), g)  # A^T gb = g
    return (-np.matmul(gb, _mT(ans)) if active[0] else None, gb if active[1] else None)


def _solve_jvp(ts, node, a, b, ans):
    ta, tb = ts
    rhs = tb if ta is None else -np.matmul(ta, ans) if tb is None else tb - np.matmul(ta, ans)
    return _bind("solve", a, rhs)


def _solve_batch(node, batched, a, b):
    if batched[0]:
        return _stacked_batch(node, batched, a, b)
    # one matrix, a batch of right-hand sides: side by side, one solve
    k, (nb, n, m) = b.shape[0], node.shape
    cols = np.reshape(np.transpose(b, (1, 2, 0, 3)), (nb, n, k * m))
    return np.transpose(np.reshape(_bind("solve", a, cols), (nb, n, k, m)), (2, 0, 1, 3))


register(Op("solve", "compute", _solve_abstract, run=_run("solve"), vjp=_solve_vjp,
            jvp=_solve_jvp, batch=_solve_batch,
            workspace=_work("solve"), raises=True, doc="x with a @ x = b (LAPACK gesv)"))


def _inv_abstract(a, name="inv"):
    _check_square(a, name)
    return a.shape, a.dtype


def _inv_vjp(g, node, active, a, ans):
    t = _mT(ans)
    return (-np.matmul(np.matmul(t, g), t),)


register(Op("inv", "compute", _inv_abstract, run=_run("inv"), vjp=_inv_vjp,
            jvp=lambda ts, node, a, ans: -np.matmul(np.matmul(ans, ts[0]), ans),
            batch=_stacked_batch,
            workspace=_work("inv"), raises=True, doc="matrix inverse (LAPACK gesv against I)"))

# ----------------------------------------------------------------------------
# determinants
# ----------------------------------------------------------------------------


def _det_vjp(g, node, active, a, ans):
    # d det / dA = det * A^{-T}; a singular A raises LinAlgError in inv.
    return ((g * ans)[:, None, None] * _inv_T(a),)


def _logdet_tangent(ta, a):
    """d log|det A| = trace(A^{-1} dA), one per matrix of the stack."""
    return np.sum(_inv_T(a) * ta, axis=(1, 2))


register(Op("det", "compute", lambda a: (_inv_abstract(a, "det")[0][:1], a.dtype), run=_run("det"),
            vjp=_det_vjp, jvp=lambda ts, node, a, ans: ans * _logdet_tangent(ts[0], a),
            batch=_stacked_batch, workspace=_work("det"),
            doc="determinant, sign * exp(log|det|) as numpy (LAPACK getrf)"))


def _slogdet_vjp(g, node, active, a, ans):
    return (g[:, 1][:, None, None] * _inv_T(a),)  # the sign is piecewise constant


register(Op("slogdet", "compute", lambda a: ((_inv_abstract(a, "slogdet")[0][0], 2), a.dtype),
            run=_run("slogdet"), vjp=_slogdet_vjp, workspace=_work("slogdet"),
            jvp=lambda ts, node, a, ans: np.concatenate(
                [np.zeros((a.shape[0], 1), a.dtype), _logdet_tangent(ts[0], a)[:, None]],
                axis=1),
            batch=_stacked_batch,
            doc="(sign, log|det|) packed as (batch, 2) (LAPACK getrf)"))

# ----------------------------------------------------------------------------
# symmetric matrices from one triangle: cholesky, eigh, eigvalsh
# ----------------------------------------------------------------------------


def _triangle_weights(n, lower, dtype):
    """(n, n) of ``dtype``: 1 on the strict ``lower`` (else upper) triangle, 1/2
    on the diagonal, 0 elsewhere."""
    ones = np.ones((n, n), dtype)
    tri = np.tril(ones, -1) if lower else np.triu(ones, 1)
    return tri + np.asarray(0.5, dtype) * np.eye(n, dtype=dtype)


def _from_triangle(t, lower):
    """The symmetric matrix the ``lower`` (else upper) triangle of ``t`` stands
    for (what LAPACK reads): ``S(t)``, linear in ``t``."""
    h = t * _triangle_weights(t.shape[-1], lower, t.dtype)
    return h + _mT(h)


def _to_triangle(g, lower):
    """The adjoint of :func:`_from_triangle`: the gradient w.r.t. the matrix
    from ``g``, a gradient w.r.t. ``S`` (only its symmetric part counts).  The
    unread triangle gets 0; an entry below (above) the diagonal gets
    ``g_ij + g_ji``, as it moves both ``S_ij`` and ``S_ji``; the diagonal ``g_ii``."""
    return (g + _mT(g)) * _triangle_weights(g.shape[-1], lower, g.dtype)


def _cholesky_abstract(a, upper=False):
    return _inv_abstract(a, "cholesky")


def _phi(x):
    """The lower triangle of ``x``, its diagonal halved."""
    n = x.shape[-1]
    return np.tril(x) * (1 - 0.5 * np.eye(n, dtype=x.dtype))


def _lower_solve(lo, b, trans):
    """``L^-1 b`` (``trans=0``) or ``L^-T b`` (``trans=1``) by a triangular solve."""
    return _bind("solve_triangular", lo, b, lower=True, trans=trans, unit=False)


def _cholesky_vjp(g, node, active, a, ans, upper=False):
    # L = chol(S), dL = L phi(L^-1 dS L^-T): dS's gradient L^-T phi(L^T gL) L^-1,
    # computed by the blocked reverse sweep of ``cholesky_adjoint`` (an upper
    # factor is the transpose of the lower one of the same matrix)
    if upper:
        return (_mT(_bind("cholesky_adjoint", _mT(ans), _mT(g))),)
    return (_bind("cholesky_adjoint", ans, g),)


def _cholesky_jvp(ts, node, a, ans, upper=False):
    # L^-1 dS L^-T = (L^-1 (L^-1 dS)^T)^T: two triangular solves
    lo = _mT(ans) if upper else ans
    x = _lower_solve(lo, _from_triangle(ts[0], not upper), 0)
    inner = _mT(_lower_solve(lo, _mT(x), 0))
    dl = np.matmul(lo, _phi(inner))
    return _mT(dl) if upper else dl


register(Op("cholesky", "compute", _cholesky_abstract, run=_run("cholesky"),
            vjp=_cholesky_vjp, jvp=_cholesky_jvp, batch=_stacked_batch,
            raises=True,
            doc="Cholesky factor of the symmetric matrix one triangle stands for: lower "
                "from the lower triangle, or (upper=True) upper from the upper one "
                "(LAPACK potrf)"))


def _chol_adjoint_abstract(lo, g):
    _check_square(lo, "cholesky_adjoint")
    if g.shape != lo.shape or g.dtype != lo.dtype:
        raise ValueError(f"cholesky_adjoint: gradient {g.shape} {g.dtype} for a factor "
                         f"{lo.shape} {lo.dtype}")
    return lo.shape, lo.dtype


def _chol_adjoint_jvp(ts, node, lo, g, ans):
    # the result is the lower triangle of Y = S + S^T (diagonal S_ii), S = L^-T P
    # L^-1, P = phi(L^T G); with M = L^-T dL^T: dS = -M S - S M^T + L^-T phi(L^T
    # (dG + M G)) L^-1, whose symmetric part depends on S only through Y = ans + ans^T
    tl, tg = ts
    out, rhs = None, tg
    if tl is not None:
        m = _lower_solve(lo, _mT(tl), 1)
        out = _to_triangle(-np.matmul(m, (ans + _mT(ans))), True)
        mg = np.matmul(m, g)
        rhs = mg if rhs is None else rhs + mg
    if rhs is not None:
        term = _bind("cholesky_adjoint", lo, rhs)
        out = term if out is None else out + term
    return out


def _chol_adjoint_vjp(h, node, active, lo, g, ans):
    # <H, T(S)> = <Z, S>, Z = H's symmetric matrix (T's adjoint); then G's
    # gradient L phi(L^-1 Z L^-T) (cholesky's tangent map) and L's
    # tril(-Y Z L^-T + G phi(L^-1 Z L^-T)^T)
    z = _from_triangle(h, True)
    x = _lower_solve(lo, z, 0)
    inner = _phi(_mT(_lower_solve(lo, _mT(x), 0)))
    gl = None
    if active[0]:
        gl = np.tril(np.matmul(g, _mT(inner))
                     - np.matmul((ans + _mT(ans)), _mT(x)))
    return gl, np.matmul(lo, inner) if active[1] else None


register(Op("cholesky_adjoint", "compute", _chol_adjoint_abstract,
            run=_run("cholesky_adjoint"), vjp=_chol_adjoint_vjp, jvp=_chol_adjoint_jvp,
            batch=_stacked_batch, workspace=_work("cholesky_adjoint"),
            doc="cholesky's reverse rule: the gradient w.r.t. the lower triangle a lower "
                "Cholesky factor lo was computed from, given g, the gradient w.r.t. lo "
                "(its upper triangle ignored): tril of L^-T phi(L^T tril(g)) L^-1 plus its "
                "transpose, diagonal once (Murray's blocked sweep on BLAS)"))


def _eigh_abstract(a, uplo="L"):
    _check_square(a, "eigh")
    if uplo not in ("L", "U"):
        raise ValueError(f"uplo must be 'L' or 'U'; got {uplo!r}")
    return (a.shape[0], a.shape[1] + 1, a.shape[1]), a.dtype


def _gaps(w):
    """F_ij = 1 / (w_j - w_i) off the diagonal, 0 on it (infinite for repeated
    eigenvalues: eigenvectors are not differentiable there)."""
    eye = np.eye(w.shape[-1], dtype=w.dtype)
    return (1 - eye) / (w[:, None, :] - w[:, :, None] + eye)


def _gapped(f, p):
    """``f * p`` (``f``: :func:`_gaps`), 0 where ``p`` is 0: the eigenvectors'
    (or singular vectors') cotangent projected, which is 0 where the function
    does not read them -- a loss of the eigenvalues alone at a repeated one
    (an identity matrix) made inf * 0 = NaN of every entry; where the vectors
    are read there, the derivative does not exist and stays infinite."""
    return np.where(p == 0, 0.0, f * p)


def _eigh_vjp(g, node, active, a, ans, uplo="L"):
    w, v = ans[:, 0, :], ans[:, 1:, :]
    gw, gv = g[:, 0, :], g[:, 1:, :]
    eye = np.eye(a.shape[-1], dtype=a.dtype)
    inner = gw[:, None, :] * eye + _gapped(_gaps(w), np.matmul(_mT(v), gv))
    return (_to_triangle(np.matmul(np.matmul(v, inner), _mT(v)), uplo == "L"),)


def _eigh_jvp(ts, node, a, ans, uplo="L"):
    # dw = diag(V^T dS V), dV = V (F o V^T dS V)
    w, v = ans[:, 0, :], ans[:, 1:, :]
    eye = np.eye(a.shape[-1], dtype=a.dtype)
    inner = np.matmul(np.matmul(_mT(v), _from_triangle(ts[0], uplo == "L")), v)
    dw = np.sum(inner * eye, axis=1)
    dv = np.matmul(v, _gaps(w) * inner)
    return np.concatenate([dw[:, None, :], dv], axis=1)


register(Op("eigh", "compute", _eigh_abstract, run=_run("eigh"), vjp=_eigh_vjp,
            jvp=_eigh_jvp, batch=_stacked_batch, workspace=_work("eigh"),
            raises=True,
            doc="eigenvalues (row 0) and eigenvectors (rows 1..n) of the symmetric matrix "
                "the triangle uplo stands for (LAPACK syevd, jobz='V')"))


def _eigvalsh_abstract(a, uplo="L"):
    shape, dtype = _eigh_abstract(a, uplo)
    return (shape[0], shape[2]), dtype


def _eigenvectors(a, uplo):
    """The eigenvectors (columns) of eigh on the same matrix and triangle."""
    return _bind("eigh", a, uplo=uplo)[:, 1:, :]


def _eigvalsh_vjp(g, node, active, a, ans, uplo="L"):
    # dw_j = v_j^T dS v_j: dS's gradient V diag(g) V^T (no eigenvalue gaps: smooth
    # at repeated eigenvalues too)
    v = _eigenvectors(a, uplo)
    return (_to_triangle(np.matmul(v * g[:, None, :], _mT(v)), uplo == "L"),)


def _eigvalsh_jvp(ts, node, a, ans, uplo="L"):
    v = _eigenvectors(a, uplo)
    return np.sum(v * np.matmul(_from_triangle(ts[0], uplo == "L"), v), axis=1)


register(Op("eigvalsh", "compute", _eigvalsh_abstract, run=_run("eigvalsh"),
            vjp=_eigvalsh_vjp, jvp=_eigvalsh_jvp, batch=_stacked_batch,
            workspace=_work("eigvalsh"),
            raises=True,
            doc="eigenvalues of the symmetric matrix the triangle uplo stands for (LAPACK "
                "syevd, jobz='N': numpy's values, to rounding not eigh's)"))
