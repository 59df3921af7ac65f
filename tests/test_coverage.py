"""numpy functions built from the primitives (:mod:`hybridad.frontend.numpy_math` and its siblings):
value against numpy, gradient against central finite differences, the numba
backend against the numpy reference (``assert_grad``)."""

import numpy as np
import pytest
from conftest import assert_grad, rand

import hybridad as ha
from hybridad.testing import numerical_gradient

W20 = np.arange(20.0).reshape(4, 5) / 7
MASK = np.arange(20).reshape(4, 5) % 3 != 1
#: data to bin: on edges (0.0, 0.5, 2.0: the last edge closed), outside the bins (-3.0, 5.0)
DATA20 = np.array([0.0, 0.5, 2.0, -3.0, 5.0, 0.1, 0.7, -0.9, 1.2, 0.3,
                   -0.2, 1.9, 0.45, -0.5, 0.25, 1.0, -1.0, 0.6, 0.05, 1.5])


def _spd(x):
    """A symmetric positive definite matrix from x: a symmetric perturbation of
    x perturbs it symmetrically (the gradient convention of cholesky/eigh)."""
    return x[:, :4] @ x[:, :4].T + 4 * np.eye(4)


def _put_along(x):
    """np.put_along_axis into a copy of x and into an array f made."""
    y = x * 1.0
    np.put_along_axis(y, np.array([[0, 4], [1, 1], [3, 2], [0, 0]]), x[:, :2] ** 2, 1)
    z = np.zeros((4, 5))
    np.put_along_axis(z, np.array([[1, 0, 3, 2, 2]]), np.sin(x[:1]), axis=0)
    return y + z


