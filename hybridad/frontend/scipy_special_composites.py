"""scipy.special ufuncs that are compositions of traced ones.

Each is written as scipy computes it (cephes' or boost's formula, its edge
cases included), from functions with derivative rules
(:mod:`hybridad.ops.special`, numpy's): the distribution functions of
counts and their complements (``bdtr``, ``bdtrc``, ``nbdtr``, ``nbdtrc``,
``pdtrc``) and ``chdtrc``, ``gdtrc`` and ``betaincc`` from the regularized
incomplete gamma and beta functions; ``kn`` (``kv`` of an integer order),
``jve`` and ``yve`` (``jv`` and ``yv``: the scaling is 1 on the real line);
``agm`` from the complete elliptic integral (Gauss: ``agm(a, b) = pi (a +
b) / (4 K(((a - b) / (a + b))^2))``); ``radian``, ``sindg``, ``cosdg`` (the
angle reduced exactly modulo 360 first); ``inv_boxcox`` and
``inv_boxcox1p``; the orthogonal polynomials of constant integer degree
(Legendre, Chebyshev T, U, C, S, Hermite, HermiteE, Laguerre, generalized
Laguerre, Gegenbauer, and the shifted Legendre and Chebyshev ones) by their
three-term recurrences, differentiable in x and in the parameter.  Values
are scipy's to rounding (relative 1e-13 away from a function's zeros,
checked on grids and at the edges by the tests); the derivatives are the
composition's, in the continuous arguments -- a shape or count argument is
refused by the rule of the function it reaches (``a`` of ``gammainc``, ``a``
and ``b`` of ``betainc``, the order of ``kv``), as the rule table's own
functions are.

Registered as composites of their ufuncs (:data:`.numpy_api.GUFUNCS`) when
scipy.special is loaded (:func:`.scipy_special.install`).
"""

from __future__ import annotations

import math

import numpy as np

from ..core.tracer import Tracer
from .numpy_api import _tracer
from .scipy_special import COMPOSITES

__all__ = []


def _sp():
    import scipy.special as sp  # (loaded: these run only once scipy.special is)

    return sp


def _floats(*values):
    """Each value as a traced float64 array (scipy's loops compute in double
    and round: :func:`_composite` rounds the result to the dtype scipy's
    ufunc gives); a Python number stays one."""
    out = []
    for v in values:
        if type(v) in (int, float):
            out.append(float(v))
            continue
        t = _tracer(v)
        out.append(t if t.dtype == np.float64 else t.astype(np.float64))
    return out


def _result_dtype(name, args):
    """The dtype scipy's ufunc ``name`` returns for ``args`` (its own loop
    selection; Python numbers weak, as numpy 2 takes them)."""
    ufunc = getattr(_sp(), name)
    kinds = tuple(type(a) if type(a) in (int, float)
                  else np.dtype(getattr(a, "dtype", np.float64)) for a in args)
    try:
        return np.dtype(ufunc.resolve_dtypes(kinds + (None,))[-1])
    except (TypeError, ValueError):  # (no loop for them: scipy raises on the call)
        return np.dtype(np.float64)


def _floor(v):
    return float(math.floor(v)) if type(v) is float else np.floor(v)


def _degree(name, n):
    """The constant polynomial degree ``n`` as an integer array: a traced one,
    a non-integer one (scipy's hypergeometric continuation) and a negative
    one are refused by name."""
    if isinstance(n, Tracer):
        raise NotImplementedError(f"hybridad: scipy.special.{name} with a traced degree n: "
                                  "n must be a constant (x and the parameters are "
                                  "differentiable)")
    n = np.asarray(n)
    if n.dtype.kind not in "biuf" or np.any(n != np.floor(n)) or np.any(n < 0):
        raise NotImplementedError(f"hybridad: scipy.special.{name} of non-integer or negative "
                                  "degrees n on traced values (scipy's continuation of the "
                                  "polynomials beyond them is not traced)")
    return n.astype(np.int64)


def _composite(name, degree=False):
    """Register ``fn`` as the composite of scipy.special's ``name``: called
    with its arguments in float64 (:func:`_floats`; with ``degree``, the first
    as the integer array :func:`_degree` makes), its result in the dtype
    scipy's ufunc gives."""
    def register(fn):
        def call(*args, **kwargs):
            if kwargs:
                raise NotImplementedError(f"hybridad: scipy.special.{name} with "
                                          f"{sorted(kwargs)} on traced values (call it with "
                                          "its arguments only)")
            rest = _floats(*args[degree:])
            out = _tracer(fn(_degree(name, args[0]), *rest) if degree else fn(*rest))
            dtype = _result_dtype(name, args)
            return out if out.dtype == dtype else out.astype(dtype)

        fn.__name__ = fn.__qualname__ = call.__name__ = call.__qualname__ = name
        call.__doc__ = fn.__doc__
        COMPOSITES[name] = call
        return fn
    return register


