"""scipy.spatial.distance on tracers: ``cdist``, ``pdist`` and ``squareform``,
built from the primitives while tracing (no rules of their own: their
derivatives follow from what they are made of, as in :mod:`.numpy_stats`).

Registered in :data:`.scipy_special.INTERCEPTED` under
``"scipy.spatial.distance"``: ``cdist(XA, XB)`` inside a traced function comes
here when an argument is a tracer (:func:`.scipy_special.install` wraps the
module's attributes when hybridad or scipy.spatial.distance is imported,
whichever is second).

A pair's distance is computed as scipy's C code computes it, from the
differences of the two rows (never the Gram form ``|u|^2 + |v|^2 - 2 u.v``,
which loses digits): ``cdist`` broadcasts ``XA[:, None]`` against
``XB[None]``, ``pdist`` gathers the rows of the pairs ``i < j`` in scipy's
condensed order.  Values are scipy's to rounding (the sums run in another
order).  Metrics: 'euclidean', 'sqeuclidean', 'cityblock', 'chebyshev',
'minkowski' (``p``), 'cosine', 'correlation', 'braycurtis', 'canberra'
(each with ``w=``, as scipy), 'seuclidean' (``V``) and 'mahalanobis' (``VI``),
under scipy's aliases too; ``V`` and ``VI`` default to scipy's (the variances
and the inverse covariance of the rows, computed from -- and differentiated
through -- the traced data).  Roots of sums (euclidean, minkowski,
seuclidean, mahalanobis) have derivative 0 at a zero distance (the
subgradient; ``sqrt``'s own is infinite there), so ``cdist(X, X)``'s diagonal
gives no NaN.
"""

from __future__ import annotations

import numpy as np

from .numpy_api import _tracer, concatenate, getitem, reshape, where
from .scipy_special import intercepts
from ..core.tracer import Tracer

__all__ = []

_M = "scipy.spatial.distance"

#: scipy's names of the metrics traced here -> the canonical name
_ALIASES = {
    **dict.fromkeys(("braycurtis",), "braycurtis"),
    **dict.fromkeys(("canberra",), "canberra"),
    **dict.fromkeys(("chebychev", "chebyshev", "cheby", "cheb", "ch"), "chebyshev"),
    **dict.fromkeys(("cityblock", "cblock", "cb", "c"), "cityblock"),
    **dict.fromkeys(("correlation", "co"), "correlation"),
    **dict.fromkeys(("cosine", "cos"), "cosine"),
    **dict.fromkeys(("euclidean", "euclid", "eu", "e"), "euclidean"),
    **dict.fromkeys(("mahalanobis", "mahal", "mah"), "mahalanobis"),
    **dict.fromkeys(("minkowski", "mi", "m", "pnorm"), "minkowski"),
    **dict.fromkeys(("seuclidean", "se", "s"), "seuclidean"),
    **dict.fromkeys(("sqeuclidean", "sqe", "sqeuclid"), "sqeuclidean"),
}
#: the keywords each metric takes (scipy's)
_KEYWORDS = {"seuclidean": {"V"}, "mahalanobis": {"VI"}, "minkowski": {"p", "w"}}


def _refuse(what):
    raise NotImplementedError(f"hybridad: scipy.spatial.distance.{what} is not supported "
                              "while tracing")


def _metric(func, metric, kwargs):
    """scipy's canonical name of ``metric``; the keywords checked."""
    if callable(metric):
        name = getattr(metric, "__name__", repr(metric))
        _refuse(f"{func} with the callable metric {name!r} (hybridad traces the metrics "
                "by name: pass the metric's name, or write the distances with numpy)")
    if not isinstance(metric, str):
        raise TypeError("2nd argument metric must be a string identifier or a function.")
    name = _ALIASES.get(metric.lower())
    if name is None:
        _refuse(f"{func} with metric={metric!r} (traced: 'euclidean', 'sqeuclidean', "
                "'cityblock', 'chebyshev', 'minkowski', 'cosine', 'correlation', "
                "'braycurtis', 'canberra', 'seuclidean', 'mahalanobis')")
    if kwargs.get("out") is not None:
        _refuse(f"{func}(..., out=) of traced values (take its result instead)")
    kwargs.pop("out", None)
    allowed = _KEYWORDS.get(name, {"w"})
    extra = sorted(set(kwargs) - allowed)
    if extra:
        raise TypeError(f"{func}() with metric {name!r} got unexpected keyword "
                        f"argument(s) {extra}")
    return name


def _double(a):
    """``a`` as float64 (scipy converts every operand to double)."""
    a = a if isinstance(a, Tracer) else np.ascontiguousarray(a)
    if a.dtype.kind == "c":
        raise TypeError("scipy.spatial.distance: complex data is not supported")
    return a if a.dtype == np.float64 else a.astype(np.float64)


def _weights(w, n):
    if w is None:
        return None
    w = _double(w)
    if w.ndim != 1 or w.shape[0] != n:
        raise ValueError(f"Weights must have same size as input vector. {w.shape[0]} vs. {n}")
    if not isinstance(w, Tracer) and np.any(w < 0):
        raise ValueError("Input weights should be all non-negative")
    return w


