"""Python's ``math`` module on traced values: ``math.sqrt(T)``, ``math.exp(-r * T)``.

``math``'s functions take a Python float: on a traced value ``float()`` would
drop its derivative, and is refused (:class:`~hybridad.errors.MathCallError`).
Code as people ship it is full of them -- a Black-Scholes price's
``sig * math.sqrt(T)``, a physics formula's ``math.exp`` -- so a plan traces
such a function again (:func:`.numpy_made.traced_again`) with the user's
names for ``math`` and its functions (``import math``, ``from math import
sqrt``) bound to :data:`MODULE` and the wrappers of :data:`WRAPPERS`: on a
traced argument each is numpy's function of it, 0-d, differentiated; on
anything else, and on every other thread, it is ``math``'s own.

A traced float keeps its dtype (``math`` computes in double and returns a
Python float, which numpy's promotion treats as weak: a float32 array times
it stays float32, as it does here).  ``math.floor``, ``ceil`` and ``trunc``
call the tracer's own ``__floor__`` and kin, a Python int decided on the
traced call's values (:mod:`hybridad.core.decisions`).
"""

from __future__ import annotations

import functools
import math
import sys
import types

import numpy as np

from ..core.tracer import Tracer
from .numpy_construct import holds_tracer

__all__ = ["IMPLEMENTATIONS", "module_proxy", "wrapper"]


def _special(name):
    def call(x):
        import scipy.special

        return getattr(scipy.special, name)(x)
    return call


def _scalar(v):
    """``v`` as math reads it: a traced value 0-d (numpy's conversion: one
    element), in a float dtype (integers as float64)."""
    if not isinstance(v, Tracer):
        return float(v)
    if v.size != 1:
        raise TypeError("only length-1 arrays can be converted to Python scalars")
    v = v.reshape(())
    return v if v.dtype.kind == "f" else v.astype(np.float64)


def _log(x, base=None):
    return np.log(x) if base is None else np.log(x) / np.log(_scalar(base))


def _hypot(*coordinates):
    return np.sqrt(sum(_scalar(c) ** 2 for c in coordinates))


def _dist(p, q):
    return np.sqrt(sum((_scalar(a) - _scalar(b)) ** 2 for a, b in zip(p, q, strict=True)))


def _fsum(values):
    return sum(_scalar(v) for v in values)


def _prod(values, *, start=1):
    out = start
    for v in values:
        out = out * v
    return out


#: ``math``'s function name -> its implementation on traced values (its
#: arguments made 0-d floats first, but for the iterables' functions)
IMPLEMENTATIONS = {
    "sqrt": np.sqrt, "exp": np.exp, "expm1": np.expm1, "log": _log, "log2": np.log2,
    "log10": np.log10, "log1p": np.log1p, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "atan2": np.arctan2,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "pow": np.power, "fabs": np.abs,
    "hypot": _hypot, "copysign": np.copysign, "fmod": np.fmod, "degrees": np.degrees,
    "radians": np.radians, "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite,
    "erf": _special("erf"), "erfc": _special("erfc"), "gamma": _special("gamma"),
    "lgamma": _special("gammaln"), "exp2": np.exp2, "cbrt": np.cbrt,
    "dist": _dist, "fsum": _fsum, "prod": _prod,
}
_ITERABLES = frozenset({"dist", "fsum", "prod"})


def wrapper(name, serving):
    """``math``'s function ``name`` as a user's name for it while a plan traces
    again: on a traced argument, in a call ``serving(caller file)`` says this
    trace serves, :data:`IMPLEMENTATIONS`' function; else ``math``'s."""
    original, impl = getattr(math, name), IMPLEMENTATIONS[name]

    def call(*args, **kwargs):
        if not holds_tracer((*args, *kwargs.values())) or \
                not serving(sys._getframe(1).f_code.co_filename):
            return original(*args, **kwargs)
        if name in _ITERABLES:
            return impl(*args, **kwargs)
        return impl(*map(_scalar, args), **kwargs)

    functools.update_wrapper(call, original)
    call.__hybridad_original__ = original
    return call


def module_proxy(wrappers):
    """A stand-in for the ``math`` module in a user's namespace: ``wrappers``
    (name -> :func:`wrapper`) for the functions of :data:`IMPLEMENTATIONS`,
    ``math``'s own attributes for the rest (``math.pi``, ``math.floor``)."""
    proxy = types.ModuleType("math", math.__doc__)
    proxy.__dict__.update({k: v for k, v in vars(math).items() if k not in ("__name__",)})
    proxy.__dict__.update(wrappers)
    proxy.__hybridad_original__ = math
    return proxy
