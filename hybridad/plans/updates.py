"""Optimizer steps fused into the backward sweep: the update emitted as IR
(:meth:`UpdatesMixin._emit_update`) and :meth:`UpdatesMixin.step`."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from .. import _tree
from ..results import DiffResult
from .validate import check_results
from .validate import describe as _describe
from .validate import writeable as _writeable

__all__ = ["UpdatesMixin"]


class UpdatesMixin:
    """Methods of :class:`hybridad.plans.plan.Plan` (a mixin)."""


    def step(self, *args: Any, out: Any = None) -> Any:
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
        for k in self._diff:  # (a number or a list of numbers would be converted into a
            # new array: its update lost)
            if k < len(args) and _not_arrays(args[k]):
                raise ValueError(f"parameter {self._names[k]} is updated in place: it must be "
                                 "a writeable, C-contiguous array (or a tuple, list or dict "
                                 f"of them); got {_kind(args[k])}")
        leaves = self._leaves(args)
        for i in self._diff_leaves:
            a = leaves[i]
            if not (isinstance(a, self._xp.ndarray) and a.flags.c_contiguous and
                    _writeable(a)):
                raise ValueError(f"parameter {self._leaf_name(i)} is updated in "
                                 "place: it must be a writeable, C-contiguous array")
        if out is None:
            out = DiffResult(self._xp.zeros((), self._value_dtype))
        elif not isinstance(out, DiffResult):
            raise ValueError("out must be a DiffResult or GradientResult with a writeable "
                             f"0-d floating-point value buffer; got {_describe(out)}")
        # the parameters are written too: no overlap with each other, out or the rest
        params = [(f"parameter {self._leaf_name(i)}", leaves[i], *self._specs[i])
                  for i in self._diff_leaves]
        check_results(self._xp, [("out.value", out.value, (), None)] + params,
                      [(f"argument {self._leaf_name(i)}", a)
                       for i, a in enumerate(leaves) if i not in self._diff_leaves])
        extra = self._state + ([self._hyper] if self._hyper.size else [])
        with self._lock:  # the step count, the rule's state and the call: one step
            for i, h in enumerate(self.update.hyper(self._steps + 1)):
                self._hyper[i] = h  # scalar writes: no array made
            self._call(leaves + extra, out.value, [])
            self._steps += 1  # (a failed step changed nothing, the count included)
        return out


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


def _not_arrays(obj):
    """Whether a parameter holds something other than arrays (a number, a list
    of numbers) where its arrays would be: converted, it is a new array."""
    if _tree.is_array(obj):
        return False
    if type(obj) in (tuple, list):
        return any(_not_arrays(o) for o in obj) or not obj
    if type(obj) is dict:
        return any(_not_arrays(o) for o in obj.values()) or not obj
    return True


def _kind(obj):
    """What a parameter is, in a message: ``a number (float)``, ``a list
    holding a float``."""
    if isinstance(obj, (numbers.Number, np.generic)):
        return f"a number ({type(obj).__name__})"
    inner = obj.values() if type(obj) is dict else obj if type(obj) in (tuple, list) else ()
    bad = next((o for o in inner if _not_arrays(o)), None)
    return f"a {type(obj).__name__}" + ("" if bad is None else f" holding {_kind(bad)}")
