"""Stage 1: tracing plain numpy code into an IR graph.

:class:`Tracer` stands in for an ndarray while ``f`` runs once.  It implements
``__array_ufunc__`` / ``__array_function__`` and the operators, so users write
plain numpy; every operation becomes a :class:`~hybridad.ir.graph.Node` appended to
the current :class:`Trace` through :func:`bind`.  Python loops unroll.

Shapes and dtypes are computed abstractly by each op's shape rule (no data is
computed while tracing).  Python scalars are *weak* (numpy 2's NEP 50): they
take the dtype of the array they meet, so float32 code stays float32.

Constants: a Python scalar, or any expression of constants only, is a
*literal* and is folded.  An ndarray that ``f`` reads from its closure or
globals is *captured by reference*: the plan keeps the array object, so an
in-place change (``A[...] = ...``) is seen by the next call.  Everything
else ``f`` reads besides its arguments (a rebound name, a changed
attribute, ...) is checked before every call by the plan's guards
(:mod:`hybridad.frontend.guards`).
"""

from __future__ import annotations

import functools
import itertools
import numbers
import os
import sys
import threading
import types
import weakref

import numpy as np

from ..errors import TracingError, user_location
from .guards import note_value_operand, paused
from ..ir.graph import Node
from ..ir.registry import REGISTRY

#: the numpy surface of tracers: ``apply_ufunc``, ``apply_function`` and
#: ``getitem``, installed by :mod:`hybridad.frontend.numpy_api` (which imports
#: this module; tracers call it through this table, so imports run one way)
SURFACE = types.SimpleNamespace(apply_ufunc=None, apply_function=None, getitem=None)

__all__ = ["Trace", "Tracer", "as_node", "bind", "current_trace", "loop_dtypes"]

_state = threading.local()
_PKG_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def current_trace():
    stack = getattr(_state, "stack", None)
    if not stack:
        raise TracingError("no active trace: hybridad operations only work inside a traced "
                           "function")
    return stack[-1]


class Trace:
    """The graph under construction: nodes in creation (= topological) order."""

    def __init__(self):
        self.nodes = []
        self.ids = itertools.count()
        self.phase = "forward"
        self._captured = {}  # id(array) -> (array, node): one node per captured array
        self._seen = {}  # common subexpressions: key -> node (forward phase only)

    def __enter__(self):
        if not hasattr(_state, "stack"):
            _state.stack = []
        _state.stack.append(self)
        return self

    def __exit__(self, *exc):
        _state.stack.pop()

    def add(self, op, args, attrs, shape, dtype):
        """Append a node -- or return the identical one traced before.

        Common subexpressions (``x[:-1]`` written twice) are merged while
        the *forward* graph is traced: every forward op is pure.  The reverse
        pass is never merged, because it accumulates adjoints in place into
        buffers it created (see :mod:`hybridad.transforms.autodiff`)."""
        key = _cse_key(op, args, attrs) if self.phase == "forward" else None
        if key is not None:
            hit = self._seen.get(key)
            if hit is not None:
                return hit
        node = Node(next(self.ids), op, args, attrs, shape, dtype, self.phase)
        self.nodes.append(node)
        if key is not None:
            self._seen[key] = node
        return node

    def input(self, index, shape, dtype):
        return Tracer(self.add("input", (), {"index": index}, shape, dtype), self, ARG)

    def const(self, value, literal):
        if not literal:
            hit = self._captured.get(id(value))
            if hit is not None and hit[0] is value:
                return hit[1]
        value = np.asarray(value)
        if value.dtype not in SUPPORTED_DTYPES:
            check_dtype(value.dtype, "an array captured by the traced function (a global, "
                        "closure or constant operand)" if not literal else "a constant",
                        where=user_location())
        key = ("const", value.dtype.str, value.shape, value.tobytes()) \
            if literal and value.size <= 16 and self.phase == "forward" else None
        if key is not None and key in self._seen:
            return self._seen[key]
        node = self.add("const", (), {"value": value, "literal": literal}, value.shape,
                        value.dtype)
        if key is not None:
            self._seen[key] = node
        if not literal:
            self._captured[id(value)] = (value, node)
        return node


