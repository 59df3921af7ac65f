"""Tuples, lists, dicts (nested) and static numbers as arguments on the plain
paths: an ``hvp=True`` plan's ``hvp``, a one-chunk Hessian or Jacobian plan,
and ``ha.hessian`` / ``ha.jacobian`` taking the function's recent plan --
each unpacked by the plan's generated ``leaves_of`` and handed to the compiled
program, which checks every leaf before it writes.  Results equal the
general path's (and finite differences), no allocation, and a wrong leaf is
refused by name with the buffers untouched."""

from __future__ import annotations

import numpy as np
import pytest

import hybridad as ha
from hybridad.testing import count_allocations

RNG = np.random.default_rng(21)
A = RNG.standard_normal((6, 12)) / 4
C = RNG.standard_normal(6)
X = RNG.uniform(-1.0, 1.0, 12)
V = RNG.standard_normal(12)

STRUCTURES = {
    "tuple": ((A, C),),
    "list": ([A, C],),
    "nested": (([A], [C]),),
    "dict": ({"A": A, "c": C},),
    "static": ((A, C), 0.5),
}


def _consts(q):
    if isinstance(q, dict):
        return q["A"], q["c"]
    a, c = q
    return (a[0], c[0]) if isinstance(a, list) else (a, c)


def scalar(x, q, scale=1.0):
    a, c = _consts(q)
    return scale * np.sum(np.tanh(a @ x + c) ** 2) + 0.1 * np.sum(x ** 4)


def vector(x, q, scale=1.0):
    a, c = _consts(q)
    return scale * np.tanh(a @ x + c)


def _no_general(plan, monkeypatch, name="_leaves"):
    def general(*a, **k):
        raise AssertionError("the general path ran")
    monkeypatch.setattr(plan, name, general)


def _fd_hvp(x, rest, eps=1e-6):
    g = lambda z: ha.gradient(scalar, z, *rest, backend="numpy").gradient  # noqa: E731
    return (g(x + eps * V) - g(x - eps * V)) / (2 * eps)


@pytest.mark.parametrize("name", list(STRUCTURES))
def test_hvp_plans_run_structured_arguments_on_the_plain_path(name, monkeypatch):
    rest = STRUCTURES[name]
    plan = ha.compile(scalar, X, *rest, hvp=True)
    want = plan.hvp(X, *rest, v=V)  # (the general path, without out=)
    np.testing.assert_allclose(want.hvp, _fd_hvp(X, rest), rtol=1e-6, atol=1e-8)
    res = ha.HvpResult(X)
    _no_general(plan, monkeypatch)
    assert plan.hvp(X, *rest, v=V, out=res) is res
    np.testing.assert_array_equal(res.hvp, want.hvp)
    np.testing.assert_array_equal(res.gradient, want.gradient)
    with count_allocations() as counts:
        for _ in range(5):
            plan.hvp(X, *rest, v=V, out=res)
    assert counts.allocations == 0, counts


def test_a_wrong_leaf_is_refused_by_the_general_path_before_anything_is_written():
    rest = STRUCTURES["dict"]
    plan = ha.compile(scalar, X, *rest, hvp=True)
    res = ha.HvpResult(X)
    plan.hvp(X, *rest, v=V, out=res)
    before = [b.copy() for b in (res.value, res.gradient, res.hvp)]
    with pytest.raises((ValueError, TypeError), match="c|shape"):
        plan.hvp(X, {"A": A, "c": C[:-1]}, v=V, out=res)
    for b, saved in zip((res.value, res.gradient, res.hvp), before, strict=True):
        assert b.tobytes() == saved.tobytes()
    other = {"A": np.asfortranarray(A), "c": C}  # another layout: staged by the general path
    np.testing.assert_allclose(plan.hvp(X, other, v=V, out=res).hvp,
                               plan.hvp(X, *rest, v=V).hvp, rtol=1e-14)


