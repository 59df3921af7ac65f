"""scipy.special's ufuncs: the rule table, continued.

scipy's special functions are numpy ufuncs, so a call on a tracer reaches
``__array_ufunc__`` like ``np.exp`` does.  Each line declares one of them
with its partials, exactly as :mod:`.elementwise` declares numpy's: they fuse
into dual-number regions, and every backend spells the value in its own table
(numba: :mod:`hybridad.backends.numba.special`, which calls scipy's own
compiled functions; CUDA: :mod:`hybridad.backends.cuda.special`).

Op names are scipy's (``scipy.special.erf`` is op ``erf``); ``zeta`` is the
Hurwitz zeta ufunc behind ``scipy.special.zeta(x, q)``, whose ``q``-derivative
gives the polygamma functions (``psi' (x) = zeta(2, x)``).  ``scipy.special.jn``
is the ufunc ``jv``.

Partials without a closed form are :class:`~.elementwise.Underived`: a
derivative that needs one raises ``NotImplementedError`` naming the function
and the argument -- the order of ``zeta``, the shape ``a`` of ``gammainc`` and
``gammaincc``, ``a`` and ``b`` of ``betainc``, the order of the Bessel
functions ``jv``, ``yv``, ``iv``, ``ive``, ``kv``, ``kve``, ``yn`` and of
``expn``.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.registry import LazyUfunc
from .elementwise import Underived, _lit, elementwise

__all__ = ["SCIPY_SPECIAL"]

_2_SQRTPI = 2.0 / math.sqrt(math.pi)
_SQRTPI_2 = math.sqrt(math.pi) / 2.0
_SQRT2PI = math.sqrt(2.0 * math.pi)


class _Names:
    """``sp.erf``: scipy.special's ufunc by name, a :class:`LazyUfunc` -- scipy
    is imported when a rule first calls one or a backend needs it, not by
    ``import hybridad``."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        ufunc = LazyUfunc(self._module, name)
        setattr(self, name, ufunc)
        return ufunc


sp = _Names("scipy.special")
_zeta = LazyUfunc("scipy.special._ufuncs", "_zeta")  # Hurwitz zeta(s, q): scipy.special.zeta(x, q)


def _special(ufunc, partials, domain=(-2.0, 2.0), name=None, expensive=True):
    return elementwise(ufunc, partials, domain=domain, name=name, expensive=expensive,
                       doc=f"scipy.special.{name or ufunc.__name__}")


def _safe_div(x, num, den):
    """``num / den``, 0 where ``x`` is 0 (xlogy-style: no derivative from 0 * log 0)."""
    return np.where(x == 0, _lit(0, x), num / den)


# --------------------------------------------------------------------------
# asymptotic series: derivatives whose closed form cancels at large |x|
# --------------------------------------------------------------------------
def _horner(t, coefs):
    """``sum_k coefs[k] t**k`` in ``t``'s dtype."""
    total = _lit(coefs[-1], t)
    for c in reversed(coefs[:-1]):
        total = total * t + _lit(c, t)
    return total


def _beyond(x, float64, float32):
    """``x > float64`` (``float32`` in float32): where an asymptotic series is exact
    to the dtype's rounding and the closed form would lose more to cancellation."""
    return x > _lit(float64 if x.dtype == np.float64 else float32, x)


#: (2k + 1)!!, k = 0..14: the series of Dawson's integral and erfcx in 1 / (2 x**2)
#: (``D(x) ~ sum_k (2k - 1)!! / (2x (2x**2)**k)``, ``erfcx`` the same, alternating)
_ODD_FACTORIALS = tuple(float(math.prod(range(1, 2 * k + 2, 2))) for k in range(15))


def _dawsn_partial(x, ans):
    """``D'(x) = 1 - 2 x D(x)``.  Beyond ``|x| = 10`` (8 in float32) ``2 x D(x)``
    tends to 1 and the difference cancels (every digit at ``x = 1e10``, relative
    error ``2 x**2 eps``); there its asymptotic series ``-u sum_k (2k + 1)!! u**k``,
    ``u = 1 / (2 x**2)`` (0 at +-inf)."""
    u = 0.5 / (x * x)
    return np.where(_beyond(np.abs(x), 10.0, 8.0), -u * _horner(u, _ODD_FACTORIALS),
                    1 - 2 * x * ans)


