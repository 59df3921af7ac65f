"""How a rolled loop's iterations run on the numba backend, by the size of one
iteration: a small body, and one heavy by its work alone (a matrix-vector
product of a state of 192), run as one native call of the loop's compiled
driver (no Python per iteration); a body of BODY_PARALLEL_MIN element
operations or more runs its loops on the threads where the plan may, and
serially in a plan built with ``parallel=False`` (runners of its own).
Every gradient is compared with the unrolled loop on the numpy backend and
with central finite differences, and a call allocates nothing."""

import numpy as np
import pytest

import hybridad as ha
from conftest import directional_difference
from hybridad.backends import loops
from hybridad.backends.numba import threshold
from hybridad.testing import count_allocations


def euler(T):
    def f(x, W):
        return np.sum(ha.fori_loop(0, T, lambda i, x: x + 0.05 * np.tanh(W @ x), x) ** 2)
    return f


def euler_unrolled(T):
    def f(x, W):
        for _ in range(T):
            x = x + 0.05 * np.tanh(W @ x)
        return np.sum(x ** 2)
    return f


def _data(n, seed=3):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n), rng.standard_normal((n, n)) / np.sqrt(n)


def _fd(f, x, W):
    """Central differences of ``f`` along three random directions of ``x``."""
    return [directional_difference(f, [x, W], 0, seed=k) for k in range(3)]


def _runners(plan):
    """The compiled runners of the plan's loop nodes."""
    with threshold.serial_loops(plan._loops_serial):
        keys = [loops._key(n, "numba") for n in plan.graph.nodes if n.op == "loop"]
    assert keys
    return [loops.runner_for(k) for k in keys]


def _check(plan, n, T):
    x, W = _data(n)
    res = ha.GradientResult(x)
    plan.gradient(x, W, out=res)
    want = ha.gradient(euler_unrolled(T), x, W, backend="numpy")
    assert res.value == pytest.approx(want.value, rel=1e-12)
    np.testing.assert_allclose(res.gradient, want.gradient, rtol=1e-11, atol=1e-12)
    for d, slope in _fd(euler_unrolled(T), x, W):  # (plain numpy: the loop evaluated)
        assert float(res.gradient @ d) == pytest.approx(slope, rel=1e-6, abs=1e-8)
    with count_allocations() as counts:
        for _ in range(3):
            plan.gradient(x, W, out=res)
    assert counts.allocations == 0, counts
    return res


@pytest.mark.parametrize("n", [6, 192])
def test_a_body_small_or_heavy_by_its_work_runs_in_one_native_call(n):
    """A state of 192: one iteration is over PARALLEL_MIN element operations
    (its program is 'heavy': it releases the GIL), which had sent every
    iteration through Python -- 1.9x JAX's per call at n = 150."""
    T = 5
    x, W = _data(n)
    plan = ha.compile(euler(T), x, W)
    _check(plan, n, T)
    for r in _runners(plan):
        assert r._drive is not None, r.describe()
        assert "one native call" in r.describe()
    assert "one native call" in plan.explain()


