"""A ufunc call replayed from the trace's recipe (hybridad.frontend.replay)
adds the nodes the frontend would have added: every function here traces to
the same graph with replay on and off (``HYBRIDAD_REPLAY=0``), node for node
(constants compared by value), and the recipes were used.  Operands that
must not share a recipe -- scalars of other values (``-0.0`` and ``0.0``,
``True`` and ``1``), ``x * x`` and ``x * y``, other captured arrays, other
dtypes, literal constants -- do not; gradients through replayed calls match
central differences, and replay leaves a plan's calls allocation-free."""

from __future__ import annotations

import numpy as np
import pytest

import hybridad as ha
from hybridad.core.trace import Trace
from hybridad.frontend import replay
from hybridad.frontend.signature import attr_signature
from hybridad.testing import assert_no_alloc

from conftest import assert_grad

RNG = np.random.default_rng(3)
A = RNG.standard_normal((5, 5)) / 3
B = RNG.standard_normal((5, 5)) / 3
X = RNG.standard_normal(5)
Y = RNG.standard_normal(5)


def canonical(trace, outs):
    """The trace as a list of node descriptions, each naming its operands by
    their position in the list (equal constants are one entry)."""
    index, table, order = {}, {}, []

    def describe(n):
        if n.op == "const":
            v = n.attrs["value"]
            return ("const", v.dtype.str, v.shape, v.tobytes())
        if n.op == "input":
            return ("input", n.attrs["index"], n.shape, n.dtype.str)
        return (n.op, n.shape, n.dtype.str, tuple(index[a.id] for a in n.args),
                tuple((k, attr_signature(v)) for k, v in sorted(n.attrs.items())))

    for n in trace.nodes:
        d = describe(n)
        index[n.id] = table.setdefault(d, len(table))
        if n.op != "const":
            order.append(index[n.id])
    return [list(table)[k] for k in order], [index[o.node.id] for o in outs]


def traced(f, args, monkeypatch, on):
    monkeypatch.setenv("HYBRIDAD_REPLAY", "1" if on else "0")
    trace = Trace()
    with trace:
        ins = [trace.input(k, np.shape(a), np.asarray(a).dtype) for k, a in enumerate(args)]
        out = f(*ins)
    outs = out if isinstance(out, tuple) else (out,)
    used = sum(type(r).__name__ == "_Recipe" for r in trace.recipes.values())
    return canonical(trace, outs), outs, used


def euler(x, y):
    for _ in range(6):
        x = x + 0.05 * np.tanh(A @ x)
    return np.sum(x ** 2)


def scalars(x, y):  # equal scalars share a recipe; -0.0, 0.0, 1, True, 2.0 do not
    for c in (0.5, 0.25, 0.5, -0.0, 0.0, 0.5, 1, True, 2.0, 2, 0.25):
        x = x * c + c
        x = c - x
    return np.sum(x)


def aliasing(x, y):  # x * x, x * y and y * x: three recipes
    s = x
    for _ in range(3):
        s = s * s + s * y + y * s
        s = np.tanh(s)
    return np.sum(s)


def captured(x, y):  # the same shapes, other arrays: A @ and B @ stay apart
    for M in (A, B, A, B, A):
        x = np.tanh(M @ x) + M @ y
    return np.sum(x)


def dtypes(x, y):  # float32 operands keep their own recipes (weak Python scalars)
    x32 = x.astype(np.float32)
    for _ in range(3):
        x32 = x32 * 0.5 + 1.0
        x = x * 0.5 + 1.0
    return np.sum(x32.astype(np.float64)) + np.sum(x)


def scalar_flags(x, y):  # 0-d results are numpy scalars, replayed or not
    s = np.sum(x)
    for _ in range(4):
        s = s * 2.0 + np.sin(s)
        assert isinstance(s, np.float64)
    return s * np.sum(y)


def literals(x, y):  # a literal constant operand is never replayed (it folds)
    for k in range(4):
        one = np.float64(1.0) + 0.0 * k
        x = x * one + np.exp(x * 0.0)
    return np.sum(x)


def tuples_and_masks(x, y):  # divmod's pair, comparisons, where, in-place updates
    for _ in range(3):
        q, r = np.divmod(x, 0.75)
        m = r > 0.3
        x = np.where(m, x * 1.5, q * 0.5 + r)
        x += np.maximum(x, y)
    return np.sum(x ** 2)


def heat(x, y):  # slices read and written in place: u[1:-1] = ..., then u[1:-1] += ...
    u = np.concatenate([x, y])
    for k in range(8):
        lap = u[2:] - 2 * u[1:-1] + u[:-2]
        if k % 2:
            u[1:-1] = u[1:-1] + 0.1 * lap
        else:
            u[1:-1] += 0.1 * lap
        u[0] = u[-1] * 0.5  # an element: a numpy scalar written back
    return np.sum(u ** 2)