def _erfcx_partial(x, ans):
    """``erfcx'(x) = 2 x erfcx(x) - 2 / sqrt(pi)``; beyond ``x = 10`` (8 in float32),
    where the two cancel, the asymptotic series ``-(2 / sqrt(pi)) u sum_k (2k + 1)!!
    (-u)**k``, ``u = 1 / (2 x**2)`` (0 at +inf)."""
    u = 0.5 / (x * x)
    return np.where(_beyond(x, 10.0, 8.0), _lit(-_2_SQRTPI, x) * u * _horner(-u, _ODD_FACTORIALS),
                    2 * x * ans - _lit(_2_SQRTPI, x))


def _bessel_slope(nu, kind):
    """``d_k``, k = 0..9: the derivative of the asymptotic series of ``I_nu(x) e**-x``
    (``kind`` "i"; DLMF 10.40.1) or ``K_nu(x) e**x`` ("k"; 10.40.2), term by term:
    ``x**-3/2 sum_k d_k x**-k`` times ``(2 pi)**-1/2`` or ``(pi / 2)**1/2``."""
    a, out = 1.0, []
    for k in range(10):
        if k:
            a *= (4 * nu * nu - (2 * k - 1) ** 2) / (8 * k)
        out.append(-(k + 0.5) * a * ((-1) ** k if kind == "i" else 1))
    return tuple(out)


_I0E, _I1E, _K0E, _K1E = (_bessel_slope(nu, kind) for kind in "ik" for nu in (0, 1))


def _scaled_bessel_partial(closed, coefs, scale, symmetry=None):
    """The derivative of an exponentially scaled Bessel function: ``closed(x,
    ans)`` (a difference of two terms near ``ans``, which cancel as ``|x|`` grows:
    relative error ``2 |x| eps``), beyond ``x = 200`` (20 in float32) the
    asymptotic series ``scale x**-3/2 sum_k coefs[k] x**-k`` (0 at +inf); below
    ``-200`` the same at ``|x|`` for an ``"even"`` derivative, its negative for an
    ``"odd"`` one (``symmetry`` None: the function is defined for ``x >= 0`` only)."""
    def partial(x, ans):
        ax = x if symmetry is None else np.abs(x)
        t = 1 / ax
        tail = _lit(scale, x) * (t * np.sqrt(t)) * _horner(t, coefs)
        if symmetry == "odd":
            tail = np.sign(x) * tail
        return np.where(_beyond(ax, 200.0, 20.0), tail, closed(x, ans))

    return partial


# error functions and their inverses
_special(sp.erf, [lambda x, ans: _lit(_2_SQRTPI, x) * np.exp(-(x * x))])
_special(sp.erfc, [lambda x, ans: _lit(-_2_SQRTPI, x) * np.exp(-(x * x))])
_special(sp.erfcx, [_erfcx_partial])
_special(sp.erfinv, [lambda x, ans: _lit(_SQRTPI_2, x) * np.exp(ans * ans)],
         domain=(-0.9, 0.9))
_special(sp.erfcinv, [lambda x, ans: _lit(-_SQRTPI_2, x) * np.exp(ans * ans)],
         domain=(0.1, 1.9))
# the normal distribution
_special(sp.ndtr, [lambda x, ans: np.exp(-0.5 * (x * x)) * _lit(1 / _SQRT2PI, x)])
_special(sp.log_ndtr, [lambda x, ans: np.exp(-0.5 * (x * x) - ans) * _lit(1 / _SQRT2PI, x)],
         domain=(-3.0, 3.0))
_special(sp.ndtri, [lambda x, ans: _lit(_SQRT2PI, x) * np.exp(0.5 * (ans * ans))],
         domain=(0.05, 0.95))
