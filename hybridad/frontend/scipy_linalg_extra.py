"""More of scipy.linalg on tracers, each a composition of traced functions:

* matrix constructors -- ``companion``, ``hankel``, ``convolution_matrix``
  (its three modes: scipy's own matrix of positions, one gather),
  ``khatri_rao``;
* ``expm_frechet(A, E)``: ``expm`` of ``[[A, c E], [0, A]]``, its upper right
  block over ``c`` (a power of two bringing ``||E||`` near ``||A||``), the
  Frechet derivative as hybridad's ``expm`` rule computes it;
* ``solve_sylvester``, ``solve_continuous_lyapunov``, ``solve_discrete_lyapunov``:
  the Kronecker form of the equation (``(A (x) I + I (x) B^T) vec X = vec Q``,
  row-major) by ``solve`` -- scipy's solution to rounding, O((mn)^3): systems
  of more than :data:`KRONECKER_MAX` unknowns are refused by name;
* ``solve_continuous_are``: from the sign of its Hamiltonian matrix;
  ``solve_discrete_are``: the structure-preserving doubling iteration; each
  then one Newton step;
* ``polar`` (square, nonsingular) and ``signm``: the scaled Newton iterations
  ``U <- (mu U + (mu U)^-T) / 2`` and ``X <- (mu X + (mu X)^-1) / 2``, run until
  converged (steps decided on values and guarded, as
  :mod:`.scipy_linalg_matfuncs`), so their derivatives are the converged
  iterations';
* ``eig`` and ``eigvals`` of real spectra: numpy's (LAPACK's geev, as
  scipy's), the eigenvalues as complex values, as scipy returns them.

Registered in :data:`.scipy_special.INTERCEPTED` under ``"scipy.linalg"``.
"""

from __future__ import annotations

import numpy as np

from ..ops.host import resolve
from .numpy_api import _tracer, concatenate, reshape
from .numpy_complex import ComplexTracer
from .numpy_linalg import _operands, _result
from .scipy_linalg import expm
from .scipy_linalg_matfuncs import TOL, converged
from .scipy_special import intercepts

__all__ = []

_M = "scipy.linalg"

#: the most unknowns a Sylvester or Lyapunov equation is solved for (its
#: Kronecker system: 8 MB and 4e8 flops at this size)
KRONECKER_MAX = 1024


def _refuse(name, why):
    raise NotImplementedError(f"hybridad: scipy.linalg.{name} {why}")


# --------------------------------------------------------------------------
# constructors
# --------------------------------------------------------------------------
@intercepts(_M, "companion")
def companion(a):
    """The companion matrix of the coefficients ``a[..., :]`` (batches as scipy)."""
    a = _tracer(a)
    if a.ndim < 1 or a.shape[-1] < 2:
        raise ValueError("The length of `a` along the last axis must be at least 2.")
    n = a.shape[-1]
    first = -a[..., 1:] / a[..., :1]
    below = np.broadcast_to(np.eye(n - 2, n - 1, dtype=first.dtype), a.shape[:-1] + (n - 2, n - 1))
    return concatenate([reshape(first, a.shape[:-1] + (1, n - 1)), below], axis=-2)


def _gathered(values, positions):
    """``values[positions - 1]`` where ``positions > 0``, else 0 (1-based
    positions of a constant matrix made by scipy itself)."""
    padded = concatenate([np.zeros(values.shape[:-1] + (1,), values.dtype), values], axis=-1)
    return padded[..., positions]


@intercepts(_M, "hankel")
def hankel(c, r=None):
    """``H[i, j] = c[i + j]``, then ``r[i + j - len(c) + 1]``: one gather."""
    c = _tracer(c).ravel()
    r = np.zeros_like(c) if r is None else _tracer(r).ravel()
    values = concatenate([c, r[1:]])
    index = np.arange(c.shape[0])[:, None] + np.arange(r.shape[0])[None, :]
    return values[index]


