"""Linear-algebra primitives: solve, inv, det, slogdet, cholesky, eigh.

Operands are stacks of square matrices, exactly 3-D ``(batch, n, n)`` (the
numpy surface reshapes ``(..., n, n)`` operands and broadcasts batches).
The reference ``run`` of each is a LAPACK kernel of
:mod:`hybridad.backends.lapack` writing into the preallocated result with a
preallocated ``work`` slot; the numba backend calls the same kernels.

Results with two parts are packed into one array: ``slogdet`` gives
``(batch, 2)`` = (sign, log|det|), ``eigh`` gives ``(batch, n + 1, n)`` =
eigenvalues in row 0, eigenvectors (columns) below.

Adjoints are the standard ones (Giles 2008; Murray 2016 for Cholesky).
``cholesky`` and ``eigh`` read the lower triangle, as numpy does; their
gradient is the symmetric one (as autograd, JAX and PyTorch give): exact for
perturbations that keep the matrix symmetric, which is the only kind that
keeps a Cholesky or symmetric eigen-problem well posed.
"""

from __future__ import annotations

import numpy as np

from . import Op, register


def _kernel(name):
    from ..backends import lapack

    return getattr(lapack, name), lapack


def _mT(x):
    return np.swapaxes(x, -1, -2)


def _bind(name, *args):
    from ..trace import bind

    return bind(name, *args)


def _inv_T(a):
    return _mT(_bind("inv", a))


def _work(name):
    def size(a, b=None):
        from ..backends.lapack import work_size

        return work_size(name, a.shape[-1], 0 if b is None else b.shape[-1])

    return size


def _stacked_batch(node, batched, *args):
    """Every operand batched (a copy where it was not), the batch axis folded
    into the stack axis: one call on (K * batch, ...), unfolded after."""
    k = next(x.shape[0] for x, b in zip(args, batched, strict=True) if b)
    flat = [np.reshape(x if b else np.broadcast_to(x, (k, *x.shape)), (-1, *x.shape[2:]))
            for x, b in zip(args, batched, strict=True)]
    return np.reshape(_bind(node.op, *flat), (k, *node.shape))


def _sym(t):
    return (t + _mT(t)) * 0.5


def _check_square(a):
    if len(a.shape) != 3 or a.shape[1] != a.shape[2]:
        raise ValueError(f"expected a stack of square matrices (batch, n, n), got {a.shape}")
    if a.dtype not in (np.float32, np.float64):
        raise TypeError(f"linear algebra on {a.dtype} is not supported (float32, float64)")


# ----------------------------------------------------------------------------
# solve and inv
# ----------------------------------------------------------------------------


def _solve_abstract(a, b):
    _check_square(a)
    if len(b.shape) != 3 or b.shape[:2] != a.shape[:2] or b.dtype != a.dtype:
        raise ValueError(f"solve: right-hand side {b.shape} {b.dtype} does not match "
                         f"{a.shape} {a.dtype}")
    return b.shape, a.dtype


def _solve_run(out, a, b, work):
    fn, la = _kernel("solve")
    fn(a, b, out, work, la.kind_of(out.dtype))


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


register(Op("solve", "compute", _solve_abstract, run=_solve_run, vjp=_solve_vjp,
            jvp=_solve_jvp, batch=_solve_batch,
            workspace=_work("solve"), doc="x with a @ x = b (LAPACK gesv)"))


def _inv_abstract(a):
    _check_square(a)
    return a.shape, a.dtype


def _inv_run(out, a, work):
    fn, la = _kernel("inv")
    fn(a, out, work, la.kind_of(out.dtype))


def _inv_vjp(g, node, active, a, ans):
    t = _mT(ans)
    return (-np.matmul(np.matmul(t, g), t),)


register(Op("inv", "compute", _inv_abstract, run=_inv_run, vjp=_inv_vjp,
            jvp=lambda ts, node, a, ans: -np.matmul(np.matmul(ans, ts[0]), ans),
            batch=_stacked_batch,
            workspace=_work("inv"), doc="matrix inverse (LAPACK gesv against I)"))

# ----------------------------------------------------------------------------
# determinants
# ----------------------------------------------------------------------------


def _det_run(out, a, work):
    fn, la = _kernel("det")
    fn(a, out, work, la.kind_of(out.dtype))


def _det_vjp(g, node, active, a, ans):
    # d det / dA = det * A^{-T}; a singular A raises LinAlgError in inv.
    return ((g * ans)[:, None, None] * _inv_T(a),)


def _logdet_tangent(ta, a):
    """d log|det A| = trace(A^{-1} dA), one per matrix of the stack."""
    return np.sum(_inv_T(a) * ta, axis=(1, 2))


