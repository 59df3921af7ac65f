"""When a loop runs multithreaded: the ``prange`` threshold, the switch
that turns it off for a plan built with ``parallel=False``, the numba
backend's block sizes and the work estimate plans compare with the threshold
(no numba here: every plan imports this).  The passes read these facts from
the :class:`~hybridad.transforms.machine.Machine` the plan hands them
(:func:`hybridad.backends.numba.machine.machine`), never from here."""

from __future__ import annotations

import functools
import math
import os
import sys

from ..._settings import enabled, switch
from ...ops.lapack_names import LAPACK_OPS

__all__ = ["BLAS_THREADS_MIN", "BODY_PARALLEL_MIN", "GEMM_K_PARTS", "GEMM_K_ROWS",
           "GEMM_SMALL_RESULT", "GEMM_THREADS_MIN", "GEMM_THREADS_MIN_DIM", "LAPACK_CALLS_MIN",
           "LAPACK_THREADS_MIN",
           "MATVEC_BLOCK", "OPAQUE_MIN", "PAIR_PARTS", "PAIR_ROWS", "PARALLEL_MIN",
           "blas_may_thread", "design_threads", "environment_threads", "loop_threads",
           "loops_serial", "numba_config_threads", "parallel_min", "serial_loops",
           "work_estimate"]

#: fewest loop iterations for which a region runs as a parallel ``prange``
#: (below it, thread start-up costs more than it saves; see benchmarks/);
#: ``HYBRIDAD_PARALLEL_MIN`` overrides
PARALLEL_MIN = int(os.environ.get("HYBRIDAD_PARALLEL_MIN", "") or 1 << 15)

#: fewest element operations (:func:`work_estimate`) of ONE iteration of a
#: rolled loop's body for which the body's loops and products may run on the
#: threads, by the same rules as a plan's (:data:`PARALLEL_MIN`,
#: :data:`GEMM_THREADS_MIN`; where the plan may: not inside
#: :func:`serial_loops`, more than one CPU); below it every loop of the body is
#: serial, and a serial body is one function the loop's compiled driver calls
#: natively.  A threaded body is called from Python each iteration (~2.5 us)
#: and starts its threads each time.  Measured (2 cores, Euler ``x + 0.01 tanh(W x)``,
#: gradient through 200 steps, serial body -> threaded body, ms): n = 200 1.58
#: -> 4.42, 300 3.99 -> 6.61, 500 11.3 -> 10.1, 1000 45.7 -> 27.4
BODY_PARALLEL_MIN = 1 << 18

#: the innermost extent from which generated loops hide their trip count from
#: LLVM (:meth:`hybridad.backends.numba.loops.LoopWriter.nest`'s ``opaque``,
#: :func:`hybridad.backends.numba.reduce.hidden_extent`); below it, a vector of
#: the inner loop holds few elements
OPAQUE_MIN = 8


#: columns per block of the numba backend's column loop for ``A^T v``
#: (:mod:`.rt`'s ``matvec_axpy``): a block of the result stays in L1 while
#: the rows stream past, and blocks are what its threads split
MATVEC_BLOCK = 256

#: a ``matvec_pair`` (:func:`hybridad.backends.numba.rt.matvec_pair`) runs its
#: rows in at most PAIR_PARTS parts (a thread each) of PAIR_ROWS rows or more;
#: each part adds its rows into its own row of scratch (PAIR_PARTS x k elements)
PAIR_PARTS, PAIR_ROWS = 8, 64