@intercepts(_M, "convolution_matrix")
def convolution_matrix(a, n, mode="full"):
    """The matrix of ``np.convolve(a, v, mode)`` for ``v`` of length ``n``:
    scipy's own matrix of the positions ``1..len(a)``, gathered from ``a``."""
    a = _tracer(a)
    if a.ndim != 1:
        raise ValueError("convolution_matrix expects a one-dimensional array as input")
    positions = np.asarray(resolve("scipy.linalg.convolution_matrix")(
        np.arange(1, a.shape[0] + 1), n, mode)).astype(np.intp)
    return _gathered(a, positions)


@intercepts(_M, "khatri_rao")
def khatri_rao(a, b):
    """The column-wise Kronecker product of ``a (n, k)`` and ``b (m, k)``."""
    a, b = _tracer(a), _tracer(b)
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError("The both arrays should be 2-dimensional.")
    if a.shape[1] != b.shape[1]:
        raise ValueError("The number of columns for both arrays should be equal.")
    k = a.shape[1]
    return reshape(a[:, None, :] * b[None, :, :], (a.shape[0] * b.shape[0], k))


# --------------------------------------------------------------------------
# expm_frechet
# --------------------------------------------------------------------------
def _norm1(x):
    return np.max(np.sum(np.abs(x), axis=-2), axis=-1)


@intercepts(_M, "expm_frechet")
def expm_frechet(A, E, method=None, compute_expm=True, check_finite=True):  # noqa: N803
    """``(expm(A), L(A, E))`` (or ``L`` alone): the block matrix's exponential."""
    (a, e), dtype = _operands(A, E)
    if a.ndim != 2 or a.shape[0] != a.shape[1] or e.shape != a.shape:
        raise ValueError("expected A and E to be square matrices of the same shape")
    n = a.shape[0]
    c = np.exp2(np.round(np.log2((_norm1(a) + 1) / (_norm1(e) + 1))))
    zero = np.zeros((n, n))
    big = expm(concatenate([concatenate([a, e * c], axis=1), concatenate([zero, a], axis=1)]))
    frechet = _result(big[:n, n:] / c, dtype)
    return (_result(big[:n, :n], dtype), frechet) if compute_expm else frechet


# --------------------------------------------------------------------------
# Sylvester and Lyapunov equations
# --------------------------------------------------------------------------
def _kronecker_solve(name, m, n, matrix, q):
    if m * n > KRONECKER_MAX:
        _refuse(name, f"of a {m} x {n} unknown is not supported: hybridad solves the "
                f"equation's Kronecker form, {m * n} unknowns (at most {KRONECKER_MAX})")
    return reshape(np.linalg.solve(matrix, reshape(q, (m * n,))), (m, n))


@intercepts(_M, "solve_sylvester")
def solve_sylvester(a, b, q):
    """``A X + X B = Q``."""
    (a, b, q), _ = _operands(a, b, q)
    m, n = a.shape[0], b.shape[0]
    if a.shape != (m, m) or b.shape != (n, n) or q.shape != (m, n):
        raise ValueError(f"solve_sylvester: A {a.shape}, B {b.shape} and Q {q.shape} do not "
                         "match (A m x m, B n x n, Q m x n)")
    matrix = np.kron(a, np.eye(n)) + np.kron(np.eye(m), b.T)
    return _kronecker_solve("solve_sylvester", m, n, matrix, q)


@intercepts(_M, "solve_continuous_lyapunov")
def solve_continuous_lyapunov(a, q):
    """``A X + X A^T = Q``."""
    (a, q), _ = _operands(a, q)
    return solve_sylvester(a, a.T, q)


@intercepts(_M, "solve_discrete_lyapunov")
def solve_discrete_lyapunov(a, q, method=None):
    """``A X A^T - X + Q = 0`` (either ``method``: the same solution)."""
    if method not in (None, "direct", "bilinear"):
        raise ValueError(f"Unknown solver {method}")
    (a, q), _ = _operands(a, q)
    n = a.shape[0]
    if a.shape != (n, n) or q.shape != (n, n):
        raise ValueError(f"solve_discrete_lyapunov: A {a.shape} and Q {q.shape} must be "
                         "square and of one size")
    return _kronecker_solve("solve_discrete_lyapunov", n, n, np.eye(n * n) - np.kron(a, a), q)


