"""The disk cache of generated source and numba's machine code, keyed by a content hash.

numba caches compiled machine code only for functions defined in a real
file.  Generated source is therefore written to
``$HYBRIDAD_CACHE_DIR/hybridad_<hash>.py`` (default:
``$XDG_CACHE_HOME/hybridad``, else ``~/.cache/hybridad``), where the hash
covers the source, the numba, numpy and Python versions, the source of every
hybridad module the generated code imports (and what those import) and this cache's
format; numba keeps its machine code next to it (``__pycache__``).  Never
keyed by object identity.  ``python -m hybridad cache --info`` shows it,
``--clear`` empties it.

Trust
-----
Nothing in the cache runs unless it was verified, and a damaged entry is
discarded (with a :class:`CacheWarning`) and rebuilt, never fatal:

* The directory must be private: created ``0700``; one owned by another
  user or writable by group or others is refused (one warning) and plans
  are then compiled in memory, with no disk caching.  There is no fallback
  to a shared location (``$TMPDIR``).
* Generated source runs only from the text hybridad just generated: the
  file on disk must equal it byte for byte (else it is rewritten), and the
  module is made by ``compile()`` of that text -- never by the import
  system, which would run ``__pycache__/*.pyc`` bytecode whose header merely
  matches the file's mtime and size.  The file exists for numba's cache
  locator and for tracebacks.
* numba's index (``.nbi``) and data (``.nbc``) files are pickles.  Those of
  generated functions are written and read by :class:`_VerifiedCacheFile`:
  each file is ``MAGIC + sha256(payload) + payload``, written ``0600``
  (atomically, as numba does), and read only if it is a regular file owned
  by the user, not writable by group or others, and its digest matches --
  before any unpickling.  Any failure while loading (a truncated, flipped,
  empty or unreadable file, a stale pickle) discards that function's files
  and recompiles.  The digest guards integrity (crashes, partial writes,
  disk errors); authenticity comes from the private directory.

Sharing compiled code
---------------------
:func:`compiled` keeps one dispatcher per distinct generated source and
argument types for the life of the process, as the module itself stays in
``sys.modules``: rebuilding a plan (a lambda made in a loop, a plan evicted
from the plan cache) reuses the machine code instead of compiling and
keeping another dispatcher.  Memory grows with distinct code, not rebuilds.

Concurrency: a ``.py`` is created with a hard link from a private temporary
file, so it appears complete or not at all and is never rewritten in place
(a second process finding it present reuses it).
"""

from __future__ import annotations

import contextlib
import hashlib
import linecache
import os
import pickle
import platform
import re
import stat
import sys
import tempfile
import types
import uuid
import warnings

import numba
from numba.core.errors import NumbaWarning
import numpy as np
from numba.core import caching

# the directory (no numba needed to find it): re-exported, with its lock and owner checks
from ..._cachedir import (_LOCK, _UID, READ_FLAGS, CacheWarning, _refusal, _warn, cache_dir,  # noqa: F401
                          cache_location)
from ..._sources import library_digest

__all__ = ["CacheWarning", "cache_dir", "cache_location", "clear", "compiled", "info",
           "load_function", "source_hash"]

#: bumped when the layout of cache files changes (part of every hash)
_FORMAT = "hybridad-cache-2"
_PREFIX = "hybridad_"


# -- hashing ----------------------------------------------------------------------------
_IMPORTS = re.compile(r"^from (hybridad(?:\.\w+)*) import", re.MULTILINE)



def source_hash(source):
    """Content hash of generated ``source`` (and of everything its machine code depends on).

    Parameters
    ----------
    source : str
        Generated Python source.

    Returns
    -------
    str
        24 hex digits.
    """
    key = "\n".join([source, numba.__version__, np.__version__, sys.version,
                     platform.machine(),
                     library_digest(tuple(sorted(set(_IMPORTS.findall(source))))), _FORMAT])
    return hashlib.sha256(key.encode()).hexdigest()[:24]


# -- files ------------------------------------------------------------------------------
def _trusted(st):
    """Whether an ``lstat`` result is a regular file of ours that only we can write."""
    return stat.S_ISREG(st.st_mode) and (_UID is None or st.st_uid == _UID) and \
        not st.st_mode & 0o022


