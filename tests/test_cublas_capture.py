"""How a CUDA graph's capture hands matrix products to cuBLAS
(hybridad/backends/cuda/cublas_capture.py), without a GPU: the GEMM's
arguments -- operations, sizes, leading dimensions -- for every operand
layout, run by a column-major GEMM over host memory as cuBLAS would read it.
On a device, test_gpu.py runs the real thing (one graph per plan)."""

import ctypes
import types

import numpy as np
import pytest
from conftest import rand

from hybridad.backends.cuda import cublas_capture
from hybridad.backends.cuda.cublas_capture import _OP_N, GraphGemm


class Dev(np.ndarray):
    """A host array with cupy's ``data.ptr`` (the address of its first element)."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.__array_interface__["data"][0])


def _matrix(ptr, rows, cols, ld, dtype):
    """The column-major ``rows x cols`` matrix at ``ptr`` with leading dimension ``ld``."""
    size = np.dtype(dtype).itemsize
    count = (cols - 1) * ld + rows
    buf = (ctypes.c_char * (count * size)).from_address(ptr)
    flat = np.frombuffer(buf, dtype=dtype)
    return np.lib.stride_tricks.as_strided(flat, (rows, cols), (size, ld * size))


class HostBlas:
    """cuBLAS's gemm (``C = op(A) op(B)``, column-major, alpha 1, beta 0) over host memory."""

    def __init__(self):
        self.calls, self.batches = [], []

    def _gemm(self, dtype):
        def gemm(handle, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc):
            self.calls.append((ta, tb, m, n, k, lda, ldb, ldc))
            assert lda >= max(1, m if ta == _OP_N else k)
            assert ldb >= max(1, k if tb == _OP_N else n)
            assert ldc >= max(1, m)
            a = _matrix(A, *((m, k) if ta == _OP_N else (k, m)), lda, dtype)
            b = _matrix(B, *((k, n) if tb == _OP_N else (n, k)), ldb, dtype)
            c = _matrix(C, m, n, ldc, dtype)
            c[...] = (a if ta == _OP_N else a.T) @ (b if tb == _OP_N else b.T)
            return 0
        return gemm

    def _batched(self, dtype):
        gemm = self._gemm(dtype)
        size = np.dtype(dtype).itemsize

        def batched(handle, ta, tb, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC,
                    count):
            self.batches.append((sA, sB, sC, count))
            for j in range(count):
                gemm(handle, ta, tb, m, n, k, alpha, A + j * sA * size, lda, B + j * sB * size,
                     ldb, beta, C + j * sC * size, ldc)
            return 0
        return batched

    def _trsm(self, dtype):
        def trsm(handle, side, uplo, trans, diag, m, n, alpha, A, lda, B, ldb):
            self.calls.append(("trsm", side, uplo, trans, m, n, lda, ldb))
            k = m if side == 0 else n
            assert lda >= max(1, k) and ldb >= max(1, m) and diag == 0
            a = _matrix(A, k, k, lda, dtype)
            t = np.triu(a) if uplo == 1 else np.tril(a)  # (the other triangle not read)
            op = t.T if trans == 1 else t
            b = _matrix(B, m, n, ldb, dtype)
            b[...] = np.linalg.solve(op, b) if side == 0 else np.linalg.solve(op.T, b.T).T
            return 0
        return trsm

    def _gemv(self, dtype):
        def gemv(handle, trans, m, n, alpha, A, lda, x, incx, beta, y, incy):
            self.calls.append(("gemv", trans, m, n, lda, incx, incy))
            assert trans == _OP_N and lda >= max(1, m) and incx == incy == 1
            a = _matrix(A, m, n, lda, dtype)
            y_ = _matrix(y, m, 1, m, dtype)
            y_[:, 0] = a @ _matrix(x, n, 1, n, dtype)[:, 0]
            return 0
        return gemv

    #: the routines a handle calls: (this fake's maker, the dtype)
    ROUTINES = {"cublasDgemv_v2": ("_gemv", np.float64), "cublasSgemv_v2": ("_gemv", np.float32),
                "cublasDgemm_v2": ("_gemm", np.float64), "cublasSgemm_v2": ("_gemm", np.float32),
                "cublasDgemmStridedBatched": ("_batched", np.float64),
                "cublasSgemmStridedBatched": ("_batched", np.float32),
                "cublasDtrsm_v2": ("_trsm", np.float64), "cublasStrsm_v2": ("_trsm", np.float32)}

    def __getattr__(self, name):
        if name not in self.ROUTINES:
            raise AttributeError(name)
        maker, dtype = self.ROUTINES[name]
        return getattr(self, maker)(dtype)


class HostModule:
    """The two functions of cupy's module a handle calls (its buffers, copies)."""

    @staticmethod
    def empty(shape, dtype):
        return np.empty(shape, dtype).view(Dev)

    copyto = staticmethod(np.copyto)


@pytest.fixture
def gemm():
    g = GraphGemm.__new__(GraphGemm)
    g.lib, g.handle, g.xp, g._buffers = HostBlas(), None, HostModule, {}
    return g


