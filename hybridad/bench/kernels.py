"""Hand-written numba gradients of the workloads (:mod:`hybridad.bench.workloads`).

Each kernel is plain Python here, compiled with ``numba.njit`` (no fastmath,
no parallel) by its ``make_*_numba`` function.  A kernel writes the gradient
into preallocated arrays, allocates nothing itself, and returns the value;
``make_*_numba(*args, cache=True)`` wraps it in a Python function with the
hand-written numpy gradient's signature, ``(*args) -> (value, gradient)``
(the call from Python is part of the time).  The gradient arrays are reused
from call to call.

``cache=True``: one dispatcher per kernel per process, cached on disk by
numba (next to this file, or numba's user-wide cache where that is not
writable), so a second run loads instead of compiling; ``cache=False``: a
fresh dispatcher, compiled at its first call.

numba itself is imported only when a kernel is compiled.
"""

from __future__ import annotations

import numpy as np

#: layers of the dense-chain workload (its hand-written kernel and hybridad's share it)
CHAIN_LAYERS = 20

_DISPATCHERS = {}


def jit(kernel, cache=True):
    """``kernel`` under ``numba.njit``: a shared disk-cached dispatcher, or a fresh one."""
    import numba

    if not cache:
        return numba.njit(kernel)
    dispatcher = _DISPATCHERS.get(kernel)
    if dispatcher is None:
        from .._libcache import install

        install()  # numba's cache stamped with this module's imports' source
        dispatcher = _DISPATCHERS[kernel] = numba.njit(cache=True)(kernel)
    return dispatcher


# --- kernels --------------------------------------------------------------------------------


def _expsum_kernel(x, g):
    r = 0.0
    for i in range(x.shape[0]):
        e = np.exp(-3.0 * (x[i] + 1.0))
        g[i] = e
        r += e
    coef = -3.0 * (2.0 * r + 3.0 * r * r + r * r * r)
    for i in range(x.shape[0]):
        g[i] *= coef
    return r * r + r * r * r + r * r * r * r / 4.0


def _quadform_kernel(x, A, s, h, g):
    """``A`` stacked (K, D, D); one pass over each ``A_k`` for ``s = A_k x`` and ``h = x A_k``."""
    d = x.shape[0]
    for i in range(d):
        s[i] = 0.0
        h[i] = 0.0
    for k in range(A.shape[0]):
        for i in range(d):
            xi = x[i]
            acc = 0.0
            for j in range(d):
                a = A[k, i, j]
                acc += a * x[j]
                h[j] += a * xi
            s[i] += acc
    value = 0.0
    for i in range(d):
        value += x[i] * s[i]
        g[i] = s[i] + h[i]
    return value


def _mlp_kernel(W1, b1, W2, b2, W3, b3, X, Y, gW1, gb1, gW2, gb2, gW3, gb3, h1, h2, d1, d2):
    """Forward and backward one sample at a time (``h*``, ``d*``: per-sample scratch)."""
    n, n_in = X.shape
    n_h1, n_h2, n_out = W1.shape[1], W2.shape[1], W3.shape[1]
    for g in (gW1.reshape(-1), gb1, gW2.reshape(-1), gb2, gW3.reshape(-1), gb3):
        for i in range(g.shape[0]):
            g[i] = 0.0
    scale = 2.0 / (n * n_out)
    loss = 0.0
    for s in range(n):
        for j in range(n_h1):
            z = b1[j]
            for i in range(n_in):
                z += X[s, i] * W1[i, j]
            h1[j] = np.tanh(z)
        for k in range(n_h2):
            z = b2[k]
            for j in range(n_h1):
                z += h1[j] * W2[j, k]
            h2[k] = np.tanh(z)
            d2[k] = 0.0
        for o in range(n_out):
            z = b3[o]
            for k in range(n_h2):
                z += h2[k] * W3[k, o]
            r = z - Y[s, o]
            loss += r * r
            dp = scale * r
            gb3[o] += dp
            for k in range(n_h2):
                gW3[k, o] += h2[k] * dp
                d2[k] += W3[k, o] * dp
        for k in range(n_h2):
            d2[k] *= 1.0 - h2[k] * h2[k]
            gb2[k] += d2[k]
        for j in range(n_h1):
            acc = 0.0
            for k in range(n_h2):
                gW2[j, k] += h1[j] * d2[k]
                acc += W2[j, k] * d2[k]
            d1[j] = acc * (1.0 - h1[j] * h1[j])
            gb1[j] += d1[j]
            for i in range(n_in):
                gW1[i, j] += X[s, i] * d1[j]
    return loss / (n * n_out)


