"""Two matrix-vector products of one matrix, ``A u`` and ``A^T v``, as one
``matvec_pair`` (:func:`hybridad.transforms.products.pair_matvecs`): one
read of ``A`` (:func:`hybridad.backends.numba.rt.matvec_pair`).  The kernel
against numpy on odd shapes, serial and threaded alike to the bit; plans
whose products pair in the forward sweep (here; a quadratic form's hoisted
product across the sweeps in tests/test_products.py) against the numpy
backend and finite differences, allocating nothing, the parallel and serial
plans to the bit; products that must not pair (the second's vector made
from the first's result) left alone; the op's own vjp and jvp against finite
differences."""

import numpy as np
import pytest
from conftest import assert_grad, assert_matrix_vector_hvp, rand

import hybridad as ha
from hybridad.backends.numba import rt
from hybridad.backends.numba.machine import machine
from hybridad.core.tracer import Tracer
from hybridad.ops.common import bind
from hybridad.testing import assert_no_alloc, count_allocations


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_kernel_agrees_with_numpy_on_any_thread_count(dtype):
    """Rows not a multiple of the four taken at once nor of the parts,
    columns not of the summing block; old contents (NaN) never read."""
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == np.float64 else dict(rtol=2e-5, atol=2e-5)
    for m, k in ((1, 1), (3, 5), (7, 3), (67, 301), (130, 70), (300, 600), (1000, 9), (9, 1000)):
        a = rand((m, k), seed=m + k).astype(dtype)
        u, v = rand((k,), seed=m).astype(dtype), rand((m,), seed=k).astype(dtype)
        outs = []
        for kernel in (rt.matvec_pair, rt.matvec_pair_par):
            y, z = np.full(m, np.nan, dtype), np.full(k, np.nan, dtype)
            kernel(a, u, v, y, z, np.full((machine().pair_parts(m), k), np.nan, dtype))
            np.testing.assert_allclose(y, a @ u, **tol)
            np.testing.assert_allclose(z, a.T @ v, **tol)
            outs.append((y, z))
        for one, two in zip(*outs, strict=True):
            np.testing.assert_array_equal(one, two)


def both_ways(x, w, A):  # A x and A^T w in the forward, w ready: one pair
    return np.sum(np.tanh(A @ x)) + np.sum(np.sin(A.T @ w)) + 0.5 * (w @ (A @ x))


def chained(x, A):  # A^T's vector is made from A x: must not pair in the forward
    return np.sum(np.cos(A.T @ np.tanh(A @ x)))


def _check(f, args, argnums, parallel=True):
    """The plan's gradient against the numpy backend's (itself checked
    against finite differences by conftest's assert_grad), nothing allocated."""
    plan = ha.compile(f, *args, argnums=argnums, parallel=parallel, tiered=False)
    res = plan.gradient(*args)
    ref = assert_grad(f, args, argnums, backends=("numpy",))
    assert float(res.value) == pytest.approx(float(ref.value), rel=1e-12)
    grads = res.gradient if isinstance(argnums, tuple) else (res.gradient,)
    refs = ref.gradient if isinstance(argnums, tuple) else (ref.gradient,)
    for g, r in zip(grads, refs, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12 * np.abs(r).max())
    with count_allocations() as counts:
        for _ in range(5):
            plan.gradient(*args, out=res)
    assert counts.allocations == 0
    return plan, res


def _both(parallel):
    x, w, A = rand((300,), seed=1), rand((200,), seed=2), rand((200, 300), seed=3) / 30
    plan, res = _check(both_ways, (x, w, A), (0, 1, 2), parallel)
    pairs = [n for n in plan.graph.nodes if n.op == "matvec_pair"]
    assert [n.phase for n in pairs] == ["forward"], str(plan.graph)
    assert "pair_matvecs" in plan.explain() and "_mv_pair" in plan._program.source
    return res


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "serial"])
def test_pairs_in_both_sweeps_keep_the_gradient(parallel):
    _both(parallel)


def test_the_parallel_and_serial_plans_agree_to_the_bit():
    a, b = _both(True), _both(False)
    assert float(a.value) == float(b.value)
    for g, h in zip(a.gradient, b.gradient, strict=True):
        np.testing.assert_array_equal(g, h)


def test_a_vector_made_from_the_first_product_is_not_paired_with_it():
    x, A = rand((150,), seed=4), rand((120, 150), seed=5) / 12
    plan, _ = _check(chained, (x, A), (0, 1))
    for n in plan.graph.nodes:  # no forward pair: A^T tanh(A x) waits for A x
        assert not (n.op == "matvec_pair" and n.phase == "forward"), str(plan.graph)


