"""The public contract: results, argnums, pytrees, plans, the cache, threads,
closures, tracing errors."""

import gc
import threading
import weakref

import numpy as np
import pytest
from conftest import assert_grad, rand

import hybridad as ha
from hybridad import api
from hybridad.plans import cache


def exp_sum(x):
    r = np.sum(np.exp(-3 * (x + 1)))
    return r ** 2 + r ** 3 + r ** 4 / 4


def test_out_is_written_in_place_and_returned():
    x = rand((7,), seed=1)
    res = ha.GradientResult(x)
    value_buf, grad_buf = res.value, res.gradient
    assert ha.gradient(exp_sum, x, out=res) is res
    assert res.value is value_buf and res.gradient is grad_buf
    assert_grad(exp_sum, (x,))
    np.testing.assert_allclose(res.gradient, ha.gradient(exp_sum, x).gradient, rtol=0)
    assert float(res.value) == pytest.approx(exp_sum(x), rel=1e-14)


def test_design_example():
    def f(x, A):
        return np.sum(np.exp(-3 * (x + 1))) ** 2 + x @ (A @ x)

    x, A = rand((6,), seed=2), rand((6, 6), seed=3)
    res = ha.GradientResult(x)
    ha.gradient(f, x, A, out=res)
    np.testing.assert_allclose(res.gradient, assert_grad(f, (x, A)).gradient, rtol=1e-14)
    g = ha.compile(f, x, A)
    res2 = g.gradient(x, A, out=ha.GradientResult(x))
    np.testing.assert_array_equal(res2.gradient, res.gradient)
    assert g.value(x, A) == pytest.approx(f(x, A), rel=1e-14)


def test_argnums_tuple_and_negative():
    def f(x, y, c):
        return np.sum(x * y ** 2 + c)

    x, y, c = rand((3,), seed=4), rand((3,), seed=5), rand((3,), seed=6)
    res = assert_grad(f, (x, y, c), argnums=(0, 1))
    assert isinstance(res.gradient, tuple) and len(res.gradient) == 2
    res = ha.gradient(f, x, y, c, argnums=-2)
    np.testing.assert_allclose(res.gradient, 2 * x * y)


def test_pytree_argument():
    def loss(params, X):
        W, b = params["W"], params["b"]
        return np.sum(np.tanh(X @ W + b) ** 2)

    params = {"W": rand((3, 2), seed=7), "b": rand((2,), seed=8)}
    X = rand((5, 3), seed=9)
    res = ha.gradient(loss, params, X)
    assert set(res.gradient) == {"W", "b"}
    for key in params:
        def fk(v, key=key):
            return loss({**params, key: v}, X)

        assert_grad(fk, (params[key],))
        np.testing.assert_allclose(res.gradient[key], ha.gradient(fk, params[key]).gradient,
                                   rtol=1e-13)
    res2 = ha.GradientResult(params)
    ha.gradient(loss, params, X, out=res2)
    np.testing.assert_array_equal(res2.gradient["W"], res.gradient["W"])
    lres = ha.gradient(lambda p: np.sum(p[0] * p[1]), [rand((2,), seed=1), rand((2,), seed=2)])
    assert isinstance(lres.gradient, list) and len(lres.gradient) == 2


def test_diffresult_caller_storage():
    x = rand((4,), seed=10)
    value, grad = np.zeros(()), np.zeros(4)
    res = ha.DiffResult(value, grad)
    ha.gradient(exp_sum, x, out=res)
    assert res.value is value and res.derivs[0] is grad
    np.testing.assert_allclose(grad, ha.gradient(exp_sum, x).gradient, rtol=0)


def test_constant_arguments_cost_no_derivative_work():
    def f(x, A):
        return x @ (A @ x)

    plan = ha.compile(f, rand((5,), seed=11), rand((5, 5), seed=12), backend="numpy")
    backward = [n for n in plan.graph.nodes if n.phase == "backward"]
    assert backward, "the plan has a backward pass"
    computed = [n for n in backward if n.op not in ("transpose", "reshape", "const")]
    assert all(n.shape != (5, 5) for n in computed), "no adjoint of the constant A"


def test_structure_of_simple_plan():
    plan = ha.compile(lambda x: np.sum(np.exp(-3 * (x + 1))), rand((10,), seed=13),
                      backend="numpy")
    ops = [n.op for n in plan.graph.nodes]
    assert ops.count("exp") == 1, "exp is evaluated once; the backward reuses it"
    text = plan.explain()
    for word in ("forward", "backward", "bytes", "generated source", "exp"):
        assert word in text


