"""Jacobians, Hessians and Hessian-vector products: plans of several programs.

A second-order or Jacobian plan is one graph, one memory plan and one arena,
run as up to three compiled programs:

* the **primal** program -- the forward pass (and for a Hessian the
  functional backward pass: value and gradient) -- runs once per point;
* a **tangent** program -- forward mode over the primal graph
  (:func:`hybridad.transforms.autodiff.jvp`) for one direction ``v``: ``H v``, or ``J v``;
* a **chunk** program -- the same batched over a leading axis of K seeds
  (:func:`hybridad.transforms.batching.vmap`): K columns of ``H`` or ``J`` at once (the
  multi-component dual numbers of ForwardDiff's chunks, as IR), or K rows of
  ``J`` from K cotangent seeds pulled back through the reverse pass.

The primal values the tangent programs read are *pinned* in the memory plan
(alive to the end of the schedule), so the tangent programs can run any
number of times after one primal run: a Hessian is one primal run and
``ceil(n / K)`` chunk runs, and :meth:`HessianPlan.linearize` followed by
:meth:`HessianPlan.hvp` serves many ``v`` at one point (a Newton-CG or
trust-region inner loop) without redoing the forward and backward passes.
The programs that do not depend on the seeds (partials, the primal values)
are shared; only what depends on the seeds is repeated.

A call that fails writes nothing.  The primal program writes the caller's
buffers only at its end (its outputs are pinned, never computed in place);
when a tangent or chunk program can fail (it has an op that can raise, such
as LAPACK's solve), every program of the call writes into buffers of the
plan (made at the first such call) and the caller's are filled once all of
them have run.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from .. import _tree
from ..transforms.autodiff import backward, jvp
from ..backends.numba.loops import serial_loops
from ..backends.numba.program import work_estimate
from ..transforms.batching import vmap
from ..ir.graph import Graph, check, dead_code_elimination
from ..ops import REGISTRY, may_raise
from ..transforms.partition import fold_accumulations, fuse_regions
from .plan import Plan, serialized
from ..results import DiffResult, HessianResult, HvpResult, JacobianResult
from ..frontend.trace import Trace, Tracer, as_node
from .validate import check_results

__all__ = ["DEFAULT_CHUNK", "ONE_CHUNK", "HessianPlan", "JacobianPlan", "default_chunk"]

#: up to this many seeds, all of them run as one chunk (see :func:`default_chunk`)
ONE_CHUNK = 128
#: seeds per run of a chunk program beyond :data:`ONE_CHUNK`
DEFAULT_CHUNK = 32
#: bytes of batched workspace a default chunk may take
CHUNK_BYTES = 1 << 24


def default_chunk(n, bytes_per_seed):
    """Seeds per chunk: all ``n`` up to :data:`ONE_CHUNK`, else :data:`DEFAULT_CHUNK`;
    fewer where one seed's batched workspace (``bytes_per_seed``) is large.

    Measured (2 cores, Hessians, microseconds per Hessian, K = seeds per chunk):
    Rosenbrock n = 100: K=16 113, K=32 89, K=64 85, K=100 52; n = 300: K=32 290,
    K=64 261, K=128 364, K=300 392; n = 1000: K=16 2706, K=32 2396, K=64 2893,
    K=1000 4646; log-sum-exp n = 100: K=32 74, K=100 47; n = 1000: K=32 2256,
    K=64 2697; tanh(Mx)|x|^2 n = 100: K=32 228, K=100 170.  One chunk wins
    while the batched arrays stay small (the per-run overhead is paid once);
    beyond a few hundred seeds, chunks of 32-64 keep them in cache.
    """
    k = n if n <= ONE_CHUNK else DEFAULT_CHUNK
    k = min(k, max(1, CHUNK_BYTES // max(1, bytes_per_seed)))
    return max(1, int(k))


def _dependents(nodes, seeds):
    """Ids of the nodes a stage on ``seeds`` computes: those that depend on the
    seeds (seeds included), and the buffers they update in place (a
    ``zeros`` a stage accumulates into is the stage's, or its second run
    would add to the first's sums), with everything depending on those."""
    dep = set(seeds)
    while True:
        for n in nodes:
            if any(a.id in dep for a in n.args):
                dep.add(n.id)
        moved = set()
        for n in nodes:
            if n.id in dep and n.op in REGISTRY and REGISTRY[n.op].kind == "inplace":
                m = n.args[0]
                while m.op not in ("input", "const") and m.id not in dep:
                    moved.add(m.id)
                    if REGISTRY[m.op].kind not in ("view", "inplace"):
                        break
                    m = m.args[0]
        if not moved:
            return dep
        dep |= moved


class _Staged(Plan):
    """A plan of one primal program and tangent programs over one arena."""

    def _stage(self, graph, primal_outputs, stages):
        """Order, plan memory for and describe the programs.

        ``stages``: name -> (seed input node, output nodes after the primal ones).
        """
        nodes = graph.nodes
        dependent = {name: _dependents(nodes, [seed.id]) for name, (seed, _) in stages.items()}
        tangent = set().union(*dependent.values())
        primal = [n for n in nodes if n.id not in tangent and n.op != "input"]
        order = [n for n in nodes if n.op == "input"] + primal + [
            n for name in stages for n in nodes if n.id in dependent[name] and n.op != "input"]
        by_id = {n.id: n for n in nodes}
        pinned = {n.id for n in primal_outputs if n is not None}
        reads = {}
        for name in stages:
            reads[name] = {a.id for n in nodes if n.id in dependent[name] for a in n.args
                           if a.id not in tangent and a.op not in ("input", "const")}
            pinned |= reads[name]
        graph = Graph(order, graph.inputs, graph.outputs)
        check(graph)
        self.graph = graph
        self.work = work_estimate(primal)
        self.memory = self._plan_memory(graph, pinned)
        self._buffers = self.memory.allocate(self._xp)
        self._stages = {}
        #: stage -> whether its program can fail at run time (then the call stages its results)
        self._raises = {name: any(may_raise(n) for n in order if n.id in dependent[name])
                        for name in stages}
        self._staged_results = {}
        for name, (seed, outs) in stages.items():
            given = set(reads[name]) | {n.id for n in primal_outputs
                                        if n is not None and n.op not in ("input", "const")}
            todo = list(given)
            while todo:  # what the earlier program's buffers are reached through
                n = by_id[todo.pop()]
                storage = self.memory.storage[n.id]
                src = self.memory.alias_of[n.id] if storage == "alias" else \
                    n.args[0] if storage == "view" else None
                if src is not None and src.id not in given and src.op not in ("input", "const"):
                    given.add(src.id)
                    todo.append(src.id)
            # the primal nodes ride along as given (nothing of theirs runs: views of
            # their buffers are cut, operands resolve), then the stage's own nodes
            given |= {n.id for n in primal}
            body = [n for n in order if n.id in given or n.id in dependent[name] or
                    n.op == "input" and n.attrs["index"] < len(self._specs)]
            self._stages[name] = (seed, body, given, outs)
        self._primal_nodes = [n for n in order if n.op == "input" and
                              n.attrs["index"] < len(self._specs)] + primal
        self._programs = {}

    def _program_for(self, name):
        """The compiled program of a stage (compiled at its first use)."""
        prog = self._programs.get(name)
        if prog is None:
            inputs = [n for n in self.graph.inputs if n.attrs["index"] < len(self._specs)]
            with serial_loops(not self.parallel):
                if name == "primal":
                    prog = self._compile(self._primal_nodes, inputs, self._primal_outputs,
                                         f"{self._kind}_primal", self._primal_specs)
                else:
                    seed, body, given, outs = self._stages[name]
                    prog = self._compile(body, [*inputs, seed], [*self._primal_outputs, *outs],
                                         f"{self._kind}_{name}",
                                         self._primal_specs + self._stage_specs[name],
                                         self._specs + [(seed.shape, seed.dtype)], given)
            self._programs[name] = prog
        return prog

    def _run_program(self, name, leaves, outs):
        prog = self._program_for(name)
        with np.errstate(all="ignore"):
            if self.backend == "numba":
                prog.run(leaves, outs)
            else:
                with self._lock:
                    prog.fn(*leaves, *outs)

    def _staging(self, key, shape, dtype):
        """A buffer of the plan's for results of a call whose programs can fail
        (see the module docstring): made once per key and shape."""
        buf = self._staged_results.get((key, shape))
        if buf is None:
            buf = self._staged_results[(key, shape)] = self._xp.zeros(shape, dtype)
        return buf

    def _unit_seeds(self, start, m, value):
        """Set seed row j (of the chunk) to the unit vector e_{start + j}, j < m:
        the positions ``j * (n + 1) + start`` of the flat seed, a strided view
        (returned, to clear after the run; the seed is zero elsewhere)."""
        width = self._seed_flat.shape[1]
        ones = self._seed_flat.reshape(-1)[start:start + m * (width + 1):width + 1]
        ones.fill(value)
        return ones

    def _one_array(self, what):
        if isinstance(self.argnums, tuple) or len(self._diff_leaves) != 1 or \
                self._treedefs[self.argnums] != _tree.LEAF:
            raise TypeError(f"{what} differentiates one array argument (argnums an int, the "
                            f"argument an array); got argnums={self.argnums!r}")
        return self._specs[self._diff_leaves[0]]

    def _check(self, out, what, names, shapes, leaves, reads=()):
        """The buffers of ``out`` (value first, then ``out.derivs``), named
        ``out.<name>`` and shaped ``shapes``, after checking them all
        (:func:`hybridad.plans.validate.check_results`) against the arguments and
        ``reads``."""
        if not isinstance(out, DiffResult):
            raise TypeError(f"out must be a {what} or DiffResult; got {type(out).__name__}")
        if len(out.derivs) < len(names) - 1:
            raise ValueError(f"out holds no {names[len(out.derivs) + 1]} buffer ({what}(x))")
        bufs = (out.value, *out.derivs[:len(names) - 1])
        # a scalar's value: any float (cast); a Jacobian holds y's dtype, a Hessian x's
        dtypes = [None if shapes[0] == () and self._kind == "hessian" else self._value_dtype] + \
            [self._dtype if self._kind == "hessian" else self._value_dtype] * (len(names) - 1)
        check_results(self._xp, [(f"out.{n}", b, shape, dt) for n, b, shape, dt in
                                 zip(names, bufs, shapes, dtypes, strict=True)],
                      self._reads(leaves) + list(reads))
        return bufs

    @property
    def _program(self):
        """The programs' sources, for :meth:`explain` (compiles them all)."""
        names = ["primal", *self._stages]
        source = "\n".join(f"# --- {name} program ---\n{self._program_for(name).source}"
                           for name in names)
        return SimpleNamespace(source=source)

    @serialized
    def value(self, *args):
        """The function value at ``args`` (a float; for a Jacobian plan an array)."""
        if self._guarded:
            self._check_stale(args)
        leaves = self._leaves(args)
        self._at_point = False  # (a Hessian plan's arena no longer holds the linearized point)
        buf = self._xp.zeros(*self._primal_specs[0])
        outs = [buf] + [self._xp.zeros(s, d) for s, d in self._primal_specs[1:]]
        self._run_program("primal", leaves, outs)
        return float(buf) if buf.shape == () else buf

    def explain(self):
        lines = [super().explain(), "", "programs:"]
        lines.append(f"  primal: {len(self._primal_nodes)} nodes, run once per point")
        for name, (seed, body, given, _) in self._stages.items():
            lines.append(f"  {name}: {len(body) - len(given)} nodes on seed %{seed.id} "
                         f"{list(seed.shape)}, reading {len(given)} pinned primal buffers")
        return "\n".join(lines)


class HessianPlan(_Staged):
    """Value, gradient, Hessian and Hessian-vector products of a scalar function.

    Built by :func:`hybridad.compile` with ``hessian=True`` (or by
    :func:`hybridad.hessian`).  Forward over reverse: the tangent pass runs
    through the forward and (functional) backward graph.

    Methods
    -------
    hessian(*args, out=None)
        Value, gradient and the full Hessian (chunks of :attr:`chunk` columns).
    hvp(*args, v, out=None)
        ``H v`` for one ``v`` shaped like ``x`` or a stack ``(k, *x.shape)``;
        without ``args``, at the point of the last :meth:`linearize`.
    linearize(*args, out=None)
        The primal pass only: value and gradient, and what ``H v`` needs is kept.
    """

    _kind = "hessian"

    def _computes(self):
        return ("values, gradients, Hessians and Hessian-vector products (plan.gradient, "
                "plan.hessian, plan.hvp, plan.linearize)")

    def __init__(self, f, args, argnums=0, backend="numba", chunk=None, parallel=True,
                 poison=False, pack=True):
        self._chunk_request = chunk
        super().__init__(f, args, argnums, backend, parallel=parallel, poison=poison,
                         pack=pack)
        self.order = 2

    def _build(self, f, args, leaves):
        trace = Trace()
        with trace:
            _, targs, diff_tracers = self._trace_args(trace, leaves)
            shape, dtype = self._one_array("a Hessian")
            n = int(np.prod(shape, dtype=np.int64))
            out = self._trace_f(f, targs, trace)
            self._value_dtype = out.dtype
            (x,) = diff_tracers
            (grad,) = backward(trace, out, [x], inplace=False)
            t1 = trace.input(len(leaves), shape, dtype)
            tangents = jvp(trace, list(trace.nodes), {x.node.id: t1})
            hv = None if grad is None else tangents.get(grad.node.id)
            per_seed = sum(nd.nbytes for nd in trace.nodes if nd.id in tangents)
            k = default_chunk(n, per_seed) if self._chunk_request is None else \
                self._chunk_request
            if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
                raise ValueError(f"chunk must be a positive int; got {k!r}")
            self.chunk = k = int(min(k, max(n, 1)))
            tk = trace.input(len(leaves) + 1, (k, *shape), dtype)
            batched = vmap(trace, list(trace.nodes), {t1.node.id: tk}, k)
            hvk = None if hv is None else batched.get(hv.node.id)
        self._grad_node = None if grad is None else grad.node
        primal_outputs = [out.node, self._grad_node]
        outputs = [out.node] + [m.node for m in (grad, hv, hvk) if m is not None]
        graph = dead_code_elimination(Graph(trace.nodes, [nd for nd in trace.nodes
                                                          if nd.op == "input"], outputs))
        if self.backend in ("numba", "cupy"):
            graph = Graph(fuse_regions(graph.nodes, outputs), graph.inputs, outputs)
        if self.backend == "numba":
            graph = Graph(fold_accumulations(graph.nodes, outputs), graph.inputs, outputs)
        self._primal_outputs = primal_outputs
        self._primal_specs = [((), out.dtype), (shape, dtype)]
        self._stage_specs = {"tangent": [(shape, dtype)], "chunk": [((k, *shape), dtype)]}
        self._stage(graph, primal_outputs, {"tangent": (t1.node, [None if hv is None
                                                                  else hv.node]),
                                            "chunk": (tk.node, [None if hvk is None
                                                                else hvk.node])})
        self._shape, self._dtype, self._n = shape, np.dtype(dtype), n
        self._seed = self._xp.zeros((k, *shape), dtype)
        self._seed_flat = self._seed.reshape(k, n)
        self._stage_out = self._xp.zeros((k, *shape), dtype)
        self._point = [self._xp.empty(s, d) for s, d in self._specs]
        self._have_point = False
        self._at_point = False  # whether the arena holds the linearized point's values
        self._scratch_grad = self._xp.zeros(shape, dtype)
        self._scratch_value = self._xp.zeros((), out.dtype)

    # ------------------------------------------------------------ results
    def new_result(self):
        """A fresh :class:`HessianResult` matching this plan."""
        return HessianResult(self._xp.zeros(self._shape, self._dtype), dtype=self._value_dtype)

    def _primal(self, leaves, v, g):
        """The primal program at ``leaves`` into ``v``, ``g``; it leaves the
        arena's pinned values at this point (no longer the linearized one)."""
        self._at_point = False
        self._run_program("primal", leaves, [v, g])

    # -------------------------------------------------------------- calls
    @serialized
    def gradient(self, *args, out=None):
        """Value and gradient (the primal program), as :meth:`Plan.gradient`."""
        if self._guarded:
            self._check_stale(args)
        leaves = self._leaves(args)
        if out is None:
            out = HvpResult(self._xp.zeros(self._shape, self._dtype), dtype=self._value_dtype)
        v, g = self._check(out, "GradientResult", ("value", "gradient"), ((), self._shape),
                           leaves)
        self._primal(leaves, v, g)
        return out

    @serialized
    def linearize(self, *args, out=None):
        """Run the primal pass at ``args``; later :meth:`hvp` calls without
        arguments differentiate at this point.

        Parameters
        ----------
        *args
            Arguments matching the example arguments.
        out : GradientResult or DiffResult, optional
            Receives the value and gradient at ``args``.

        Returns
        -------
        GradientResult, DiffResult or None
            ``out``.
        """
        if self._guarded:
            self._check_stale(args)
        leaves = self._leaves(args)
        if out is not None:
            v, g = self._check(out, "GradientResult", ("value", "gradient"),
                               ((), self._shape), leaves)
        else:
            v, g = self._scratch_value, self._scratch_grad
        self._primal(leaves, v, g)
        for own, a in zip(self._point, leaves, strict=True):
            self._xp.copyto(own, a)  # the tangent programs read the point's arguments
        self._have_point = self._at_point = True
        self._point_args = args  # what the guards read (static arguments) at this point
        return out

    @serialized
    def hvp(self, *args, v, out=None):
        """Value, gradient and ``H v``.

        Parameters
        ----------
        *args
            Arguments matching the example arguments; none: at the point of the
            last :meth:`linearize` (only the tangent pass runs).
        v : ndarray
            One direction, shaped like ``x``, or a stack of ``k`` directions
            ``(k, *x.shape)`` (run in chunks of :attr:`chunk`).
        out : HvpResult or DiffResult, optional
            ``(value, gradient, hvp)`` buffers; ``hvp`` shaped like ``v``.

        Returns
        -------
        HvpResult or DiffResult
            ``out``, or a new :class:`HvpResult` (for one direction).
        """
        if self._guarded:
            self._check_stale(args if args else getattr(self, "_point_args", ()))
        if args:
            leaves = self._leaves(args)
        elif self._have_point:
            leaves = self._point
        else:
            raise ValueError("hvp without arguments needs a point: call plan.linearize(*args) "
                             "first, or pass the arguments")
        _tree.refuse_subclass(v, "v")
        v = self._xp.asarray(v, dtype=self._dtype) if type(v) is not self._xp.ndarray or \
            v.dtype != self._dtype else v
        many = v.shape != self._shape
        if many and v.shape[1:] != self._shape:
            raise ValueError(f"v must have shape {self._shape} (one direction) or (k, "
                             f"*{self._shape}) (k directions); got {v.shape}")
        if out is None:
            out = HvpResult(self._xp.zeros(self._shape, self._dtype), dtype=self._value_dtype)
            if many:
                out = DiffResult(out.value, out.gradient, self._xp.zeros(v.shape, self._dtype))
        bufs = self._check(out, "HvpResult", ("value", "gradient", "hvp"),
                           ((), self._shape, v.shape), leaves, [("v", v)])
        stage = "chunk" if many else "tangent"
        val, g, hv = self._targets(stage, bufs)
        if args:
            self._primal(leaves, val, g)
        elif not self._at_point:  # another call ran the primal since linearize
            self._primal(leaves, self._scratch_value, self._scratch_grad)
            self._at_point = True
        if not many:
            self._run_program("tangent", [*leaves, v], [val, g, hv])
        else:
            self._chunks(leaves, val, g, v.reshape(len(v), -1), hv.reshape(len(hv), -1))
        self._deliver(bufs, (val, g, hv))
        return out

    def _targets(self, stage, bufs):
        """Where the programs of a call write: the caller's ``bufs``, or -- when
        the ``stage`` program can fail -- buffers of the plan, delivered by
        :meth:`_deliver` once every program has run."""
        if not self._raises[stage]:
            return bufs
        return (self._scratch_value, self._scratch_grad) + tuple(
            self._staging(k, b.shape, b.dtype) for k, b in enumerate(bufs[2:]))

    def _deliver(self, bufs, targets):
        for b, t in zip(bufs, targets, strict=True):
            if t is not b:
                self._xp.copyto(b, t)

    @serialized
    def hessian(self, *args, out=None):
        """Value, gradient and Hessian of ``f`` at ``args``.

        Parameters
        ----------
        *args
            Arguments matching the example arguments.
        out : HessianResult or DiffResult, optional
            ``(value, gradient, hessian)`` buffers, the Hessian ``(n, n)`` for
            ``n = x.size``; validated before anything is written.

        Returns
        -------
        HessianResult or DiffResult
            ``out`` (or a new result).
        """
        if self._guarded:
            self._check_stale(args)
        leaves = self._leaves(args)
        if out is None:
            out = self.new_result()
        bufs = self._check(out, "HessianResult", ("value", "gradient", "hessian"),
                           ((), self._shape, (self._n, self._n)), leaves)
        val, g, h = self._targets("chunk", bufs)
        self._primal(leaves, val, g)
        self._chunks(leaves, val, g, None, h)
        self._deliver(bufs, (val, g, h))
        return out

    def _chunks(self, leaves, val, g, vs, rows):
        """``rows[i] = H vs[i]`` (``vs`` None: the unit vectors, ``rows`` = H), in
        chunks of :attr:`chunk` through the chunk program."""
        k, seed = self.chunk, self._seed_flat
        total = rows.shape[0]
        try:
            for start in range(0, total, k):
                stop = min(start + k, total)
                m = stop - start
                if vs is None:
                    ones = self._unit_seeds(start, m, 1)
                else:
                    seed[:m] = vs[start:stop]
                    seed[m:].fill(0)
                if m == k and rows.flags.c_contiguous:
                    block = rows[start:stop].reshape((k, *self._shape))
                    self._run_program("chunk", [*leaves, self._seed], [val, g, block])
                else:
                    self._run_program("chunk", [*leaves, self._seed], [val, g, self._stage_out])
                    rows[start:stop] = self._stage_out.reshape(k, -1)[:m]
                if vs is None:
                    ones.fill(0)
        finally:  # the seed is all zeros between calls (unit seeds rely on it)
            seed.fill(0)


class JacobianPlan(_Staged):
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
                 parallel=True, poison=False, pack=True):
        if mode not in ("auto", "forward", "reverse"):
            raise ValueError(f"mode must be 'auto', 'forward' or 'reverse'; got {mode!r}")
        self._mode_request = mode
        self._chunk_request = chunk
        super().__init__(f, args, argnums, backend, parallel=parallel, poison=poison,
                         pack=pack)

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
        with trace:
            _, targs, diff_tracers = self._trace_args(trace, leaves)
            shape, dtype = self._one_array("a Jacobian")
            y = self._trace_f(f, targs, trace)
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
                per_seed = sum(nd.nbytes for nd in trace.nodes if nd.id in lin)
            else:
                s1 = trace.input(len(leaves), y.shape, y.dtype)
                (d1,) = backward(trace, y, [x], seed=s1)
                per_seed = sum(nd.nbytes for nd in trace.nodes if nd.phase == "backward")
            k = default_chunk(seeds, per_seed) if self._chunk_request is None else \
                self._chunk_request
            if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
                raise ValueError(f"chunk must be a positive int; got {k!r}")
            self.chunk = k = int(min(k, max(seeds, 1)))
            sk = trace.input(len(leaves) + 1, (k, *s1.shape), s1.dtype)
            batched = vmap(trace, list(trace.nodes), {s1.node.id: sk}, k)
            dk = None if d1 is None else batched.get(d1.node.id)
        outputs = [y.node] + ([] if dk is None else [dk.node])
        graph = dead_code_elimination(Graph(trace.nodes, [nd for nd in trace.nodes
                                                          if nd.op == "input"], outputs))
        if self.backend in ("numba", "cupy"):
            graph = Graph(fuse_regions(graph.nodes, outputs), graph.inputs, outputs)
        if self.backend == "numba":
            graph = Graph(fold_accumulations(graph.nodes, outputs), graph.inputs, outputs)
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

    def new_result(self):
        """A fresh :class:`JacobianResult` matching this plan."""
        return JacobianResult(self._xp.zeros(self._yshape, self._value_dtype),
                              self._xp.zeros(self._shape, self._dtype))

    @serialized
    def gradient(self, *args, out=None):
        """Not available: raises TypeError (a Jacobian plan's function is not scalar)."""
        self._refuse("gradient", "hybridad.compile(f, ...) for a scalar f (or "
                     "hybridad.gradient)")

    def _computes(self):
        return "Jacobians (plan.jacobian)"

    @serialized
    def jacobian(self, *args, out=None):
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
            self._check_stale(args)
        leaves = self._leaves(args)
        if out is None:
            out = self.new_result()
        bufs = self._check(out, "JacobianResult", ("value", "jacobian"),
                           (self._yshape, (self._m, self._n)), leaves)
        if self._raises["chunk"]:  # see the module docstring
            val, jac = (self._staging(k, b.shape, b.dtype) for k, b in enumerate(bufs))
        else:
            val, jac = bufs
        self._run_program("primal", leaves, [val])
        k = self.chunk
        total = self._n if self.mode == "forward" else self._m
        for start in range(0, total, k):
            stop = min(start + k, total)
            mm = stop - start
            ones = self._unit_seeds(start, mm, 1)
            if self.mode == "reverse" and mm == k and jac.flags.c_contiguous:
                rows = jac[start:stop].reshape((k, *self._shape))
                self._run_program("chunk", [*leaves, self._seed], [val, rows])
            else:
                self._run_program("chunk", [*leaves, self._seed], [val, self._stage_out])
                block = self._stage_out.reshape(k, -1)[:mm]
                if self.mode == "reverse":
                    jac[start:stop] = block
                else:
                    jac[:, start:stop] = block.T
            ones.fill(0)
        for b, t in zip(bufs, (val, jac), strict=True):
            if t is not b:
                self._xp.copyto(b, t)
        return out