def _chain_kernel(x0, g, layers):
    """The dense chain element by element: the running sum of
    :func:`~hybridad.bench.workloads.dense_chain_numpy` in registers, then
    ``tanh`` and the gradient ``2**(layers - 1) (1 - t**2)``."""
    scale = 2.0 ** (layers - 1)
    value = 0.0
    for i in range(x0.shape[0]):
        s = x0[i]
        x = s
        for _ in range(layers):
            x = s
            s = s + x
        t = np.tanh(x)
        value += t
        g[i] = scale * (1.0 - t * t)
    return value


def _rosen_kernel(x, g):
    """Value of the chained Rosenbrock, its gradient written into ``g``: one loop."""
    n = x.shape[0]
    value = 0.0
    carry = 0.0  # 200 d[i-1]: x[i]'s part of term i-1
    for i in range(n - 1):
        a = x[i]
        d = x[i + 1] - a * a
        e = 1.0 - a
        value += 100.0 * d * d + e * e
        g[i] = carry - 400.0 * a * d - 2.0 * e
        carry = 200.0 * d
    g[n - 1] = carry
    return value


def _warm_kernel(v, g):
    value = 0.0
    for i in range(v.shape[0]):
        t = np.tanh(v[i])
        value += t * v[i]
        g[i] = t + v[i] * (1.0 - t * t)
    return value


# --- wrappers with the hand-written numpy gradients' signatures --------------------------------


def make_expsum_numba(x, cache=True):
    """``grad(x) -> (value, g)`` for ``expsum``."""
    kernel, g = jit(_expsum_kernel, cache), np.empty_like(x)

    def grad(x):
        return kernel(x, g), g

    return grad


def make_quadform_numba(x, A, cache=True):
    """``grad(x, A)`` for ``quadform``; the list ``A`` is stacked into one (K, D, D)
    array here, once (not timed), and the kernel reads that copy."""
    kernel, stacked = jit(_quadform_kernel, cache), np.stack(A)
    s, h, g = (np.empty_like(x) for _ in range(3))

    def grad(x, A):
        return kernel(x, stacked, s, h, g), g

    return grad


def make_mlp_numba(W1, b1, W2, b2, W3, b3, X, Y, cache=True):
    """``grad(W1, ..., Y) -> (value, (gW1, ..., gb3))`` for ``mlp``."""
    kernel = jit(_mlp_kernel, cache)
    grads = tuple(np.empty_like(w) for w in (W1, b1, W2, b2, W3, b3))
    scratch = (np.empty(W1.shape[1]), np.empty(W2.shape[1]),
               np.empty(W1.shape[1]), np.empty(W2.shape[1]))

    def grad(W1, b1, W2, b2, W3, b3, X, Y):
        return kernel(W1, b1, W2, b2, W3, b3, X, Y, *grads, *scratch), grads

    return grad


def make_chain_numba(x0, cache=True):
    """``grad(x0)`` for the dense chain."""
    kernel, g = jit(_chain_kernel, cache), np.empty_like(x0)

    def grad(x0):
        return kernel(x0, g, CHAIN_LAYERS), g

    return grad


def make_rosen_numba(x, cache=True):
    """``grad(x)`` for the chained Rosenbrock (scipy needs a copy of ``g``: the caller's job)."""
    kernel, g = jit(_rosen_kernel, cache), np.empty_like(x)

    def grad(x):
        return kernel(x, g), g

    return grad


def make_warm_numba(v, cache=True):
    """``grad(v)`` for :func:`~hybridad.bench.workloads.warm_function`."""
    kernel, g = jit(_warm_kernel, cache), np.empty_like(v)

    def grad(v):
        return kernel(v, g), g

    return grad