def _unlink(path):
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _discard_numba_files(directory, stem):
    """Remove numba's cache files of module ``stem`` (rebuilt on next use)."""
    pyc = os.path.join(directory, "__pycache__")
    with contextlib.suppress(OSError):
        for name in os.listdir(pyc):
            if name.startswith(stem + "."):
                _unlink(os.path.join(pyc, name))


def _write_once(path, source):
    """Make ``path`` hold exactly ``source`` (UTF-8); a damaged file is replaced."""
    data = source.encode("utf-8")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        why = None
        if not _trusted(st):
            why = "not a regular file of yours that only you can write"
        else:
            try:
                with open(path, "rb") as fh:
                    if fh.read() == data:
                        return
                why = "content does not match its hash"
            except OSError as err:
                why = f"unreadable ({err})"
        _warn(f"discarded {path}: {why}; rebuilt")
        _unlink(path)
        _discard_numba_files(os.path.dirname(path), os.path.basename(path)[:-3])
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        with contextlib.suppress(FileExistsError):  # another process won with the same text
            os.link(tmp, path)
    finally:
        os.unlink(tmp)


# -- numba's cache files, verified -------------------------------------------------------
_MAGIC = b"hybridad-numba-cache-1\n"


class _Damaged(Exception):
    """A numba cache file that fails verification."""


class _VerifiedCacheFile(caching.IndexDataCacheFile):
    """numba's index and data files, each ``MAGIC + sha256(payload) + payload``,
    verified before anything is unpickled."""

    @contextlib.contextmanager
    def _open_for_write(self, filepath):
        tmp = f"{filepath}.tmp.{uuid.uuid4().hex[:16]}"
        try:
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                yield f
            os.replace(tmp, filepath)
        except BaseException:
            _unlink(tmp)
            raise

    def _write(self, path, payload):
        with self._open_for_write(path) as f:
            f.write(_MAGIC + hashlib.sha256(payload).digest() + payload)

    @staticmethod
    def _read(path):
        """The verified payload of ``path``; FileNotFoundError if absent."""
        fd = os.open(path, READ_FLAGS)
        with os.fdopen(fd, "rb") as f:
            if not _trusted(os.fstat(f.fileno())):
                raise _Damaged(f"{path}: not a regular file of yours that only you can write")
            data = f.read()
        head = len(_MAGIC) + 32
        if len(data) < head or not data.startswith(_MAGIC) or \
                hashlib.sha256(data[head:]).digest() != data[len(_MAGIC):head]:
            raise _Damaged(f"{path}: content does not match its digest")
        return data[head:]

    def _load_index(self):
        try:
            payload = self._read(self._index_path)
        except FileNotFoundError:
            return {}
        version, stamp, overloads = pickle.loads(payload)  # noqa: S301 (verified)
        if version != self._version or stamp != self._source_stamp:
            return {}
        return overloads

    def _save_index(self, overloads):
        self._write(self._index_path, self._dump((self._version, self._source_stamp, overloads)))

    def _load_data(self, name):
        return pickle.loads(self._read(self._data_path(name)))  # noqa: S301 (verified)

    def _save_data(self, name, data):
        self._write(self._data_path(name), self._dump(data))


class _VerifiedFunctionCache(caching.FunctionCache):
    """numba's per-function cache over :class:`_VerifiedCacheFile`: a load that
    fails in any way discards the function's files and recompiles."""

    def __init__(self, py_func):
        super().__init__(py_func)
        old = self._cache_file
        self._cache_file = _VerifiedCacheFile(old._cache_path, self._impl.filename_base,
                                              old._source_stamp)

    def _discard(self):
        base = self._impl.filename_base + "."
        with contextlib.suppress(OSError):
            for name in os.listdir(self._cache_path):
                if name.startswith(base):
                    _unlink(os.path.join(self._cache_path, name))

    def load_overload(self, sig, target_context):
        try:
            # numba's load first refreshes the context: starts its runtime
            # (whose symbols machine code may name) and installs every
            # registry of implementations (imports numba.np.*, ~0.5 s), which
            # only a compile needs -- and a compile refreshes it itself
            from numba.core.runtime import rtsys

            rtsys.initialize(target_context)
            with self._guard_against_spurious_io_errors():
                return self._load_overload(sig, target_context)
        except _Damaged as err:  # the file's digest or owner is wrong: rebuild it
            _warn(f"discarded damaged numba cache of {self._py_func.__qualname__} in "
                  f"{self._cache_path} ({err}); recompiling")
            self._discard()
            return None
        except Exception as err:  # noqa: BLE001 -- a verified entry this process cannot load
            # (an import that failed: a module half imported by a thread that a
            # fork left behind, a library changed since): recompiled, and the
            # compile's save replaces the entry -- never deleted for the process's
            # own trouble
            _warn(f"could not load the numba cache of {self._py_func.__qualname__} in "
                  f"{self._cache_path} ({type(err).__name__}: {err}); recompiling")
            return None

    def save_overload(self, sig, data):
        try:
            super().save_overload(sig, data)
        except Exception as err:  # noqa: BLE001 -- the compiled code is still good
            _warn(f"could not save numba's cache of {self._py_func.__qualname__} "
                  f"({type(err).__name__}: {err})")
            self._discard()


