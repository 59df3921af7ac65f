"""Who owns the cores while a plan runs: BLAS single-threaded inside plans
(:class:`SingleThreadedBlas`), and how many threads a parallel plan's loops
take, measured call by call (:class:`ThreadChoice`).

A plan's BLAS and LAPACK calls run on one BLAS thread whenever they are
large enough for BLAS to use its own (:func:`.threshold.blas_may_thread`):
OpenBLAS's threads split a gemv's, a gemm's or a factorization's sums by
their count, so a plan's gradient would depend on ``OMP_NUM_THREADS`` (a
logistic regression's at 50,000 x 20 differed by 1.2e-14 between one and two
threads, a GP's 7e-16, an MVN log-likelihood's 1.7e-10).  The plan's own
threads take the parallel work instead, on partitions fixed by the shapes:
its ``prange`` loops, and large gemms as panels of the result, one
single-threaded gemm each (:func:`.rt.gemm_threads`, :mod:`.kparts`).  That
also keeps one thread pool on the cores at a time: a plan whose ``prange``
loops alternate with OpenBLAS's pool has each one's idle workers spinning on
the cores the other needs (on 2 cores the MLP gradient at a batch of 10^4
took 24 ms that way, 4.6 ms with BLAS limited to one thread, 3.0 ms with a
serial plan).  The BLAS library the plans call (scipy's; threadpoolctl finds
it) is set to one thread while such a plan runs and put back after the call.
The process's other BLAS libraries (numpy's own OpenBLAS) keep their threads:
the plan never calls them, and another thread of the program may be in one
meanwhile -- except while a numpy backend's program runs, which calls numpy's
(``SingleThreadedBlas(every=True)``).  A large LAPACK factorization therefore runs on one core (a GP
log-likelihood's gradient at n = 1000 on 2 cores: 38 ms against 27-38 ms on
OpenBLAS's two threads).

Idle BLAS workers: after each call OpenBLAS's worker threads busy-wait for
work for 2^28 cycles (about 0.1 s) before they sleep, taking the cores from
whatever runs next -- the plan's own loops, the serial code after a gemm,
another library's thread pool, the next row of a benchmark.  On 2 cores, with
numpy's and JAX's calls in the same process, the MLP gradient at a batch of
10^4 took 3.5-5.7 ms that way against 1.3-1.8 ms when they sleep at once.
:func:`short_blas_spin` (run by ``import hybridad``) sets
``OPENBLAS_THREAD_TIMEOUT`` to :data:`BLAS_SPIN_LOG2` (2^16 cycles, tens of
microseconds: enough for a plan's back-to-back BLAS calls) unless it is
set, for the OpenBLAS libraries loaded after it -- scipy's, which numba's BLAS
binding and hence every plan's gemm call, is loaded by the first compiled plan.
A library already loaded (numpy's, or scipy's imported before hybridad) keeps
the value it read; ``OPENBLAS_THREAD_TIMEOUT=28`` restores OpenBLAS's default.

The thread count of the plan's loops is the calling thread's numba count
(``numba.set_num_threads``, ``NUMBA_NUM_THREADS``) capped by
``HYBRIDAD_NUM_THREADS``, or one thread when measured calls say the machine
is too busy for more (:class:`ThreadChoice`).
"""
from __future__ import annotations

import os
import sys
import time

from ..._forksafe import Lock

__all__ = ["BLAS_SPIN_LOG2", "SingleThreadedBlas", "ThreadChoice", "every_blas_library",
           "max_threads", "refuse_forked_openmp", "short_blas_spin", "start_pool"]

#: log2 of the cycles an idle OpenBLAS worker spins before it sleeps, set by
#: :func:`short_blas_spin` (OpenBLAS's own default: 28; its least: 4).  On 2
#: cores the GP gradient at n = 200 (a dozen BLAS and LAPACK calls) took
#: 1.19 / 1.27 / 1.34 / 1.69 ms with 20 / 16 / 12 / 4, and a gradient beside
#: numpy and JAX calls 3.6 / 2.1 / 1.8 ms with 28 / 16 / 4
BLAS_SPIN_LOG2 = 16


def short_blas_spin():
    """Set ``OPENBLAS_THREAD_TIMEOUT`` to :data:`BLAS_SPIN_LOG2` unless it is
    set (OpenBLAS reads it when it is loaded: the libraries loaded afterwards
    take it).  Returns the value in effect for them."""
    return os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", str(BLAS_SPIN_LOG2))

