"""When a loop runs multithreaded: the ``prange`` threshold and the switch
that turns it off for a plan built with ``parallel=False``."""

from __future__ import annotations

import os

from ..._settings import enabled, switch

__all__ = ["PARALLEL_MIN", "parallel_min", "serial_loops"]

#: fewest loop iterations for which a region runs as a parallel ``prange``
#: (below it, thread start-up costs more than it saves; see benchmarks/);
#: ``HYBRIDAD_PARALLEL_MIN`` overrides
PARALLEL_MIN = int(os.environ.get("HYBRIDAD_PARALLEL_MIN", "") or 1 << 15)


def parallel_min():
    """The prange threshold in effect: :data:`PARALLEL_MIN`, or no loop at
    all inside :func:`serial_loops`."""
    return 1 << 62 if enabled("serial_loops") else PARALLEL_MIN


def serial_loops(serial=True):
    """Generate every loop as a plain ``range`` (no worker threads) while
    active, in this thread (a plan built with ``parallel=False``)."""
    return switch("serial_loops", serial)