def _verify_numba_caches(module, filename):
    """Put every cached dispatcher defined in ``module`` on verified cache files."""
    for obj in list(vars(module).values()):
        cache = getattr(obj, "_cache", None)
        if isinstance(cache, caching.FunctionCache) and \
                not isinstance(cache, _VerifiedFunctionCache) and \
                obj.py_func.__code__.co_filename == filename:
            obj._cache = _VerifiedFunctionCache(obj.py_func)


# -- loading ----------------------------------------------------------------------------
_COMPILED = {}  # (hash, fn_name, argument types) -> dispatcher compiled for those only


def _module(source):
    """The module of ``source``, made from that verified text (see the module docstring)."""
    modname = _PREFIX + source_hash(source)
    module = sys.modules.get(modname)
    if module is not None:
        return module
    with _LOCK:
        module = sys.modules.get(modname)
        if module is not None:
            return module
        directory = cache_dir()
        if directory is not None:
            filename = os.path.join(directory, modname + ".py")
            try:
                _write_once(filename, source)
            except OSError as err:
                _warn(f"cannot write {filename} ({err}): compiled in memory")
                directory = None
        module = None
        if directory is not None:
            try:
                module = _exec(modname, source, filename)
                _verify_numba_caches(module, filename)
            except RuntimeError as err:  # numba: "no locator available" for the file
                if not _gone(err):
                    raise
                _warn(f"{filename} went away while it was loaded (the cache cleared "
                      "meanwhile?): compiled in memory")
                module = None
        if module is None:  # in memory: numba cannot cache without a file
            filename = f"<hybridad generated {modname}>"
            source = source.replace("cache=True", "cache=False")
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
            module = _exec(modname, source, filename)
        sys.modules[modname] = module
        return module


def _exec(modname, source, filename):
    module = types.ModuleType(modname)
    module.__file__ = filename
    exec(compile(source, filename, "exec"), module.__dict__)  # noqa: S102 (verified text)
    return module


def _gone(err):
    """Whether ``err`` is numba's refusal to cache a function whose source
    file is no longer there (a cache cleared by another process meanwhile)."""
    return "no locator available" in str(err)


def warm(source, fn_name="plan_fn"):
    """Whether ``source``'s function ``fn_name`` was compiled before: in this
    process, or by one that left numba's index for it in the disk cache (a
    warm load takes milliseconds, whatever the size of the code)."""
    modname = _PREFIX + source_hash(source)
    module = sys.modules.get(modname)
    if module is not None and getattr(getattr(module, fn_name, None), "signatures", None):
        return True
    directory = cache_dir()
    if directory is None:
        return False
    prefix = f"{modname}.{fn_name}-"
    try:
        return any(name.startswith(prefix) and name.endswith(".nbi")
                   for name in os.listdir(os.path.join(directory, "__pycache__")))
    except OSError:
        return False


def load_function(source, fn_name):
    """Function ``fn_name`` of generated ``source``, written to the cache once.

    Parameters
    ----------
    source : str
        Generated Python source defining ``fn_name`` (usually ``@njit(cache=True)``).
    fn_name : str
        The function to return.

    Returns
    -------
    object
        The module's ``fn_name``; a numba dispatcher compiles on first call
        (from disk when an earlier process compiled it).
    """
    return getattr(_module(source), fn_name)


