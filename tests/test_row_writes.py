"""Rows written one at a time (``out[k] = x``, ``X[k + 1] = step(X[k])``),
columns (``X[:, k] = x``) and parts of either (``U[k + 1, 1:-1] = ...``,
``U[1:-1, k + 1] = ...``, through the views ``U[k + 1]``): each slab read
from the write that made it, the array read whole as the stack of its slabs
(hybridad.transforms.row_writes), so that a loop that records its states
into an array made before it builds and runs in time linear in its steps.
Every form is checked against the same function's plan with the writes left
as traced (``HYBRIDAD_ROLL=0``: no forwarding, no rolling), numpy's value
and central differences."""

from __future__ import annotations

import numpy as np
import pytest

import hybridad as ha
from hybridad.testing import assert_no_alloc, numerical_gradient
from hybridad.transforms import rolling

RNG = np.random.default_rng(11)
W = RNG.standard_normal((5, 5)) / 3
X0 = np.linspace(-1.0, 1.0, 5)


@pytest.fixture(autouse=True)
def roll_small_steps(monkeypatch):
    monkeypatch.setattr(rolling, "HEAVY_STEP", 0)  # (every run rolls: tests/test_rolling.py)


def step(x):
    return np.tanh(W @ x) + 0.1 * x


def recorded(x, T=30):  # every state into a row of an array made before the loop
    out = np.zeros((T, 5))
    for k in range(T):
        x = step(x)
        out[k] = x
    return np.sum(out ** 2 * np.arange(1.0, T + 1)[:, None])


def recurrence(x, T=30):  # each step reads the row the step before wrote
    X = np.zeros((T + 1, 5))
    X[0] = x
    for k in range(T):
        X[k + 1, :] = step(X[k])
    return np.sum(np.sin(X)) + np.sum(X[-1] ** 2)


def scalars(x, T=30):  # a number per step into a 1-d array, negative indices too
    y = np.zeros(T + 1)
    for k in range(T):
        x = step(x)
        y[k - T] = np.sum(x) * (k + 1)
    y[-1] = 2.0
    return np.sum(y ** 2) + y[3] * y[7]


def partial(x, T=30):  # every other row written, some twice, read before and after
    out = np.ones((2 * T, 5))
    for k in range(T):
        x = step(x)
        out[2 * k] = x
        if k % 7 == 3:
            out[2 * k] = out[2 * k] * 0.5 + out[2 * k + 1]
    return np.sum(out ** 3) + np.sum(out[5] * x)


def read_whole(x, T=12):  # the array read whole at every step: left as traced
    out = np.zeros((T, 5))
    s = 0.0
    for k in range(T):
        x = step(x) + 0.01 * np.sum(out)
        out[k] = x
        s = s + np.sum(out ** 2)
    return s


