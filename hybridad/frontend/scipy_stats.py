"""scipy.stats' distributions on tracers.

``scipy.stats.norm.logpdf(x, loc, scale)`` (and ``norm(loc, scale).logpdf(x)``,
the frozen form, which calls it) is a method of ``rv_continuous`` /
``rv_discrete`` that converts its input with ``np.asarray``.  :func:`install`
(run when hybridad or scipy.stats is imported, whichever is second) wraps
those methods on the two classes, so every distribution instance, however it
was imported, dispatches here when an argument is a tracer and to scipy
otherwise.  The log-density of each
distribution is one line of :data:`LOGPDF` (continuous, in the standardized
``z = (x - loc) / scale``) or :data:`LOGPMF` (discrete), written with the ufuncs
of numpy and scipy.special, so it is differentiable in ``x`` and in every
parameter; outside the support it is ``-inf`` as scipy's.  ``pdf``/``pmf`` are
their exponentials; ``cdf``/``logcdf``/``sf``/``logsf`` exist where
:data:`CDF` has the distribution.  A distribution not in these tables is
refused by name.  ``multivariate_normal``'s ``logpdf`` and ``pdf`` have
wrappers of their own, frozen (``multivariate_normal(mean, cov).logpdf(x)``)
or not, traced in ``x``, the mean or the covariance.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..ops.special import sp  # scipy.special's ufuncs, scipy imported on the first call
from .scipy_special import is_traced

__all__ = ["CDF", "LOGPDF", "LOGPMF", "install"]

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_NINF = -np.inf


def _support(cond, value):
    """``value`` where ``cond``, ``-inf`` outside the support."""
    return np.where(cond, value, _NINF)


#: distribution -> log-density of the standardized variable z, from (z, *shapes)
LOGPDF = {
    "norm": lambda z: -0.5 * z * z - _LOG_SQRT_2PI,
    "t": lambda z, df: (sp.gammaln(0.5 * (df + 1)) - sp.gammaln(0.5 * df)
                        - 0.5 * np.log(df * math.pi) - 0.5 * (df + 1) * np.log1p(z * z / df)),
    "gamma": lambda z, a: _support(z > 0, sp.xlogy(a - 1, z) - z - sp.gammaln(a)),
    "beta": lambda z, a, b: _support((z > 0) & (z < 1), sp.xlogy(a - 1, z) +
                                     sp.xlog1py(b - 1, -z) - sp.betaln(a, b)),
    "expon": lambda z: _support(z >= 0, -z),
    "lognorm": lambda z, s: _support(z > 0, -0.5 * (np.log(z) / s) ** 2 - np.log(s * z)
                                     - _LOG_SQRT_2PI),
    "cauchy": lambda z: -np.log(math.pi * (1 + z * z)),
    "laplace": lambda z: -np.abs(z) - math.log(2.0),
    "logistic": lambda z: -np.abs(z) - 2 * np.log1p(np.exp(-np.abs(z))),
    "uniform": lambda z: _support((z >= 0) & (z <= 1), 0.0 * z),
    "chi2": lambda z, df: _support(z > 0, sp.xlogy(0.5 * df - 1, z) - 0.5 * z
                                   - sp.gammaln(0.5 * df) - 0.5 * df * math.log(2.0)),
    "invgamma": lambda z, a: _support(z > 0, -(a + 1) * np.log(z) - 1 / z - sp.gammaln(a)),
    "weibull_min": lambda z, c: _support(z > 0, np.log(c) + sp.xlogy(c - 1, z) - z ** c),
    "weibull_max": lambda z, c: _support(z < 0, np.log(c) + sp.xlogy(c - 1, -z) - (-z) ** c),
    "gumbel_r": lambda z: -z - np.exp(-z),
    "gumbel_l": lambda z: z - np.exp(z),
    "pareto": lambda z, b: _support(z >= 1, np.log(b) - (b + 1) * np.log(z)),
    "lomax": lambda z, c: _support(z >= 0, np.log(c) - (c + 1) * np.log1p(z)),
    "halfnorm": lambda z: _support(z >= 0, -0.5 * z * z + 0.5 * math.log(2 / math.pi)),
    "halfcauchy": lambda z: _support(z >= 0, math.log(2 / math.pi) - np.log1p(z * z)),
    "rayleigh": lambda z: _support(z >= 0, sp.xlogy(1.0, z) - 0.5 * z * z),
    "maxwell": lambda z: _support(z >= 0, sp.xlogy(2.0, z) - 0.5 * z * z
                                  + 0.5 * math.log(2 / math.pi)),
    "levy": lambda z: _support(z > 0, -_LOG_SQRT_2PI - 1.5 * np.log(z) - 0.5 / z),
    "powerlaw": lambda z, a: _support((z >= 0) & (z <= 1), np.log(a) + sp.xlogy(a - 1, z)),
    "skewnorm": lambda z, a: math.log(2.0) - 0.5 * z * z - _LOG_SQRT_2PI + sp.log_ndtr(a * z),
    "f": lambda z, m, n: _support(z > 0, 0.5 * n * np.log(n) + 0.5 * m * np.log(m)
                                  + sp.xlogy(0.5 * m - 1, z) - 0.5 * (m + n) * np.log(n + m * z)
                                  - sp.betaln(0.5 * m, 0.5 * n)),
}

#: distribution -> (cdf, logcdf) of the standardized variable
CDF = {
    "norm": (lambda z: sp.ndtr(z), lambda z: sp.log_ndtr(z)),
    "logistic": (lambda z: sp.expit(z), lambda z: sp.log_expit(z)),
    "expon": (lambda z: np.where(z > 0, -np.expm1(-z), 0.0 * z),
              lambda z: np.where(z > 0, np.log(-np.expm1(-z)), _NINF)),
    "cauchy": (lambda z: 0.5 + np.arctan(z) / math.pi,
               lambda z: np.log(0.5 + np.arctan(z) / math.pi)),
    "laplace": (lambda z: np.where(z < 0, 0.5 * np.exp(z), 1 - 0.5 * np.exp(-z)),
                lambda z: np.where(z < 0, z - math.log(2.0), np.log1p(-0.5 * np.exp(-z)))),
    "gumbel_r": (lambda z: np.exp(-np.exp(-z)), lambda z: -np.exp(-z)),
    "gumbel_l": (lambda z: -np.expm1(-np.exp(z)), lambda z: np.log(-np.expm1(-np.exp(z)))),
    "rayleigh": (lambda z: np.where(z > 0, -np.expm1(-0.5 * z * z), 0.0 * z),
                 lambda z: np.where(z > 0, np.log(-np.expm1(-0.5 * z * z)), _NINF)),
    "halfcauchy": (lambda z: np.where(z > 0, np.arctan(z) * (2 / math.pi), 0.0 * z),
                   lambda z: np.where(z > 0, np.log(np.arctan(z) * (2 / math.pi)), _NINF)),
}

#: distribution -> log-mass at k, from (k, *shapes)
LOGPMF = {
    "poisson": lambda k, mu: _support(k >= 0, sp.xlogy(k, mu) - mu - sp.gammaln(k + 1)),
    "binom": lambda k, n, p: _support((k >= 0) & (k <= n), sp.gammaln(n + 1) - sp.gammaln(k + 1)
                                      - sp.gammaln(n - k + 1) + sp.xlogy(k, p)
                                      + sp.xlog1py(n - k, -p)),
    "nbinom": lambda k, n, p: _support(k >= 0, sp.gammaln(n + k) - sp.gammaln(k + 1)
                                       - sp.gammaln(n) + n * np.log(p) + sp.xlog1py(k, -p)),
}


def _refuse(dist, method):
    return NotImplementedError(
        f"hybridad: scipy.stats.{dist.name}.{method} on traced values is not supported yet "
        f"(supported: {', '.join(sorted(LOGPDF) + sorted(LOGPMF))}); see docs/limitations.md")


def _continuous(dist, method, x, args, kwargs):
    if dist.name not in LOGPDF:
        raise _refuse(dist, method)
    shapes, loc, scale = dist._parse_args(*args, **kwargs)
    z = (x - loc) / scale
    log_scale = np.log(scale)
    if method in ("logpdf", "pdf"):
        out = LOGPDF[dist.name](z, *shapes) - log_scale
        return out if method == "logpdf" else np.exp(out)
    if dist.name not in CDF or shapes:
        raise _refuse(dist, method)
    cdf, logcdf = CDF[dist.name]
    if method == "cdf":
        return cdf(z)
    if method == "logcdf":
        return logcdf(z)
    symmetric = dist.name in ("norm", "logistic", "cauchy", "laplace")
    if not symmetric:
        raise _refuse(dist, method)
    return cdf(-z) if method == "sf" else logcdf(-z)


def _discrete(dist, method, k, args, kwargs):
    if dist.name not in LOGPMF:
        raise _refuse(dist, method)
    shapes, loc = dist._parse_args(*args, **kwargs)[:2]
    out = LOGPMF[dist.name](k - loc, *shapes)
    return out if method == "logpmf" else np.exp(out)


def _method(original, method, handler):
    @functools.wraps(original)
    def dispatch(self, x, *args, **kwargs):
        if is_traced((x, *args), kwargs):
            return handler(self, method, x, args, kwargs)
        return original(self, x, *args, **kwargs)
    dispatch.__hybridad_original__ = original
    return dispatch


def _mvn_traced(x, mean, cov):
    """The multivariate normal log-density of traced values (the covariance
    through ``slogdet`` and ``solve``)."""
    x = x if hasattr(x, "shape") else np.asarray(x, float)
    k = x.shape[-1]
    mean = np.zeros(k) if mean is None else mean
    cov = cov * np.eye(k) if np.ndim(cov) == 0 else cov
    d = x - mean
    sign, logdet = np.linalg.slogdet(cov)
    sol = np.linalg.solve(cov, np.swapaxes(d, -1, -2) if d.ndim > 1 else d)
    quad = np.sum(d * (np.swapaxes(sol, -1, -2) if d.ndim > 1 else sol), axis=-1)
    return -0.5 * (k * 2 * _LOG_SQRT_2PI + logdet + quad)


def _mvn_logpdf(original, exp=False):
    """``multivariate_normal.logpdf`` (``exp``: ``.pdf``) traced where an argument is."""
    @functools.wraps(original)
    def density(self, x, mean=None, cov=1, allow_singular=False):
        if not is_traced((x, mean, cov)):
            return original(self, x, mean, cov, allow_singular)
        out = _mvn_traced(x, mean, cov)
        return np.exp(out) if exp else out
    density.__hybridad_original__ = original
    return density


def _mvn_frozen(original, exp=False):
    """A frozen ``multivariate_normal(mean, cov)``'s ``logpdf`` (``pdf``) of a traced ``x``."""
    @functools.wraps(original)
    def density(self, x):
        if not is_traced((x,)):
            return original(self, x)
        out = _mvn_traced(x, self.mean, self.cov)
        return np.exp(out) if exp else out
    density.__hybridad_original__ = original
    return density


