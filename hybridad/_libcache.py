"""numba's disk cache of hybridad's own compiled functions, stamped with what
their machine code was built from.

numba stamps the cache of an ``@njit(cache=True)`` function with the
modification time and size of the file that defines it, and nothing else.
Machine code that inlined a function of another module (``vmath``'s
``_inline`` kernels, ``folds``' reductions) or froze another module's
constant (``rt``'s matrix-vector loops freeze ``threshold.MATVEC_BLOCK``)
then stays in use after that module changes: an edit to ``threshold.py`` left
``rt.py``'s cached loops running the old block size.

:func:`install` puts three locators in front of numba's own, one for each
place numba would keep the files (``NUMBA_CACHE_DIR``, ``__pycache__`` next
to the source, the user-wide cache).  For a function defined in a file of
the hybridad package they keep that place and stamp the index with a hash of
the source of the defining module and of every hybridad module it imports,
directly or through others (the closure the plans' own keys hash,
:func:`hybridad._sources.library_digest`): a change to any of them makes the cached
code stale, and numba compiles again.  Functions outside the package (user
code, the generated plans, which :mod:`.cache` keys by content) get numba's
own locators.  Every module of hybridad with ``cache=True`` functions calls
:func:`install` before defining them (numba picks a function's locator when
the decorator runs); tests/test_cache.py checks that none is missed.
"""

from __future__ import annotations

import os

import numba  # noqa: F401 -- first: waits for another thread's import of numba (locks.numba_imported)
from numba.core import caching

from ._sources import library_digest

__all__ = ["install", "is_library_file"]

#: the hybridad package's directory
_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def is_library_file(path):
    """Whether ``path`` is a source file inside the hybridad package."""
    try:
        return os.path.commonpath([_PACKAGE, os.path.abspath(path)]) == _PACKAGE
    except ValueError:  # another drive
        return False


class _ClosureStamp:
    """Mixin over one of numba's file-backed locators: hybridad's files only,
    stamped with the hash of their module's import closure."""

    @classmethod
    def from_function(cls, py_func, py_file):
        if not is_library_file(py_file):
            return None
        self = super().from_function(py_func, py_file)
        if self is not None:
            self._hybridad_module = py_func.__module__
        return self

    def get_source_stamp(self):
        return "hybridad-closure", library_digest((self._hybridad_module,))


class _UserProvided(_ClosureStamp, caching.UserProvidedCacheLocator):
    pass


class _InTree(_ClosureStamp, caching.InTreeCacheLocator):
    pass


class _UserWide(_ClosureStamp, caching.UserWideCacheLocator):
    pass


_LOCATORS = [_UserProvided, _InTree, _UserWide]


def install():
    """Put the closure-stamped locators first in numba's list (once per process)."""
    classes = caching.CacheImpl._locator_classes
    if _LOCATORS[0] not in classes:
        classes[:0] = _LOCATORS
