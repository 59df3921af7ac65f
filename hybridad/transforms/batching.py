"""Transforms stage: batching, graph to graph (``vmap`` over a leading axis).

A Jacobian or a Hessian needs the same linear map applied to many seeds:
forward mode pushes a chunk of K tangents through the graph at once, reverse
mode pulls K cotangents back.  Rather than running a plan K times, the
seed-dependent part of the graph is re-emitted with a leading axis of length
K on every value that depends on the seeds (a *batched* value); values that
do not (the primal forward pass, the partials) are shared, computed once.
Each op says how it applies to batched operands (``Op.batch``, next to its
other rules in :mod:`hybridad.ops`); the elementwise ops share one rule,
which aligns a batched operand's axes with the result's.  The batched graph
is ordinary IR: the fusion, memory plan and backends handle it like any
other, so a chunk of tangents through a chain of elementwise ops is one
fused loop whose dual numbers carry K partials.
"""

from __future__ import annotations

from ..core.trace import bind
from ..core.tracer import Tracer
from ..ops import REGISTRY
from ..ops import loop as _loop
from ..ops.batch_helpers import contiguous, expand, lift  # noqa: F401  (re-exported)

__all__ = ["contiguous", "elementwise_batch", "expand", "lift", "vmap"]


def elementwise_batch(node, batched, *args, **attrs):
    """The shared rule of elementwise ops: batched operands lifted to the result's rank."""
    rank = len(node.shape)
    lifted = [lift(a, rank) if b else a for a, b in zip(args, batched, strict=True)]
    return bind(node.op, *lifted, **attrs)


def vmap(trace, nodes, batched, k):
    """Re-emit the nodes that depend on batched values with a leading axis of ``k``.

    Parameters
    ----------
    trace : hybridad.core.trace.Trace
        The trace to append the batched nodes to.
    nodes : list of Node
        The graph, in execution order.
    batched : dict
        Node id -> batched :class:`~hybridad.core.tracer.Tracer` (shape ``(k, *node.shape)``)
        for the seeds; extended in place with every node that depends on them.
    k : int
        The batch size.

    Returns
    -------
    dict
        ``batched``.
    """
    for node in nodes:
        if node.id in batched or node.op in ("input", "const"):
            continue
        flags = tuple(a.id in batched for a in node.args)
        if not any(flags):
            continue
        op = REGISTRY[node.op]
        rule = op.batch or (elementwise_batch if op.kind == "elementwise" else None)
        if rule is None:
            raise NotImplementedError(
                f"{node.op!r} cannot be applied to a batch of tangents or cotangents yet "
                "(Jacobians, Hessians); please report the function")
        args = [batched[a.id] if f else Tracer(a, trace)
                for a, f in zip(node.args, flags, strict=True)]
        out = rule(node, flags, *args, **node.attrs)
        if out.shape != (k, *node.shape):
            raise AssertionError(f"batch rule of {node.op} gave shape {out.shape}; expected "
                                 f"{(k, *node.shape)}")
        if out.dtype != node.dtype:
            out = out.astype(node.dtype)
        batched[node.id] = out
    return batched


# the loop primitive's batch rule batches its body with this (hybridad.ops.loop)
_loop.TRANSFORMS.update(vmap=vmap)