def _positive_power(s, p):
    """``s ** p`` of ``s >= 0``, with derivative 0 where ``s`` is 0 (the
    power's own is infinite there for ``p < 1``)."""
    if p == 1:
        return s
    if p == 2:
        return s * s
    zero = s > 0
    return where(zero, where(zero, s, 1.0) ** p, 0.0)


def _root(s, p=2):
    """``s ** (1/p)`` of a sum ``s >= 0`` (``np.sqrt`` for ``p = 2``, as scipy),
    its derivative 0 at ``s = 0``."""
    pos = s > 0
    safe = where(pos, s, 1.0)
    return where(pos, np.sqrt(safe) if p == 2 else safe ** (1.0 / p), 0.0)


def _sum(a, w=None):
    return np.sum(a if w is None else a * w, axis=-1)


class _Pairs:
    """The pairs of rows a function compares: ``cdist``'s every row of ``A``
    with every row of ``B`` (broadcast), ``pdist``'s rows ``i < j`` of ``A``
    (gathered, scipy's condensed order).  :meth:`of` gives per-row arrays of
    ``A`` and ``B`` (or of ``A`` twice) laid out as the pairs."""

    def __init__(self, A, B=None):
        self.A, self.B = A, B
        if B is None:
            self.i, self.j = np.triu_indices(A.shape[0], 1)

    def of(self, a, b):
        if self.B is None:
            return a[self.i], a[self.j]
        tail = (slice(None),) * (a.ndim - 1)
        return a[(slice(None), None) + tail], b[(None,) + tail]

    def rows(self):
        return self.of(self.A, self.A if self.B is None else self.B)

    def per_row(self, f):
        """``f`` of each row of ``A`` and of ``B``, laid out as the pairs."""
        return self.of(f(self.A), f(self.A if self.B is None else self.B))

    def data(self):
        """Every row, the one set scipy computes ``V`` and ``VI`` from."""
        return self.A if self.B is None else concatenate([_tracer(self.A), _tracer(self.B)])


def _cosine(pairs, w):
    """``1 - u.v / (|u| |v|)``, the cosine clipped to ``[-1, 1]`` (scipy's;
    weighted: scipy's weighted dot products, ``w`` normalized to sum 1)."""
    u, v = pairs.rows()
    if w is None:  # (scipy's C: the rows' norms, then each pair's dot product over them)
        nu, nv = pairs.per_row(lambda a: np.sqrt(_sum(a * a)))
        cosine = _sum(u * v) / (nu * nv)
    else:  # (scipy's Python: the weighted dot products, the root of their product)
        w = w / np.sum(w)
        uu, vv = pairs.per_row(lambda a: _sum(a * (a * w)))
        cosine = _sum(u * (v * w)) / np.sqrt(uu * vv)
    return 1.0 - np.clip(cosine, -1.0, 1.0)


def _distance(name, pairs, n, kwargs):
    """The distances of ``pairs`` under metric ``name``."""
    w = _weights(kwargs.get("w"), n)
    if name in ("cosine", "correlation"):
        if name == "correlation":
            centre = (lambda a: a @ (w / np.sum(w))) if w is not None else \
                (lambda a: np.mean(a, axis=1))
            A, B = pairs.A, pairs.B
            pairs = _Pairs(A - reshape(_tracer(centre(A)), (-1, 1)),
                           None if B is None else B - reshape(_tracer(centre(B)), (-1, 1)))
        return _cosine(pairs, w)
    u, v = pairs.rows()
    d = u - v
    if name == "sqeuclidean":
        return _sum(d * d, w)
    if name == "euclidean":
        return _root(_sum(d * d, w))
    if name == "cityblock":
        return _sum(np.abs(d), w)
    if name == "chebyshev":
        return np.max(np.abs(d) if w is None else np.abs(d) * (w > 0), axis=-1)
    if name == "minkowski":
        p = kwargs.get("p", 2.0)
        if isinstance(p, Tracer):
            _refuse("minkowski with a traced p (pass the order as a constant)")
        if p <= 0:
            raise ValueError("p must be greater than 0")
        if np.isinf(p):
            return _distance("chebyshev", pairs, n, kwargs)
        return _root(_sum(_positive_power(np.abs(d), p), w), p)
    if name == "braycurtis":
        return _sum(np.abs(d), w) / _sum(np.abs(u + v), w)
    if name == "canberra":
        num, den = np.abs(d), np.abs(u) + np.abs(v)
        nonzero = den > 0
        return _sum(where(nonzero, num / where(nonzero, den, 1.0), 0.0), w)
    if name == "seuclidean":
        V = kwargs.get("V")
        if V is None:
            V = np.var(pairs.data(), axis=0, ddof=1)
        V = _double(V)
        if V.ndim != 1:
            raise ValueError("Variance vector V must be one-dimensional.")
        if V.shape[0] != n:
            raise ValueError("Variance vector V must be of the same dimension as the "
                             "vectors on which the distances are computed.")
        return _root(np.sum(d * d / V, axis=-1))
    # mahalanobis: sqrt((u - v) VI (u - v)), VI scipy's inverse covariance by default
    VI = kwargs.get("VI")
    if VI is None:
        X = pairs.data()
        if X.shape[0] <= n:
            raise ValueError(
                f"The number of observations ({X.shape[0]}) is too small; the covariance "
                f"matrix is singular. For observations with {n} dimensions, at least "
                f"{n + 1} observations are required.")
        VI = np.linalg.inv(reshape(np.cov(X.T), (n, n))).T
    VI = _double(VI)
    VI = reshape(_tracer(VI), (1, 1)) if VI.ndim < 2 else VI
    flat = reshape(_tracer(d), (-1, n))
    q = np.sum((flat @ VI.T) * flat, axis=-1)
    return reshape(_root(q), d.shape[:-1])


