"""Run a function right after a named module is imported (an import hook).

``import hybridad`` imports no scipy; the wrappers of scipy's functions that
tracing needs (:mod:`.scipy_special`, :mod:`.host_calls`) must still be in
place before user code binds them, as ``from scipy.special import
logsumexp`` after ``import hybridad`` does.  :func:`after_import` puts a
finder first on ``sys.meta_path`` that does nothing but, for the watched
names, let the other finders find the module and wrap its loader: once the
module's own code has run, the loader is put back and the callback runs with
the module's name.  An exception in the callback becomes a warning (the
import itself succeeds; a trace installs the wrappers again and says why).
"""

from __future__ import annotations

import sys
import threading
import warnings

__all__ = ["after_import", "loaded"]


def loaded(name, just_executed=None):
    """The module ``name`` once its code has run, else None (not imported, or
    still executing -- in this thread or another, e.g. a background compile
    importing numba and with it scipy): a wrapper installed into a
    half-executed module would miss, or fail on, the names it has yet to
    define; :func:`after_import` installs them when it is done.
    ``just_executed``: the module whose callback this is (its code has run;
    importlib marks it initialized only when the callback returns)."""
    module = sys.modules.get(name)
    if module is None or name != just_executed and \
            getattr(getattr(module, "__spec__", None), "_initializing", False):
        return None
    return module


class _Loader:
    """The module's loader, then the callback (exists while the module loads)."""

    def __init__(self, loader, callback):
        self.loader = loader
        self.callback = callback

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self.loader  # the module's own again
        self.loader.exec_module(module)
        try:
            self.callback(module.__name__)
        except Exception as exc:  # noqa: BLE001 - an import of the user's must not fail here
            warnings.warn(f"hybridad: after importing {module.__name__}: "
                          f"{type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)

    def __getattr__(self, name):  # anything else a loader answers (resources, source)
        return getattr(self.loader, name)


class _Finder:
    """Finds nothing itself: wraps the loader of a watched module others find."""

    def __init__(self):
        self.watched = {}  # module name -> callback
        self._busy = threading.local()

    def find_spec(self, name, path=None, target=None):
        callback = self.watched.get(name)
        if callback is None or getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._busy.on = False
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _Loader(spec.loader, callback)
        return spec


_FINDER = _Finder()


def after_import(names, callback):
    """Call ``callback(name)`` right after each module of ``names`` is
    imported (those imported already are the caller's to handle)."""
    for name in names:
        _FINDER.watched[name] = callback
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
