"""The memory planner: liveness, packing, poisoned runs, explain() and the profile."""

import numpy as np
import pytest
from conftest import rand
from test_coverage import CASES

import hybridad as ha
from hybridad.plans.plan import Plan
from hybridad.testing import assert_no_alloc, numerical_gradient


def mlp(W1, b1, W2, X, Y):
    h = np.tanh(X @ W1 + b1)
    return np.mean((h @ W2 - Y) ** 2)


def dense_chain(x0):
    xs = [x0]
    for _ in range(20):
        xs.append(sum(xs[1:], xs[0]))
    return np.sum(np.tanh(xs[-1]))


def stencil(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2) + \
        np.sum(np.exp(x[2:]) * np.sin(x[:-2]))


def _mlp_args(seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((6, 8)), rng.standard_normal(8), rng.standard_normal((8, 3)),
            rng.standard_normal((20, 6)), rng.standard_normal((20, 3)))


#: (function, args, argnums) compiled on the numba backend too
NUMBA_CASES = {
    "mlp": (mlp, _mlp_args(), (0, 1, 2)),
    "dense_chain": (dense_chain, (rand((40,), seed=1),), 0),
    "stencil": (stencil, (rand((40,), seed=2),), 0),
    "logsumexp-matmul": (lambda x, A: np.log(np.sum(np.exp(A @ np.tanh(x)))) + np.sum(x ** 2),
                         (rand((7,), seed=3), rand((5, 7), seed=4)), 0),
}


def _check_packing(memplan):
    """No two slots whose lifetimes overlap share a byte; the arena is between
    the liveness lower bound and the naive sum."""
    spans = [(dt, off, off + nbytes, *memplan.lifetimes[nid])
             for nid, (dt, off, nbytes, _) in memplan.slots.items()]
    spans += [(dt, off, off + count * dt.itemsize, *memplan.lifetimes[("scratch", nid)])
              for nid, (dt, off, count) in memplan.scratch.items()]
    for i, (dt, lo, hi, a, b) in enumerate(spans):
        assert lo % 64 == 0 and hi <= memplan.arena_bytes[dt]
        for dt2, lo2, hi2, a2, b2 in spans[i + 1:]:
            if dt2 == dt and a <= b2 and a2 <= b:
                assert hi <= lo2 or hi2 <= lo, (lo, hi, a, b, lo2, hi2, a2, b2)
    assert memplan.lower_bound <= memplan.total_bytes <= memplan.naive_total


def _run(plan, args, argnums):
    res = ha.GradientResult(tuple(args[i] for i in argnums) if isinstance(argnums, tuple)
                            else args[argnums])
    plan.gradient(*args, out=res)
    grads = res.gradient if isinstance(argnums, tuple) else (res.gradient,)
    return float(res.value), [np.array(g) for g in grads]


def _same(a, b):
    assert a[0] == b[0] or (np.isnan(a[0]) and np.isnan(b[0]))
    for g, h in zip(a[1], b[1], strict=True):
        np.testing.assert_array_equal(g, h)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_coverage_case_packs_safely_and_survives_poison(name):
    # numpy backend: every slot is NaN before it is written and after its last
    # read; the results are bit-identical to one slot per buffer
    f, x = CASES[name], rand((4, 5), seed=sum(map(ord, name)))
    plain = Plan(f, (x,), backend="numpy", pack=False)
    poisoned = Plan(f, (x,), backend="numpy", poison=True)
    _check_packing(poisoned.memory)
    assert plain.memory.total_bytes == plain.memory.naive_total
    _same(_run(poisoned, (x,), 0), _run(plain, (x,), 0))


