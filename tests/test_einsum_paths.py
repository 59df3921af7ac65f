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
