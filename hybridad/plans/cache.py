"""The plan cache behind the convenience functions (:mod:`hybridad.api`).

Keyed by ``(argnums, argument structure and static values, shapes, dtypes)``
under the function, held *weakly* -- a function that is garbage-collected
takes its plans with it, and at most :data:`MAX_PLANS_PER_FUNCTION`
signatures are kept per function (least recently used dropped first).

"The function" of a plain Python function is its *twin* (:func:`owner_of`):
one stand-in for every function object of the same code, globals, closure
cells and defaults.  Such functions run the same bytecode on the same
objects, so they compute the same thing, now and after any change to what
they read (which the plan's guards check, from the twin).  A lambda made in
a loop -- ``ha.gradient(lambda w: loss(w, X), w, out=res)`` each iteration
-- is a new object each time with the same code and cells: it finds the
plan the lambda before it built (a few microseconds, where a new plan took
5-15 ms).  A twin lives while one of its functions does, and after that
only while a function like it can still be made (its cells and defaults are
still referenced from elsewhere: the loop's frame), among the
:data:`MAX_ORPHANS` most recent such; a closure made once and dropped takes
its plans with it, as before.  Bound methods are cached under
their instance and function.  Callables that cannot be weakly referenced use
a small bounded LRU of :data:`MAX_STRONG_PLANS` entries.

In front of it, :data:`recent` holds each function's most recent plan per
kind of call: a repeated call like the last one finds its plan with a dict
lookup and a comparison of each argument, no key tuple built and no lock
taken.
"""

from __future__ import annotations

import collections
import inspect
import os
import sys
import threading
import types
import warnings
import weakref

import numpy as np

from .._forksafe import RLock
from .. import _tree
from .._xp import array_module, is_array
from ..errors import RetraceWarning, StalePlanError
from .arguments import arg_names, normalize_argnums, prepare_args
from .plan import Plan

MAX_PLANS_PER_FUNCTION = 32
MAX_STRONG_PLANS = 32
#: rebuilds of one cached plan after which :class:`~hybridad.errors.RetraceWarning` is issued
REBUILD_WARN = 3

_weak = weakref.WeakKeyDictionary()
_strong = collections.OrderedDict()
_lock = RLock()
#: (id of a plan table, key) -> the :class:`_Build` of a plan being built
_building = {}
if hasattr(os, "register_at_fork"):  # a forked child builds its own (their builders are gone)
    os.register_at_fork(after_in_child=_building.clear)


def default_backend(backend, args):
    """``backend``, or the default for these arguments: ``"cupy"`` when one
    of them is a cupy array (only looked for once cupy is imported)."""
    if backend is not None:
        return backend
    if "cupy" in sys.modules and any(is_array(a) and array_module(a) is not np
                                     for a in _tree.flatten(args)[0]):
        return "cupy"
    return "numba"


# -- twins: one owner for the function objects that compute the same thing ---------------
#: structure key -> :class:`_Twin` (see :func:`owner_of`)
_twins = {}
#: id(f) -> (weak reference to f, its twin): the functions holding a twin
_holders = {}
#: keys of twins none of whose functions is alive but like which one can still be made
#: (least recently orphaned first)
_orphans = collections.OrderedDict()
#: how many such twins (and their plans) outlive their functions
MAX_ORPHANS = 8
_FunctionType = types.FunctionType


class _Twin:
    """The stand-in function of one structure key, and how many live functions have it."""

    __slots__ = ("holders", "key", "proxy")

    def __init__(self, f, key):
        self.key, self.holders = key, 0
        # tuples of its own (the items shared): a function that dies then
        # holds one reference more to each item than the twin (see _can_recur)
        closure, defaults = f.__closure__, f.__defaults__
        proxy = _FunctionType(f.__code__, f.__globals__, f.__name__,
                              None if defaults is None else tuple(list(defaults)),
                              None if closure is None else tuple(list(closure)))
        proxy.__kwdefaults__ = f.__kwdefaults__
        proxy.__qualname__, proxy.__module__ = f.__qualname__, f.__module__
        proxy.__doc__ = f.__doc__
        self.proxy = proxy


def _structure(f):
    """The key of what ``f`` computes with (ids of objects its twin holds alive)."""
    closure, defaults, kw = f.__closure__, f.__defaults__, f.__kwdefaults__
    return (id(f.__code__), id(f.__globals__),
            None if closure is None else tuple(map(id, closure)),
            None if defaults is None else tuple(map(id, defaults)),
            None if kw is None else id(kw))


