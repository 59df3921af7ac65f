"""Runtime helpers that generated numba code imports (besides :mod:`vmath`).

No array reaches the compiled plan as an array: numba unboxes every array
argument into a fresh NRT MemInfo (one runtime allocation and ~0.1 us per
array per call), while an integer costs nothing.  The plan's own arenas are
passed as data addresses; the caller's arrays (inputs, result buffers,
captured constants) as ``id(array)``, whose numpy struct the plan reads and
checks itself (:func:`type_num`, below).  Inside the kernel :func:`view_at`
wraps an address in an array with no MemInfo at all.  The caller keeps the
arrays alive for the duration of the call (the plan holds its arenas and
constants; a call's arguments are held by the calling frame).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.core import cgutils, ir_utils
from numba.extending import intrinsic

# numpy's array-struct field offsets (in .abi, which imports no numba: the
# memory plan asks for them before any numba code exists)
from .abi import (ABI, ABI_FIELDS, ALIGNED, BAD_ARRAY, BAD_SHAPE, C_CONTIGUOUS,  # noqa: F401
                  DIMS, F_CONTIGUOUS, FLAGS, NBYTES, NDIM, OBJ, OVERLAP, RECORD, TYPE1, TYPE2,
                  WRITEABLE, WRITTEN)
from .threshold import GEMM_SMALL_RESULT, MATVEC_BLOCK
from ..._libcache import install

__all__ = ["ABI", "ABI_FIELDS", "check_arrays", "gemm",
           "load_i32", "load_i64", "load_u8", "overlaps", "type_num", "view_at"]


@intrinsic
def view_at(typingctx, address, shape, dtype):
    """The C-contiguous array of ``shape`` (an integer for 1-D, else a tuple
    of integers) and ``dtype`` (a numpy scalar type) at ``address`` --
    borrowed: no MemInfo, no allocation.

    An intrinsic, so a view costs numba a few LLVM instructions where it is
    used (strides from the shape), not a call to compile and inline: a plan
    cuts dozens of them (~15 ms of compile time each as a ``carray`` call)."""
    if not isinstance(address, types.Integer) or not isinstance(dtype, types.NumberClass):
        return None
    if isinstance(shape, types.Integer):
        dims = (shape,)
    elif isinstance(shape, types.BaseTuple) and all(isinstance(t, types.Integer)
                                                    for t in shape):
        dims = tuple(shape)
    else:
        return None
    arrty = types.Array(dtype.instance_type, len(dims), "C")

    def codegen(context, builder, signature, args):
        from numba.np.arrayobj import make_array, populate_array

        intp = context.get_value_type(types.intp)
        if isinstance(shape, types.Integer):
            sizes = [context.cast(builder, args[1], shape, types.intp)]
        else:
            sizes = [context.cast(builder, v, t, types.intp) for v, t in
                     zip(cgutils.unpack_tuple(builder, args[1], len(dims)), dims, strict=True)]
        itemsize = context.get_constant(types.intp,
                                        context.get_abi_sizeof(context.get_data_type(
                                            arrty.dtype)))
        strides, step = [], itemsize
        for size in reversed(sizes):
            strides.append(step)
            step = builder.mul(step, size)
        strides.reverse()
        data = builder.inttoptr(args[0], context.get_data_type(arrty.dtype).as_pointer())
        ary = make_array(arrty)(context, builder)
        populate_array(ary, data=data, shape=cgutils.pack_array(builder, sizes, intp),
                       strides=cgutils.pack_array(builder, strides, intp), itemsize=itemsize,
                       meminfo=None)
        return ary._getvalue()

    return arrty(address, shape, dtype), codegen


install()  # numba's cache of the functions below: stamped with their imports' source


@njit(cache=True)
def overlaps(a, na, b, nb):
    """Whether the byte ranges ``[a, a + na)`` and ``[b, b + nb)`` intersect."""
    return na > 0 and nb > 0 and a < b + nb and b < a + na


@intrinsic
def _load(typingctx, address, ty):
    """The value of type ``ty`` (a numba type given as a class) stored at ``address``."""
    if not isinstance(address, types.Integer):
        return None
    val_ty = ty.instance_type

    def codegen(context, builder, signature, args):
        llty = context.get_value_type(val_ty)
        ptr = builder.inttoptr(args[0], llty.as_pointer())
        return builder.load(ptr)

    return val_ty(address, ty), codegen


@njit(cache=True)
def load_i64(address):
    return _load(address, np.int64)


@njit(cache=True)
def load_i32(address):
    return _load(address, np.int32)


@njit(cache=True)
def load_u8(address):
    return _load(address, np.uint8)


@njit(cache=True)
def type_num(obj, ndarray_type, ndim, flags, abi):
    """numpy's type number of the array object at address ``obj`` (``id``) when
    it is an exact ``ndarray`` (``ndarray_type`` is ``id(np.ndarray)``) of
    ``ndim`` dimensions in native byte order whose flags include ``flags``;
    else -1.  ``abi`` is :data:`ABI` as the tuple of :data:`ABI_FIELDS`."""
    if load_i64(obj + abi[0]) != ndarray_type or load_i32(obj + abi[2]) != ndim:
        return -1
    if (load_i32(obj + abi[5]) & flags) != flags:
        return -1
    descr = load_i64(obj + abi[4])
    if load_u8(descr + abi[7]) == abi[8]:
        return -1
    return load_i32(descr + abi[6])


# ----------------------------------------------------------------------------
# BLAS: out = a @ b + beta * out (gemm; beta = 1 accumulates an adjoint)
# ----------------------------------------------------------------------------


def _gemm_operands(a, b, out, beta):
    """Whether :func:`gemm`'s (and :func:`gemm_panel`'s) operands are typed
    for it: 2-D float arrays of one dtype, ``a`` and ``b`` C or F, ``out``
    C, a number ``beta``.  Loads numba's BLAS binding (scipy's)."""
    from numba.np.linalg import ensure_blas

    if not all(isinstance(t, types.Array) and t.ndim == 2 for t in (a, b, out)) or \
            out.layout != "C" or a.layout not in "CF" or b.layout not in "CF" or \
            not (a.dtype == b.dtype == out.dtype) or \
            not isinstance(out.dtype, types.Float) or not isinstance(beta, types.Number):
        return False
    ensure_blas()
    return True


def _trans_ld(ty, rows, cols):
    """BLAS's transpose flag and leading dimension of a ``rows x cols``
    operand of array type ``ty`` (C: its column-major transpose, ``"n"``
    and ``cols``; F: ``"t"`` and ``rows``)."""
    from llvmlite import ir

    c = ty.layout == "C"
    return ir.Constant(ir.IntType(8), ord("n" if c else "t")), (cols if c else rows)


def _gemm_function(builder):
    """numba's ``numba_xxgemm`` (kind, transa, transb, m, n, k, alpha, a,
    lda, b, ldb, beta, c, ldc), declared in ``builder``'s module."""
    from llvmlite import ir

    char, intp, voidp = ir.IntType(8), cgutils.intp_t, cgutils.voidptr_t
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(
        ir.IntType(32), [char, char, char, intp, intp, intp, voidp, voidp, intp, voidp, intp,
                         voidp, voidp, intp]), "numba_xxgemm")