@_composite("chdtrc")
def chdtrc(v, x):
    sp = _sp()
    return np.where(x < 0, np.nan, sp.gammaincc(v / 2, np.maximum(x, 0) / 2))


@_composite("gdtrc")
def gdtrc(a, b, x):
    return np.where(x < 0, np.nan, _sp().gammaincc(b, a * np.maximum(x, 0)))


@_composite("pdtrc")
def pdtrc(k, m):
    bad = (k < 0) | (m < 0)
    value = _sp().gammainc(_floor(max(k, 0.0) if type(k) is float else np.maximum(k, 0)) + 1,
                           np.maximum(m, 0))
    return np.where(bad, np.nan, value)


def _counts(k, n, p):
    """The counts rounded down, as scipy's, and where ``p`` is no probability."""
    return _floor(k), _floor(n), p, (p < 0) | (p > 1) | np.isnan(p)


@_composite("bdtr")
def bdtr(k, n, p):
    """cephes' bdtr: ``(1 - p)^n`` at k = 0, 1 at k = n, else
    ``betainc(n - k, k + 1, 1 - p)``; NaN for p outside [0, 1], k < 0, n < k."""
    k, n, p, bad = _counts(k, n, p)
    bad = bad | (k < 0) | (n < k)
    kk = np.clip(k, 0, np.maximum(n - 1, 0))  # (in the betainc's domain where it is used)
    inner = _sp().betainc(np.maximum(n - kk, 1e-300), kk + 1, 1 - p)
    value = np.where(k == n, 1.0, np.where(k == 0, np.power(1 - p, n - k), inner))
    return np.where(bad, np.nan, value)


@_composite("bdtrc")
def bdtrc(k, n, p):
    """cephes' bdtrc: 1 for k < 0, 0 at k = n, ``1 - (1 - p)^n`` at k = 0
    (``-expm1(n log1p(-p))`` below p = 0.01), else ``betainc(k + 1, n - k, p)``."""
    k, n, p, bad = _counts(k, n, p)
    bad = bad | (n < k)
    kk = np.clip(k, 0, np.maximum(n - 1, 0))
    inner = _sp().betainc(kk + 1, np.maximum(n - kk, 1e-300), p)
    dn = n - k
    first = np.where(p < 0.01, -np.expm1(dn * np.log1p(-np.minimum(p, 0.5))),
                     1 - np.power(1 - p, dn))
    value = np.where(k < 0, 1.0, np.where(k == n, 0.0, np.where(k == 0, first, inner)))
    return np.where(bad, np.nan, value)


@_composite("nbdtr")
def nbdtr(k, n, p):
    k, n, p, bad = _counts(k, n, p)
    bad = bad | (k < 0) | (n <= 0)
    value = _sp().betainc(np.maximum(n, 1e-300), np.maximum(k, 0) + 1, p)
    return np.where(bad, np.nan, value)


@_composite("nbdtrc")
def nbdtrc(k, n, p):
    k, n, p, bad = _counts(k, n, p)
    bad = bad | (k < 0) | (n <= 0)
    value = _sp().betainc(np.maximum(k, 0) + 1, np.maximum(n, 1e-300), 1 - p)
    return np.where(bad, np.nan, value)


@_composite("betaincc")
def betaincc(a, b, x):
    """The complement of ``betainc`` by its symmetry, ``betainc(b, a, 1 - x)``."""
    return _sp().betainc(b, a, 1 - x)


@_composite("kn")
def kn(n, x):
    return _sp().kv(n, x)


@_composite("jve")
def jve(v, x):
    pole = (x == 0) & (v < 0) & (v != _floor(v))  # (scipy: NaN, not jv's infinity)
    return np.where(pole, np.nan, _sp().jv(v, x))


@_composite("yve")
def yve(v, x):
    return _sp().yv(v, x)


@_composite("agm")
def agm(a, b):
    """Gauss' ``pi (a + b) / (4 K(m))``, ``m = ((a - b) / (a + b))^2``, for a
    and b of one sign (scipy's: 0 where one is 0, NaN for opposite signs)."""
    sign = np.sign(a)
    same = a * b > 0
    sa, sb = np.where(same, np.abs(a), 1.0), np.where(same, np.abs(b), 1.0)
    value = sign * (math.pi / 4) * (sa + sb) / _sp().ellipk(((sa - sb) / (sa + sb)) ** 2)
    return np.where(same, value, np.where(a * b == 0, 0.0 * a, np.nan))


@_composite("radian")
def radian(d, m, s):
    return ((s / 60 + m) / 60 + d) * (math.pi / 180)


@_composite("sindg")
def sindg(x):
    return np.sin(np.fmod(x, 360.0) * (math.pi / 180))


@_composite("cosdg")
def cosdg(x):
    return np.cos(np.fmod(x, 360.0) * (math.pi / 180))


