"""Where a numba plan's time goes: per-node timings of its compiled program.

:func:`profile` compiles the plan's program again with a timer after every
node (:mod:`hybridad.backends.numba.profiling`: one ``clock_gettime`` read
per node, chained, so the nodes' times add up to the run's), calls it and
the plan's own, uninstrumented program in turn on the same arguments, and
returns a :class:`PlanProfile`: one row per timed node (median nanoseconds
over the calls, share of the run), totals by kind, and the instrumented
run against the plain call's time (the instrumentation's overhead).

Kinds: ``region`` (a fused elementwise loop, or a ``region_acc`` adding into
an adjoint), ``region_reduce`` (a fused loop ending in a reduction: a loss,
a bias gradient's sum over the batch), ``matmul`` (BLAS gemm or loops; one
that accumulates into an adjoint with beta = 1 included), ``reduction`` (a
sum/max/min/prod node), ``copy`` (materialized reshape, transpose,
broadcast, getitem, concatenate, gather, and ``outputs``: the copies into
the caller's result buffers at the end), ``lapack``, ``other`` (zeros,
scatters, ``iadd``, scans, sort, host calls) and ``entry`` (the argument
checks and arena views opening the function).  A node's time includes the
few view statements written between it and the previous timed node.

The normal plan is untouched: the profiled program is a separate function
(its own source, so its own disk-cache entry) sharing the plan's arena.
"""

from __future__ import annotations

import dataclasses
import gc
import time

import numpy as np

__all__ = ["NodeTime", "PlanProfile", "kind_of", "profile"]

COPY_OPS = frozenset({"reshape", "transpose", "broadcast_to", "copy", "getitem",
                      "concatenate", "gather"})
REDUCTION_OPS = frozenset({"sum", "max", "min", "prod"})
KINDS = ("region", "region_reduce", "matmul", "reduction", "copy", "lapack", "other", "entry")


def kind_of(node):
    """The kind of node ``node`` (see the module docstring)."""
    from ..ops.lapack_names import LAPACK_OPS

    op = node.op
    if op == "region":
        mode = node.attrs["mode"]
        return "region_reduce" if mode == "vjp_sums" or node.attrs["body"].reduction is \
            not None and mode != "vjp" else "region"
    if op == "region_acc":
        return "region"
    if op in ("matmul", "matvec_pair", "matvec_two"):
        return "matmul"
    if op in REDUCTION_OPS:
        return "reduction"
    if op in COPY_OPS:
        return "copy"
    if op in LAPACK_OPS:
        return "lapack"
    return "other"


@dataclasses.dataclass
class NodeTime:
    """One timed segment of the profiled program (a node, ``entry`` or ``outputs``)."""

    slot: int
    node: int | None  # the node's id (None: entry, outputs)
    op: str
    kind: str
    phase: str  # forward, backward ("" for entry, outputs)
    shape: tuple
    detail: str  # what the node does, briefly (region ops, operand layouts, axes)
    parallel: bool  # whether its code has a prange loop
    median_ns: float
    min_ns: float
    mean_ns: float
    share: float  # median over the sum of all rows' medians
    bytes: int  # rough memory traffic: operands + result (+ stored partials)
    flops: int  # matmul: 2 M N K; else 0

    @property
    def gbps(self):
        return self.bytes / self.median_ns if self.median_ns > 0 else float("nan")


