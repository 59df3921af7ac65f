"""Matrix products (and triangular solves) by cuBLAS through handles of
hybridad's own, which a CUDA graph's capture records.

cupy refuses every cuBLAS call while a stream is captured (its ``setStream``
raises), although cuBLAS's GEMMs are capturable when the handle's stream is
the capturing stream and the handle has a workspace of its own, set before
the capture (cuBLAS's documentation, "CUDA Graphs Support"; PyTorch captures
its products so).  A :class:`GraphGemm` is such a handle, bound to one
stream with its own workspace; :func:`eager_handle` keeps one per thread,
device and stream (at most :data:`MAX_HANDLES`).  A GPU program's products
always go through it (:func:`eager_gemm`), eagerly or while
:class:`~hybridad.backends.cuda.program.CudaGraphRunner` captures on its
stream -- then the GEMM becomes a node of the graph, and a plan's step with
products is one graph; a product has the same bits in and out of a graph.
It enqueues ``cublas<t>gemm`` through cuBLAS's C API (``ctypes``; the
library cupy loaded).  A stack of products (numpy's batch broadcasting over
one leading axis) is one strided-batched GEMM; an operand whose strides are
neither row- nor column-major (a broadcast, a strided slice) is copied into
a buffer of the handle's first, as cupy's matmul copies it into memory it
allocates.  A product it cannot express so (more batch axes, mixed or
integer dtypes) is declined: cupy's matmul computes it, and a capture cuts
the graph around it.

The handles' math mode follows cupy's: full float32 unless ``CUPY_TF32=1``
asked cupy for TF32 (``products.products_precision`` says which).
"""

from __future__ import annotations

import collections
import ctypes
import os
import threading
import weakref

import numpy as np

__all__ = ["GraphGemm", "available", "cublas_tf32", "eager_gemm", "eager_handle"]

_OP_N, _OP_T = 0, 1
_LEFT, _RIGHT, _LOWER, _UPPER, _NON_UNIT = 0, 1, 0, 1, 0  # cublasSideMode_t, cublasFillMode_t
_DEFAULT_MATH, _TF32_MATH = 0, 3  # cublasMath_t
#: each handle's own workspace (cuBLAS asks for one to capture; its split-k
#: GEMMs use it)
WORKSPACE_BYTES = 8 << 20

#: split-K (:func:`split_k`): a product whose output covers fewer than
#: SPLIT_TILES tiles of 64 x 64 and whose inner dimension is at least
#: SPLIT_MIN_K and 16 times its outputs' side is computed as partial products
#: over chunks of at least SPLIT_CHUNK of the inner dimension (about
#: SPLIT_CTAS tiles in all: one strided-batched GEMM) summed by one GEMV --
#: cuBLAS's GEMM runs such a product (a weight's gradient over a batch:
#: 16 x 10^5 x 16) on the few thread blocks of its output, 62 us on an H200
SPLIT_TILES, SPLIT_MIN_K, SPLIT_CHUNK, SPLIT_CTAS = 32, 2048, 128, 256

#: alpha and beta of every call (host pointer mode, cuBLAS's default: read as a
#: call is enqueued or captured)
_ONE = {np.dtype(np.float64): ctypes.c_double(1.0), np.dtype(np.float32): ctypes.c_float(1.0)}
_ZERO = {np.dtype(np.float64): ctypes.c_double(0.0), np.dtype(np.float32): ctypes.c_float(0.0)}

_lock = threading.RLock()
_library = []  # [the cuBLAS library, or None]: looked up once


