"""The numba CPU backend: the whole plan as one generated, compiled function
(:mod:`.program`), its loops (:mod:`.loops`, :mod:`.reduce`), the runtime it
calls (:mod:`.rt`, :mod:`.folds`, :mod:`.lapack`, :mod:`.vmath`, :mod:`.threads`), dual
numbers for user functions (:mod:`.dual`) and their compiler
(:mod:`.elementwise`), small kernels of the plans (:mod:`.kernels`), the
verified disk cache (:mod:`.cache`) and numba's locks taken the one safe way
(:mod:`.locks`)."""

import logging
import os
import threading
import warnings

from .locks import (build_serialization, compiler_lock, context_with_import, make_numba_context,
                    numba_imported)

__all__ = ["build_lock", "build_program", "compiler_lock", "make_numba_context"]

#: seconds a build runs before it says so (once, on the ``hybridad`` logger)
SLOW_BUILD_S = 2.0

_log = logging.getLogger("hybridad")
_told = []  # the first slow build also says how to avoid the wait

context_with_import()  # numba's import, whoever's, makes its target context (see there)

#: held by every build of a numba program, from its ``import numba`` to its
#: last compiled function; a fork waits for it (:func:`os.register_at_fork`),
#: so a child process never starts with a build's lock held by a thread it
#: does not have, or with numba half imported
_BUILD_LOCK = threading.RLock()


def build_lock():
    """The process-wide lock every numba program build holds (re-entrant).

    :func:`os.fork` (``multiprocessing``'s fork start method included) waits
    for it: a build in flight -- a tiered plan's background compile, or a
    synchronous one in another thread -- ends before the process is copied.
    Without that the child inherited numba's compiler lock held by a thread
    that does not exist there (its first build hung for good) and numba's
    modules half imported (its cache loads failed with ``ImportError``)."""
    return _BUILD_LOCK


def _before_fork():
    _BUILD_LOCK.acquire()


def _after_fork():
    _BUILD_LOCK.release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork,
                        after_in_child=_after_fork)


def build_program(*args, **kwargs):
    """:func:`.program.compile_numba_program` (same arguments) under numba's
    compiler lock (process-wide, re-entrant): the program module's imports,
    the source generated and parsed, its functions compiled, one build at a
    time in the process.

    ``ast.parse`` is not thread-safe before Python 3.11.8 and 3.12.2
    (CPython gh-106905: the depth counter of the conversion to Python AST
    objects is the interpreter's, and a garbage collection inside it can
    switch threads).  A build parses its generated source (kernel outlining,
    function splitting), numba parses while it compiles, and the imports of a
    first build parse signatures (numpy.ma's, through scipy); two threads
    building at once -- a tiered plan's background compile beside a call that
    builds another program of the plan, or beside the serial twin -- raised
    ``SystemError: AST constructor recursion depth mismatch`` in a call.  A
    build's compile waited for this lock anyway: what is newly serialized is
    its code generation.

    The lock is taken by :func:`.locks.build_serialization`, inside
    :func:`build_lock`: on a Python whose ``ast.parse`` is thread-safe, or
    while numba is not imported, a build holds no lock of numba's (and
    imports no numba) until numba compiles a program hybridad's own compiler
    refused -- then under numba's compiler lock
    (:func:`.link.own_dispatcher`).
    """
    label = kwargs.pop("label", None)
    with _BUILD_LOCK, build_serialization(), _announce_if_slow(label or kwargs.get("name")), \
            warnings.catch_warnings():
        from .program import compile_numba_program

        # numba's warnings (NumbaPerformanceWarning on generated code) are not
        # the user's: by numba's category when numba is loaded (its own
        # compiles are under that filter too, link.own_dispatcher), and by
        # module (so numba is not imported for this)
        warnings.filterwarnings("ignore", module=r"numba(\.|$)")
        if numba_imported():
            from numba.core.errors import NumbaWarning

            warnings.simplefilter("ignore", NumbaWarning)
        return compile_numba_program(*args, **kwargs)


class _announce_if_slow:
    """While active: a build running past :data:`SLOW_BUILD_S` seconds says
    so, once, as a warning on the ``hybridad`` logger (shown on stderr unless
    logging is configured otherwise): what compiles, and how to avoid the
    wait."""

    def __init__(self, label):
        self.label = label

    def _say(self):
        hint = "" if _told else (
            " -- a plan is compiled once, the first time, then loaded from the disk cache "
            "(python -m hybridad cache --info); backend='numpy' runs at once, without "
            "compiling")
        _told.append(True)
        _log.warning("hybridad: compiling %s (over %.0f s so far)%s",
                     self.label or "a plan", SLOW_BUILD_S, hint)

    def __enter__(self):
        self._timer = threading.Timer(SLOW_BUILD_S, self._say)
        self._timer.daemon = True  # never holds the process at exit
        self._timer.start()
        return self

    def __exit__(self, *exc):
        self._timer.cancel()
        return False
