"""Optimizer steps fused into the backward sweep (``compile(..., update=...)``):
the same parameters as ``plan.gradient`` followed by the update written with
numpy, to rounding; zero allocations per step; less memory than gradients
then update; bad hyperparameters and bad input rejected before any write."""

import math

import numpy as np
import pytest
from conftest import rand

import hybridad as ha
from hybridad.optim import SGD, Adam, Momentum
from hybridad.testing import assert_no_alloc

RULES = [SGD(0.1), Momentum(0.05, 0.8), Adam(0.01)]


def mlp(W1, b1, W2, X, Y):
    h = np.tanh(X @ W1 + b1)
    return np.mean((h @ W2 - Y) ** 2)


def reference_update(rule, params, grads, state, t):
    for j, (p, g) in enumerate(zip(params, grads, strict=True)):
        if isinstance(rule, SGD):
            p -= rule.lr * g
        elif isinstance(rule, Momentum):
            v = state.setdefault(("v", j), np.zeros_like(p))
            v *= rule.momentum
            v += g
            p -= rule.lr * v
        else:
            m = state.setdefault(("m", j), np.zeros_like(p))
            v = state.setdefault(("v", j), np.zeros_like(p))
            m += (1 - rule.b1) * (g - m)
            v += (1 - rule.b2) * (g * g - v)
            lr_t = rule.lr * math.sqrt(1 - rule.b2 ** t) / (1 - rule.b1 ** t)
            p -= lr_t * m / (np.sqrt(v) + rule.eps * math.sqrt(1 - rule.b2 ** t))


def data(batch, hidden, seed=0):
    rng = np.random.default_rng(seed)
    params = [rng.standard_normal((2, hidden)) / 2, np.zeros(hidden),
              rng.standard_normal((hidden, 1)) / 4]
    X = rng.standard_normal((batch, 2))
    return params, X, np.sin(X[:, :1])


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("rule", RULES, ids=lambda r: type(r).__name__)
def test_same_as_gradient_then_update(rule, backend):
    # batch * hidden = 65536: the numba loops are multithreaded
    params, X, Y = data(4096 if backend == "numba" else 64, 16)
    mine = [p.copy() for p in params]
    plan = ha.compile(mlp, *mine, X, Y, argnums=(0, 1, 2), update=rule, backend=backend)
    ref = ha.compile(mlp, *params, X, Y, argnums=(0, 1, 2), backend=backend)
    res, out, state = ha.GradientResult(tuple(params)), ha.DiffResult(np.zeros(())), {}
    for t in range(1, 6):
        assert plan.step(*mine, X, Y, out=out) is out
        ref.gradient(*params, X, Y, out=res)
        assert float(out.value) == pytest.approx(float(res.value), rel=1e-12)
        reference_update(rule, params, res.gradient, state, t)
        for p, q in zip(mine, params, strict=True):
            np.testing.assert_allclose(p, q, rtol=1e-12, atol=1e-14)
    assert not any(n.phase == "forward" and n.op == "iadd" for n in plan.graph.nodes)


def bilinear(p0, p2, c):  # p0's gradient reads p2, p2's reads p0
    return np.sum(c * p0 * p2) + np.sum(p0 ** 2 * c) + np.sum(np.sin(p2) * p0 * c)


def factors(U, V, Y):  # a low-rank fit: each factor's gradient reads the other
    return np.mean((U @ V - Y) ** 2) + 1e-2 * np.sum(U ** 2)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("rule", RULES, ids=lambda r: type(r).__name__)
@pytest.mark.parametrize("f, n", [(bilinear, 6), (bilinear, 1 << 16), (factors, 0)],
                         ids=["bilinear", "bilinear-parallel", "factors"])
def test_a_step_reads_every_parameter_before_it_updates_any(f, n, rule, backend):
    """Each parameter's gradient reads the others' values before the step: the
    numba lowering folded one gradient's vjp region (which reads the other
    parameter) into an accumulation placed after that parameter's in-place
    update -- the step read the parameter it had already changed (0.07 off).
    Five steps against gradient-then-update, to rounding."""
    rng = np.random.default_rng(2)
    if f is factors:
        args = [rng.standard_normal((20, 3)), rng.standard_normal((3, 15)),
                rng.standard_normal((20, 15))]
    else:
        args = [rng.standard_normal(n), rng.standard_normal(n), rng.standard_normal(n)]
    params, data_ = [a.copy() for a in args[:2]], args[2]
    mine = [a.copy() for a in args[:2]]
    plan = ha.compile(f, *mine, data_, argnums=(0, 1), update=rule, backend=backend)
    ref = ha.compile(f, *params, data_, argnums=(0, 1), backend=backend)
    res, out, state = ha.GradientResult(tuple(params)), ha.DiffResult(np.zeros(())), {}
    for t in range(1, 6):
        plan.step(*mine, data_, out=out)
        ref.gradient(*params, data_, out=res)
        assert float(out.value) == pytest.approx(float(res.value), rel=1e-12)
        reference_update(rule, params, res.gradient, state, t)
        for p, q in zip(mine, params, strict=True):
            np.testing.assert_allclose(p, q, rtol=1e-11, atol=1e-13)
    assert_no_alloc(plan.step, *mine, data_, out=out, n=10)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: type(r).__name__)