@dataclasses.dataclass
class PlanProfile:
    """The result of :func:`profile` (times in nanoseconds, medians over the calls).

    ``total_ns``: the instrumented function from its first clock read to its
    last, inside numba; ``nodes_ns``: the sum of the rows' medians (on a busy
    machine a run is often stretched by a stall somewhere, so ``total_ns`` is
    above ``nodes_ns``; the rows' medians are robust); ``call_ns``: a call of
    the instrumented program from Python (what the plan's ``run`` path adds:
    staging checks, dispatch); ``plain_ns``: the same call of the plan's own
    program; ``overhead_ns`` = ``call_ns - plain_ns`` (noisy; the minima's
    difference, ``overhead_min_ns``, less so), about ``reads * clock_ns``.
    ``samples``: the timer array of each call (``repeats x (rows + 2)``: the
    rows, the run, 1).
    """

    name: str
    parallel: bool
    repeats: int
    rows: list
    total_ns: float
    call_ns: float
    plain_ns: float
    clock_ns: float
    clock: str
    samples: np.ndarray = dataclasses.field(repr=False)
    call_min_ns: float = 0.0
    plain_min_ns: float = 0.0

    @property
    def nodes_ns(self):
        return float(sum(r.median_ns for r in self.rows))

    @property
    def overhead_min_ns(self):
        return self.call_min_ns - self.plain_min_ns

    @property
    def reads(self):
        """Clock reads per call."""
        return len(self.rows) + 1

    @property
    def overhead_ns(self):
        return self.call_ns - self.plain_ns

    def by_kind(self):
        """kind -> ``{"ns", "min_ns", "mean_ns", "share", "nodes"}``: the rows'
        medians (minima, means, shares) summed per kind, and how many rows."""
        out = {}
        for r in self.rows:
            k = out.setdefault(r.kind, {"ns": 0.0, "min_ns": 0.0, "mean_ns": 0.0, "share": 0.0,
                                        "nodes": 0})
            k["ns"] += r.median_ns
            k["min_ns"] += r.min_ns
            k["mean_ns"] += r.mean_ns
            k["share"] += r.share
            k["nodes"] += 1
        return dict(sorted(out.items(), key=lambda kv: -kv[1]["ns"]))

    def top(self, n=None):
        """The rows, slowest first (``n`` of them)."""
        rows = sorted(self.rows, key=lambda r: -r.median_ns)
        return rows if n is None else rows[:n]

    def table(self, top=12):
        """Text: the ``top`` slowest rows, totals by kind, the overhead."""
        head = (f"{'node':>6} {'op':<12} {'kind':<13} {'phase':<8} {'shape':<14} {'par':<3} "
                f"{'median_us':>10} {'min_us':>8} {'mean_us':>9} {'share':>6} {'GB/s':>6} "
                f"{'GF/s':>6}  detail")
        lines = [head, "-" * len(head)]
        for r in self.top(top):
            node = "" if r.node is None else f"%{r.node}"
            gf = f"{r.flops / r.median_ns:6.1f}" if r.flops and r.median_ns > 0 else ""
            gb = f"{r.gbps:6.1f}" if r.bytes and r.median_ns > 0 else ""
            detail = r.detail if len(r.detail) <= 72 else r.detail[:69] + "..."
            lines.append(f"{node:>6} {r.op:<12.12} {r.kind:<13} {r.phase:<8.8} "
                         f"{_shape(r.shape):<14.14} {'P' if r.parallel else '':<3} "
                         f"{r.median_ns / 1e3:10.1f} {r.min_ns / 1e3:8.1f} {r.mean_ns / 1e3:9.1f} "
                         f"{100 * r.share:5.1f}% "
                         f"{gb:>6} {gf:>6}  {detail}")
        if top is not None and len(self.rows) > top:
            rest = self.top()[top:]
            lines.append(f"{'':>6} ({len(rest)} more rows: "
                         f"{sum(r.median_ns for r in rest) / 1e3:.1f} us, "
                         f"{100 * sum(r.share for r in rest):.1f}%)")
        lines += ["", "by kind:  " + "   ".join(
            f"{k} {v['ns'] / 1e3:.1f} us {100 * v['share']:.1f}% ({v['nodes']})"
            for k, v in self.by_kind().items())]
        lines.append(
            f"medians of {self.repeats} calls: rows {self.nodes_ns / 1e3:.1f} us, run "
            f"{self.total_ns / 1e3:.1f} us (instrumented, inside numba); calls from Python: "
            f"instrumented {self.call_ns / 1e3:.1f} us (min {self.call_min_ns / 1e3:.1f}), "
            f"plain {self.plain_ns / 1e3:.1f} us (min {self.plain_min_ns / 1e3:.1f}); "
            f"overhead {self.overhead_ns / 1e3:+.1f} us (of minima "
            f"{self.overhead_min_ns / 1e3:+.1f}; {self.reads} clock reads x "
            f"{self.clock_ns:.0f} ns = {self.reads * self.clock_ns / 1e3:.1f} us)")
        return "\n".join(lines)

    def to_dict(self):
        """JSON-ready: the summary, ``by_kind`` and ``rows``."""
        return {"name": self.name, "parallel": self.parallel, "repeats": self.repeats,
                "total_ns": self.total_ns, "nodes_ns": self.nodes_ns, "call_ns": self.call_ns,
                "plain_ns": self.plain_ns, "call_min_ns": self.call_min_ns,
                "plain_min_ns": self.plain_min_ns, "overhead_ns": self.overhead_ns,
                "overhead_min_ns": self.overhead_min_ns,
                "clock": self.clock, "clock_ns": self.clock_ns, "reads": self.reads,
                "by_kind": self.by_kind(),
                "rows": [{**dataclasses.asdict(r), "shape": list(r.shape)}
                         for r in self.rows]}