def forked(x, T=12):  # two arrays from one: each with its own writes
    a = np.zeros((T, 5))
    for k in range(T // 2):
        x = step(x)
        a[k] = x
    b = a.copy()
    for k in range(T // 2, T):
        x = step(x)
        a[k] = x
        b[k] = -x
    return np.sum(a ** 2) + np.sum(np.cos(b))


def cube(x, T=20):  # rows of a 3-d array, written from a broadcast value
    out = np.zeros((T, 2, 5))
    for k in range(T):
        x = step(x)
        if k % 2:
            out[k, ...] = x * np.array([[1.0], [0.5]])
        else:
            out[k, :, :] = x * np.array([[1.0], [0.5]])
    return np.sum(out ** 2)


def accumulated(x, T=24):  # rows updated in place (`acc[k] += x`: a write through the row)
    acc = np.zeros((6, 5))
    for k in range(T):
        x = step(x)
        acc[k % 6] += x
        acc[(k + 1) % 6] *= 0.5
        acc[k % 6] = acc[k % 6]  # (numpy's own write-back, written out: nothing changes)
    return np.sum(acc ** 2)


def stencil_rows(x, T=30):  # an explicit scheme: U[k + 1, 1:-1] = ..., boundaries first
    U = np.zeros((T + 1, 5))
    U[0] = x
    for k in range(T):
        U[k + 1, 0] = np.tanh(U[k, 1])
        U[k + 1, -1] = 0.5 * U[k, -1]
        U[k + 1, 1:-1] = U[k, 1:-1] + 0.2 * (U[k, 2:] - 2 * U[k, 1:-1] + U[k, :-2]) ** 3
    return np.sum(U ** 2) + np.sum(U[:, 2] * U[:, 1])


def stencil_columns(x, T=30):  # the same with time along the second axis, boundaries last
    U = np.zeros((5, T + 1))
    U[:, 0] = x
    for k in range(T):
        U[1:-1, k + 1] = U[1:-1, k] + 0.2 * np.sin(U[2:, k] - 2 * U[1:-1, k] + U[:-2, k])
        U[0, k + 1] = U[1, k + 1] * 0.5
        U[-1, k + 1] = U[-2, k]
    return np.sum(U ** 2) + np.sum(U[3] * U[1])


def columns(x, T=30):  # every state into a column, from the last one backwards
    X = np.empty((5, T))
    for k in range(T):
        x = step(x)
        X[:, T - 1 - k] = x
    return np.sum(X ** 2 * np.arange(1.0, T + 1))


def row_views(x, T=30):  # through views of the rows: new = U[k + 1]; new[1:-1] = ...
    U = np.zeros((T + 1, 5))
    U[0] = x
    for k in range(T):
        new, old = U[k + 1], U[k]
        new[1:-1] = np.tanh(old[1:-1]) + 0.3 * old[2:] * old[:-2]
        new[0], new[-1] = old[-1], old[0]
    return np.sum(U ** 2)


def chained(x, T=30):  # U[k + 1][1:-1] = ...: a write into the row numpy hands back
    U = np.zeros((T + 1, 5))
    U[0] = x
    for k in range(T):
        U[k + 1][1:-1] = np.tanh(U[k][1:-1]) + 0.1 * U[k][2:]
        U[k + 1][::4] = U[k][::4] * 0.9
    return np.sum(U ** 2)


def elements(x, T=5):  # a matrix element by element, then both axes written into one array
    A = np.zeros((T, 5))
    for i in range(T):
        for j in range(5):
            A[i, j] = x[j] * np.sin(x[(i + j) % 5]) + i
    A[:, 1] = A[:, 1] ** 2  # (a column after rows: the chain left as traced)
    A[2] = A[2] - A[:, 3].sum()
    return np.sum(A ** 2) + np.sum(A @ x)


FORMS = [recorded, recurrence, scalars, partial, read_whole, forked, cube, accumulated,
         stencil_rows, stencil_columns, columns, row_views, chained, elements]


def _plans(f, monkeypatch, x=X0, **kw):
    """The rolled plan of ``f`` at ``x`` and the plan of its writes as traced."""
    monkeypatch.setenv("HYBRIDAD_ROLL", "1")
    rolled = ha.compile(f, x, backend="numpy", **kw)
    monkeypatch.setenv("HYBRIDAD_ROLL", "0")
    traced = ha.compile(f, x, backend="numpy", **kw)
    monkeypatch.delenv("HYBRIDAD_ROLL")
    return rolled, traced


@pytest.mark.parametrize("f", FORMS, ids=lambda f: f.__name__)
def test_rows_forwarded_match_the_writes_as_traced(f, monkeypatch):
    rolled, traced = _plans(f, monkeypatch)
    r, t = rolled.gradient(X0), traced.gradient(X0)
    assert float(r.value) == pytest.approx(float(f(X0.copy())), rel=1e-13)
    assert float(r.value) == pytest.approx(float(t.value), rel=1e-13)
    np.testing.assert_allclose(r.gradient, t.gradient, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(r.gradient, numerical_gradient(f, X0), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("f", [recorded, recurrence, scalars, stencil_rows, stencil_columns,
                               columns, row_views, chained], ids=lambda f: f.__name__)
def test_a_recorded_loop_rolls_and_does_not_grow_with_its_steps(f, monkeypatch):
    sizes = []
    for T in (30, 60):
        plan = ha.compile(lambda x, T=T: f(x, T), X0, backend="numpy")
        assert sum(n.op == "loop" for n in plan.graph.nodes) == 2
        assert all(len(n.args) <= 6 for n in plan.graph.nodes if n.op == "concatenate")
        consts = sum(n.size for n in plan.graph.nodes if n.op == "const")
        assert consts < 40 * T  # (no index array the size of the record per step)
        sizes.append(len(plan.graph.nodes))
    assert sizes[0] == sizes[1]
    np.testing.assert_allclose(plan.gradient(X0).gradient,
                               numerical_gradient(lambda x: f(x, 60), X0),
                               rtol=1e-6, atol=1e-8)


def test_hvp_through_forwarded_rows(monkeypatch):
    rolled, traced = _plans(recurrence, monkeypatch, hvp=True)
    v = np.cos(np.arange(5.0))
    a, b = rolled.hvp(X0, v=v), traced.hvp(X0, v=v)
    np.testing.assert_allclose(a.hvp, b.hvp, rtol=1e-11, atol=1e-12)


def test_a_state_written_at_its_boundaries_reads_the_rest_as_one_slice(monkeypatch):
    """A state whose boundaries a step writes (``u[0] = ...; u[-1] = 0``)
    before its stencil: the state after the writes is the written values and
    one slice of the rest between them, not a part per point (a state of 10^3
    points took 3039 nodes so, and 2 s to build at 200 steps)."""
    def f(u, T=40):
        u = u.copy()
        for _ in range(T):
            u[0] = 0.5 * u[1]
            u[-1] = 0.0
            u[1:-1] += 0.2 * (u[2:] - 2 * u[1:-1] + u[:-2])
        return np.sum(u ** 2)

    u0 = np.sin(np.linspace(0.0, 3.0, 200))
    rolled, traced = _plans(f, monkeypatch, u0)
    assert any(n.op == "loop" for n in rolled.graph.nodes) and len(rolled.graph.nodes) < 100
    assert all(len(n.args) <= 6 for n in rolled.graph.nodes if n.op == "concatenate")
    r, t = rolled.gradient(u0), traced.gradient(u0)
    assert float(r.value) == pytest.approx(float(f(u0)), rel=1e-13)
    np.testing.assert_allclose(r.gradient, t.gradient, rtol=1e-12, atol=1e-13)
    idx = [0, 1, 2, 77, 198, 199]
    np.testing.assert_allclose(r.gradient[idx], numerical_gradient(f, u0)[idx], rtol=1e-6,
                               atol=1e-8)


@pytest.mark.parametrize("f", [recorded, recurrence, accumulated, stencil_columns],
                         ids=lambda f: f.__name__)
def test_numba_plan_of_a_recorded_loop_allocates_nothing(f):
    plan = ha.compile(f, X0)  # (the defaults: numba, tiers)
    out = ha.GradientResult(X0)
    plan.gradient(X0, out=out)
    assert float(out.value) == pytest.approx(float(f(X0.copy())), rel=1e-13)
    np.testing.assert_allclose(out.gradient, numerical_gradient(f, X0), rtol=1e-6, atol=1e-8)
    assert_no_alloc(plan.gradient, X0, out=out, n=3, warmup=2)


def _records32(x, T=30):  # (states recorded into rows)
    out = np.zeros((T, 5), dtype=x.dtype)
    w = W.astype(x.dtype)
    for k in range(T):
        x = np.tanh(w @ x) + x.dtype.type(0.1) * x
        out[k] = x
    return np.sum(out ** 2)


def _columns32(x, T=30):  # (a column scheme, U[1:-1, k + 1] = ..., with boundaries)
    U = np.zeros((5, T + 1), dtype=x.dtype)
    U[:, 0] = x
    r = x.dtype.type(0.2)
    for k in range(T):
        U[1:-1, k + 1] = U[1:-1, k] + r * np.sin(U[2:, k] - 2 * U[1:-1, k] + U[:-2, k])
        U[0, k + 1] = U[1, k + 1] * x.dtype.type(0.5)
        U[-1, k + 1] = U[-2, k]
    return np.sum(U ** 2)


@pytest.mark.parametrize("f", [_records32, _columns32], ids=["records", "columns"])
def test_float32_schemes_stay_float32(f, monkeypatch):
    """Writes of float32 states into rows or columns: float32 results, numpy's
    value, the rolled plan as the writes traced, the float64 gradient to
    float32's precision."""
    x = X0.astype(np.float32)
    rolled, traced = _plans(f, monkeypatch, x)
    assert any(n.op == "loop" for n in rolled.graph.nodes)
    r, t = rolled.gradient(x), traced.gradient(x)
    assert r.gradient.dtype == np.float32 and np.asarray(r.value).dtype == np.float32
    assert float(r.value) == pytest.approx(float(f(x.copy())), rel=1e-5)
    np.testing.assert_allclose(r.gradient, t.gradient, rtol=1e-5, atol=1e-6)
    g64 = ha.compile(f, X0, backend="numpy").gradient(X0).gradient
    np.testing.assert_allclose(r.gradient, g64, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("index", [3, (3, slice(1, None)), (slice(None), 5), (1, -6),
                                   (Ellipsis, 7)])
def test_writes_out_of_range_raise_as_numpy(index):
    def f(x):
        out = np.zeros((3, 5))
        out[index] = x[0]
        return np.sum(out)
    with pytest.raises(IndexError, match="out of bounds"):
        np.zeros((3, 5))[index] = 1.0
    with pytest.raises(IndexError, match="out of bounds"):
        ha.gradient(f, X0)


def _random_scheme(seed):
    """A loop of T steps writing slabs of one array (rows or columns; whole,
    part, one element; at k, k + 1 or -(k + 1); ``=`` or ``+=``), each from
    the slab before it, the argument or both -- sometimes reading the whole
    array inside the loop too."""
    rng = np.random.default_rng(seed)
    T, n, axis = int(rng.integers(10, 30)), int(rng.integers(2, 6)), int(rng.integers(0, 2))
    writes = []
    for _ in range(int(rng.integers(1, 4))):
        part = [slice(None), slice(1, None), slice(None, -1), int(rng.integers(-n, n)),
                slice(None, None, 2)][int(rng.integers(0, 5))]
        writes.append((("k1", "k", "negk")[int(rng.integers(0, 3))], part,
                       ("prev", "x", "both")[int(rng.integers(0, 3))], bool(rng.integers(0, 2))))
    inside = rng.random() < 0.2

    def f(x):
        U = np.zeros((T + 1, n) if axis == 0 else (n, T + 1))

        def at(j, part):
            return (j, part) if axis == 0 else (part, j)
        U[at(0, slice(None))] = x[:n]
        s = 0.0
        for k in range(T):
            for which, part, src, add in writes:
                j = {"k1": k + 1, "k": k, "negk": -(k + 1)}[which]
                prev = U[at(k, part)]
                v = np.tanh(prev) * 0.9 if src == "prev" else \
                    np.sin(x[:n][part]) * (k + 1) * 0.1 if src == "x" else \
                    prev * 0.5 + x[k % n] * 0.1
                if add:
                    U[at(j, part)] += v
                else:
                    U[at(j, part)] = v
            if inside:
                s = s + np.sum(U ** 2) * 0.01
        return np.sum(U ** 2 * np.arange(1.0, U.size + 1).reshape(U.shape) / U.size) + s
    return f


@pytest.mark.parametrize("first", range(0, 120, 30))
def test_random_slab_write_loops_match_numpy(first):
    """(Two in-place writes of one slab a step were spliced reading a node the
    trace merged from later on; a run whose lagged input started before it
    kept that node twice: both raised.)"""
    x0 = np.array([0.3, -0.2, 0.5, 0.7, 0.1])
    for seed in range(first, first + 30):
        f = _random_scheme(seed)
        r = ha.compile(f, x0, backend="numpy").gradient(x0)
        assert float(r.value) == pytest.approx(float(f(x0.copy())), rel=1e-12), seed
        np.testing.assert_allclose(r.gradient, numerical_gradient(f, x0), rtol=1e-6, atol=1e-7,
                                   err_msg=f"seed {seed}")


def test_a_second_attempt_keeps_no_write_of_the_first(monkeypatch):
    """A function traced again (it wrote a traced value into an array numpy
    made, after its row writes: hybridad.frontend.numpy_made) holds the
    writes of its second attempt only -- node ids are reused after the
    first attempt's nodes are dropped, and a write recorded for a dropped
    node would stand for another one."""
    from hybridad.transforms import row_writes

    def g(x):
        B = np.zeros(3)
        Y = np.zeros((6, 5)) + x[0]
        for k in range(6):
            Y[k] = x * (k + 1.0)
        B[0] = x[0]  # (numpy's array: the first attempt stops here)
        return np.sum(Y ** 2) + np.sum(B * 3.0)

    seen = []
    real = row_writes.forward_row_writes

    def check(trace, outs, fixed=frozenset()):
        live = {id(n) for n in trace.nodes}
        by_id = {n.id: n for n in trace.nodes}
        for k, w in trace.row_writes.items():
            assert k in by_id and by_id[k].op == "concatenate" and id(w[0]) in live
        assert all(id(v[0]) in live for v in trace.folded_views.values())
        seen.append(len(trace.row_writes))
        return real(trace, outs, fixed)
    monkeypatch.setattr(rolling, "forward_row_writes", check)
    r = ha.compile(g, X0, backend="numpy").gradient(X0)
    assert seen and seen[0] >= 6
    assert float(r.value) == pytest.approx(float(g(X0.copy())), rel=1e-13)
    np.testing.assert_allclose(r.gradient, numerical_gradient(g, X0), rtol=1e-6, atol=1e-8)


def test_writes_along_another_axis_start_a_chain_of_their_own():
    """The first write into a grid of more points than steps is an element
    (two ints: the slab of its longer axis, space), then a column per step:
    the columns are a chain of their own from the array the element write
    made, forwarded and rolled (they were left as traced, T^2, until T
    outgrew the grid)."""
    n = 40
    u0 = np.sin(np.linspace(0.0, 3.0, n))
    sizes = []
    for T in (20, 30):
        def f(u, T=T):
            U = np.zeros((n, T + 1))
            U[0, 0] = 0.0
            U[:, 0] = u
            for k in range(T):
                U[1:-1, k + 1] = U[1:-1, k] + 0.2 * np.sin(U[2:, k] - 2 * U[1:-1, k] + U[:-2, k])
                U[0, k + 1] = U[1, k + 1]
            return np.sum(U ** 2)
        plan = ha.compile(f, u0, backend="numpy")
        assert any(node.op == "loop" for node in plan.graph.nodes)
        sizes.append(len(plan.graph.nodes))
        r = plan.gradient(u0)
        assert float(r.value) == pytest.approx(float(f(u0)), rel=1e-13)
        np.testing.assert_allclose(r.gradient, numerical_gradient(f, u0), rtol=1e-6, atol=1e-8)
    assert sizes[0] == sizes[1]