class _TracedMVN:
    """``scipy.stats.multivariate_normal(mean, cov)`` of traced parameters: the
    frozen distribution's ``logpdf`` and ``pdf`` (scipy's frozen object
    converts its parameters with ``np.asarray`` when it is made)."""

    def __init__(self, mean, cov):
        self.mean, self.cov = mean, cov

    def logpdf(self, x):
        return _mvn_traced(x, self.mean, self.cov)

    def pdf(self, x):
        return np.exp(self.logpdf(x))


def _mvn_call(original):
    @functools.wraps(original)
    def freeze(self, mean=None, cov=1, allow_singular=False, seed=None, **kwds):
        if is_traced((mean, cov)):
            return _TracedMVN(mean, cov)
        return original(self, mean, cov, allow_singular, seed, **kwds)
    freeze.__hybridad_original__ = original
    return freeze


def install():
    """Wrap the methods of scipy.stats' distribution classes (idempotent)."""
    from scipy.stats import _distn_infrastructure as infra
    from scipy.stats import _multivariate as mv

    for cls, methods, handler in (
            (infra.rv_continuous, ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"),
             _continuous),
            (infra.rv_discrete, ("logpmf", "pmf"), _discrete)):
        for method in methods:
            current = getattr(cls, method)
            if getattr(current, "__hybridad_original__", None) is None:
                setattr(cls, method, _method(current, method, handler))
    for cls, name, wrap in ((mv.multivariate_normal_gen, "logpdf", _mvn_logpdf),
                            (mv.multivariate_normal_gen, "pdf",
                             functools.partial(_mvn_logpdf, exp=True)),
                            (mv.multivariate_normal_gen, "__call__", _mvn_call),
                            (mv.multivariate_normal_frozen, "logpdf", _mvn_frozen),
                            (mv.multivariate_normal_frozen, "pdf",
                             functools.partial(_mvn_frozen, exp=True))):
        current = getattr(cls, name)
        if getattr(current, "__hybridad_original__", None) is None:
            setattr(cls, name, wrap(current))
