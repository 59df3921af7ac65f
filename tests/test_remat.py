"""Second-order programs fused like gradients (hybridad.transforms.remat):
cheap regions recomputed inside each region that reads them, a sum of two
fresh accumulations added into one buffer, and accumulations into one
buffer at shifted positions kept in loops of their own
(backends/numba/emit.region_acc_groups).  The Rosenbrock HVP had 16 loops
over n and a 48 MB arena at n = 10^6; it has 7 and no arena of n."""

from __future__ import annotations

import re

import numpy as np
import pytest

import hybridad as ha
from hybridad.backends.numba.emit import region_acc_groups
from hybridad.testing import assert_no_alloc, count_allocations
from hybridad.transforms import pipeline

RNG = np.random.default_rng(12)


def rosen(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def chain(x):  # a matmul inside an elementwise chain
    A = np.linspace(-1.0, 1.0, x.size * 4).reshape(4, x.size) / x.size
    return np.sum(np.tanh(A @ (x * np.cos(x))) ** 2) + np.sum(np.exp(-x ** 2) * x)


def _without(m, *names):
    for table in ("LOWERING", "STAGED_LOWERING"):
        new = {b: tuple(p for p in passes if p not in names)
               for b, passes in getattr(pipeline, table).items()}
        m.setattr(pipeline, table, new)


def _loops_over(plan, n):
    """Nodes that run a loop over about n elements (regions, accumulations,
    zero fills)."""
    return [m for m in plan.graph.nodes
            if m.op in ("region", "region_acc", "zeros", "scatter", "add", "iadd")
            and int(np.prod(m.attrs["body"].shape if m.op.startswith("region") else m.shape))
            >= n - 1]


def test_the_rosenbrock_hvp_is_a_few_loops_and_no_arena_of_n():
    n = 10 ** 4
    x = RNG.uniform(-1.0, 1.0, n)
    plan = ha.compile(rosen, x, hvp=True)
    loops = _loops_over(plan, n)
    assert len(loops) <= 7, [f"%{m.id} {m.op}" for m in loops]
    assert plan.memory.total_bytes < n * 8  # value, gradient and Hv: the result buffers


@pytest.mark.parametrize("f", [rosen, chain], ids=["rosen", "chain"])
def test_hvp_hessian_against_the_unfused_plan_and_the_reference(f, monkeypatch):
    n = 300
    x, v = RNG.uniform(-1.0, 1.0, n), RNG.standard_normal(n)
    hv = ha.compile(f, x, hvp=True).hvp(x, v=v)
    hs = ha.compile(f, x[:40], hessian=True).hessian(x[:40])
    with monkeypatch.context() as m:
        _without(m, "rematerialize", "merge_accumulations")
        hv_full = ha.compile(f, x, hvp=True).hvp(x, v=v)
        hs_full = ha.compile(f, x[:40], hessian=True).hessian(x[:40])
    ref = ha.hvp(f, x, v, backend="numpy")
    for got in (hv, hv_full):
        assert float(got.value) == pytest.approx(float(ref.value), rel=1e-13)
        np.testing.assert_allclose(got.gradient, ref.gradient, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got.hvp, ref.hvp, rtol=1e-12, atol=1e-11)
    np.testing.assert_allclose(hs.hessian, hs_full.hessian, rtol=1e-12, atol=1e-11)
    eps = 1e-6
    g = lambda z: ha.gradient(f, z, backend="numpy").gradient  # noqa: E731
    np.testing.assert_allclose(hv.hvp, (g(x + eps * v) - g(x - eps * v)) / (2 * eps),
                               rtol=1e-5, atol=1e-5)


def test_the_fused_hvp_allocates_nothing():
    x, v = RNG.uniform(-1.0, 1.0, 500), RNG.standard_normal(500)
    plan = ha.compile(rosen, x, hvp=True)
    res = ha.HvpResult(x)
    plan.hvp(x, v=v, out=res)
    with count_allocations() as counts:
        for _ in range(5):
            plan.hvp(x, v=v, out=res)
    assert counts.allocations == 0, counts


STENCIL3 = lambda x: np.sum(x[1:-1] * x[:-2] - x[2:] ** 2 * x[:-2])  # noqa: E731


@pytest.mark.parametrize("f,n_slices", [(rosen, 2), (STENCIL3, 3)], ids=["rosen", "three"])
@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "serial"])
def test_accumulations_at_shifted_positions_gather_in_one_loop(f, n_slices, parallel, monkeypatch):
    """The gradient of a stencil adds into ``g[:-1]`` and ``g[1:]`` (and
    ``g[2:]``): one loop over ``g`` (over each run of positions the same
    slices cover), each element gathering what each slice adds there -- a
    loop over the slices' bodies would carry a dependence from each
    iteration to the next, and one loop per slice read and wrote ``g`` once
    each.  The same bits as those loops, the numpy backend's gradient to
    rounding, nothing allocated."""
    import hybridad.backends.numba.emit as E
    import hybridad.backends.numba.loops as L

    x = RNG.uniform(-1.0, 1.0, 40000)
    plan = ha.compile(f, x, parallel=parallel, tiered=False)
    accs = [m for m in plan.graph.nodes if m.op == "region_acc"]
    assert len(accs) == n_slices
    groups = region_acc_groups(plan.graph.nodes)
    assert sorted(len(g) for g in groups.values()) == [n_slices], groups
    src = plan._program.source
    assert src.count("_j1 = i0") >= 1 and ("prange(" in src) == parallel, src
    got = plan.gradient(x)
    np.testing.assert_allclose(got.gradient, ha.gradient(f, x, backend="numpy").gradient,
                               rtol=1e-13, atol=1e-12)
    assert_no_alloc(plan.gradient, x, out=got, n=3, warmup=1)
    monkeypatch.setattr(L, "gather_starts", lambda members: None)
    monkeypatch.setattr(E, "gather_starts", lambda members: None)
    apart = ha.compile(lambda x: f(x), x, parallel=parallel, tiered=False)
    assert "_j1 = i0" not in apart._program.source
    np.testing.assert_array_equal(apart.gradient(x).gradient, got.gradient)


