"""Matrix products by cuBLAS inside a CUDA graph's capture.

cupy refuses every cuBLAS call while a stream is captured (its ``setStream``
raises), although cuBLAS's GEMMs are capturable when the handle's stream is
the capturing stream and the handle has a workspace of its own, set before
the capture (cuBLAS's documentation, "CUDA Graphs Support"; PyTorch captures
its products so).  A :class:`GraphGemm` is such a handle, made for one
:class:`~hybridad.backends.cuda.program.CudaGraphRunner` (its stream, its
workspace: graphs of two plans never share one): the runner hands it each
matrix product the program makes while it captures, and it enqueues
``cublas<t>gemm`` through cuBLAS's C API (``ctypes``; the library cupy
loaded), so the product becomes a node of the graph and a plan's step with
products is one graph.  A stack of products (numpy's batch broadcasting over
one leading axis) is one strided-batched GEMM.  A product it cannot express
so (more batch axes, operands whose strides are neither row- nor
column-major, mixed dtypes) is declined, and the runner cuts the graph around it as before.

The handle's math mode follows cupy's: full float32 unless ``CUPY_TF32=1``
asked cupy for TF32 (``products.products_precision`` says which).
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref

import numpy as np

__all__ = ["GraphGemm", "available", "cublas_tf32", "eager_gemm"]

_OP_N, _OP_T = 0, 1
_DEFAULT_MATH, _TF32_MATH = 0, 3  # cublasMath_t
#: each handle's own workspace (cuBLAS asks for one to capture; its split-k
#: GEMMs use it)
WORKSPACE_BYTES = 8 << 20

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
    for name in ("cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2",
                 "cublasSetWorkspace_v2", "cublasSetMathMode", "cublasDgemm_v2",
                 "cublasSgemm_v2", "cublasDgemmStridedBatched", "cublasSgemmStridedBatched"):
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
    if _lib_unlocked() is None:
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


def _lib_unlocked():
    if not _library:
        _library.append(_find_library())
    return _library[0]


_eager = threading.local()  # {(device, stream pointer): GraphGemm} of this thread


def eager_gemm(out, a, b):
    """``out = a @ b`` by cuBLAS on the current stream, through a handle
    configured as the capture handles are (so that a product has the same
    bits in and out of a graph); False where one GEMM cannot compute it."""
    import cupy

    stream = cupy.cuda.get_current_stream()
    handles = getattr(_eager, "handles", None)
    if handles is None:
        handles = _eager.handles = {}
    key = (cupy.cuda.runtime.getDevice(), stream.ptr)
    gemm = handles.get(key)
    if gemm is None:
        gemm = handles[key] = GraphGemm(stream, cupy, tf32=cublas_tf32(np.float32))
    return gemm(out, a, b)


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
    """A cuBLAS handle bound to one capture stream, with its own workspace:
    ``gemm(out, a, b)`` enqueues ``out = a @ b`` on that stream (True), or
    declines (False) where one GEMM cannot compute it."""

    def __init__(self, stream, xp, tf32=False):
        lib = _lib()
        if lib is None:
            raise RuntimeError("cuBLAS is not available for capture here")
        handle = ctypes.c_void_p()
        _check(lib.cublasCreate_v2(ctypes.byref(handle)), "handle creation")
        self._finalizer = weakref.finalize(self, lib.cublasDestroy_v2, handle)
        self._finalizer.atexit = False  # (not after the CUDA context is gone)
        self.lib, self.handle = lib, handle
        self.workspace = xp.empty(WORKSPACE_BYTES, dtype=xp.uint8)
        _check(lib.cublasSetStream_v2(handle, ctypes.c_void_p(stream.ptr)), "setStream")
        _check(lib.cublasSetWorkspace_v2(handle, ctypes.c_void_p(self.workspace.data.ptr),
                                         WORKSPACE_BYTES), "setWorkspace")
        _check(lib.cublasSetMathMode(handle, _TF32_MATH if tf32 else _DEFAULT_MATH),
               "setMathMode")
        # host scalars (the default pointer mode): read as the call is captured
        self._one = {np.dtype(np.float64): ctypes.c_double(1.0),
                     np.dtype(np.float32): ctypes.c_float(1.0)}
        self._zero = {np.dtype(np.float64): ctypes.c_double(0.0),
                      np.dtype(np.float32): ctypes.c_float(0.0)}

    def __call__(self, out, a, b):
        dt = out.dtype
        if dt not in self._one or a.dtype != dt or b.dtype != dt or a.ndim > 3 or \
                b.ndim > 3 or a.ndim == 0 or b.ndim == 0:
            return False
        if a.ndim == 3 or b.ndim == 3:  # a stack: one strided-batched GEMM
            if a.ndim == 1 or b.ndim == 1 or out.ndim != 3:
                return False
            batch = out.shape[0]
            parts = [_matrix_of(x, batch) for x in (a, b, out)]
            if any(p is None for p in parts) or (batch > 1 and parts[2][1] == 0):
                return False
            (a2, sa), (b2, sb), (out2, sc) = parts
            if batch == 0:
                return False
        else:
            batch, sa, sb, sc = 1, 0, 0, 0
            a2 = a[None, :] if a.ndim == 1 else a
            b2 = b[:, None] if b.ndim == 1 else b
            # (views, never a reshape that could copy: cuBLAS must write the caller's memory)
            out2 = out[None, None] if a.ndim == 1 and b.ndim == 1 else out[None, :] \
                if a.ndim == 1 else out[:, None] if b.ndim == 1 else out
        m, k = a2.shape
        n = b2.shape[1]
        if m == 0 or n == 0 or k == 0 or b2.shape[0] != k or out2.shape != (m, n):
            return False
        la, lb, lc = _layout(a2), _layout(b2), _layout(out2)
        if la is None or lb is None or lc is None or lc[0] != _OP_N:
            return False
        # row-major out = a @ b is column-major out^T = b^T a^T
        one, zero = ctypes.addressof(self._one[dt]), ctypes.addressof(self._zero[dt])
        if batch == 1:
            fn = self.lib.cublasDgemm_v2 if dt == np.float64 else self.lib.cublasSgemm_v2
            status = fn(self.handle, lb[0], la[0], n, m, k, one, b2.data.ptr, lb[1],
                        a2.data.ptr, la[1], zero, out2.data.ptr, lc[1])
        else:
            fn = self.lib.cublasDgemmStridedBatched if dt == np.float64 else \
                self.lib.cublasSgemmStridedBatched
            status = fn(self.handle, lb[0], la[0], n, m, k, one, b2.data.ptr, lb[1], sb,
                        a2.data.ptr, la[1], sa, zero, out2.data.ptr, lc[1], sc, batch)
        _check(status, "gemm")
        return True


def _matrix_of(x, batch):
    """``(first matrix, batch stride in elements)`` of a stack operand of
    ``batch`` matrices (a 2-D or a one-matrix ``x``: stride 0, numpy's
    broadcasting), or None."""
    if x.ndim == 2:
        return x, 0
    if x.shape[0] == 1:
        return x[0], 0
    if x.shape[0] != batch or x.strides[0] % x.itemsize or x.strides[0] < 0:
        return None
    return x[0], x.strides[0] // x.itemsize
