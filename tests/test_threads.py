"""Every public call on one plan, from 8 threads at once, against a serial
reference: small plans (which hold the GIL) and large ones (which release it
and run parallel loops), contiguous and non-contiguous arguments.

Calls on one plan serialize on the plan's lock (one workspace per plan, see
docs/guide.md); these tests check that nothing a call stages, computes or
writes is shared with another call in flight.  Each test is bounded in time
(a fixed number of calls per thread).
"""

import threading

import numpy as np
import pytest

import hybridad as ha
from hybridad.optim import SGD

THREADS = 8
#: above the 32768-iteration threshold where plans release the GIL
LARGE = 40_000


def _f(x, c):
    return np.sum(np.exp(-0.5 * (x - c) ** 2)) ** 2 + np.sum(np.tanh(x) * c)


def _f_small(x, c):
    return np.sum(np.tanh(x @ c) ** 2) + np.sum(np.sin(x) * x[0])


def _run_threads(work, n_calls):
    """``work(thread, i)`` for i < n_calls on THREADS threads; returns the
    errors (an exception or a description of a wrong result)."""
    errors = []
    start = threading.Barrier(THREADS)

    def body(t):
        start.wait()
        for i in range(n_calls):
            try:
                bad = work(t, i)
            except Exception as e:  # noqa: BLE001 - reported below
                bad = f"{type(e).__name__}: {e}"
            if bad:
                errors.append(bad)

    threads = [threading.Thread(target=body, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not any(th.is_alive() for th in threads), "a thread hangs"
    return errors


def _points(n, k, strided, seed=0):
    """k distinct points of size n, as views of a (k, 2n) array when strided."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(-1, 1, (k, 2 * n if strided else n))
    return [row[::2] if strided else row for row in base]


def _close(a, b):
    return np.allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
@pytest.mark.parametrize("n", [100, LARGE], ids=["small", "large"])
def test_gradient_and_value_from_threads(n, strided):
    c = np.linspace(-1, 1, n)
    xs = _points(n, THREADS, strided)
    plan = ha.compile(_f, xs[0], c)
    ref = [ha.gradient(_f, np.ascontiguousarray(x), c, backend="numpy") for x in xs]
    outs = [ha.GradientResult(np.zeros(n)) for _ in range(THREADS)]

    def work(t, i):
        x = xs[(t + i) % THREADS]
        r = ref[(t + i) % THREADS]
        if i % 3 == 2:
            v = plan.value(x, c)
            return None if _close(v, r.value) else f"value {v} != {float(r.value)}"
        out = outs[t]
        plan.gradient(x, c, out=out)
        if not (_close(out.value, r.value) and _close(out.gradient, r.gradient)):
            return f"gradient of point {(t + i) % THREADS} wrong"
        if i % 5 == 4:  # the allocating form too
            res = plan.gradient(x, c)
            if not _close(res.gradient, r.gradient):
                return "gradient (new result) wrong"
        return None

    errors = _run_threads(work, 24 if n == LARGE else 200)
    assert not errors, f"{len(errors)} wrong results, e.g. {errors[:3]}"


@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
def test_convenience_gradient_from_threads(strided):
    n = 64
    c = np.linspace(-1, 1, n)
    xs = _points(n, THREADS, strided, seed=1)
    ref = [ha.gradient(_f, np.ascontiguousarray(x), c, backend="numpy") for x in xs]

    def work(t, i):
        k = (t * 3 + i) % THREADS
        out = ha.GradientResult(np.zeros(n))
        ha.gradient(_f, xs[k], c, out=out)
        return None if _close(out.gradient, ref[k].gradient) else f"point {k} wrong"

    errors = _run_threads(work, 100)
    assert not errors, f"{len(errors)} wrong results, e.g. {errors[:3]}"


@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
def test_second_order_from_threads(strided):
    n = 6
    c = np.linspace(0.1, 1, n * n).reshape(n, n)
    xs = _points(n, THREADS, strided, seed=2)
    vs = _points(n, THREADS, False, seed=3)
    plan = ha.compile(_f_small, xs[0], c, hessian=True)
    ref = [ha.hessian(_f_small, np.ascontiguousarray(x), c, backend="numpy") for x in xs]
    hvp_plan = ha.compile(_f_small, xs[0], c, hvp=True)
    jplan = ha.compile(lambda x, c: np.tanh(c @ x) * x, xs[0], c, jacobian=True)
    jref = [ha.jacobian(lambda x, c: np.tanh(c @ x) * x, np.ascontiguousarray(x), c,
                        backend="numpy") for x in xs]
    fixed = 0  # the linearization point all threads use
    plan.linearize(xs[fixed], c)

    def work(t, i):
        k = (t + i) % THREADS
        r = ref[k]
        kind = i % 5
        if kind == 0:
            res = plan.hessian(xs[k], c, out=ha.HessianResult(np.zeros(n)))
            ok = _close(res.hessian, r.hessian) and _close(res.gradient, r.gradient)
        elif kind == 1:
            res = plan.hvp(xs[k], c, v=vs[t])
            ok = _close(res.hvp, r.hessian @ vs[t]) and _close(res.gradient, r.gradient)
        elif kind == 2:
            res = plan.hvp(v=vs[t])  # at the linearization point
            ok = _close(res.hvp, ref[fixed].hessian @ vs[t])
        elif kind == 3:
            res = hvp_plan.hvp(xs[k], c, v=vs[t], out=ha.HvpResult(np.zeros(n)))
            ok = _close(res.hvp, r.hessian @ vs[t])
        else:
            res = jplan.jacobian(xs[k], c)
            ok = _close(res.jacobian, jref[k].jacobian)
        return None if ok else f"kind {kind}, point {k} wrong"

    errors = _run_threads(work, 60)
    assert not errors, f"{len(errors)} wrong results, e.g. {errors[:3]}"


@pytest.mark.parametrize("n", [50, LARGE], ids=["small", "large"])
def test_step_and_batch_from_threads(n):
    c = np.linspace(-1, 1, n)
    plan = ha.compile(_f, np.zeros(n), c, update=SGD(0.01))
    start = _points(n, THREADS, False, seed=4)
    # serial reference: 5 SGD steps from each start
    expected = []
    for x0 in start:
        w = x0.copy()
        for _ in range(5):
            w -= 0.01 * ha.gradient(_f, w, c, backend="numpy").gradient
        expected.append(w)
    ws = [x0.copy() for x0 in start]
    B = 4
    X = np.stack(_points(n, B, False, seed=5))
    gplan = ha.compile(_f, np.zeros(n), c)
    batch_ref = [ha.gradient(_f, x, c, backend="numpy") for x in X]

    def work(t, i):
        if i < 5:
            plan.step(ws[t], c)
            return None
        res = gplan.gradient_batch(X, c)
        ok = all(_close(res.derivs[0][b], batch_ref[b].gradient) for b in range(B))
        return None if ok else "gradient_batch wrong"

    errors = _run_threads(work, 8 if n == LARGE else 20)
    assert not errors, f"{len(errors)} wrong results, e.g. {errors[:3]}"
    for t in range(THREADS):
        np.testing.assert_allclose(ws[t], expected[t], rtol=1e-10, atol=1e-12)


_PARSES = """
import ast, json, threading
import numpy as np
import hybridad as ha

from numba.core.compiler_lock import global_compiler_lock

bare, locked, parse = [], set(), ast.parse


def watched(*args, **kwargs):  # every ast.parse in the process, numba's and the stdlib's too
    name = threading.current_thread().name
    if global_compiler_lock.is_locked():
        locked.add(name.split()[0])
    else:
        bare.append(name)
    return parse(*args, **kwargs)


ast.parse = watched


def f(x, c):
    return np.sum(np.exp(-0.5 * (x - c) ** 2)) ** 2 + np.sum(np.tanh(x) * c) + np.sum(x @ c)


c = np.linspace(-1, 1, 64)
xs = [np.linspace(-1, 1, 64) * (1 + k / 8) for k in range(4)]
plan = ha.compile(f, xs[0], c)  # tiered: compiles in the background
start = threading.Barrier(4)


def body(t):
    start.wait()
    for i in range(40):
        if i == 30:
            plan.wait()  # then the compiled plan: a call builds its value program
        x = xs[(t + i) % 4]
        plan.value(x, c) if i % 3 == 2 else plan.gradient(x, c)


threads = [threading.Thread(target=body, args=(t,)) for t in range(4)]
for th in threads:
    th.start()
for th in threads:
    th.join()
ha.compile(f, xs[0], c, parallel=False, tiered=False)
print(json.dumps([bare, sorted(locked)]))
"""


def test_builds_parse_one_at_a_time():
    """``ast.parse`` before Python 3.11.8 is not thread-safe (CPython gh-106905):
    a plan's call from one thread building its value program while the
    background compile built the gradient program raised ``SystemError: AST
    constructor recursion depth mismatch`` (once in ~6400 calls of the test
    above).  Every parse a build makes (its generated source, numba's, the
    imports of a first build) runs under numba's compiler lock, in a fresh
    interpreter where the first build's imports happen too."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, HYBRIDAD_TIERED="1")
    out = subprocess.run([sys.executable, "-c", _PARSES], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    bare, locked = json.loads(out.stdout.strip().splitlines()[-1])
    assert bare == []
    # the builds that parse: the background compile, a caller's, the main thread's
    assert {"hybridad", "MainThread"} <= set(locked) and any(n.startswith("Thread-")
                                                        for n in locked), locked


def _mlp(params, X, Y):
    W1, b1, W2, b2 = params
    h = np.tanh(X @ W1 + b1)
    return np.mean((h @ W2 + b2 - Y) ** 2)


def test_blas_is_single_threaded_in_a_plan_called_from_any_thread():
    """A plan's BLAS calls run on one thread whichever thread calls the plan,
    so an MLP's gradient (its weight gradient a gemm contracting the batch)
    is the same bits from the main thread, a thread of the user's, and four at
    once.  threadpoolctl lets only the first thread that set OpenBLAS's count
    set it again; a call from another thread ran its gemms on OpenBLAS's
    threads (the weight gradient's last bits differed)."""
    from hybridad.backends.numba import threads

    threads._blas_enter()  # (the main thread sets the count first)
    threads._blas_exit()
    seen = []

    def inside():
        threads._blas_enter()
        try:
            seen.extend(lib.get_num_threads() for lib in threads._blas_libraries())
        finally:
            threads._blas_exit()

    t = threading.Thread(target=inside)
    t.start()
    t.join(60)
    assert seen and all(n == 1 for n in seen), seen

    rng = np.random.default_rng(7)
    X = rng.standard_normal((10_000, 16))
    Y = np.sin(2 * X[:, :1])
    params = (rng.standard_normal((16, 64)) / 4, np.zeros(64), rng.standard_normal((64, 1)) / 8,
              np.zeros(1))
    plan = ha.compile(_mlp, params, X, Y)

    def call():
        out = ha.GradientResult(params)
        plan.gradient(params, X, Y, out=out)
        return b"".join(np.asarray(g).tobytes() for g in (out.value, *out.gradient))

    main = call()
    got = []
    workers = [threading.Thread(target=lambda: got.extend(call() for _ in range(5)))
               for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert len(got) == 20 and all(g == main for g in got)
    assert call() == main


_BLAS_COUNTS = r"""
import hashlib, numpy as np
import hybridad as ha

rng = np.random.default_rng(3)
X = rng.standard_normal((50_000, 20))
y = (rng.random(50_000) > 0.5) * 1.0


def logreg(w):
    z = X @ w
    return np.sum(np.logaddexp(0.0, z) - y * z)


P = rng.standard_normal((200, 3))
t = rng.standard_normal(200)


def gp(theta):
    d = np.sum((P[:, None, :] - P[None, :, :]) ** 2, axis=-1)
    K = np.exp(theta[0]) * np.exp(-d / np.exp(theta[1])) + (np.exp(theta[2]) + 1e-6) * np.eye(200)
    L = np.linalg.cholesky(K)
    return 0.5 * t @ np.linalg.solve(K, t) + np.sum(np.log(np.diag(L)))


Y = rng.standard_normal((100, 200))


def mvn(L):
    S = L @ L.T + np.eye(200)
    return 0.5 * np.sum(Y * np.linalg.solve(S, Y.T).T) + 50 * np.linalg.slogdet(S)[1]


h = hashlib.sha256()
for f, x, kw in ((logreg, rng.standard_normal(20) / 10, {}),
                 (logreg, rng.standard_normal(20) / 10, {"parallel": False}),
                 (gp, np.array([0.1, 0.2, -1.0]), {}),
                 (mvn, rng.standard_normal((200, 200)) / 10, {}),
                 (logreg, rng.standard_normal(20) / 10, {"backend": "numpy"}),
                 (gp, np.array([0.1, 0.2, -1.0]), {"backend": "numpy"})):
    res = ha.compile(f, x, **kw).gradient(x)
    h.update(np.asarray(res.value).tobytes() + np.asarray(res.gradient).tobytes())
print(h.hexdigest())
"""


def test_results_are_the_same_bits_on_any_blas_thread_count():
    """A plan's results do not depend on how many threads BLAS may use
    (``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``): every BLAS and LAPACK
    call large enough for BLAS's own threads runs on one
    (:func:`hybridad.backends.numba.threshold.blas_may_thread`), on the numba
    backend and the numpy one (whose products call numpy's own BLAS).  Plans
    whose work was mostly gemv or LAPACK ran them on OpenBLAS's threads, which
    split the sums by their count: a logistic regression's gradient differed
    by 1.2e-14 between one thread and two, a GP's and an MVN
    log-likelihood's too.  Fresh processes, the same disk cache."""
    import os
    import subprocess
    import sys

    digests = []
    for count in ("1", "3", "1"):
        env = dict(os.environ, OMP_NUM_THREADS=count, OPENBLAS_NUM_THREADS=count)
        out = subprocess.run([sys.executable, "-c", _BLAS_COUNTS], env=env, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        digests.append(out.stdout.strip().splitlines()[-1])
    assert digests[0] == digests[2]  # (the same setting twice: a control)
    assert digests[1] == digests[0]
