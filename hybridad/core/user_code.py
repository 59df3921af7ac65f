"""Library or user code: which files, functions, types and modules are the user's.

The guards (:mod:`hybridad.frontend.guard_walk`) walk into user objects only,
and the profiler of :mod:`hybridad.core.observe` records user code only;
numpy's, the standard library's, hybridad's own and the packages of
:data:`LIBRARY_PACKAGES` are treated as fixed.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import types

import numpy as np

from ..errors import PACKAGE_DIR

__all__ = ["LIBRARY_PACKAGES"]

#: top-level packages whose state hybridad treats as fixed (never walked into)
LIBRARY_PACKAGES = frozenset({
    "numpy", "scipy", "hybridad", "numba", "llvmlite", "cupy", "cupyx", "jax", "jaxlib",
    "torch", "autograd", "threadpoolctl", "dask", "distributed", "pytest", "_pytest",
    "pluggy", "hypothesis"}) | frozenset(getattr(sys, "stdlib_module_names", ()))

_LIB_DIRS = tuple(sorted({os.path.abspath(p) + os.sep for p in (
    sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib"),
    os.path.dirname(os.__file__), os.path.dirname(np.__file__), PACKAGE_DIR) if p}))
_file_kind = {}


def _is_user_file(filename):
    """Whether a code object's file is user code (not numpy's, hybridad's, the
    standard library's); cached per file name."""
    kind = _file_kind.get(filename)
    if kind is None:
        if filename.startswith("<") and filename.startswith(("<frozen", "<hybridad",
                                                               "<string>" + "\0")):
            kind = False
        else:
            path = os.path.abspath(filename)
            kind = not path.startswith(_LIB_DIRS) and not _in_library_package(path)
        _file_kind[filename] = kind
    return kind


def _in_library_package(path):
    parts = path.split(os.sep)
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            i = parts.index(marker)
            return i + 1 < len(parts) and parts[i + 1].split(".")[0] in LIBRARY_PACKAGES
    return False


def _is_library_module_name(name):
    return isinstance(name, str) and name.split(".")[0] in LIBRARY_PACKAGES


def _is_user_function(fn):
    return isinstance(fn, types.FunctionType) and _is_user_file(fn.__code__.co_filename) \
        and not _is_library_module_name(getattr(fn, "__module__", None))


def _is_user_type(tp):
    return isinstance(tp, type) and not _is_library_module_name(getattr(tp, "__module__", ""))