def _dev(x):
    return np.asarray(x).view(Dev)


def _layouts(m, k, n, dtype):
    A, B = rand((m, k), seed=1).astype(dtype), rand((k, n), seed=2).astype(dtype)
    big = rand((2 * m + 1, 3 * k + 2), seed=3).astype(dtype)
    return {
        "contiguous": (_dev(A), _dev(B)),
        "transposed": (_dev(np.ascontiguousarray(A.T)).T, _dev(np.ascontiguousarray(B.T)).T),
        "mixed": (_dev(A), _dev(np.ascontiguousarray(B.T)).T),
        "rows apart": (_dev(big)[:m, 1:k + 1], _dev(B)),  # a slice: rows 3k+2 apart
        "vector b": (_dev(A), _dev(B[:, 0])),
        "vector a": (_dev(A[0]), _dev(B)),
        "vectors": (_dev(A[0]), _dev(B[:, 0])),
    }


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", ["contiguous", "transposed", "mixed", "rows apart",
                                  "vector b", "vector a", "vectors"])
@pytest.mark.parametrize("shape", [(7, 5, 3), (1, 4, 6), (5, 1, 2), (3, 6, 1)])
def test_every_layout_is_one_gemm(gemm, dtype, name, shape):
    a, b = _layouts(*shape, dtype)[name]
    want = np.asarray(a) @ np.asarray(b)
    out = _dev(np.full(want.shape, np.nan, dtype))
    assert gemm(out, a, b)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(np.asarray(out), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", ["both", "broadcast a", "broadcast b", "one of a",
                                  "transposed", "one matrix", "vector a", "vector b"])
def test_stacks_are_one_strided_batched_gemm(gemm, dtype, case):
    A, B = rand((3, 4, 5), seed=4).astype(dtype), rand((3, 5, 2), seed=5).astype(dtype)
    a, b = {"both": (A, B), "broadcast a": (A[0], B), "broadcast b": (A, B[1]),
            "one of a": (A[:1], B),
            "transposed": (np.swapaxes(np.ascontiguousarray(np.swapaxes(A, 1, 2)), 1, 2),
                           np.swapaxes(np.ascontiguousarray(np.swapaxes(B, 1, 2)), 1, 2)),
            "one matrix": (A[:1], B[:1]), "vector a": (A[0, 0], B),
            "vector b": (A, B[0, :, 0])}[case]
    want = np.matmul(a, b)
    out = _dev(np.full(want.shape, np.nan, dtype))
    assert gemm(out, _dev(a), _dev(b))
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(np.asarray(out), want, rtol=tol, atol=tol)
    assert len(gemm.lib.batches) == (0 if case == "one matrix" else 1)


def test_a_strided_output_row_is_written_in_place(gemm):
    a, b = _layouts(4, 3, 5, np.float64)["contiguous"]
    buf = _dev(np.zeros((4, 9)))
    out = buf[:, 2:7]  # rows 9 apart
    assert gemm(out, a, b)
    np.testing.assert_allclose(np.asarray(out), np.asarray(a) @ np.asarray(b), rtol=1e-13)
    assert not np.asarray(buf)[:, :2].any() and not np.asarray(buf)[:, 7:].any()


@pytest.mark.parametrize("case", ["column-major out", "strided a", "broadcast b",
                                  "broadcast stack", "strided stack out"])
def test_other_layouts_go_through_the_handles_buffers(gemm, case):
    # (cupy's matmul copies such operands too, into memory it allocates)
    a, b = _layouts(4, 3, 5, np.float64)["contiguous"]
    A = _dev(rand((2, 4, 3), seed=6))
    out = {"column-major out": _dev(np.zeros((5, 4))).T,
           "strided stack out": _dev(np.zeros((2, 4, 10)))[:, :, ::2]}.get(case)
    args = {"column-major out": (a, b),
            "strided a": (_dev(np.repeat(np.asarray(a), 2, axis=1))[:, ::2], b),
            "broadcast b": (a, _dev(np.broadcast_to(np.float64(0.5), (3, 5)))),
            "broadcast stack": (A, _dev(np.broadcast_to(np.asarray(b)[:, :1], (2, 3, 5)))),
            "strided stack out": (A, b)}[case]
    want = np.matmul(*[np.asarray(x) for x in args])
    if out is None:
        out = _dev(np.zeros(want.shape))
    for _ in range(2):  # (the second call reuses the buffers)
        assert gemm(out, *args)
        np.testing.assert_allclose(np.asarray(out), want, rtol=1e-13)
    assert len(gemm._buffers) == 1


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", ["contiguous", "transposed", "mixed", "rows apart",
                                  "vector b", "vector a"])
