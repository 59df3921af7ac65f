"""What the translator computes with: values known while translating
(:class:`Const`), scalars in LLVM registers (:class:`Scalar`), arrays
(:class:`ArrayV`: a data pointer, a shape and strides, each a constant or a
register) and tuples (:class:`TupleV`).

Scalar types are numpy dtypes.  Arithmetic follows numba's typing, which is
numpy's promotion of the operands' dtypes with Python's literals typed as
int64, float64 and bool (numba types ``2`` as int64, so ``float32 * 2`` is
float64, as in numba).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

__all__ = ["CtypesOf", "UNDEF", "Unsupported", "Const", "Scalar", "ArrayV", "TupleV", "declare",
           "declare_global", "lltype", "promote",
           "F64", "F32", "I64", "I32", "I8", "U8", "BOOL", "INTP"]


#: the value of a name bound on some paths only (reading it is Unsupported)
UNDEF = object()


class Unsupported(Exception):
    """The source uses something the translator does not implement: the
    caller compiles it with numba instead."""


F64, F32 = np.dtype(np.float64), np.dtype(np.float32)
I64, I32, I16, I8 = (np.dtype(t) for t in (np.int64, np.int32, np.int16, np.int8))
U64, U32, U16, U8 = (np.dtype(t) for t in (np.uint64, np.uint32, np.uint16, np.uint8))
BOOL = np.dtype(np.bool_)
INTP = I64

_LL = {F64: ir.DoubleType(), F32: ir.FloatType(), BOOL: ir.IntType(1)}


def lltype(dtype):
    """The LLVM type of a scalar of ``dtype`` (in registers: bool is i1)."""
    t = _LL.get(dtype)
    if t is not None:
        return t
    if dtype.kind in "iu":
        return ir.IntType(8 * dtype.itemsize)
    raise Unsupported(f"dtype {dtype}")


def memtype(dtype):
    """The LLVM type of an element of ``dtype`` in memory (bool is a byte)."""
    return ir.IntType(8) if dtype == BOOL else lltype(dtype)


def promote(*dtypes):
    """numba's result dtype of arithmetic on these (bools count as int64)."""
    ds = [I64 if d == BOOL else d for d in dtypes]
    return np.result_type(*ds) if len(ds) > 1 else ds[0]


class Const:
    """A value known while translating: a Python int, float or bool, a numpy
    scalar, a tuple of constants, a string, None, a slice, a type, a module,
    a function."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __repr__(self):
        return f"Const({self.value!r})"

    @property
    def dtype(self):
        """The dtype numba gives the constant when it is a number, else None."""
        v = self.value
        if isinstance(v, (bool, np.bool_)):
            return BOOL
        if isinstance(v, int):
            return I64
        if isinstance(v, float):
            return F64
        if isinstance(v, np.generic) and v.dtype.kind in "biuf":
            return v.dtype
        return None


class Scalar:
    """A number in an LLVM register."""

    __slots__ = ("value", "dtype")

    def __init__(self, value, dtype):
        self.value = value
        self.dtype = np.dtype(dtype)

    def __repr__(self):
        return f"Scalar({self.dtype})"


class ArrayV:
    """An array: ``data`` (a pointer to its first element), ``shape`` and
    ``strides`` (bytes), each entry a Python int or an i64 register, and the
    layout numba would give it (``"C"``, ``"F"`` or ``"A"``)."""

    __slots__ = ("dtype", "data", "shape", "strides", "layout")

    def __init__(self, dtype, data, shape, strides, layout):
        self.dtype = np.dtype(dtype)
        self.data = data
        self.shape = list(shape)
        self.strides = list(strides)
        self.layout = layout

    @property
    def ndim(self):
        return len(self.shape)

    def __repr__(self):
        return f"ArrayV({self.dtype}, {self.shape!r}, {self.layout})"


class TupleV:
    """A tuple of values (any of the above)."""

    __slots__ = ("items",)

    def __init__(self, items):
        self.items = list(items)

    def __repr__(self):
        return f"TupleV({self.items!r})"


class CtypesOf:
    """``array.ctypes`` (its ``.data``; or, passed where a C pointer is
    taken, the data pointer)."""

    def __init__(self, array):
        self.array = array


def declare(module, name, ret, args, var_arg=False):
    """The function ``name`` of ``module``, declared (defined elsewhere) on
    first use.  What a module declares is what its object file records and a
    load binds (:func:`.engine.external_symbols`)."""
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args, var_arg=var_arg), name=name)
    return fn


def declare_global(module, name, ty):
    """The global variable ``name`` of type ``ty`` defined elsewhere (a C
    API object, an object mode site's cell), declared on first use."""
    g = module.globals.get(name)
    if g is None:
        g = ir.GlobalVariable(module, ty, name=name)
        g.linkage = "external"
    return g