def _panel_operands(context, builder, args, tys):
    """``(gemm function, array structs, (m, k, n), BLAS kind, alpha = 1)`` of a
    panel intrinsic whose first three arguments are ``a``, ``b`` and the
    output (types ``tys``)."""
    from llvmlite import ir
    from numba.np.linalg import get_blas_kind

    arrs = [context.make_array(t)(context, builder, v) for t, v in zip(tys, args[:3],
                                                                        strict=True)]
    (m, k), (_, n) = (cgutils.unpack_tuple(builder, x.shape, 2) for x in arrs[:2])
    dtype = tys[2].dtype
    alpha = builder.bitcast(cgutils.alloca_once_value(
        builder, context.get_constant(dtype, 1.0)), cgutils.voidptr_t)
    return (_gemm_function(builder), arrs, (m, k, n),
            ir.Constant(ir.IntType(8), ord(get_blas_kind(dtype))), alpha)


def _checked_gemm(context, builder, gemm_fn, gemm_args):
    """Call ``numba_xxgemm``; a nonzero status raises RuntimeError."""
    from llvmlite import ir

    status = builder.call(gemm_fn, gemm_args)
    with builder.if_then(builder.icmp_signed("!=", status, ir.Constant(ir.IntType(32), 0)),
                         likely=False):
        context.call_conv.return_user_exc(builder, RuntimeError, ("BLAS call failed",))


