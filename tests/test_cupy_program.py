"""The GPU backend's program (``backend="cupy"``) without a GPU.

The plan is built exactly as on a GPU -- fused regions as generated CUDA
kernels, reverse nodes through their ops' ``run``, one arena -- but with
numpy arrays that refuse what cupy refuses (``cupy_strict.STRICT``, where
cupy imports) and a launcher that builds the same CUDA source for the host
(the host's C++ compiler, nvcc compiling it for the device beside it) and
hands it to NVRTC as cupy would (``cuda_host.HostLauncher``).
What this leaves unverified is device launches, cupy's results and its
memory pool; the GPU tests in ``test_gpu.py`` check those where a GPU is
present.
"""

import numpy as np
import pytest
import scipy.special as sp
from conftest import rand
from cuda_host import NVCC, HostLauncher
from cupy_strict import STRICT
from test_coverage import CASES

import hybridad as ha
from hybridad.backends.cuda import program as cupy_backend
from hybridad.testing import assert_no_alloc

pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed: the cupy "
                                "backend's program cannot be run on the host here")


@pytest.fixture(scope="module")
def launcher():
    return HostLauncher()


@pytest.fixture(autouse=True)
def _host_device(monkeypatch, launcher):
    # arrays that refuse what cupy refuses (tests/cupy_strict.py), where cupy imports
    monkeypatch.setattr(cupy_backend, "device", lambda: (STRICT or np, launcher))


def exp_sum(x):
    r = np.sum(np.exp(-3 * (x + 1)))
    return r ** 2 + r ** 3 + r ** 4 / 4


def mlp(W1, b1, W2, X, Y):
    h = np.tanh(X @ W1 + b1)
    return np.mean((h @ W2 - Y) ** 2)


def views(x, A):
    # transposes, strided slices and broadcasts read in place by the kernels
    return np.sum(np.sin(A.T * x) * np.cos(A)) + np.sum(np.cos(x[::2, None] + A[::2, 1:]) ** 2) \
        + np.sum(x[1:] * x[:-1])


def selections(x):
    # lazy selections x[mask] (np.where of the whole arrays, no decision on the masks)
    y = np.cos(x)
    y[x > 0] *= 2
    return np.sum(np.log(x[x > 0])) + np.mean(x[x < 0.5] ** 2) + np.max(x[x > -0.5]) + \
        np.sum(y[np.nonzero(y > 0.5)] ** 2)


FUNCTIONS = {
    "exp_sum": (exp_sum, lambda: (rand((50,)),), 0),
    "mlp": (mlp, lambda: (rand((1, 8)), rand((8,)), rand((8, 1)), rand((30, 1)),
                          rand((30, 1), seed=3)), (0, 1, 2)),
    "views": (views, lambda: (rand((6,)), rand((6, 6), seed=2)), (0, 1)),
    # functions only CUDA's math library has on the host (its normcdfinv,
    # erfinv, normcdf): the host library is nvcc's own build (cuda_host.host_library)
    "cuda_math": (lambda x: np.sum(sp.ndtri(x) * sp.erfinv(2 * x - 1.1)) + np.sum(sp.ndtr(x) ** 2),
                  lambda: (rand((7,), lo=0.05, hi=0.95),), 0),
    "axis_reductions": (lambda x: np.sum(np.max(np.tanh(x), axis=0) ** 2) +
                        np.sum(np.sum(np.exp(x), axis=1, keepdims=True) * x),
                        lambda: (rand((4, 5)),), 0),
    "selections": (selections, lambda: (rand((40,)),), 0),
}


def check_against_numpy(f, args, argnums, rtol=1e-12):
    ref = ha.gradient(f, *args, argnums=argnums, backend="numpy")
    plan = ha.compile(f, *args, argnums=argnums, backend="cupy")
    res = plan.gradient(*args)
    np.testing.assert_allclose(float(res.value), float(ref.value), rtol=rtol)
    grads = res.gradient if isinstance(argnums, tuple) else (res.gradient,)
    refs = ref.gradient if isinstance(argnums, tuple) else (ref.gradient,)
    for g, r in zip(grads, refs, strict=True):
        np.testing.assert_allclose(g, r, rtol=rtol, atol=rtol * max(1.0, np.abs(r).max()))
    return plan


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_program_matches_the_numpy_backend(name):
    f, make, argnums = FUNCTIONS[name]
    plan = check_against_numpy(f, make(), argnums)
    assert any(n.op == "region" for n in plan.graph.nodes)
    assert "_rk0(" in plan.explain()


#: coverage cases whose CUDA programs the default suite builds: one or two of each
#: kind of generated kernel (reductions, scans, gathers and scatters, contractions,
#: elementwise laws, shape ops, sorts) and a refused one; every case runs with -m slow
#: (each is a build of its own kernels, host and device, ~0.5-1 s)
DEFAULT_CASES = {"var_std", "logaddexp_reduce", "cumprod", "fancy_indexing", "einsum",
                 "ufunc_aliases", "nan_to_num_sinc_real", "pad", "sort", "gradient",
                 "linalg_det"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n in DEFAULT_CASES else
                                               [pytest.mark.slow]) for n in sorted(CASES)])