_libs = None
_every = None  # (every_blas_library's)
_libs_lock = Lock()


#: set in a process forked from one whose numba ran its threads on GNU OpenMP:
#: numba stops such a child at its first parallel loop (``Terminating: fork()
#: called from a process already using GNU OpenMP``)
_FORKED_FROM_OPENMP = [False]


def _after_fork_in_child():
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    if parallel is None or not getattr(parallel, "_is_initialized", False):
        return  # (no thread pool started: the child starts its own)
    import numba

    try:
        layer = numba.threading_layer()
    except ValueError:
        return
    omp = sys.modules.get("numba.np.ufunc.omppool")
    if layer == "omp" and getattr(omp, "openmp_vendor", "") == "GNU":
        _FORKED_FROM_OPENMP[0] = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def refuse_forked_openmp(name):
    """Raise, naming the way out, where a parallel program would run in a
    process forked from one that ran numba's threads on GNU OpenMP (numba
    would stop the process at the program's first parallel loop)."""
    if _FORKED_FROM_OPENMP[0]:
        raise RuntimeError(
            f"{name}: this process was forked from one that ran parallel loops on numba's GNU "
            "OpenMP threading layer, which cannot run them again in a forked child. Install "
            "the tbb package (numba's fork-safe layer; a dependency of hybridad where it has "
            "wheels), start children with multiprocessing's 'spawn' or 'forkserver' method, "
            "or build the parent's plans with parallel=False.")


def start_pool():
    """Start numba's thread pool (once; ``get_num_threads`` starts it).

    Before a parallel program's machine code is loaded: starting the pool
    gives the JIT linker the threading layer's entry points, which the
    code's parallel loops call.  numba starts it itself when the code was
    compiled from a ``prange`` (a hook saved in its cache entry); a plan
    whose only parallel code is a callee's (:mod:`.rt`'s threaded
    matrix-vector loops) loses that hook when the callee came from numba's
    disk cache as the plan compiled, and the plan loaded from the cache in
    a later process then called a null entry point (a segmentation fault)."""
    import numba

    numba.get_num_threads()


def _plans_blas(libs):
    """Of the process's BLAS ``libs`` (threadpoolctl controllers), those the
    plans call: their gemms and LAPACK routines go through
    scipy.linalg.cython_blas / cython_lapack, so the library scipy's wheel
    ships (under ``scipy.libs`` / ``scipy/.dylibs``) where there is one; any
    other -- numpy's own OpenBLAS, torch's MKL -- serves the user's other
    code, which may run in another thread meanwhile, and is left alone.
    Where scipy ships none (conda, a system BLAS shared by numpy and scipy),
    every library: the plans' is among them."""
    import os

    try:
        import scipy
    except ImportError:
        return list(libs)
    here = os.path.realpath(os.path.dirname(scipy.__file__))
    roots = [here + ".libs", os.path.join(here, ".libs"), os.path.join(here, ".dylibs")]
    own = [lib for lib in libs
           if any(os.path.realpath(lib.filepath).startswith(r + os.sep) for r in roots)]
    return own or list(libs)


class _OpenBLASCalls:
    """An OpenBLAS's thread count read and set through its own exported
    functions.  threadpoolctl (3.8) lets one thread only -- the first that set
    an OpenBLAS's count outside OpenMP -- set it: from any other thread its
    ``set_num_threads`` silently does nothing, so a plan called from a thread
    of the user's ran its gemms on OpenBLAS's threads, whose sums are in
    another order (an MLP's weight gradient differed in its last bits from
    the main thread's call).  The count is process-wide there; who may change
    it, and when it goes back, is :data:`_BLAS_USERS`' count of callers."""

    def __init__(self, lib, get, put):
        self._lib, self.get_num_threads, self._put = lib, get, put
        self.filepath = lib.filepath

    def set_num_threads(self, n):
        self._put(int(n))

    def __getattr__(self, name):  # (the controller's description: filepath, version, ...)
        return getattr(self._lib, name)


