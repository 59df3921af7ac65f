"""Stage 1 (beside tracing): what ``f`` reads besides its arguments, checked on every call.

A plan is the graph of ``f`` *as it was when it was traced*.  Besides its
arguments, ``f`` reads Python state -- its globals and closure, the
attributes of ``self`` for a bound method, the items of captured lists and
dicts, the attributes of the objects those hold -- and whatever it read is
baked into the graph: a float becomes a literal, a branch taken becomes the
graph's shape, an array becomes a constant (read by reference), a mask
becomes gather positions.  This module makes a plan *know* what it read, in
the way torch.compile's guards do:

1. :func:`observe` runs the trace under a per-thread profiler that records
   which user code ran (the code objects of ``f`` and of every helper,
   method and property it called) and refuses calls whose result changes
   from call to call without depending on the inputs (``np.random.*``,
   ``random.*``, ``time.time``, ``os.urandom``, ...): a plan would replay
   the one draw made while tracing.
2. :func:`build_guards` walks, from ``f`` (and the objects passed as static
   arguments), every value the code could have read: globals and closure
   cells of each user function reached, defaults, attributes (by the names
   the code uses) of user objects, their classes, list/tuple/dict items,
   ``functools.partial`` parts -- and records one guard per value: Python
   scalars and strings by type and value, mutable objects by identity,
   arrays by identity, shape, dtype and strides, and arrays by *content*
   where the plan cannot see their values through its graph (see
   :func:`build_guards`).
3. :class:`Guards` compiles the checks into one small generated function
   (a few tens of nanoseconds per guard; none at all for a function that
   reads nothing but modules) run before a plan writes anything.

What a failed check does is the caller's choice: :func:`hybridad.gradient`
and the other convenience functions re-trace and rebuild the plan;
an explicit :func:`hybridad.compile` plan re-traces, keeps running when the
graph came out the same, and raises :class:`~hybridad.errors.StalePlanError`
otherwise.  ``docs/limitations.md`` says what is and is not seen.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import sysconfig
import threading
import types
import warnings
import weakref

import numpy as np

from ..errors import TracingError

__all__ = ["Guards", "Observation", "build_guards", "observe", "paused", "root_of"]

#: arrays up to this many bytes are compared by content on every call
SMALL_BYTES = 16 * 1024
#: most guards one plan keeps (beyond, what is left is treated as fixed, with a warning)
MAX_GUARDS = 4096
#: deepest chain of attributes / items followed from ``f``
MAX_DEPTH = 12

_MISSING = type("_Missing", (), {"__repr__": lambda self: "<missing>"})()
_state = threading.local()

# ----------------------------------------------------------------------------
# library or user code
# ----------------------------------------------------------------------------

#: top-level packages whose state hybridad treats as fixed (never walked into)
LIBRARY_PACKAGES = frozenset({
    "numpy", "scipy", "hybridad", "numba", "llvmlite", "cupy", "cupyx", "jax", "jaxlib",
    "torch", "autograd", "threadpoolctl", "dask", "distributed", "pytest", "_pytest",
    "pluggy", "hypothesis"}) | frozenset(getattr(sys, "stdlib_module_names", ()))

_HERE = os.path.dirname(os.path.abspath(__file__))
_LIB_DIRS = tuple(sorted({os.path.abspath(p) + os.sep for p in (
    sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib"),
    os.path.dirname(os.__file__), os.path.dirname(np.__file__), _HERE) if p}))
_file_kind = {}


def _is_user_file(filename):
    """Whether a code object's file is user code (not numpy's, hybridad's, the
    standard library's); cached per file name."""
    kind = _file_kind.get(filename)
    if kind is None:
        if filename.startswith("<") and filename.startswith(("<frozen", "<hybridad",
                                                               "<string>" + "\0")):
            kind = False
        else:
            path = os.path.abspath(filename)
            kind = not path.startswith(_LIB_DIRS) and not _in_library_package(path)
        _file_kind[filename] = kind
    return kind


def _in_library_package(path):
    parts = path.split(os.sep)
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            i = parts.index(marker)
            return i + 1 < len(parts) and parts[i + 1].split(".")[0] in LIBRARY_PACKAGES
    return False


def _is_library_module_name(name):
    return isinstance(name, str) and name.split(".")[0] in LIBRARY_PACKAGES


