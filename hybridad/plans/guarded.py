"""A plan against what ``f`` reads besides its arguments: tracing under
:func:`hybridad.core.observe.observe`, and the check before every call
(re-trace, rebuild, or :class:`~hybridad.errors.StalePlanError`)."""

from __future__ import annotations

import types
import warnings
import weakref

import numpy as np

from ..errors import RetraceWarning, StalePlanError, TracingError, code_line, is_user_file
from ..core.decisions import MAX_SPECIALIZATIONS, decided_nodes
from ..frontend.guard_walk import build_guards, drew_from, random_states
from ..frontend.guards import _same_content, _snapshot, captured_ids
from ..frontend.numpy_made import traced_again
from ..core.observe import observe
from ..frontend.signature import signature
from ..core.trace import Trace
from ..transforms import rolling
from .arguments import _static_paths
from .recording import record

__all__ = ["GuardsMixin", "compiled_code_refusal"]

#: how compiled extensions refuse an argument type they were not built for:
#: Cython's fused-type dispatch and typed arguments, pybind11, nanobind
_EXTENSION_MESSAGES = ("ambiguous argument types", "No matching signature found",
                       "incompatible function arguments", "has incorrect type",
                       "Cannot convert", "incompatible function argument")
_EXTENSION_SUFFIXES = (".pyx", ".pxd", ".pxi")


def _cython(tb):
    """Whether traceback entry ``tb`` is Cython's (its .pyx source, or the
    ``<stringsource>`` of its generated helpers: memoryviews, fused dispatch)."""
    name = tb.tb_frame.f_code.co_filename
    return name.endswith(_EXTENSION_SUFFIXES) or name == "<stringsource>"


def compiled_code_refusal(exc):
    """A :class:`~hybridad.errors.TracingError` for ``exc``, a TypeError raised
    by compiled code (Cython, pybind11) that was handed a traced array, naming
    the function and the ways out; None for any other TypeError."""
    frames, tb = [], exc.__traceback__
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    mine = None  # the innermost line of the user's code
    for k, t in enumerate(frames):
        if is_user_file(t.tb_frame.f_code.co_filename) and not _cython(t):
            mine = k
    cython = [t for t in frames[(mine or 0):] if _cython(t)]
    text = str(exc)
    if not cython and not any(m in text for m in _EXTENSION_MESSAGES) and \
            "'Tracer'" not in text:
        return None
    at = "<unknown location>" if mine is None else \
        code_line(frames[mine].tb_frame.f_code.co_filename, frames[mine].tb_lineno)
    if cython:
        code = cython[0].tb_frame.f_code
        name, where = code.co_name, f" ({code.co_filename})"
    else:
        name, where = text.split("(")[0].strip() or "a compiled function", ""
    return TracingError(
        f"{name}{where} is compiled code (Cython, pybind11 or C) and was called on a traced "
        f"array at {at}: compiled code cannot be traced (it said: {text}). "
        "Call it on values -- outside the differentiated function, or on arrays that do not "
        "depend on the arguments you differentiate -- or give hybridad the law and its "
        "derivative: an elementwise law as scalar Python with @hybridad.elementwise, anything "
        "else written with numpy.")

#: re-traces of one plan after which :class:`~hybridad.errors.RetraceWarning` is issued
RETRACE_WARN = 3