@pytest.mark.parametrize("name", sorted(NUMBA_CASES))
def test_numba_plans_pack_safely_and_survive_poison(name):
    f, args, argnums = NUMBA_CASES[name]
    packed = Plan(f, args, argnums)
    poisoned = Plan(f, args, argnums, poison=True)
    assert "np.nan  # poison" in poisoned._program.source
    _check_packing(packed.memory)
    ref = _run(Plan(f, args, argnums, backend="numpy", pack=False), args, argnums)
    got, bad = _run(packed, args, argnums), _run(poisoned, args, argnums)
    _same(bad, got)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-13)
    for g, h in zip(got[1], ref[1], strict=True):
        np.testing.assert_allclose(g, h, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_hvp_plans_survive_poison(backend):
    x, v = rand((30,), seed=8), rand((30,), seed=9)
    plan = Plan(stencil, (x,), hvp=True, backend=backend, poison=True)
    _check_packing(plan.memory)
    ref = ha.hvp(stencil, x, v, backend="numpy")
    got = plan.hvp(x, v=v)
    np.testing.assert_allclose(got.hvp, ref.hvp, rtol=1e-12, atol=1e-13)


def test_poison_catches_a_slot_shared_too_early(monkeypatch):
    # a planner that ends every lifetime at its first step must be caught:
    # reads after a slot's recorded end see NaN
    from hybridad.transforms import memory

    real = memory.plan_memory

    def short_lived(graph, *args, **kwargs):
        plan = real(graph, *args, **kwargs)
        plan.lifetimes = {k: (a, a) for k, (a, b) in plan.lifetimes.items()}
        return plan

    monkeypatch.setattr("hybridad.plans.plan.plan_memory", short_lived)
    x = rand((4, 5), seed=10)
    res = _run(Plan(lambda x: np.sum(np.tanh(x @ x.T) * x[:, :1]), (x,), backend="numpy",
                    poison=True), (x,), 0)
    assert np.isnan(res[0]) or any(np.isnan(g).any() for g in res[1])


def test_dense_chain_arena_is_near_the_liveness_bound():
    x = rand((1000,), seed=11)
    plan = ha.compile(dense_chain, x)
    mem = plan.memory
    assert mem.total_bytes <= 1.1 * mem.lower_bound + 64 * len(mem.slots)
    res = ha.GradientResult(x)
    plan.gradient(x, out=res)
    np.testing.assert_allclose(res.gradient, ha.gradient(dense_chain, x, backend="numpy").gradient,
                               rtol=1e-12)


def test_mlp_arena_reuses_memory():
    args = (rand((10, 64), seed=1), rand((64,), seed=2), rand((64, 64), seed=3),
            rand((500, 10), seed=4), rand((500, 64), seed=5))

    def deep(W1, b1, W2, X, Y):
        h = np.tanh(X @ W1 + b1)
        for _ in range(4):
            h = np.tanh(h @ W2 + b1)
        return np.mean((h - Y) ** 2)

    packed = Plan(deep, args, (0, 1, 2))
    naive = Plan(deep, args, (0, 1, 2), pack=False)
    _check_packing(packed.memory)
    assert packed.memory.total_bytes < 0.8 * naive.memory.total_bytes
    assert naive.memory.total_bytes == naive.memory.naive_total
    _same(_run(packed, args, (0, 1, 2)), _run(naive, args, (0, 1, 2)))


def test_explain_and_memory_profile():
    args = _mlp_args()
    plan = ha.compile(mlp, *args, argnums=(0, 1, 2))
    text = plan.explain()
    assert "live " in text and "liveness lower bound" in text and "one slot per buffer" in text
    assert "slot also used by" in text or plan.memory.total_bytes == plan.memory.naive_total
    prof = plan.memory_profile()
    assert len(prof.live_bytes) == len(plan.graph.nodes) == len(prof.labels)
    assert prof.live_bytes.max() == prof.lower_bound == plan.memory.lower_bound
    assert prof.arena_bytes == plan.memory.total_bytes >= prof.lower_bound
    assert "region" in prof.table() and "MemoryProfile" in repr(prof)


def test_memory_profile_plot(tmp_path):
    pytest.importorskip("matplotlib")
    plan = ha.compile(stencil, rand((40,), seed=2))
    path = plan.memory_profile().plot(tmp_path / "profile.png")
    assert path.stat().st_size > 1000


def test_rss_stays_flat_over_an_optimizer_loop():
    import resource

    args = _mlp_args()
    plan = ha.compile(mlp, *args, argnums=(0, 1, 2))
    res = ha.GradientResult(args[:3])
    W1, b1, W2, X, Y = (a.copy() for a in args)
    for _ in range(200):
        plan.gradient(W1, b1, W2, X, Y, out=res)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with open("/proc/self/statm") as fh:
        statm_before = int(fh.read().split()[1])
    for _ in range(10_000):
        plan.gradient(W1, b1, W2, X, Y, out=res)
        for p, g in zip((W1, b1, W2), res.gradient, strict=True):
            p -= 1e-3 * g
    with open("/proc/self/statm") as fh:
        statm_after = int(fh.read().split()[1])
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert (statm_after - statm_before) * 4096 < 1 << 20  # resident pages: < 1 MiB growth
    assert after - before < 1024  # peak RSS (KiB): < 1 MiB growth


def test_command_line_explain(tmp_path, capsys, monkeypatch):
    from hybridad.__main__ import main

    (tmp_path / "chains.py").write_text(
        "import numpy as np\n\n"
        "def chain(x0):\n"
        "    xs = [x0]\n"
        "    for _ in range(5):\n"
        "        xs.append(sum(xs[1:], xs[0]))\n"
        "    return np.sum(np.tanh(xs[-1]))\n\n"
        "def quad(x, A):\n"
        "    return x @ A @ x\n")
    assert main(["explain", f"{tmp_path / 'chains.py'}:chain", "--shape", "50",
                 "--no-source"]) == 0
    out = capsys.readouterr().out
    assert "liveness lower bound" in out and "memory profile" in out
    assert "generated source" not in out
    monkeypatch.syspath_prepend(str(tmp_path))
    plot = tmp_path / "quad.png"
    main(["explain", "chains:quad", "--shape", "4", "--shape", "4,4", "--argnums", "0,1",
          "--backend", "numpy", "--plot", str(plot)])
    out = capsys.readouterr().out
    assert "generated source" in out and "matmul" in out
    try:
        import matplotlib  # noqa: F401
        assert plot.stat().st_size > 1000
    except ImportError:
        assert "matplotlib is not installed" in out
    with pytest.raises(SystemExit):
        main(["explain", "chains:nothing", "--shape", "4"])


def _pairs(x):
    return np.sum(np.exp(x[1:] * x[:-1])) + np.sum(np.sin(x) ** 2)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_memory_budget_recomputes_regions_to_fit(backend):
    x = rand((1000,), seed=12)
    free = ha.compile(_pairs, x, backend=backend)
    if backend == "numpy":  # the reference executor has no regions: nothing to recompute
        with pytest.raises(ha.MemoryBudgetError, match="smallest workspace"):
            ha.compile(_pairs, x, backend=backend, memory_budget=free.memory.total_bytes - 1)
        return
    assert any(n.op == "region_partial" for n in free.graph.nodes)  # exp: partials stored
    budget = free.memory.total_bytes - 1
    tight = ha.compile(_pairs, x, memory_budget=budget)
    assert tight.recomputed_for_budget and tight.memory.total_bytes <= budget
    assert not any(n.op == "region_partial" for n in tight.graph.nodes)
    assert "every region is recomputed" in tight.explain()
    a, b = free.gradient(x), tight.gradient(x)
    np.testing.assert_allclose(b.gradient, a.gradient, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(b.gradient, numerical_gradient(_pairs, x), rtol=1e-6, atol=1e-6)
    assert_no_alloc(tight.gradient, x, out=b, n=20)
    roomy = ha.compile(_pairs, x, memory_budget=10**9)
    assert not roomy.recomputed_for_budget and "fits as planned" in roomy.explain()


def test_impossible_memory_budget_fails_at_compile_time():
    x = rand((1000,), seed=13)
    with pytest.raises(ha.MemoryBudgetError, match=r"memory_budget=64 bytes is too small.*"
                                                   r"smallest workspace hybridad can plan is"):
        ha.compile(_pairs, x, memory_budget=64)
    for bad in (-1, 1.5, True, "1MB"):
        with pytest.raises(TypeError, match="memory_budget"):
            ha.compile(_pairs, x, memory_budget=bad)


def sin_mlp(W1, b1, W2, X, Y):
    h = np.sin(X @ W1 + b1)
    return np.mean((h @ W2 - Y) ** 2)


def test_equal_partials_are_stored_once():
    # sin(X @ W + b): d/d(X @ W) and d/db are the same array (cos): one buffer
    # (tanh's, 1 - tanh**2, is computed from the output instead: no buffer)
    args = _mlp_args()
    plan = ha.compile(sin_mlp, *args, argnums=(0, 1, 2))
    # (not counting a reduced twin's stored value, wrt -1: share_reduced_values)
    partials = [n for n in plan.graph.nodes if n.op == "region_partial" and n.attrs["wrt"] >= 0]
    assert len(partials) == 1, partials
    tanh_plan = ha.compile(mlp, *args, argnums=(0, 1, 2))
    assert not [n for n in tanh_plan.graph.nodes if n.op == "region_partial" and
                n.attrs["wrt"] >= 0]
    assert "partials: from the output" in tanh_plan.explain()
    for got, want in zip(tanh_plan.gradient(*args).gradient,
                         ha.gradient(mlp, *args, argnums=(0, 1, 2), backend="numpy").gradient,
                         strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    ref = ha.gradient(sin_mlp, *args, argnums=(0, 1, 2), backend="numpy")
    for got, want in zip(plan.gradient(*args).gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_memory_budget_binds_everything_a_parallel_plan_holds(monkeypatch):
    """What a plan holds is its planned workspace: numpy memory still alive
    after the plan is built and called 60 times -- its thread choice having
    chosen one thread, where the serial twin used to be traced and planned
    again in the background with an arena of its own -- stays within
    ``memory_budget`` (plus the plan's small tables: its value buffer, the
    argument checks' table)."""
    import threading
    import tracemalloc

    import numba

    from hybridad.backends.numba import threads

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs numba with 2 threads or more")
    monkeypatch.setenv("HYBRIDAD_THREAD_CHOICE", "1")
    now = [0.0]

    def fake_clock():  # one thread measures 10x faster: the probe picks it
        return now[0]

    def timed(fn, args, n, blas, done, before):
        now[0] += 0.01 if n > 1 else 0.001
        return original(fn, args, n, blas, done, before)

    x = np.linspace(-1.0, 1.0, 40_000)  # prange loops
    res = ha.GradientResult(x)

    def f(x):
        return np.sum(np.tanh(x) ** 2 * np.exp(-x))

    budget = ha.compile(f, x).memory.total_bytes  # the budget it needs, exactly
    domain = tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)
    tracemalloc.start()
    try:
        before = sum(s.size for s in tracemalloc.take_snapshot().filter_traces([domain]).traces)
        plan = ha.compile(f, x, memory_budget=budget)
        choice = plan._program.threads
        assert choice is not None
        original = choice._timed
        monkeypatch.setattr(threads.time, "perf_counter", fake_clock)
        monkeypatch.setattr(choice, "_timed", timed)
        for _ in range(60):
            plan.gradient(x, out=res)
        assert choice.threads == 1 and choice.probes >= 1
        for t in threading.enumerate():  # nothing compiling behind the calls
            assert not t.name.startswith("hybridad"), t.name
        held = sum(s.size for s in tracemalloc.take_snapshot().filter_traces([domain]).traces)
    finally:
        tracemalloc.stop()
    assert plan.memory.total_bytes <= budget
    # (a twin's arena alone would be as large again)
    assert held - before <= budget + 4096, (held - before, budget)
    np.testing.assert_allclose(res.gradient, np.exp(-x) * (2 * np.tanh(x) * (
        1 - np.tanh(x) ** 2) - np.tanh(x) ** 2), rtol=1e-12, atol=1e-15)


def test_a_dropped_plan_s_arena_is_freed_before_a_large_one_is_allocated():
    """A plan is a reference cycle (its fast paths call back into it): dropped,
    its arena waits for Python's collector, which a loop that allocates
    nothing never runs.  A large arena is allocated only after a collection:
    a program rebuilding a large plan holds one workspace, not two or three."""
    import gc
    import weakref

    from hybridad.transforms.memory import COLLECT_ABOVE

    X = np.ones((5000, 400)) / 400

    def f(x):
        return np.sum(np.tanh(X @ np.outer(x[:400], x[:600])) ** 2)

    gc.collect()
    gc.disable()  # (no collection but the one the allocation runs)
    try:
        x = np.linspace(-1.0, 1.0, 1000)
        plan = ha.compile(f, x)
        plan.gradient(x)
        assert plan.memory.total_bytes >= COLLECT_ABOVE
        # (the arenas' allocations: memory.arenas holds views of them)
        arenas = [weakref.ref(a if a.base is None else a.base)
                  for a in plan.memory.arenas.values()]
        del plan
        assert all(a() is not None for a in arenas)  # (the cycle holds it)
        y = np.linspace(-1.0, 1.0, 1001)  # (another shape: a new plan)
        again = ha.compile(f, y)
        again.gradient(y)
        assert all(a() is None for a in arenas)
    finally:
        gc.enable()