def _shape(shape):
    return "x".join(map(str, shape)) if shape else "()"


def profile(plan_or_f, *args, argnums=0, parallel=True, repeats=None, warmup=3,
            budget_s=1.0, clock="wall", v=None, **compile_kwargs):
    """Per-node times of a numba gradient or HVP plan's compiled program.

    Parameters
    ----------
    plan_or_f : Plan or callable
        A gradient plan (``hybridad.compile(f, ...)``, backend ``"numba"``),
        or a function: its plan is built here (``argnums``, ``parallel`` and
        ``compile_kwargs`` go to the gradient plan as :func:`hybridad.compile`
        gives them, untiered).
    *args
        Arguments of a gradient call.
    repeats : int, optional
        Calls of each program (the plan's and the instrumented one,
        alternating); default: as many as fit ``budget_s`` seconds, 5 to 200.
    warmup : int
        Untimed calls of each first.
    v : array_like or pytree, optional
        The direction of an HVP plan (``hybridad.compile(f, ..., hvp=True)``,
        or ``hvp=True`` in ``compile_kwargs``): its fused program (value,
        gradient and ``H v``) is profiled at ``args`` and ``v``.
    clock : {"wall", "cpu"}
        ``"wall"``: a monotonic clock (~20-40 ns a read); ``"cpu"``: the
        calling thread's CPU time (~0.4 us a read), which leaves out the
        time slices other processes take on a busy machine -- for serial
        plans (``parallel=False``: a parallel plan's worker threads are not
        counted); both programs then run with BLAS single-threaded, so that
        the thread's time covers the gemm calls too.

    Returns
    -------
    PlanProfile
    """
    from ..backends.numba.profiling import CLOCKS, clock_cost
    from .plan import Plan

    if isinstance(plan_or_f, Plan):
        plan = plan_or_f
    else:  # (ha.compile's gradient plan; the entry points sit above the plans)
        plan = Plan(plan_or_f, args, argnums, compile_kwargs.pop("backend", "numba"),
                    parallel=parallel, tiered=False, **compile_kwargs)
    hvp = type(plan) is Plan and plan.order == 2
    if type(plan) is not Plan or plan.backend != "numba" or plan.update is not None or \
            (v is not None) != hvp:
        raise TypeError("profile() takes a gradient plan on the numba backend "
                        "(hybridad.compile(f, ...)), or an HVP plan (hvp=True) with v=; got "
                        f"{plan!r}" + (" and v" if v is not None else ""))
    plan.wait()
    if plan._program is None:
        raise RuntimeError(f"{plan.name}: the numba program did not compile "
                           "(plan.explain() says why)")
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {sorted(CLOCKS)}; got {clock!r}")
    timed = _instrumented(plan, clock)
    leaves = plan._leaves(args)
    out = plan.new_result()
    if hvp:
        vleaves = plan._tangent_leaves(v)
        outs = [out.value, *plan._check_out(out, leaves, vleaves)]
        leaves = leaves + vleaves
    else:
        outs = [out.value, *plan._check_out(out, leaves)]
    plain = plan._program
    for _ in range(max(1, warmup)):
        plain.run(leaves, outs)
        timed.run(leaves, outs)
    if repeats is None:
        t0 = time.perf_counter()
        plain.run(leaves, outs)
        once = time.perf_counter() - t0
        repeats = int(min(200, max(5, budget_s / 2 / max(once, 1e-9))))
    if clock == "cpu":
        from ..backends.numba.threads import SingleThreadedBlas

        with SingleThreadedBlas():
            samples, call_ns, plain_ns = _measure(plain, timed, leaves, outs, repeats)
    else:
        samples, call_ns, plain_ns = _measure(plain, timed, leaves, outs, repeats)
    return _summary(plan, timed, samples, call_ns, plain_ns, clock_cost(clock),
                    CLOCKS[clock][0])


