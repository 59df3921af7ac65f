"""The partition pass (structure) and region kernels (value and dual-number
partials in one pass), checked against the numpy reference."""

import numpy as np
import pytest
from conftest import rand

import hybridad as ha
from hybridad.backends.numba.kernels import compile_region_kernel
from hybridad.testing import assert_no_alloc, numerical_gradient
from hybridad.transforms.partition import find_regions


def forward_regions(f, *args):
    """Regions of the unfused forward graph (the numpy backend does not fuse)."""
    plan = ha.compile(f, *args, backend="numpy")
    fwd = [n for n in plan.graph.nodes if n.phase == "forward"]
    return find_regions(fwd, [plan.graph.outputs[0]])


def exp_sum(x):
    return np.sum(np.exp(-3 * (x + 1)))


def dense_chain(x0):
    xs = [x0]
    for _ in range(20):
        xs.append(sum(xs[1:], xs[0]))
    return np.sum(np.tanh(xs[-1]))


def test_exp_sum_is_one_region():
    (region,) = forward_regions(exp_sum, rand((10,)))
    assert [n.op for n in region.nodes] == ["add", "multiply", "exp"]
    assert region.reduction is not None and region.reduction.op == "sum"


def test_dense_chain_is_one_region():
    (region,) = forward_regions(dense_chain, rand((10,)))
    ops = [n.op for n in region.nodes]
    # common subexpressions merged: x_i = (x_0 + ... + x_{i-2}) + x_{i-1} = x_{i-1} + x_{i-1}
    # for i >= 2, one add per layer (x_1 = x_0 is none)
    assert ops.count("add") == 19 and ops[-1] == "tanh"
    assert region.reduction.op == "sum"


def _recurrence(x, F):  # kept unrolled: the branch decides on the loop's result
    for k in range(F.shape[0]):
        x = x + 0.02 * np.tanh(x * F[k])
    return np.sum(x ** 2) if np.sum(x) > 0 else np.sum(np.sin(x))


def test_a_long_elementwise_chain_is_cut_into_regions_of_bounded_size():
    """300 unrolled steps of an elementwise recurrence fused into one region
    of 1200 ops, whose compile took over 10 minutes (60 steps: 10.8 s); cut
    into regions of at most MAX_REGION_NODES, the build grows with the
    steps (300: 7.7 s) and the gradient is the same."""
    from hybridad.transforms.partition import MAX_REGION_NODES

    x = np.abs(rand((5,), seed=1)) + 1
    F = rand((150, 5), seed=2)
    plan = ha.compile(_recurrence, x, F, argnums=(0, 1))
    regions = [n for n in plan.graph.nodes if n.op in ("region", "region_acc")]
    sizes = [len(n.attrs["body"].nodes) for n in regions]
    assert max(sizes) <= MAX_REGION_NODES and len(regions) > 4, sizes
    ref = ha.compile(_recurrence, x, F, argnums=(0, 1), backend="numpy").gradient(x, F)
    got = plan.gradient(x, F)
    assert float(got.value) == pytest.approx(float(ref.value), rel=1e-13)
    for a, b in zip(got.gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)
    fd = numerical_gradient(lambda x: _recurrence(x, F), x)
    np.testing.assert_allclose(got.gradient[0], fd, rtol=1e-6)
    assert_no_alloc(plan.gradient, x, F, out=got, n=10)


def test_shared_value_ends_a_region_and_matmul_is_a_reverse_node():
    def f(x, A):
        e = np.exp(x)  # used twice: by the matmul and by the second chain
        return np.sum(np.tanh(A @ e)) + np.sum(e * x)

    regions = forward_regions(f, rand((4,)), rand((3, 4)))
    outputs = {r.output.op for r in regions}
    assert "exp" in outputs, "exp has users in two places: it is a region output"
    assert all(n.op != "matmul" for r in regions for n in r.nodes)


def _region_inputs(region, x):
    return [x if n.op == "input" else n.attrs["value"] for n in region.inputs]


@pytest.mark.parametrize("f", [
    lambda x: np.tanh(x) * np.sin(x) ** 2 + np.exp(-x * x),
    lambda x: np.where(x > 0.2, np.log1p(x * x), np.arctan(x)) / (2 + np.cos(x)),
    lambda x: np.maximum(x, 0.1) * np.sqrt(x * x + 1) - np.hypot(x, 2.0),
])
def test_region_kernel_value_and_partials_match_numpy(f):
    x = rand((3, 5), seed=3)
    (region,) = forward_regions(lambda x: np.sum(f(x)), x)
    seeds = [k for k, n in enumerate(region.inputs) if n.op == "input"]
    kernel = compile_region_kernel(region, seeds)
    out, partial = np.zeros(()), np.zeros(x.shape)
    kernel(*_region_inputs(region, x), out, partial)
    assert float(out) == pytest.approx(float(np.sum(f(x))), rel=1e-13)
    expected = ha.gradient(lambda x: np.sum(f(x)), x).gradient
    np.testing.assert_allclose(partial, expected, rtol=1e-13, atol=1e-15)


def test_region_kernel_broadcast_inputs_and_axis_reduction():
    x, c = rand((3, 1, 4), seed=4), rand((5, 1), seed=5)

    def f(x):
        return np.max(np.sin(x * c) + x, axis=1, keepdims=True)

    plan = ha.compile(lambda x: np.sum(f(x)), x, backend="numpy")
    fwd = [n for n in plan.graph.nodes if n.phase == "forward"]
    region = next(r for r in find_regions(fwd, [plan.graph.outputs[0]])
                  if r.reduction is not None and r.reduction.op == "max")
    kernel = compile_region_kernel(region)
    out = np.zeros(region.output.shape)
    kernel(*[x if n.op == "input" else n.attrs["value"] for n in region.inputs], out)
    np.testing.assert_allclose(out, f(x), rtol=1e-15)
    x_nan = x.copy()
    x_nan[1, 0, 2] = np.nan
    kernel(*[x_nan if n.op == "input" else n.attrs["value"] for n in region.inputs], out)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(f(x_nan)))


def _fused_ops(plan, phase):
    return [n.op for n in plan.graph.nodes if n.phase == phase and n.op not in ("input", "const")]


