"""Forked children and threads around the plan cache: a fork never leaves the
child a lock held by a thread it does not have, a child runs the parallel
plans its parent ran, and a plan being built holds up only the threads that
want that plan.

The fork cases run in fresh interpreters (a hung child is killed after a
timeout and reported, not waited for), each with the default settings.
"""

import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import hybridad as ha

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")

CHILD = r"""
import multiprocessing as mp
import os, sys, threading, time
import numpy as np
import hybridad as ha


def in_child(work, how):
    '''work() in a child made by os.fork or multiprocessing's fork: its
    result (True/False), or "hung" after 120 s, or its exit status.'''
    if how == "os.fork":
        pid = os.fork()
        if pid == 0:
            try:
                ok = bool(work())
            except BaseException as e:
                print("child:", repr(e), flush=True)
                ok = False
            os._exit(0 if ok else 1)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status) == 0 or \
                    f"exit status {os.waitstatus_to_exitcode(status)}"
            time.sleep(0.05)
        os.kill(pid, 9)
        return "hung"
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=lambda: q.put(bool(work())))
    p.start()
    p.join(120)
    if p.is_alive():
        p.kill()
        return "hung"
    return q.get(timeout=5) if p.exitcode == 0 else f"exit status {p.exitcode}"


def child_beside(thread, release, work, how):
    # work() in a child forked while thread holds what it holds, then release set
    got = in_child(work, how)
    release.set()
    thread.join(60)
    assert got is True, got
    print("ok")
"""


def run(script, tmp_path, *argv):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    p = subprocess.run([sys.executable, "-c", CHILD + textwrap.dedent(script), *argv],
                       env=env, capture_output=True, text=True, timeout=500)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), \
        (p.stdout[-3000:], p.stderr[-3000:])


@pytest.mark.parametrize("how", ["os.fork", "fork"])
def test_a_child_forked_while_another_thread_traces(how, tmp_path):
    """Another thread was tracing (a build of the plan cache) when the
    process forked: the child's own first gradients are built and right
    (the child had the cache's lock held by a thread it does not have, and
    waited for it for good)."""
    run(r"""
        tracing, release = threading.Event(), threading.Event()

        def slow(x):  # its trace waits until the parent has forked
            tracing.set()
            release.wait(60)
            return np.sum(np.sin(x))

        def work():
            x = np.linspace(-1.0, 1.0, 10)
            g = ha.gradient(lambda x: np.sum(np.exp(x) ** 2), x)
            h = ha.hessian(lambda x: np.sum(x ** 3), x)
            return np.allclose(g.gradient, 2 * np.exp(2 * x), rtol=1e-13) and \
                np.allclose(h.hessian, np.diag(6 * x), rtol=1e-13)

        x = np.linspace(-1.0, 1.0, 10)
        th = threading.Thread(target=lambda: ha.gradient(slow, x), daemon=True)
        th.start()
        assert tracing.wait(60)
        child_beside(th, release, work, sys.argv[1])
        """, tmp_path, how)


@pytest.mark.parametrize("how", ["os.fork", "fork"])
def test_a_child_forked_while_other_threads_hold_every_lock_of_hybridad(how, tmp_path):
    """Threads of the parent held a plan's lock, its compiled program's, its
    thread choice's and the plan cache's -- a call or a lookup in flight --
    at the fork: the child calls that plan and builds new ones."""
    run(r"""
        from hybridad import _forksafe
        from hybridad.plans import cache

        def f(x):
            return np.sum(np.tanh(x) ** 2 * np.exp(-x))

        x = np.linspace(-1.0, 1.0, 1000)
        plan = ha.compile(f, x)
        want = plan.gradient(x)
        locks = list(_forksafe._LOCKS)
        assert plan._lock in locks and cache._lock in locks
        held, done = threading.Event(), threading.Event()

        def holder():  # every lock hybridad made so far, as calls in flight hold them
            for lock in locks:
                lock.acquire()
            held.set()
            done.wait(60)
            for lock in reversed(locks):
                lock.release()

        th = threading.Thread(target=holder, daemon=True)
        th.start()
        assert held.wait(60)

        def work():
            res = plan.gradient(x)
            new = ha.gradient(lambda x: np.sum(np.cos(x)), x)
            return res.gradient.tobytes() == want.gradient.tobytes() and \
                np.allclose(new.gradient, -np.sin(x), rtol=1e-13)

        child_beside(th, done, work, sys.argv[1])
        """, tmp_path, how)