def _own_calls(lib):
    """``lib`` (a threadpoolctl controller), or for an OpenBLAS off OpenMP
    the :class:`_OpenBLASCalls` of its own functions, where it exports them."""
    if getattr(lib, "internal_api", None) != "openblas" or \
            getattr(lib, "threading_layer", None) == "openmp":
        return lib
    import ctypes
    import itertools

    try:
        dll = ctypes.CDLL(lib.filepath)
    except OSError:
        return lib
    for prefix, suffix in itertools.product(("", "scipy_"), ("", "64_", "_64")):
        get = getattr(dll, f"{prefix}openblas_get_num_threads{suffix}", None)
        put = getattr(dll, f"{prefix}openblas_set_num_threads{suffix}", None)
        if get is not None and put is not None:
            get.restype, get.argtypes = ctypes.c_int, []
            put.restype, put.argtypes = None, [ctypes.c_int]
            return _OpenBLASCalls(lib, get, put)
    return lib


def _blas_libraries():
    """The controllers of the BLAS libraries the plans call (found once; see
    :func:`_plans_blas`)."""
    global _libs
    with _libs_lock:
        if _libs is None:
            try:
                from numba.np.linalg import ensure_blas
                from threadpoolctl import ThreadpoolController

                # scipy's BLAS (a plan calling it has loaded it; loaded here too,
                # so the list is never made without it)
                ensure_blas()
                _libs = [_own_calls(lib) for lib in _plans_blas(
                    [lib for lib in ThreadpoolController().lib_controllers
                     if lib.user_api == "blas"])]
            except Exception:  # noqa: BLE001 - no threadpoolctl or an unknown BLAS: no limit
                _libs = []
    return _libs


def every_blas_library():
    """The controllers of every BLAS library the process has loaded, scipy's
    included (loaded here: a numpy plan's LAPACK ops load it at their first
    call), found once: numpy's own OpenBLAS, which the numpy backend's
    products call, beside the plans' (:func:`_blas_libraries`)."""
    global _every
    with _libs_lock:
        if _every is None:
            try:
                import scipy.linalg  # noqa: F401 -- (its BLAS, in the list)
                from threadpoolctl import ThreadpoolController

                _every = [_own_calls(lib) for lib in ThreadpoolController().lib_controllers
                          if lib.user_api == "blas"]
            except Exception:  # noqa: BLE001 - no threadpoolctl or an unknown BLAS: no limit
                _every = []
    return _every


class SingleThreadedBlas:
    """Context manager: the BLAS library the plans call at one thread, then as
    before (another library of the process -- numpy's own -- is not touched);
    ``every=True``: every BLAS library of the process (a numpy program's:
    numpy's products call numpy's own).

    Nesting and concurrent use from several threads are counted, library by
    library: each one's thread count is restored when its last user leaves.
    """

    def __init__(self, every=False):
        self._libs = every_blas_library() if every else None

    def __enter__(self):
        _blas_enter(self._libs)
        return self

    def __exit__(self, *exc):
        _blas_exit(self._libs)
        return False


#: a BLAS library's file -> [users inside a single-threaded section, the thread
#: count to put back, the library]
_BLAS_USERS = {}
_BLAS_LOCK = Lock()


def _blas_enter(libs=None):
    """Enter the single-threaded BLAS section of ``libs`` (the plans' library
    when None: every plan call of a program that calls BLAS: a few ctypes
    calls, no ``with`` statements -- 1.5 us)."""
    if libs is None:
        libs = _libs if _libs is not None else _blas_libraries()
    _BLAS_LOCK.acquire()
    try:
        for lib in libs:
            users = _BLAS_USERS.get(lib.filepath)
            if users is None:
                n = lib.get_num_threads()
                if n != 1:
                    lib.set_num_threads(1)
                _BLAS_USERS[lib.filepath] = [1, n, lib]
            else:
                users[0] += 1
    finally:
        _BLAS_LOCK.release()


def _blas_exit(libs=None):
    if libs is None:
        libs = _libs
    _BLAS_LOCK.acquire()
    try:
        for lib in libs:
            users = _BLAS_USERS[lib.filepath]
            users[0] -= 1
            if users[0] == 0:
                del _BLAS_USERS[lib.filepath]
                if users[1] != 1:
                    users[2].set_num_threads(users[1])
    finally:
        _BLAS_LOCK.release()


def _run(fn, args, blas):
    if blas:  # on every thread count: BLAS's own threads would change its sums' order
        _blas_enter()
        try:
            return fn(*args)
        finally:
            _blas_exit()
    return fn(*args)


def _median(values):
    """The median of a few call times, in plain Python (a call allocates no
    numpy array)."""
    v = sorted(values)
    m = len(v) // 2
    return v[m] if len(v) % 2 else 0.5 * (v[m - 1] + v[m])