def _cse_key(op, args, attrs):
    """A hashable key of a pure op application, or None (not merged: inputs,
    constants, in-place ops, attributes that are arrays or objects)."""
    if op in ("input", "const") or REGISTRY[op].kind == "inplace":
        return None
    items = []
    for name in sorted(attrs):
        value = _static(attrs[name])
        if value is None and attrs[name] is not None:
            return None
        items.append((name, value))
    return (op, tuple(a.id for a in args), tuple(items))


def _static(value):
    """``value`` as a hashable plain value (slices spelled out), or None."""
    if value is None or isinstance(value, (str, np.dtype, type(Ellipsis))):
        return value
    if isinstance(value, np.generic):
        return (value.dtype.str, value.item())
    if isinstance(value, (bool, int, float)):
        return (type(value).__name__, value)
    if isinstance(value, slice):
        return ("slice", value.start, value.stop, value.step)
    if isinstance(value, tuple):
        out = tuple(_static(v) for v in value)
        lost = any(o is None and v is not None for o, v in zip(out, value, strict=True))
        return None if lost else ("tuple",) + out
    return None


# ----------------------------------------------------------------------------
# operand conversion and dtype rules
# ----------------------------------------------------------------------------

_PY_SCALARS = (bool, int, float, complex)


def _weak_type(x):
    """The dtype-or-Python-type numpy uses for promotion (Python scalars are weak)."""
    if isinstance(x, Tracer):
        return x.node.dtype
    if isinstance(x, Node):
        return x.dtype
    if type(x) is bool:  # not weak in numpy 2 (NEP 50): numpy's bool
        return np.dtype(np.bool_)
    if type(x) in _PY_SCALARS:
        return type(x)
    if isinstance(x, numbers.Number) and not isinstance(x, np.generic):
        return float
    return np.asarray(x).dtype


def loop_dtypes(ufunc, args):
    """The (inputs..., output) dtypes numpy's ufunc loop uses for these operands."""
    try:
        return ufunc.resolve_dtypes(tuple(_weak_type(a) for a in args) + (None,) * ufunc.nout)
    except (TypeError, np._core._exceptions._UFuncNoLoopError) as err:  # type: ignore
        raise TypeError(f"np.{ufunc.__name__} does not support operands of dtypes "
                        f"{[_weak_type(a) for a in args]}: {err}") from None


def as_node(x, trace, dtype=None):
    """Turn an operand into a node: tracers pass through, scalars become literal
    constants (in ``dtype`` if given), arrays are captured by reference."""
    if isinstance(x, Tracer):
        if x._trace is not trace:
            raise TracingError("a traced value escaped its trace (was it stored in a global "
                               "or closure during an earlier trace?)")
        node = x.node
    elif isinstance(x, np.ndarray):
        refuse_subclass(x, f"an array used in the traced function at {user_location()}")
        node = trace.const(x, literal=False)  # by reference, 0-d arrays included
    elif isinstance(x, (np.ndarray, np.generic, numbers.Number)):
        node = trace.const(np.asarray(x, dtype=dtype) if dtype is not None else x, True)
    elif isinstance(x, (list, tuple)):
        if any(isinstance(e, Tracer) for e in _flatten_seq(x)):
            raise TracingError(
                f"a list holding traced arrays was used as an array at {user_location()}; "
                "numpy cannot hand it to hybridad. Build it with np.stack(...) instead.")
        node = trace.const(np.asarray(x), literal=True)
    else:
        raise TypeError(f"cannot use an object of type {type(x).__name__} as an array")
    if dtype is not None and node.dtype != np.dtype(dtype):
        node = bind("cast", Tracer(node, trace), dtype=np.dtype(dtype)).node
    return node


