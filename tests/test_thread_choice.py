"""How many threads a parallel plan's loops take: chosen from measured call
times (hybridad.backends.numba.threads.ThreadChoice).

The policy is driven here by a fake clock whose calls cost what the test
says per thread count, so the choices are exact; a real parallel plan then
checks the plumbing (the fast path and the general path both go through the
choice, results are bitwise the same on one thread and on all, the calling
thread's numba count is restored, explain() says what was chosen,
HYBRIDAD_THREAD_CHOICE=0 and HYBRIDAD_NUM_THREADS).
"""

import numba
import numpy as np
import pytest

import hybridad as ha
from hybridad.backends.numba import threads
from hybridad.backends.numba.threads import ThreadChoice, max_threads

pytestmark = pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2,
                                reason="needs numba with 2 threads or more")


@pytest.fixture(autouse=True)
def choice_on(monkeypatch):
    """The choice is on here (the default), whatever the environment says."""
    monkeypatch.setenv("HYBRIDAD_THREAD_CHOICE", "1")

N = 40_000  # above the prange threshold (32768)


class FakeClock:
    """``perf_counter`` of a fake time; ``fn`` advances it by ``cost(threads)``."""

    def __init__(self, cost):
        self.now, self.cost, self.seen = 0.0, cost, []

    def perf_counter(self):
        return self.now

    def fn(self):
        n = numba.get_num_threads()
        self.seen.append(n)
        self.now += self.cost(n)
        return n


@pytest.fixture
def clock(monkeypatch):
    def make(cost):
        c = FakeClock(cost)
        monkeypatch.setattr(threads.time, "perf_counter", c.perf_counter)
        return c
    return make


def _calls(choice, c, k):
    return [choice(c.fn, ()) for _ in range(k)]


def test_busy_machine_chooses_one_thread(clock):
    most = max_threads()
    c = clock(lambda n: 0.030 if n > 1 else 0.001)  # all threads 30x slower
    choice = ThreadChoice()
    before = numba.get_num_threads()
    _calls(choice, c, 40)
    assert choice.threads == 1
    # two slow samples ended the probe (the first after a switch may be cold)
    assert c.seen.count(most) == 2
    assert c.seen[4:] == [1] * 36
    assert numba.get_num_threads() == before  # the caller's count is put back
    assert "threads: 1" in choice.describe()


def test_free_cores_choose_all_threads(clock):
    most = max_threads()
    c = clock(lambda n: 0.001 if n > 1 else 0.0019)
    choice = ThreadChoice()
    _calls(choice, c, 30)
    assert choice.threads == most
    assert c.seen[-10:] == [most] * 10


def test_small_gain_prefers_one_thread(clock):
    c = clock(lambda n: 0.00095 if n > 1 else 0.001)  # 5 %: not worth a second core
    choice = ThreadChoice()
    _calls(choice, c, 30)
    assert choice.threads == 1


def test_load_change_starts_a_new_probe(clock):
    most = max_threads()
    load = {"busy": False}
    c = clock(lambda n: (0.040 if load["busy"] else 0.001) if n > 1 else 0.002)
    choice = ThreadChoice()
    _calls(choice, c, 30)
    assert choice.threads == most and choice.probes == 1
    load["busy"] = True
    _calls(choice, c, ThreadChoice.STRIKES - 1)
    assert choice.probes == 1  # slow calls below the strike count: no probe yet
    _calls(choice, c, 10)
    assert choice.probes == 2 and choice.threads == 1


def test_probes_repeat_and_back_off(clock):
    most = max_threads()
    c = clock(lambda n: 0.010 if n > 1 else 0.001)
    choice = ThreadChoice()
    waits = []
    for _ in range(6):  # run until past each wait, counting the probes
        probes = choice.probes
        while choice.probes == probes:
            choice(c.fn, ())
        _calls(choice, c, 2 * ThreadChoice.SAMPLES)
        waits.append(choice._wait)
    assert choice.threads == 1
    assert waits == sorted(waits) and waits[-1] > waits[0]
    # each probe cost two calls on all threads; their time is a small share
    slow = c.seen.count(most) * 0.009
    assert slow / c.now < 3 * ThreadChoice.PROBE_SHARE


