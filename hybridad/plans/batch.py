"""Many small problems in one call: :meth:`BatchMixin.gradient_batch` and the
batched build of a :class:`~hybridad.plans.plan.BatchPlan` (the gradient graph
re-emitted with a leading batch axis by :func:`hybridad.transforms.batching.vmap`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..results import BatchGradientResult

import numpy as np

from .. import _tree
from ..core.trace import Trace
from ..results import BatchGradientResult, DiffResult
from ..transforms.autodiff import backward
from .validate import check_results
from .validate import describe as _describe
from .validate import is_buffer as _is_buffer

__all__ = ["BatchMixin", "build_batched"]


def build_batched(self, f, args, leaves):
    """``BatchPlan._build``: trace the value-and-gradient graph for one input,
    then re-emit it with a leading axis of ``self._batch``
    (:func:`hybridad.transforms.batching.vmap`)."""
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
        if gb is None:  # a gradient that does not depend on x (f linear in x): each row's
            gb = np.zeros_like(xb) if g is None else np.broadcast_to(g, xb.shape) * 1
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


class BatchMixin:
    """Methods of :class:`hybridad.plans.plan.Plan` (a mixin)."""


    def gradient_batch(self, X: Any, *args: Any, out: BatchGradientResult | None = None
                       ) -> BatchGradientResult:
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
        if self.update is not None or self.order != 1 or \
                getattr(self, "_kind", None) is not None:  # (Hessian and Jacobian plans)
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
        full = list(args)  # the structure and the other arguments, checked
        full.insert(self.argnums, X[0] if len(X) else self._xp.zeros(shape, dtype))
        if self._guarded:
            self._check_stale(tuple(full))
            if self.guards is not getattr(self, "_batch_guards", None):  # re-traced: the
                self._batch_plans.clear()  # batch plans' graphs are rebuilt from f as it is
                self._batch_guards = self.guards
        leaves = self._leaves(tuple(full))
        k = X.shape[0]
        if out is None:
            out = BatchGradientResult(X, dtype=self._value_dtype)
        if not isinstance(out, DiffResult) or not out.derivs:
            raise ValueError("out must be a BatchGradientResult or DiffResult(values, gradients); "
                             f"got {_describe(out)}")
        v, g = out.value, out.derivs[0]
        rest = [a for i, a in enumerate(leaves) if i != self._diff_leaves[0]]
        check_results(self._xp, [("out.value (the values)", v, (k,), None),  # (any float:
                                 # BatchGradientResult(X) of a float32 X whose f promotes
                                 # to float64, as a point's GradientResult(x): converted)
                                 ("out.gradient (the gradients)", g, X.shape, dtype)],
                      [("X", X)] + self._reads(rest, skip=self._diff_leaves[0]))
        if k == 0:  # no point: empty values and gradients (nothing to compile or run)
            return out
        with self._lock:  # one batch plan per B, built once
            plan = self._batch_plans.get(k)
            if plan is None:
                f = self._f()
                if f is None:
                    raise RuntimeError(f"{self.name} no longer exists: build a new plan")
                example = list(full)
                example[self.argnums] = np.zeros(shape, dtype)
                plan = self._batch_plans[k] = self._batch_plan_type(
                    f, tuple(example), self.argnums, self.backend, batch=k,
                    parallel=self.parallel)
        plan._call([X, *rest], v, [g])
        return out
