"""Arrays ``f`` makes with numpy, traced: ``xx = np.zeros(n + 2); xx[1:-1] = x``.

numpy writes a value into an array through its own memory, so a traced value
written into an array that ``f`` made with ``np.zeros`` -- or a list holding
traced values handed to an ``asarray`` bound before tracing began (``from
numpy import asarray``) -- reaches the tracer's ``__array__``, which raises
:class:`~hybridad.errors.ConversionError`.  A plan then traces ``f`` again
(:func:`traced_again`) with the arrays ``f`` makes traced from the start:
numpy's constructors of new arrays (:data:`MADE`: from shapes, or from Python
lists and copies) return their array as a traced constant, so every write
into it is traced by numpy's semantics (:mod:`.objects`), and its value flows
into the graph.  The first trace's nodes are dropped
(:meth:`~hybridad.core.trace.Trace.mark`).

The same second trace serves lists: numpy's functions convert a list or
tuple argument with ``np.asarray`` in their own code (``np.mean([a, b])``,
``np.linalg.norm([dx, dy])``, ``np.max((u, v))``), where ``__array_function__``
does not reach a tracer inside it.  The functions of :data:`LISTED` are
wrappers then too, which make such an argument one traced array first
(:func:`.numpy_construct.construct`, numpy's layout of the list) and call the
function on it.

Only the second trace of such a function makes its arrays traced, and only
for callers outside numpy and scipy (their own code keeps numpy arrays; numpy's
polynomial package counts as the user's: its series arithmetic fills arrays
it makes with the coefficients).  The
module attributes (``np.zeros``, ...) and the names of the user's module that
are bound to them (``from numpy import zeros, asarray``) are wrappers while it
runs, each falling back to numpy's function on every other thread and after
the trace; arrays ``f`` did not make (arguments, globals) stay numpy arrays,
and a traced value written into one is still refused, by name.
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys
import threading

import numpy as np

from .._forksafe import Lock
from ..core.supported import SUPPORTED_DTYPES
from ..core.trace import current_trace
from ..core.tracer import Tracer
from ..errors import (ConversionError, MathCallError, TracingError, raised_in_chain,
                      swallowed_conversion, traced_as_users)
from . import math_calls, numpy_scalar_types
from .numpy_construct import ALIASES, ORIGINALS, WRAPPERS, _literal, construct, holds_tracer, served

__all__ = ["MADE", "made", "maker", "traced_again"]

#: numpy's functions that make a new array: from shapes, from Python data, copies
MADE = ("zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like",
        "full_like", "eye", "identity", "array", "asarray", "asanyarray",
        "ascontiguousarray")
#: numpy's functions of array_like arguments that code hands lists of values
#: (``np.mean([a, b])``): in the second trace a list or tuple holding traced
#: values becomes one traced array before the call ("linalg." names: np.linalg's)
LISTED = ("sum", "mean", "std", "var", "max", "min", "amax", "amin", "prod", "median",
          "average", "ptp", "nansum", "nanmean", "nanstd", "nanvar", "nanmax", "nanmin",
          "nanprod", "nanmedian", "cumsum", "cumprod", "diff", "sort", "argmax", "argmin",
          "argsort", "percentile", "quantile", "nanpercentile", "nanquantile", "trapezoid",
          "clip", "dot", "inner", "outer", "vdot", "cross", "all", "any", "count_nonzero",
          "round", "around", "ravel", "reshape", "transpose", "flip", "roll", "tile", "repeat",
          "polyval", "linalg.norm", "linalg.det", "linalg.inv", "linalg.solve")
#: each as numpy has it (the array family's as hybridad was imported)
_NUMPY = {name: ORIGINALS.get(name, getattr(np, name)) for name in MADE}
_state = threading.local()
_lock = Lock()
_installed = {}  # (id(namespace), name) -> [namespace, numpy's value, users]


def made(out, given):
    """``out`` as a traced constant when ``f`` made it (not ``given`` itself,
    not a tracer, a dtype every backend runs); else ``out``."""
    if type(out) is np.ndarray and out is not given and out.dtype in SUPPORTED_DTYPES:
        return _literal(out)
    return out


def maker(name):
    """numpy's function that makes the array of constructor ``name`` (of
    :data:`MADE`) when it becomes a traced constant: ``zeros`` for ``empty``
    (no arbitrary memory in a plan's constants), the array family's wrapper
    (tracers inside lists too), else numpy's."""
    if name in ("empty", "empty_like"):
        return _NUMPY[name.replace("empty", "zeros")]
    return WRAPPERS.get(name, _NUMPY[name])


def _serving(caller):
    """Whether a wrapper serves a call from file ``caller``: in this thread's
    second trace, from the user's code (not numpy's, scipy's or hybridad's)."""
    return getattr(_state, "on", False) and current_trace() is not None and \
        traced_as_users(caller)


def _wrapper(name):
    numpy_fn = _NUMPY[name]
    serve = maker(name)

    def make(*args, **kwargs):
        caller = sys._getframe(1).f_code.co_filename
        if not _serving(caller):  # (numpy's, scipy's and hybridad's own code:
            return served(name, caller, args, kwargs) if name in ORIGINALS else \
                numpy_fn(*args, **kwargs)  # the array family as its wrapper serves them)
        if name in ("full", "full_like"):
            fill = args[1] if len(args) > 1 else kwargs.get("fill_value")
            if isinstance(fill, Tracer):  # (numpy's converts it: asarray inside numpy)
                return _traced_full(name, args, kwargs, fill)
        out = serve(*args, **kwargs)
        given = args[0] if args else kwargs.get("a", kwargs.get("object"))
        return out if type(out) is Tracer else made(out, given)

    functools.update_wrapper(make, numpy_fn)
    make.__hybridad_original__ = numpy_fn
    return make


def _traced_full(name, args, kwargs, fill):
    """``np.full(shape, t)`` / ``np.full_like(a, t)`` of a traced fill value: a
    new traced array of ``t`` broadcast to the shape, in numpy's dtype (the
    fill's, or ``a``'s for ``full_like``; ``dtype=`` casts)."""
    base = args[0] if args else kwargs.get("shape" if name == "full" else "a")
    dtype = args[2] if len(args) > 2 else kwargs.get("dtype")
    shape = base
    if name == "full_like":
        shape = np.shape(base) if kwargs.get("shape") is None else kwargs["shape"]
        if dtype is None:
            dtype = base.dtype if isinstance(base, Tracer) else np.asarray(base).dtype
    if dtype is not None and np.dtype(dtype) != fill.dtype:
        fill = fill.astype(dtype)
    return np.broadcast_to(fill, shape).copy()


def _as_array(value):
    """A list or tuple holding traced values as one traced array; else ``value``."""
    return construct(value, copy=None) if isinstance(value, (list, tuple)) and \
        holds_tracer(value) else value


def _lister(fn):
    """``fn`` with its list arguments holding traced values made traced arrays
    first, in the second trace of this thread's user code (:data:`LISTED`)."""
    def call(*args, **kwargs):
        if _serving(sys._getframe(1).f_code.co_filename):
            args = tuple(map(_as_array, args))
            kwargs = {key: _as_array(value) for key, value in kwargs.items()}
        return fn(*args, **kwargs)

    functools.update_wrapper(call, fn)
    call.__hybridad_original__ = fn
    return call


def _listed(name):
    return getattr(np.linalg, name[7:]) if name.startswith("linalg.") else getattr(np, name)


_WRAPPERS = {name: _wrapper(name) for name in MADE}
_NUMPY.update({name: _listed(name) for name in LISTED})
_WRAPPERS.update({name: _lister(_NUMPY[name]) for name in LISTED})
_BY_ID = {id(fn): name for name, fn in _NUMPY.items()}
_BY_ID.update({id(fn): name for name, fn in WRAPPERS.items()})
# (numba types each wrapper as the function it wraps: another thread may compile
# code that calls it while it is in numpy's namespace)
ALIASES.extend((_NUMPY[name], wrapper) for name, wrapper in _WRAPPERS.items()
               if name not in ORIGINALS)
# the math module and its functions, by the user's names for them (math_calls)
_MATH = {f"math.{name}": math_calls.wrapper(name, _serving)
         for name in math_calls.IMPLEMENTATIONS if hasattr(math, name)}
_WRAPPERS.update(_MATH)
_WRAPPERS["math"] = math_calls.module_proxy({k[5:]: w for k, w in _MATH.items()})
_BY_ID.update({id(getattr(math, k[5:])): k for k in _MATH})
_BY_ID[id(math)] = "math"
# numpy's scalar types and numpy itself, by the user's names (numpy_scalar_types)
_TYPES = {t: numpy_scalar_types.scalar_type(t, _serving, construct, holds_tracer)
          for t in numpy_scalar_types.TYPES}
_WRAPPERS.update({f"type.{t.__name__}": w for t, w in _TYPES.items()})
_BY_ID.update({id(t): f"type.{t.__name__}" for t in _TYPES})
_WRAPPERS["numpy"] = numpy_scalar_types.numpy_proxy(_TYPES)
_BY_ID[id(np)] = "numpy"
#: what is put in the user's namespaces only (numpy's own keeps its types), by
#: the kind of conversion that asks for it (:attr:`ConversionError.kinds`)
_USERS_ONLY = {k: "math" if k.startswith("math") else "types" for k in _WRAPPERS
               if k.startswith(("type.", "math")) or k == "numpy"}


def _install(namespaces, kinds=()):
    """Put the wrappers in ``np`` and, for each of ``namespaces`` (a module's
    globals), in place of the names bound to numpy's constructors -- and to
    the math module and numpy's scalar types, for the ``kinds`` of conversion
    that asked for them; the keys put (each counted: threads share an
    installation)."""
    keys = []
    with _lock:
        for k, ns in enumerate((vars(np), vars(np.linalg), *namespaces)):
            for key, value in list(ns.items()):
                slot = _installed.get((id(ns), key))  # (put by another thread: shared)
                if slot is None:
                    name = _BY_ID.get(id(value))
                    if name is None or not isinstance(key, str) or name in _USERS_ONLY and \
                            (k < 2 or _USERS_ONLY[name] not in kinds):
                        continue
                    slot = _installed[(id(ns), key)] = [ns, value, 0]
                    ns[key] = _WRAPPERS[name]
                slot[2] += 1
                keys.append((id(ns), key))
    return keys


def _uninstall(keys):
    with _lock:
        for k in keys:
            slot = _installed[k]
            slot[2] -= 1
            if slot[2] == 0:
                ns, value, _ = _installed.pop(k)
                if ns.get(k[1]) is _WRAPPERS[_BY_ID[id(value)]]:
                    ns[k[1]] = value


@contextlib.contextmanager
def _arrays_made_traced(namespaces, kinds=()):
    keys = _install(namespaces, kinds)
    _state.on = True
    try:
        yield
    finally:
        _state.on = False
        _uninstall(keys)


def traced_again(call, trace):
    """``call()`` -- the user's function on tracers -- and, when it converted a
    traced value into a numpy array (:class:`~hybridad.errors.ConversionError`),
    ``call()`` again in ``trace`` with the arrays it makes traced; the first
    attempt's nodes are dropped.  Raises the second attempt's error (chained
    to the first) when that fails too."""
    if getattr(_state, "on", False):  # a nested call of an outer second trace
        return call()
    mark = trace.mark()
    out, first = _attempt(call)
    if first is None:
        return out
    kinds, spaces = set(first.kinds), list(first.user_globals or ())
    while True:  # (once more for each kind a later conversion adds: math and a made array)
        trace.rollback(mark)
        with _arrays_made_traced(spaces, kinds):
            out, second = _attempt(call)
        if second is None:
            return out
        if not set(second.kinds) - kinds:
            break
        kinds |= second.kinds
        spaces += [ns for ns in second.user_globals or () if all(ns is not s for s in spaces)]
    if isinstance(second, MathCallError):  # (a float() of its own, not math's)
        raise TracingError(str(second)) from None
    raise ConversionError(
        f"{second} (traced again with the arrays f makes as traced arrays: this array was "
        "not made inside f -- an argument's buffer, a global or an array f captured -- and "
        "a traced value cannot be written into it)", second.user_globals) from first


def _attempt(call):
    """``(call(), None)``, or ``(None, the ConversionError)`` when it converted
    a traced value into numpy's memory -- the error raised, or one that code on
    the way swallowed before it failed otherwise; any other error propagates."""
    swallowed_conversion(clear=True)
    try:
        return call(), None
    except (TracingError, ValueError, TypeError) as exc:
        conversion = _conversion(exc) or swallowed_conversion()
        if conversion is None:
            raise
        return None, conversion


def _conversion(exc):
    """The :class:`~hybridad.errors.ConversionError` ``exc`` is, or that numpy
    turned into its own error (``a[i] = t`` with ``a`` a numpy array: numpy
    tries the value as a number, then as a sequence, and raises ValueError)."""
    return raised_in_chain(exc, ConversionError, 4)
