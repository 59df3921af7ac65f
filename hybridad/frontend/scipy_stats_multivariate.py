"""scipy.stats' multivariate distributions and kernel density estimates on tracers.

scipy's multivariate distributions are instances of their own classes, whose
methods convert their arguments with ``np.asarray``; :func:`install` (called by
:func:`hybridad.frontend.scipy_stats.install`) wraps the methods below so that a
call with a traced argument runs the density written here with numpy's
functions, differentiable in every traced argument, and any other call runs
scipy's:

* ``multivariate_normal.logpdf`` / ``pdf``, frozen (``multivariate_normal(mean,
  cov)``, of traced parameters too) or not: in ``x``, the mean and the
  covariance (through ``slogdet`` and ``solve``);
* ``multivariate_t.logpdf`` / ``pdf``, frozen or not: in ``x``, ``loc``,
  ``shape`` and ``df``;
* ``dirichlet.logpdf`` / ``pdf``: in ``x`` (its components along the first
  axis, scipy's layout; ``k - 1`` of them completed to one) and ``alpha``;
  ``x`` off the simplex gives NaN where scipy raises (a traced value cannot
  raise);
* ``multinomial.logpmf`` / ``pmf``: in ``p`` (used as given: scipy replaces the
  last probability of a ``p`` that does not sum to one, which a traced ``p``
  cannot be checked for); ``-inf`` where the counts are not non-negative integers
  summing to ``n``, NaN for ``p`` outside [0, 1];
* ``gaussian_kde(dataset).logpdf`` / ``pdf`` / ``evaluate`` / ``__call__`` of
  traced points (the dataset, its weights and bandwidth are the estimate's).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..ops.special import sp  # scipy.special's ufuncs, scipy imported on the first call
from .scipy_special import is_traced

__all__ = ["install"]

_LOG_2PI = math.log(2 * math.pi)


def _as_array(x):
    """``x`` as a float64 array (scipy's quantiles are)."""
    if not hasattr(x, "shape"):
        return np.asarray(x, float)
    return x if x.dtype == np.float64 else x.astype(np.float64)


def _quadratic(shape, d):
    """``(logdet(shape), d^T shape^-1 d)`` over the last axis of ``d``."""
    sign, logdet = np.linalg.slogdet(shape)
    sol = np.linalg.solve(shape, np.swapaxes(d, -1, -2) if d.ndim > 1 else d)
    quad = np.sum(d * (np.swapaxes(sol, -1, -2) if d.ndim > 1 else sol), axis=-1)
    return logdet, quad


def _location(x, loc, shape):
    x = _as_array(x)
    k = x.shape[-1]
    loc = np.zeros(k) if loc is None else loc
    shape = shape * np.eye(k) if np.ndim(shape) == 0 else shape
    return x - loc, shape, k


def _mvn_traced(x, mean, cov):
    """The multivariate normal log-density of traced values."""
    d, cov, k = _location(x, mean, cov)
    logdet, quad = _quadratic(cov, d)
    return -0.5 * (k * _LOG_2PI + logdet + quad)


def _mvt_traced(x, loc, shape, df):
    """The multivariate t log-density of traced values (scipy's: the normal's
    where ``df`` is infinite)."""
    if not is_traced((df,)) and np.isinf(df):
        return _mvn_traced(x, loc, shape)
    d, shape, k = _location(x, loc, shape)
    logdet, quad = _quadratic(shape, d)
    t = 0.5 * (df + k)
    return (sp.gammaln(t) - sp.gammaln(0.5 * df) - 0.5 * k * np.log(df * math.pi)
            - 0.5 * logdet - t * np.log1p(quad / df))


def _dirichlet_traced(x, alpha):
    x = _as_array(x)
    k = np.shape(alpha)[0]
    if x.shape[0] not in (k, k - 1):
        raise ValueError(f"scipy.stats.dirichlet: x has {x.shape[0]} components along its "
                         f"first axis; alpha has {k} (x needs {k} or {k - 1})")
    if x.shape[0] == k - 1:
        x = np.concatenate([x, (1 - np.sum(x, axis=0))[None]], axis=0)
    a = np.reshape(alpha, (k,) + (1,) * (x.ndim - 1))
    terms = np.sum(sp.xlogy(a - 1, x), axis=0)
    out = terms + sp.gammaln(np.sum(alpha)) - np.sum(sp.gammaln(alpha))
    valid = np.all((x >= 0) & (x <= 1), axis=0) & (np.abs(np.sum(x, axis=0) - 1) <= 1e-9)
    return np.where(valid, out, np.nan)


def _multinomial_traced(x, n, p):
    x = _as_array(x)
    out = sp.gammaln(n + 1) + np.sum(sp.xlogy(x, p) - sp.gammaln(x + 1), axis=-1)
    counts = np.all((x >= 0) & (x == np.floor(x)), axis=-1) & (np.sum(x, axis=-1) == n)
    out = np.where(counts, out, -np.inf)
    return np.where(np.any((p < 0) | (p > 1), axis=-1) | (n < 0), np.nan, out)


def _kde_traced(kde, points):
    """The log-density of scipy's ``gaussian_kde`` at traced ``points``
    (``(d, m)``, or ``(m,)`` of a one-dimensional estimate, as scipy reads them):
    a log-sum-exp over the dataset of the kernel's normal densities."""
    points = _as_array(points)
    d = kde.d
    if points.ndim < 2:
        points = np.reshape(points, (d, -1) if d > 1 or points.ndim == 0 else (1, -1))
    if points.shape[0] != d:
        if points.ndim == 2 and points.shape[1] == d and points.shape[0] == 1:
            points = points.T
        else:
            raise ValueError(f"scipy.stats.gaussian_kde: points have dimension "
                             f"{points.shape[0]}, the dataset has dimension {d}")
    white = np.linalg.cholesky(kde.inv_cov)  # L L^T = the kernel's precision
    data = kde.dataset.T @ white  # (n, d), constants
    mapped = points.T @ white  # (m, d)
    sq = np.sum((mapped[:, None, :] - data[None, :, :]) ** 2, axis=-1)  # (m, n)
    log_norm = -0.5 * (d * _LOG_2PI + np.linalg.slogdet(kde.covariance)[1])
    return sp.logsumexp(-0.5 * sq + np.log(kde.weights)[None, :], axis=1) + log_norm


def _density(original, traced, params, exp=False, frozen=None):
    """A wrapper of ``original``: ``traced(*arguments)`` when one is a tracer.
    ``params``: the method's parameters after ``x`` and their defaults;
    ``frozen(self)``: those of a frozen distribution."""
    names = [p for p, _ in params]

    @functools.wraps(original)
    def density(self, x, *args, **kwargs):
        values = dict(params)
        values.update(zip(names, args, strict=False))
        values.update(kwargs)
        given = frozen(self) if frozen is not None else tuple(values[p] for p in names)
        if not is_traced((x, *given)):
            return original(self, x, *args, **kwargs)
        out = traced(x, *given)
        return np.exp(out) if exp else out
    density.__hybridad_original__ = original
    return density


class _Frozen:
    """A frozen distribution of traced parameters (scipy's frozen objects convert
    their parameters with ``np.asarray`` when they are made): ``logpdf``, ``pdf``."""

    def __init__(self, traced, *params):
        self._traced, self._params = traced, params

    def logpdf(self, x):
        return self._traced(x, *self._params)

    def pdf(self, x):
        return np.exp(self.logpdf(x))


def _freezer(original, traced, params):
    names = [p for p, _ in params]

    @functools.wraps(original)
    def freeze(self, *args, **kwargs):
        values = dict(params)
        values.update(zip(names, args, strict=False))
        values.update({k: v for k, v in kwargs.items() if k in values})
        given = tuple(values[p] for p in names)
        if is_traced(given):
            return _Frozen(traced, *given)
        return original(self, *args, **kwargs)
    freeze.__hybridad_original__ = original
    return freeze


def _kde_method(original, exp):
    @functools.wraps(original)
    def evaluate(self, points):
        if not is_traced((points,)):
            return original(self, points)
        out = _kde_traced(self, points)
        return np.exp(out) if exp else out
    evaluate.__hybridad_original__ = original
    return evaluate


def install():
    """Wrap the methods of scipy.stats' multivariate classes (idempotent)."""
    from scipy.stats import _kde
    from scipy.stats import _multivariate as mv

    mvn = (("mean", None), ("cov", 1))
    mvt = (("loc", None), ("shape", 1), ("df", 1))
    wraps = []
    for gen, frz, traced, params, method in (
            (mv.multivariate_normal_gen, mv.multivariate_normal_frozen, _mvn_traced, mvn,
             "logpdf"),
            (mv.multivariate_t_gen, mv.multivariate_t_frozen, _mvt_traced, mvt, "logpdf"),
            (mv.dirichlet_gen, None, _dirichlet_traced, (("alpha", None),), "logpdf"),
            (mv.multinomial_gen, None, _multinomial_traced, (("n", None), ("p", None)),
             "logpmf")):
        for name, exp in ((method, False), (method.replace("log", ""), True)):
            wraps.append((gen, name, functools.partial(_density, traced=traced, params=params,
                                                       exp=exp)))
            if frz is not None:
                frozen = (lambda self: (self.mean, self.cov)) if traced is _mvn_traced else (
                    lambda self: (self.loc, self.shape, self.df))
                wraps.append((frz, name, functools.partial(
                    _density, traced=traced, params=(), exp=exp, frozen=frozen)))
        if frz is not None:
            wraps.append((gen, "__call__", functools.partial(_freezer, traced=traced,
                                                             params=params)))
    wraps += [(_kde.gaussian_kde, "logpdf", functools.partial(_kde_method, exp=False)),
              (_kde.gaussian_kde, "pdf", functools.partial(_kde_method, exp=True)),
              (_kde.gaussian_kde, "evaluate", functools.partial(_kde_method, exp=True)),
              (_kde.gaussian_kde, "__call__", functools.partial(_kde_method, exp=True))]
    for cls, name, wrap in wraps:
        current = getattr(cls, name)
        if getattr(current, "__hybridad_original__", None) is None:
            setattr(cls, name, wrap(current))
