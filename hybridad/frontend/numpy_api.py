"""The numpy surface of tracing: numpy functions and ndarray methods, expressed
with the primitives of :mod:`hybridad.ops`.

``HANDLED`` maps numpy functions to implementations; the tracer's
``__array_function__`` looks them up, and anything missing raises
``NotImplementedError`` naming the function.  Composite functions (mean, dot,
outer, stack, ...) are built from primitives here: no rules of their own.
"""

from __future__ import annotations

import math
import numbers
import operator

import sys
import types
import weakref

import numpy as np

from ..errors import TracingError, public_module, user_location
from ..ir.registry import LazyUfunc
from ..ops import REGISTRY
from ..ops.indexing import gather_positions as _gather_positions
from ..core.decisions import concrete_index
from .objects import settle, tracers_in
from .ufunc_dtype import in_loop_dtype
from ..core.trace import as_node, bind, current_trace, loop_dtypes
from ..core.tracer import SURFACE, Tracer

__all__ = ["HANDLED", "apply_function", "apply_ufunc", "getitem"]

HANDLED = {}
#: ufuncs called as composites -> their implementations: numpy 2's gufuncs (np.vecdot,
#: np.matvec, np.vecmat: :mod:`.numpy_products`), np.ldexp, frexp, modf (:mod:`.numpy_misc`)
GUFUNCS = {}
#: ``out=`` into traced arrays: ``ufunc(ufunc, method, inputs, kwargs)`` and
#: ``function(impl, func, args, kwargs)``, installed by
#: :mod:`hybridad.frontend.numpy_out` (which imports this module)
OUT = types.SimpleNamespace(ufunc=None, function=None)
#: ufunc -> the implementation of its ``reduce`` method where it is no primitive
#: (filled by the modules of the numpy surface, like HANDLED)
UFUNC_REDUCERS = {}
#: (method, ufunc) -> that ufunc's method (``at``), or method -> it for any ufunc (``outer``)
UFUNC_METHODS = {}

#: ufunc -> primitive name, for every elementwise primitive backed by a ufunc
#: (scipy.special's once scipy is imported: see :func:`ufunc_ops`)
UFUNC_OPS = {op.ufunc: name for name, op in REGISTRY.items()
             if op._ufunc is not None and type(op._ufunc) is not LazyUfunc}
#: primitive name -> its ufunc not imported yet (:class:`~hybridad.ir.registry.LazyUfunc`)
_LAZY_UFUNCS = {name: op._ufunc for name, op in REGISTRY.items()
                if type(op._ufunc) is LazyUfunc}


def ufunc_ops(load=False):
    """:data:`UFUNC_OPS` with the ufuncs of every library imported by now
    (``load``: of every library, importing them)."""
    for name, lazy in list(_LAZY_UFUNCS.items()):
        if load or lazy.module in sys.modules:
            UFUNC_OPS[lazy.resolve()] = name
            _LAZY_UFUNCS.pop(name, None)
    return UFUNC_OPS


_REDUCE_OPS = {np.add: "sum", np.maximum: "max", np.minimum: "min", np.multiply: "prod"}
#: ufuncs that are another one under a second name
_UFUNC_ALIASES = {np.radians: np.deg2rad, np.degrees: np.rad2deg}


def implements(*funcs):
    def deco(impl):
        for f in funcs:
            HANDLED[f] = impl
        return impl

    return deco


def _unsupported(name):
    if "." not in name:
        name = f"numpy.{name}"
    return NotImplementedError(
        f"hybridad does not support {name} yet (at {user_location()}); "
        "see docs/limitations.md for what tracing supports")


def ufunc_name(ufunc):
    """The public name of ``ufunc``: ``numpy.exp``, ``scipy.special.erf``
    (scipy's Hurwitz ``_zeta``: ``scipy.special.zeta``)."""
    name = ufunc.__name__
    if getattr(np, name, None) is ufunc:
        return f"numpy.{name}"
    special = sys.modules.get("scipy.special")
    if special is not None and (getattr(special, name, None) is ufunc or
                                callable(getattr(special, name.lstrip("_"), None))):
        return f"scipy.special.{name.lstrip('_')}"
    return f"{type(ufunc).__module__}.{name}" if type(ufunc) is not np.ufunc else name


def _tracer(x):
    """Any operand as a Tracer (constants become constant nodes)."""
    if isinstance(x, Tracer):
        return x
    trace = current_trace()
    return Tracer(as_node(x, trace), trace)


