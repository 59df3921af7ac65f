"""The staged plan: one graph, one memory plan and one arena run as several
programs -- the base of :class:`hybridad.plans.hessian.HessianPlan` and
:class:`hybridad.plans.jacobian.JacobianPlan` (how many seeds a chunk takes:
:mod:`.chunks`).

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

A call that runs a chunk program once -- a Hessian or Jacobian of one chunk
-- runs the primal and the chunk as one program (the *whole* program of the
stage, numba): one program compiled and dispatched instead of two.

The primal values the tangent programs read are *pinned* in the memory plan
(alive to the end of the schedule), so the tangent programs can run any
number of times after one primal run: a Hessian is one primal run and
``ceil(n / K)`` chunk runs, and ``HessianPlan.linearize`` followed by
``HessianPlan.hvp`` serves many ``v`` at one point (a Newton-CG or
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

import functools
import warnings
from types import SimpleNamespace
from typing import Any

import numpy as np

from .. import _tree
from ..backends.numba.threshold import serial_loops, work_estimate
from ..core.decisions import DecisionCheck
from ..errors import CompileBudgetError, DecisionsChanged
from ..ir.graph import Graph, check
from ..ops import REGISTRY, may_raise
from ..results import DiffResult
from ..transforms.checkpoint import checkpoint_loops
from ..transforms.remat import recompute_in_stages
from .decided import attach, compile_decisions
from .plan import Plan, _OverBudget, serialized
from .validate import check_results

__all__ = ["StagedPlan", "direct_call", "falls_back"]

def falls_back(method):
    """A public method of a staged plan that, once one of its numba programs
    is over the compile budget (:class:`hybridad.CompileBudgetError`, raised
    before numba starts and before the program writes anything), runs the
    same method of the plan's numpy twin -- this call and every later one."""
    name = method.__name__

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        twin = self._twin
        if twin is None:
            try:
                return method(self, *args, **kwargs)
            except CompileBudgetError as exc:
                twin = self._make_twin(args, exc)
        elif self._guarded:  # the twin runs this plan's graph: this plan's guards decide
            plan = self._check_stale(args if args else getattr(twin, "_point_args", ()),
                                     specialize=True)
            if plan is not self:  # (a call that decides otherwise: its specialization)
                return getattr(plan, name)(*args, **kwargs)
        return getattr(twin, name)(*args, **kwargs)

    return call


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


#: the suffix of a stage's name that asks for its *whole* program: the primal
#: and the stage's nodes compiled as one (see :meth:`StagedPlan._run_whole`)
WHOLE = "+primal"


def direct_call(prog, lean=False, checked=False):
    """``(fn, lead, consts)``: a compiled program called as
    ``fn(*lead, *ids of inputs, *consts, *ids of outputs)`` -- a heavy one
    by its ``invoke`` (its lock and thread count: the whole call), a light
    one by its dispatcher itself, as the gradient's fast path calls it.
    ``lean``: the call that skips the copies of its optional outputs (a
    stage program's primal outputs, see :meth:`StagedPlan._program_for`);
    ``checked``: the call that runs the decision check the program carries
    first (:mod:`hybridad.backends.numba.prelude`)."""
    if prog.heavy:
        return (prog.invoke_lean if lean else prog.invoke_checked if checked else
                prog.invoke), (), ()
    own, lead, consts = prog.lean_parts if lean else prog.checked_parts if checked else \
        prog.parts
    return own, tuple(lead), tuple(consts)


