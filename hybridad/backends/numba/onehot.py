"""A product whose left operand's rows are unit vectors: a chunk of a dense
Hessian's or Jacobian's seeds times a matrix (:mod:`hybridad.plans.hessian`,
:mod:`hybridad.plans.jacobian`).

Row ``i`` of the seeds ``S`` is ``e_j`` (or ``c e_j``, or zero), so row ``i``
of ``S @ B`` is row ``j`` of ``B`` (times ``c``): ``k`` rows read where a
gemm does ``k n m`` multiply-adds -- the tangent of ``A @ x`` along the unit
seeds is columns of ``A``.  :func:`onehot_rows` tests every row (two
vectorized sums over it: how many nonzeros, and where) and gathers; the
first row with two nonzeros or more (seeds that are not unit vectors: HVPs
of many directions run the same program) hands the product back to the
gemm -- before anything is written, since the product may add into ``out``
(``beta`` 1: a reverse sweep's accumulation).  A matmul the plan marks
``onehot_rows`` (:func:`hybridad.transforms.products.mark_seed_products`)
is emitted as ``if not onehot_rows(a, b, out, beta): gemm`` (:mod:`.emit`).

The gathered row is ``c * B[j]``, exact; a gemm also adds ``0 * B[i']`` for
the other rows ``i'`` (no difference for finite ``B``, up to the sign of a
zero; a NaN from ``0 * inf`` where ``B`` holds an infinity in another row).
"""

from __future__ import annotations

from numba import njit

from ..._libcache import install

__all__ = ["onehot_rows"]

install()  # numba's cache of the functions below: stamped with their imports' source


@njit(cache=True, nogil=True)
def onehot_rows(a, b, out, beta):
    """``out = a @ b + beta * out`` (``a`` k x n, ``b`` n x m, ``out`` k x m;
    ``beta`` 0: ``out`` is not read) when no row of ``a`` holds two nonzeros
    (a NaN counts as one): True.  False, with ``out`` untouched, when one
    does (every row is looked at before any is written)."""
    k, n = a.shape
    m = b.shape[1]
    for i in range(k):
        count = 0
        for c in range(n):  # (branch-free: the loop vectorizes)
            count += a[i, c] != 0
        if count > 1:
            return False
    for i in range(k):
        where = 0
        for c in range(n):
            where += c * (a[i, c] != 0)
        scale = a[i, where]  # (a zero row: where = 0, a zero scale)
        if beta == 0:
            for q in range(m):
                out[i, q] = scale * b[where, q]
        else:
            for q in range(m):
                out[i, q] = scale * b[where, q] + beta * out[i, q]
    return True