def apply_ufunc(ufunc, method, inputs, kwargs):
    """A ufunc call on tracers: a new array, or a numpy scalar where it is 0-d;
    with ``out=`` traced arrays, the result written into them as numpy does
    (:mod:`hybridad.frontend.numpy_out`)."""
    if kwargs.get("out") is not None:  # (hybridad.frontend.numpy_out)
        return OUT.ufunc(ufunc, method, inputs, dict(kwargs))
    return settle(_ufunc(ufunc, method, inputs, kwargs), tracers_in(inputs), "new")


#: bitwise ufuncs, which are the logical ones on booleans
_BITWISE_BOOL = {np.bitwise_and: np.logical_and, np.bitwise_or: np.logical_or,
                 np.bitwise_xor: np.logical_xor, np.invert: np.logical_not}


def _ufunc(ufunc, method, inputs, kwargs):
    if method == "__call__" and kwargs.get("dtype") is not None:
        inputs, kwargs = in_loop_dtype(ufunc, inputs, kwargs)
    if method == "__call__" and ufunc in _BITWISE_BOOL:
        if all(dt == np.bool_ for dt in loop_dtypes(ufunc, inputs)):
            return _ufunc(_BITWISE_BOOL[ufunc], method, inputs, kwargs)
        raise _unsupported(f"{ufunc.__name__} of integer arrays")
    if method == "__call__" and ufunc is np.divmod:
        _no_kwargs("divmod", kwargs, allowed=("out",))
        return bind("floor_divide", *inputs), bind("remainder", *inputs)
    if method == "__call__" and ufunc in (np.equal, np.not_equal) and \
            any(v is None for v in inputs):  # numpy compares with None elementwise
        other = next(v for v in inputs if v is not None)
        return np.full(_tracer(other).shape, ufunc is np.not_equal)
    if method == "__call__" and ufunc is np.matmul:
        return MATMUL[0](*inputs)
    if method == "__call__" and ufunc in GUFUNCS:
        return GUFUNCS[ufunc](*inputs, **kwargs)
    if method == "__call__" and ufunc is np.power:
        return power(*inputs)
    if method == "__call__" and ufunc is np.float_power:  # power in at least float64
        _no_kwargs("float_power", kwargs, allowed=("out",))
        xs = [_tracer(v) for v in inputs]
        return power(*(x.astype(np.result_type(x.dtype, np.float64)) for x in xs))
    if method == "__call__" and ufunc is np.conjugate and _tracer(inputs[0]).dtype.kind != "c":
        return _tracer(inputs[0])  # the conjugate of a real array is itself
    if method == "__call__" and ufunc in _UFUNC_ALIASES:
        return _ufunc(_UFUNC_ALIASES[ufunc], method, inputs, kwargs)
    if method == "reduce" and ufunc is np.logaddexp:
        _no_kwargs("logaddexp.reduce", kwargs, allowed=("out", "axis", "keepdims"))
        return UFUNC_REDUCERS[np.logaddexp](*inputs, axis=kwargs.get("axis", 0),
                                keepdims=kwargs.get("keepdims", False))
    if method == "accumulate" and ufunc in (np.add, np.multiply):
        _no_kwargs(f"{ufunc.__name__}.accumulate", kwargs, allowed=("out", "axis", "dtype"))
        return HANDLED[np.cumsum if ufunc is np.add else np.cumprod](
            *inputs, axis=kwargs.get("axis", 0), dtype=kwargs.get("dtype"))
    how = method != "__call__" and UFUNC_METHODS.get((method, ufunc), UFUNC_METHODS.get(method))
    if how:  # (ufunc.at, ufunc.outer: a plain call looks nothing up)
        return how(ufunc, *inputs, **kwargs)
    if method == "__call__" and (ufunc in UFUNC_OPS or _LAZY_UFUNCS and ufunc in ufunc_ops()):
        _no_kwargs(ufunc.__name__, kwargs, allowed=("out",))
        return bind(UFUNC_OPS[ufunc], *inputs)
    if method == "reduce" and ufunc in _REDUCE_OPS:
        _no_kwargs(f"{ufunc.__name__}.reduce", kwargs, allowed=("out", "axis", "keepdims"))
        (x,) = inputs
        return _reduce(_REDUCE_OPS[ufunc], x, kwargs.get("axis", 0),
                       kwargs.get("keepdims", False))
    if method == "__call__" and ufunc.nout == 1 and not any(
            v is not None for k, v in kwargs.items()) and _importable(ufunc):
        # no rules: its value on data; a derivative through it is refused (ops/host.py)
        return bind("host_ufunc", *inputs, ufunc=ufunc_name(ufunc), where=user_location())
    suffix = "" if method == "__call__" else f".{method}"
    raise _unsupported(f"{ufunc_name(ufunc)}{suffix}")


