"""Never a hang: a numba build held at each of its lock points while user code
runs every numba entry point in other threads, forks of every kind taken
while a build runs, and exit with a compile in flight.

Each case runs in a fresh interpreter with an empty disk cache (numba not yet
loaded, its target context not yet made: the states where the lock orders
differ) and is deterministic: the build waits at its hold point until every
user thread has started and had a second to reach its first lock, so a lock
order that can deadlock does, every time.  A hung case prints ``deadlock``
and leaves with ``os._exit`` (hung threads would keep the interpreter alive).

Hold points of a build (``HOLD`` below):

* ``import``: the build holds hybridad's build lock and is importing numba
  (the module's import lock held);
* ``context``: the build is making numba's CPU target context (the context's
  locks and numba's compiler lock held);
* ``compile``: the build holds numba's compiler lock (numba loaded before,
  as by user code; the build makes its target context, then takes the lock:
  where it compiles with numba, or first thing on a Python whose ``ast.parse``
  is not thread-safe).  Held before it holds any lock of numba's, the build
  would leave user threads that make numba's context at once, ``@njit`` in
  one and ``@cfunc`` in another, to numba's own race between them.

Each is taken with numba compiling (``HYBRIDAD_JIT=0``, what a program
hybridad's own compiler refuses gets) and, ``import`` and ``context``, with
hybridad's own compiler (the default: its build loads numba, and makes
numba's context, only to read the library functions it translates; it holds
no lock of numba's otherwise, see ``backends/numba/locks.build_serialization``
-- held before that, the build would leave user threads that make numba's
context at once, ``@njit`` in one and ``@cfunc`` in another, to numba's own
race between them, which hybridad cannot close).
"""

import os
import subprocess
import sys
import textwrap

import pytest

PRELUDE = r"""
import os, sys, threading, time

POINT = sys.argv[1]
held, go = threading.Event(), threading.Event()


def building():
    return threading.current_thread().name.startswith("hybridad compile")


def hold():
    if building() and not held.is_set():
        held.set()
        assert go.wait(120)


class Hold:
    def __init__(self, name):
        self.name = name

    def find_spec(self, name, path=None, target=None):
        if name == self.name:
            hold()
        return None


if POINT == "import":
    sys.meta_path.insert(0, Hold("numba"))
elif POINT == "context":
    import numba.core.cpu as _cpu  # numba loaded, its target context not made

    _init = _cpu.CPUContext.__init__

    def _held_init(self, *args, **kwargs):
        hold()
        return _init(self, *args, **kwargs)

    _cpu.CPUContext.__init__ = _held_init
elif POINT == "compile":  # held as soon as the build holds numba's compiler lock
    from numba.core.compiler_lock import global_compiler_lock as _gcl

    _acquire = type(_gcl).acquire

    def _held_acquire(self):
        _acquire(self)
        hold()

    type(_gcl).acquire = _held_acquire
elif POINT != "none":
    raise SystemExit(f"unknown hold point {POINT}")

import numpy as np
import hybridad as ha


def f(x):
    return np.sum(np.tanh(x) * x) + np.sum(np.exp(-x * x))


X = np.linspace(-1.0, 1.0, 50)
WANT = np.tanh(X) + X * (1 - np.tanh(X) ** 2) - 2 * X * np.exp(-X * X)


def hung(threads, what):
    alive = [t.name for t in threads if t.is_alive()]
    if alive:
        print("deadlock:", what, alive, flush=True)
        import faulthandler  # where each thread waits, for the report
        faulthandler.dump_traceback(file=sys.stdout, all_threads=True)
        sys.stdout.flush()
        os._exit(3)
"""