@pytest.mark.parametrize("shape", [(16, 4096, 16), (64, 4099, 64), (3, 5000, 1)])
def test_long_inner_dimensions_split_k(gemm, dtype, name, shape):
    # a small output over a long inner dimension (a weight's gradient over a
    # batch): the chunks' products in one strided-batched GEMM (and the rest's
    # in one GEMM), summed by one GEMV, into the caller's memory
    a, b = _layouts(*shape, dtype)[name]
    m, k, n = a.shape[0] if a.ndim == 2 else 1, shape[1], b.shape[1] if b.ndim == 2 else 1
    chunk, chunks = cublas_capture.split_k(m, n, k)
    assert chunks >= 2 and chunk * chunks <= k
    want = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    out = _dev(np.full(want.shape, np.nan, dtype))
    for _ in range(2):  # (the second call reuses the partials' buffer and the ones)
        assert gemm(out, a, b)
        tol = 1e-12 if dtype == np.float64 else 1e-5
        np.testing.assert_allclose(np.asarray(out), want, rtol=tol, atol=tol * 10)
    gemvs = [c for c in gemm.lib.calls if c[0] == "gemv"]
    assert len(gemvs) == 2 and gemvs[0][2:4] == (m * n, chunks + (k > chunk * chunks))
    assert [c[3] for c in gemm.lib.batches] == [chunks, chunks]


def test_split_k_is_for_small_outputs_of_long_products():
    split = cublas_capture.split_k
    assert split(16, 16, 10**5) is not None and split(64, 64, 10**4) is not None
    assert split(16, 16, 1000) is None  # (short: one GEMM)
    assert split(4096, 4096, 10**5) is None  # (many tiles already)
    assert split(512, 512, 4096) is None  # (not 16x longer than the output's side)
    for m, n, k in [(16, 16, 10**5), (1, 16, 10**5), (64, 64, 10**4), (100, 3, 9973)]:
        chunk, chunks = split(m, n, k)
        assert chunk >= cublas_capture.SPLIT_CHUNK and 2 <= chunks and chunk * chunks <= k


def test_what_one_gemm_cannot_do_is_declined(gemm):
    a, b = _layouts(4, 3, 5, np.float64)["contiguous"]
    out = _dev(np.zeros((4, 5)))
    assert not gemm(out, a.astype(np.float32), b)  # mixed dtypes
    assert not gemm(_dev(np.zeros((2, 2, 4, 5))), _dev(np.zeros((2, 2, 4, 3))), b)  # 2 axes
    assert not gemm(_dev(np.zeros((3, 4, 5))), _dev(np.zeros((2, 4, 3))), b)  # 2 against 3
    assert not gemm(_dev(np.zeros((4, 0))), a, _dev(np.zeros((3, 0))))  # empty
    assert not gemm(_dev(np.zeros((4, 5), np.int64)), a.astype(np.int64), b.astype(np.int64))
    assert gemm.lib.calls == [] and gemm._buffers == {}


def test_without_a_device_nothing_is_captured():
    # (here: cupy without a GPU, or no cupy) -- graphs use hybridad's own kernels
    from hybridad.backends.cuda.products import captured_products, own_products

    if cublas_capture.available():
        pytest.skip("a device with cuBLAS is present")
    assert not captured_products()
    assert own_products(True) and not own_products(False)


def test_a_thread_keeps_few_eager_handles(monkeypatch):
    # one handle (and workspace) per stream used, at most MAX_HANDLES of them: the
    # least recently used is dropped after its stream is synchronized
    import sys

    current, synced, made = [None], [], []

    class Stream:
        def __init__(self, ptr):
            self.ptr = ptr

        def synchronize(self):
            synced.append(self.ptr)

    class Handle:
        def __init__(self, stream, xp, tf32=False):
            self.stream = stream
            made.append(stream.ptr)

        def __call__(self, out, a, b):
            return True

    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(
        get_current_stream=lambda: current[0],
        runtime=types.SimpleNamespace(getDevice=lambda: 0)))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(cublas_capture, "GraphGemm", Handle)
    monkeypatch.setattr(cublas_capture._eager, "handles", None, raising=False)
    cap = cublas_capture.MAX_HANDLES
    for ptr in [*range(cap), 0, cap, 0, cap + 1]:
        current[0] = Stream(ptr)
        assert cublas_capture.eager_gemm(None, None, None)
    assert made == [*range(cap), cap, cap + 1]  # (stream 0's handle reused, kept recent)
    assert synced == [1, 2]


@pytest.mark.parametrize("side", ["left_t", "right"])
@pytest.mark.parametrize("shape", [(5, 5), (5, 3), (3, 5)])
def test_triangular_solves_in_place(gemm, side, shape):
    n = 5
    L = np.tril(rand((n, n), seed=7)) + 3 * np.eye(n)
    lower = _dev(L + np.triu(rand((n, n), seed=8), 1))  # (the upper triangle ignored)
    b0 = rand(shape, seed=9)
    fits = shape[0] == n if side == "left_t" else shape[1] == n
    b = _dev(b0.copy())
    assert gemm.trsm(lower, b, side) == fits
    if fits:
        want = np.linalg.solve(L.T, b0) if side == "left_t" else b0 @ np.linalg.inv(L)
        np.testing.assert_allclose(np.asarray(b), want, rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_array_equal(np.asarray(b), b0)
    assert not gemm.trsm(_dev(L)[:, ::-1], _dev(b0.copy()), side)  # not C-contiguous
