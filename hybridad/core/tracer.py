"""The tracer: the stand-in for an ndarray while ``f`` is traced.

:class:`Tracer` holds a :class:`~hybridad.ir.graph.Node` of the trace under
construction (:mod:`hybridad.core.trace`) and speaks numpy's Python
protocols: ``__array_ufunc__`` / ``__array_function__``, indexing, the
operators, ``__class__`` (``np.ndarray`` or a numpy scalar type), copies and
pickling.  What needs a value (``bool``, ``float``, ``str``) or memory
(``__array_interface__``, ``__dlpack__``) is refused with a
:class:`~hybridad.TracingError`.  The numpy functions behind the protocols
live in :mod:`hybridad.frontend.numpy_api` and the modules it loads; they
are reached through :data:`SURFACE`, so imports run one way.  The ndarray
methods are installed on the class by :mod:`hybridad.frontend.numpy_methods`.
"""

from __future__ import annotations

import sys
import types

import numpy as np

from ..errors import (PACKAGE_DIR, ConversionError, MathCallError, TracingError,
                      conversion_kinds, library_entry, library_refusal, math_namespaces,
                      traced_as_users, user_location, user_namespaces)
from . import decisions as _decisions
from .decisions import decide
from .observe import OBSERVED, note_value_operand, paused, quiet

#: the numpy surface of tracers: ``apply_ufunc``, ``apply_function`` and
#: ``getitem``, installed by :mod:`hybridad.frontend.numpy_api`, and
#: ``assign`` (in-place operators), installed by :mod:`hybridad.frontend.objects`,
#: ``setitem`` (``a[idx] op= v``), installed by :mod:`hybridad.frontend.numpy_signal`,
#: and ``write_positions`` (an array with some elements replaced), ``slab_written``
#: and ``block_written`` (a slab's, a block's), ``traced_take`` (``x[i]`` with
#: integers computed from values), installed by
#: :mod:`hybridad.frontend.numpy_selection`, and ``namespace`` (the array API
#: namespace), installed by :mod:`hybridad.frontend.array_api`, and
#: ``replayed_binary`` / ``replayed_unary`` (an operator's or a ufunc's recipe,
#: taken directly), installed by :mod:`hybridad.frontend.replay` (they import this
#: module; tracers call them through this table, so imports run one way), and
#: ``as_array`` (a list or tuple holding tracers as one traced array, numpy's
#: layout of it), installed by :mod:`hybridad.frontend.numpy_construct`
SURFACE = types.SimpleNamespace(apply_ufunc=None, apply_function=None, getitem=None,
                                assign=None, setitem=None, write_positions=None,
                                slab_written=None, block_written=None, namespace=None,
                                traced_take=lambda x, index: None,
                                replayed_binary=lambda ufunc, operands: None,
                                replayed_unary=lambda ufunc, x: None, as_array=None)

__all__ = ["ARG", "READONLY", "SCALAR", "Tracer"]


#: Tracer flags: what numpy would hold in a traced value's place
SCALAR = 1  # a numpy scalar (np.float64, ...): reported by __class__; `+=` binds a new one
ARG = 2  # an argument of the traced function: numpy would write into the caller's array
READONLY = 4  # a read-only view in numpy (broadcast_to, diagonal): writes raise there


_DIS = __import__("dis")
_STORE_SUBSCR = _DIS.opmap.get("STORE_SUBSCR", -1)
#: ``a[i]``: BINARY_SUBSCR up to Python 3.13, BINARY_OP with oparg NB_SUBSCR after
_BINARY_SUBSCR = _DIS.opmap.get("BINARY_SUBSCR", -1)
_BINARY_OP = _DIS.opmap.get("BINARY_OP", -1)
_NB_SUBSCR = next((k for k, op in enumerate(getattr(_DIS, "_nb_ops", ()))
                   if op[0] == "NB_SUBSCR"), None)