_COUNT_CALLS = []


def _thread_count():
    """``(get, set)`` of the calling thread's numba thread count, for a call of
    a parallel program (each ThreadChoice call reads it, and sets it twice when
    its choice differs): the thread pool's own entry points, which
    ``numba.get_num_threads`` / ``set_num_threads`` call after launching the
    pool under a multiprocessing lock and checking the count (0.1 us a call
    against 0.8 / 1.3 us; the counts set here are within the pool's, as they
    check); the public functions where this numba names them otherwise."""
    if not _COUNT_CALLS:
        import numba

        numba.get_num_threads()  # (launches the pool: its entry points are then set)
        pool = sys.modules.get("numba.np.ufunc.parallel")
        get = getattr(pool, "_get_num_threads", None)
        put = getattr(pool, "_set_num_threads", None)
        _COUNT_CALLS[:] = (get, put) if callable(get) and callable(put) and get() == \
            numba.get_num_threads() else (numba.get_num_threads, numba.set_num_threads)
    return _COUNT_CALLS


def max_threads():
    """The thread count a parallel plan may use in the calling thread: numba's
    (``numba.set_num_threads`` / ``NUMBA_NUM_THREADS``), capped by
    ``HYBRIDAD_NUM_THREADS`` when that is set."""
    import numba

    return _capped(numba.get_num_threads())


def _capped(n):
    """``n`` threads capped by ``HYBRIDAD_NUM_THREADS`` when that is set."""
    cap = _env_cap()
    return min(n, cap) if cap else n


def _env_cap():
    raw = os.environ.get("HYBRIDAD_NUM_THREADS", "").strip()
    if not raw:
        return 0
    try:
        cap = int(raw)
    except ValueError:
        raise ValueError(f"HYBRIDAD_NUM_THREADS must be a positive integer; got {raw!r}") from None
    if cap < 1:
        raise ValueError(f"HYBRIDAD_NUM_THREADS must be a positive integer; got {raw!r}")
    return cap


