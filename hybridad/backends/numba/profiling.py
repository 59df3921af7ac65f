"""Per-node timers for a generated numba plan (opt-in; never in normal plans).

:func:`~hybridad.backends.numba.program.compile_numba_program` with
``profile=True`` hands a :class:`Timers` to its node writer: after each node's
code (each chunk that emits lines) it adds a *stamp* -- one clock read,
``timers[k] += now - last`` and ``last = now`` -- so the time between two
stamps is charged to the node written between them.  The stamps chain: the
slots add up to the function's whole run, whose first clock read opens the
function (before the argument checks) and whose last follows the copies into
the outputs.  Slots: ``"entry"`` (argument checks and arena views), one per
node, ``"outputs"``, then two more: the whole run and the number of calls.
The program gets one more leading argument, the address of the int64 timer
array (bound like the arenas: :func:`~hybridad.backends.numba.link.link`).

The clock is ``clock_gettime(CLOCK_MONOTONIC)`` called from the generated
code as an LLVM external (:func:`clock_ns`, an intrinsic: no GIL, no object
mode, cacheable), about 20-40 ns a read; where there is no ``clock_gettime``
(Windows) ``time.perf_counter_ns`` in object mode (about 0.5 us a read).
``clock="cpu"`` reads the calling thread's CPU time instead
(``CLOCK_THREAD_CPUTIME_ID``, a system call: about 0.4 us a read): on a
busy machine a serial plan's nodes are then timed without the time slices
other processes took (a parallel plan's worker threads are not counted).
:func:`clock_cost` measures the cost of one read.
"""

from __future__ import annotations

import ctypes
import sys
import time

import numpy as np
from numba import njit, objmode, types
from numba.core import cgutils
from numba.extending import intrinsic
from ..._libcache import install

__all__ = ["CLOCKS", "Timers", "clock_cost", "clock_ns", "cpu_clock_ns"]


def _has_clock_gettime():
    if sys.platform == "win32" or not hasattr(time, "CLOCK_MONOTONIC"):
        return False
    try:
        return hasattr(ctypes.CDLL(None), "clock_gettime")
    except OSError:
        return False


def _clock_intrinsic(clock_id, doc):
    """An intrinsic reading ``clock_gettime(clock_id)`` in nanoseconds."""
    @intrinsic
    def read(typingctx):
        from llvmlite import ir

        def codegen(context, builder, signature, args):
            i64, i32 = ir.IntType(64), ir.IntType(32)
            spec = cgutils.alloca_once(builder, ir.ArrayType(i64, 2))  # struct timespec
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(i32, [i32, spec.type]), "clock_gettime")
            builder.call(fn, [ir.Constant(i32, clock_id), spec])
            zero = ir.Constant(i32, 0)
            sec = builder.load(builder.gep(spec, [zero, zero]))
            nsec = builder.load(builder.gep(spec, [zero, ir.Constant(i32, 1)]))
            return builder.add(builder.mul(sec, ir.Constant(i64, 1_000_000_000)), nsec)

        return types.int64(), codegen

    read.__doc__ = doc
    read.clock_id = clock_id  # (hybridad's compiler reads the clock the same way)
    return read


if _has_clock_gettime():
    clock_ns = _clock_intrinsic(int(time.CLOCK_MONOTONIC),
                                "Nanoseconds of ``CLOCK_MONOTONIC`` (``time.monotonic_ns``'s).")
    CLOCK_NAME = "clock_gettime(CLOCK_MONOTONIC)"
    #: the calling thread's CPU time (``clock="cpu"``): a system call, ~0.4 us
    cpu_clock_ns = _clock_intrinsic(int(time.CLOCK_THREAD_CPUTIME_ID),
                                    "Nanoseconds of CPU time of the calling thread.")
else:  # pragma: no cover - Windows
    @njit
    def clock_ns():
        """Nanoseconds of a monotonic clock, from compiled code (object mode)."""
        with objmode(t="int64"):
            t = time.perf_counter_ns()
        return t
    CLOCK_NAME = "time.perf_counter_ns (object mode)"

    @njit
    def cpu_clock_ns():
        """Nanoseconds of CPU time of the calling thread (object mode)."""
        with objmode(t="int64"):
            t = time.thread_time_ns()
        return t

CLOCKS = {"wall": (CLOCK_NAME, "clock_ns"),
          "cpu": ("the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID)", "cpu_clock_ns")}


install()  # numba's cache of the functions below: stamped with their imports' source


@njit(cache=True)
def _clock_loop(n):
    s = 0
    t0 = clock_ns()
    for _ in range(n):
        s += clock_ns() & 1
    return clock_ns() - t0, s


@njit(cache=True)
def _cpu_clock_loop(n):
    s = 0
    t0 = clock_ns()
    for _ in range(n):
        s += cpu_clock_ns() & 1
    return clock_ns() - t0, s


def clock_cost(clock="wall", reads=20_000, rounds=5):
    """Nanoseconds one read of ``clock`` costs in compiled code (best of ``rounds``)."""
    loop = _cpu_clock_loop if clock == "cpu" else _clock_loop
    loop(1)
    return min(loop(reads)[0] for _ in range(rounds)) / reads


class Timers:
    """The stamps of one profiled program (see the module docstring).

    ``slots``: one ``(label, parallel)`` per timed segment, ``label`` a node
    (its code precedes the stamp) or ``"entry"`` / ``"outputs"``; ``parallel``
    whether that node's code has a ``prange`` loop."""

    PARAM = "_hp_profp"

    def __init__(self, clock="wall"):
        if clock not in CLOCKS:
            raise ValueError(f"clock must be one of {sorted(CLOCKS)}; got {clock!r}")
        self.clock = clock
        self.slots = []

    @property
    def header(self):
        """The generated module's import of the clock."""
        return f"from hybridad.backends.numba.profiling import {CLOCKS[self.clock][1]} as _hp_clk"

    def stamp(self, w, label, parallel=False):
        """Charge the time since the last stamp to ``label``."""
        k = len(self.slots)
        self.slots.append((label, bool(parallel)))
        w.emit("_hp_t1 = _hp_clk()", f"_hp_pf[{k}] += _hp_t1 - _hp_t0", "_hp_t0 = _hp_t1")

    def after(self, w, node, lines, parallel):
        """The node writer's hook: a stamp after a node that wrote code."""
        if lines:
            self.stamp(w, node, parallel)

    @property
    def size(self):
        """Length of the timer array: the slots, the whole run, the calls."""
        return len(self.slots) + 2

    def prologue(self):
        """The function's first lines (before the argument checks)."""
        return ["    _hp_t0 = _hp_clk()", "    _hp_start = _hp_t0",
                f"    _hp_pf = _view({self.PARAM}, np.int64({self.size}), np.int64)"]

    def epilogue(self):
        """The function's last lines (after the outputs' stamp)."""
        n = len(self.slots)
        return [f"    _hp_pf[{n}] += _hp_t0 - _hp_start", f"    _hp_pf[{n + 1}] += 1"]

    def array(self):
        """A zeroed timer array for the program."""
        return np.zeros(self.size, np.int64)