def test_no_allocation_per_step(rule):
    params, X, Y = data(64, 8)
    plan = ha.compile(mlp, *params, X, Y, argnums=(0, 1, 2), update=rule)
    out = ha.DiffResult(np.zeros(()))
    assert_no_alloc(plan.step, *params, X, Y, out=out, n=20)


def test_less_memory_than_gradients_then_update():
    # wide layers: gradient buffers are large, and each dies at its update
    rng = np.random.default_rng(1)
    W1, W2, W3 = (rng.standard_normal(s) / 20 for s in ((64, 256), (256, 256), (256, 1)))
    X, Y = rng.standard_normal((32, 64)), rng.standard_normal((32, 1))

    def net(W1, W2, W3, X, Y):
        return np.mean((np.tanh(np.tanh(X @ W1) @ W2) @ W3 - Y) ** 2)

    step = ha.compile(net, W1, W2, W3, X, Y, argnums=(0, 1, 2), update=SGD(0.01))
    grad = ha.compile(net, W1, W2, W3, X, Y, argnums=(0, 1, 2))
    gradient_buffers = W1.nbytes + W2.nbytes + W3.nbytes
    assert step.memory.total_bytes < grad.memory.total_bytes + gradient_buffers
    assert "total workspace" in step.explain()


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("rule", RULES, ids=lambda r: type(r).__name__)
def test_update_runs_when_its_gradient_is_complete(rule, backend):
    params, X, Y = data(32, 8)
    plan = ha.compile(mlp, *params, X, Y, argnums=(0, 1, 2), update=rule, backend=backend)
    order = [n for n in plan.graph.nodes if n.op not in ("input", "const")]
    param_ids = {n.id for n in plan.graph.inputs if n.attrs["index"] < 3}
    writes = [i for i, n in enumerate(order) if n.op in ("iadd", "region_acc")
              and n.args[0].id in param_ids]
    # W2's update (the first gradient complete) comes before the backward pass
    # computes W1's gradient (a matmul with X), not after everything
    first_w1_grad = max(i for i, n in enumerate(order) if n.op == "matmul")
    assert len(writes) == 3 and writes[0] < first_w1_grad, [n.op for n in order]


@pytest.mark.parametrize("make, error", [
    (lambda: SGD(-0.1), ValueError), (lambda: SGD(float("nan")), ValueError),
    (lambda: SGD(0), ValueError), (lambda: SGD("0.1"), TypeError),
    (lambda: Momentum(0.1, 1.0), ValueError), (lambda: Adam(b2=1.5), ValueError),
    (lambda: Adam(eps=float("inf")), ValueError)])
def test_invalid_hyperparameters(make, error):
    with pytest.raises(error):
        make()


def test_bad_input_is_rejected_before_any_write():
    params, X, Y = data(16, 4)
    plan = ha.compile(mlp, *params, X, Y, argnums=(0, 1, 2), update=SGD(0.1))
    before = [p.copy() for p in params]
    with pytest.raises(ValueError, match="shape"):
        plan.step(params[0], params[1], params[2], X[:8], Y)
    frozen = params[0].copy()
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        plan.step(frozen, params[1], params[2], X, Y)
    strided = np.repeat(params[2], 2, axis=1)[:, ::2]
    with pytest.raises(ValueError, match="contiguous"):
        plan.step(params[0], params[1], strided, X, Y)
    for p, q in zip(params, before, strict=True):
        np.testing.assert_array_equal(p, q)
    with pytest.raises(TypeError, match="update"):
        ha.compile(mlp, *params, X, Y, argnums=(0, 1, 2)).step(*params, X, Y)
    with pytest.raises(TypeError, match="rule"):
        ha.compile(mlp, *params, X, Y, update=0.1)
    with pytest.raises(ValueError, match="update rule"):
        ha.compile(lambda x: np.sum(x ** 2), rand((3,)), hessian=True, update=SGD(0.1))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("make", [lambda: SGD(0.1), lambda: Momentum(0.05, 0.8),
                                  lambda: Adam(0.01)], ids=["SGD", "Momentum", "Adam"])
def test_hyperparameters_are_live_for_every_rule(make, backend):
    """A schedule: setting ``plan.update.<name>`` between steps changes the next
    step, for every rule (SGD ignored it: its rate was compiled in); a bad value
    raises as the constructor does and keeps the old one."""
    rule = make()
    params, X, Y = data(64, 8)
    mine = [p.copy() for p in params]
    plan = ha.compile(mlp, *mine, X, Y, argnums=(0, 1, 2), update=rule, backend=backend)
    ref = ha.compile(mlp, *params, X, Y, argnums=(0, 1, 2), backend=backend)
    res, state = ha.GradientResult(tuple(params)), {}
    base = rule.lr
    for t in range(1, 7):
        rule.lr = base / t  # the documented pattern: set lr between steps
        if isinstance(rule, Momentum):
            rule.momentum = 0.8 if t % 2 else 0.5
        if isinstance(rule, Adam):
            rule.b1 = 0.9 if t < 4 else 0.8
        plan.step(*mine, X, Y)
        ref.gradient(*params, X, Y, out=res)
        reference_update(rule, params, list(res.gradient), state, t)
        for a, b in zip(mine, params, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="lr must be positive"):
        rule.lr = -1.0
    assert rule.lr == base / 6
    with pytest.raises(TypeError, match="lr must be a number"):
        rule.lr = "fast"