def test_every_coverage_case(name):
    args = (rand((4, 5), seed=sum(map(ord, name))),)
    check_against_numpy(CASES[name], args, 0, rtol=1e-11)


def extrema(x, y):
    # float max / min: a fused region's (tanh, then max over axis 0), a node
    # over a transposed view, whole arrays; levels of partials (r > 64)
    return np.sum(np.max(np.tanh(x), axis=0)) + np.sum(np.min(x.T, axis=1) ** 2) \
        + np.max(x) * np.min(y)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_recomputed_products_are_summed_as_they_are_made(dtype):
    # inputs broadcast over part of the loop (a row, a column, a scalar): each
    # gradient the sum of a recomputed vjp region over the broadcast axes --
    # one kernel's sum levels, no temporary of the loop's shape
    def f(a, b, c, X):
        return np.sum(np.exp(a[:, None] * X + b[None, :] * c) ** 2)

    args = tuple(x.astype(dtype) for x in (rand((40,)) / 2, rand((30,), seed=2) / 2,
                                           np.array(0.3), rand((40, 30), seed=3)))
    plan = check_against_numpy(f, args, (0, 1, 2, 3), rtol=1e-12 if dtype == np.float64
                               else 2e-5)
    fused = [n for n in plan.graph.nodes if n.op == "region" and n.attrs.get("axis")]
    assert sorted(n.attrs["axis"] for n in fused) == [(0,), (0, 1), (1,)]
    assert not any(n.op == "sum" and n.args[0].op == "region" for n in plan.graph.nodes)
    big = [b for b in plan.memory.slots.values() if b[2] >= 40 * 30 * np.dtype(dtype).itemsize]
    assert len(big) <= 1  # (the vjp w.r.t. X alone: the gradient's own buffer is the caller's)
    assert_no_alloc(plan.gradient, *args, out=plan.new_result(), n=5)


def test_gpu_plans_choose_partials_by_traffic(monkeypatch):
    # exp-sum: the stored partial would be written by the forward sum and read
    # back (16 bytes an element); evaluating exp again reads x (8): recomputed
    # on the GPU, whatever the CPU's measured costs say
    x = rand((4000,))
    plan = check_against_numpy(exp_sum, (x,), 0)
    assert not any(n.op == "region_partial" and n.shape == x.shape for n in plan.graph.nodes)
    assert "GPU, by traffic" in plan.explain()
    monkeypatch.setenv("HYBRIDAD_CUDA_PARTIALS", "measured")  # (the CPU's rule, asked for)
    assert "GPU, by traffic" not in check_against_numpy(exp_sum, (x,), 0).explain()
    monkeypatch.delenv("HYBRIDAD_CUDA_PARTIALS")
    # a special function is bound by arithmetic on a GPU too: the measured rule
    plan = check_against_numpy(lambda x: np.sum(sp.j0(x) * sp.erf(x)), (x,), 0, rtol=1e-10)
    assert "GPU, by traffic" not in plan.explain()


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_max_and_min_by_the_reduce_kernels(launcher, dtype):
    # the reduce kernels, not cupy's max/min with out= (its CUB path raises on them)
    x, y = rand((300, 7), seed=5, dtype=dtype), rand((70000,), seed=6, dtype=dtype)
    plan = ha.compile(extrema, x, y, argnums=(0, 1), backend="cupy")
    assert "_red" not in plan._program.source and "_scr" not in plan._program.source
    built = "".join(launcher.built)
    assert "hybridad_max_" in built and "hybridad_min_" in built
    ref = ha.compile(extrema, x, y, argnums=(0, 1), backend="numpy")
    x_nan, y_inf = x.copy(), y.copy()
    x_nan[150, 3], y_inf[40000] = np.nan, -np.inf
    rtol = 1e-6 if dtype == np.float32 else 1e-13
    for args in ((x, y), (x_nan, y), (x, y_inf)):
        got, want = plan.gradient(*args), ref.gradient(*args)
        np.testing.assert_allclose(float(got.value), float(want.value), rtol=rtol)
        for g, w in zip(got.gradient, want.gradient, strict=True):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)


@pytest.mark.skipif(STRICT is None, reason="cupy is not installed: no strict emulation")
def test_the_emulation_refuses_what_cupy_refuses():
    # what the first run on a GPU found, and numpy accepts
    x, out = STRICT.asarray(rand((4, 5))), STRICT.zeros(5)
    with pytest.raises(NotImplementedError, match="maximum.reduce"):
        np.maximum.reduce(x, axis=0, out=out)
    with pytest.raises(TypeError, match="mode"):
        np.take(x, np.arange(5), out=out, mode="wrap")
    with pytest.raises(TypeError, match="where"):
        np.add(x[0], x[1], out=out, where=x[0] > 0)
    np.max(x, axis=0, out=out)  # what the program calls instead
    np.testing.assert_array_equal(out, np.max(x.view(np.ndarray), axis=0))
    assert type(np.reshape(x, (5, 4))) is type(x)  # views stay strict


def test_elementwise_functions_are_refused_clearly():
    @ha.elementwise
    def sq(x):
        return x * x

    with pytest.raises(NotImplementedError, match="elementwise"):
        ha.compile(lambda x: np.sum(sq(x)), rand((4,)), backend="cupy")