def kept_views(x, y):  # views alive across steps: writes reach them, and through them
    m = np.outer(x, y) * 1.0
    inner, col = m[1:-1, 1:], m[:, 2]
    for _ in range(4):
        inner *= 0.9
        m[:2, ::2] = np.tanh(m[:2, ::2]) + col[:2, None]
        col += m[3, 2] * 0.1
    return np.sum(m ** 2) + np.sum(inner) + m[0, 1] * m[-1, -1]


def ints_and_slices(x, y):  # reads with an int among slices, at a new int each step
    m = np.outer(x, y) + A
    s = 0.0
    for k in range(4):
        s = s + m[k, 1:] * m[k + 1, :-1] + m[1:, -k - 1] * m[-1, :-1] * 0.5
        s = s + m[k, 1:] * 2.0 + m[..., k][1:] + m[k, ::2][0] + m[k][2]
        m = np.tanh(m) + 0.1 * m[k, :][None, :]
    return np.sum(s ** 2)


FUNCTIONS = [euler, scalars, aliasing, captured, dtypes, scalar_flags, literals,
             tuples_and_masks, heat, kept_views, ints_and_slices]


@pytest.mark.parametrize("f", FUNCTIONS, ids=lambda f: f.__name__)
def test_the_same_graph_with_and_without_replay(f, monkeypatch):
    (nodes_on, outs_on), _, used = traced(f, (X, Y), monkeypatch, True)
    (nodes_off, outs_off), _, unused = traced(f, (X, Y), monkeypatch, False)
    assert used > 0 and unused == 0
    assert nodes_on == nodes_off and outs_on == outs_off


@pytest.mark.parametrize("f", FUNCTIONS, ids=lambda f: f.__name__)
def test_gradients_through_replayed_calls(f):
    if f is tuples_and_masks:  # (piecewise: away from the kinks of divmod and where)
        assert_grad(f, (X + 0.01, Y), argnums=(0, 1), rtol=1e-5)
    elif f is dtypes:  # (central differences through float32 rounding)
        assert_grad(f, (X, Y), argnums=(0, 1), rtol=0, atol=2e-2)
    else:
        assert_grad(f, (X, Y), argnums=(0, 1))


def test_replayed_calls_are_the_frontends(monkeypatch):
    # every replayed call returns what the frontend returns: the same node kinds
    calls = []
    real = replay._replay
    monkeypatch.setattr(replay, "_replay", lambda *a: calls.append(1) or real(*a))
    traced(euler, (X, Y), monkeypatch, True)
    # tanh, matmul, * and + of each step from the third on (the first step reads
    # the argument, which has its own recipes; the second records the rest)
    assert len(calls) >= 4 * 4


def test_two_traced_operands_take_their_recipe_directly(monkeypatch):
    # `x + y` and `A @ x` of two tracers go from the operator to the recipe
    # (replay._binary_call), and make the graph the surface makes
    served = []
    real = replay._binary_call
    monkeypatch.setattr(replay, "_binary_call",
                        lambda u, ops: (lambda r: served.append(r is not None) or r)(real(u, ops)))
    from hybridad.core.tracer import SURFACE
    monkeypatch.setattr(SURFACE, "replayed_binary", replay._binary_call)

    def f(x, y):
        for _ in range(6):
            x = np.tanh(x * y + y) - x / (y * y + 1.0)
        return np.sum(x)
    (on, outs_on), _, _ = traced(f, (X, Y), monkeypatch, True)
    (off, outs_off), _, _ = traced(f, (X, Y), monkeypatch, False)
    assert sum(served) >= 10 and on == off and outs_on == outs_off


def test_python_numbers_and_ufuncs_of_one_tracer_take_their_recipe_directly(monkeypatch):
    # `0.5 * x`, `x - 2`, `3.0 / x`: a tracer and a float or an int (either side)
    # from the operator to the recipe, and `np.tanh(x)` from __array_ufunc__; the
    # key holds the number, its type and its sign (-0.0 is not 0.0), so the graph
    # is the surface's
    served, unary = [], []
    real, real_unary = replay._binary_call, replay._unary_call
    monkeypatch.setattr(replay, "_binary_call",
                        lambda u, ops: (lambda r: served.append(r is not None) or r)(real(u, ops)))
    from hybridad.core.tracer import SURFACE
    monkeypatch.setattr(SURFACE, "replayed_binary", replay._binary_call)
    monkeypatch.setattr(SURFACE, "replayed_unary",
                        lambda u, x: (lambda r: unary.append(r is not None) or r)(real_unary(u, x)))

    def f(x, y):
        x = np.tanh(x)
        for k in range(6):
            x = 0.5 * x - 2 + 3.0 / (x * x + 1) + x ** 2 * 0.1 - 0.0 * y + (-0.0) * x + k * x
            x = np.sin(np.tanh(x)) + np.exp(-y)
        return np.sum(x) + np.sum(y * 2.0 - 1)
    (on, outs_on), _, _ = traced(f, (X, Y), monkeypatch, True)
    (off, outs_off), _, _ = traced(f, (X, Y), monkeypatch, False)
    assert sum(served) >= 20 and sum(unary) >= 10 and on == off and outs_on == outs_off
    assert_grad(f, (X, Y), argnums=(0, 1))