class ThreadChoice:
    """How many threads one parallel program's ``prange`` loops run on, chosen
    from the measured times of its own calls on this machine, now.

    Threads pay only when cores are free: on a busy machine (another process
    running its own parallel plan, a busy loop, BLAS threads) a thread of a
    parallel loop waits for a core while the others spin at the loop's end,
    and a call can take 30x the serial time (measured: 16 ms against 0.5 ms
    on 2 cores).  So a parallel program times its calls: a *probe* runs it
    alternately with all threads and with one (numba's ``set_num_threads``,
    per calling thread) and keeps whichever has the lower median, preferring
    one thread unless all threads are at least :attr:`GAIN` times faster
    (they cost the machine more).  The choice holds for a period that doubles
    while probes agree (:attr:`FIRST_PERIOD` up to :attr:`LAST_PERIOD`
    seconds) and a call taking :attr:`SLOWER` times the chosen setting's
    median :attr:`STRIKES` times in a row -- the load changed -- starts a new
    probe at once.  Two samples of a setting already :attr:`SLOWER` times
    worse than the other end the probe early (the first call after a switch
    runs cold), so one probe costs about two calls of the worse setting, and
    the next probe waits long enough to keep that under :attr:`PROBE_SHARE`
    of the time.

    Every setting runs the same compiled program, BLAS single-threaded beside
    it on any thread count, and the program's sums do not depend on the
    thread count (each thread's share is fixed by the shape; the parts are
    added in order after the loop): the choice changes how fast a call is,
    never a bit of its results (``tests/test_thread_choice.py``).  Nothing is
    compiled or run in the background.

    The choice is per program (a plan's gradient, value and Hessian programs
    choose apart); :meth:`describe` says what was chosen and on which times
    (``explain()`` prints it).  Calls are serialized by the program's lock.
    """

    GAIN = 1.15
    SLOWER = 3.0
    SAMPLES = 3
    FIRST_PERIOD = 0.25
    LAST_PERIOD = 8.0
    #: slow calls in a row that start a probe
    STRIKES = 3
    #: most of the time probes may cost (a probe waits at least its cost / this)
    PROBE_SHARE = 0.02
    #: fewest calls between probes (so that a fast plan does not probe on every
    #: call of a short period)
    MIN_CALLS = 16

    @staticmethod
    def enabled():
        """Whether parallel programs choose their thread count (on unless
        ``HYBRIDAD_THREAD_CHOICE=0``: then every call takes all threads)."""
        return os.environ.get("HYBRIDAD_THREAD_CHOICE", "1").strip() != "0"

    def __init__(self):
        self.threads = 0  # the chosen count; 0: not chosen yet (probe)
        self.reference = 0.0  # the chosen setting's median call time (s)
        self.times = {}  # threads -> the last probe's samples (s)
        self.probes = 0
        self.calls = 0
        self._period = self._wait = self.FIRST_PERIOD
        self._strikes = 0  # chosen-setting calls in a row over SLOWER x its median
        self._until = 0.0  # perf_counter time of the next probe
        self._left = 0  # calls before the next probe may start
        self._probing = None  # the thread counts still to sample, in order

    def __call__(self, fn, args, blas=False):
        """Run ``fn(*args)`` with this program's thread count; ``blas``: the
        program calls BLAS, which then runs single-threaded (one owner of the
        cores, and the same sums on any thread count)."""
        self.calls += 1
        before = _thread_count()[0]()
        most = _capped(before)
        if most <= 1:  # capped at one thread: nothing to choose
            return self._timed(fn, args, 1, blas, self._watch, before)
        if self._probing is None:
            self._left -= 1
            if self.threads and (self._left > 0 or time.perf_counter() < self._until):
                return self._timed(fn, args, min(self.threads, most), blas, self._watch, before)
            self._start_probe(most)
        n = self._probing[0]
        return self._timed(fn, args, n, blas, lambda dt: self._sampled(n, dt, most), before)

    def _timed(self, fn, args, n, blas, done, before):
        """``fn(*args)`` on ``n`` threads (the calling thread's count,
        ``before``, put back after), then ``done(seconds)``."""
        if n != before:
            _thread_count()[1](n)
        t = time.perf_counter()
        try:
            return _run(fn, args, blas)
        finally:
            dt = time.perf_counter() - t
            if n != before:
                _thread_count()[1](before)
            done(dt)

    def _watch(self, dt):
        """A call on the chosen setting: slow calls in a row mean the load changed."""
        if self.reference and dt > self.SLOWER * self.reference:
            self._strikes += 1
            if self._strikes >= self.STRIKES:
                self._left, self._until = 0, 0.0
        else:
            self._strikes = 0

    def _start_probe(self, most):
        self.probes += 1
        self.times = {most: [], 1: []}
        order = [most, 1] if self.threads != 1 else [1, most]
        self._probing = order * self.SAMPLES

    def _sampled(self, n, dt, most):
        self.times.setdefault(n, []).append(dt)
        self._probing.pop(0)
        other = [k for k in self.times if k != n]
        if other and self.times[other[0]]:  # one setting already far worse: stop sampling it
            best = min(min(v) for v in self.times.values() if v)  # (two samples: a first
            worse = [k for k, v in self.times.items()           # call after a switch is cold)
                     if len(v) >= 2 and min(v) > self.SLOWER * best]
            if worse:
                self._probing = [k for k in self._probing if k not in worse]
        if not self._probing:
            self._decide(most)

    def _decide(self, most):
        med = {k: _median(v) for k, v in self.times.items() if v}
        many = med.get(most)
        choice = most if many is not None and many * self.GAIN < med.get(1, float("inf")) else 1
        self._period = min(self._period * 2, self.LAST_PERIOD) if choice == self.threads \
            else self.FIRST_PERIOD
        # a probe costs about two calls of the other setting: keep that a small share
        penalty = max((min(v) for k, v in self.times.items() if v and k != choice),
                      default=0.0) - med[choice]
        self._wait = max(self._period, penalty / self.PROBE_SHARE)
        self.threads, self.reference, self._strikes = choice, med[choice], 0
        self._probing = None
        self._left = self.MIN_CALLS
        self._until = time.perf_counter() + self._wait

    def describe(self):
        """One line: the thread count in use and the times it was chosen on."""
        if not self.threads:
            return "threads: not chosen yet (the first calls measure all threads against one)"
        times = ", ".join(f"{k} thread{'s' * (k > 1)} {1e3 * _median(v):.3g} ms"
                          for k, v in sorted(self.times.items(), reverse=True) if v)
        return (f"threads: {self.threads} (median call {times}; "
                f"probe {self.probes}, "
                f"next in {self._wait:.3g} s or after {self.STRIKES} calls "
                f"{self.SLOWER:g}x slower)")