@pytest.mark.parametrize("f", [rosen, lambda x: np.sum(x[1:-1] * x[:-2] - x[2:] ** 2 * x[:-2])],
                         ids=["rosen", "stencil"])
def test_parallel_stencils_are_the_serial_plans_bits(f):
    """A parallel plan's loops (``prange``, from 32768 iterations) read and
    add at shifted positions (``g[1:] += ...``); each thread's bounds are
    known non-negative (backends/jit/parallel.py), so numba's wraparound of
    negative indices is dropped there.  Element by element the same
    arithmetic: the serial plan's bits, HVP included."""
    import numba

    x, v = RNG.uniform(-1.0, 1.0, 40000), RNG.standard_normal(40000)
    par = ha.compile(f, x, parallel=True)
    ser = ha.compile(f, x, parallel=False)
    hpar = ha.compile(f, x, hvp=True, parallel=True)
    hser = ha.compile(f, x, hvp=True, parallel=False)
    assert "prange(" in par._program.source
    g, h = ser.gradient(x).gradient, hser.hvp(x, v=v).hvp
    threads = numba.get_num_threads()
    try:
        for k in sorted({1, threads}):
            numba.set_num_threads(k)
            np.testing.assert_array_equal(par.gradient(x).gradient, g)
            np.testing.assert_array_equal(hpar.hvp(x, v=v).hvp, h)
    finally:
        numba.set_num_threads(threads)


SINE_STENCIL = lambda x: np.sum(x[1:-1] * x[:-2] - x[2:] ** 2 * x[:-2] + np.sin(x[1:-1]))  # noqa: E731


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "serial"])
def test_stored_partials_of_a_stencil_gather_in_one_loop(parallel, monkeypatch):
    """A stencil whose partials are stored (``sin``: evaluated once, in the
    forward loop) places them into its gradient by a ``scatter`` and
    ``scatter_add``s into shifted slices: one loop over the gradient (per run
    of positions the same slices cover) instead of a fill and a loop per
    slice.  The bits of those loops, the numpy backend's gradient, nothing
    allocated."""
    import hybridad.backends.numba.program as P

    x = RNG.uniform(-1.0, 1.0, 40000)
    plan = ha.compile(SINE_STENCIL, x, parallel=parallel, tiered=False)
    ops = [n.op for n in plan.graph.nodes]
    assert ops.count("scatter") == 1 and ops.count("scatter_add") == 2, ops
    src = plan._program.source
    assert src.count("(in the loop above)") >= 2 and ("prange(" in src) == parallel, src
    got = plan.gradient(x)
    np.testing.assert_allclose(got.gradient,
                               ha.gradient(SINE_STENCIL, x, backend="numpy").gradient,
                               rtol=1e-13, atol=1e-12)
    assert_no_alloc(plan.gradient, x, out=got, n=3, warmup=1)
    monkeypatch.setattr(P, "scatter_chains", lambda nodes: {})
    apart = ha.compile(lambda x: SINE_STENCIL(x), x, parallel=parallel, tiered=False)
    np.testing.assert_array_equal(apart.gradient(x).gradient, got.gradient)


