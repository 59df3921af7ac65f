"""scipy.linalg's functions that hybridad traces as numpy's or from its own
(hybridad.frontend.scipy_linalg_more): scipy's values and result structures,
derivatives against central differences on both CPU backends, refusals by
name, zero allocations per call."""

import numpy as np
import pytest
import scipy.linalg as sl
from conftest import BACKENDS, rand

import hybridad as ha
from hybridad.testing import assert_no_alloc, numerical_gradient

A = rand((4, 3), seed=41)
S = A.T @ A + np.eye(3)  # symmetric positive definite
B = rand((4,), seed=42)


def _band(n, lo, up, seed):
    """LAPACK band storage of a diagonally dominant (n, n) matrix."""
    ab = rand((lo + up + 1, n), 0.2, 1.0, seed=seed)
    ab[up] += 4.0
    return ab


AB = _band(6, 1, 2, 43)
ABH = _band(6, 0, 2, 44)  # symmetric, upper storage
ABH[-1] += 2.0

#: name -> (function of a flat vector x, x): each a scalar of the function's results
CASES = {
    "eigvalsh": (lambda x: np.sum(sl.eigvalsh(_sym(x)) ** 3), S.ravel()),
    "eigvalsh_subset": (lambda x: np.sum(sl.eigvalsh(_sym(x), subset_by_index=(1, 2))),
                        S.ravel()),
    "svd": (lambda x: _svd_value(*sl.svd(x.reshape(4, 3), full_matrices=False)), A.ravel()),
    "svdvals": (lambda x: np.sum(sl.svdvals(x.reshape(4, 3)) ** 2 * np.arange(1, 4)),
                A.ravel()),
    "pinv": (lambda x: np.sum(sl.pinv(x.reshape(4, 3)) * np.arange(12.0).reshape(3, 4)),
             A.ravel()),
    "pinvh": (lambda x: np.sum(sl.pinvh(x.reshape(3, 3)) * np.arange(9.0).reshape(3, 3)),
              S.ravel()),
    "lstsq": (lambda x: _lstsq_value(*sl.lstsq(x.reshape(4, 3), B)), A.ravel()),
    "lstsq_matrix": (lambda x: np.sum(sl.lstsq(x.reshape(4, 3), np.stack([B, B ** 2], 1))[1]),
                     A.ravel()),
    "qr_full": (lambda x: _qr_value(*sl.qr(x.reshape(4, 3))), A.ravel()),
    "qr_economic": (lambda x: _qr_value(*sl.qr(x.reshape(4, 3), mode="economic")), A.ravel()),
    "qr_r": (lambda x: np.sum(sl.qr(x.reshape(4, 3), mode="r")[0] ** 3), A.ravel()),
    "solve_banded": (lambda x: np.sum(sl.solve_banded((1, 2), x.reshape(4, 6), B[:3].sum()
                                                      + np.arange(6.0)) ** 2), AB.ravel()),
    "solveh_banded": (lambda x: np.sum(sl.solveh_banded(x.reshape(3, 6), np.arange(6.0)) ** 2),
                      ABH.ravel()),
    "solveh_banded_lower": (lambda x: np.sum(sl.solveh_banded(
        x.reshape(3, 6), np.arange(6.0), lower=True) ** 2), ABH[::-1].ravel()),
    "cosm": (lambda x: np.sum(sl.cosm(x.reshape(3, 3) / 2) * S), S.ravel()),
    "sinm": (lambda x: np.sum(sl.sinm(x.reshape(3, 3) / 2) * S), S.ravel()),
    "tanm": (lambda x: np.sum(sl.tanm(x.reshape(3, 3) / 8) * S), S.ravel()),
    "coshm": (lambda x: np.sum(sl.coshm(x.reshape(3, 3) / 2) * S), S.ravel()),
    "sinhm": (lambda x: np.sum(sl.sinhm(x.reshape(3, 3) / 2) * S), S.ravel()),
    "tanhm": (lambda x: np.sum(sl.tanhm(x.reshape(3, 3) / 4) * S), S.ravel()),
    "lu": (lambda x: _lu_value(*sl.lu(x.reshape(3, 3))), S.ravel() + np.arange(9.0) / 7),
    "lu_permute_l": (lambda x: np.sum(np.sin(sl.lu(x.reshape(3, 3), permute_l=True)[0]) * S)
                     + np.sum(sl.lu(x.reshape(3, 3), permute_l=True)[1] ** 3),
                     A.ravel()[::-1][:9].copy()),
    "lu_p_indices": (lambda x: _lu_value(*sl.lu(x.reshape(3, 3), p_indices=True)),
                     A.ravel()[:9].copy()),
    "lu_stack": (lambda x: np.sum(sl.lu(x.reshape(2, 2, 3)[:, :, 1:])[2] ** 3), A.ravel()),
    "eigvalsh_tridiagonal": (lambda x: np.sum(sl.eigvalsh_tridiagonal(x[:4], x[4:7]) ** 3)
                             + np.sum(sl.eigvalsh_tridiagonal(x[:4], x[4:7] ** 2, select="i",
                                                              select_range=(1, 2))), A.ravel()),
    "eigh_tridiagonal": (lambda x: np.sum(np.exp(sl.eigh_tridiagonal(x[:5], x[5:9],
                                                                     eigvals_only=True))),
                         A.ravel()),
}