CASES = {
    "round": lambda x: np.sum(np.round(x, 1) * x) + np.sum(np.around(x) * x),
    "clip": lambda x: np.sum(np.clip(x, -0.5, 0.7) ** 2) + np.sum(np.clip(x, None, 0.2) * x),
    "var_std": lambda x: np.sum(np.var(x, axis=0, ddof=1)) + np.std(x) +
    np.sum(np.std(x, axis=1, keepdims=True) * x),
    "average": lambda x: np.sum(np.average(x, axis=1, weights=np.arange(1.0, 6.0))) +
    np.average(x) + np.average(x, weights=x * x + 1),
    "ptp": lambda x: np.sum(np.ptp(x, axis=0)) + np.ptp(x),
    "cumsum": lambda x: np.sum(np.cumsum(x, axis=1) ** 2) + np.sum(np.cumsum(x) * 0.1) +
    np.sum(np.add.accumulate(x, axis=0) * W20),
    "logaddexp_reduce": lambda x: np.sum(np.logaddexp.reduce(x, axis=1)) +
    np.logaddexp.reduce(x.ravel() * 40),
    "atleast": lambda x: np.sum(np.atleast_3d(x[0]) ** 2) + np.sum(np.atleast_2d(x[0, 0]) * 3) +
    np.sum(np.atleast_1d(x[1, 1]) ** 3),
    "stacks": lambda x: np.sum(np.hstack([x, x ** 2]) * np.vstack([x, x]).sum()) +
    np.sum(np.dstack([x, x]) ** 2) + np.sum(np.column_stack([x[0], x[1]]) ** 3),
    "split": lambda x: sum(np.sum(p ** 2) * (i + 1)
                           for i, p in enumerate(np.array_split(x, 3, axis=1))) +
    sum(np.sum(p * k) for k, p in enumerate(np.split(x, [1, 3]))),
    "flip": lambda x: np.sum(np.flip(x) * W20) + np.sum(np.fliplr(x)[0] ** 3) +
    np.sum(np.flipud(x) * W20 ** 2),
    "roll": lambda x: np.sum(np.roll(x, 2, axis=1) * W20) + np.sum(np.roll(x, -3) * W20 ** 2) +
    np.sum(np.roll(x, (1, 2), axis=(0, 1)) * W20 ** 3),
    "reshape_order_F": lambda x: np.sum(x.reshape(5, 4, order="F") * W20.T) +
    np.sum(np.ravel(x, order="F") ** 3 * np.arange(20.0)) +
    np.sum(np.reshape(x, (2, -1, 5), order="F") ** 2 * np.arange(20.0).reshape(2, 2, 5)) +
    np.sum(x.flatten("F")[::3] * x.ravel()[:7]),
    "tile": lambda x: np.sum(np.tile(x, (2, 1, 3)) * np.arange(120.0).reshape(2, 4, 15)),
    "repeat": lambda x: np.sum(np.repeat(x, 2, axis=0) * np.arange(40.0).reshape(8, 5)) +
    np.sum(np.repeat(x, 3) ** 2),
    "pad": lambda x: np.sum(np.pad(x, ((1, 2), (0, 1)), constant_values=3.0) *
                            np.arange(42.0).reshape(7, 6)) + np.sum(np.pad(x, 1) ** 2),
    # the modes that copy elements (one gather of numpy's padded position grid)
    "pad_modes": lambda x: sum(np.sum(np.sin(np.pad(x, ((2, 1), (3, 4)), mode=m)) *
                                      np.arange(84.0).reshape(7, 12) ** (k + 1) / 84 ** k)
                               for k, m in enumerate(("edge", "reflect", "symmetric", "wrap"))) +
    np.sum(np.pad(x, 7, mode="wrap") ** 2) + np.sum(np.pad(x[0], (6, 9), mode="reflect") ** 3),
    "tril_triu": lambda x: np.sum(np.tril(x, 1) * 2 + np.triu(x, -1) ** 2),
    "diagonal_trace": lambda x: np.sum(np.diagonal(x, 1) ** 2) + np.trace(x) +
    np.trace(x, -1) + np.sum(np.diag(x[0], -1) * np.arange(36.0).reshape(6, 6)) +
    np.sum(np.diag(x) ** 3),
    "tensordot": lambda x: np.sum(np.tensordot(x, x, axes=([0], [0])) ** 2) +
    np.tensordot(x, W20),
    "kron": lambda x: np.sum(np.kron(x[:2, :2], x[1:3, 2:]) ** 2) + np.sum(np.kron(x[0], W20)),
    "einsum": lambda x: np.einsum("ij,ij->", x, x) + np.sum(np.einsum("ij,kj->ik", x, x) ** 2) +
    np.einsum("ii", x[:, :4]) + np.sum(np.einsum("ij,j,ik", x, x[0], x) ** 2) +
    np.sum(np.einsum("ij->ji", x) * W20.T) + np.sum(np.einsum("ij,ij->i", x, W20) ** 2),
    # '...': batched matmul (explicit, implicit), ellipses of different lengths and size-1
    # dims broadcast, the matmul path with a batch on one side, '...' in the middle
    "einsum_ellipsis": lambda x: np.sum(np.einsum("...ij,...jk->...ik", x.reshape(2, 2, 5),
                                                  x.reshape(2, 5, 2)) ** 2) +
    np.sum(np.einsum("...ij,...jk", x.reshape(2, 1, 2, 5), x.reshape(2, 5, 2)) *
           np.arange(16.0).reshape(2, 2, 2, 2)) + np.sum(np.einsum("...i,...i", x, x[0]) ** 2) +
    np.sum(np.einsum("...ij,jk->...ik", x.reshape(2, 2, 5), W20.T) ** 2) +
    np.sum(np.einsum("i...->...", x) * W20[0]) + np.sum(np.einsum("...ii->...i", x[:, :4]) ** 3) +
    np.sum(np.einsum("i...j,i...j->...", x.reshape(2, 2, 5), x.reshape(2, 2, 5)[:, :1]) ** 2),
    "gradient": lambda x: np.sum(np.gradient(x[0]) ** 2) +
    np.sum(np.gradient(x, axis=1) * W20) + sum(np.sum(g * W20) for g in np.gradient(x)) +
    np.sum(np.gradient(x[:, :2], axis=-1) ** 3) + np.sum(np.gradient(x[1], x[2, 2] ** 2 + 1) ** 2),
    "gradient_edge_order_spacing": lambda x: sum(np.sum(g ** 2 * W20) for g in
                                                 np.gradient(x, 0.5, 2.0, edge_order=2)) +
    np.sum(np.gradient(x, 0.3, axis=0, edge_order=2) ** 3) +
    np.sum(np.gradient(x, [0.0, 1.0, 3.0, 3.5], axis=0, edge_order=2) * W20) +
    np.sum(np.gradient(x, np.arange(5.0) * 0.1, axis=1) ** 2) +
    np.sum(np.gradient(x, [0.0, 1.0, 3.0, 3.5], np.arange(5), edge_order=1)[0] ** 2),
    "imag_angle": lambda x: np.sum(np.imag(x) + x ** 2) + np.sum(np.angle(x) * x) +
    np.sum(np.angle(x, deg=True) * W20) + np.sum(np.angle(x - x) + np.imag(x) * x),
    "linspace_full": lambda x: np.sum(np.linspace(x[0, 0], x[1, 1], 7) ** 2) +
    np.sum(np.linspace(x[0], x[1], 6, axis=-1) * np.arange(30.0).reshape(5, 6)) +
    np.sum(np.linspace(x[2, 0], 3.0, 5, endpoint=False) ** 3) +
    np.sum(np.linspace(-1, x[:, :1], 3, retstep=True)[0] ** 2) +
    np.sum(np.full((3, 2), x[0, 0], like=x) * np.arange(6.0).reshape(3, 2)) +
    np.sum(np.full((4, 5), x[1], like=x) * x) + np.sum(np.full(3, 2.0, like=x) * x[0, :3]),
    "norm": lambda x: np.linalg.norm(x) + np.sum(np.linalg.norm(x, 3, axis=1)) +
    np.linalg.norm(x, 1) + np.linalg.norm(x, np.inf) + np.linalg.norm(x, -np.inf) +
    np.linalg.norm(x, -1) + np.linalg.norm(x, "fro") + np.sum(np.linalg.norm(x, axis=0)) +
    np.linalg.norm(x[0], 1) + np.linalg.norm(x[0], np.inf) + np.linalg.norm(x[0], -np.inf) +
    np.linalg.norm(x[1], 0) + np.sum(np.linalg.norm(x, 2, axis=1, keepdims=True) * x),
    "ufunc_aliases": lambda x: np.sum(np.float_power(np.abs(x) + 1, 1.5) + np.radians(x) +
                                      np.degrees(x) + np.heaviside(x, 0.5) * x),
    "rot90_rollaxis": lambda x: np.sum(np.rot90(x) * W20.T) + np.sum(np.rot90(x, 2) * W20) +
    np.sum(np.rot90(x, 3) * W20.T ** 2) + np.sum(np.rollaxis(x[None], 2) ** 2),
    "diff": lambda x: np.sum(np.diff(x) ** 2) + np.sum(np.diff(x, 2, axis=0) ** 3) +
    np.sum(np.diff(x, prepend=0.5) ** 2),
    "cross": lambda x: np.sum(np.cross(x[:, :3], x[:, 2:]) ** 2) +
    np.sum(np.cross(x[:, :3], x[:, 1:4], axis=1) * x[:, :3]),
    "nan_to_num_sinc_real": lambda x: np.sum(np.nan_to_num(np.log(x)) * 2) +
    np.sum(np.sinc(x) * W20) + np.sum(np.sinc(x * 0)) + np.sum(np.real(x) * np.conj(x)),
    "fancy_indexing": lambda x: np.sum(x[[0, 2, 2]] ** 2) + np.sum(x[:, [4, 0, 0]] * 3) +
    np.sum(x[[1, 3], [2, -2]] ** 3) + np.sum(x[1:, [0, 3]] ** 2) + np.sum(x[None, [2], 1:3]) +
    np.sum(x.T[[0, 1, 1]] ** 2) + np.sum(x[::2][:, [1, 3]] ** 3),
    "boolean_masks": lambda x: np.sum(x[MASK] ** 2) + np.sum(x[[True, False, True, True]] ** 3) +
    np.sum(x.T[MASK.T] * W20.T[MASK.T]) + np.sum(np.extract(MASK, x) ** 3),
    "take_compress_delete": lambda x: np.sum(np.take(x, [3, 0, 3]) ** 2) +
    np.sum(np.take(x, [[1, 0], [4, 4]], axis=1) ** 2) +
    np.sum(np.take(x, [7, -1], axis=0, mode="wrap") ** 3) +
    np.sum(np.take_along_axis(x, np.array([[0, 4], [1, 1], [3, 2], [0, 0]]), 1) ** 2) +
    np.sum(np.compress([True, False, True], x, axis=0) ** 2) +
    np.sum(np.delete(x, [0, 2], axis=1) ** 2) + np.sum(np.delete(x, 3) * W20.ravel()[:19]) +
    np.sum(np.repeat(x, [1, 0, 2, 3], axis=0) ** 2) + np.sum(np.repeat(x[0], [2, 1, 1, 0, 3]) ** 3),
    "ediff1d": lambda x: np.sum(np.ediff1d(x) ** 2) + np.sum(np.ediff1d(
        x[0], to_begin=x[1, 0], to_end=[1.0, 2.0]) * np.arange(7.0)),
    "put_along_axis": lambda x: np.sum(_put_along(x) ** 2 * W20),
    # constant data, traced weights: numpy's bins (the last closed, outside dropped)
    "histogram_weights": lambda x: np.sum(np.histogram(DATA20, bins=4, weights=x.ravel())[0] ** 2)
    + np.sum(np.histogram(DATA20.reshape(4, 5), bins=[-1.0, 0.0, 0.5, 2.0], weights=x ** 2,
                          density=True)[0] * np.arange(1.0, 4.0))
    + np.sum(np.histogram(DATA20, bins=3, range=(-0.5, 0.5), weights=x.ravel())[0] ** 3),
    "ufunc_outer": lambda x: np.sum(np.multiply.outer(x[0], x[1])[:4] * W20) +
    np.sum(np.exp(-np.subtract.outer(x[:, 0], x[:, 1]) ** 2)) +
    np.sum(np.add.outer(x[:2], 0.5) ** 2) + np.sum(np.hypot.outer(x[0] + 2.0, W20[1])) +
    np.sum(np.maximum.outer(W20[2], x[3] * 3.0)),
    # polynomials fitted: x (a row) and y (rows) differentiable, weights, two right-hand sides
    "polyfit_vander": lambda x: np.sum(np.polyfit(x[0] + np.arange(5.0), x[1], 2) ** 2) +
    np.sum(np.polyfit(np.arange(5.0), x[1:3].T, 1, w=x[3] ** 2 + 1) * W20[:2, :2]) +
    np.sum(np.vander(x[2], 3) * np.arange(15.0).reshape(5, 3)) + np.sum(np.vander(x[0], 1)),
    "i0": lambda x: np.sum(np.i0(x * 3) * W20) + np.i0(x[0, 0]),
    # the running extremes (a log-step scan of the elementwise ufunc): 20 values, 5 steps
    "running_extreme": lambda x: np.sum(np.maximum.accumulate(x.ravel()) * np.arange(20.0)) +
    np.sum(np.minimum.accumulate(x, axis=1) ** 2) +
    np.sum(np.fmax.accumulate(x, axis=0) * W20) +
    np.sum(np.fmin.accumulate(x[:, ::-1], 1) ** 3),
    "cumprod": lambda x: np.sum(np.cumprod(x, axis=1) ** 2) + np.sum(np.cumprod(x) * 0.1) +
    np.sum(np.multiply.accumulate(x, axis=0) * W20),
    "linalg_solve_inv": lambda x: np.sum(np.linalg.solve(x[:, :4] + 3 * np.eye(4), x[:, 4]) ** 2) +
    np.sum(np.linalg.solve(x[:, :4] + 3 * np.eye(4), x[:, 1:3]) * W20[:, :2]) +
    np.sum(np.linalg.inv(x[:, 1:] + 3 * np.eye(4)) * W20[:, 1:]) +
    np.sum(np.linalg.solve(np.stack([x[:, :4], x[:, 1:]]) + 3 * np.eye(4), x[:, 0]) ** 2),
    "linalg_det": lambda x: np.linalg.det(x[:, :4] + np.eye(4)) +
    np.sum(np.linalg.det(np.stack([x[:2, :2], x[2:, 3:]])) ** 2) +
    np.linalg.slogdet(x[:, 1:] - 2 * np.eye(4))[1] * np.linalg.slogdet(x[:, :4]).sign,
    "linalg_cholesky": lambda x: np.sum(np.linalg.cholesky(_spd(x)) * W20[:, :4]) +
    np.sum(np.log(np.diagonal(np.linalg.cholesky(_spd(x))))) +
    np.sum(np.linalg.cholesky(_spd(x), upper=True) ** 3),
    "linalg_eigh": lambda x: np.sum(np.linalg.eigh(_spd(x))[0] * np.arange(4.0)) +
    np.sum(np.linalg.eigh(_spd(x)).eigenvectors ** 2 * W20[:, :4]) +
    np.sum(np.linalg.eigvalsh(_spd(x), "U") ** 2),
    "median": lambda x: np.median(x) + np.sum(np.median(x, axis=0) ** 2) +
    np.sum(np.median(x, axis=1, keepdims=True) * x) + np.median(x[:3], axis=(0, 1)),
    "methods": lambda x: x.round(1).sum() + x.clip(-1, 1).var() + x.std(axis=0).sum() +
    x.cumsum(axis=0).sum() + x.repeat(2).sum() + x.diagonal().sum() + x.var(ddof=1) +
    x.trace(1) + np.sum(x.take([1, 5]) ** 2) + np.sum(x.compress([0, 1, 1], axis=1) ** 2) +
    np.sum(x.cumprod(axis=0) ** 2),
    "sort": lambda x: np.sum(np.sort(x) * W20) + np.sum(np.sort(x, axis=0) ** 3 * W20) +
    np.sum(np.sort(x, axis=None) ** 2 * W20.ravel()) +
    np.sum(np.sort(x.T, kind="stable")[:, ::2] ** 2) + np.sum(np.sort(x[1], kind="heapsort")),
    # numpy leaves the order inside the partitions undefined: read what it fixes
    "partition_argsort": lambda x: np.sum(np.partition(x, 2)[:, 2] ** 2 * W20[:, 0]) +
    np.sum(np.partition(x, 1, axis=0)[:1] ** 3) + np.partition(x, 7, axis=None)[7] +
    np.sum(np.partition(x, (1, 3))[:, [1, 3]] * W20[:, :2]) +
    np.sum(np.argsort(x, axis=0) * x) + np.sum(x.argsort(axis=None) * x.ravel()),
    # ties (each value twice, equal weights on the two slots) and NaNs (sorted last)
    "sort_ties_nan": lambda x: np.sum(np.sort(np.concatenate([x, x], axis=1)) *
                                      np.repeat(W20, 2, axis=1)) +
    np.sum(np.nan_to_num(np.sort(np.where(x > 0.8, np.nan, x), axis=0)) * W20) +
    np.sum(np.argsort(np.where(x > 0.8, np.nan, np.round(x)), axis=None, kind="stable") *
           x.ravel()),
}


