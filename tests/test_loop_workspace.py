"""A numba plan's loops run on workspaces in the plan's arena.

A loop whose body runs natively (its runner's compiled driver calls it each
iteration) takes its two sets of carries and its body's arena from a slot
of the plan's arena live while the loop runs
(:func:`hybridad.backends.numba.layouts.loop_workspace`), so loops that run
one after the other share the memory, and the runner keeps none of its own.
Before, each runner held its carries and its body's arena beside the plan:
the six loops of an RK4 Hessian held 9 kB beside a 35 kB arena.  Checked
here: what the plan counts, the results against the numpy backend and
finite differences, two plans sharing runners (in turn and from two
threads), a runner called with no workspace, and no allocation per call."""

import threading

import numpy as np
import pytest

import hybridad as ha
from conftest import rk4_final
from hybridad.backends import loops
from hybridad.backends.numba import threshold
from hybridad.ops.loop import _held
from hybridad.testing import count_allocations

RNG = np.random.default_rng(5)
N = 6
X0 = RNG.standard_normal(N)
W0 = RNG.standard_normal((N, N)) / np.sqrt(N)


def rk4(T):
    """The loop tests' RK4 model (conftest), its final state's squared norm."""
    def f(x, W):
        return np.sum(rk4_final(x, W, T) ** 2)
    return f


def _runners(plan):
    """The runners of the plan's loops its calls so far have made."""
    with threshold.serial_loops(plan._loops_serial):
        keys = [loops._key(n, "numba") for n in plan.graph.nodes if n.op == "loop"]
    found = [loops._RUNNERS.get(k) for k in keys]
    return [r for r in found if r is not None]


def _loop_scratch(plan):
    """(start, end) byte ranges of the loops' scratch slots in the arena."""
    mem = plan.memory
    return {nid: (off, off + nbytes) for nid, (dt, off, nbytes) in mem.scratch.items()
            if next(n for n in plan.graph.nodes if n.id == nid).op == "loop"}


def test_a_hessians_loops_share_one_workspace_in_the_arena():
    """The RK4 Hessian's six loops: nothing held beside the arena, each loop's
    workspace a slot of it, loops that run one after the other in the same
    bytes; the plan is smaller than the arena and the runners' own were."""
    T = 40
    f = rk4(T)
    plan = ha.compile(f, X0, W0, hessian=True, backend="numba")
    res = ha.HessianResult(X0)
    plan.hessian(X0, W0, out=res)
    want = ha.hessian(f, X0, W0, backend="numpy")
    np.testing.assert_allclose(res.hessian, want.hessian, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(res.gradient, want.gradient, rtol=1e-12, atol=1e-14)
    mem = plan.memory
    assert mem.held_bytes == 0
    spans = _loop_scratch(plan)
    loop_nodes = [n for n in plan.graph.nodes if n.op == "loop"]
    assert len(spans) == len(loop_nodes) == 6
    overlapping = [(a, b) for a in spans for b in spans if a < b and
                   spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]]
    assert overlapping  # (sequential loops: the same bytes)
    held_before = sum(_held(n) for n in loop_nodes)  # (what the runners held, counted)
    assert mem.total_bytes < sum(mem.arena_bytes.values()) - sum(
        e - s for s, e in spans.values()) + held_before
    assert _runners(plan)
    for r in _runners(plan):
        assert r._carries is None and r._private is None and not r._prog.memory.arenas
    assert "held by loops" not in plan.explain()