def _importable(ufunc):
    """Whether ``ufunc`` is found again at its public name (generated code and
    pickled plans name it so)."""
    from ..ops.host import resolve

    try:
        return resolve(ufunc_name(ufunc)) is ufunc
    except (ImportError, AttributeError, ValueError):
        return False


_POWER_SHORTCUTS = {1: None, 2: np.square, 0.5: np.sqrt, -1: np.reciprocal}


def power(x, y):
    """``x ** y``; a literal scalar exponent 1, 2, 1/2 or -1 becomes the cheaper ufunc."""
    if isinstance(y, Tracer) and y.node.is_literal and y.shape == ():
        y = y.node.attrs["value"].item()
    if type(y) in (int, float) and y in _POWER_SHORTCUTS and isinstance(x, Tracer) and \
            x.dtype.kind == "f":
        fn = _POWER_SHORTCUTS[y]
        return x if fn is None else fn(x)
    return bind("power", x, y)


def _no_kwargs(name, kwargs, allowed=()):
    extra = [k for k, v in kwargs.items() if k not in allowed and v is not None]
    if extra:
        raise NotImplementedError(f"hybridad: numpy.{name} with {', '.join(extra)}= is not "
                                  "supported while tracing")


#: numpy functions that return views of their first argument (or that argument)
VIEW_FUNCTIONS = {np.reshape, np.ravel, np.transpose, np.swapaxes, np.moveaxis, np.rollaxis,
                  np.squeeze, np.expand_dims, np.broadcast_to, np.atleast_1d, np.atleast_2d,
                  np.atleast_3d, np.real, np.matrix_transpose}
#: numpy functions whose 0-d results are 0-d arrays, not numpy scalars
ARRAY_FUNCTIONS = {np.copy, np.where, np.full_like, np.zeros_like, np.ones_like, np.empty_like,
                   np.full,
                   np.tensordot, np.cross, np.imag, np.diagonal, np.asarray_chkfinite}


def apply_function(func, args, kwargs):
    """A numpy function call on tracers, with numpy's object semantics for its
    results (see :func:`hybridad.frontend.objects.settle`)."""
    impl = HANDLED.get(func)
    if impl is None:
        from .host_calls import host_call, public_path

        path = public_path(func)
        if path is None:
            module = public_module(getattr(func, "__module__", None) or "numpy")
            raise _unsupported(f"{module}.{getattr(func, '__name__', repr(func))}")
        # no traced implementation: numpy's own on the values (a derivative is refused)
        return settle(host_call(path, args, kwargs), tracers_in(args, kwargs), "new")
    out = kwargs.get("out")
    if out is not None and not (type(out) is tuple and not out):  # (hybridad.frontend.numpy_out)
        return OUT.function(impl, func, args, kwargs)
    kind = "view" if func in VIEW_FUNCTIONS else "array" if func in ARRAY_FUNCTIONS else "new"
    return settle(impl(*args, **kwargs), tracers_in(args, kwargs), kind)


# ----------------------------------------------------------------------------
# reductions
# ----------------------------------------------------------------------------