def owner_of(f):
    """The function the plan cache keeps ``f``'s plans under and traces to
    build them: for a plain Python function without attributes of its own, its
    twin -- a function object of the same code, globals, closure cells and
    defaults, shared by every function with them (see the module docstring);
    ``f`` itself for anything else (bound methods, callables, functions
    carrying attributes such as ``functools.wraps``'s ``__wrapped__``)."""
    if type(f) is not _FunctionType or f.__dict__:
        return f
    key = _structure(f)
    with _lock:
        held = _holders.get(id(f))
        if held is not None and held[0]() is f:
            if held[1].key == key:
                return held[1].proxy
            _let_go(id(f), held[0], dying=False)  # (its code or defaults were replaced)
        twin = _twins.get(key)
        if twin is None:
            twin = _twins[key] = _Twin(f, key)
        else:
            _orphans.pop(key, None)
        twin.holders += 1
        k = id(f)
        _holders[k] = (weakref.ref(f, lambda r: _let_go(k, r)), twin)
        return twin.proxy


def _let_go(k, ref, dying=True):
    """Function ``k`` (its weak reference ``ref``) is ``dying`` (its weak
    reference's callback: it still holds its code, cells and defaults) or has
    another structure: its twin loses a holder, and with the last one is kept
    among the orphans only while a function like it can still be made."""
    if _lock is None:  # (a callback at the interpreter's exit, the module torn down)
        return
    with _lock:
        held = _holders.get(k)
        if held is None or held[0] is not ref:
            return
        del _holders[k]
        twin = held[1]
        twin.holders -= 1
        if twin.holders or _twins.get(twin.key) is not twin:
            return
        if dying and not _can_recur(twin.proxy):
            del _twins[twin.key]
            return
        _orphans[twin.key] = None
        while len(_orphans) > MAX_ORPHANS:
            old, _ = _orphans.popitem(last=False)
            gone = _twins.get(old)
            if gone is not None and not gone.holders:
                del _twins[old]


def _refs(objects):
    """References to each of ``objects`` (items of a tuple), as counted here."""
    return [sys.getrefcount(o) for o in objects]


def _can_recur(proxy):
    """Whether another function of ``proxy``'s structure can still be made,
    asked while the last one dies: its code, globals, cells and defaults each
    referenced from outside the proxy and that function (a closure made once
    and dropped holds its cells alone)."""
    parts = (proxy.__code__, proxy.__globals__, *(proxy.__closure__ or ()),
             *(proxy.__defaults__ or ()))
    alone = _refs((_ALONE[0],))[0] + 1  # (an object only the proxy and the dying function hold)
    return all(n > alone for n in _refs(parts))


#: a tuple holding an object no one else refers to: the count of :func:`_refs` for "alone"
_ALONE = (object(),)


def cache_for(f):
    """The per-function LRU of plans (created on first use)."""
    owner, sub = (f.__self__, f.__func__) if inspect.ismethod(f) else (f, None)
    try:
        per_owner = _weak.get(owner)
        if per_owner is None:
            per_owner = _weak[owner] = {}
    except TypeError:  # not weakly referenceable or not hashable
        return None
    lru = per_owner.get(sub)
    if lru is None:
        lru = per_owner[sub] = collections.OrderedDict()
    return lru


#: dtype -> a 0-d array standing in for a differentiated number in a cache key
_STAND_INS = {}


def _stand_in(k, value, dtype):
    """A number's leaf for the key alone (its shape and dtype): converting it
    would allocate an array each call; the plan's call stages its value
    (:meth:`hybridad.plans.arguments.ArgumentsMixin._staged_scalar`)."""
    a = _STAND_INS.get(dtype)
    if a is None:
        a = _STAND_INS.setdefault(dtype, np.zeros((), dtype))
        a.flags.writeable = False
    return a


