"""Exceptions raised by hybridad."""

from __future__ import annotations

import linecache
import os
import sys

__all__ = ["MemoryBudgetError", "TracingError", "user_location"]

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_NUMPY_MARK = os.sep + "numpy" + os.sep


class TracingError(Exception):
    """Raised when user code cannot be traced into a static graph.

    Typical cause: Python control flow that depends on the *value* of a traced
    array (``if x[0] > 0``, ``float(x)``, ``bool(...)``).  The message names the
    offending line and the operation to use instead (``np.where``,
    ``np.maximum``, ...).
    """


class MemoryBudgetError(ValueError):
    """Raised by :func:`hybridad.compile` when no plan fits ``memory_budget``
    (at compile time, never as an out-of-memory at run time).  The message
    gives the smallest workspace hybridad can plan for the function."""


def user_location():
    """``'file.py:12: <source line>'`` of the innermost frame outside hybridad/numpy."""
    frame = sys._getframe(1)
    while frame is not None:
        fname = os.path.abspath(frame.f_code.co_filename)
        if not fname.startswith(_PKG_DIR) and _NUMPY_MARK not in fname:
            line = linecache.getline(fname, frame.f_lineno).strip()
            where = f"{os.path.basename(fname)}:{frame.f_lineno}"
            return f"{where}: {line}" if line else where
        frame = frame.f_back
    return "<unknown location>"
