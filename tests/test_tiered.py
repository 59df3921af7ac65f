"""Tiered execution, on request (hybridad/plans/tiered.py): a numba gradient plan
built with ``tiered=True`` answers its first call with the numpy reference
program while numba compiles in a background thread; every later call runs
the compiled program (the second call waits for it).  The switch is at a call
the program fixes, never where a compile happens to finish."""

import signal
import threading
import warnings

import numpy as np
import pytest

import hybridad as ha
from hybridad._alloc import count_allocations
from hybridad.plans import plan as plan_module


def loss(W, X, y):
    h = np.tanh(X @ W[:, :3])
    return np.mean((h @ W[0, 3:] - y) ** 2) + 1e-3 * np.sum(W ** 2)


RNG = np.random.default_rng(3)
W, X, Y = RNG.normal(size=(3, 6)), RNG.normal(size=(40, 3)), RNG.normal(size=40)


@pytest.fixture
def gate(monkeypatch):
    """Hold every background compile until ``gate.set()``; ``gate.fail`` makes it raise."""
    event = threading.Event()
    event.fail = None
    original = plan_module.Plan._compile

    def held(self, *args, **kwargs):
        if threading.current_thread().name.startswith("hybridad compile"):
            assert event.wait(60)
            if event.fail is not None:
                raise event.fail
        return original(self, *args, **kwargs)

    monkeypatch.setattr(plan_module.Plan, "_compile", held)
    yield event
    event.set()


def reference():
    return ha.compile(loss, W, X, Y, backend="numpy").gradient(W, X, Y)


def compiled():
    return ha.compile(loss, W, X, Y, tiered=False).gradient(W, X, Y)


def test_plans_are_not_tiered_by_default(monkeypatch):
    monkeypatch.delenv("HYBRIDAD_TIERED", raising=False)
    plan = ha.compile(loss, W, X, Y)
    assert plan.tier == "numba" and "tiers:" not in plan.explain()
    assert not any(t.name.startswith("hybridad") for t in threading.enumerate())


def test_the_first_call_runs_the_reference_and_the_second_waits_for_the_compile(gate):
    plan = ha.compile(loss, W, X, Y, tiered=True)
    assert plan.tier == "numpy"
    assert "numba is compiling in the background" in plan.explain()
    ref, res = reference(), ha.GradientResult(W)
    plan.gradient(W, X, Y, out=res)  # the first call: the reference program
    assert res.value == ref.value
    np.testing.assert_array_equal(res.gradient, ref.gradient)
    threading.Timer(1.0, gate.set).start()  # the compile is still held: the call waits
    plan.gradient(W, X, Y, out=res)
    assert plan.tier == "numba"
    want = compiled()  # the compiled program's bits, however long it took
    assert res.value == want.value
    np.testing.assert_array_equal(res.gradient, want.gradient)
    assert "answered the first 1 call(s)" in plan.explain()
    assert "gradient" in vars(plan)  # the fast path went in with the program


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="no interval timer here")
def test_a_ctrl_c_while_the_second_call_waits_keeps_the_switch_where_it_was(gate):
    """A KeyboardInterrupt lands while the second call waits for the compile:
    the next call waits again and switches (on Python 3.11 an interrupted
    ``Thread.join`` marks a running thread stopped, which read as a failed
    compile: the reference program kept answering until the compile happened
    to end)."""
    plan = ha.compile(loss, W, X, Y, tiered=True)
    res = ha.GradientResult(W)
    plan.gradient(W, X, Y, out=res)  # the reference program
    before = signal.signal(signal.SIGALRM, signal.default_int_handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)  # Ctrl-C while the call waits
        with pytest.raises(KeyboardInterrupt):
            plan.gradient(W, X, Y, out=res)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
    assert plan.tier == "numpy"
    threading.Timer(1.0, gate.set).start()  # the compile still held when the next call comes
    plan.gradient(W, X, Y, out=res)
    assert plan.tier == "numba"
    want = compiled()
    assert res.value == want.value
    np.testing.assert_array_equal(res.gradient, want.gradient)


