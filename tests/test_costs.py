"""The cost model (hybridad.transforms.costs): where its table comes from, the
store-or-recompute choice it makes for a fused region's partials, that
explain() says why, that gradients are right either way, and a calibration
run on this machine's kernels."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

import hybridad as ha
from hybridad.testing import count_allocations
from hybridad.transforms import costs as C
from hybridad.transforms.partition import Region


@pytest.fixture
def table(monkeypatch, tmp_path):
    """Use the cost table given (dict), through HYBRIDAD_COSTS."""
    def use(op_ns, cache=0.01, stream=0.05, **more):
        path = tmp_path / "costs.json"
        path.write_text(json.dumps({"op_ns": op_ns, "cache_ns_per_byte": cache,
                                    "stream_ns_per_byte": stream, "cpu": "test", "cores": 1,
                                    "when": "today", **more}))
        monkeypatch.setenv("HYBRIDAD_COSTS", str(path))
        C.reset()
        return path
    yield use
    C.reset()


def _body(ops, n, dtype="float64", inputs=()):
    """A region of ``ops`` over ``n`` elements; ``inputs``: the sizes of its
    array inputs."""
    nodes = [SimpleNamespace(op=op, dtype=np.dtype(dtype), shape=(n,), id=i, args=[])
             for i, op in enumerate(ops)]
    return Region(nodes, None, [SimpleNamespace(size=size, dtype=np.dtype(dtype))
                                for size in inputs])


def test_choice_weighs_evaluation_against_memory_traffic(table):
    assert C.STORE_MARGIN == 1.5
    table({"multiply": 0.1, "add": 0.1, "exp": 1.5, "sin": 8.0})
    # one partial, in cache: 2 x 8 B x 0.01 ns = 0.16 ns per element, x 1.5; and a
    # body under STORE_MIN_NS (0.5 ns) is never stored
    assert C.partials_strategy(_body(["multiply", "add"], 1000), 1)[0] == "recompute"
    how, why = C.partials_strategy(_body(["multiply", "add", "add", "add"], 1000), 1)
    assert how == "recompute" and "0.5 ns/element, below which nothing" in why
    assert C.partials_strategy(_body(["exp", "multiply"], 1000), 1)[0] == "store"
    # from memory: 2 x 8 B x 0.05 = 0.8 ns per partial, x 1.5; exp + multiply = 1.6 ns
    assert C.partials_strategy(_body(["exp", "multiply"], 10**6), 1)[0] == "store"
    assert C.partials_strategy(_body(["exp", "multiply"], 10**6), 2)[0] == "recompute"
    assert C.partials_strategy(_body(["sin"], 10**6), 4)[0] == "store"
    # float32 partials move half the bytes
    assert C.partials_strategy(_body(["exp"], 10**6, "float32"), 2)[0] == "store"
    assert C.partials_strategy(_body(["exp"], 10**6), 2)[0] == "recompute"
    how, why = C.partials_strategy(_body(["sin"], 10**6), 1)
    assert how == "store" and why == (
        "evaluating the body again 8 ns/element > 1.5 x writing and reading 1 partial "
        "0.8 ns/element (from memory)")


def test_recomputing_counts_its_loops_and_the_inputs_they_read_again(table):
    """Recomputed, the backward sweep evaluates the body once per input it
    differentiates, each loop reading the region's array inputs again;
    stored, the backward loop reads the partial in their place.  exp-sum's
    body (one exp, one array input) at n = 10^6 stores where counting the
    partial's write and read alone recomputed it."""
    table({"multiply": 0.0, "add": 0.0, "exp": 1.2}, stream=0.07)
    n = 10**6
    # the partial's traffic alone: 1.5 x 2 x 8 B x 0.07 = 1.68 ns > 1.2
    assert C.partials_strategy(_body(["multiply", "exp"], n), 1)[0] == "recompute"
    # less the input read again (8 B): 1.5 x 0.56 = 0.84 ns < 1.2
    how, why = C.partials_strategy(_body(["multiply", "exp"], n, inputs=[n, 1]), 1)
    assert how == "store" and why == (
        "evaluating the body again 1.2 ns/element > 1.5 x writing and reading 1 partial less "
        "reading the inputs again 0.56 ns/element (from memory)")
    # a broadcast input counts its share: a row of 16 read 10^6 / 16 times is in cache
    row = C.partials_strategy(_body(["multiply", "exp"], n, inputs=[16]), 1)
    assert row[0] == "recompute" and "less reading the inputs again 1.1 ns" in row[1]
    # float32: the input and the partial both half the bytes
    assert C.partials_strategy(_body(["exp"], n, "float32", inputs=[n]), 1)[0] == "store"
    # two inputs differentiated, two loops, each reading both: no traffic saved by
    # recomputing, and 2.4 ns of exps
    how, why = C.partials_strategy(_body(["multiply", "exp"], n, inputs=[n, n]), 2,
                                   evaluations=2)
    assert how == "store" and why.startswith("evaluating the body again in 2 loops 2.4 "
                                             "ns/element > 0.5 ns/element, below which")
    # cheap bodies are still not worth an array
    assert C.partials_strategy(_body(["multiply", "add"], n, inputs=[n, n]), 2,
                               evaluations=2)[0] == "recompute"