def test_accumulation_is_in_place():
    # x used k times: contributions are added into one buffer as they arrive
    plan = ha.compile(lambda x: np.sum(np.sin(x) + np.cos(x) + x * x + np.exp(x)),
                      rand((10,), seed=14), backend="numpy")
    ops = [n.op for n in plan.graph.nodes if n.phase == "backward"]
    # one op creates the adjoint buffer; the other contributions are added into it
    assert ops.count("iadd") == 3 and ops.count("add") <= 1


def test_closed_over_array_is_by_reference():
    A = np.ones(3)

    def f(x):
        return np.sum(A * x * x)

    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(ha.gradient(f, x).gradient, 2 * x)
    A[:] = 3.0  # in-place change is seen by the cached plan
    np.testing.assert_allclose(ha.gradient(f, x).gradient, 6 * x)
    assert len(api.cached_plans(f)) == 1


def test_static_python_scalars_and_retrace_per_shape():
    def f(x, alpha, n):
        out = x
        for _ in range(n):
            out = np.sin(out) * alpha
        return np.sum(out)

    x = rand((4,), seed=15)
    for alpha in (0.5, 2.0):
        for n in (1, 3):
            assert_grad(f, (x, alpha, n))
    ha.gradient(f, rand((6,), seed=16), 0.5, 1)
    numba_plans = [p for p in api.cached_plans(f) if p.backend == "numba"]
    assert len(numba_plans) == 5  # 2 alphas x 2 loop counts + 1 new shape


def test_cache_holds_no_dead_function():
    refs = []
    x = rand((3,), seed=17)
    before = len(cache._weak)
    for k in range(20):
        fn = (lambda k: lambda x: np.sum(x * k))(k)
        np.testing.assert_allclose(ha.gradient(fn, x).gradient, np.full(3, k))
        refs.append(weakref.ref(fn))
    del fn
    gc.collect()
    assert all(r() is None for r in refs), "plans must not keep their functions alive"
    assert len(cache._weak) <= before


def test_cache_is_bounded_per_function():
    def f(x):
        return np.sum(x)

    for n in range(api.MAX_PLANS_PER_FUNCTION + 5):
        ha.gradient(f, np.ones(n + 1))
    assert len(api.cached_plans(f)) == api.MAX_PLANS_PER_FUNCTION


def test_bound_method_cached_under_instance():
    class Model:
        def __init__(self):
            self.w = np.arange(3.0)

        def loss(self, x):
            return np.sum(self.w * x ** 2)

    m = Model()
    x = rand((3,), seed=18)
    for _ in range(3):
        np.testing.assert_allclose(ha.gradient(m.loss, x).gradient, 2 * m.w * x)
    assert len(api.cached_plans(m.loss)) == 1


def test_plan_from_two_threads():
    plan = ha.compile(exp_sum, rand((50,), seed=19))
    xs = [rand((50,), seed=20 + t) for t in range(2)]
    expected = [ha.gradient(exp_sum, x).gradient.copy() for x in xs]
    errors = []

    def work(t):
        res = ha.GradientResult(xs[t])
        for _ in range(300):
            plan.gradient(xs[t], out=res)
            if not np.array_equal(res.gradient, expected[t]):
                errors.append(t)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors


def test_float_input_converted_and_constant_function():
    res = ha.gradient(lambda x: x * x, 3.0)
    assert float(res.value) == 9.0 and float(res.gradient) == 6.0
    res = ha.gradient(lambda x: np.sum(x) * 0 + 2.0, np.ones(3))
    np.testing.assert_array_equal(res.gradient, 0)
    res = ha.gradient(lambda x, y: np.sum(y), np.ones(3), np.ones(2))
    np.testing.assert_array_equal(res.gradient, 0)
    assert float(res.value) == 2.0


def test_repeated_gradient_calls_share_one_plan_and_still_validate():
    # ha.gradient looks plain-array calls up without flattening: same key, same plan
    def f(x, c):
        return np.sum(np.sin(x) * c)

    x, c = rand((5,), seed=31), rand((5,), seed=32)
    res = ha.GradientResult(x)
    for _ in range(3):
        ha.gradient(f, x, c, out=res)
    ha.gradient(f, x, c)  # without out: the general path, same cache entry
    assert len(api.cached_plans(f)) == 1
    np.testing.assert_allclose(res.gradient, np.cos(x) * c, rtol=1e-14)
    bad = ha.DiffResult(np.zeros(()), np.zeros(4))
    with pytest.raises(ValueError, match="shape"):
        ha.gradient(f, x, c, out=bad)
    np.testing.assert_array_equal(bad.derivs[0], np.zeros(4))


