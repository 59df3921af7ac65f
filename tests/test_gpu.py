"""The GPU backend on a real device (cupy + an NVIDIA GPU).  Skipped, with
the reason, where either is missing -- CI and most machines; the program and
its CUDA are checked without a GPU in test_cupy_program.py and
test_cuda_source.py."""

import numpy as np
import pytest
from conftest import rand
from test_coverage import CASES
from test_cupy_program import FUNCTIONS, exp_sum, extrema, mlp, rosen, vec

import hybridad as ha
from hybridad.backends.cuda.program import cupy_available

_OK, _WHY = cupy_available()
pytestmark = pytest.mark.skipif(not _OK, reason=f"GPU tests need cupy and a CUDA GPU: {_WHY}")


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


class CountingHook:
    """Counts device allocations through cupy's memory pool (every malloc,
    served from the pool's cache or not)."""

    def __init__(self, cp):
        from cupy.cuda import memory_hook

        counter = self

        class Hook(memory_hook.MemoryHook):
            name = "hybridad-counter"

            def malloc_preprocess(self, **kwargs):
                counter.mallocs += 1
                if len(counter.where) < 4:  # (where the first ones came from, for the report)
                    import traceback

                    frames = [f"{fr.filename.rsplit('/', 2)[-1]}:{fr.lineno} {fr.name}"
                              for fr in traceback.extract_stack()[:-1]
                              if "hybridad" in fr.filename or "cupy" in fr.filename]
                    counter.where.append(f"{kwargs.get('mem_size')} B: " +
                                         " <- ".join(reversed(frames[-8:])))

        self.hook, self.mallocs, self.where = Hook(), 0, []

    def __enter__(self):
        self.hook.__enter__()
        return self

    def __exit__(self, *exc):
        return self.hook.__exit__(*exc)


def _on_device(cp, args):
    return tuple(cp.asarray(a) for a in args)


def _check(cp, f, args, argnums, rtol=1e-12):
    ref = ha.gradient(f, *args, argnums=argnums, backend="numpy")
    res = ha.gradient(f, *_on_device(cp, args), argnums=argnums)  # cupy picked by the arrays
    grads = res.gradient if isinstance(argnums, tuple) else (res.gradient,)
    refs = ref.gradient if isinstance(argnums, tuple) else (ref.gradient,)
    assert isinstance(res.value, cp.ndarray)
    np.testing.assert_allclose(float(res.value), float(ref.value), rtol=rtol)
    for g, r in zip(grads, refs, strict=True):
        assert isinstance(g, cp.ndarray)
        np.testing.assert_allclose(cp.asnumpy(g), r, rtol=rtol,
                                   atol=rtol * max(1.0, np.abs(r).max()))


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_functions_against_the_numpy_backend(cp, name):
    f, make, argnums = FUNCTIONS[name]
    _check(cp, f, make(), argnums)


@pytest.mark.parametrize("name", sorted(CASES))
def test_coverage_cases(cp, name):
    _check(cp, CASES[name], (rand((4, 5), seed=sum(map(ord, name))),), 0, rtol=1e-10)


def test_float32(cp):
    x = rand((1000,)).astype(np.float32)
    res = ha.gradient(exp_sum, cp.asarray(x))
    assert res.gradient.dtype == np.float32
    np.testing.assert_allclose(cp.asnumpy(res.gradient),
                               ha.gradient(exp_sum, x.astype(np.float64)).gradient, rtol=1e-4)


def _allocates_nothing(cp, plan, args, res, n):
    """``plan.gradient(*args, out=res)`` ``n`` times (after 3 to warm up) makes
    no device allocation."""
    for _ in range(3):
        plan.gradient(*args, out=res)
    cp.cuda.Device().synchronize()
    with CountingHook(cp) as hook:
        for _ in range(n):
            plan.gradient(*args, out=res)
        cp.cuda.Device().synchronize()
    assert hook.mallocs == 0, "\n".join(hook.where)


