"""What a loop stores for its reverse sweep (hybridad.transforms.loop_parts and
ops.indexing.Pieces): the stored carries the reverse body no longer reads
(it reads the residuals computed from them), per-iteration outputs no one
reads and xs the body does not read are dropped; no buffer of the loop's
whole value is zeroed for its cotangent.  A plan's memory is then what the
reverse sweep needs -- T x the state for the Euler step -- and its results
are bitwise those of the plan that stores everything."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import rk4_final

import hybridad as ha
from hybridad.testing import count_allocations, numerical_gradient
from hybridad.transforms import pipeline

RNG = np.random.default_rng(5)
N, T = 40, 300
W = RNG.standard_normal((N, N)) / np.sqrt(N)
U = RNG.standard_normal((N, 6)) / np.sqrt(6)
XS = RNG.standard_normal((T, 6))
X0 = RNG.standard_normal(N) / 2


def euler(x, W):  # the reverse reads tanh(W x), not x: no carry is stored
    return np.sum(ha.fori_loop(0, T, lambda i, x: x + 0.05 * np.tanh(W @ x), x) ** 2)


def euler_python(x, W):  # the same as a Python loop (rolled by the plan)
    for _ in range(T):
        x = x + 0.05 * np.tanh(W @ x)
    return np.sum(x ** 2)


def rnn(W, h):  # the gradient w.r.t. W reads h: the carry stays stored
    def cell(h, x):
        return np.tanh(W @ h + U @ x), None
    return np.sum(ha.scan(cell, h, XS)[0])


def outputs_and_xs(x, W):
    """Per-step outputs of which one is never read, and an xs the body ignores."""
    def cell(h, xs):
        x_t, _ignored = xs
        h = np.tanh(W @ h + 0.1 * x_t[:1])
        return h, (np.sum(h), h * 2.0)
    h, (sums, _unused) = ha.scan(cell, x, (XS, XS * 3.0))
    return np.sum(h ** 2) + np.sum(np.sin(sums))


CASES = [(euler, (X0, W), 0, True), (euler_python, (X0, W), 0, True),
         (rnn, (W, X0), 0, False), (outputs_and_xs, (X0, W), 0, True)]
IDS = ["euler", "euler_python", "rnn", "outputs_and_xs"]


def _unpruned(monkeypatch):
    """The lowering without the pass: every loop stores what autodiff made."""
    table = {b: tuple(p for p in passes if p != "loop_parts")
             for b, passes in pipeline.LOWERING.items()}
    monkeypatch.setattr(pipeline, "LOWERING", table)


def _stacked_bytes(plan):
    """Bytes of the per-iteration parts the forward loops store."""
    total = 0
    for n in plan.graph.nodes:
        if n.op == "loop" and not n.attrs["reverse"] and n.attrs["saved"] is not None:
            body = n.attrs["body"]
            total += n.nbytes - sum(o.nbytes for o in body.graph.outputs[:body.n_carry])
    return total


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("f, args, argnums, pruned", CASES, ids=IDS)
def test_pruned_loops_are_bitwise_the_unpruned_and_match_fd(f, args, argnums, pruned, backend,
                                                            monkeypatch):
    plan = ha.compile(f, *args, argnums=argnums, backend=backend)
    res = plan.gradient(*args)
    with monkeypatch.context() as m:
        _unpruned(m)
        full = ha.compile(f, *args, argnums=argnums, backend=backend)
        ref = full.gradient(*args)
    assert float(res.value) == float(ref.value)
    np.testing.assert_array_equal(res.gradient, ref.gradient)
    if pruned:
        assert plan.memory.total_bytes < full.memory.total_bytes
        assert _stacked_bytes(plan) < _stacked_bytes(full)
    else:  # (the RNN's reverse reads all it stores)
        assert plan.memory.total_bytes == full.memory.total_bytes
    fd = numerical_gradient(lambda a: f(*[a if k == argnums else v
                                          for k, v in enumerate(args)]), args[argnums])
    np.testing.assert_allclose(res.gradient, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("f", [euler, euler_python, rnn], ids=["euler", "euler_python", "rnn"])
def test_a_gradient_plan_holds_what_its_reverse_sweep_reads(f):
    """T x the state and nothing else of size T.  Euler: the residual
    tanh(W x), not x; the RNN: the carries h (the gradient w.r.t. W reads
    them), whose residual tanh(...) is the next step's h: the reverse loop
    carries it from one step to the one before instead of storing it again."""
    carries_stored = 1
    args = (X0, W) if f is not rnn else (W, X0)
    plan = ha.compile(f, *args)
    stored = T * N * 8
    assert _stacked_bytes(plan) == carries_stored * stored
    assert plan.memory.total_bytes <= 1.1 * carries_stored * stored + 64 * N * N
    res = ha.GradientResult(args[0])
    plan.gradient(*args, out=res)
    with count_allocations() as counts:
        for _ in range(3):
            plan.gradient(*args, out=res)
    assert counts.allocations == 0, counts


def _forward_loop(plan):
    (node,) = [n for n in plan.graph.nodes if n.op == "loop" and not n.attrs["reverse"]]
    return node


def test_unread_outputs_and_xs_leave_the_loop(monkeypatch):
    fwd = _forward_loop(ha.compile(outputs_and_xs, X0, W))
    with monkeypatch.context() as m:
        _unpruned(m)
        full = _forward_loop(ha.compile(outputs_and_xs, X0, W))
    assert (fwd.attrs["body"].n_xs, full.attrs["body"].n_xs) == (1, 2)  # the ignored xs
    # the per-step h * 2 no one reads is no longer stored
    assert len(fwd.attrs["order"]) == len(full.attrs["order"]) - 1
    assert fwd.nbytes == full.nbytes - T * N * 8


def rnn_h0(h, W):
    return rnn(W, h)


@pytest.mark.parametrize("f", [euler, rnn_h0], ids=["euler", "rnn"])
def test_hvp_and_hessian_through_a_pruned_loop(f, monkeypatch):
    """Forward over reverse through loops that store less (the RNN's reverse
    loop carrying the next step's h): bitwise the unpruned plans', and the
    Hessian-vector product a difference of gradients along v."""
    v = np.linspace(-1.0, 1.0, N)
    h = ha.hessian(f, X0, W)
    hv = ha.hvp(f, X0, v, W)
    with monkeypatch.context() as m:
        _unpruned(m)
        ha.clear_cache()
        h_ref = ha.hessian(f, X0, W)
        hv_ref = ha.hvp(f, X0, v, W)
    ha.clear_cache()
    np.testing.assert_array_equal(h.hessian, h_ref.hessian)
    np.testing.assert_array_equal(hv.hvp, hv_ref.hvp)
    np.testing.assert_allclose(h.hessian @ v, hv.hvp, rtol=1e-10, atol=1e-12)
    eps = 1e-5
    fd = (ha.gradient(f, X0 + eps * v, W).gradient -
          ha.gradient(f, X0 - eps * v, W).gradient) / (2 * eps)
    np.testing.assert_allclose(hv.hvp, fd, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_float32_loops_store_what_their_reverse_reads(backend, monkeypatch):
    """The Euler step in float32: T x the state, the unpruned plan's bits."""
    x, w = X0.astype(np.float32), W.astype(np.float32)
    plan = ha.compile(euler, x, w, backend=backend)
    res = plan.gradient(x, w)
    with monkeypatch.context() as m:
        _unpruned(m)
        ref = ha.compile(euler, x, w, backend=backend).gradient(x, w)
    assert _stacked_bytes(plan) == T * N * 4
    np.testing.assert_array_equal(res.gradient, ref.gradient)
    fd = numerical_gradient(lambda a: euler(a, W), X0)
    np.testing.assert_allclose(res.gradient, fd, rtol=2e-3, atol=2e-3)


def rk4(x, W):  # four stages a step: their residuals would be 4 x the carry
    return np.sum(rk4_final(x, W, T) ** 2)


def rk4_python(x, W):  # the same as a Python loop (rolled by the plan)
    for _ in range(T):
        k1 = np.tanh(W @ x) - 0.1 * x
        k2 = np.tanh(W @ (x + 0.025 * k1)) - 0.1 * (x + 0.025 * k1)
        k3 = np.tanh(W @ (x + 0.025 * k2)) - 0.1 * (x + 0.025 * k2)
        k4 = np.tanh(W @ (x + 0.05 * k3)) - 0.1 * (x + 0.05 * k3)
        x = x + 0.05 / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return np.sum(x ** 2)


@pytest.mark.parametrize("f", [rk4, rk4_python], ids=["rk4", "rk4_python"])
def test_residuals_larger_than_the_carries_are_recomputed(f):
    """By default a loop stores at most its carries plus 10 % per iteration
    (ops.loop.RESIDUAL_SLACK): an RK4 step's reverse pass reads four stages'
    activations, 4 x the state, so the carry is stored and the stages are
    recomputed from it -- for the gradient, T x the state; for the Hessian,
    the carries and the chunk's tangents of them, T x the state x (1 + chunk)."""
    stored = T * N * 8
    plan = ha.compile(f, X0, W, backend="numpy")
    assert _stacked_bytes(plan) == stored
    res = plan.gradient(X0, W)
    fd = numerical_gradient(lambda a: f(a, W), X0)
    np.testing.assert_allclose(res.gradient, fd, rtol=1e-6, atol=1e-8)
    hess = ha.compile(f, X0, W, hessian=True, backend="numpy", chunk=4)
    # the primal loop, the tangent of one direction (hvp) and the chunk's four
    loops = sorted(n.nbytes - sum(o.nbytes for o in n.attrs["body"].graph.outputs[
        :n.attrs["body"].n_carry]) for n in hess.graph.nodes
        if n.op == "loop" and not n.attrs["reverse"])
    assert loops == [stored, stored, 4 * stored]
    # (the one direction's loop shares the chunk's slot: they run in two programs)
    assert sum(hess.memory.arena_bytes.values()) <= 1.1 * stored * (1 + 4)
    h = hess.hessian(X0, W)
    np.testing.assert_allclose(h.gradient, res.gradient, rtol=1e-12, atol=1e-14)
    col = numerical_gradient(lambda a: plan.gradient(a, W).gradient[3], X0)
    np.testing.assert_allclose(h.hessian[3], col, rtol=1e-5, atol=1e-7)