# the gamma family
_special(sp.gammaln, [lambda x, ans: sp.psi(x)], domain=(0.3, 4.0))
_special(sp.loggamma, [lambda x, ans: sp.psi(x)], domain=(0.3, 4.0))
_special(sp.gamma, [lambda x, ans: ans * sp.psi(x)], domain=(0.3, 4.0))
_special(sp.rgamma, [lambda x, ans: -ans * sp.psi(x)], domain=(0.3, 4.0))
_special(sp.psi, [lambda x, ans: _zeta(_lit(2, x), x)], domain=(0.3, 4.0))
_special(_zeta, [Underived("scipy.special.zeta", "first (x, the order)"),
                 lambda s, q, ans: -s * _zeta(s + 1, q)], domain=(2.0, 4.0), name="zeta")
_special(sp.betaln, [lambda a, b, ans: sp.psi(a) - sp.psi(a + b),
                     lambda a, b, ans: sp.psi(b) - sp.psi(a + b)], domain=(0.3, 4.0))
# the logistic function
_special(sp.expit, [lambda x, ans: ans * (1 - ans)])
_special(sp.logit, [lambda x, ans: 1 / (x * (1 - x))], domain=(0.05, 0.95))
_special(sp.log_expit, [lambda x, ans: sp.expit(-x)])
# x log y
_special(sp.xlogy, [lambda x, y, ans: np.log(y), lambda x, y, ans: _safe_div(x, x, y)],
         domain=(0.2, 3.0))
_special(sp.xlog1py, [lambda x, y, ans: np.log1p(y),
                      lambda x, y, ans: _safe_div(x, x, 1 + y)], domain=(0.2, 3.0))
_special(sp.entr, [lambda x, ans: -(np.log(x) + 1)], domain=(0.1, 3.0))
_special(sp.rel_entr, [lambda x, y, ans: np.log(x / y) + 1, lambda x, y, ans: -x / y],
         domain=(0.1, 3.0))
# Bessel functions (i1(x)/x and j1(x)/x tend to 1/2 at 0)
_special(sp.i0, [lambda x, ans: sp.i1(x)])
_special(sp.i0e, [_scaled_bessel_partial(lambda x, ans: sp.i1e(x) - np.sign(x) * ans, _I0E,
                                          1 / math.sqrt(2 * math.pi), "odd")])
_special(sp.i1, [lambda x, ans: np.where(x == 0, _lit(0.5, x), sp.i0(x) - ans / x)])
_special(sp.i1e, [_scaled_bessel_partial(
    lambda x, ans: np.where(x == 0, _lit(0.5, x), sp.i0e(x) - ans * (np.sign(x) + 1 / x)),
    _I1E, 1 / math.sqrt(2 * math.pi), "even")])
_special(sp.j0, [lambda x, ans: -sp.j1(x)])
_special(sp.j1, [lambda x, ans: np.where(x == 0, _lit(0.5, x), sp.j0(x) - ans / x)])
_special(sp.y0, [lambda x, ans: -sp.y1(x)], domain=(0.3, 4.0))
_special(sp.y1, [lambda x, ans: sp.y0(x) - ans / x], domain=(0.3, 4.0))


# incomplete gamma and beta functions: no closed form in the shape parameters
def _gamma_density(a, x):
    """``x**(a-1) exp(-x) / Gamma(a)``: d gammainc(a, x) / dx (``0**0`` is 1)."""
    return np.exp(sp.xlogy(a - 1, x) - x - sp.gammaln(a))


def _beta_density(a, b, x):
    """``x**(a-1) (1-x)**(b-1) / B(a, b)``: d betainc(a, b, x) / dx."""
    return np.exp(sp.xlogy(a - 1, x) + sp.xlog1py(b - 1, -x) - sp.betaln(a, b))


def _order(function, what="first (a)"):
    """The partial of ``scipy.special.<function>`` in argument ``what``: no rule."""
    return Underived(f"scipy.special.{function}", what)


_special(sp.gammainc, [_order("gammainc"), lambda a, x, ans: _gamma_density(a, x)],
         domain=(0.5, 4.0))
_special(sp.gammaincc, [_order("gammaincc"), lambda a, x, ans: -_gamma_density(a, x)],
         domain=(0.5, 4.0))
_special(sp.betainc, [_order("betainc"), _order("betainc", "second (b)"),
                      lambda a, b, x, ans: _beta_density(a, b, x)], domain=(0.2, 0.9))