class StagedPlan(Plan):
    """A plan of one primal program and tangent programs over one arena."""

    _plain = False  # (its calls flatten their arguments: Plan's plain-array paths are not its)

    def _concrete(self, trace, leaves):
        """Python decisions on traced values (``if x[0] > 0``) take this call's
        values, guarded (:mod:`hybridad.core.decisions`), when every leaf is a
        numpy array: call before tracing ``f`` into ``trace``."""
        if all(type(a) is np.ndarray for a in leaves):
            trace.concrete = leaves

    def _decided(self, trace):
        """After tracing: the check of the decisions ``f`` took, run before every
        call; a call that decides otherwise runs a specialization of its own
        (:meth:`_routed`)."""
        if trace.decisions:
            self._decision_check = DecisionCheck(trace.decisions)
            self._guarded = True
            if self.backend == "numba" and getattr(self, "memory_budget", None) is None:
                # (kept: the whole program carries it, decided.carried_check)
                self._check_program = compile_decisions(self._decision_check, self._specs,
                                                        self.parallel)
                attach(self._decision_check, self._check_program)

    #: seeds per chunk a memory budget asked for (see :meth:`_build_fits`), or None
    _budget_chunk = None

    def _checkpointed(self, trace, out):
        """After tracing ``out``: whether the graph has loops, and -- a memory
        budget's build (:meth:`Plan._build_within_budget`) -- its loops
        checkpointed on :attr:`checkpoint_levels` levels."""
        self._loops_seen(trace)
        if self.checkpoint_levels:
            (out.node,) = checkpoint_loops(trace, [out.node], self.checkpoint_levels,
                                           outer=self.checkpoint_outer)

    def _seeds_per_chunk(self, default):
        """Seeds per chunk: ``chunk=`` as asked, else what a memory budget
        allows (:attr:`_budget_chunk`), else ``default``."""
        k = self._chunk_request
        if k is None:
            k = default if self._budget_chunk is None else self._budget_chunk
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
            raise ValueError(f"chunk must be a positive int; got {k!r}")
        return int(k)

    def _build_fits(self, f, args, leaves, how, tries):
        """As :meth:`Plan._build_fits`, and then -- ``chunk`` not given --
        fewer seeds per chunk: their batched values grow about linearly with
        the seeds (a Hessian through a loop stores ``chunk`` tangents of every
        carry), so one build of one seed per chunk gives how many fit; the
        most that do are taken (each chunk more runs again the work that does
        not depend on the seeds)."""
        self._budget_chunk = None
        if super()._build_fits(f, args, leaves, how, tries):
            return True
        most, high = self.chunk, tries[-1][1].total_bytes
        if self._chunk_request is not None or most <= 1:
            return False
        self._budget_chunk = 1
        if not super()._build_fits(f, args, leaves, how + ", one seed per chunk", tries):
            return False
        low, budget = self.memory.total_bytes, self.memory_budget
        per_seed = (high - low) / (most - 1)
        k = most - 1 if per_seed <= 0 else int(min(most - 1, (budget - low) // per_seed + 1))
        while k > 1:
            self._budget_chunk = k
            try:
                self._build(f, args, leaves)
                return True
            except _OverBudget:
                k //= 2
        self._budget_chunk = 1
        self._build(f, args, leaves)  # (fits: built above)
        return True

    def _routed(self, args):
        """The plan that serves ``args``: this one, or -- when ``f`` took Python
        decisions on values and ``args`` decide otherwise -- the specialization
        traced for their outcomes (made at the first such call); what ``f``
        reads besides its arguments checked first."""
        return self._check_stale(args, specialize=True)

    def _options_of(self, **options):
        """The constructor's options, for a specialization (Plan's are not a
        staged plan's)."""
        self._options = dict(argnums=self.argnums, backend=self.backend,
                             parallel=self.parallel, poison=self._poison, pack=self._pack,
                             **options)

    def _stage(self, graph, primal_outputs, stages):
        """Order, plan memory for and describe the programs.

        ``stages``: name -> (seed input node, output nodes after the primal ones).
        """
        nodes = graph.nodes
        dependent = {name: _dependents(nodes, [seed.id]) for name, (seed, _) in stages.items()}
        tangent = set().union(*dependent.values())
        if self.backend == "numba":  # (regions of the arguments: recomputed, not kept)
            nodes = recompute_in_stages(nodes, tangent, graph.outputs)
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
        if self.memory_budget is not None and self.memory.total_bytes > self.memory_budget:
            raise _OverBudget(self.memory)  # (before anything is allocated or compiled)
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

    _twin = None  # the numpy plan serving the calls once a program is over budget
    _KEEPS_RECORDING = True  # until every program compiled (see _program_for)

    def _numpy_fallback(self, hvp, update):
        return True

    def _make_twin(self, args, exc):
        f = self._f()
        if f is None or not args or (self._recording is None and self._decision_check is None):
            raise exc  # (hvp(v=...) at a linearized point: no arguments)
        if self._decision_check is not None:  # (traced again: a recording holds no decisions;
            # args decide as this plan did -- they were routed here)
            self._twin = type(self)(f, args, **dict(self._options, backend="numpy"))
        else:
            self._twin = self._remake(f, args, "numpy")
        self._recording = None
        self._tier_error = exc
        warnings.warn(f"hybridad: {exc}; the plan runs its numpy reference program from now "
                      "on (no compile, no allocation per call; slower than compiled code)",
                      RuntimeWarning, stacklevel=3)
        return self._twin

    def _program_for(self, name):
        """The compiled program of a stage (compiled at its first use)."""
        prog = self._programs.get(name)
        if prog is None:
            inputs = [n for n in self.graph.inputs if n.attrs["index"] < len(self._specs)]
            with serial_loops(self._loops_serial):
                if name == "primal":
                    prog = self._compile(self._primal_nodes, inputs, self._primal_outputs,
                                         f"{self._kind}_primal", self._primal_specs)
                elif name.endswith(WHOLE):  # the primal and a stage as one program
                    stage = name[:-len(WHOLE)]
                    seed, body, _, outs = self._stages[stage]
                    prog = self._compile(body, [*inputs, seed], [*self._primal_outputs, *outs],
                                         f"{self._kind}_{stage}_whole",
                                         self._primal_specs + self._stage_specs[stage],
                                         self._specs + [(seed.shape, seed.dtype)])
                else:  # (the primal outputs' copies optional: a linearized H v skips them)
                    seed, body, given, outs = self._stages[name]
                    prog = self._compile(body, [*inputs, seed], [*self._primal_outputs, *outs],
                                         f"{self._kind}_{name}",
                                         self._primal_specs + self._stage_specs[name],
                                         self._specs + [(seed.shape, seed.dtype)], given,
                                         optional_outputs=tuple(range(len(
                                             self._primal_outputs))))
            self._programs[name] = prog
            if len([k for k in self._programs if not k.endswith(WHOLE)]) > len(self._stages) and \
                    getattr(self, "_fused", False) is not None:  # every program compiled
                self._recording = None  # (and a Hessian plan's fused HVP plan made)
        return prog

    def _run_program(self, name, leaves, outs):
        prog = self._program_for(name)
        if self.backend == "numba" and prog.objects and not self._can_fail(name):
            try:  # its compiled checks refuse anything to stage before it writes
                prog.call(leaves, outs)
                return
            except (TypeError, ValueError):
                pass  # (another dtype, a strided view, a subclass: staged below)
        with np.errstate(all="ignore"):
            if self.backend == "numba":
                prog.run(leaves, outs)
            else:
                with self._lock:
                    prog.fn(*leaves, *outs)

    def _run_whole(self, name, leaves, outs):
        """The primal program and then stage ``name``'s, as one compiled program:
        for a call that runs the stage once (a Hessian or Jacobian of one
        chunk), which then compiles and runs one program where it would run
        two (each with its loop bodies: an RK4 loop's Hessian compiles five
        functions instead of six, and a call dispatches once).  Numba only;
        the primal program runs first elsewhere.  It writes the arena's
        pinned values as the primal program would.  ``leaves``: the arguments'
        and then the stage's seed."""
        if self.backend != "numba":
            self._run_program("primal", leaves[:len(self._specs)],
                              outs[:len(self._primal_outputs)])
            self._run_program(name, leaves, outs)
            return
        self._run_program(name + WHOLE, leaves, outs)

    def _one_chunk_fast(self, general, result_cls, n_derivs, make_seed):
        """``general`` (a method running the chunk program once: a dense
        Hessian, a reverse Jacobian of one chunk) with a fast path in front on
        the numba backend: plain array arguments and a ``result_cls`` of exact
        arrays go to the compiled whole program (:meth:`_run_whole`) on the
        ``id``s of the arguments, the unit seeds (``make_seed()``, made once and
        kept) and ``out``'s value and ``n_derivs`` derivative buffers, under the
        plan's lock, with none of the general path's Python -- the program
        checks every array (exact ndarray, shape, dtype, layout, writeable
        results, no overlaps) before it writes.  A plan that decides on values
        runs its compiled decision check first -- inside the whole program
        where it carries it, else as a call of its own (:mod:`.decided`: it
        raises when a decision changed, and the call then takes ``general``,
        which routes it); anything else -- no compiled check, any call a check turns down
        -- takes ``general``.  The entry is taken after the general path
        compiled the program, and held with the programs it was made for."""
        lock, plan, name = self._lock, self, "chunk" + WHOLE
        unpack = self._leaves_of()
        state = [None]  # (programs, the program's call, leading and trailing arguments, seed)

        def _entry():
            programs = plan._programs
            prog = programs.get(name)
            if prog is None or not prog.objects or plan._can_fail(name):
                return
            check = plan._decision_check
            carried = check is not None and prog.checked_parts is not None
            if check is not None and not carried and check.program is None:
                return  # (the reference check alone: the general path)
            state[0] = (programs, *direct_call(prog, checked=carried), make_seed(), carried)

        @functools.wraps(general)
        def call(*args, out=None):
            st = state[0]
            if st is not None and out.__class__ is result_cls and plan._twin is None:
                programs, fn, lead, consts, seed, carried = st
                check = plan._decision_check  # (with a compiled check: _entry made state)
                if plan._programs is programs:
                    if plan._guarded:
                        plan._check_reads(args)
                    # the leaves of args of the plan's structure (checked by the program)
                    leaves = unpack(args)
                    d = out._derivs
                    ids = None if leaves is None else [id(a) for a in leaves]
                    if ids is not None and len(d) == n_derivs and \
                            (check is None or carried or check.compiled(leaves)):
                        with lock:
                            try:  # (a carried check raises before the program writes)
                                fn(*lead, *ids, id(seed), *consts, id(out._value),
                                   *[id(b) for b in d])
                                plan._at_point = False
                                return out
                            except (TypeError, ValueError, DecisionsChanged):
                                pass
            result = general(plan, *args, out=out)
            if state[0] is None:
                _entry()
            return result

        return call

    def _check_reads(self, args):
        """What ``f`` reads besides its arguments, checked as the gradient's fast
        path checks it (a change retraces: :meth:`_check_stale`)."""
        r = self._root
        if r is None:
            r = self._rootref()
        if r is not None and self._gcheck(r, args) is not None:
            self._check_stale(args)

    @property
    def _primal_raises(self):
        """Whether the primal program can fail at run time (after writing)."""
        got = vars(self).get("_primal_raises_")
        if got is None:
            got = self._primal_raises_ = any(may_raise(n) for n in self._primal_nodes)
        return got

    def _can_fail(self, name):
        """Whether program ``name`` has an op that can fail after writing (LAPACK's
        solve...): its errors must not be taken for a refused argument."""
        if name == "primal":
            return self._primal_raises
        if name.endswith(WHOLE):
            return self._primal_raises or self._raises[name[:-len(WHOLE)]]
        return self._raises[name]

    def _staging(self, key, shape, dtype):
        """A buffer of the plan's for results of a call whose programs can fail
        (see the module docstring): made once per key and shape."""
        buf = self._staged_results.get((key, shape))
        if buf is None:
            buf = self._staged_results[(key, shape)] = self._xp.zeros(shape, dtype)
        return buf

    def _deliver(self, bufs, targets):
        """Copy what a call computed into plan buffers (``targets``, see
        :meth:`_staging`) to the caller's ``bufs``, once every program ran."""
        for b, t in zip(bufs, targets, strict=True):
            if t is not b:
                self._xp.copyto(b, t)

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
            td = None if isinstance(self.argnums, tuple) else self._treedefs[self.argnums]
            got = f"argnums={self.argnums!r}" if td is None else \
                f"argument {self._names[self.argnums]}, a {td[0]} of " \
                f"{_tree.count_leaves(td)} array(s)"
            raise TypeError(f"{what} differentiates one array argument (argnums an int, the "
                            f"argument an array); got {got}. Flatten a structure into one "
                            "array (np.concatenate of its raveled leaves) to take its Hessian "
                            "or Jacobian")
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
    def value(self, *args: Any) -> Any:
        """The function value at ``args`` (a float; for a Jacobian plan an array)."""
        if self._guarded:
            plan = self._routed(args)
            if plan is not self:
                return type(plan).value(plan, *args)
        leaves = self._leaves(args)
        self._at_point = False  # (a Hessian plan's arena no longer holds the linearized point)
        buf = self._xp.zeros(*self._primal_specs[0])
        outs = [buf] + [self._xp.zeros(s, d) for s, d in self._primal_specs[1:]]
        self._run_program("primal", leaves, outs)
        return float(buf) if buf.shape == () else buf

    def explain(self) -> str:
        lines = [super().explain(), "", "programs:"]
        lines.append(f"  primal: {len(self._primal_nodes)} nodes, run once per point")
        for name, (seed, body, given, _) in self._stages.items():
            lines.append(f"  {name}: {len(body) - len(given)} nodes on seed %{seed.id} "
                         f"{list(seed.shape)}, reading {len(given)} pinned primal buffers")
        if self.backend == "numba":
            lines.append("  a call that runs the chunk program once (a Hessian or Jacobian of one "
                         "chunk) runs it with the primal, compiled as one program")
        if self._budget_chunk is not None:
            lines.append(f"  {self._budget_chunk} seed(s) per chunk, fewer than by default, to "
                         "fit the memory budget")
        comp = getattr(self, "_compression", None)
        if comp is not None:
            n = self._n
            lines.append(f"  hessian: one chunk run on {comp.colors} colored seeds (the Hessian's "
                         f"structural sparsity: {comp.nnz} of {n * n} entries), scattered into "
                         "the dense result (hybridad.sparse.dense)")
        return "\n".join(lines)