ENTRY_POINTS = r"""
def e_import():
    import numba  # noqa: F401


def e_njit():
    import numba
    assert numba.njit(lambda v: v + 1)(1) == 2


def e_cfunc():
    import numba

    def add(v):
        return v + 1.0
    assert numba.cfunc("float64(float64)")(add).ctypes(1.0) == 2.0


def e_vectorize():
    import numba

    def twice(v):
        return 2.0 * v
    assert numba.vectorize(["float64(float64)"])(twice)(np.ones(3))[0] == 2.0


def e_guvectorize():
    import numba

    def cumulate(a, out):
        s = 0.0
        for i in range(a.shape[0]):
            s += a[i]
            out[i] = s
    g = numba.guvectorize(["void(float64[:], float64[:])"], "(n)->(n)")(cumulate)
    assert g(np.ones(3))[-1] == 3.0


def e_jitclass():
    from numba import float64
    from numba.experimental import jitclass

    class Box:
        def __init__(self, v):
            self.v = v
    assert jitclass([("v", float64)])(Box)(1.5).v == 1.5


def e_typed():
    import numba
    lst = numba.typed.List([1.0, 2.0])
    d = numba.typed.Dict.empty(numba.types.int64, numba.types.float64)
    d[1] = 2.0
    assert len(lst) == 2 and d[1] == 2.0


def e_set_num_threads():
    import numba
    numba.set_num_threads(1)
    assert numba.get_num_threads() == 1


def e_count_allocations():
    from hybridad.testing import count_allocations
    with count_allocations() as c:
        np.ones(3)
    assert c.allocations >= 1


ENTRIES = {k[2:]: v for k, v in dict(globals()).items() if k.startswith("e_")}
"""

USERS_SCRIPT = PRELUDE + ENTRY_POINTS + r"""
TIERED = sys.argv[2] == "tiered"
box, errors = [], []


def build():
    plan = ha.compile(f, X, tiered=TIERED)
    box.append(plan)


if TIERED:  # the build runs in the plan's own background thread
    build()
    box[0].gradient(X)  # the first call: the reference program
else:  # a synchronous build, in a thread of the user's
    threading.Thread(target=build, name="hybridad compile (user thread)").start()
assert held.wait(120), "the build never reached its hold point"


def run(name):
    try:
        ENTRIES[name]()
    except BaseException as exc:  # noqa: BLE001
        errors.append(f"{name}: {type(exc).__name__}: {exc}")


users = [threading.Thread(target=run, args=(name,), name=name, daemon=True)
         for name in ENTRIES]
for t in users:
    t.start()
time.sleep(1.0)  # each user thread has reached its first lock
go.set()
deadline = time.monotonic() + 180
for t in users:
    t.join(max(0.0, deadline - time.monotonic()))
hung(users, "user threads")
while not box and time.monotonic() < deadline:
    time.sleep(0.05)
if not box or not box[0].wait(max(0.0, deadline - time.monotonic())):
    print("deadlock: the build", flush=True)
    os._exit(3)
assert not errors, errors
res = box[0].gradient(X)
assert box[0].tier == "numba" and np.allclose(res.gradient, WANT, rtol=1e-12, atol=1e-14)
print("ok")
"""