_special(sp.gammasgn, [0], domain=(0.3, 4.0))
_special(sp.beta, [lambda a, b, ans: ans * (sp.psi(a) - sp.psi(a + b)),
                   lambda a, b, ans: ans * (sp.psi(b) - sp.psi(a + b))], domain=(0.3, 4.0))
_special(sp.poch, [lambda z, m, ans: ans * (sp.psi(z + m) - sp.psi(z)),
                   lambda z, m, ans: ans * sp.psi(z + m)], domain=(0.3, 3.0))
# Bessel functions of real order v (scipy.special.jn is jv): the x-derivatives
# by the recurrences; ive = iv exp(-|x|), kve = kv exp(x)
_V = "first (v, the order)"
_special(sp.jv, [_order("jv", _V), lambda v, x, ans: 0.5 * (sp.jv(v - 1, x) - sp.jv(v + 1, x))],
         domain=(0.3, 4.0))
_special(sp.yv, [_order("yv", _V), lambda v, x, ans: 0.5 * (sp.yv(v - 1, x) - sp.yv(v + 1, x))],
         domain=(0.3, 4.0))
_special(sp.iv, [_order("iv", _V), lambda v, x, ans: 0.5 * (sp.iv(v - 1, x) + sp.iv(v + 1, x))],
         domain=(0.3, 4.0))
_special(sp.ive, [_order("ive", _V), lambda v, x, ans: 0.5 * (sp.ive(v - 1, x) + sp.ive(v + 1, x))
                  - np.sign(x) * ans], domain=(0.3, 4.0))
_special(sp.kv, [_order("kv", _V), lambda v, x, ans: -0.5 * (sp.kv(v - 1, x) + sp.kv(v + 1, x))],
         domain=(0.3, 4.0))
_special(sp.kve, [_order("kve", _V), lambda v, x, ans: ans - 0.5 * (sp.kve(v - 1, x)
                                                                    + sp.kve(v + 1, x))],
         domain=(0.3, 4.0))
# yn and expn take an integer order (scipy warns when it truncates a float one):
# the registry-driven tests sample the single point (2, 2); ours sample x widely
_special(sp.yn, [_order("yn", "first (n, the order)"),
                 lambda n, x, ans: 0.5 * (sp.yn(n - 1, x) - sp.yn(n + 1, x))], domain=(2.0, 2.0))
_special(sp.k0, [lambda x, ans: -sp.k1(x)], domain=(0.3, 4.0))
_special(sp.k1, [lambda x, ans: -sp.k0(x) - ans / x], domain=(0.3, 4.0))
_special(sp.k0e, [_scaled_bessel_partial(lambda x, ans: ans - sp.k1e(x), _K0E,
                                          math.sqrt(math.pi / 2))], domain=(0.3, 4.0))
_special(sp.k1e, [_scaled_bessel_partial(lambda x, ans: ans * (1 - 1 / x) - sp.k0e(x), _K1E,
                                          math.sqrt(math.pi / 2))], domain=(0.3, 4.0))
# exponential integrals; E_0(x) = exp(-x) / x, whose derivative E_{-1} scipy does not define
_special(sp.exp1, [lambda x, ans: -np.exp(-x) / x], domain=(0.3, 4.0))
_special(sp.expi, [lambda x, ans: np.exp(x) / x], domain=(-3.0, -0.3))
_special(sp.expn, [_order("expn", "first (n, the order)"),
                   lambda n, x, ans: np.where(n == 0, -ans * (1 + 1 / x), -sp.expn(n - 1, x))],
         domain=(2.0, 2.0))


def _spence_partial(z, ans):
    """``log(z) / (1 - z)``; near z = 1 its Taylor polynomial in ``w = z - 1``
    (so the second derivative at 1 is right too)."""
    w = z - 1
    poly = -(1 - w * (0.5 - w * (_lit(1 / 3, z) - w * (0.25 - w * (0.2 - w * _lit(1 / 6, z))))))
    return np.where(np.abs(w) < _lit(1e-3, z), poly, np.log(z) / (1 - z))


