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
import threading
import types
import warnings
import weakref

import numpy as np

from .. import _tree
from ..transforms.autodiff import backward, jvp
from ..backends.numba.loops import serial_loops
from ..backends.numba.program import compile_numba_program, materialize_for_numba, \
    scratch_for_numba, work_estimate
from ..backends.numpy.program import compile_program
from ..errors import MemoryBudgetError, RetraceWarning, StalePlanError
from ..frontend.guards import build_guards, captured_ids, observe, root_of, signature
from ..ir.graph import Graph, check, dead_code_elimination
from ..optim import UpdateRule, schedule_updates
from ..transforms.memory import op_workspaces, plan_memory
from ..ops.region import recompute_partials
from ..transforms.partition import fold_accumulations, fuse_regions
from ..results import BatchGradientResult, DiffResult, GradientResult, HvpResult
from ..frontend.trace import SUPPORTED_DTYPES, Trace, Tracer, as_node
from .validate import FLOATS as _FLOATS
from .validate import check_results
from .validate import describe as _describe
from .validate import is_buffer as _is_buffer
from .validate import writeable as _writeable

__all__ = ["Plan", "arg_names", "normalize_argnums"]

DEBUG = int(os.environ.get("HYBRIDAD_DEBUG", "0") or 0)
BACKENDS = ("numba", "numpy", "cupy")


#: re-traces of one plan after which :class:`~hybridad.errors.RetraceWarning` is issued
RETRACE_WARN = 3


def _static_paths(treedefs):
    """``(expression over the call's args tuple a, value)`` of every static
    (non-array) argument leaf that is an object: the guards walk them like
    ``f``'s closure (their attributes can change; their identity is in the
    plan's key)."""
    out = []

    def walk(td, expr):
        if td == _tree.LEAF:
            return
        kind = td[0]
        if kind == "static":
            if not isinstance(td[2], (type(None), bool, int, float, complex, str, bytes)):
                out.append((expr, td[2]))
        elif kind in ("tuple", "list"):
            for i, sub in enumerate(td[1]):
                walk(sub, f"{expr}[{i}]")
        elif kind == "dict":
            for key, sub in zip(td[1], td[2], strict=True):
                if isinstance(key, (str, int)):
                    walk(sub, f"{expr}[{key!r}]")

    for k, td in enumerate(treedefs):
        walk(td, f"a[{k}]")
    return out


def normalize_argnums(argnums, nargs):
    """Validate ``argnums`` (int or tuple of ints) against ``nargs`` arguments."""
    single = isinstance(argnums, (int, np.integer)) and not isinstance(argnums, bool)
    nums = (argnums,) if single else argnums
    if not isinstance(nums, tuple) or not nums or not all(
            isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in nums):
        raise TypeError(f"argnums must be an int or a non-empty tuple of ints; got {argnums!r}")
    out = []
    for i in nums:
        if not -nargs <= i < nargs:
            raise ValueError(f"argnums={argnums!r} is out of range for a call with {nargs} "
                             "positional argument(s)")
        out.append(int(i) % nargs)
    if len(set(out)) != len(out):
        raise ValueError(f"argnums={argnums!r} repeats an argument")
    return (out[0] if single else tuple(out)), tuple(out)


