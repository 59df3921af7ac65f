"""Frontend stage (beside tracing): the compiled checks of what ``f`` reads besides its arguments.

A plan is the graph of ``f`` *as it was when it was traced*.  Besides its
arguments, ``f`` reads Python state -- its globals and closure, the
attributes of ``self`` for a bound method, the items of captured lists and
dicts, the attributes of the objects those hold -- and whatever it read is
baked into the graph: a float becomes a literal, a branch taken becomes the
graph's shape, an array becomes a constant (read by reference), a mask
becomes gather positions.  A plan *knows* what it read, in the way
torch.compile's guards do:

1. :func:`hybridad.core.observe.observe` runs the trace under a
   per-thread profiler that records which user code ran and refuses calls
   whose result changes from call to call without depending on the inputs
   (``np.random.*``, ``time.time``, ...).
2. :func:`hybridad.frontend.guard_walk.build_guards` walks, from ``f``,
   every value the code could have read and records one guard per value
   (by value, identity, or an array's identity, shape, dtype, strides and
   content).
3. :class:`Guards` (this module) compiles the checks into one small
   generated function (a few tens of nanoseconds per guard; none at all for
   a function that reads nothing but modules) run before a plan writes
   anything.

What a failed check does is the caller's choice: :func:`hybridad.gradient`
and the other convenience functions re-trace and rebuild the plan;
an explicit :func:`hybridad.compile` plan re-traces, keeps running when the
graph came out the same (:func:`hybridad.frontend.signature.signature`), and
raises :class:`~hybridad.errors.StalePlanError` otherwise.
``docs/limitations.md`` says what is and is not seen.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import types
import weakref

import numpy as np

__all__ = ["Guards", "captured_ids", "note_values_read", "values_read"]

#: arrays up to this many bytes are compared by content on every call
SMALL_BYTES = 16 * 1024

_MISSING = type("_Missing", (), {"__repr__": lambda self: "<missing>"})()


# ----------------------------------------------------------------------------
# the captured arrays whose values a plan's structure read
# ----------------------------------------------------------------------------

_READ = threading.local()


@contextlib.contextmanager
def values_read():
    """While active (in this thread): ``{id: array}`` of the arrays ``f``
    captured whose *values* what ran meanwhile read -- a sparsity pattern
    takes a captured mask's or matrix's zeros as structural.  A plan built on
    them guards their contents (:meth:`hybridad.plans.guarded.GuardedMixin._pin_values`)."""
    before = getattr(_READ, "arrays", None)
    _READ.arrays = found = {}
    try:
        yield found
    finally:
        _READ.arrays = before


def note_values_read(array):
    """Record that the values of the captured ``array`` were read (see :func:`values_read`)."""
    found = getattr(_READ, "arrays", None)
    if found is not None and isinstance(array, np.ndarray):
        found[id(array)] = array


# ----------------------------------------------------------------------------
# the check, compiled
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


#: the types of watched objects a check holds strongly, compared with ``is``
#: (no weak reference to call on every check): a code object holds f's code
#: and constants, not its closure, globals or defaults; modules live in
#: ``sys.modules`` anyway
_HELD = (types.CodeType, types.ModuleType)


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
            if type(e.expected) in _HELD:  # (f's code, a module: no call per check)
                ns[exp] = e.expected
                ident = f"{var} is not {exp}"
            else:
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


@functools.lru_cache(maxsize=4096)
def _subst(load, parent_var):
    """``load`` with its parent placeholder, the name ``p``, replaced by
    ``parent_var``: the name only, as Python's tokenizer sees it -- never
    text inside a string (a key ``'p'``: ``p.__dict__.get('p', _M)``) or an
    attribute named ``p`` (``p.p``), which a pattern on the text also
    rewrote (the guard then read another value, failed on every call and
    the plan traced again each time)."""
    import io
    import tokenize

    spans, prev = [], None  # (a load is one line: columns are offsets)
    for tok in tokenize.generate_tokens(io.StringIO(load).readline):
        if tok.type == tokenize.NAME and tok.string == "p" and \
                not (prev is not None and prev.type == tokenize.OP and prev.string == "."):
            spans.append((tok.start[1], tok.end[1]))
        prev = tok
    for a, b in reversed(spans):
        load = load[:a] + parent_var + load[b:]
    return load


def captured_ids(guards):
    """Ids of the arrays a plan's guards found in ``f``'s state."""
    return guards.captured


# ----------------------------------------------------------------------------
# what the generated checks call
# ----------------------------------------------------------------------------


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


#: itemsize -> the unsigned integer type of that size (a strided array's
#: elements hashed by their bits, in place)
_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _content_hash(a):
    """A 64-bit hash of an array's contents, without a copy: its bytes when it is
    C-contiguous, else its elements' bits in C order, read in place (a guard's
    array keeps its strides, which the guard checks first, so one array is
    always hashed the same way)."""
    if a.flags.c_contiguous:
        return int(_hash_kernel()(a.reshape(-1).view(np.uint8)))
    if a.dtype.itemsize in _BITS and a.ndim:
        return int(_element_hash_kernel()(a.view(_BITS[a.dtype.itemsize])))
    return int(_hash_kernel()(np.ascontiguousarray(a).reshape(-1).view(np.uint8)))


@functools.lru_cache(maxsize=None)
def _hash_kernel():
    import numba

    from .._libcache import install

    install()  # numba's cache of the kernel: stamped with its imports' source

    @numba.njit(cache=True, nogil=True)
    def content_hash(data):
        # eight independent chains over interleaved words (one chain waited on
        # each multiply: 0.83 ms for 4 MB, 0.22 ms so), then the chains and
        # the trailing bytes into one
        n = data.size // 64
        w = data[:n * 64].view(np.uint64)
        p, s = np.uint64(0x100000001B3), np.uint64(29)
        seed = np.uint64(0x9E3779B97F4A7C15) ^ np.uint64(data.size)
        h0, h1, h2, h3 = seed, seed + np.uint64(1), seed + np.uint64(2), seed + np.uint64(3)
        h4, h5, h6, h7 = seed + np.uint64(4), seed + np.uint64(5), seed + np.uint64(6), \
            seed + np.uint64(7)
        for i in range(0, n * 8, 8):
            h0 = (h0 ^ w[i]) * p
            h0 ^= h0 >> s
            h1 = (h1 ^ w[i + 1]) * p
            h1 ^= h1 >> s
            h2 = (h2 ^ w[i + 2]) * p
            h2 ^= h2 >> s
            h3 = (h3 ^ w[i + 3]) * p
            h3 ^= h3 >> s
            h4 = (h4 ^ w[i + 4]) * p
            h4 ^= h4 >> s
            h5 = (h5 ^ w[i + 5]) * p
            h5 ^= h5 >> s
            h6 = (h6 ^ w[i + 6]) * p
            h6 ^= h6 >> s
            h7 = (h7 ^ w[i + 7]) * p
            h7 ^= h7 >> s
        h = seed
        for v in (h0, h1, h2, h3, h4, h5, h6, h7):
            h = (h ^ v) * p
            h ^= h >> s
        for k in range(n * 64, data.size):
            h = (h ^ np.uint64(data[k])) * p
        return h

    return content_hash


@functools.lru_cache(maxsize=None)
def _element_hash_kernel():
    import numba

    from .._libcache import install

    install()

    @numba.njit(cache=True, nogil=True)
    def element_hash(bits):
        h = np.uint64(0x9E3779B97F4A7C15) ^ np.uint64(bits.size)
        prime = np.uint64(0x100000001B3)
        for w in bits.flat:
            h = (h ^ np.uint64(w)) * prime
            h ^= h >> np.uint64(29)
        return h

    return element_hash


def _same_content(a, snap):
    if type(snap) is bytes:
        return a.nbytes == len(snap) and a.tobytes() == snap
    return _content_hash(a) == snap[1]