register(Op("det", "compute", lambda a: (_inv_abstract(a)[0][:1], a.dtype), run=_det_run,
            vjp=_det_vjp, jvp=lambda ts, node, a, ans: ans * _logdet_tangent(ts[0], a),
            batch=_stacked_batch, workspace=_work("det"), doc="determinant (LAPACK getrf)"))


def _slogdet_run(out, a, work):
    fn, la = _kernel("slogdet")
    fn(a, out, work, la.kind_of(out.dtype))


def _slogdet_vjp(g, node, active, a, ans):
    return (g[:, 1][:, None, None] * _inv_T(a),)  # the sign is piecewise constant


register(Op("slogdet", "compute", lambda a: ((_inv_abstract(a)[0][0], 2), a.dtype),
            run=_slogdet_run, vjp=_slogdet_vjp, workspace=_work("slogdet"),
            jvp=lambda ts, node, a, ans: np.concatenate(
                [np.zeros((a.shape[0], 1), a.dtype), _logdet_tangent(ts[0], a)[:, None]],
                axis=1),
            batch=_stacked_batch,
            doc="(sign, log|det|) packed as (batch, 2) (LAPACK getrf)"))

# ----------------------------------------------------------------------------
# symmetric matrices: cholesky, eigh
# ----------------------------------------------------------------------------


def _cholesky_run(out, a):
    fn, la = _kernel("cholesky")
    fn(a, out, la.kind_of(out.dtype))


def _cholesky_vjp(g, node, active, a, ans):
    n = a.shape[-1]
    phi = np.tril(np.matmul(_mT(ans), g)) * (1 - 0.5 * np.eye(n, dtype=a.dtype))
    linv = _bind("inv", ans)
    s = np.matmul(np.matmul(_mT(linv), phi), linv)  # L^-T phi(L^T g) L^-1
    return ((s + _mT(s)) * 0.5,)


def _cholesky_jvp(ts, node, a, ans):
    # dL = L phi(L^-1 dA L^-T), phi: the lower triangle, diagonal halved; dA
    # symmetrized as the vjp's gradient is
    n = a.shape[-1]
    linv = _bind("inv", ans)
    inner = np.matmul(np.matmul(linv, _sym(ts[0])), _mT(linv))
    return np.matmul(ans, np.tril(inner) * (1 - 0.5 * np.eye(n, dtype=a.dtype)))


register(Op("cholesky", "compute", _inv_abstract, run=_cholesky_run, vjp=_cholesky_vjp,
            jvp=_cholesky_jvp, batch=_stacked_batch,
            doc="lower Cholesky factor from the lower triangle (LAPACK potrf)"))


def _eigh_abstract(a):
    _check_square(a)
    return (a.shape[0], a.shape[1] + 1, a.shape[1]), a.dtype


def _eigh_run(out, a, work):
    fn, la = _kernel("eigh")
    fn(a, out, work, la.kind_of(out.dtype))


def _eigh_vjp(g, node, active, a, ans):
    n = a.shape[-1]
    w, v = ans[:, 0, :], ans[:, 1:, :]
    gw, gv = g[:, 0, :], g[:, 1:, :]
    eye = np.eye(n, dtype=a.dtype)
    # F_ij = 1 / (w_j - w_i) off the diagonal (infinite for repeated eigenvalues)
    f = (1 - eye) / (w[:, None, :] - w[:, :, None] + eye)
    inner = gw[:, None, :] * eye + f * np.matmul(_mT(v), gv)
    ga = np.matmul(np.matmul(v, inner), _mT(v))
    return ((ga + _mT(ga)) * 0.5,)


def _eigh_jvp(ts, node, a, ans):
    # dw = diag(V^T dA V), dV = V (F o V^T dA V), F_ij = 1 / (w_j - w_i) off the diagonal
    n = a.shape[-1]
    w, v = ans[:, 0, :], ans[:, 1:, :]
    eye = np.eye(n, dtype=a.dtype)
    inner = np.matmul(np.matmul(_mT(v), _sym(ts[0])), v)
    f = (1 - eye) / (w[:, None, :] - w[:, :, None] + eye)
    dw = np.sum(inner * eye, axis=1)
    dv = np.matmul(v, f * inner)
    return np.concatenate([dw[:, None, :], dv], axis=1)


register(Op("eigh", "compute", _eigh_abstract, run=_eigh_run, vjp=_eigh_vjp,
            jvp=_eigh_jvp, batch=_stacked_batch,
            workspace=_work("eigh"),
            doc="eigenvalues (row 0) and eigenvectors (rows 1..n) of a symmetric matrix "
                "from its lower triangle (LAPACK syevd)"))
