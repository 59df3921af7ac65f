"""scipy.stats' distributions on tracers.

``scipy.stats.norm.logpdf(x, loc, scale)`` (and ``norm(loc, scale).logpdf(x)``,
the frozen form, which calls it) is a method of ``rv_continuous`` /
``rv_discrete`` that converts its input with ``np.asarray``.  :func:`install`
(run when hybridad or scipy.stats is imported, whichever is second) wraps
those methods on the two classes, so every distribution instance, however it
was imported, dispatches here when an argument is a tracer and to scipy
otherwise.  Each distribution is a few lines of tables written with the ufuncs
of numpy and scipy.special, so it is differentiable in ``x`` and in every
parameter (where scipy.special's function is):

* :data:`LOGPDF` (continuous, in the standardized ``z = (x - loc) / scale``) and
  :data:`LOGPMF` (discrete, at ``k - loc``): the log-density, ``-inf`` outside the
  support (and at a non-integer ``k``) as scipy's; ``pdf`` / ``pmf`` its exponential;
* :data:`CDF` / :data:`DISCRETE_CDF`: ``cdf`` and, where scipy has formulas of
  its own, ``sf``, ``logcdf``, ``logsf`` (else, as scipy's defaults, ``1 - cdf``
  and the logarithms; ``sf(z) = cdf(-z)`` of the :data:`SYMMETRIC` ones); 0 and 1
  outside the support;
* :data:`PPF`: ``ppf`` and ``isf`` of a traced probability or parameter (else
  ``isf(q) = ppf(1 - q)``): the support's ends at 0 and 1, NaN outside [0, 1].

A distribution or method not in these tables is refused by name.  The
multivariate distributions and ``gaussian_kde`` are in
:mod:`.scipy_stats_multivariate`.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..ops.special import sp  # scipy.special's ufuncs, scipy imported on the first call
from . import scipy_stats_multivariate
from .scipy_special import is_traced

__all__ = ["CDF", "DISCRETE_CDF", "LOGPDF", "LOGPMF", "PPF", "SHAPE_FIXED_TAILS", "SYMMETRIC",
           "install"]

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_LOG_2PI = math.log(2 * math.pi)
_NINF = -np.inf


def _support(cond, value):
    """``value`` where ``cond``, ``-inf`` outside the support."""
    return np.where(cond, value, _NINF)


def _log_diff(a, b):
    """``log(exp(a) - exp(b))`` for ``a >= b``."""
    return a + np.log(-np.expm1(b - a))


def _log_gauss_mass(a, b):
    """``log(ndtr(b) - ndtr(a))``, accurate in either tail (scipy's truncnorm's)."""
    left = _log_diff(sp.log_ndtr(b), sp.log_ndtr(a))
    right = _log_diff(sp.log_ndtr(-a), sp.log_ndtr(-b))
    central = np.log1p(-sp.ndtr(a) - sp.ndtr(-b))
    return np.where(b <= 0, left, np.where(a > 0, right, central))


def _nonzero(c):
    """``c`` where it is not 0, else 1: a divisor whose other branch is taken at 0."""
    return np.where(c != 0, c, 1.0)


def _genpareto_logsf(z, c):
    return np.where(c != 0, -np.log1p(c * z) / _nonzero(c), -z)


def _genextreme_loglogcdf(z, c):
    return np.where(c != 0, np.log1p(-c * z) / _nonzero(c), -z)


def _gennorm_cdf(z, beta):
    # at z = 0 its linear term: the formula's derivative there is 0 * inf
    at0 = 0.5 + z * np.exp(np.log(0.5 * beta) - sp.gammaln(1.0 / beta))
    return np.where(z == 0, at0, 0.5 + 0.5 * np.sign(z) * sp.gammainc(1.0 / beta,
                                                                       np.abs(z) ** beta))


def _logcosh(z):
    a = np.abs(z)
    return a + np.log1p(np.exp(-2 * a)) - math.log(2.0)


#: distribution -> log-density of the standardized variable z, from (z, *shapes)
LOGPDF = {
    "norm": lambda z: -0.5 * z * z - _LOG_SQRT_2PI,
    "t": lambda z, df: (sp.gammaln(0.5 * (df + 1)) - sp.gammaln(0.5 * df)
                        - 0.5 * np.log(df * math.pi) - 0.5 * (df + 1) * np.log1p(z * z / df)),
    "gamma": lambda z, a: _support(z >= 0, sp.xlogy(a - 1, z) - z - sp.gammaln(a)),
    "beta": lambda z, a, b: _support((z >= 0) & (z <= 1), sp.xlogy(a - 1, z) +
                                     sp.xlog1py(b - 1, -z) - sp.betaln(a, b)),
    "expon": lambda z: _support(z >= 0, -z),
    "lognorm": lambda z, s: _support(z > 0, -0.5 * (np.log(z) / s) ** 2 - np.log(s * z)
                                     - _LOG_SQRT_2PI),
    "cauchy": lambda z: -np.log(math.pi * (1 + z * z)),
    "laplace": lambda z: -np.abs(z) - math.log(2.0),
    "logistic": lambda z: -np.abs(z) - 2 * np.log1p(np.exp(-np.abs(z))),
    "uniform": lambda z: _support((z >= 0) & (z <= 1), 0.0 * z),
    "chi2": lambda z, df: _support(z >= 0, sp.xlogy(0.5 * df - 1, z) - 0.5 * z
                                   - sp.gammaln(0.5 * df) - 0.5 * df * math.log(2.0)),
    "invgamma": lambda z, a: _support(z > 0, -(a + 1) * np.log(z) - 1 / z - sp.gammaln(a)),
    "weibull_min": lambda z, c: _support(z >= 0, np.log(c) + sp.xlogy(c - 1, z) - z ** c),
    "weibull_max": lambda z, c: _support(z <= 0, np.log(c) + sp.xlogy(c - 1, -z) - (-z) ** c),
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
    "powerlaw": lambda z, a: _support((z >= 0) & (z <= 1) & ((z != 0) | (a >= 1)),
                                      np.log(a) + sp.xlogy(a - 1, z)),  # open at 0 if a < 1
    "skewnorm": lambda z, a: math.log(2.0) - 0.5 * z * z - _LOG_SQRT_2PI + sp.log_ndtr(a * z),
    "f": lambda z, m, n: _support(z >= 0, 0.5 * n * np.log(n) + 0.5 * m * np.log(m)
                                  + sp.xlogy(0.5 * m - 1, z) - 0.5 * (m + n) * np.log(n + m * z)
                                  - sp.betaln(0.5 * m, 0.5 * n)),
    "gennorm": lambda z, beta: np.log(0.5 * beta) - sp.gammaln(1.0 / beta) - np.abs(z) ** beta,
    "truncnorm": lambda z, a, b: _support((z >= a) & (z <= b), -0.5 * z * z - _LOG_SQRT_2PI
                                          - _log_gauss_mass(a, b)),
    "vonmises": lambda z, kappa: kappa * sp.cosm1(z) - _LOG_2PI - np.log(sp.i0e(kappa)),
    "vonmises_line": lambda z, kappa: _support((z >= -math.pi) & (z <= math.pi), kappa
                                               * sp.cosm1(z) - _LOG_2PI - np.log(sp.i0e(kappa))),
    "wrapcauchy": lambda z, c: _support((z >= 0) & (z <= 2 * math.pi), np.log1p(-c * c)
                                        - _LOG_2PI - np.log1p(c * c - 2 * c * np.cos(z))),
    "loggamma": lambda z, c: c * z - np.exp(z) - sp.gammaln(c),
    "genpareto": lambda z, c: _support((z >= 0) & (1 + c * z >= 0), np.where(
        c != 0, -sp.xlog1py(c + 1, c * z) / _nonzero(c), -z)),
    "genextreme": lambda z, c: _support(1 - c * z > 0, -np.exp(_genextreme_loglogcdf(z, c))
                                        + _genextreme_loglogcdf(z, c) - np.log1p(-c * z)),
    "invgauss": lambda z, mu: _support(z > 0, -_LOG_SQRT_2PI - 1.5 * np.log(z)
                                       - (z - mu) ** 2 / (2 * z * mu * mu)),
    "wald": lambda z: _support(z > 0, -_LOG_SQRT_2PI - 1.5 * np.log(z) - (z - 1) ** 2 / (2 * z)),
    "betaprime": lambda z, a, b: _support(z > 0, sp.xlogy(a - 1, z) - (a + b) * np.log1p(z)
                                          - sp.betaln(a, b)),
    "chi": lambda z, df: _support(z >= 0, sp.xlogy(df - 1, z) - 0.5 * z * z
                                  - (0.5 * df - 1) * math.log(2.0) - sp.gammaln(0.5 * df)),
    "nakagami": lambda z, nu: _support(z >= 0, math.log(2.0) + nu * np.log(nu) - sp.gammaln(nu)
                                       + sp.xlogy(2 * nu - 1, z) - nu * z * z),
    "fisk": lambda z, c: _support(z >= 0, np.log(c) + sp.xlogy(c - 1, z) - 2 * np.log1p(z ** c)),
    "burr12": lambda z, c, d: _support(z >= 0, np.log(c * d) + sp.xlogy(c - 1, z)
                                       - (d + 1) * np.log1p(z ** c)),
    "halflogistic": lambda z: _support(z >= 0, math.log(2.0) - z - 2 * np.log1p(np.exp(-z))),
    "gompertz": lambda z, c: _support(z >= 0, np.log(c) + z - c * np.expm1(z)),
    "johnsonsu": lambda z, a, b: (np.log(b) - _LOG_SQRT_2PI - 0.5 * np.log1p(z * z)
                                  - 0.5 * (a + b * np.arcsinh(z)) ** 2),
    "hypsecant": lambda z: -math.log(math.pi) - _logcosh(z),
    "genlogistic": lambda z, c: (np.log(c) + np.where(z < 0, (c - 1) * z, 0.0) - np.abs(z)
                                 - (c + 1) * np.log1p(np.exp(-np.abs(z)))),
    "moyal": lambda z: -0.5 * (z + np.exp(-z)) - _LOG_SQRT_2PI,
    "arcsine": lambda z: _support((z >= 0) & (z <= 1), -math.log(math.pi) - 0.5 * np.log(z)
                                  - 0.5 * np.log1p(-z)),
    "semicircular": lambda z: _support(np.abs(z) < 1, math.log(2 / math.pi)
                                       + 0.5 * np.log1p(-z * z)),
    "exponnorm": lambda z, k: ((0.5 / k - z) / k + sp.log_ndtr(z - 1 / k) - np.log(k)),
    "rice": lambda z, b: _support(z >= 0, sp.xlogy(1.0, z) - 0.5 * (z - b) ** 2
                                  + np.log(sp.i0e(z * b))),
    "foldnorm": lambda z, c: _support(z >= 0, -0.5 * (z - c) ** 2 - _LOG_SQRT_2PI
                                      + np.log1p(np.exp(-2 * z * c))),
    "dweibull": lambda z, c: np.log(0.5 * c) + sp.xlogy(c - 1, np.abs(z)) - np.abs(z) ** c,
    "dgamma": lambda z, a: (sp.xlogy(a - 1, np.abs(z)) - np.abs(z) - sp.gammaln(a)
                            - math.log(2.0)),
    "loguniform": lambda z, a, b: _support((z >= a) & (z <= b), -np.log(z)
                                           - np.log(np.log(b) - np.log(a))),
    "reciprocal": lambda z, a, b: _support((z >= a) & (z <= b), -np.log(z)
                                           - np.log(np.log(b) - np.log(a))),
    "truncexpon": lambda z, b: _support((z >= 0) & (z <= b), -z - np.log(-np.expm1(-b))),
}

#: the distributions whose support depends on their shapes: (lower, upper) of z
SUPPORT = {
    "truncnorm": lambda a, b: (a, b),
    "genpareto": lambda c: (0.0, np.where(c < 0, -1 / np.where(c < 0, c, -1.0), np.inf)),
    "genextreme": lambda c: (np.where(c < 0, 1 / np.where(c < 0, c, -1.0), -np.inf),
                             np.where(c > 0, 1 / np.where(c > 0, c, 1.0), np.inf)),
    "loguniform": lambda a, b: (a, b),
    "reciprocal": lambda a, b: (a, b),
    "truncexpon": lambda b: (0.0, b),
}

#: the distributions symmetric about 0: ``sf(z) = cdf(-z)``, ``logsf(z) = logcdf(-z)``
SYMMETRIC = frozenset({"norm", "t", "cauchy", "laplace", "logistic", "gennorm", "hypsecant"})

_gamma_tails = {"cdf": lambda z, a: sp.gammainc(a, z), "sf": lambda z, a: sp.gammaincc(a, z)}

#: distribution -> {method: function of (z, *shapes)} inside the support: ``cdf``,
#: and where scipy has a formula of its own, ``sf``, ``logcdf``, ``logsf``
CDF = {
    "norm": {"cdf": sp.ndtr, "logcdf": sp.log_ndtr},
    "logistic": {"cdf": sp.expit, "logcdf": sp.log_expit},
    "expon": {"cdf": lambda z: -np.expm1(-z), "sf": lambda z: np.exp(-z),
              "logcdf": lambda z: np.log(-np.expm1(-z)), "logsf": lambda z: -z},
    "cauchy": {"cdf": lambda z: 0.5 + np.arctan(z) / math.pi},
    "laplace": {"cdf": lambda z: np.where(z < 0, 0.5 * np.exp(z), 1 - 0.5 * np.exp(-z)),
                "logcdf": lambda z: np.where(z < 0, z - math.log(2.0),
                                             np.log1p(-0.5 * np.exp(-z)))},
    "gumbel_r": {"cdf": lambda z: np.exp(-np.exp(-z)), "logcdf": lambda z: -np.exp(-z),
                 "sf": lambda z: -np.expm1(-np.exp(-z))},
    "gumbel_l": {"cdf": lambda z: -np.expm1(-np.exp(z)), "sf": lambda z: np.exp(-np.exp(z)),
                 "logsf": lambda z: -np.exp(z)},
    "rayleigh": {"cdf": lambda z: -np.expm1(-0.5 * z * z), "sf": lambda z: np.exp(-0.5 * z * z),
                 "logsf": lambda z: -0.5 * z * z},
    "halfcauchy": {"cdf": lambda z: np.arctan(z) * (2 / math.pi)},
    "t": {"cdf": lambda z, df: sp.stdtr(df, z)},
    "gennorm": {"cdf": lambda z, beta: _gennorm_cdf(z, beta)},
    "hypsecant": {"cdf": lambda z: np.arctan(np.exp(z)) * (2 / math.pi)},
    "gamma": _gamma_tails,
    "chi2": {"cdf": lambda z, df: sp.gammainc(0.5 * df, 0.5 * z),
             "sf": lambda z, df: sp.gammaincc(0.5 * df, 0.5 * z)},
    "beta": {"cdf": lambda z, a, b: sp.betainc(a, b, z),
             "sf": lambda z, a, b: sp.betainc(b, a, 1 - z)},
    "f": {"cdf": lambda z, m, n: sp.betainc(0.5 * m, 0.5 * n, m * z / (m * z + n)),
          "sf": lambda z, m, n: sp.betainc(0.5 * n, 0.5 * m, n / (n + m * z))},
    "lognorm": {"cdf": lambda z, s: sp.ndtr(np.log(z) / s),
                "sf": lambda z, s: sp.ndtr(-np.log(z) / s),
                "logcdf": lambda z, s: sp.log_ndtr(np.log(z) / s),
                "logsf": lambda z, s: sp.log_ndtr(-np.log(z) / s)},
    "weibull_min": {"cdf": lambda z, c: -np.expm1(-z ** c), "sf": lambda z, c: np.exp(-z ** c),
                    "logsf": lambda z, c: -z ** c},
    "weibull_max": {"cdf": lambda z, c: np.exp(-(-z) ** c), "logcdf": lambda z, c: -(-z) ** c,
                    "sf": lambda z, c: -np.expm1(-(-z) ** c)},
    "pareto": {"cdf": lambda z, b: -np.expm1(-b * np.log(z)), "sf": lambda z, b: z ** -b,
               "logsf": lambda z, b: -b * np.log(z)},
    "lomax": {"cdf": lambda z, c: -np.expm1(-c * np.log1p(z)),
              "sf": lambda z, c: np.exp(-c * np.log1p(z)), "logsf": lambda z, c: -c * np.log1p(z)},
    "halfnorm": {"cdf": lambda z: sp.erf(z / math.sqrt(2)),
                 "sf": lambda z: 2 * sp.ndtr(-z), "logsf": lambda z: math.log(2) + sp.log_ndtr(-z)},
    "maxwell": {"cdf": lambda z: sp.gammainc(1.5, 0.5 * z * z),
                "sf": lambda z: sp.gammaincc(1.5, 0.5 * z * z)},
    "levy": {"cdf": lambda z: sp.erfc(np.sqrt(0.5 / z)), "sf": lambda z: sp.erf(np.sqrt(0.5 / z))},
    "powerlaw": {"cdf": lambda z, a: z ** a, "logcdf": lambda z, a: a * np.log(z)},
    "invgamma": {"cdf": lambda z, a: sp.gammaincc(a, 1 / z),
                 "sf": lambda z, a: sp.gammainc(a, 1 / z)},
    "uniform": {"cdf": lambda z: z, "sf": lambda z: 1 - z},
    "truncnorm": {"cdf": lambda z, a, b: np.exp(_log_gauss_mass(a, z) - _log_gauss_mass(a, b)),
                  "sf": lambda z, a, b: np.exp(_log_gauss_mass(z, b) - _log_gauss_mass(a, b)),
                  "logcdf": lambda z, a, b: _log_gauss_mass(a, z) - _log_gauss_mass(a, b),
                  "logsf": lambda z, a, b: _log_gauss_mass(z, b) - _log_gauss_mass(a, b)},
    "loggamma": {"cdf": lambda z, c: sp.gammainc(c, np.exp(z)),
                 "sf": lambda z, c: sp.gammaincc(c, np.exp(z))},
    "genpareto": {"cdf": lambda z, c: -np.expm1(_genpareto_logsf(z, c)),
                  "sf": lambda z, c: np.exp(_genpareto_logsf(z, c)), "logsf": _genpareto_logsf},
    "genextreme": {"cdf": lambda z, c: np.exp(-np.exp(_genextreme_loglogcdf(z, c))),
                   "logcdf": lambda z, c: -np.exp(_genextreme_loglogcdf(z, c)),
                   "sf": lambda z, c: -np.expm1(-np.exp(_genextreme_loglogcdf(z, c)))},
    "chi": {"cdf": lambda z, df: sp.gammainc(0.5 * df, 0.5 * z * z),
            "sf": lambda z, df: sp.gammaincc(0.5 * df, 0.5 * z * z)},
    "nakagami": {"cdf": lambda z, nu: sp.gammainc(nu, nu * z * z),
                 "sf": lambda z, nu: sp.gammaincc(nu, nu * z * z)},
    "betaprime": {"cdf": lambda z, a, b: sp.betainc(a, b, z / (1 + z)),
                  "sf": lambda z, a, b: sp.betainc(b, a, 1 / (1 + z))},
    "fisk": {"cdf": lambda z, c: sp.expit(c * np.log(z)),
             "sf": lambda z, c: sp.expit(-c * np.log(z)),
             "logcdf": lambda z, c: sp.log_expit(c * np.log(z)),
             "logsf": lambda z, c: sp.log_expit(-c * np.log(z))},
    "halflogistic": {"cdf": lambda z: np.tanh(0.5 * z), "sf": lambda z: 2 * sp.expit(-z)},
    "gompertz": {"cdf": lambda z, c: -np.expm1(-c * np.expm1(z)),
                 "sf": lambda z, c: np.exp(-c * np.expm1(z)),
                 "logsf": lambda z, c: -c * np.expm1(z)},
    "johnsonsu": {"cdf": lambda z, a, b: sp.ndtr(a + b * np.arcsinh(z)),
                  "sf": lambda z, a, b: sp.ndtr(-a - b * np.arcsinh(z))},
    "moyal": {"cdf": lambda z: sp.erfc(np.exp(-0.5 * z) / math.sqrt(2)),
              "sf": lambda z: sp.erf(np.exp(-0.5 * z) / math.sqrt(2))},
    "arcsine": {"cdf": lambda z: np.arcsin(np.sqrt(z)) * (2 / math.pi)},
    "semicircular": {"cdf": lambda z: 0.5 + (z * np.sqrt(1 - z * z) + np.arcsin(z)) / math.pi},
    "genlogistic": {"cdf": lambda z, c: np.exp(-c * np.log1p(np.exp(-z))),
                    "logcdf": lambda z, c: -c * np.log1p(np.exp(-z))},
    "burr12": {"cdf": lambda z, c, d: -np.expm1(-d * np.log1p(z ** c)),
               "sf": lambda z, c, d: np.exp(-d * np.log1p(z ** c)),
               "logsf": lambda z, c, d: -d * np.log1p(z ** c)},
    "loguniform": {"cdf": lambda z, a, b: (np.log(z) - np.log(a)) / (np.log(b) - np.log(a))},
    "reciprocal": {"cdf": lambda z, a, b: (np.log(z) - np.log(a)) / (np.log(b) - np.log(a))},
    "truncexpon": {"cdf": lambda z, b: np.expm1(-z) / np.expm1(-b)},
}

#: distribution -> {method: function of (q, *shapes)} for q in (0, 1): ``ppf``,
#: and ``isf`` where it has a formula of its own
PPF = {
    "norm": {"ppf": sp.ndtri, "isf": lambda q: -sp.ndtri(q)},
    "logistic": {"ppf": sp.logit, "isf": lambda q: -sp.logit(q)},
    "cauchy": {"ppf": lambda q: np.tan(math.pi * (q - 0.5)),
               "isf": lambda q: np.tan(math.pi * (0.5 - q))},
    "laplace": {"ppf": lambda q: np.where(q > 0.5, -np.log(2 - 2 * q), np.log(2 * q)),
                "isf": lambda q: np.where(q < 0.5, -np.log(2 * q), np.log(2 - 2 * q))},
    "expon": {"ppf": lambda q: -np.log1p(-q), "isf": lambda q: -np.log(q)},
    "gumbel_r": {"ppf": lambda q: -np.log(-np.log(q)), "isf": lambda q: -np.log(-np.log1p(-q))},
    "gumbel_l": {"ppf": lambda q: np.log(-np.log1p(-q)), "isf": lambda q: np.log(-np.log(q))},
    "weibull_min": {"ppf": lambda q, c: (-np.log1p(-q)) ** (1 / c),
                    "isf": lambda q, c: (-np.log(q)) ** (1 / c)},
    "weibull_max": {"ppf": lambda q, c: -(-np.log(q)) ** (1 / c)},
    "pareto": {"ppf": lambda q, b: np.exp(-np.log1p(-q) / b), "isf": lambda q, b: q ** (-1 / b)},
    "lomax": {"ppf": lambda q, c: np.expm1(-np.log1p(-q) / c),
              "isf": lambda q, c: np.expm1(-np.log(q) / c)},
    "halfnorm": {"ppf": lambda q: sp.ndtri(0.5 * (1 + q)), "isf": lambda q: -sp.ndtri(0.5 * q)},
    "halfcauchy": {"ppf": lambda q: np.tan(0.5 * math.pi * q)},
    "rayleigh": {"ppf": lambda q: np.sqrt(-2 * np.log1p(-q)),
                 "isf": lambda q: np.sqrt(-2 * np.log(q))},
    "lognorm": {"ppf": lambda q, s: np.exp(s * sp.ndtri(q)),
                "isf": lambda q, s: np.exp(-s * sp.ndtri(q))},
    "uniform": {"ppf": lambda q: 1.0 * q, "isf": lambda q: 1 - q},
    "powerlaw": {"ppf": lambda q, a: q ** (1 / a)},
    "levy": {"ppf": lambda q: sp.ndtri(0.5 * q) ** -2,
             "isf": lambda q: sp.ndtri(0.5 + 0.5 * q) ** -2},
    "gompertz": {"ppf": lambda q, c: np.log1p(-np.log1p(-q) / c)},
    "genpareto": {"ppf": lambda q, c: -sp.boxcox1p(-q, -c)},
    "genextreme": {"ppf": lambda q, c: np.where(c != 0, -np.expm1(c * np.log(-np.log(q)))
                                                / _nonzero(c), -np.log(-np.log(q)))},
    "fisk": {"ppf": lambda q, c: np.exp(sp.logit(q) / c)},
    "halflogistic": {"ppf": lambda q: 2 * np.arctanh(q)},
    "johnsonsu": {"ppf": lambda q, a, b: np.sinh((sp.ndtri(q) - a) / b)},
    "hypsecant": {"ppf": lambda q: np.log(np.tan(0.5 * math.pi * q))},
    "genlogistic": {"ppf": lambda q, c: -np.log(q ** (-1 / c) - 1)},
    "arcsine": {"ppf": lambda q: np.sin(0.5 * math.pi * q) ** 2},
    "burr12": {"ppf": lambda q, c, d: np.expm1(-np.log1p(-q) / d) ** (1 / c)},
    "loguniform": {"ppf": lambda q, a, b: np.exp(np.log(a) + q * (np.log(b) - np.log(a)))},
    "reciprocal": {"ppf": lambda q, a, b: np.exp(np.log(a) + q * (np.log(b) - np.log(a)))},
    "truncexpon": {"ppf": lambda q, b: -np.log1p(q * np.expm1(-b))},
}

#: distribution -> log-mass at k, from (k, *shapes)
LOGPMF = {
    "poisson": lambda k, mu: _support(k >= 0, sp.xlogy(k, mu) - mu - sp.gammaln(k + 1)),
    "binom": lambda k, n, p: _support((k >= 0) & (k <= n), sp.gammaln(n + 1) - sp.gammaln(k + 1)
                                      - sp.gammaln(n - k + 1) + sp.xlogy(k, p)
                                      + sp.xlog1py(n - k, -p)),
    "nbinom": lambda k, n, p: _support(k >= 0, sp.gammaln(n + k) - sp.gammaln(k + 1)
                                       - sp.gammaln(n) + n * np.log(p) + sp.xlog1py(k, -p)),
    "bernoulli": lambda k, p: _support((k == 0) | (k == 1), sp.xlogy(k, p)
                                       + sp.xlog1py(1 - k, -p)),
    "geom": lambda k, p: _support(k >= 1, sp.xlog1py(k - 1, -p) + np.log(p)),
    "betabinom": lambda k, n, a, b: _support((k >= 0) & (k <= n), sp.gammaln(n + 1)
                                             - sp.gammaln(k + 1) - sp.gammaln(n - k + 1)
                                             + sp.betaln(k + a, n - k + b) - sp.betaln(a, b)),
    "logser": lambda k, p: _support(k >= 1, sp.xlogy(k, p) - np.log(k)
                                    - np.log(-np.log1p(-p))),
    "planck": lambda k, lam: _support(k >= 0, np.log(-np.expm1(-lam)) - lam * k),
    "dlaplace": lambda k, a: np.log(np.tanh(0.5 * a)) - a * np.abs(k),
    "skellam": lambda k, mu1, mu2: (0.5 * k * (np.log(mu1) - np.log(mu2)) - (mu1 + mu2)
                                    + 2 * np.sqrt(mu1 * mu2)
                                    + np.log(sp.ive(np.abs(k), 2 * np.sqrt(mu1 * mu2)))),
}

#: discrete distributions' support (lower, upper) where it depends on their shapes
DISCRETE_SUPPORT = {"binom": lambda n, p: (0, n), "betabinom": lambda n, a, b: (0, n)}

#: distribution -> {"cdf", "sf"} of floor(k) inside the support, from (k, *shapes)
DISCRETE_CDF = {
    "poisson": {"cdf": lambda k, mu: sp.gammaincc(k + 1, mu),
                "sf": lambda k, mu: sp.gammainc(k + 1, mu)},
    "binom": {"cdf": lambda k, n, p: sp.betainc(n - k, k + 1, 1 - p),
              "sf": lambda k, n, p: sp.betainc(k + 1, n - k, p)},
    "nbinom": {"cdf": lambda k, n, p: sp.betainc(n, k + 1, p),
               "sf": lambda k, n, p: sp.betainc(k + 1, n, 1 - p)},
    "geom": {"cdf": lambda k, p: -np.expm1(k * np.log1p(-p)),
             "sf": lambda k, p: np.exp(k * np.log1p(-p))},
    "bernoulli": {"cdf": lambda k, p: 1 - p, "sf": lambda k, p: 1.0 * p},
    "planck": {"cdf": lambda k, lam: -np.expm1(-lam * (k + 1)),
               "sf": lambda k, lam: np.exp(-lam * (k + 1))},
}

_TAILS = ("cdf", "sf", "logcdf", "logsf")
#: the tails whose shape parameters enter a scipy.special function that has no
#: derivative in them (gammainc's a, betainc's a and b, stdtr's df): differentiable
#: in x, loc and scale; a traced shape is refused by name (by the op)
SHAPE_FIXED_TAILS = frozenset({"t", "gamma", "chi2", "beta", "f", "invgamma", "loggamma", "chi",
                               "nakagami", "betaprime", "gennorm"})


def _refuse(dist, method):
    if method in ("logpdf", "pdf", "logpmf", "pmf"):
        have = sorted(LOGPDF) + sorted(LOGPMF)
    elif method in ("ppf", "isf"):
        have = sorted(PPF)
    else:
        have = sorted(CDF) + sorted(DISCRETE_CDF)
    return NotImplementedError(
        f"hybridad: scipy.stats.{dist.name}.{method} on traced values is not supported yet "
        f"({method} is: {', '.join(have)}); see docs/limitations.md")


def _bounds(dist, shapes, table):
    if dist.name in table:
        return table[dist.name](*shapes)
    return dist.a, dist.b


def _tail(table, name, method, z, shapes):
    """``method`` (one of :data:`_TAILS`) of the standardized ``z`` inside the support."""
    t = table[name]
    if method in t:
        return t[method](z, *shapes)
    if name in SYMMETRIC and method in ("sf", "logsf"):
        return _tail(table, name, method.replace("sf", "cdf"), -z, shapes)
    if method in ("logcdf", "logsf"):
        return np.log(_tail(table, name, method[3:], z, shapes))
    return 1 - t["cdf"](z, *shapes)  # sf: scipy's default


def _clamped(method, z, lo, hi, inside):
    """``inside`` between the support's ends; its values at and beyond them
    (an infinite end needs no test)."""
    below, above = {"cdf": (0.0, 1.0), "sf": (1.0, 0.0), "logcdf": (_NINF, 0.0),
                    "logsf": (0.0, _NINF)}[method]
    out = inside
    if not _infinite(hi):
        out = np.where(z >= hi, above, out)
    if not _infinite(lo):
        out = np.where(z <= lo, below, out)
    return out


def _infinite(end):
    """Whether a support's ``end`` is known (not traced) to be infinite."""
    return not is_traced((end,)) and np.ndim(end) == 0 and bool(np.isinf(end))