def test_numba_plan_of_exp_sum_is_one_forward_region():
    plan = ha.compile(exp_sum, rand((10,)))
    fwd = _fused_ops(plan, "forward")
    assert fwd == ["region"], fwd
    (region,) = [n for n in plan.graph.nodes if n.op == "region" and n.phase == "forward"]
    body = region.attrs["body"]
    assert [n.op for n in body.nodes] == ["add", "multiply", "exp"]
    assert body.reduction.op == "sum"
    assert "region" in plan.explain()


def test_numba_plan_of_dense_chain_is_one_forward_region():
    plan = ha.compile(dense_chain, rand((10,)))
    assert _fused_ops(plan, "forward") == ["region"]
    res = ha.GradientResult(rand((10,)))
    plan.gradient(rand((10,)), out=res)
    ref = ha.gradient(dense_chain, rand((10,)), backend="numpy")
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-12)


def test_numba_plan_calls_blas_for_every_2d_matmul():
    # forward A @ x, x @ (A x) and the backward's transposed products all go to
    # BLAS (one gemm into the buffer, or accumulating into an adjoint with
    # beta = 1), transposes included (typed F-contiguous)
    def f(x, A):
        return x @ (A @ x)

    x, A = rand((6,), seed=21), rand((6, 6), seed=22)
    plan = ha.compile(f, x, A)
    matmuls = [n for n in plan.graph.nodes if n.op == "matmul"]
    source = plan._program.source
    assert matmuls and source.count("_gemm(") == len(matmuls), source
    res = plan.gradient(x, A)
    np.testing.assert_allclose(res.gradient, (A + A.T) @ x, rtol=1e-13)


def test_large_regions_run_as_prange_and_agree_with_numpy(monkeypatch):
    # regions at or above PARALLEL_MIN iterations become prange loops (a full
    # sum as a parallel reduction); lowered here so a small case exercises it
    from hybridad.backends.numba import threshold
    from hybridad.testing import assert_no_alloc

    monkeypatch.setattr(threshold, "PARALLEL_MIN", 64)

    def f(x, c):
        return np.sum(np.tanh(x) * np.sin(x * c)) ** 2 + np.sum(np.max(x * c, axis=1))

    x, c = rand((30, 4), seed=41), rand((4,), seed=42)
    plan = ha.compile(f, x, c)
    source = plan._program.source
    assert "prange(" in source and '"prange": True' in source
    assert '"fusion": False' in source  # numba must not merge our loops (see _PARALLEL)
    res = ha.GradientResult(x)
    plan.gradient(x, c, out=res)
    ref = ha.gradient(f, x, c, backend="numpy")
    np.testing.assert_allclose(float(res.value), float(ref.value), rtol=1e-13)
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-12, atol=1e-14)
    assert_no_alloc(plan.gradient, x, c, out=res, n=20)


@pytest.mark.parametrize("f, shape", [
    # partials stored straight into the gradient buffer, then scaled in place
    # by a prange loop whose only effect is that store (numba's parfor pass
    # once deleted it as dead: the buffer is a view made from an address)
    (lambda x, c: (lambda r: r ** 2 + r ** 3 + r ** 4 / 4)(np.sum(np.exp(-3 * (x + 1)))),
     (160,)),
    (lambda x, c: (lambda r: r ** 2 + r ** 3 + r ** 4 / 4)(np.sum(np.exp(-3 * (x + 1)))),
     (40, 4)),
    # broadcast adjoint summed back over rows, recomputed partials, a mean
    (lambda x, c: np.mean(np.sin(x + c) * x) + np.sum(np.exp(c) * 2.0), (40, 4)),
    # a max reduction and an elementwise chain feeding a matmul
    (lambda x, c: np.sum((np.tanh(x) @ c) ** 2) + np.max(x * c), (40, 4)),
], ids=["scaled-in-gradient-buffer-1d", "scaled-in-gradient-buffer-2d",
        "broadcast-adjoint-mean", "matmul-max"])
def test_prange_plans_agree_with_numpy_on_every_output(monkeypatch, f, shape):
    from hybridad.backends.numba import threshold

    monkeypatch.setattr(threshold, "PARALLEL_MIN", 64)
    x, c = rand(shape, seed=43), rand(shape[-1:], seed=44)
    argnums = (0, 1) if len(shape) == 2 else 0
    plan = ha.compile(f, x, c, argnums=argnums)
    assert "prange(" in plan._program.source
    res = ha.GradientResult((x, c) if argnums == (0, 1) else x)
    plan.gradient(x, c, out=res)
    ref = ha.gradient(f, x, c, argnums=argnums, backend="numpy")
    np.testing.assert_allclose(float(res.value), float(ref.value), rtol=1e-13)
    grads = res.gradient if argnums == (0, 1) else (res.gradient,)
    refs = ref.gradient if argnums == (0, 1) else (ref.gradient,)
    for got, want in zip(grads, refs, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_explain_shows_regions_strategy_and_in_place_partials():
    # exp is stored as its partial, written straight into the gradient buffer
    # and scaled there in place; cheap arithmetic is recomputed backward
    def f(x):
        r = np.sum(np.exp(-3 * (x + 1)))
        return r ** 2 + np.sum((x * x + 3 * x) * 2)

    x = rand((10,), seed=51)
    plan = ha.compile(f, x)
    text = plan.explain()
    regions = text[text.index("regions:"):text.index("buffers:")]
    exp_line = next(ln for ln in regions.splitlines() if "add+multiply+exp -> sum" in ln)
    assert "partials: store" in exp_line
    assert "the result's gradient buffer 0 (no copy), then updated in place" in regions
    assert "partials: recompute" in regions and "recomputed for cotangent" in regions
    res = plan.gradient(x)
    ref = ha.gradient(f, x, backend="numpy")
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-12)


