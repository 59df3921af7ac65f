"""The ndarray methods and attributes of tracers.

Every public method and attribute of ``numpy.ndarray`` either works as
numpy's -- same value, same derivative, same object semantics (views, copies,
scalars; see :func:`hybridad.frontend.objects.settle`) -- or raises
:class:`~hybridad.TracingError` / ``NotImplementedError`` naming it
(:data:`REFUSED`); ``tests/test_ndarray_surface.py`` holds the classification
and fails when numpy grows a name that nobody classified.

A method that is a numpy function of its array (``x.sum(...)`` is
``np.sum(x, ...)``) calls that function, so numpy's own argument handling
runs first and hybridad's implementation second.  In-place methods
(``sort``, ``partition``, ``fill``) update the tracer object as the in-place
operators do (:func:`hybridad.frontend.objects.assign`).
"""

from __future__ import annotations

import numbers
import types

import numpy as np

from ..errors import TracingError, user_location
from .numpy_api import _tracer, ravel, reshape, swapaxes, transpose
from .objects import assign, link_view, settle
from ..core.supported import check_dtype
from ..core.observe import unobserved
from ..core.trace import bind
from ..core.tracer import READONLY, SCALAR, Tracer, _no_memory, _value_dependent

__all__ = ["REFUSED"]

#: ndarray methods and attributes of tracers, installed on :class:`Tracer` in one
#: place at the end of this module
_METHODS = {}

#: methods and attributes of ndarray that raise on a tracer (named in the error)
REFUSED = set()


def _as_function(func):
    def method(self, *args, **kwargs):
        return func(self, *args, **kwargs)

    method.__name__ = func.__name__
    method.__doc__ = f"``numpy.{func.__name__}(x, ...)`` (numpy's arguments)."
    return method


for _name, _func in [("all", np.all), ("any", np.any), ("argmax", np.argmax),
                     ("argmin", np.argmin), ("argpartition", np.argpartition),
                     ("argsort", np.argsort), ("clip", np.clip), ("cumprod", np.cumprod),
                     ("cumsum", np.cumsum), ("diagonal", np.diagonal), ("dot", np.dot),
                     ("max", np.max), ("mean", np.mean), ("min", np.min),
                     ("prod", np.prod), ("ravel", np.ravel),
                     ("repeat", np.repeat), ("round", np.round),
                     ("searchsorted", np.searchsorted), ("squeeze", np.squeeze),
                     ("std", np.std), ("sum", np.sum), ("swapaxes", np.swapaxes),
                     ("take", np.take), ("trace", np.trace), ("var", np.var)]:
    _METHODS[_name] = _as_function(_func)
_METHODS["nonzero"] = lambda self: np.nonzero(self)  # (lazy positions: numpy_selected)
_METHODS["conj"] = _METHODS["conjugate"] = lambda self: np.conjugate(self)
_METHODS["compress"] = lambda self, condition, axis=None, out=None: np.compress(
    condition, self, axis, out)


# ----------------------------------------------------------------------------
# copies, views, shapes
# ----------------------------------------------------------------------------


