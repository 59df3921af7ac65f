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
(:func:`hybridad.backends.numba.build_lock`).
"""

from __future__ import annotations

import os
import threading
import weakref

__all__ = ["Lock", "RLock"]

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