def _quantile(dist, method, q, shapes, loc, scale):
    t = PPF[dist.name]
    inner = t[method](q, *shapes) if method in t else t["ppf"](1 - q, *shapes)
    lo, hi = _bounds(dist, shapes, SUPPORT)
    first, last = (lo, hi) if method == "ppf" else (hi, lo)
    out = np.where((q > 0) & (q < 1), inner, np.nan)
    out = np.where(q == 1, last, np.where(q == 0, first, out))
    return out * scale + loc


def _float64(x):
    """``x`` in float64, as scipy computes a distribution's methods
    (``np.promote_types(x.dtype, np.float64)``: a float32 ``x`` included)."""
    dtype = getattr(x, "dtype", None)
    return x.astype(np.float64) if dtype is not None and dtype != np.float64 else x


def _continuous(dist, method, x, args, kwargs):
    x = _float64(x)
    name = dist.name
    table = PPF if method in ("ppf", "isf") else CDF if method in _TAILS else LOGPDF
    if name not in table:
        raise _refuse(dist, method)
    shapes, loc, scale = dist._parse_args(*args, **kwargs)
    if table is PPF:
        return _quantile(dist, method, x, shapes, loc, scale)
    z = (x - loc) / scale
    if table is LOGPDF:
        out = LOGPDF[name](z, *shapes) - np.log(scale)
        return out if method == "logpdf" else np.exp(out)
    lo, hi = _bounds(dist, shapes, SUPPORT)
    return _clamped(method, z, lo, hi, _tail(CDF, name, method, z, shapes))