def test_adjoint_accumulates_matmul_products_with_gemm_beta_one():
    # the gradient w.r.t. x gathers K matrix-vector products: each is added by
    # BLAS gemm with beta = 1 straight into the adjoint (no temporary + add)
    A, B = rand((7, 7), seed=61), np.asfortranarray(rand((7, 7), seed=62))

    def f(x, W):
        return x @ (A @ x) + x @ (B @ x) + np.sum(np.tanh(W @ x))

    x, W = rand((7,), seed=63), rand((3, 7), seed=64)
    plan = ha.compile(f, x, W, argnums=(0, 1))
    source = plan._program.source
    assert "beta = 1" in source, source
    assert source.count("beta = 1") + source.count("# BLAS gemm\n") == \
        sum(n.op == "matmul" for n in plan.graph.nodes)
    folded = [ln for ln in source.splitlines() if "(done by the gemm above)" in ln]
    assert len(folded) == source.count("beta = 1")
    res = plan.gradient(x, W)
    ref = ha.gradient(f, x, W, argnums=(0, 1), backend="numpy")
    for g, r in zip(res.gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-14)


def test_repeated_blocks_compile_once_as_shared_kernels():
    # K blocks of one shape: their node code is the same up to names, so it is
    # compiled once as a kernel the plan calls K times (numba's compile time
    # grows with the size of the function), arrays passed as addresses
    K = 4
    A = [rand((9, 9), seed=70 + k) for k in range(K)]

    def f(x):
        return sum(x @ (a @ x) + np.sum(np.tanh(a @ x) * x) for a in A)

    x = rand((9,), seed=69)
    plan = ha.compile(f, x)
    source = plan._program.source
    kernels = [ln.split("(")[0][4:] for ln in source.splitlines() if ln.startswith("def _kernel")]
    assert kernels, source
    body = source[source.index("def plan_fn"):]
    for name in kernels:  # each kernel is defined once and called at least twice
        assert source.count(f"def {name}(") == 1
        assert body.count(f"{name}(") >= 2, (name, body)
    res = ha.GradientResult(x)
    plan.gradient(x, out=res)
    ref = ha.gradient(f, x, backend="numpy")
    np.testing.assert_allclose(float(res.value), float(ref.value), rtol=1e-13)
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-12, atol=1e-14)
    from hybridad.testing import assert_no_alloc
    assert_no_alloc(plan.gradient, x, out=res, n=10)


def test_shared_prange_kernels_keep_their_stores(monkeypatch):
    # a parallel kernel writes buffers it receives as addresses: numba's parfor
    # pass must not take the views for dead locals (see rt.view_at)
    from hybridad.backends.numba import threshold

    monkeypatch.setattr(threshold, "PARALLEL_MIN", 64)
    C = [rand((50, 3), seed=80 + k) for k in range(3)]

    def f(x):
        return sum(np.sum(np.exp(-(x + c) ** 2)) ** 2 for c in C)

    x = rand((50, 3), seed=79)
    plan = ha.compile(f, x)
    source = plan._program.source
    assert "def _kernel" in source and '"inplace_binop": False})\ndef _kernel' in source, source
    res = plan.gradient(x)
    ref = ha.gradient(f, x, backend="numpy")
    np.testing.assert_allclose(float(res.value), float(ref.value), rtol=1e-13)
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-12, atol=1e-14)


def test_kernel_outlining_renames_consistently_and_keeps_plan_variables():
    from hybridad.backends.numba.program import _drop_unused_views, _Kernels

    chunks = {
        "a": ["for i0 in range(5):", "    v7 = (b3[i0] * a0[i0])", "    b9[i0] = v7"],
        "b": ["for i0 in range(5):", "    v8 = (b4[i0] * a0[i0])", "    b10[i0] = v8"],
        # assigns a name the plan reads later: must stay inline
        "c": ["s = b3[0]"],
        "d": ["s = b4[0]"],
    }
    f64 = np.dtype(np.float64)
    k = _Kernels(lambda sub, key: sub.emit(*chunks[key]),
                 {f"b{j}": (f"p + {8 * j}", (5,), f64, "C") for j in (3, 4, 9, 10)})

    class W:
        def __init__(self):
            self.lines = []
            self.threaded = False

        def emit(self, *lines):
            self.lines += ["    " + x for x in lines]

    w = W()
    w.emit("b3 = _view(p + 0, np.int64(5), np.float64)",
           "b4 = _view(p + 40, np.int64(5), np.float64)",
           "b9 = _view(p + 80, np.int64(5), np.float64)",
           "b10 = _view(p + 120, np.int64(5), np.float64)",
           "unused = _view(p + 160, np.int64(5), np.float64)")
    for key in "abcd":
        k.emit(w, key)
    w.emit("out = s")
    body, defs, parallel = k.finish(w.lines, ["import numpy as np"], ["p", "a0"])
    assert not parallel
    assert [ln for ln in defs if ln.startswith("def ")] == ["def _kernel0(_a0, _p1, _a2):"]
    assert "    _kernel0(p + 24, a0, p + 72)" in body and "    _kernel0(p + 32, a0, p + 80)" in body
    assert "    s = b3[0]" in body and "    s = b4[0]" in body
    assert not any("unused" in ln for ln in body)
    assert _drop_unused_views(["    x = _view(p, n, t)", "    y = x.T", "    z = 1"]) == \
        ["    z = 1"]


def stencil(x):
    rosen = np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)
    return rosen + np.sum(x[2:] * x[1:-1] * np.sin(x[:-2]))


def _check_against_numpy(plan, f, x):
    res = ha.GradientResult(x)
    plan.gradient(x, out=res)
    ref = ha.gradient(f, x, backend="numpy")
    np.testing.assert_allclose(float(res.value), float(ref.value), rtol=1e-13)
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-12, atol=1e-13)
    return res


