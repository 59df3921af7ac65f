"""Derivatives inside a function being differentiated (autograd's and JAX's
``grad`` of ``grad``), and size-1 outputs taken as scalars."""

import numpy as np
import pytest
from conftest import BACKENDS, assert_grad

import hybridad as ha
from hybridad.testing import assert_no_alloc, numerical_gradient

X = np.linspace(0.5, 1.5, 4)


def _inner(y):
    return np.sum(np.sin(y) * y ** 2)


def _grad_dot_x(x):
    return np.sum(ha.gradient(_inner, x).gradient * x)


def test_gradient_of_a_gradient():
    g = np.cos(X) * X ** 2 + 2 * X * np.sin(X)
    dg = -np.sin(X) * X ** 2 + 4 * X * np.cos(X) + 2 * np.sin(X)
    res = assert_grad(_grad_dot_x, (X,))
    np.testing.assert_allclose(res.gradient, g + X * dg, rtol=1e-14)


def test_closed_over_values_stay_constants_of_the_inner_function():
    """No perturbation confusion: ``z`` depends on ``x`` but is a constant of
    the inner function, whose argument is a fresh variable."""
    def f(x):
        z = np.sum(x ** 2)
        return np.sum(ha.gradient(lambda y: np.sum(y * z), x).gradient)  # n * sum(x^2)

    for backend in BACKENDS:
        np.testing.assert_allclose(ha.gradient(f, X, backend=backend).gradient, 8 * X,
                                   rtol=1e-14)


def test_any_depth_and_several_arguments():
    def f(x):
        return np.sum(ha.gradient(
            lambda y: np.sum(ha.gradient(lambda z: np.sum(z ** 4), y).gradient), x).gradient)

    np.testing.assert_allclose(ha.gradient(f, X).gradient, 24 * X, rtol=1e-14)

    def g(x, w):
        gx, gw = ha.gradient(lambda a, b: np.sum(a * b ** 2), x, w, argnums=(0, 1)).gradient
        return np.sum(gx * gw)  # sum(w^2 * 2 a w) = 2 sum(x w^3)

    w = X[::-1].copy()
    res = ha.gradient(g, X, w, argnums=(0, 1))
    np.testing.assert_allclose(res.gradient[0], 2 * w ** 3, rtol=1e-14)
    np.testing.assert_allclose(res.gradient[1], 6 * X * w ** 2, rtol=1e-14)


def test_hessian_of_a_function_holding_a_gradient():
    dg = -np.sin(X) * X ** 2 + 4 * X * np.cos(X) + 2 * np.sin(X)
    d2g = -X ** 2 * np.cos(X) - 6 * X * np.sin(X) + 6 * np.cos(X)
    for backend in BACKENDS:
        res = ha.hessian(_grad_dot_x, X, backend=backend)
        np.testing.assert_allclose(res.hessian, np.diag(2 * dg + X * d2g), rtol=1e-13,
                                   atol=1e-14)
        np.testing.assert_allclose(np.diag(res.hessian),
                                   [numerical_gradient(lambda x: numerical_gradient(
                                       _grad_dot_x, x)[i], X)[i] for i in range(4)], rtol=1e-5)


def test_nested_hessian_and_jacobian():
    def f(x):
        h = ha.hessian(lambda y: np.sum(y ** 3 * x[0]), x).hessian  # diag(6 y x0)
        return np.sum(h)

    # d/dx sum(6 x x0): 6 x0 everywhere, plus 6 sum(x) on x0
    expected = np.full(4, 6 * X[0])
    expected[0] += 6 * X.sum()
    np.testing.assert_allclose(ha.gradient(f, X).gradient, expected, rtol=1e-14)

    def g(x):
        return np.sum(ha.jacobian(lambda y: np.cumsum(y ** 2), x).jacobian)

    assert_grad(g, (X,))


def test_a_nested_plan_runs_without_allocating():
    plan = ha.compile(_grad_dot_x, X, backend="numba")
    out = ha.DiffResult(np.zeros(()), np.zeros(4))
    plan.gradient(X, out=out)
    assert_no_alloc(lambda: plan.gradient(X, out=out))


