"""A plan's build costs time linear in its traced nodes.

The per-node cost of a build -- trace, reverse pass, lowering passes, memory
plan, the numpy program's code generation -- at ~8000 traced nodes must stay
within 2x of that at ~800 (a quadratic pass makes it ~10x: the memory
planner's packing was one, 13 s at 6000 nodes).  CPU time of this process,
each size's best of two, after a warm-up build that pays the one-time
costs; ``benchmarks/bench_build.py`` measures 10^3 to 10^5 nodes.
The packing is also checked directly: no two items whose lifetimes overlap
share a byte, on either placement (greedy by size, and in schedule order for
large graphs).
"""

from __future__ import annotations

import gc
import itertools
import subprocess
import sys
import time

import numpy as np
import pytest

import hybridad as ha
from hybridad.transforms import memory


def _euler(steps, n=20):
    rng = np.random.default_rng(0)
    W = rng.standard_normal((n, n)) / np.sqrt(n)

    def f(x):
        for _ in range(steps):
            x = x + 0.01 * np.tanh(W @ x)
        return np.sum(x ** 2)
    return f, rng.standard_normal(n)


def _per_node(steps):
    f, x = _euler(steps)
    gc.collect()  # the garbage of what ran before is not this build's
    t0 = time.process_time()
    plan = ha.compile(f, x, backend="numpy")
    return (time.process_time() - t0) / plan.build_times.nodes, plan


def test_build_cost_per_node_is_flat(monkeypatch):
    monkeypatch.setenv("HYBRIDAD_ROLL", "0")  # the unrolled graph: every pass sees 8000 nodes
    _per_node(3)  # one-time costs
    small = min(_per_node(130)[0] for _ in range(2))
    large, plan = min((_per_node(1300) for _ in range(2)), key=lambda r: r[0])
    assert plan.build_times.nodes > 7000
    assert large <= 2.0 * small, (
        f"build: {1e6 * large:.0f} us per node at {plan.build_times.nodes} nodes against "
        f"{1e6 * small:.0f} at ~800:\n" + "\n".join(plan.build_times.lines()))
    # and the long plan is right
    f, x = _euler(1300)
    res = plan.gradient(x)
    eps, e = 1e-6, np.zeros_like(x)
    e[3] = eps
    fd = (f(x + e) - f(x - e)) / (2 * eps)
    assert np.isclose(res.gradient[3], fd, rtol=1e-6, atol=1e-8)
    assert res.value == pytest.approx(f(x), rel=1e-13)


def test_rolling_costs_time_linear_in_the_steps():
    """By default the loop is rolled (hybridad.transforms.rolling): the trace
    is still one pass over the steps, and finding the loop in it must stay
    linear too -- per step, within 2x from 130 to 1300 steps."""
    def per_step(steps):
        f, x = _euler(steps)
        t0 = time.process_time()
        plan = ha.compile(f, x, backend="numpy")
        return (time.process_time() - t0) / steps, plan

    per_step(3)
    small = min(per_step(130)[0] for _ in range(2))
    large, plan = per_step(1300)
    assert any(n.op == "loop" for n in plan.graph.nodes)
    assert large <= 2.0 * small, (f"{1e6 * large:.0f} us per step at 1300 steps against "
                                  f"{1e6 * small:.0f} at 130")


def test_explain_names_the_dominant_stage():
    f, x = _euler(5)
    plan = ha.compile(f, x, backend="numpy")
    times = plan.build_times
    assert {"trace", "reverse pass", "memory plan", "numpy program"} <= set(times.stages)
    assert any(k.startswith("lower: ") for k in times.stages)
    assert times.nodes > 0 and all(v >= 0 for v in times.stages.values())
    name, secs = times.dominant()
    assert secs == max(times.stages.values())
    text = plan.explain()
    assert f"dominated by {name}" in text and f"{times.nodes} traced nodes" in text


def _random_items(rng, n):
    items = []
    for k in range(n):
        a = int(rng.integers(0, 3 * n))
        items.append((k, np.dtype(np.float64) if rng.random() < 0.7 else np.dtype(np.float32),
                      int(rng.integers(1, 5000)), a, a + int(rng.integers(0, n))))
    return items


@pytest.mark.parametrize("placer", [memory._pack_greedy, memory._pack_in_order])
def test_packing_never_overlaps_live_items(placer):
    rng = np.random.default_rng(7)
    for _ in range(60):
        items = _random_items(rng, int(rng.integers(1, 50)))
        for dt in {i[1] for i in items}:
            group = [i for i in items if i[1] == dt]
            offsets = {}
            arena = placer(group, offsets)
            for x, y in itertools.combinations(group, 2):
                if x[3] <= y[4] and y[3] <= x[4]:  # both alive at some step
                    ox, oy = offsets[x[0]], offsets[y[0]]
                    assert ox + memory._aligned(x[2]) <= oy or \
                        oy + memory._aligned(y[2]) <= ox, (x, y, ox, oy)
            assert all(offsets[i[0]] % memory.ALIGN == 0 and
                       offsets[i[0]] + memory._aligned(i[2]) <= arena for i in group)
            steps = range(max(i[4] for i in group) + 1)
            assert arena >= max(sum(memory._aligned(i[2]) for i in group if i[3] <= t <= i[4])
                                for t in steps)  # (at least the bytes live at once)