def test_stencil_slices_are_views_and_their_adjoints_add_in_one_loop():
    # x[1:], x[:-1] (written twice: one node), x[2:] ... read x in place; the
    # backward adds every slice's contribution straight into the gradient
    from scipy.optimize import rosen_der

    from hybridad.testing import assert_no_alloc

    x = rand((50,), seed=3)
    plan = ha.compile(stencil, x)
    ops = [n.op for n in plan.graph.nodes]
    assert ops.count("getitem") == 5  # x[1:], x[:-1] (once), x[2:], x[1:-1], x[:-2]
    assert {plan.memory.storage[n.id] for n in plan.graph.nodes if n.op == "getitem"} == \
        {"view"}
    assert "scatter" not in ops and "scatter_add" not in ops and "iadd" not in ops
    assert ops.count("region_acc") >= 5 and ops.count("zeros") == 1
    res = _check_against_numpy(plan, stencil, x)
    rosen_only = ha.gradient(lambda x: np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 +
                                              (1.0 - x[:-1]) ** 2), x)
    np.testing.assert_allclose(rosen_only.gradient, rosen_der(x), rtol=1e-13, atol=1e-13)
    # no temporary per contribution: only the forward's stored partials and the value
    ops_of = {n.id: n.op for n in plan.graph.nodes}
    assert all(nbytes <= 8 or ops_of[nid] == "region_partial"
               for nid, (_, _, nbytes, _) in plan.memory.slots.items())
    assert [ops_of[nid] for nid in plan.memory.direct] == ["zeros"]  # the gradient itself
    assert_no_alloc(plan.gradient, x, out=res, n=20)


def test_large_stencil_splits_its_adjoint_loop_per_slice(monkeypatch):
    # two slices of x add into the gradient from different iterations: one
    # prange loop per slice (race-free), not one racing loop
    from hybridad.backends.numba import threshold

    monkeypatch.setattr(threshold, "PARALLEL_MIN", 64)
    x = rand((300,), seed=5)
    plan = ha.compile(stencil, x)
    source = plan._program.source
    assert source.count("prange(") >= 4
    _check_against_numpy(plan, stencil, x)


def test_contiguous_slices_of_2d_arrays_are_views():
    def f(a):
        return np.sum(a[1:] * a[:-1]) + np.sum(a[:, 1:] ** 2) + np.sum(np.exp(a[2]))

    a = rand((6, 5), seed=7)
    plan = ha.compile(f, a)
    storage = {repr(n.attrs["index"]): plan.memory.storage[n.id]
               for n in plan.graph.nodes if n.op == "getitem"}
    assert storage == {"(slice(1, None, None),)": "view", "(slice(None, -1, None),)": "view",
                       "(2,)": "view", "(slice(None, None, None), slice(1, None, None))":
                       "view"}, storage  # a[:, 1:] is strided: regions index it in place
    assert "= a0[:, 1:]" in plan._program.source
    res = ha.GradientResult(a)
    plan.gradient(a, out=res)
    ref = ha.gradient(f, a, backend="numpy")
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-13)