def test_an_hvp_reads_its_matrix_twice():
    """A Hessian-vector product's ``X v`` (``v`` an argument, its node made
    after the backward pass) joins the forward's ``X w`` (one ``matvec_two``),
    and then the tangent's ``X^T g'`` -- its vector made from ``X v`` -- the
    backward's ``X^T g``: two passes over X instead of four (logistic
    regression: 23.6 -> 15.4 ms at 10^5 x 100 with three, bench notes)."""
    X, y = rand((20000, 100), seed=9), np.sign(rand((20000,), seed=10))  # 16 MB: one
    w, v = rand((100,), seed=11) / 4, rand((100,), seed=12)  # read beats two (cost model)

    def logreg(w, X, y):
        return np.mean(np.logaddexp(0, -y * (X @ w))) + 1e-3 * np.sum(w ** 2)

    plan = ha.compile(logreg, w, X, y, hvp=True)
    X_node = plan.graph.inputs[1]
    reads = [(n.op, n.phase, n.attrs.get("form")) for n in plan.graph.nodes
             if n.op in ("matmul", "matvec_pair", "matvec_two") and n.args[0] is X_node]
    assert reads == [("matvec_two", "forward", "dot"), ("matvec_two", "backward", "axpy")], \
        str(plan.graph)
    assert "_mv_dot2" in plan._program.source and "_mv_axpy2" in plan._program.source
    res = plan.hvp(w, X, y, v=v)
    ref = ha.hvp(logreg, w, v, X, y, backend="numpy")
    assert float(res.value) == pytest.approx(float(ref.value), rel=1e-13)
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(res.hvp, ref.hvp, rtol=1e-11, atol=1e-14)
    assert_no_alloc(plan.hvp, w, X, y, v=v, out=res, n=3, warmup=0)


def test_a_direction_made_from_arguments_moves_ahead_to_its_pair():
    """``X (s v)``: the tangent's vector is made from arguments alone, though
    in the tangent sweep; its computation moves ahead, to where it joins the
    forward's ``X (s w)``."""
    X, y = rand((20000, 100), seed=13), np.sign(rand((20000,), seed=14))
    w, v, s = rand((100,), seed=15) / 4, rand((100,), seed=16), rand((100,), seed=17) + 2

    def logreg(w, X, y):
        return np.mean(np.logaddexp(0, -y * (X @ (w * s)))) + 1e-3 * np.sum(w ** 2)

    plan = ha.compile(logreg, w, X, y, hvp=True)
    pairs = [n for n in plan.graph.nodes if n.op in ("matvec_pair", "matvec_two")]
    assert [(n.phase, n.attrs.get("form")) for n in pairs] == \
        [("forward", "dot"), ("backward", "axpy")], str(plan.graph)
    order = {n.id: i for i, n in enumerate(plan.graph.nodes)}
    assert all(order[a.id] < order[p.id] for p in pairs for a in p.args)
    res = plan.hvp(w, X, y, v=v)
    ref = ha.hvp(logreg, w, v, X, y, backend="numpy")
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(res.hvp, ref.hvp, rtol=1e-11, atol=1e-14)


def test_float32_rows():
    x, w = rand((257,), seed=6).astype(np.float32), rand((130,), seed=7).astype(np.float32)
    A = (rand((130, 257), seed=8) / 16).astype(np.float32)
    plan = ha.compile(both_ways, x, w, A, argnums=(0, 1), tiered=False)
    assert any(n.op == "matvec_pair" for n in plan.graph.nodes)
    res = plan.gradient(x, w, A)
    ref = ha.gradient(both_ways, *(a.astype(np.float64) for a in (x, w, A)), argnums=(0, 1),
                      backend="numpy")
    for g, r in zip(res.gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4 * np.abs(r).max())


def _pair(A, u, v):
    """``[A u, A^T v]``: the op itself on tracers (its rules differentiate it),
    numpy's products on arrays (the finite differences)."""
    if isinstance(A, Tracer):
        return bind("matvec_pair", A, u, v)
    return np.concatenate([A @ u, A.T @ v])


def through_the_op(A, u, v):
    return np.sum(np.sin(_pair(A, u, v)) * np.arange(1.0, A.shape[0] + A.shape[1] + 1))


def test_the_ops_rules_against_finite_differences():
    """The op's vjp (every operand; the numba backend runs the op itself, as
    the lowering makes it) and its jvp (a Hessian-vector product, forward
    over reverse, against finite differences of the gradient), nothing
    allocated per call by the numba plan."""
    A, u, v = rand((70, 90), seed=11) / 9, rand((90,), seed=12), rand((70,), seed=13)
    assert_grad(through_the_op, (A, u, v), (0, 1, 2))
    plan = ha.compile(through_the_op, A, u, v, argnums=(0, 1, 2), tiered=False)
    assert "matvec_pair" in [n.op for n in plan.graph.nodes if n.phase == "forward"]
    assert "_mv_pair" in plan._program.source
    res = plan.gradient(A, u, v)
    with count_allocations() as counts:
        for _ in range(5):
            plan.gradient(A, u, v, out=res)
    assert counts.allocations == 0
    assert_matrix_vector_hvp(through_the_op, A, u, v)  # (its jvp: forward over reverse)


@pytest.mark.parametrize("shape", [(100, 64), (200, 64)])
def test_a_constant_vector_made_late_moves_ahead_with_its_pair(shape):
    """``sum(tanh(X * w) @ w)``: the backward's seed of ones (a constant
    node, traced after the forward product) is the vector of the product that
    pairs with the forward's ``tanh(X * w) @ w`` -- it moves ahead with the
    pair (it was left behind: the lowering failed on a use before definition)."""
    X, w = rand(shape, seed=21), rand((shape[1],), seed=22)

    def f(w, X):
        return np.sum(np.tanh(X * w) @ w)

    assert_grad(f, (w, X), argnums=(0, 1), rtol=1e-6)
    plan = ha.compile(f, w, X, argnums=(0, 1), parallel=False)
    assert_no_alloc(plan.gradient, w, X, out=plan.gradient(w, X), n=3)