def _objective(x):
    return np.sum(np.exp(-x * x) * np.sin(x) + np.log1p(x * x))


@pytest.fixture(scope="module")
def plan():
    x = np.linspace(-2, 2, N)
    with pytest.MonkeyPatch.context() as mp:  # (before the function-scoped fixture)
        mp.setenv("HYBRIDAD_THREAD_CHOICE", "1")
        return ha.compile(_objective, x, wait=True), x


def _forced(choice, n):
    """Make ``choice`` run its next calls on ``n`` threads, as a probe won by
    ``n`` does (no probe for a long while)."""
    choice.threads, choice._probing = n, None
    choice._left, choice._until, choice.reference = 10**6, float("inf"), 1.0


def test_plan_results_bitwise_equal_on_any_thread_count(plan):
    p, x = plan
    choice = p._program.threads
    assert choice is not None
    got = {}
    for n in (1, max_threads()):
        _forced(choice, n)
        res = ha.GradientResult(x)
        p.gradient(x, out=res)
        got[n] = (float(res.value), np.array(res.gradient))
    (v1, g1), (v2, g2) = got.values()
    assert v1 == v2 and np.array_equal(g1, g2)
    g = -2 * x * np.exp(-x * x) * np.sin(x) + np.exp(-x * x) * np.cos(x) + 2 * x / (1 + x * x)
    np.testing.assert_allclose(g1, g, rtol=1e-12, atol=1e-15)


def _mlp(W1, W2, X, y):  # gemms on BLAS (narrow) and a wide one on the loops' threads
    h = np.tanh(X @ W1)
    return np.mean((np.tanh(h @ W2) @ np.ones(W2.shape[1]) - y) ** 2)


def _quad(x, A):  # a matrix-vector pair (A x and A^T v in one pass)
    return x @ (A @ x) + np.sum(np.cos(A @ x))


def _logreg(w, X, y):  # axis sums, logaddexp, a long BLAS dot product
    z = X @ w
    return np.mean(np.logaddexp(0.0, -y * z)) + 1e-3 * (w @ w) + np.sum(np.tanh(X), axis=0) @ w


def _long_dot(x, y):  # a dot product OpenBLAS splits among its threads
    return (x @ y) ** 2 + np.sum(np.exp(-x * x))


def _narrow(W1, W2, X, y):  # 16 x 16 results over 10^4 rows: parts of k on the threads
    h = np.tanh(X @ W1)
    return np.mean((np.tanh(h @ W2) @ np.ones(W2.shape[1]) - y) ** 2)