def test_large_graphs_pack_in_order(monkeypatch):
    """Past GREEDY_MAX items of a dtype the in-order placement serves the
    plan, and the plan still computes what the greedy one does."""
    f, x = _euler(40)
    greedy = ha.compile(f, x, backend="numpy")
    monkeypatch.setattr(memory, "GREEDY_MAX", 4)
    ordered = ha.compile(f, x, backend="numpy")
    a, b = greedy.gradient(x), ordered.gradient(x)
    assert a.value == b.value and np.array_equal(a.gradient, b.gradient)
    assert ordered.memory.total_bytes > 0


def _trace_rows(rows, width=256):
    """Process time per row of tracing a Python loop over an argument's rows."""
    from hybridad.core.trace import Trace

    gc.collect()
    t0 = time.process_time()
    trace = Trace()
    with trace:
        xs = trace.input(0, (rows, width), np.dtype(np.float64))
        h = xs[0] * 0.0
        for x in xs:
            h = np.tanh(0.5 * h + x)
    return (time.process_time() - t0) / rows


def test_tracing_a_loop_over_rows_costs_the_same_per_row():
    # a row's view used to lay out the whole array (to ask whether numpy would
    # copy it): 5x per row at 4000 rows of 256 against 400
    _trace_rows(50)
    small = min(_trace_rows(400) for _ in range(2))
    large = min(_trace_rows(4000) for _ in range(2))
    assert large <= 2.0 * small, f"{1e6 * large:.0f} us per row at 4000, {1e6 * small:.0f} at 400"


def _accumulating_chain(steps):
    """An unrolled loop's gradient as the lowering passes see it: one buffer
    accumulated in place at every step, each step reading it through views."""
    from hybridad.ir.graph import Node

    ids = itertools.count()
    f64 = np.dtype(np.float64)
    x = Node(next(ids), "input", (), {"index": 0}, (4,), f64)
    acc = Node(next(ids), "const", (), {"value": np.zeros(4), "literal": False}, (4,), f64)
    nodes = [x, acc]
    for _ in range(steps):
        part = Node(next(ids), "getitem", (x,), {"index": (slice(0, 4),)}, (4,), f64)
        acc = Node(next(ids), "iadd", (acc, part), {}, (4,), f64)
        seen = Node(next(ids), "reshape", (acc,), {"shape": (2, 2)}, (2, 2), f64)
        again = Node(next(ids), "reshape", (seen,), {"shape": (4,)}, (4,), f64)
        nodes += [part, acc, seen, again]
    return nodes, [acc]


def _views(nodes, outs):
    from hybridad.transforms.views import simplify_views

    simplify_views(nodes, outs)


def _write_order(nodes, outs):
    from hybridad.ir.graph import Graph, check_writes
    from hybridad.transforms.updates import order_writes

    assert order_writes(nodes) == nodes
    check_writes(Graph(nodes, nodes[:1], outs))


@pytest.mark.parametrize("lower", [_views, _write_order], ids=["views", "order_writes"])
def test_the_views_pass_is_linear_through_in_place_accumulations(lower):
    # each view's storage root used to be found by walking the accumulation
    # chain before it: T^2 (215 us a node at 8.6x10^4 nodes of an unrolled RNN);
    # the write-order pass and its check followed every write to the end of the
    # graph (0.9 s at 4x10^3 nodes)

    def per_node(steps):
        nodes, outs = _accumulating_chain(steps)
        t0 = time.process_time()
        lower(nodes, outs)
        return (time.process_time() - t0) / len(nodes)

    per_node(100)
    rounds = [(per_node(1000), per_node(10000)) for _ in range(4)]  # (interleaved: a busy
    small, large = (min(r[k] for r in rounds) for k in (0, 1))  # spell falls on both sizes)
    assert large <= 2.0 * small, \
        f"{1e6 * large:.1f} us a node at 4x10^4, {1e6 * small:.1f} at 4x10^3"


def _stencil_per_step(steps):
    def f(u):
        u = u.copy()
        for _ in range(steps):
            u[1:-1] += 0.1 * (u[2:] - 2 * u[1:-1] + u[:-2])
            u[0] = u[1]
        return np.sum(u ** 2)

    x = np.linspace(-1.0, 1.0, 32)
    gc.collect()
    t0 = time.process_time()
    plan = ha.compile(f, x, backend="numpy")
    return (time.process_time() - t0) / steps, plan, f, x