def test_no_allocation_per_call_through_replayed_loops():
    plan = ha.compile(euler, X, Y, argnums=0)
    assert_no_alloc(plan.gradient, X, Y, out=ha.GradientResult(X), n=3, warmup=1)


def test_the_collector_pauses_while_tracing_and_resumes_after():
    import gc

    seen = []

    def f(x):
        seen.append(gc.isenabled())
        return np.sum(x ** 2)

    def broken(x):
        seen.append(gc.isenabled())
        raise ValueError("in f")

    assert gc.isenabled()
    ha.gradient(f, X)
    assert seen == [False] and gc.isenabled()
    with pytest.raises(ValueError, match="in f"):
        ha.gradient(broken, X)
    assert seen == [False, False] and gc.isenabled()
    gc.disable()  # a program that runs without the collector keeps it off
    try:
        ha.gradient(lambda x: np.sum(np.sin(x)), X)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_loops_slice_writes_keep_its_views_list_short():
    """The weak references of a family of views lose the gone ones: a loop
    that reads and writes slices of its state makes views at every step, and
    each write walked them all (a 1000-step stencil traced in quadratic time)."""
    trace = Trace()
    with trace:
        u = trace.input(0, (12,), np.dtype(np.float64)) * 1.0
        for _ in range(500):
            u[1:-1] += 0.1 * (u[2:] - 2 * u[1:-1] + u[:-2])
        assert len(u._shares) < 64
        assert sum(r() is not None for r in u._shares) == 1  # (u alone is alive)


def _rows_then_writes(x, A):
    m = A * x  # a 2-D array f makes
    s = x[0]  # a numpy scalar (a copy: `s += 1` leaves x alone)
    s += 1.0
    for i in range(3):
        row = m[i]  # a view of m: writes through it change m
        row *= x[i + 1]
    out = m[-1] @ x + s * x[-5]
    for r in m:  # iteration: rows as views
        out = out + np.sum(np.sin(r)) * r[2]
    return out


def test_integer_index_fast_path_traces_the_general_paths_graph(monkeypatch):
    """``x[i]`` for a Python int (``replay._row``, a loop over rows) makes the
    node, flags and view links of the numpy surface's getitem: the same
    graph, and writes through row views reach the array they view."""
    calls = []
    real = replay._row
    monkeypatch.setattr(replay, "_row", lambda x, i: calls.append(i) or real(x, i))
    fast, fast_outs, _ = traced(_rows_then_writes, (X, A), monkeypatch, True)
    assert len(calls) >= 10
    general, general_outs, _ = traced(_rows_then_writes, (X, A), monkeypatch, False)
    assert fast == general
    for a, b in zip(fast_outs, general_outs, strict=True):
        assert a._flags == b._flags and a.shape == b.shape
    assert_grad(_rows_then_writes, (X, A))
    res = ha.gradient(_rows_then_writes, X, A)
    np.testing.assert_allclose(res.value, _rows_then_writes(X, A), rtol=1e-13)


def test_an_int_out_of_range_among_slices_raises_as_numpy():
    """A read ``m[k, 1:]`` answered from the first k's recipe still raises
    numpy's IndexError for a k out of range, and takes negative ks as numpy."""
    def f(x):
        m = np.outer(x, x)
        s = m[-5, 1:] + m[4, 1:]
        for k in range(6):
            s = s + m[k, 1:]
        return np.sum(s)
    with pytest.raises(IndexError, match="out of bounds"):
        np.outer(X, X)[5, 1:]
    with pytest.raises(IndexError, match="out of bounds"):
        ha.gradient(f, X)

    def g(x):
        m = np.outer(x, x)
        return sum(np.sum(m[k, 1:] * m[1:, k]) for k in range(-5, 5))
    assert float(ha.gradient(g, X).value) == pytest.approx(float(g(X)), rel=1e-13)