def lookup(f, args, argnums, backend, hvp=False, parallel=True, build=None, tag=(),
           stale=None, twin=False):
    """The cached plan of ``f`` for these arguments and options, and the
    arguments' array leaves (a differentiated number: a 0-d stand-in of its
    dtype, not its value); ``build(g)`` (default: a gradient :class:`Plan`)
    makes it on a miss, or when the cached plan is ``stale``, of ``g``: the
    function the cache keeps it under, which the plan traces and guards:
    with ``twin``, ``f``'s twin (:func:`owner_of`; for callers that check
    before each call without a lookup that ``f``'s code and defaults are
    still those of the twin: :func:`remember`'s), else ``f``."""
    argnums_norm, diff = normalize_argnums(argnums, len(args))
    leaves, treedefs = prepare_args(args, diff, lambda: arg_names(f, len(args)), _stand_in)
    key = (argnums_norm, backend, treedefs, tuple((a.shape, a.dtype.str) for a in leaves))
    if hvp:
        key += ("hvp",)
    if not parallel:
        key += ("serial",)
    key += tuple(tag)
    if build is None:
        def build(g):
            return Plan(g, args, argnums, backend, hvp=hvp, parallel=parallel)
    caller = f
    if twin:
        f = owner_of(f)
    while True:
        with _lock:  # (held for the tables alone: never across a build)
            lru = cache_for(f)
            if lru is None:
                try:
                    hash(f)
                except TypeError:  # unhashable callable: no caching
                    lru = None
                else:
                    lru, key = _strong, (f, key)
            if lru is not None:
                plan = lru.get(key)
                if plan is not None and plan is not stale:
                    lru.move_to_end(key)
                    return plan, leaves
                token = (id(lru), key)
                pending = _building.get(token)
                mine = pending is None or pending.owner == threading.get_ident()
                if pending is None:
                    pending = _building[token] = _Build()
        if lru is None:
            return build(f), leaves
        if mine:
            break
        pending.done.wait()  # another thread builds this plan: its, once made
    try:
        plan = _rebuilt(build(f), stale, caller)
    except BaseException:
        with _lock:
            if _building.get(token) is pending:
                del _building[token]
        pending.done.set()  # (a waiting thread then builds, and meets the error itself)
        raise
    with _lock:
        lru[key] = plan
        limit = MAX_STRONG_PLANS if lru is _strong else MAX_PLANS_PER_FUNCTION
        while len(lru) > limit:
            lru.popitem(last=False)
        if _building.get(token) is pending:
            del _building[token]
    pending.done.set()
    return plan, leaves


class _Build:
    """A plan one thread is building (:func:`lookup`): others asking for the
    same plan wait for it; other plans are looked up and built meanwhile."""

    __slots__ = ("done", "owner")

    def __init__(self):
        self.done = threading.Event()
        self.owner = threading.get_ident()


def _rebuilt(plan, stale, caller):
    """A plan built to replace ``stale`` (a cached plan whose ``f`` changed:
    :class:`~hybridad.errors.StalePlanError`) for the function object
    ``caller``; warns when one function object keeps needing new plans (a
    lambda made anew each time with other values in its cells gets a plan
    for each, as it did before it shared its twin's: not warned about)."""
    try:
        plan._caller = weakref.ref(caller)
    except TypeError:  # (cached strongly anyway: see lookup)
        plan._caller = lambda caller=caller: caller
    if stale is not None and getattr(stale, "_caller", lambda: None)() is caller:
        plan._rebuilds = stale._rebuilds + 1
        if plan._rebuilds == REBUILD_WARN:
            warnings.warn(
                f"hybridad: the plan of {plan.name} was rebuilt {REBUILD_WARN} times because "
                "what it reads besides its arguments changed between calls (each rebuild "
                "traces and may compile). Pass values that change as arguments (arrays are "
                "read by a plan on every call).", RetraceWarning, stacklevel=5)
    return plan


# ----------------------------------------------------------------------------
# the most recent plan of each function: the cheap path of repeated calls
# ----------------------------------------------------------------------------

#: kind -> {id(owner): (weakref to owner, method function or None, argnums, backend,
#: options, shapes and dtypes of the plain-array arguments -- or None and the plan's
#: structure check for pytree and static arguments --, for a plain function its
#: code, defaults and keyword defaults -- the plan is its twin's, whose guards do not
#: see those replaced on ``f``: see :func:`same_made` --, plan)}
recent = {"gradient": {}, "hvp": {}, "hessian": {}, "jacobian": {}}
recent_gradient = recent["gradient"]
_MethodType = types.MethodType
_ndarray = np.ndarray


def _owner(f):
    return (f.__self__, f.__func__) if type(f) is _MethodType else (f, None)