_special(sp.spence, [_spence_partial], domain=(0.3, 3.0))
_special(sp.kl_div, [lambda x, y, ans: np.log(x / y), lambda x, y, ans: 1 - x / y],
         domain=(0.1, 3.0))
_special(sp.dawsn, [_dawsn_partial])

# binomial coefficients (scipy.special.comb(N, k) is binom(N, k) for 0 <= k <= N)
_special(sp.binom, [lambda n, k, ans: ans * (sp.psi(n + 1) - sp.psi(n - k + 1)),
                    lambda n, k, ans: ans * (sp.psi(n - k + 1) - sp.psi(k + 1))],
         domain=(2.0, 2.9))


def _boxcox_dlmbda(log_x, lmbda, ans):
    """d/d lmbda of ``expm1(lmbda log x) / lmbda``: ``(x**lmbda log x - ans) /
    lmbda``, and its Taylor series in ``t = lmbda log x`` near 0 (``log(x)**2
    / 2`` at lmbda = 0, without cancellation)."""
    t = lmbda * log_x
    series = log_x * log_x * (0.5 + t * (_lit(1 / 3, t) + t * (0.125 + t * _lit(1 / 30, t))))
    return np.where(np.abs(t) < _lit(1e-3, t), series, (np.exp(t) * log_x - ans) / lmbda)


_special(sp.boxcox, [lambda x, lm, ans: np.exp((lm - 1) * np.log(x)),
                     lambda x, lm, ans: _boxcox_dlmbda(np.log(x), lm, ans)], domain=(0.3, 2.0))
_special(sp.boxcox1p, [lambda x, lm, ans: np.exp((lm - 1) * np.log1p(x)),
                       lambda x, lm, ans: _boxcox_dlmbda(np.log1p(x), lm, ans)],
         domain=(0.3, 2.0))



# robust losses: huber(delta, r) is r**2 / 2 where |r| <= delta, else
# delta (|r| - delta / 2) (C1 at the kink); pseudo_huber(delta, r) =
# delta**2 (sqrt(1 + (r / delta)**2) - 1) = r**2 / (1 + s), s = sqrt(1 + (r / delta)**2),
# whose partials r / s and r (v / s) (v / (1 + s))**2 (v = r / delta) stay finite
# for any finite v; both are 0 at delta = 0, where their delta-partial is the
# right derivative |r| (and inf for delta < 0, as scipy's values)
def _pseudo_huber_ddelta(d, r, ans):
    v = r / d
    s = np.sqrt(1 + v * v)
    q = v / (1 + s)
    return np.where(d == 0, np.abs(r), r * (v / s) * (q * q))


def _pseudo_huber_dr(d, r, ans):
    v = r / d
    return np.where(d == 0, _lit(0.0, r), r / np.sqrt(1 + v * v))


_special(sp.huber, [lambda d, r, ans: np.where(np.abs(r) <= d, _lit(0.0, r), np.abs(r) - d),
                    lambda d, r, ans: np.where(np.abs(r) <= d, r, d * np.sign(r))],
         domain=(0.2, 2.0))
_special(sp.pseudo_huber, [_pseudo_huber_ddelta, _pseudo_huber_dr], domain=(0.2, 2.0))

# elementary functions numpy lacks (scipy's expm1, log1p, exp2, cbrt and round
# are numpy's expm1, log1p, exp2, cbrt and rint: hybridad.frontend.numpy_api),
# and the distribution functions whose partial in the continuous argument is
# a density
_special(sp.exp10, [lambda x, ans: ans * _lit(math.log(10.0), x)], domain=(-1.0, 1.0))
_special(sp.cosm1, [lambda x, ans: -np.sin(x)])
_special(sp.erfi, [lambda x, ans: _lit(_2_SQRTPI, x) * np.exp(x * x)])
_special(sp.powm1, [lambda x, y, ans: y * np.power(x, y - 1),
                    lambda x, y, ans: np.where(x == 0, _lit(0.0, x), (ans + 1) * np.log(x))],
         domain=(0.3, 2.0))
