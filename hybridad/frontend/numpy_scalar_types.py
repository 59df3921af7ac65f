"""numpy's scalar types called on traced values: ``np.float64(loss)``, ``np.int64(W[:, -1])``.

Calling a scalar type converts its argument through numpy's memory -- for an
array, a cast -- so a traced value met ``Tracer.__array__`` and the plan
traced again (:func:`.numpy_made.traced_again`) with the arrays ``f`` makes
traced; the scalar types stayed numpy's, and the second trace failed the
same way.  Where the user's line that converted calls a scalar type
(:func:`hybridad.errors.conversion_kinds`), the next trace binds the user's
names for numpy (``import numpy as np``: a
stand-in module, :func:`numpy_proxy`) and for its scalar types (``from numpy
import float64``) now give :func:`scalar_type` stand-ins: a traced argument
is cast (``astype``, a numpy scalar for a 0-d value), anything else is
numpy's own call.  A stand-in is a subclass of the type with a metaclass
that makes it the type everywhere else -- ``isinstance``, ``==``,
``dtype=``, ``np.dtype(...)`` -- so code that uses the names as dtypes runs
unchanged.  Only the user's namespaces are touched (numpy's own module and
every other module keep numpy's types), and only during that trace.
"""

from __future__ import annotations

import sys
import types

import numpy as np

from ..core.tracer import SCALAR, Tracer

__all__ = ["TYPES", "numpy_proxy", "scalar_type"]

#: the scalar types a stand-in serves (the dtypes hybridad traces)
TYPES = (np.float64, np.float32, np.int64, np.int32, np.int16, np.int8, np.uint64, np.uint32,
         np.uint16, np.uint8, np.bool_)


class _ScalarType(type):
    """The metaclass of a stand-in: it is its type for ``isinstance``,
    ``issubclass``, ``==`` and hashing, and its call casts a traced value."""

    def __call__(cls, *args, **kwargs):
        real = cls.__hybridad_original__
        if len(args) == 1 and not kwargs and cls._serving(sys._getframe(1).f_code.co_filename):
            value = args[0]
            if isinstance(value, (list, tuple)) and cls._holds(value):
                value = cls._construct(value)
            if type(value) is Tracer:
                out = value.astype(real)
                if out.ndim == 0:  # (numpy gives a scalar of a 0-d value)
                    out._flags |= SCALAR
                return out
        return real(*args, **kwargs)

    def __instancecheck__(cls, obj):
        return isinstance(obj, cls.__hybridad_original__)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, cls.__hybridad_original__)

    def __eq__(cls, other):
        return other is cls or other is cls.__hybridad_original__

    def __hash__(cls):
        return hash(cls.__hybridad_original__)

    def __repr__(cls):
        return repr(cls.__hybridad_original__)


def scalar_type(real, serving, construct, holds):
    """The stand-in for numpy's scalar type ``real``: ``serving(caller file)``
    says whether a call is the second trace's own (else numpy's type is
    called); ``construct`` makes a list holding traced values one traced
    array (``holds`` tells such a list)."""
    return _ScalarType(real.__name__, (real,), {
        "__module__": real.__module__, "__qualname__": real.__qualname__,
        "__hybridad_original__": real, "_serving": staticmethod(serving),
        "_construct": staticmethod(construct), "_holds": staticmethod(holds)})


class _NumpyProxy(types.ModuleType):
    """numpy, as a user's namespace sees it while its function traces again:
    the scalar types' stand-ins, numpy's attributes for everything else (read
    when asked: the constructors' wrappers numpy's namespace holds then)."""

    def __getattr__(self, name):
        return getattr(np, name)


def numpy_proxy(stand_ins):
    """A stand-in for the numpy module in a user's namespace: ``stand_ins``
    (scalar type -> its stand-in) under every name numpy binds them to
    (``np.float64`` and ``np.double``, ``np.int64`` and ``np.intp``)."""
    proxy = _NumpyProxy("numpy", np.__doc__)
    for name, value in vars(np).items():
        if isinstance(value, type) and value in stand_ins:
            setattr(proxy, name, stand_ins[value])
    proxy.__hybridad_original__ = np
    return proxy