@pytest.mark.parametrize("name", list(STRUCTURES))
def test_one_chunk_hessian_and_jacobian_plans_run_structured_arguments_fast(name, monkeypatch):
    rest = STRUCTURES[name]
    hplan = ha.compile(scalar, X, *rest, hessian=True, chunk=len(X))
    jplan = ha.compile(vector, X, *rest, jacobian=True, mode="reverse")
    href = ha.hessian(scalar, X, *rest, backend="numpy")
    jref = ha.jacobian(vector, X, *rest, backend="numpy")
    hres, jres = ha.HessianResult(X), ha.JacobianResult(vector(X, *rest), X)
    for _ in range(3):  # (the fast entry is made after the first call)
        hplan.hessian(X, *rest, out=hres)
        jplan.jacobian(X, *rest, out=jres)
    np.testing.assert_allclose(hres.hessian, href.hessian, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(jres.jacobian, jref.jacobian, rtol=1e-12, atol=1e-14)
    _no_general(hplan, monkeypatch, "_check")
    _no_general(jplan, monkeypatch, "_check")
    with count_allocations() as counts:
        for _ in range(5):
            hplan.hessian(X, *rest, out=hres)
            jplan.jacobian(X, *rest, out=jres)
    assert counts.allocations == 0, counts


SCALE = 1.0


def scaled(x, q):
    return SCALE * scalar(x, q)


def scaled_vector(x, q):
    return SCALE * vector(x, q)


@pytest.mark.parametrize("name", ["tuple", "dict"])
def test_ha_hessian_and_jacobian_reuse_the_recent_plan_and_see_a_changed_function(name):
    global SCALE
    rest = STRUCTURES[name][:1]
    hres, jres = ha.HessianResult(X), ha.JacobianResult(vector(X, *rest), X)
    ha.hessian(scaled, X, *rest, out=hres)
    ha.jacobian(scaled_vector, X, *rest, out=jres)
    with count_allocations() as counts:
        for _ in range(5):
            ha.hessian(scaled, X, *rest, out=hres)
            ha.jacobian(scaled_vector, X, *rest, out=jres)
    assert counts.allocations == 0, counts
    h1, j1 = hres.hessian.copy(), jres.jacobian.copy()
    SCALE = 3.0
    try:
        ha.hessian(scaled, X, *rest, out=hres)
        ha.jacobian(scaled_vector, X, *rest, out=jres)
    finally:
        SCALE = 1.0
    np.testing.assert_allclose(hres.hessian, 3.0 * h1, rtol=1e-13)
    np.testing.assert_allclose(jres.jacobian, 3.0 * j1, rtol=1e-13)


def test_sparse_results_after_dense_calls_take_the_sparse_path():
    def f(x):
        return x[1:] * x[:-1] + np.sin(x[1:])

    def g(x):
        return np.sum(x[1:] * x[:-1] ** 2)

    ha.jacobian(f, X)  # dense recent plans
    ha.hessian(g, X)
    jres = ha.SparseJacobianResult(f, X)
    hres = ha.SparseHessianResult(g, X)
    assert ha.jacobian(f, X, out=jres) is jres and ha.hessian(g, X, out=hres) is hres
    np.testing.assert_allclose(jres.jacobian.toarray(), ha.jacobian(f, X).jacobian, rtol=1e-13)
    np.testing.assert_allclose(hres.hessian.toarray(), ha.hessian(g, X).hessian, rtol=1e-13)


def _three(a, p, c):  # arguments of three structures: an array, a dict, a 0-d array
    return np.sum(np.sin(a) @ p["B"]) * c + np.sum(p["B"] ** 2) * c ** 2 + np.sum(p["b"] * a)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_argnums_in_any_order_give_the_derivatives_in_that_order(backend):
    """As ``jax.grad``: ``argnums=(2, 0)`` gives the derivatives of arguments 2
    and 0 in that order (they came in the arguments' order, and a tuple of
    arguments of different structures was refused); an HVP's ``v`` comes in
    that order too."""
    rng = np.random.default_rng(3)
    args = (rng.standard_normal(3), {"B": rng.standard_normal((3, 4)), "b": rng.standard_normal(3)},
            np.asarray(0.7))
    single = [ha.gradient(_three, *args, argnums=k, backend=backend).gradient for k in range(3)]
    for argnums in [(2, 0), (1, 2, 0), (0, 2), (-1, 1)]:
        got = ha.gradient(_three, *args, argnums=argnums, backend=backend).gradient
        plan = ha.compile(_three, *args, argnums=argnums, backend=backend)
        res = plan.gradient(*args, out=plan.new_result()).gradient
        assert len(got) == len(res) == len(argnums)
        for g, r, k in zip(got, res, argnums, strict=True):
            want = single[k % 3]
            for x, y in zip(ha._tree.flatten(g)[0] if isinstance(g, dict) else [g],
                            ha._tree.flatten(want)[0] if isinstance(want, dict) else [want],
                            strict=True):
                np.testing.assert_allclose(x, y, rtol=1e-13, atol=1e-15)
            assert type(r) is type(g)
    v = (np.asarray(0.5), np.linspace(-1.0, 1.0, 3))  # (d c, d a): argnums=(2, 0)'s order
    hv = ha.hvp(_three, args[0], v, *args[1:], argnums=(2, 0), backend=backend).hvp
    eps = 1e-6

    def grad_at(t):
        a, c = args[0] + t * v[1], args[2] + t * v[0]
        return ha.gradient(_three, a, args[1], c, argnums=(2, 0), backend="numpy").gradient
    for h, lo, hi in zip(hv, grad_at(-eps), grad_at(eps), strict=True):
        np.testing.assert_allclose(h, (hi - lo) / (2 * eps), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_dicts_with_their_keys_in_another_order_are_the_same_structure(backend):
    """A dict is one structure whatever the order of its keys (as in JAX): an
    optimizer step written ``{k: p[k] - lr * g[k] for k in sorted(p)}``, a
    direction ``v`` or a result built in another order.  The plan refused the
    reordered dict ("does not match the plan"); it now reads each leaf by its
    key, and its results follow the plan's order.  Another key set is still
    refused."""
    def f(p, x):
        return np.sum(np.tanh(p["W"] @ x + p["b"]) ** 2) + np.sum(p["nested"]["s"] ** 2)

    W, b, s = RNG.standard_normal((3, 4)), RNG.standard_normal(3), RNG.standard_normal(2)
    x = RNG.standard_normal(4)
    p = {"W": W, "b": b, "nested": {"s": s}}
    q = {"nested": {"s": s}, "b": b, "W": W}
    grad = ha.compile(f, p, x, backend=backend)
    want = grad.gradient(p, x)
    got = grad.gradient(q, x)
    assert list(got.gradient) == ["W", "b", "nested"]
    for k in ("W", "b"):
        np.testing.assert_array_equal(got.gradient[k], want.gradient[k])
    np.testing.assert_array_equal(got.gradient["nested"]["s"], want.gradient["nested"]["s"])
    out = ha.GradientResult(q)  # (a result made in the other order fits too)
    grad.gradient(q, x, out=out)
    np.testing.assert_array_equal(out.gradient["W"], want.gradient["W"])
    hv = ha.compile(f, p, x, hvp=True, backend=backend)
    v = {"b": np.ones(3), "nested": {"s": np.ones(2)}, "W": np.ones((3, 4))}
    r1 = hv.hvp(p, x, v=v)
    r2 = hv.hvp(q, x, v={k: v[k] for k in ("W", "b", "nested")})
    np.testing.assert_allclose(r1.hvp["W"], r2.hvp["W"], rtol=1e-14)
    eps = 1e-6  # (W's gradient does not read s: v's nested part moves nothing there)
    fd = (ha.gradient(f, {k: p[k] if k == "nested" else p[k] + eps * v[k] for k in p}, x,
                      backend="numpy").gradient["W"] -
          ha.gradient(f, {k: p[k] if k == "nested" else p[k] - eps * v[k] for k in p}, x,
                      backend="numpy").gradient["W"]) / (2 * eps)
    np.testing.assert_allclose(r1.hvp["W"], fd, rtol=1e-6, atol=1e-8)
    with pytest.raises(ValueError, match="does not match the plan"):
        grad.gradient({"W": W, "b": b, "other": {"s": s}}, x)
    with pytest.raises(ValueError, match="does not match the plan"):
        grad.gradient({"W": W, "b": b}, x)
