"""Two matrix-vector products of one form over one read of the matrix: the
kernels of ``matvec_two`` (:mod:`hybridad.ops.matmul`), which the numba
lowering makes of an HVP's forward ``A u`` and tangent ``A du``, or of its
backward and tangent ``A^T w`` (:func:`hybridad.transforms.products.pair_matvecs`).

They are :mod:`.rt`'s ``matvec_dot`` and ``matvec_axpy`` with a second vector
and result (the column loop four rows a pass where the one-vector loop takes
eight, each row feeding two results), with the same split between threads (rows for ``dot2``,
blocks of :data:`.threshold.MATVEC_BLOCK` columns for ``axpy2``), so the same
bits on any thread count.  A matrix larger than the caches is read
from memory once instead of twice.
"""

from __future__ import annotations

from numba import prange

from .rt import compile_matvecs
from .threshold import MATVEC_BLOCK
from ..._libcache import install

__all__ = ["matvec_axpy2", "matvec_axpy2_par", "matvec_dot2", "matvec_dot2_par"]

install()  # numba's cache of the functions below: stamped with their imports' source


def _kernels(parallel):
    """``(dot2, axpy2)`` for a C matrix ``a`` (m x k), compiled as :mod:`.rt`'s
    one-vector loops are (:func:`.rt.compile_matvecs`).

    ``dot2(a, x, y, ox, oy)``: ``ox = a @ x``, ``oy = a @ y`` (``x``, ``y`` of
    k; ``ox``, ``oy`` of m), both dot products of a row from one read of it,
    each row on one thread.  ``axpy2(a, x, y, ox, oy)``: ``ox = a.T @ x``,
    ``oy = a.T @ y`` (``x``, ``y`` of m; ``ox``, ``oy`` of k): blocks of
    columns, each on one thread adding the rows four at a time in order (no
    reassociation).  The results' old contents are never read."""
    def dot2(a, x, y, ox, oy):
        m, k = a.shape
        for i in prange(m):
            s = a.dtype.type(0)
            t = a.dtype.type(0)
            row = a[i]
            for j in range(k):
                s += row[j] * x[j]
                t += row[j] * y[j]
            ox[i] = s
            oy[i] = t

    def axpy2(a, x, y, ox, oy):
        m, k = a.shape
        block = MATVEC_BLOCK
        for b in prange((k + block - 1) // block):
            lo = b * block
            hi = min(k, lo + block)
            p, q = ox[lo:hi], oy[lo:hi]
            for j in range(hi - lo):
                p[j] = 0
                q[j] = 0
            i = 0
            while i + 4 <= m:  # four rows per pass over the block
                x0, x1, x2, x3 = x[i], x[i + 1], x[i + 2], x[i + 3]
                y0, y1, y2, y3 = y[i], y[i + 1], y[i + 2], y[i + 3]
                r0, r1, r2, r3 = a[i, lo:hi], a[i + 1, lo:hi], a[i + 2, lo:hi], a[i + 3, lo:hi]
                for j in range(hi - lo):
                    a0, a1, a2, a3 = r0[j], r1[j], r2[j], r3[j]
                    p[j] += (a0 * x0 + a1 * x1) + (a2 * x2 + a3 * x3)
                    q[j] += (a0 * y0 + a1 * y1) + (a2 * y2 + a3 * y3)
                i += 4
            while i < m:
                xi, yi, r0 = x[i], y[i], a[i, lo:hi]
                for j in range(hi - lo):
                    p[j] += r0[j] * xi
                    q[j] += r0[j] * yi
                i += 1

    return compile_matvecs(dot2, axpy2, parallel)


matvec_dot2, matvec_axpy2 = _kernels(False)
matvec_dot2_par, matvec_axpy2_par = _kernels(True)
