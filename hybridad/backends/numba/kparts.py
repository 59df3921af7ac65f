"""A gemm with a small result over a long contracted axis on the loops' threads:
``X^T G`` of a narrow layer (16 x 16 over 10^4 rows) as parts of that axis,
each one BLAS gemm into scratch of its own (:func:`gemm_kpanel`, an intrinsic
here and in hybridad's compiler: :func:`hybridad.backends.jit.natives.gemm_kpanel`),
summed in order (:func:`gemm_kparts`).  The part count comes from the shape
(:meth:`hybridad.transforms.machine.Machine.gemm_k_parts`), so the sums are
the same on any thread count.  Generated code imports :func:`gemm_kparts`."""

from __future__ import annotations

from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from .rt import _checked_gemm, _gemm_operands, _panel_operands, _trans_ld
from ..._libcache import install

__all__ = ["gemm_kpanel", "gemm_kparts"]

install()  # numba's cache of the functions below: stamped with their imports' source


@intrinsic
def gemm_kpanel(typingctx, a, b, parts, lo, hi, row0):
    """One part of the contracted axis of a product, by one BLAS gemm:
    ``parts[row0:row0 + m] = a[:, lo:hi] @ b[lo:hi]`` (``a`` m x k, ``b``
    k x n, ``0 <= lo < hi <= k``; ``parts`` C, n columns).  The operands'
    leading dimensions stay the whole arrays', the pointers move to the
    part's first column of ``a`` and row of ``b``.  ``a`` and ``b`` C or F,
    one float dtype (the caller guarantees them).  :func:`gemm_kparts` runs
    the parts on the loops' threads."""
    if not _gemm_operands(a, b, parts, types.float64) or \
            not all(isinstance(t, types.Integer) for t in (lo, hi, row0)):
        return None
    voidp = cgutils.voidptr_t

    def codegen(context, builder, signature, args):
        gemm_fn, arrs, (m, k, n), kind, alpha = _panel_operands(context, builder, args,
                                                                (a, b, parts))
        p0 = context.cast(builder, args[3], lo, types.intp)
        width = builder.sub(context.cast(builder, args[4], hi, types.intp), p0)
        r0 = context.cast(builder, args[5], row0, types.intp)
        beta_p = builder.bitcast(cgutils.alloca_once_value(
            builder, context.get_constant(parts.dtype, 0.0)), voidp)
        # column-major out^T = b^T a^T (see gemm), over columns lo:hi of a and
        # rows lo:hi of b
        ta, lda = _trans_ld(b, k, n)
        tb, ldb = _trans_ld(a, m, k)
        off_a = p0 if a.layout == "C" else builder.mul(p0, m)
        off_b = builder.mul(p0, n) if b.layout == "C" else p0
        pa = builder.gep(arrs[0].data, [off_a])
        pb = builder.gep(arrs[1].data, [off_b])
        pout = builder.gep(arrs[2].data, [builder.mul(r0, n)])
        _checked_gemm(context, builder, gemm_fn, (
            kind, ta, tb, n, m, width, alpha, builder.bitcast(pb, voidp), lda,
            builder.bitcast(pa, voidp), ldb, beta_p, builder.bitcast(pout, voidp), n))
        return context.get_dummy_value()

    return types.none(a, b, parts, lo, hi, row0), codegen


@njit(cache=True, parallel=True, nogil=True)
def gemm_kparts(a, b, out, beta, parts):
    """``out = a @ b + beta * out`` for a small result over a long contracted
    axis, on numba's threads: ``parts`` (``P m x n``, C) holds one part's
    product each (:func:`gemm_kpanel`, the axis cut in ``P`` near-equal
    parts), then the parts are summed in order -- ``P`` comes from the shape
    (:meth:`hybridad.transforms.machine.Machine.gemm_k_parts`), so the sums
    are the same on any thread count.  ``beta`` 0: ``out`` is not read."""
    m, n = out.shape
    k = a.shape[1]
    p = parts.shape[0] // m
    for t in prange(p):
        gemm_kpanel(a, b, parts, t * k // p, (t + 1) * k // p, t * m)
    for i in range(m):
        for j in range(n):
            s = parts[i, j]
            for t in range(1, p):
                s += parts[t * m + i, j]
            if beta == 0.0:
                out[i, j] = s
            else:
                out[i, j] = s + beta * out[i, j]