def test_a_large_body_runs_on_the_threads_and_serially_without_them():
    """A state of 512: a body of BODY_PARALLEL_MIN element operations runs its
    loops on the threads where the process has two CPUs or more (45.7 -> 27.4
    ms a gradient through 200 steps at n = 1000); a plan built with
    ``parallel=False`` keeps its loops serial, in runners of its own.  Both
    give the unrolled loop's gradient, allocate nothing per call and are
    compiled by hybridad's compiler."""
    n, T = 512, 3
    assert n * n >= threshold.BODY_PARALLEL_MIN
    x, W = _data(n, seed=5)
    threaded = ha.compile(euler(T), x, W)
    serial = ha.compile(euler(T), x, W, parallel=False)
    a, b = _check(threaded, n, T), _check(serial, n, T)
    np.testing.assert_allclose(a.gradient, b.gradient, rtol=1e-13, atol=1e-14)
    many = threshold.design_threads() >= 2
    for r in _runners(threaded):
        assert r._prog.parallel == many
        assert ("on the threads" in r.describe()) == many
    for r in _runners(serial):
        assert not r._prog.parallel and r._drive is not None
    assert not {r.key for r in _runners(threaded)} & {r.key for r in _runners(serial)}
    # the plan's code calls a threaded body's runner, which keeps its own
    # workspace (no arena slot: None in the call), from hybridad's compiler --
    # before, that argument sent the whole plan to numba (2.6 -> 0.7-1.0 s a
    # cold first gradient of a 10^5-point stencil through 200 steps)
    for plan in (threaded, serial):
        assert "compiled by hybridad's own compiler" in plan.explain()


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_a_plans_loop_runners_and_what_they_hold_go_with_the_last_plan(backend):
    """A loop's runner -- its carries, its body's program and workspace (a
    numba plan's: views of its arena), its tables -- is shared by the live
    plans of one body and goes with the last of them: a generated module
    (alive as long as the process) names it without holding it.  A plan
    rebuilt after that makes it again.  Before, every runner stayed: a
    700 x 700 stencil's plans left 45 MB each."""
    import gc
    import weakref

    n, T = 64, 4
    x, W = _data(n, seed=9)
    f = euler(T)

    def loop_runners(plan):
        keys = [loops._key(m, backend) for m in plan.graph.nodes if m.op == "loop"]
        return [loops.runner_for(k) for k in keys]

    with threshold.serial_loops(False):  # (the key as a default plan has it)
        first = ha.compile(f, x, W, backend=backend)
        gc.collect()  # (nothing but the plan holds its runners: they must stay)
        want = first.gradient(x, W)
        second = ha.compile(lambda x, W: f(x, W), x, W, backend=backend)
        second.gradient(x, W)
        runners = loop_runners(first)
        assert len(runners) == 2 and runners == loop_runners(second)  # (shared)
    refs = [weakref.ref(r) for r in runners]
    if backend == "numba":  # (its body runs on a workspace in the plan's arena: no
        # carries or arena of its own; the plan's machine code runs it in place, from
        # the context it keeps -- hybridad.backends.nesting -- and a call from Python
        # keeps views of the workspace in its tables)
        assert all(r._carries is None and r._private is None and not r._prog.memory.arenas
                   for r in runners)
        held = [weakref.ref(c) for r in runners for hit in r._tables.values()
                for carries in hit[3] for c in carries]
        held += [weakref.ref(r._nested[0][2]) for r in runners if r._nested and r._nested[0]]
        assert held
    else:
        held = [weakref.ref(a) for r in runners for a in r._carries[0] + r._carries[1]]
    del runners
    del first
    gc.collect()
    assert all(r() is not None for r in refs)  # (the second plan still calls them)
    np.testing.assert_array_equal(second.gradient(x, W).gradient, want.gradient)
    del second
    gc.collect()
    assert all(r() is None for r in refs + held)
    again = ha.compile(f, x, W, backend=backend)
    np.testing.assert_array_equal(again.gradient(x, W).gradient, want.gradient)


def _stencil_step(i, u):
    inner = u[1:-1] + 0.2 * (u[2:] - 2 * u[1:-1] + u[:-2]) - 0.01 * u[1:-1] ** 3
    return np.concatenate([u[:1], inner, u[-1:]])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("kind", ["gradient", "hessian"])
