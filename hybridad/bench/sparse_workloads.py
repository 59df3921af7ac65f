"""The suite's sparse workloads: a sparse Jacobian and a sparse Hessian of
discretized PDEs, with their hand-written (scipy.sparse) derivatives.

* ``sparse_jac`` -- the 2-D Brusselator reaction-diffusion right-hand side,
  two species on an N x N periodic grid (5-point Laplacian by ``np.roll``):
  ``2 N^2`` unknowns, 6 nonzeros per Jacobian row.
* ``sparse_hess`` -- the 2-D Bratu energy ``1/2 |grad u|^2 - lambda h^2 sum
  exp(u)`` (zero Dirichlet boundary, differences by ``np.diff``): ``N^2``
  unknowns, a 5-point Hessian.

The rows (:func:`hybridad.bench.suite.measure_sparse`): hybridad's sparse
derivative (``ha.jacobian`` / ``ha.hessian`` into a
``SparseJacobianResult`` / ``SparseHessianResult``: pattern detection,
coloring and plan built once), the hand-written one (``hand numpy``: the
derivative assembled with ``scipy.sparse`` each call, the reference) and
scipy's colored finite differences (``approx_derivative(...,
sparsity=(pattern, groups))``; for the Hessian, of the hand-written
gradient), each timed against one call of the function.  Imports numpy and
scipy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

BRUSS_A, BRUSS_B, BRUSS_ALPHA = 1.0, 3.4, 0.002
BRATU_LAMBDA = 6.0


def laplacian(a):
    """The 5-point periodic Laplacian of a 2-D grid."""
    return np.roll(a, 1, 0) + np.roll(a, -1, 0) + np.roll(a, 1, 1) + np.roll(a, -1, 1) - 4 * a


def brusselator(y, n, a=BRUSS_A, b=BRUSS_B, alpha=BRUSS_ALPHA):
    """The Brusselator's right-hand side: ``y = [u, v]`` flattened, ``2 n^2`` long."""
    u = y[:n * n].reshape(n, n)
    v = y[n * n:].reshape(n, n)
    uuv = u * u * v
    du = b + uuv - (a + 1) * u + alpha * n * n * laplacian(u)
    dv = a * u - uuv + alpha * n * n * laplacian(v)
    return np.concatenate([du.ravel(), dv.ravel()])


def _ring(n, diagonal):
    ring = sp.diags_array([np.ones(n - 1), np.full(n, diagonal), np.ones(n - 1)],
                          offsets=[-1, 0, 1], format="lil")
    ring[0, n - 1] += 1.0
    ring[n - 1, 0] += 1.0
    return sp.csr_array(ring)


def make_brusselator_jacobian(n, a=BRUSS_A, alpha=BRUSS_ALPHA):
    """The hand-written Jacobian, ``(y, n) -> csr_array``: the (constant)
    diffusion part made once, the reaction part assembled each call."""
    eye = sp.eye_array(n)
    diffusion = alpha * n * n * sp.csr_array(sp.kron(_ring(n, -2.0), eye) +
                                             sp.kron(eye, _ring(n, -2.0)))

    def jacobian(y, n):
        u, v = y[:n * n], y[n * n:]
        uv, uu = u * v, u * u
        return sp.csr_array(sp.block_array(
            [[diffusion + sp.diags_array(2 * uv - (a + 1)), sp.diags_array(uu)],
             [sp.diags_array(a - 2 * uv), diffusion - sp.diags_array(uu)]]))

    return jacobian


def bratu(u, n, lam=BRATU_LAMBDA):
    """The Bratu energy of ``u`` (``n^2`` values of the grid's interior)."""
    h = 1.0 / (n + 1)
    grid = u.reshape(n, n)
    dx, dy = np.diff(grid, axis=0), np.diff(grid, axis=1)
    edge = np.sum(grid[0] ** 2) + np.sum(grid[-1] ** 2) + np.sum(grid[:, 0] ** 2) + \
        np.sum(grid[:, -1] ** 2)
    return 0.5 * (np.sum(dx * dx) + np.sum(dy * dy) + edge) - lam * h * h * np.sum(np.exp(u))


def minimal_surface(u, boundary):
    """The area of the surface over the unit square with heights ``u`` inside
    (``n^2`` values) and ``boundary`` on the edges (an ``(n+2, n+2)`` grid)."""
    n = boundary.shape[0] - 2
    h = 1.0 / (n + 1)
    mid = np.concatenate([boundary[1:-1, :1], u.reshape(n, n), boundary[1:-1, -1:]], axis=1)
    full = np.concatenate([boundary[:1], mid, boundary[-1:]], axis=0)
    dx = (full[1:, :-1] - full[:-1, :-1]) / h
    dy = (full[:-1, 1:] - full[:-1, :-1]) / h
    return h * h * np.sum(np.sqrt(1.0 + dx * dx + dy * dy))


def _dirichlet_laplacian(n):
    """``-Laplacian`` (4 on the diagonal, -1 off it) of the n x n grid, zero boundary."""
    path = sp.diags_array([-np.ones(n - 1), np.full(n, 2.0), -np.ones(n - 1)],
                          offsets=[-1, 0, 1])
    eye = sp.eye_array(n)
    return sp.csr_array(sp.kron(path, eye) + sp.kron(eye, path))


def make_bratu_derivatives(n, lam=BRATU_LAMBDA):
    """The hand-written gradient and Hessian of :func:`bratu`, ``(u, n) ->``
    array / csr_array."""
    stiffness = _dirichlet_laplacian(n)
    scale = lam / (n + 1) ** 2

    def gradient(u, n):
        return stiffness @ u - scale * np.exp(u)

    def hessian(u, n):
        return sp.csr_array(stiffness - sp.diags_array(scale * np.exp(u)))

    return gradient, hessian


@dataclasses.dataclass(frozen=True)
class SparseProblem:
    """One sparse workload at one size: ``f(x, n)``, the hand-written sparse
    derivative, and what scipy's finite differences difference."""

    name: str
    kind: str  # "jacobian" or "hessian"
    n: int  # unknowns
    f: Callable
    args: tuple  # (x, n)
    derivative: Callable  # (*args) -> csr_array: the hand-written derivative, the reference
    fd_function: Callable  # x -> array: f (Jacobians) or the hand-written gradient (Hessians)
    workload: str = ""
    size: int = 0


def brusselator_problem(n, rng):
    """The Brusselator on an ``n x n`` grid at ``y ~ U(0.5, 3.5)``."""
    y = rng.uniform(0.5, 3.5, 2 * n * n)
    return SparseProblem(f"brusselator {n}x{n}", "jacobian", y.size, brusselator, (y, n),
                         make_brusselator_jacobian(n), lambda x: brusselator(x, n),
                         workload="sparse_jac", size=n)


def bratu_problem(n, rng):
    """The Bratu energy on an ``n x n`` grid at ``u ~ U(-0.5, 0.5)``."""
    u = rng.uniform(-0.5, 0.5, n * n)
    gradient, hessian = make_bratu_derivatives(n)
    return SparseProblem(f"bratu {n}x{n}", "hessian", u.size, bratu, (u, n), hessian,
                         lambda x: gradient(x, n), workload="sparse_hess", size=n)