def test_float32():
    x = rand((40,)).astype(np.float32)
    res = ha.gradient(exp_sum, x, backend="cupy")
    assert res.gradient.dtype == np.float32
    np.testing.assert_allclose(res.gradient, ha.gradient(exp_sum, x.astype(np.float64)).gradient,
                               rtol=2e-5)


def test_no_allocation_per_call():
    args = FUNCTIONS["mlp"][1]()
    plan = ha.compile(mlp, *args, argnums=(0, 1, 2), backend="cupy")
    res = plan.new_result()
    assert_no_alloc(plan.gradient, *args, out=res, n=20)


def test_gradients_are_written_into_the_callers_buffers():
    # no arena slot and no copy at the end (an H100 spent a quarter of
    # exp-sum's time copying the gradient out); another layout is staged
    x = rand((50,))
    plan = ha.compile(exp_sum, x, backend="cupy")
    assert "_copyto(o1," not in plan._program.source
    # and the sum's first level computes the region's values as it adds them
    # (none written to scratch and read back)
    assert "_scr" not in plan._program.source
    want = ha.gradient(exp_sum, x, backend="numpy").gradient
    res = ha.GradientResult(x)
    plan.gradient(x, out=res)
    np.testing.assert_allclose(res.gradient, want, rtol=1e-13)
    strided = ha.DiffResult(np.zeros((), np.float64), np.zeros(100)[::2])
    plan.gradient(x, out=strided)
    np.testing.assert_allclose(strided.derivs[0], want, rtol=1e-13)
    plan.gradient(x, out=res)  # the caller's buffer again, after the staged call
    np.testing.assert_allclose(res.gradient, want, rtol=1e-13)


def test_wrong_array_type_is_rejected_before_writing():
    x = rand((5,))
    plan = ha.compile(exp_sum, x, backend="cupy")
    res = ha.GradientResult(x)
    res.gradient[...] = 7.0
    with pytest.raises(ValueError, match="shape"):
        plan.gradient(rand((6,)), out=res)
    assert np.all(res.gradient == 7.0)


def rosen(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def vec(x):
    return np.tanh(np.outer(x, x[:3])).ravel() * np.sum(x * x)


@pytest.mark.parametrize("f", [rosen, exp_sum, CASES["cumprod"]], ids=["rosen", "exp_sum",
                                                                       "cumprod"])
def test_second_order(f):
    x = rand((4, 5), seed=3) if f is CASES["cumprod"] else rand((6,), seed=3)
    v = rand(x.shape, seed=4)
    want = ha.hessian(f, x, backend="numpy")
    got = ha.hessian(f, x, backend="cupy")
    scale = np.abs(want.hessian).max()
    np.testing.assert_allclose(got.hessian, want.hessian, rtol=1e-11, atol=1e-12 * scale)
    np.testing.assert_allclose(ha.hvp(f, x, v, backend="cupy").hvp,
                               ha.hvp(f, x, v, backend="numpy").hvp, rtol=1e-11,
                               atol=1e-12 * scale)


def _trig(x, A):  # the forward's cos(x) and the backward's sin(x), wanted again
    return np.sum(np.tanh(A @ (x * np.cos(x))) ** 2) + np.sum(np.sin(x) * x)


@pytest.mark.parametrize("f", [_trig, rosen, exp_sum], ids=["trig", "rosen", "exp_sum"])
def test_an_hvp_computes_each_value_once(f):
    """The GPU program's HVP merges the sweeps' equal nodes before fusing
    (``cse_tangents``): one kernel computes ``cos(x)``, one ``sin(x)``, and no
    kernel computes a member twice (two producers evaluating one cheap region
    inside had each brought its members: nvcc refused the kernel's second
    declaration); the numpy backend's value, gradient and ``H v``."""
    if f is _trig:
        x, v, rest = rand((40,), seed=1), rand((40,), seed=3), (rand((8, 40), seed=2) / 4,)
    else:
        x, v, rest = rand((6,), seed=3), rand((6,), seed=4), ()
    plan = ha.compile(f, x, *rest, hvp=True, backend="cupy")
    bodies = [[m.id for m in n.attrs["body"].nodes] for n in plan.graph.nodes
              if n.op == "region"]
    assert all(len(b) == len(set(b)) for b in bodies), bodies
    if f is _trig:
        ops = [m.op for n in plan.graph.nodes if n.op == "region"
               for m in n.attrs["body"].nodes]
        assert ops.count("sin") == 1 and ops.count("cos") == 1, ops
    got, want = plan.hvp(x, *rest, v=v), ha.hvp(f, x, v, *rest, backend="numpy")
    np.testing.assert_allclose(float(got.value), float(want.value), rtol=1e-12)
    scale = max(1.0, np.abs(want.hvp).max())
    np.testing.assert_allclose(got.gradient, want.gradient, rtol=1e-11, atol=1e-12 * scale)
    np.testing.assert_allclose(got.hvp, want.hvp, rtol=1e-11, atol=1e-12 * scale)


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_jacobians(mode):
    x = rand((5,), seed=8)
    want = ha.jacobian(vec, x, mode=mode, backend="numpy").jacobian
    got = ha.jacobian(vec, x, mode=mode, backend="cupy").jacobian
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_no_allocation_per_call_second_order():
    x = rand((6,), seed=3)
    plan = ha.compile(rosen, x, hessian=True, backend="cupy")
    res = ha.HessianResult(x)
    assert_no_alloc(plan.hessian, x, out=res, n=10)


def test_without_a_gpu_the_backend_says_why(monkeypatch):
    monkeypatch.undo()  # the real device(): no cupy or no GPU on this machine
    ok, why = cupy_backend.cupy_available()
    if ok:
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match="cupy"):
        ha.gradient(exp_sum, rand((5,)), backend="cupy")
    # and numpy arguments keep the CPU default
    assert ha.compile(exp_sum, rand((5,))).backend == "numba"