def _norm_axis(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    out = []
    for a in axes:
        a = operator.index(a)
        if not -ndim <= a < max(ndim, 1):
            raise np.exceptions.AxisError(a, ndim)
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise ValueError("duplicate value in 'axis'")
    return tuple(sorted(out))


def _reduce(opname, x, axis, keepdims):
    x = _tracer(x)
    axes = _norm_axis(axis, x.ndim)
    if opname == "prod":
        # one axis at a time (exact gradients with zeros); highest axis first
        for a in sorted(axes, reverse=True):
            x = bind("prod", x, axis=(a,), keepdims=bool(keepdims))
        return x
    if x.dtype == np.bool_ and opname == "sum":
        x = x.astype(np.int64)
    return bind(opname, x, axis=axes, keepdims=bool(keepdims))


# ----------------------------------------------------------------------------
# shape ops
# ----------------------------------------------------------------------------


@implements(np.reshape)
def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    if order not in ("C", "F"):
        raise NotImplementedError(f"hybridad: reshape order={order!r} is not supported while "
                                  "tracing ('C' and 'F' are: a traced array has no memory "
                                  "layout for 'A' or 'K' to follow)")
    a = _tracer(a)
    shape = newshape if shape is None else shape
    shape = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
    shape = np.empty(a.shape, dtype=np.bool_).reshape(shape).shape if -1 in shape else shape
    if order == "F":  # Fortran order: the C-order reshape of the reversed axes, reversed
        return transpose(reshape(transpose(a), tuple(shape)[::-1]))
    if shape == a.shape:
        return a
    if math.prod(shape) != a.size:
        raise ValueError(f"cannot reshape array of size {a.size} into shape {shape}")
    return bind("reshape", a, shape=tuple(int(s) for s in shape))


@implements(np.ravel)
def ravel(a, order="C"):
    return reshape(a, (-1,), order=order)


@implements(np.transpose)
def transpose(a, axes=None):
    a = _tracer(a)
    axes = tuple(reversed(range(a.ndim))) if axes is None else \
        tuple(operator.index(i) % max(a.ndim, 1) for i in axes)
    if sorted(axes) != list(range(a.ndim)):
        raise ValueError("axes don't match array")
    return a if axes == tuple(range(a.ndim)) else bind("transpose", a, axes=axes)


@implements(np.swapaxes)
def swapaxes(a, axis1, axis2):
    a = _tracer(a)
    axes = list(range(a.ndim))
    i, j = axis1 % a.ndim, axis2 % a.ndim
    axes[i], axes[j] = axes[j], axes[i]
    return transpose(a, axes)


@implements(np.moveaxis)
def moveaxis(a, source, destination):
    a = _tracer(a)
    src = _norm_axis(source, a.ndim) if isinstance(source, numbers.Integral) else \
        tuple(s % a.ndim for s in source)
    dst = (destination,) if isinstance(destination, numbers.Integral) else tuple(destination)
    dst = tuple(d % a.ndim for d in dst)
    order = [n for n in range(a.ndim) if n not in src]
    for d, s in sorted(zip(dst, src, strict=True)):
        order.insert(d, s)
    return transpose(a, order)


@implements(np.expand_dims)
def expand_dims(a, axis):
    a = _tracer(a)
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    nd = a.ndim + len(axes)
    axes = {x % nd for x in axes}
    it = iter(a.shape)
    return reshape(a, tuple(1 if i in axes else next(it) for i in range(nd)))


@implements(np.squeeze)
def squeeze(a, axis=None):
    a = _tracer(a)
    if axis is None:
        axes = {i for i, s in enumerate(a.shape) if s == 1}
    else:
        axes = set(_norm_axis(axis, a.ndim))
        if any(a.shape[i] != 1 for i in axes):
            raise ValueError("cannot select an axis to squeeze out which has size not "
                             "equal to one")
    return reshape(a, tuple(s for i, s in enumerate(a.shape) if i not in axes))


@implements(np.broadcast_to)
def broadcast_to(array, shape, subok=False):
    a = _tracer(array)
    shape = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
    np.broadcast_shapes(a.shape, shape)  # raises like numpy
    if np.broadcast_shapes(a.shape, shape) != shape:
        raise ValueError(f"cannot broadcast shape {a.shape} to {shape}")
    return a if a.shape == shape else bind("broadcast_to", a, shape=shape)


@implements(np.concatenate)
def concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    _no_kwargs("concatenate", {"out": out, "dtype": dtype})
    xs = [_tracer(x) for x in arrays]
    if axis is None:
        xs, axis = [ravel(x) for x in xs], 0
    nd = xs[0].ndim
    if nd == 0:
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    axis = _norm_axis(axis, nd)[0]
    for x in xs[1:]:
        if x.ndim != nd or any(s != t for i, (s, t) in enumerate(zip(x.shape, xs[0].shape,
                                                                       strict=True))
                               if i != axis):
            raise ValueError("all the input array dimensions except for the concatenation "
                             f"axis must match exactly; got {[x.shape for x in xs]}")
    dtype = np.result_type(*(x.dtype for x in xs))
    xs = [x.astype(dtype) for x in xs]
    return xs[0] if len(xs) == 1 else bind("concatenate", *xs, axis=axis)


@implements(np.stack)
def stack(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    _no_kwargs("stack", {"out": out, "dtype": dtype})
    xs = [_tracer(x) for x in arrays]
    if len({x.shape for x in xs}) != 1:
        raise ValueError("all input arrays must have the same shape")
    axis = _norm_axis(axis, xs[0].ndim + 1)[0]
    return concatenate([expand_dims(x, axis) for x in xs], axis=axis)


# ----------------------------------------------------------------------------
# select
# ----------------------------------------------------------------------------


def gather_positions(x, select):
    """:func:`hybridad.ops.indexing.gather_positions` of ``x`` as a tracer."""
    return _gather_positions(_tracer(x), select)


@implements(np.where)
def where(condition, x=None, y=None):
    if x is None and y is None:
        return np.nonzero(condition)  # (numpy's: np.asarray(condition).nonzero())
    if x is None or y is None:
        raise ValueError("either both or neither of x and y should be given")
    c = _tracer(condition)
    if c.dtype != np.bool_:
        c = np.not_equal(c, 0)
    dtype = np.result_type(*(_weak(v) for v in (x, y)))
    trace = current_trace()
    return bind("where", c, Tracer(as_node(x, trace, dtype), trace),
                Tracer(as_node(y, trace, dtype), trace))


def _weak(v):
    if isinstance(v, Tracer):
        return v.dtype
    if type(v) in (bool, int, float, complex):
        return v  # weak Python scalar
    return np.asarray(v).dtype


# -- linear algebra (matmul is the primitive; the rest reshape around it) ----


def matmul(a, b):
    a, b = _tracer(a), _tracer(b)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: Input operand does not have enough dimensions")
    dtype = np.result_type(a.dtype, b.dtype)
    a, b = a.astype(dtype), b.astype(dtype)
    if a.ndim == 1 and b.ndim == 1 and np.issubdtype(dtype, np.inexact):
        if a.shape != b.shape:
            raise ValueError(f"matmul: mismatch in core dimension: {a.shape} @ {b.shape}")
        # an inner product is an elementwise multiply and a sum: one fused
        # region, whose partials fuse with what consumes them (no BLAS call)
        return _reduce("sum", a * b, None, False)
    if a.ndim + b.ndim == 3 and a.shape[-1] == b.shape[0] != 1 and \
            np.issubdtype(dtype, np.inexact) and not (a.node.is_literal or b.node.is_literal):
        trace = current_trace()  # a matrix and a vector: one node while a plan's trace
        if trace.composites and trace.phase == "forward":  # is recorded (it is lowered
            return bind("matvec", a, b)  # to the primitives once rolled)
    a2 = reshape(a, (1, a.shape[0])) if a.ndim == 1 else a
    b2 = reshape(b, (b.shape[0], 1)) if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ValueError(f"matmul: mismatch in core dimension: {a.shape} @ {b.shape}")
    if a2.shape[-1] == 1 and np.issubdtype(dtype, np.inexact):
        # a contracted axis of length 1 (an outer product: a one-feature input
        # layer, a cotangent times a vector in a rule) is a broadcast multiply,
        # the same one product per element as BLAS's: it fuses with its
        # neighbours into one region (no gemm, no temporary), and so does its
        # derivative (the weight's gradient becomes a fused sum over the batch)
        r = a2 * b2
    else:
        r = bind("matmul", a2, b2)
    shape = r.shape
    if a.ndim == 1:
        shape = shape[:-2] + shape[-1:]
    if b.ndim == 1:
        shape = shape[:-1]
    return reshape(r, shape)


MATMUL = [matmul]  # (`@`'s: sliding windows times a kernel first, frontend/windows.py)


@implements(np.dot)
def dot(a, b, out=None):
    _no_kwargs("dot", {"out": out})
    a, b = _tracer(a), _tracer(b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if b.ndim <= 2:
        return matmul(a, b)
    # dot(a, b)[i.., j.., m] = sum_k a[i.., k] * b[j.., k, m]
    bt = reshape(moveaxis(b, -2, 0), (b.shape[-2], -1))
    r = matmul(a, bt)
    return reshape(r, a.shape[:-1] + b.shape[:-2] + b.shape[-1:])


@implements(np.vdot)
def vdot(a, b):
    return matmul(ravel(a), ravel(b))


@implements(np.inner)
def inner(a, b):
    a, b = _tracer(a), _tracer(b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if a.ndim == 1 and b.ndim == 1:
        return matmul(a, b)
    k = a.shape[-1]
    r = matmul(reshape(a, (-1, k)), transpose(reshape(b, (-1, k))))
    return reshape(r, a.shape[:-1] + b.shape[:-1])


@implements(np.outer)
def outer(a, b, out=None):
    _no_kwargs("outer", {"out": out})
    return reshape(ravel(a), (-1, 1)) * reshape(ravel(b), (1, -1))


# ----------------------------------------------------------------------------
# indexing
# ----------------------------------------------------------------------------


def _is_advanced(index):
    """Whether ``index`` holds arrays, lists or booleans (numpy's advanced indexing)."""
    parts = index if isinstance(index, tuple) else (index,)
    for k in parts:
        if isinstance(k, Tracer):
            if k.dtype == np.bool_:
                _value_dependent_mask()
            raise TracingError(f"a traced array used as an index at {user_location()}: indices "
                               "must be Python ints, slices or constant arrays")
        if isinstance(k, (np.ndarray, list, bool, np.bool_)):
            return True
    return False


def _value_dependent_mask():
    raise TracingError(
        f"a boolean mask computed from traced values used as an index at {user_location()}: "
        "the result's shape would depend on the values. Use np.where(mask, x, 0) (and sum) "
        "instead, or a mask known at trace time.")


def _normalize_index(index, shape):
    """Expand a basic ``index`` to a tuple of slices, ints and None."""
    if not isinstance(index, tuple):
        index = (index,)
    for k in index:
        if not (k is None or k is Ellipsis or isinstance(k, (slice, numbers.Integral))):
            raise IndexError(f"only integers, slices, None, Ellipsis and constant integer or "
                             f"boolean arrays are valid indices; got {type(k).__name__}")
    used = sum(1 for k in index if k is not None and k is not Ellipsis)
    if used > len(shape):
        raise IndexError(f"too many indices for array: array is {len(shape)}-dimensional, "
                         f"but {used} were indexed")
    if sum(k is Ellipsis for k in index) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if Ellipsis in index:
        i = index.index(Ellipsis)
        index = index[:i] + (slice(None),) * (len(shape) - used) + index[i + 1:]
    out, dim = [], 0
    for k in index:
        if isinstance(k, numbers.Integral):
            n = shape[dim]
            if not -n <= k < n:
                raise IndexError(f"index {k} is out of bounds for axis {dim} with size {n}")
            out.append(int(k) % n)
        else:
            out.append(k)
        dim += k is not None
    return tuple(out)


def getitem(x, index):
    """``x[index]``: a view for basic indices, a numpy scalar for a full
    integer index, a new array for advanced indices (as numpy)."""
    x = _tracer(x)
    taken = SURFACE.traced_take(x, index)  # (integers computed from values: gathered)
    if taken is not None:
        return taken
    index = concrete_index(index)  # (indices computed from values: this call's, guarded)
    if _is_advanced(index):
        r = settle(gather_positions(x, lambda pos: pos[index]), [x], "array")
        r._origin = (weakref.ref(x), x.node, index)  # for `x[index] op= v` (numpy_signal)
        return r
    scalar = not any(k is Ellipsis for k in (index if isinstance(index, tuple) else (index,)))
    index = _normalize_index(index, x.shape)
    r = x if all(k == slice(None) for k in index) else bind("getitem", x, index=index)
    if scalar and r.shape == () and all(isinstance(k, numbers.Integral) for k in index):
        return settle(r, [x], "new")  # x[0], x[1, 2], x[()]: a numpy scalar, a copy
    return settle(r, [x], "view")


HANDLED[np.shape] = lambda a: _tracer(a).shape
HANDLED[np.ndim] = lambda a: _tracer(a).ndim
HANDLED[np.size] = lambda a, axis=None: _tracer(a).size if axis is None else \
    _tracer(a).shape[axis]
HANDLED[np.copy] = lambda a, order="K", subok=False: _tracer(a)
HANDLED[np.abs] = lambda x: np.absolute(x)


# tracers dispatch their numpy protocols here
SURFACE.apply_ufunc = apply_ufunc
SURFACE.apply_function = apply_function
SURFACE.getitem = getitem