@intrinsic
def gemm(typingctx, a, b, out, beta):
    """``out[...] = a @ b + beta * out`` for 2-D float arrays by one BLAS gemm
    (gemv when ``out`` has one column or one row):
    with ``beta = 1`` an adjoint accumulates in place (no product temporary, no
    separate add); with ``beta = 0`` ``out`` is not read.  ``a`` and ``b`` C-
    or F-contiguous, ``out`` C-contiguous, one float dtype, compatible shapes
    with a non-zero inner dimension (the caller guarantees them).

    numba's own BLAS binding (``numba_xxgemm``, which calls
    scipy.linalg.cython_blas) does the work, as for ``np.dot``; being an
    intrinsic, it compiles nothing per plan (numba's ``np.dot(a, b, out)``
    compiles its implementation again for every function that calls it)."""
    if not _gemm_operands(a, b, out, beta):
        return None
    from llvmlite import ir
    from numba.np.linalg import get_blas_kind

    char, intp, voidp = ir.IntType(8), cgutils.intp_t, cgutils.voidptr_t

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        gemm_fn = _gemm_function(builder)
        gemv_fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(
            i32, [char, char, intp, intp, voidp, voidp, intp, voidp, voidp, voidp]),
            "numba_xxgemv")
        arrs = [context.make_array(t)(context, builder, v)
                for t, v in zip((a, b, out), args[:3], strict=True)]
        (m, k), (_, n) = (cgutils.unpack_tuple(builder, x.shape, 2) for x in arrs[:2])
        pa, pb, pout = (builder.bitcast(x.data, voidp) for x in arrs)
        zero, one = ir.Constant(intp, 0), ir.Constant(intp, 1)
        kind = ir.Constant(char, ord(get_blas_kind(out.dtype)))
        empty = builder.or_(builder.icmp_signed("==", m, zero),
                            builder.icmp_signed("==", n, zero))
        status = cgutils.alloca_once_value(builder, ir.Constant(i32, 0))

        def flag(c):
            return ir.Constant(char, ord(c))

        with builder.if_then(builder.not_(empty), likely=True):
            alpha = builder.bitcast(cgutils.alloca_once_value(
                builder, context.get_constant(out.dtype, 1.0)), voidp)
            beta_p = builder.bitcast(cgutils.alloca_once_value(
                builder, context.cast(builder, args[3], beta, out.dtype)), voidp)
            # BLAS is column-major: a C (row-major) r x c matrix is the
            # column-major c x r matrix, its transpose.  A matrix-vector
            # product goes to gemv (several times faster than gemm with one
            # column); both vectors are then contiguous (unit stride).
            with builder.if_else(builder.icmp_signed("==", n, one)) as (col, not_col):
                with col:  # out[:, 0] = a @ b[:, 0]
                    trans, rows, cols = (flag("t"), k, m) if a.layout == "C" else \
                        (flag("n"), m, k)
                    builder.store(builder.call(gemv_fn, (kind, trans, rows, cols, alpha, pa,
                                                         rows, pb, beta_p, pout)), status)
                with not_col:
                    with builder.if_else(builder.icmp_signed("==", m, one)) as (row, general):
                        with row:  # out[0, :] = b^T @ a[0, :]
                            trans, rows, cols = (flag("n"), n, k) if b.layout == "C" else \
                                (flag("t"), k, n)
                            builder.store(builder.call(gemv_fn, (
                                kind, trans, rows, cols, alpha, pb, rows, pa, beta_p, pout)),
                                status)
                        with general:
                            # C row-major out = a @ b is, column-major, out^T = b^T a^T
                            ta, lda = _trans_ld(b, k, n)
                            tb, ldb = _trans_ld(a, m, k)
                            _gemm_over_k(context, builder, gemm_fn, status, (a, b, out),
                                         arrs, (m, k, n), (kind, ta, tb, lda, ldb),
                                         alpha, beta_p)
        with builder.if_then(builder.icmp_signed("!=", builder.load(status),
                                                 ir.Constant(i32, 0)), likely=False):
            context.call_conv.return_user_exc(builder, RuntimeError, ("BLAS call failed",))
        return context.get_dummy_value()

    return types.none(a, b, out, beta), codegen