#: fewest multiply-adds of a gemm that a parallel plan's threads share, a
#: panel of the result each (:func:`hybridad.backends.numba.rt.gemm_threads`;
#: :meth:`hybridad.transforms.machine.Machine.gemm_on_threads`)
GEMM_THREADS_MIN = 1 << 20
#: and the most of its columns and contracted length at least this.  An
#: MLP's 16 x 16 products over 10^4-10^5 rows are shared: on 2 cores (2026-12-03,
#: bench_load.py, 2 s windows) the 1-16-16-1 MLP's default plan took 0.68x
#: (B = 10^4) and 0.74x (10^5) its serial plan quiet, 0.94x / 0.89x beside a
#: busy process and 0.82x / 0.93x beside numpy matmuls in another thread
#: (0.83x / 0.79x, 1.06x / 1.00x, 1.00x / 1.05x with them on one BLAS thread,
#: 2026-11-28); interleaved in one process, its gradient 0.85x (10^4) and
#: 0.80x (10^5), its HVP 0.97x.  64 until then (measured noisier beside
#: numpy's BLAS before the plans stopped limiting numpy's own OpenBLAS)
GEMM_THREADS_MIN_DIM = 16

#: a product with a small result over a long contracted axis (``X^T G`` of a
#: narrow layer: 16 x 16 over 10^4 rows, 0.29 ms as one single-threaded
#: call) runs on a parallel plan's threads in at most GEMM_K_PARTS parts of
#: that axis of GEMM_K_ROWS or more (:func:`hybridad.backends.numba.kparts.gemm_kparts`;
#: :meth:`hybridad.transforms.machine.Machine.gemm_k_parts`): a part count
#: fixed by the shape, so the same sums on any thread count
GEMM_K_PARTS, GEMM_K_ROWS = 8, 1024

#: a product with a small result (at most this many elements) and a long
#: contracted axis runs as gemms over chunks of that axis
#: (:func:`hybridad.backends.numba.rt.gemm`), each chunk's two panels
#: together about ``rt.GEMM_CHUNK_BYTES`` (L2-resident), accumulated
#: with beta = 1.  OpenBLAS streams the whole axis through one packing pass
#: there and runs 3x slower (2 cores, h^T g of two 10^5 x 16 float32 panels:
#: 1.45 ms as one call, 0.45 ms in chunks of 512 to 2048 rows; float64 2.9
#: and 1.05 ms; 32 x 32 results 1.7x; 64 x 64 and larger are compute-bound:
#: no gain)
GEMM_SMALL_RESULT = 2048


def parallel_min():
    """The prange threshold in effect: :data:`PARALLEL_MIN`, or no loop at
    all inside :func:`serial_loops`."""
    return 1 << 62 if enabled("serial_loops") else PARALLEL_MIN


def numba_config_threads():
    """``numba.config.NUMBA_NUM_THREADS`` when numba's configuration module is
    fully loaded, else None.  Never ``sys.modules["numba"].config``: while
    another thread is half way through importing numba that module exists
    without its ``config`` attribute (reading it crashed a second plan's
    build while a first plan's compile imported numba)."""
    config = sys.modules.get("numba.core.config")
    count = getattr(config, "NUMBA_NUM_THREADS", None)
    return count if isinstance(count, int) and count > 0 else None


