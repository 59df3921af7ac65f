"""Per-node profiles of numba plans (hybridad.plans.profile): every executed
node timed, times non-negative and adding up to the run, and no timing code
in normal plans."""

import re

import numpy as np
import pytest

import hybridad as ha
from hybridad.backends.numba.program import compile_numba_program
from hybridad.plans.profile import KINDS, profile


def small_mlp(W, b, X):
    h = np.tanh(X @ W + b)
    return np.sum(h**2) + np.sum(np.exp(-W) * W)


def args():
    rng = np.random.default_rng(0)
    return rng.standard_normal((3, 4)), rng.standard_normal(4), rng.standard_normal((5, 3))


@pytest.fixture(scope="module")
def plan():
    return ha.compile(small_mlp, *args(), argnums=(0, 1), tiered=False)


def executed(source):
    """Ids of the nodes whose code a plan's source runs: its ``# %id = op``
    comments, less those done by another node's code or writing none."""
    ids = set()
    for line in source.splitlines():
        m = re.match(r"\s*# %(\d+) = (\w+)\(", line)
        if m and m.group(2) != "region_partial" and "(done by" not in line and \
                "(in the loop above)" not in line:
            ids.add(int(m.group(1)))
    return ids


def test_rows_cover_every_executed_node_and_add_up(plan):
    prof = profile(plan, *args(), repeats=5, warmup=1)
    rows = prof.rows
    assert {r.node for r in rows if r.node is not None} == executed(plan._program.source)
    assert [r.op for r in rows if r.node is None] == ["entry", "outputs"]
    assert {r.kind for r in rows} <= set(KINDS)
    assert {"matmul", "region"} <= {r.kind for r in rows}
    assert all(r.median_ns >= 0 and r.min_ns >= 0 for r in rows)
    n = len(rows)
    s = prof.samples
    assert (s[:, :n] >= 0).all() and (s[:, n + 1] == 1).all()  # one run per sample
    # the stamps chain: the rows of each call add up to its whole run (to the ns)
    assert np.array_equal(s[:, :n].sum(axis=1), s[:, n])
    assert prof.nodes_ns == pytest.approx(sum(r.median_ns for r in rows))
    assert abs(sum(r.share for r in rows) - 1) < 1e-9
    assert prof.total_ns > 0 and prof.call_ns >= prof.total_ns * 0.5 and prof.clock_ns > 0
    assert sum(v["nodes"] for v in prof.by_kind().values()) == n
    text = prof.table(top=3)
    assert "by kind" in text and "overhead" in text
    assert prof.to_dict()["rows"][0]["slot"] == 0


def test_profiled_program_agrees_and_plain_source_has_no_timers(plan):
    src = plan._program.source
    assert "_hp_" not in src and "clock" not in src
    prog = plan._program
    again = compile_numba_program(plan.graph.nodes, plan.graph.inputs, plan._outputs,
                                  plan.memory, plan._buffers, prog._in_specs, prog._out_specs)
    assert again.source == src  # profile=False: the same source, the same cache entry
    timed = compile_numba_program(plan.graph.nodes, plan.graph.inputs, plan._outputs,
                                  plan.memory, plan._buffers, prog._in_specs, prog._out_specs,
                                  profile=True)
    assert "_hp_clk()" in timed.source
    a = args()
    want = plan.gradient(*a)
    out = plan.new_result()
    leaves = plan._leaves(a)
    timed.run(leaves, [out.value, *plan._check_out(out, leaves)])
    assert float(out.value) == pytest.approx(float(want.value), rel=1e-12)
    for g, w in zip(out.gradient, want.gradient, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    assert timed.timers[-1] == 1


def test_cpu_clock(plan):
    prof = profile(plan, *args(), repeats=3, warmup=1, clock="cpu")
    assert "CPU" in prof.clock and all(r.median_ns >= 0 for r in prof.rows)
    with pytest.raises(ValueError, match="clock"):
        profile(plan, *args(), clock="tsc")


def test_profile_takes_a_function_and_refuses_other_plans():
    x = np.linspace(-1, 1, 7)
    prof = profile(lambda x: np.sum(np.sin(x) ** 2), x, repeats=3, warmup=1)
    assert prof.rows and all(r.median_ns >= 0 for r in prof.rows)
    with pytest.raises(TypeError, match="gradient plan"):
        profile(ha.compile(lambda x: np.sum(x**2), x, backend="numpy"), x)


@pytest.mark.parametrize("clock", ["wall", "cpu"])
def test_the_profiled_program_is_compiled_as_the_plans_own(plan, clock):
    """The timed program goes through hybridad's compiler like the plan's own
    (its clock reads are natives of that compiler too): a profile times the
    code the plan runs -- numba compiled it before, and its LLVM left the
    larger vmath functions (log1p, logaddexp) as scalar calls, 8.4 ns an
    element where the plan's loop took 1.0."""
    from hybridad.backends.numba.program import compile_numba_program

    prog = plan._program
    assert prog.compiler == "hybridad's own compiler (LLVM)"
    timed = compile_numba_program(plan.graph.nodes, plan.graph.inputs, plan._outputs,
                                  plan.memory, plan._buffers, prog._in_specs, prog._out_specs,
                                  profile=clock)
    assert timed.compiler == prog.compiler
    a = args()
    out = plan.new_result()
    leaves = plan._leaves(a)
    timed.run(leaves, [out.value, *plan._check_out(out, leaves)])
    assert timed.timers[-1] == 1 and timed.timers[-2] > 0  # one run, timed


def test_an_hvp_plan_is_profiled_with_its_direction():
    """``v=``: the fused program of an ``hvp=True`` plan, timed; its rows
    cover the tangent sweep too; a gradient plan refuses ``v``."""
    rng = np.random.default_rng(1)
    x, v = rng.standard_normal(50), rng.standard_normal(50)
    f = lambda z: np.sum(np.logaddexp(0.0, z) * np.cos(z))  # noqa: E731
    prof = profile(f, x, v=v, hvp=True, repeats=3, warmup=1)
    assert "tangent" in {r.phase for r in prof.rows}
    assert all(r.median_ns >= 0 for r in prof.rows)
    with pytest.raises(TypeError, match="HVP plan"):
        profile(f, x, v=v, repeats=3)
    with pytest.raises(TypeError, match="HVP plan"):
        profile(ha.compile(f, x, hvp=True, tiered=False), x, repeats=3)