def arg_names(f, nargs):
    """Parameter names of ``f`` for error messages (``'x'``), or ``'arg k'``."""
    try:
        params = [p.name for p in inspect.signature(f).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [f"'{params[k]}'" if k < len(params) else f"at position {k}" for k in range(nargs)]


def prepare_args(args, diff, names):
    """Convert differentiated arguments to float arrays (see
    :func:`hybridad._tree.as_array_tree`); flatten everything; refuse ndarray
    subclasses and dtypes hybridad does not trace (:func:`hybridad._tree.plain_leaf`).

    Returns ``(leaves, treedefs)`` with one treedef per argument.
    """
    leaves, treedefs = [], []
    for k, a in enumerate(args):
        if k in diff and (type(a) is not np.ndarray or a.dtype not in _FLOATS):
            names = names() if callable(names) else names
            a = _tree.as_array_tree(a, names[k])  # converts, or raises a clear TypeError
        lv, td = _tree.flatten(a)
        for i, leaf in enumerate(lv):
            if type(leaf) is not np.ndarray or leaf.dtype not in SUPPORTED_DTYPES:
                names = names() if callable(names) else names
                lv[i] = _tree.plain_leaf(leaf, names[k])  # or a TypeError naming it
        leaves.extend(lv)
        treedefs.append(td)
    return leaves, tuple(treedefs)


def _unpack_source(td, expr, leaves, conds, consts):
    """Source that takes a pytree of structure ``td`` apart: the expressions
    of its array leaves (appended to ``leaves``) and the conditions under
    which they are right (appended to ``conds``, parents before children:
    container class and length, dict keys, static values equal; the names
    they use go into ``consts``).  False for a structure it cannot write."""
    if td == _tree.LEAF:
        leaves.append(expr)
        return True
    kind = td[0]
    if kind == "static":
        k = len(consts)
        consts[f"_sT{k}"], consts[f"_sV{k}"] = td[1], td[2]
        conds.append(f"{expr}.__class__ is _sT{k} and {expr} == _sV{k}")
        return True
    subs = td[-1]
    if kind in ("tuple", "list"):
        conds.append(f"{expr}.__class__ is {kind} and len({expr}) == {len(subs)}")
        items = [f"{expr}[{i}]" for i in range(len(subs))]
    elif kind == "dict":
        if not all(type(key) in (str, int) for key in td[1]):
            return False
        conds.append(f"{expr}.__class__ is dict and len({expr}) == {len(subs)}")
        items = [f"{expr}[{key!r}]" for key in td[1]]  # missing key: LookupError
    else:
        return False
    return all(_unpack_source(sub, item, leaves, conds, consts)
               for sub, item in zip(subs, items, strict=True))


class _OverBudget(Exception):
    def __init__(self, memory):
        super().__init__()
        self.memory = memory



def serialized(method):
    """A plan method that holds the plan's lock from start to end: calls that
    run several programs over the plan's one workspace (a Hessian's chunks, a
    Jacobian's, the linearization point) are one step for other threads."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return call

class Plan:
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
                 poison=False, pack=True, memory_budget=None, cuda_graph=False, update=None):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}; got {backend!r}")
        if not isinstance(parallel, (bool, np.bool_)):
            raise TypeError(f"parallel must be True or False; got {parallel!r}")
        self.backend = backend
        self.parallel = bool(parallel)
        # the array module of buffers and arguments, and (GPU) the kernel launcher
        self._xp, self._launcher = np, None
        if cuda_graph and backend != "cupy":
            raise ValueError("cuda_graph=True needs backend='cupy'")
        self._cuda_graph, self._graph = bool(cuda_graph), None
        if update is not None and (not isinstance(update, UpdateRule) or hvp):
            raise TypeError("update must be a hybridad.optim rule (SGD, Momentum, Adam) on a "
                            f"gradient plan; got {update!r}")
        self.update = update
        if backend == "cupy":
            from ..backends.cuda import program as cupy_backend
            self._xp, self._launcher = cupy_backend.device()
        # instrumented (tests): every slot is filled with NaN outside its lifetime
        self._poison = bool(poison)
        self._pack = bool(pack)  # False: one arena slot per buffer (for comparison)
        self.name = getattr(f, "__qualname__", repr(f))
        try:  # batch plans (gradient_batch) and pickling rebuild from f later
            self._f = weakref.WeakMethod(f) if inspect.ismethod(f) else weakref.ref(f)
        except TypeError:
            self._f = lambda f=f: f
        self._example = None
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
        self._guard_lock = threading.Lock()
        self._retraces = self._rebuilds = 0
        self.argnums, self._diff = normalize_argnums(argnums, len(args))
        self._names = arg_names(f, len(args))
        leaves, self._treedefs = prepare_args(args, self._diff, self._names)
        self._specs = [(a.shape, a.dtype) for a in leaves]
        #: one lock per plan: its programs share one workspace (see docs/guide.md,
        #: "Threads"); re-entrant, since a call holds it across its programs' runs
        self._lock = threading.RLock()
        self._value_program = None
        self.order = 2 if hvp else 1
        if memory_budget is not None and (isinstance(memory_budget, bool) or not isinstance(
                memory_budget, (int, np.integer)) or memory_budget < 0):
            raise TypeError(f"memory_budget must be a number of bytes (int >= 0) or None; "
                            f"got {memory_budget!r}")
        self.memory_budget = memory_budget
        #: True when the budget made every region recompute its partials
        self.recomputed_for_budget = False
        with serial_loops(not self.parallel):
            try:
                self._build(f, args, leaves)
            except _OverBudget as first:
                # checkpointing: recompute every region in the backward sweep
                # instead of keeping its partials from the forward sweep
                self.recomputed_for_budget = True
                try:
                    with recompute_partials():
                        self._build(f, args, leaves)
                except _OverBudget as second:
                    best = min(first.memory, second.memory, key=lambda m: m.total_bytes)
                    raise MemoryBudgetError(
                        f"{self.name}: memory_budget={memory_budget} bytes is too small; the "
                        f"smallest workspace hybridad can plan is {best.total_bytes} bytes "
                        f"(liveness lower bound {best.lower_bound}; "
                        f"{first.memory.total_bytes} bytes storing partials, "
                        f"{second.memory.total_bytes} recomputing every region)") from None

    # ------------------------------------------------------------------ build
    def _build(self, f, args, leaves):
        hvp = self.order == 2
        trace = Trace()
        with trace:
            tracers, targs, diff_tracers = self._trace_args(trace, leaves)
            out = self._trace_f(f, targs, trace)
            self._value_dtype = out.dtype
            if self.backend in ("numba", "cupy") and not hvp:  # the hybrid: regions by duals
                trace.nodes = fuse_regions(trace.nodes, [out.node], reductions=("sum",))
            # a Hessian-vector product differentiates the gradient graph again:
            # the first reverse pass is then functional (see autodiff.backward)
            grads = backward(trace, out, diff_tracers, inplace=not hvp)
            tangents, hvps, writes = [], [], []
            if self.update is not None:  # the optimizer step, fused into the sweep
                tangents, writes = self._emit_update(trace, leaves, diff_tracers, grads)
            if hvp:  # H v: the tangent of the gradient along v, forward over reverse
                tangents = [trace.input(len(leaves) + j, *self._specs[i])
                            for j, i in enumerate(self._diff_leaves)]
                tmap = jvp(trace, list(trace.nodes),
                           {x.node.id: t for x, t in zip(diff_tracers, tangents, strict=True)})
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
        self.memory = self._plan_memory(graph)
        if self.memory_budget is not None and self.memory.total_bytes > self.memory_budget:
            raise _OverBudget(self.memory)  # before compiling anything
        self._buffers = self.memory.allocate(self._xp)
        grad_specs = [self._specs[i] for i in self._diff_leaves]
        self._out_specs = [((), self._value_dtype)] + \
            ([] if self.update is not None else grad_specs * self.order)
        in_specs = self._specs + grad_specs * hvp + [(t.shape, t.dtype) for t in tangents
                                                     if self.update is not None]
        self._program = self._compile(graph.nodes, inputs, self._outputs,
                                      "step_program" if self.update is not None else
                                      "hvp_program" if hvp else "gradient_program",
                                      self._out_specs, in_specs)
        if self._cuda_graph:
            from ..backends.cuda.program import CudaGraphRunner
            self._graph = CudaGraphRunner(self._program.fn)
        self._value_buf = self._xp.zeros((), self._value_dtype)
        # (a plan that runs BLAS single-threaded goes through NumbaProgram.call)
        fast = self._fast_path() if self.backend == "numba" and not hvp and \
            self.update is None and not self._program.blas_limited else None
        if fast is not None:  # plain-array calls skip the general path's Python
            self.gradient = fast
        # the common case -- plain array arguments, one array gradient -- is
        # validated by a short path with the same checks (see _fast_args)
        self._plain = all(td == _tree.LEAF for td in self._treedefs) and \
            not isinstance(self.argnums, tuple)
        self._fast_specs = [(shape, np.dtype(dtype)) for shape, dtype in self._specs]
        # the numpy executor needs floating-point warnings silenced; compiled code raises none
        self._quiet = self.backend == "numpy"
        if DEBUG:
            print(self.explain() if DEBUG >= 2 else str(self.graph))

    # ----------------------------------------------------------------- guards
    def _trace_f(self, f, targs, trace):
        """``f(*targs)`` in ``trace``, observed: the output checked, and the plan's
        guards and graph signature set (see :mod:`hybridad.frontend.guards`)."""
        out, self.guards, self._signature = self._observe_f(f, targs, trace)
        self._guarded = self.guards.count > 0
        self._gcheck = self.guards._check  # the compiled check (generated fast paths)
        return out

    def _observe_f(self, f, targs, trace):
        """``(output, guards, signature)`` of ``f(*targs)`` traced into ``trace``
        under :func:`hybridad.frontend.guards.observe`."""
        with observe(self.name) as obs:
            out = f(*targs)
        out = self._check_output(out, trace)
        nodes = list(trace.nodes)
        consts = [n.attrs["value"] for n in nodes if n.op == "const" and not n.is_literal]
        guards = build_guards(f, _static_paths(self._treedefs), obs, consts)
        return out, guards, signature(nodes, [out.node], captured_ids(guards))

    def _stale_reason(self, args):
        """None, or what changed since ``f`` was traced (without re-tracing)."""
        root = self._root if self._root is not None else self._rootref()
        if root is None or not self._guarded:  # f is gone: nothing can change its state
            return None
        return self.guards.check(root, args)

    def _check_stale(self, args):
        """Before a call: if what ``f`` reads changed since it was traced, trace
        it again; the plan keeps running when the graph came out the same, and
        raises :class:`~hybridad.errors.StalePlanError` otherwise."""
        root = self._root if self._root is not None else self._rootref()
        if root is None:  # f is gone: nothing can reach its closure any more
            return
        why = self.guards.check(root, args)
        if why is not None:
            self._revalidate(root, args, why)

    def _revalidate(self, root, args, why):
        with self._guard_lock:
            if self.guards.check(root, args) is None:  # another thread did it
                return
            trace = Trace()
            stand_ins = [types.SimpleNamespace(shape=s, dtype=np.dtype(d))
                         for s, d in self._specs]
            f = root if self._method_func is None else types.MethodType(self._method_func, root)
            with trace:
                _, targs, _ = self._trace_args(trace, stand_ins)
                _, guards, sig = self._observe_f(f, targs, trace)
            if sig != self._signature:
                raise StalePlanError(
                    f"{self.name}: {why}, and f now traces to a different graph: this plan "
                    "would compute the old function. Build a new plan (hybridad.compile), "
                    "use hybridad.gradient / hessian / jacobian (they rebuild their plans "
                    "when this happens), or pass the value as an argument, which a plan "
                    "reads on every call.")
            self.guards, self._gcheck = guards, guards._check
            self._retraces += 1
            if self._retraces == RETRACE_WARN:
                warnings.warn(
                    f"hybridad: {self.name} was traced again {RETRACE_WARN} times because "
                    f"{why} between calls (the graph came out the same, so the plan is "
                    "kept, but each check costs a trace). Pass values that change between "
                    "calls as arguments.", RetraceWarning, stacklevel=4)

    def _lower(self, nodes, inputs, outputs, updates=()):
        """The traced nodes as the graph the backends run: dead code removed,
        optimizer updates scheduled early, elementwise regions fused (and
        folded into the adjoints they add to, on numba); sets ``graph`` and
        ``work``."""
        graph = dead_code_elimination(Graph(nodes, inputs, outputs))
        if updates:
            graph = Graph(schedule_updates(graph.nodes, updates), inputs, outputs)
        if self.backend in ("numba", "cupy"):  # fuse the backward's elementwise ops as well
            graph = Graph(fuse_regions(graph.nodes, outputs), inputs, outputs)
        if self.backend == "numba":
            graph = Graph(fold_accumulations(graph.nodes, outputs), inputs, outputs)
        check(graph)
        self.graph = graph
        #: rough count of element operations per call (matmuls as multiply-adds)
        self.work = work_estimate(graph.nodes)
        return graph

    def _plan_memory(self, graph, pinned=()):
        """The memory plan of ``graph`` for this backend (scratch, reuse, direct outputs)."""
        numba = self.backend == "numba"
        scratch = op_workspaces(graph.nodes)
        if numba:
            scratch.update(scratch_for_numba(graph.nodes))
        if self.backend == "cupy":
            from ..backends.cuda.program import scratch_for_cupy
            scratch.update(scratch_for_cupy(graph.nodes))
        return plan_memory(graph, self._materialize(graph.nodes), scratch,
                           reuse=self.backend != "numpy", direct_outputs=numba,
                           pack=self._pack, pinned=pinned)

    def _emit_update(self, trace, leaves, diff_tracers, grads):
        """The update rule's state and per-step inputs, and its in-place writes
        into parameters and state (after the backward pass; see hybridad.optim)."""
        rule, k = self.update, len(leaves)
        first = max((n.id for n in trace.nodes), default=-1)
        inputs, self._state = [], []
        n_hyper = len(rule.hyper(1))
        hyper = None
        for p in diff_tracers:
            states = []
            for _ in rule.state:
                states.append(trace.input(k + len(inputs), p.shape, p.dtype))
                inputs.append(states[-1])
                self._state.append(np.zeros(p.shape, p.dtype))
        if n_hyper:
            hyper = trace.input(k + len(inputs), (n_hyper,), diff_tracers[0].dtype)
            inputs.append(hyper)
        self._hyper = np.zeros(n_hyper, diff_tracers[0].dtype)
        self._steps = 0
        writes = []
        ns = len(rule.state)
        shared = rule.shared(hyper) if hyper is not None else ()
        for j, (p, g) in enumerate(zip(diff_tracers, grads, strict=True)):
            if g is not None:
                states = [inputs[j * ns + s] for s in range(ns)]
                writes += [w.node for w in rule.emit(p, g, states, shared)]
        self._update_ids = [n.id for n in trace.nodes if n.id > first and n.op != "input"]
        return inputs, writes

    def __reduce__(self):
        """Pickle as a recipe: the function, the example arguments' structure,
        shapes and dtypes, and the options; unpickling rebuilds the plan (once
        per process and recipe; numba's code comes from the disk cache).
        Gradient plans only."""
        f = self._f()
        if f is None or type(self) is not Plan or self.order != 1 or \
                self.update is not None or self._cuda_graph:
            raise TypeError(f"only gradient plans of a live function can be pickled "
                            f"({self.name})")
        protos, it = [], iter(self._specs)
        for td in self._treedefs:
            leaves = [(s, str(np.dtype(d))) for s, d in
                      (next(it) for _ in range(_tree.count_leaves(td)))]
            protos.append((td, leaves))
        return _rebuild_plan, (f, protos, self.argnums, self.backend, self.parallel)

    def gradient_batch(self, X, *args, out=None):
        """Value and gradient at each of ``B`` inputs stacked along a first axis.

        One compiled call computes all of them (the plan's graph batched along
        a leading axis of ``B``, its loops run in parallel over the batch on
        the numba backend) -- the scientific use where one small model is
        evaluated many times.  A plan per ``B`` is built on first use and kept.

        Parameters
        ----------
        X : ndarray, shape (B, *x.shape)
            The stacked values of the differentiated argument (one array
            argument, ``argnums`` an int).
        *args
            The other arguments, as for :meth:`gradient` (shared by all ``B``).
        out : BatchGradientResult or DiffResult, optional
            ``BatchGradientResult(X)`` or ``DiffResult(values, gradients)``:
            ``values`` of shape ``(B,)``, ``gradients`` shaped like ``X``.
            Checked before anything is written; a fresh
            :class:`~hybridad.results.BatchGradientResult` when None.

        Returns
        -------
        BatchGradientResult or DiffResult
            ``out``: ``out.value`` the values, ``out.gradient`` (or
            ``out.derivs[0]``) the gradients.
        """
        if self.update is not None or self.order != 1 or type(self).gradient_batch is not \
                Plan.gradient_batch or getattr(self, "_kind", None) is not None:
            self._refuse("gradient_batch", "hybridad.compile(f, x, ...) (a gradient plan)")
        if isinstance(self.argnums, tuple) or len(self._diff_leaves) != 1 or \
                self._treedefs[self.argnums] != _tree.LEAF:
            raise TypeError("plan.gradient_batch() differentiates one array argument of a "
                            f"gradient plan (argnums an int); got argnums={self.argnums!r}")
        shape, dtype = self._specs[self._diff_leaves[0]]
        if not _is_buffer(X, self._xp) or X.ndim != len(shape) + 1 or \
                X.shape[1:] != shape or X.dtype != dtype:
            raise ValueError(f"X must be a stack of arrays of shape {shape} and dtype {dtype}: "
                             f"an array of shape (B, *{shape}); got {_describe(X)}")
        full = list(args)
        full.insert(self.argnums, X[0])  # the structure and the other arguments, checked
        if self._guarded:
            self._check_stale(tuple(full))
            if self.guards is not getattr(self, "_batch_guards", None):  # re-traced: the
                self._batch_plans.clear()  # batch plans' graphs are rebuilt from f as it is
                self._batch_guards = self.guards
        leaves = self._leaves(tuple(full))
        k = X.shape[0]
        with self._lock:  # one batch plan per B, built once
            plan = self._batch_plans.get(k)
            if plan is None:
                f = self._f()
                if f is None:
                    raise RuntimeError(f"{self.name} no longer exists: build a new plan")
                example = list(full)
                example[self.argnums] = np.zeros(shape, dtype)
                plan = self._batch_plans[k] = BatchPlan(
                    f, tuple(example), self.argnums, self.backend, batch=k,
                    parallel=self.parallel)
        if out is None:
            out = BatchGradientResult(X, dtype=self._value_dtype)
        if not isinstance(out, DiffResult) or not out.derivs:
            raise ValueError("out must be a BatchGradientResult or DiffResult(values, gradients); "
                             f"got {_describe(out)}")
        v, g = out.value, out.derivs[0]
        rest = [a for i, a in enumerate(leaves) if i != self._diff_leaves[0]]
        check_results(self._xp, [("out.value (the values)", v, (k,), self._value_dtype),
                                 ("out.gradient (the gradients)", g, X.shape, dtype)],
                      [("X", X)] + self._reads(rest, skip=self._diff_leaves[0]))
        plan._call([X, *rest], v, [g])
        return out

    def step(self, *args, out=None):
        """One optimizer step: the loss at ``args`` into ``out.value``, and every
        differentiated parameter updated in place by the plan's rule.

        Needs a plan built with ``update=`` (:func:`hybridad.compile`).  Each
        parameter's update runs as soon as its gradient is complete in the
        backward sweep; no gradient is stored for the caller.

        Parameters
        ----------
        *args
            As for :meth:`gradient`; the differentiated arrays are the
            parameters, updated in place (they must be writeable and
            C-contiguous).
        out : DiffResult or GradientResult, optional
            Its ``value`` buffer receives the loss before the step (a fresh
            :class:`DiffResult` when None).

        Returns
        -------
        DiffResult or GradientResult
            ``out``.
        """
        if self.update is None:
            raise TypeError("step() needs a plan built with update=hybridad.optim.<rule>")
        if self._guarded:
            self._check_stale(args)
        leaves = self._leaves(args)
        for i in self._diff_leaves:
            a = leaves[i]
            if not (isinstance(a, self._xp.ndarray) and a.flags.c_contiguous and
                    _writeable(a)):
                raise ValueError(f"parameter {self._names[self._leaf_arg[i]]} is updated in "
                                 "place: it must be a writeable, C-contiguous array")
        if out is None:
            out = DiffResult(self._xp.zeros((), self._value_dtype))
        elif not isinstance(out, DiffResult):
            raise ValueError("out must be a DiffResult or GradientResult with a writeable "
                             f"0-d floating-point value buffer; got {_describe(out)}")
        # the parameters are written too: no overlap with each other, out or the rest
        params = [(f"parameter {self._names[self._leaf_arg[i]]}", leaves[i], *self._specs[i])
                  for i in self._diff_leaves]
        check_results(self._xp, [("out.value", out.value, (), None)] + params,
                      [(f"argument {self._names[self._leaf_arg[i]]}", a)
                       for i, a in enumerate(leaves) if i not in self._diff_leaves])
        extra = self._state + ([self._hyper] if self._hyper.size else [])
        with self._lock:  # the step count, the rule's state and the call: one step
            for i, h in enumerate(self.update.hyper(self._steps + 1)):
                self._hyper[i] = h  # scalar writes: no array made
            self._call(leaves + extra, out.value, [])
            self._steps += 1  # (a failed step changed nothing, the count included)
        return out

    def _trace_args(self, trace, leaves):
        """Input tracers for the leaves; the arguments rebuilt from them; the
        differentiated ones."""
        tracers = [trace.input(i, a.shape, a.dtype) for i, a in enumerate(leaves)]
        it = iter(tracers)
        targs, self._leaf_arg, diff_tracers = [], [], []
        for k, td in enumerate(self._treedefs):
            n = _tree.count_leaves(td)
            mine = [next(it) for _ in range(n)]
            self._leaf_arg.extend([k] * n)
            targs.append(_tree.unflatten(td, mine))
            if k in self._diff:
                diff_tracers.extend(mine)
        self._diff_leaves = [t.node.attrs["index"] for t in diff_tracers]
        return tracers, targs, diff_tracers

    def _materialize(self, nodes):
        return materialize_for_numba(nodes) if self.backend == "numba" else ()

    def _compile(self, nodes, inputs, outputs, name, out_specs, in_specs=None, given=()):
        if self.backend == "numba":
            with serial_loops(not self.parallel):
                prog = compile_numba_program(nodes, inputs, outputs, self.memory, self._buffers,
                                             in_specs or self._specs, out_specs, name=name,
                                             poison=self._poison, given=given)
            prog.lock = self._lock  # every program of the plan writes the same arena
            return prog
        regions = None
        if self.backend == "cupy":
            from ..backends.cuda.program import RegionCalls, check_supported
            check_supported(nodes)
            regions = RegionCalls(self._launcher, self.memory, self._buffers, self._xp)
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
        if out.shape != ():
            raise ValueError(f"{self.name} must return a scalar (0-d) value to take its "
                             f"gradient; it returned shape {out.shape}. Reduce it (np.sum) "
                             "or use a Jacobian.")
        if out.dtype.kind != "f":
            raise TypeError(f"{self.name} must return a floating-point value; it returned "
                            f"dtype {out.dtype}")
        return out

    # ------------------------------------------------------------- validation
    def _leaves(self, args):
        if len(args) != len(self._treedefs):
            raise TypeError(f"plan for {self.name} takes {len(self._treedefs)} positional "
                            f"argument(s); got {len(args)}")
        leaves, treedefs = prepare_args(args, self._diff, self._names)
        if treedefs != self._treedefs:
            for k, (a, b) in enumerate(zip(treedefs, self._treedefs, strict=True)):
                if a != b:
                    raise ValueError(f"argument {self._names[k]} does not match the plan: its "
                                     "structure or static values differ from the example "
                                     "arguments the plan was compiled for")
        for i, (leaf, (shape, dtype)) in enumerate(zip(leaves, self._specs, strict=True)):
            if not isinstance(leaf, self._xp.ndarray):
                kind = "device (cupy)" if self.backend == "cupy" else "host (numpy)"
                raise TypeError(f"argument {self._names[self._leaf_arg[i]]} is a "
                                f"{type(leaf).__module__}.{type(leaf).__name__}; this plan "
                                f"(backend={self.backend!r}) takes {kind} arrays")
            if leaf.shape != shape or leaf.dtype != dtype:
                raise ValueError(f"argument {self._names[self._leaf_arg[i]]} has shape "
                                 f"{leaf.shape} and dtype {leaf.dtype}; the plan was compiled "
                                 f"for shape {shape} and dtype {dtype}")
        return leaves

    def _grad_structure(self):
        tds = [self._treedefs[k] for k in self.argnums] \
            if isinstance(self.argnums, tuple) else self._treedefs[self.argnums]
        return ("tuple", tuple(tds)) if isinstance(self.argnums, tuple) else tds

    def new_result(self):
        """A fresh :class:`GradientResult` (an :class:`HvpResult` for a
        Hessian-vector-product plan) matching this plan."""
        protos = [self._xp.zeros(*self._specs[i]) for i in self._diff_leaves]
        grad = _tree.unflatten(self._grad_structure(), protos)
        cls = HvpResult if self.order == 2 else GradientResult
        return cls(grad, dtype=self._value_dtype)

    def _reads(self, leaves, skip=None):
        """``(name, array)`` of the argument leaves (all but leaf ``skip``), for
        :func:`hybridad.plans.validate.check_results`."""
        idx = [i for i in range(len(self._specs)) if i != skip]
        return [(f"argument {self._names[self._leaf_arg[i]]}", a)
                for i, a in zip(idx, leaves, strict=True)]

    def _check_out(self, out, leaves, vleaves=()):
        """The gradient (and hvp) leaves of ``out`` after checking every buffer
        (:func:`hybridad.plans.validate.check_results`) against the arguments and
        ``vleaves`` (an hvp's ``v``)."""
        if not isinstance(out, DiffResult):
            raise TypeError(f"out must be a GradientResult or DiffResult; got "
                            f"{type(out).__name__}")
        results = [("out.value", out.value, (), None)]
        if len(out.derivs) < self.order:
            raise ValueError("out holds no gradient buffer (DiffResult(value, gradient))"
                             if self.order == 1 else "out must hold a gradient and a "
                             "Hessian-vector product buffer (HvpResult(x))")
        gleaves = []
        for what, buf in zip(("gradient", "hvp")[:self.order], out.derivs[:self.order],
                             strict=True):
            leaves_k, td = _tree.flatten(buf)
            if td != self._grad_structure():
                raise ValueError(f"out.{what} does not have the structure of the "
                                 "differentiated argument(s) "
                                 f"{', '.join(self._names[k] for k in self._diff)}")
            for g, i in zip(leaves_k, self._diff_leaves, strict=True):
                results.append((f"out.{what} for argument {self._names[self._leaf_arg[i]]}",
                                g, *self._specs[i]))
            gleaves += leaves_k
        check_results(self._xp, results, self._reads(leaves) + [("v", t) for t in vleaves])
        return gleaves

    # ------------------------------------------- methods of other kinds of plan
    def _computes(self):
        """What this plan computes, and with which method (for error messages)."""
        if self.update is not None:
            return "optimizer steps (plan.step)"
        if self.order == 2:
            return "Hessian-vector products (plan.hvp)"
        return "gradients (plan.gradient)"

    def _refuse(self, method, instead):
        raise TypeError(f"plan.{method}() is not available on this plan: it computes "
                        f"{self._computes()}; for {method} build the plan with {instead}")

    def hessian(self, *args, out=None):
        """Needs a plan built with ``hessian=True`` (:class:`hybridad.plans.higher.HessianPlan`);
        raises TypeError here."""
        self._refuse("hessian", "hybridad.compile(f, ..., hessian=True) (or hybridad.hessian)")

    def linearize(self, *args, out=None):
        """Needs a plan built with ``hessian=True``; raises TypeError here."""
        self._refuse("linearize", "hybridad.compile(f, ..., hessian=True)")

    def jacobian(self, *args, out=None):
        """Needs a plan built with ``jacobian=True`` (:class:`hybridad.plans.higher.JacobianPlan`);
        raises TypeError here."""
        self._refuse("jacobian", "hybridad.compile(f, ..., jacobian=True) (or "
                     "hybridad.jacobian)")

    # ------------------------------------------------------------------ calls
    def gradient(self, *args, out=None, _checked=False):
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
            self._check_stale(args)
        if self._plain and out is not None:
            g = self._fast_args(args, out)
            if g is not None:
                self._call(args, out.value, (g,))
                return out
        return self._run(self._leaves(args), out)

    def _fast_args(self, args, out):
        """The gradient buffer if ``args`` and ``out`` pass every check of
        :meth:`_leaves` and :meth:`_check_out` on the plain-array path; else None
        (the general path then runs and raises the precise error)."""
        if len(args) != len(self._fast_specs) or not isinstance(out, DiffResult):
            return None
        for a, (shape, dtype) in zip(args, self._fast_specs):  # noqa: B905 - lengths checked
            if type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype:
                return None
        v, derivs = out.value, out.derivs
        if not derivs:
            return None
        g = derivs[0]
        gshape, gdtype = self._fast_specs[self._diff_leaves[0]]
        if type(v) is not np.ndarray or v.shape != () or v.dtype not in _FLOATS or \
                type(g) is not np.ndarray or g.shape != gshape or g.dtype != gdtype or \
                not (v.flags.writeable and g.flags.writeable):
            return None
        if np.may_share_memory(v, g):
            return None
        for a in args:
            if np.may_share_memory(v, a) or np.may_share_memory(g, a):
                return None
        return g

    def _fast_path(self):
        """The numba plan's ``gradient`` for arguments of the example's
        structure (arrays, or tuples/lists/dicts of them with the same static
        values) and a :class:`GradientResult` / :class:`DiffResult` of the
        gradient's structure: a small generated function, installed as this
        plan's ``gradient`` attribute -- one Python frame in front of numba.
        The structure is unpacked by generated code (no pytree flattening).

        It hands the compiled plan the arrays themselves (``id(array)``, see
        :mod:`hybridad.backends.numba.rt`), which checks every argument and result
        buffer -- exact ndarray, shape, dtype, native byte order, alignment,
        contiguity, writeable results, no overlaps -- before writing anything.
        Whatever it rejects (other types, staging, the precise error) goes to
        the general path (:meth:`Plan.gradient`)."""
        consts = {}
        arg_leaves, arg_conds = [], []
        n = len(self._treedefs)
        ins = [f"a{i}" for i in range(n)]
        for name, td in zip(ins, self._treedefs, strict=True):
            if not _unpack_source(td, name, arg_leaves, arg_conds, consts):
                return None
        grads, grad_conds = [], []
        if not _unpack_source(self._grad_structure(), "g", grads, grad_conds, consts):
            return None
        check = "".join(f" and {c}" for c in arg_conds + grad_conds)
        wrap = "_id({})" if self._program.objects else "{}"
        jitted, fixed, bound = self._program.parts
        ns = {"_j": jitted, "_lock": self._program.lock, "_id": id, "_GR": GradientResult,
              "_DR": DiffResult, "_general": Plan.gradient, "_stale": self._check_stale,
              "_fref": self._rootref,
              "_plan": self}  # a cycle (plan -> gradient -> plan): the collector frees it
        ns.update(consts)
        ns.update({f"_f{k}": v for k, v in enumerate(fixed)})
        ns.update({f"_c{k}": v for k, v in enumerate(bound)})
        call = "_j(" + ", ".join([f"_f{k}" for k in range(len(fixed))] +
                                 [wrap.format(x) for x in arg_leaves] +
                                 [f"_c{k}" for k in range(len(bound))] +
                                 [wrap.format(x) for x in ["out._value", *grads]]) + ")"
        lines = ["def gradient(*args, out=None):",
                 # what f reads besides its arguments (hybridad.frontend.guards), before any write
                 *(["    _r = _plan._root", "    if _r is None:", "        _r = _fref()",
                    "    if _r is not None and _plan._gcheck(_r, args) is not None:",
                    "        _stale(args)"] if self._guarded else []),
                 f"    if len(args) == {n} and (out.__class__ is _GR or out.__class__ is _DR):",
                 "        d = out._derivs",
                 "        if d:",
                 "            g = d[0]",
                 f"            {''.join(a + ', ' for a in ins)}= args" if ins else
                 "            pass",
                 # the structure checks index into containers: inside the try
                 "            try:",
                 f"                if True{check}:"]
        if self._program.heavy:
            lines += ["                    with _lock:", f"                        {call}"]
        else:
            lines += [f"                    {call}"]
        lines += ["                    return out",
                  "            except (TypeError, ValueError, LookupError):",
                  "                pass  # the general path says why",
                  "    return _general(_plan, *args, out=out, _checked=True)"]
        exec(compile("\n".join(lines) + "\n", f"<hybridad gradient {self.name}>", "exec"),
             ns)  # noqa: S102
        fast = ns["gradient"]
        fast.__doc__ = Plan.gradient.__doc__
        fast.__wrapped__ = Plan.gradient
        fast.source = "\n".join(lines)
        return fast

    def _call(self, leaves, value, gleaves):
        if self.backend == "numba":  # serialized by the program's lock or the GIL
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

    def hvp(self, *args, v, out=None):
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
        if self._guarded:
            self._check_stale(args)
        prog = self._program
        if self._plain and out is not None and type(v) is np.ndarray and \
                not getattr(prog, "blas_limited", True) and \
                self.backend == "numba" and prog.objects and \
                len(args) == len(self._fast_specs) and type(out) in (HvpResult, DiffResult):
            # plain arrays: the compiled program checks them all (exact ndarray,
            # shape, dtype, layout, no overlap) before writing; else the general path
            d = out._derivs
            try:
                ids = [id(a) for a in args] + [id(v), id(out._value), id(d[0]), id(d[1])]
                if not prog.heavy:
                    prog.fn(*ids)
                else:
                    with prog.lock:
                        prog.fn(*ids)
                return out
            except (TypeError, ValueError, IndexError):
                pass  # the general path says why
        leaves = self._leaves(args)
        vleaves = self._tangent_leaves(v)
        if out is None:
            out = self.new_result()
        gleaves = self._check_out(out, leaves, vleaves)
        self._call(leaves + vleaves, out.value, gleaves)
        return out

    def _tangent_leaves(self, v):
        if self._grad_structure() == _tree.LEAF and not _tree.is_array(v):
            v = np.asarray(v, dtype=self._specs[self._diff_leaves[0]][1])  # a list: converted
        try:
            vleaves, td = _tree.flatten(v)
        except TypeError:
            td = None
        if td != self._grad_structure():
            raise ValueError("v must have the structure of the differentiated argument(s) "
                             f"{', '.join(self._names[k] for k in self._diff)}")
        out = []
        for t, i in zip(vleaves, self._diff_leaves, strict=True):
            shape, dtype = self._specs[i]
            _tree.refuse_subclass(t, "v")
            if type(t) is not np.ndarray or t.dtype != dtype:
                t = np.asarray(t, dtype=dtype)
            if t.shape != shape:
                raise ValueError(f"v for argument {self._names[self._leaf_arg[i]]} has shape "
                                 f"{t.shape}; expected {shape}")
            out.append(t)
        return out

    def value(self, *args):
        """The function value at ``args`` as a Python float (forward pass only)."""
        if self._guarded:
            self._check_stale(args)
        leaves = self._leaves(args)
        if self._value_program is None:
            fwd = dead_code_elimination(Graph(self.graph.nodes, self.graph.inputs,
                                              [self._outputs[0]]))
            inputs = [n for n in fwd.inputs if n.attrs["index"] < len(self._specs)]  # (not v)
            nodes = [n for n in fwd.nodes if n.op != "input" or n in inputs]
            self._value_program = self._compile(nodes, inputs, [self._outputs[0]],
                                                "value_program", self._out_specs[:1])
        with self._lock, np.errstate(all="ignore"):
            if self.backend == "numba":
                self._value_program.run(leaves, [self._value_buf])
            else:
                self._value_program.fn(*leaves, self._value_buf)
            return float(self._value_buf)

    # ---------------------------------------------------------------- explain
    def explain(self):
        """Human-readable description of the plan.

        Returns
        -------
        str
            The graph (forward and backward sweeps), each fused region with
            its ops, loop, strategy for its partials (``store``: dual-number
            partials written in the forward sweep; ``recompute``: the body
            evaluated again in the backward sweep) and where they are written
            (an arena slot, in place over a dead operand, or straight into the
            result's gradient buffer), every buffer with its bytes and arena
            offset, the arena's total bytes, and the generated source.
        """
        lines = [f"plan for {self.name}, argnums={self.argnums}", "", "graph:",
                 str(self.graph), ""]
        if self.backend == "numba":
            lines += ["regions:", *self._region_lines(), ""]
        if self.memory_budget is not None:
            lines += [f"memory budget: {self.memory_budget} bytes" + (
                "; every region is recomputed in the backward sweep to fit (no stored "
                "partials)" if self.recomputed_for_budget else "; fits as planned"), ""]
        lines += ["buffers: (live a..b: first and last step of the schedule, the graph's "
                  "node order)", *self._buffer_lines()]
        lines += ["", "generated source:", self._program.source]
        return "\n".join(lines)

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
        out.append(f"total workspace: {mem.total_bytes} bytes (peak); liveness lower bound "
                   f"{mem.lower_bound} bytes; one slot per buffer would take "
                   f"{mem.naive_total} bytes")
        return out

    def memory_profile(self):
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

        nodes = self.graph.nodes
        users = {n.id: [] for n in nodes}
        for n in nodes:
            for a in n.args:
                users[a.id].append(n)
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
            par = "prange" if region_runs_parallel(n) else "serial"
            ins = ", ".join(f"%{a.id}" for a in n.args)
            if mode == "vjp":
                out.append(f"  %{n.id:<4} {n.phase:<8} {ops} over {body.shape} ({par}): "
                           f"recomputed for cotangent x d/d(operand {n.attrs['wrt']}), into "
                           f"{where(n)}")
                continue
            partials = [u for u in users[n.id] if u.op == "region_partial"]
            vjps = [m for m in nodes if m.op == "region" and m.attrs["mode"] == "vjp"
                    and m.attrs["body"] is body]
            how = "store" if partials else "recompute" if vjps else "no partials needed"
            out.append(f"  %{n.id:<4} {n.phase:<8} {ops} over {body.shape} ({par}) of {ins}: "
                       f"value into {where(n)}; partials: {how}")
            for p in partials:
                out.append(f"         d/d%{n.args[p.attrs['wrt']].id} -> %{p.id}: {where(p)}")
        return out or ["  (none)"]

    def __repr__(self):
        if not hasattr(self, "memory"):
            return f"<hybridad.Plan {self.name} (not built)>"
        return (f"<hybridad.Plan {self.name} argnums={self.argnums} "
                f"nodes={len(self.graph.nodes)} workspace={self.memory.total_bytes}B>")


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

    def _build(self, f, args, leaves):
        from ..transforms.batching import vmap

        k = self._batch
        trace = Trace()
        with trace:
            tracers, targs, diff_tracers = self._trace_args(trace, leaves)
            out = self._trace_f(f, targs, trace)
            self._value_dtype = out.dtype
            (x,) = diff_tracers
            (g,) = backward(trace, out, [x], inplace=False)
            xb = trace.input(len(leaves), (k, *x.shape), x.dtype)
            batched = vmap(trace, list(trace.nodes), {x.node.id: xb}, k)
            vb = batched.get(out.node.id)
            if vb is None:  # a value that does not depend on x
                vb = np.broadcast_to(out, (k,)) * 1
            gb = None if g is None else batched.get(g.node.id)
            if gb is None:
                gb = np.zeros_like(xb)
        which = self._diff_leaves[0]
        inputs = [xb.node] + [t.node for i, t in enumerate(tracers) if i != which]
        outputs = [vb.node, gb.node]
        graph = self._lower(trace.nodes, inputs, outputs)
        self._outputs = outputs
        self.memory = self._plan_memory(graph)
        self._buffers = self.memory.allocate(self._xp)
        specs = [((k, *x.shape), x.dtype)] + [s for i, s in enumerate(self._specs)
                                              if i != which]
        self._out_specs = [((k,), self._value_dtype), ((k, *x.shape), x.dtype)]
        self._program = self._compile(graph.nodes, inputs, outputs, "batch_program",
                                      self._out_specs, specs)
        self._quiet = self.backend == "numpy"


_REBUILT = {}  # recipe -> plan, in this process (workers unpickle a plan once)


def _rebuild_plan(f, protos, argnums, backend, parallel):
    """Unpickling a :class:`Plan`: the plan of ``f`` at example arguments of
    the pickled structure, shapes and dtypes (one per process and recipe)."""
    from ..frontend.scalar_functions import fingerprint

    key = (fingerprint(f), repr(protos), argnums, backend, parallel)
    plan = _REBUILT.get(key)
    if plan is None:
        args = tuple(_tree.unflatten(td, [np.zeros(s, d) for s, d in leaves])
                     for td, leaves in protos)
        plan = _REBUILT[key] = Plan(f, args, argnums, backend, parallel=parallel)
    return plan