@pytest.mark.parametrize("f", [rosen, STENCIL3, SINE_STENCIL], ids=["rosen", "three", "sine"])
def test_gathered_stencils_in_float32_agree_with_the_separate_loops(f, monkeypatch):
    """float32 gradients and HVPs gathered: the separate loops' sums in their
    order (the gathers off) to the last bit's rounding -- LLVM contracts a
    product into the add differently in the two loop shapes (22 % of
    Rosenbrock's gradient elements 1 ulp apart; float64's tests above are
    equal bits) -- and nothing allocated."""
    import hybridad.backends.numba.emit as E
    import hybridad.backends.numba.loops as L
    import hybridad.backends.numba.program as P

    x = RNG.uniform(-1.0, 1.0, 40000).astype(np.float32)
    v = RNG.standard_normal(40000).astype(np.float32)
    grad, hvp = ha.compile(f, x, tiered=False), ha.compile(f, x, hvp=True, tiered=False)
    g, h = grad.gradient(x), hvp.hvp(x, v=v)
    assert g.gradient.dtype == np.float32 and h.hvp.dtype == np.float32
    assert_no_alloc(grad.gradient, x, out=g, n=3, warmup=1)
    for mod, name, off in ((L, "gather_starts", lambda members: None),
                           (E, "gather_starts", lambda members: None),
                           (P, "scatter_chains", lambda nodes: {})):
        monkeypatch.setattr(mod, name, off)
    apart = ha.compile(lambda x: f(x), x, tiered=False)
    hapart = ha.compile(lambda x: f(x), x, hvp=True, tiered=False)
    for want, got in ((apart.gradient(x).gradient, g.gradient), (hapart.hvp(x, v=v).hvp, h.hvp)):
        np.testing.assert_allclose(got, want, rtol=3e-7, atol=3e-7 * np.abs(want).max())


GAPPED = lambda x: np.sum((x[3:-3] - x[2:-4] ** 2) ** 2)  # noqa: E731


@pytest.mark.parametrize("f", [rosen, GAPPED], ids=["rosen", "gapped"])
def test_a_gather_into_a_fresh_zeros_buffer_writes_each_element_once(f, monkeypatch):
    """A gathered group of adds into a ``zeros`` buffer that only it reads
    takes over the fill: each element written once (the first slice's term
    as it is, zero where no slice adds -- the first two and last two of the
    gapped stencil), not filled, then read and added to.  The sums of the
    separate loops (gathers off) to the sign of a zero, the numpy backend's
    to rounding, in the gradient and HVP programs and a linearized Hessian
    plan's tangent program."""
    import hybridad.backends.numba.emit as E
    import hybridad.backends.numba.loops as L

    x, v = RNG.uniform(-1.0, 1.0, 40000), RNG.standard_normal(40000)
    hv = ha.compile(f, x, hvp=True, tiered=False)
    lin = ha.compile(f, x, hessian=True)
    lin.linearize(x)
    got, lin_got = hv.hvp(x, v=v), lin.hvp(v=v)
    sources = [hv._program.source, lin._programs["tangent"].source]
    fresh = [s for s in sources if re.search(r"\bo2\[i0 \+ \d+\] = \(_t0 \+ _t1\)", s)]
    assert fresh, sources[0]  # (the gather's first term is not added to the buffer)
    assert all("o2[...] = 0" not in s for s in fresh)
    ref = ha.hvp(f, x, v, backend="numpy")
    for g in (got, lin_got):
        np.testing.assert_allclose(g.hvp, ref.hvp, rtol=1e-12, atol=1e-12)
    if f is GAPPED:  # (no slice adds at either end: written zero)
        assert np.all(got.hvp[:2] == 0) and np.all(got.hvp[-2:] == 0)
    monkeypatch.setattr(L, "gather_starts", lambda members: None)
    monkeypatch.setattr(E, "gather_starts", lambda members: None)
    apart = ha.compile(lambda x: f(x), x, hvp=True, tiered=False)
    assert "o2[...] = 0" in apart._program.source or "[...] = 0" in apart._program.source
    np.testing.assert_array_equal(apart.hvp(x, v=v).hvp, got.hvp)