_LASTI_SCALE = 2 if sys.version_info < (3, 11) else 1  # (3.10 counts code units)


def _running(opcode, depth):
    """Whether the frame ``depth`` calls up -- user code, where numpy's C code
    asks a tracer for its value -- is running ``opcode`` (a subscript store
    or load)."""
    frame = sys._getframe(depth)
    code = frame.f_code
    if not traced_as_users(code.co_filename):  # numpy's, scipy's, hybridad's own code
        return False
    i = frame.f_lasti * _LASTI_SCALE
    if not 0 <= i < len(code.co_code) - 1:
        return False
    op = code.co_code[i]
    return op == opcode or (opcode == _BINARY_SUBSCR and op == _BINARY_OP and
                            _NB_SUBSCR is not None and code.co_code[i + 1] == _NB_SUBSCR)


def _stored_into_numpy():
    """Raise :class:`~hybridad.errors.ConversionError` when numpy asks for the
    number to write it into its own memory (``a[i] = t``, ``a[i] += t``, ``a``
    a numpy array): the user's frame runs a subscript store (``float(t)``
    elsewhere is a decision, or refused as one)."""
    if _running(_STORE_SUBSCR, 3):  # (the user's frame, above __float__ and this)
        raise ConversionError(
            f"a traced value was written into a numpy array at {user_location()} (numpy "
            "takes the number into its memory): make the array from a traced one "
            "(`np.zeros_like(x)`, `x.copy()`) and the write is traced",
            user_namespaces())


#: a numpy array indexed by a traced integer no call's value decides (an index
#: computed in a loop body; a ``fori_loop`` body that indexes by ``i`` is traced
#: as the Python loop instead: :func:`hybridad.frontend.loops.fori_loop`)
TRACED_INDEX = (
    "indices must be known at trace time (constant arrays, or values the traced call "
    "decides), and inside a hybridad.scan body no call decides them: pass the array as "
    "scan's xs -- its rows are the iterations' slices -- or write the loop as a Python "
    "for loop, which hybridad rolls (F[k] becomes a per-iteration input).")


def _value_dependent(what, instead):
    raise TracingError(
        f"{what} of a traced array at {user_location()} depends on its value, which is not "
        f"known while tracing (hybridad records one static graph). {instead}")


