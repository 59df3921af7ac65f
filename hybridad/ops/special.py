"""scipy.special's ufuncs: the rule table, continued.

scipy's special functions are numpy ufuncs, so a call on a tracer reaches
``__array_ufunc__`` like ``np.exp`` does.  Each line declares one of them
with its partials, exactly as :mod:`.elementwise` declares numpy's: they fuse
into dual-number regions, and every backend spells the value in its own table
(numba: :mod:`hybridad.backends.numba.special`, which calls scipy's own
compiled functions; CUDA: :mod:`hybridad.backends.cuda.special`).

Op names are scipy's (``scipy.special.erf`` is op ``erf``); ``zeta`` is the
Hurwitz zeta ufunc behind ``scipy.special.zeta(x, q)``, whose ``q``-derivative
gives the polygamma functions (``psi' (x) = zeta(2, x)``).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.special as sp
from scipy.special import _ufuncs

from .elementwise import Underived, _lit, elementwise

__all__ = ["SCIPY_SPECIAL"]

_2_SQRTPI = 2.0 / math.sqrt(math.pi)
_SQRTPI_2 = math.sqrt(math.pi) / 2.0
_SQRT2PI = math.sqrt(2.0 * math.pi)
_zeta = _ufuncs._zeta  # Hurwitz zeta(s, q), what scipy.special.zeta(x, q) calls


def _special(ufunc, partials, domain=(-2.0, 2.0), name=None, expensive=True):
    return elementwise(ufunc, partials, domain=domain, name=name, expensive=expensive,
                       doc=f"scipy.special.{name or ufunc.__name__}")


def _safe_div(x, num, den):
    """``num / den``, 0 where ``x`` is 0 (xlogy-style: no derivative from 0 * log 0)."""
    return np.where(x == 0, _lit(0, x), num / den)


# error functions and their inverses
_special(sp.erf, [lambda x, ans: _lit(_2_SQRTPI, x) * np.exp(-(x * x))])
_special(sp.erfc, [lambda x, ans: _lit(-_2_SQRTPI, x) * np.exp(-(x * x))])
_special(sp.erfcx, [lambda x, ans: 2 * x * ans - _lit(_2_SQRTPI, x)])
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
_special(sp.i0e, [lambda x, ans: sp.i1e(x) - np.sign(x) * ans])
_special(sp.i1, [lambda x, ans: np.where(x == 0, _lit(0.5, x), sp.i0(x) - ans / x)])
_special(sp.i1e, [lambda x, ans: np.where(x == 0, _lit(0.5, x),
                                           sp.i0e(x) - ans * (np.sign(x) + 1 / x))])
_special(sp.j0, [lambda x, ans: -sp.j1(x)])
_special(sp.j1, [lambda x, ans: np.where(x == 0, _lit(0.5, x), sp.j0(x) - ans / x)])
_special(sp.y0, [lambda x, ans: -sp.y1(x)], domain=(0.3, 4.0))
_special(sp.y1, [lambda x, ans: sp.y0(x) - ans / x], domain=(0.3, 4.0))

#: the scipy.special ufuncs declared here, by op name
SCIPY_SPECIAL = ("erf", "erfc", "erfcx", "erfinv", "erfcinv", "ndtr", "log_ndtr", "ndtri",
                 "gammaln", "loggamma", "gamma", "rgamma", "psi", "zeta", "betaln", "expit",
                 "logit", "log_expit", "xlogy", "xlog1py", "entr", "rel_entr", "i0", "i0e",
                 "i1", "i1e", "j0", "j1", "y0", "y1")