def _lu_value(p, lower, upper):
    """Every factor counts (p a matrix or the rows of ``p_indices``)."""
    rows = p if np.ndim(p) == 1 else np.argmax(p, axis=-1)
    return np.sum(lower * S) + np.sum(upper ** 2 * S) + np.sum(np.cos(lower[rows]) @ upper)


def _sym(x):
    a = x.reshape(3, 3)
    return 0.5 * (a + a.T)


def _svd_value(u, s, vh):
    # sign-invariant in each singular pair: u_k v_k^T
    return np.sum((u * s) @ vh * np.arange(12.0).reshape(4, 3)) + np.sum(s ** 2)


def _lstsq_value(x, res, rank, s):
    assert np.ndim(res) == 0  # scipy: a scalar for a vector b
    return np.sum(x ** 2) + res + np.sum(s)


def _qr_value(q, r):
    k = min(r.shape)
    return np.sum((q[:, :k] @ r[:k]) ** 2 * np.arange(12.0).reshape(4, 3)) + np.sum(r[:k] ** 2)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_value_and_derivative(name, backend):
    f, x = CASES[name]
    res = ha.gradient(f, x, backend=backend)
    np.testing.assert_allclose(res.value, f(x), rtol=1e-11)  # (expm's: scipy's to rounding)
    np.testing.assert_allclose(res.gradient, numerical_gradient(f, x), rtol=1e-6, atol=1e-8,
                               err_msg=name)


def test_results_are_scipys():
    """The structures scipy returns: tuples, the shapes of each mode, the rank."""
    seen = {}

    def f(x):
        a = x.reshape(4, 3)
        seen["qr"] = [t.shape for t in sl.qr(a)], [t.shape for t in sl.qr(a, mode="r")]
        seen["svd"] = [t.shape for t in sl.svd(a)]
        p, rank = sl.pinv(a, return_rank=True)
        seen["lstsq"] = [np.shape(t) for t in sl.lstsq(a, B)]
        seen["lu"] = [(t.shape, t.dtype.kind) for t in sl.lu(a[:3])] + \
            [(t.shape, t.dtype.kind) for t in sl.lu(a[:3], p_indices=True)]
        return np.sum(p) + rank

    ha.gradient(f, A.ravel(), backend="numpy")
    assert seen["qr"] == ([(4, 4), (4, 3)], [(4, 3)])
    assert seen["svd"] == [(4, 4), (3,), (3, 3)]
    assert seen["lstsq"] == [(3,), (), (), (3,)]
    want = [(t.shape, t.dtype.kind) for t in sl.lu(A[:3])] + \
        [(t.shape, t.dtype.kind) for t in sl.lu(A[:3], p_indices=True)]
    assert seen["lu"] == want
    got = ha.gradient(lambda x: np.sum(sl.pinv(x.reshape(4, 3), return_rank=True)[1] * x),
                      A.ravel(), backend="numpy")
    np.testing.assert_allclose(got.gradient, 3.0)  # full rank
    d = sl.solve_banded((1, 2), AB, np.arange(6.0))
    dense = np.zeros((6, 6))
    for i in range(6):
        for j in range(6):
            if -1 <= j - i <= 2:
                dense[i, j] = AB[2 + i - j, j]
    np.testing.assert_allclose(np.linalg.solve(dense, np.arange(6.0)), d, rtol=1e-13)


@pytest.mark.parametrize("f, match", [
    (lambda x: np.sum(sl.qr(x.reshape(4, 3), pivoting=True)[0]), "pivoting"),
    (lambda x: np.sum(sl.qr(x.reshape(4, 3), mode="raw")[0]), "raw"),
    (lambda x: np.sum(sl.pinv(x.reshape(4, 3), atol=1e-3)), "atol"),
    (lambda x: np.sum(sl.svd(x.reshape(4, 3), lapack_driver="gesvd")[1]), "gesvd"),
    (lambda x: np.sum(sl.lu(x.reshape(4, 3))[2]), "non-square"),
    (lambda x: np.sum(sl.eigh_tridiagonal(x[:4], x[4:7])[1]), "eigvals_only=True"),
    (lambda x: np.sum(sl.eigvalsh_tridiagonal(x[:4], x[4:7], select="v",
                                              select_range=(0, 1))), "select='v'"),
])
def test_refused_by_name(f, match):
    with pytest.raises(NotImplementedError, match=match):
        ha.gradient(f, A.ravel(), backend="numpy")


def test_numba_plan_allocates_nothing():
    def f(x):
        a = x.reshape(4, 3)
        return (np.sum(sl.svdvals(a)) + np.sum(sl.pinv(a)) + np.sum(sl.qr(a)[1])
                + np.sum(sl.eigvalsh(a.T @ a)) + np.sum(sl.cosm(a.T @ a / 4))
                + sl.lstsq(a, B)[1] + np.sum(sl.lu(a[:3] + 3 * np.eye(3))[2] ** 2)
                + np.sum(sl.eigvalsh_tridiagonal(x[:4], x[4:7]) ** 3))

    x = A.ravel()
    plan = ha.compile(f, x, backend="numba")
    out = ha.GradientResult(x)
    plan.gradient(x, out=out)
    np.testing.assert_allclose(out.value, f(x), rtol=1e-12)
    assert_no_alloc(lambda: plan.gradient(x, out=out))