def _operand(X, name):
    X = _double(X)
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-dimensional array.")
    return X


@intercepts(_M, "cdist")
def cdist(XA, XB, metric="euclidean", **kwargs):
    """``scipy.spatial.distance.cdist``: the distances of every row of ``XA``
    to every row of ``XB``.

    Parameters
    ----------
    XA, XB : Tracer or array_like
        ``(mA, n)`` and ``(mB, n)``; either or both traced (computed in float64,
        as scipy).
    metric : str
        One of the metrics of this module's docstring (scipy's aliases too);
        another metric or a callable raises NotImplementedError.
    **kwargs
        ``w`` (every metric but seuclidean and mahalanobis), ``p``
        (minkowski), ``V`` (seuclidean), ``VI`` (mahalanobis); each may be
        traced but ``p``.

    Returns
    -------
    Tracer
        ``(mA, mB)``: ``XA[:, None]`` against ``XB[None]``, elementwise ops and
        sums over the features (cosine and correlation: dot products and row
        norms), scipy's values to rounding.
    """
    name = _metric("cdist", metric, kwargs)
    XA, XB = _operand(XA, "XA"), _operand(XB, "XB")
    if XA.shape[1] != XB.shape[1]:
        raise ValueError("XA and XB must have the same number of columns "
                         "(i.e. feature dimension.)")
    return _distance(name, _Pairs(XA, XB), XA.shape[1], kwargs)


@intercepts(_M, "pdist")
def pdist(X, metric="euclidean", **kwargs):
    """``scipy.spatial.distance.pdist``: the distances of the pairs of rows
    ``i < j`` of ``X``, in scipy's condensed order.

    Parameters
    ----------
    X : Tracer or array_like
        ``(m, n)``, computed in float64 as scipy.
    metric, **kwargs
        As :func:`cdist`.

    Returns
    -------
    Tracer
        ``(m (m - 1) / 2,)``: the rows of each pair gathered
        (``X[i]``, ``X[j]``), then :func:`cdist`'s formulas; scipy's values to
        rounding.
    """
    name = _metric("pdist", metric, kwargs)
    X = _operand(X, "X")
    if X.shape[0] < 2:  # (no pair)
        return _tracer(np.zeros(0))
    return _distance(name, _Pairs(X), X.shape[1], kwargs)


@intercepts(_M, "squareform")
def squareform(X, force="no", checks=True):
    """``scipy.spatial.distance.squareform``: a condensed distance vector to its
    symmetric matrix (zero diagonal), or a square matrix to its condensed
    upper triangle.

    Parameters
    ----------
    X : Tracer
        1-D (``n (n - 1) / 2`` distances) or a square matrix.
    force : {'no', 'tomatrix', 'tovector'}
        As scipy.
    checks : bool
        Accepted; scipy's check of a matrix (symmetric, zero diagonal) needs
        the values and is not made on a traced one.

    Returns
    -------
    Tracer
        One gather (the vector's elements, and a zero, at the matrix's
        positions) or ``X[np.triu_indices(n, 1)]``: scipy's values exactly.
    """
    X = _tracer(X)
    s = X.shape
    if force.lower() == "tomatrix" and len(s) != 1:
        raise ValueError("Forcing 'tomatrix' but input X is not a distance vector.")
    if force.lower() == "tovector" and len(s) != 2:
        raise ValueError("Forcing 'tovector' but input X is not a distance matrix.")
    if len(s) == 1:
        k = s[0]
        d = int(np.ceil(np.sqrt(k * 2)))
        if d * (d - 1) != k * 2 and k:
            raise ValueError("Incompatible vector size. It must be a binomial coefficient n "
                             "choose 2 for some integer n >= 2.")
        d = max(d, 1)
        index = np.full((d, d), k, dtype=np.intp)
        i, j = np.triu_indices(d, 1)
        index[i, j] = index[j, i] = np.arange(k)
        return getitem(concatenate([X, np.zeros(1, X.dtype)]), index)
    if len(s) == 2:
        if s[0] != s[1]:
            raise ValueError("The matrix argument must be square.")
        return getitem(X, np.triu_indices(s[0], 1))
    raise ValueError(f"The first argument must be one or two dimensional array. A "
                     f"{len(s)}-dimensional array is not permitted")