def test_cuda_graph_needs_the_gpu_backend():
    with pytest.raises(ValueError, match="cuda_graph"):
        ha.compile(exp_sum, rand((5,)), cuda_graph=True)


# -- loops: the host runs the iterations, each launching the body's program ---------

def _loop_pairs():
    from test_loops import PAIRS

    return PAIRS


def test_loop_bodies_write_their_carries_in_place():
    # each body writes its carries straight into the runner's buffers of the
    # next iteration: the forward body copies only the carry it stores for
    # the backward sweep, the reverse body nothing
    from hybridad.backends import loops

    def euler(X, W):
        return np.sum(ha.fori_loop(0, 30, lambda i, x: x + 0.01 * np.tanh(x @ W), X) ** 2)

    args = (rand((20, 8)), rand((8, 8), seed=2) / 4)
    plan = check_against_numpy(euler, args, (0, 1))
    keys = {n.attrs["body"].key for n in plan.graph.nodes if n.op == "loop"}
    runners = [r for r in list(loops._RUNNERS.values())  # (the GPU program's: kernels)
               if r.body.key in keys and "_rk" in r._prog.source]
    copies = sorted(r._prog.source.split("# outputs")[1].count("_copyto(o") for r in runners)
    assert copies == [0, 1], [r._prog.source for r in runners]


def rolled_python_loop(x, W):
    # 40 steps of a product: rolled by the plan (hybridad.transforms.rolling)
    for _ in range(40):
        x = x + 0.05 * np.tanh(W @ x)
    return np.sum(x ** 2)


def broken_python_loop(x, W):
    # step 40 differs: the runs on either side roll, step 40 stays as traced
    for i in range(80):
        x = x + 0.05 * np.tanh(W @ x)
        if i == 40:
            x = np.sin(x) * 1.5
    return np.sum(x ** 2)


@pytest.mark.parametrize("pair", [0, 1, pytest.param(2, marks=pytest.mark.slow),
                                  pytest.param(3, marks=pytest.mark.slow), 4],
                         ids=["euler", "scan", "reverse", "indexed", "nested"])
def test_gradient_through_loops_matches_the_numpy_backend(pair):
    from test_loops import W0, X0, _fd_grad

    loop, _ = _loop_pairs()[pair]
    plan = check_against_numpy(loop, (X0, W0), (0, 1))
    assert any(n.op == "loop" for n in plan.graph.nodes)
    res = plan.gradient(X0, W0)
    for i in (0, 1):
        np.testing.assert_allclose(res.gradient[i], _fd_grad(loop, [X0, W0], i), rtol=1e-6,
                                   atol=1e-8)
    out = ha.GradientResult((X0, W0))
    assert_no_alloc(plan.gradient, X0, W0, out=out, n=5)


@pytest.mark.parametrize("f", [rolled_python_loop, broken_python_loop],
                         ids=["rolled", "broken"])
