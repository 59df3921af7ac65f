"""The compiled plan: the pipeline run once, then executed into DiffResults.

::

    trace -> IR graph -> autodiff -> memory plan -> backend program -> run into result

A :class:`Plan` is specialized to one (function, argnums, argument structure,
shapes, dtypes, static values) key.  Building it traces ``f`` once; calling
it validates the arguments and the result buffers *before* anything is
written, then runs the generated program, which allocates nothing.

Thread safety: a plan owns one workspace, so calls on the same plan are
serialized by a per-plan lock (results stay correct; two threads do not run
one plan in parallel).  Different plans run concurrently.
"""

from __future__ import annotations

import functools
import inspect
import os
import weakref
from typing import Any, NoReturn

import numpy as np

from .._forksafe import Lock, RLock
from .. import _tree
from ..backends.numba.machine import lowering_machine
from ..backends.numba.threshold import serial_loops, work_estimate
from ..backends.numpy.program import compile_program
from ..errors import CompileBudgetError
from ..core.decisions import DecisionCheck
from ..frontend.guard_walk import root_of
from ..core.trace import Trace, as_node
from ..core.tracer import Tracer
from ..ir.graph import Graph, dead_code_elimination
from ..ops.region import partials_by_traffic, summed_partials_in_loop
from ..optim import UpdateRule
from ..results import DiffResult, GradientResult
from ..transforms import pipeline
from ..transforms.autodiff import backward, jvp
from ..transforms.checkpoint import checkpoint_loops
from ..transforms.memory import op_workspaces, plan_memory
from ..transforms.partition import fuse_regions
from .arguments import ArgumentsMixin, arg_names, normalize_argnums, prepare_args
from .batch import BatchMixin, build_batched
from .budget import BudgetMixin, _OverBudget
from .buildtime import BuildTimes
from .explain import ExplainMixin
from .pickling import PLAN_TYPE, PicklingMixin, _rebuild_plan  # noqa: F401 (older pickles name it here)
from .decided import carried_check
from . import ode_rhs  # noqa: F401  (an ODE's right-hand side compiled: numba's evaluator)
from .fastpath import FastPathMixin
from .guarded import GuardsMixin
from .tiered import TieredMixin, default_tiered
from .updates import UpdatesMixin

__all__ = ["Plan", "arg_names", "normalize_argnums"]

DEBUG = int(os.environ.get("HYBRIDAD_DEBUG", "0") or 0)
BACKENDS = ("numba", "numpy", "cupy")