def test_the_switch_does_not_depend_on_when_the_compile_ends():
    """A compile that ended before the first call still leaves that call to the
    reference program: the same calls, the same bits, cold cache or warm."""
    plan = ha.compile(loss, W, X, Y, tiered=True)
    plan._tier_thread.join(120)  # compiled, not switched
    assert plan.tier == "numpy"
    first, second = plan.gradient(W, X, Y), plan.gradient(W, X, Y)
    ref, want = reference(), compiled()
    assert first.value == ref.value and np.array_equal(first.gradient, ref.gradient)
    assert second.value == want.value and np.array_equal(second.gradient, want.gradient)
    assert plan.tier == "numba"


def test_value_calls_count_as_calls(gate):
    plan = ha.compile(loss, W, X, Y, tiered=True)
    assert plan.value(W, X, Y) == pytest.approx(float(reference().value), rel=1e-14)
    gate.set()
    res = plan.gradient(W, X, Y)  # the second call: compiled
    assert plan.tier == "numba" and np.array_equal(res.gradient, compiled().gradient)


def test_zero_allocations_per_call_in_every_tier(gate):
    plan = ha.compile(loss, W, X, Y, tiered=True)
    res = ha.GradientResult(W)
    with count_allocations() as counts:
        plan.gradient(W, X, Y, out=res)  # the reference program's one call
    assert plan.tier == "numpy" and counts.allocations == 0, counts
    gate.set()
    plan.gradient(W, X, Y, out=res)
    with count_allocations() as counts:
        for _ in range(20):
            plan.gradient(W, X, Y, out=res)
    assert plan.tier == "numba" and counts.allocations == 0, counts


def test_threads_calling_across_the_switch_get_right_results(gate):
    plan = ha.compile(loss, W, X, Y, tiered=True)
    ref = reference()
    errors = []

    def worker():
        res = ha.GradientResult(W)
        try:
            for _ in range(200):
                plan.gradient(W, X, Y, out=res)
                np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-12, atol=1e-15)
        except Exception as exc:  # noqa: BLE001 -- reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    threading.Timer(0.5, gate.set).start()
    for t in threads:
        t.join(120)
    assert not errors, errors[0]
    assert plan.wait(60) and plan._tier_calls == 1


def test_a_failed_compile_keeps_the_reference_with_a_warning(gate):
    gate.fail = RuntimeError("no LLVM today")
    plan = ha.compile(loss, W, X, Y, tiered=True)
    with pytest.warns(RuntimeWarning, match="no LLVM today"):
        gate.set()
        assert plan.wait(60) is False
    assert plan.tier == "numpy" and "failed to compile" in plan.explain()
    res, ref = plan.gradient(W, X, Y), reference()
    np.testing.assert_array_equal(res.gradient, ref.gradient)


def test_wait_true_returns_the_compiled_plan():
    plan = ha.compile(loss, W, X, Y, tiered=True, wait=True)
    assert plan.tier == "numba"
    assert not any(t.name.startswith("hybridad compile") and t.is_alive()
                   for t in threading.enumerate())


def test_untiered_plans_compile_before_returning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan = ha.compile(loss, W, X, Y, tiered=False)
    assert plan.tier == "numba" and "tiers:" not in plan.explain()


def test_convenience_calls_take_the_fast_path_after_the_switch(monkeypatch):
    """ha.gradient's recent-call path calls the plan's ``gradient`` as it is at
    each call: after the switch, the compiled program's fast path (a bound
    method kept from the first call would run the general path for good)."""
    monkeypatch.setenv("HYBRIDAD_TIERED", "1")
    from hybridad.plans import cache

    def f(x):
        return np.sum(np.sin(x) * x + 0.25 * x)

    x = np.linspace(0.0, 1.0, 100)
    res = ha.GradientResult(x)
    ha.gradient(f, x, out=res)
    plan = cache.recent_gradient[id(f)][-1]
    assert plan.wait(600) and plan.tier == "numba"
    assert "gradient" in vars(plan)  # the fast path, in front of Plan.gradient
    seen = []
    fast = plan.gradient
    plan.gradient = lambda *a, **k: seen.append(1) or fast(*a, **k)
    before = res.gradient.copy()
    ha.gradient(f, x, out=res)
    assert seen == [1]
    np.testing.assert_allclose(res.gradient, before, rtol=1e-14)
    np.testing.assert_allclose(res.gradient, np.sin(x) + x * np.cos(x) + 0.25, rtol=1e-13)