def _discrete(dist, method, k, args, kwargs):
    k = _float64(k)
    name = dist.name
    table = DISCRETE_CDF if method in _TAILS else LOGPMF
    if name not in table:
        raise _refuse(dist, method)
    shapes, loc = dist._parse_args(*args, **kwargs)[:2]
    k = k - loc
    if table is LOGPMF:
        out = np.where(k == np.floor(k), LOGPMF[name](k, *shapes), _NINF)
        return out if method == "logpmf" else np.exp(out)
    k = np.floor(k)
    lo, hi = _bounds(dist, shapes, DISCRETE_SUPPORT)
    # the support's ends are counts: below the first, the cdf is 0; from the last, 1
    inside = _tail(DISCRETE_CDF, name, method, k, shapes)
    return _clamped(method, k + 0.5, lo, hi + 0.5, inside)


def _arrays(v):
    """A list or tuple argument (``logpmf([1, 2, 0], mu)``) as the array scipy
    makes of it (traced where it holds traced values)."""
    return np.asarray(v) if type(v) in (list, tuple) else v


def _method(original, method, handler):
    @functools.wraps(original)
    def dispatch(self, x, *args, **kwargs):
        if is_traced((x, *args), kwargs):
            return handler(self, method, _arrays(x), tuple(_arrays(a) for a in args),
                           {key: _arrays(v) for key, v in kwargs.items()})
        return original(self, x, *args, **kwargs)
    dispatch.__hybridad_original__ = original
    return dispatch


def install():
    """Wrap the methods of scipy.stats' distribution classes (idempotent)."""
    from scipy.stats import _distn_infrastructure as infra

    for cls, methods, handler in (
            (infra.rv_continuous, ("logpdf", "pdf", *_TAILS, "ppf", "isf"), _continuous),
            (infra.rv_discrete, ("logpmf", "pmf", *_TAILS), _discrete)):
        for method in methods:
            current = getattr(cls, method)
            if getattr(current, "__hybridad_original__", None) is None:
                setattr(cls, method, _method(current, method, handler))
    scipy_stats_multivariate.install()