def _find_library():
    """The cuBLAS that cupy loaded (its path in this process's mappings), or None."""
    try:
        from cupy.cuda import device

        device.get_cublas_handle()  # (cupy loads libcublas here, on a device)
        with open("/proc/self/maps") as fh:
            paths = [line.split()[-1] for line in fh if "/libcublas.so" in line]
        if not paths:
            return None
        lib = ctypes.CDLL(paths[0])
    except Exception:  # noqa: BLE001 -- no device, no cuBLAS, another platform
        return None
    vp, i = ctypes.c_void_p, ctypes.c_int
    lib.cublasCreate_v2.argtypes = [ctypes.POINTER(vp)]
    lib.cublasDestroy_v2.argtypes = [vp]
    lib.cublasSetStream_v2.argtypes = [vp, vp]
    lib.cublasSetWorkspace_v2.argtypes = [vp, vp, ctypes.c_size_t]
    lib.cublasSetMathMode.argtypes = [vp, i]
    ll = ctypes.c_longlong
    for name in ("cublasDgemm_v2", "cublasSgemm_v2"):
        getattr(lib, name).argtypes = [vp, i, i, i, i, i, vp, vp, i, vp, i, vp, vp, i]
    for name in ("cublasDgemmStridedBatched", "cublasSgemmStridedBatched"):
        getattr(lib, name).argtypes = [vp, i, i, i, i, i, vp, vp, i, ll, vp, i, ll, vp, vp,
                                       i, ll, i]
    for name in ("cublasDtrsm_v2", "cublasStrsm_v2"):
        getattr(lib, name).argtypes = [vp, i, i, i, i, i, i, vp, vp, i, vp, i]
    for name in ("cublasDgemv_v2", "cublasSgemv_v2"):
        getattr(lib, name).argtypes = [vp, i, i, i, vp, vp, i, vp, i, vp, vp, i]
    for name in ("cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2",
                 "cublasSetWorkspace_v2", "cublasSetMathMode", "cublasDgemm_v2",
                 "cublasSgemm_v2", "cublasDgemmStridedBatched", "cublasSgemmStridedBatched",
                 "cublasDtrsm_v2", "cublasStrsm_v2", "cublasDgemv_v2", "cublasSgemv_v2"):
        getattr(lib, name).restype = i
    return lib


def cublas_tf32(dtype):
    """Whether cupy's cuBLAS calls compute ``dtype`` products in TF32: its
    compute type (on a device), else what ``CUPY_TF32`` asks cupy for."""
    try:
        from cupy._core import _routines_linalg as lin  # (cupy's own setting)

        return lin.get_compute_type(np.dtype(dtype)) == lin.COMPUTE_TYPE_TF32
    except Exception:  # noqa: BLE001 -- no device, or another cupy's internals
        return dtype == np.float32 and os.environ.get("CUPY_TF32", "0").strip() not in (
            "", "0")


def _lib():
    with _lock:
        if not _library:
            _library.append(_find_library())
        return _library[0]


def available():
    """Whether matrix products go through these handles here: cupy on a
    device, its cuBLAS found, and a product checked once per process --
    enqueued directly and through a captured graph -- against cupy's."""
    with _lock:
        if not _checked:
            _checked.append(_self_check())
        return _checked[0]


_checked = []  # [whether the check passed]


def _self_check():
    if _lib() is None:  # (under available()'s hold of the reentrant lock)
        return False
    try:
        import cupy

        a = cupy.arange(12.0).reshape(3, 4) / 7
        b = cupy.arange(8.0).reshape(4, 2) / 5
        want = cupy.matmul(a, b)
        stream = cupy.cuda.Stream(non_blocking=True)
        gemm = GraphGemm(stream, cupy)
        got, replayed = cupy.zeros((3, 2)), cupy.zeros((3, 2))
        with stream:
            ok = gemm(got, a, b.T.copy().T)  # (a column-major operand too)
            stream.begin_capture()
            try:
                ok = gemm(replayed, a, b) and ok
            finally:
                graph = stream.end_capture()
            graph.launch(stream=stream)
        stream.synchronize()
        return bool(ok) and bool(cupy.allclose(got, want, rtol=1e-14)) and \
            bool(cupy.allclose(replayed, want, rtol=1e-14))
    except Exception:  # noqa: BLE001 -- then cupy's products, and graphs in segments
        return False


_eager = threading.local()  # OrderedDict {(device, stream pointer): GraphGemm}, this thread's
#: the most eager handles a thread keeps (each holds a workspace): the least
#: recently used is dropped, its stream synchronized first
MAX_HANDLES = 8


def eager_gemm(out, a, b):
    """``out = a @ b`` by cuBLAS on the current stream, through a handle
    configured as the capture handles are (so that a product has the same
    bits in and out of a graph); False where one GEMM cannot compute it."""
    return eager_handle()(out, a, b)


