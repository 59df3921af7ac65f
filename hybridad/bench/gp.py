"""The ``gp`` workload: the negative log marginal likelihood of a Gaussian
process with an RBF kernel, differentiated w.r.t. its three hyperparameters.

With ``theta = (log ell, log s2, log noise)``, data ``X`` (n x 3) and
targets ``y`` (n), constants::

    D     = max(|x_i|^2 + |x_j|^2 - 2 x_i . x_j, 0)     (squared distances)
    K     = s2 exp(-D / (2 ell^2)) + noise I
    L     = cholesky(K)                                  (lower)
    alpha = L^-T (L^-1 y)                                (two triangular solves)
    nll   = y . alpha / 2 + sum(log(diag(L))) + n/2 log(2 pi)

:func:`gp_nll` is the numpy + scipy code hybridad differentiates
(``scipy.linalg.cholesky`` and ``scipy.linalg.solve_triangular``, as a user
writes it, scikit-learn's GaussianProcessRegressor among them; scipy.linalg
computes float32 in single precision, where ``np.linalg.cholesky`` computes
every float type in double precision and rounds -- hybridad keeps both
rules); :func:`gp_port` gives the same function for jax
(``jnp.linalg.cholesky``, ``jax.scipy.linalg.solve_triangular``), torch
(``torch.linalg``) and autograd (``autograd.numpy.linalg.cholesky``,
``autograd.scipy.linalg.solve_triangular``).  :func:`gp_numpy` is the value
and gradient written by hand: ``d nll / d theta_j = tr((K^-1 - alpha
alpha^T) dK/dtheta_j) / 2`` with ``K^-1`` from ``scipy.linalg.cho_solve``.
No hand-written numba kernel (a Cholesky in numba loops is not what anyone
would write).  Everything stays in the dtype of the data (``eye`` with
``dtype=X.dtype``, Python-float constants), so float32 data give a float32
computation in every library.

scipy (and the peers) are imported inside the functions that use them.
"""

from __future__ import annotations

import importlib

import math

import numpy as np

GP_DIM = 3  # columns of X
GP_THETA = (0.6, 1.0, 0.05)  # lengthscale, signal variance, noise variance (theta = their logs)
LOG_2PI = math.log(2.0 * math.pi)


def _sqdist(X, clip):
    """Squared distances between the rows of ``X`` (Gram form), clipped at 0 by ``clip``."""
    sq = (X * X).sum(1)
    return clip(sq[:, None] + sq[None, :] - 2.0 * (X @ X.T))


def _nll(theta, X, y, xp, cholesky, solve_lower, solve_upper, eye, diag, clip):
    n = y.shape[0]
    ell2, s2, noise = xp.exp(2.0 * theta[0]), xp.exp(theta[1]), xp.exp(theta[2])
    K = s2 * xp.exp(-0.5 * _sqdist(X, clip) / ell2) + noise * eye(n, X.dtype)
    L = cholesky(K)
    alpha = solve_upper(L.T, solve_lower(L, y))
    return 0.5 * (y @ alpha) + xp.sum(xp.log(diag(L))) + 0.5 * n * LOG_2PI


def gp_nll(theta, X, y):
    """The GP's negative log marginal likelihood as numpy + scipy code (what hybridad traces)."""
    from scipy.linalg import cholesky, solve_triangular

    n = y.shape[0]
    ell2, s2, noise = np.exp(2.0 * theta[0]), np.exp(theta[1]), np.exp(theta[2])
    sq = np.sum(X * X, axis=1)
    D = np.maximum(sq[:, None] + sq[None, :] - 2.0 * (X @ X.T), 0.0)
    K = s2 * np.exp(-0.5 * D / ell2) + noise * np.eye(n, dtype=X.dtype)
    L = cholesky(K, lower=True)
    z = solve_triangular(L, y, lower=True)
    alpha = solve_triangular(L.T, z, lower=False)
    return 0.5 * (y @ alpha) + np.sum(np.log(np.diag(L))) + 0.5 * n * LOG_2PI


def gp_port(xp):
    """:func:`gp_nll` for the array module ``xp`` (numpy, jax.numpy, torch, autograd.numpy)."""
    name = xp.__name__
    if name == "numpy":
        return gp_nll
    if name in ("jax.numpy", "autograd.numpy"):  # numpy's spelling, their own scipy.linalg
        sl = importlib.import_module(name.split(".")[0] + ".scipy.linalg")
        ops = dict(cholesky=xp.linalg.cholesky,
                   solve_lower=lambda a, b: sl.solve_triangular(a, b, lower=True),
                   solve_upper=lambda a, b: sl.solve_triangular(a, b, lower=False),
                   eye=lambda n, dt: xp.eye(n, dtype=dt), diag=xp.diag,
                   clip=lambda d: xp.maximum(d, 0.0))
    elif name == "torch":
        def solve(upper):
            return lambda a, b: xp.linalg.solve_triangular(a, b[:, None], upper=upper)[:, 0]

        ops = dict(cholesky=xp.linalg.cholesky, solve_lower=solve(False), solve_upper=solve(True),
                   eye=lambda n, dt: xp.eye(n, dtype=dt), diag=xp.diagonal,
                   clip=lambda d: xp.clamp(d, min=0.0))
    else:
        raise ValueError(f"no GP port for array module {name!r}")

    def nll(theta, X, y):
        return _nll(theta, X, y, xp, **ops)

    return nll


def gp_numpy(theta, X, y):
    """Value and gradient of :func:`gp_nll` by hand: scipy's Cholesky and ``cho_solve``.

    ``W = K^-1 - alpha alpha^T``; with ``Kf = s2 exp(-D / (2 ell^2))``:
    ``dK/dlog ell = Kf * D / ell^2``, ``dK/dlog s2 = Kf``, ``dK/dlog noise =
    noise I``, and ``d nll / d theta_j = sum(W * dK_j) / 2``.
    """
    from scipy.linalg import cho_solve, cholesky

    n = y.shape[0]
    ell2, s2, noise = np.exp(2.0 * theta[0]), np.exp(theta[1]), np.exp(theta[2])
    sq = np.sum(X * X, axis=1)
    D = np.maximum(sq[:, None] + sq[None, :] - 2.0 * (X @ X.T), 0.0)
    Kf = s2 * np.exp(-0.5 / ell2 * D)
    K = Kf.copy()
    K.flat[::n + 1] += noise
    L = cholesky(K, lower=True)
    alpha = cho_solve((L, True), y)
    value = 0.5 * (y @ alpha) + np.sum(np.log(np.diag(L))) + 0.5 * n * LOG_2PI
    W = cho_solve((L, True), np.eye(n, dtype=K.dtype))
    W -= np.outer(alpha, alpha)
    WK = W * Kf
    grad = np.array([0.5 / ell2 * np.vdot(WK, D), 0.5 * WK.sum(), 0.5 * noise * np.trace(W)],
                    dtype=theta.dtype)
    return value, grad


def gp_data(n, rng, d=GP_DIM):
    """``(theta, X, y)``: ``X ~ U(-1, 1)`` (n x d), ``y = sin(2 x_0) cos(x_1) + x_2 / 2 +
    0.1 N(0, 1)``, ``theta = log(GP_THETA)``; drawn in that order from ``rng``."""
    X = rng.uniform(-1.0, 1.0, (n, d))
    y = np.sin(2.0 * X[:, 0]) * np.cos(X[:, 1]) + 0.5 * X[:, 2] + 0.1 * rng.standard_normal(n)
    return np.log(np.array(GP_THETA)), X, y