def test_out_inside_a_trace_is_refused():
    def f(x):
        return np.sum(ha.gradient(_inner, x, out=ha.DiffResult(np.zeros(()),
                                                               np.zeros(4))).gradient)

    with pytest.raises(TypeError, match="out="):
        ha.gradient(f, X)


@pytest.mark.parametrize("shape", [(1,), (1, 1)])
def test_size_one_outputs_are_scalars(shape):
    def f(x):
        return np.sum(x ** 2).reshape(shape)

    res = ha.gradient(f, X)
    assert res.value.shape == ()
    np.testing.assert_allclose(res.gradient, 2 * X, rtol=1e-15)
    with pytest.raises(ValueError, match="scalar"):
        ha.gradient(lambda x: x[:2] ** 2, X)


@pytest.mark.parametrize("first", ["number", "static float"])
def test_a_function_called_directly_first_still_nests(first):
    # a direct call leaves the function's recent plan (its match takes numbers and
    # static values); a traced argument must miss that match and nest (a tracer's
    # __class__ says ndarray or a numpy scalar, its type does not)
    if first == "number":
        def inner(x):
            return np.sin(x) * x

        assert ha.gradient(inner, 0.3).gradient == pytest.approx(np.cos(0.3) * 0.3 +
                                                                 np.sin(0.3))

        def outer(x):
            return ha.gradient(inner, x).gradient * 2.0

        want = 2 * (2 * np.cos(0.3) - 0.3 * np.sin(0.3))
        assert float(ha.gradient(outer, 0.3).gradient) == pytest.approx(want, rel=1e-12)
    else:
        def inner(x, a):
            return np.sum(np.sin(x) * a)

        x = np.array([0.3, 0.4])
        ha.gradient(inner, x, 2.0)

        def outer(x):
            return np.sum(ha.gradient(inner, x, 2.0).gradient)

        np.testing.assert_allclose(ha.gradient(outer, x).gradient, -2 * np.sin(x), rtol=1e-12)


def _leapfrog(form, steps=4):
    """Steps of ``q -= 0.1 dV/dq``, the force a gradient taken inside the step."""
    def force(q):
        return ha.gradient(_inner, q).gradient

    def f(x):
        if form == "fori_loop":
            q = ha.fori_loop(0, steps, lambda i, q: q - 0.1 * force(q), x)
        elif form == "scan":
            q, _ = ha.scan(lambda q, _: (q - 0.1 * force(q), None), x, None, length=steps)
        else:
            q = x
            for _ in range(steps):
                q = q - 0.1 * force(q)
        return np.sum(q ** 2)
    return f