@pytest.mark.parametrize("how", ["os.fork", "fork"])
def test_a_child_runs_the_parallel_plans_its_parent_ran(how, tmp_path):
    """A parent ran plans on numba's threads (prange loops at 2^18 elements),
    then forked -- ``multiprocessing.Pool`` over a fitted model, the fork
    start method: the child's calls give the parent's bits, and its new
    parallel plans run (under GNU OpenMP numba stopped such a child at its
    first parallel loop: ``Terminating: fork() called from a process
    already using GNU OpenMP``; hybridad depends on TBB, numba's fork-safe
    and thread-safe threading layer, where it is built)."""
    run(r"""
        import numba

        def f(x):
            return np.sum(np.tanh(x) ** 2 * np.exp(-x)) + np.max(x) * np.mean(x ** 2)

        def g(x):
            return np.sum(np.log1p(x * x) * np.cos(x))

        x = np.linspace(-1.0, 1.0, 1 << 18)
        plan = ha.compile(f, x)
        assert "prange" in plan.explain()  # (its loops run on numba's threads)
        want = [plan.gradient(x) for _ in range(3)][-1]
        layer = numba.threading_layer()

        def work():
            res = [plan.gradient(x) for _ in range(3)]
            new = ha.gradient(g, x)
            fd = 2 * x / (1 + x * x) * np.cos(x) - np.log1p(x * x) * np.sin(x)
            return all(r.gradient.tobytes() == want.gradient.tobytes() and
                       r.value.tobytes() == want.value.tobytes() for r in res) and \
                np.allclose(new.gradient, fd, rtol=1e-12, atol=1e-15)

        got = in_child(work, sys.argv[1])
        assert got is True, (layer, got)
        print("ok")
        """, tmp_path, how)