def _inv_boxcox_exponent(y, lmbda):
    """``log1p(lmbda y) / lmbda``; where ``|lmbda y| < 1e-3`` (lmbda = 0
    included) its series ``y (1 - z/2 + z^2/3 - ... - z^5/6)``, ``z = lmbda y``
    -- the value to rounding, and derivatives in ``lmbda`` without the
    cancellation of the quotient's (``exp(y)`` at lmbda = 0 differentiated to
    0 in ``lmbda``; at 1e-9 the quotient's second derivative was 0)."""
    small = np.abs(lmbda * y) < 1e-3
    safe = np.where(small, 1.0, lmbda)
    z = np.where(small, lmbda, 0.0) * y
    series = y * (1 - z * (1 / 2 - z * (1 / 3 - z * (1 / 4 - z * (1 / 5 - z / 6)))))
    return np.where(small, series, np.log1p(safe * y) / safe)


@_composite("inv_boxcox")
def inv_boxcox(y, lmbda):
    """``exp(log1p(lmbda y) / lmbda)``, ``exp(y)`` at lmbda = 0."""
    return np.exp(_inv_boxcox_exponent(y, lmbda))


@_composite("inv_boxcox1p")
def inv_boxcox1p(y, lmbda):
    """``expm1(log1p(lmbda y) / lmbda)``, ``expm1(y)`` at lmbda = 0."""
    return np.expm1(_inv_boxcox_exponent(y, lmbda))


# --------------------------------------------------------------------------
# orthogonal polynomials of constant integer degree: their three-term recurrences
# --------------------------------------------------------------------------
def _recurrence(n, p0, p1, step):
    """``P_n`` from ``P_0 = p0``, ``P_1 = p1`` and ``P_{k+1} = step(k, P_k,
    P_{k-1})``, for the constant degrees ``n`` (an array: each element its
    own degree, selected as the recurrence passes it)."""
    top = int(np.max(n, initial=0))
    out = np.where(n == 0, p0, p1) if top >= 1 else p0 + 0.0 * p1
    prev, cur = p0, p1
    for k in range(1, top):
        prev, cur = cur, step(k, cur, prev)
        out = np.where(n == k + 1, cur, out)
    return out


def _ones(x):
    return 0.0 * x + 1.0


@_composite("eval_legendre", degree=True)
def eval_legendre(n, x):
    return _recurrence(n, _ones(x), x, lambda k, p, q: ((2 * k + 1) * x * p - k * q) / (k + 1))


@_composite("eval_sh_legendre", degree=True)
def eval_sh_legendre(n, x):
    return eval_legendre(n, 2 * x - 1)


@_composite("eval_chebyt", degree=True)
def eval_chebyt(n, x):
    return _recurrence(n, _ones(x), x, lambda k, p, q: 2 * x * p - q)


@_composite("eval_chebyu", degree=True)
def eval_chebyu(n, x):
    return _recurrence(n, _ones(x), 2 * x, lambda k, p, q: 2 * x * p - q)


@_composite("eval_chebyc", degree=True)
def eval_chebyc(n, x):
    return 2 * eval_chebyt(n, x / 2)


@_composite("eval_chebys", degree=True)
def eval_chebys(n, x):
    return eval_chebyu(n, x / 2)


@_composite("eval_sh_chebyt", degree=True)
def eval_sh_chebyt(n, x):
    return eval_chebyt(n, 2 * x - 1)


@_composite("eval_sh_chebyu", degree=True)
def eval_sh_chebyu(n, x):
    return eval_chebyu(n, 2 * x - 1)


@_composite("eval_hermite", degree=True)
def eval_hermite(n, x):
    return _recurrence(n, _ones(x), 2 * x, lambda k, p, q: 2 * x * p - 2 * k * q)


@_composite("eval_hermitenorm", degree=True)
def eval_hermitenorm(n, x):
    return _recurrence(n, _ones(x), x, lambda k, p, q: x * p - k * q)


@_composite("eval_laguerre", degree=True)
def eval_laguerre(n, x):
    return _recurrence(n, _ones(x), 1 - x, lambda k, p, q: ((2 * k + 1 - x) * p - k * q) / (k + 1))


@_composite("eval_genlaguerre", degree=True)
def eval_genlaguerre(n, alpha, x):
    """Laguerre's of parameter ``alpha`` (differentiable in it too); scipy's
    NaN for ``alpha <= -1``."""
    value = _recurrence(n, _ones(x + alpha), 1 + alpha - x,
                        lambda k, p, q: ((2 * k + 1 + alpha - x) * p - (k + alpha) * q) / (k + 1))
    return np.where(alpha <= -1, np.nan, value)


@_composite("eval_gegenbauer", degree=True)
def eval_gegenbauer(n, alpha, x):
    """Gegenbauer's of parameter ``alpha`` (differentiable in it too)."""
    return _recurrence(n, _ones(x + alpha), 2 * alpha * x,
                       lambda k, p, q: (2 * (k + alpha) * x * p - (k + 2 * alpha - 1) * q)
                       / (k + 1))
