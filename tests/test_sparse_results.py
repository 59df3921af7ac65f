"""Sparse Jacobians and Hessians into preallocated results
(hybridad/sparse/results.py, run.py): values against the dense Jacobian and
Hessian at AD precision, zero allocations per repeated call, and bad input
refused before anything is written."""

import numpy as np
import pytest
import scipy.sparse as sp

import hybridad as ha
from hybridad.testing import count_allocations

from sparse_problems import bratu, brusselator, minimal_surface

N = 6  # the Brusselator's grid: 2 * N * N = 72 unknowns


def _y(seed=0):
    return np.random.default_rng(seed).uniform(0.5, 3.5, 2 * N * N)


@pytest.fixture(scope="module")
def bruss_result():
    return ha.SparseJacobianResult(brusselator, _y(), N)


@pytest.fixture(scope="module")
def bratu_result():
    return ha.SparseHessianResult(bratu, _y(1)[:49])


def _close(a, b):
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * max(1.0, np.abs(b).max()))


# ----------------------------------------------------------------------------
# values
# ----------------------------------------------------------------------------
def test_brusselator_jacobian_matches_dense(bruss_result):
    res = bruss_result
    assert res.mode == "forward" and res.lower_bound == 6 and res.colors <= 9
    for seed in range(3):
        y = _y(seed)
        out = ha.jacobian(brusselator, y, N, out=res)
        assert out is res
        dense = ha.jacobian(brusselator, y, N)
        _close(res.jacobian.toarray(), dense.jacobian)
        _close(res.value, dense.value)
    assert res.jacobian.nnz == 6 * 2 * N * N
    np.testing.assert_array_equal(res.pattern.toarray(), dense.jacobian != 0)


def test_reverse_mode_and_numpy_backend_agree(bruss_result):
    y = _y(4)
    rev = ha.SparseJacobianResult(brusselator, y, N, mode="reverse")
    assert rev.mode == "reverse" and rev.colors == bruss_result.colors
    ha.jacobian(brusselator, y, N, out=rev, backend="numpy")
    dense = ha.jacobian(brusselator, y, N, backend="numpy").jacobian
    _close(rev.jacobian.toarray(), dense)


def test_hessian_matches_dense(bratu_result):
    res = bratu_result
    assert res.colors <= 6 and res.lower_bound == 5
    for seed in range(2):
        u = _y(seed)[:49]
        ha.hessian(bratu, u, out=res)
        dense = ha.hessian(bratu, u)
        _close(res.hessian.toarray(), dense.hessian)
        _close(res.gradient, dense.gradient)
        _close(res.value, dense.value)
    h = res.hessian
    assert (h != h.T).nnz == 0  # both triangles stored


def test_minimal_surface_hessian_numpy_backend():
    n = 5
    boundary = np.zeros((n + 2, n + 2))
    boundary[0] = np.sin(np.linspace(0, np.pi, n + 2))
    u = np.random.default_rng(2).uniform(-0.5, 0.5, n * n)
    res = ha.SparseHessianResult(minimal_surface, u, boundary)
    ha.hessian(minimal_surface, u, boundary, out=res, backend="numpy")
    dense = ha.hessian(minimal_surface, u, boundary, backend="numpy").hessian
    _close(res.hessian.toarray(), dense)
    assert res.lower_bound == 7


def test_pattern_given_by_the_caller():
    f = lambda x: x[1:] * x[:-1]  # noqa: E731
    x = np.arange(1.0, 6.0)
    pattern = sp.csr_array(np.triu(np.ones((4, 5)), -1) != 0)  # a superset
    res = ha.SparseJacobianResult(pattern, np.zeros(4))
    ha.jacobian(f, x, out=res, backend="numpy")
    _close(res.jacobian.toarray(), ha.jacobian(f, x, backend="numpy").jacobian)
    hres = ha.SparseHessianResult(sp.eye_array(5, k=1, format="csr"), x)  # made symmetric
    ha.hessian(lambda x: np.sum(x[1:] * x[:-1]), x, out=hres, backend="numpy")
    assert hres.hessian.toarray().tolist() == (np.eye(5, k=1) + np.eye(5, k=-1)).tolist()


def test_function_independent_of_x():
    x = np.ones(3)
    res = ha.SparseJacobianResult(lambda x: np.full(2, 3.0) + 0.0 * x[:2], x)
    assert res.colors == 0 and res.jacobian.nnz == 0
    ha.jacobian(lambda x: np.full(2, 3.0) + 0.0 * x[:2], x, out=res, backend="numpy")
    np.testing.assert_array_equal(res.value, [3.0, 3.0])