@intrinsic
def gemm_panel(typingctx, a, b, out, beta, lo, hi, cols):
    """One panel of a product :func:`gemm` would make whole, by one BLAS gemm:
    ``out[lo:hi] = a[lo:hi] @ b + beta * out[lo:hi]`` (rows), or with
    ``cols`` true ``out[:, lo:hi] = a @ b[:, lo:hi] + beta * out[:, lo:hi]``
    (``0 <= lo < hi <=`` that extent).  The operands' leading dimensions stay
    the whole arrays', the pointers move to the panel's first row or column.
    ``a`` and ``b`` C or F, ``out`` C, one float dtype, a non-zero inner
    dimension (the caller guarantees them).  Threads each running one panel
    (:func:`gemm_threads`) share a product without BLAS's own pool."""
    if not _gemm_operands(a, b, out, beta) or \
            not all(isinstance(t, types.Integer) for t in (lo, hi)) or \
            not isinstance(cols, types.Boolean):
        return None
    from llvmlite import ir

    voidp = cgutils.voidptr_t

    def codegen(context, builder, signature, args):
        gemm_fn, arrs, (m, k, n), kind, alpha = _panel_operands(context, builder, args,
                                                                (a, b, out))
        p0 = context.cast(builder, args[4], lo, types.intp)
        width = builder.sub(context.cast(builder, args[5], hi, types.intp), p0)
        by_cols = context.cast(builder, args[6], cols, types.boolean)  # an i1
        zero = ir.Constant(cgutils.intp_t, 0)
        beta_p = builder.bitcast(cgutils.alloca_once_value(
            builder, context.cast(builder, args[3], beta, out.dtype)), voidp)
        # column-major out^T = b^T a^T (see gemm): rows lo:hi of out and a are
        # columns lo:hi of their transposes; columns lo:hi of out and b are
        # rows lo:hi of theirs (out^T's leading dimension stays n)
        ta, lda = _trans_ld(b, k, n)
        tb, ldb = _trans_ld(a, m, k)
        off_a = p0 if a.layout == "F" else builder.mul(p0, k)
        off_b = p0 if b.layout == "C" else builder.mul(p0, k)
        pa = builder.gep(arrs[0].data, [builder.select(by_cols, zero, off_a)])
        pb = builder.gep(arrs[1].data, [builder.select(by_cols, off_b, zero)])
        pout = builder.gep(arrs[2].data, [builder.select(by_cols, p0, builder.mul(p0, n))])
        _checked_gemm(context, builder, gemm_fn, (
            kind, ta, tb, builder.select(by_cols, width, n), builder.select(by_cols, m, width),
            k, alpha, builder.bitcast(pb, voidp), lda, builder.bitcast(pa, voidp), ldb, beta_p,
            builder.bitcast(pout, voidp), n))
        return context.get_dummy_value()

    return types.none(a, b, out, beta, lo, hi, cols), codegen


#: the most panels :func:`gemm_threads` cuts a product into, and the fewest rows
#: (or columns) of one: from the shape alone, never the thread count (the same
#: BLAS calls whichever threads run them: panels per thread made a matmul's
#: gradient differ between NUMBA_NUM_THREADS=1 and 2)
GEMM_PANELS, GEMM_PANEL_MIN = 16, 64


