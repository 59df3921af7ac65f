"""What a plan shows of itself: :meth:`explain` (graph, regions, buffers and
their lifetimes, generated source), :meth:`memory_profile` and ``repr``."""

from __future__ import annotations

from typing import Any

__all__ = ["ExplainMixin"]


class ExplainMixin:
    """Methods of :class:`hybridad.plans.plan.Plan` (a mixin)."""


    def explain(self) -> str:
        """Human-readable description of the plan.

        Returns
        -------
        str
            The build's time by stage (``plan.build_times``: the one that
            dominates named), the graph (forward and backward sweeps), each fused region with
            its ops, loop, strategy for its partials (``store``: dual-number
            partials written in the forward sweep; ``recompute``: the body
            evaluated again in the backward sweep) and where they are written
            (an arena slot, in place over a dead operand, or straight into the
            result's gradient buffer), every buffer with its bytes and arena
            offset, the arena's total bytes, and the generated source.
        """
        from ..transforms.pipeline import describe

        lines = [f"plan for {self.name}, argnums={self.argnums}",
                 f"pipeline ({self.backend}): {describe(self.backend)}"]
        if "gradient" in vars(self):  # the generated fast path (FastPathMixin._fast_path)
            lines.append("calls: plan.gradient is generated code in front of the compiled "
                         "program (its text: plan.gradient.source); whatever it does not take "
                         "goes to the readable general path, Plan.gradient (hybridad/plans/"
                         "plan.py)")
        times = getattr(self, "build_times", None)
        if times is not None:
            lines += times.lines()
        check = getattr(self, "_decision_check", None)
        if check is not None:
            how = "by the reference check (numpy, generated Python)" if check.program is None \
                else (f"by a compiled program ({check.program.compiler}; workspace "
                      f"{check.program.memory.total_bytes} B), the reference check "
                      "(numpy) where it fails")
            carried = getattr(getattr(self, "_program", None), "check_bytes", None)
            if carried is not None and check.program is not None:
                how += (f"; on the fast path inside the plan's program, after its argument "
                        f"checks, in one native call ({carried} B of its own)")
            lines.append(f"decisions on values (checked before every call {how}; "
                         f"{len(self._specializations)} other specialization(s) made):")
            eager = {id(d) for d in check.eager}
            lines += [f"  {d!r}" + ("" if id(d) in eager else
                                    " (not checked before a call: the program reports the "
                                    "failure, then the specialization for it runs)")
                      for d in check.decisions]
        lines += self._tier_lines()
        lines += self._thread_lines()
        if self.matmul_precision is not None:
            lines.append(f"matrix products: {self.matmul_precision}")
        if self.backend == "numba":
            from ..transforms.costs import costs
            lines.append("costs (store or recompute partials, matrix-vector loop or gemv): "
                         + costs().source)
        lines += ["", "graph:", str(self.graph), ""]
        if self.backend in ("numba", "cupy"):  # (the fused regions, and their partials)
            lines += ["regions:", *self._region_lines(), ""]
        if self.memory_budget is not None:
            lines += [f"memory budget: {self.memory_budget} bytes" + (
                "; every region is recomputed in the backward sweep to fit (no stored "
                "partials)" if self.recomputed_for_budget else "; fits as planned"), ""]
        lines += ["buffers: (live a..b: first and last step of the schedule, the graph's "
                  "node order)", *self._buffer_lines()]
        lines += ["", "generated source:", "(compiling in the background)" if
                  self._program is None else self._program.source]
        return "\n".join(lines)

    @property
    def matmul_precision(self) -> str | None:
        """What this GPU plan's float matrix products run in, per dtype:
        hybridad's product kernels or cuBLAS, and in what precision (TF32 only
        where ``CUPY_TF32=1`` asked cupy for it); None on the CPU backends or
        without float products.

        Returns
        -------
        str or None
        """
        if self.backend != "cupy" or self.graph is None:
            return None
        from ..backends.cuda.products import products_precision

        dtypes, todo = set(), [self.graph.nodes]
        while todo:  # (loop bodies' products too)
            for n in todo.pop():
                if n.op == "matmul" and n.dtype.kind == "f":
                    dtypes.add(n.dtype)
                elif n.op == "loop":
                    todo.append(n.attrs["body"].graph.nodes)
        return products_precision(self._own_products, dtypes) if dtypes else None

    def _thread_lines(self):
        """How many threads the parallel programs' loops use, and why
        (:class:`hybridad.backends.numba.threads.ThreadChoice`)."""
        programs = [("program", getattr(self, "_program", None)),
                    ("value program", getattr(self, "_value_program", None))]
        programs += sorted(getattr(self, "_programs", {}).items())
        lines = []
        for name, prog in programs:
            compiler = getattr(prog, "compiler", None)
            if compiler is not None:
                lines.append(f"{name}: compiled by {compiler}")
            if getattr(prog, "blas_limited", False):
                lines.append(f"{name}: BLAS and LAPACK on one thread (their own threads "
                             "would sum in an order that depends on their count)")
            choice = getattr(prog, "threads", None)
            if choice is not None:
                lines.append(f"{name}: prange loops; {choice.describe()}")
        return lines

    def _loop_lines(self):
        """How each loop node's iterations run, where its runner is compiled."""
        if self.backend != "numba":
            return []
        from ..backends import loops
        from ..backends.numba.threshold import serial_loops

        out = []
        with serial_loops(self._loops_serial):
            for n in self.graph.nodes:
                if n.op == "loop":
                    how = loops.describe(n, "numba")
                    out.append(f"loop %{n.id}: " + (how or "not compiled yet"))
        return out

    def _buffer_lines(self):
        mem = self.memory
        nodes = {n.id: n for n in self.graph.nodes}
        spans = {}  # key -> (dtype, lo, hi, first, last)
        for nid, (dt, off, nbytes, _) in mem.slots.items():
            spans[nid] = (dt, off, off + nbytes, *mem.lifetimes[nid])
        for nid, (dt, off, count) in mem.scratch.items():
            spans[("scratch", nid)] = (dt, off, off + count * dt.itemsize,
                                       *mem.lifetimes[("scratch", nid)])

        def name(key):
            return f"scratch of %{key[1]}" if isinstance(key, tuple) else f"%{key}"

        out = []
        for key in sorted(spans, key=lambda k: (spans[k][3], str(k))):
            dt, lo, hi, a, b = spans[key]
            shared = [name(k) for k, (d2, lo2, hi2, _, _) in spans.items()
                      if k != key and d2 == dt and lo2 < hi and lo < hi2]
            nid = key[1] if isinstance(key, tuple) else key
            node = nodes[nid]
            op = "scratch" if isinstance(key, tuple) else node.op
            out.append(f"  {name(key):<16} {op:<16} {node.phase:<8} {hi - lo:>12} B  "
                       f"live {a}..{b}  arena[{dt.name}]+{lo}" +
                       (f"  (slot also used by {', '.join(shared)})" if shared else ""))
        for nid in mem.direct:
            node = nodes[nid]
            out.append(f"  %{nid:<15} {node.op:<16} {node.phase:<8} {node.nbytes:>12} B  "
                       f"the result's buffer (no arena)")
        for dt, n in mem.arena_bytes.items():
            out.append(f"arena[{dt.name}]: {n} bytes")
        if mem.held_bytes:
            out.append(f"held by loops beside the arena (carries, body workspace): "
                       f"{mem.held_bytes} bytes")
        out += self._loop_lines()
        if self.checkpoint_levels:
            outer = self.checkpoint_outer
            out.append(f"loops checkpointed on {self.checkpoint_levels} levels for the memory "
                       f"budget" + (f" (at most {outer} outer segments)" if outer else "") +
                       f": each loop's forward sweep runs {self.checkpoint_levels} times "
                       "per gradient (recompute factor), its carries stored per segment")
        out.append(f"total workspace: {mem.total_bytes} bytes (peak); liveness lower bound "
                   f"{mem.lower_bound} bytes; one slot per buffer would take "
                   f"{mem.naive_total} bytes")
        return out


    def memory_profile(self) -> Any:
        """Bytes of workspace live at each step of the schedule.

        Returns
        -------
        MemoryProfile
            ``live_bytes[i]``: arena bytes live while node ``labels[i]`` runs
            (forward, then backward sweep); ``arena_bytes``: the arena's size
            (its peak); ``lower_bound``: ``live_bytes.max()``, what no
            arena can undercut; ``naive_bytes``: one slot per buffer.
            ``.plot(path)`` saves the curve (needs matplotlib).
        """
        from ..transforms.memory import MemoryProfile

        nodes = {n.id: n for n in self.graph.nodes}
        labels = [f"%{nid} {nodes[nid].op}" for nid in self.memory.order]
        phases = [nodes[nid].phase for nid in self.memory.order]
        return MemoryProfile(self.memory.live_bytes.copy(), labels, phases,
                             self.memory.total_bytes, self.memory.lower_bound,
                             self.memory.naive_total, self.name)


    def _region_lines(self):
        from ..backends.numba.loops import region_runs_parallel
        from ..ops.region import FROM_OUTPUT
        from ..transforms.partition import PRE_REDUCTION, VJP_SUMS

        nodes = self.graph.nodes
        users = self.graph.users()
        direct = getattr(self._program, "direct", {})
        aliases = {}  # node id -> nodes written in place over it
        for nid, target in self.memory.alias_of.items():
            aliases.setdefault(target.id, []).append(nid)

        def where(node):
            root = node
            while self.memory.storage[root.id] == "alias":
                root = self.memory.alias_of[root.id]
            chain, todo = [], [node.id]
            while todo:  # what later overwrites this storage in place
                nid = todo.pop()
                for a in aliases.get(nid, ()):
                    chain.append(f"%{a}")
                    todo.append(a)
            if root.id in direct:
                text = f"the result's gradient buffer {direct[root.id] - 1} (no copy)"
            elif root is not node:
                text = f"in place over %{root.id}"
            elif node.id in self.memory.slots:
                dt, off, nbytes, _ = self.memory.slots[node.id]
                text = f"arena[{dt.name}]+{off} ({nbytes} B)"
            else:  # (a staged plan's stage output is written into the caller's buffer)
                text = self.memory.storage.get(node.id, "the stage's output buffer")
            return text + (f", then updated in place by {', '.join(chain)}" if chain else "")

        out = []
        for n in nodes:
            if n.op != "region":
                continue
            body, mode = n.attrs["body"], n.attrs["mode"]
            ops = "+".join(m.op for m in body.nodes)
            if body.reduction is not None:
                ops += f" -> {body.reduction.op}"
            par = "a kernel" if self.backend == "cupy" else \
                "prange" if region_runs_parallel(n) else "serial"
            ins = ", ".join(f"%{a.id}" for a in n.args)
            if mode == VJP_SUMS:
                wrt = ", ".join(str(k) for k in n.attrs["wrt"])
                out.append(f"  %{n.id:<4} {n.phase:<8} {ops} over {body.shape} ({par}): "
                           f"recomputed for cotangent x d/d(operand {wrt}), each product "
                           f"summed whole in the loop (no temporary), into {where(n)}")
                continue
            if mode == "vjp":
                axis = n.attrs.get("axis")
                summed = "" if axis is None else f", summed over axes {axis} as it is made"
                out.append(f"  %{n.id:<4} {n.phase:<8} {ops} over {body.shape} ({par}): "
                           f"recomputed for cotangent x d/d(operand {n.attrs['wrt']})"
                           f"{summed}, into {where(n)}")
                continue
            stored = [u for u in users[n.id] if u.op == "region_partial"]
            partials = [u for u in stored if u.attrs["wrt"] != PRE_REDUCTION]
            values = [u for u in stored if u.attrs["wrt"] == PRE_REDUCTION]
            vjps = [m for m in nodes if m.op == "region" and m.attrs["mode"] in ("vjp", VJP_SUMS)
                    and m.attrs["body"] is body]
            reason = getattr(body, "partials_reason", "")
            how = "store" if partials else "recompute" if vjps else \
                FROM_OUTPUT if reason.startswith(FROM_OUTPUT) else "no partials needed"
            why = f" ({reason})" if (partials or vjps) and reason else \
                reason[len(FROM_OUTPUT):] if how == FROM_OUTPUT else ""
            out.append(f"  %{n.id:<4} {n.phase:<8} {ops} over {body.shape} ({par}) of {ins}: "
                       f"value into {where(n)}; partials: {how}{why}")
            for p in partials:
                whole = " summed whole in the loop" if p.attrs.get("summed") else ""
                out.append(f"         d/d%{n.args[p.attrs['wrt']].id}{whole} -> %{p.id}: "
                           f"{where(p)}")
            for p in values:
                out.append(f"         its value before the {body.reduction.op} -> %{p.id}: "
                           f"{where(p)} (the same loop writes it, for %{p.id}'s readers)")
        return out or ["  (none)"]


    def __repr__(self):
        if not hasattr(self, "memory"):
            return f"<hybridad.Plan {self.name} (not built)>"
        return (f"<hybridad.Plan {self.name} argnums={self.argnums} "
                f"nodes={len(self.graph.nodes)} workspace={self.memory.total_bytes}B>")