def _tangent_reads(plan):
    """The primal values a staged plan's tangent program reads (not the
    arguments, constants or views of them)."""
    seed, body, given, _ = plan._stages["tangent"]
    own = {n.id for n in body} - given - {n.id for n in body if n.op == "input"}
    return {a.id: a for n in body if n.id in own for a in n.args
            if a.id in given and a.op not in ("input", "const") and a.op != "getitem"}


@pytest.mark.parametrize("f", [rosen, chain, STENCIL3], ids=["rosen", "chain", "three"])
def test_a_linearized_tangent_recomputes_cheap_regions_of_the_point(f, monkeypatch):
    """After ``linearize``, each ``hvp(v=)`` runs the tangent program alone:
    the cheap primal regions of the point's arguments it reads (Rosenbrock's
    ``2 x[:-1]`` and its residual's partial) are recomputed in its loops
    instead of kept by the primal program and read back -- two arrays of n
    read per H v that reading ``x`` replaces.  The same operations on the
    same values: the same bits as the plan that keeps them."""
    from hybridad.plans import staged

    n = 400
    x, v = RNG.uniform(-1.0, 1.0, n), RNG.standard_normal(n)
    plan = ha.compile(f, x, hessian=True)
    plan.linearize(x)
    res = ha.HvpResult(x)
    plan.hvp(v=v, out=res)
    with monkeypatch.context() as m:
        m.setattr(staged, "recompute_in_stages", lambda nodes, stage, outputs: nodes)
        kept = ha.compile(f, x, hessian=True)
        kept.linearize(x)
        want = kept.hvp(v=v)
    assert not [a for a in _tangent_reads(plan).values() if a.size > 1 and
                not any(a is o for o in plan.graph.outputs)] or f is chain, \
        [f"%{a.id} {a.op}" for a in _tangent_reads(plan).values()]
    assert len([a for a in _tangent_reads(kept).values() if a.size > 1]) > \
        len([a for a in _tangent_reads(plan).values() if a.size > 1])
    assert np.array_equal(res.hvp, want.hvp) and np.array_equal(res.gradient, want.gradient)
    ref = ha.hvp(f, x, v, backend="numpy")
    np.testing.assert_allclose(res.hvp, ref.hvp, rtol=1e-12, atol=1e-11)
    eps = 1e-6
    g = lambda z: ha.gradient(f, z, backend="numpy").gradient  # noqa: E731
    np.testing.assert_allclose(res.hvp, (g(x + eps * v) - g(x - eps * v)) / (2 * eps),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(plan.hessian(x).hessian, kept.hessian(x).hessian, rtol=0, atol=0)
    alone = np.empty(n)
    plan.linearize(x)
    plan.hvp(v=v, out=alone)
    assert np.array_equal(alone, want.hvp)
    with count_allocations() as counts:
        for _ in range(3):
            plan.hvp(v=v, out=res)
            plan.hvp(v=v, out=alone)
    assert counts.allocations == 0, counts


def test_a_scalar_region_two_joins_read_keeps_the_body_in_order():
    """``p * log(sum(exp(p)))``: the tangent program's reader evaluates the
    scalar ``1 / sum`` region, and then a region reading that scalar too;
    the second's members come after the first's in the one body (they came
    before it: a KeyError compiling ``linearize`` + ``hvp(v=)``)."""
    p = np.linspace(-1.0, 1.0, 12)
    v = np.random.default_rng(1).standard_normal(p.size)
    for f in (lambda p: np.sum(p * np.log(np.sum(np.exp(p)))),
              lambda p: np.sum(np.sin(p) * (p - np.log(np.sum(np.exp(p)))))):
        plan = ha.compile(f, p, hessian=True)
        H = plan.hessian(p).hessian
        np.testing.assert_allclose(H, ha.hessian(f, p, backend="numpy").hessian,
                                   rtol=1e-12, atol=1e-13)
        plan.linearize(p)
        hv = np.empty_like(p)
        plan.hvp(v=v, out=hv)
        np.testing.assert_allclose(hv, H @ v, rtol=1e-12, atol=1e-13)
        with count_allocations() as counts:
            plan.hvp(v=v, out=hv)
        assert counts.allocations == 0
