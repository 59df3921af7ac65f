"""scipy on tracers: the special functions that are not ufuncs, and how scipy's
Python entry points reach the numpy surface.

scipy.special's ufuncs (``erf``, ``gammaln``, ``xlogy``, ...) need nothing
here: they dispatch through ``__array_ufunc__`` to the ops of
:mod:`hybridad.ops.special`.  scipy's *Python* functions convert their input
with ``np.asarray`` first, which a tracer refuses.  The ones below are
intercepted instead: :func:`install` (run when hybridad is imported if scipy
was, else right after the scipy module is imported: :mod:`.after_import`)
replaces each public attribute -- ``scipy.special.logsumexp`` -- by a wrapper
that calls scipy's own function unless an argument is a tracer, and the traced
implementation here when one is.  Code that called scipy before behaves as
before; ``scipy.special.logsumexp(x)`` inside a traced function is traced.
A name bound before hybridad was imported (``from scipy.special import
logsumexp`` ahead of ``import hybridad``) still holds scipy's original; its
``np.asarray`` then raises a :class:`~hybridad.errors.TracingError` naming the
scipy function and the user's line.  scipy.stats' distributions are
intercepted the same way (:mod:`.scipy_stats`).
"""

from __future__ import annotations

import functools

import numpy as np

from ..core.trace import tracing
from ..core.tracer import Tracer
from ..errors import WRAPPED_ENTRIES
from .numpy_complex import ComplexTracer

__all__ = ["COMPOSITES", "INTERCEPTED", "install", "intercepts", "is_traced"]

#: (module, attribute) -> the traced implementation
INTERCEPTED = {}
#: scipy.special ufunc name -> its implementation as a composite of traced
#: functions (:mod:`.scipy_special_composites`), registered in
#: :data:`.numpy_api.GUFUNCS` when scipy.special is loaded
COMPOSITES = {}


def intercepts(module, name, while_tracing=False):
    """Register the decorated function as the traced ``module.name``;
    ``while_tracing``: it is called on every call made while a trace is
    active, traced arguments or not (a function of a callback, which may
    close over traced values: ``scipy.integrate.odeint``)."""
    def register(impl):
        INTERCEPTED[(module, name)] = impl
        WRAPPED_ENTRIES.add(f"{module}.{name}")
        if while_tracing:
            WHILE_TRACING.add(impl)
        return impl
    return register


#: the implementations :func:`intercepts` calls whenever a trace is active
WHILE_TRACING = set()


def is_traced(args, kwargs=None):
    """Whether any argument (nested in lists and tuples) is a tracer (or a
    complex value made of tracers, :class:`.numpy_complex.ComplexTracer`)."""
    def traced(v):
        return isinstance(v, (Tracer, ComplexTracer)) or \
            (isinstance(v, (list, tuple)) and any(map(traced, v)))
    return any(map(traced, args)) or (kwargs is not None and any(map(traced, kwargs.values())))


def _wrap(original, impl):
    always = impl in WHILE_TRACING

    @functools.wraps(original)
    def dispatch(*args, **kwargs):
        if is_traced(args, kwargs) or (always and tracing()):
            return impl(*args, **kwargs)
        return original(*args, **kwargs)
    dispatch.__hybridad_original__ = original
    return dispatch


def install(only=None):
    """Put the wrappers of :data:`INTERCEPTED` in place for every scipy module
    imported so far, or for the module named ``only`` (idempotent; nothing is
    imported for this)."""
    from .after_import import loaded
    from .numpy_api import _UFUNC_ALIASES, GUFUNCS

    for (module, name), impl in INTERCEPTED.items():
        mod = loaded(module, only)
        if mod is None or only not in (None, module):
            continue
        current = getattr(mod, name, None)
        if current is not None and getattr(current, "__hybridad_original__", None) is None:
            setattr(mod, name, _wrap(current, impl))
    special = loaded("scipy.special", only)
    if special is not None and only in (None, "scipy.special"):
        for name, same in _SAME_AS_NUMPY.items():  # (traced as numpy's ufunc)
            _UFUNC_ALIASES.setdefault(getattr(special, name), same)
        for name, impl in COMPOSITES.items():
            GUFUNCS.setdefault(getattr(special, name), impl)


#: scipy.special's ufuncs that compute numpy's function: their values, up to
#: rounding, and numpy's rules (``round`` rounds half-integers to even, as ``rint``)
_SAME_AS_NUMPY = {"expm1": np.expm1, "log1p": np.log1p, "exp2": np.exp2, "cbrt": np.cbrt,
                  "round": np.rint}


# --------------------------------------------------------------------------
# scipy.special's Python functions
# --------------------------------------------------------------------------
def _floats(a):
    """``a`` as a floating-point array (a tracer as it is, integers as float64)."""
    a = a if isinstance(a, Tracer) else np.asarray(a, dtype=float)
    return a if a.dtype.kind == "f" else a.astype(np.float64)


