"""np.einsum of three or more operands contracts them two at a time, in the
order numpy's ``einsum_path`` (greedy) finds, where that takes fewer
multiplications than one broadcast product of them all: ``'ij,jk,ki->'`` is
two matrix products, not an n^3 product stored for its backward pass.
Values are numpy's, gradients finite differences', on both CPU backends."""

from __future__ import annotations

import numpy as np
import pytest

import hybridad as ha
from hybridad.testing import check_grads, count_allocations

RNG = np.random.default_rng(5)
A, B, C = (RNG.standard_normal((6, 6)) for _ in range(3))
V = RNG.standard_normal(6)
X = RNG.standard_normal((9, 6))
T3 = RNG.standard_normal((2, 6, 3))

CASES = {
    "trace_of_three": lambda x: np.einsum("ij,jk,ki->", x, B, x),
    "quadratic_forms": lambda x: np.sum(np.einsum("bi,ij,bj->b", X, x, X) ** 2),
    "chain_of_four": lambda x: np.sum(np.einsum("ij,jk,kl,l->i", x, B, C, V) ** 2),
    "implicit_output": lambda x: np.sum(np.einsum("ij,jk,kl", x, B, x) ** 2),
    "broadcast_unit_axis": lambda x: np.sum(np.einsum("ij,jk,ik->i", x[:, :1], B[:1], x) ** 2),
    "repeated_letter": lambda x: np.einsum("ii,ij,j->", x, B, V),
    "ellipsis": lambda x: np.sum(np.einsum("...ij,jk,k->...i", T3.transpose(0, 2, 1), x, V) ** 2),
    "all_elementwise": lambda x: np.einsum("ij,ij,ij->", x, x, B),
    "outer_then_reduce": lambda x: np.sum(np.einsum("i,j,ij->ij", x[0], x[1], C) ** 2),
    # batched products (batch letters in both operands and the output)
    "batched_gmm": lambda x: np.sum(np.einsum("kij,knj->kni", x.reshape(4, 3, 3)[:, :2, :2],
                                              T3.reshape(4, 3, 3)[:, :, 1:]) ** 2),
    "batched_attention": lambda x: np.sum(np.tanh(np.einsum("bqd,bkd->bqk", x.reshape(4, 3, 3),
                                                            T3.reshape(4, 3, 3)))),
    "batched_free_sum": lambda x: np.sum(np.einsum("bij,bjk->bk", x.reshape(4, 3, 3),
                                                   T3.reshape(4, 3, 3)) ** 2),
    "batched_broadcast": lambda x: np.sum(np.einsum("bij,bjk->bik", x.reshape(4, 3, 3),
                                                    T3.reshape(4, 3, 3)[:1]) ** 2),
    "batched_vecmat": lambda x: np.sum(np.einsum("bi,bij->bj", x[:4, :3],
                                                 T3.reshape(4, 3, 3)) ** 2),
    "batched_matvec_rows": lambda x: np.sum(np.einsum("bij,bj->bi", T3.reshape(4, 3, 3),
                                                      x[:4, :3]) ** 2),
    "batched_three": lambda x: np.sum(np.einsum("bi,bij,bjk->bk", x[:4, :3],
                                                x.reshape(4, 3, 3), T3.reshape(4, 3, 3)) ** 2),
}


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients(name, backend):
    f = CASES[name]
    x = A.copy()
    res = ha.gradient(f, x, backend=backend)
    assert float(res.value) == pytest.approx(float(f(x)), rel=1e-12)
    check_grads(f, x, rtol=1e-6, atol=1e-8)


def test_a_trace_of_products_is_two_matrix_products():
    """At n = 120 the broadcast product would be n^3 = 1.7 million elements
    (13.8 MB stored for the backward pass); the plan holds a few n x n."""
    n = 120
    a, b = RNG.standard_normal((n, n)), RNG.standard_normal((n, n))

    def f(a):
        return np.einsum("ij,jk,ki->", a, b, a)
    plan = ha.compile(f, a)
    assert plan.memory.total_bytes < 8 * n * n * 8
    res = ha.GradientResult(a)
    plan.gradient(a, out=res)
    np.testing.assert_allclose(res.gradient, (b @ a).T + (a @ b).T, rtol=1e-10, atol=1e-10)
    with count_allocations() as counts:
        plan.gradient(a, out=res)
    assert counts.allocations == 0


def test_a_batched_contraction_is_one_batched_matrix_product():
    """``'kij,knj->kni'`` (a Gaussian mixture's ``Q (x - mu)`` over its
    components) was a broadcast product of k n d d elements summed over ``j``,
    forward and twice backward; it is one batched ``matmul`` now (a mixture's
    gradient, d = 10, k = 25, n = 1000: 6.7 -> 1.7 ms), and its gradient
    matches the explicit ``@`` form's to rounding, on both backends."""
    rng = np.random.default_rng(3)
    q, xc = rng.standard_normal((5, 4, 4)), rng.standard_normal((5, 30, 4))

    def f(q, xc):
        return np.sum(np.einsum("kij,knj->kni", q, xc) ** 2)

    def g(q, xc):
        return np.sum((xc @ np.swapaxes(q, 1, 2)) ** 2)

    for backend in ("numpy", "numba"):
        plan = ha.compile(f, q, xc, argnums=(0, 1), backend=backend)
        ops = [n.op for n in plan.graph.nodes]
        assert "matmul" in ops and all(len(n.shape) < 4 for n in plan.graph.nodes), ops
        got, want = plan.gradient(q, xc), ha.gradient(g, q, xc, argnums=(0, 1), backend=backend)
        for a, b in zip(got.gradient, want.gradient, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)
        check_grads(lambda p: f(*p), (q, xc))
        res = plan.gradient(q, xc)
        with count_allocations() as counts:
            plan.gradient(q, xc, out=res)
        assert counts.allocations == 0


@pytest.mark.parametrize("shapes", [((6, 40, 24), (6, 24, 32)), ((4000, 3, 3), (4000, 3, 3))],
                         ids=["gemm_per_matrix", "own_loops"])
def test_batched_matrices_run_on_the_threads_with_the_same_bits(shapes):
    """A batched matmul's matrices go to the threads, each whole on one (its
    single-threaded gemm, or the loops of a small matrix): the plan's value and
    gradient are bitwise those of the ``parallel=False`` plan, and it allocates
    nothing per call.  They ran one after the other (ADBench's mixture at
    d = 20, k = 50: 7.1 -> 3.9 ms)."""
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])

    def f(a, b):
        return np.sum(np.tanh(a @ b))

    par = ha.compile(f, a, b, argnums=(0, 1), backend="numba")
    ser = ha.compile(f, a, b, argnums=(0, 1), backend="numba", parallel=False)
    source = par.explain()
    line = next(i for i, x in enumerate(source.splitlines()) if "# %" in x and "= matmul(" in x)
    assert "prange" in source.splitlines()[line + 1], source.splitlines()[line:line + 3]
    got, want = par.gradient(a, b), ser.gradient(a, b)
    assert got.value == want.value
    for x, y in zip(got.gradient, want.gradient, strict=True):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_allclose(got.gradient[0], (1 - np.tanh(a @ b) ** 2) @ np.swapaxes(b, 1, 2),
                               rtol=1e-12, atol=1e-12)
    with count_allocations() as counts:
        par.gradient(a, b, out=got)
    assert counts.allocations == 0