def run_script(script, tmp_path, *argv, env=None, timeout=400, name="script.py"):
    """Run ``script`` as a file in a fresh interpreter, an empty disk cache."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(script))
    env = {**os.environ, "HYBRIDAD_CACHE_DIR": str(tmp_path / "cache"), **(env or {})}
    env.pop("HYBRIDAD_TIERED", None)
    return subprocess.run([sys.executable, str(path), *argv], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=str(tmp_path))


def assert_ok(out):
    assert "deadlock" not in out.stdout, "hung: " + out.stdout + out.stderr[-3000:]
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), \
        out.stdout + out.stderr[-3000:]


@pytest.mark.parametrize("point, jit", [("import", "1"), ("context", "1"), ("import", "0"),
                                        ("context", "0"), ("compile", "0")],
                         ids=["import-hybridad", "context-hybridad", "import-numba",
                              "context-numba", "compile-numba"])
def test_numba_entry_points_beside_a_held_build(point, jit, tmp_path):
    """``import numba``, ``njit``, ``cfunc``, ``vectorize``, ``guvectorize``,
    ``jitclass``, ``numba.typed``, ``set_num_threads`` and hybridad's own
    ``count_allocations`` (``@cfunc`` s), each in its own thread, while a
    synchronous build in another thread is held at ``point``: all finish,
    and so does the build."""
    assert_ok(run_script(USERS_SCRIPT, tmp_path, point, "sync", env={"HYBRIDAD_JIT": jit}))


def test_numba_entry_points_beside_a_held_background_compile(tmp_path):
    """The same with a tiered plan's background compile held inside numba's
    compiler lock (numba compiling)."""
    assert_ok(run_script(USERS_SCRIPT, tmp_path, "compile", "tiered",
                         env={"HYBRIDAD_JIT": "0"}))


def test_numba_entry_points_beside_a_held_background_translation(tmp_path):
    """A tiered plan's background build by hybridad's own compiler, held
    while it loads numba to read the library functions it translates."""
    assert_ok(run_script(USERS_SCRIPT, tmp_path, "import", "tiered"))


RACE_SCRIPT = r"""
import os, sys, threading, time
import hybridad  # noqa: F401 -- before numba: from now on numba's import makes its context

held, go = threading.Event(), threading.Event()


class Hold:  # the import of numba by the thread "importer" waits for go
    def find_spec(self, name, path=None, target=None):
        if name == "numba" and threading.current_thread().name == "importer" \
                and not held.is_set():
            held.set()
            assert go.wait(120)
        return None


sys.meta_path.insert(0, Hold())
""" + ENTRY_POINTS + r"""
importer = threading.Thread(target=lambda: __import__("numba"), name="importer")
importer.start()
assert held.wait(120)
# the first @njit and the first @cfunc (and vectorize), nothing of hybridad's
users = [threading.Thread(target=ENTRIES[name], name=name, daemon=True)
         for name in ("njit", "cfunc", "vectorize")]
for t in users:
    t.start()
time.sleep(1.0)  # each user thread waits for the import under way
go.set()
deadline = time.monotonic() + 60
for t in users + [importer]:
    t.join(max(0.0, deadline - time.monotonic()))
alive = [t.name for t in users + [importer] if t.is_alive()]
if alive:
    print("deadlock:", alive, flush=True)
    os._exit(3)
from numba.core import registry
assert "_toplevel_target_context" in vars(registry.cpu_target)
print("ok")
"""


def test_user_threads_let_go_by_an_import_of_numba(tmp_path):
    """User threads that start with numba while another thread imports it
    are let go together when the import ends: ``@njit`` in one and
    ``@cfunc`` in another then made numba's target context in opposite lock
    orders, and hung for good one time in two (numba's own race, which
    every import of numba after hybridad's -- a build's or the user's --
    now closes by making the context within the import)."""
    for _ in range(3):  # (hung one run in two without the context made in the import)
        assert_ok(run_script(RACE_SCRIPT, tmp_path, timeout=300))


def test_the_import_of_numba_makes_its_target_context(tmp_path):
    """After ``import hybridad``, ``import numba`` returns with numba's CPU
    target context made (and numba's own loader's methods still there)."""
    out = run_script(textwrap.dedent("""\
        import sys, hybridad, numba, inspect
        from numba.core import registry
        assert "_toplevel_target_context" in vars(registry.cpu_target)
        assert "def njit" in inspect.getsource(numba.njit)
        assert not [f for f in sys.meta_path if "ContextWithImport" in type(f).__name__]
        print("ok")
        """), tmp_path)
    assert_ok(out)


SEQUENTIAL_SCRIPT = PRELUDE + ENTRY_POINTS + r"""
# the sequences of the issue: a gradient, then a first numba entry point
# in the same thread (the default path: nothing left running behind)
res = ha.gradient(f, X, out=ha.GradientResult(X))
assert np.allclose(res.gradient, WANT, rtol=1e-12, atol=1e-14)
for name, entry in ENTRIES.items():
    entry()