def test_a_partial_in_the_gradient_buffer_weighs_time_alone(table):
    """A partial that would be written into its argument's gradient buffer holds
    no memory of its own: no margin, no floor, stored when evaluating the body
    again costs more than the traffic (exp-sum float32 at n = 10^6: 0.38 ns of
    exp against 4 bytes more written, 0.28 ns)."""
    table({"multiply": 0.0, "add": 0.0, "exp": 0.38}, stream=0.07)
    n = 10**6
    body = _body(["multiply", "exp"], n, "float32", inputs=[n])
    how, why = C.partials_strategy(body, 1)
    assert how == "recompute" and "0.5 ns/element, below which nothing" in why
    how, why = C.partials_strategy(body, 1, in_result=True)
    assert how == "store" and why == (
        "evaluating the body again 0.38 ns/element > writing and reading 1 partial less "
        "reading the inputs again 0.28 ns/element (from memory, into the gradient buffer: "
        "no array of its own)")
    cheap = _body(["multiply", "add"], n, "float32", inputs=[n])
    assert C.partials_strategy(cheap, 1, in_result=True)[0] == "recompute"


def _stored_in(plan, nbytes):
    """``(explain's partials reason of the exp region, where each stored
    region_partial of ``nbytes`` lives)``."""
    text = plan.explain()
    reason = next(ln for ln in text.splitlines() if "exp" in ln and "partials:" in ln)
    buffers = text.split("\nbuffers:")[1].split("\n\n")[0]
    homes = [ln.split(f" {nbytes} B  ", 1)[1] for ln in buffers.splitlines()
             if "region_partial" in ln and f" {nbytes} B  " in ln]
    recomputed = any("exp" in ln and "mode='vjp'" in ln for ln in text.splitlines())
    return reason, homes, recomputed


