"""Runtime helpers that generated numba code imports (besides :mod:`vmath`).

Buffers a plan owns (its arenas) and buffers a result owns (validated once per
result) reach the compiled plan as integer addresses, not as arrays: numba
unboxes every array argument into a fresh NRT MemInfo (one runtime allocation
and ~0.1 us per array per call), while an integer costs nothing.  Inside the
kernel :func:`view_at` wraps an address in an array with no MemInfo at all.
The caller keeps the owning arrays alive for as long as it passes their
addresses (the plan holds its arenas; the plan's result cache holds the result).
"""

from __future__ import annotations

from numba import carray, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["address_pointer", "overlaps", "overlaps_range", "view_at"]


@intrinsic
def address_pointer(typingctx, address):
    """``void *`` from an integer address (inttoptr)."""
    if not isinstance(address, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return types.voidptr(address), codegen


@njit(inline="always", cache=True)
def view_at(address, shape, dtype):
    """The C-contiguous array of ``shape`` and ``dtype`` at ``address``
    (borrowed: no MemInfo, no allocation)."""
    return carray(address_pointer(address), shape, dtype)


@njit(inline="always", cache=True)
def overlaps(a, b):
    """Whether C-contiguous arrays ``a`` and ``b`` share memory."""
    if a.size == 0 or b.size == 0:
        return False
    pa, pb = a.ctypes.data, b.ctypes.data
    return pa < pb + b.size * b.itemsize and pb < pa + a.size * a.itemsize


@njit(inline="always", cache=True)
def overlaps_range(a, address, nbytes):
    """Whether C-contiguous ``a`` shares memory with ``[address, address + nbytes)``."""
    if a.size == 0 or nbytes == 0:
        return False
    pa = a.ctypes.data
    return pa < address + nbytes and address < pa + a.size * a.itemsize