def _whole(t, what, instead):
    """``math.floor(t)`` and its kin: the Python int of traced ``t`` rounded
    (``np.floor(t)``), a decision of the trace (:func:`.decisions.decide`)."""
    outcome = decide(t, "int")
    if outcome is None:
        _value_dependent(f"{what} (a Python int)", f"Use {instead}, a traced float.")
    return outcome


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

    __slots__ = ("_base", "_flags", "_origin", "_shares", "_trace", "node", "__weakref__")
    __array_priority__ = 1000
    #: whether its node is not made yet (a lazy selection, ``x[mask]``:
    #: :mod:`hybridad.frontend.numpy_selected`); reading ``node`` makes it
    _lazy = False
    __class_getitem__ = classmethod(types.GenericAlias)  # as ndarray[...]

    def __init__(self, node, trace, flags=0):
        self.node = node
        self._trace = trace
        self._flags = flags
        self._shares = None  # views: the weakrefs of every tracer sharing its memory
        self._origin = None  # read by a fancy index: (weakref of the array, its node, index)
        self._base = None  # a view: (the tracer it views, the view ops from it: (op, attrs))

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
        return map(self.__getitem__, range(self.shape[0]))  # (no generator frame per row)

    # -- value-dependent conversions --------------------------------------
    # (a plan traced at a call's arguments takes their value, guarded:
    # hybridad.core.decisions; a trace from shapes alone refuses)
    def __bool__(self):
        outcome = decide(self, "bool")
        if outcome is not None:
            return outcome
        _value_dependent("bool() / `if` / `and` / `or` / `while`",
                         "Use np.where(cond, a, b) or np.maximum/np.minimum instead, or an "
                         "elementwise function.")

    def __float__(self):
        outcome = decide(self, "float", sys._getframe(1).f_code.co_filename)
        if outcome is not None:
            return outcome
        _stored_into_numpy()
        try:
            _value_dependent("float()", "A differentiated argument reaches it, and a Python "
                             "float would drop its derivative: keep it an array (0-d arrays "
                             "work in arithmetic; comparisons, `if` and int() on it are "
                             "traced, by the values of the call traced). float() of a "
                             "constant's or a data argument's value is taken, guarded.")
        except TracingError as exc:  # (math.sqrt(t): traced again, math's names numpy's)
            spaces = math_namespaces()
            if spaces:
                raise MathCallError(str(exc), spaces) from None
            raise

    def __int__(self):
        outcome = decide(self, "int")
        if outcome is not None:
            return outcome
        _value_dependent("int()", "Shapes and indices must not depend on traced values.")

    def __complex__(self):
        _stored_into_numpy()
        _value_dependent("complex()", "Keep it an array.")

    def __index__(self):
        outcome = decide(self, "index")
        if outcome is not None:
            return outcome
        _value_dependent("Using it as an index", "Indices must be Python ints or constant "
                         "arrays, not traced values.")

    def __str__(self):  # (print(x), logging's %s, f"{x}" in f: what it is, as JAX prints)
        return repr(self)

    def __format__(self, spec):
        if not spec:
            return repr(self)
        _value_dependent(f"format() with {spec!r} / an f-string", "Format outside the traced "
                         "function; print(x) and f'{x}' show the traced shape and dtype.")

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
        return _whole(np.floor(self), "math.floor()", "np.floor(x)")

    def __ceil__(self):
        return _whole(np.ceil(self), "math.ceil()", "np.ceil(x)")

    def __trunc__(self):
        return _whole(np.trunc(self), "math.trunc()", "np.trunc(x)")

    def item(self, *args):
        if not args:  # (a Python number of the array's kind, decided as float/int/bool)
            kind = {"b": "bool", "f": "float"}.get(self.dtype.kind, "int")
            outcome = decide(self, kind, sys._getframe(1).f_code.co_filename)
            if outcome is not None:
                return outcome
        _value_dependent(".item()", "Keep it an array: 0-d arrays work in arithmetic (a Python "
                         "float would drop its derivative).")

    def tolist(self):
        _value_dependent(".tolist()", "Keep it an array.")

    def __array__(self, dtype=None, copy=None):
        if self.dtype.kind in "biu" and _running(_BINARY_SUBSCR, 2):
            # a numpy array indexed by integers or a mask computed from values
            # (sample_weight[outliers_mask]): the call's, guarded (no derivative is lost)
            outcome = decide(self, "array")
            if outcome is not None:
                return outcome if dtype is None else outcome.astype(dtype, copy=False)
            raise TracingError(f"a numpy array indexed by a traced integer at "
                               f"{user_location()}: {TRACED_INDEX}")
        entry = library_entry()
        if entry is not None:
            raise library_refusal(entry, user_location())
        raise ConversionError(
            f"a traced array was converted to a numpy array at {user_location()} by code "
            "tracing does not follow: a numpy function hybridad does not support, or np.array "
            "/ np.asarray bound to a name before tracing began (`from numpy import asarray`; "
            "call np.asarray(...) instead), or a traced value written into a numpy array "
            "(`a[i] = t` with `a = np.zeros(n)`: make `a` from a traced array instead, "
            "`np.zeros_like(x)` or `x.copy()`, and the write is traced). Use np.stack / "
            "np.concatenate to build arrays from traced values.", user_namespaces(),
            conversion_kinds())

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
    @quiet
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        # the library's own code from here on (a ufunc calls no user code): not
        # observed, which halves the cost of tracing arithmetic.  (The profiler
        # suspends itself at this call -- QUIET -- not by paused(): each Python
        # call on the way would be two more events for it)
        hook = OBSERVED.held
        if hook is not None:
            OBSERVED.held = None
        try:
            if method == "__call__" and not kwargs and len(inputs) == 1 and inputs[0] is self:
                r = SURFACE.replayed_unary(ufunc, self)  # (np.tanh(x): its recipe, directly)
                if r is not None:
                    return r
            _note_values(inputs)
            if hook is not None:
                return SURFACE.apply_ufunc(ufunc, method, inputs, kwargs)
            with paused():
                return SURFACE.apply_ufunc(ufunc, method, inputs, kwargs)
        finally:
            if hook is not None:
                sys.setprofile(hook)
                OBSERVED.profiler = hook

    def __array_function__(self, func, types, args, kwargs):
        hook = OBSERVED.profiler
        if hook is not None:  # (as __array_ufunc__)
            OBSERVED.profiler = None
            sys.setprofile(None)
            try:
                _note_values(args)
                code = _holds_code(args) or _holds_code(kwargs.values())
                if not code:
                    return SURFACE.apply_function(func, args, kwargs)
            finally:
                sys.setprofile(hook)
                OBSERVED.profiler = hook
            return SURFACE.apply_function(func, args, kwargs)  # the user's code, observed
        _note_values(args)
        if _holds_code(args) or _holds_code(kwargs.values()):  # np.piecewise, ...:
            return SURFACE.apply_function(func, args, kwargs)  # the user's code, observed
        with paused():
            return SURFACE.apply_function(func, args, kwargs)

    def __array_namespace__(self, *, api_version=None):
        """hybridad's array API namespace (numpy 2's, with ``asarray`` of a
        tracer the tracer: :mod:`.array_api`)."""
        return SURFACE.namespace

    # -- indexing -------------------------------------------------------------
    @quiet
    def __getitem__(self, index):
        hook = OBSERVED.held
        if hook is not None:  # (suspended at this call: QUIET)
            OBSERVED.held = None
            if type(index) is not int and not _basic(index):  # (an index object's
                sys.setprofile(hook)  # methods may be the user's: observed)
                OBSERVED.profiler = hook
                return SURFACE.getitem(self, index)
            try:  # (an index of ints and slices runs no user code)
                return SURFACE.getitem(self, index)
            finally:
                sys.setprofile(hook)
                OBSERVED.profiler = hook
        return SURFACE.getitem(self, index)

    @quiet
    def __setitem__(self, index, value):
        hook = OBSERVED.held
        if hook is not None:  # (suspended at this call: QUIET)
            OBSERVED.held = None
            if type(value) not in _PLAIN_VALUES or not _basic(index):  # (observed)
                sys.setprofile(hook)
                OBSERVED.profiler = hook
                hook = None
        try:  # (a write of a traced or plain value at ints and slices runs no user
            # code: a loop's `u[1:-1] = ...`)
            if SURFACE.setitem is not None and SURFACE.setitem(self, index, value):
                return  # (`a[idx] op= v` with a constant fancy index too)
        finally:
            if hook is not None:
                sys.setprofile(hook)
                OBSERVED.profiler = hook
        raise TracingError(f"in-place assignment to a traced array at {user_location()}: "
                           "build the result functionally (np.where, np.concatenate, ...); "
                           "`a[idx] += v` with a constant integer array `idx` is traced.")

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
# operators
# ----------------------------------------------------------------------------