def test_the_hessian_through_workspaces_matches_finite_differences():
    f = rk4(25)
    plan = ha.compile(f, X0, W0, hessian=True, backend="numba")
    H = plan.hessian(X0, W0).hessian
    g = ha.compile(f, X0, W0, backend="numba")
    eps = 1e-6
    for j in range(N):
        e = np.zeros(N)
        e[j] = eps
        col = (g.gradient(X0 + e, W0).gradient - g.gradient(X0 - e, W0).gradient) / (2 * eps)
        np.testing.assert_allclose(H[:, j], col, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(H, H.T, rtol=1e-12, atol=1e-14)


def test_plans_sharing_runners_run_on_their_own_workspaces():
    """Two plans of the same loops share the runners; each runs on its own
    arena's workspace: called in turn, and from two threads at once, each gives
    the bits it gives alone."""
    f = rk4(30)
    first = ha.compile(f, X0, W0, hessian=True, backend="numba")
    second = ha.compile(lambda x, W: f(x, W), X0, W0, hessian=True, backend="numba")
    x1, x2 = X0, X0[::-1].copy()
    want1 = first.hessian(x1, W0).hessian.copy()
    want2 = second.hessian(x2, W0).hessian.copy()
    shared = _runners(first)
    assert shared and shared == _runners(second)
    for _ in range(3):
        np.testing.assert_array_equal(second.hessian(x2, W0).hessian, want2)
        np.testing.assert_array_equal(first.hessian(x1, W0).hessian, want1)
    bad = []

    def work(plan, x, want):
        out = ha.HessianResult(x)
        for _ in range(40):
            plan.hessian(x, W0, out=out)
            if not np.array_equal(out.hessian, want):
                bad.append(plan)

    threads = [threading.Thread(target=work, args=a)
               for a in ((first, x1, want1), (second, x2, want2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads) and not bad


def test_a_runner_called_without_a_workspace_runs_on_its_own():
    """A call that gives no workspace (or one too small) runs on the runner's
    own, made once: the same bits as on the plan's."""
    T = 12
    f = rk4(T)
    plan = ha.compile(f, X0, W0, backend="numba")
    plan.gradient(X0, W0)
    node = next(n for n in plan.graph.nodes if n.op == "loop" and not n.attrs["reverse"])
    with threshold.serial_loops(plan._loops_serial):
        r = loops.runner_for(loops._key(node, "numba"))
    out = np.empty(node.shape, node.dtype)
    work = np.empty(-(-r._layout[0] // 8), np.float64)
    r(out, X0, W0, work=work)
    assert r._private is None
    alone = np.empty_like(out)
    r(alone, X0, W0)
    np.testing.assert_array_equal(alone, out)
    assert r._private is not None and r._private.nbytes == r._layout[0]
    small = np.empty(1, np.float64)
    r(alone, X0, W0, work=small)
    np.testing.assert_array_equal(alone, out)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kind", ["gradient", "hessian"])
def test_loops_on_workspaces_allocate_nothing_per_call(kind, dtype):
    """No allocation per call, in either float dtype (a float32 body's arena
    and carries are laid out in the workspace by their own itemsize); the
    results are the numpy backend's to the dtype's rounding."""
    f = rk4(20)
    x, W = X0.astype(dtype), W0.astype(dtype)
    rtol = 1e-12 if dtype == "float64" else 2e-5
    if kind == "gradient":
        plan = ha.compile(f, x, W, backend="numba")
        out = ha.GradientResult(x)
        call = lambda: plan.gradient(x, W, out=out)  # noqa: E731
        want = ha.compile(f, x, W, backend="numpy").gradient(x, W).gradient
        got = lambda: out.gradient  # noqa: E731
    else:
        plan = ha.compile(f, x, W, hessian=True, backend="numba")
        out = ha.HessianResult(x)
        call = lambda: plan.hessian(x, W, out=out)  # noqa: E731
        want = ha.compile(f, x, W, hessian=True, backend="numpy").hessian(x, W).hessian
        got = lambda: out.hessian  # noqa: E731
    assert _loop_scratch(plan)  # (the loops' workspaces: slots of the arena)
    call()
    assert got().dtype == np.dtype(dtype)
    np.testing.assert_allclose(got(), want, rtol=rtol, atol=rtol * np.abs(want).max())
    call()
    with count_allocations() as counts:
        for _ in range(3):
            call()
    assert counts.allocations == 0, counts


def test_a_loop_whose_body_calls_python_keeps_its_own_and_says_so():
    """A body with a host call (numpy's own on data rows) switches to Python
    each iteration: its runner keeps its carries and program beside the arena,
    counted as held, and explain() says why."""
    import scipy.special as sc

    Y = RNG.uniform(2.0, 5.0, (4, N))

    def f(x, W, Y):
        def step(c, yi):
            return c + 0.1 * np.tanh(W @ c) * sc.comb(yi, 2.0), c
        return np.sum(ha.scan(step, x, Y)[0] ** 2)

    plan = ha.compile(f, X0, W0, Y, backend="numba")
    got = plan.gradient(X0, W0, Y)
    want = ha.gradient(f, X0, W0, Y, backend="numpy")
    np.testing.assert_allclose(got.gradient, want.gradient, rtol=1e-12, atol=1e-14)
    outer = [n for n in plan.graph.nodes if n.op == "loop"]
    assert plan.memory.held_bytes == sum(_held(n) for n in outer if n.id not in plan.memory.scratch)
    assert plan.memory.held_bytes > 0
    assert "switches to Python itself" in plan.explain()


@pytest.mark.parametrize("kind", ["gradient", "hessian"])
def test_a_loop_inside_a_loop_body_runs_in_place_in_the_arena(kind):
    """A loop inside a loop body runs natively (hybridad.backends.nesting): the
    outer body from its runner's compiled driver, the inner loop from the outer
    body's machine code, both on workspaces in the plan's arena -- nothing
    held beside it, no inner runner called from Python, nothing allocated per
    call.  Before, the outer body ran from Python each iteration and called
    the inner runner through object mode: a 1000 x 5 nested gradient took
    33.6 ms (11.7x jax.jit), now under 2 ms."""
    def f(x, W):
        def outer(i, x):
            return ha.fori_loop(0, 3, lambda j, y: y + 0.1 * np.tanh(W @ y), x) * 0.9
        return np.sum(ha.fori_loop(0, 4, outer, x) ** 2)

    import gc

    gc.collect()
    before = set(loops._RUNNERS.keys())
    opts = {"hessian": True} if kind == "hessian" else {}
    plan = ha.compile(f, X0, W0, backend="numba", **opts)
    out = ha.HessianResult(X0) if kind == "hessian" else ha.GradientResult(X0)
    call = getattr(plan, kind)
    call(X0, W0, out=out)
    ref = getattr(ha.compile(f, X0, W0, backend="numpy", **opts), kind)(X0, W0)
    np.testing.assert_allclose(getattr(out, kind), getattr(ref, kind), rtol=1e-12, atol=1e-13)
    assert plan.memory.held_bytes == 0
    assert any(m.op == "loop" for r in _runners(plan) for m in r.body.graph.nodes)
    made = [r for k, r in list(loops._RUNNERS.items()) if k not in before]
    nested = [r for r in made if not any(m.op == "loop" for m in r.body.graph.nodes)]
    assert all(r._drive is not None for r in _runners(plan))
    call(X0, W0, out=out)
    with count_allocations() as counts:
        for _ in range(3):
            call(X0, W0, out=out)
    assert counts.allocations == 0, counts
    assert nested and all(not r._tables and r._last is None for r in nested)  # (no Python call)