def test_a_stencil_written_in_place_builds_in_time_linear_in_the_steps():
    # each write into a slice walked every view the loop had made of the state
    # (dead ones too) and ran the numpy surface's whole element write: 1.2 ms a
    # step at 1000 steps and quadratic (3.4 s), against 0.1 ms and linear now
    _stencil_per_step(10)
    small = min(_stencil_per_step(120)[0] for _ in range(2))
    large, plan, f, x = min((_stencil_per_step(1200) for _ in range(2)), key=lambda r: r[0])
    assert any(n.op == "loop" for n in plan.graph.nodes)
    assert large <= 2.0 * small, (f"{1e6 * large:.0f} us per step at 1200 steps against "
                                  f"{1e6 * small:.0f} at 120")
    res = plan.gradient(x)
    assert res.value == pytest.approx(f(x), rel=1e-12)
    eps, e = 1e-6, np.zeros_like(x)
    e[5] = eps
    assert res.gradient[5] == pytest.approx((f(x + e) - f(x - e)) / (2 * eps), rel=1e-6)


def _recorded_stencil(steps):
    def f(u):
        u = u.copy()
        out = np.zeros((steps, u.shape[0]))
        for k in range(steps):
            u[1:-1] += 0.2 * (u[2:] - 2 * u[1:-1] + u[:-2])
            out[k] = u
        return np.sum(out ** 2)
    return f


def test_a_recorded_loop_leaves_no_garbage_per_step_and_a_small_signature():
    """Tracing pauses Python's cyclic collector, so a reference cycle made per
    traced step (a recursive closure per element write: 47 objects a step) is
    one collection over all of them when the trace ends -- a quarter of a
    second at 10^4 steps; and the rows a rolled loop's record was read from
    left the trace (the plan's graph signature held one per step)."""
    u0 = np.sin(np.linspace(0.0, 3.0, 16))
    found = []
    for steps in (200, 1000):
        f = _recorded_stencil(steps)
        ha.compile(f, u0, backend="numpy")  # (what a first build caches)
        gc.collect()
        gc.disable()
        try:
            plan = ha.compile(f, u0, backend="numpy")
            found.append(gc.collect())
        finally:
            gc.enable()
        assert len(plan._signature) < 60
    assert (found[1] - found[0]) / 800 < 10  # objects a step (47 before)


def _packed_accumulations(overlap):
    """Two in-place adds into elements of one packed array (a region's sums
    of several scalar partials, read through a view of each element), each
    reading the element view made before the other's write."""
    from hybridad.ir.graph import Node

    ids = itertools.count()
    f64 = np.dtype(np.float64)
    x = Node(next(ids), "input", (), {"index": 0}, (3,), f64)
    packed = Node(next(ids), "exp", (x,), {}, (3,), f64)
    first = Node(next(ids), "getitem", (packed,), {"index": (0,)}, (), f64)
    second = Node(next(ids), "getitem", (packed,), {"index": (0 if overlap else 1,)}, (), f64)
    one = Node(next(ids), "getitem", (x,), {"index": (2,)}, (), f64)
    w1 = Node(next(ids), "iadd", (first, one), {}, (), f64)
    w2 = Node(next(ids), "iadd", (second, one), {}, (), f64)
    return [x, packed, first, second, one, w1, w2], [w1, w2]


def test_writes_into_other_elements_of_a_storage_are_no_hazard():
    """An in-place write makes stale only the names that read the elements
    it writes: two adds into two elements of one packed array, each through a
    view made before the other's write, are independent (the write-order pass
    moved each after the other's reader, forever: a build that never ended);
    into one element, the second reads what the first overwrote."""
    from hybridad.ir.graph import write_hazards
    from hybridad.transforms.updates import order_writes

    nodes, _ = _packed_accumulations(overlap=False)
    assert write_hazards(nodes) == []
    assert order_writes(nodes) == nodes
    nodes, _ = _packed_accumulations(overlap=True)
    assert write_hazards(nodes) == [(5, 6)]


def test_stencils_of_two_padded_arrays_build():
    """The numba plan of shifted slices of two padded copies of x weighted by
    a differentiated k (a 1-D convolution with two boundary rules) built
    forever before (in a process of its own: a regression would hang)."""
    code = (
        "import numpy as np, hybridad as ha\n"
        "def f(x, k):\n"
        "    a = np.pad(x, ((0, 0), (1, 1)), mode='wrap')\n"
        "    b = np.pad(x, ((0, 0), (1, 1)))\n"
        "    ya = a[:, 0:5] * k[0] + a[:, 1:6] * k[1] + a[:, 2:7] * k[2]\n"
        "    yb = b[:, 0:5] * k[0] + b[:, 1:6] * k[1] + b[:, 2:7] * k[2]\n"
        "    return np.sum(ya ** 2) + np.sum(yb ** 2)\n"
        "x, k = np.arange(10.0).reshape(2, 5) / 10, np.array([0.5, -1.0, 2.0])\n"
        "r = ha.gradient(f, x, k, argnums=(0, 1), backend='numba')\n"
        "e = 1e-6\n"
        "fd = [(f(x, k + e * u) - f(x, k - e * u)) / (2 * e) for u in np.eye(3)]\n"
        "assert np.allclose(r.gradient[1], fd, rtol=1e-6), (r.gradient[1], fd)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