def compiled(source, fn_name, argtypes, cacheable=True):
    """A dispatcher of ``fn_name`` compiled for ``argtypes`` only, shared by content.

    Parameters
    ----------
    source : str
        Generated source defining the ``@njit`` function ``fn_name``.
    fn_name : str
        Its name.
    argtypes : tuple of numba types
        The one signature compiled (from numba's disk cache when warm);
        anything else raises ``TypeError`` (compilation is disabled).
    cacheable : bool
        Whether numba may cache the machine code on disk.

    Returns
    -------
    numba dispatcher
        The same object for the same source and types for the life of the
        process, so a rebuilt plan costs no new machine code.
    """
    key = (source_hash(source), fn_name, tuple(argtypes), cacheable)
    own = _COMPILED.get(key)
    if own is not None:
        return own
    module = _module(source)
    fn = getattr(module, fn_name)
    own = type(fn)(fn.py_func, locals={}, targetoptions=dict(fn.targetoptions))
    if cacheable and os.path.isabs(module.__file__):
        try:
            own._cache = _VerifiedFunctionCache(own.py_func)
        except RuntimeError as err:  # its file went away: compiled, not cached
            if not _gone(err):
                raise
            _warn(f"{module.__file__} went away (the cache cleared meanwhile?): "
                  f"{fn_name} compiled, not cached")
    with warnings.catch_warnings():  # a host_ufunc's object-mode block: expected
        warnings.filterwarnings("ignore", message=".*object mode.*", category=NumbaWarning)
        own.compile(tuple(argtypes))  # not under _LOCK: numba has its own
    own.disable_compile()
    with _LOCK:  # a racing thread's twin is dropped
        return _COMPILED.setdefault(key, own)


# -- the command line's cache --info and --clear -------------------------------------------
def _entries(path):
    """Files of the cache in ``path``: generated modules, temporaries, numba's
    files, and hybridad's compiler's object files (``jit/``: each plan's
    program, and the library functions' objects plans share)."""
    found = []
    for sub in (path, os.path.join(path, "__pycache__")):
        with contextlib.suppress(OSError):
            found += [os.path.join(sub, n) for n in os.listdir(sub) if n.startswith(_PREFIX)
                      or (sub == path and n.endswith(".tmp"))]
    from ..jit.engine import OBJECTS

    objects = os.path.join(path, OBJECTS)
    with contextlib.suppress(OSError):
        found += [os.path.join(objects, n) for n in os.listdir(objects)
                  if n.endswith(".o") or ".o.tmp." in n]
    return found


def info():
    """A description of the cache: where it is, whether it is used, its size.

    Returns
    -------
    str
        Several lines of text (``python -m hybridad cache --info``).
    """
    path = cache_location()
    why = _refusal(path) if os.path.exists(path) else None
    files = _entries(path)
    size = sum(os.lstat(f).st_size for f in files if os.path.lexists(f))
    modules = sum(f.endswith(".py") for f in files)
    objects = sum(f.endswith(".o") for f in files)
    lines = [f"hybridad cache: {path}",
             "  status: " + (f"REFUSED: {why}; plans are compiled in memory" if why else
                             "private, in use" if os.path.exists(path) else
                             "not created yet (created 0700 on first use)"),
             f"  entries: {modules} generated modules, {objects} compiled objects, "
             f"{len(files) - modules - objects} numba and temporary files, "
             f"{size / 2**20:.1f} MiB",
             "  set HYBRIDAD_CACHE_DIR to move it; clear it with "
             "`python -m hybridad cache --clear`"]
    return "\n".join(lines)


def clear():
    """Delete the cache's files (only hybridad's; the directory stays).

    Returns
    -------
    int
        The number of files removed.

    Raises
    ------
    PermissionError
        If the directory belongs to another user (nothing is removed).
    """
    path = cache_location()
    if not os.path.exists(path):
        return 0
    st = os.stat(path)
    if _UID is not None and st.st_uid != _UID:
        raise PermissionError(f"{path} is owned by uid {st.st_uid}, not by you: not cleared")
    files = _entries(path)
    for f in files:
        _unlink(f)
    from ..jit.engine import OBJECTS

    for sub in ("__pycache__", OBJECTS):
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(path, sub))  # if empty
    return len(files)