def test_pytree_and_static_arguments_reuse_the_last_plan(monkeypatch):
    """ha.gradient / hvp with tuple, nested-list and static-float arguments:
    a call like the last one runs its plan without the plan cache's lookup
    (the plan's generated structure check, no flattening, no inspect), and
    allocates nothing; any other structure, static value, shape or dtype gets
    its own plan (a right answer, never the last plan's)."""
    from hybridad.testing import count_allocations

    rng = np.random.default_rng(0)
    W, b, X = rng.standard_normal((5, 3)), rng.standard_normal(3), rng.standard_normal((8, 5))

    def f(p, X, scale):
        (W,), (b,) = p
        return scale * np.sum(np.tanh(X @ W + b) ** 2)

    def reference(p, X, scale):
        return ha.gradient(f, p, X, scale, backend="numpy")

    p = ([W], [b])
    res = ha.gradient(f, p, X, 2.0)
    import hybridad.api as api

    calls = []
    real_lookup = api._lookup
    monkeypatch.setattr(api, "_lookup", lambda *a, **k: calls.append(1) or real_lookup(*a, **k))
    with count_allocations() as counts:
        for _ in range(3):
            ha.gradient(f, p, X, 2.0, out=res)
    assert counts.allocations == 0 and not calls
    np.testing.assert_allclose(res.gradient[0][0], reference(p, X, 2.0).gradient[0][0],
                               rtol=1e-12)
    r = ha.gradient(f, ((W,), (b,)), X, 2.0)  # another structure (tuples): another plan
    assert type(r.gradient[0]) is tuple and calls
    np.testing.assert_allclose(r.gradient[0][0], res.gradient[0][0], rtol=1e-12)
    calls.clear()
    r3 = ha.gradient(f, p, X, 3.0)  # another static value: its own plan
    assert calls
    np.testing.assert_allclose(r3.gradient[1][0], 1.5 * res.gradient[1][0], rtol=1e-12)
    r4 = ha.gradient(f, ([W[:4]], [b]), X[:, :4], 2.0)  # another shape
    np.testing.assert_allclose(r4.gradient[0][0],
                               reference(([W[:4]], [b]), X[:, :4], 2.0).gradient[0][0],
                               rtol=1e-12)

    def g(q):
        return np.sum(q[0] ** 3) + np.sum(q[1] ** 2)

    h = ha.hvp(g, (W, b), (W, b))
    h2 = ha.hvp(g, (W, b), (W, b))
    np.testing.assert_allclose(h2.hvp[0], 6 * W * W, rtol=1e-13)
    np.testing.assert_allclose(h.hvp[1], 2 * b, rtol=1e-13)


_XV = np.array([0.5, -1.0, 1.5, 0.25, -0.75])


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("case", [
    (lambda x, s: np.sum(x * s - np.log(s)), np.array(1.7)),
    (lambda x, s: np.sum(x * s + s * s), np.array([1.7])),
    (lambda x, s: np.sum(x * s + np.exp(s)) + np.sum(np.sin(x) * s ** 2), np.array(0.3)),
    (lambda x, s: np.sum((x / s) ** 2) + x.size * np.log(s[0]), np.array([1.3])),
], ids=["log", "square", "exp_sin", "gauss"])
def test_value_program_of_regions_that_sum_scalar_partials(case, backend):
    """``plan.value`` runs the value program: the gradient graph's forward
    regions without their summed partials (a scalar parameter's, summed in
    the region's own loop), on the gradient plan's memory plan -- whose
    scratch block holds room for those sums too (numba: the block was folded
    whole, 4 of 5 values summed)."""
    f, s = case
    for argnums in (1, (0, 1)):
        plan = ha.compile(f, _XV, s, argnums=argnums, backend=backend)
        for x in (_XV, np.linspace(-2.0, 3.0, 5)):
            assert plan.value(x, s) == pytest.approx(f(x, s), rel=1e-14)
            assert float(plan.gradient(x, s).value) == pytest.approx(f(x, s), rel=1e-14)
