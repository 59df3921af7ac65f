"""Observing a trace: which user code ran, and the calls a plan cannot replay.

:func:`observe` runs the trace of ``f`` under a per-thread profiler that
records which user code ran (the code objects of ``f`` and of every helper,
method and property it called: the names the guards follow, see
:mod:`hybridad.frontend.guard_walk`), whether user code took values out of
numpy arrays, and refuses calls whose result changes from call to call
without depending on the inputs (``np.random.*``, ``random.*``,
``time.time``, ``os.urandom``, ...): a plan would replay the one draw made
while tracing.  :func:`paused` suspends the profiler while hybridad's own
code runs.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import types

import numpy as np

from ..errors import TracingError
from .user_code import _is_user_file

__all__ = ["OBSERVED", "QUIET", "Observation", "current_observation", "note_value_operand",
           "observe", "paused", "quiet", "unobserved"]


class _State(threading.local):
    """This thread's observations: ``stack``, the active ones with their
    profilers; ``profiler``, the observing profiler installed on this thread
    now (None: none, or suspended while hybridad's own code runs)."""

    stack = None
    profiler = None
    held = None  # the profiler, suspended by itself at the call of a :data:`QUIET` function


#: code objects of hybridad's functions that run no user code and restore the
#: observing profiler themselves (:func:`quiet`): the profiler suspends itself
#: at their call event, one event fewer than a suspension they made (a traced
#: ufunc call, a row of an array iterated: a loop of 10^4 steps makes 10^5)
QUIET = set()


def quiet(fn):
    """Register ``fn`` (or its closures' shared code) in :data:`QUIET`: it
    begins with ``hook = OBSERVED.held; OBSERVED.held = None`` and, when
    ``hook`` is not None, ends with ``sys.setprofile(hook); OBSERVED.profiler
    = hook`` (before it runs anything that may call user code, too)."""
    QUIET.add(fn.__code__)
    return fn


#: this thread's :class:`_State`: a function that reads ``OBSERVED.profiler`` (an
#: attribute, no call: each call of ``sys.getprofile()`` is two events for that
#: very profiler) runs inside an observed trace when it is not None, and may
#: suspend it for its own work -- setting it to None meanwhile -- without a call
#: to :func:`paused` (each Python call is two events to the profiler: a traced
#: ufunc call made sixteen)
OBSERVED = _state = _State()

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


#: the opcodes of a call (3.10 to 3.13), and those between its arguments and it
_CALLS = frozenset({"CALL", "CALL_FUNCTION", "CALL_METHOD", "CALL_FUNCTION_KW", "CALL_KW"})
_CALL_PARTS = frozenset({"PRECALL", "KW_NAMES", "CACHE"})
_NAME_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF", "LOAD_CLOSURE",
                         "LOAD_GLOBAL", "LOAD_NAME"})
_UNKNOWN = object()


@functools.lru_cache(maxsize=64)
def _instructions(code):
    """``(instructions, offset -> index)`` of ``code``."""
    import dis

    ins = list(dis.get_instructions(code))
    return ins, {x.offset: k for k, x in enumerate(ins)}


def _loaded(ins, i, frame):
    """``(value, first)``: the value instruction ``ins[i]`` pushes, where it is a
    constant, a name or a name's instance attribute (read from ``frame``
    without running code), and the index of the first instruction making it;
    ``(_UNKNOWN, i)`` otherwise."""
    x = ins[i]
    if x.opname == "LOAD_CONST":
        return x.argval, i
    if x.opname in _NAME_LOADS:
        name = x.argval
        for space in (frame.f_locals, frame.f_globals, frame.f_builtins):
            if name in space:
                return space[name], i
        return _UNKNOWN, i
    if x.opname in ("LOAD_ATTR", "LOAD_METHOD") and i:
        owner, first = _loaded(ins, i - 1, frame)
        space = getattr(owner, "__dict__", None) if owner is not _UNKNOWN else None
        if isinstance(space, dict) and x.argval in space:
            return space[x.argval], first
        if isinstance(owner, types.ModuleType):
            return getattr(owner, x.argval, _UNKNOWN), first
    return _UNKNOWN, i