# --------------------------------------------------------------------------
# polar and signm: scaled Newton iterations
# --------------------------------------------------------------------------
def _still(old, new):
    """The iterate changed by at most :data:`.scipy_linalg_matfuncs.TOL` of its size."""
    return bool(np.max(np.abs(new - old)) <= TOL * np.max(np.abs(new)))


def _newton(name, x, step):
    """Iterate ``x <- step(x)`` until it stops changing (then once more); a
    singular iterate ends it with the refusal."""
    out = converged(x, lambda x: step(x) if bool(np.abs(np.linalg.det(x)) > 0) else None, _still)
    if out is None:
        _refuse(name, "did not converge: the matrix is singular (polar) or has an eigenvalue on "
                "the imaginary axis (signm), where hybridad's iteration has no limit")
    return out


@intercepts(_M, "polar")
def polar(a, side="right"):
    """``a = u p`` (``side='right'``) or ``p u`` (``'left'``), ``u`` orthogonal
    and ``p`` symmetric positive semidefinite; square, nonsingular ``a``."""
    if side not in ("right", "left"):
        raise ValueError("`side` must be either 'right' or 'left'")
    (a,), dtype = _operands(a)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        _refuse("polar", f"of a non-square matrix {a.shape} is not supported")

    def step(u):
        inverse = np.linalg.inv(u)
        mu = np.sqrt(np.sqrt(np.sum(inverse * inverse)) / np.sqrt(np.sum(u * u)))
        return (mu * u + inverse.T / mu) / 2

    u = _newton("polar", a, step)
    p = u.T @ a if side == "right" else a @ u.T
    return _result(u, dtype), _result((p + p.T) / 2, dtype)


def _sign(name, a):
    """The sign of the float64 matrix ``a`` (determinant-scaled Newton)."""
    n = a.shape[0]

    def step(x):
        mu = np.abs(np.linalg.det(x)) ** (-1.0 / n)
        return (mu * x + np.linalg.inv(x) / mu) / 2

    return _newton(name, a, step)


@intercepts(_M, "signm")
def signm(A, disp=True):  # noqa: N803
    """The matrix sign function (no eigenvalue on the imaginary axis)."""
    (a,), _ = _operands(A)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError("expected a square matrix")
    return _sign("signm", a)


def _riccati_operands(name, a, b, q, r, e, s):
    """(A, B, Q, R) in float64 with the cross term ``s`` folded into A and Q
    (``A - B R^-1 S^T``, ``Q - S R^-1 S^T``); ``e`` refused."""
    if e is not None:
        _refuse(name, "with e (the generalized equation) is not supported")
    operands = (a, b, q, r) if s is None else (a, b, q, r, s)
    (a, b, q, r, *rest), _ = _operands(*operands)
    n = a.shape[0]
    if a.shape != (n, n) or b.ndim != 2 or b.shape[0] != n or q.shape != (n, n) or \
            r.shape != (b.shape[1], b.shape[1]):
        raise ValueError(f"{name}: A {a.shape}, B {b.shape}, Q {q.shape} and R {r.shape} do not "
                         "match")
    if rest:
        rs = np.linalg.solve(r, rest[0].T)
        a, q = a - b @ rs, q - rest[0] @ rs
    return a, b, q, r


