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

A column loop over few columns and many rows (``X^T g`` of a tall data
matrix: 100 columns, 10^5 rows) has one block of columns, so one task: the
``*_parts`` kernels split its rows instead, into the parts
:meth:`hybridad.transforms.machine.Machine.axpy_parts` gives (from the shape
alone), each part adding its rows into its own row of scratch, then sum the
parts in order -- the same bits on any thread count, serial or parallel.
"""

from __future__ import annotations

from numba import njit, prange

from .rt import compile_matvecs
from .threshold import MATVEC_BLOCK
from ..._libcache import install

__all__ = ["matvec_axpy2", "matvec_axpy2_par", "matvec_axpy2_parts", "matvec_axpy2_parts_par",
           "matvec_axpy_parts", "matvec_axpy_parts_par", "matvec_dot2", "matvec_dot2_par"]

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


@njit(inline="always", cache=True)
def part_rows(m, n, p):
    """``[lo, hi)``: the rows of part ``p`` of ``n`` equal parts of ``m`` rows
    (the last one shorter), from the shape alone."""
    rows = (m + n - 1) // n
    lo = p * rows
    return lo, min(m, lo + rows)


def _parts_kernels(parallel):
    """``(axpy_parts, axpy2_parts)``: the column loops of ``A^T v`` (and of
    ``A^T x``, ``A^T y`` from one read of ``A``) with the rows of the C
    matrix ``a`` (m x k) in ``n`` parts, a thread each.

    ``axpy_parts(a, v, out, beta, parts)``: ``out = a.T @ v + beta * out``
    (``parts``: n x k scratch; with ``beta = 0`` ``out`` is not read);
    ``axpy2_parts(a, x, y, ox, oy, parts)``: ``ox = a.T @ x``, ``oy = a.T @ y``
    (``parts``: 2n x k, the first n rows ``ox``'s).  Each part adds its rows
    four at a time, in order, into its scratch row(s); then each result
    element is its parts' sum in order."""
    def axpy_parts(a, v, out, beta, parts):
        m, k = a.shape
        n = parts.shape[0]
        for p in prange(n):
            lo, hi = part_rows(m, n, p)
            o = parts[p]
            for j in range(k):
                o[j] = 0
            i = lo
            while i + 4 <= hi:
                v0, v1, v2, v3 = v[i], v[i + 1], v[i + 2], v[i + 3]
                r0, r1, r2, r3 = a[i], a[i + 1], a[i + 2], a[i + 3]
                for j in range(k):
                    o[j] += (r0[j] * v0 + r1[j] * v1) + (r2[j] * v2 + r3[j] * v3)
                i += 4
            while i < hi:
                vi, r0 = v[i], a[i]
                for j in range(k):
                    o[j] += r0[j] * vi
                i += 1
        for j in range(k):
            s = parts[0, j]
            for p in range(1, n):
                s += parts[p, j]
            out[j] = s if beta == 0 else s + beta * out[j]

    def axpy2_parts(a, x, y, ox, oy, parts):
        m, k = a.shape
        n = parts.shape[0] // 2
        for p in prange(n):
            lo, hi = part_rows(m, n, p)
            o, q = parts[p], parts[n + p]
            for j in range(k):
                o[j] = 0
                q[j] = 0
            i = lo
            while i + 4 <= hi:
                x0, x1, x2, x3 = x[i], x[i + 1], x[i + 2], x[i + 3]
                y0, y1, y2, y3 = y[i], y[i + 1], y[i + 2], y[i + 3]
                r0, r1, r2, r3 = a[i], a[i + 1], a[i + 2], a[i + 3]
                for j in range(k):
                    a0, a1, a2, a3 = r0[j], r1[j], r2[j], r3[j]
                    o[j] += (a0 * x0 + a1 * x1) + (a2 * x2 + a3 * x3)
                    q[j] += (a0 * y0 + a1 * y1) + (a2 * y2 + a3 * y3)
                i += 4
            while i < hi:
                xi, yi, r0 = x[i], y[i], a[i]
                for j in range(k):
                    o[j] += r0[j] * xi
                    q[j] += r0[j] * yi
                i += 1
        for j in range(k):
            s, t = parts[0, j], parts[n, j]
            for p in range(1, n):
                s += parts[p, j]
                t += parts[n + p, j]
            ox[j] = s
            oy[j] = t

    suffix = "_par" if parallel else ""
    for fn in (axpy_parts, axpy2_parts):
        fn.__name__ = fn.__qualname__ = f"matvec_{fn.__name__}{suffix}"
    flags = dict(cache=True, error_model="numpy", parallel=bool(parallel), nogil=True,
                 fastmath={"contract"})
    return njit(**flags)(axpy_parts), njit(**flags)(axpy2_parts)


matvec_axpy_parts, matvec_axpy2_parts = _parts_kernels(False)
matvec_axpy_parts_par, matvec_axpy2_parts_par = _parts_kernels(True)
