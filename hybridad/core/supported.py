"""What hybridad traces: the dtypes of traced arrays and the ndarray subclasses
whose semantics are ndarray's.

:data:`SUPPORTED_DTYPES` (those every backend runs) and :func:`check_dtype`;
:func:`plain_subclass` / :func:`refuse_subclass` tell an ndarray subclass
numpy computes with exactly as with an ndarray (np.memmap, a class adding
attributes only) from one it does not (masked arrays, np.matrix, classes
overriding operators).
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["SUPPORTED_DTYPES", "check_dtype", "plain_subclass", "refuse_subclass"]


#: dtypes a traced array may have: those every backend runs
SUPPORTED_DTYPES = frozenset(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
    np.uint64, np.float32, np.float64))
SUPPORTED_TEXT = "bool, (u)int8 to (u)int64, float32 and float64"


def check_dtype(dtype, what, where=None):
    """Raise a TypeError naming ``what`` unless ``dtype`` is traced by hybridad
    (NotImplementedError for complex dtypes, which may be one day).
    ``where``: text, or a callable giving it (called only to raise: finding
    the user's line costs a walk of the stack)."""
    dtype = np.dtype(dtype)
    if dtype.newbyteorder("=") in SUPPORTED_DTYPES:  # either byte order
        return
    hint = {"f": f"convert it with .astype(np.{'float32' if dtype.itemsize < 4 else 'float64'})",
            "c": "complex arrays are not supported yet (docs/limitations.md)"}.get(
        dtype.kind, "hybridad traces numbers only")
    where = where() if callable(where) else where
    at = f" at {where}" if where else ""
    error = NotImplementedError if dtype.kind == "c" else TypeError  # complex: not yet
    raise error(f"{what}{at} has dtype {dtype}; hybridad traces arrays of dtype "
                f"{SUPPORTED_TEXT}: {hint}")


#: what an ndarray subclass may define and still compute exactly as an ndarray
_HARMLESS = frozenset({"__new__", "__init__", "__array_finalize__", "__repr__", "__str__",
                       "__format__", "__reduce__", "__reduce_ex__", "__getstate__",
                       "__setstate__", "__doc__", "__module__", "__dict__", "__weakref__",
                       "__init_subclass__", "__class_getitem__", "__sizeof__", "__dir__"})


@functools.lru_cache(maxsize=None)
def plain_subclass(cls):
    """Whether ndarray subclass ``cls`` holds plain data that numpy computes with
    exactly as with an ndarray: np.memmap, or a class that overrides none of
    ndarray's methods, operators or protocols (it may add attributes and
    methods, and carry them through ``__new__`` / ``__array_finalize__``)."""
    if cls is np.ndarray or cls is np.memmap:
        return True
    names = set(dir(np.ndarray)) - _HARMLESS
    for k in cls.__mro__:
        if k is np.ndarray:
            return True
        if k is np.memmap:
            continue
        if names & set(vars(k)):
            return False
    return True


def refuse_subclass(obj, what):
    """Raise a TypeError naming ``what`` if ``obj`` is an ndarray subclass whose
    semantics differ from ndarray's (not :func:`plain_subclass`): masked arrays,
    np.matrix, recarrays, user classes overriding operators or methods."""
    cls = type(obj)
    if not issubclass(cls, np.ndarray) or plain_subclass(cls):
        return
    if issubclass(cls, np.ma.MaskedArray):
        why = ("its mask would be ignored; pass np.ma.filled(a, value), or the data and "
               "the mask as two arrays")
    elif issubclass(cls, np.matrix):
        why = ("* and ** are matrix products for np.matrix but elementwise for the arrays "
               "hybridad traces; pass np.asarray(m) and write @")
    else:
        why = "its methods and operators may not be ndarray's; pass np.asarray(a)"
    raise TypeError(f"{what} is a {cls.__module__}.{cls.__qualname__}, an ndarray subclass: "
                    f"hybridad traces plain ndarrays only ({why})")
