"""Checkpointed loops (hybridad.transforms.checkpoint): under memory_budget a
loop's reverse sweep stores its carry once per segment and recomputes the
segment's carries, nested on 2 or more levels.  The iterations run in the
same order on the same values, so gradients are bitwise those of the plan
that stores every carry; the plan's memory (its arena and what its loops
hold beside it) stays within the budget."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import rk4_final

import hybridad as ha
from hybridad.ops.region import recompute_partials
from hybridad.testing import count_allocations, numerical_gradient
from hybridad.transforms import checkpoint

N = 500  # a state of 4 kB: its 400 stored copies dominate what a plan holds
RNG = np.random.default_rng(11)
W = RNG.standard_normal(N) / 2
XS = RNG.standard_normal((203, N)) / 4


def euler(x):  # the index enters the step; 400 steps
    def step(i, v):
        return v + 0.01 * np.tanh(W * v + np.roll(v, 1)) * (1.0 + 1e-4 * i)
    return np.sum(ha.fori_loop(0, 400, step, x) ** 2)


def rnn(h):  # a scan over xs with per-step outputs; 203 steps (a tail segment)
    def cell(h, x):
        h = np.tanh(W * h * 0.5 + x)
        return h, np.sum(h * x)
    h, ys = ha.scan(cell, h, XS)
    return np.sum(h ** 2) + np.sum(np.sin(ys))


X0 = np.linspace(-1.0, 1.0, N)


def _nested(plan):
    """Whether a forward loop of the plan runs a loop in its body."""
    return any(n.op == "loop" and n.phase == "forward" and
               any(m.op == "loop" for m in n.attrs["body"].graph.nodes)
               for n in plan.graph.nodes)


@pytest.mark.parametrize("f, share", [(euler, 4), (rnn, 2)], ids=["euler", "rnn"])
def test_budget_checkpoints_loops_bitwise_and_within_budget(f, share):
    full = ha.compile(f, X0, backend="numpy")
    budget = full.memory.total_bytes // share
    tight = ha.compile(f, X0, backend="numpy", memory_budget=budget)
    assert tight.checkpoint_levels >= 2 and tight.memory.total_bytes <= budget
    assert _nested(tight) and not _nested(full)
    assert "checkpointed" in tight.explain()
    a, b = full.gradient(X0), tight.gradient(X0)
    assert float(a.value) == float(b.value)
    np.testing.assert_array_equal(a.gradient, b.gradient)
    idx = np.arange(0, N, 97)
    fd = numerical_gradient(f, X0)
    np.testing.assert_allclose(b.gradient[idx], fd[idx], rtol=1e-6, atol=1e-8)


def test_a_tighter_budget_takes_more_levels(monkeypatch):
    """3000 steps: two levels keep ~2 x 55 carries, three ~3 x 15.  A budget
    that allows more takes fewer outer segments on two levels (the same
    work; each segment is calls of the inner loop's runner)."""
    from hybridad.plans import budget

    w = W[:200]

    def long(x):
        return np.sum(ha.fori_loop(0, 3000, lambda i, v: v + 1e-3 * np.tanh(w * v), x) ** 2)
    x = X0[:200]
    full = ha.compile(long, x, backend="numpy")
    roomy = full.memory.total_bytes // 4
    two = ha.compile(long, x, backend="numpy", memory_budget=roomy)
    assert two.checkpoint_levels == 2 and two.checkpoint_outer in (2, 4, 8, 16, 32)
    assert two.memory.total_bytes <= roomy and "outer segments" in two.explain()
    with monkeypatch.context() as m:  # the classic square root: the least two levels take
        m.setattr(budget, "outer_counts", lambda levels, longest: [None])
        classic = ha.compile(long, x, backend="numpy", memory_budget=roomy)
    assert classic.checkpoint_levels == 2 and classic.checkpoint_outer is None
    assert classic.memory.total_bytes <= two.memory.total_bytes
    tighter = classic.memory.total_bytes - 1
    three = ha.compile(long, x, backend="numpy", memory_budget=tighter)
    assert three.checkpoint_levels > 2 and three.memory.total_bytes <= tighter
    for plan in (two, classic, three):
        np.testing.assert_array_equal(plan.gradient(x).gradient, full.gradient(x).gradient)


def test_a_roomy_budget_checkpoints_in_few_segments():
    """A budget just under the unsplit loop's workspace: a few outer segments
    (three calls of the inner runner each), not the classic 55 -- the same
    bits, on the numba backend with no allocation per call."""
    from hybridad.testing import assert_no_alloc

    w = W[:200]

    def long(x):
        return np.sum(ha.fori_loop(0, 3000, lambda i, v: v + 1e-3 * np.tanh(w * v), x) ** 2)
    x = X0[:200]
    full = ha.compile(long, x, tiered=False)
    plan = ha.compile(long, x, memory_budget=int(full.memory.total_bytes * 0.9), tiered=False)
    assert plan.checkpoint_levels == 2 and plan.checkpoint_outer in (2, 4), plan.explain()
    res = plan.gradient(x)
    np.testing.assert_array_equal(res.gradient, full.gradient(x).gradient)
    assert_no_alloc(plan.gradient, x, out=res, n=5)


def test_too_small_a_budget_names_what_was_tried():
    with pytest.raises(ha.MemoryBudgetError, match="loops checkpointed on 4 levels"):
        ha.compile(euler, X0, backend="numpy", memory_budget=2000)


def euler_w(x, w):  # the loop closes over a differentiated argument: its sum over 400 steps
    def step(i, v):
        return v + 0.01 * np.tanh(w * v + np.roll(v, 1)) * (1.0 + 1e-4 * i)
    return np.sum(ha.fori_loop(0, 400, step, x) ** 2)


def rnn_w(h, w, xs):  # 203 steps: segments and a tail loop, each adding to w's sum
    def cell(h, x):
        h = np.tanh(w * h * 0.5 + x)
        return h, np.sum(h * x)
    h, ys = ha.scan(cell, h, xs)
    return np.sum(h ** 2) + np.sum(np.sin(ys)) + np.sum(w * h)


SMALL = (X0[:64], W[:64], XS[:, :64])  # (a smaller state: the same loops, cheaper builds)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("f, args, share", [(euler_w, SMALL[:2], 4), (rnn_w, SMALL, 2)],
                         ids=["euler", "rnn"])
