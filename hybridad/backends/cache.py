"""The disk cache of generated source, keyed by a content hash.

numba caches compiled machine code only for functions defined in a real
file.  Generated source is therefore written to
``$HYBRIDAD_CACHE_DIR/hybridad_<hash>.py`` (default: ``~/.cache/hybridad``),
where the hash covers the source and the numba, numpy and Python versions,
and imported from there; numba then keeps its own cache next to it
(``__pycache__``).  Never keyed by object identity.

Concurrency: a file is created with a hard link from a private temporary
file, so it appears complete or not at all and is never rewritten (a second
process finding it present reuses it).  A corrupt or stale entry -- a file
whose content does not match its hash, or numba cache files that fail to
load -- is rebuilt.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import platform
import sys
import tempfile

import numba
import numpy as np

__all__ = ["cache_dir", "load_function", "source_hash"]


def cache_dir():
    """The cache directory (created if missing); ``HYBRIDAD_CACHE_DIR`` overrides."""
    path = os.environ.get("HYBRIDAD_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "hybridad")
    try:
        os.makedirs(path, exist_ok=True)
        if not os.access(path, os.W_OK):
            raise PermissionError(path)
    except OSError:
        path = os.path.join(tempfile.gettempdir(), f"hybridad-{os.getuid()}")
        os.makedirs(path, exist_ok=True)
    return path


@functools.lru_cache(maxsize=1)
def _library_digest():
    """Hash of the hybridad modules generated source imports (numba's cache
    does not see changes to functions a cached function calls)."""
    from . import rt, vmath

    digest = hashlib.sha256()
    for module in (rt, vmath):
        with open(module.__file__, "rb") as fh:
            digest.update(fh.read())
    return digest.hexdigest()


def source_hash(source):
    key = "\n".join([source, numba.__version__, np.__version__, sys.version,
                     platform.machine(), _library_digest()])
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def _write_once(path, source):
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            if fh.read() == source:
                return
        os.unlink(path)  # corrupt: content does not match its hash
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(source)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process won the race with the same content
    finally:
        os.unlink(tmp)


def _import(path, modname):
    spec = importlib.util.spec_from_file_location(modname, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_function(source, fn_name):
    """Write ``source`` to the cache (once) and return its function ``fn_name``.

    The function is numba-compiled on first call (``cache=True``: from disk
    when an earlier process compiled it).
    """
    digest = source_hash(source)
    modname = f"hybridad_{digest}"
    path = os.path.join(cache_dir(), modname + ".py")
    _write_once(path, source)
    module = sys.modules.get(modname)
    if module is None:
        module = _import(path, modname)
        sys.modules[modname] = module
    return getattr(module, fn_name)


def clear_numba_cache_for(fn):
    """Remove numba's cache files of a generated function (rebuilt next call)."""
    pyc = os.path.join(os.path.dirname(fn.py_func.__code__.co_filename), "__pycache__")
    stem = os.path.splitext(os.path.basename(fn.py_func.__code__.co_filename))[0]
    if os.path.isdir(pyc):
        for name in os.listdir(pyc):
            if name.startswith(stem):
                os.unlink(os.path.join(pyc, name))
