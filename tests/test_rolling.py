"""Loops rolled from the trace (hybridad.transforms.rolling): a Python ``for``
loop whose iterations trace alike becomes one loop node, with no change to
the user's code.  Each rolled plan is checked against the same function's
unrolled plan (``HYBRIDAD_ROLL=0``) and central differences: values,
gradients, Hessian-vector products and Hessians; the graph must not grow
with the trip count; loops that must not roll stay unrolled and correct."""

from __future__ import annotations

import numpy as np
import pytest

import hybridad as ha
from hybridad.testing import assert_no_alloc, count_allocations, numerical_gradient
from hybridad.transforms import rolling, rolling_runs, row_writes


@pytest.fixture(autouse=True)
def roll_small_steps(monkeypatch):
    """The models here are small (6 states): every run of MIN_NODES rolls,
    however little one step computes (the default rolls only steps doing
    rolling.HEAVY_STEP work, or runs of rolling.LONG_RUN nodes: see
    test_the_default_rolls_heavy_steps_and_long_runs)."""
    monkeypatch.setattr(rolling, "HEAVY_STEP", 0)

RNG = np.random.default_rng(7)
W = RNG.standard_normal((6, 6)) / 3
U = RNG.standard_normal((6, 3)) / 2
X = RNG.standard_normal((40, 3))
F = RNG.standard_normal((40, 6))
X0 = np.linspace(-1.0, 1.0, 6)


def euler(x, T=40):
    for _ in range(T):
        x = x + 0.05 * np.tanh(W @ x)
    return np.sum(x ** 2)


def rnn(h):  # a row of a captured array per step: a per-iteration input
    for k in range(40):
        h = np.tanh(W @ h + U @ X[k])
    return np.sum(h ** 2)


def forced(x):  # a Python float per step (t = k dt) and a row of forcing
    for k in range(40):
        t = k * 0.1
        x = x + 0.1 * (np.sin(t) * x - x ** 3 / 3 + F[k])
    return np.sum(np.cos(x))


def trajectory(x):  # every state kept: the loop's stacked per-step outputs
    xs = []
    for _ in range(30):
        x = np.cos(x) * 0.9 + 0.1 * x
        xs.append(x)
    return np.sum(np.stack(xs) ** 2) + np.sum(xs[7] * xs[-1])


def verlet(x):  # two carries
    v = np.zeros_like(x)
    for _ in range(50):
        v = v - 0.05 * np.sin(x)
        x = x + 0.05 * v
    return np.sum(x * v) + np.sum(x ** 2)


def running_sum(x):  # a scalar carry started from a Python float
    total = 0.0
    for k in range(60):
        total = total + np.sum(np.sin(x * (k + 1) / 60))
    return total


def two_phases(x):  # the update changes at step 40: two loops, each rolled
    for k in range(80):
        x = x + 0.02 * np.tanh(x) if k < 40 else x - 0.02 * np.sin(x) ** 2
    return np.sum(x ** 2)


def growing(x):  # a carried value whose shape changes: never rolled
    for _ in range(30):
        x = np.concatenate([x, np.sin(x[-1:]) * 0.5])
    return np.sum(x ** 2)


def traced_rows(h):  # a row of a traced array per step: x[k] of a value f computed
    xs = np.outer(np.linspace(-1.0, 1.0, 40), h[:3] ** 2)
    for row in xs:
        h = np.tanh(W @ h + U @ row)
    return np.sum(h ** 2)


def reversed_rows(h):  # rows of a view of a traced array, last first; numbers of a 1-d one
    xs = np.outer(np.linspace(-1.0, 1.0, 40), h[:3] ** 2)[::-1]
    scales = np.cos(np.linspace(0.0, 1.0, 40) * h[0])
    for row, c in zip(xs, scales, strict=True):
        h = np.tanh(W @ h + U @ row) * c
    return np.sum(h ** 2)


def heat(u):  # a stencil written in place, as scientific code steps a grid
    u = u.copy()
    for _ in range(40):
        u[1:-1] += 0.2 * (u[2:] - 2 * u[1:-1] + u[:-2]) - 0.01 * u[1:-1] ** 3
    return np.sum(u ** 2)


def recorded(x):  # each state written into a row of an array made before the loop
    out = np.zeros((30, 6))
    for k in range(30):
        x = np.tanh(W @ x) + 0.1 * F[k]
        out[k] = x
    return np.sum(out ** 2) + np.sum(out[:, 1:] * out[:, :-1])


ROLLED = [euler, rnn, forced, trajectory, verlet, running_sum, two_phases, traced_rows,
          reversed_rows, heat, recorded]


def _plans(f, x, backend, monkeypatch, unrolled_backend=None, **kw):
    """The rolled and the unrolled plan of ``f`` at ``x`` (a tuple: the
    arguments), the unrolled one on ``unrolled_backend`` if given."""
    args = x if isinstance(x, tuple) else (x,)
    monkeypatch.setenv("HYBRIDAD_ROLL", "1")
    rolled = ha.compile(f, *args, backend=backend, **kw)
    monkeypatch.setenv("HYBRIDAD_ROLL", "0")
    unrolled = ha.compile(f, *args, backend=unrolled_backend or backend, **kw)
    monkeypatch.delenv("HYBRIDAD_ROLL")
    return rolled, unrolled