def _nans(x):
    """The NaN-ignoring reductions of x with NaNs where MASK is off."""
    xn = np.where(MASK, x, np.nan)
    return np.nansum(xn * 2) + np.sum(np.nanmean(xn, axis=1) ** 2) + \
        np.sum(np.nanvar(xn, axis=0, ddof=1)) + np.nanstd(xn) + \
        np.sum(np.nanmax(xn, axis=1)) + np.nanmin(xn) + np.sum(np.nanprod(xn, axis=0)) + \
        np.sum(np.nancumsum(xn, axis=1) ** 2) + np.sum(np.nancumprod(xn[:, :2], axis=0)) + \
        np.sum(np.nanmean(xn, axis=0, keepdims=True) * x)


def _fill(x):
    K = x @ x.T
    np.fill_diagonal(K, 0.5)
    L = x[:, :3] @ x[:, :3].T
    np.fill_diagonal(L, x[:, 4] ** 2)
    return np.sum(K ** 2) + np.sum(L * W20[:, :4])


CASES.update({
    "nan_reductions": _nans,
    "cov_corrcoef": lambda x: np.sum(np.cov(x) ** 2) + np.sum(np.cov(x, rowvar=False, bias=True))
    + np.sum(np.cov(x[0], x[1] ** 2)) + np.sum(np.corrcoef(x) * W20[:, :4]),
    "meshgrid": lambda x: sum(np.sum(g * (i + 1.5) ** 2)
                              for i, g in enumerate(np.meshgrid(x[0], x[1, :3] ** 2))) +
    np.sum(np.meshgrid(x[0], x[1], indexing="ij")[1] * np.arange(25.0).reshape(5, 5) / 7)
    + np.sum(np.meshgrid(x[2], x[3, :2], sparse=True)[1] * 3),
    "polyval": lambda x: np.sum(np.polyval(x[0], x[1])) + np.sum(np.polyval([1.0, -2.0, 0.5], x[2]))
    + np.sum(np.poly1d([1.0, 3.0, -1.0])(x[3]) ** 2),
    "polynomials": lambda x: np.sum(np.polyder(x[0], 2) ** 2)
    + np.sum(np.polyint(x[1], 2, k=[x[2, 0], 0.5]) ** 2) + np.sum(np.poly(x[3, :3]) ** 2)
    + np.sum(np.polyadd(x[0, :3], x[1]) ** 2) + np.sum(np.polysub([1.0, 2.0], x[2]) ** 2)
    + np.sum(np.polymul(x[0, :3], x[3, :2]) ** 2),
    "fix_astype": lambda x: np.sum(np.fix(3 * x) * x) + np.sum(np.astype(x, np.float64) ** 3),
    "multi_dot": lambda x: np.linalg.multi_dot([x[0], x.T, x, x[1]]) +
    np.sum(np.linalg.multi_dot([x, x.T, x, W20.T]) ** 2) + np.sum(np.linalg.multi_dot([x, x[0]])),
    "indices_from": lambda x: np.sum((x @ x.T)[np.triu_indices_from(x @ x.T, 1)] ** 2) +
    np.sum((x @ x.T)[np.tril_indices_from(x @ x.T)]) +
    np.sum((x[:, :4] @ x[:, :4].T)[np.diag_indices_from(x[:, :4] @ x[:, :4].T)] ** 3),
    "fill_diagonal": _fill,
})