def _flatten_seq(x):
    for e in x:
        if isinstance(e, (list, tuple)):
            yield from _flatten_seq(e)
        else:
            yield e


#: dtypes a traced array may have: those every backend runs
SUPPORTED_DTYPES = frozenset(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
    np.uint64, np.float32, np.float64))
SUPPORTED_TEXT = "bool, (u)int8 to (u)int64, float32 and float64"


def check_dtype(dtype, what, where=None):
    """Raise a TypeError naming ``what`` unless ``dtype`` is traced by hybridad
    (NotImplementedError for complex dtypes, which may be one day)."""
    dtype = np.dtype(dtype)
    if dtype.newbyteorder("=") in SUPPORTED_DTYPES:  # either byte order
        return
    hint = {"f": f"convert it with .astype(np.{'float32' if dtype.itemsize < 4 else 'float64'})",
            "c": "complex arrays are not supported yet (docs/limitations.md)"}.get(
        dtype.kind, "hybridad traces numbers only")
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


# ----------------------------------------------------------------------------
# bind: apply a primitive
# ----------------------------------------------------------------------------


def _is_literal_fill(node, value):
    """A literal constant (possibly seen through views) whose elements all equal ``value``."""
    while node.op in REGISTRY and REGISTRY[node.op].kind == "view":
        node = node.args[0]
    if not node.is_literal or node.size > 4096:
        return False
    return bool(np.all(node.attrs["value"] == value))


def _simplify(opname, nodes, shape, dtype):
    """Algebraic identities that avoid work: x*1, 1*x, x+0, 0+x, x-0, x/1."""
    if len(nodes) != 2:
        return None
    a, b = nodes
    keep_a = opname in ("multiply", "safe_multiply", "true_divide") and _is_literal_fill(b, 1) \
        or opname in ("add", "subtract") and _is_literal_fill(b, 0)
    keep_b = opname in ("multiply", "safe_multiply") and _is_literal_fill(a, 1) or \
        opname == "add" and _is_literal_fill(a, 0)
    if keep_a and a.shape == shape and a.dtype == dtype:
        return a
    if keep_b and b.shape == shape and b.dtype == dtype:
        return b
    return None


def bind(opname, *args, **attrs):
    """Apply primitive ``opname`` to operands (tracers, arrays or scalars).

    Elementwise ufunc operands are cast to the ufunc's loop dtypes first, so
    every executed op runs without hidden casting buffers.  Ops on literal
    constants only are folded.  Returns a :class:`Tracer`.
    """
    with paused():  # hybridad's own work: not observed (see hybridad.frontend.guards)
        return _bind(opname, args, attrs)


def _bind(opname, args, attrs):
    trace = current_trace()
    op = REGISTRY[opname]
    if op.ufunc is not None:
        dts = loop_dtypes(op.ufunc, args)
        nodes = [as_node(a, trace, dt) for a, dt in zip(args, dts, strict=False)]
    else:
        nodes = [as_node(a, trace) for a in args]
    shape, dtype = op.abstract(*nodes, **attrs)
    # a 0-d result of a ufunc or a reduction is a numpy scalar (see settle)
    flags = SCALAR if shape == () and (op.ufunc is not None or op.kind == "reduce") else 0
    same = _simplify(opname, nodes, shape, np.dtype(dtype))
    if same is not None:
        return Tracer(same, trace, flags)
    if nodes and all(n.is_literal for n in nodes):
        if op.kind in ("elementwise", "reduce"):
            value = _evaluate(op, nodes, shape, dtype, attrs)
            return Tracer(trace.const(value, True), trace, flags)
        if op.kind == "view" and int(np.prod(shape)) <= 4096:
            value = np.array(op.view(nodes[0].attrs["value"], **attrs))
            return Tracer(trace.const(value, True), trace)
    return Tracer(trace.add(opname, nodes, attrs, shape, dtype), trace, flags)