@pytest.mark.parametrize("dtype, exp_ns", [("float32", 0.45), ("float64", 0.7)])
def test_the_predicted_gradient_buffer_is_where_the_partial_goes(table, dtype, exp_ns):
    """Where the VJP predicts the partial goes into the gradient buffer (an
    argument read once, no op that can fail), it is stored there and the
    memory plan puts it there; an argument read twice, or a plan with an op
    that can fail (its results are written last), keeps the margin and the
    floor, and recomputes.  Gradients exact either way.  (exp between the
    traffic, 4 or 8 B x 0.07 ns, and the bar: the 0.5 ns floor in float32,
    1.5 x 0.56 ns in float64.)"""
    table({"multiply": 0.0, "add": 0.0, "exp": exp_ns}, stream=0.07, cache=0.07)
    x = np.linspace(-1, 1, 1000).astype(dtype)
    A = np.eye(3) * 2.0
    want = (-3 * np.exp(-3 * (x.astype(np.float64) + 1)))
    cases = {
        "once": (lambda x: np.sum(np.exp(-3 * (x + 1))), (x,), True),
        "read twice": (lambda x: np.sum(np.exp(-3 * (x + 1))) + np.sum(x[:2]), (x,), False),
        "can fail": (lambda x, A: np.sum(np.exp(-3 * (x + 1))) + np.linalg.solve(A, A)[0, 0],
                     (x, A), False),
    }
    for name, (f, args, stored) in cases.items():
        plan = ha.compile(f, *args, argnums=0, tiered=False)
        reason, homes, recomputed = _stored_in(plan, x.nbytes)
        if stored:
            assert "partials: store" in reason and "into the gradient buffer" in reason, name
            assert homes == ["the result's buffer (no arena)"] and not recomputed, (name, homes)
        else:
            assert "into the gradient buffer: no array" not in plan.explain(), name
            assert homes == [] and recomputed, (name, homes)
        res = plan.gradient(*args)
        np.testing.assert_allclose(res.gradient, want + (np.arange(x.size) < 2) * (
            name == "read twice"), rtol=1e-6 if dtype == "float32" else 1e-14)
        plan.gradient(*args, out=res)
        with count_allocations() as counts:  # repeated calls, either strategy: none
            for _ in range(20):
                plan.gradient(*args, out=res)
        assert counts.allocations == 0, (name, counts)


def test_a_plan_counts_its_recomputing_loops():
    """A region of two differentiated inputs (``exp(x * y)`` summed) with the
    built-in table: its partials are stored (two recomputing loops would each
    evaluate exp and read both inputs), explain() says so, and the gradient
    is exact."""
    x, y = np.linspace(-1, 1, 3000), np.linspace(0, 2, 3000)
    plan = ha.compile(lambda x, y: np.sum(np.exp(x * y)), x, y, argnums=(0, 1), tiered=False)
    text = plan.explain()
    assert "mode='vjp'" not in text and "evaluating the body again in 2 loops" in text
    res = plan.gradient(x, y)
    np.testing.assert_allclose(res.gradient[0], y * np.exp(x * y), rtol=1e-14)
    np.testing.assert_allclose(res.gradient[1], x * np.exp(x * y), rtol=1e-14)


def _chain(ops, n, dtype="float64", dependent=True):
    """A body of ``ops``, each reading the one before (``dependent``) or only
    the region's input."""
    source = SimpleNamespace(op="input", id=-1, args=[], size=n, dtype=np.dtype(dtype))
    nodes = []
    for i, op in enumerate(ops):
        before = nodes[-1] if dependent and nodes else source
        nodes.append(SimpleNamespace(op=op, dtype=np.dtype(dtype), shape=(n,), id=i,
                                     args=[before]))
    return Region(nodes, None, [source])


def test_a_chain_of_dependent_ops_costs_its_latency(table):
    """Twenty dependent additions then a tanh cost their chain (20 x 0.03 + 0.3
    ns), not the throughput sum (0.3: an addition alone measures as free);
    the same ops side by side, or a table without the latency figure, cost
    the sum; and the chain's partials are stored where the sum would have
    them recomputed."""
    ops = ["add"] * 20 + ["tanh"]
    table({"multiply": 0.0, "add": 0.0, "tanh": 0.3}, dependent_ns=0.03)
    assert C.costs().body_cost(_chain(ops, 1000)) == pytest.approx(0.9)
    assert C.costs().body_cost(_chain(ops, 1000, dependent=False)) == pytest.approx(0.3)
    how, why = C.partials_strategy(_chain(ops, 1000, "float32"), 1)
    assert how == "store" and why.startswith("evaluating the body again 0.9 ns/element >")
    assert C.partials_strategy(_chain(ops, 1000, "float32", dependent=False), 1)[0] == \
        "recompute"
    table({"multiply": 0.0, "add": 0.0, "tanh": 0.3})
    assert C.costs().body_cost(_chain(ops, 1000)) == pytest.approx(0.3)


