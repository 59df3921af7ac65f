"""What a call copies or converts into the plan's own buffers is checked
before it is used: a complex direction ``v`` (or scipy's ``x``, ``p``,
``y``) is refused by name, not cut to its real part; a parameter an
optimizer step updates in place must be arrays, not numbers it would convert
into a new array; and a message about a leaf of a tuple, list or dict
argument names the leaf (``'p'['W']``).  Every refusal leaves the caller's
buffers as they were, and the plan works on the next good call."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import hybridad as ha
import hybridad.scipy as hs
from hybridad.optim import SGD
from hybridad.testing import count_allocations

SENTINEL = 12345.0


def cubes(x):
    return np.sum(x ** 3) + np.sum(x[1:] * x[:-1])


X = np.array([1.0, 2.0, 3.0, -0.5])
V = np.array([1.0, -1.0, 0.5, 2.0])
H = np.diag(6 * X) + np.diag(np.ones(3), 1) + np.diag(np.ones(3), -1)


def _filled(res):
    for buf in (res.value, *res.derivs):
        buf[...] = SENTINEL
    return res


def _hvp_calls():
    hp = ha.compile(cubes, X, hvp=True)
    hs_ = ha.compile(cubes, X, hessian=True)
    lin = ha.compile(cubes, X, hessian=True)
    lin.linearize(X)
    yield "ha.hvp", lambda v, out: ha.hvp(cubes, X, v, out=out)
    yield "hvp=True plan", lambda v, out: hp.hvp(X, v=v, out=out)
    yield "Hessian plan hvp(x, v=)", lambda v, out: hs_.hvp(X, v=v, out=out)
    yield "linearize + hvp(v=)", lambda v, out: lin.hvp(v=v, out=out)


@pytest.mark.parametrize("bad", ["complex", "complex list", "object", "strings"])
def test_a_direction_of_complex_or_non_numbers_is_refused_by_every_hvp(bad):
    v = {"complex": V + 1j, "complex list": [1 + 1j, 0, 0, 0],
         "object": np.array([1.0, None, 2.0, 3.0], dtype=object),
         "strings": np.array(["1", "2", "3", "4"])}[bad]
    for name, call in _hvp_calls():
        res = _filled(ha.HvpResult(X))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (numpy's ComplexWarning is no answer)
            with pytest.raises(TypeError, match=r"\bv must be real numbers"):
                call(v, res)
        for buf in (res.value, *res.derivs):
            assert np.all(buf == SENTINEL), name
        call(V, res)  # the plan is not poisoned
        np.testing.assert_allclose(res.hvp, H @ V, rtol=1e-13, err_msg=name)
        np.testing.assert_allclose(res.gradient, 3 * X ** 2 + np.r_[X[1:], 0] + np.r_[0, X[:-1]],
                                   rtol=1e-13, err_msg=name)


def test_integer_and_list_directions_are_converted():
    for name, call in _hvp_calls():
        res = ha.HvpResult(X)
        call([1, -1, 0, 2], res)
        np.testing.assert_allclose(res.hvp, H @ np.array([1.0, -1.0, 0.0, 2.0]), rtol=1e-13,
                                   err_msg=name)


def test_scipy_adapters_refuse_complex_points_and_directions():
    obj = hs.Objective(cubes, X)
    with pytest.raises(TypeError, match=r"\bx must be real numbers"):
        obj.jac(X + 1j)
    with pytest.raises(TypeError, match=r"\bp must be real numbers"):
        obj.hessp(X, V + 1j)
    np.testing.assert_allclose(obj.hessp(X, V), H @ V, rtol=1e-13)
    with pytest.raises(TypeError, match=r"\bx must be real numbers"):
        obj.fun(np.array([None] * 4, dtype=object))
    assert obj.fun(X) == pytest.approx(cubes(X), rel=1e-15)

    jac = hs.OdeJacobian(lambda t, y: -y ** 3, 0.0, X)
    for y in (None, X + 1j, "abcd"):
        with pytest.raises(TypeError, match=r"\by must be real numbers"):
            jac(0.0, y)
    with pytest.raises(ValueError, match=r"\by has shape \(\)"):
        jac(0.0, 1.0)  # (a scalar would be broadcast into every element)
    np.testing.assert_allclose(np.diag(np.asarray(jac(0.0, X))), -3 * X ** 2, rtol=1e-13)

    sj = hs.SparseJacobian(lambda x: x[1:] * x[:-1], X)
    with pytest.raises(TypeError, match=r"\bx must be real numbers"):
        sj(X + 1j)


def test_an_optimizer_step_refuses_parameters_it_would_convert():
    """A step updates its parameters in place: a list of numbers (or a
    number) would be converted into a new array and the update lost."""
    t = np.array([1.0, -2.0, 0.5])
    plan = ha.compile(lambda w, t: np.sum((w - t) ** 2), np.zeros(3), t, update=SGD(0.1))
    for bad, what in [([0.0, 0.0, 0.0], "a list holding a number"), (0.0, "a number")]:
        with pytest.raises(ValueError, match=f"parameter 'w' is updated in place.*{what}"):
            plan.step(bad, t)
    w = np.zeros(3)
    plan.step(w, t)
    np.testing.assert_allclose(w, 0.2 * t, rtol=1e-15)  # the first step: nothing counted before
    tree = ha.compile(lambda p, t: np.sum((p["a"] - t) ** 2) + np.sum(p["b"] ** 2),
                      {"a": np.zeros(3), "b": np.ones(2)}, t, update=SGD(0.1))
    with pytest.raises(ValueError, match=r"parameter 'p' is updated in place.*a dict holding "
                                         r"a list"):
        tree.step({"a": np.zeros(3), "b": [1.0, 1.0]}, t)
    p = {"a": np.zeros(3), "b": np.ones(2)}
    tree.step(p, t)
    np.testing.assert_allclose(p["b"], 0.8 * np.ones(2), rtol=1e-15)


def test_a_batch_of_float32_points_whose_values_promote_takes_their_batch_result():
    """f(x32) is float64 where f reads a float64 constant (numpy's promotion):
    ``BatchGradientResult(X)`` of the float32 X takes the values as a point's
    ``GradientResult(x)`` does (converted), and allocates nothing."""
    w64 = np.linspace(-1.0, 1.0, 4)

    def f(x):
        return np.sum(np.sin(x) * w64)

    X32 = np.random.default_rng(0).uniform(-1, 1, (5, 4)).astype(np.float32)
    for backend in ("numba", "numpy"):
        plan = ha.compile(f, X32[0], backend=backend)
        out = ha.BatchGradientResult(X32)
        plan.gradient_batch(X32, out=out)
        for x, val, g in zip(X32, out.value, out.gradient, strict=True):
            one = plan.gradient(x, out=ha.GradientResult(x))
            assert val == pytest.approx(float(one.value), rel=1e-6)  # (another program)
            np.testing.assert_allclose(g, one.gradient, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(out.value, [np.sum(np.sin(x.astype(float)) * w64)
                                               for x in X32], rtol=1e-6)
        with count_allocations() as counts:
            plan.gradient_batch(X32, out=out)
        assert counts.allocations == 0, counts


def test_sparsity_of_arrays_filled_with_traced_values():
    """``np.full(n, t)`` of a traced ``t`` (an array f makes and fills) is
    traced on a second try by sparsity detection as by every plan."""
    n = 6
    y = np.linspace(0.1, 1.0, n)

    def f(y):
        return np.full(n, np.sum(y ** 2)) + y

    def g(y):
        z = np.zeros(n + 2)
        z[1:-1] = y
        return np.sum(np.full(n, np.sum(y)) * y) + np.sum(z[2:] * z[:-2])

    dense = ha.jacobian(f, y).jacobian
    sparse = ha.jacobian(f, y, out=ha.SparseJacobianResult(f, y)).jacobian.toarray()
    np.testing.assert_allclose(sparse, dense, rtol=1e-15)
    np.testing.assert_allclose(dense, 2 * np.outer(np.ones(n), y) + np.eye(n), rtol=1e-15)
    hd = ha.hessian(g, y).hessian
    hsp = ha.hessian(g, y, out=ha.SparseHessianResult(g, y)).hessian.toarray()
    np.testing.assert_allclose(hsp, hd, rtol=1e-14)
    eps = 1e-6
    grad = lambda z: ha.gradient(g, z, backend="numpy").gradient  # noqa: E731
    fd = np.array([(grad(y + eps * e) - grad(y - eps * e)) / (2 * eps) for e in np.eye(n)])
    np.testing.assert_allclose(hd, fd, rtol=1e-6, atol=1e-6)


def test_a_result_of_another_kind_is_refused_by_name():
    f = lambda u: 0.5 * np.sum(np.diff(u) ** 2) + np.sum(u ** 4)  # noqa: E731
    u = np.linspace(0, 1, 6)
    with pytest.raises(ValueError, match=r"out.hvp .* SparseHessianResult; an HvpResult"):
        ha.hvp(f, u, np.ones(6), out=ha.SparseHessianResult(f, u))


def test_messages_about_a_leaf_name_the_leaf():
    def loss(p, X):
        return np.sum(np.tanh(X @ p["W"] + p["b"][0]) ** 2)

    X_ = np.ones((4, 3))
    p = {"W": np.zeros((3, 2)), "b": [np.zeros(2)]}
    gp, plan = ha.compile(loss, p, X_), ha.compile(loss, p, X_, hvp=True)
    with pytest.raises(ValueError, match=r"argument 'p'\['W'\] has shape \(3, 3\)"):
        gp.gradient({"W": np.zeros((3, 3)), "b": [np.zeros(2)]}, X_)
    with pytest.raises(ValueError, match=r"argument 'p'\['b'\]\[0\] has shape \(3,\)"):
        plan.hvp({"W": np.zeros((3, 2)), "b": [np.zeros(3)]}, X_, v=p)
    with pytest.raises(ValueError, match=r"v for argument 'p'\['W'\] has shape"):
        plan.hvp(p, X_, v={"W": np.zeros((2, 3)), "b": [np.zeros(2)]})
    bad = ha.HvpResult(p)
    bad.gradient["b"][0] = np.zeros(3)
    with pytest.raises(ValueError, match=r"out.gradient for argument 'p'\['b'\]\[0\]"):
        plan.hvp(p, X_, v=p, out=bad)