def eager_handle():
    """This thread's handle for the current stream (:func:`eager_gemm`'s)."""
    import cupy

    stream = cupy.cuda.get_current_stream()
    handles = getattr(_eager, "handles", None)
    if handles is None:
        handles = _eager.handles = collections.OrderedDict()
    key = (cupy.cuda.runtime.getDevice(), stream.ptr)
    gemm = handles.get(key)
    if gemm is None:
        while len(handles) >= MAX_HANDLES:  # (its GEMMs done before its workspace goes)
            handles.popitem(last=False)[1].stream.synchronize()
        gemm = handles[key] = GraphGemm(stream, cupy, tf32=cublas_tf32(np.float32))
    else:
        handles.move_to_end(key)
    return gemm


def split_k(m, n, k):
    """``(chunk, chunks)`` of the split-K product of an ``m x k`` by ``k x n``
    matrix (``chunks`` full chunks of ``chunk`` of the inner dimension, then
    the rest), or None to compute it as one GEMM.  A function of the shape
    alone: a product has the same bits in every call, eager or captured."""
    tiles = -(-m // 64) * -(-n // 64)
    if tiles >= SPLIT_TILES or k < SPLIT_MIN_K or k < 16 * max(m, n):
        return None
    chunk = max(SPLIT_CHUNK, -(-k // max(2, SPLIT_CTAS // tiles)))
    return chunk, k // chunk


def _check(status, what):
    if status != 0:
        raise RuntimeError(f"cuBLAS {what} failed (status {status})")


def _layout(x):
    """``(op, ld)`` with which cuBLAS reads the column-major matrix ``x^T``
    from ``x``'s memory (2-D, strides in elements): ``x`` row-major with rows
    ``ld`` apart is ``x^T`` column-major (``op`` N); ``x`` column-major is
    ``x`` itself (``op`` T).  None when neither."""
    r, c = x.shape
    size = x.itemsize
    sr, sc = x.strides
    if sr % size or sc % size:
        return None
    sr, sc = sr // size, sc // size
    if c == 1:
        sc = 1
    if r == 1:  # (one row: any leading dimension that is valid)
        sr = max(c, 1) if sc == 1 else 1
    if sc == 1 and sr >= max(c, 1):
        return _OP_N, sr
    if sr == 1 and sc >= max(r, 1):
        return _OP_T, sc
    return None


class GraphGemm:
    """A cuBLAS handle bound to one stream, with its own workspace:
    ``gemm(out, a, b)`` enqueues ``out = a @ b`` on that stream (True), or
    declines (False) where one GEMM cannot compute it."""

    def __init__(self, stream, xp, tf32=False):
        lib = _lib()
        if lib is None:
            raise RuntimeError("cupy's cuBLAS library was not found in this process")
        handle = ctypes.c_void_p()
        _check(lib.cublasCreate_v2(ctypes.byref(handle)), "handle creation")
        self._finalizer = weakref.finalize(self, lib.cublasDestroy_v2, handle)
        self._finalizer.atexit = False  # (not after the CUDA context is gone)
        self.lib, self.handle = lib, handle
        self.xp, self.stream, self._buffers = xp, stream, {}
        self.workspace = _device_empty(xp, (WORKSPACE_BYTES,), np.uint8)
        _check(lib.cublasSetStream_v2(handle, ctypes.c_void_p(stream.ptr)), "setStream")
        _check(lib.cublasSetWorkspace_v2(handle, ctypes.c_void_p(self.workspace.data.ptr),
                                         WORKSPACE_BYTES), "setWorkspace")
        _check(lib.cublasSetMathMode(handle, _TF32_MATH if tf32 else _DEFAULT_MATH),
               "setMathMode")

    def __call__(self, out, a, b):
        dt = out.dtype
        if dt not in _ONE or a.dtype != dt or b.dtype != dt or a.ndim > 3 or \
                b.ndim > 3 or a.ndim == 0 or b.ndim == 0:
            return False
        # every operand as a stack (1 or batch, rows, columns): views, never a reshape
        # that could copy (cuBLAS must write the caller's memory)
        if a.ndim == 3 or b.ndim == 3:  # a stack: one strided-batched GEMM
            if a.ndim == 1:  # (k,) @ (b, k, n): a row, against each matrix of the stack
                a, out = a[None, None, :], out[:, None, :] if out.ndim == 2 else out
            elif b.ndim == 1:  # (b, m, k) @ (k,): a column
                b, out = b[None, :, None], out[:, :, None] if out.ndim == 2 else out
            if out.ndim != 3:
                return False
            a3, b3, out3 = (x if x.ndim == 3 else x[None] for x in (a, b, out))
        else:
            a3 = (a[None, :] if a.ndim == 1 else a)[None]
            b3 = (b[:, None] if b.ndim == 1 else b)[None]
            out3 = (out[None, None] if a.ndim == 1 and b.ndim == 1 else out[None, :]
                    if a.ndim == 1 else out[:, None] if b.ndim == 1 else out)[None]
        batch, m, k, n = out3.shape[0], a3.shape[1], a3.shape[2], b3.shape[2]
        if 0 in (batch, m, n, k) or a3.shape[0] not in (1, batch) or \
                b3.shape[0] not in (1, batch) or b3.shape[1] != k or out3.shape[1:] != (m, n):
            return False
        a2, sa, la = self._operand(0, a3)
        b2, sb, lb = self._operand(1, b3)
        o2, sc, lc = _matrix_of(out3)
        split = split_k(m, n, k) if batch == 1 else None
        staged = None
        if lc is None or lc[0] != _OP_N or (batch > 1 and sc == 0) or (
                split is not None and m > 1 and lc[1] != n):  # (split-K: a vector)
            staged = self._buffer(2, out3.shape, dt)  # (then copied into the caller's)
            o2, sc, lc = staged[0], m * n, (_OP_N, n)
        # row-major out = a @ b is column-major out^T = b^T a^T
        one, zero = ctypes.addressof(_ONE[dt]), ctypes.addressof(_ZERO[dt])
        if split is not None:
            self._split(o2, a2, la, b2, lb, (m, n, k), split)
        elif batch == 1:
            fn = self._routine("gemm_v2", dt)
            _check(fn(self.handle, lb[0], la[0], n, m, k, one, b2.data.ptr, lb[1],
                      a2.data.ptr, la[1], zero, o2.data.ptr, lc[1]), "gemm")
        else:
            fn = self._routine("gemmStridedBatched", dt)
            _check(fn(self.handle, lb[0], la[0], n, m, k, one, b2.data.ptr, lb[1], sb,
                      a2.data.ptr, la[1], sa, zero, o2.data.ptr, lc[1], sc, batch), "gemm")
        if staged is not None:
            self.xp.copyto(out3, staged)
        return True

    def _routine(self, name, dtype):
        """cuBLAS's routine ``name`` (``"gemm_v2"``, ...) for ``dtype``: its D
        (float64) or S (float32) variant."""
        return getattr(self.lib, ("cublasD" if dtype == np.float64 else "cublasS") + name)

    def _split(self, o2, a2, la, b2, lb, mnk, split):
        """``o2 = a2 @ b2`` (C-contiguous ``o2``) by split-K (:func:`split_k`):
        the chunks' products side by side in a buffer, one strided-batched
        GEMM (and one GEMM for the rest), then their sum by one GEMV with a
        vector of ones -- the order of additions fixed by the shape."""
        (m, n, k), (chunk, chunks) = mnk, split
        dt, size = o2.dtype, o2.itemsize
        rest = k - chunk * chunks
        parts = chunks + (rest > 0)
        buf = self._buffer(3, (parts, m, n), dt)
        ones = self._buffers.get((4, parts, dt.str))
        if ones is None:
            ones = self._buffers[(4, parts, dt.str)] = _device_empty(self.xp, (parts,), dt)
            ones.fill(1)
        # where chunk j of the inner dimension starts in each operand (elements)
        step_a = chunk if la[0] == _OP_N else chunk * la[1]
        step_b = chunk * lb[1] if lb[0] == _OP_N else chunk
        one, zero = ctypes.addressof(_ONE[dt]), ctypes.addressof(_ZERO[dt])
        fn = self._routine("gemmStridedBatched", dt)
        _check(fn(self.handle, lb[0], la[0], n, m, chunk, one, b2.data.ptr, lb[1], step_b,
                  a2.data.ptr, la[1], step_a, zero, buf.data.ptr, n, m * n, chunks),
               "gemm (split-K)")
        if rest:
            fn = self._routine("gemm_v2", dt)
            _check(fn(self.handle, lb[0], la[0], n, m, rest, one,
                      b2.data.ptr + chunks * step_b * size, lb[1],
                      a2.data.ptr + chunks * step_a * size, la[1], zero,
                      buf.data.ptr + chunks * m * n * size, n), "gemm (split-K rest)")
        fn = self._routine("gemv_v2", dt)
        _check(fn(self.handle, _OP_N, m * n, parts, one, buf.data.ptr, m * n,
                  ones.data.ptr, 1, zero, o2.data.ptr, 1), "gemv (split-K sum)")

    def _operand(self, slot, x3):
        """``(first matrix, batch stride, layout)`` of stack operand ``x3`` as
        cuBLAS reads it: in place, or copied into a buffer of this handle's
        where its strides are neither row- nor column-major (a broadcast, a
        strided slice) -- cupy's matmul copies such operands too, into memory
        it allocates."""
        x2, stride, lay = _matrix_of(x3)
        if lay is not None:
            return x2, stride, lay
        if x2 is not None and stride == 0:  # one matrix for the whole stack
            buf = self._buffer(slot, x2.shape, x2.dtype)
            self.xp.copyto(buf, x2)
            return buf, 0, _layout(buf)
        buf = self._buffer(slot, x3.shape, x3.dtype)
        self.xp.copyto(buf, x3)
        return buf[0], x3.shape[1] * x3.shape[2], _layout(buf[0])

    def _buffer(self, slot, shape, dtype):
        """This handle's C-contiguous buffer for operand ``slot`` (0, 1: a and
        b; 2: the result) of ``shape``: made at the first call that needs it
        (a graph's capture is preceded by such a call), then reused -- calls
        on the handle's stream run one after another."""
        key = (slot, tuple(shape), np.dtype(dtype).str)
        buf = self._buffers.get(key)
        if buf is None:
            buf = self._buffers[key] = _device_empty(self.xp, shape, dtype)
        return buf

    def trsm(self, lower, b, side):
        """In place on the C-contiguous matrix ``b``, with ``lower`` a
        C-contiguous lower-triangular matrix ``L`` (its other triangle not
        read): ``side`` ``"left_t"``: ``b <- L^-T b``; ``"right"``: ``b <- b
        L^-1``.  False (nothing done) where the operands do not fit."""
        dt = b.dtype
        if dt not in _ONE or lower.dtype != dt or lower.ndim != 2 or b.ndim != 2 or \
                not (lower.flags.c_contiguous and b.flags.c_contiguous) or b.size == 0:
            return False
        n = lower.shape[0]
        rows, cols = b.shape
        if lower.shape != (n, n) or (rows if side == "left_t" else cols) != n:
            return False
        # column-major, b is b^T (cols x rows, ld cols) and L is the upper L^T
        # left_t: b^T <- b^T L^-1, the right side, op T of the upper L^T
        # right: b^T <- L^-T b^T, the left side, op N of the upper L^T
        fn = self._routine("trsm_v2", dt)
        if side == "left_t":
            args = (_RIGHT, _UPPER, _OP_T, _NON_UNIT, cols, rows)
        else:
            args = (_LEFT, _UPPER, _OP_N, _NON_UNIT, cols, rows)
        _check(fn(self.handle, *args, ctypes.addressof(_ONE[dt]), lower.data.ptr, n,
                  b.data.ptr, cols), "trsm")
        return True


def _device_empty(xp, shape, dtype):
    """An array from cupy's memory pool itself (not through the allocator in
    use: a device linear-algebra run's, which records its requests), or
    ``xp.empty`` for an array module without a pool (the host tests)."""
    pool = getattr(xp, "get_default_memory_pool", None)
    if pool is None:
        return xp.empty(shape, dtype)
    dtype = np.dtype(dtype)
    nbytes = max(1, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
    return xp.ndarray(shape, dtype, memptr=pool().malloc(nbytes))


def _matrix_of(x3):
    """``(first matrix, batch stride in elements, layout)`` of a stack
    ``x3``; the layout (:func:`_layout`) None where cuBLAS cannot read it in
    place (and the matrix None where the batch stride is not a stride)."""
    if x3.shape[0] == 1 or x3.strides[0] == 0:
        x2, stride = x3[0], 0
    elif x3.strides[0] % x3.itemsize or x3.strides[0] < 0:
        return None, None, None
    else:
        x2, stride = x3[0], x3.strides[0] // x3.itemsize
    return x2, stride, _layout(x2)