_R = np.random.default_rng(11)
CASES = {
    "narrow": (_narrow, (_R.normal(size=(8, 16)) / 3, _R.normal(size=(16, 16)) / 4,
                         _R.normal(size=(10000, 8)), _R.normal(size=10000)), (0, 1)),
    "mlp": (_mlp, (_R.normal(size=(64, 64)) / 8, _R.normal(size=(64, 8)) / 8,
                   _R.normal(size=(4096, 64)), _R.normal(size=4096)), (0, 1)),
    "quad": (_quad, (_R.normal(size=300), _R.normal(size=(300, 300))), 0),
    "logreg": (_logreg, (_R.normal(size=40) / 4, _R.normal(size=(2000, 40)),
                         np.sign(_R.normal(size=2000))), 0),
    "long_dot": (_long_dot, (_R.normal(size=200_000), _R.normal(size=200_000)), (0, 1)),
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", sorted(CASES))
def test_any_thread_count_gives_the_same_bits(case, dtype):
    """A parallel plan's results do not depend on the thread count its calls
    run on (the choice follows the machine's load): gemms on the loops'
    threads and on BLAS, matrix-vector pairs, axis and full sums, a long BLAS
    dot product, all bitwise equal on one thread and on all -- in float64 and
    in float32 (whose sums accumulate in float64)."""
    f, args, argnums = CASES[case]
    args = tuple(a.astype(dtype) for a in args)
    p = ha.compile(f, *args, argnums=argnums)
    choice = p._program.threads
    if choice is None:
        pytest.skip("no prange loop in this plan")
    got = []
    for n in (max_threads(), 1, max_threads()):
        _forced(choice, n)
        res = p.gradient(*args)
        grads = res.gradient if isinstance(argnums, tuple) else (res.gradient,)
        got.append((float(res.value), [np.array(g) for g in grads]))
    (v0, g0) = got[0]
    for v, g in got[1:]:
        assert v == v0
        for a, b in zip(g, g0, strict=True):
            np.testing.assert_array_equal(a, b)
    ref = ha.gradient(f, *args, argnums=argnums, backend="numpy")
    refs = ref.gradient if isinstance(argnums, tuple) else (ref.gradient,)
    tol = 1e-10 if dtype == np.float64 else 2e-4
    np.testing.assert_allclose(v0, float(ref.value), rtol=1e-12 if dtype == np.float64 else 1e-5)
    for a, b in zip(g0, refs, strict=True):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol / 100 * np.max(np.abs(b)))


def test_plan_calls_go_through_the_choice(plan):
    p, x = plan
    res = ha.GradientResult(x)
    choice = p._program.threads
    before = choice.calls
    p.gradient(x, out=res)  # the generated fast path
    p.gradient(x.copy(), out=res)
    p.gradient(x[::-1][::-1], out=res)  # a view: the general path
    assert choice.calls == before + 3
    assert numba.get_num_threads() == numba.config.NUMBA_NUM_THREADS
    text = p.explain()
    assert "program: prange loops; threads:" in text


def test_switch_off_and_cap(monkeypatch):
    x = np.linspace(-1, 1, N)
    monkeypatch.setenv("HYBRIDAD_THREAD_CHOICE", "0")
    p = ha.compile(lambda x: np.sum(np.sin(x) ** 2), x, wait=True)
    assert p._program.threads is None
    assert "prange loops" not in p.explain().split("graph:")[0]
    monkeypatch.setenv("HYBRIDAD_NUM_THREADS", "1")
    assert max_threads() == 1
    monkeypatch.setenv("HYBRIDAD_NUM_THREADS", "many")
    with pytest.raises(ValueError, match="HYBRIDAD_NUM_THREADS"):
        max_threads()
    monkeypatch.delenv("HYBRIDAD_NUM_THREADS")
    assert max_threads() == numba.get_num_threads()


def test_one_thread_cap_calls_plainly(clock, monkeypatch):
    monkeypatch.setenv("HYBRIDAD_NUM_THREADS", "1")
    c = clock(lambda n: 0.001)
    choice = ThreadChoice()
    _calls(choice, c, 5)
    assert choice.probes == 0  # nothing to choose between
    assert c.seen == [1] * 5


def test_blas_is_single_threaded_on_every_thread_count(clock, monkeypatch):
    """BLAS keeps one thread whether the plan's loops take one or all: its
    own threads would change the order of its sums (a dot product split
    among them), so the choice would change the results' bits."""
    most = max_threads()
    inside = {"limited": False}

    # records whether BLAS is single-threaded during a call
    monkeypatch.setattr(threads, "_blas_enter", lambda: inside.update(limited=True))
    monkeypatch.setattr(threads, "_blas_exit", lambda: inside.update(limited=False))
    seen = []
    c = clock(lambda n: 0.030 if n > 1 else 0.001)

    def fn():
        seen.append((numba.get_num_threads(), inside["limited"]))
        c.fn()

    choice = ThreadChoice()
    for _ in range(20):
        choice(fn, (), True)
    assert choice.threads == 1
    assert all(limited for _, limited in seen)
    assert (most, True) in seen and seen[-1] == (1, True)
    assert not hasattr(choice, "serial")  # one program: no twin, nothing in the background