def test_a_stencils_reverse_body_adds_its_slices_in_place(kind, dtype):
    """The reverse body of a stencil step (a loop body's reverse pass is
    functional: each slice's cotangent a scatter, summed) adds the slices'
    cotangents into one buffer in place once lowered (``accumulate_scatters``):
    one scatter starts each cotangent, no zeroed copy of the whole state per slice --
    before, four were zeroed, written and summed (a 10^6-point stencil's
    reverse step 7.6 -> 4.4 ms).  Each body writes its new carries into the
    runner's set directly (before: into its arena, then copied).  The gradient
    and the Hessian match the numpy backend's and finite differences, with
    nothing allocated per call."""
    n, T = 40, 6
    u = (np.sin(np.linspace(0.0, np.pi, n)) + 0.1 * np.cos(np.arange(n))).astype(dtype)

    def f(u):
        return np.sum(ha.fori_loop(0, T, _stencil_step, u) ** 2)

    opts = {"hessian": True} if kind == "hessian" else {}
    plan = ha.compile(f, u, **opts)
    out = ha.HessianResult(u) if kind == "hessian" else ha.GradientResult(u)
    got = getattr(plan, kind)(u, out=out)
    want = getattr(ha.compile(f, u, backend="numpy", **opts), kind)(u)
    assert getattr(got, kind).dtype == dtype
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(getattr(got, kind), getattr(want, kind), rtol=tol, atol=tol)
    if dtype == np.float64:  # (central differences in float32 are too coarse to check)
        eps = 1e-6
        fd = np.array([(f(u + eps * e) - f(u - eps * e)) / (2 * eps) for e in np.eye(n)])
        np.testing.assert_allclose(got.gradient, fd, rtol=1e-6, atol=1e-7)
    with count_allocations() as counts:
        for _ in range(3):
            getattr(plan, kind)(u, out=out)
    assert counts.allocations == 0, counts
    from hybridad.backends.numba.layouts import loop_body_memory

    for m in plan.graph.nodes:  # every body writes its new carries straight into the
        if m.op == "loop":      # runner's set (before: into its arena, then copied)
            g, _, memory = loop_body_memory(m.attrs["body"].graph)
            carries = g.outputs[:m.attrs["body"].n_carry]
            assert all(memory.storage[c.id] != "buffer" or c.id in memory.direct
                       for c in carries), m
    reverse = [m for m in plan.graph.nodes if m.op == "loop" and m.attrs["reverse"]]
    assert reverse
    for m in reverse:  # (a Hessian's reverse bodies carry two cotangents: one scatter each)
        lowered = loops.lower_body(m.attrs["body"].graph, "numba")
        ops = [x.op for x in lowered.nodes]
        assert ops.count("scatter") <= 2 and ops.count("scatter_add") >= 3, ops
        assert not any(a.op == "scatter" for x in lowered.nodes if x.op in ("add", "region")
                       for a in x.args), ops  # (no scatter summed as a whole array)


def test_a_threaded_bodys_data_movement_runs_on_the_threads_with_the_same_bits():
    """A stencil step of 40000 points runs its body on the threads; its
    concatenation, its slices' scatters and their adds are long nests too,
    run as ``prange`` loops beside the regions' (before: serial copies of the
    whole state per step, 8 MB at 10^6 points).  Each element is written once,
    so the gradient is bitwise the one of the plan built with
    ``parallel=False``."""
    import re

    n, T = 40000, 3
    u = np.sin(np.linspace(0.0, np.pi, n)) + 0.1 * np.cos(np.arange(n))

    def f(u):
        return np.sum(ha.fori_loop(0, T, _stencil_step, u) ** 2)

    threaded, serial = ha.compile(f, u), ha.compile(f, u, parallel=False)
    a, b = threaded.gradient(u), serial.gradient(u)
    assert a.gradient.tobytes() == b.gradient.tobytes() and a.value == b.value
    with count_allocations() as counts:
        for _ in range(3):
            threaded.gradient(u, out=a)
    assert counts.allocations == 0, counts
    if threshold.design_threads() < 2:
        return
    threaded_bodies = [r for r in _runners(threaded) if r._prog.parallel]
    assert threaded_bodies  # (the reverse body's work is over BODY_PARALLEL_MIN)
    for r in threaded_bodies:
        long_serial = [m.group(0) for m in re.finditer(r"for i0 in range\((\d+)\)", r._prog.source)
                       if int(m.group(1)) >= threshold.PARALLEL_MIN]
        assert not long_serial, long_serial