def test_python_loops_roll_on_the_gpu_program(f, monkeypatch):
    from test_loops import W0, X0, _fd_grad

    plan = check_against_numpy(f, (X0, W0), (0, 1))
    loops = [n for n in plan.graph.nodes if n.op == "loop"]
    assert len(loops) == (2 if f is rolled_python_loop else 4)  # (forward and reverse)
    monkeypatch.setenv("HYBRIDAD_ROLL", "0")  # the unrolled plan, on this backend
    unrolled = ha.compile(f, X0, W0, argnums=(0, 1), backend="cupy")
    assert not any(n.op == "loop" for n in unrolled.graph.nodes)
    a, b = plan.gradient(X0, W0), unrolled.gradient(X0, W0)
    for i in (0, 1):
        np.testing.assert_allclose(a.gradient[i], b.gradient[i], rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(a.gradient[i], _fd_grad(f, [X0, W0], i), rtol=1e-6,
                                   atol=1e-8)


def test_second_order_through_loops():
    from test_loops import W0, X0, euler_loop, scan_loop

    v = rand(X0.shape, seed=5)
    for f in (euler_loop, scan_loop):
        want = ha.hessian(f, X0, W0, backend="numpy").hessian
        got = ha.hessian(f, X0, W0, backend="cupy").hessian
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(ha.hvp(f, X0, v, W0, backend="cupy").hvp, want @ v,
                                   rtol=1e-11, atol=1e-12)
        eps = 1e-6  # a column from finite differences of the gradient
        e = np.zeros_like(X0)
        e[0] = eps
        col = (ha.gradient(f, X0 + e, W0, backend="numpy").gradient -
               ha.gradient(f, X0 - e, W0, backend="numpy").gradient) / (2 * eps)
        np.testing.assert_allclose(got[:, 0], col, rtol=1e-5, atol=1e-7)


def test_checkpointed_loop_under_a_memory_budget():
    from test_loops import W0, X0

    def f(x, W):
        return np.sum(ha.fori_loop(0, 200, lambda i, x: x + 0.01 * np.tanh(W @ x), x) ** 2)

    stored = ha.compile(f, X0, W0, backend="cupy")
    plan = ha.compile(f, X0, W0, backend="cupy", memory_budget=4000)
    assert plan.memory.total_bytes <= 4000 < stored.memory.total_bytes
    np.testing.assert_allclose(plan.gradient(X0, W0).gradient,
                               ha.gradient(f, X0, W0, backend="numpy").gradient,
                               rtol=1e-12, atol=1e-14)


def test_a_loop_bodys_library_calls_reach_the_cuda_graph_capture():
    # cuBLAS cannot be captured: a capture (CudaGraphRunner) records each
    # library call between its graphs -- a loop body's matmul included
    from test_loops import W0, X0, euler_loop

    plan = ha.compile(euler_loop, X0, W0, backend="cupy")
    want = plan.gradient(X0, W0).gradient.copy()
    calls = []

    def record(fn, *args):  # (recorded, then run: the emulation has no graph to replay)
        calls.append(fn)
        fn(*args)

    cupy_backend._CAPTURE.record = record
    try:
        got = plan.gradient(X0, W0).gradient
    finally:
        cupy_backend._CAPTURE.record = None
    np.testing.assert_array_equal(got, want)
    assert len(calls) >= 12  # the body's product at each of the 12 iterations


# -- matrix products as kernels (cuda_graph=True: a step is one CUDA graph) ---------

def products(A, B, C):
    # a product, a transposed view read in place, a long contraction (k = 300),
    # a batched product with a broadcast operand
    return np.sum(np.tanh(A @ B) ** 2) + np.sum((A.T @ C) ** 2) + \
        np.sum(np.matmul(A[None], np.stack([B, B * 2])))


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_matrix_products_as_kernels(dtype, monkeypatch):
    monkeypatch.setenv("HYBRIDAD_CUDA_PRODUCTS", "kernels")
    args = tuple(a.astype(dtype) for a in (rand((7, 300), seed=1), rand((300, 5), seed=2),
                                           rand((7, 4), seed=3)))
    ref = ha.gradient(products, *[a.astype(np.float64) for a in args], argnums=(0, 1, 2),
                      backend="numpy")
    plan = ha.compile(products, *args, argnums=(0, 1, 2), backend="cupy")
    assert "_lib(" not in plan.explain()  # no library call: nothing cuts a graph
    res = plan.gradient(*args)
    tol = 1e-13 if dtype == np.float64 else 1e-6  # (float32 products added in double)
    np.testing.assert_allclose(float(res.value), float(ref.value), rtol=tol)
    for g, r in zip(res.gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(g, r, rtol=tol, atol=tol * np.abs(r).max())
    out = ha.GradientResult(args)
    assert_no_alloc(plan.gradient, *args, out=out, n=3)


def test_matrix_products_default_to_cublas_outside_graphs():
    f, make, argnums = FUNCTIONS["mlp"]
    assert "_lib(" in ha.compile(f, *make(), argnums=argnums, backend="cupy").explain()


def test_a_graph_plans_products_are_kernels(monkeypatch):
    # cuda_graph=True (its capture needs a GPU): the plan's products are kernels,
    # so the capture records no library call between segments
    from hybridad.backends.cuda.products import own_products

    assert own_products(True) and not own_products(False)
    monkeypatch.setenv("HYBRIDAD_CUDA_PRODUCTS", "cublas")
    assert not own_products(True)
    monkeypatch.setenv("HYBRIDAD_CUDA_PRODUCTS", "kernels")
    f, make, argnums = FUNCTIONS["mlp"]
    plan = ha.compile(f, *make(), argnums=argnums, backend="cupy")
    calls = []
    cupy_backend._CAPTURE.record = lambda fn, *args: calls.append(fn)
    try:
        plan.gradient(*make())
    finally:
        cupy_backend._CAPTURE.record = None
    assert calls == []


# -- np.linalg on the GPU program (backends/cuda/linalg.py) ----------------------------

def gp_loss(x, y):
    """A Gaussian process's negative log-likelihood (up to a constant)."""
    d = x[:, None] - x[None, :]
    K = np.exp(-0.5 * d ** 2) + 0.1 * np.eye(x.size)
    return 0.5 * y @ np.linalg.solve(K, y) + np.sum(np.log(np.diag(np.linalg.cholesky(K))))


def dets(A):
    _, logdet = np.linalg.slogdet(A @ A.T + np.eye(4))
    return logdet + np.sum(np.linalg.inv(A + 3 * np.eye(4))) + np.linalg.det(A + 2 * np.eye(4))


@pytest.mark.parametrize("f", [gp_loss, dets], ids=["gp", "dets"])
def test_linear_algebra_on_the_gpu_program(f):
    args = (np.linspace(0.0, 3.0, 12), rand((12,), seed=4)) if f is gp_loss else \
        (rand((4, 4), seed=5) / 3,)
    argnums = (0, 1) if f is gp_loss else 0
    check_against_numpy(f, args, argnums, rtol=1e-11)
    want = ha.hessian(f, *args, backend="numpy").hessian
    got = ha.hessian(f, *args, backend="cupy").hessian
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12 * np.abs(want).max())
    # (FD of the gradient: the numpy backend's is checked so in test_linalg.py)


def large_stacks(A, b):
    """Stacks of matrices above BATCHED_UP_TO: one matrix at a time on the
    device (cholesky's reverse rule and the triangular solves through trsm)."""
    import scipy.linalg

    S = A @ np.swapaxes(A, -1, -2) + 70 * np.eye(A.shape[-1])
    L = np.linalg.cholesky(S)
    y = scipy.linalg.solve_triangular(L[0], b[0], lower=True)
    _, logdet = np.linalg.slogdet(S)
    return np.sum(np.linalg.solve(S, b) ** 2) + np.sum(logdet) + np.sum(y ** 2) + \
        np.sum(np.linalg.inv(S)) + np.sum(np.linalg.eigvalsh(S)) + \
        np.sum(np.log(np.diagonal(L, axis1=-2, axis2=-1)))


@pytest.mark.parametrize("batch", [1, 2])
def test_large_stacks_one_matrix_at_a_time(batch, monkeypatch):
    from hybridad.backends.cuda import linalg

    calls = []
    real = linalg._stacked

    def spy(fn, *operands, **kw):
        calls.append(operands[0].shape)
        return real(fn, *operands, **kw)

    monkeypatch.setattr(linalg, "_stacked", spy)
    n = linalg.BATCHED_UP_TO + 6
    A = rand((batch, n, n), seed=8) / 4
    b = rand((batch, n, 2), seed=9)
    check_against_numpy(large_stacks, (A, b), (0, 1), rtol=1e-10)
    assert calls and all(shape[0] == batch for shape in calls)


@pytest.mark.parametrize("name", ["gp", "two_solves", "stacked"])
def test_one_factorization_for_a_matrix_s_solves(name):
    # (hybridad/transforms/factors.py: solve_lu, then lu_solve on its factors; the
    # GP's solves by its Cholesky factor, cho_solve)
    from test_factors import CASES, SHARED

    f, make, argnums = CASES[name]
    plan = check_against_numpy(f, make(), argnums, rtol=1e-11)
    assert tuple(n.op for n in plan.graph.nodes if n.op in ("solve_lu", "cho_solve")) == \
        SHARED[name]
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        ha.gradient(lambda a, b: np.sum(np.linalg.solve(a, b) ** 2), np.ones((2, 2)),
                    np.ones(2), argnums=(0, 1), backend="cupy")


def test_device_linear_algebra_takes_no_arena_scratch():
    # cuSOLVER's and cupy's allocations come from the program's own workspace:
    # the CPU kernels' scratch is not planned into the GPU arena
    from hybridad.backends.cuda.linalg import DEVICE_LINALG
    from test_factors import CASES

    f, make, argnums = CASES["gp"]
    args = make()
    plan = check_against_numpy(f, args, argnums, rtol=1e-11)
    linalg = {n.id for n in plan.graph.nodes if n.op in DEVICE_LINALG}
    assert linalg and not linalg & set(plan.memory.scratch)
    numba = ha.compile(f, *args, argnums=argnums, backend="numba")
    assert {n.id for n in numba.graph.nodes if n.op in DEVICE_LINALG} & set(numba.memory.scratch)


def test_fourier_transforms_run_as_device_library_calls():
    # rfft, fft and irfft (values, gradients, Hessian-vector products) through
    # the program's FFT runs (hybridad/backends/cuda/fft.py), no arena scratch
    from hybridad.backends.cuda.fft import DEVICE_FFT

    def f(x):
        spec = np.fft.rfft(x) * np.exp(-0.05 * np.arange(9))
        z = np.fft.fft(x * (1 + 1j) + np.fft.irfft(spec * spec, 16))
        return np.sum(np.abs(z) ** 2) + np.sum(np.fft.ifft2(z.reshape(4, 4)).real ** 3)

    x = np.linspace(-1.0, 1.5, 16)
    plan = check_against_numpy(f, (x,), 0, rtol=1e-12)
    transforms = {n.id for n in plan.graph.nodes if n.op in DEVICE_FFT}
    assert transforms and not transforms & set(plan.memory.scratch)
    v = np.cos(np.arange(16.0))
    got = ha.compile(f, x, hvp=True, backend="cupy").hvp(x, v=v)
    want = ha.compile(f, x, hvp=True, backend="numpy").hvp(x, v=v)
    np.testing.assert_allclose(got.hvp, want.hvp, rtol=1e-12, atol=1e-12)


def test_linear_algebra_failures_raise_as_on_the_cpu():
    def chol(a):
        return np.sum(np.linalg.cholesky(a))

    def tri(a):
        import scipy.linalg
        return np.sum(scipy.linalg.solve_triangular(a, np.ones(3), lower=True))

    with pytest.raises(np.linalg.LinAlgError, match="positive definite"):
        ha.gradient(chol, -np.eye(3), backend="cupy")
    a = np.tril(rand((3, 3), seed=6)) + 3 * np.eye(3)
    check_against_numpy(tri, (a,), 0)
    a[1, 1] = 0.0
    with pytest.raises(np.linalg.LinAlgError, match="singular"):
        ha.gradient(tri, a, backend="cupy")
    with pytest.raises(np.linalg.LinAlgError, match="Eigenvalues did not converge"):
        ha.gradient(lambda a: np.sum(np.linalg.eigh(a)[0]), np.full((3, 3), np.nan),
                    backend="cupy")
    with pytest.raises(np.linalg.LinAlgError, match="SVD did not converge"):
        ha.gradient(lambda a: np.sum(np.linalg.svd(a)[1]), np.full((3, 2), np.inf),
                    backend="cupy")
    with pytest.raises(NotImplementedError, match="complex eigenvalues"):
        ha.gradient(lambda a: np.sum(np.linalg.eigvals(a)), np.array([[0.0, 1.0], [-1.0, 0.0]]),
                    backend="cupy")
    with pytest.raises(NotImplementedError, match="expm .*cholesky"):
        import scipy.linalg
        ha.compile(lambda a: np.sum(scipy.linalg.expm(a)), rand((3, 3)), backend="cupy")


def spectra(A):
    """eigh, eigvalsh (the other triangle), svd (values alone, and the
    vectors), pinv, scipy's eigh (syevr; a subset), qr, eig (real spectra):
    through functions of the decompositions that do not depend on the sign a
    solver gives each vector."""
    import scipy.linalg

    S = A @ A.T + np.eye(A.shape[0])
    w, V = np.linalg.eigh(S)
    U, s, Vt = np.linalg.svd(A[:, :3], full_matrices=False)
    return np.sum(w ** 2) + np.sum((V * V) @ np.sin(w)) + \
        np.sum(np.linalg.eigvalsh(np.triu(S), UPLO="U") ** 3) + \
        np.sum(np.linalg.svd(A, compute_uv=False) ** 3) + np.sum(np.tanh((U * s ** 2) @ Vt)) + \
        np.sum(np.linalg.pinv(A[:3]) ** 2) + np.sum(scipy.linalg.eigh(S)[1] ** 4) + \
        np.sum(scipy.linalg.eigh(S, lower=False, subset_by_index=(1, 2), eigvals_only=True)) + \
        np.sum(np.abs(np.linalg.qr(A[:, :3], mode="r"))) + np.sum(np.square(np.linalg.qr(A)[0])) + \
        np.sum(np.linalg.eigvals(S * (1 + A[1] ** 2)) ** 2) + \
        np.sum(np.linalg.eig(S * np.exp(A[0]))[1] ** 2)  # (S D: similar to D^1/2 S D^1/2, real)


def test_spectral_decompositions_on_the_gpu_program():
    check_against_numpy(spectra, (rand((4, 4), seed=7) / 2,), 0, rtol=1e-10)
    # batched: a stack of matrices (cupy's batched solvers)
    batch = rand((3, 4, 4), seed=8) / 2
    check_against_numpy(lambda B: np.sum(np.linalg.eigvalsh(B @ np.swapaxes(B, -1, -2)) ** 2)
                        + np.sum(np.linalg.svd(B, compute_uv=False)), (batch,), 0, rtol=1e-10)


@pytest.mark.slow
def test_spectral_decompositions_second_order_on_the_gpu_program():
    # (their forward rules on the device: a Hessian's tangent programs)
    A = rand((4, 4), seed=7) / 2
    want = ha.hessian(spectra, A, backend="numpy").hessian
    got = ha.hessian(spectra, A, backend="cupy").hessian
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11 * np.abs(want).max())