def _rng_maker(frame):
    """What user code ``frame`` is calling as it draws fresh entropy: True for
    one of numpy's makers of a generator given a seed (``np.random.RandomState(0)``,
    ``RandomState(seed)`` for a seed that is not None) -- numpy's
    ``RandomState`` draws entropy from ``random.SystemRandom`` as it is made,
    then replaces it by the seed's, so its draws are the same on every call;
    the maker's name where the seed is None or not read; None for any other
    call.  Read from the bytecode of the call ``frame`` is at: a callee and one
    argument that are constants, names or a name's attributes (a seed made by
    an expression is not read: the draw is refused, as without a seed)."""
    try:
        ins, at = _instructions(frame.f_code)
        i = at[frame.f_lasti]
    except (KeyError, TypeError, ValueError):
        return None
    call = ins[i]
    if call.opname not in _CALLS or call.arg not in (0, 1):
        return None
    i -= 2 if call.opname in ("CALL_FUNCTION_KW", "CALL_KW") else 1  # (the names' tuple)
    while i >= 0 and ins[i].opname in _CALL_PARTS:
        i -= 1
    seed, first = (None, i + 1) if call.arg == 0 else \
        _loaded(ins, i, frame) if i >= 0 else (_UNKNOWN, 0)
    i = first - 1
    while i >= 0 and ins[i].opname == "PUSH_NULL":
        i -= 1
    maker = _loaded(ins, i, frame)[0] if i >= 0 else _UNKNOWN
    if not (isinstance(maker, type) and maker.__name__ in _RNG_MAKERS and
            maker.__module__.startswith("numpy.random")):
        return None
    return True if seed is not _UNKNOWN and seed is not None else maker.__name__


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
    # the code objects seen that are not user code (their calls, and calls
    # into them, need no look: a ufunc call in a loop of 10^4 steps goes
    # through three or four), and each ufunc's verdict (a ufunc is neither
    # random nor a clock)
    library = set()
    ufunc = np.ufunc
    quiet_codes = QUIET

    def profile(frame, event, arg):
        if event == "c_call":  # made by the user's code itself (libraries may time things)
            code = frame.f_code
            if code in library:
                return
            if code not in codes and not _is_user_file(code.co_filename):
                if frame.f_globals.get("__name__") not in _NONDETERMINISTIC_PY:
                    library.add(code)
                return
            if type(arg) is ufunc:
                return
            what = _nondeterministic(arg)
            if what is not None:
                obs.refused.append(f"{what} at {_location(frame)}")
            elif getattr(arg, "__name__", "") in _VALUE_METHODS and \
                    isinstance(getattr(arg, "__self__", None), (np.ndarray, np.generic)):
                obs.values_used = True
        elif event == "call":
            code = frame.f_code
            if code in quiet_codes:  # (hybridad's code that restores the profiler itself)
                sys.setprofile(None)
                _state.profiler = None
                _state.held = profile
                return
            if code in codes or code in library:
                return
            if _is_user_file(code.co_filename):
                codes.add(code)
            elif frame.f_globals.get("__name__") not in _NONDETERMINISTIC_PY:
                library.add(code)
            elif frame.f_back is not None and _is_user_file(frame.f_back.f_code.co_filename):
                maker = _rng_maker(frame.f_back)
                if maker is True:  # (a seeded generator: its entropy is replaced)
                    return
                what = f"{frame.f_globals['__name__']}.{code.co_name}" if maker is None else \
                    f"numpy.random.{maker} with no seed it can read (a constant, or a name " \
                    "bound to one that is not None)"
                obs.refused.append(f"{what} at {_location(frame.f_back)}")

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
    stack = _state.stack
    if stack is None:
        stack = _state.stack = []
    previous, outer = sys.getprofile(), _state.profiler
    hook = _profiler(obs) if previous is None else None
    stack.append((obs, hook))
    if hook is not None:
        obs.active = True
        sys.setprofile(hook)
        _state.profiler = hook
    try:
        yield obs
    finally:
        if hook is not None:
            sys.setprofile(previous)
            _state.profiler = outer
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
    stack = _state.stack
    return stack[-1][0] if stack else None


class _Paused:
    """Suspends the profiler of :func:`observe` while hybridad's own code runs."""

    __slots__ = ("hook",)

    def __init__(self, hook):
        self.hook = hook

    def __enter__(self):
        sys.setprofile(None)
        _state.profiler = None

    def __exit__(self, *exc):
        sys.setprofile(self.hook)
        _state.profiler = self.hook


_NOT_OBSERVED = contextlib.nullcontext()


def paused():
    """A context in which the profiler of :func:`observe` is suspended (``bind``,
    numba compiles): only the user's code is observed, and the profiler costs
    nothing inside the library.  A no-op when nothing is observed."""
    hook = _state.profiler
    if hook is None:
        return _NOT_OBSERVED
    return _Paused(hook)


def unobserved(fn):
    """``fn`` (hybridad's code, which calls no user code: a tracer's method)
    run with this thread's observing profiler suspended by the call itself,
    as a traced ufunc call suspends it (:meth:`Tracer.__array_ufunc__`; a
    :func:`paused` block inside would cost its own Python calls, each two
    events for the profiler)."""
    def method(*args, **kwargs):
        hook = _state.held  # (suspended by the profiler at this call: QUIET)
        if hook is not None:
            _state.held = None
            try:
                return fn(*args, **kwargs)
            finally:
                sys.setprofile(hook)
                _state.profiler = hook
        return fn(*args, **kwargs)

    quiet(method)
    functools.update_wrapper(method, fn)
    return method


def note_value_operand():
    """Record that a numpy scalar from user code met a traced value (a number
    possibly taken out of a captured array)."""
    obs = current_observation()
    if obs is not None:
        obs.values_used = True