def _wide_euler(n, steps, dt, scale, seed):
    """Euler steps ``x + dt tanh(W x)`` of an ``n``-state model, and a start."""
    w = np.random.default_rng(seed).standard_normal((n, n)) / scale

    def f(x):
        for _ in range(steps):
            x = x + dt * np.tanh(w @ x)
        return np.sum(x ** 2)
    return f, np.linspace(-1, 1, n)


def _loops(plan):
    return sum(n.op == "loop" for n in plan.graph.nodes)


@pytest.mark.parametrize("f", ROLLED, ids=lambda f: f.__name__)
def test_rolled_gradient_matches_the_unrolled_plan(f, monkeypatch):
    rolled, unrolled = _plans(f, X0, "numpy", monkeypatch)
    # (a running sum's steps batched: its addends at once, summed in order -- no loop)
    assert (_loops(rolled) >= 1) != (f is running_sum) and _loops(unrolled) == 0
    # (trajectory's np.stack of every state reads each row of the loop's output)
    assert len(rolled.graph.nodes) < len(unrolled.graph.nodes) / (1.5 if f is trajectory else 3)
    r, u = rolled.gradient(X0), unrolled.gradient(X0)
    assert float(r.value) == pytest.approx(float(u.value), rel=1e-14)
    assert float(r.value) == pytest.approx(float(f(X0.copy())), rel=1e-14)
    np.testing.assert_allclose(r.gradient, u.gradient, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(r.gradient, numerical_gradient(f, X0), rtol=1e-6, atol=1e-8)


def test_two_phases_roll_separately(monkeypatch):
    rolled, _ = _plans(two_phases, X0, "numpy", monkeypatch)
    assert _loops(rolled) == 4  # the forward loop of each phase and its reverse loop
    assert sum(n.op == "loop" for n in rolled.graph.nodes if n.phase == "forward") == 2


def test_the_graph_does_not_grow_with_the_trip_count(monkeypatch):
    sizes = []
    for T in (40, 400):
        monkeypatch.setenv("HYBRIDAD_ROLL", "1")
        plan = ha.compile(lambda x, T=T: euler(x, T), X0, backend="numpy")
        sizes.append(len(plan.graph.nodes))
        r = plan.gradient(X0)
        np.testing.assert_allclose(r.gradient, numerical_gradient(lambda x: euler(x, T), X0),
                                   rtol=1e-6, atol=1e-8)
    assert sizes[0] == sizes[1]


def test_what_must_not_roll_stays_unrolled(monkeypatch):
    rolled, unrolled = _plans(growing, X0, "numpy", monkeypatch)
    assert _loops(rolled) == 0 and len(rolled.graph.nodes) == len(unrolled.graph.nodes)
    np.testing.assert_allclose(rolled.gradient(X0).gradient, numerical_gradient(growing, X0),
                               rtol=1e-6, atol=1e-8)
    # a Python decision on a traced value in every iteration: each is guarded, unrolled
    def decided(x):
        for _ in range(40):
            x = x + 0.05 * np.tanh(x) if np.sum(x) > -100 else x
        return np.sum(x ** 2)
    plan = ha.compile(decided, X0, backend="numpy")
    assert _loops(plan) == 0
    # too short to pay: unrolled
    plan = ha.compile(lambda x: euler(x, 3), X0, backend="numpy")
    assert _loops(plan) == 0


_W_DECIDED = np.random.default_rng(4).standard_normal((4, 4)) / 3


def decided_before(x):
    if x[0] > 0:  # a Python decision on an argument, then a long loop: the loop rolls
        x = x * 1.1
    for _ in range(60):
        x = x + 0.02 * np.tanh(_W_DECIDED @ x)
    return np.sum(x ** 2)


def decided_after(x):
    for _ in range(60):
        x = x + 0.02 * np.tanh(_W_DECIDED @ x)
    if np.sum(x) > 0:  # decided on the loop's result: its check recomputes it unrolled
        return np.sum(x ** 2)
    return np.sum(x ** 4)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_loop_rolls_beside_a_python_decision_on_values(backend, monkeypatch):
    x_pos, x_neg = np.linspace(0.5, -1.0, 4), np.linspace(-0.5, 1.0, 4)
    plan = ha.compile(decided_before, x_pos, backend=backend)
    assert _loops(plan) == 2 and len(plan._decision_check.decisions) == 1
    points = (x_pos, x_neg, x_pos)  # both outcomes (the other one a specialization)
    got = [plan.gradient(x) for x in points]
    assert [_loops(p) for p in plan._specializations] == [2]
    out = ha.GradientResult(x_pos)
    for x in (x_pos, x_neg):  # nothing allocated per call, on either outcome's plan
        assert_no_alloc(plan.gradient, x, out=out, n=5)
    monkeypatch.setenv("HYBRIDAD_ROLL", "0")
    unrolled = ha.compile(decided_before, x_pos, backend="numpy")
    assert _loops(unrolled) == 0
    for x, r in zip(points, got, strict=True):
        assert float(r.value) == pytest.approx(float(decided_before(x.copy())), rel=1e-13)
        np.testing.assert_allclose(r.gradient, unrolled.gradient(x).gradient, rtol=1e-12,
                                   atol=1e-13)
        np.testing.assert_allclose(r.gradient, numerical_gradient(decided_before, x),
                                   rtol=1e-6, atol=1e-8)


def test_what_a_decision_reads_stays_unrolled():
    x_pos, x_neg = np.linspace(0.5, 1.0, 4), np.linspace(-1.0, -0.5, 4)
    plan = ha.compile(decided_after, x_pos, backend="numpy")
    assert _loops(plan) == 0  # (its decision's check would recompute a rolled loop)
    for x in (x_pos, x_neg):
        np.testing.assert_allclose(plan.gradient(x).gradient,
                                   numerical_gradient(decided_after, x), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("f", [rnn, forced, verlet], ids=lambda f: f.__name__)
def test_hvp_and_hessian_through_rolled_loops(f, monkeypatch):
    v = np.cos(np.arange(6.0))
    monkeypatch.setenv("HYBRIDAD_ROLL", "1")
    hr = ha.hvp(f, X0, v, backend="numpy").hvp
    Hr = ha.hessian(f, X0, backend="numpy").hessian
    monkeypatch.setenv("HYBRIDAD_ROLL", "0")
    hu = ha.hvp(f, X0, v, backend="numpy").hvp
    Hu = ha.hessian(f, X0, backend="numpy").hessian
    np.testing.assert_allclose(hr, hu, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(Hr, Hu, rtol=1e-12, atol=1e-13)
    plan = ha.compile(f, X0, backend="numpy")
    fd = np.array([numerical_gradient(lambda x, i=i: plan.gradient(x).gradient[i], X0)
                   for i in range(6)])
    np.testing.assert_allclose(Hr, fd, rtol=1e-5, atol=1e-7)


def test_float32_rolls_in_float32(monkeypatch):
    x = X0.astype(np.float32)
    rolled, unrolled = _plans(verlet, x, "numpy", monkeypatch)
    r, u = rolled.gradient(x), unrolled.gradient(x)
    assert _loops(rolled) >= 1 and r.gradient.dtype == np.float32
    np.testing.assert_allclose(r.gradient, u.gradient, rtol=1e-6, atol=1e-6)


def test_numba_rolled_plan_matches_and_allocates_nothing(monkeypatch):
    rolled, unrolled = _plans(rnn, X0, "numba", monkeypatch)
    assert _loops(rolled) >= 1
    r = ha.GradientResult(X0)
    rolled.gradient(X0, out=r)
    np.testing.assert_allclose(r.gradient, unrolled.gradient(X0).gradient, rtol=1e-12,
                               atol=1e-14)
    np.testing.assert_allclose(r.gradient, numerical_gradient(rnn, X0), rtol=1e-6, atol=1e-8)
    with count_allocations() as counts:
        for _ in range(5):
            rolled.gradient(X0, out=r)
    assert counts.allocations == 0, counts


def test_captured_rows_changed_in_place_are_seen(monkeypatch):
    """Rows of a captured array are per-iteration inputs of the rolled loop;
    changing the array in place is seen by the next call, as unrolled."""
    Xc = X.copy()

    def f(h):
        for k in range(40):
            h = np.tanh(W @ h + U @ Xc[k])
        return np.sum(h ** 2)

    monkeypatch.setenv("HYBRIDAD_ROLL", "1")
    before = ha.gradient(f, X0, backend="numpy").gradient.copy()
    Xc[35] += 1.0
    after = ha.gradient(f, X0, backend="numpy").gradient
    assert not np.allclose(before, after, rtol=1e-3, atol=0)
    monkeypatch.setenv("HYBRIDAD_ROLL", "0")
    np.testing.assert_allclose(after, ha.gradient(f, X0, backend="numpy").gradient,
                               rtol=1e-12, atol=0)
    monkeypatch.setenv("HYBRIDAD_ROLL", "1")
    assert _loops(ha.compile(f, X0, backend="numpy")) >= 1


def test_rows_of_a_large_captured_array_are_read_in_place(monkeypatch):
    """``forcing[k]``, rows of an array a plan reads by reference: the loop's
    per-step input is one view of its memory, so an in-place change is seen
    by the same plan's next call -- as the unrolled plan sees it."""
    forcing = np.random.default_rng(3).standard_normal((2000, 6))  # 96 kB: by reference

    def f(x):
        for k in range(40):
            x = x + 0.05 * (np.tanh(W @ x) + forcing[k])
        return np.sum(x ** 2)

    rolled, unrolled = _plans(f, X0, "numpy", monkeypatch)
    (loop,) = [n for n in rolled.graph.nodes if n.op == "loop" and n.phase == "forward"]
    assert any(a.op == "const" and np.shares_memory(a.attrs["value"], forcing)
               for a in loop.args)
    forcing[10:20] += 0.5
    r, u = rolled.gradient(X0), unrolled.gradient(X0)
    np.testing.assert_allclose(r.gradient, u.gradient, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(r.gradient, numerical_gradient(f, X0), rtol=1e-6, atol=1e-8)


def test_the_default_rolls_heavy_steps_and_long_runs(monkeypatch):
    monkeypatch.undo()  # the library's thresholds
    assert rolling.HEAVY_STEP > 0
    # 40 light elementwise steps (6 states): they fuse into one kernel unrolled,
    # faster so, and quick to compile
    def decay(x):
        for _ in range(40):
            x = x + 0.05 * np.tanh(x * X0)
        return np.sum(x ** 2)
    assert _loops(ha.compile(decay, X0, backend="numpy")) == 0
    # ... but not when a step reads the state at other positions (a reversal, a
    # stencil): unrolled, each step is then a loop nest of its own (a 200-step
    # loop with x[::-1] took 3 s to build so, 0.4 s rolled)
    def shuffled(x):
        for _ in range(40):
            x = x + 0.05 * np.tanh(x[::-1] * X0)
        return np.sum(x ** 2)

    def stencil(x):
        x = x.copy()
        for _ in range(40):
            x[1:-1] += 0.1 * (x[2:] - 2 * x[1:-1] + x[:-2])
        return np.sum(x ** 2)
    for f in (shuffled, stencil):
        plan = ha.compile(f, X0, backend="numpy")
        assert _loops(plan) >= 1
        np.testing.assert_allclose(plan.gradient(X0).gradient, numerical_gradient(f, X0),
                                   rtol=1e-6, atol=1e-8)
    # 40 light steps, each with a product (6 states): rolled -- unrolled, each
    # product is one more loop nest to compile, forward and backward
    assert rolling.ROLL_BREAKS <= 40
    plan = ha.compile(euler, X0, backend="numpy")
    assert _loops(plan) >= 1
    np.testing.assert_allclose(plan.gradient(X0).gradient, numerical_gradient(euler, X0),
                               rtol=1e-6, atol=1e-8)
    # ... but not a few of them (24 products: quick enough to compile unrolled)
    assert _loops(ha.compile(lambda x: euler(x, 24), X0, backend="numpy")) == 0
    # a step with a 100 x 100 matrix-vector product: rolled
    heavy, x100 = _wide_euler(100, 20, 0.05, scale=15, seed=0)
    plan = ha.compile(heavy, x100, backend="numpy")
    assert _loops(plan) >= 1
    g = plan.gradient(x100).gradient
    idx = np.arange(0, 100, 17)
    np.testing.assert_allclose(g[idx], numerical_gradient(heavy, x100)[idx], rtol=1e-6,
                               atol=1e-8)
    # a long run of light steps: Rosenbrock's sum as a Python loop (x[i] and x[i + 1]:
    # the one each step reads was made by the step before), rolled
    def rosen(x):
        s = 0.0
        for i in range(len(x) - 1):
            s = s + 100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2
        return s
    x = np.linspace(-1.2, 1.1, 300)
    plan = ha.compile(rosen, x, backend="numpy")
    assert _loops(plan) >= 1 and len(plan.graph.nodes) < 200
    r = plan.gradient(x)
    from scipy.optimize import rosen as rosen_ref, rosen_der
    assert float(r.value) == pytest.approx(rosen_ref(x), rel=1e-13)
    np.testing.assert_allclose(r.gradient, rosen_der(x), rtol=1e-12, atol=1e-12)


def test_rk4_steps_roll_and_their_hessian_matches(monkeypatch):
    """An RK4 step calls the right-hand side four times: its nodes repeat
    inside the step, and the step's period is found past them."""
    def rhs(x):
        return np.tanh(W @ x) - 0.1 * x

    def rk4(x, dt=0.05):
        for _ in range(40):
            k1 = rhs(x)
            k2 = rhs(x + 0.5 * dt * k1)
            k3 = rhs(x + 0.5 * dt * k2)
            k4 = rhs(x + dt * k3)
            x = x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        return np.sum(x ** 2)

    monkeypatch.setenv("HYBRIDAD_ROLL", "1")
    rolled = ha.compile(rk4, X0, hessian=True, backend="numpy")
    monkeypatch.setenv("HYBRIDAD_ROLL", "0")
    unrolled = ha.compile(rk4, X0, hessian=True, backend="numpy")
    assert _loops(rolled) >= 1 and len(rolled.graph.nodes) < len(unrolled.graph.nodes) / 5
    # every step in the loop, the first too (it reads the argument, and makes the
    # literals the later steps share)
    assert {n.attrs["length"] for n in rolled.graph.nodes if n.op == "loop"} == {40}
    np.testing.assert_allclose(rolled.hessian(X0).hessian, unrolled.hessian(X0).hessian,
                               rtol=1e-12, atol=1e-13)


def test_a_light_step_is_not_rolled_several_steps_at_a_time(monkeypatch):
    """A run too light to roll one step at a time (a 50 x 50 Euler step:
    2500 multiply-adds, under thresholds set above it; 100 steps, 600 nodes)
    is not rolled as a body of four steps either (the per-step cost would be
    hidden, not paid less); rolled (the library's thresholds), its body is
    one step."""
    monkeypatch.undo()
    f, x50 = _wide_euler(50, 100, 0.01, scale=8, seed=1)
    monkeypatch.setattr(rolling, "ROLL_BREAKS", 10 ** 9)
    monkeypatch.setattr(rolling, "LONG_RUN", 10 ** 9)
    monkeypatch.setattr(rolling, "HEAVY_STEP", 10 ** 4)
    assert _loops(ha.compile(f, x50, backend="numpy")) == 0
    monkeypatch.undo()
    plan = ha.compile(f, x50, backend="numpy")
    (loop,) = [n for n in plan.graph.nodes if n.op == "loop" and n.phase == "forward"]
    assert loop.attrs["length"] == 100
    assert sum(n.op == "matmul" for n in loop.attrs["body"].graph.nodes) == 1


def wide_stack(x):  # a node with more operands than the matcher's arrays hold
    for _ in range(30):
        parts = [x[i:i + 1] * (1.0 + 0.01 * i) for i in range(6)]
        x = np.tanh(np.concatenate(parts + [x[6:], x[:0], x[:0], x[:0], x[:0]]))
    return np.sum(x ** 2)


@pytest.mark.parametrize("f", ROLLED + [growing, wide_stack], ids=lambda f: f.__name__)
def test_the_whole_array_search_is_the_node_by_node_definition(f):
    """The search for runs compares every node with its copy one period on
    with arrays (``_Matcher.matches``, ``_invariant_cut``): for every
    candidate period of real traces -- and nodes with more operands than the
    arrays hold -- it answers what ``_Matcher.match`` and the scalar trim
    answer node by node."""

    checked, cuts = [], [0]
    real = rolling.roll_loops

    def check(trace, outs, fixed=frozenset()):  # before rolling (which rewires the nodes)
        outs = row_writes.forward_row_writes(trace, list(outs))  # (as roll_loops)
        nodes = list(trace.nodes)
        m = rolling_runs._Matcher(nodes, {})
        # the nodes a replayed call made, described by their step's first node: the
        # same partition of the nodes into kinds, constants and attributes
        fast = rolling_runs._Matcher(nodes, {}, frozenset(), trace.steps, trace.rows)
        assert trace.steps, "no replayed call in the trace"
        assert bool(trace.rows) == (f in (traced_rows, reversed_rows))  # (numbered, by i)

        def partition(values):
            first = {}
            return [first.setdefault(v, i) for i, v in enumerate(values)]

        args, const, keys, _ = m._tables()
        fargs, fconst, fkeys, _ = fast._tables()
        assert partition(fast.sig) == partition(m.sig)
        assert (fconst == const).all() and (fargs == args).all()
        other = ~const
        assert partition(fkeys[other].tolist()) == partition(keys[other].tolist())
        wide = [i for i, n in enumerate(nodes) if len(n.args) > m.WIDE]
        periods = rolling_runs._periods(m.sig_array)
        for p in periods:
            ok = m.matches(p)
            want = [m.match(i, p) is not None for i in range(len(nodes) - p)]
            assert ok.tolist() == want, p
            i = 0
            while i < len(ok):  # each stretch of copies, and each of its later starts
                j = i
                while j < len(ok) and ok[j]:
                    j += 1
                for s in range(i, max(i, j - p), max(1, p // 3)):
                    end = s + ((j - s) // p + 1) * p
                    assert rolling_runs._invariant_cut(m, s, p, end) == \
                        rolling_runs._node_cut(m, s, p, end, range(s, end)), (p, s)
                    cuts[0] += 1
                i = j + 1
        checked.append((len(periods), len(wide)))
        return real(trace, outs, fixed)
    rolling.roll_loops = check
    try:
        ha.compile(f, X0, backend="numpy")
    finally:
        rolling.roll_loops = real
    assert checked and all(k > 0 for k, _ in checked) and (cuts[0] > 0 or f is growing)
    assert f is not wide_stack or all(w > 0 for _, w in checked)


def test_nodes_a_roll_took_out_are_not_found_again():
    """After a roll, an op identical to one of the run's (now gone) nodes is
    a new node of the trace, not the one the loop replaced; the live nodes
    are still found (an op of them, a small literal), and the memo holds
    nothing else."""
    from hybridad.core.trace import Trace

    trace = Trace()
    with trace:
        x = trace.input(0, (6,), np.float64)
        before, half = np.cos(x), trace.const(np.float64(0.5), True)
        h = x
        for _ in range(40):
            h = np.tanh(W @ h)
        (out,) = rolling.roll_loops(trace, [(np.sum(h) + np.sum(before) * 0.5).node])
        assert any(n.op == "loop" for n in trace.nodes)
        again = np.tanh(W @ x)  # iteration 0's nodes, as traced before the roll
        assert np.cos(x).node is before.node
        assert trace.const(np.float64(0.5), True) is half
    live = {id(n) for n in trace.nodes}
    assert id(again.node) in live and id(again.node.args[0]) in live
    assert all(id(n) in live for n in trace._seen.values())
    assert len(trace._seen) < 30  # (of the 40 steps' nodes: none)


def _stacked(kind, T):
    def f(x):
        xs = []
        for _ in range(T):
            x = np.cos(x) * 0.9 + 0.1 * np.tanh(W @ x)
            xs.append(x)
        Y = {"stack": lambda: np.stack(xs), "array": lambda: np.array(xs),
             "vstack": lambda: np.vstack(xs),
             "concatenate": lambda: np.concatenate(xs).reshape(len(xs), -1),
             "every_other": lambda: np.stack(xs[1::2]),
             "reversed": lambda: np.stack(xs[::-1])}[kind]()
        return np.sum(Y ** 2 * np.arange(Y.shape[0])[:, None]) + np.sum(Y[3] * x)
    return f


@pytest.mark.parametrize("kind", ["stack", "array", "vstack", "concatenate", "every_other",
                                  "reversed"])
def test_the_states_a_loop_stacked_are_one_view_of_its_output(kind, monkeypatch):
    """``np.stack(xs)`` of the states a rolled loop appended to ``xs`` is the
    loop's stacked output (a view), not a copy per step: the graph does not
    grow with the steps (a program of a loop nest per step took 14 s of LLVM
    at 300 steps), and the plan matches the unrolled one and differences."""
    sizes = []
    for T in (40, 80):
        rolled, unrolled = _plans(_stacked(kind, T), X0, "numpy", monkeypatch)
        sizes.append(len(rolled.graph.nodes))
        assert not any(n.op == "concatenate" for n in rolled.graph.nodes)
        r, u = rolled.gradient(X0), unrolled.gradient(X0)
        assert float(r.value) == pytest.approx(float(u.value), rel=1e-13)
        np.testing.assert_allclose(r.gradient, u.gradient, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(r.gradient, numerical_gradient(_stacked(kind, 80), X0),
                               rtol=1e-6, atol=1e-8)
    assert sizes[0] == sizes[1]


def _built_traced(f, x):
    """``f``'s numpy plan at ``x``, and the bytes tracemalloc counted while it
    was built: (plan, held after, peak)."""
    import tracemalloc

    tracemalloc.start()
    try:
        plan = ha.compile(f, x, backend="numpy")
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return plan, held, peak


def test_a_large_states_rolled_loop_lays_out_no_array_of_its_packed_output(monkeypatch):
    """Whether numpy would copy a view (a reshape of a loop's packed output)
    is asked of the strides, not of an array of positions the size of what
    is viewed: 300 steps of a 10^5-point grid laid out 3 x 10^7 positions
    (240 MB, most of the trace's time) for each view of the loop's output."""
    def f(u):
        u = u.copy()
        for _ in range(300):
            u[1:-1] += 0.2 * (u[2:] - 2 * u[1:-1] + u[:-2])
        return np.sum(u ** 2)

    plan, _, peak = _built_traced(f, np.sin(np.linspace(0.0, np.pi, 100_000)))
    assert _loops(plan) == 2
    assert peak < 40e6, f"{peak / 1e6:.0f} MB while building"
    small = np.sin(np.linspace(0.0, np.pi, 12))
    np.testing.assert_allclose(ha.compile(f, small, backend="numpy").gradient(small).gradient,
                               numerical_gradient(f, small), rtol=1e-6, atol=1e-8)


def test_a_loops_rows_of_a_captured_array_are_held_by_reference(monkeypatch):
    """The rows ``forcing[k]`` a rolled loop reads are one strided view of
    the captured array: the plan's graph signature names it by reference
    (it was signed by its bytes, a copy the plan kept: 80 MB here), and a
    change to the array in place is still seen."""
    n, T = 50_000, 200
    forcing = np.random.default_rng(5).standard_normal((T, n))

    def f(x):
        for k in range(T):
            x = x + 0.01 * (np.tanh(x) + forcing[k])
        return np.sum(x ** 2)

    x = np.linspace(-1.0, 1.0, n)
    plan, held, _ = _built_traced(f, x)
    assert _loops(plan) == 2
    assert held < plan.memory.total_bytes + 20e6, f"{held / 1e6:.0f} MB held"
    forcing[7] += 1.0
    np.testing.assert_allclose(plan.gradient(x).value, f(x), rtol=1e-12)


_STEP_OPS = ("tanh", "sin", "matmul", "roll", "stencil_in_place", "strided_in_place",
             "normalized", "forcing_row", "time", "where", "cumsum", "flip", "concatenate",
             "outer", "max", "vecmat", "two_products")


def _random_loop(seed):
    """T steps of a random body of a few ops (elementwise, products, rolls,
    slices written in place, reductions, rows of a captured array, a time
    per step), on one or two carries; and whether every op is smooth."""
    rng = np.random.default_rng(seed)
    n, T = int(rng.integers(3, 7)), int(rng.integers(8, 25))
    W = rng.standard_normal((n, n)) / n
    F = rng.standard_normal((T + 2, n)) * 0.1
    body = [_STEP_OPS[int(i)] for i in rng.integers(0, len(_STEP_OPS), int(rng.integers(1, 5)))]
    two = rng.random() < 0.3

    def step(u, v, k):
        for op in body:
            if op == "tanh":
                u = np.tanh(u) * 0.95 + 0.01
            elif op == "sin":
                u = u + 0.1 * np.sin(u * v)
            elif op == "matmul":
                u = 0.5 * u + 0.5 * np.tanh(W @ u)
            elif op == "roll":
                u = 0.8 * u + 0.1 * (np.roll(u, 1) + np.roll(u, -1))
            elif op == "stencil_in_place":
                u = u.copy()
                u[1:-1] += 0.1 * (u[2:] - 2 * u[1:-1] + u[:-2])
            elif op == "strided_in_place":
                u = u.copy()
                u[::2] *= 0.9
            elif op == "normalized":
                u = u / (1.0 + 0.1 * np.sum(u ** 2))
            elif op == "forcing_row":
                u = u + F[k]
            elif op == "time":
                u = u * (1.0 - 0.01 * np.cos(0.1 * k))
            elif op == "where":
                u = np.where(u > 0.1, u, 0.5 * u)
            elif op == "cumsum":
                u = 0.9 * u + 0.01 * np.cumsum(u)
            elif op == "flip":
                u = 0.7 * u + 0.3 * u[::-1]
            elif op == "concatenate":
                u = np.concatenate([u[1:], u[:1]]) * 0.5 + 0.5 * u
            elif op == "vecmat":  # (a product of either side: one node while rolled)
                u = 0.5 * u + 0.5 * np.sin(u @ W)
            elif op == "two_products":  # (a carry's products, one of the other carry)
                u = u + 0.1 * np.tanh(W @ u) * (W.T @ v)
            elif op == "outer":
                u = u + 0.01 * np.sum(np.outer(u, v), axis=1)
            else:
                u = u - 0.1 * np.max(u)
        return u, (0.9 * v + 0.1 * u if two else v)

    def f(x):
        u, v = x[:n] * 1.0, x[-n:] * 0.5 + 0.1
        for k in range(T):
            u, v = step(u, v, k)
        return np.sum(u ** 2) + np.sum(v * u)
    return f, n, not {"where", "max"} & set(body)


@pytest.mark.parametrize("first", range(0, 120, 30))
def test_random_loop_bodies_roll_as_traced(first, monkeypatch):
    """Random step bodies: the rolled plan gives the unrolled plan's value
    and gradient (to rounding) and, where every op is smooth, central
    differences'; most of them roll."""
    loops = 0
    for seed in range(first, first + 30):
        f, n, smooth = _random_loop(seed)
        x = np.linspace(-0.8, 0.9, 2 * n)
        rolled, unrolled = _plans(f, x, "numpy", monkeypatch)
        loops += _loops(rolled) > 0
        r, u = rolled.gradient(x), unrolled.gradient(x)
        assert float(r.value) == pytest.approx(float(f(x.copy())), rel=1e-12), seed
        assert float(r.value) == pytest.approx(float(u.value), rel=1e-13), seed
        np.testing.assert_allclose(r.gradient, u.gradient, rtol=1e-11, atol=1e-13,
                                   err_msg=f"seed {seed}")
        if smooth:
            np.testing.assert_allclose(r.gradient, numerical_gradient(f, x), rtol=1e-6,
                                       atol=1e-8, err_msg=f"seed {seed}")
    assert loops >= 20


def test_a_step_that_differs_every_kth_iteration_rolls_k_steps_at_a_time(monkeypatch):
    """``if k % 10 == 0`` in a loop: ten steps repeat, the first different
    (its nodes, each once a period, show the period; each of the other
    steps' kinds recurs ten times a period, past what the search compares).
    It was left unrolled: 1000 steps built in 18 s."""
    def f(x, T=120):
        for k in range(T):
            x = np.tanh(W @ x) * 0.5 + 0.5 * x
            if k % 10 == 0:
                x = x + 0.01 * np.cos(x)
        return np.sum(x ** 2)
    rolled, unrolled = _plans(f, X0, "numpy", monkeypatch)
    (loop,) = [n for n in rolled.graph.nodes if n.op == "loop" and n.phase == "forward"]
    assert loop.attrs["length"] == 12
    r, u = rolled.gradient(X0), unrolled.gradient(X0)
    assert float(r.value) == pytest.approx(float(u.value), rel=1e-13)
    np.testing.assert_allclose(r.gradient, u.gradient, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(r.gradient, numerical_gradient(f, X0), rtol=1e-6, atol=1e-8)


def _tree_close(a, b, **tol):
    for x, y in zip(_leaves_of(a), _leaves_of(b), strict=True):
        np.testing.assert_allclose(x, y, **tol)


def _leaves_of(tree):
    """The arrays of a gradient's pytree (tuples, lists, dicts), in order."""
    if isinstance(tree, dict):
        return [leaf for k in sorted(tree) for leaf in _leaves_of(tree[k])]
    if isinstance(tree, (list, tuple)):
        return [leaf for t in tree for leaf in _leaves_of(t)]
    return [np.asarray(tree)]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_loop_over_a_list_argument_rolls_with_it_stacked(backend, monkeypatch):
    """``for W, b in zip(Ws, bs)`` with ``Ws``, ``bs`` lists of f's arguments
    (a network of equal layers, a control per step): each iteration reads
    other arguments, so the copies differ by them; the loop reads them
    stacked, a row an iteration.  It stayed unrolled (T x the nodes).  Against
    the unrolled plan of the numpy reference and central differences."""
    rng = np.random.default_rng(11)
    n, T = 4, 48
    x = rng.standard_normal(n)
    Ws = [rng.standard_normal((n, n)) / n for _ in range(T)]
    bs = [rng.standard_normal(n) * 0.1 for _ in range(T)]
    gains = [np.float64(0.5 + 0.004 * k) for k in range(T)]

    def layers(x, Ws, bs):
        for W, b in zip(Ws, bs, strict=True):
            x = np.tanh(W @ x + b) * 0.5 + 0.5 * x
        return np.sum(x ** 2)

    def left(x, p):  # (a dict of lists; products from the left)
        for W, b in zip(p["W"], p["b"], strict=True):
            x = 0.5 * np.sin(x @ W) + b
        return np.sum(x ** 2)

    def gained(x, gains):  # (0-d arguments)
        for _ in range(4):
            for g in gains:
                x = np.tanh(x) * g + 0.1 * x
        return np.sum(x ** 2)

    repeated = [Ws[0]] * 3 + Ws[3:]  # (one array at several iterations, and one throughout)
    cases = [(layers, (x, Ws, bs), (0, 1, 2)), (layers, (x, repeated, [bs[0]] * T), (0, 1, 2)),
             (left, (x, {"W": Ws, "b": bs}), (0, 1)), (gained, (x, gains), (0, 1))]
    for f, args, argnums in cases if backend == "numpy" else cases[:1]:  # (numba: 6 s each)
        # (the reference: the numpy plan unrolled; numba's unrolled took a minute)
        rolled, unrolled = _plans(f, args, backend, monkeypatch, unrolled_backend="numpy",
                                  argnums=argnums)
        lengths = [n.attrs["length"] for n in rolled.graph.nodes if n.op == "loop"]
        assert max(lengths) >= T - 4 and _loops(unrolled) == 0
        r, u = rolled.gradient(*args), unrolled.gradient(*args)
        assert float(r.value) == pytest.approx(float(f(*args)), rel=1e-12)
        _tree_close(r.gradient, u.gradient, rtol=1e-11, atol=1e-13)
        np.testing.assert_allclose(r.gradient[0], numerical_gradient(lambda v: f(v, *args[1:]),
                                                                     args[0]),
                                   rtol=1e-6, atol=1e-8)
        # one weight past the repeated ones, against central differences
        leaves = _leaves_of(args[1])
        k = len(leaves) // 2 + 1
        flat = np.concatenate([np.ravel(g) for g in _leaves_of(r.gradient[1])])
        start = sum(leaf.size for leaf in leaves[:k])

        def at(v, k=k, f=f, args=args, leaves=leaves):
            new = iter([v if j == k else a for j, a in enumerate(leaves)])
            return f(args[0], _rebuilt(args[1], new), *args[2:])
        np.testing.assert_allclose(flat[start:start + leaves[k].size],
                                   numerical_gradient(at, leaves[k]).ravel(), rtol=1e-6,
                                   atol=1e-8)
        if backend == "numba":  # (the stack is the arena's: a call allocates nothing)
            out = ha.GradientResult(tuple(args[i] for i in argnums))
            assert_no_alloc(rolled.gradient, *args, out=out, n=3, warmup=1)


def test_a_list_argument_too_large_to_stack_stays_unrolled(monkeypatch):
    """Arguments a loop reads one a step are fed to it stacked -- a copy each
    call; where that copy would exceed the carries the loop stores and
    ``rolling.FED_BYTES`` (big layers: the unrolled plan reads each in place),
    the loop stays unrolled."""
    rng = np.random.default_rng(12)
    n, T = 4, 48
    x = rng.standard_normal(n)
    Ws = [rng.standard_normal((n, n)) / n for _ in range(T)]  # (48 x 128 B: 6 kB)

    def layers(x, Ws):
        for W in Ws:
            x = np.tanh(W @ x) * 0.5 + 0.5 * x
        return np.sum(x ** 2)
    monkeypatch.setattr(rolling, "FED_BYTES", 1000)  # (over the carries' 1.5 kB too)
    plan = ha.compile(layers, x, Ws, argnums=(0, 1), backend="numpy")
    assert _loops(plan) == 0
    monkeypatch.setattr(rolling, "FED_BYTES", 10_000)
    plan = ha.compile(layers, x, Ws, argnums=(0, 1), backend="numpy")
    assert _loops(plan) >= 1
    assert float(plan.gradient(x, Ws).value) == pytest.approx(float(layers(x, Ws)), rel=1e-12)


def _rebuilt(tree, flat):
    if isinstance(tree, dict):
        return {k: _rebuilt(tree[k], flat) for k in sorted(tree)}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_rebuilt(t, flat) for t in tree)
    return next(flat)


def _pendulum(use_time):
    """RK4 of a forced pendulum, 120 steps; ``use_time``: the forcing
    ``A cos(0.7 t)`` at the step's three times ``t, t + h/2, t + h``."""
    h = 0.05

    def rhs(t, y, c, a):
        forcing = np.cos(0.7 * t) if use_time else 0.5
        return np.stack([y[1], -c * y[1] - np.sin(y[0]) + a * forcing])

    def f(p):
        y, c, a = p[:2], p[2], p[3]
        for k in range(120):
            t = k * h
            k1 = rhs(t, y, c, a)
            k2 = rhs(t + h / 2, y + h / 2 * k1, c, a)
            k3 = rhs(t + h / 2, y + h / 2 * k2, c, a)
            k4 = rhs(t + h, y + h * k3, c, a)
            y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        return y[0] ** 2 + y[1]
    return f


@pytest.mark.parametrize("use_time", [False, True])
def test_a_steps_own_constants_merged_with_the_next_steps_still_roll(use_time, monkeypatch):
    """A step's ``A cos(0.7 (t + h))`` equals the next step's ``A cos(0.7 t)`` to
    the bit in most steps but not all (rounding of ``k h + h`` against
    ``(k + 1) h``): the trace merged the equal ones, and the run broke at each
    step that made its own (18 loops and 4274 nodes, 5.6 s to build).  One
    forward loop and its adjoint now, as without the time."""
    monkeypatch.undo()  # (the library's thresholds)
    f, p = _pendulum(use_time), np.array([0.3, 0.0, 0.2, 1.1])
    rolled, unrolled = _plans(f, p, "numpy", monkeypatch)
    assert _loops(rolled) == 2 and _loops(unrolled) == 0
    assert len(rolled.graph.nodes) < 200
    r, u = rolled.gradient(p), unrolled.gradient(p)
    np.testing.assert_allclose(r.gradient, u.gradient, rtol=1e-12, atol=1e-13)
    v = np.array([0.5, -1.0, 0.25, 2.0])
    rolled, unrolled = _plans(f, p, "numpy", monkeypatch, hvp=True)
    np.testing.assert_allclose(rolled.hvp(p, v=v).hvp, unrolled.hvp(p, v=v).hvp, rtol=1e-11,
                               atol=1e-12)