def test_the_dense_chain_stores_its_partial_and_differentiates_right():
    """The bench's dense chain (20 layers, each the sum of all before, then
    tanh) in float32 with the built-in table: its forward region stores the
    one partial instead of the backward sweep evaluating the chain again,
    explain() gives the chain's figure, and the gradient matches the float64
    reference."""
    from hybridad.bench.workloads import dense_chain

    x = (np.linspace(-1.0, 1.0, 5000) * 2.0 ** -19).astype(np.float32)
    plan = ha.compile(dense_chain, x, tiered=False)
    text = plan.explain()
    assert "mode='vjp'" not in text  # no region evaluated again for its partials
    assert "store" in text and "evaluating the body again" in text
    res = plan.gradient(x)
    ref = ha.gradient(dense_chain, x.astype(np.float64), backend="numpy")
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=2e-5, atol=1e-3)
    assert C.costs().dependent_ns


def test_unmeasured_ops(table):
    table({"multiply": 0.2, "exp": 1.5})
    assert C.costs().op_cost("exp") == 1.5
    assert C.costs().op_cost("sinh") == 1.5  # expensive, not measured: the dearest op
    assert C.costs().op_cost("negative") == 0.2  # cheap, not measured: a multiply


def _expsum(x):
    return np.sum(np.exp(-3.0 * x) * x)


@pytest.mark.parametrize("exp_ns, how", [(50.0, "store"), (0.01, "recompute")])
def test_plans_follow_the_table_and_stay_exact(table, exp_ns, how):
    # (the partial would go into x's gradient buffer: stored when the body costs
    # more than the 8 B it adds, 0.08 ns per element in cache)
    table({"multiply": 0.01, "add": 0.01, "exp": exp_ns})
    x = np.linspace(-1, 1, 2000)
    plan = ha.compile(_expsum, x)
    res = ha.GradientResult(x)
    plan.gradient(x, out=res)
    g = np.exp(-3.0 * x) * (1 - 3.0 * x)
    np.testing.assert_allclose(res.gradient, g, rtol=1e-13, atol=1e-15)
    text = plan.explain()
    line = next(ln for ln in text.splitlines() if "exp" in ln and "partials:" in ln)
    assert f"partials: {how} (evaluating the body again" in line
    assert "costs (store or recompute partials, matrix-vector loop or gemv):" in text
    assert "HYBRIDAD_COSTS" in text


