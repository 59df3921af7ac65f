"""Loops stated with hybridad.fori_loop and hybridad.scan: traced once, built in
time independent of the trip count, differentiated through (gradients, HVPs,
Hessians) and run with no allocation per call, on the numpy and numba backends.

Every derivative is compared with the same function written as a Python loop
(unrolled into the trace: another path through hybridad, to AD precision) and
with central finite differences.
"""

import numpy as np
import pytest

import hybridad as ha
from hybridad.backends.numba import threshold
from hybridad.trace import Tracer
from hybridad.testing import assert_no_alloc, count_allocations, numerical_gradient

RNG = np.random.default_rng(7)
N = 4
W0 = RNG.standard_normal((N, N)) / 2
F0 = RNG.standard_normal((6, N))
X0 = RNG.standard_normal(N)


def euler_loop(x, W, T=12):
    return np.sum(ha.fori_loop(0, T, lambda i, x: x + 0.1 * np.tanh(W @ x), x) ** 2)


def euler_unrolled(x, W, T=12):
    for _ in range(T):
        x = x + 0.1 * np.tanh(W @ x)
    return np.sum(x ** 2)


def scan_loop(x, W):
    """A pytree carry, per-iteration rows, a per-iteration output, a closure."""
    def body(c, fk):
        x, s = c
        x = x + 0.1 * np.tanh(W @ x + fk)
        return (x, s + np.sum(x * fk)), x[0] * np.exp(0.1 * s)
    (x, s), ys = ha.scan(body, (x, 0.0 * np.sum(x)), F0)
    return np.sum(x ** 2) + s + np.sum(np.sin(ys))


def scan_unrolled(x, W):
    s, ys = 0.0 * np.sum(x), []
    for k in range(F0.shape[0]):
        x = x + 0.1 * np.tanh(W @ x + F0[k])
        ys.append(x[0] * np.exp(0.1 * s))
        s = s + np.sum(x * F0[k])
    return np.sum(x ** 2) + s + np.sum(np.sin(np.stack(ys)))


def reverse_loop(x, W):
    def body(c, fk):
        c = c * np.cos(fk) + W[0]
        return c, np.sum(c)
    c, ys = ha.scan(body, x, F0, reverse=True)
    return np.sum(c * c) + np.sum(ys * np.arange(6.0))


def reverse_unrolled(x, W):
    c, ys = x, [None] * 6
    for k in range(5, -1, -1):
        c = c * np.cos(F0[k]) + W[0]
        ys[k] = np.sum(c)
    return np.sum(c * c) + np.sum(np.stack(ys) * np.arange(6.0))


def indexed_loop(x, W):
    return np.sum(ha.fori_loop(1, 7, lambda i, x: x + 0.05 * np.sin(i * x) * W[1], x) ** 3)


def indexed_unrolled(x, W):
    for i in range(1, 7):
        x = x + 0.05 * np.sin(i * x) * W[1]
    return np.sum(x ** 3)


def nested_loop(x, W, steps=4):
    def outer(i, x):
        return ha.fori_loop(0, 3, lambda j, y: y + 0.1 * np.tanh(W @ y), x) * 0.9
    return np.sum(ha.fori_loop(0, steps, outer, x) ** 2)


def nested_unrolled(x, W, steps=4):
    for _ in range(steps):
        for _ in range(3):
            x = x + 0.1 * np.tanh(W @ x)
        x = x * 0.9
    return np.sum(x ** 2)


def shared_loop(x, W, fori=ha.fori_loop, scan=ha.scan):
    """The argument differentiated is both a loop's start (its carry, its
    scanned rows) and read inside the body: each gets a cotangent from the
    carry and one from the body's constant (``W``: a matrix power)."""
    c = fori(0, 5, lambda i, c: c * (0.5 + 0.5 * x) + 0.1 * np.tanh(W @ c), x)
    _, ys = scan(lambda s, xi: (s + np.sum(x) * xi, s), np.sum(W), x)
    P = fori(0, 3, lambda i, P: 0.5 * (P @ W), W)
    return np.sum(c ** 2) + np.sum(ys * x) + np.sum(P)


def _python_fori(lower, upper, body, init):
    for i in range(lower, upper):
        init = body(i, init)
    return init


def _python_scan(body, init, xs):
    ys = []
    for row in xs:
        init, y = body(init, row)
        ys.append(y)
    return init, np.stack(ys)


def shared_unrolled(x, W):
    return shared_loop(x, W, _python_fori, _python_scan)


PAIRS = [(euler_loop, euler_unrolled), (scan_loop, scan_unrolled),
         (reverse_loop, reverse_unrolled), (indexed_loop, indexed_unrolled),
         (nested_loop, nested_unrolled), (shared_loop, shared_unrolled)]


def _fd_grad(f, args, i):
    """Central differences of ``f(*args)`` w.r.t. ``args[i]``."""
    def moved(a, *rest):
        return f(*rest[:i], a, *rest[i:])
    return numerical_gradient(moved, args[i], *args[:i], *args[i + 1:])