@pytest.mark.parametrize("name", ["nan_reductions", "cov_corrcoef", "meshgrid", "polyval",
                                  "polynomials", "fix_astype", "multi_dot", "indices_from",
                                  "fill_diagonal", "polyfit_vander",
                                  "running_extreme", "i0", "ediff1d", "put_along_axis",
                                  "histogram_weights"])
def test_composites_allocate_nothing_per_call(name):
    """The functions traced as composites allocate nothing per call; among
    them ``x[np.triu_indices_from(K, 1)]``: indices from K's shape (constants),
    not numpy called on every call (16 allocations a call before)."""
    from hybridad.testing import assert_no_alloc

    x = rand((4, 5), seed=2)
    plan = ha.compile(CASES[name], x)
    res = plan.gradient(x)
    assert_no_alloc(plan.gradient, x, out=res, n=10)


@pytest.mark.parametrize("name", sorted(CASES))
def test_function(name):
    assert_grad(CASES[name], (rand((4, 5), seed=sum(map(ord, name))),))


def test_cumprod_with_zeros_is_exact():
    x = rand((4, 5), seed=5)
    x[1, 2] = x[3, 0] = x[3, 3] = x[0, 4] = 0.0  # one zero, and two in a row
    assert_grad(CASES["cumprod"], (x,))