def _instrumented(plan, clock="wall"):
    """The plan's program compiled again with timers (on the plan's arena)."""
    from ..backends.numba import build_program
    from ..backends.numba.threshold import serial_loops

    prog = plan._program
    outputs = plan._outputs
    with serial_loops(plan._loops_serial):
        timed = build_program(plan.graph.nodes, plan.graph.inputs, outputs, plan.memory,
                              plan._buffers, prog._in_specs, prog._out_specs,
                              name="profile_program", profile=clock)
    timed.lock = plan._lock
    return timed


def _measure(plain, timed, leaves, outs, repeats):
    """``repeats`` calls of each program, alternating which goes first."""
    t = timed.timers
    samples = np.zeros((repeats, t.size), np.int64)
    call_ns, plain_ns = np.empty(repeats), np.empty(repeats)
    clock = time.perf_counter_ns
    enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(repeats):
            for which in ((0, 1) if r % 2 == 0 else (1, 0)):
                if which == 0:
                    a = clock()
                    plain.run(leaves, outs)
                    plain_ns[r] = clock() - a
                else:
                    t[:] = 0
                    a = clock()
                    timed.run(leaves, outs)
                    call_ns[r] = clock() - a
                    samples[r] = t
    finally:
        if enabled:
            gc.enable()
    return samples, call_ns, plain_ns


def _summary(plan, timed, samples, call_ns, plain_ns, clock_ns, clock_name):
    details = _Details(plan)
    n = len(timed.timed)
    med = np.median(samples[:, :n], axis=0)
    whole = float(med.sum()) or 1.0
    rows = []
    for k, (label, par) in enumerate(timed.timed):
        common = dict(slot=k, parallel=par, median_ns=float(med[k]),
                      min_ns=float(samples[:, k].min()), mean_ns=float(samples[:, k].mean()),
                      share=float(med[k]) / whole)
        if isinstance(label, str):
            rows.append(NodeTime(node=None, op=label, kind="entry" if label == "entry" else
                                 "copy", phase="", shape=(), detail=(
                                     "argument checks, arena views" if label == "entry" else
                                     "copies into the result buffers"), bytes=0, flops=0,
                                 **common))
            continue
        rows.append(NodeTime(node=label.id, op=label.op, kind=kind_of(label), phase=label.phase,
                             shape=label.shape, detail=details(label),
                             bytes=details.traffic(label), flops=_flops(label), **common))
    return PlanProfile(plan.name, plan.parallel, len(samples), rows,
                       float(np.median(samples[:, n])), float(np.median(call_ns)),
                       float(np.median(plain_ns)), float(clock_ns), clock_name, samples,
                       float(call_ns.min()), float(plain_ns.min()))


def _flops(node):
    if node.op in ("matvec_pair", "matvec_two"):
        return 4 * node.args[0].size
    if node.op != "matmul":
        return 0
    return 2 * node.size * node.args[0].shape[-1]