_special(sp.stdtr, [_order("stdtr", "first (df)"), lambda df, t, ans: np.exp(
    sp.gammaln(0.5 * (df + 1)) - sp.gammaln(0.5 * df) - 0.5 * np.log(df * _lit(math.pi, t))
    - 0.5 * (df + 1) * np.log1p(t * t / df))], domain=(0.5, 3.0))
_special(sp.chdtr, [_order("chdtr", "first (v, the degrees of freedom)"),
                    lambda v, x, ans: 0.5 * _gamma_density(0.5 * v, 0.5 * x)], domain=(0.5, 3.0))
_special(sp.gdtr, [lambda a, b, x, ans: x * _gamma_density(b, a * x), _order("gdtr", "second (b)"),
                   lambda a, b, x, ans: a * _gamma_density(b, a * x)], domain=(0.5, 3.0))
_special(sp.pdtr, [0, lambda k, m, ans: -_gamma_density(np.floor(k) + 1, m)], domain=(0.5, 3.0))

# complete elliptic integrals K(m), E(m) and K(1 - p): dK/dm = (E - (1 - m) K) /
# (2 m (1 - m)), dE/dm = (E - K) / (2 m), by their Taylor series where |m| < 1e-3
# (the closed forms cancel there: eps / |m| relative; the series' first
# neglected term is below 1e-15)
def _elliptic_series(sign_e):
    """The coefficients of dK/dm (``sign_e`` False) or dE/dm in powers of m."""
    return [math.pi / 2 * n * math.comb(2 * n, n) ** 2 / 16 ** n / ((1 - 2 * n) if sign_e else 1)
            for n in range(1, 7)]


_DK, _DE = _elliptic_series(False), _elliptic_series(True)


def _dk_dm(m, k, e):
    small = np.abs(m) < _lit(1e-3, m)
    safe = np.where(small, _lit(0.5, m), m)
    return np.where(small, _horner(m, _DK), (e - (1 - safe) * k) / (2 * safe * (1 - safe)))


def _de_dm(m, k, e):
    small = np.abs(m) < _lit(1e-3, m)
    safe = np.where(small, _lit(0.5, m), m)
    return np.where(small, _horner(m, _DE), (e - k) / (2 * safe))


def _dkm1_dp(p, k):
    """d K(1 - p) / dp = -(E(1 - p) - p K) / (2 (1 - p) p), in p itself (1 - p
    rounds p away where p is tiny); the series in m = 1 - p where m is small."""
    m = 1 - p
    small = np.abs(m) < _lit(1e-3, p)
    safe = np.where(small, _lit(0.5, p), p)
    return np.where(small, -_horner(m, _DK),
                    -(sp.ellipe(1 - safe) - safe * k) / (2 * (1 - safe) * safe))


_special(sp.ellipk, [lambda m, ans: _dk_dm(m, ans, sp.ellipe(m))], domain=(0.1, 0.9))
_special(sp.ellipe, [lambda m, ans: _de_dm(m, sp.ellipk(m), ans)], domain=(0.1, 0.9))
_special(sp.ellipkm1, [lambda p, ans: _dkm1_dp(p, ans)], domain=(0.1, 0.9))

#: the scipy.special ufuncs declared here, by op name
SCIPY_SPECIAL = ("erf", "erfc", "erfcx", "erfinv", "erfcinv", "ndtr", "log_ndtr", "ndtri",
                 "gammaln", "loggamma", "gamma", "rgamma", "psi", "zeta", "betaln", "expit",
                 "logit", "log_expit", "xlogy", "xlog1py", "entr", "rel_entr", "i0", "i0e",
                 "i1", "i1e", "j0", "j1", "y0", "y1",
                 "gammainc", "gammaincc", "betainc", "gammasgn", "beta", "poch", "jv", "yv",
                 "iv", "ive", "kv", "kve", "yn", "k0", "k1", "k0e", "k1e", "exp1", "expi",
                 "expn", "spence", "kl_div", "dawsn", "binom", "boxcox", "boxcox1p", "huber",
                 "pseudo_huber", "exp10", "cosm1", "erfi", "powm1", "stdtr", "chdtr", "gdtr",
                 "pdtr", "ellipk", "ellipe", "ellipkm1")
