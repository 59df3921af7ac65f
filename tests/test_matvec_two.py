"""Two matrix-vector products of one form over one matrix -- ``A x`` and
``A y``, or ``A^T x`` and ``A^T y`` -- as one ``matvec_two``
(:func:`hybridad.transforms.products.pair_matvecs`): one read of ``A``
(:mod:`hybridad.backends.numba.matvecs`).  The kernels against numpy on odd
shapes, serial and threaded alike to the bit; an HVP whose forward ``A u``
and tangent ``A du`` share a read, and then its backward and tangent
``A^T w`` (four reads of ``A`` before, two now), against the numpy backend
and finite differences of the gradient, allocating nothing, the parallel and
serial plans to the bit; products whose second vector is made from the first
product left apart; the op's own vjp and jvp against finite differences."""

import numpy as np
import pytest
from conftest import assert_grad, assert_matrix_vector_hvp, rand

import hybridad as ha
from hybridad.backends.numba import matvecs
from hybridad.core.tracer import Tracer
from hybridad.ops.common import bind
from hybridad.testing import assert_no_alloc

SHAPES = ((1, 1), (3, 5), (7, 3), (67, 301), (130, 70), (300, 600), (1000, 9), (9, 1000),
          (5, 1031))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("form", ["dot", "axpy"])
def test_kernels_agree_with_numpy_on_any_thread_count(form, dtype):
    """Rows not a multiple of the four taken at once, columns not of the
    block; the results' old contents (NaN) never read."""
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == np.float64 else dict(rtol=2e-5, atol=2e-5)
    kernels = {"dot": (matvecs.matvec_dot2, matvecs.matvec_dot2_par),
               "axpy": (matvecs.matvec_axpy2, matvecs.matvec_axpy2_par)}[form]
    for m, k in SHAPES:
        a = rand((m, k), seed=m + k).astype(dtype)
        n, r = (k, m) if form == "dot" else (m, k)
        x, y = rand((n,), seed=m).astype(dtype), rand((n,), seed=k).astype(dtype)
        outs = []
        for kernel in kernels:
            ox, oy = np.full(r, np.nan, dtype), np.full(r, np.nan, dtype)
            kernel(a, x, y, ox, oy)
            want = (a @ x, a @ y) if form == "dot" else (a.T @ x, a.T @ y)
            np.testing.assert_allclose(ox, want[0], **tol)
            np.testing.assert_allclose(oy, want[1], **tol)
            outs.append((ox, oy))
        for one, two in zip(*outs, strict=True):
            np.testing.assert_array_equal(one, two)


def chain(x, A):  # a matmul inside an elementwise chain (bench_hvp's "chain")
    return np.sum(np.tanh(A @ (x * np.cos(x))) ** 2) + np.sum(np.exp(-x ** 2) * x)


def _chain_problem():
    return rand((3000,), seed=1), rand((64, 3000), seed=2) / 40, rand((3000,), seed=3)


def _hvp_plan(parallel):
    x, A, v = _chain_problem()
    plan = ha.compile(chain, x, A, hvp=True, parallel=parallel, tiered=False)
    res = plan.hvp(x, A, v=v)
    return plan, res


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "serial"])
def test_an_hvp_reads_its_matrix_twice(parallel):
    """Forward ``A u`` with tangent ``A du`` (``du`` made from ``x`` and ``v``
    alone: moved ahead), then backward ``A^T w`` with tangent ``A^T w'``
    (``w'`` made from the first pair's result): two reads of ``A``; the
    value, gradient and ``H v`` those of the numpy backend, ``H v`` that of
    finite differences of the gradient; nothing allocated per call."""
    x, A, v = _chain_problem()
    plan, res = _hvp_plan(parallel)
    reads = [(n.op, n.attrs.get("form")) for n in plan.graph.nodes
             if n.op in ("matmul", "matvec_pair", "matvec_two")]
    assert reads == [("matvec_two", "dot"), ("matvec_two", "axpy")], str(plan.graph)
    assert "one read of A for both" in plan.explain()
    ref = ha.hvp(chain, x, v, A, backend="numpy")
    assert float(res.value) == pytest.approx(float(ref.value), rel=1e-13)
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(res.hvp, ref.hvp, rtol=1e-11, atol=1e-13)
    h = 1e-6
    grad = lambda z: ha.gradient(chain, z, A, backend="numpy").gradient  # noqa: E731
    fd = (grad(x + h * v) - grad(x - h * v)) / (2 * h)
    np.testing.assert_allclose(res.hvp, fd, rtol=0, atol=1e-6 * np.abs(fd).max())
    assert_no_alloc(plan.hvp, x, A, v=v, out=res, n=3, warmup=1)


def test_the_parallel_and_serial_plans_agree_to_the_bit():
    (_, a), (_, b) = _hvp_plan(True), _hvp_plan(False)
    assert float(a.value) == float(b.value)
    np.testing.assert_array_equal(a.gradient, b.gradient)
    np.testing.assert_array_equal(a.hvp, b.hvp)


def twice(x, B):  # B (tanh(B x)): the second vector is made from the first product
    return np.sum(np.sin(B @ np.tanh(B @ x)))


def test_a_vector_made_from_the_first_product_is_not_grouped_with_it():
    x, B = rand((200,), seed=4), rand((200, 200), seed=5) / 15
    plan = ha.compile(twice, x, B, tiered=False)
    forward = [n for n in plan.graph.nodes if n.phase == "forward"]
    assert not any(n.op == "matvec_two" for n in forward), str(plan.graph)
    res = plan.gradient(x, B)
    ref = assert_grad(twice, (x, B), 0, backends=("numpy",))
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-10, atol=1e-13)


def _two(A, x, y, form):
    """The op itself on tracers (its rules differentiate it), numpy's
    products on arrays (the finite differences)."""
    if isinstance(A, Tracer):
        return bind("matvec_two", A, x, y, form=form)
    return np.stack([A @ x, A @ y]) if form == "dot" else np.stack([A.T @ x, A.T @ y])


@pytest.mark.parametrize("form", ["dot", "axpy"])
def test_the_ops_rules_against_finite_differences(form):
    """The op's vjp (every operand; the numba backend runs the op itself)
    and its jvp (a Hessian-vector product, forward over reverse, against
    finite differences of the gradient); nothing allocated per call."""
    m, k = 70, 90
    n = k if form == "dot" else m
    A, x, y = rand((m, k), seed=11) / 9, rand((n,), seed=12), rand((n,), seed=13)
    r = m if form == "dot" else k
    weights = np.arange(1.0, 2 * r + 1).reshape(2, r)

    def f(A, x, y):
        return np.sum(np.sin(_two(A, x, y, form)) * weights)

    assert_grad(f, (A, x, y), (0, 1, 2))
    plan = ha.compile(f, A, x, y, argnums=(0, 1, 2), tiered=False)
    assert "matvec_two" in [n.op for n in plan.graph.nodes]
    assert f"_mv_{form}2" in plan._program.source
    assert_no_alloc(plan.gradient, A, x, y, out=plan.gradient(A, x, y), n=5, warmup=0)
    assert_matrix_vector_hvp(f, A, x, y)  # (its jvp: forward over reverse)
