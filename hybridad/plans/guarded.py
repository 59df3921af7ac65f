"""A plan against what ``f`` reads besides its arguments: tracing under
:func:`hybridad.frontend.observe.observe`, and the check before every call
(re-trace, rebuild, or :class:`~hybridad.errors.StalePlanError`)."""

from __future__ import annotations

import types
import warnings

import numpy as np

from ..errors import RetraceWarning, StalePlanError
from ..frontend.guard_walk import build_guards
from ..frontend.guards import captured_ids
from ..frontend.observe import observe
from ..frontend.signature import signature
from ..frontend.trace import Trace
from .arguments import _static_paths

__all__ = ["GuardsMixin"]

#: re-traces of one plan after which :class:`~hybridad.errors.RetraceWarning` is issued
RETRACE_WARN = 3


class GuardsMixin:
    """Methods of :class:`hybridad.plans.plan.Plan` (a mixin)."""


    def _trace_f(self, f, targs, trace):
        """``f(*targs)`` in ``trace``, observed: the output checked, and the plan's
        guards and graph signature set (see :mod:`hybridad.frontend.guards`)."""
        out, self.guards, self._signature = self._observe_f(f, targs, trace)
        self._guarded = self.guards.count > 0
        self._gcheck = self.guards._check  # the compiled check (generated fast paths)
        return out


    def _observe_f(self, f, targs, trace):
        """``(output, guards, signature)`` of ``f(*targs)`` traced into ``trace``
        under :func:`hybridad.frontend.observe.observe`."""
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
