"""Where the disk cache lives, and whether it may be used: a private
directory, or none (plans are then compiled in memory).

Kept apart from :mod:`hybridad.backends.numba.cache` (the verified numba
cache itself) so that code that only asks where the cache is -- the cost
model looking for this machine's calibration, ``python -m hybridad cache
--info`` -- does not import numba.
"""

from __future__ import annotations

import os
import stat
import warnings

from ._forksafe import RLock

__all__ = ["READ_FLAGS", "CacheWarning", "cache_dir", "cache_location"]

#: opening a cache file: never through a link, and never waiting (a FIFO put
#: there blocked the open; fstat then refuses what is not a regular file)
READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)

_UID = os.geteuid() if hasattr(os, "geteuid") else None  # None: no owners (Windows)


class CacheWarning(UserWarning):
    """A cache directory refused, or a damaged cache entry discarded and rebuilt."""


def _warn(message):
    warnings.warn(f"hybridad cache: {message}", CacheWarning, stacklevel=3)


# -- the directory ----------------------------------------------------------------------
_REFUSED = set()  # directories already warned about
_LOCK = RLock()


def cache_location():
    """The configured cache directory, usable or not.

    Returns
    -------
    str
        ``$HYBRIDAD_CACHE_DIR``, else ``$XDG_CACHE_HOME/hybridad``, else
        ``~/.cache/hybridad``.
    """
    return os.path.abspath(os.environ.get("HYBRIDAD_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "hybridad"))


def _refusal(path):
    """Why ``path`` cannot be the cache (created ``0700`` if missing), or None."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError as err:
        return f"cannot be created ({err})"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if _UID is not None and st.st_uid != _UID:
        return f"is owned by uid {st.st_uid}, not by you (uid {_UID})"
    if st.st_mode & 0o022:
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}; chmod 700)"
    if not os.access(path, os.W_OK | os.X_OK):
        return "is not writable"
    return None


def cache_dir():
    """The cache directory if it is private and usable, else None.

    Returns
    -------
    str or None
        :func:`cache_location`, created ``0700`` if missing; None (after one
        :class:`CacheWarning` per directory) when it cannot be created, is
        owned by another user or is writable by group or others: plans are
        then compiled in memory.
    """
    path = cache_location()
    why = _refusal(path)
    if why is None:
        return path
    with _LOCK:
        if path not in _REFUSED:
            _REFUSED.add(path)
            _warn(f"{path} {why}: not used, plans are compiled in memory "
                  "(set HYBRIDAD_CACHE_DIR to a private directory)")
    return None
