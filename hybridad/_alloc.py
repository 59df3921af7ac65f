"""Exact counting of numpy data allocations through a NEP-49 memory handler.

numpy (>= 1.22) lets a program replace the allocator used for array data
buffers (NEP 49).  This module installs a handler whose four callbacks are
numba ``cfunc``s: they forward to libc ``malloc``/``calloc``/``realloc``/``free``
and bump counters in a module-level int64 array (the handler's ``ctx``).
Every data buffer numpy allocates while the handler is active is therefore
counted, temporaries included, which ``tracemalloc`` snapshots cannot show
once the temporaries are freed again.

The handler struct, its capsule and the counter array live at module level
for the life of the process: arrays remember the handler that allocated them
and call its ``free`` whenever they die, possibly long after the block.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from typing import Any, Callable, Iterator

import numpy as np
import numpy._core._multiarray_umath as _umath
from numba import cfunc, types

__all__ = ["AllocationCounts", "assert_no_alloc", "count_allocations"]

HANDLER_NAME = b"hybridad_counting"

# --- numpy C-API: PyDataMem_SetHandler / PyDataMem_GetHandler ----------------

_api = ctypes.pythonapi
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
_api.PyCapsule_New.restype = ctypes.py_object

_table_capsule = _umath._ARRAY_API  # its capsule name is NULL in numpy 2.x
_table = (ctypes.c_void_p * 307).from_address(
    _api.PyCapsule_GetPointer(_table_capsule, _api.PyCapsule_GetName(_table_capsule)))
# PYFUNCTYPE: called with the GIL held, a set Python error is raised.
_set_handler = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object)(_table[304])
_get_handler = ctypes.PYFUNCTYPE(ctypes.py_object)(_table[305])

# --- the counting callbacks ----------------------------------------------------

_libc = ctypes.CDLL(None) if os.name != "nt" else ctypes.cdll.ucrtbase
# Pointers travel as size_t integers (same ABI as void*, and comparable to 0).
_size = ctypes.c_size_t
_malloc, _calloc, _realloc, _free = (_libc.malloc, _libc.calloc, _libc.realloc, _libc.free)
for _fn, _args, _res in ((_malloc, [_size], _size), (_calloc, [_size, _size], _size),
                         (_realloc, [_size, _size], _size), (_free, [_size], None)):
    _fn.argtypes, _fn.restype = _args, _res

# Counter slots in the ctx array.
_ALLOCS, _BYTES, _REALLOCS, _FREES = range(4)
_COUNTERS = np.zeros(8, dtype=np.int64)  # 64 bytes; only the first 4 are used

_ctx, _ptr = types.CPointer(types.int64), types.uintp
# ``cache=True`` is not possible: numba refuses to cache functions that call
# ctypes function objects ("uses dynamic globals").  Compiling costs ~0.5 s.


@cfunc(_ptr(_ctx, _ptr))
def _counting_malloc(ctx, size):
    ctx[0] += 1
    ctx[1] += size
    return _malloc(size)


@cfunc(_ptr(_ctx, _ptr, _ptr))
def _counting_calloc(ctx, nelem, elsize):
    ctx[0] += 1
    ctx[1] += nelem * elsize
    return _calloc(nelem, elsize)


@cfunc(_ptr(_ctx, _ptr, _ptr))
def _counting_realloc(ctx, ptr, new_size):
    if ptr == 0:
        ctx[0] += 1
        ctx[1] += new_size
    else:
        ctx[2] += 1
    return _realloc(ptr, new_size)


@cfunc(types.void(_ctx, _ptr, _ptr))
def _counting_free(ctx, ptr, size):
    if ptr != 0:
        ctx[3] += 1
        _free(ptr)


# --- the handler capsule ---------------------------------------------------------

class _Allocator(ctypes.Structure):
    _fields_ = [("ctx", ctypes.c_void_p), ("malloc", ctypes.c_void_p),
                ("calloc", ctypes.c_void_p), ("realloc", ctypes.c_void_p),
                ("free", ctypes.c_void_p)]


class _Handler(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 127), ("version", ctypes.c_uint8),
                ("allocator", _Allocator)]


_HANDLER = _Handler(HANDLER_NAME, 1, _Allocator(
    _COUNTERS.ctypes.data, _counting_malloc.address, _counting_calloc.address,
    _counting_realloc.address, _counting_free.address))
_CAPSULE_NAME = ctypes.create_string_buffer(b"mem_handler")
_CAPSULE = _api.PyCapsule_New(ctypes.addressof(_HANDLER), ctypes.addressof(_CAPSULE_NAME), None)

# --- public API -------------------------------------------------------------------


class AllocationCounts:
    """Allocation counts of one :func:`count_allocations` block.

    Attributes ``allocations``, ``bytes``, ``reallocs`` and ``frees`` are live
    while the block runs and frozen at its exit.  Reading them allocates no
    array data.
    """

    __slots__ = ("_final", "_start")

    def __init__(self):
        self._start = _COUNTERS[:4].tolist()
        self._final = None

    def _delta(self, slot):
        if self._final is not None:
            return self._final[slot]
        return int(_COUNTERS[slot]) - self._start[slot]

    def _freeze(self):
        now = _COUNTERS[:4].tolist()
        self._final = [a - b for a, b in zip(now, self._start, strict=True)]

    allocations = property(lambda self: self._delta(_ALLOCS),
                           doc="Data buffers allocated (malloc, calloc, realloc of NULL).")
    bytes = property(lambda self: self._delta(_BYTES), doc="Bytes requested by those allocations.")
    reallocs = property(lambda self: self._delta(_REALLOCS), doc="Resizes of existing buffers.")
    frees = property(lambda self: self._delta(_FREES),
                     doc="Buffers from this handler freed (from any block) during the block.")

    def __repr__(self):
        return (f"AllocationCounts(allocations={self.allocations}, bytes={self.bytes}, "
                f"reallocs={self.reallocs}, frees={self.frees})")


@contextlib.contextmanager
def count_allocations() -> Iterator[AllocationCounts]:
    """Count numpy array data allocations made inside a ``with`` block.

    Installs the counting handler (named ``"hybridad_counting"``) for the
    block and restores the previous handler on exit, also on exceptions.
    Blocks nest; an outer block also counts what inner blocks count.

    Yields
    ------
    AllocationCounts
        Live counts during the block, a snapshot of the deltas after it.

    Notes
    -----
    Counted: every numpy array data buffer allocated while the handler is
    active, temporaries included (numpy's small-buffer cache is bypassed, so
    each buffer is a real ``malloc``; 0-byte arrays still allocate).  Not
    counted: numba NRT allocations, Python objects, numpy's internal scratch
    memory (iterator buffers, array metadata).  Arrays remember their
    handler, so buffers allocated inside the block may safely be freed after
    it (and older ones inside it); ``frees`` counts frees of this handler's
    buffers that happen during the block.

    numpy keeps the handler in a ``contextvars`` variable, so it is per
    context.  New threads start in an empty context: their allocations are
    not counted, unless the thread runs the work in a copy of the block's
    context (``contextvars.copy_context().run``).  asyncio tasks created in
    the block copy the context and are counted (so is ``asyncio.to_thread``).
    The counters are process-wide and not atomic: a block also counts
    allocations made meanwhile in any other context that has the counting
    handler installed (e.g. another thread inside its own block).

    numpy 2 turns a Python scalar operand (``a * 2``) into 0-d arrays: one or
    two 8-byte allocations per scalar per ufunc call.  Large temporaries
    (>= 256 KiB) may be elided and reused in place: those are not allocated.
    """
    counts = AllocationCounts()
    previous = _set_handler(_CAPSULE)
    try:
        yield counts
    finally:
        counts._freeze()
        _set_handler(previous)


def assert_no_alloc(fn: Callable[..., Any], *args: Any, n: int = 100, warmup: int = 3,
                    **kwargs: Any) -> AllocationCounts:
    """Assert that ``fn(*args, **kwargs)`` allocates no numpy data buffers.

    Calls ``fn`` ``warmup`` times uncounted, then ``n`` times inside
    :func:`count_allocations`.

    Returns
    -------
    AllocationCounts
        The counts of the ``n`` measured calls.

    Raises
    ------
    AssertionError
        If any allocation or reallocation happened.
    """
    for _ in range(warmup):
        fn(*args, **kwargs)
    with count_allocations() as counts:
        for _ in range(n):
            fn(*args, **kwargs)
    if counts.allocations or counts.reallocs:
        raise AssertionError(
            f"{getattr(fn, '__name__', fn)!s} allocated {counts.allocations} numpy buffers "
            f"({counts.bytes} bytes, {counts.reallocs} reallocs) in {n} calls")
    return counts