@pytest.mark.parametrize("f, error", [
    (lambda x: np.sum(np.pad(x, 1, mode="mean")), NotImplementedError),
    (lambda x: np.sum(np.pad(x, 1, mode="reflect", reflect_type="odd")), NotImplementedError),
    (lambda x: np.linalg.qr(x, "raw")[0], NotImplementedError),
    (lambda x: np.sum(np.split(x, 3)[0]), ValueError),
    (lambda x: np.linalg.norm(x, "bad", axis=1), ValueError),
    (lambda x: np.sum(np.einsum("...j->j", x[None])), ValueError),  # no '...' in the output
    (lambda x: np.sum(np.einsum("..i", x[0])), ValueError),
    (lambda x: np.sum(np.gradient(x, x[0], axis=1)), NotImplementedError),  # traced coordinates
    (lambda x: np.sum(np.gradient(x[:2], axis=0, edge_order=2)), ValueError),
    (lambda x: np.sum(np.negative.outer(x)), ValueError),  # (numpy's: binary ufuncs only)
])
def test_unsupported_forms_raise_clearly(f, error):
    with pytest.raises(error):
        ha.gradient(f, rand((4, 5), seed=1), backend="numpy")


def test_a_ufunc_computes_in_its_dtype_argument():
    """``np.exp(x32, dtype=np.float64)``: numpy's loop of that dtype, the
    inputs cast to it under ``casting``."""
    x = rand((4, 5), seed=3)
    f = lambda x: np.sum(np.exp(x, dtype=np.float64) * W20) + \
        np.sum(np.add(x, x ** 2, dtype=np.float64) ** 2)  # noqa: E731
    assert_grad(f, (x,))
    x32 = x.astype(np.float32)
    g = lambda x: np.sum(np.sin(x, dtype=np.float64) * W20)  # noqa: E731
    res = ha.gradient(g, x32, backend="numpy")
    assert res.gradient.dtype == np.float32
    np.testing.assert_allclose(res.gradient, np.cos(x32.astype(np.float64)) * W20, rtol=1e-6)
    assert float(res.value) == pytest.approx(float(g(x32)), rel=1e-14)
    with pytest.raises(TypeError, match="casting rule 'safe'"):
        ha.gradient(lambda x: np.sum(np.add(x, 1.0, dtype=np.float32, casting="safe")), x)
    with pytest.raises(NotImplementedError, match="dtype=int64"):
        ha.gradient(lambda x: np.sum(np.exp(x, dtype=np.int64)), x)