def _evaluate(op, nodes, shape, dtype, attrs):
    out = np.empty(shape, dtype)
    with np.errstate(all="ignore"):
        op.run(out, *(n.attrs["value"] for n in nodes), **attrs)
    return out


# ----------------------------------------------------------------------------
# the tracer
# ----------------------------------------------------------------------------

#: Tracer flags: what numpy would hold in a traced value's place
SCALAR = 1  # a numpy scalar (np.float64, ...): reported by __class__; `+=` binds a new one
ARG = 2  # an argument of the traced function: numpy would write into the caller's array
READONLY = 4  # a read-only view in numpy (broadcast_to, diagonal): writes raise there


def _value_dependent(what, instead):
    raise TracingError(
        f"{what} of a traced array at {user_location()} depends on its value, which is not "
        f"known while tracing (hybridad records one static graph). {instead}")


def _no_memory(what):
    raise TracingError(
        f"{what} of a traced array at {user_location()}: a traced array has no memory (no "
        "strides, buffer or flags) while tracing; only its shape and dtype are known.")


class _ProtocolRefused(TracingError, AttributeError):
    """A numpy interchange protocol a tracer does not offer: an AttributeError to
    numpy's probes (``np.asarray`` then reaches ``__array__`` and its message),
    a :class:`TracingError` to a caller."""