def test_a_child_forked_after_gnu_openmp_ran_gets_a_clear_error(tmp_path):
    """Where numba runs its threads on GNU OpenMP (no TBB: ARM machines, or
    ``NUMBA_THREADING_LAYER=omp``), a child forked after parallel loops ran
    cannot run them: its parallel plans raise a RuntimeError naming the ways
    out (numba stopped the process: SIGTERM), and its serial plans run."""
    script = r"""
import os, sys
import numba
import numpy as np
import hybridad as ha
x = np.linspace(-1.0, 1.0, 1 << 18)
plan = ha.compile(lambda x: np.sum(np.tanh(x) ** 2), x)
plan.gradient(x)
from numba.np.ufunc import omppool
if numba.threading_layer() != "omp" or omppool.openmp_vendor != "GNU":
    print("no GNU OpenMP layer here"); sys.exit(0)
pid = os.fork()
if pid == 0:
    try:
        plan.gradient(x)
        code = 2
    except RuntimeError as e:
        code = 0 if "spawn" in str(e) and "tbb" in str(e) else 3
    small = ha.gradient(lambda x: np.sum(x ** 3), x[:100])
    os._exit(code if np.allclose(small.gradient, 3 * x[:100] ** 2) else 4)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), NUMBA_THREADING_LAYER="omp")
    p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=300)
    if "No threading layer could be loaded" in p.stderr or "no GNU OpenMP" in p.stdout:
        pytest.skip("numba has no GNU OpenMP threading layer here")
    assert p.returncode == 0 and p.stdout.strip().endswith("child 0"), (p.stdout, p.stderr[-2000:])


def test_a_build_holds_up_only_the_threads_that_want_its_plan():
    """While one thread traces a plan (here: until told), other threads look
    up cached plans and build other functions' -- the cache's lock was held
    across every build, so any gradient of a new function, or a cached one
    through the cache, waited for the slowest trace in the process.  Threads
    wanting the plan being built wait for it and get it: one trace."""
    release, tracing = threading.Event(), threading.Event()
    traces = []

    def slow(x):
        traces.append(1)
        tracing.set()
        assert release.wait(60)
        return np.sum(np.sin(x))

    x = np.linspace(-1.0, 1.0, 7)
    got = []
    threads = [threading.Thread(target=lambda: got.append(ha.gradient(slow, x)))
               for _ in range(3)]
    threads[0].start()
    assert tracing.wait(60)
    for t in threads[1:]:
        t.start()
    other = ha.gradient(lambda x: np.sum(x ** 3), x, backend="numpy")  # meanwhile
    np.testing.assert_allclose(other.gradient, 3 * x ** 2, rtol=1e-14)
    assert not release.is_set() and len(got) == 0
    release.set()
    for t in threads:
        t.join(120)
    assert len(got) == 3 and len(traces) == 1 + (len(traces) > 1)  # (f's second trace: same thread)
    for r in got:
        np.testing.assert_allclose(r.gradient, np.cos(x), rtol=1e-14)


def _loop(x, d):  # a loop's runner: the plan switches to Python for it
    return np.sum(ha.fori_loop(0, 20, lambda i, v: v + 0.1 * np.tanh(v * d[:40]), x) ** 2)


def _host(x, d):  # a host call (numpy's own polyfit on data): Python again
    c = np.polyfit(d, d * d, 2)
    return np.sum(np.sin(x) * x) * np.sum(c)


@pytest.mark.parametrize("f", [_loop, _host], ids=["loop", "host-call"])
def test_threads_calling_one_small_plan_that_runs_python_get_their_own_results(f):
    """Four threads call one plan, each with its own arguments and result.  A
    small plan runs without the plan's lock, atomic because it holds the GIL
    throughout -- but not where it switches to Python (a loop's runner, a
    host call): another thread's call then ran in between, into the same
    workspace (138 wrong results of 6000).  Each result is the one a lone
    call gives, to the bit."""
    rng = np.random.default_rng(0)
    args = [(rng.standard_normal(40), rng.standard_normal(50) * (t + 1)) for t in range(4)]
    plan = ha.compile(f, *args[0])
    want = [plan.gradient(*a) for a in args]
    wrong = []

    def work(t):
        res = ha.GradientResult(args[t][0])
        for _ in range(1500):
            plan.gradient(*args[t], out=res)
            if res.value != want[t].value or \
                    res.gradient.tobytes() != want[t].gradient.tobytes():
                wrong.append(t)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # (threads switch often: a race shows at once)
    try:
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    finally:
        sys.setswitchinterval(interval)
    assert not wrong, f"{len(wrong)} wrong results of 6000"


def test_hybridad_makes_its_locks_where_a_fork_gets_them_back():
    """Every lock of hybridad around Python-level state comes from
    :mod:`hybridad._forksafe` (a child gets it back free); the ones left
    are around native state a fork waits for instead."""
    native = {"backends/numba/__init__.py", "backends/jit/engine.py",
              "backends/jit/__init__.py", "backends/cuda/cublas_capture.py"}
    root = Path(ha.__file__).parent
    found = {str(p.relative_to(root)) for p in root.rglob("*.py")
             if re.search(r"threading\.R?Lock\(\)", p.read_text()) and p.name != "_forksafe.py"}
    assert found == native, found ^ native


def test_a_fork_waits_for_the_compiled_calls_in_flight():
    """A compiled program's call that runs without the GIL (a heavy plan's) is
    in flight in another thread: os.fork starts once it has ended.  A BLAS
    library's fork handler stops its threads (OpenBLAS's), and a plan's gemm
    on them meanwhile waited for them for good -- and the fork for it."""
    from hybridad import _forksafe

    started, release, order = threading.Event(), threading.Event(), []

    def in_flight():
        _forksafe.call_starts()
        started.set()
        release.wait(60)
        order.append("the call ends")
        _forksafe.call_ends()

    t = threading.Thread(target=in_flight)
    t.start()
    assert started.wait(60)
    threading.Timer(0.3, release.set).start()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    order.append("forked")
    os.waitpid(pid, 0)
    t.join(60)
    assert order == ["the call ends", "forked"]


def test_a_numpy_plans_calls_are_in_flight_for_a_fork(monkeypatch):
    """A numpy backend's program (``backend="numpy"``, and the reference
    program a plan falls back to) runs numpy's products without the GIL: each
    of its calls by the plan -- gradient, value, a loop body's -- tells a fork
    to wait (the plan called the program's function directly, which did
    not)."""
    from hybridad.backends.numpy import program

    seen = []
    monkeypatch.setattr(program, "call_starts", lambda: seen.append("starts"))
    monkeypatch.setattr(program, "call_ends", lambda: seen.append("ends"))
    W = np.linspace(-1, 1, 64).reshape(8, 8)

    def f(x):
        return np.sum(np.tanh(W @ x) ** 2)

    plan = ha.compile(f, np.ones(8), backend="numpy")
    del seen[:]
    plan.gradient(np.ones(8))
    assert seen == ["starts", "ends"]
    plan.value(np.ones(8))
    assert seen == ["starts", "ends"] * 2


def test_a_pool_forked_while_a_thread_keeps_calling_a_gradient(tmp_path):
    """A thread of the parent keeps calling a gradient whose products run on
    BLAS's threads while the main thread makes a multiprocessing pool: the
    fork, the children and the thread go on (the parent hung in OpenBLAS's
    fork handler, the thread inside the plan's call)."""
    run(r"""
        rng = np.random.default_rng(5)
        X = rng.standard_normal((50000, 20))
        y = np.sign(rng.standard_normal(50000))
        w = 0.3 * rng.standard_normal(20)

        def loss(w, X, y):
            return np.mean(np.log1p(np.exp(-y * (X @ w)))) + 1e-3 * np.sum(w * w)

        def child(_):
            return ha.gradient(loss, w, X, y).gradient.tobytes()

        want = ha.gradient(loss, w, X, y).gradient.tobytes()
        stop, count = threading.Event(), [0]

        def busy():
            while not stop.is_set():
                ha.gradient(loss, w, X, y)
                count[0] += 1

        th = threading.Thread(target=busy, daemon=True)
        th.start()
        time.sleep(0.05)
        for _ in range(3):
            with mp.get_context("fork").Pool(2) as pool:
                got = pool.map_async(child, [0, 1], chunksize=1).get(120)
            assert got == [want, want]
        before = count[0]
        time.sleep(0.5)
        assert count[0] > before
        stop.set()
        th.join(60)
        assert not th.is_alive()
        print("ok")
        """, tmp_path)
