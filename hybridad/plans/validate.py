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

__all__ = ["FLOATS", "check_results", "describe", "is_buffer", "real_values", "writeable"]

#: the dtypes results are computed in
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def real_values(a, name):
    """``a`` -- an array (of any array module), a number or a nested list of
    numbers -- as an array of real numbers, for a
    call that copies or converts what it reads into the plan's own float
    buffers (a direction ``v``, scipy's ``x``, ``p`` or ``y``).

    A complex array, and anything that is not numbers (None, strings,
    objects), raises a ``TypeError`` naming ``name``: numpy's conversion to
    a real dtype would drop the imaginary part (with a warning at most) or
    make NaN of None, and the derivatives would be silently wrong.
    """
    if not hasattr(a, "dtype") or not hasattr(a, "shape"):
        a = np.asarray(a)  # (a number or a list)
    kind = a.dtype.kind
    if kind not in "biuf":
        hint = "; its imaginary part would be dropped: pass the real and imaginary parts " \
               "separately (the derivatives are real-linear)" if kind == "c" else ""
        raise TypeError(f"{name} must be real numbers (an array of a bool, integer or float "
                        f"dtype); got {describe(a)}{hint}")
    return a


def is_buffer(buf, xp):
    """Whether results may be written into ``buf``: an ndarray of the plan's
    array module, or a subclass holding plain data (a memmap; see
    :func:`hybridad.core.supported.plain_subclass`) -- not a masked array or np.matrix,
    which would give the numbers written another meaning."""
    if type(buf) is xp.ndarray:
        return True
    from ..core.supported import plain_subclass

    return issubclass(type(buf), np.ndarray) and plain_subclass(type(buf))


def writeable(a):
    """numpy's writeable flag (device arrays have none: always writeable)."""
    flags = getattr(a, "flags", None)
    return getattr(flags, "writeable", True)


def describe(a):
    """``shape (2,), dtype float64[, read-only]`` or the type's name."""
    from ..core.supported import plain_subclass

    if isinstance(a, np.ndarray) and (type(a) is np.ndarray or plain_subclass(type(a))):
        return f"shape {a.shape}, dtype {a.dtype}" + ("" if a.flags.writeable else ", read-only")
    if isinstance(a, np.ndarray):
        return (f"a {type(a).__module__}.{type(a).__name__}, an ndarray subclass whose "
                "semantics hybridad does not keep (pass a plain ndarray)")
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
        if type(buf) is np.ndarray:  # (the common case in a few attribute reads)
            if buf.shape == shape and buf.flags.writeable and \
                    (buf.dtype is dtype or dtype is None and buf.dtype in FLOATS):
                continue
        if not is_buffer(buf, xp) or buf.shape != tuple(shape) or not writeable(buf) \
                or (buf.dtype not in FLOATS if dtype is None else buf.dtype != dtype):
            kind = ("0-d " if shape == () else "") + \
                ("float32 or float64 array" if dtype is None else "array")
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