@njit(cache=True, parallel=True, nogil=True)
def gemm_threads(a, b, out, beta):
    """``out = a @ b + beta * out`` (as :func:`gemm`, a general product) on
    numba's threads: panels of ``out`` (:data:`GEMM_PANELS`), each one
    single-threaded BLAS gemm (:func:`gemm_panel`) -- the plan's own pool
    runs the product, so no second pool waits for the cores.  The panels cut
    ``out``'s longer side: a wide result's columns (``X^T G`` of a first
    layer, 64 x 256 float32 over 4096 rows: 0.83 ms in column panels, 1.06-1.31
    in row panels of 32 rows, on 2 threads), a tall one's rows."""
    m, n = out.shape
    cols = n > m
    extent = n if cols else m
    p = max(1, min(GEMM_PANELS, extent // GEMM_PANEL_MIN))
    step = (extent + p - 1) // p
    for t in prange(p):
        lo = t * step
        hi = min(extent, lo + step)
        if lo < hi:
            gemm_panel(a, b, out, beta, lo, hi, cols)


GEMM_CHUNK_BYTES = 1 << 17
#: fewest rows of a chunk, and chunks a product needs before it is split
GEMM_CHUNK_MIN, GEMM_CHUNKS_MIN = 256, 4


def _gemm_over_k(context, builder, gemm_fn, status, types_, arrs, dims, flags, alpha, beta_p):
    """The general gemm of :func:`gemm` (``out = a @ b + beta out``, m x k
    times k x n, m and n above 1): one call, or, for a small result and a long
    k (:data:`GEMM_SMALL_RESULT`), one call per chunk of k, the first with
    ``beta``, the others with 1 (each chunk's panels are a @ b's, offset)."""
    from llvmlite import ir

    (ta_ty, tb_ty, out_ty), (aa, ab, aout) = types_, arrs
    m, k, n = dims
    kind, ta, tb, lda, ldb = flags
    intp, voidp = cgutils.intp_t, cgutils.voidptr_t
    const = lambda v: ir.Constant(intp, v)  # noqa: E731
    itemsize = context.get_abi_sizeof(context.get_value_type(out_ty.dtype))
    pout = builder.bitcast(aout.data, voidp)

    def call(pa, pb, kk, beta):  # a failure of any call stays in status
        builder.store(builder.or_(builder.load(status), builder.call(gemm_fn, (
            kind, ta, tb, n, m, kk, alpha, pb, lda, pa, ldb, beta, pout, n))), status)

    chunk = builder.sdiv(const(GEMM_CHUNK_BYTES),
                         builder.mul(builder.add(m, n), const(itemsize)))
    chunk = builder.select(builder.icmp_signed("<", chunk, const(GEMM_CHUNK_MIN)),
                           const(GEMM_CHUNK_MIN), chunk)
    split = builder.and_(
        builder.icmp_signed("<=", builder.mul(m, n), const(GEMM_SMALL_RESULT)),
        builder.icmp_signed(">=", k, builder.mul(chunk, const(GEMM_CHUNKS_MIN))))
    with builder.if_else(split) as (chunked, whole):
        with whole:
            call(builder.bitcast(aa.data, voidp), builder.bitcast(ab.data, voidp), k, beta_p)
        with chunked:
            one = builder.bitcast(cgutils.alloca_once_value(
                builder, context.get_constant(out_ty.dtype, 1.0)), voidp)
            with cgutils.for_range_slice(builder, const(0), k, chunk, intp) as (s, _):
                kk = builder.sub(k, s)
                kk = builder.select(builder.icmp_signed("<", chunk, kk), chunk, kk)
                # element (0, s) of a (m x k) and (s, 0) of b (k x n)
                off_a = s if ta_ty.layout == "C" else builder.mul(s, m)
                off_b = builder.mul(s, n) if tb_ty.layout == "C" else s
                pa = builder.bitcast(builder.gep(aa.data, [off_a]), voidp)
                pb = builder.bitcast(builder.gep(ab.data, [off_b]), voidp)
                first = builder.icmp_signed("==", s, const(0))
                call(pa, pb, kk, builder.select(first, beta_p, one))


# ----------------------------------------------------------------------------
# matrix-vector products as our own loops (where they beat BLAS's gemv)
# ----------------------------------------------------------------------------
#
# Measured on the reference machine (2 cores, ten 500 x 500 float64 matrices
# read in turn, from L3): scipy's OpenBLAS gemv takes ~100 us per product on
# one thread or two; the row loop below 60 us on one thread and 26-65 on two,
# the column loop 85 and 40-65 (a noisy machine: medians of runs minutes
# apart).  Whether a plan uses them is the cost model's call
# (:func:`hybridad.transforms.costs.matvec_choice`, from measured rates).


def _matvec_kernels(parallel):
    """``(dot, axpy)`` for a C matrix ``a`` (m x k), compiled with ``prange``
    loops on numba's threads when ``parallel`` (named apart: numba's disk
    cache keys a function by its qualified name and code, not its flags).

    ``dot(a, x, out, beta)``: ``out = a @ x + beta * out`` (``out`` of m,
    ``x`` of k), one dot product per row, each row on one thread: its sum is
    reassociated (vectorized, as BLAS's is) but the same whatever the thread
    count.  ``axpy(a, v, out, beta)``: ``out = a.T @ v + beta * out``
    (``out`` of k, ``v`` of m): blocks of :data:`.threshold.MATVEC_BLOCK` columns, each
    block on one thread adding the rows eight at a time in order -- no
    reassociation.  With ``beta = 0`` ``out`` is not read."""
    def dot(a, x, out, beta):
        m, k = a.shape
        for i in prange(m):
            s = a.dtype.type(0)
            row = a[i]
            for j in range(k):
                s += row[j] * x[j]
            out[i] = s if beta == 0 else s + beta * out[i]

    def axpy(a, v, out, beta):
        m, k = a.shape
        block = MATVEC_BLOCK
        for b in prange((k + block - 1) // block):
            lo = b * block
            hi = min(k, lo + block)
            o = out[lo:hi]
            if beta == 0:
                for j in range(hi - lo):
                    o[j] = 0
            elif beta != 1:
                for j in range(hi - lo):
                    o[j] *= beta
            i = 0
            while i + 8 <= m:  # eight rows per pass over the block
                v0, v1, v2, v3 = v[i], v[i + 1], v[i + 2], v[i + 3]
                v4, v5, v6, v7 = v[i + 4], v[i + 5], v[i + 6], v[i + 7]
                r0, r1, r2, r3 = a[i, lo:hi], a[i + 1, lo:hi], a[i + 2, lo:hi], a[i + 3, lo:hi]
                r4, r5, r6, r7 = (a[i + 4, lo:hi], a[i + 5, lo:hi], a[i + 6, lo:hi],
                                  a[i + 7, lo:hi])
                for j in range(hi - lo):
                    o[j] += (r0[j] * v0 + r1[j] * v1 + r2[j] * v2 + r3[j] * v3) + \
                        (r4[j] * v4 + r5[j] * v5 + r6[j] * v6 + r7[j] * v7)
                i += 8
            while i < m:
                vi, r0 = v[i], a[i, lo:hi]
                for j in range(hi - lo):
                    o[j] += r0[j] * vi
                i += 1

    return compile_matvecs(dot, axpy, parallel)


def compile_matvecs(dot, axpy, parallel):
    """A row loop ``dot`` and a column loop ``axpy`` compiled (``prange`` on
    numba's threads when ``parallel``), named ``matvec_<name>`` (``_par`` for
    the threaded ones: numba's disk cache keys a function by its qualified
    name and code, not its flags); ``dot`` reassociates its sums (vectorized,
    as BLAS's are), ``axpy`` adds in order."""
    suffix = "_par" if parallel else ""
    for fn in (dot, axpy):
        fn.__name__ = fn.__qualname__ = f"matvec_{fn.__name__}{suffix}"
    flags = dict(cache=True, error_model="numpy", parallel=bool(parallel), nogil=True)
    return (njit(fastmath={"reassoc", "contract"}, **flags)(dot),
            njit(fastmath={"contract"}, **flags)(axpy))


matvec_dot, matvec_axpy = _matvec_kernels(False)
matvec_dot_par, matvec_axpy_par = _matvec_kernels(True)


def _pair_kernel(parallel):
    """``pair(a, u, v, y, z, parts)``: ``y = a @ u`` and ``z = a.T @ v`` (a C
    matrix ``a``, m x k) from one read of ``a``: the rows in ``parts.shape[0]``
    parts (a thread each), four rows at a time, each row's dot product (as
    :func:`matvec_dot`'s) and its share of ``z`` into its part's row of
    ``parts``; then ``z`` the sum of the parts in order.  The parts follow
    from the shape alone: the same bits on any thread count."""
    def pair(a, u, v, y, z, parts):
        m, k = a.shape
        n = parts.shape[0]
        rows = (m + n - 1) // n
        for p in prange(n):
            lo = p * rows
            hi = min(m, lo + rows)
            zp = parts[p]
            for j in range(k):
                zp[j] = 0
            i = lo
            while i + 4 <= hi:
                r0, r1, r2, r3 = a[i], a[i + 1], a[i + 2], a[i + 3]
                v0, v1, v2, v3 = v[i], v[i + 1], v[i + 2], v[i + 3]
                s0 = s1 = s2 = s3 = a.dtype.type(0)
                for j in range(k):
                    uj, a0, a1, a2, a3 = u[j], r0[j], r1[j], r2[j], r3[j]
                    s0 += a0 * uj
                    s1 += a1 * uj
                    s2 += a2 * uj
                    s3 += a3 * uj
                    zp[j] += (a0 * v0 + a1 * v1) + (a2 * v2 + a3 * v3)
                y[i], y[i + 1], y[i + 2], y[i + 3] = s0, s1, s2, s3
                i += 4
            while i < hi:
                r0, v0 = a[i], v[i]
                s0 = a.dtype.type(0)
                for j in range(k):
                    s0 += r0[j] * u[j]
                    zp[j] += r0[j] * v0
                y[i] = s0
                i += 1
        block = MATVEC_BLOCK
        for b in prange((k + block - 1) // block):
            for j in range(b * block, min(k, b * block + block)):
                s = parts[0, j]
                for p in range(1, n):
                    s += parts[p, j]
                z[j] = s

    pair.__name__ = pair.__qualname__ = "matvec_pair" + ("_par" if parallel else "")
    return njit(fastmath={"reassoc", "contract"}, cache=True, error_model="numpy",
                parallel=bool(parallel), nogil=True)(pair)


matvec_pair, matvec_pair_par = _pair_kernel(False), _pair_kernel(True)


def _external_memory(lhs, args, alias_map, arg_aliases):
    """numba alias analysis: a view made from an address is caller memory."""
    arg_aliases.add(lhs)


# numba's parfor pass deletes loops and stores whose arrays it believes die in
# the function: an array made from an integer address looks freshly allocated,
# so a prange loop whose only effect is writing a result buffer (say, scaling
# a gradient in place) would be removed.  Declaring the views aliases of the
# arguments keeps every store to them, and to their slices and reshapes, live.
ir_utils.alias_func_extensions[("view_at", __name__)] = _external_memory


# ----------------------------------------------------------------------------
# the checks opening every compiled plan, driven by a table
# ----------------------------------------------------------------------------
#
# One compiled function checks all of a plan's arrays, so a plan's generated
# source holds one line per array, not a dozen (numba compiles generated code
# at several ms per line).  The table is an int64 array the plan owns: per
# array a record of RECORD fields, then the expected dimensions.



@njit(cache=True)
def check_arrays(ndarray_type, table, count, size, objects, abi):
    """-1 when every array of the check ``table`` (address; ``count``
    records, ``size`` int64 in all) is acceptable, else ``4 j + verdict`` for
    the first failing array ``j``.

    With ``objects`` each record's OBJ is ``id(array)``: the array must be an
    exact ndarray (``ndarray_type``) of the record's ndim, dims, flags and one
    of its type numbers, in native byte order (see :func:`type_num`).  Else
    OBJ is the data address of an array numba has already typed.  Then no
    written array may overlap any other array of the table."""
    t = view_at(table, (size,), np.int64)
    for j in range(count):
        r = j * RECORD
        if objects:
            obj = t[r + OBJ]
            tn = type_num(obj, ndarray_type, t[r + NDIM], t[r + FLAGS], abi)
            if tn < 0 or (tn != t[r + TYPE1] and tn != t[r + TYPE2]):
                return 4 * j + BAD_ARRAY
            if t[r + NDIM] > 0:
                dims = load_i64(obj + abi[3])
                for d in range(t[r + NDIM]):
                    if load_i64(dims + 8 * d) != t[t[r + DIMS] + d]:
                        return 4 * j + BAD_SHAPE
    for j in range(count):
        rj = j * RECORD
        pj = load_i64(t[rj + OBJ] + abi[1]) if objects else t[rj + OBJ]
        for k in range(j + 1, count):
            rk = k * RECORD
            if t[rj + WRITTEN] == 0 and t[rk + WRITTEN] == 0:
                continue
            pk = load_i64(t[rk + OBJ] + abi[1]) if objects else t[rk + OBJ]
            if overlaps(pj, t[rj + NBYTES], pk, t[rk + NBYTES]):
                return 4 * j + OVERLAP
    return -1
