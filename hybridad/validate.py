"""The one validation of result buffers, used by every plan and every call.

Every call that writes into buffers the caller owns -- value, gradient,
Hessian-vector product, Hessian, Jacobian, a batch's values and gradients,
an optimizer step's value and parameters -- checks them all here before
anything is written: each is a writeable array of its shape and dtype, no
two of them share memory, and none shares memory with an argument (or
another array the call reads, such as ``v``).  A failure raises
``ValueError`` naming the buffer and leaves every buffer untouched.
"""

from __future__ import annotations

import numpy as np

__all__ = ["check_results", "describe", "writeable"]


def writeable(a):
    """numpy's writeable flag (device arrays have none: always writeable)."""
    flags = getattr(a, "flags", None)
    return getattr(flags, "writeable", True)


def describe(a):
    """``shape (2,), dtype float64[, read-only]`` or the type's name."""
    if isinstance(a, np.ndarray):
        return f"shape {a.shape}, dtype {a.dtype}" + ("" if a.flags.writeable else ", read-only")
    return type(a).__name__


def check_results(xp, results, reads=()):
    """Validate result buffers before a call writes them.

    Parameters
    ----------
    xp : module
        The plan's array module (numpy, or cupy).
    results : list of (name, array, shape, dtype)
        The buffers the call writes; ``dtype`` None accepts any floating-point
        dtype.  ``name`` is how errors call it (``"out.gradient for argument 'x'"``).
    reads : list of (name, array)
        What the call reads (``"argument 'x'"``, ``"v"``): no result may share
        memory with them.

    Raises
    ------
    ValueError
        Naming the first buffer that is not a writeable array of its shape and
        dtype, or that shares memory with another result or with what is read.
    """
    for name, buf, shape, dtype in results:
        if not isinstance(buf, xp.ndarray) or buf.shape != tuple(shape) or not writeable(buf) \
                or (buf.dtype.kind != "f" if dtype is None else buf.dtype != dtype):
            kind = ("0-d " if shape == () else "") + \
                ("floating-point array" if dtype is None else "array")
            where = "" if shape == () else f" of shape {tuple(shape)}"
            dt = "" if dtype is None else (" and" if where else " of") + \
                f" dtype {np.dtype(dtype)}"
            raise ValueError(f"{name} must be a writeable {kind}{where}{dt}; "
                             f"got {describe(buf)}")
    may_share = xp.may_share_memory
    for i, (name, buf, _, _) in enumerate(results):
        for other, obuf, _, _ in results[i + 1:]:
            if may_share(buf, obuf):
                raise ValueError(f"out buffers must not share memory with each other ({name} "
                                 f"and {other} do)")
        for other, a in reads:
            if may_share(buf, a):
                raise ValueError(f"out buffers must not share memory with {other} ({name} "
                                 "does)")
