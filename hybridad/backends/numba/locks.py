"""numba's compiler lock and CPU target context, taken the one safe way
(re-exported by :mod:`hybridad.backends.numba`): every hybridad lock after
numba's, and numba's own locks never waited for while another is held."""

import contextlib
import sys
import time

__all__ = ["build_serialization", "compiler_lock", "context_with_import", "make_numba_context",
           "numba_imported"]

#: Python's ``ast.parse`` is thread-safe from 3.11.8 and 3.12.2 on (CPython
#: gh-106905: before, the conversion to Python objects kept its recursion
#: depth per interpreter, and a garbage collection inside it could switch
#: threads: ``SystemError: AST constructor recursion depth mismatch``)
AST_THREAD_SAFE = sys.version_info >= (3, 12, 2) or (3, 11, 8) <= sys.version_info < (3, 12)


def numba_imported():
    """Whether numba is imported, by this thread or another.

    ``"numba" in sys.modules`` alone is not the answer: the package is there
    from the start of its import, and a thread importing one of its
    submodules (``numba.core.errors``) beside another thread's import of the
    package under way takes the submodule's lock while the other holds the
    package's -- Python breaks that cycle by handing one of them a module
    half made (``ImportError: cannot import name 'NumbaTypeError' from
    partially initialized module``).  ``import numba`` of the package itself
    waits for the import under way (its lock), so a numba submodule may be
    imported safely after True is returned.
    """
    if "numba" not in sys.modules:
        return False
    import numba  # noqa: F401 -- waits until another thread's import is done

    return True


def build_serialization():
    """What a build's code generation holds beside hybridad's build lock:
    numba's compiler lock (:func:`compiler_lock`) where ``ast.parse`` is not
    thread-safe (:data:`AST_THREAD_SAFE`) and numba is imported -- so a
    build's parsing never runs beside a numba compile's in another thread --
    else nothing, and numba is not imported for it (a program hybridad's own
    compiler makes needs none; numba's compile of one it refuses takes the
    compiler lock then, :func:`compiler_lock`)."""
    if not AST_THREAD_SAFE and numba_imported():
        return compiler_lock()
    return contextlib.nullcontext()


def compiler_lock():
    """numba's compiler lock (process-wide, re-entrant), for hybridad code that
    compiles, or makes numba functions, while holding a lock of its own.

    One order everywhere: the compiler lock first, then hybridad's lock
    (``with compiler_lock(), _LOCK:``), never the other way round -- a thread
    holding hybridad's lock and compiling waits for the compiler lock, which a
    tiered plan's background build may hold while it needs that same lock
    (the first call of a plan with an ``@elementwise`` function compiled its
    ufunc under the function's lock while the build, inside the compiler
    lock, wanted that lock for the function's kernel: the process hung).

    numba's CPU target context is made before the lock is returned
    (:func:`make_numba_context`): numba makes it lazily, at the first
    ``@njit`` decorator under the context's own lock and then the compiler
    lock, and at the first ``@cfunc`` the other way round.

    Returns
    -------
    numba's global compiler lock (a context manager).
    """
    import numba  # noqa: F401 -- first: waits for another thread's import (numba_imported)
    from numba.core.compiler_lock import global_compiler_lock

    make_numba_context()
    return global_compiler_lock


def make_numba_context():
    """Make numba's CPU target context unless it is made, without ever
    waiting for a lock while holding another.

    numba makes the context lazily, under the lock of each of its two
    ``functools.cached_property`` (the target and the typing context; Python
    3.11 gives each one a lock, later versions none) and the compiler lock
    -- at the first ``@njit`` decorator the properties' locks first, at the
    first ``@cfunc`` (compiled at once, under the compiler lock) the compiler
    lock first.  A build making the context one way while user code (or
    ``hybridad.testing``'s allocation counter, made of ``@cfunc`` s) made it
    the other way in another thread hung both for good.  Here every lock is
    tried without blocking and all are released and tried again shortly
    after when one is busy, so neither order can deadlock with this one."""
    import numba  # noqa: F401 -- first: waits for another thread's import (numba_imported)
    from numba.core import registry
    from numba.core.compiler_lock import global_compiler_lock

    target = registry.cpu_target
    if "_toplevel_target_context" in vars(target):
        return
    props = [vars(type(target)).get(name) for name in ("_toplevel_target_context",
                                                         "_toplevel_typing_context")]
    locks = [lock for lock in (getattr(p, "lock", None) for p in props) if lock is not None]
    locks.append(global_compiler_lock._lock)
    delay = 1e-4
    while True:
        held = []
        for lock in locks:
            if not lock.acquire(blocking=False):
                break
            held.append(lock)
        try:
            if len(held) == len(locks):
                target.target_context  # noqa: B018 -- made now, every lock it takes held
                return
        finally:
            for lock in reversed(held):
                lock.release()
        time.sleep(delay)  # another thread holds one: let it finish, then try again
        delay = min(2 * delay, 0.01)


class _ContextWithImport:
    """The meta path finder of :func:`context_with_import`: numba's own
    spec, its loader wrapped (:class:`_MakesContext`)."""

    def find_spec(self, name, path=None, target=None):
        if name != "numba":
            return None
        for finder in list(sys.meta_path):
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _MakesContext(spec.loader, self)
                return spec
        return None


class _MakesContext:
    """numba's loader, which also makes numba's CPU target context once the
    package has run -- still inside the import, so before any other thread
    sees numba (their ``import numba`` waits for the package's lock)."""

    def __init__(self, loader, finder):
        self._loader, self._finder = loader, finder

    def __getattr__(self, name):  # the wrapped loader's own methods (resources, get_code...)
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        try:
            self._loader.exec_module(module)
        finally:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(self._finder)
        make_numba_context()


def context_with_import():
    """From now on, the import of numba -- by a build of hybridad's or by
    user code -- also makes numba's CPU target context, before the import
    lets any other thread in (installed when hybridad's numba backend is
    imported, if numba is not imported yet; about 5 ms more for the import).

    numba makes its context lazily and, on Python 3.11, in an order that
    deadlocks two threads making it at once: ``@njit`` takes the context's
    lock, then the compiler lock; ``@cfunc`` the compiler lock, then the
    context's (:func:`make_numba_context`).  Threads that waited for an
    import under way -- user threads starting with numba while a build of
    hybridad imports it -- are let go together, and numba's race then hung
    them for good one time in two.  Made within the import, the context is
    there before any of them runs."""
    if "numba" in sys.modules or any(isinstance(f, _ContextWithImport) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _ContextWithImport())
