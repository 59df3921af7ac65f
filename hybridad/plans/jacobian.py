"""The Jacobian plan: value and Jacobian of a function from one array to an
array, as staged programs (:mod:`.staged`): K columns per chunk run in
forward mode, or K rows in reverse mode."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from ..results import JacobianResult

import numpy as np

from ..core.trace import Trace, as_node
from ..core.tracer import Tracer
from ..results import JacobianResult
from ..transforms.autodiff import backward, jvp
from ..transforms.batching import vmap
from ..transforms import pipeline
from ..transforms.products import mark_seed_products
from .plan import serialized
from .chunks import default_chunk, seed_bytes
from .staged import StagedPlan, falls_back

__all__ = ["JacobianPlan"]


class JacobianPlan(StagedPlan):
    """Value and Jacobian of a function from one array to an array.

    Built by :func:`hybridad.compile` with ``jacobian=True`` (or by
    :func:`hybridad.jacobian`).  ``mode="forward"``: chunks of K tangents
    pushed through the forward graph give K columns at a time;
    ``"reverse"``: chunks of K cotangent seeds pulled back through the
    reverse pass give K rows; ``"auto"`` picks forward when ``x`` has no
    more elements than ``y``.
    """

    _kind = "jacobian"

    def __init__(self, f, args, argnums=0, backend="numba", mode="auto", chunk=None,
                 parallel=True, poison=False, pack=True, memory_budget=None):
        if mode not in ("auto", "forward", "reverse"):
            raise ValueError(f"mode must be 'auto', 'forward' or 'reverse'; got {mode!r}")
        self._mode_request = mode
        self._chunk_request = chunk
        super().__init__(f, args, argnums, backend, parallel=parallel, poison=poison,
                         pack=pack, memory_budget=memory_budget)
        self._options_of(mode=mode, chunk=chunk, memory_budget=memory_budget)

    def _remake(self, f, args, backend):
        return JacobianPlan._from_recording(self._recording, f, args, self.argnums, backend,
                                            mode=self._mode_request, chunk=self._chunk_request,
                                            parallel=self.parallel,
                                            memory_budget=self.memory_budget)

    def _check_output(self, out, trace):
        if not isinstance(out, Tracer):
            arr = np.asarray(out)
            if arr.dtype.kind not in "biuf":
                raise TypeError(f"{self.name} must return a numeric array; it returned "
                                f"{type(out).__name__}")
            out = Tracer(as_node(arr.astype(np.float64) if arr.dtype.kind != "f" else arr,
                                 trace), trace)
        if out.dtype.kind != "f":
            raise TypeError(f"{self.name} must return floating-point values; it returned "
                            f"dtype {out.dtype}")
        return out

    def _build(self, f, args, leaves):
        trace = Trace()
        self._concrete(trace, leaves)
        with trace:
            _, targs, diff_tracers = self._trace_args(trace, leaves)
            shape, dtype = self._one_array("a Jacobian")
            y = self._trace_f(f, targs, trace)
            self._checkpointed(trace, y)
            self._decided(trace)
            if y.node.op in ("input", "const") or y.node.id == diff_tracers[0].node.id:
                y = y + y.dtype.type(0) if y.node.op == "const" else np.copy(y)
            (x,) = diff_tracers
            n = int(np.prod(shape, dtype=np.int64))
            m = int(np.prod(y.shape, dtype=np.int64))
            mode = self._mode_request
            if mode == "auto":
                mode = "forward" if n <= m else "reverse"
            self.mode = mode
            seeds = n if mode == "forward" else m
            if mode == "forward":
                s1 = trace.input(len(leaves), shape, dtype)
                lin = jvp(trace, list(trace.nodes), {x.node.id: s1})
                d1 = lin.get(y.node.id)
                per_seed = seed_bytes(trace.nodes, lin, self.backend == "numba")
            else:
                s1 = trace.input(len(leaves), y.shape, y.dtype)
                (d1,) = backward(trace, y, [x], seed=s1)
                per_seed = seed_bytes(trace.nodes, {nd.id for nd in trace.nodes
                                                    if nd.phase == "backward"},
                                      self.backend == "numba")
            k = self._seeds_per_chunk(default_chunk(seeds, per_seed))
            self.chunk = k = int(min(k, max(seeds, 1)))
            sk = trace.input(len(leaves) + 1, (k, *s1.shape), s1.dtype)
            batched = vmap(trace, list(trace.nodes), {s1.node.id: sk}, k)
            dk = None if d1 is None else batched.get(d1.node.id)
            if self.backend == "numba":  # products of the unit seeds: rows of the matrix
                mark_seed_products(trace.nodes, sk.node)
        outputs = [y.node] + ([] if dk is None else [dk.node])
        graph = pipeline.lower(trace.nodes, [nd for nd in trace.nodes if nd.op == "input"],
                               outputs, self.backend, staged=True)
        self._value_dtype = y.dtype
        self._primal_outputs = [y.node]
        self._primal_specs = [(y.shape, y.dtype)]
        out_shape = (k, *(y.shape if mode == "forward" else shape))
        self._stage_specs = {"chunk": [(out_shape, dtype)]}
        self._stage(graph, [y.node], {"chunk": (sk.node, [None if dk is None else dk.node])})
        self._shape, self._dtype, self._n = shape, np.dtype(dtype), n
        self._yshape, self._m = y.shape, m
        self._seed = self._xp.zeros((k, *s1.shape), s1.dtype)
        self._seed_flat = self._seed.reshape(k, -1)
        self._stage_out = self._xp.zeros(out_shape, dtype)
        if self.backend == "numba" and mode == "reverse" and 0 < m <= k and \
                len(shape) == 1:  # (rows: the Jacobian itself)
            self.jacobian = self._one_chunk_fast(
                type(self).jacobian, JacobianResult, 1,
                lambda: np.eye(m, dtype=s1.dtype).reshape((m, *y.shape)))

    def new_result(self) -> JacobianResult:
        """A fresh :class:`JacobianResult` matching this plan."""
        return JacobianResult(self._xp.zeros(self._yshape, self._value_dtype),
                              self._xp.zeros(self._shape, self._dtype))

    @falls_back
    @serialized
    def gradient(self, *args: Any, out: Any = None) -> NoReturn:
        """Not available: raises TypeError (a Jacobian plan's function is not scalar)."""
        self._refuse("gradient", "hybridad.compile(f, ...) for a scalar f (or "
                     "hybridad.gradient)")

    def _computes(self):
        return "Jacobians (plan.jacobian)"

    @falls_back
    @serialized
    def jacobian(self, *args: Any, out: JacobianResult | None = None) -> JacobianResult:
        """Value and Jacobian of ``f`` at ``args``.

        Parameters
        ----------
        *args
            Arguments matching the example arguments.
        out : JacobianResult or DiffResult, optional
            ``(value, jacobian)`` buffers: the value shaped like ``f``'s, the
            Jacobian ``(y.size, x.size)``; validated before anything is written.

        Returns
        -------
        JacobianResult or DiffResult
            ``out`` (or a new result).
        """
        if self._guarded:
            plan = self._routed(args)
            if plan is not self:
                return type(plan).jacobian(plan, *args, out=out)
        leaves = self._leaves(args)
        if out is None:
            out = self.new_result()
        bufs = self._check(out, "JacobianResult", ("value", "jacobian"),
                           (self._yshape, (self._m, self._n)), leaves)
        if self._raises["chunk"]:  # see hybridad.plans.staged
            val, jac = (self._staging(k, b.shape, b.dtype) for k, b in enumerate(bufs))
        else:
            val, jac = bufs
        k = self.chunk
        total = self._n if self.mode == "forward" else self._m
        # one chunk: the primal and the chunk as one program (StagedPlan._run_whole)
        whole = 0 < total <= k and not self._primal_raises  # (no chunk: the primal alone)
        if not whole:
            self._run_program("primal", leaves, [val])
        run = self._run_whole if whole else self._run_program
        for start in range(0, total, k):
            stop = min(start + k, total)
            mm = stop - start
            ones = self._unit_seeds(start, mm, 1)
            if self.mode == "reverse" and mm == k and jac.flags.c_contiguous:
                rows = jac[start:stop].reshape((k, *self._shape))
                run("chunk", [*leaves, self._seed], [val, rows])
            else:
                run("chunk", [*leaves, self._seed], [val, self._stage_out])
                block = self._stage_out.reshape(k, -1)[:mm]
                if self.mode == "reverse":
                    jac[start:stop] = block
                else:
                    jac[:, start:stop] = block.T
            ones.fill(0)
        self._deliver(bufs, (val, jac))
        return out
