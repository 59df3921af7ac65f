"""Problems the sparse tests share: the 2-D Brusselator (two species, 5-point
periodic Laplacian by np.roll), the Bratu energy and the minimal-surface area
(5- and 7-point Hessians)."""

import numpy as np


def lap(a):
    return np.roll(a, 1, 0) + np.roll(a, -1, 0) + np.roll(a, 1, 1) + np.roll(a, -1, 1) - 4 * a


def brusselator(y, n, a=1.0, b=3.4, alpha=0.002):
    u = y[:n * n].reshape(n, n)
    v = y[n * n:].reshape(n, n)
    uuv = u * u * v
    du = b + uuv - (a + 1) * u + alpha * n * n * lap(u)
    dv = a * u - uuv + alpha * n * n * lap(v)
    return np.concatenate([du.ravel(), dv.ravel()])


def bratu(u, lam=6.0):
    n = int(round(np.sqrt(u.size)))
    h = 1.0 / (n + 1)
    grid = u.reshape(n, n)
    dx, dy = np.diff(grid, axis=0), np.diff(grid, axis=1)
    edge = np.sum(grid[0] ** 2) + np.sum(grid[-1] ** 2) + np.sum(grid[:, 0] ** 2) + \
        np.sum(grid[:, -1] ** 2)
    return 0.5 * (np.sum(dx * dx) + np.sum(dy * dy) + edge) - lam * h * h * np.sum(np.exp(u))


def minimal_surface(u, boundary):
    n = boundary.shape[0] - 2
    h = 1.0 / (n + 1)
    mid = np.concatenate([boundary[1:-1, :1], u.reshape(n, n), boundary[1:-1, -1:]], axis=1)
    full = np.concatenate([boundary[:1], mid, boundary[-1:]], axis=0)
    dx = (full[1:, :-1] - full[:-1, :-1]) / h
    dy = (full[:-1, 1:] - full[:-1, :-1]) / h
    return h * h * np.sum(np.sqrt(1.0 + dx * dx + dy * dy))