def recent_plan(kind, f, args, argnums, backend, options=None):
    """The plan last used for ``f`` with plain ndarray arguments of these shapes
    and dtypes and these options, or None.  A dict lookup and a comparison of
    each argument: no key tuple built, no lock taken."""
    if type(f) is _MethodType:
        owner, sub = f.__self__, f.__func__
    else:
        owner, sub = f, None
    e = recent[kind].get(id(owner))
    if e is None and sub is None and type(f) is _FunctionType:  # (a lambda made anew: its twin's)
        owner = owner_of(f)
        e = recent[kind].get(id(owner))
    if e is None or e[1] is not sub or e[2] != argnums or e[3] != backend or \
            e[4] != options or e[0]() is not owner or not same_made(f, e[7]):
        return None
    if e[5] is None:  # pytree or static arguments: the plan's generated check
        return e[8] if e[6](args) else None
    if len(args) != len(e[5]):
        return None
    for a, shape, dtype in zip(args, e[5], e[6]):  # noqa: B905 - lengths compared above
        if type(a) is not _ndarray or a.shape != shape or a.dtype is not dtype:
            return None
    return e[8]


def _made(f):
    """``f``'s code, defaults and keyword defaults (for a plain function; else None)."""
    return (f.__code__, f.__defaults__, f.__kwdefaults__) if type(f) is _FunctionType else None


def same_made(f, made):
    """Whether ``f`` still has the code and defaults ``made`` (:func:`_made`)
    it had when its plan was remembered: replacing them makes ``f`` another
    function (another twin, :func:`owner_of`)."""
    return made is None or (f.__code__ is made[0] and f.__defaults__ is made[1] and
                            f.__kwdefaults__ is made[2])


def remember(kind, f, args, argnums, backend, plan, options=None):
    """Make ``plan`` what :func:`recent_plan` returns for calls like this one
    (held weakly by ``f``'s owner): plain ndarray arguments are compared by
    shape and dtype; pytrees and static values by the plan's generated
    check (:meth:`hybridad.plans.fastpath.FastPathMixin._matcher`)."""
    matcher = None
    if not all(type(a) is np.ndarray for a in args):
        matcher = getattr(plan, "_matcher", lambda: None)()
        if matcher is None or not matcher(args):
            return
    owner, sub = _owner(f)
    table, key = recent[kind], id(owner)
    try:
        ref = weakref.ref(owner, lambda r, table=table, key=key: _forget(table, key, r))
    except TypeError:
        return
    made = _made(f)
    checks = (None, matcher) if matcher is not None else \
        (tuple(a.shape for a in args), tuple(a.dtype for a in args))
    table[key] = (ref, sub, argnums, backend, options, *checks, made, plan)
    twin = plan._f()  # (f's twin where the plan was built for it: lookup(twin=True))
    if made is not None and twin is not None and twin is not f:
        # (a lambda made anew finds it by its twin)
        key = id(twin)
        ref = weakref.ref(twin, lambda r, table=table, key=key: _forget(table, key, r))
        table[key] = (ref, None, argnums, backend, options, *checks, None, plan)


def _forget(table, key, ref):
    e = table.get(key)
    if e is not None and e[0] is ref:
        table.pop(key, None)


def call(find, run):
    """``run(plan)`` on the cached plan ``find(None)``; once more on a rebuilt
    one, ``find(stale)``, when the cached plan's function changed since it was
    traced."""
    plan = find(None)
    try:
        return run(plan)
    except StalePlanError:
        return run(find(plan))


def cached_call(kind, f, args, argnums, backend, options, build, run, tag=(), hvp=False):
    """The convenience functions' path: ``run(plan)`` on the recent plan of
    ``f`` when the call is like the last one, else on the plan cache's (built
    on a miss, rebuilt when ``f`` changed)."""
    plan = recent_plan(kind, f, args, argnums, backend, options)
    if plan is not None:
        try:
            return run(plan)
        except StalePlanError:
            pass
    resolved = default_backend(backend, args)

    def find(stale):
        plan = lookup(f, args, argnums, resolved, hvp=hvp, tag=tag, stale=stale, twin=True,
                      build=None if build is None else lambda g: build(g, resolved))[0]
        remember(kind, f, args, argnums, backend, plan, options)
        return plan

    return call(find, run)


def clear_cache() -> None:
    """Drop every cached plan."""
    with _lock:
        _weak.clear()
        _strong.clear()
        _twins.clear()
        _holders.clear()
        _orphans.clear()
        for table in recent.values():
            table.clear()


def cached_plans(f):
    """The plans cached for ``f`` (a list; for tests and introspection)."""
    with _lock:
        lru = cache_for(owner_of(f))
        return list((lru if lru is not None else {}).values())
