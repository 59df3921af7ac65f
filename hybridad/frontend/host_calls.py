"""Library functions on traced values that need no derivative: run them as numpy does.

A numpy function without a traced implementation, or a Python function of
scipy that converts its input with ``np.asarray`` (``scipy.special.comb``,
``scipy.stats.rankdata``, ``scipy.signal.lfilter``), cannot be traced.
Applied to values that are not differentiated (data arguments, constants),
it needs no derivative either: :func:`host_call` records it as ``host_call``
nodes (:mod:`hybridad.ops.host`) that run the function itself on every call
and copy its result into a preallocated buffer.  A differentiated argument
that reaches such a node is refused when the plan is built, naming the
function and the user's line.

Two entry points lead here:

- :func:`hybridad.frontend.numpy_api.apply_function`, for a numpy function
  that reaches ``__array_function__`` without an implementation;
- :func:`install`, which wraps the public Python functions of the scipy
  modules in :data:`LIBRARY_MODULES` (once each, when a trace begins after
  they were imported): the wrapper runs scipy's function unchanged, and only
  when it raises :class:`~hybridad.TracingError` on traced arguments (it
  needed their values) records the call as a host call instead.
  Functions hybridad traces itself (``scipy.special.logsumexp``,
  ``scipy.stats.norm.logpdf``, ...) are wrapped before and keep their traced
  implementation.

The function's result shape and dtype come from running it on placeholder
arrays while tracing (all ones, then counting values); a function whose
result shape changes with the values (``np.unique``) is run on the traced
call's values where only data arguments and constants reach it (their
values decided: a call with others traces anew), refused otherwise; and a
call whose result does not have the traced shape raises.
"""

from __future__ import annotations

import functools
import numbers
import types

import numpy as np

from ..errors import TracingError, user_location
from ..ops.host import invoke, on_placeholders, placeholders, probe, resolve
from ..core.tracer import Tracer

__all__ = ["LIBRARY_MODULES", "host_call", "install"]

#: scipy modules whose public Python functions run as host calls on traced data
LIBRARY_MODULES = ("scipy.special", "scipy.stats", "scipy.linalg", "scipy.integrate",
                   "scipy.signal", "scipy.ndimage", "scipy.interpolate",
                   "scipy.spatial.distance", "scipy.cluster.vq")


#: constant arrays of up to this many elements are kept in a call's template
#: with their values (the function is probed on placeholders of its traced
#: operands only: ``scipy.signal.medfilt``'s ``kernel_size`` as an array of
#: ones asked for a rank outside its window)
LITERAL_ELEMENTS = 64


class _Encoder:
    """The literal template of a call: arrays become operands ``("a", k)``."""

    def __init__(self, path):
        self.path = path
        self.operands = []

    def __call__(self, value):
        if type(value) is not Tracer and isinstance(value, np.ndarray) and \
                value.dtype.kind == "c":  # (a complex traced value is refused below, by type)
            raise NotImplementedError(f"{self.path} of complex traced values is not supported "
                                      f"(at {user_location()})")
        if type(value) is np.ndarray and value.size <= LITERAL_ELEMENTS and \
                value.dtype.kind in "biuf":  # (a size, an axis list: its values, not ones)
            return ("c", (value.dtype.str, value.shape, value.tobytes()))
        if isinstance(value, (Tracer, np.ndarray)):
            self.operands.append(value)
            return ("a", len(self.operands) - 1)
        if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
            return ("l" if isinstance(value, list) else "t", tuple(map(self, value)))
        if isinstance(value, np.dtype) or (isinstance(value, type)
                                           and issubclass(value, np.generic)):
            return ("d", np.dtype(value).str)
        if isinstance(value, np.generic):
            value = value.item()
        if value is None or isinstance(value, (bool, int, float, complex, str)):
            return ("v", value)
        raise NotImplementedError(
            f"{self.path} on traced values (at {user_location()}): hybridad runs it as numpy "
            f"does on every call, but cannot hold its argument of type {type(value).__name__}")


def _structure(path, template, shapes):
    """How many arrays ``path`` returns (``None``: one array, not a tuple)."""
    with on_placeholders():
        result = invoke(path, template, placeholders(shapes, "ones"))
    if type(result) is tuple:
        return len(result)
    if not isinstance(result, (np.ndarray, np.generic, numbers.Number)):
        raise NotImplementedError(
            f"{path} on traced values (at {user_location()}): it returns a "
            f"{type(result).__name__}, and hybridad runs a function it has no rules for on "
            "every call only where it returns arrays or a plain tuple of them; call it "
            "outside the differentiated function, or on arrays that do not depend on the "
            "arguments you differentiate")
    return None


