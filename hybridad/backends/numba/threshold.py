"""When a loop runs multithreaded: the ``prange`` threshold, the switch
that turns it off for a plan built with ``parallel=False``, and the work
estimate plans compare with it (no numba here: every plan imports this)."""

from __future__ import annotations

import math
import os

from ..._settings import enabled, switch

__all__ = ["GEMM_THREADS_MIN", "MATVEC_BLOCK", "PARALLEL_MIN", "loop_threads", "parallel_min",
           "serial_loops", "work_estimate"]

#: fewest loop iterations for which a region runs as a parallel ``prange``
#: (below it, thread start-up costs more than it saves; see benchmarks/);
#: ``HYBRIDAD_PARALLEL_MIN`` overrides
PARALLEL_MIN = int(os.environ.get("HYBRIDAD_PARALLEL_MIN", "") or 1 << 15)


#: columns per block of the numba backend's column loop for ``A^T v``
#: (:mod:`.rt`'s ``matvec_axpy``): a block of the result stays in L1 while
#: the rows stream past, and blocks are what its threads split
MATVEC_BLOCK = 256


#: fewest multiply-adds of a gemm that a parallel plan's threads share, a
#: panel of rows each (:func:`hybridad.backends.numba.rt.gemm_threads`)
GEMM_THREADS_MIN = 1 << 20


def parallel_min():
    """The prange threshold in effect: :data:`PARALLEL_MIN`, or no loop at
    all inside :func:`serial_loops`."""
    return 1 << 62 if enabled("serial_loops") else PARALLEL_MIN


def loop_threads():
    """The threads a parallel loop runs on: numba's thread count."""
    from numba import config

    return config.NUMBA_NUM_THREADS


def serial_loops(serial=True):
    """Generate every loop as a plain ``range`` (no worker threads) while
    active, in this thread (a plan built with ``parallel=False``)."""
    return switch("serial_loops", serial)


def work_estimate(nodes):
    """Rough count of element operations of a plan (decides ``heavy``)."""
    total = 0
    for n in nodes:
        if n.op == "matmul":
            total += n.size * n.args[0].shape[-1]
        elif n.op == "region":
            total += math.prod(n.attrs["body"].shape)
        else:
            total += n.size
    return total
