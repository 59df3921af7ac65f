"""The array module of the caller's arrays: numpy, or cupy for device arrays.

cupy is never imported here unless the caller already handed over a cupy
array (so ``import hybridad`` stays numpy-only).
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["array_module", "is_array"]


def _is_cupy(x):
    cupy = sys.modules.get("cupy")
    return cupy is not None and issubclass(type(x), cupy.ndarray)


def is_array(x):
    """Whether ``x`` is a numpy (subclasses included) or a cupy ndarray -- by
    its type: a tracer, whose ``__class__`` says ndarray, is not one."""
    return issubclass(type(x), np.ndarray) or _is_cupy(x)


def array_module(*objs):
    """``cupy`` if any of ``objs`` is a cupy array, else ``numpy``."""
    for x in objs:
        if _is_cupy(x):
            return sys.modules["cupy"]
    return np