@intercepts(_M, "solve_discrete_are")
def solve_discrete_are(a, b, q, r, e=None, s=None, balanced=True):
    """``A^T X A - X - (A^T X B + S) (R + B^T X B)^-1 (B^T X A + S^T) + Q = 0``:
    the structure-preserving doubling iteration (``A <- A W^-1 A``, ``G <- G + A
    W^-1 G A^T``, ``H <- H + A^T H W^-1 A``, ``W = I + G H``, until ``H`` is
    still; steps guarded), then one Newton (Hewer) step, a Stein equation up
    to :data:`KRONECKER_MAX` unknowns."""
    a, b, q, r = _riccati_operands("solve_discrete_are", a, b, q, r, e, s)
    n = a.shape[0]
    eye = np.eye(n)

    def step(state):
        ak, gk, hk = state
        w = eye + gk @ hk
        wa, wg = np.linalg.solve(w, ak), np.linalg.solve(w, gk)
        return ak @ wa, gk + ak @ wg @ ak.T, hk + ak.T @ hk @ wa

    out = converged((a, b @ np.linalg.solve(r, b.T), q), step,
                    lambda old, new: _still(old[2], new[2]))
    if out is None:
        _refuse("solve_discrete_are", "did not converge: the pair (A, B) is not stabilizable "
                "or the solution not unique")
    hk = out[2]
    x = (hk + hk.T) / 2
    if n * n <= KRONECKER_MAX:  # one Newton step: the residual to rounding
        gain = np.linalg.solve(r + b.T @ x @ b, b.T @ x @ a)
        closed = a - b @ gain
        x = solve_discrete_lyapunov(closed.T, q + gain.T @ r @ gain)
        x = (x + x.T) / 2
    return x


@intercepts(_M, "solve_continuous_are")
def solve_continuous_are(a, b, q, r, e=None, s=None, balanced=True):
    """``A^T X + X A - (X B + S) R^-1 (B^T X + S^T) + Q = 0``: the stabilizing
    solution from the sign of the Hamiltonian ``H`` (Roberts; Byers 1987):
    ``[W12; W22 + I] X = -[W11 + I; W21]``, ``W = sign(H)``, by least
    squares, symmetrized, then one Newton-Kleinman step (a Lyapunov equation,
    up to :data:`KRONECKER_MAX` unknowns) brings the residual to rounding.
    ``e`` (the generalized equation) is refused."""
    a, b, q, r = _riccati_operands("solve_continuous_are", a, b, q, r, e, s)
    n = a.shape[0]
    g = b @ np.linalg.solve(r, b.T)
    h = concatenate([concatenate([a, -g], axis=1), concatenate([-q, -a.T], axis=1)])
    w = _sign("solve_continuous_are", h)
    eye = np.eye(n)
    lhs = concatenate([w[:n, n:], w[n:, n:] + eye])
    rhs = -concatenate([w[:n, :n] + eye, w[n:, :n]])
    x = np.linalg.solve(lhs.T @ lhs, lhs.T @ rhs)
    x = (x + x.T) / 2
    if n * n <= KRONECKER_MAX:  # one Newton-Kleinman step: the residual to rounding
        closed = a - g @ x
        x = solve_continuous_lyapunov(closed.T, -(q + x @ g @ x))
        x = (x + x.T) / 2
    return x


# --------------------------------------------------------------------------
# eig and eigvals of real spectra
# --------------------------------------------------------------------------
def _general_only(name, b, homogeneous):
    if b is not None:
        _refuse(name, "of a generalized problem (b given) is not supported")
    if homogeneous:
        _refuse(name, "with homogeneous_eigvals=True is not supported")


@intercepts(_M, "eig")
def eig(a, b=None, left=False, right=True, overwrite_a=False, overwrite_b=False,
        check_finite=True, homogeneous_eigvals=False):
    """numpy's ``eig`` (geev, as scipy's) of a real spectrum: the eigenvalues
    complex, as scipy returns them, the right eigenvectors real."""
    _general_only("eig", b, homogeneous_eigvals)
    if left:
        _refuse("eig", "with left=True is not supported")
    w, v = np.linalg.eig(_tracer(a))
    w = ComplexTracer(w, np.zeros(w.shape, w.dtype))
    return (w, v) if right else w


@intercepts(_M, "eigvals")
def eigvals(a, b=None, overwrite_a=False, check_finite=True, homogeneous_eigvals=False):
    """numpy's ``eigvals`` of a real spectrum, complex as scipy's."""
    _general_only("eigvals", b, homogeneous_eigvals)
    w = np.linalg.eigvals(_tracer(a))
    return ComplexTracer(w, np.zeros(w.shape, w.dtype))