class Tracer:
    """Stand-in for an ndarray while a function is traced.

    Supports numpy ufuncs, the numpy functions hybridad implements (see
    ``docs/coverage.md``), operators, indexing and the ndarray methods and
    attributes (``docs/limitations.md`` lists those refused).  Anything that
    needs the *value* (``bool``, ``float``, ``if``, ``str``) raises
    :class:`~hybridad.TracingError`.

    numpy's object semantics are kept: ``__class__`` is ``np.ndarray``, or the
    numpy scalar type (``np.float64``, a subclass of ``float``) where numpy
    returns a scalar (full integer indexing, full reductions, ufuncs of 0-d
    operands), so ``isinstance`` answers as with numpy (``type(x)`` stays
    ``Tracer``).  In-place operators (``y += 1``, ``y.sort()``) update the
    tracer object itself, so every name bound to it sees the change, as numpy;
    on a scalar they bind a new value, as numpy's immutable scalars do.  They
    are refused (:class:`~hybridad.TracingError`) where numpy would also write
    into memory the trace cannot follow: an argument of ``f``, or an array that
    shares memory with another live one (a view: slice, reshape, transpose).
    """

    __slots__ = ("_flags", "_shares", "_trace", "node", "__weakref__")
    __array_priority__ = 1000
    __class_getitem__ = classmethod(types.GenericAlias)  # as ndarray[...]

    def __init__(self, node, trace, flags=0):
        self.node = node
        self._trace = trace
        self._flags = flags
        self._shares = None  # views: the weakrefs of every tracer sharing its memory

    @property
    def __class__(self):
        """``np.ndarray``, or the numpy scalar type where numpy holds a scalar."""
        return self.node.dtype.type if self._flags & SCALAR else np.ndarray

    @__class__.setter
    def __class__(self, value):
        raise TracingError("assigning __class__ of a traced array is not supported")

    # -- array attributes ---------------------------------------------------
    ndim = property(lambda self: len(self.node.shape))
    size = property(lambda self: self.node.size)

    @property
    def shape(self):
        return self.node.shape

    @shape.setter
    def shape(self, value):
        raise TracingError(f"setting .shape of a traced array at {user_location()}: tracing "
                           "does not follow in-place changes; use x = x.reshape(...)")

    @property
    def dtype(self):
        return self.node.dtype

    @dtype.setter
    def dtype(self, value):
        raise TracingError(f"setting .dtype of a traced array at {user_location()} "
                           "reinterprets its memory, which a traced array does not have; use "
                           "x.astype(...)")

    def __repr__(self):
        kind = f"numpy.{self.dtype.type.__name__} scalar" if self._flags & SCALAR else \
            f"{self.dtype.name}{list(self.shape)}"
        return f"Tracer(%{self.node.id}: {kind})"

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object (a 0-d traced array)")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d traced array")
        return (self[i] for i in range(self.shape[0]))

    # -- value-dependent conversions --------------------------------------
    def __bool__(self):
        _value_dependent("bool() / `if` / `and` / `or` / `while`",
                         "Use np.where(cond, a, b) or np.maximum/np.minimum instead, or an "
                         "elementwise function.")

    def __float__(self):
        _value_dependent("float()", "Keep it an array: 0-d arrays work in arithmetic.")

    def __int__(self):
        _value_dependent("int()", "Shapes and indices must not depend on traced values.")

    def __complex__(self):
        _value_dependent("complex()", "Keep it an array.")

    def __index__(self):
        _value_dependent("Using it as an index", "Indices must be Python ints or constant "
                         "arrays, not traced values.")

    def __str__(self):
        _value_dependent("str() / print()", "Print outside the traced function; repr() shows "
                         "the traced shape and dtype.")

    def __format__(self, spec):
        _value_dependent("format() / an f-string", "Format outside the traced function; "
                         "repr() shows the traced shape and dtype.")

    def __contains__(self, value):
        _value_dependent("`in` (a membership test)", "Use np.where on a comparison instead.")

    def __hash__(self):
        if self._flags & SCALAR:
            _value_dependent("hash()", "numpy hashes a scalar by its value.")
        raise TypeError("unhashable type: 'numpy.ndarray'")

    def __round__(self, ndigits=None):
        if not self._flags & SCALAR:
            raise TypeError("type numpy.ndarray doesn't define __round__ method")
        if ndigits is None:
            _value_dependent("round() without ndigits (a Python int)",
                             "Use np.round(x), a traced float.")
        return np.round(self, ndigits)

    def __floor__(self):
        _value_dependent("math.floor() (a Python int)", "Use np.floor(x), a traced float.")

    def __ceil__(self):
        _value_dependent("math.ceil() (a Python int)", "Use np.ceil(x), a traced float.")

    def __trunc__(self):
        _value_dependent("math.trunc() (a Python int)", "Use np.trunc(x), a traced float.")

    def item(self, *args):
        _value_dependent(".item()", "Keep it an array: 0-d arrays work in arithmetic.")

    def tolist(self):
        _value_dependent(".tolist()", "Keep it an array.")

    def __array__(self, dtype=None, copy=None):
        raise TracingError(
            f"a traced array was converted to a numpy array at {user_location()} (np.asarray, "
            "np.array([...]) over traced values, or an unsupported function). Use np.stack / "
            "np.concatenate to build arrays from traced values.")

    # -- copies and pickling --------------------------------------------------
    def __copy__(self):
        return Tracer(self.node, self._trace, self._flags & SCALAR)

    def __deepcopy__(self, memo):
        return self.__copy__()

    def __reduce__(self):
        _value_dependent("Pickling", "Pickle the function's inputs or results instead.")

    def __reduce_ex__(self, protocol):
        return self.__reduce__()

    def __getstate__(self):
        return self.__reduce__()

    def __setstate__(self, state):
        raise TracingError(f"__setstate__ (unpickling into a traced array) at "
                           f"{user_location()}: tracing does not follow in-place writes")

    # -- numpy protocols ----------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        _note_values(inputs)
        return SURFACE.apply_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        _note_values(args)
        return SURFACE.apply_function(func, args, kwargs)

    def __array_namespace__(self, *, api_version=None):
        return np

    # -- indexing -------------------------------------------------------------
    def __getitem__(self, index):
        return SURFACE.getitem(self, index)

    def __setitem__(self, index, value):
        raise TracingError(f"in-place assignment to a traced array at {user_location()}: "
                           "build the result functionally (np.where, np.concatenate, ...).")

    def __delitem__(self, index):
        raise ValueError("cannot delete array elements")