def _is_user_function(fn):
    return isinstance(fn, types.FunctionType) and _is_user_file(fn.__code__.co_filename) \
        and not _is_library_module_name(getattr(fn, "__module__", None))


def _is_user_type(tp):
    return isinstance(tp, type) and not _is_library_module_name(getattr(tp, "__module__", ""))


# ----------------------------------------------------------------------------
# 1. observing a trace
# ----------------------------------------------------------------------------

#: methods of numpy arrays and scalars that hand a value to Python (evidence that
#: f used an array's values outside the graph)
_VALUE_METHODS = frozenset({"item", "tolist", "tobytes", "__float__", "__int__",
                            "__index__", "__bool__", "__format__", "__str__"})
_TIME_FUNCTIONS = frozenset({"time", "time_ns", "perf_counter", "perf_counter_ns",
                             "monotonic", "monotonic_ns", "process_time", "process_time_ns",
                             "thread_time", "thread_time_ns"})
_NONDETERMINISTIC_PY = frozenset({"random", "secrets", "uuid"})
_RNG_MAKERS = frozenset({"default_rng", "RandomState", "Generator", "SeedSequence", "PCG64",
                         "MT19937", "Philox", "SFC64", "PCG64DXSM", "BitGenerator"})


class Observation:
    """What one trace of ``f`` did besides building the graph.

    Attributes
    ----------
    codes : set of code objects
        User code that ran (``f``, helpers, methods, properties).
    refused : list of str
        Calls whose result does not depend on the inputs but changes between
        calls (random draws, clocks), with their location.
    values_used : bool
        Whether user code took values out of numpy arrays or scalars while
        tracing (``.item()``, ``.tolist()``, numpy scalars as operands): the
        graph may then hold numbers computed from captured arrays.
    """

    def __init__(self):
        self.codes = set()
        self.refused = []
        self.values_used = False
        self.active = False


def _owner_module(fn):
    """The module a builtin function or method belongs to (its class's module for a method)."""
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, types.ModuleType):
        return owner.__name__
    if isinstance(owner, type):
        return owner.__module__
    if owner is not None:
        return type(owner).__module__
    return getattr(fn, "__module__", None) or ""


def _nondeterministic(fn):
    """The name of a builtin call whose result changes between calls, or None."""
    mod = _owner_module(fn)
    name = getattr(fn, "__name__", "")
    if mod.startswith("numpy.random"):
        return None if name in _RNG_MAKERS else f"numpy.random ({name})"
    if mod in ("random", "_random"):
        return f"random.{name}"
    if mod == "time" and name in _TIME_FUNCTIONS:
        return f"time.{name}"
    if mod in ("posix", "nt", "os") and name in ("urandom", "getrandom"):
        return f"os.{name}"
    if mod == "datetime" and name in ("now", "utcnow", "today"):
        return f"datetime.{name}"
    return None


def _location(frame):
    import linecache

    while frame is not None and not _is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return "<unknown location>"
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}" + \
        (f": {line}" if line else "")


def _profiler(obs):
    codes = obs.codes

    def profile(frame, event, arg):
        if event == "c_call":  # made by the user's code itself (libraries may time things)
            if not _is_user_file(frame.f_code.co_filename):
                return
            what = _nondeterministic(arg)
            if what is not None:
                obs.refused.append(f"{what} at {_location(frame)}")
            elif getattr(arg, "__name__", "") in _VALUE_METHODS and \
                    isinstance(getattr(arg, "__self__", None), (np.ndarray, np.generic)):
                obs.values_used = True
        elif event == "call":
            code = frame.f_code
            if code in codes:
                return
            if _is_user_file(code.co_filename):
                codes.add(code)
            elif frame.f_globals.get("__name__") in _NONDETERMINISTIC_PY and \
                    frame.f_back is not None and _is_user_file(frame.f_back.f_code.co_filename):
                obs.refused.append(f"{frame.f_globals['__name__']}.{code.co_name} at "
                                   f"{_location(frame.f_back)}")

    return profile