def serialized(method):
    """A plan method that holds the plan's lock from start to end: calls that
    run several programs over the plan's one workspace (a Hessian's chunks, a
    Jacobian's, the linearization point) are one step for other threads."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return call

class Plan(ArgumentsMixin, GuardsMixin, UpdatesMixin, BatchMixin, FastPathMixin,
           TieredMixin, ExplainMixin, PicklingMixin, BudgetMixin):
    """A compiled gradient plan (returned by :func:`hybridad.compile`).

    Methods
    -------
    gradient(*args, out=None)
        Value and gradient into ``out`` (a :class:`GradientResult`), or a new one.
    value(*args)
        The function value as a Python float.
    explain()
        Text: traced graph, backward graph, buffers and bytes, generated source.

    Attributes
    ----------
    parallel : bool
        Whether large loops run multithreaded (see :func:`hybridad.compile`).
    work : int
        Rough count of element operations per call.
    """

    def __init__(self, f, args, argnums=0, backend="numba", hvp=False, parallel=True,
                 poison=False, pack=True, memory_budget=None, cuda_graph=None, update=None,
                 tiered=None):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}; got {backend!r}")
        if not isinstance(parallel, (bool, np.bool_)):
            raise TypeError(f"parallel must be True or False; got {parallel!r}")
        self.backend = backend
        self.parallel = bool(parallel)
        #: the constructor's options: a specialization for other decisions is
        #: built with them (hybridad.core.decisions)
        self._options = dict(argnums=argnums, backend=backend, hvp=hvp, parallel=parallel,
                             poison=poison, pack=pack, memory_budget=memory_budget,
                             cuda_graph=cuda_graph, update=update, tiered=tiered)
        self._decision_check, self._specializations = None, []
        # the array module of buffers and arguments, and (GPU) the kernel launcher
        self._xp, self._launcher, self._own_products = np, None, False
        if cuda_graph and backend != "cupy":
            raise ValueError("cuda_graph=True needs backend='cupy'")
        self._cuda_graph, self._graph = bool(cuda_graph), None
        if update is not None and (not isinstance(update, UpdateRule) or hvp):
            raise TypeError("update must be a hybridad.optim rule (SGD, Momentum, Adam) on a "
                            f"gradient plan; got {update!r}")
        self.update = update
        if backend == "cupy":  # (products: its own kernels, one CUDA graph a step)
            from ..backends.cuda import program as cupy_backend
            from ..backends.cuda.products import own_products
            self._xp, self._launcher = cupy_backend.device()
            self._own_products = own_products(self._cuda_graph)
        # (None: the GPU plan's graphs once the same arrays come back, on a device)
        self._graph_auto = cuda_graph is None and getattr(self._xp, "__name__", "") == "cupy"
        # instrumented (tests): every slot is filled with NaN outside its lifetime
        self._poison = bool(poison)
        self._pack = bool(pack)  # False: one arena slot per buffer (for comparison)
        self.name = getattr(f, "__qualname__", repr(f))
        try:  # batch plans (gradient_batch) and pickling rebuild from f later
            self._f = weakref.WeakMethod(f) if inspect.ismethod(f) else weakref.ref(f)
        except TypeError:
            self._f = lambda f=f: f
        self._batch_plans = {}
        #: what the guards read from (f, or a bound method's instance): held strongly
        #: by explicit plans (hybridad.compile), weakly by cached ones (the cache is
        #: keyed by it); see :meth:`_check_stale`
        self._root = None
        root = root_of(f)
        try:
            self._rootref = weakref.ref(root)
        except TypeError:
            self._rootref = lambda root=root: root
        self._method_func = f.__func__ if inspect.ismethod(f) else None
        self._guard_lock = Lock()
        self._retraces = self._rebuilds = 0
        self.argnums, self._diff = normalize_argnums(argnums, len(args))
        self._names = arg_names(f, len(args))
        leaves, self._treedefs = prepare_args(args, self._diff, self._names)
        self._specs = [(a.shape, a.dtype) for a in leaves]
        #: one lock per plan: its programs share one workspace (see docs/performance.md,
        #: "Threads"); re-entrant, since a call holds it across its programs' runs
        self._lock = RLock()
        self._value_program = None
        self.order = 2 if hvp else 1
        if memory_budget is not None and (isinstance(memory_budget, bool) or not isinstance(
                memory_budget, (int, np.integer)) or memory_budget < 0):
            raise TypeError(f"memory_budget must be a number of bytes (int >= 0) or None; "
                            f"got {memory_budget!r}")
        self.memory_budget = memory_budget
        #: True when the budget made every region recompute its partials
        self.recomputed_for_budget = False
        # tiers (hybridad.plans.tiered): a numba gradient plan answers at once
        self._tiered = (default_tiered() if tiered is None else bool(tiered)) and \
            backend == "numba" and not hvp and update is None and type(self) is Plan and \
            not poison
        # the traced graph, kept for a second program of another backend (a
        # tiered plan's reference, a numpy twin over the compile budget): built
        # from it, never by tracing f again (hybridad.plans.recording)
        self._records = backend == "numba" and self._replay is None and (
            self._tiered or self._numpy_fallback(hvp, update))
        with serial_loops(not self.parallel):
            try:
                self._build(f, args, leaves)
            except _OverBudget as first:
                self._build_within_budget(f, args, leaves, first)
        if self._pending is not None and not self._start_tiers(f, args):
            pending, self._pending = self._pending, None  # no reference program: compile here
            program = self._compile(*pending)
            self._compile_check(attach=True)
            self._install_program(program)
        if not self._KEEPS_RECORDING:
            self._recording = None

    #: whether the recording outlives the constructor: staged plans, whose
    #: programs compile at their first use (:mod:`hybridad.plans.staged`)
    _KEEPS_RECORDING = False

    def _numpy_fallback(self, hvp, update):
        """Whether a numba program over the compile budget
        (:class:`hybridad.CompileBudgetError`) leaves this plan's calls to a
        numpy twin of its recording: plain gradient plans (no ``hvp``, no
        ``update``, which raise it)."""
        return type(self) is Plan and not hvp and update is None

    # ------------------------------------------------------------------ build
    def _build(self, f, args, leaves):
        hvp = self.order == 2
        trace = Trace()
        if type(self) is Plan and self.update is None and \
                all(isinstance(a, np.ndarray) for a in leaves):
            trace.concrete = leaves  # Python decisions on values take this call's
        times = self.build_times = BuildTimes()
        with trace:
            with times.stage("trace"):
                tracers, targs, diff_tracers = self._trace_args(trace, leaves)
                out = self._trace_f(f, targs, trace)
            times.nodes = len(trace.nodes)
            self._loops_seen(trace)
            if self.checkpoint_levels:
                with times.stage("checkpoint loops"):
                    (out.node,) = checkpoint_loops(trace, [out.node], self.checkpoint_levels,
                                                   outer=self.checkpoint_outer)
            if trace.decisions:  # checked before every call (see _specialized); an op
                # that did not fail in f's try: where it fails, the program raises
                self._decision_check = DecisionCheck(trace.decisions, lazy=True)
                self._guarded = True
            self._value_dtype = out.dtype
            if self.backend in ("numba", "cupy") and not hvp:  # the hybrid: regions by duals
                with times.stage("fuse regions"):
                    trace.nodes = fuse_regions(trace.nodes, [out.node], reductions=("sum",))
            # a Hessian-vector product differentiates the gradient graph again:
            # the first reverse pass is then functional (see autodiff.backward)
            with summed_partials_in_loop(self.backend == "numba"), \
                    partials_by_traffic(self.backend == "cupy"), times.stage("reverse pass"):
                grads = backward(trace, out, diff_tracers, inplace=not hvp)
            tangents, hvps, writes = [], [], []
            if self.update is not None:  # the optimizer step, fused into the sweep
                tangents, writes = self._emit_update(trace, leaves, diff_tracers, grads)
            if hvp:  # H v: the tangent of the gradient along v, forward over reverse
                tangents = [trace.input(len(leaves) + j, *self._specs[i])
                            for j, i in enumerate(self._diff_leaves)]
                with times.stage("forward over reverse"):
                    tmap = jvp(trace, list(trace.nodes),
                               {x.node.id: t for x, t in zip(diff_tracers, tangents,
                                                             strict=True)})
                hvps = [None if g is None else tmap.get(g.node.id) for g in grads]
        inputs = [t.node for t in tracers + tangents]
        grad_nodes = [None if g is None else g.node for g in grads]
        hvp_nodes = [None if h is None else h.node for h in hvps]
        if self.update is not None:  # no gradient leaves the plan: the rule consumes it
            grad_nodes = []
        outputs = [out.node] + [g for g in grad_nodes + hvp_nodes if g is not None] + writes
        graph = self._lower(trace.nodes, inputs, outputs,
                            self._update_ids if writes else ())
        self._outputs = [out.node] + grad_nodes + hvp_nodes
        with serial_loops(self._loops_serial), times.stage("memory plan"):
            self.memory = self._plan_memory(graph)
        if self.memory_budget is not None and self.memory.total_bytes > self.memory_budget:
            raise _OverBudget(self.memory)  # before compiling anything
        self._buffers = self.memory.allocate(self._xp)
        grad_specs = [self._specs[i] for i in self._diff_leaves]
        self._out_specs = [((), self._value_dtype)] + \
            ([] if self.update is not None else grad_specs * self.order)
        in_specs = self._specs + grad_specs * hvp + [(t.shape, t.dtype) for t in tangents
                                                     if self.update is not None]
        self._value_buf = self._xp.zeros((), self._value_dtype)
        if self._decision_check is not None and not self._tiered:  # (tiered: with its program)
            with times.stage("decisions program"):
                self._compile_check(attach=True)
        pending = (graph.nodes, inputs, self._outputs,
                   "step_program" if self.update is not None else
                   "hvp_program" if hvp else "gradient_program", self._out_specs, in_specs)
        self._program = None
        if self._tiered:  # compiled in the background (Plan.__init__ starts it)
            self._pending = pending
        else:
            try:
                with times.stage(f"{self.backend} program"):
                    program = self._compile(*pending)
                self._install_program(program)
            except CompileBudgetError as exc:  # the reference program, for good
                if type(self) is not Plan or self.order != 1 or self.update is not None:
                    raise  # (no reference program for hvp or update plans)
                self._serve_reference(f, args, exc)
        # the common case -- plain array arguments, one array gradient -- is
        # validated by a short path with the same checks (see _fast_args)
        self._plain = all(td == _tree.LEAF for td in self._treedefs) and \
            not isinstance(self.argnums, tuple)
        self._fast_specs = [(shape, np.dtype(dtype)) for shape, dtype in self._specs]
        # the numpy executor needs floating-point warnings silenced; compiled code raises none
        self._quiet = self.backend == "numpy"
        if DEBUG:
            print(self.explain() if DEBUG >= 2 else str(self.graph))

    @property
    def _loops_serial(self):
        """Whether the plan's loops are generated serial (``parallel=False``)."""
        return not self.parallel

    def _install_program(self, program):
        """Put the compiled program in place (and the fast path in front of it)."""
        hvp = self.order == 2
        if self._cuda_graph or self._graph_auto:
            from ..backends.cuda.program import CudaGraphRunner
            self._graph = CudaGraphRunner(program.fn, auto=not self._cuda_graph)
        # (a heavy program's fast path calls NumbaProgram.invoke: its lock, its
        # thread count, and BLAS single-threaded beside its own threads)
        self._program = program
        fast = self._fast_path() if self.backend == "numba" and not hvp and \
            self.update is None else None
        if fast is not None:  # plain-array calls skip the general path's Python
            self.gradient = fast

    def _lower(self, nodes, inputs, outputs, updates=()):
        """The traced nodes as the graph the backends run: the lowering passes
        of the backend (:data:`hybridad.transforms.pipeline.LOWERING`: dead code
        removed, optimizer updates scheduled early, elementwise regions fused
        and folded into the adjoints they add to); sets ``graph`` and ``work``."""
        times = getattr(self, "build_times", None)
        graph = pipeline.lower(nodes, inputs, outputs, self.backend, updates,
                               None if times is None else times.stage,
                               lowering_machine(self.backend))
        self.graph = graph
        #: rough count of element operations per call (matmuls as multiply-adds)
        self.work = work_estimate(graph.nodes)
        return graph

    def _plan_memory(self, graph, pinned=()):
        """The memory plan of ``graph`` for this backend (scratch, reuse, direct outputs)."""
        if self.backend == "numba":
            from ..backends.numba.layouts import plan_numba_memory
            return plan_numba_memory(graph, pack=self._pack, pinned=pinned)
        scratch = op_workspaces(graph.nodes)
        if self.backend == "cupy":  # (the device linear algebra's: its own workspace)
            from ..backends.cuda.program import device_scratch
            scratch = device_scratch(graph.nodes, self._own_products)
        return plan_memory(graph, (), scratch, reuse=self.backend != "numpy",
                           direct_outputs=self.backend == "cupy", pack=self._pack,
                           pinned=pinned)

    def _compile(self, nodes, inputs, outputs, name, out_specs, in_specs=None, given=(), **opts):
        if self.backend == "numba":  # numba is imported by the first plan that needs it
            from ..backends.numba import build_program
            with serial_loops(self._loops_serial):  # (prelude: the decisions' check it carries)
                prog = build_program(nodes, inputs, outputs, self.memory, self._buffers,
                                     in_specs or self._specs, out_specs, name=name,
                                     poison=self._poison, given=given, **opts,
                                     prelude=carried_check(self, name),
                                     label=f"the {name.replace('_', ' ')} of {self.name}")
            prog.lock = self._lock  # every program of the plan writes the same arena
            return prog
        regions = None
        if self.backend == "cupy":
            from ..backends.cuda.program import RegionCalls, check_supported
            check_supported(nodes)
            regions = RegionCalls(self._launcher, self.memory, self._buffers, self._xp,
                                  self._own_products)
        return compile_program(nodes, inputs, outputs, self.memory, self._buffers, name=name,
                               poison=self._poison, given=given, xp=self._xp, regions=regions)

    def _check_output(self, out, trace):
        if not isinstance(out, Tracer):
            try:
                arr = np.asarray(out)
            except Exception:  # noqa: BLE001
                arr = None
            if arr is None or arr.dtype.kind not in "biuf":
                raise TypeError(f"{self.name} must return a scalar array value; it returned "
                                f"{type(out).__name__}")
            out = Tracer(as_node(arr.astype(np.float64) if arr.dtype.kind != "f" else arr,
                                 trace), trace)
        if out.shape != () and out.size == 1:  # shape (1,) or (1, 1): a scalar, as autograd
            out = out.reshape(())
        if out.shape != ():
            raise ValueError(f"{self.name} must return a scalar (0-d) value to take its "
                             f"gradient; it returned shape {out.shape}. Reduce it (np.sum) "
                             "or use a Jacobian.")
        if out.dtype.kind != "f":
            raise TypeError(f"{self.name} must return a floating-point value; it returned "
                            f"dtype {out.dtype}")
        return out

    # ------------------------------------------- methods of other kinds of plan
    def _computes(self):
        """What this plan computes, and with which method (for error messages)."""
        if self.update is not None:
            return "optimizer steps (plan.step)"
        if self.order == 2:
            return "Hessian-vector products (plan.hvp)"
        return "gradients (plan.gradient)"

    def _refuse(self, method, instead) -> NoReturn:
        raise TypeError(f"plan.{method}() is not available on this plan: it computes "
                        f"{self._computes()}; for {method} build the plan with {instead}")

    def hessian(self, *args: Any, out: Any = None) -> NoReturn:
        """Needs a plan built with ``hessian=True`` (:class:`hybridad.plans.hessian.HessianPlan`);
        raises TypeError here."""
        self._refuse("hessian", "hybridad.compile(f, ..., hessian=True) (or hybridad.hessian)")

    def linearize(self, *args: Any, out: Any = None) -> NoReturn:
        """Needs a plan built with ``hessian=True``; raises TypeError here."""
        self._refuse("linearize", "hybridad.compile(f, ..., hessian=True)")

    def jacobian(self, *args: Any, out: Any = None) -> NoReturn:
        """Needs a plan built with ``jacobian=True``
        (:class:`hybridad.plans.jacobian.JacobianPlan`);
        raises TypeError here."""
        self._refuse("jacobian", "hybridad.compile(f, ..., jacobian=True) (or "
                     "hybridad.jacobian)")

    # ------------------------------------------------------------------ calls
    def gradient(self, *args: Any, out: GradientResult | None = None, _checked=False) -> Any:
        """Value and gradient of ``f`` at ``args``, written into ``out``.

        Parameters
        ----------
        *args
            Arguments matching the example arguments in structure, shape and
            dtype (static values equal).  Non-contiguous arrays are accepted.
        out : GradientResult or DiffResult, optional
            Result buffers, overwritten in place.  Validated before anything is
            written; on error they are left untouched.  Without ``out`` a new
            result is allocated.

        Returns
        -------
        GradientResult or DiffResult
            ``out`` (or the new result).
        """
        if self.order != 1 or self.update is not None:
            self._refuse("gradient", "hybridad.compile(f, ...) without hvp=, update=, "
                         "hessian= or jacobian= (or hybridad.gradient)")
        if self._guarded and not _checked:
            plan = self._check_stale(args, specialize=True)
            if plan is not self:  # (its method: its gradient attribute may be a fast path)
                return type(plan).gradient(plan, *args, out=out, _checked=True)
        try:
            if self._plain and out is not None:
                g = self._fast_args(args, out)
                if g is not None:
                    self._call(args, out.value, (g,))
                    return out
            return self._run(self._leaves(args), out)
        except np.linalg.LinAlgError as exc:  # (an op f catches failed: nothing written)
            plan = self._after_failure(args, exc)
            return type(plan).gradient(plan, *args, out=out, _checked=True)

    def _call(self, leaves, value, gleaves):
        reference = self._tier_reference()
        if reference is not None:  # tier 0: the first call of a tiered plan
            reference._call(leaves, value, gleaves)
        elif self.backend == "numba":  # serialized by the program's lock or the GIL
            self._program.run(leaves, [value, *gleaves])
        elif self._graph is not None:  # replay the captured CUDA graph
            with self._lock:
                self._graph(*leaves, value, *gleaves)
        elif self._quiet:
            with self._lock, np.errstate(all="ignore"):  # a fresh one: not reentrant
                self._program.fn(*leaves, value, *gleaves)
        else:
            with self._lock:
                self._program.fn(*leaves, value, *gleaves)

    def _run(self, leaves, out):
        if out is None:
            out = self.new_result()
        gleaves = self._check_out(out, leaves)
        self._call(leaves, out.value, gleaves)
        return out

    def hvp(self, *args: Any, v: Any, out: DiffResult | None = None) -> DiffResult:
        """Value, gradient and Hessian-vector product ``H v`` of ``f`` at ``args``.

        Needs a plan built with ``hvp=True``.  ``H`` is the Hessian with respect
        to the differentiated argument(s); it is never formed.

        Parameters
        ----------
        *args
            Arguments matching the example arguments (as for :meth:`gradient`).
        v : ndarray or tuple/list/dict of ndarray
            The vector, structured, shaped and typed like the differentiated
            argument(s) (other dtypes are converted, which allocates).
        out : HvpResult or DiffResult, optional
            Buffers ``(value, gradient, hvp)``, overwritten in place; checked
            before anything is written.  Without ``out`` a new
            :class:`HvpResult` is allocated.

        Returns
        -------
        HvpResult or DiffResult
            ``out`` (or the new result).
        """
        if self.order != 2:
            self._refuse("hvp", "hybridad.compile(f, ..., hvp=True) or hessian=True (or "
                         "hybridad.hvp)")
        # (a program that carries the decisions' check checks them on the plain path)
        carried = self._decision_check is not None and \
            getattr(self._program, "checked_parts", None) is not None
        if self._guarded:
            plan = self._check_stale(args, specialize=True, decisions=not carried)
            if plan is not self:
                return plan.hvp(*args, v=v, out=out)
        try:
            return self._hvp_run(args, v, out, carried)
        except np.linalg.LinAlgError as exc:  # (an op f catches failed: nothing written)
            return self._after_failure(args, exc).hvp(*args, v=v, out=out)

    def _hvp_run(self, args, v, out, carried):
        done = self._hvp_plain(args, v, out, carried)
        if done is not None:  # out, or the specialization whose decisions hold
            return done if done is out else done.hvp(*args, v=v, out=out)
        leaves = self._leaves(args)
        vleaves = self._tangent_leaves(v)
        if out is None:
            out = self.new_result()
        gleaves = self._check_out(out, leaves, vleaves)
        self._call(leaves + vleaves, out.value, gleaves)
        return out

    def value(self, *args: Any) -> Any:
        """The function value at ``args`` as a Python float (forward pass only)."""
        if self._guarded:
            plan = self._check_stale(args, specialize=True)
            if plan is not self:
                return plan.value(*args)
        leaves = self._leaves(args)
        reference = self._tier_reference()
        if reference is not None:  # tier 0 (hybridad.plans.tiered)
            return reference.value(*args)
        if self._value_program is None:
            fwd = dead_code_elimination(Graph(self.graph.nodes, self.graph.inputs,
                                              [self._outputs[0]]))
            inputs = [n for n in fwd.inputs if n.attrs["index"] < len(self._specs)]  # (not v)
            nodes = [n for n in fwd.nodes if n.op != "input" or n in inputs]
            self._value_program = self._compile(nodes, inputs, [self._outputs[0]],
                                                "value_program", self._out_specs[:1])
        try:
            with self._lock, np.errstate(all="ignore"):
                if self.backend == "numba":
                    self._value_program.run(leaves, [self._value_buf])
                else:
                    self._value_program.fn(*leaves, self._value_buf)
                return float(self._value_buf)
        except np.linalg.LinAlgError as exc:  # (an op f catches failed)
            return self._after_failure(args, exc).value(*args)

    # ---------------------------------------------------------------- explain


class BatchPlan(Plan):
    """The gradient plan of ``f`` batched along a leading axis of ``batch``
    (:meth:`Plan.gradient_batch`): inputs ``(X, *other leaves)``, outputs
    the ``(batch,)`` values and the gradients shaped like ``X``.

    The value-and-gradient graph is traced for one input, then re-emitted
    with the leading axis by :func:`hybridad.transforms.batching.vmap` (every op's batch
    rule), so fusion and the backends see batched loops."""

    def __init__(self, f, args, argnums, backend, batch, parallel=True):
        self._batch = int(batch)
        super().__init__(f, args, argnums, backend, parallel=parallel)

    _build = build_batched


Plan._batch_plan_type = BatchPlan  # what gradient_batch builds (hybridad.plans.batch)


PLAN_TYPE[0] = Plan  # type: ignore[call-overload]  # what an unpickled recipe builds (hybridad.plans.pickling)
