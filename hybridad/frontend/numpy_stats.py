"""numpy's NaN-ignoring reductions, covariances, grids, polynomials, chained
products and index helpers of traced arrays, built from the primitives
while tracing (no rules of their own: their derivatives follow from what
they are made of, as in :mod:`.numpy_math`).

``np.nansum``, ``nanmean``, ``nanvar``, ``nanstd``, ``nanmax``, ``nanmin``,
``nanprod``, ``nancumsum``, ``nancumprod`` (a NaN is the sum's 0, the
product's 1, the max's -inf; a slice of NaNs only gives numpy's results:
0, 1, NaN), ``np.cov``, ``np.corrcoef``, ``np.meshgrid``, ``np.polyval`` (and
so ``np.poly1d(c)(x)``), ``np.polyder``, ``np.polyint``, ``np.poly``, ``np.polymul``
(``np.polyadd``/``polysub`` are traced through numpy's own code),
``np.linalg.multi_dot`` (numpy's order of the products), ``np.vander`` and
``np.polyfit`` (its coefficients),
``np.fill_diagonal`` of a traced array (an element write), and
``np.triu_indices_from`` / ``tril_indices_from`` / ``diag_indices_from`` of a
traced array (from its shape: constants, nothing computed per call).

numpy's polynomial package (``chebval``, ``Polynomial(c)(x)``, ``polyder``, ...)
is Python on arrays, traced as the user's code is
(:func:`hybridad.errors.traced_as_users`); the few of its functions numpy
dispatches (``polyval2d``, ``polygrid3d``, ...) run their Python here too
(:func:`polynomial_dispatched`).
"""

from __future__ import annotations

import numbers
import sys

import numpy as np

from .numpy_api import (HANDLED, _no_kwargs, _reduce, _tracer, broadcast_to, implements,
                        reshape, where)
from .numpy_math import _scan
from ..core.tracer import Tracer

__all__ = []


def _nan_filled(a, fill):
    a = _tracer(a)
    if a.dtype.kind not in "fc":  # (integers hold no NaN: numpy's plain reduction)
        return a, None
    nan = np.isnan(a)
    return where(nan, np.asarray(fill, a.dtype), a), nan


def _present(a):
    """``(a, where)``: numpy's ``where=`` mask of ``a``'s non-NaN elements for
    the reductions that take one (:mod:`.numpy_reductions`: a NaN is then
    the sum's 0, the product's 1, left out of a mean's count) -- ``True``
    for integers, which hold no NaN."""
    a = _tracer(a)
    return a, np.logical_not(np.isnan(a)) if a.dtype.kind in "fc" else True