def _refused_protocol(name):
    def get(self):
        raise _ProtocolRefused(
            f"{name} of a traced array: a traced array has no memory to hand over while "
            "tracing (its values are not known); use the numpy functions on it instead")

    return property(get)


for _name in ("__array_interface__", "__array_struct__", "__array_wrap__",
              "__array_finalize__", "__dlpack__", "__dlpack_device__"):
    setattr(Tracer, _name, _refused_protocol(_name))


# ----------------------------------------------------------------------------
# numpy's object semantics: scalars, copies, views, in-place updates
# ----------------------------------------------------------------------------


def _in_place_refused(t, what, instead):
    if t._flags & READONLY:
        raise ValueError("assignment destination is read-only")
    why = ("it is an argument of the traced function: numpy would write into the caller's "
           "array, and hybridad never modifies its arguments" if t._flags & ARG else
           "it shares memory with another array (a view: slice, reshape, transpose, ...); "
           "numpy would change that array too, which tracing does not follow")
    raise TracingError(f"{what} on a traced array at {user_location()}: {why}. Instead, "
                       f"{instead}.")


def _others_sharing(t):
    """The live tracers other than ``t`` that share its memory."""
    if t._shares is None:
        return []
    return [o for o in (r() for r in t._shares) if o is not None and o is not t]


def _is_view_node(node):
    op = REGISTRY.get(node.op)
    return op is not None and op.kind == "view"


def link_view(view, base):
    """Record that tracer ``view`` shares memory with tracer ``base`` (numpy
    returned a view), so an in-place write to either is refused while the
    other is alive."""
    group = base._shares
    if group is None:
        group = base._shares = [weakref.ref(base)]
    if view._shares is not None and view._shares is not group:  # merge two families
        for r in view._shares:
            o = r()
            if o is not None and o is not base:
                o._shares = group
                group.append(r)
    view._shares = group
    group.append(weakref.ref(view))


def assign(target, value, what, casting="same_kind", ufunc=None):
    """numpy's in-place write of the whole of ``target`` (``target += ...``,
    ``target.sort()``, ``target.fill(v)``): the tracer object takes ``value``
    (cast under ``casting``; its shape must be ``target``'s).  Refused where
    numpy's write would reach memory the trace does not follow."""
    if target._flags & (ARG | READONLY) or _others_sharing(target):
        _in_place_refused(target, what, "write `y = y + ...` (a new array), or take a "
                          "copy first (`y = y.copy()`)")
    if not isinstance(value, Tracer):
        value = Tracer(as_node(value, target._trace), target._trace)
    if value.shape != target.shape:
        raise ValueError(f"non-broadcastable output operand with shape {target.shape} doesn't "
                         f"match the broadcast shape {value.shape}")
    if value.dtype != target.dtype:
        if not np.can_cast(value.dtype, target.dtype, casting):
            src = f"ufunc '{ufunc.__name__}' output" if ufunc is not None else "array"
            raise TypeError(f"Cannot cast {src} from {value.dtype!r} to {target.dtype!r} "
                            f"with casting rule '{casting}'")
        value = bind("cast", value, dtype=target.dtype)
    target.node = value.node
    return target


def settle(result, inputs, kind):
    """Give a traced result numpy's object semantics.

    ``kind`` says what numpy returns: ``"new"`` (a new array; a 0-d one is a
    numpy scalar: ufuncs, reductions, most functions), ``"array"`` (a new
    array, 0-d included: np.copy, np.where, astype) or ``"view"`` (a view of
    its first input, or that input itself).  A result that is one of the
    ``inputs`` objects is replaced by a fresh tracer unless ``kind`` is
    ``"view"`` (a copy must not alias its source: ``y = x.copy(); y += 1``);
    a result that is a view of an input shares its memory family."""
    if isinstance(result, (tuple, list)):
        items = [settle(r, inputs, kind) for r in result]
        return type(result)(*items) if hasattr(result, "_fields") else type(result)(items)
    if not isinstance(result, Tracer):
        return result
    if any(result is t for t in inputs):
        if kind == "view":
            return result
        result = Tracer(result.node, result._trace)
    elif kind == "view" and _is_view_node(result.node):
        chain, node = set(), result.node
        while _is_view_node(node):
            chain.add(node.id)
            node = node.args[0]
        chain.add(node.id)
        for t in inputs:
            if t.node.id in chain and t.node.id != result.node.id:
                link_view(result, t)
        if result.node.op == "broadcast_to":
            result._flags |= READONLY
        return result
    if result.shape == () and kind == "new":
        result._flags |= SCALAR
    else:
        result._flags &= ~SCALAR
    return result