def test_a_changed_global_is_seen():
    scale = {"k": 2.0}

    def f(x):
        return x[1:] * x[:-1] * scale["k"]

    x = np.arange(1.0, 5.0)
    res = ha.SparseJacobianResult(f, x)
    ha.jacobian(f, x, out=res, backend="numpy")
    scale["k"] = 3.0
    ha.jacobian(f, x, out=res, backend="numpy")
    _close(res.jacobian.toarray(), 3.0 * ha.jacobian(lambda x: x[1:] * x[:-1], x,
                                                     backend="numpy").jacobian)


# ----------------------------------------------------------------------------
# allocations
# ----------------------------------------------------------------------------
def _assert_no_alloc(call, n=50):
    for _ in range(3):
        call()
    with count_allocations() as counts:
        for _ in range(n):
            call()
    assert counts.allocations == 0, f"{counts.allocations} allocations in {n} calls"


def test_jacobian_allocates_nothing(bruss_result):
    y = _y(5)
    _assert_no_alloc(lambda: ha.jacobian(brusselator, y, N, out=bruss_result))


def test_hessian_allocates_nothing(bratu_result):
    u = _y(6)[:49]
    _assert_no_alloc(lambda: ha.hessian(bratu, u, out=bratu_result))


# ----------------------------------------------------------------------------
# bad input: refused, nothing written
# ----------------------------------------------------------------------------
def _sentinel(res):
    res.value[...] = 7.0
    res.derivs[-1].data[:] = 7.0
    if len(res.derivs) > 1:
        res.derivs[0][...] = 7.0


def _untouched(res):
    assert np.all(res.value == 7.0) and np.all(res.derivs[-1].data == 7.0)
    if len(res.derivs) > 1:
        assert np.all(res.derivs[0] == 7.0)


def test_result_of_another_function_is_refused():
    x = np.arange(1.0, 6.0)
    res = ha.SparseJacobianResult(lambda x: x * x, x)  # diagonal
    _sentinel(res)
    with pytest.raises(ValueError, match="outside this result's pattern"):
        ha.jacobian(lambda x: x * x[::-1], x, out=res, backend="numpy")
    _untouched(res)
    ha.jacobian(lambda x: np.sin(x), x, out=res, backend="numpy")  # within: fine
    _close(res.jacobian.toarray(), np.diag(np.cos(x)))
    hres = ha.SparseHessianResult(lambda x: np.sum(x ** 3), x)
    _sentinel(hres)
    with pytest.raises(ValueError, match="outside this result's pattern"):
        ha.hessian(lambda x: np.sum(x[1:] * x[:-1]), x, out=hres, backend="numpy")
    _untouched(hres)


_MASK = np.zeros(6)
_BIG = np.zeros(80 * 80)  # 51 kB: a large captured array, read by reference


def _masked(x):  # a captured mask's zeros remove dependences from the pattern
    return _MASK * np.roll(x, 1) + np.sin(x)


def _exact_masked(x):
    return np.diag(np.cos(x)) + np.roll(np.eye(x.size), 1, axis=0) * _MASK[:, None]


@pytest.mark.parametrize("when", ["before-the-first-call", "between-calls"])
def test_a_pattern_read_from_a_captured_array_follows_its_values(when):
    """A pattern takes a captured array's zeros as structural; after that
    array changes in place a result made before refuses a function whose
    pattern grew (it silently dropped the new nonzeros), and takes one whose
    pattern shrank."""
    x = np.linspace(0.1, 1.0, 6)
    _MASK[:] = 0.0
    _MASK[::2] = 1.0
    res = ha.SparseJacobianResult(_masked, x)
    if when == "between-calls":
        ha.jacobian(_masked, x, out=res)
        _close(res.jacobian.toarray(), _exact_masked(x))
    _MASK[:] = 1.0
    _sentinel(res)
    with pytest.raises(ValueError, match="outside this result's pattern"):
        ha.jacobian(_masked, x, out=res)
    _untouched(res)
    _MASK[:] = 0.0
    _MASK[2] = 1.0  # within the result's pattern
    ha.jacobian(_masked, x, out=res)
    _close(res.jacobian.toarray(), _exact_masked(x))