def test_running_extremes_nan_and_ties():
    """NaN reaches every later element of maximum.accumulate, none of fmax's
    (numpy's values exactly); at equal values the cotangent is shared."""
    x = np.array([1.0, np.nan, 0.5, 2.0, 2.0])
    for uf in (np.maximum, np.fmax, np.minimum, np.fmin):
        got = ha.jacobian(lambda x, uf=uf: uf.accumulate(x), x, backend="numpy").value
        np.testing.assert_array_equal(got, uf.accumulate(x))
    J = ha.jacobian(lambda x: np.maximum.accumulate(x), np.array([1.0, 3.0, 3.0, 2.0])).jacobian
    np.testing.assert_array_equal(J, [[1, 0, 0, 0], [0, 1, 0, 0], [0, .5, .5, 0], [0, .5, .5, 0]])


def test_polymul_drops_leading_zeros_as_numpy_and_keeps_their_derivatives():
    """``np.polymul`` trims its inputs' leading zeros (``poly1d``): the result
    is shorter, a decision on the values checked at every call.  The values
    and shapes are numpy's at zero and nonzero leading coefficients (one
    plan), and the derivative in a zero leading coefficient flows into the
    entries kept (finite differences, of a function flat at the dropped zero
    entries), not 0: a coefficient that starts at 0 moves."""
    def f(x):  # (of the entries, flat at 0: the dropped zeros change nothing)
        p = np.polymul(x[:3], x[3:])
        return np.sum(p ** 2) + np.sum(p ** 3) + np.sum(np.cos(p))

    plan = ha.compile(f, np.arange(1.0, 7.0), backend="numba")
    for lead in ([0.5, 1.2], [0.0, 1.2], [0.0, 0.0], [0.7, 0.0]):
        x = np.array([lead[0], 0.3, -0.4, lead[1], 1.1, 0.9])
        res = plan.gradient(x)
        np.testing.assert_allclose(res.value, f(x), rtol=1e-13)
        np.testing.assert_allclose(res.gradient, numerical_gradient(f, x), rtol=1e-6, atol=1e-8,
                                   err_msg=str(lead))
    # the product itself, at two leading zeros, as numpy's (shape and values)
    def g(x):
        return np.polymul(x[:3], x[3:])

    x = np.array([0.0, 0.0, 0.5, 0.0, 1.1, 0.9])
    res = ha.jacobian(g, x, backend="numpy")
    np.testing.assert_array_equal(res.value, np.polymul(x[:3], x[3:]))


@pytest.mark.parametrize("k", [None, 3.0, [1.5], np.array(2.0), [1.0, 2.0, 0.5]],
                         ids=["none", "number", "one_constant", "zero_d", "one_per_order"])
def test_polyint_takes_its_constants_as_numpy_does(k):
    """``np.polyint(p, m, k)``: ``k`` a number, a 0-d array, one constant for
    every order (a one-element list: numpy repeats it) or one per order --
    numpy's values, and the gradient against finite differences (a traced
    one-element ``k`` too).  A one-element list with m > 1 was refused."""
    x = np.array([0.3, -1.2, 0.7, 2.1])

    def f(x):
        return np.sum(np.polyint(x, 3, k=k) ** 2)

    def g(x):  # the constant traced
        return np.sum(np.polyint(x[:3], 3, k=x[3:]) ** 2)

    for fn in (f, g):
        res = ha.gradient(fn, x)
        np.testing.assert_allclose(res.value, fn(x), rtol=1e-13)
        np.testing.assert_allclose(res.gradient, numerical_gradient(fn, x), rtol=1e-6, atol=1e-8)