def host_call(path, args, kwargs):
    """Record ``path(*args, **kwargs)`` on traced values as ``host_call`` nodes.

    Parameters
    ----------
    path : str
        The function's public import path (``"scipy.special.comb"``); the
        generated code and pickled plans find it there again.
    args, kwargs
        The call's arguments: tracers and arrays become the nodes' operands,
        numbers, strings, ``None``, dtypes and lists or tuples of these are
        kept literally; anything else is refused.

    Returns
    -------
    Tracer or tuple of Tracer
        As the function returns one array or a tuple of arrays.
    """
    from ..core.trace import bind

    if kwargs.get("out") is not None:
        raise NotImplementedError(f"{path}(..., out=) on traced values (at {user_location()}): "
                                  "take its result instead")
    encode = _Encoder(path)
    template = (tuple(map(encode, args)), tuple((k, encode(v)) for k, v in kwargs.items()))
    shapes = tuple((tuple(np.shape(a)), np.dtype(a.dtype)) for a in encode.operands)
    where = user_location()
    try:
        count = _structure(path, template, shapes)
        items = [None] if count is None else list(range(count))
        found = [probe(path, template, item, shapes) for item in items]
    except (TracingError, NotImplementedError):
        raise
    except Exception as exc:  # noqa: BLE001 -- the function's own refusal, on placeholders
        raise NotImplementedError(
            f"{path} on traced values (at {where}) is not supported: hybridad has no "
            f"derivative rule for it, and running it as numpy does on placeholder arrays of "
            f"the traced shapes (to learn its result's shape) failed: "
            f"{type(exc).__name__}: {exc}") from exc
    if any(shape is None for shape, _ in found):
        known = _decided(encode.operands)
        if known is not None:  # (data arguments' values: the function on them, guarded)
            return _constants(invoke(path, template, known))
        raise TracingError(
            f"{path} of a traced array at {where}: the shape of its result depends on the "
            "values, which are not known while tracing (hybridad records one static graph)")
    outs = tuple(bind("host_call", *encode.operands, func=path, template=template, item=item,
                      where=where) for item in items)
    return outs[0] if count is None else outs


def _decided(operands):
    """The operands' values at the traced call, each traced one a decision
    (:func:`hybridad.core.decisions.decide_constant`), where no differentiated
    argument reaches any of them; else None."""
    from ..core.decisions import can_decide, decide_constant, differentiated

    traced = [a for a in operands if isinstance(a, Tracer)]
    if not traced or not can_decide(traced[0]._trace) or \
            any(differentiated(a._trace, a.node) for a in traced):
        return None
    return [decide_constant(a) if isinstance(a, Tracer) else np.asarray(a) for a in operands]


def _constants(result):
    """A function's result (an array, or a tuple of them) as traced constants."""
    from ..core.trace import current_trace

    trace = current_trace()

    def const(value):
        return Tracer(trace.const(np.ascontiguousarray(value), True), trace)
    return tuple(map(const, result)) if isinstance(result, tuple) else const(result)


def public_path(func):
    """The import path at which ``func`` is found again, or ``None``."""
    from ..errors import public_module

    name = getattr(func, "__name__", None)
    module = getattr(func, "__module__", None)
    if not name or not module:
        return None
    path = f"{public_module(module)}.{name}"
    try:
        return path if resolve(path) is func else None
    except (ImportError, AttributeError, ValueError):
        return None


# --------------------------------------------------------------------------
# scipy's Python functions
# --------------------------------------------------------------------------
def _fallback(original, path):
    @functools.wraps(original)
    def dispatch(*args, **kwargs):
        if not _traced(args, kwargs):
            return original(*args, **kwargs)
        try:  # (its Python decisions on values are guarded, as the user's own)
            return original(*args, **kwargs)
        except TracingError:  # it needed the values: run it on them, call by call
            return host_call(path, args, kwargs)
    dispatch.__hybridad_original__ = original
    return dispatch


def _traced(args, kwargs):
    def traced(v):
        return isinstance(v, Tracer) or (type(v) in (list, tuple) and any(map(traced, v)))
    return any(map(traced, args)) or any(map(traced, kwargs.values()))


_INSTALLED = set()


def install(only=None):
    """Wrap the public Python functions of every module of
    :data:`LIBRARY_MODULES` imported so far, or of the one named ``only``
    (each module once)."""
    from .after_import import loaded

    for name in LIBRARY_MODULES:
        module = loaded(name, only)  # (a module still executing: when its import is done)
        if module is None or name in _INSTALLED or only not in (None, name):
            continue
        _INSTALLED.add(name)
        for attr, obj in list(vars(module).items()):
            if attr.startswith("_") or not isinstance(obj, types.FunctionType) or \
                    getattr(obj, "__hybridad_original__", None) is not None or \
                    not (getattr(obj, "__module__", None) or "").startswith("scipy"):
                continue
            setattr(module, attr, _fallback(obj, f"{name}.{attr}"))