def _shift(a, axis, weighted=None):
    """The max of ``a`` over ``axis`` (kept) rounded down to a whole number, 0
    where it is not finite: ``exp(a - shift)`` stays within ``[e^-1, e]`` at
    the max, as stable as scipy's shift, and the shift is piecewise constant
    -- its derivative 0, as the exact one of the whole (``log sum exp(a - m) +
    m`` does not depend on ``m``), so the backward pass has no max's mask
    (jax stops the gradient there)."""
    if weighted is not None:  # (the max of the terms weighted, as scipy's: a zero
        a = np.where(weighted, a, -np.inf)  # weight's term is not one)
    m = np.floor(np.max(a, axis=axis, keepdims=True))
    return np.where(np.isfinite(m), m, 0.0)


@intercepts("scipy.special", "logsumexp")
def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """``log(sum(b * exp(a)))`` over ``axis``, shifted by the max (scipy's)."""
    a = _floats(a)
    weighted = None if b is None else (b if isinstance(b, Tracer) else np.asarray(b)) != 0
    m = _shift(a, axis, weighted)
    if b is None:
        e = np.exp(a - m)
    else:  # (a zero weight's term is 0, whatever a is there -- scipy's value --,
        # its derivative in b exp(a - m): exp is capped below overflow there)
        cap = float(np.log(np.finfo(a.dtype).max)) - 1.0
        z = a - m
        e = np.exp(np.where(weighted, z, np.minimum(z, cap))) * b
    s = np.sum(e, axis=axis, keepdims=True)
    sign = np.sign(s)
    out = np.log(np.abs(s)) + m
    if b is not None and not return_sign:  # (scipy's: a negative sum has no log)
        out = np.where(sign < 0, np.nan, out)
    if not keepdims:
        out = np.squeeze(out, axis=axis)
        sign = np.squeeze(sign, axis=axis)
    if return_sign:
        return out, sign
    return out


def _shifted(x, axis):
    x = _floats(x)
    return x - _shift(x, axis)


@intercepts("scipy.special", "softmax")
def softmax(x, axis=None):
    """``exp(x - m) / sum(exp(x - m))``, ``m`` the max rounded down (scipy's
    form: ``exp(x - logsumexp(x))`` loses ``log 2`` beside 1e17)."""
    e = np.exp(_shifted(x, axis))
    return e / np.sum(e, axis=axis, keepdims=True)


@intercepts("scipy.special", "log_softmax")
def log_softmax(x, axis=None):
    """``(x - m) - log(sum(exp(x - m)))``, ``m`` the max rounded down (scipy's)."""
    z = _shifted(x, axis)
    return z - np.log(np.sum(np.exp(z), axis=axis, keepdims=True))


@intercepts("scipy.special", "polygamma")
def polygamma(n, x):
    """``psi`` for ``n = 0``, else ``(-1)**(n+1) n! zeta(n + 1, x)`` (scipy's)."""
    import scipy.special as sp
    from scipy.special import _ufuncs

    if isinstance(n, Tracer):
        raise NotImplementedError("hybridad: scipy.special.polygamma with a traced order n "
                                  "(the order is an integer: pass it as a constant)")
    n = np.asarray(n)
    fac = (-1.0) ** (n + 1) * sp.gamma(n + 1.0)
    if np.all(n == 0):
        return sp.psi(x)
    return np.where(n == 0, sp.psi(x), fac * _ufuncs._zeta(n + 1.0, x))


@intercepts("scipy.special", "factorial")
def factorial(n, exact=False, extend="zero"):
    """``gamma(n + 1)``, 0 where ``n < 0`` (scipy's ``exact=False``,
    ``extend='zero'``); ``exact=True`` needs integer values and is refused."""
    import scipy.special as sp

    if exact:
        raise NotImplementedError(
            "hybridad: scipy.special.factorial(n, exact=True) of a traced n (exact integer "
            "arithmetic needs the values): use exact=False, gamma(n + 1) in floating point")
    if extend != "zero":
        raise NotImplementedError(f"hybridad: scipy.special.factorial with extend={extend!r} "
                                  "(complex values) is not supported; use extend='zero'")
    n = _floats(n)
    return np.where(n < 0, np.zeros((), n.dtype), sp.gamma(n + 1))


@intercepts("scipy.special", "multigammaln")
def multigammaln(a, d):
    """``d (d-1)/4 log(pi) + sum_j gammaln(a - j/2)``, ``j < d`` (scipy's);
    ``d`` is a constant integer.  scipy's check ``a > (d - 1)/2`` needs the
    values and is not made on a traced ``a``."""
    import scipy.special as sp

    if isinstance(d, Tracer):
        raise NotImplementedError("hybridad: scipy.special.multigammaln with a traced "
                                  "dimension d (an integer: pass it as a constant)")
    d = np.asarray(d)[()]
    if not np.isscalar(d) or np.floor(d) != d:
        raise ValueError("d should be a positive integer (dimension)")
    d = int(d)
    terms = [sp.gammaln(a - 0.5 * j) for j in range(d)]
    total = sum(terms[1:], terms[0]) if terms else a * 0.0
    return total + d * (d - 1) * 0.25 * np.log(np.pi)