def test_strided_slices_read_by_other_ops_are_copied():
    def f(a, w):  # a[:, 1:] feeds a matmul (BLAS wants contiguous operands): a copy
        return np.sum(np.tanh(a[:, 1:] @ w)) + np.sum(a[::2, ::3] ** 2)

    a, w = rand((6, 5), seed=8), rand((4, 3), seed=9)
    plan = ha.compile(f, a, w, argnums=(0, 1))
    storage = {repr(n.attrs["index"]): plan.memory.storage[n.id]
               for n in plan.graph.nodes if n.op == "getitem" and n.args[0].op == "input"}
    assert storage["(slice(None, None, None), slice(1, None, None))"] == "buffer"
    assert storage["(slice(None, None, 2), slice(None, None, 3))"] == "view"
    res = plan.gradient(a, w)
    ref = ha.gradient(f, a, w, argnums=(0, 1), backend="numpy")
    for g, h in zip(res.gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(g, h, rtol=1e-13, atol=1e-15)


def test_parallel_false_plans_have_no_prange_and_agree(monkeypatch):
    from hybridad.backends.numba import threshold

    monkeypatch.setattr(threshold, "PARALLEL_MIN", 64)
    x = rand((300,), seed=9)
    threaded = ha.compile(stencil, x)
    serial = ha.compile(stencil, x, parallel=False)
    assert threaded.parallel and "prange(" in threaded._program.source
    assert not serial.parallel and "prange(" not in serial._program.source
    assert "parallel=" not in serial._program.source
    a, b = threaded.gradient(x), serial.gradient(x)
    np.testing.assert_allclose(b.gradient, a.gradient, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(float(b.value), float(a.value), rtol=1e-13)
    assert serial.value(x) == pytest.approx(float(a.value), rel=1e-13)
    from hybridad.testing import assert_no_alloc, numerical_gradient

    np.testing.assert_allclose(b.gradient, numerical_gradient(stencil, x), rtol=1e-6,
                               atol=1e-7)
    assert_no_alloc(serial.gradient, x, out=b, n=20)
    with pytest.raises(TypeError, match="parallel"):
        ha.compile(stencil, x, parallel="no")


def test_multithreaded_plans_with_blas_run_it_single_threaded(monkeypatch):
    # two thread pools (numba's prange workers and OpenBLAS's) stall each other:
    # a multithreaded plan that calls BLAS runs it on one thread, then restores it
    from threadpoolctl import ThreadpoolController

    from hybridad.backends.numba import threshold
    from hybridad.backends.numba.threads import SingleThreadedBlas

    monkeypatch.setattr(threshold, "PARALLEL_MIN", 64)
    from hybridad.backends.numba.threads import _blas_libraries

    blas = [lib for lib in ThreadpoolController().lib_controllers if lib.user_api == "blas"]
    before = [lib.get_num_threads() for lib in blas]
    plans = {lib.filepath for lib in _blas_libraries()}
    assert plans
    with SingleThreadedBlas():
        with SingleThreadedBlas():  # nested: restored by the outer one only
            assert all(lib.get_num_threads() == 1 for lib in blas if lib.filepath in plans)
        assert all(lib.get_num_threads() == 1 for lib in blas if lib.filepath in plans)
        # (another library -- numpy's own OpenBLAS -- keeps its threads)
        assert [lib.get_num_threads() for lib in blas if lib.filepath not in plans] == \
            [n for lib, n in zip(blas, before, strict=True) if lib.filepath not in plans]
    assert [lib.get_num_threads() for lib in blas] == before

    def f(W, X):
        return np.sum(np.tanh(X @ W) ** 2)

    W, X = rand((8, 8), seed=10), rand((200, 8), seed=11)  # (12800 multiply-adds)
    threaded, serial = ha.compile(f, W, X), ha.compile(f, W, X, parallel=False)
    # (a serial plan too: BLAS's threads would change its sums)
    assert threaded._program.blas_limited and serial._program.blas_limited
    assert not ha.compile(stencil, rand((300,), seed=12))._program.blas_limited  # no BLAS
    # a product too small for BLAS's threads (160 multiply-adds)
    assert not ha.compile(f, W[:4, :4], X[:10, :4])._program.blas_limited
    a, b = threaded.gradient(W, X), serial.gradient(W, X)
    np.testing.assert_allclose(a.gradient, b.gradient, rtol=1e-13)
    assert [lib.get_num_threads() for lib in blas] == before


_LIMITED_CHILD = """
import json, numpy as np, hybridad as ha
from threadpoolctl import ThreadpoolController
from hybridad.backends.numba import threads

W = np.linspace(-1, 1, 64).reshape(8, 8)
X = np.linspace(-1, 1, 40_000 * 8).reshape(40_000, 8)
plan = ha.compile(lambda W, X: np.sum(np.tanh(X @ W) ** 2), W, X, wait=True)
assert plan._program.blas_limited
seen = {}
enter = threads._blas_enter

def spy(libs=None):  # the thread counts while the plan runs
    enter(libs)
    seen.update({lib.filepath: lib.get_num_threads()
                 for lib in ThreadpoolController().lib_controllers if lib.user_api == "blas"})

threads._blas_enter = spy
before = {lib.filepath: lib.get_num_threads()
          for lib in ThreadpoolController().lib_controllers if lib.user_api == "blas"}
plan.gradient(W, X)
first = dict(seen)
# the generated fast path (a result given) limits it too, on every thread
# (no thread choice: a probe could run every call on one, where BLAS keeps
# its threads)
assert "gradient" in vars(plan)
plan._program.threads = None
res = plan.new_result()
seen.clear()
plan.gradient(W, X, out=res)
print(json.dumps([before, first, seen]))
"""


def test_the_blas_library_plans_call_is_the_one_limited(tmp_path):
    """A multithreaded plan limits the BLAS library it calls -- scipy's
    (scipy.linalg.cython_blas) -- to one thread while it runs, compiled or
    from the disk cache, and leaves numpy's own OpenBLAS alone (it used to be
    limited too: the plan never calls it, and another thread of the program
    may be in it meanwhile); so does the generated fast path of calls given a
    result."""
    import json
    import os
    import subprocess
    import sys

    import scipy

    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: every BLAS runs one thread")
    env = {**os.environ, "HYBRIDAD_CACHE_DIR": str(tmp_path)}
    scipy_libs = os.path.realpath(os.path.dirname(scipy.__file__)) + ".libs" + os.sep
    for run in ("compiled", "from the disk cache"):
        out = subprocess.run([sys.executable, "-c", _LIMITED_CHILD], env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        before, seen, fast = json.loads(out.stdout.strip().splitlines()[-1])
        assert seen, (run, "the plan's call never limited BLAS")
        assert fast == seen, (run, "the fast path's calls", fast, seen)
        ours = [p for p in seen if os.path.realpath(p).startswith(scipy_libs)]
        if not ours:
            pytest.skip("scipy ships no BLAS of its own here (one shared library)")
        assert [seen[p] for p in ours] == [1] * len(ours), (run, seen)
        others = [p for p in seen if p not in ours]
        assert {p: seen[p] for p in others} == {p: before[p] for p in others}, (run, seen)


@pytest.mark.parametrize("parallel", [True, False])
def test_a_region_and_its_reduced_twin_share_one_loop(monkeypatch, parallel):
    # x @ W + b: the cotangent times tanh' feeds the matmuls whole and b's
    # gradient summed over rows (a vector b), or over everything (a scalar
    # c): one loop writes the product and its sum (region_partial, wrt -1);
    # blocks of the full sum slice the stored value too
    from hybridad.backends.numba import reduce, threshold
    from hybridad.testing import assert_no_alloc, numerical_gradient
    from hybridad.transforms.partition import PRE_REDUCTION

    monkeypatch.setattr(threshold, "PARALLEL_MIN", 64)
    monkeypatch.setattr(reduce, "BLOCK", 96)  # blocks of 19 rows of the full sum
    monkeypatch.setattr(reduce, "CHUNK_ROWS", 16)  # chunks of the bias sum

    def f(W, b, c, X):
        h = np.tanh(X @ W + b)
        h2 = np.tanh(h @ W.T + c)
        return np.sum(h2 ** 2) + np.sum(h)

    W, b, c, X = rand((5, 7), seed=1), rand((7,), seed=2), np.array(0.3), rand((60, 5), seed=3)
    plan = ha.compile(f, W, b, c, X, argnums=(0, 1, 2), parallel=parallel, tiered=False)
    shared = [n for n in plan.graph.nodes
              if n.op == "region_partial" and n.attrs["wrt"] == PRE_REDUCTION]
    reduced = {n.args[0].attrs["body"].reduction.attrs["axis"] for n in shared}
    assert len(shared) == 2 and reduced == {(0,), (0, 1)}, reduced
    assert "its value before the sum" in plan.explain()
    res = plan.gradient(W, b, c, X)
    ref = ha.gradient(f, W, b, c, X, argnums=(0, 1, 2), backend="numpy")
    for got, want in zip(res.gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)
    fd = numerical_gradient(lambda v: f(W, v, c, X), b.copy())
    np.testing.assert_allclose(res.gradient[1], fd, rtol=1e-7, atol=1e-9)
    fd_c = numerical_gradient(lambda v: f(W, b, v[0], X), c.reshape(1))
    np.testing.assert_allclose(res.gradient[2], fd_c[0], rtol=1e-7)
    assert_no_alloc(plan.gradient, W, b, c, X, out=res, n=10)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_zero_d_operands_of_parallel_fused_reductions(monkeypatch, axis):
    # a 0-d array read inside a prange over blocks, chunks or rows failed to
    # compile (numba's parfor lowering cannot type it): it is read once before
    from hybridad.backends.numba import reduce, threshold
    from hybridad.testing import assert_no_alloc

    monkeypatch.setattr(threshold, "PARALLEL_MIN", 64)
    monkeypatch.setattr(reduce, "BLOCK", 96)
    monkeypatch.setattr(reduce, "CHUNK_ROWS", 16)

    def f(x, c):
        return np.sum(np.sum(np.tanh(x + c) ** 2, axis=axis) * c)

    x, c = rand((60, 7), seed=4), np.array(0.3)
    plan = ha.compile(f, x, c, argnums=(0, 1), tiered=False)
    assert "prange(" in plan._program.source and "_h_" in plan._program.source
    res = plan.gradient(x, c)
    ref = ha.gradient(f, x, c, argnums=(0, 1), backend="numpy")
    np.testing.assert_allclose(float(res.value), float(ref.value), rtol=1e-13)
    for got, want in zip(res.gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    assert_no_alloc(plan.gradient, x, c, out=res, n=10)


def test_a_reduced_twin_that_comes_first_keeps_its_place():
    # the reducing region before the plain one, read in between: it stays
    # where it is, and the plain one becomes its stored value in place
    from hybridad.ir.graph import Node
    from hybridad.transforms.partition import PRE_REDUCTION, Region, share_reduced_values

    f64 = np.dtype(np.float64)

    def node(i, op, args, attrs, shape):
        return Node(i, op, tuple(args), attrs, shape, f64, "backward")

    x = node(0, "input", (), {"index": 0}, (4, 3))
    y = node(1, "input", (), {"index": 1}, (4, 3))
    m1 = node(2, "multiply", (x, y), {}, (4, 3))
    m2 = node(3, "multiply", (x, y), {}, (4, 3))
    s2 = node(4, "sum", (m2,), {"axis": (0,), "keepdims": True}, (1, 3))
    red = node(5, "region", (x, y), {"body": Region([m2], s2, [x, y]), "mode": "value"}, (1, 3))
    early = node(6, "negative", (red,), {}, (1, 3))
    plain = node(7, "region", (x, y), {"body": Region([m1], None, [x, y]), "mode": "value"},
                 (4, 3))
    late = node(8, "negative", (plain,), {}, (4, 3))
    out = share_reduced_values([x, y, red, early, plain, late], (early, late))
    assert [n.id for n in out] == [0, 1, 5, 6, 7, 8]
    assert plain.op == "region_partial" and plain.args == (red,)
    assert plain.attrs == {"wrt": PRE_REDUCTION}


@pytest.mark.parametrize("parallel, dtype, shape", [
    (True, np.float64, (60, 7)), (False, np.float64, (60, 7)), (True, np.float32, (60, 7)),
    (True, np.float64, (6, 5))])
def test_vjp_regions_summed_whole_share_one_loop(monkeypatch, parallel, dtype, shape):
    # scalar parameters broadcast over a matrix (a GP kernel's), partials
    # recomputed: their gradients are one vjp_sums region (a sum per
    # parameter, no temporaries); the row vector's gradient sums over axis 0
    # only: a vjp region summed over that axis in its loop.  Blocks of 19
    # rows (13 of 4 elements in a prange, or in order), or one block (6 x 5)
    from hybridad.backends.numba import reduce, threshold
    from hybridad.ops.region import recompute_partials
    from hybridad.testing import assert_no_alloc, numerical_gradient
    from hybridad.transforms.partition import VJP_SUMS

    if shape[0] > 10:
        monkeypatch.setattr(threshold, "PARALLEL_MIN", 64)
        monkeypatch.setattr(reduce, "BLOCK", 96)

    def f(theta, r, D, v):
        K = np.exp(theta[1]) * np.exp(-0.5 * D / np.exp(2 * theta[0])) + theta[2] * D * D + r
        return np.sum(np.sin(K @ v))

    rng = np.random.default_rng(5)
    theta = np.array([0.3, -0.2, 0.7], dtype)
    r = rng.uniform(-1, 1, (1, shape[1])).astype(dtype)
    D, v = rng.uniform(0, 2, shape).astype(dtype), rng.uniform(-1, 1, shape[1]).astype(dtype)
    with recompute_partials():
        plan = ha.compile(f, theta, r, D, v, argnums=(0, 1), parallel=parallel, tiered=False)
        res = plan.gradient(theta, r, D, v)
    sums = [n for n in plan.graph.nodes if n.op == "region" and n.attrs["mode"] == VJP_SUMS]
    assert [len(n.attrs["wrt"]) for n in sums] == [3], plan.explain()
    vjps = [n for n in plan.graph.nodes if n.op == "region" and n.attrs["mode"] == "vjp"]
    # r's, summed over axis 0 as it is made: no temporary of the loop's shape
    assert [(n.shape, n.attrs.get("axis")) for n in vjps if n.attrs["body"].shape == shape] \
        == [((1, shape[1]), (0,))], plan.explain()
    assert "summed whole in the loop" in plan.explain()
    assert ("prange(" in plan._program.source) == (parallel and shape[0] > 10)
    ref = ha.gradient(f, theta.astype(np.float64), r.astype(np.float64), D.astype(np.float64),
                      v.astype(np.float64), argnums=(0, 1), backend="numpy")
    tol = 1e-12 if dtype == np.float64 else 2e-5
    for got, want in zip(res.gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    if dtype == np.float64:
        fd = numerical_gradient(lambda t: f(t, r, D, v), theta.copy())
        np.testing.assert_allclose(res.gradient[0], fd, rtol=1e-7)
    assert_no_alloc(plan.gradient, theta, r, D, v, out=res, n=10)


def _diag_gauss(p, X):
    d = X.shape[1:]
    k = int(np.prod(d))
    z = (X - p[:k].reshape(d)) * np.exp(-p[k:].reshape(d))
    return 0.5 * np.sum(z ** 2) + X.shape[0] * np.sum(p[k:])


@pytest.mark.parametrize("dtype, shape", [(np.float64, (40000, 7)), (np.float32, (40000, 7)),
                                          (np.float64, (33333, 3, 4)), (np.float64, (9001, 40))])
def test_row_parameter_gradients_are_summed_over_rows_in_their_loop(dtype, shape):
    # a mean and a log-scale per column: each gradient is the vjp of the loss's
    # region summed over axis 0, made as the region is evaluated (a temporary
    # of X's shape per parameter, written and summed, before), in blocks of
    # rows folded pairwise (backends/numba/leading.py)
    from hybridad.testing import assert_no_alloc, numerical_gradient

    rng = np.random.default_rng(2)
    X = rng.standard_normal(shape).astype(dtype)
    p = (0.3 * rng.standard_normal(2 * X[0].size)).astype(dtype)
    plans = [ha.compile(_diag_gauss, p, X, parallel=par, tiered=False) for par in (True, False)]
    assert "prange(" not in plans[1]._program.source  # (a serial plan: no loop on threads)
    for plan in plans:
        assert plan.explain().count("summed over axes (0,) as it is made") == 2, plan.explain()
        assert plan.memory.total_bytes < X.nbytes // 8, plan.explain()
    res = [plan.gradient(p, X) for plan in plans]
    np.testing.assert_array_equal(res[0].gradient, res[1].gradient)  # any thread count
    ref = ha.gradient(_diag_gauss, p.astype(np.float64), X.astype(np.float64), backend="numpy")
    tol = 1e-11 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(res[0].gradient, ref.gradient, rtol=tol, atol=tol * shape[0])
    if dtype == np.float64:
        fd = numerical_gradient(lambda q: _diag_gauss(q, X), p.copy())
        np.testing.assert_allclose(res[0].gradient, fd, rtol=1e-6, atol=1e-3)
    assert_no_alloc(plans[0].gradient, p, X, out=res[0], n=10)


def _loss(p, x):
    r = p[0] * np.exp(-p[1] * x) + p[2] * np.sin(x) - 0.5
    return np.sum(r * r)


def _scaled_loss(p, x):
    return 0.5 * _loss(p, x) + np.sum(np.tanh(p[0] * x))


@pytest.mark.parametrize("f, parallel, shape", [
    (_loss, True, (60, 7)), (_scaled_loss, False, (60, 7)), (_scaled_loss, True, (60, 7)),
    (_loss, True, (9,))])
def test_stored_partials_summed_whole_are_summed_in_the_loss_loop(monkeypatch, f, parallel,
                                                                  shape):
    # a loss of scalar parameters stores each one's partial per element, and
    # the gradient sums it (times the loss's cotangent, when it is not the
    # output): the loss's loop sums it instead (region_partial summed=True,
    # 0-d).  Blocks of 19 rows (13 of 4 elements in a prange, or in order),
    # or one block (9 elements)
    from hybridad.backends.numba import reduce, threshold
    from hybridad.testing import assert_no_alloc, numerical_gradient

    if shape[0] > 10:
        monkeypatch.setattr(threshold, "PARALLEL_MIN", 64)
        monkeypatch.setattr(reduce, "BLOCK", 96)
    p, x = np.array([1.0, 1.3, 0.2]), np.linspace(0, 3, int(np.prod(shape))).reshape(shape)
    plan = ha.compile(f, p, x, argnums=0, parallel=parallel, tiered=False)
    partials = [n for n in plan.graph.nodes if n.op == "region_partial"]
    summed = [n for n in partials if n.attrs.get("summed")]
    assert len(summed) >= 3 and all(n.shape == () for n in summed), plan.explain()
    assert len(partials) == len(summed)  # no partial array is left
    assert "summed whole in the loop" in plan.explain()
    assert ("prange(" in plan._program.source) == (parallel and shape[0] > 10)
    res = plan.gradient(p, x)
    ref = ha.gradient(f, p, x, argnums=0, backend="numpy")
    np.testing.assert_allclose(float(res.value), float(ref.value), rtol=1e-13)
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-12, atol=1e-13)
    fd = numerical_gradient(lambda q: f(q, x), p.copy())
    np.testing.assert_allclose(res.gradient, fd, rtol=1e-7)
    assert_no_alloc(plan.gradient, p, x, out=res, n=10)


def test_cheap_losses_of_scalar_parameters_store_their_summed_partials():
    # arithmetic this cheap was recomputed in the backward sweep (a second
    # pass over x); a partial its loop sums costs no array, so it is stored
    # (summed) instead: no backward region reads x again, and the arena
    # holds no array of x's size
    from hybridad.transforms.partition import VJP_SUMS

    def f(p, x):
        return np.sum((p[0] * x + p[1]) ** 2)

    p, x = np.array([0.7, -0.2]), np.linspace(-1, 1, 5000)
    plan = ha.compile(f, p, x, argnums=0, tiered=False)
    assert "no array, no second evaluation" in plan.explain()
    assert not [n for n in plan.graph.nodes if n.op == "region" and
                n.attrs["mode"] in ("vjp", VJP_SUMS) and n.attrs["body"].shape == x.shape]
    assert plan.memory.total_bytes < x.nbytes
    res = plan.gradient(p, x)
    np.testing.assert_allclose(res.gradient, [2 * np.sum((p[0] * x + p[1]) * x),
                                              2 * np.sum(p[0] * x + p[1])], rtol=1e-12)


def _expit(u):
    from scipy.special import expit

    return expit(u)


@pytest.mark.parametrize("name, f, n_stored", [  # (n_stored: at most)
    ("tanh", lambda x, W, a: np.tanh(x @ W + a[0]), 0),
    ("exp", lambda x, W, a: np.exp(a[0] * (x @ W)), 0),
    ("sqrt", lambda x, W, a: np.sqrt((x @ W) ** 2 + a[0]), 1),
    ("expit", lambda x, W, a: _expit(x @ W - a[0]), 0),
    ("sin", lambda x, W, a: np.sin(x @ W + a[0]), 1),
    ("tanh_columns", lambda x, W, a: np.tanh((x @ W) * x[:, :1] + a[0]), 0),
    ("tanh_sin", lambda x, W, a: np.tanh(np.sin(x @ W) * a[0]), 2)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_partials_that_are_functions_of_the_output_are_computed_from_it(name, f, n_stored,
                                                                         dtype):
    # with u = x @ W: tanh(u + a): 1 - out**2 for both; exp(a u): a * out for
    # u (a a scalar input), u * out for a (u an array input: arithmetic on
    # it, read again in the backward); sqrt(u**2 + a): 0.5 / out for a, 2 u *
    # 0.5 / out stored for u (a division of an array input: not cheap
    # arithmetic); expit(u - a): out (1 - out) and its negative; sin: cos,
    # stored (once for both); tanh(u c + a), c a column of x: c (1 - out**2)
    # and u (1 - out**2); tanh(sin(u) a): sin and cos of an array input are
    # not recomputed for it (stored): the backward reads the region's
    # output where it can, nothing stored for that
    from hybridad.testing import assert_no_alloc, numerical_gradient

    def loss(x, W, a):  # the region's output feeds a matmul (its cotangent an array)
        return np.sum((f(x, W, a) @ np.linspace(-1, 1, 10, dtype=dtype).reshape(5, 2)) ** 2)

    rng = np.random.default_rng(3)
    x, W = rng.uniform(-1, 1, (40, 3)).astype(dtype), rng.uniform(-1, 1, (3, 5)).astype(dtype)
    a = np.array([0.3], dtype)
    plan = ha.compile(loss, x, W, a, argnums=(0, 1, 2), tiered=False)
    stored = [n for n in plan.graph.nodes if n.op == "region_partial" and n.attrs["wrt"] >= 0
              and not n.attrs.get("summed")]
    assert ("from the output" in plan.explain()) == (name not in ("sin", "tanh_sin"))
    assert len(stored) <= n_stored, plan.explain()  # (the rest stored or recomputed)
    if n_stored == 0:  # every partial from the output: none stored, the body not run again
        assert not [n for n in plan.graph.nodes if n.op == "region" and
                    n.attrs["mode"] != "value" and n.attrs["body"].shape == (40, 5)]
    res = plan.gradient(x, W, a)
    assert all(g.dtype == dtype for g in res.gradient)
    wide = [v.astype(np.float64) for v in (x, W, a)]
    ref = ha.gradient(loss, *wide, argnums=(0, 1, 2), backend="numpy")
    tol = 1e-12 if dtype == np.float64 else 2e-5
    for got, want in zip(res.gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    if dtype == np.float64:
        fd = numerical_gradient(lambda v: loss(x, v, a), W.copy())
        np.testing.assert_allclose(res.gradient[1], fd, rtol=1e-7, atol=1e-9)
    assert_no_alloc(plan.gradient, x, W, a, out=res, n=5)


def test_products_over_an_axis_of_length_one_are_fused_multiplies():
    """A matmul whose contracted axis has length 1 (a one-feature input layer,
    stacks of outer products, a length-1 vector times a row) is a broadcast
    multiply: no matmul node in the plan, forward or backward (the weight's
    gradient is a sum over the batch in a region), values numpy's bit for bit
    (one product per element either way), gradients against the numpy backend
    and differences; integer products stay matmuls."""
    from conftest import assert_grad

    rng = np.random.default_rng(5)
    X, W, b = rng.standard_normal((50, 1)), rng.standard_normal((1, 8)), rng.standard_normal(8)
    S, T, v = rng.standard_normal((3, 4, 1)), rng.standard_normal((1, 6)), rng.standard_normal(1)

    def layers(X, W, b, S, T, v):
        h = np.tanh(X @ W + b)
        return h, S @ T, v @ T, np.sum(h ** 2) + np.sum(np.sin(S @ T)) + np.sum((v @ T) ** 3)

    def f(*args):
        return layers(*args)[-1]

    args = (X, W, b, S, T, v)
    plan = ha.compile(lambda *a: np.concatenate([np.ravel(p) for p in layers(*a)]),
                      *args, jacobian=True)
    assert not [n for n in plan.graph.nodes if n.op == "matmul"]
    got = plan.value(*args)
    h = np.tanh(X @ W + b)  # vmath's tanh: to rounding
    np.testing.assert_allclose(got[:h.size], h.ravel(), rtol=1e-15, atol=1e-15)
    want = np.concatenate([np.ravel(p) for p in (S @ T, v @ T)])
    np.testing.assert_array_equal(got[h.size:h.size + want.size], want)
    gplan = ha.compile(f, *args, argnums=tuple(range(6)))
    assert not [n for n in gplan.graph.nodes if n.op == "matmul"]
    assert_grad(f, args, argnums=tuple(range(6)))
    from hybridad.testing import assert_no_alloc

    res = gplan.new_result()
    assert_no_alloc(gplan.gradient, *args, out=res, n=20)
    ints = ha.compile(lambda x, m: np.sum(x * (m @ m.T)), rng.standard_normal((5, 5)),
                      np.ones((5, 1), np.int64))
    assert [n for n in ints.graph.nodes if n.op == "matmul"]


@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_value_region_only_one_loop_reads_is_evaluated_in_it(parallel, dtype):
    """The cotangent of a layer whose next layer has one output unit (``g *
    w^T``) is read by two twin chain products; once they are one loop
    (share_reduced_values: the bias sum and the value before it),
    absorb_producers evaluates it there: no backward region of its own, no
    array for it; gradients agree with the numpy backend, the value before
    the sum (read by the matmuls) included; nothing allocated per call."""
    from hybridad.testing import assert_no_alloc

    rng = np.random.default_rng(11)
    X = rng.uniform(-1, 1, (3000, 4)).astype(dtype)
    W1, b1 = rng.standard_normal((4, 16)).astype(dtype), rng.standard_normal(16).astype(dtype)
    w2, b2 = rng.standard_normal((16, 1)).astype(dtype), rng.standard_normal(1).astype(dtype)

    def loss(W1, b1, w2, b2):
        h = np.tanh(X @ W1 + b1)
        return np.mean((h @ w2 + b2 - 0.5) ** 2)

    args = (W1, b1, w2, b2)
    plan = ha.compile(loss, *args, argnums=(0, 1, 2, 3), parallel=parallel, tiered=False)
    wide = [n for n in plan.graph.nodes if n.op == "region" and n.phase == "backward"
            and n.attrs["mode"] == "value" and n.attrs["body"].shape == (3000, 16)]
    assert len(wide) == 1 and wide[0].attrs["body"].reduction is not None, plan.explain()
    assert [n.op for n in wide[0].attrs["body"].nodes][:2] == ["multiply", "multiply"]
    res = plan.gradient(*args)
    ref = ha.gradient(loss, *[a.astype(np.float64) for a in args], argnums=(0, 1, 2, 3),
                      backend="numpy")
    tol = 1e-12 if dtype == np.float64 else 2e-5
    for got, want in zip(res.gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    assert_no_alloc(plan.gradient, *args, out=res, n=5)
