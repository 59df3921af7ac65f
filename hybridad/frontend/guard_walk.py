"""What ``f`` can read besides its arguments: the walk that builds its guards.

:func:`build_guards` walks, from ``f`` (and the objects passed as static
arguments), every value the code could have read: globals and closure cells
of each user function reached, defaults, attributes (by the names the code
uses) of user objects, their classes, list/tuple/dict items,
``functools.partial`` parts -- and records one guard per value: Python
scalars and strings by type and value, mutable objects by identity, arrays
by identity, shape, dtype and strides, and arrays by *content* where the
plan cannot see their values through its graph.  The checks are compiled by
:class:`hybridad.frontend.guards.Guards`.
"""

from __future__ import annotations

import functools
import types
import warnings

import numpy as np

from .guards import _MISSING, SMALL_BYTES, Guards, _mro_get, _snapshot
from ..core.user_code import _is_library_module_name, _is_user_function, _is_user_type

__all__ = ["build_guards", "drew_from", "random_states", "root_of"]

#: most guards one plan keeps (beyond, what is left is treated as fixed, with a warning)
MAX_GUARDS = 4096
#: deepest chain of attributes / items followed from ``f``
MAX_DEPTH = 12

_SCALARS = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis),
            type(NotImplemented))


def _code_names(code, out):
    """Names a code object (and the code nested in it) reads: globals and
    attributes, and the identifiers among its string constants -- an
    attribute read by a constant name, ``getattr(self, "k")``,
    ``vars(self)["k"]`` or ``self.__dict__["k"]``, is read all the same."""
    out.update(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _code_names(c, out)
        elif isinstance(c, str) and c.isidentifier():
            out.add(c)
    return out


class _Entry:
    __slots__ = ("parent", "load", "kind", "expected", "what", "extra")

    def __init__(self, parent, load, kind, expected, what, extra=None):
        self.parent = parent  # index of the entry whose value this one's load reads, or -1
        self.load = load  # source: an expression over ``p`` (the parent's value)
        self.kind = kind  # "value", "ident", "array", "len", "none"
        self.expected = expected
        self.what = what  # readable path, for messages
        self.extra = extra  # array: (shape, dtype, strides, content)


class _Walker:
    """Collects the guards of everything reachable from the roots by the names
    the user code reads, growing the names as user functions are found."""

    def __init__(self, names, graph_arrays, values_used):
        self.names = names
        self.graph_arrays = graph_arrays  # ids of array objects the graph reads by reference
        self.values_used = values_used
        self.entries = []
        self.seen = {}  # id(obj) -> entry index (objects walked once)
        self.functions = set()
        self.truncated = False
        self.arrays = []  # (entry index, array): captured arrays

    def add(self, parent, load, kind, expected, what, extra=None):
        if len(self.entries) >= MAX_GUARDS:
            self.truncated = True
            return None
        self.entries.append(_Entry(parent, load, kind, expected, what, extra))
        return len(self.entries) - 1

    # -- one value ------------------------------------------------------------
    def value(self, parent, load, v, what, depth):
        if type(v).__module__ == "hybridad.core.tracer":  # a tracer kept from a trace: identity
            self.add(parent, load, "ident", v, what)
            return
        if isinstance(v, _SCALARS) or isinstance(v, (np.generic, np.dtype, slice, range)):
            self.add(parent, load, "value", v, what)
            return
        if depth > MAX_DEPTH:
            self.add(parent, load, "ident", v, what)
            return
        if isinstance(v, np.ndarray):
            self.array(parent, load, v, what)
            return
        if type(v) is tuple:  # immutable: its items are what can change
            i = self.add(parent, load, "len", len(v), what, extra=tuple)
            for k, item in enumerate(v):
                self.value(i, f"p[{k}]", item, f"{what}[{k}]", depth + 1)
            return
        if isinstance(v, (types.ModuleType, type)) or callable(v) or \
                isinstance(v, (list, dict, set, frozenset)) or _is_user_type(type(v)):
            i = self.add(parent, load, "ident", v, what)
            if i is not None:
                self.inside(i, v, what, depth)
            return
        # an object of a library type (a scipy interpolator, a Generator, ...): identity
        self.add(parent, load, "ident", v, what)

    def array(self, parent, load, a, what):
        graph_read = id(a) in self.graph_arrays or \
            (a.base is not None and id(a.base) in self.graph_arrays)
        content = a.dtype.hasobject is False and (
            not graph_read or a.nbytes <= SMALL_BYTES or self.values_used)
        i = self.add(parent, load, "array", a, what,
                     extra=(a.shape, a.dtype, a.strides, _snapshot(a) if content else None))
        if i is not None:
            self.arrays.append((i, a))

    # -- what is inside a mutable value --------------------------------------
    def inside(self, i, v, what, depth):
        key = id(v)
        if key in self.seen:
            return  # its inside is guarded where it was first reached
        self.seen[key] = i
        if isinstance(v, list):
            self.add(i, "len(p)", "value", len(v), f"len({what})")
            for k, item in enumerate(v):
                self.value(i, f"p[{k}]", item, f"{what}[{k}]", depth + 1)
        elif isinstance(v, dict):
            self.add(i, "len(p)", "value", len(v), f"len({what})")
            for k, item in v.items():
                if isinstance(k, (str, int, bytes, type(None))):
                    self.value(i, f"p.get({k!r}, _M)", item, f"{what}[{k!r}]", depth + 1)
        elif isinstance(v, (set, frozenset)):
            self.add(i, "p", "value", frozenset(v) if isinstance(v, set) else v, what)
        elif isinstance(v, types.ModuleType):
            if not _is_library_module_name(v.__name__):
                self.namespace(i, vars(v), "p.__dict__", what, depth)
        elif isinstance(v, types.MethodType):  # the bound instance is ``self`` to its code
            self.value(i, "p.__self__", v.__self__, "self" if depth == 0 else
                       f"{what}.__self__", depth + 1)
            self.value(i, "p.__func__", v.__func__, what if depth == 0 else
                       f"{what}.__func__", depth + 1)
        elif isinstance(v, functools.partial):
            self.value(i, "p.func", v.func, f"{what}.func", depth + 1)
            self.value(i, "p.args", v.args, f"{what}.args", depth + 1)
            self.value(i, "p.keywords", v.keywords, f"{what}.keywords", depth + 1)
        elif isinstance(v, types.FunctionType):
            self.function(i, v, what, depth)
        elif isinstance(v, type):
            if _is_user_type(v):
                self.namespace(i, vars(v), "p.__dict__", what, depth, cls=True)
        elif isinstance(v, (staticmethod, classmethod)):
            self.value(i, "p.__func__", v.__func__, f"{what}.__func__", depth + 1)
        elif isinstance(v, property):
            for part in ("fget",):
                fn = getattr(v, part)
                if fn is not None:
                    self.value(i, f"p.{part}", fn, f"{what}.{part}", depth + 1)
        elif _is_user_type(type(v)):
            self.instance(i, v, what, depth)
        else:  # a library callable wrapping user code (@hybridad.elementwise, numba.njit)
            for attr in ("py_func", "_deriv"):
                fn = getattr(v, attr, None) if attr in getattr(v, "__dict__", ()) else None
                if _is_user_function(fn):
                    self.value(i, f"p.__dict__.get({attr!r}, _M)", fn, f"{what}.{attr}",
                               depth + 1)
        # builtins, ufuncs, other library objects: identity only

    def function(self, i, fn, what, depth):
        if not _is_user_function(fn):
            # a library function wrapping the user's (functools.wraps: hybridad's own
            # complex-argument wrapper, a decorator's) reads what the user's reads
            wrapped = getattr(fn, "__dict__", {}).get("__wrapped__")
            if wrapped is not None:
                self.value(i, "p.__dict__.get('__wrapped__', _M)", wrapped,
                           f"{what}.__wrapped__", depth + 1)
            return
        self.functions.add(fn)
        code = fn.__code__
        self.add(i, "p.__code__", "ident", code, f"{what}.__code__")
        if fn.__defaults__:
            self.value(i, "p.__defaults__", fn.__defaults__, f"{what}.__defaults__", depth + 1)
        if fn.__kwdefaults__:
            self.value(i, "p.__kwdefaults__", fn.__kwdefaults__, f"{what}.__kwdefaults__",
                       depth + 1)
        for k, (name, cell) in enumerate(zip(code.co_freevars, fn.__closure__ or (),
                                             strict=True)):
            try:
                content = cell.cell_contents
            except ValueError:  # not yet assigned
                content = _MISSING
            self.value(i, f"p.__closure__[{k}].cell_contents", content, f"{name}", depth + 1)
        if getattr(fn, "__dict__", None):  # its attributes (f.k, read inside f or a helper)
            self.namespace(i, fn.__dict__, "p.__dict__", what, depth)
        glob = fn.__globals__
        names = _code_names(code, set())
        mod = glob.get("__name__", "?")
        for name in sorted(names):
            if name in glob:
                self.value(i, f"p.__globals__.get({name!r}, _M)", glob[name],
                           f"{mod}.{name}", depth + 1)

    def namespace(self, i, ns, load, what, depth, cls=False):
        for name in sorted(self.names):
            if name in ns and not (name.startswith("__") and name.endswith("__")):
                self.value(i, f"{load}.get({name!r}, _M)", ns[name], f"{what}.{name}",
                           depth + 1)

    def instance(self, i, obj, what, depth):
        tp = type(obj)
        self.add(i, "p.__class__", "ident", tp, f"type({what})")
        call = _mro_get(tp, "__call__")
        if isinstance(call, types.FunctionType):  # a callable object: what it runs
            self.value(i, "_mro_get(type(p), '__call__')", call, f"{tp.__name__}.__call__",
                       depth + 1)
        d = getattr(obj, "__dict__", None)
        for name in sorted(self.names):
            if name.startswith("__") and name.endswith("__"):
                continue
            if isinstance(d, dict) and name in d:
                self.value(i, f"p.__dict__.get({name!r}, _M)", d[name], f"{what}.{name}",
                           depth + 1)
                continue
            for klass in tp.__mro__:
                if name in vars(klass):
                    attr = vars(klass)[name]
                    if isinstance(d, dict):  # not shadowed by an instance attribute later
                        self.add(i, f"({name!r} in p.__dict__)", "value", False,
                                 f"{what}.{name} (set on the instance)")
                    if type(attr).__name__ == "member_descriptor":  # a __slots__ slot
                        self.value(i, f"getattr(p, {name!r}, _M)", getattr(obj, name, _MISSING),
                                   f"{what}.{name}", depth + 1)
                    elif _is_user_type(klass):
                        self.value(i, f"type(p).__dict__.get({name!r}, _M)" if klass is tp
                                   else f"_mro_get(type(p), {name!r})", attr,
                                   f"{type(obj).__name__}.{name}", depth + 1)
                    break


# ----------------------------------------------------------------------------
# building the guards of one trace
# ----------------------------------------------------------------------------


def build_guards(f, static_args, obs, const_arrays):
    """The :class:`Guards` of a plan of ``f``.

    Parameters
    ----------
    f : callable
        What the user passed (a function, bound method, ``functools.partial``
        or callable object): the root every guard reads from at call time.
    static_args : list of (str, object)
        Static (non-array) argument leaves that are objects, with the
        expression reading each from the call's argument tuple ``a``
        (``"a[1]"``): walked like ``f``'s closure.
    obs : Observation
        From :func:`observe` around the trace.
    const_arrays : list of ndarray
        The arrays the traced graph reads by reference (its non-literal
        constants): their in-place changes are read by every call.

    Notes
    -----
    An array is compared by content on every call when the graph does not
    read it (``f`` used it only while tracing: as a mask, indices, numbers
    taken out of it, an input of plain numpy code), when it is small
    (:data:`SMALL_BYTES`), or when ``f`` took values out of arrays while
    tracing (``obs.values_used``); otherwise by identity, shape, dtype and
    strides, and its in-place changes are read by the graph.
    """
    graph_arrays = set()
    for a in const_arrays:
        while isinstance(a, np.ndarray):
            graph_arrays.add(id(a))
            a = a.base
    names = set()
    for code in obs.codes:
        _code_names(code, names)
    roots = _roots(f)
    for _, fn in roots:
        if isinstance(fn, types.FunctionType):
            _code_names(fn.__code__, names)
    while True:  # names grow as user functions are reached
        walker = _Walker(frozenset(names), graph_arrays, obs.values_used)
        if isinstance(f, types.MethodType):  # r is the instance; the function is fixed
            walker.value(-1, "r", f.__self__, "self", 0)
            walker.value(-1, "_root_func()", f.__func__, _describe_root(f), 0)
        else:
            walker.value(-1, "r", f, _describe_root(f), 0)
        for expr, a in static_args:
            walker.value(-1, expr, a, f"argument {expr[1:]}", 0)
        grown = set(names)
        for fn in walker.functions:
            _code_names(fn.__code__, grown)
        if grown == names:
            break
        names = grown
    if walker.truncated:
        warnings.warn(f"hybridad: {_describe_root(f)} reaches more than {MAX_GUARDS} values "
                      "through its closure, globals and attributes; the rest is treated as "
                      "fixed (pass what changes between calls as arguments)", stacklevel=4)
    entries = list(walker.entries)
    _drop_root_ident(entries)
    roots = {"_root_func": f.__func__} if isinstance(f, types.MethodType) else {}
    return Guards(entries, walker.truncated, roots)


def _drop_root_ident(entries):
    """The roots (``f`` itself; for a bound method its instance and function)
    are the plan's cache key: their identity needs no check."""
    for e in entries:
        if e.parent < 0 and e.load in ("r", "_root_func()") and e.kind == "ident":
            e.kind = "none"


def root_of(f):
    """What a plan's guards read from: ``f``, or the instance of a bound method."""
    return f.__self__ if isinstance(f, types.MethodType) else f


def _roots(f):
    out = []
    if isinstance(f, types.MethodType):
        out.append(("method", f.__func__))
    elif isinstance(f, functools.partial):
        out.append(("partial", f.func))
    elif isinstance(f, types.FunctionType):
        out.append(("function", f))
    else:
        call = _mro_get(type(f), "__call__")
        if isinstance(call, types.FunctionType):
            out.append(("call", call))
    return out


def _describe_root(f):
    return getattr(f, "__qualname__", None) or type(f).__name__


_RANDOM_TYPES = (np.random.Generator, np.random.RandomState, np.random.BitGenerator)


def random_states(f, limit=2000):
    """``[(generator, its state)]`` of the numpy random generators ``f`` can
    draw from: ``np.random.Generator`` / ``RandomState`` / bit generators in
    the globals its code (and the user functions it reaches) reads, its
    closure cells and defaults, a bound method's instance and ``functools.
    partial``'s parts, and the attributes and items of the user objects among
    them.  Their methods are compiled code no profiler sees, so a trace
    compares these states before and after (:func:`drew_from`)."""
    found, seen, stack = [], set(), [(f, 0)]
    while stack and len(seen) < limit:
        v, depth = stack.pop()
        if id(v) in seen or depth > MAX_DEPTH:
            continue
        seen.add(id(v))
        if isinstance(v, _RANDOM_TYPES):
            found.append(v)
            continue
        nxt = []
        if isinstance(v, types.MethodType):
            nxt = [v.__self__, v.__func__]
        elif isinstance(v, functools.partial):
            nxt = [v.func, *v.args, *v.keywords.values()]
        elif isinstance(v, types.FunctionType):
            if getattr(v, "__wrapped__", None) is not None:
                nxt.append(v.__wrapped__)
            if _is_user_function(v):
                names = _code_names(v.__code__, set())
                nxt += [v.__globals__[n] for n in sorted(names) if n in v.__globals__]
                for cell in v.__closure__ or ():
                    try:
                        nxt.append(cell.cell_contents)
                    except ValueError:  # (not yet assigned)
                        pass
                nxt += list(v.__defaults__ or ()) + list((v.__kwdefaults__ or {}).values())
        elif isinstance(v, (list, tuple)):  # (a long one holds data, not generators)
            nxt = list(v[:256])
        elif isinstance(v, dict):
            nxt = list(v.values())[:256]
        elif _is_user_type(type(v)) and not isinstance(v, type):
            nxt = list(getattr(v, "__dict__", {}).values())
            call = _mro_get(type(v), "__call__")
            nxt += [call] if isinstance(call, types.FunctionType) else []
        stack.extend((o, depth + 1) for o in nxt)
    return [(g, _state_of(g)) for g in found]


def _state_of(g):
    bits = g if isinstance(g, np.random.BitGenerator) else \
        g.bit_generator if isinstance(g, np.random.Generator) else None
    return repr(bits.state) if bits is not None else repr(g.get_state(legacy=False))


def drew_from(states):
    """The first generator of :func:`random_states`'s ``states`` whose state
    moved since, or None."""
    return next((g for g, s in states if _state_of(g) != s), None)