def environment_threads():
    """numba's thread count worked out as numba does, without numba:
    ``NUMBA_NUM_THREADS``, else the CPUs this process may run on."""
    env = os.environ.get("NUMBA_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return _process_cpus()


def _process_cpus():
    """The CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # (no sched_getaffinity: macOS, Windows)
        return max(1, os.cpu_count() or 1)


def loop_threads():
    """The threads a parallel loop runs on: numba's thread count (worked out
    as numba does when numba is not loaded yet: a plan's trace and memory
    plan import no numba, see tests/test_lazy_import.py)."""
    count = numba_config_threads()
    return environment_threads() if count is None else count


@functools.lru_cache(maxsize=None)
def design_threads():
    """The thread count a plan's structure is made for -- which gemms run in
    panels on the loops' threads, in parts of their contracted axis, a
    matrix-vector product as a loop or BLAS: the CPUs this process may run on
    when a plan first asks (fixed for the process), never numba's or
    hybridad's thread settings (``NUMBA_NUM_THREADS``,
    ``numba.set_num_threads``, ``HYBRIDAD_NUM_THREADS``).  Those decide only
    which threads run the same work, so a plan's results are the same bits
    on any of them (a process started with ``NUMBA_NUM_THREADS=1`` made a
    matmul's gradient as one gemm on BLAS's own threads, another process as
    panels: three different gradients)."""
    return _process_cpus()


def serial_loops(serial=True):
    """Generate every loop as a plain ``range`` (no worker threads) while
    active, in this thread (a plan built with ``parallel=False``)."""
    return switch("serial_loops", serial)


def loops_serial():
    """Whether :func:`serial_loops` is on in this thread."""
    return enabled("serial_loops")


#: a matrix product of fewer multiply-adds never runs on BLAS's own threads:
#: OpenBLAS threads a gemv from 2304 x GEMM_MULTITHREAD_THRESHOLD matrix
#: elements and a gemm above 65536 x that multiply-adds (8192 x that for
#: complex), the build option 4 in the builds numpy's and scipy's wheels and
#: conda-forge ship.  (Below it a plan calls no lock and no thread switch: a
#: 200 x 20 logistic regression's gradient takes 3.6 us, 6.9 us with them.)
BLAS_THREADS_MIN = 9216
#: and a LAPACK routine whose operands and result hold fewer elements (a 45 x
#: 45 factorization): scipy's OpenBLAS 0.3.31 gave other bits on one thread
#: and two from order 128 (potrf, potrs) and 144 (getrf, getri, getrs with 40
#: right-hand sides), none below
LAPACK_THREADS_MIN = 4096
#: the smaller LAPACK calls a program makes in one call (a loop's body's times
#: its trip count) from which it runs BLAS at one thread all the same: OpenBLAS
#: 0.3.31 hands even a 2 x 2 ``getrs`` to its threads (``dgetrs_T_parallel``
#: -> ``exec_blas_async_wait``, py-spy), each call waking them -- a Kalman
#: filter's gradient, 100 such solves, took 2-7 ms a call (0.5 s at worst on a
#: loaded machine), 0.13 ms at one thread; the section costs a call 2-12 us,
#: which one small solve does not repay (a 3 x 3 solve's gradient: 6 us)
LAPACK_CALLS_MIN = 8


def blas_may_thread(nodes, own_loops=None):
    """Whether a program of ``nodes`` (its loops' bodies included) makes a BLAS
    or LAPACK call large enough for BLAS to split over its own threads, or
    :data:`LAPACK_CALLS_MIN` smaller LAPACK calls or more.  Such
    a program runs with BLAS at one thread whatever the plan's loops do
    (:class:`hybridad.backends.numba.threads.SingleThreadedBlas`): BLAS's
    threads split a gemv's or a factorization's sums by their count, so the
    results would depend on ``OMP_NUM_THREADS`` (logistic regression's
    gradient at 50,000 x 20 differed by 1.2e-14 between 1 and 2 threads, an
    MVN log-likelihood's by 1.7e-10).  ``own_loops(node)``: whether a product
    makes no BLAS call (the numba program's matrix-vector loops,
    :func:`.emit.runs_own_loops`; a quadratic form's at D = 100 took the
    section's 2 us of its 6.6 us for nothing); None: every product calls BLAS."""
    return _blas_calls(nodes, own_loops) >= LAPACK_CALLS_MIN


def _blas_calls(nodes, own_loops=None):
    """:data:`LAPACK_CALLS_MIN` where a call of ``nodes`` may thread by its
    size (:func:`blas_may_thread`), else how many smaller LAPACK calls it makes."""
    small = 0
    for n in nodes:
        if n.op == "matmul" and n.args:
            if n.size * n.args[0].shape[-1] >= BLAS_THREADS_MIN and \
                    not (own_loops is not None and own_loops(n)):
                return LAPACK_CALLS_MIN
        elif n.op in LAPACK_OPS:
            if n.size + sum(a.size for a in n.args) >= LAPACK_THREADS_MIN:
                return LAPACK_CALLS_MIN
            small += 1
        elif n.op == "loop":
            small += _blas_calls(n.attrs["body"].graph.nodes) * n.attrs["length"]
        if small >= LAPACK_CALLS_MIN:
            return LAPACK_CALLS_MIN
    return small


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