_BASIC = frozenset({int, slice, type(None), type(Ellipsis), bool})
#: values an element write converts without user code (:meth:`Tracer.__setitem__`)
_PLAIN_VALUES = frozenset({Tracer, float, int, bool, np.float64, np.float32, np.int64,
                           np.int32, np.bool_})


def _basic(index):
    """Whether an index is ints, slices, None and Ellipsis (or a tuple of
    them): reading it runs no user code (no ``__index__`` of the user's)."""
    return type(index) in _BASIC or type(index) is tuple and \
        all(type(k) in _BASIC for k in index)


def _holds_code(values):
    """Whether ``values`` (a numpy function's arguments) hold a function, at
    the top or in a list or tuple (``np.piecewise``'s ``funclist``)."""
    for v in values:
        if isinstance(v, (list, tuple)):
            if any(callable(e) and not isinstance(e, Tracer) for e in v):
                return True
        elif callable(v) and not isinstance(v, Tracer):
            return True
    return False


def _note_values(operands):
    """A numpy scalar handed to a traced operation by the user's code (not by
    hybridad's) may be a number taken out of a captured array: tell the
    guards (:func:`hybridad.core.observe.note_value_operand`)."""
    for x in operands:
        if issubclass(type(x), np.generic):  # (a scalar tracer's __class__ says np.float64)
            frame = sys._getframe(2)
            if frame.f_code.co_filename == __file__:  # an operator of Tracer: its caller
                frame = frame.f_back
            if not frame.f_code.co_filename.startswith(PACKAGE_DIR):
                note_value_operand()
            return