HOLD = r"""
import sys, threading

held, go = threading.Event(), threading.Event()


class Hold:
    def find_spec(self, name, path=None, target=None):
        if name == "hybridad.backends.numba.program" and \
                threading.current_thread().name.startswith("hybridad compile"):
            held.set()
            go.wait(30)
        return None


sys.meta_path.insert(0, Hold())
"""
"""Prelude of the scripts below: the background build, inside numba's
compiler lock and before the program module's imports, sets ``held`` and
waits there for ``go``."""

FIRST_NJIT_SCRIPT = HOLD + r"""
import numpy as np
import hybridad as ha

plan = ha.compile(lambda x: np.sum(np.tanh(x) @ np.ones((3, 3))), np.ones((4, 3)),
                  tiered=True)
plan.gradient(np.ones((4, 3)))  # the numpy reference answers; numba compiles behind
assert held.wait(60), "the background build never reached the program's imports"


def first_njit():
    import numba
    assert numba.njit(lambda v: v + 1)(1) == 2


user = threading.Thread(target=first_njit)
user.start()
user.join(2)  # decorating takes numba's target context (made lazily)
go.set()
user.join(60)
if user.is_alive() or not plan.wait(60):
    print("deadlock", flush=True)
    import os
    os._exit(3)  # the hung threads would keep the interpreter from exiting
want = ha.compile(lambda x: np.sum(np.tanh(x) @ np.ones((3, 3))), np.ones((4, 3)),
                  backend="numpy").gradient(np.ones((4, 3)))
assert np.allclose(plan.gradient(np.ones((4, 3))).gradient, want.gradient)
print("ok")
"""


