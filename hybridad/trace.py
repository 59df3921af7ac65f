"""Stage 1: tracing plain numpy code into an IR graph.

:class:`Tracer` stands in for an ndarray while ``f`` runs once.  It implements
``__array_ufunc__`` / ``__array_function__`` and the operators, so users write
plain numpy; every operation becomes a :class:`~hybridad.ir.Node` appended to
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
(:mod:`hybridad.guards`).
"""

from __future__ import annotations

import itertools
import numbers
import os
import sys
import threading

import numpy as np

from .errors import TracingError, user_location
from .guards import note_value_operand, paused
from .ir import Node
from .ops import REGISTRY

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
        buffers it created (see :mod:`hybridad.autodiff`)."""
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
        return Tracer(self.add("input", (), {"index": index}, shape, dtype), self)

    def const(self, value, literal):
        if not literal:
            hit = self._captured.get(id(value))
            if hit is not None and hit[0] is value:
                return hit[1]
        value = np.asarray(value)
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
    keep_a = opname in ("multiply", "true_divide") and _is_literal_fill(b, 1) or \
        opname in ("add", "subtract") and _is_literal_fill(b, 0)
    keep_b = opname == "multiply" and _is_literal_fill(a, 1) or \
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
    with paused():  # hybridad's own work: not observed (see hybridad.guards)
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
    same = _simplify(opname, nodes, shape, np.dtype(dtype))
    if same is not None:
        return Tracer(same, trace)
    if nodes and all(n.is_literal for n in nodes):
        if op.kind in ("elementwise", "reduce"):
            return Tracer(trace.const(_evaluate(op, nodes, shape, dtype, attrs), True), trace)
        if op.kind == "view" and int(np.prod(shape)) <= 4096:
            value = np.array(op.view(nodes[0].attrs["value"], **attrs))
            return Tracer(trace.const(value, True), trace)
    return Tracer(trace.add(opname, nodes, attrs, shape, dtype), trace)


def _evaluate(op, nodes, shape, dtype, attrs):
    out = np.empty(shape, dtype)
    with np.errstate(all="ignore"):
        op.run(out, *(n.attrs["value"] for n in nodes), **attrs)
    return out


# ----------------------------------------------------------------------------
# the tracer
# ----------------------------------------------------------------------------


def _value_dependent(what, instead):
    raise TracingError(
        f"{what} of a traced array at {user_location()} depends on its value, which is not "
        f"known while tracing (hybridad records one static graph). {instead}")


class Tracer:
    """Stand-in for an ndarray while a function is traced.

    Supports numpy ufuncs, the numpy functions hybridad implements (see
    ``docs/limitations.md``), operators, basic indexing and the common ndarray
    methods.  Anything that needs the *value* (``bool``, ``float``, ``if``)
    raises :class:`~hybridad.TracingError`.
    """

    __slots__ = ("_trace", "node")
    __array_priority__ = 1000

    def __init__(self, node, trace):
        self.node = node
        self._trace = trace

    # -- array attributes ---------------------------------------------------
    shape = property(lambda self: self.node.shape)
    dtype = property(lambda self: self.node.dtype)
    ndim = property(lambda self: len(self.node.shape))
    size = property(lambda self: self.node.size)

    def __repr__(self):
        return f"Tracer(%{self.node.id}: {self.dtype.name}{list(self.shape)})"

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

    def item(self, *args):
        _value_dependent(".item()", "Keep it an array: 0-d arrays work in arithmetic.")

    def tolist(self):
        _value_dependent(".tolist()", "Keep it an array.")

    def __array__(self, dtype=None, copy=None):
        raise TracingError(
            f"a traced array was converted to a numpy array at {user_location()} (np.asarray, "
            "np.array([...]) over traced values, or an unsupported function). Use np.stack / "
            "np.concatenate to build arrays from traced values.")

    # -- numpy protocols ----------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        from . import numpy_api

        _note_values(inputs)
        return numpy_api.apply_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        from . import numpy_api

        _note_values(args)
        return numpy_api.apply_function(func, args, kwargs)

    # -- indexing -------------------------------------------------------------
    def __getitem__(self, index):
        from . import numpy_api

        return numpy_api.getitem(self, index)

    def __setitem__(self, index, value):
        raise TracingError(f"in-place assignment to a traced array at {user_location()}: "
                           "build the result functionally (np.where, np.concatenate, ...).")


def _note_values(operands):
    """A numpy scalar handed to a traced operation by the user's code (not by
    hybridad's) may be a number taken out of a captured array: tell the
    guards (:func:`hybridad.guards.note_value_operand`)."""
    for x in operands:
        if isinstance(x, np.generic):
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


for _name, _uf in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                   ("truediv", np.true_divide), ("pow", np.power), ("matmul", np.matmul),
                   ("floordiv", np.floor_divide), ("mod", np.remainder)]:
    setattr(Tracer, f"__{_name}__", _binary(_uf))
    setattr(Tracer, f"__r{_name}__", _binary(_uf, reflected=True))
for _name, _uf in [("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                   ("ge", np.greater_equal), ("eq", np.equal), ("ne", np.not_equal),
                   ("and", np.logical_and), ("or", np.logical_or), ("xor", np.logical_xor)]:
    setattr(Tracer, f"__{_name}__", _binary(_uf))
Tracer.__neg__ = lambda self: np.negative(self)
Tracer.__pos__ = lambda self: self
Tracer.__abs__ = lambda self: np.absolute(self)
Tracer.__invert__ = lambda self: np.logical_not(self)
Tracer.__hash__ = object.__hash__