#: operand types (Tracer's own included) for which numpy's ufunc dispatch would call
#: :meth:`Tracer.__array_ufunc__` with the operands as given: a traced
#: operator with another operand of these calls it directly (numpy's own
#: dispatch, and its call event under the observing profiler, were a third
#: of the cost of tracing ``x + y``); any other operand goes through the ufunc
_DIRECT = frozenset({Tracer, float, int, bool, np.ndarray, np.float64, np.float32, np.int64,
                     np.int32, np.bool_})


def _binary(ufunc, reflected=False):
    @quiet
    def op(self, other):
        if type(other) not in _DIRECT and getattr(type(other), "__array_ufunc__", 0) is None:
            return NotImplemented  # numpy's protocol (NEP 13): numpy's Polynomial, ... answer
        hook = OBSERVED.held  # (the profiler, suspended at this call: QUIET)
        if hook is not None:
            OBSERVED.held = None
            if type(other) not in _DIRECT:  # (numpy's dispatch may reach the user's
                sys.setprofile(hook)  # code: observed)
                OBSERVED.profiler = hook
                return ufunc(other, self) if reflected else ufunc(self, other)
        elif type(other) not in _DIRECT:
            return ufunc(other, self) if reflected else ufunc(self, other)
        operands = (other, self) if reflected else (self, other)
        try:
            t = type(other)  # (two traced arrays, or one and a Python number:
            if (t is Tracer or t is float or t is int) and type(self) is Tracer:  # the
                r = SURFACE.replayed_binary(ufunc, operands)  # recipe, directly)
                if r is not None:
                    return r
            if hook is None or type(self) is not Tracer:  # (a subclass's own protocol)
                return self.__array_ufunc__(ufunc, "__call__", *operands)
            _note_values(operands)
            return SURFACE.apply_ufunc(ufunc, "__call__", operands, {})
        finally:
            if hook is not None:
                sys.setprofile(hook)
                OBSERVED.profiler = hook
    return op


def _in_place(ufunc, symbol):
    @quiet
    def op(self, other):
        hook = OBSERVED.held  # (the profiler, suspended at this call: QUIET)
        if hook is not None:
            OBSERVED.held = None
            if type(other) not in _PLAIN_VALUES:  # (numpy's dispatch may reach the
                sys.setprofile(hook)  # user's code: observed)
                OBSERVED.profiler = hook
                hook = None
        try:  # (of a traced or plain value: the ufunc and the write run no user code)
            r = ufunc(self, other)
            if self._flags & SCALAR:  # numpy scalars are immutable: `s += 1` binds a new one
                return r
            return SURFACE.assign(self, r, f"`{symbol}`", ufunc=ufunc)
        finally:
            if hook is not None:
                sys.setprofile(hook)
                OBSERVED.profiler = hook

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
_decisions.TRACER[0] = Tracer  # (what hybridad.core.decisions recognizes as traced)
