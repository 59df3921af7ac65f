"""Peak memory of one gradient, measured in a fresh child process.

Method (from ``benchmarks/bench_memory.py``): :func:`run_child` starts a new
Python process for one (workload, size, implementation).  The child imports
numpy and the implementation's library, creates the inputs (in the library's
own arrays) -- :func:`hybridad.bench.impls.prepare` --, runs
``gc.collect()``, resets the peak RSS (writes ``5`` to
``/proc/self/clear_refs``: VmHWM := VmRSS) and reads ``/proc/self/status``:
the baseline.  After the measured part, VmHWM minus the baseline is its peak
RSS increase.  Without a writable ``clear_refs`` (not Linux, or restricted)
the rise of the high-water mark (VmHWM, or ``ru_maxrss``) is used instead: a
lower bound, flagged ``peak_reset: false``.

Measured parts, in order, each with its own baseline:

* ``numba_startup`` (option ``ready``): compiling and calling a trivial
  ``numba.njit`` function of the child's own (numba's runtime started);
* ``startup`` (option ``warm``): the same library's gradient of a different
  tiny function (:func:`~hybridad.bench.workloads.warm_function`, 8
  elements): the one-time process costs (numba's machinery, the XLA client,
  torch's engine);
* ``increase``: building the implementation and its first gradient call,
  result buffers included;
* ``call_increase``: a second call, the first result still held (the
  per-call memory of a loop).

The child then checks its value and gradient against the hand-written numpy
ones and prints its numbers as one JSON line.  Children of implementations
that do not need hybridad (the hand-written ones, the peers) import the
:mod:`hybridad.bench` modules without running ``hybridad/__init__`` (which
loads numba): their baseline holds numpy and their own library only.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

CHILD_TAG = "HYBRIDAD_BENCH_CHILD "
CHILD_TIMEOUT_S = 600

# Run by ``python -c``: argv[1] is the JSON spec.  A child that does not need
# hybridad registers the package without executing its __init__ (numba).
_BOOTSTRAP = """\
import json, sys
spec = json.loads(sys.argv[1])
sys.path.insert(0, spec["root"])
if not spec["needs_hybridad"]:
    import importlib.util
    _pkg = importlib.util.module_from_spec(importlib.util.find_spec("hybridad"))
    sys.modules["hybridad"] = _pkg  # hybridad.bench.* importable, hybridad/__init__ not run
from hybridad.bench.rss import child_main
sys.exit(child_main(spec))
"""


def _status():
    """(VmHWM, VmRSS) in bytes from /proc/self/status; (ru_maxrss, None) without /proc."""
    try:
        with open("/proc/self/status") as fh:
            fields = dict(line.split(":", 1) for line in fh if line.startswith(("VmHWM", "VmRSS")))
        return (int(fields["VmHWM"].split()[0]) * 1024, int(fields["VmRSS"].split()[0]) * 1024)
    except (OSError, KeyError):
        import resource

        scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale, None


def _reset_peak():
    """Set the high-water mark to the current RSS (Linux >= 4.0); False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def measure(run):
    """Peak RSS increase of ``run()`` over the RSS before it, and what stays.

    Returns
    -------
    dict
        ``increase`` (bytes), ``retained`` (RSS after minus before, or None),
        ``base_rss``, ``peak_reset`` (False: the increase is a lower bound),
        ``value`` (what ``run()`` returned; not JSON).
    """
    gc.collect()
    reset = _reset_peak()
    hwm0, rss0 = _status()
    value = run()
    hwm1, rss1 = _status()
    base = rss0 if reset and rss0 is not None else hwm0
    retained = None if rss0 is None else rss1 - rss0
    return {"increase": hwm1 - base, "retained": retained, "base_rss": rss0,
            "peak_reset": reset, "value": value}


def _start_numba():
    """Compile and call a trivial njit function: numba's runtime is up afterwards."""
    import numba

    @numba.njit
    def one_more(x):
        return x + 1.0

    one_more(1.0)