def _hang_free(script, tmp_path):
    """Run ``script`` in a fresh interpreter (numba not yet started, a cold
    disk cache); it prints ``deadlock`` when its threads hang."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, HYBRIDAD_TIERED="1", HYBRIDAD_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300)
    assert "deadlock" not in out.stdout, "the threads hung: " + out.stdout
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def test_a_first_njit_beside_the_background_compile_does_not_deadlock(tmp_path):
    """A thread decorating its first ``@njit`` function (user code, or a
    hybridad module imported lazily) while the tiered plan's background build
    holds numba's compiler lock: numba makes its target context at the first
    decorator, under the context's lock and then the compiler lock; the build
    took them the other way round (its imports' first ``@njit``) and the
    process hung for good.  Deterministic: the build waits inside the lock,
    before its imports, until the other thread has started decorating."""
    _hang_free(FIRST_NJIT_SCRIPT, tmp_path)


ELEMENTWISE_SCRIPT = HOLD + r"""
import math, os
import numpy as np
import hybridad as ha


@ha.elementwise
def softplus(x):
    return math.log1p(math.exp(-abs(x))) + max(x, 0.0)


x = np.linspace(-2, 2, 50)
plan = ha.compile(lambda x: np.sum(softplus(x) * x), x, tiered=True)
done = []
threading.Timer(2.0, go.set).start()  # by then the call is compiling the ufunc
caller = threading.Thread(target=lambda: done.append(plan.gradient(x).gradient.copy()),
                          daemon=True)
caller.start()
caller.join(90)
if caller.is_alive() or not plan.wait(60):
    print("deadlock", flush=True)
    os._exit(3)
s = 1 / (1 + np.exp(-x))
assert np.allclose(done[0], np.log1p(np.exp(x)) + x * s)
assert np.allclose(plan.gradient(x).gradient, done[0])
print("ok")
"""


def test_an_elementwise_function_beside_the_background_compile_does_not_deadlock(tmp_path):
    """The first call of a tiered plan with an ``@elementwise`` function runs
    the numpy reference program, which compiles the function's ufunc; the
    background build, inside numba's compiler lock, needs the function's
    kernel.  The call took the function's lock and then the compiler lock,
    the build the other way round: every such first call with a cold cache
    hung (3 of 3).  Deterministic: the build waits inside the compiler lock
    until the call is compiling."""
    _hang_free(ELEMENTWISE_SCRIPT, tmp_path)


def test_the_reference_program_comes_from_the_plan_s_own_trace(gate):
    """The reference plan is built from the graph the plan traced: ``f`` runs
    once, and a global it reads that changes after the compile cannot reach
    the reference (the plan's guards see the change first)."""
    state = {"calls": 0, "scale": 2.0}

    def scaled(W, X, y):
        state["calls"] += 1
        return state["scale"] * loss(W, X, y)

    plan = ha.compile(scaled, W, X, Y, tiered=True)
    assert state["calls"] == 1 and plan.tier == "numpy"
    assert plan._reference._replay is not None and plan._recording is None
    res = plan.gradient(W, X, Y)  # the reference program
    ref = reference()
    np.testing.assert_allclose(res.gradient, 2.0 * ref.gradient, rtol=1e-14)
    assert res.value == pytest.approx(2.0 * ref.value, rel=1e-15)
    state["scale"] = 3.0  # f now traces to another graph: the plan refuses, by name
    with pytest.raises(ha.StalePlanError, match="scale"):
        plan.gradient(W, X, Y)
    assert state["calls"] == 2  # (that check traced f again: the plan's guards, not a twin)


def test_memory_budget_binds_both_tiers(gate):
    """A budget that holds the compiled program's workspace but not the reference's
    beside it: the plan is not tiered (it compiles before it returns)."""
    alone = ha.compile(loss, W, X, Y, tiered=False)
    tiered = ha.compile(loss, W, X, Y, tiered=True)
    both = tiered.memory.total_bytes + tiered._reference.memory.total_bytes
    assert both > alone.memory.total_bytes
    gate.set()
    plan = ha.compile(loss, W, X, Y, tiered=True, memory_budget=both - 1)
    assert plan.tier == "numba" and plan._reference is None
    assert plan.memory.total_bytes <= both - 1
    plan = ha.compile(loss, W, X, Y, tiered=True, memory_budget=both)
    plan.wait()


def test_the_reference_workspace_goes_at_the_switch():
    """The numpy reference plan is a reference cycle (as every plan): dropped
    at the switch, its workspace -- larger than the compiled program's --
    waited for Python's collector, which a loop that allocates nothing never
    runs.  The switch collects it."""
    import gc
    import weakref

    x = np.linspace(-1.0, 1.0, 10 ** 5)

    def f(x):  # (a program no other test compiles: a compiled one would not be tiered)
        u = np.sin(x) * x
        return np.sum(np.log1p(np.exp(-u * u) + 0.625 * x * x) * np.tanh(x))

    gc.collect()
    gc.disable()
    try:
        plan = ha.compile(f, x, tiered=True)
        res = ha.GradientResult(x)
        plan.gradient(x, out=res)  # (the reference answers)
        # (the arenas' allocations: memory.arenas holds views of them)
        arenas = [weakref.ref(a if a.base is None else a.base)
                  for a in plan._reference.memory.arenas.values()]
        assert arenas
        held = f"held by the numpy reference program while it serves: " \
               f"{plan._reference.memory.total_bytes} bytes"
        assert held in plan.explain()  # (what the plan holds, the reference's too)
        assert plan.wait()
        for _ in range(3):
            plan.gradient(x, out=res)
        assert plan.tier == "numba"
        assert all(a() is None for a in arenas)
        assert "held by the numpy reference" not in plan.explain()
    finally:
        gc.enable()