def test_plans_say_what_precision_their_matrix_products_run_in(monkeypatch):
    def f(W, x):
        return np.sum(np.tanh(x @ W) @ W.T)

    W32, x32 = rand((8, 8)).astype(np.float32), rand((4, 8), seed=2).astype(np.float32)
    monkeypatch.delenv("CUPY_TF32", raising=False)
    monkeypatch.delenv("HYBRIDAD_CUDA_PRODUCTS", raising=False)
    plan = ha.compile(f, W32, x32, backend="cupy")
    said = "float32 by cuBLAS in full float32 (TF32 off: cupy's default)"
    assert plan.matmul_precision == said
    assert f"matrix products: {said}" in plan.explain()
    # where cupy computes float32 products in TF32 (CUPY_TF32=1 when cupy first asks:
    # its compute type, read from cupy where it imports), the plan says so
    from hybridad.backends.cuda import products
    with monkeypatch.context() as m:
        m.setattr(products, "cublas_tf32", lambda dtype: dtype == np.float32)
        assert "TF32 (CUPY_TF32=1" in plan.matmul_precision
    for graph in (True, False):  # hybridad's own kernels: under a CUDA graph, or asked for
        if not graph:
            monkeypatch.setenv("HYBRIDAD_CUDA_PRODUCTS", "kernels")
        kernels = ha.compile(f, W32, x32, backend="cupy", cuda_graph=graph)
        assert kernels.matmul_precision.startswith("float32 by hybridad's kernels (each "
                                                   "product exact in float64")
    monkeypatch.delenv("HYBRIDAD_CUDA_PRODUCTS")
    W64 = W32.astype(np.float64)
    assert ha.compile(f, W64, x32.astype(np.float64), backend="cupy").matmul_precision == \
        "float64 by cuBLAS in float64"
    assert ha.compile(f, W64, x32.astype(np.float64)).matmul_precision is None  # (the CPU)
    assert ha.compile(lambda x: np.sum(np.exp(x)), W64, backend="cupy").matmul_precision \
        is None