@pytest.mark.parametrize("cuda_graph", [None, False, True])
def test_zero_device_allocations_per_call(cp, cuda_graph):
    args = _on_device(cp, FUNCTIONS["mlp"][1]())
    plan = ha.compile(mlp, *args, argnums=(0, 1, 2), cuda_graph=cuda_graph)
    res = plan.new_result()
    _allocates_nothing(cp, plan, args, res, 50)
    ref = ha.gradient(mlp, *FUNCTIONS["mlp"][1](), argnums=(0, 1, 2), backend="numpy")
    for g, r in zip(res.gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(cp.asnumpy(g), r, rtol=1e-12)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_default_plans_replay_graphs_with_the_same_bits(cp, name):
    # cuda_graph=None (the default): eager, then captured when the same arrays
    # come back, then replayed -- every call the same bits (the products go
    # through the same cuBLAS handles in and out of the graph)
    f, make, argnums = FUNCTIONS[name]
    args = _on_device(cp, make())
    plan = ha.compile(f, *args, argnums=argnums)
    res = plan.new_result()
    seen = []
    for _ in range(4):
        plan.gradient(*args, out=res)
        grads = res.gradient if isinstance(res.gradient, tuple) else (res.gradient,)
        seen.append([cp.asnumpy(res.value)] + [cp.asnumpy(g) for g in grads])
    assert plan._graph.key is not None and plan._graph.segments == 1
    for later in seen[1:]:
        for a, b in zip(seen[0], later, strict=True):
            np.testing.assert_array_equal(a, b)
    other = plan.new_result()  # other arrays: eager, the same bits
    plan.gradient(*args, out=other)
    np.testing.assert_array_equal(cp.asnumpy(other.value), seen[0][0])


def test_cuda_graph_follows_new_values_in_the_same_arrays(cp):
    x = cp.asarray(rand((100,)))
    plan = ha.compile(exp_sum, x, cuda_graph=True)
    res = plan.new_result()
    for step in range(3):
        x += 0.01 * step  # in place: the graph replays over the new values
        plan.gradient(x, out=res)
        ref = ha.gradient(exp_sum, cp.asnumpy(x), backend="numpy")
        np.testing.assert_allclose(cp.asnumpy(res.gradient), ref.gradient, rtol=1e-12)


def test_cuda_graph_with_matmuls_follows_new_values(cp):
    # cupy refuses cuBLAS inside a capture: the graph runner enqueues the
    # products' GEMMs on its own cuBLAS handle (backends/cuda/cublas_capture.py),
    # so the whole step is one graph
    host = FUNCTIONS["mlp"][1]()
    args = _on_device(cp, host)
    plan = ha.compile(mlp, *args, argnums=(0, 1, 2), cuda_graph=True)
    res = plan.new_result()
    for step in range(3):
        for a in args[:3]:
            a *= 1.0 + 0.1 * step  # in place: the same pointers, new values
        plan.gradient(*args, out=res)
        ref = ha.gradient(mlp, *[cp.asnumpy(a) for a in args], argnums=(0, 1, 2),
                          backend="numpy")
        np.testing.assert_allclose(float(res.value), float(ref.value), rtol=1e-12)
        for g, r in zip(res.gradient, ref.gradient, strict=True):
            np.testing.assert_allclose(cp.asnumpy(g), r, rtol=1e-12)
    assert plan._graph.segments == 1
    assert plan.matmul_precision == "float64 by cuBLAS in float64"


def _one_graph(cp, f, host, argnums, dtype):
    """``(plan, device args, result)`` of ``f``'s plan captured as one CUDA graph
    (cuda_graph=True): no device allocation per call, the numpy backend's
    gradient (in float64) to its precision."""
    ref = ha.gradient(f, *[a.astype(np.float64) for a in host], argnums=argnums,
                      backend="numpy")
    args = _on_device(cp, host)
    plan = ha.compile(f, *args, argnums=argnums, cuda_graph=True)
    res = plan.new_result()
    _allocates_nothing(cp, plan, args, res, 5)
    tol = 1e-12 if dtype == np.float64 else 2e-5
    for g, r in zip(res.gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(cp.asnumpy(g), r, rtol=tol, atol=tol * np.abs(r).max())
    assert plan._graph.segments == 1
    return plan, args, res


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_cuda_graph_captures_cublas_products(cp, dtype):
    # transposed views, vectors, a long contraction (k = 300): each one GEMM in the graph
    def layouts(A, B, C):
        return np.sum(np.tanh(A @ B) ** 2) + np.sum((A.T @ C) ** 2) + \
            np.sum(np.exp(0.01 * (A.T @ (A @ B[:, 0])))) + np.sum(np.cos(C[:, 1] @ A))

    host = tuple(a.astype(dtype) for a in (rand((7, 300), seed=1), rand((300, 5), seed=2),
                                           rand((7, 4), seed=3)))
    plan, args, res = _one_graph(cp, layouts, host, (0, 1, 2), dtype)
    again = plan.gradient(*args)  # replays: the same bits
    for g, h in zip(again.gradient, res.gradient, strict=True):
        assert cp.array_equal(g, h)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_long_products_split_k_in_the_graph(cp, dtype):
    # a weight's gradient over a batch (16 x 6000 x 16) and a row against a
    # tall matrix: split-K (a strided-batched GEMM and a GEMV) inside the graph
    from hybridad.backends.cuda.cublas_capture import split_k

    assert split_k(16, 16, 6000) is not None and split_k(1, 16, 6000) is not None

    def layer(W, v, X):
        return np.sum(np.tanh(X @ W) ** 2) + np.sum(np.sin(v @ X))

    host = tuple(a.astype(dtype) for a in (rand((16, 16), seed=1) / 4, rand(6000, seed=2),
                                           rand((6000, 16), seed=3)))
    plan, args, res = _one_graph(cp, layer, host, (0, 1), dtype)
    eager = ha.compile(layer, *args, argnums=(0, 1), cuda_graph=False).gradient(*args)
    for g, h in zip(eager.gradient, res.gradient, strict=True):  # (eager: the same bits)
        assert cp.array_equal(g, h)


def test_cuda_graph_with_cublas_products_in_segments(cp, monkeypatch):
    # HYBRIDAD_CUDA_PRODUCTS=segments: the graph is captured in segments around
    # cupy's matmuls, which replay between them
    monkeypatch.setenv("HYBRIDAD_CUDA_PRODUCTS", "segments")
    host = FUNCTIONS["mlp"][1]()
    args = _on_device(cp, host)
    plan = ha.compile(mlp, *args, argnums=(0, 1, 2), cuda_graph=True)
    res = plan.new_result()
    plan.gradient(*args, out=res)
    plan.gradient(*args, out=res)
    ref = ha.gradient(mlp, *host, argnums=(0, 1, 2), backend="numpy")
    for g, r in zip(res.gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(cp.asnumpy(g), r, rtol=1e-12)
    assert plan._graph.segments > 1


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_matrix_products_as_kernels_on_the_device(cp, dtype, monkeypatch):
    from test_cupy_program import products

    monkeypatch.setenv("HYBRIDAD_CUDA_PRODUCTS", "kernels")
    host = tuple(a.astype(dtype) for a in (rand((7, 300), seed=1), rand((300, 5), seed=2),
                                           rand((7, 4), seed=3)))
    ref = ha.gradient(products, *[a.astype(np.float64) for a in host], argnums=(0, 1, 2),
                      backend="numpy")
    res = ha.gradient(products, *_on_device(cp, host), argnums=(0, 1, 2))
    tol = 1e-13 if dtype == np.float64 else 1e-6
    for g, r in zip(res.gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(cp.asnumpy(g), r, rtol=tol, atol=tol * np.abs(r).max())


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_max_and_min_on_the_device(cp, dtype):
    x, y = rand((300, 7), seed=5, dtype=dtype), rand((70000,), seed=6, dtype=dtype)
    x_nan = x.copy()
    x_nan[150, 3] = np.nan
    plan = ha.compile(extrema, cp.asarray(x), cp.asarray(y), argnums=(0, 1))
    rtol = 1e-6 if dtype == np.float32 else 1e-13
    for a in (x, x_nan):
        got = plan.gradient(cp.asarray(a), cp.asarray(y))
        want = ha.gradient(extrema, a, y, argnums=(0, 1), backend="numpy")
        np.testing.assert_allclose(float(got.value), float(want.value), rtol=rtol)
        for g, w in zip(got.gradient, want.gradient, strict=True):
            np.testing.assert_allclose(cp.asnumpy(g), w, rtol=rtol, atol=rtol)


def test_hessian_hvp_and_jacobian_on_the_device(cp):
    x = rand((30,), seed=3)
    xd = cp.asarray(x)
    res = ha.hessian(rosen, xd)
    assert isinstance(res.hessian, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(res.hessian),
                               ha.hessian(rosen, x, backend="numpy").hessian, rtol=1e-11)
    v = rand((30,), seed=4)
    np.testing.assert_allclose(cp.asnumpy(ha.hvp(rosen, xd, cp.asarray(v)).hvp),
                               ha.hvp(rosen, x, v, backend="numpy").hvp, rtol=1e-11)
    for mode in ("forward", "reverse"):
        np.testing.assert_allclose(cp.asnumpy(ha.jacobian(vec, xd[:5], mode=mode).jacobian),
                                   ha.jacobian(vec, x[:5], mode=mode, backend="numpy").jacobian,
                                   rtol=1e-12)


@pytest.mark.parametrize("name", ["euler", "scan", "nested", "rolled"])
@pytest.mark.parametrize("cuda_graph", [False, True])
def test_loops_on_the_device(cp, name, cuda_graph):
    # the host runs the iterations, each launching the body's kernels; with
    # cuda_graph=True the iterations are captured (the body's products its own
    # kernels, as the plan's); no device allocation per call
    from test_cupy_program import rolled_python_loop
    from test_loops import W0, X0, euler_loop, nested_loop, scan_loop

    f = {"euler": euler_loop, "scan": scan_loop, "nested": nested_loop,
         "rolled": rolled_python_loop}[name]
    args = _on_device(cp, (X0, W0))
    plan = ha.compile(f, *args, argnums=(0, 1), cuda_graph=cuda_graph)
    assert any(n.op == "loop" for n in plan.graph.nodes)
    res = plan.new_result()
    _allocates_nothing(cp, plan, args, res, 10)
    ref = ha.gradient(f, X0, W0, argnums=(0, 1), backend="numpy")
    np.testing.assert_allclose(float(res.value), float(ref.value), rtol=1e-12)
    for g, r in zip(res.gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(cp.asnumpy(g), r, rtol=1e-11, atol=1e-13)


def test_hessian_through_a_loop_on_the_device(cp):
    from test_loops import W0, X0, euler_loop

    got = ha.hessian(euler_loop, *_on_device(cp, (X0, W0)))
    want = ha.hessian(euler_loop, X0, W0, backend="numpy")
    np.testing.assert_allclose(cp.asnumpy(got.hessian), want.hessian, rtol=1e-11,
                               atol=1e-12)


@pytest.mark.parametrize("name", ["gp", "dets", "spectra"])
def test_linear_algebra_on_the_device(cp, name):
    from test_cupy_program import dets, gp_loss, spectra

    # (spectra: cuSOLVER's syevd, gesvd and geev, to their rounding, not LAPACK's)
    f, args, argnums, rtol = {
        "gp": (gp_loss, (np.linspace(0.0, 3.0, 12), rand((12,), seed=4)), (0, 1), 1e-11),
        "dets": (dets, (rand((4, 4), seed=5) / 3,), 0, 1e-11),
        "spectra": (spectra, (rand((4, 4), seed=7) / 2,), 0, 1e-9)}[name]
    _check(cp, f, args, argnums, rtol=rtol)
    # what cupy.linalg allocates comes from the program's workspace after the first call
    dev = _on_device(cp, args)
    plan = ha.compile(f, *dev, argnums=argnums)
    _allocates_nothing(cp, plan, dev, plan.new_result(), 5)
    with pytest.raises(np.linalg.LinAlgError, match="positive definite"):
        ha.gradient(lambda a: np.sum(np.linalg.cholesky(a)), cp.asarray(-np.eye(3)))


@pytest.mark.parametrize("tilt", [0.0, 0.05], ids=["symmetric", "not symmetric"])
def test_solves_by_a_cholesky_factor_on_the_device(cp, tilt):
    # (hybridad/transforms/factors.py: cho_solve by the factor, trsm twice, where the
    # matrix is symmetric; numpy's solve where it is not)
    from test_factors import gp_parts

    def f(theta, X, y):
        return gp_parts(theta, X, y, False, tilt)

    args = (np.array([0.1, np.log(0.5)]), rand((40, 2), seed=21), rand((40,), seed=22))
    _check(cp, f, args, (0, 1, 2), rtol=1e-10)
    dev = _on_device(cp, args)
    plan = ha.compile(f, *dev, argnums=(0, 1, 2))
    assert sum(n.op == "cho_solve" for n in plan.graph.nodes) == 2
    _allocates_nothing(cp, plan, dev, plan.new_result(), 5)


def element_writes(x):
    # element and slice writes (ops/writes): scatters into a fresh array, read back
    y = np.zeros_like(x)
    y[1:] = x[:-1] * 2
    y[0] = x[-1] ** 2
    y[2] += np.sin(x[3])
    return np.sum(y ** 2) + np.sum(np.where(x > 0.5, x, 0.0) ** 3)


def complex_argument(z):
    # a real value of a complex argument: the gradient is conj(df/dz) as in JAX
    return np.real(np.sum(z * np.conj(z) + np.sin(z) * np.exp(1j * np.abs(z))))


def complex_values(x):
    return np.sum(np.abs(np.exp(1j * x) * (x + 2j)) ** 2)


@pytest.mark.parametrize("name", ["writes", "complex_argument", "complex_values"])
@pytest.mark.parametrize("cuda_graph", [False, True])
def test_writes_and_complex_numbers_on_the_device(cp, name, cuda_graph):
    x = np.linspace(0.1, 1.0, 33)
    f, a = {"writes": (element_writes, x),
            "complex_argument": (complex_argument, x + 1j * x[::-1]),
            "complex_values": (complex_values, x)}[name]
    _check(cp, f, (a,), 0, rtol=1e-12)
    dev = _on_device(cp, (a,))
    if a.dtype.kind == "c":  # (complex arguments: ha.gradient, as on the CPU)
        res = ha.gradient(f, *dev)
        for _ in range(3):
            ha.gradient(f, *dev, out=res)
        cp.cuda.Device().synchronize()
        with CountingHook(cp) as hook:
            for _ in range(5):
                ha.gradient(f, *dev, out=res)
            cp.cuda.Device().synchronize()
        assert hook.mallocs == 0, "\n".join(hook.where)
    else:
        plan = ha.compile(f, *dev, cuda_graph=cuda_graph)
        res = plan.new_result()
        _allocates_nothing(cp, plan, dev, res, 10)
    assert isinstance(res.gradient, cp.ndarray) and res.gradient.dtype == a.dtype


def spectral(x):
    spec = np.fft.rfft(x) * np.exp(-0.01 * np.arange(x.size // 2 + 1))
    z = np.fft.fft(x * (1 + 1j) + np.fft.irfft(spec * spec, x.size))
    return np.sum(np.abs(z) ** 2) + np.sum(np.fft.ifft(z, norm="ortho").real ** 3)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("cuda_graph", [False, True])
def test_fourier_transforms_on_the_device(cp, dtype, cuda_graph):
    # cuFFT through the program's FFT runs (hybridad/backends/cuda/fft.py):
    # cupy's results and cuFFT's work area from the program's workspace
    x = np.linspace(-1.0, 1.0, 1000).astype(dtype)
    _check(cp, spectral, (x,), 0, rtol=1e-11 if dtype == np.float64 else 2e-4)
    dev = _on_device(cp, (x,))
    plan = ha.compile(spectral, *dev, cuda_graph=cuda_graph)
    _allocates_nothing(cp, plan, dev, plan.new_result(), 10)


def test_host_calls_are_refused_by_name_on_the_device(cp):
    import scipy.special as sc

    x = cp.linspace(0.1, 1.0, 5)
    with pytest.raises(NotImplementedError, match=r"scipy\.special\.comb .*backend='numba'"):
        ha.gradient(lambda x, y: np.sum(x * sc.comb(y, 2.0)), x, x + 3)