def test_the_sums_of_closed_over_arguments_are_bitwise_the_unsplit_loops(f, args, share,
                                                                          backend):
    """The cotangent of an argument a loop body reads (``w`` here), summed over
    the iterations: each segment's reverse loop continues the sum of the one
    reversed before it (a tail loop's too) instead of summing its own from
    zero and adding it -- which rounded differently from the loop unsplit
    (6e-15 apart at 400 steps)."""
    full = ha.compile(f, *args, argnums=(0, 1), backend=backend)
    tight = ha.compile(f, *args, argnums=(0, 1), backend=backend,
                       memory_budget=full.memory.total_bytes // share)
    assert tight.checkpoint_levels >= 2 and _nested(tight)
    # (a budget also recomputes the regions' partials rather than storing them,
    # which may round differently: the loop unsplit, built that way too)
    with recompute_partials():
        full = ha.compile(f, *args, argnums=(0, 1), backend=backend)
    assert not _nested(full)
    a, b = full.gradient(*args), tight.gradient(*args)
    assert float(a.value) == float(b.value)
    for ga, gb in zip(a.gradient, b.gradient, strict=True):
        np.testing.assert_array_equal(ga, gb)
    fd = numerical_gradient(lambda w: f(args[0], w, *args[2:]), args[1])
    np.testing.assert_allclose(b.gradient[1], fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("levels", [2, 3, 4])
def test_closed_over_sums_through_every_level_are_bitwise_the_unsplit_loops(levels, monkeypatch):
    """The same on 2 to 4 levels (segments of segments, and tails at each)."""
    from hybridad.plans.plan import Plan

    args = SMALL
    want = ha.compile(rnn_w, *args, argnums=(0, 1), backend="numpy").gradient(*args)
    monkeypatch.setattr(Plan, "checkpoint_levels", levels)
    split = ha.compile(rnn_w, *args, argnums=(0, 1), backend="numpy")
    assert _nested(split)
    got = split.gradient(*args)
    for a, b in zip(want.gradient, got.gradient, strict=True):
        np.testing.assert_array_equal(a, b)


def test_numba_checkpointed_plan_matches():
    full = ha.compile(euler, X0, backend="numpy")
    tight = ha.compile(euler, X0, memory_budget=full.memory.total_bytes // 4)
    assert tight.checkpoint_levels >= 2
    res = ha.GradientResult(X0)
    tight.gradient(X0, out=res)
    np.testing.assert_allclose(res.gradient, full.gradient(X0).gradient, rtol=1e-13,
                               atol=1e-15)
    with count_allocations() as counts:  # the nested loops included
        for _ in range(3):
            tight.gradient(X0, out=res)
    assert counts.allocations == 0, counts


@pytest.mark.parametrize("levels", [2, 3])
def test_split_loops_give_the_same_hvp_and_hessian(levels, monkeypatch):
    """Forward over reverse through the nested loops: the split is applied to
    every plan built while the transform is forced on (Plan._build honours
    checkpoint_levels; here set on the class for the Hessian's plans too)."""
    from hybridad.plans.plan import Plan

    v = np.cos(np.arange(float(N)))
    want_h = ha.hvp(rnn, X0, v, backend="numpy").hvp
    monkeypatch.setattr(Plan, "checkpoint_levels", levels)
    got_h = ha.hvp(rnn, X0, v, backend="numpy").hvp
    np.testing.assert_array_equal(got_h, want_h)
    assert checkpoint.segments(400, levels) ** levels >= 400


M = 6  # bench_loops' RK4 Hessian model: a 6-state ODE, 400 steps
WM = RNG.standard_normal((M, M)) / np.sqrt(M)
XM = np.linspace(-1.0, 1.0, M)


def _rk4_final(x):
    return rk4_final(x, WM, 400)


def rk4(x):
    return np.sum(_rk4_final(x) ** 2)


@pytest.fixture(scope="module")
def rk4_hessian():
    plan = ha.compile(rk4, XM, hessian=True, backend="numpy")
    return plan, plan.hessian(XM)


@pytest.mark.parametrize("share, levels", [(0.99, None), (0.5, None), (0.27, 2)])
def test_a_hessian_plan_takes_fewer_seeds_then_checkpoints_to_fit(rk4_hessian, share,
                                                                  levels):
    """A Hessian through a loop stores the carries' tangents of a chunk's
    seeds: under a budget its plan takes fewer seeds per chunk (as many as
    fit), then checkpoints the loop too; the derivatives are the same to
    rounding, through every entry point."""
    full, want = rk4_hessian
    budget = int(share * full.memory.total_bytes)
    plan = ha.compile(rk4, XM, hessian=True, backend="numpy", memory_budget=budget)
    assert plan.memory.total_bytes <= budget
    assert plan.chunk < full.chunk and plan.checkpoint_levels == levels
    assert "seed(s) per chunk" in plan.explain()
    got = plan.hessian(XM)
    assert got.value == pytest.approx(float(want.value), rel=1e-13)
    np.testing.assert_allclose(got.hessian, want.hessian, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(got.gradient, numerical_gradient(rk4, XM), rtol=1e-6,
                               atol=1e-8)
    v = np.cos(np.arange(M + 0.0))
    np.testing.assert_allclose(plan.hvp(XM, v=v).hvp, want.hessian @ v, rtol=1e-12,
                               atol=1e-13)
    plan.linearize(XM)
    hv = np.empty(M)
    plan.hvp(v=v[::-1].copy(), out=hv)
    np.testing.assert_allclose(hv, want.hessian @ v[::-1], rtol=1e-12, atol=1e-13)


def test_a_jacobian_plan_fits_its_budget():
    full = ha.compile(_rk4_final, XM, jacobian=True, mode="forward", backend="numpy")
    budget = full.memory.total_bytes // 2
    plan = ha.compile(_rk4_final, XM, jacobian=True, mode="forward", backend="numpy",
                      memory_budget=budget)
    assert plan.memory.total_bytes <= budget and plan.chunk < full.chunk
    np.testing.assert_allclose(plan.jacobian(XM).jacobian, full.jacobian(XM).jacobian,
                               rtol=1e-12, atol=1e-13)


def test_too_small_a_budget_for_a_hessian_says_what_was_tried():
    with pytest.raises(ha.MemoryBudgetError, match="one seed per chunk"):
        ha.compile(rk4, XM, hessian=True, backend="numpy", memory_budget=4000)
    with pytest.raises(ValueError, match="neither hvp=True"):
        ha.compile(rk4, XM, hessian=True, hvp=True)


def test_numba_hessian_within_a_budget_allocates_nothing(rk4_hessian):
    full, want = rk4_hessian
    plan = ha.compile(rk4, XM, hessian=True, memory_budget=full.memory.total_bytes // 2)
    res = ha.HessianResult(XM)
    plan.hessian(XM, out=res)
    np.testing.assert_allclose(res.hessian, want.hessian, rtol=1e-12, atol=1e-13)
    with count_allocations() as counts:
        for _ in range(3):
            plan.hessian(XM, out=res)
    assert counts.allocations == 0, counts