class _FakeCuda:
    """cupy.cuda's allocator API (``get_allocator``, ``using_allocator``,
    ``alloc``) over fake pointers: what a device run's allocations became."""

    class Pointer:
        def __init__(self, where, at):
            self.where, self.at = where, at

        def __add__(self, k):
            return _FakeCuda.Pointer(self.where, self.at + k)

    def __init__(self):
        self.current, self.pool_sizes = None, []

    def pool(self, size):
        self.pool_sizes.append(size)
        return self.Pointer(f"pool{len(self.pool_sizes)}", 0)

    def get_allocator(self):
        return self.current or self.pool

    def using_allocator(self, allocator):
        import contextlib

        @contextlib.contextmanager
        def using():
            before, self.current = self.current, allocator
            try:
                yield
            finally:
                self.current = before
        return using()

    def alloc(self, size):
        return self.get_allocator()(size)


def test_device_linalg_runs_allocate_from_their_own_buffer_after_the_first_call():
    from hybridad.backends.cuda.linalg import Preallocated

    cuda = _FakeCuda()
    xp = type("xp", (), {"cuda": cuda, "uint8": np.uint8,
                         "empty": staticmethod(lambda n, dtype: type("a", (), {
                             "data": cuda.pool(n) and _FakeCuda.Pointer("buffer", 0)}))})
    sizes, got = [100, 2048, 8], []

    def run(out, a, extra=0, work=None):  # a device run: its requests, in order
        got.append([cuda.alloc(s) for s in sizes + [64] * extra])

    call = Preallocated(run, xp)
    call(None, None)
    assert cuda.pool_sizes == sizes + [512 + 2048 + 512]  # then its workspace
    assert all(p.where.startswith("pool") for p in got[0])
    for _ in range(3):
        call(None, None)
        assert [(p.where, p.at) for p in got[-1]] == \
            [("buffer", 0), ("buffer", 512), ("buffer", 2560)]
    assert len(cuda.pool_sizes) == 4  # (nothing more from the pool)
    call(None, None, extra=1)  # a request the first call did not make: the pool's once,
    assert [p.where for p in got[-1]] == ["buffer"] * 3 + ["pool5"]
    assert cuda.pool_sizes[4:] == [64, 3584]  # then a region of its own in a larger buffer
    call(None, None, extra=1)
    assert [(p.where, p.at) for p in got[-1]] == \
        [("buffer", 0), ("buffer", 512), ("buffer", 2560), ("buffer", 3072)]
    assert len(cuda.pool_sizes) == 6
    sizes[0] = 4096  # larger than recorded: the pool's once, never an overlap
    call(None, None)
    assert [p.where for p in got[-1]] == ["pool7", "buffer", "buffer"]
    assert [p.at for p in got[-1][1:]] == [512, 2560]
    call(None, None)  # (then a region of its size)
    assert [(p.where, p.at) for p in got[-1]] == \
        [("buffer", 3584), ("buffer", 512), ("buffer", 2560)]
    sizes[0] = 100
    call(None, None)  # the first request out of order: any free region that holds it
    assert [(p.where, p.at) for p in got[-1]] == \
        [("buffer", 0), ("buffer", 512), ("buffer", 2560)]
    # a program's runs share one workspace, as large as the largest run's requests
    from hybridad.backends.cuda.linalg import Workspace
    sizes[0] = 100
    shared = Workspace(xp)
    small, large = Preallocated(run, xp, shared), Preallocated(run, xp, shared)
    small(None, None)
    large(None, None, extra=8)
    before = len(cuda.pool_sizes)
    for call in (small, large, small):
        call(None, None, extra=8 if call is large else 0)
        assert all(p.where == "buffer" for p in got[-1]) and got[-1][0].at == 0
    assert len(cuda.pool_sizes) == before and shared.size == 3072 + 8 * 512
    # without cupy's allocator API (the host emulation): the run as is
    plain = Preallocated(run, np)
    plain(None, None)
    assert len(got) == 15


def test_a_loop_factors_its_constant_matrix_once_on_the_gpu_program():
    """An implicit time step (a solve with the loop's constant matrix) on the
    GPU program: the factors made once before the loop (cupyx's lu_factor),
    each iteration an lu_solve on them; the numpy backend's gradient.  (On
    the host, cupyx's LU stand-ins are scipy's, which allocate: the device's
    allocations are counted on a GPU, tests/test_gpu.py.)"""
    from test_factors import _loop_args, _loop_solves, implicit_euler

    args = _loop_args()
    plan = check_against_numpy(implicit_euler, args, (0, 1))
    assert set(_loop_solves(plan)) == {"lu_solve"}
    assert sum(n.op == "lu_factors" for n in plan.graph.nodes) == 1