def test_where_the_table_comes_from(monkeypatch, tmp_path):
    monkeypatch.setenv("HYBRIDAD_COSTS", "builtin")
    C.reset()
    assert C.costs().source.startswith("the built-in table")
    # a calibration of another machine in the cache is not used here
    monkeypatch.delenv("HYBRIDAD_COSTS")
    monkeypatch.setenv("HYBRIDAD_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir(mode=0o700)
    other = {"op_ns": {"multiply": 9.0}, "cache_ns_per_byte": 1.0, "stream_ns_per_byte": 1.0,
             "cpu": "another machine", "cores": 64, "when": "then"}
    (tmp_path / "cache" / "costs.json").write_text(json.dumps(other))
    C.reset()
    assert C.costs().source.startswith("the built-in table")
    cpu, cores = C._machine()
    (tmp_path / "cache" / "costs.json").write_text(json.dumps({**other, "cpu": cpu,
                                                              "cores": cores}))
    C.reset()
    assert C.costs().op_ns == {"multiply": 9.0} and "this machine" in C.costs().source
    C.reset()


def test_calibrate_measures_the_kernels(monkeypatch, tmp_path):
    monkeypatch.setenv("HYBRIDAD_COSTS", "builtin")
    path = tmp_path / "costs.json"
    from hybridad.plans.calibrate import calibrate

    c = calibrate(str(path), n=4096, budget_s=0.3, ops=["exp", "sin"])
    saved = json.loads(path.read_text())
    assert saved["op_ns"]["exp"] == c.op_ns["exp"] and saved["cpu"] == C._machine()[0]
    assert c.op_ns["sin"] > 0 and c.op_ns["exp"] > 0
    # exp's float32 twin is measured in float32, and a float32 region is costed by it
    assert c.op_ns["exp:float32"] > 0 and "sin:float32" not in c.op_ns
    assert c.op_cost("exp", np.float32) == c.op_ns["exp:float32"]
    assert c.op_cost("sin", np.float32) == c.op_cost("sin") == c.op_ns["sin"]
    assert 0 < c.cache_ns_per_byte <= c.stream_ns_per_byte * 5
    assert 0 < c.gemm_ns["float32"] < c.gemm_ns["float64"] < 10  # ns per multiply-add
    # matrix-vector products: gemv's rate and the numba backend's two loops'
    for dt in ("float64", "float32"):
        assert set(c.matvec_ns[dt]) == {"blas", "dot", "axpy"}
        assert all(0 < ns < 10 for ns in c.matvec_ns[dt].values())  # ns per element
    assert saved["matvec_ns"] == c.matvec_ns and c.matvec_rates("float32") == c.matvec_ns["float32"]
    # the ops not measured keep the table's figures
    assert set(C._builtin().op_ns) <= set(c.op_ns)
    C.reset()


def _fake_calibrate(calls):
    """A stand-in for calibrate (a minute of compiles): writes a table of this
    machine, as calibrate does, and counts its calls."""
    def fake(path=None, **kw):
        cpu, cores = C._machine()
        calls.append(path)
        with open(path, "w") as fh:
            json.dump({"op_ns": {"exp": 7.0}, "cache_ns_per_byte": 0.02,
                       "stream_ns_per_byte": 0.06, "cpu": cpu, "cores": cores,
                       "when": "now"}, fh)
    return fake


def test_the_bench_measures_this_machine_first_where_it_has_no_table(monkeypatch, tmp_path):
    """ensure_calibrated: the built-in table of another machine in effect (no
    HYBRIDAD_COSTS, no calibration in the disk cache) -> calibrate once into
    the disk cache and use it; this machine's table in effect, or a table
    named by HYBRIDAD_COSTS -> nothing measured."""
    from hybridad.plans import calibrate as K

    calls, notes = [], []
    monkeypatch.setattr(K, "calibrate", _fake_calibrate(calls))
    monkeypatch.setattr(C, "_builtin", lambda: C.Costs(
        op_ns={"exp": 1.0}, cache_ns_per_byte=0.01, stream_ns_per_byte=0.04,
        cpu="the reference machine", cores=2, when="then", source="the built-in table"))
    monkeypatch.setenv("HYBRIDAD_COSTS", "builtin")  # named: used as it is
    C.reset()
    assert K.ensure_calibrated(notes.append).op_ns == {"exp": 1.0} and not calls
    monkeypatch.delenv("HYBRIDAD_COSTS")
    monkeypatch.setenv("HYBRIDAD_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir(mode=0o700)
    C.reset()
    c = K.ensure_calibrated(notes.append)
    assert calls == [str(tmp_path / "cache" / "costs.json")]
    assert c.op_ns == {"exp": 7.0} and "this machine" in c.source
    assert C.costs().op_ns == {"exp": 7.0}  # in effect for the plans built next
    assert "no cost table for this machine" in notes[0] and "measured" in notes[1]
    C.reset()  # a later process finds it in the disk cache: nothing measured
    assert K.ensure_calibrated(notes.append).op_ns == {"exp": 7.0} and len(calls) == 1
    # no disk cache: a file of its own, named by HYBRIDAD_COSTS for the process
    monkeypatch.setenv("HYBRIDAD_CACHE_DIR", str(tmp_path / "public"))
    (tmp_path / "public").mkdir(mode=0o777)
    (tmp_path / "public").chmod(0o777)  # writable by others: refused (a warning)
    monkeypatch.delenv("HYBRIDAD_COSTS", raising=False)
    C.reset()
    with pytest.warns(Warning):
        c = K.ensure_calibrated(notes.append)
    import os

    assert len(calls) == 2 and os.environ["HYBRIDAD_COSTS"] == calls[1]
    assert c.op_ns == {"exp": 7.0} and os.path.isfile(calls[1])
    os.unlink(calls[1])
    C.reset()


def test_bench_suite_calibrates_only_when_asked(monkeypatch):
    """The bench's command line measures the table first (--no-calibrate and --quick:
    not); suite.run's default does not; the run's metadata names the table."""
    from hybridad.__main__ import main
    from hybridad.bench import suite
    from hybridad.plans import calibrate as K

    asked = []
    monkeypatch.setattr(K, "ensure_calibrated", lambda log: asked.append(log) or C.costs())
    seen = []
    real_run = suite.run
    monkeypatch.setattr(suite, "run", lambda settings, progress="auto": seen.append(
        settings.calibrate) or real_run(settings, progress))
    args = ["bench", "--workload", "expsum", "--sizes", "100", "--impl", "hybridad",
            "--no-memory", "--repeats", "1", "--progress", "none", "--no-plot"]
    assert main(args) == 0 and seen == [True] and len(asked) == 1
    assert main(args + ["--no-calibrate"]) == 0 and seen == [True, False] and len(asked) == 1
    assert main(args + ["--quick"]) == 0 and seen == [True, False, False] and len(asked) == 1
    doc = real_run(suite.make_settings(quick=True, workloads=["expsum"], sizes=[100],
                                       impls=["hybridad"], memory=False, repeats=1), "none")
    assert len(asked) == 1 and doc["meta"]["costs"] == C.costs().source


def _mlp(widths, batch):
    rng = np.random.default_rng(1)
    ws = [rng.standard_normal((a, b)) / np.sqrt(a)
          for a, b in zip(widths[:-1], widths[1:], strict=True)]
    X = rng.standard_normal((batch, widths[0]))

    def loss(*ws):
        h = X
        for w in ws[:-1]:
            h = np.tanh(h @ w)
        return np.mean((h @ ws[-1]) ** 2)

    return loss, ws


@pytest.mark.parametrize("shared", [True, False], ids=["gemms-shared", "gemms-one-call"])
def test_the_loops_own_the_threads_and_blas_runs_on_one(table, monkeypatch, shared):
    """A parallel plan's threads run its loops (``prange``), BLAS on one
    thread, whatever the share of gemms in its work: BLAS's own threads sum in
    an order that depends on their count.  A wide layer's gemms go to the
    loops' threads as panels of the result (``GEMM_THREADS_MIN``), or run as
    one single-threaded call each when the panels are turned off."""
    from hybridad.backends.numba import threshold

    if not shared:
        monkeypatch.setattr(threshold, "GEMM_THREADS_MIN", 1 << 62)
    table({"tanh": 1.3, "multiply": 0.0}, cache=0.0125, stream=0.038)
    wide_f, wide = _mlp((64, 256, 256, 10), 512)
    narrow_f, narrow = _mlp((1, 16, 16, 1), 20000)
    for name, f, ws in (("wide", wide_f, wide), ("narrow", narrow_f, narrow)):
        plan = ha.compile(f, *ws, argnums=tuple(range(len(ws))), tiered=False)
        serial = ha.compile(f, *ws, argnums=tuple(range(len(ws))), parallel=False)
        src = plan._program.source
        assert "prange(" in src and "prange(" not in serial._program.source, name
        assert plan._program.blas_limited and serial._program.blas_limited, name
        # (the narrow layer's 16 x 16 products are shared too: GEMM_THREADS_MIN_DIM)
        assert ("_gemm_threads(" in src) == shared, name
        assert "_gemm_threads(" not in serial._program.source
        assert "BLAS and LAPACK on one thread" in plan.explain()
        a, b = plan.gradient(*ws), serial.gradient(*ws)
        assert a.value == pytest.approx(b.value, rel=1e-12)
        for x, y in zip(a.gradient, b.gradient, strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-10, atol=1e-14)


def test_blas_may_thread_counts_products_lapack_and_loop_bodies():
    """Which programs run with BLAS on one thread: a product of 9216
    multiply-adds or more (the fewest OpenBLAS's shipped builds thread a gemv
    at), a LAPACK routine on 4096 elements or more, either one inside a loop's
    body; and eight smaller LAPACK calls or more."""
    from hybridad.backends.numba.threshold import blas_may_thread

    def arr(*shape):
        return SimpleNamespace(shape=shape, size=int(np.prod(shape)))

    def node(op, out, *args, **attrs):
        return SimpleNamespace(op=op, args=list(args), shape=out.shape, size=out.size,
                               attrs=attrs)

    small = node("matmul", arr(95, 1), arr(95, 96), arr(96, 1))  # 9120 multiply-adds
    large = node("matmul", arr(96, 1), arr(96, 96), arr(96, 1))  # 9216
    assert not blas_may_thread([small]) and blas_may_thread([large])
    assert not blas_may_thread([node("cholesky", arr(45, 45), arr(45, 45))])  # 4050 elements
    assert blas_may_thread([node("solve", arr(20, 100), arr(20, 20), arr(20, 100))])  # 4400
    assert not blas_may_thread([node("add", arr(10 ** 6), arr(10 ** 6), arr(10 ** 6))])
    body = SimpleNamespace(graph=SimpleNamespace(nodes=[large]))
    assert blas_may_thread([node("loop", arr(96), arr(96), body=body, length=1)])
    body.graph.nodes = [small]
    assert not blas_may_thread([node("loop", arr(96), arr(96), body=body, length=1)])
    assert not blas_may_thread([large], lambda n: n is large)  # (its own loops: no BLAS call)
    # many small LAPACK calls (OpenBLAS threads a 2 x 2 getrs): 8 or more, a
    # loop's counted by its trip count -- a Kalman filter's 2 solves a step
    solve = node("solve", arr(2, 4), arr(2, 2), arr(2, 4))
    assert not blas_may_thread([solve] * 7) and blas_may_thread([solve] * 8)
    body.graph.nodes = [solve, solve]
    assert blas_may_thread([node("loop", arr(96), arr(96), body=body, length=4)])
    assert not blas_may_thread([node("loop", arr(96), arr(96), body=body, length=3)])


def test_a_program_whose_products_run_its_own_loops_takes_no_blas_section():
    """A quadratic form at D = 100: both matrix-vector products run the
    numba program's own loops (the cost model's choice), so no BLAS call
    is made and the plan does not put BLAS on one thread around its call
    (2 us of its 6.6 us before); a product left to BLAS at that size does."""
    rng = np.random.default_rng(0)
    x, A = rng.standard_normal(100), rng.standard_normal((100, 100))

    def quadform(x, A):
        return 0.5 * x @ (A @ x) + np.sum(np.tanh(x))

    plan = ha.compile(quadform, x, A)
    plan.gradient(x, A)
    source = plan.explain()
    assert "_mv_dot(" in source and "_gemm(" not in source.split("def plan_fn")[1]
    assert "BLAS and LAPACK on one thread" not in source
    B = rng.standard_normal((100, 100))
    wide = ha.compile(lambda B: np.sum(np.tanh(B @ B)), B)  # (a gemm: BLAS)
    wide.gradient(B)
    assert "BLAS and LAPACK on one thread" in wide.explain()