def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
    """``x.astype(dtype)``: a copy (``copy=False``: ``x`` itself when the dtype
    is the same); a numpy scalar stays one; a complex dtype makes a complex
    value of zero imaginary part (:mod:`.numpy_complex`)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "c" and self.dtype.kind in "biuf":
        from .numpy_complex import ComplexTracer

        real = np.dtype(np.float32 if dtype == np.complex64 else np.float64)
        return ComplexTracer(astype(self, real), real.type(0))
    check_dtype(dtype, "astype's target", where=user_location)
    if not np.can_cast(self.dtype, dtype, casting):
        raise TypeError(f"Cannot cast array data from {self.dtype!r} to {dtype!r} according "
                        f"to the rule '{casting}'")
    if dtype == self.dtype:
        return self if not copy else Tracer(self.node, self._trace, self._flags & SCALAR)
    return Tracer(bind("cast", self, dtype=dtype).node, self._trace, self._flags & SCALAR)


def copy(self, order="C"):
    """A copy (a new array: in-place changes to it do not reach ``x``)."""
    return Tracer(self.node, self._trace, self._flags & SCALAR)


def flatten(self, order="C"):
    """``x.flatten()``: a 1-d copy."""
    return settle(ravel(self, order), [self], "array")


def reshape_method(self, *shape, order="C", copy=None):
    if len(shape) == 1 and not isinstance(shape[0], numbers.Integral):
        shape = shape[0]
    r = reshape(self, shape, order=order)
    return settle(r, [self], "array" if copy else "view")


def transpose_method(self, *axes):
    if len(axes) == 1 and not isinstance(axes[0], numbers.Integral):
        axes = axes[0]
    return settle(transpose(self, axes or None), [self], "view")


def view(self, dtype=None, type=None):  # noqa: A002 - numpy's names
    """``x.view()`` (or of the same dtype, as ndarray): a view of ``x``."""
    same = dtype is None or dtype is np.ndarray or np.dtype(dtype) == self.dtype
    if not same or type not in (None, np.ndarray):
        raise NotImplementedError(
            f"x.view({dtype!r}{', type=' + repr(type) if type is not None else ''}) at "
            f"{user_location()}: reinterpreting a traced array's memory as another dtype or "
            "type is not supported; use x.astype(...) to convert values")
    v = Tracer(self.node, self._trace, self._flags & READONLY)
    link_view(v, self)
    return v


def to_device(self, device, /, *, stream=None):
    if device != "cpu":
        raise ValueError(f"Device not understood. Only 'cpu' is allowed, but received: "
                         f"{device}")
    return self


_METHODS["astype"] = astype
_METHODS["copy"] = copy
_METHODS["flatten"] = flatten
_METHODS["reshape"] = reshape_method
_METHODS["transpose"] = transpose_method
_METHODS["view"] = view
_METHODS["to_device"] = to_device
_METHODS["T"] = property(lambda self: settle(transpose(self), [self], "view"))
_METHODS["mT"] = property(lambda self: settle(swapaxes(self, -1, -2), [self], "view"))
_METHODS["device"] = property(lambda self: "cpu")
_METHODS["itemsize"] = property(lambda self: self.dtype.itemsize)
_METHODS["nbytes"] = property(lambda self: self.size * self.dtype.itemsize)


def _real(self):
    if self.dtype.kind == "c":
        raise NotImplementedError("hybridad: .real of complex arrays is not supported")
    return self  # numpy: a view of x, which behaves as x itself


def _imag(self):
    if self.dtype.kind == "c":
        raise NotImplementedError("hybridad: .imag of complex arrays is not supported")
    zeros = np.zeros(self.shape, self.dtype)  # numpy: read-only zeros
    zeros.flags.writeable = False
    return zeros


def _refuse_in_place(self, what):
    raise TracingError(f"{what} at {user_location()} writes into a traced array in place; "
                       "build the result functionally (np.where, np.concatenate, ...)")


_METHODS["real"] = property(_real, lambda self, value: _refuse_in_place(self, "setting x.real"))
_METHODS["imag"] = property(_imag, lambda self, value: _refuse_in_place(self, "setting x.imag"))


class _Flat:
    """``x.flat`` of a tracer: reading works as numpy's flatiter; writing is refused."""

    __slots__ = ("_x",)

    def __init__(self, x):
        self._x = x

    def __getitem__(self, index):
        return ravel(self._x)[index]

    def __iter__(self):
        return iter(ravel(self._x))

    def __len__(self):
        return self._x.size

    def __setitem__(self, index, value):
        _refuse_in_place(self._x, "x.flat[...] = ...")

    def copy(self):
        return flatten(self._x)

    def __array__(self, dtype=None, copy=None):
        return self._x.__array__()