def tracers_in(args, kwargs=None):
    """The tracers among ``args`` (and ``kwargs`` values), looking into lists and tuples."""
    out = []
    stack = list(args) + (list(kwargs.values()) if kwargs else [])
    while stack:
        a = stack.pop()
        if isinstance(a, Tracer):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            stack.extend(a)
    return out


# ----------------------------------------------------------------------------
# operators
# ----------------------------------------------------------------------------


def _note_values(operands):
    """A numpy scalar handed to a traced operation by the user's code (not by
    hybridad's) may be a number taken out of a captured array: tell the
    guards (:func:`hybridad.frontend.guards.note_value_operand`)."""
    for x in operands:
        if issubclass(type(x), np.generic):  # (a scalar tracer's __class__ says np.float64)
            frame = sys._getframe(2)
            if frame.f_code.co_filename == __file__:  # an operator of Tracer: its caller
                frame = frame.f_back
            if not frame.f_code.co_filename.startswith(_PKG_DIR):
                note_value_operand()
            return


def _binary(ufunc, reflected=False):
    if reflected:
        return lambda self, other: ufunc(other, self)
    return lambda self, other: ufunc(self, other)


def _in_place(ufunc, symbol):
    def op(self, other):
        r = ufunc(self, other)
        if self._flags & SCALAR:  # numpy scalars are immutable: `s += 1` binds a new one
            return r
        return assign(self, r, f"`{symbol}`", ufunc=ufunc)

    op.__name__ = f"__i{ufunc.__name__}__"
    return op


def _power(self, other, mod=None):
    return NotImplemented if mod is not None else np.power(self, other)


def _rpower(self, other, mod=None):
    return NotImplemented if mod is not None else np.power(other, self)


_OPERATORS = [("add", np.add, "+"), ("sub", np.subtract, "-"), ("mul", np.multiply, "*"),
              ("truediv", np.true_divide, "/"), ("pow", np.power, "**"),
              ("matmul", np.matmul, "@"), ("floordiv", np.floor_divide, "//"),
              ("mod", np.remainder, "%"), ("and", np.bitwise_and, "&"),
              ("or", np.bitwise_or, "|"), ("xor", np.bitwise_xor, "^"),
              ("lshift", np.left_shift, "<<"), ("rshift", np.right_shift, ">>")]
for _name, _uf, _sym in _OPERATORS:
    setattr(Tracer, f"__{_name}__", _binary(_uf))
    setattr(Tracer, f"__r{_name}__", _binary(_uf, reflected=True))
    setattr(Tracer, f"__i{_name}__", _in_place(_uf, f"{_sym}="))
Tracer.__pow__, Tracer.__rpow__ = _power, _rpower
Tracer.__divmod__ = lambda self, other: np.divmod(self, other)
Tracer.__rdivmod__ = lambda self, other: np.divmod(other, self)
for _name, _uf in [("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                   ("ge", np.greater_equal), ("eq", np.equal), ("ne", np.not_equal)]:
    setattr(Tracer, f"__{_name}__", _binary(_uf))
Tracer.__neg__ = lambda self: np.negative(self)
Tracer.__pos__ = lambda self: self.__copy__()  # numpy: a copy
Tracer.__abs__ = lambda self: np.absolute(self)
Tracer.__invert__ = lambda self: np.invert(self)