# --- idle BLAS workers sleep soon (threads.short_blas_spin) ---------------------------------

_SPIN_CHILD = r"""
import ctypes, json, os, sys
import numpy            # loaded first, as users do: keeps the value it read
import hybridad
import scipy.linalg     # loaded after: takes hybridad's value
from threadpoolctl import threadpool_info
out = {"env": os.environ.get("OPENBLAS_THREAD_TIMEOUT")}
for info in threadpool_info():
    if info["internal_api"] == "openblas":
        lib = ctypes.CDLL(info["filepath"])
        if hasattr(lib, "openblas_thread_timeout"):
            lib.openblas_thread_timeout.restype = ctypes.c_uint
            where = "numpy" if "numpy" in info["filepath"] else "scipy"
            out[where] = lib.openblas_thread_timeout()
print(json.dumps(out))
"""


def _spin_child(env_value):
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    if env_value is not None:
        env["OPENBLAS_THREAD_TIMEOUT"] = env_value
    run = subprocess.run([sys.executable, "-c", _SPIN_CHILD], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_blas_loaded_after_import_spins_briefly():
    got = _spin_child(None)
    assert got["env"] == str(threads.BLAS_SPIN_LOG2)
    if "scipy" not in got:
        pytest.skip("scipy's BLAS is not an OpenBLAS that reports its thread timeout")
    assert got["scipy"] == threads.BLAS_SPIN_LOG2
    # numpy's OpenBLAS was loaded before hybridad: it keeps what it read (unset: 0)
    assert got.get("numpy", 0) != threads.BLAS_SPIN_LOG2


def test_users_blas_spin_setting_is_kept():
    got = _spin_child("28")
    assert got["env"] == "28"
    if "scipy" in got:
        assert got["scipy"] == 28


_PROCESS = r'''
import hashlib, sys, numpy as np, hybridad as ha
from threadpoolctl import threadpool_limits
rng = np.random.default_rng(0)
A, B = rng.standard_normal((400, 300)), rng.standard_normal((300, 500))
X, w = rng.standard_normal((4000, 64)), rng.standard_normal((64, 16))
h = hashlib.sha1()
with threadpool_limits(int(sys.argv[1])):
    for f, args in ((lambda A, B: np.sum((A @ B) ** 2), (A, B)),
                    (lambda w, X: np.sum(np.tanh(X @ w) ** 2), (w, X)),
                    (lambda A, B: np.sum(np.sin(A.T @ A) * (B @ B.T)[:300, :300]), (A, B))):
        g = ha.compile(f, *args).gradient(*args)
        h.update(np.asarray(g.value).tobytes() + g.gradient.tobytes())
print(h.hexdigest())
'''


def test_processes_with_other_thread_settings_give_the_same_bits(tmp_path):
    """A plan's structure comes from the shape and the machine, never from the
    thread settings: processes started with ``NUMBA_NUM_THREADS=1`` and 2,
    BLAS on one thread or two, a cold disk cache or one another setting
    wrote, give the same gradient bits (gemms cut into panels per thread, or
    left whole to BLAS's own threads where numba had one, gave three
    different gradients of one matmul)."""
    import os
    import subprocess
    import sys

    def run(numba_threads, blas_threads, cache):
        env = dict(os.environ, NUMBA_NUM_THREADS=str(numba_threads),
                   XDG_CACHE_HOME=str(tmp_path / cache))
        return subprocess.run([sys.executable, "-c", _PROCESS, str(blas_threads)], env=env,
                              capture_output=True, text=True, check=True,
                              timeout=600).stdout.strip()

    got = {run(1, 2, "one"), run(2, 1, "two"), run(2, 2, "one")}
    assert len(got) == 1, got
