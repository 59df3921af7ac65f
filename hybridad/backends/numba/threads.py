"""One thread pool at a time: BLAS runs single-threaded inside multithreaded plans.

A plan whose loops run as ``prange`` loops (numba's OpenMP or workqueue
pool) and that also calls BLAS (a matmul's gemm, scipy's OpenBLAS with its
own pool) alternates between two pools; each one's idle workers keep spinning
on the cores the other needs.  On 2 cores the MLP gradient at a batch of
10^4 took 24 ms that way, 4.6 ms with BLAS limited to one thread, 3.0 ms
with a serial plan.  So while such a plan runs, the BLAS libraries of the
process are set to one thread (threadpoolctl finds them), and put back after
the call: the plan's own loops are its parallelism.  Pass
``compile(..., parallel=False)`` to keep BLAS's threads instead.
"""

from __future__ import annotations

import threading

__all__ = ["SingleThreadedBlas"]

_libs = None
_libs_lock = threading.Lock()


def _blas_libraries():
    """The BLAS library controllers of this process (found once)."""
    global _libs
    with _libs_lock:
        if _libs is None:
            try:
                from threadpoolctl import ThreadpoolController

                _libs = [lib for lib in ThreadpoolController().lib_controllers
                         if lib.user_api == "blas"]
            except Exception:  # noqa: BLE001 - no threadpoolctl or an unknown BLAS: no limit
                _libs = []
    return _libs


class SingleThreadedBlas:
    """Context manager: the process's BLAS libraries at one thread, then as before.

    Nesting and concurrent use from several threads are counted: the thread
    counts are restored when the last user leaves.
    """

    _depth = 0
    _saved = ()
    _lock = threading.Lock()

    def __enter__(self):
        cls = type(self)
        with cls._lock:
            if cls._depth == 0:
                libs = _blas_libraries()
                cls._saved = [(lib, lib.get_num_threads()) for lib in libs]
                for lib, n in cls._saved:
                    if n != 1:
                        lib.set_num_threads(1)
            cls._depth += 1
        return self

    def __exit__(self, *exc):
        cls = type(self)
        with cls._lock:
            cls._depth -= 1
            if cls._depth == 0:
                for lib, n in cls._saved:
                    if n != 1:
                        lib.set_num_threads(n)
                cls._saved = ()
        return False