def needs_hybridad(impl):
    """Whether implementation ``impl``'s child must import hybridad itself."""
    from .impls import HYBRIDAD_IMPLS

    return impl in HYBRIDAD_IMPLS


def child_main(spec):
    """Measure one implementation in this (fresh) process; print one tagged JSON line.

    Parameters
    ----------
    spec : dict
        ``workload``, ``size``, ``seed``, ``impl`` (a name of
        :data:`hybridad.bench.impls.PREPARE`), ``options`` (keyword arguments
        of its ``prepare``), ``warm`` and ``ready`` (bool), see the module
        docstring.

    Returns
    -------
    int
        0 (an exception exits the child with an error instead).
    """
    from .harness import check_against
    from .impls import prepare
    from .workloads import make_problem, warm_problem

    problem = make_problem(spec["workload"], spec["size"], spec["seed"])
    options = spec.get("options") or {}
    build = prepare(spec["impl"], problem, **options)
    if build is None:
        raise SystemExit(f"{spec['impl']} has no implementation of {spec['workload']}")
    warm_build = prepare(spec["impl"], warm_problem(), **options) if spec.get("warm") else None
    out = {"numba_startup": None, "startup": None}
    if spec.get("ready"):
        out["numba_startup"] = measure(_start_numba)["increase"]
    if warm_build is not None:
        out["startup"] = measure(lambda: warm_build().call())["increase"]
    first = measure(build)
    impl = first.pop("value")
    out.update(first)
    held = impl.first_return  # held while the next call runs, as in a loop
    again = measure(impl.call)
    out["call_increase"] = again["increase"]
    got = impl.result(again["value"])
    del held
    out["rel_err"] = check_against(impl.name, got, problem.reference(),
                                   problem.tolerance(impl.rtol))
    out["pid"] = os.getpid()
    out["numba_loaded"] = "numba" in sys.modules
    print(CHILD_TAG + json.dumps(out), flush=True)
    return 0


class ChildError(RuntimeError):
    """A child process failed (its last lines of output are in the message)."""


def run_child(workload, size, impl, *, seed=None, options=None, warm=True, ready=False,
              timeout=CHILD_TIMEOUT_S):
    """Measure ``impl`` on ``workload`` at ``size`` in a fresh process.

    Parameters
    ----------
    workload : str
        A key of :data:`hybridad.bench.workloads.WORKLOADS`.
    size : int
    impl : str
        A name of :data:`hybridad.bench.impls.PREPARE`.
    seed : int, optional
        The problem's data (default :data:`hybridad.bench.workloads.SEED`).
    options : dict, optional
        Keyword arguments of the implementation's ``prepare``.
    warm, ready : bool
        Measure the library's start-up on a tiny function first (``warm``),
        start numba's runtime first (``ready``); see the module docstring.
    timeout : float
        Seconds.

    Returns
    -------
    dict
        The child's numbers: ``increase``, ``call_increase``, ``startup``,
        ``numba_startup`` (bytes or None), ``retained``, ``base_rss``,
        ``peak_reset``, ``rel_err``.

    Raises
    ------
    ChildError
        When the child fails (e.g. a wrong gradient).
    """
    import hybridad.bench as bench_pkg

    from .workloads import SEED

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(bench_pkg.__file__))))
    spec = {"workload": workload, "size": int(size), "seed": SEED if seed is None else seed,
            "impl": impl, "options": options or {}, "warm": bool(warm), "ready": bool(ready),
            "root": root, "needs_hybridad": needs_hybridad(impl)}
    proc = subprocess.run([sys.executable, "-c", _BOOTSTRAP, json.dumps(spec)],
                          capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(CHILD_TAG)]
    if proc.returncode or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise ChildError(f"memory child {workload} {size} {impl!r} (warm={warm}, ready={ready}) "
                         f"exited with {proc.returncode}: " + " | ".join(tail))
    return json.loads(lines[-1][len(CHILD_TAG):])