class _Details:
    """The detail text and rough memory traffic of a plan's nodes."""

    def __init__(self, plan):
        from ..backends.numba.emit import blas_accumulations, blas_ready, region_acc_groups
        from ..backends.numba.emit_pairs import matvec_call
        from ..backends.numba.layouts import numba_layouts
        from ..backends.numba.machine import machine

        nodes = plan.graph.nodes
        self.layouts = numba_layouts(nodes, plan.memory)
        self.accumulating = set(blas_accumulations(nodes, plan._outputs, self.layouts))
        self.groups = region_acc_groups(nodes)
        self.blas_ready = blas_ready
        self.serial = plan._loops_serial  # (the choices the program was built with)
        self.matvec = lambda node: matvec_call(node, self.layouts) if \
            blas_ready(node, self.layouts) else None
        self.gemm_on_threads = machine().gemm_on_threads
        self.gemm_k_parts = machine().gemm_k_parts
        self.partials = {}
        for m in nodes:
            if m.op == "region_partial":
                self.partials.setdefault(m.args[0].id, []).append(m)

    def traffic(self, node):
        """Bytes read and written, roughly: operands (a scalar literal: 0),
        result, stored partials; a group of region_accs counts them all."""
        members = self.groups.get(node.id, [node])
        total = 0
        for m in members:
            total += sum(a.nbytes for a in m.args if not (a.op == "const" and a.size == 1))
            total += m.nbytes * (2 if m.op in ("region_acc", "iadd") else 1)
            total += sum(p.nbytes for p in self.partials.get(m.id, ()))
        return int(total)

    def __call__(self, node):
        from ..backends.numba.threshold import serial_loops

        with serial_loops(self.serial):
            return self._detail(node)

    def _detail(self, node):
        op = node.op
        if op in ("region", "region_acc"):
            body = node.attrs["body"]
            text = "+".join(m.op for m in body.nodes)
            if body.reduction is not None:
                text += f" -> {body.reduction.op}"
                axis = body.reduction.attrs.get("axis")
                if axis is not None and len(axis) < len(body.shape):
                    text += f" axis {','.join(map(str, axis))}"
            text += f" over {_shape(body.shape)}"
            if node.attrs.get("mode") == "vjp":
                text += f" (vjp wrt {node.attrs['wrt']})"
            elif node.attrs.get("mode") == "vjp_sums":
                text += f" (vjp wrt {','.join(map(str, node.attrs['wrt']))}, each summed)"
            if op == "region":
                stored = len(self.partials.get(node.id, ()))
                text += f", {stored} partials stored" if stored else ""
            else:
                text = "+= " + text
                group = self.groups.get(node.id, [node])
                text += f" ({len(group)} in one loop)" if len(group) > 1 else ""
            return text
        if op == "matmul":
            a, b = node.args
            text = f"{_shape(a.shape)}{self.layouts.get(a.id, '?')} @ " \
                   f"{_shape(b.shape)}{self.layouts.get(b.id, '?')}"
            call = self.matvec(node)
            text += (f" {'row' if call.form == 'dot' else 'column'} loop"
                     f"{f' ({call.threads} threads)' if call.threads > 1 else ''}"
                     if call is not None and call.how == "loop" else
                     " gemm" if self.blas_ready(node, self.layouts) else " loops")
            if text.endswith(" gemm") and len(node.shape) == 2 and \
                    self.gemm_on_threads(node.shape[0], node.args[0].shape[-1],
                                         node.shape[1]):
                parts = self.gemm_k_parts(node.shape[0], node.args[0].shape[-1],
                                          node.shape[1])
                text += f" ({parts} parts of k on the threads)" if parts else \
                    " (a panel per thread)"
            if node.id in self.accumulating:
                text += " (+= into the adjoint, beta = 1)"
            return text
        if op == "matvec_two":
            from ..backends.numba.emit_pairs import two_call

            A, threads = node.args[0], two_call(node)[0]
            what = "A x and A y" if node.attrs["form"] == "dot" else "A^T x and A^T y"
            return (f"{_shape(A.shape)}{self.layouts.get(A.id, '?')}: {what}, one read of A"
                    + (f" ({threads} threads)" if threads > 1 else ""))
        if op == "matvec_pair":
            from ..backends.numba.emit_pairs import pair_call

            A = node.args[0]
            parts, threads, _ = pair_call(node)
            return (f"{_shape(A.shape)}{self.layouts.get(A.id, '?')}: A u and A^T v, one read "
                    f"of A ({parts} parts" + (f", {threads} threads)" if threads > 1 else ")"))
        if op in REDUCTION_OPS:
            axis = node.attrs.get("axis")
            x = node.args[0]
            return f"{op} of {_shape(x.shape)} over axis " + (
                "all" if axis is None else ",".join(map(str, axis)))
        if node.args:
            return f"{op} of {_shape(node.args[0].shape)}"
        return op