_METHODS["flat"] = property(lambda self: _Flat(self),
                       lambda self, value: _refuse_in_place(self, "setting x.flat"))


# ----------------------------------------------------------------------------
# in place: the tracer object takes the new value
# ----------------------------------------------------------------------------


def sort(self, axis=-1, kind=None, order=None, *, stable=None):
    """``x.sort()`` in place (``np.sort``'s values and derivative)."""
    _update(self, np.sort(self, axis, kind, order, stable=stable), "x.sort()")


def partition(self, kth, axis=-1, kind="introselect", order=None):
    """``x.partition(kth)`` in place (as ``np.partition``)."""
    _update(self, np.partition(self, kth, axis, kind, order), "x.partition()")


def fill(self, value):
    """``x.fill(value)``: every element set to ``value`` (cast as numpy does)."""
    v = _tracer(value)
    if v.ndim:
        raise ValueError("Input object to fill must be a scalar")
    _update(self, np.broadcast_to(v.astype(self.dtype), self.shape), "x.fill()")


def _update(self, value, what):
    if self._flags & SCALAR:
        raise ValueError(f"{what} on a numpy scalar: numpy scalars are immutable")
    assign(self, value, what)


_METHODS["sort"] = sort
_METHODS["partition"] = partition
_METHODS["fill"] = fill


# ----------------------------------------------------------------------------
# refused: values, memory, in-place writes the trace cannot express
# ----------------------------------------------------------------------------


def _refuse(name, why, instead, error=TracingError):
    def method(self, *args, **kwargs):
        raise error(f"x.{name}() at {user_location()}: {why}. {instead}")

    method.__name__ = name
    REFUSED.add(name)
    _METHODS[name] = method


_VALUE = "it needs the traced array's values, which are not known while tracing"
for _name in ("tobytes", "tofile", "dump", "dumps"):
    _refuse(_name, _VALUE, "Call it on the function's inputs or results, outside the trace.")
REFUSED.update({"item", "tolist"})  # (hybridad/core/tracer.py)
_refuse("choose", "it uses the traced values of x as indices", "Use np.where or np.select "
        "with constant choices.")
for _name, _instead in [("put", "Build the result with np.where or np.concatenate."),
                        ("resize", "Use np.resize(x, shape) or np.concatenate."),
                        ("setfield", "Build the result functionally."),
                        ("setflags", "A traced array has no flags; leave them out.")]:
    _refuse(_name, "it writes into the traced array in place, which tracing does not follow",
            _instead)
for _name in ("getfield", "byteswap"):
    _refuse(_name, "it reinterprets the array's memory, which a traced array does not have",
            "Use x.astype(...) to convert values.", NotImplementedError)
for _name in ("base", "ctypes", "data", "flags", "strides"):
    _METHODS[_name] = property((lambda n: lambda self: _no_memory(f".{n}"))(_name))
    REFUSED.add(_name)


# numpy scalars' own methods (np.float64 is a float): on a traced scalar they
# need its value; a traced array, like an ndarray, has none of them
def _scalar_only(name):
    def get(self):
        if not self._flags & SCALAR:
            raise AttributeError(f"'numpy.ndarray' object has no attribute '{name}'")
        return lambda *args, **kwargs: _value_dependent(f"x.{name}()", "Keep it an array.")

    return property(get)


for _name in ("is_integer", "as_integer_ratio", "hex", "fromhex", "__getnewargs__"):
    _METHODS[_name] = _scalar_only(_name)
    REFUSED.add(_name)


# (each runs with the observing profiler suspended: hybridad's code, no user code)
for _name, _member in _METHODS.items():
    if isinstance(_member, property) and _member.fget is not None:
        _member = property(unobserved(_member.fget), _member.fset, _member.fdel, _member.__doc__)
    elif isinstance(_member, types.FunctionType):
        _member = unobserved(_member)
    setattr(Tracer, _name, _member)