def _fd_hessian(f, x, *rest, eps=1e-6):
    """The Hessian of ``f`` in ``x`` by central differences of its gradient,
    a column at a time."""
    cols = []
    for j in range(x.size):
        e = np.zeros_like(x)
        e[j] = eps
        cols.append((ha.gradient(f, x + e, *rest, backend="numpy").gradient -
                     ha.gradient(f, x - e, *rest, backend="numpy").gradient) / (2 * eps))
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("loop,unrolled", PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_gradient_through_a_loop_matches_the_unrolled_plan_and_fd(loop, unrolled):
    a = ha.gradient(loop, X0, W0, argnums=(0, 1), backend="numpy")
    b = ha.gradient(unrolled, X0, W0, argnums=(0, 1), backend="numpy")
    assert a.value == pytest.approx(b.value, rel=1e-13)
    for ga, gb in zip(a.gradient, b.gradient, strict=True):
        np.testing.assert_allclose(ga, gb, rtol=1e-12, atol=1e-13)
    # (the loops run eagerly outside a trace: the finite differences use them)
    for i in (0, 1):
        np.testing.assert_allclose(a.gradient[i], _fd_grad(loop, [X0, W0], i),
                                   rtol=1e-6, atol=1e-8)


SECOND = PAIRS[1:4] + PAIRS[5:]


@pytest.mark.parametrize("loop,unrolled", SECOND, ids=[p[0].__name__ for p in SECOND])
def test_hessian_and_hvp_through_a_loop(loop, unrolled):
    h = ha.hessian(loop, X0, W0, backend="numpy")
    hu = ha.hessian(unrolled, X0, W0, backend="numpy")
    np.testing.assert_allclose(h.hessian, hu.hessian, rtol=1e-11, atol=1e-12)
    v = RNG.standard_normal(N)
    p = ha.hvp(loop, X0, v, W0, backend="numpy")
    np.testing.assert_allclose(p.hvp, hu.hessian @ v, rtol=1e-11, atol=1e-12)
    # the Hessian's columns from finite differences of the gradient
    np.testing.assert_allclose(h.hessian, _fd_hessian(loop, X0, W0), rtol=1e-5, atol=1e-7)


def test_numba_gradient_hessian_and_no_allocation():
    """The compiled backend: one plan per kind, against the numpy backend's."""
    plan = ha.compile(scan_loop, X0, W0, argnums=(0, 1))
    ref = ha.gradient(scan_unrolled, X0, W0, argnums=(0, 1), backend="numpy")
    res = ha.GradientResult((X0, W0))
    plan.gradient(X0, W0, out=res)
    assert res.value == pytest.approx(ref.value, rel=1e-13)
    for ga, gb in zip(res.gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(ga, gb, rtol=1e-12, atol=1e-13)
    with count_allocations() as counts:
        for _ in range(5):
            plan.gradient(X0, W0, out=res)
    assert counts.allocations == 0, counts
    h = ha.hessian(euler_loop, X0, W0)
    hu = ha.hessian(euler_unrolled, X0, W0, backend="numpy")
    np.testing.assert_allclose(h.hessian, hu.hessian, rtol=1e-11, atol=1e-12)


def chained_loop(x, W, vector=False):
    """Carries that the seeds reach one iteration after another (``c`` from
    ``x``, ``b`` from ``c``, ``a`` from ``b``) and one they never reach
    (``d``): a batched loop must find all three (a fixed point, not one pass)."""
    def body(i, carry):
        a, b, c, d = carry
        return a + 0.3 * np.sin(b) * d, b * 0.9 + 0.2 * c, np.tanh(W @ c), d * 0.5 + W[0]
    a, b, c, d = ha.fori_loop(0, 5, body, (0 * W[1], 0 * W[2], x, W[3]))
    out = a ** 2 * d + b * c
    return out if vector else np.sum(out)


def chained_unrolled(x, W, vector=False):
    a, b, c, d = 0 * W[1], 0 * W[2], x, W[3]
    for _ in range(5):
        a, b, c, d = a + 0.3 * np.sin(b) * d, b * 0.9 + 0.2 * c, np.tanh(W @ c), d * 0.5 + W[0]
    out = a ** 2 * d + b * c
    return out if vector else np.sum(out)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_batched_loops_carry_unbatched_what_no_seed_reaches(backend):
    """A Hessian's chunk (and a Jacobian's) runs the loop over a batch of
    tangents: the carries the seeds reach are batched -- found to a fixed
    point -- and the others carried once, not once per seed (a carry of the
    primal state computed ``chunk`` times over)."""
    plan = ha.compile(chained_loop, X0, W0, hessian=True, chunk=2, backend=backend)
    res = ha.HessianResult(X0)
    plan.hessian(X0, W0, out=res)
    ref = ha.hessian(chained_unrolled, X0, W0, backend="numpy")
    np.testing.assert_allclose(res.hessian, ref.hessian, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(res.hessian, _fd_hessian(chained_unrolled, X0, W0), rtol=1e-6,
                               atol=1e-8)
    # each batched loop (two seeds a chunk): the primal a, b, c, d carried once
    chunked = [[o.shape for o in n.attrs["body"].graph.outputs[:n.attrs["body"].n_carry]]
               for n in plan.graph.nodes if n.op == "loop"]
    chunked = [shapes for shapes in chunked if (2, N) in shapes]
    assert len(chunked) == 2, chunked  # (the forward loop and its reverse)
    assert all(shapes.count((N,)) >= 4 for shapes in chunked), chunked
    jac = ha.jacobian(lambda x, W: chained_loop(x, W, True), X0, W0, backend=backend).jacobian
    jref = ha.jacobian(lambda x, W: chained_unrolled(x, W, True), X0, W0,
                       backend="numpy").jacobian
    np.testing.assert_allclose(jac, jref, rtol=1e-12, atol=1e-13)


def test_no_allocation_per_call_numpy_backend():
    plan = ha.compile(reverse_loop, X0, W0, backend="numpy")
    res = ha.GradientResult(X0)
    plan.gradient(X0, W0, out=res)
    with count_allocations() as counts:
        for _ in range(5):
            plan.gradient(X0, W0, out=res)
    assert counts.allocations == 0, counts


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_the_plan_does_not_grow_with_the_trip_count(backend):
    """The body is traced once: the graph of T = 1000 steps is that of T = 5."""
    small = ha.compile(lambda x, W: euler_loop(x, W, T=5), X0, W0, backend="numpy")
    large = ha.compile(lambda x, W: euler_loop(x, W, T=1000), X0, W0, backend="numpy")
    assert len(large.graph.nodes) == len(small.graph.nodes) < 40
    g = large.gradient(X0, W0).gradient
    if backend == "numba":
        g2 = ha.compile(lambda x, W: euler_loop(x, W, T=1000), X0, W0).gradient(X0, W0)
        np.testing.assert_allclose(g2.gradient, g, rtol=1e-12)
    np.testing.assert_allclose(g, _fd_grad(lambda x, W: euler_loop(x, W, T=1000), [X0, W0], 0),
                               rtol=1e-6, atol=1e-8)


def test_eager_loops_are_python_loops():
    out = ha.fori_loop(2, 5, lambda i, v: v * i, 1.0)
    assert out == 2 * 3 * 4
    carry, ys = ha.scan(lambda c, x: (c + x, c * x), 0.0, np.arange(4.0))
    assert carry == 6.0
    np.testing.assert_array_equal(ys, [0.0, 0.0, 2.0, 9.0])
    carry, ys = ha.scan(lambda c, x: (c + x, c), 0.0, np.arange(4.0), reverse=True)
    np.testing.assert_array_equal(ys, [6.0, 5.0, 3.0, 0.0])
    assert ha.scan(lambda c, x: (c * 2, None), 1.0, length=3) == (8.0, None)


def test_traced_and_eager_scan_agree_on_values():
    f = scan_loop
    assert ha.gradient(f, X0, W0, backend="numpy").value == pytest.approx(f(X0, W0), rel=1e-13)
    assert ha.gradient(reverse_loop, X0, W0, backend="numpy").value == \
        pytest.approx(reverse_loop(X0, W0), rel=1e-13)


def test_zero_trip_count_returns_the_initial_carry():
    f = lambda x: np.sum(ha.fori_loop(3, 3, lambda i, v: v * 2, x) ** 2)  # noqa: E731
    r = ha.gradient(f, X0, backend="numpy")
    np.testing.assert_allclose(r.gradient, 2 * X0)


def test_an_empty_scan_stacks_empty_ys_eager_and_traced():
    """No iteration: the ys still have their structure, shapes ``(0, ...)`` and
    dtype -- eager (it returned None) as traced, as JAX's scan."""
    seen = {}

    def f(x):
        c, (s, y) = ha.scan(lambda c, r: (c * 2 + r, (np.sum(c), c * r)), x, np.ones((0, 3)))
        seen["traced" if isinstance(s, Tracer) else "eager"] = (s.shape, y.shape, y.dtype)
        return np.sum(c ** 2) + np.sum(y)

    x = np.arange(3.0)
    assert f(x) == np.sum(x ** 2)
    r = ha.gradient(f, x, backend="numpy")
    np.testing.assert_array_equal(r.gradient, 2 * x)
    assert seen["eager"] == seen["traced"] == ((0,), (0, 3), np.dtype(np.float64))
    c, ys = ha.scan(lambda c, _: (c + 1, {"a": c}), np.zeros(2), None, length=0)
    assert ys["a"].shape == (0, 2)


def test_bad_loops_raise_clear_errors():
    with pytest.raises(TypeError, match="carry leaf 0"):
        ha.gradient(lambda x: np.sum(ha.fori_loop(0, 3, lambda i, v: v[:2], x)), X0,
                    backend="numpy")
    with pytest.raises(TypeError, match="structure"):
        ha.gradient(lambda x: np.sum(ha.fori_loop(0, 3, lambda i, v: (v, v), x)), X0,
                    backend="numpy")
    with pytest.raises(TypeError, match="carry leaf 1 from int64"):  # (as JAX: a carry keeps
        ha.gradient(lambda x: np.sum(ha.fori_loop(  # its dtype, an int one too)
            0, 3, lambda i, c: (c[0] * 2, c[1] + 0.5), (x, 0))[0]), X0, backend="numpy")
    for bad in (0, -1, 1.5, "2"):
        with pytest.raises(TypeError, match="unroll"):
            ha.fori_loop(0, 3, lambda i, v: v, 1.0, unroll=bad)
        with pytest.raises(TypeError, match="unroll"):
            ha.scan(lambda c, x: (c, x), 0.0, np.zeros(3), unroll=bad)
    with pytest.raises(ha.TracingError, match="upper"):
        ha.gradient(lambda x: np.sum(ha.fori_loop(0, x.shape[0] + np.sum(x).astype(int),
                                                  lambda i, v: v, x)), X0, backend="numpy")
    with pytest.raises(ValueError, match="leading axes"):
        ha.scan(lambda c, x: (c, x), 0.0, (np.zeros(3), np.zeros(4)))


def _mixed_fori(x, W):
    """An int counter and a float32 accumulator carried beside a float64 state
    (no derivative goes through float32 values: central differences would
    read their rounding)."""
    def body(i, c):
        x, k, acc = c
        x = x + 0.1 * np.tanh(W @ x) * (k % 3)
        return x, k + 1, acc + np.where(k % 2 == 0, np.float32(0.5), np.float32(0.25))
    x, k, acc = ha.fori_loop(0, 7, body, (x, 0, np.float32(0.0)))
    return np.sum(x ** 2) * k + acc.astype(np.float64)


def _mixed_scan(x, W):
    """int and bool per-iteration outputs (an argmax, a sign) and a float32 one."""
    def body(c, fk):
        c = np.tanh(W @ c + fk)
        return c, (np.argmax(c), c[0] > 0, (c > 0).astype(np.float32))
    c, (top, pos, sq) = ha.scan(body, x, F0, unroll=2)
    return np.sum(c ** 2) * np.sum(top) + np.sum(np.where(pos, 1.0, -1.0)) + np.sum(sq)


def _mixed_python(loop):
    """``loop`` with ha's loops replaced by the Python loops they state."""
    def fori(lower, upper, body, c, unroll=None):
        for i in range(lower, upper):
            c = body(i, c)
        return c

    def scan(f, c, xs, unroll=1):
        ys = []
        for row in xs:
            c, y = f(c, row)
            ys.append(y)
        return c, tuple(np.stack(list(t)) for t in zip(*ys, strict=True))
    real = ha.fori_loop, ha.scan
    ha.fori_loop, ha.scan = fori, scan
    try:
        return loop(X0, W0)
    finally:
        ha.fori_loop, ha.scan = real


@pytest.mark.parametrize("loop", [_mixed_fori, _mixed_scan])
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_loops_of_mixed_dtypes_run_as_python_loops(loop, backend):
    """A carry or per-iteration output of another dtype than the float state
    (an int counter, float32 beside float64, int and bool outputs) -- which
    JAX's loops carry and one loop node cannot pack -- runs as the Python loop
    it states: numpy's value, derivatives to central differences, eager and
    traced alike."""
    want = _mixed_python(loop)
    assert loop(X0, W0) == pytest.approx(want, rel=1e-12)  # (eager)
    r = ha.gradient(loop, X0, W0, backend=backend)
    assert r.value == pytest.approx(want, rel=1e-12)
    np.testing.assert_allclose(r.gradient, ha.gradient(lambda x, W: _mixed_python(
        lambda _x, _W: loop(x, W)), X0, W0, backend="numpy").gradient, rtol=1e-12)
    np.testing.assert_allclose(r.gradient, _fd_grad(loop, [X0, W0], 0), rtol=1e-6, atol=1e-8)
    grad_plan = ha.compile(loop, X0, W0, backend=backend)
    out = ha.GradientResult(X0)
    grad_plan.gradient(X0, W0, out=out)
    assert_no_alloc(grad_plan.gradient, X0, W0, out=out, n=10)
    plan = ha.compile(loop, X0, W0, backend=backend, hvp=True)
    v = RNG.standard_normal(N)
    eps = 1e-5
    fd = (ha.gradient(loop, X0 + eps * v, W0).gradient -
          ha.gradient(loop, X0 - eps * v, W0).gradient) / (2 * eps)
    np.testing.assert_allclose(plan.hvp(X0, W0, v=v).hvp, fd, rtol=1e-5, atol=1e-7)


def test_a_value_of_the_set_aside_body_is_refused_by_name():
    """The body of a loop of mixed dtypes is traced once, set aside, and run as
    the Python loop: a value of that first trace the code kept is refused, saying why."""
    kept = []

    def f(x):
        def body(i, c):
            kept.append(c[0])
            return c[0] * 1.1, c[1] + 1
        x, k = ha.fori_loop(0, 3, body, (x, 0))
        return np.sum(x) * k + np.sum(kept[0])

    with pytest.raises(ha.TracingError, match="not of one float dtype"):
        ha.gradient(f, X0, backend="numpy")


def test_an_empty_scan_of_mixed_dtypes():
    def f(x):
        c, (k, y) = ha.scan(lambda c, r: (c * r, (np.argmax(c), c.astype(np.float32))), x,
                            np.ones((0, 3)))
        assert k.shape == (0,) and k.dtype == np.int64 and y.shape == (0, 3)
        assert y.dtype == np.float32
        return np.sum(c ** 2)
    np.testing.assert_array_equal(ha.gradient(f, np.arange(3.0), backend="numpy").gradient,
                                  2 * np.arange(3.0))


def test_float32_loop():
    x = X0.astype(np.float32)
    W = W0.astype(np.float32)
    a = ha.gradient(euler_loop, x, W, backend="numpy")
    b = ha.gradient(euler_unrolled, x, W, backend="numpy")
    assert a.gradient.dtype == np.float32
    np.testing.assert_allclose(a.gradient, b.gradient, rtol=1e-5)


def test_the_reference_run_matches_the_backends():
    """The op's reference ``run`` (what Python decisions on a loop's value
    evaluate), on the traced graph, against the numpy program's compiled body."""
    from hybridad.core.decisions import evaluate

    for f in (scan_loop, reverse_loop, indexed_loop, nested_loop):
        plan = ha.compile(f, X0, W0, backend="numpy")
        assert any(n.op == "loop" for n in plan.graph.nodes)
        got = evaluate(plan._outputs[0], [X0, W0])[0]
        assert float(got) == pytest.approx(plan.value(X0, W0), rel=1e-13)


def test_a_python_decision_on_a_loop_value():
    def f(x, W):
        y = ha.fori_loop(0, 5, lambda i, v: v + 0.1 * np.tanh(W @ v), x)
        if y[0] > 0:  # decided on the call's values, guarded
            return np.sum(y ** 2)
        return -np.sum(np.sin(y))

    for x in (np.abs(X0), -np.abs(X0)):
        for backend in ("numpy", "numba"):
            r = ha.gradient(f, x, W0, backend=backend)
            assert r.value == pytest.approx(f(x, W0), rel=1e-13)
            np.testing.assert_allclose(r.gradient, _fd_grad(f, [x, W0], 0), rtol=1e-6,
                                       atol=1e-8)


def test_a_decision_on_a_loop_value_where_numba_compiles_the_plan(monkeypatch):
    # the decision check's loop runs in object mode: inlined in the plan's
    # guarded prelude, numba's lowering broke LLVM's dominance (numba#9574)
    monkeypatch.setenv("HYBRIDAD_JIT", "0")  # (numba compiles every program)

    def f(x, W):
        y = ha.fori_loop(0, 4, lambda i, v: v + 0.2 * np.tanh(W @ v), x)
        if y[1] > -10.0:
            return np.sum(np.cos(y))
        return np.sum(y)

    x = X0 + 0.25
    for _ in range(2):  # (the second call: the plan's fast path, its check inside)
        r = ha.gradient(f, x, W0)
        assert r.value == pytest.approx(f(x, W0), rel=1e-13)
        np.testing.assert_allclose(r.gradient, _fd_grad(f, [x, W0], 0), rtol=1e-6, atol=1e-8)


def test_the_gpu_backend_checks_what_a_loop_body_runs():
    # loops run there (tests/test_cupy_program.py); a body op it cannot run
    # (host LAPACK) is refused by name, as it is outside a loop
    from hybridad.backends.cuda.program import check_supported

    check_supported(ha.compile(euler_loop, X0, W0, backend="numpy").graph.nodes)

    from scipy.linalg import expm

    def spectral(x, W):
        s = W @ W.T + np.eye(N)
        return np.sum(ha.fori_loop(0, 3, lambda i, x: np.diag(expm(s + x[0])) * x, x))

    plan = ha.compile(spectral, X0, W0, backend="numpy")
    with pytest.raises(NotImplementedError, match="expm .*backend='cupy'"):
        check_supported(plan.graph.nodes)


def _scan_loss(W):
    """``sum(h_T**2)`` of ``h = tanh(W h + x)`` scanned over the rows of ``xs``."""
    def f(h, xs):
        h, _ = ha.scan(lambda h, x: (np.tanh(W @ h + x), None), h, xs)
        return np.sum(h ** 2)
    return f


def test_arguments_alternating_and_changed_in_place_between_calls():
    """A loop's runner reuses the last call's table when it is handed the same
    arrays again (hybridad.backends.loops ``LoopRunner._last``): two xs arrays
    passed two calls each in turn, the second call after changing it and the
    initial carry in place -- every call reads what it was given, as the
    numpy reference."""
    rng = np.random.default_rng(6)
    f = _scan_loss(rng.standard_normal((4, 4)) / 3)
    h0 = np.linspace(-1, 1, 4)
    a, b = rng.standard_normal((30, 4)), rng.standard_normal((30, 4))
    plan = ha.compile(f, h0, a)
    ref = ha.compile(f, h0, a, backend="numpy")
    for k in range(12):
        xs = a if k // 2 % 2 == 0 else b  # a, a, b, b, a, a, ...
        if k % 2:  # the same arrays as the call before, changed in place
            xs[k] += 0.25
            h0[k % 4] -= 0.125
        got, want = plan.gradient(h0, xs), ref.gradient(h0, xs)
        np.testing.assert_allclose(got.value, want.value, rtol=1e-13)
        np.testing.assert_allclose(got.gradient, want.gradient, rtol=1e-12, atol=1e-14)


def test_scanned_arguments_that_move_between_calls():
    """xs passed as an argument, a new array at every call (and one changed in
    place): each call scans the array it was given, on both backends."""
    rng = np.random.default_rng(5)
    f = _scan_loss(rng.standard_normal((4, 4)) / 3)
    h0 = np.linspace(-1, 1, 4)
    for backend in ("numpy", "numba"):
        xs = rng.standard_normal((30, 4))
        plan = ha.compile(f, h0, xs, backend=backend)
        for _ in range(3):
            xs = rng.standard_normal((30, 4))  # another array, at another address
            for changed in (False, True):
                if changed:
                    xs[7] += 0.5  # in place
                g = plan.gradient(h0, xs).gradient
                np.testing.assert_allclose(
                    g, numerical_gradient(lambda h, xs=xs: f(h, xs), h0), rtol=1e-6, atol=1e-9)


def test_a_body_that_needs_the_index_value_is_traced_as_the_python_loop():
    """JAX's ``F[i]`` in a ``fori_loop`` body (``F`` a numpy array or a traced
    one), ``x[i]`` of the carry, ``if i % 2``, ``int(i)``, and a Python decision
    on a carried value: the index's value is needed, which no call decides
    inside a loop body, so the loop is traced as the Python loop, ``i`` an int
    each step -- the values, gradients and Hessians of the Python loop; and
    where its steps repeat, rolled (``F[i]`` of an array the loop does not
    change: a row per step)."""
    F = np.linspace(0.0, 1.0, 600).reshape(200, 3)
    bodies = {
        "numpy rows": lambda i, y: y * 0.9 + 0.1 * np.tanh(F[i] * y) + F[i],
        "branch on i": lambda i, y: y * 0.5 if i % 2 == 0 else y + 1.0,
        "int of i": lambda i, y: y * (1.0 - 0.001 * int(i)),
        "the carry at i": lambda i, y: y + 0.1 * (1.0 - y[i % 3]) * np.eye(3)[i % 3],
        "decided on a value": lambda i, y: y * 0.9 if y[0] > 0.5 else y + 0.2,
    }
    for name, body in bodies.items():
        T = 200 if name == "numpy rows" else 12

        def f(x, body=body, T=T):
            return np.sum(ha.fori_loop(0, T, body, x) ** 2)

        def python(x, body=body, T=T):
            for i in range(T):
                x = body(i, x)
            return np.sum(x ** 2)
        x = np.array([0.7, -0.2, 0.4])
        plan = ha.compile(f, x, backend="numpy")
        res = plan.gradient(x)
        assert float(res.value) == pytest.approx(float(python(x)), rel=1e-13), name
        np.testing.assert_allclose(res.gradient, numerical_gradient(python, x), rtol=1e-6,
                                   atol=1e-8, err_msg=name)
        if name == "numpy rows":  # (rolled: 200 steps reading F's rows)
            assert any(n.op == "loop" for n in plan.graph.nodes)
            np.testing.assert_allclose(ha.hessian(f, x).hessian, ha.hessian(python, x).hessian,
                                       rtol=1e-10, atol=1e-12)
    seen = []  # a value of the first trace of the body, stored outside it: named

    def stored(x):
        def body(i, y):
            seen.append(y)
            return y * 0.9 + F[i]
        y = ha.fori_loop(0, 10, body, x)
        return np.sum(y ** 2) + sum(np.sum(s) for s in seen)
    with pytest.raises(ha.TracingError, match="stored outside the body"):
        ha.gradient(stored, np.ones(3), backend="numpy")
    with pytest.raises(ha.TracingError, match="numpy.random"):  # (the Python loop's error)
        ha.gradient(lambda x: np.sum(ha.fori_loop(0, 3, lambda i, v: v + np.random.rand(),
                                                  x)), X0, backend="numpy")


def _scan_rows(T):
    """A scan with per-iteration rows in and out and the iteration index."""
    F = np.linspace(-1.0, 1.0, T * N).reshape(T, N)

    def f(x, W):
        def body(x, fk):
            x = x + 0.01 * np.tanh(W @ x + fk)
            return x, x[0] * x[1]
        x, ys = ha.scan(body, x, F)
        y = ha.fori_loop(0, T, lambda i, y: y * 0.999 + 1e-4 * i, x)
        return np.sum(x ** 2) + np.sum(ys) + np.sum(y)
    return f


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_what_a_loop_keeps_does_not_grow_with_its_trip_count(backend):
    """A loop runner keeps, per placement, a few rows from which its driver
    makes each iteration's arguments -- not a table of T argument lists and a
    view object per row (3.7 MB beside a 4 MB plan for 10^4 Euler steps).
    Measured as what a plan's first call leaves allocated once the runners'
    bodies are compiled (a second plan of the same loops: a new placement)."""
    import tracemalloc

    from hybridad.plans.tiered import join_all

    kept = {}
    for T in (200, 4000):
        f = _scan_rows(T)
        # (compiles the bodies; held, so its runners are the second plan's whenever the
        # collector runs)
        first = ha.compile(f, X0, W0, backend=backend)
        first.gradient(X0, W0)
        plan = ha.compile(lambda x, W: f(x, W), X0, W0, backend=backend)
        res = ha.GradientResult(X0)
        join_all()  # (tracemalloc counts every thread's: a tiered plan's compile of an
        tracemalloc.start()  # earlier test of this worker may still be running)
        try:
            before = tracemalloc.get_traced_memory()[0]
            plan.gradient(X0, W0, out=res)
            kept[T] = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        ref = ha.gradient(f, X0, W0, backend="numpy")
        np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-12, atol=1e-14)
    assert kept[4000] < kept[200] + 16384, kept


def test_a_broadcast_xs_is_read_in_place_not_copied():
    """The reverse scan of ``_scan_rows`` reads a cotangent broadcast over the
    steps (stride 0: every row the same) as an xs.  Its runner reads the rows
    in place -- each row is contiguous, the step between them the driver's --
    instead of copying T rows into a buffer of its own at each new plan."""
    from hybridad.backends import loops

    T = 3000
    f = _scan_rows(T)
    plan = ha.compile(f, X0, W0, backend="numba")
    got = plan.gradient(X0, W0)
    ref = ha.gradient(f, X0, W0, backend="numpy")
    np.testing.assert_allclose(got.gradient, ref.gradient, rtol=1e-12, atol=1e-14)
    with threshold.serial_loops(plan._loops_serial):
        runners = [loops.runner_for(loops._key(m, "numba")) for m in plan.graph.nodes
                   if m.op == "loop"]
    assert len(runners) >= 3
    staged = [b.nbytes for r in runners for b in r._staged.values()]
    assert all(n < T * 8 for n in staged), staged


def test_a_loop_start_also_read_by_the_body_on_every_backend_and_checkpointed():
    """``x`` as a loop's start and as a constant of its body: the two
    cotangents add (the constant's sum is not started at the carry's, which
    the same reverse loop computes).  The compiled plan, the rolled Python
    loop and a checkpointed plan agree with the numpy backend's."""
    x = np.abs(X0) / 2 + 0.2

    def long(x, W):  # 200 steps: a budget checkpoints them
        return np.sum(ha.fori_loop(0, 200, lambda i, c: c * (0.9 + 0.1 * x) +
                                   0.01 * np.tanh(W @ c), x) ** 2) + shared_loop(x, W)

    def rolled(x, W):
        return np.sum(_python_fori(0, 200, lambda i, c: c * (0.9 + 0.1 * x) +
                                   0.01 * np.tanh(W @ c), x) ** 2) + shared_unrolled(x, W)
    want = ha.gradient(long, x, W0, argnums=(0, 1), backend="numpy")
    fd = [_fd_grad(long, [x, W0], i) for i in (0, 1)]
    full = ha.compile(long, x, W0, argnums=(0, 1), backend="numpy")
    tight = ha.compile(long, x, W0, argnums=(0, 1), backend="numpy",
                       memory_budget=full.memory.total_bytes * 4 // 5)
    assert tight.checkpoint_levels >= 2
    plans = [ha.compile(long, x, W0, argnums=(0, 1)), ha.compile(rolled, x, W0, argnums=(0, 1)),
             tight]
    for plan in plans:
        got = plan.gradient(x, W0)
        for g, w, d in zip(got.gradient, want.gradient, fd, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-14)
            np.testing.assert_allclose(g, d, rtol=1e-6, atol=1e-8)
    out = ha.GradientResult((x, W0))
    with count_allocations() as counts:
        plans[0].gradient(x, W0, out=out)
    assert counts.allocations == 0


def test_namedtuple_carries():
    """A namedtuple carry (and a scan's per-step outputs) comes back as one."""
    import collections

    State = collections.namedtuple("State", ["a", "b"])

    def f(x):
        c = ha.fori_loop(0, 10, lambda i, c: State(c.a + 0.1 * np.sin(c.b),
                                                   c.b * 0.9 + 0.1 * c.a), State(x, x ** 2))
        assert type(c) is State
        return np.sum(c.a * c.b)

    def g(x):
        def step(c, r):
            new = State(c.a * 0.9 + r * c.b, np.tanh(c.b + r))
            return new, State(new.a, new.b * r)
        c, ys = ha.scan(step, State(x, 2 * x), np.linspace(0.1, 0.5, 5))
        assert type(c) is State and type(ys) is State
        return np.sum(c.a) + np.sum(ys.b ** 2)

    x = np.array([0.3, -1.2, 0.7])
    for fn in (f, g):
        for point in (x, 1.3 * x + 0.2):
            np.testing.assert_allclose(ha.gradient(fn, point).gradient, _fd_grad(fn, [point], 0),
                                       rtol=1e-6, atol=1e-8)


def test_an_inner_loop_starting_from_a_moving_row_keeps_its_compiled_run(monkeypatch):
    """An inner loop in a reverse body starts from the outer loop's stored
    carry of each step, a row that moves with the step: its runner points
    its copy table at the row instead of making the whole run again (40
    outer steps made 40 runs per call, past the runner's 16 places, before).
    The gradient matches the unrolled plan's, allocates nothing, and the
    same bits call after call."""
    from hybridad.backends import loops

    def nested(x, W):
        return nested_loop(x, W, steps=40)

    def unrolled(x, W):
        return nested_unrolled(x, W, steps=40)

    plan = ha.compile(nested, X0, W0)
    out = plan.gradient(X0, W0)
    first = out.gradient.copy()
    plan.gradient(X0, W0, out=out)
    made = []
    whole = loops.LoopRunner._whole
    monkeypatch.setattr(loops.LoopRunner, "_whole",
                        lambda self, hit, ops: made.append(1) or whole(self, hit, ops))
    for _ in range(3):
        plan.gradient(X0, W0, out=out)
    assert made == []
    np.testing.assert_array_equal(out.gradient, first)
    ref = ha.gradient(unrolled, X0, W0)
    np.testing.assert_allclose(out.gradient, ref.gradient, rtol=1e-12, atol=1e-14)
    assert_no_alloc(plan.gradient, X0, W0, out=out, n=5)


_WARM_NESTED = r"""
import warnings
import numpy as np
from numba.core.errors import NumbaWarning
import hybridad as ha

warnings.simplefilter("error", NumbaWarning)
W = np.linspace(-1, 1, 16).reshape(4, 4)


def f(x, W):
    def outer(i, x):
        return 0.5 * (x + ha.fori_loop(0, 3, lambda j, y: y + 0.01 * np.tanh(W @ y), x))
    return np.sum(ha.fori_loop(0, 7, outer, x) ** 2)


print(ha.gradient(f, np.linspace(0.1, 0.4, 4), W).value)
"""


def test_a_nested_loop_from_the_disk_cache_warns_nothing(tmp_path):
    """A program with object-mode blocks (a loop body calling an inner loop's
    runner) loaded from numba's disk cache compiles those blocks at its first
    call, where numba warned ``Code running in object mode won't allow
    parallel execution despite nogil=True`` at the user: generated code's
    business, filtered as the builds filter it.  Fresh processes, cold then
    warm cache, numba's warnings as errors."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    values = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", _WARM_NESTED], env=env, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        values.append(out.stdout.strip().splitlines()[-1])
    assert values[0] == values[1]


def test_a_view_of_an_argument_read_in_a_body_is_not_taken_for_a_view_of_the_body():
    """A loop body slicing an argument of ``f`` it closes over (``X[:3, :n]``,
    the rows of a scan inside a fori_loop): the slice's tracer is the body's,
    the argument's the outer trace's, numbered apart -- its node id matched one
    in the slice's chain of views, and linking the two as views of one
    another walked off the chain (``IndexError: tuple index out of range``)."""
    rng = np.random.default_rng(0)
    n = 4
    W, X, x = rng.standard_normal((n, n)) * 0.4, rng.standard_normal((5, 2 * n)) * 0.3, \
        rng.standard_normal(n)

    def f(x, W, X):
        def body(i, y):
            c, ys = ha.scan(lambda c, r: (c + 0.1 * np.sin(r * c), c * r), y, X[:3, :n])
            return (c + 0.01 * np.sum(ys, axis=0)) * 0.9
        return np.sum(ha.fori_loop(0, 3, body, x) ** 2)

    for backend in ("numba", "numpy"):
        got = ha.gradient(f, x, W, X, backend=backend).gradient
        np.testing.assert_allclose(got, numerical_gradient(lambda z: f(z, W, X), x), rtol=1e-6,
                                   atol=1e-9)