@contextlib.contextmanager
def observe(name):
    """Record an :class:`Observation` while ``f`` is traced in this block.

    Raises :class:`~hybridad.errors.TracingError` at the end of the block when
    ``f`` drew random numbers or read a clock.  Another profiler already
    active in this thread (cProfile, a debugger's) is left alone: the
    observation then knows only what static analysis gives.
    """
    obs = Observation()
    rng_before = _global_rng_state()
    stack = getattr(_state, "stack", None)
    if stack is None:
        stack = _state.stack = []
    previous = sys.getprofile()
    hook = _profiler(obs) if previous is None else None
    stack.append((obs, hook))
    if hook is not None:
        obs.active = True
        sys.setprofile(hook)
    try:
        yield obs
    finally:
        if hook is not None:
            sys.setprofile(previous)
        stack.pop()
    if _global_rng_state() != rng_before:  # np.random.<fn> (numpy's global generator)
        obs.refused.append("numpy.random (a function of the module, such as "
                           "np.random.normal: it draws from numpy's global generator)")
    if obs.refused:
        raise TracingError(
            f"{name} calls {obs.refused[0]} while it is traced: its result does not depend "
            "on f's inputs but changes from call to call, and a plan records one trace, so "
            "every later call would reuse this one draw. Draw the numbers (or read the "
            "clock) outside f and pass them in as an argument, e.g. f(x, noise)"
            + (f" ({len(obs.refused) - 1} more such call(s))" if len(obs.refused) > 1 else ""))


def _global_rng_state():
    """Where numpy's global generator (``np.random.normal`` and friends) stands.
    Its methods are Cython functions no profiler sees, so a trace compares
    this before and after."""
    try:
        state = np.random.mtrand._rand._bit_generator.state
        inner = state["state"]
        return (state.get("bit_generator"), inner.get("pos"), inner["key"].tobytes())
    except (AttributeError, KeyError, TypeError):  # another numpy's internals
        return None


def current_observation():
    """The :class:`Observation` of the innermost active :func:`observe`, or None."""
    stack = getattr(_state, "stack", None)
    return stack[-1][0] if stack else None


class _Paused:
    """Suspends the profiler of :func:`observe` while hybridad's own code runs."""

    __slots__ = ("hook",)

    def __init__(self, hook):
        self.hook = hook

    def __enter__(self):
        sys.setprofile(None)

    def __exit__(self, *exc):
        sys.setprofile(self.hook)


_NOT_OBSERVED = contextlib.nullcontext()


def paused():
    """A context in which the profiler of :func:`observe` is suspended (``bind``,
    numba compiles): only the user's code is observed, and the profiler costs
    nothing inside the library.  A no-op when nothing is observed."""
    stack = getattr(_state, "stack", None)
    if not stack or stack[-1][1] is None or sys.getprofile() is not stack[-1][1]:
        return _NOT_OBSERVED
    return _Paused(stack[-1][1])


def note_value_operand():
    """Record that a numpy scalar from user code met a traced value (a number
    possibly taken out of a captured array)."""
    obs = current_observation()
    if obs is not None:
        obs.values_used = True


# ----------------------------------------------------------------------------
# 2. what f can read: the walk
# ----------------------------------------------------------------------------

_SCALARS = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis),
            type(NotImplemented))