@pytest.mark.parametrize("big", [False, True], ids=["small", "large"])
def test_a_hessian_plan_colored_from_a_captured_array_follows_its_values(big):
    """An explicit Hessian plan colors the Hessian's pattern, read with the
    captured array's zeros; that array changed in place (small: compared by
    content; large: read by reference, now compared too) makes the plan
    stale -- it returned a wrong Hessian with the old colors -- and
    ``ha.hessian`` builds a new one."""
    n = 80
    x = np.linspace(0.1, 1.0, n)
    g = _BIG[:n] if big else np.zeros(n)
    g[:] = 0.0
    g[::2] = 1.0

    def f(x):
        return np.sum((_BIG[:n] if big else g) * x * np.roll(x, 1)) + np.sum(x ** 4)

    def exact():
        H = np.diag(12 * x ** 2)
        for i in range(n):
            j = (i - 1) % n
            H[i, j] += g[i]
            H[j, i] += g[i]
        return H

    plan = ha.compile(f, x, hessian=True)
    assert plan.chunk < n  # (colored)
    _close(plan.hessian(x).hessian, exact())
    g[:] = 1.0
    with pytest.raises(ha.StalePlanError, match="sparsity pattern"):
        plan.hessian(x)
    _close(ha.hessian(f, x).hessian, exact())


def test_pattern_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match="rows"):
        ha.SparseJacobianResult(sp.eye_array(4, format="csr"), np.zeros(3))
    res = ha.SparseJacobianResult(sp.eye_array(4, format="csr"), np.zeros(4))
    _sentinel(res)
    with pytest.raises(ValueError, match="Jacobian is 4 x 4"):
        ha.jacobian(lambda x: x[:4] * 2.0, np.ones(5), out=res, backend="numpy")
    _untouched(res)
    with pytest.raises(ValueError, match="pattern has shape"):
        ha.SparseHessianResult(sp.eye_array(4, format="csr"), np.zeros(3))


def test_wrong_arguments_and_options_are_refused(bruss_result):
    res = bruss_result
    _sentinel(res)
    with pytest.raises(ValueError):
        ha.jacobian(brusselator, np.ones(2 * N * N - 1), N, out=res)
    with pytest.raises(ValueError, match="mode"):
        ha.jacobian(brusselator, _y(), N, out=res, mode="reverse")
    with pytest.raises(ValueError, match="chunk"):
        ha.jacobian(brusselator, _y(), N, out=res, chunk=2)
    with pytest.raises(TypeError, match="SparseJacobianResult"):
        ha.jacobian(lambda x: np.sum(x * x), np.ones(3),
                    out=ha.SparseHessianResult(lambda x: np.sum(x * x), np.ones(3)))
    with pytest.raises(ValueError, match="scalar"):
        ha.SparseHessianResult(lambda x: x * x, np.ones(3))
    with pytest.raises(ValueError, match="mode must be"):
        ha.SparseJacobianResult(brusselator, _y(), N, mode="sideways")
    _untouched(res)


def test_replaced_data_is_refused():
    x = np.ones(3)
    res = ha.SparseJacobianResult(lambda x: x * 2.0, x)
    res.jacobian.data = np.zeros(3)
    with pytest.raises(ValueError, match="no longer holds"):
        ha.jacobian(lambda x: x * 2.0, x, out=res, backend="numpy")


def test_repr_and_seeds(bruss_result):
    assert "colors=" in repr(bruss_result)
    seeds = bruss_result.seeds()
    assert seeds.shape == (bruss_result.colors, 2 * N * N)
    np.testing.assert_array_equal(seeds.sum(axis=0), 1.0)


# ----------------------------------------------------------------------------
# the compiled backend reads strided slices in place where concatenate (np.roll)
# consumes them (hybridad/backends/numba/layouts.py): against the numpy reference
# ----------------------------------------------------------------------------
def _rolled(x):
    a = x.reshape(4, 6)
    parts = [a[:, ::2], a[::-1, 1:4], np.roll(a, 2, 1), a[:, ::-3], np.roll(a, -1, 0)]
    return np.concatenate(parts, axis=1) * np.sin(np.concatenate(parts[::-1], axis=1))


@pytest.mark.parametrize("kind", ["gradient", "jacobian", "hessian"])
def test_strided_slices_read_by_concatenate(kind):
    x = np.random.default_rng(9).uniform(-1.0, 1.0, 24)
    scalar = lambda x: np.sum(_rolled(x) ** 3)  # noqa: E731
    if kind == "jacobian":
        got, want = (ha.jacobian(_rolled, x, backend=b) for b in ("numba", "numpy"))
        pairs = [(got.jacobian, want.jacobian), (got.value, want.value)]
    elif kind == "gradient":
        got, want = (ha.gradient(scalar, x, backend=b) for b in ("numba", "numpy"))
        pairs = [(got.gradient, want.gradient)]
    else:
        got, want = (ha.hessian(scalar, x, backend=b) for b in ("numba", "numpy"))
        pairs = [(got.hessian, want.hessian), (got.gradient, want.gradient)]
    for a, b in pairs:
        _close(a, b)