@pytest.mark.parametrize("form", ["fori_loop", "scan"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_gradient_inside_a_loop_body(form, backend):
    """A gradient taken in a ``fori_loop`` / ``scan`` body (a leapfrog's
    force): the gradient through the loop is the Python loop's, and matches
    finite differences; the plan allocates nothing per call.  It raised an
    internal TypeError while the body was traced (a view of a literal)."""
    f = _leapfrog(form)
    got = ha.gradient(f, X, backend=backend)
    want = ha.gradient(_leapfrog("python"), X, backend="numpy")
    assert got.value == pytest.approx(want.value, rel=1e-13)
    np.testing.assert_allclose(got.gradient, want.gradient, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got.gradient, numerical_gradient(f, X), rtol=1e-6, atol=1e-8)
    plan = ha.compile(f, X, backend=backend)
    out = ha.GradientResult(X)
    plan.gradient(X, out=out)
    np.testing.assert_array_equal(out.gradient, got.gradient)
    if backend == "numba":
        assert_no_alloc(lambda: plan.gradient(X, out=out))


_RNG = np.random.default_rng(11)
_XM, _YM = _RNG.standard_normal((20, 4)), _RNG.standard_normal(20)


def _fit_loss(w):
    return np.mean((np.tanh(_XM @ w) - _YM) ** 2)


@pytest.mark.parametrize("steps", [1, 5])
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_inner_gradient_through_a_matrix_vector_product(steps, backend):
    """MAML's inner steps, ``w - lr grad(loss)(w)`` with ``X @ w`` in the loss,
    in a Python loop: the plan's trace records a matrix-vector product as one
    composite node while a loop may roll, which has no rules of its own --
    the inner gradient lowers them first.  It was refused (``'matvec' has no
    derivative rule``).  Second derivatives checked against finite differences
    of the first (the outer gradient of an inner gradient's step)."""
    def f(w):
        for _ in range(steps):
            w = w - 0.3 * ha.gradient(_fit_loss, w).gradient
        return _fit_loss(w)

    w = _RNG.standard_normal(4)
    got = ha.gradient(f, w, backend=backend)
    np.testing.assert_allclose(got.gradient, numerical_gradient(f, w), rtol=1e-6, atol=1e-9)
    want = ha.gradient(f, w, backend="numpy")
    np.testing.assert_allclose(got.gradient, want.gradient, rtol=1e-12, atol=1e-15)
    in_loop = ha.gradient(lambda w: _fit_loss(ha.fori_loop(
        0, steps, lambda i, w: w - 0.3 * ha.gradient(_fit_loss, w).gradient, w)), w,
        backend=backend)
    np.testing.assert_allclose(in_loop.gradient, got.gradient, rtol=1e-12, atol=1e-15)
    plan = ha.compile(f, w, backend=backend)
    out = plan.gradient(w)
    np.testing.assert_array_equal(out.gradient, got.gradient)
    assert_no_alloc(plan.gradient, w, out=out, n=10)


_W0 = np.random.default_rng(5).standard_normal(24)
_POINTS = np.linspace(0.0, 1.0, 5)


def _net(w):
    """u(x) of a one-hidden-layer tanh network, its weights ``w`` closed over."""
    return lambda x: np.sum(np.tanh(w[:8] * x + w[8:16]) * w[16:])


def _physics_loss(w):
    """A physics-informed loss: u'' + u at fixed points, the derivatives taken
    in x (plain numbers) of a network over the outer function's weights."""
    u = _net(w)
    loss = 0.0
    for x in _POINTS:
        d2 = ha.gradient(lambda y: ha.gradient(u, y).gradient, x).gradient
        loss = loss + (d2 + u(x)) ** 2
    return loss


def _penalty(w):
    """A gradient penalty: (|d u / d x| - 1)^2 at fixed points, array-valued."""
    g = ha.gradient(lambda x: np.sum(np.tanh(w[:5] * x) ** 2), _POINTS).gradient
    return (np.sqrt(np.sum(g ** 2)) - 1.0) ** 2


@pytest.mark.parametrize("f", [_physics_loss, _penalty], ids=["physics", "penalty"])
def test_an_inner_function_of_plain_arguments_closing_over_the_outer_ones(f):
    """The inner function takes plain numbers or arrays and closes over the
    outer function's tracers (a physics-informed loss, a gradient penalty):
    it is differentiated inside the outer trace.  Tracing it for a plan of its
    own raised "a traced value escaped its trace".  Checked against finite
    differences on both backends, and 0 allocations per call of the plan."""
    res = assert_grad(f, (_W0,))
    plan = ha.compile(f, _W0, backend="numba")
    out = ha.GradientResult(_W0)
    plan.gradient(_W0, out=out)
    np.testing.assert_allclose(out.gradient, res.gradient, rtol=1e-11, atol=1e-13)
    assert_no_alloc(lambda: plan.gradient(_W0, out=out))


def test_closures_over_outer_values_with_hessians_jacobians_and_a_swallowed_error():
    def closes(x):  # autograd's test_enclosing_scope_ref: d/dx (x * x) = 2x
        return x * ha.gradient(lambda y: x * y, 2.0).gradient

    assert float(ha.gradient(closes, 1.5).gradient) == pytest.approx(3.0, rel=1e-15)

    def hess(x):  # hessian of sum(x * y^3) at y = 1: diag(6 x)
        return np.sum(ha.hessian(lambda y: np.sum(x * y ** 3), np.ones(4)).hessian * x)

    np.testing.assert_allclose(ha.gradient(hess, X).gradient, 12 * X, rtol=1e-14)

    def jac(x):  # jacobian of x * sin(y) at y = 0.5: diag(x cos 0.5)
        return np.sum(ha.jacobian(lambda y: x * np.sin(y), np.full(4, 0.5)).jacobian ** 2)

    np.testing.assert_allclose(ha.gradient(jac, X).gradient, 2 * X * np.cos(0.5) ** 2,
                               rtol=1e-14)

    def swallowing(x):  # code that catches everything must not get its fallback traced
        def inner(y):
            try:
                return np.sum(x * y ** 2)
            except Exception:  # noqa: BLE001
                return np.sum(y)
        return np.sum(ha.gradient(inner, np.ones(4)).gradient * x)  # sum(2 x^2)

    np.testing.assert_allclose(ha.gradient(swallowing, X).gradient, 4 * X, rtol=1e-14)


def test_a_plan_compiled_inside_cannot_close_over_outer_values():
    def f(x):
        plan = ha.compile(lambda y: np.sum(x * y), X)
        return np.sum(plan.gradient(X).gradient)

    with pytest.raises(ha.errors.OuterTracerError, match="enclosing function"):
        ha.gradient(f, X)


def test_containers_of_tracers_as_differentiated_arguments():
    """A tuple, list, dict or namedtuple of tracers (and arrays) as the inner
    gradient's argument: its gradient has the same structure.  These raised
    NotImplementedError (autograd's test_grads on containers)."""
    import collections

    Pair = collections.namedtuple("Pair", "a b")

    def g(t):  # t: any container of (a, b)
        a, b = (t["a"], t["b"]) if isinstance(t, dict) else tuple(t)
        return np.sum(a ** 2 * np.sin(b))

    for wrap in (tuple, list, lambda ab: {"a": ab[0], "b": ab[1]}, lambda ab: Pair(*ab)):
        def f(x, wrap=wrap):
            grad = ha.gradient(g, wrap((x[:2], x[2:] * 2.0))).gradient
            ga, gb = (grad["a"], grad["b"]) if isinstance(grad, dict) else tuple(grad)
            assert type(grad) is type(wrap((1, 2)))
            return np.sum(ga * gb)

        assert_grad(f, (X,))

    def mixed(x):  # a tracer and a constant array in one tuple, two arguments
        ga, gw = ha.gradient(lambda p, s: np.sum(p[0] * p[1]) * s, (x, np.ones(4)), 3.0,
                             argnums=(0, 1)).gradient
        return np.sum(ga[0] * x) + np.sum(ga[1]) + gw

    assert_grad(mixed, (X,))


def test_hessian_vector_products_inside_a_traced_function():
    """``ha.hvp`` on tracers (x, v or both) and of a function closing over the
    outer values: value, gradient and ``H v`` as traced values.  It raised
    NotImplementedError."""
    def on_x(x):  # H v of sum(y^3) at y = x along ones: 6 x
        return np.sum(ha.hvp(lambda y: np.sum(y ** 3), x, np.ones(4)).hvp ** 2)

    np.testing.assert_allclose(ha.gradient(on_x, X).gradient, 72 * X, rtol=1e-14)

    def on_v_closing(x):  # H v of sum(x y^3) at y = 1 along v = x: 6 x^2
        r = ha.hvp(lambda y: np.sum(x * y ** 3), np.ones(4), x)
        return np.sum(r.hvp) + np.sum(r.gradient * x)  # + sum(3 x^2)

    np.testing.assert_allclose(ha.gradient(on_v_closing, X).gradient, 18 * X, rtol=1e-14)

    def two(x):  # two arguments, v a tuple
        r = ha.hvp(lambda a, b: np.sum(a ** 2 * np.sin(b)), x, (x[::-1], np.ones(4)), x * 2,
                   argnums=(0, 1))
        return np.sum(r.hvp[0] * x) + np.sum(r.hvp[1] ** 2)

    assert_grad(two, (X,))


@pytest.mark.parametrize("form", ["fori_loop", "python"])
def test_an_inner_gradient_in_a_loop_body_closing_over_outer_and_body_values(form):
    """The inner function closes over the outer function's argument and the
    loop's carry, its own argument a plain number: differentiated inside the
    body's trace (which reads the outer value as the body's input)."""
    def f(x):
        def body(i, q):
            g = ha.gradient(lambda y: np.sum(x * np.sin(y * q)), 0.5).gradient
            return q - 0.1 * g * q
        if form == "fori_loop":
            q = ha.fori_loop(0, 3, body, x)
        else:
            q = x
            for i in range(3):
                q = body(i, q)
        return np.sum(q ** 2)

    assert_grad(f, (X,))