def _code_names(code, out):
    """Names a code object (and the code nested in it) reads: globals and attributes."""
    out.update(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _code_names(c, out)
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
        if type(v).__module__ == "hybridad.frontend.trace":  # a tracer kept from a trace: identity
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


def _mro_get(tp, name):
    for klass in tp.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    return _MISSING


def _snapshot(a):
    """What a content guard compares: the bytes of a small array, a hash of a large one."""
    if a.nbytes <= SMALL_BYTES:
        return a.tobytes()
    return ("hash", _content_hash(a))


def _content_hash(a):
    """A 64-bit hash of an array's bytes (C order), computed without a copy when
    the array is contiguous."""
    data = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    return int(_hash_kernel()(data))


@functools.lru_cache(maxsize=None)
def _hash_kernel():
    import numba

    @numba.njit(cache=True, nogil=True)
    def content_hash(data):
        n8 = data.size // 8
        words = data[:n8 * 8].view(np.uint64)
        h = np.uint64(0x9E3779B97F4A7C15) ^ np.uint64(data.size)
        prime = np.uint64(0x100000001B3)
        for w in words:
            h = (h ^ w) * prime
            h ^= h >> np.uint64(29)
        for k in range(n8 * 8, data.size):
            h = (h ^ np.uint64(data[k])) * prime
        return h

    return content_hash


def _same_content(a, snap):
    if type(snap) is bytes:
        return a.nbytes == len(snap) and a.tobytes() == snap
    return _content_hash(a) == snap[1]


# ----------------------------------------------------------------------------
# 3. the check, compiled
# ----------------------------------------------------------------------------


class Guards:
    """The checks of one plan: ``check(root, args)`` returns None when ``f``
    would still read what it read when the plan was traced, else a message
    naming the first value that changed.

    Attributes
    ----------
    count : int
        Number of guards.
    source : str
        The generated check function (``explain()`` shows it).
    paths : list of str
        What each guard watches (``self.w``, ``module.SCALE``, ``c[2]``, ...).
    """

    def __init__(self, entries, truncated=False, roots=None):
        self.count = sum(e.kind != "none" for e in entries)
        self.paths = [e.what for e in entries if e.kind != "none"]
        self.truncated = truncated
        roots = {name: _weak_or_none(obj) for name, obj in (roots or {}).items()}
        self._check, self.source = _compile(entries, roots)
        self._load = _compile_loads(entries, roots)
        #: ids of the arrays found in f's state (the graph holds them)
        self.captured = {id(e.expected) for e in entries if e.kind == "array"}
        for e in entries:  # the entries are kept for messages only: never keep f alive
            if e.kind in ("ident", "array", "none"):
                e.expected = _weak_or_none(e.expected)
        self._entries = entries

    def check(self, root, args=()):
        """None, or a sentence naming what changed since the plan was traced."""
        k = self._check(root, args)
        if k is None:
            return None
        if k < 0:
            return "a value f reads can no longer be read the way it was when the plan " \
                "was traced"
        return self._explain(k, root, args)

    def _explain(self, k, root, args):
        e = self._entries[k]
        try:
            now = self._load(root, args)[k]
        except Exception:  # noqa: BLE001 - only for the message
            return f"{e.what} changed since the plan was traced"
        if e.kind == "value":
            return f"{e.what} was {e.expected!r} when the plan was traced and is now {now!r}"
        if e.kind == "array":
            shape, dtype, strides, content = e.extra
            if not isinstance(now, np.ndarray) or now is not e.expected():
                return f"{e.what} was replaced by another {type(now).__name__}"
            if now.shape != shape or now.dtype != dtype or now.strides != strides:
                return f"the array {e.what} was reshaped or retyped (shape {shape} -> " \
                    f"{now.shape}, dtype {dtype} -> {now.dtype})"
            return f"the values of the array {e.what} were changed in place"
        return f"{e.what} was replaced by another object"

    def __len__(self):
        return self.count

    def __repr__(self):
        return f"<hybridad.Guards: {self.count} checks>"


def _compile(entries, roots):
    """The check function of ``entries``: one statement per guard, parents first
    (``roots``: name -> weakref of the fixed objects guards start from)."""
    if not any(e.kind != "none" for e in entries):
        return (lambda r, a: None), "def check(r, a):\n    return None\n"
    ns = {"_M": _MISSING, "_same": _same_content, "_mro_get": _mro_get, **roots}
    lines = ["def check(r, a):", "    try:"]
    for k, e in enumerate(entries):
        var = f"v{k}"
        src = e.load if e.parent < 0 else _subst(e.load, f"v{e.parent}")
        lines.append(f"        {var} = {src}")
        exp = f"_e{k}"
        if e.kind == "value":
            v = e.expected
            ns[exp], ns[f"_t{k}"] = v, type(v)
            if v is None or v is _MISSING or isinstance(v, (bool, type(Ellipsis))):
                cond = f"{var} is not {exp}"
            elif isinstance(v, float) and v != v:  # NaN: equal to nothing, itself included
                cond = f"{var}.__class__ is not _t{k} or {var} == {var}"
            else:
                cond = f"{var}.__class__ is not _t{k} or not ({var} == {exp})"
            lines.append(f"        if {cond}: return {k}")
        elif e.kind == "len":
            ns[exp], ns[f"_t{k}"] = e.expected, e.extra
            lines.append(f"        if {var}.__class__ is not _t{k} or len({var}) != {exp}: "
                         f"return {k}")
        elif e.kind in ("ident", "array"):
            try:  # held weakly where it can be: a plan must not keep user objects alive
                ns[exp] = weakref.ref(e.expected)
                ident = f"{var} is not {exp}()"
            except TypeError:
                ns[exp] = e.expected
                ident = f"{var} is not {exp}"
            if e.kind == "ident":
                lines.append(f"        if {ident}: return {k}")
                continue
            shape, dtype, strides, content = e.extra
            ns[f"_s{k}"], ns[f"_d{k}"], ns[f"_st{k}"] = shape, dtype, strides
            lines.append(f"        if {ident} or {var}.shape != _s{k} or {var}.dtype != _d{k} "
                         f"or {var}.strides != _st{k}: return {k}")
            if type(content) is bytes:  # a small array: its bytes, compared inline
                ns[f"_c{k}"] = content
                lines.append(f"        if {var}.tobytes() != _c{k}: return {k}")
            elif content is not None:
                ns[f"_c{k}"] = content
                lines.append(f"        if not _same({var}, _c{k}): return {k}")
        # kind "none": loaded for the guards below it only
    lines += ["    except Exception:  # a value could no longer be read the way it was",
              "        return -1", "    return None"]
    source = "\n".join(lines) + "\n"
    exec(compile(source, "<hybridad guards>", "exec"), ns)  # noqa: S102
    return ns["check"], source


def _weak_or_none(obj):
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: None


def _compile_loads(entries, roots):
    """A function returning the current value of every entry (for messages)."""
    lines = ["def load(r, a):", "    out = []"]
    for k, e in enumerate(entries):
        src = e.load if e.parent < 0 else _subst(e.load, f"v{e.parent}")
        lines += ["    try:", f"        v{k} = {src}", "    except Exception:",
                  f"        v{k} = _M", f"    out.append(v{k})"]
    lines.append("    return out")
    ns = {"_M": _MISSING, "_mro_get": _mro_get, **roots}
    exec(compile("\n".join(lines) + "\n", "<hybridad guard loads>", "exec"), ns)  # noqa: S102
    return ns["load"]


def _subst(load, parent_var):
    """``load`` with its parent placeholder ``p`` replaced by ``parent_var``."""
    import re

    return re.sub(r"\bp\b", parent_var, load)


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


# ----------------------------------------------------------------------------
# the graph a trace gave: is a new trace the same?
# ----------------------------------------------------------------------------


def signature(nodes, outputs, captured):
    """A comparable summary of a traced forward graph: ops, structure, shapes,
    dtypes, attributes and constants -- literal constants and arrays ``f``
    made while tracing by value, arrays captured from its state (``captured``:
    their ids) by identity.  Two traces with equal signatures give the same
    plan."""
    pos = {}
    out = []
    for k, n in enumerate(nodes):
        pos[n.id] = k
        if n.op == "const":
            v = n.attrs["value"]
            if not n.is_literal and id(v) in captured:
                c = ("ref", id(v), v.shape, v.dtype.str, v.strides)
            else:
                c = ("val", v.dtype.str, v.shape, v.tobytes() if not v.dtype.hasobject
                     else id(v))
            out.append(("const", c))
            continue
        out.append((n.op, tuple(pos[a.id] for a in n.args), n.shape, n.dtype.str,
                    tuple((key, _attr_signature(val)) for key, val in sorted(n.attrs.items()))))
    out.append(("outputs", tuple(pos.get(o.id, -1) for o in outputs)))
    return tuple(out)


def _attr_signature(v):
    if isinstance(v, _SCALARS):
        return (type(v).__name__, v)
    if isinstance(v, np.generic):
        return (v.dtype.str, v.item())
    if isinstance(v, np.dtype):
        return ("dtype", v.str)
    if isinstance(v, slice):
        return ("slice", _attr_signature(v.start), _attr_signature(v.stop),
                _attr_signature(v.step))
    if isinstance(v, (tuple, list)):
        return (type(v).__name__,) + tuple(_attr_signature(x) for x in v)
    if isinstance(v, dict):
        return ("dict",) + tuple((k, _attr_signature(x)) for k, x in sorted(v.items()))
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.shape, v.tobytes() if not v.dtype.hasobject else id(v))
    return ("object", id(v))  # compared by identity: a new one means a new plan


def captured_ids(guards):
    """Ids of the arrays a plan's guards found in ``f``'s state."""
    return guards.captured