@implements(np.nansum)
def nansum(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    """``np.nansum``: ``np.sum`` over the non-NaN elements."""
    _no_kwargs("nansum", {"out": out, **kwargs})
    a, present = _present(a)
    return np.sum(a, axis=axis, dtype=dtype, keepdims=bool(keepdims), where=present)


@implements(np.nanprod)
def nanprod(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    """``np.nanprod``: ``np.prod`` over the non-NaN elements."""
    _no_kwargs("nanprod", {"out": out, **kwargs})
    a, present = _present(a)
    return np.prod(a, axis=axis, dtype=dtype, keepdims=bool(keepdims), where=present)


@implements(np.nanmean)
def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    """``np.nanmean``: the mean of the non-NaN elements (NaN for a slice of NaNs)."""
    _no_kwargs("nanmean", {"out": out, **kwargs})
    a, present = _present(a)
    return np.mean(a, axis=axis, dtype=dtype, keepdims=bool(keepdims), where=present)


@implements(np.nanvar)
def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
    """``np.nanvar``: the variance of the non-NaN elements, ``ddof`` as numpy."""
    _no_kwargs("nanvar", {"out": out, **kwargs})
    a, present = _present(a)
    return np.var(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=bool(keepdims), where=present)


@implements(np.nanstd)
def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
    """``np.nanstd``: the square root of :func:`nanvar`."""
    _no_kwargs("nanstd", {"out": out, **kwargs})
    a, present = _present(a)
    return np.std(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=bool(keepdims), where=present)


def _nan_extreme(kind, a, axis, keepdims):
    filled, nan = _nan_filled(a, -np.inf if kind == "max" else np.inf)
    value = _reduce(kind, filled, axis, keepdims)
    if nan is None:
        return value
    every = _reduce("min", nan.astype(np.float64), axis, keepdims)  # 1: a slice of NaNs
    return where(every > 0, np.asarray(np.nan, value.dtype), value)


@implements(np.nanmax)
def nanmax(a, axis=None, out=None, keepdims=False, **kwargs):
    """``np.nanmax``: the max of the non-NaN elements (NaN for a slice of NaNs)."""
    _no_kwargs("nanmax", {"out": out, **kwargs})
    return _nan_extreme("max", a, axis, bool(keepdims))


@implements(np.nanmin)
def nanmin(a, axis=None, out=None, keepdims=False, **kwargs):
    """``np.nanmin``: the min of the non-NaN elements (NaN for a slice of NaNs)."""
    _no_kwargs("nanmin", {"out": out, **kwargs})
    return _nan_extreme("min", a, axis, bool(keepdims))


@implements(np.nancumsum)
def nancumsum(a, axis=None, dtype=None, out=None):
    """``np.nancumsum``: NaNs count as 0."""
    return _scan("cumsum", _nan_filled(a, 0)[0], axis, dtype, out)


@implements(np.nancumprod)
def nancumprod(a, axis=None, dtype=None, out=None):
    """``np.nancumprod``: NaNs count as 1."""
    return _scan("cumprod", _nan_filled(a, 1)[0], axis, dtype, out)


# ----------------------------------------------------------------------------
# covariances
# ----------------------------------------------------------------------------

def _rows(x, rowvar):
    x = _tracer(x)
    if x.ndim > 2:
        raise ValueError("m has more than 2 dimensions")
    x = reshape(x, (1, -1)) if x.ndim < 2 else x
    return x if rowvar or x.shape[0] == 1 else x.T


@implements(np.cov)
def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *,
        dtype=None):
    """``np.cov`` as numpy computes it (the rows' deviations from their means,
    their products times ``1 / (N - ddof)``); without ``fweights`` and ``aweights``."""
    _no_kwargs("cov", {"fweights": fweights, "aweights": aweights})
    if ddof is not None and ddof != int(ddof):
        raise ValueError("ddof must be integer")
    x = _rows(m, rowvar)
    if y is not None:
        x = np.concatenate((x, _rows(y, rowvar)), axis=0)
    x = x.astype(np.result_type(x.dtype, np.float64) if dtype is None else dtype)
    if ddof is None:
        ddof = 0 if bias else 1
    fact = max(x.shape[1] - ddof, 0)
    x = x - np.mean(x, axis=1, keepdims=True)
    c = (x @ x.T) * np.asarray(np.true_divide(1, fact), x.dtype)
    return np.squeeze(c)


@implements(np.corrcoef)
def corrcoef(x, y=None, rowvar=True, *, dtype=None):
    """``np.corrcoef``: :func:`cov` over the outer product of the standard
    deviations, clipped to [-1, 1] as numpy does."""
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return c / c
    d = np.sqrt(np.diagonal(c))
    c = c / reshape(d, (-1, 1))
    c = c / reshape(d, (1, -1))
    return np.clip(c, -1, 1)


# ----------------------------------------------------------------------------
# grids, polynomials, chained products
# ----------------------------------------------------------------------------

@implements(np.meshgrid)
def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """``np.meshgrid``: each input along its own axis (the first two swapped
    for ``indexing='xy'``), broadcast to the grid unless ``sparse``."""
    if indexing not in ("xy", "ij"):
        raise ValueError("Valid values for `indexing` are 'xy' and 'ij'.")
    n = len(xi)
    out = []
    for i, x in enumerate(xi):
        shape = [1] * n
        shape[i] = -1
        if indexing == "xy" and n > 1 and i < 2:
            shape[0], shape[1] = shape[1], shape[0]
        out.append(reshape(_tracer(x), tuple(shape)))
    if not sparse and out:
        grid = np.broadcast_shapes(*(o.shape for o in out))
        out = [broadcast_to(o, grid) * 1 if copy else broadcast_to(o, grid) for o in out]
    return tuple(out)


@implements(np.polyval)
def polyval(p, x):
    """``np.polyval``: Horner's rule from zero, as numpy evaluates it (so
    ``np.poly1d(c)(x)`` too); coefficients and ``x`` differentiable."""
    if isinstance(p, np.poly1d):
        p = p.coeffs
    coeffs = list(p) if isinstance(p, (list, tuple, np.ndarray)) else \
        [p[k] for k in range(_tracer(p).shape[0])]
    x = _tracer(x)
    y = x * np.asarray(0, x.dtype)
    for c in coeffs:
        y = y * x + c
    return y


@implements(np.polyder)
def polyder(p, m=1):
    """``np.polyder``: ``p[:-1] * [n, ..., 1]``, ``m`` times, as numpy computes it."""
    m = int(m)
    if m < 0:
        raise ValueError("Order of derivative must be positive (see polyint)")
    p = _tracer(p)
    for _ in range(m):
        n = p.shape[0] - 1
        p = p[:-1] * np.arange(n, 0, -1)
    return p


@implements(np.polyint)
def polyint(p, m=1, k=None):
    """``np.polyint``: ``p / [n, ..., 1]`` and the integration constant ``k``
    (a number, or one per order), ``m`` times, as numpy computes it; ``p``
    and ``k`` differentiable."""
    m = int(m)
    if m < 0:
        raise ValueError("Order of integral must be positive (see polyder)")
    if k is None:
        k = [0.0] * m
    elif isinstance(k, numbers.Number) or getattr(k, "ndim", None) == 0:  # (a number, a
        # 0-d array or tracer; np.ndim would convert a list holding tracers)
        k = [k] * m
    elif len(k) == 1 and m > 1:  # (numpy's: one constant for every order)
        k = [k[0]] * m
    if len(k) < m:
        raise ValueError("k must be a scalar or a rank-1 array of length 1 or >m.")
    p = _tracer(p)
    for j in range(m):
        p = np.concatenate([p / np.arange(p.shape[0], 0, -1),
                            reshape(_tracer(k[j]) + np.zeros((), p.dtype), (1,))])
    return p


for _numpys in (np.polyadd, np.polysub):  # (numpy's own Python runs on tracers as it is)
    HANDLED[_numpys] = _numpys._implementation


def _leading_zeros(a):
    """How many leading coefficients ``np.poly1d`` drops from ``a``: its zeros,
    all but the last when all are (a decision on each one's value, checked at
    every call)."""
    if a.ndim != 1:
        raise ValueError("Polynomial must be 1d only.")
    k = 0
    while k < a.shape[0] - 1 and bool(a[k] == 0):
        k += 1
    return k


@implements(np.polymul)
def polymul(a1, a2):
    """``np.polymul``: the convolution of the coefficients, less the leading
    entries numpy's ``poly1d`` drops with the inputs' leading zeros (those are
    zeros too: the values are numpy's).  A dropped coefficient keeps its
    derivative through the entries kept (a coefficient that starts at 0 is
    not stuck there); the entries dropped carry none, as the branch numpy
    takes at an exact zero has them not."""
    a1, a2 = _tracer(a1), _tracer(a2)
    drop = _leading_zeros(a1) + _leading_zeros(a2)
    return np.convolve(a1, a2)[drop:]


@implements(np.poly)
def poly(seq_of_zeros):
    """``np.poly``: the monic polynomial of the zeros, one product with
    ``[1, -z]`` per zero as numpy's ``convolve`` makes it (``a[i] - z a[i-1]``:
    numpy's values); of a square matrix, of its eigenvalues (real spectra,
    :func:`np.linalg.eigvals`)."""
    z = _tracer(seq_of_zeros)
    if z.ndim == 0:
        z = reshape(z, (1,))
    if z.ndim == 2 and z.shape[0] == z.shape[1] and z.shape[0]:
        z = np.linalg.eigvals(z)
    elif z.ndim != 1:
        raise ValueError("input must be 1d or non-empty square 2d array.")
    if z.dtype.kind != "f":
        z = z.astype(np.float64)
    a = _tracer(np.ones(1, z.dtype))
    zero = np.zeros(1, z.dtype)
    for i in range(z.shape[0]):
        a = np.concatenate([a, zero]) - z[i] * np.concatenate([zero, a])
    return a


@implements(np.vander)
def vander(x, N=None, increasing=False):
    """``np.vander``: the powers as numpy makes them, a running product of
    ``x`` (``multiply.accumulate``: the same roundings), ones first."""
    x = _tracer(x)
    if x.ndim != 1:
        raise ValueError("x must be a one-dimensional array or sequence.")
    n = x.shape[0] if N is None else int(N)
    dtype = np.promote_types(x.dtype, int)
    ones = np.ones((x.shape[0], min(n, 1)), dtype)
    if n <= 1:  # (no power of x: numpy's ones, whatever x holds)
        return _tracer(ones)
    powers = np.cumprod(broadcast_to(reshape(x, (x.shape[0], 1)), (x.shape[0], n - 1)), axis=1)
    v = np.concatenate([ones, powers.astype(dtype)], axis=1)
    return v if increasing else v[:, ::-1]


@implements(np.polyfit)
def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    """``np.polyfit``'s least-squares coefficients, as numpy computes them
    (the Vandermonde matrix, weighted, columns scaled to unit norm, numpy's
    ``lstsq``, unscaled); ``x``, ``y`` and ``w`` differentiable (at a
    constant rank).  ``full=True`` and ``cov=`` are refused."""
    if full or cov:
        raise NotImplementedError("hybridad: np.polyfit(..., full=True) and cov= are not "
                                  "supported while tracing (the coefficients are)")
    order = int(deg) + 1
    x, y = _tracer(x) + 0.0, _tracer(y) + 0.0
    if deg < 0:
        raise ValueError("expected deg >= 0")
    if x.ndim != 1:
        raise TypeError("expected 1D vector for x")
    if y.ndim not in (1, 2) or x.shape[0] != y.shape[0]:
        raise TypeError("expected 1D or 2D y of x's length")
    if rcond is None:
        rcond = x.shape[0] * np.finfo(x.dtype).eps
    lhs, rhs = vander(x, order), y
    if w is not None:
        w = _tracer(w) + 0.0
        if w.ndim != 1 or w.shape[0] != y.shape[0]:
            raise TypeError("expected a 1-d array of weights of y's length")
        lhs = lhs * w[:, None]
        rhs = rhs * (w[:, None] if rhs.ndim == 2 else w)
    scale = np.sqrt(np.sum(lhs * lhs, axis=0))
    c = np.linalg.lstsq(lhs / scale, rhs, rcond)[0]
    return (c.T / scale).T


@implements(np.linalg.multi_dot)
def multi_dot(arrays, *, out=None):
    """``np.linalg.multi_dot``: the products in numpy's order (its cheapest
    parenthesization), a first 1-D array a row, a last one a column."""
    _no_kwargs("linalg.multi_dot", {"out": out})
    arrays = [_tracer(a) for a in arrays]
    if len(arrays) < 2:
        raise ValueError("Expecting at least two arrays.")
    if len(arrays) == 2:
        return arrays[0] @ arrays[1]
    first, last = arrays[0].ndim == 1, arrays[-1].ndim == 1
    if first:
        arrays[0] = reshape(arrays[0], (1, -1))
    if last:
        arrays[-1] = reshape(arrays[-1], (-1, 1))
    order = _chain_order([a.shape for a in arrays])
    result = _chain(arrays, order, 0, len(arrays) - 1)
    if first and last:
        return reshape(result, ())
    if first or last:
        return reshape(result, (-1,))
    return result


def _chain_order(shapes):
    """The split points of the cheapest product of matrices of ``shapes``
    (the textbook matrix-chain dynamic program numpy's multi_dot solves, ties
    to the first split, as numpy)."""
    p = [s[0] for s in shapes] + [shapes[-1][1]]
    n = len(shapes)
    m = np.zeros((n, n))
    s = np.zeros((n, n), dtype=int)
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            m[i, j] = np.inf
            for k in range(i, j):
                q = m[i, k] + m[k + 1, j] + p[i] * p[k + 1] * p[j + 1]
                if q < m[i, j]:
                    m[i, j], s[i, j] = q, k
    return s


def _chain(arrays, s, i, j):
    if i == j:
        return arrays[i]
    k = s[i, j]
    return _chain(arrays, s, i, k) @ _chain(arrays, s, k + 1, j)


# ----------------------------------------------------------------------------
# indices from a traced array's shape; its diagonal written
# ----------------------------------------------------------------------------

@implements(np.triu_indices_from)
def triu_indices_from(arr, k=0):
    """``np.triu_indices_from``: from the traced array's shape (constants)."""
    if arr.ndim != 2:
        raise ValueError("input array must be 2-d")
    return np.triu_indices(arr.shape[-2], k=k, m=arr.shape[-1])


@implements(np.tril_indices_from)
def tril_indices_from(arr, k=0):
    """``np.tril_indices_from``: from the traced array's shape (constants)."""
    if arr.ndim != 2:
        raise ValueError("input array must be 2-d")
    return np.tril_indices(arr.shape[-2], k=k, m=arr.shape[-1])


@implements(np.diag_indices_from)
def diag_indices_from(arr):
    """``np.diag_indices_from``: from the traced array's shape (constants)."""
    if arr.ndim < 2:
        raise ValueError("input array must be at least 2-d")
    if len(set(arr.shape)) != 1:
        raise ValueError("All dimensions of input must be of equal length")
    return np.diag_indices(arr.shape[0], arr.ndim)


@implements(np.fill_diagonal)
def fill_diagonal(a, val, wrap=False):
    """``np.fill_diagonal`` of a traced array: its diagonal written in place
    (an element write; ``val`` a scalar or one value per diagonal element)."""
    if a.ndim < 2:
        raise ValueError("array must be at least 2-d")
    if a.ndim == 2:
        n, m = a.shape
        end = None if wrap else m * m
        flat = np.arange(0, n * m if end is None else min(end, n * m), m + 1)
        index = (flat // m, flat % m)
    else:
        if len(set(a.shape)) != 1:
            raise ValueError("All dimensions of input must be of equal length")
        index = np.diag_indices(a.shape[0], a.ndim)
    count = index[0].size
    if not isinstance(val, numbers.Number):
        val = _tracer(val)
        if val.size not in (1, count):
            raise NotImplementedError(
                f"hybridad: numpy.fill_diagonal with {val.size} values for a diagonal of "
                f"{count} elements (numpy repeats them) is not supported while tracing")
        val = reshape(val, () if val.size == 1 else (count,))
    a[index] = val


@implements(np.histogram)
def histogram(a, bins=10, range=None, density=None, weights=None):  # noqa: A002 (numpy's name)
    """``np.histogram`` of constant data ``a`` with traced ``weights``: numpy's
    bin edges (from ``a``, ``bins`` and ``range``), each element in the bin
    ``edges[i] <= a < edges[i + 1]`` (the last bin closed, elements outside
    dropped: numpy's rule), the weights summed per bin (``np.bincount``), over
    the bin widths and the total where ``density``.  Differentiable in the
    weights; the edges are numpy's array.  Traced data (whose bins are values)
    is numpy's own histogram on the values, recorded as a host call."""
    if not isinstance(weights, Tracer) or any(isinstance(v, Tracer) for v in (a, bins, range)):
        from .host_calls import host_call, public_path

        return host_call(public_path(np.histogram), (a,), {"bins": bins, "range": range,
                                                           "density": density,
                                                           "weights": weights})
    a = np.asarray(a)
    w = _tracer(weights)
    if w.shape != a.shape:
        raise ValueError("weights should have the same shape as a.")
    edges = np.histogram_bin_edges(a, bins, range)  # (numpy's edges and checks)
    # (numpy: the weights' dtype, summed in float64 by np.bincount, as here)
    return binned_sum(np.reshape(a, (-1, 1)), [edges], w, density,
                      w.dtype if w.dtype.kind == "f" else None), edges


def binned_sum(samples, edges, weights, density, dtype=None):
    """The traced ``weights`` of constant ``samples`` (``(n, d)``) summed in the
    bins of ``edges`` (one array per dimension), by numpy's rule -- a bin holds
    its lower edge, the last one its upper edge too, samples outside are dropped
    -- in ``dtype`` (default float64), over the bins' volumes and the total where
    ``density``: ``np.histogram``'s and ``np.histogramdd``'s."""
    from .numpy_signal import bincount

    inside = np.all([(samples[:, d] >= e[0]) & (samples[:, d] <= e[-1])
                     for d, e in enumerate(edges)], axis=0)
    shape = tuple(len(e) - 1 for e in edges)
    index = tuple(np.minimum(np.searchsorted(e, samples[inside, d], side="right") - 1, n - 1)
                  for d, (e, n) in enumerate(zip(edges, shape, strict=True)))
    counts = bincount(np.ravel_multi_index(index, shape),
                      weights=np.ravel(weights)[np.flatnonzero(inside)],
                      minlength=int(np.prod(shape)))
    if dtype is not None and counts.dtype != dtype:
        counts = counts.astype(dtype)
    hist = reshape(counts, shape)
    if density:
        volume = np.diff(edges[0])
        for e in edges[1:]:
            volume = np.multiply.outer(volume, np.diff(e))
        hist = hist / volume / np.sum(hist)
    return hist


#: numpy's polynomial modules
POLYNOMIAL_MODULES = tuple(f"numpy.polynomial.{m}" for m in (
    "polynomial", "chebyshev", "legendre", "hermite", "hermite_e", "laguerre", "polyutils"))


def polynomial_dispatched(only=None):
    """Handle numpy's dispatched functions of its polynomial modules imported so far
    (or the one named ``only``) with their own Python: a call on tracers is traced
    through it, as the package's undispatched functions are."""
    for name in POLYNOMIAL_MODULES if only is None else (only,):
        module = sys.modules.get(name)
        for f in vars(module).values() if module is not None else ():
            impl = getattr(f, "_implementation", None)
            if impl is not None and callable(impl) and f not in HANDLED:
                HANDLED[f] = impl
