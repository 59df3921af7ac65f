"""Locks that a forked child gets back free.

:func:`os.fork` copies the process with only the forking thread: a lock
another thread held at that moment -- a plan mid-call, a trace under way,
a cache lookup -- stays held in the child by a thread that does not exist
there, and the child's first use of it waits forever (``multiprocessing``'s
fork start method, the default on Linux before Python 3.14, included).
Every lock hybridad takes around its own Python-level state is made here,
and a child re-initializes each one it did not hold itself at the fork
(what CPython's own ``threading``, ``logging`` and ``concurrent.futures``
do for theirs, with the same ``_at_fork_reinit``).  The state such a lock
guards is whole in the child: the other threads stopped between bytecodes,
and what they were computing (a plan call's arena, a build) the child
recomputes.

Locks around native state whose consistency the copy cannot promise
(numba's compiler, LLVM) are not made here: a fork waits for those instead
(:func:`hybridad.backends.numba.build_lock`), and for the plans' calls that
run without the GIL (:func:`call_starts`: their BLAS calls).
"""

from __future__ import annotations

import os
import threading
import time
import weakref

__all__ = ["Lock", "RLock", "call_ends", "call_starts"]

_LOCKS: weakref.WeakSet = weakref.WeakSet()


def Lock():  # noqa: N802 -- named as threading's
    """A :class:`threading.Lock` a forked child gets back unlocked."""
    lock = threading.Lock()
    _LOCKS.add(lock)
    return lock


def RLock():  # noqa: N802
    """A :class:`threading.RLock` a forked child gets back unlocked (unless
    the forking thread itself held it: that one it keeps, to release)."""
    lock = threading.RLock()
    _LOCKS.add(lock)
    return lock


def _after_in_child():
    for lock in list(_LOCKS):
        owned = getattr(lock, "_is_owned", None)
        if owned is not None and owned():  # the forking thread's own: released by it
            continue
        lock._at_fork_reinit()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_in_child)


# -- the fork gate: a fork waits for the native calls in flight -----------------------------
#: held by a fork from its ``before`` handler to its ``after`` ones: a call that
#: starts meanwhile waits at :func:`call_starts`
_GATE = threading.Lock()
#: thread id -> how many calls of compiled programs it is inside (nested: a loop's body)
_INSIDE = {}


def call_starts():
    """A plan program's call that runs without the GIL (a heavy numba
    program's, the numpy program's, whose products call BLAS) starts in
    this thread (pair with :func:`call_ends`).  :func:`os.fork` waits for such calls to
    end and holds new ones until it is done: a BLAS library's fork handler
    (OpenBLAS's ``blas_thread_shutdown_``) stops its threads, and a plan's
    gemm running on them in another thread meanwhile waited for them for
    good, and the fork for it (a ``multiprocessing`` pool made while a
    thread kept calling a gradient hung the parent)."""
    me = threading.get_ident()
    depth = _INSIDE.get(me, 0)
    _INSIDE[me] = depth + 1  # (counted first: a fork that takes the gate now waits for it)
    if depth == 0 and _GATE.locked():
        _INSIDE[me] = 0
        with _GATE:  # (a fork under way: after it)
            _INSIDE[me] = 1


def call_ends():
    """The call :func:`call_starts` began has ended."""
    me = threading.get_ident()
    depth = _INSIDE.get(me, 1) - 1
    if depth:
        _INSIDE[me] = depth
    else:
        _INSIDE.pop(me, None)


def _before_fork():
    _GATE.acquire()
    me = threading.get_ident()
    while any(n for k, n in list(_INSIDE.items()) if k != me):
        time.sleep(0.0005)


def _after_fork_in_parent():
    _GATE.release()


def _after_fork_in_child_gate():
    _INSIDE.clear()
    _GATE.release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child_gate)