class GuardsMixin:
    """Methods of :class:`hybridad.plans.plan.Plan` (a mixin)."""

    #: the check of the plan's Python decisions on values, or None; the plans
    #: made for other outcomes (:meth:`_specialized`)
    _decision_check = None
    _specializations = ()
    _specialized_count = 0
    #: the plan this one is a specialization of (a weak reference), or None
    _owner = None


    #: the :class:`~hybridad.plans.recording.Recording` this plan is built from
    #: instead of calling ``f`` (a second program of its owner), or None
    _replay = None
    #: whether :meth:`_trace_f` keeps a recording of the trace (``_recording``)
    _records = False
    _recording = None
    #: whether its traces roll their loops (``HYBRIDAD_ROLL`` when it was built)
    _rolls = True

    @classmethod
    def _from_recording(cls, recording, *args, **kwargs):
        """A plan of this class built from ``recording`` (``f`` is not called;
        ``args``, ``kwargs``: the constructor's).  It has no guards of its own:
        its owner checks them before every call it forwards."""
        plan = cls.__new__(cls)
        plan._replay = recording
        plan.__init__(*args, **kwargs)
        return plan

    def _remake(self, f, args, backend):
        """This plan again for ``backend``, built from its recording
        (:mod:`hybridad.plans.recording`): ``f`` is not called.  The second
        program of a tiered plan or of one over the compile budget, within
        the plan's ``memory_budget`` (a numpy program that does not fit it
        raises :class:`~hybridad.MemoryBudgetError`); staged plans give their
        own options."""
        return type(self)._from_recording(self._recording, f, args, self.argnums,
                                          backend=backend, parallel=self.parallel,
                                          tiered=False, memory_budget=self.memory_budget)

    def _trace_f(self, f, targs, trace):
        """``f(*targs)`` in ``trace``, observed: the output checked, and the plan's
        guards and graph signature set (see :mod:`hybridad.frontend.guards`);
        for a plan made :meth:`_from_recording`, the recorded graph instead."""
        replay = self._replay
        if replay is not None:
            self.guards, self._signature = replay.guards, replay.signature
            self._guarded = False
            self._gcheck = self.guards._check
            return replay.emit(trace)
        self._rolls = rolling.enabled()  # (kept: a retrace rolls as this trace did)
        out, self.guards, self._signature = self._observe_f(f, targs, trace)
        self._guarded = self.guards.count > 0
        self._gcheck = self.guards._check  # the compiled check (generated fast paths)
        if self._records:  # before the backend's passes rewrite nodes in place
            self._recording = record(trace, out, self.guards, self._signature)
        return out


    def _observe_f(self, f, targs, trace):
        """``(output, guards, signature)`` of ``f(*targs)`` traced into ``trace``
        under :func:`hybridad.core.observe.observe`, its loops rolled
        (:func:`hybridad.transforms.rolling.roll_loops`; the signature is the
        rolled graph's: a few nodes where the trace held a loop's 10^5)."""
        trace.composites = True  # (one node a matrix-vector product while rolled)
        states = random_states(f)  # (the generators f can draw from: numpy's own
        # methods, which no profiler sees; np.random's functions: observe's check)
        with observe(self.name) as obs:
            try:
                # arrays f makes and fills with traced values: traced on a second try
                out = traced_again(lambda: f(*targs), trace)
            except TypeError as exc:
                refusal = compiled_code_refusal(exc)
                if refusal is None:
                    raise
                raise refusal from exc
            except SystemError as exc:  # compiled code that called back into Python
                inner = exc.__cause__ or exc.__context__  # (scipy.optimize.brentq's f)
                if not isinstance(inner, TracingError):
                    raise
                raise TracingError(f"{inner} (raised in a Python function that compiled code "
                                   f"called on a traced value: {exc})") from exc
        drawn = drew_from(states)
        if drawn is not None:
            raise TracingError(
                f"{self.name} draws from a {type(drawn).__name__} ({drawn!r}) while it is "
                "traced: its numbers change from call to call without depending on f's inputs, "
                "and a plan records one trace, so every later call would reuse this one draw. "
                "Draw the numbers outside f and pass them in as an argument, e.g. f(x, noise) "
                "(a generator made inside f from a fixed seed draws the same numbers at every "
                "call, and is fine)")
        out = self._check_output(out, trace)
        static, captured = _static_paths(self._treedefs), trace.captured()
        self._observed = (static, obs, captured)  # (guards made again by _pin_values)
        guards = build_guards(f, static, obs, self._unpinned(captured))
        if self._rolls:  # (a decision's values stay as traced: its check reads them)
            fixed = {n.id for n in decided_nodes(trace.decisions)}
            (out.node,) = rolling.roll_loops(trace, [out.node], fixed)
        trace.lower_composites()
        return out, guards, signature(trace.nodes, [out.node], captured_ids(guards))


    #: ``(array, snapshot)`` of the captured arrays whose values the plan's
    #: structure was made from (a sparsity pattern's zeros): see :meth:`_pin_values`
    _pinned = ()

    def _unpinned(self, captured):
        """``captured`` (the arrays the graph reads by reference) less the pinned
        ones: those the guards compare by content."""
        ids = {id(a) for a, _ in self._pinned}
        return [a for a in captured if id(a) not in ids] if ids else captured

    def _pin_values(self, found, f):
        """Make the plan's structure depend on the values of ``found`` (``{id:
        array}`` from :func:`hybridad.frontend.guards.values_read`: the captured
        arrays a sparsity pattern read the zeros of): their contents are
        guarded before every call (a large array's too), and a change is a new
        graph -- :class:`~hybridad.errors.StalePlanError` for this plan, a
        rebuild for the convenience functions -- not a plan silently
        computing with the old pattern."""
        observed = getattr(self, "_observed", None)
        if not found or observed is None:
            return
        static, obs, captured = observed
        owners = {id(a): a for a in captured}
        pinned = {}
        for a in found.values():
            while isinstance(a, np.ndarray) and id(a) not in owners:
                a = a.base  # (a view of an array f captured: that array)
            if isinstance(a, np.ndarray):
                pinned[id(a)] = a
        held = {id(b) for b, _ in self._pinned}
        new = [a for k, a in pinned.items() if k not in held]
        if not new:
            return
        self._pinned = tuple(self._pinned) + tuple((a, _snapshot(a)) for a in new)
        self.guards = build_guards(f, static, obs, self._unpinned(captured))
        self._guarded = self.guards.count > 0
        self._gcheck = self.guards._check

    def _stale_reason(self, args):
        """None, or what changed since ``f`` was traced (without re-tracing)."""
        root = self._root if self._root is not None else self._rootref()
        if root is None or not self._guarded:  # f is gone: nothing can change its state
            return None
        return self.guards.check(root, args)


    def _check_stale(self, args, specialize=False, decisions=True):
        """Before a call: if what ``f`` reads changed since it was traced, trace
        it again; the plan keeps running when the graph came out the same, and
        raises :class:`~hybridad.errors.StalePlanError` otherwise.  Then, for a
        plan whose trace decided on values (:mod:`hybridad.core.decisions`),
        returns the plan whose decisions hold for ``args`` (``specialize``:
        this one or another specialization, built on first need); without
        ``specialize`` a call that decides otherwise raises
        :class:`~hybridad.errors.TracingError`; ``decisions=False``: the
        caller checks them (its program carries their check).  Returns the
        plan to run."""
        root = self._root if self._root is not None else self._rootref()
        if root is not None:  # (f gone: nothing can reach its closure any more)
            why = self.guards.check(root, args)
            if why is not None:
                self._revalidate(root, args, why)
        if self._decision_check is None or not decisions:
            return self
        return self._specialized(args, specialize)

    def _route_decisions(self, leaves, compiled=True):
        """For the generated fast path: None when this plan's decisions hold
        for the leaf arrays ``leaves``; else the specialization made before
        whose decisions hold (the most recent first), or False (the general
        path makes one).  ``compiled=False``: the compiled check of the
        decisions failed on ``leaves``; a specialization whose compiled check
        passes then runs before any reference check is made (a call that
        alternates between two outcomes pays two compiled checks, no numpy),
        else the reference checks decide (see
        :meth:`~hybridad.core.decisions.DecisionCheck.first_failing`)."""
        if not compiled:
            for plan in reversed(tuple(self._specializations)):
                check = plan._decision_check
                if check is not None and check.compiled is not None and \
                        check.compiled(leaves):
                    return plan
        if self._decision_check.first_failing(leaves, compiled) is None:
            return None
        plan = self._specialization_for(leaves, compiled)
        return False if plan is None else plan

    def _specialization_for(self, leaves, compiled=True, full=False):
        """The specialization made before whose decisions hold for ``leaves``,
        the most recently used first; None.  ``compiled=False``: their compiled
        checks already failed on ``leaves`` (:meth:`_route_decisions`);
        ``full``: their lazy decisions are checked too."""
        for plan in reversed(tuple(self._specializations)):
            check = plan._decision_check
            if check is None or check.first_failing(leaves, compiled, full) is None:
                return plan
        return None

    def _after_failure(self, args, exc):
        """The plan to run a call with whose program raised ``exc`` (a
        LinAlgError): where an op that succeeded inside a ``try`` of ``f``
        fails at this call (the decisions checked in full, lazy ones too), the
        specialization whose decisions hold -- traced now if needed: ``f``'s
        ``except`` runs, as on numpy arrays; else ``exc`` propagates (a
        failure ``f`` does not catch, as numpy's)."""
        check = self._decision_check
        if check is None or not check.lazy or \
                check.first_failing(self._leaves(args), full=True) is None:
            raise exc
        owner = None if self._owner is None else self._owner()
        return (self if owner is None else owner)._specialized(args, True, full=True)

    def _specialized(self, args, specialize, full=False):
        """The plan whose decisions on values hold for ``args``: this one, a
        specialization made before (moved to the end: most recently used), or
        a new one (the least recently used dropped beyond
        :data:`MAX_SPECIALIZATIONS`).  ``full``: the lazy decisions are
        checked too (:meth:`_after_failure`)."""
        leaves = args if self._plain and all(type(a) is np.ndarray for a in args) else \
            self._leaves(args)  # (plain arrays are the leaves: no flattening)
        if len(leaves) != len(self._specs) or any(
                getattr(a, "shape", None) != s or getattr(a, "dtype", None) != d
                for a, (s, d) in zip(leaves, self._specs, strict=True)):
            return self  # (not this plan's arguments: its own checks say why)
        failed = self._decision_check.first_failing(leaves, full=full)
        if failed is None:
            return self
        with self._guard_lock:
            plan = self._specialization_for(leaves, full=full)
            if plan is not None:  # (moved to the end: most recently used)
                self._specializations.remove(plan)
                self._specializations.append(plan)
                return plan
            if not specialize:
                raise TracingError(
                    f"{self.name}: this call decides otherwise than the traced one "
                    f"({failed!r}, evaluated on this call's arguments), and this kind of call "
                    "has one specialization; use plan.gradient / hvp / value, or make the "
                    "decision with np.where")
            f = self._f()
            if f is None:
                raise TracingError(f"{self.name}: this call decides otherwise ({failed!r}) "
                                   "and the function is gone: it cannot be traced again")
            plan = type(self)(f, args, **self._options)
            plan._root, plan._owner = self._root, weakref.ref(self)
            self._specializations.append(plan)
            self._specialized_count += 1
            if len(self._specializations) >= MAX_SPECIALIZATIONS:
                self._specializations.pop(0)
            if self._specialized_count == RETRACE_WARN:
                warnings.warn(
                    f"hybridad: {self.name} was traced for {RETRACE_WARN + 1} outcomes of its "
                    f"Python decisions on values; the latest that changed: {failed!r}. Each "
                    f"new outcome traces and compiles (a plan keeps {MAX_SPECIALIZATIONS}, the "
                    "least recently used dropped); np.where makes one graph of both "
                    "branches.", RetraceWarning, stacklevel=5)
            return plan

    def _revalidate(self, root, args, why):
        with self._guard_lock:
            if self.guards.check(root, args) is None:  # another thread did it
                return
            trace = Trace()
            stand_ins = [types.SimpleNamespace(shape=s, dtype=np.dtype(d))
                         for s, d in self._specs]
            f = root if self._method_func is None else types.MethodType(self._method_func, root)
            if self._decision_check is not None:  # its decisions take the call's values
                trace.concrete = self._leaves(args)
            with trace:
                _, targs, _ = self._trace_args(trace, stand_ins)
                _, guards, sig = self._observe_f(f, targs, trace)
            changed = next((a for a, snap in self._pinned if not _same_content(a, snap)),
                           None)
            if sig != self._signature or changed is not None:
                how = "f now traces to a different graph" if changed is None else \
                    "the derivative's sparsity pattern was read from those values"
                raise StalePlanError(
                    f"{self.name}: {why}, and {how}: this plan "
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