assert not [t for t in threading.enumerate() if t.name.startswith("hybridad")]
print("ok")
"""


def test_a_gradient_then_first_numba_entry_points(tmp_path):
    """``ha.gradient(...)`` and then a first ``@cfunc`` (or ``from
    hybridad.testing import count_allocations``) hung for good while the
    default's background build was running."""
    assert_ok(run_script(SEQUENTIAL_SCRIPT, tmp_path, "none", timeout=300))


FORK_SCRIPT = PRELUDE + r"""
import multiprocessing as mp


def child_work(q=None):
    # the child's own synchronous builds: a Hessian and a gradient of a new function
    h = ha.hessian(lambda x: np.sum(x ** 3), np.ones(3))
    ok = np.allclose(h.hessian, np.diag(6.0 * np.ones(3)))
    g = ha.gradient(f, X)
    ok = ok and np.allclose(g.gradient, WANT, rtol=1e-12, atol=1e-14)
    if q is not None:
        q.put(bool(ok))
    return ok


def main():
    how = sys.argv[2]
    box = []
    builder = threading.Thread(target=lambda: box.append(ha.compile(f, X)),
                               name="hybridad compile (user thread)")
    builder.start()
    assert held.wait(120), "the build never reached its hold point"
    threading.Timer(1.0, go.set).start()  # the fork waits for the build meanwhile
    if how == "os.fork":
        pid = os.fork()
        if pid == 0:
            os._exit(0 if child_work() else 1)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.1)
        else:
            print("deadlock: the forked child", flush=True)
            os.kill(pid, 9)
            os._exit(3)
        assert os.waitstatus_to_exitcode(status) == 0, status
    else:
        ctx = mp.get_context(how)
        q = ctx.Queue()
        p = ctx.Process(target=child_work, args=(q,))
        p.start()
        p.join(240)
        if p.is_alive():
            print("deadlock: the", how, "child", flush=True)
            p.kill()
            os._exit(3)
        assert p.exitcode == 0 and q.get(timeout=10)
    builder.join(120)
    hung([builder], "the parent's build")
    assert np.allclose(box[0].gradient(X).gradient, WANT, rtol=1e-12, atol=1e-14)
    print("ok")


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize("how", ["os.fork", "fork", "forkserver", "spawn"])
def test_fork_while_a_build_runs(how, tmp_path):
    """A process forked (``os.fork``, ``multiprocessing``'s fork) while a build
    holds numba's compiler lock: the fork waits for the build, and the
    child's own first builds (a Hessian, a gradient) finish.  forkserver and
    spawn start fresh interpreters: they must not hang either."""
    if how != "spawn" and not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    assert_ok(run_script(FORK_SCRIPT, tmp_path, "compile", how, timeout=500))


EXIT_SCRIPT = PRELUDE + r"""
plan = ha.compile(f, X, tiered=True)  # its background compile waits for go: never set
res = plan.gradient(X)  # the first call: the reference program
assert np.allclose(res.gradient, WANT, rtol=1e-12, atol=1e-14)
assert held.wait(120), "the compile never reached its hold point"
print("last call", time.monotonic(), flush=True)
"""


def test_exit_abandons_a_compile_in_flight(tmp_path):
    """A process ends right after its last call, a tiered plan's compile held
    forever behind it (it waited for compiles at exit: up to 120 s)."""
    import time

    out = run_script(EXIT_SCRIPT, tmp_path, "compile", timeout=120)
    ended = time.monotonic()
    assert out.returncode == 0, out.stderr[-3000:]
    last = float(out.stdout.split("last call")[-1])
    # time.monotonic is system-wide on Linux: the child's clock is the parent's
    assert ended - last < 5.0, f"exit took {ended - last:.1f} s after the last call"
