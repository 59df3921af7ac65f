"""Transforms stage: the autodiff transform, graph to graph.

The reverse pass is *emitted as IR* into the same trace: each primitive's VJP
rule is written with numpy calls on tracers, so the backward nodes are
ordinary nodes that every later stage (memory plan, backends, and later
forward-over-reverse Hessians) handles like the forward ones.

* **Activity analysis**: only nodes that depend on a differentiated input
  (forward) and that the output depends on (backward) get adjoints; constant
  arguments cost no derivative work.  Zero adjoints stay symbolic (absent).
* **In-place accumulation**: the first contribution to an adjoint becomes it;
  later ones are added into it as they arrive (``iadd`` / ``scatter_add``,
  in place) -- never a list of temporaries summed at the end.  A contribution
  is only written into if it is *exclusive*: a fresh buffer created for this
  one adjoint (not the incoming cotangent, a forward value, or a broadcast).
* Cotangents larger than their operand (broadcasting) are summed back over the
  broadcast axes, and cast back to the operand's dtype.
* **Forward mode** (:func:`jvp`): each op's tangent rule (``Op.jvp``) pushes
  tangents through a graph, emitted as IR too.  Over the forward graph it
  gives Jacobian-vector products; over the forward *and* backward graph it
  gives Hessian-vector products (forward over reverse).  The reverse pass is
  then emitted *functional* (``inplace=False``: sums instead of in-place
  accumulation), because the tangent pass reads every value the reverse pass
  produced, and an in-place update would have overwritten some.  Chunks of
  tangents are one batched pass (:mod:`hybridad.transforms.batching`).
"""

from __future__ import annotations

import numpy as np

from ..core.trace import bind
from ..core.tracer import Tracer
from ..ops import REGISTRY, storage_root
from ..ops import loop as _loop
from ..ops.indexing import Pieces, Scatter, clean_slice

__all__ = ["active_nodes", "backward", "backward_many", "jvp"]

_WRITABLE_VIEWS = ("reshape", "transpose", "getitem")


def active_nodes(nodes, wrt_ids, out_id):
    """Ids of nodes on a differentiable path from ``wrt_ids`` to ``out_id`` (an
    id, or a set of ids)."""
    fwd = set()
    for n in nodes:
        if n.dtype.kind in "fc" and (n.id in wrt_ids or any(a.id in fwd for a in n.args)):
            fwd.add(n.id)
    needed = set(out_id) if isinstance(out_id, (set, frozenset)) else {out_id}
    for n in reversed(nodes):
        if n.id in needed:
            needed.update(a.id for a in n.args)
    return fwd & needed


def _fit(c, node):
    """Sum a broadcast cotangent back to ``node``'s shape and cast to its dtype."""
    if c.shape != node.shape:
        lead = c.ndim - len(node.shape)
        axes = tuple(range(lead)) + tuple(
            lead + i for i, s in enumerate(node.shape) if s == 1 and c.shape[lead + i] != 1)
        c = np.sum(c, axis=axes, keepdims=True) if axes else c
        if c.shape != node.shape:
            c = np.reshape(c, node.shape)
    if c.dtype != node.dtype:
        c = c.astype(node.dtype)
    return c


class _Adjoints:
    """Adjoint tracers per node id, with whether each one's buffer is ours to write."""

    def __init__(self, inplace=True):
        self.value = {}
        self.owned = {}
        self.inplace = inplace
        #: node id -> (node, index, value): a functional pass's last piece at a basic
        #: index, held until the next one (two that tile the array: one concatenation)
        self.pending = {}

    def get(self, node_id):
        """The adjoint of node ``node_id`` (its pending piece added), or None."""
        held = self.pending.pop(node_id, None)
        if held is not None:
            self._scattered(*held)
        return self.value.get(node_id)

    def _dense(self, node):
        """The adjoint of ``node`` as one tracer (:class:`Pieces` built whole)."""
        held = self.pending.pop(node.id, None)
        if held is not None:
            self._scattered(*held)
        prev = self.value.get(node.id)
        if type(prev) is Pieces:
            self.value[node.id], self.owned[node.id] = prev.dense(), self.inplace
            prev = self.value[node.id]
        return prev

    def add(self, node, c, exclusive):
        prev = self._dense(node)
        if prev is not None and _loop.start_sum_at(prev, c) is not None:
            # (a reverse loop's sum from zero, started at prev instead: a
            # checkpointed loop's tail and segments sum in the unsplit order)
            self.value[node.id], self.owned[node.id] = c, False
            return
        if not self.inplace:
            self.value[node.id] = c if prev is None else prev + c
            self.owned[node.id] = False
        elif prev is None:
            self.value[node.id], self.owned[node.id] = c, exclusive
        elif self.owned[node.id]:
            self.value[node.id] = bind("iadd", prev, c)
        elif exclusive:
            self.value[node.id], self.owned[node.id] = bind("iadd", c, prev), True
        else:
            total = prev + c
            # ours to add into only where the sum is a new buffer: of two literal
            # cotangents (a sum's, sliced by a concatenation of one array with
            # itself) it folds into a constant, which an iadd would change for
            # every later call (x + 0 simplifies to x: not ours either)
            self.value[node.id] = total
            self.owned[node.id] = total.node is not prev.node and total.node is not c.node \
                and total.node.op != "const"

    def add_scatter(self, node, s):
        value = s.value if s.value.dtype == node.dtype else s.value.astype(node.dtype)
        op = REGISTRY.get(node.op)
        span = clean_slice(s.index, node.shape[0]) \
            if s.flat is None and op is not None and op.packed else None
        if span is not None and (node.id not in self.value or
                                 type(self.value[node.id]) is Pieces):
            pieces = self.value.setdefault(node.id, Pieces(node.shape, node.dtype))
            pieces.add(span, value)
            self.owned[node.id] = False
            return
        if not self.inplace and s.flat is None and _slab(node.shape, s.index, value) is not None:
            # (a functional pass -- a loop body's -- sums its pieces as new arrays:
            # the two halves of a roll's concatenation, or of any two slices that
            # tile the array along one axis, are one concatenation, read in place
            # by the loop that sums it, where two scatters each zeroed a copy)
            held = self.pending.pop(node.id, None)
            if held is not None:
                joined = _tiled(node.shape, held[1:], (s.index, value))
                if joined is not None:
                    self.add(node, joined, False)
                    return
                self._scattered(*held)
            self.pending[node.id] = (node, s.index, value)
            return
        self._scattered(node, s.index, value, s.flat)

    def _scattered(self, node, index, value, flat=None):
        """Add a piece at ``index`` (or the flat positions ``flat``) to ``node``'s adjoint."""
        s = Scatter(index, value, flat=flat)
        prev = self._dense(node)
        # a basic index adds through any view; flat positions need C-contiguous storage
        if prev is not None and self.owned[node.id] and \
                (s.flat is None or _flat_writable(prev.node)):
            self.value[node.id] = bind("scatter_add", prev, value, index=s.index) \
                if s.flat is None else bind("scatter_add_flat", prev, value, s.flat)
            return
        fresh = bind("scatter", value, index=s.index, shape=node.shape) if s.flat is None \
            else bind("scatter_flat", value, s.flat, shape=node.shape)
        if not self.inplace:
            self.value[node.id] = fresh if prev is None else prev + fresh
            self.owned[node.id] = False
        elif prev is None:
            self.value[node.id], self.owned[node.id] = fresh, True
        else:
            self.value[node.id], self.owned[node.id] = bind("iadd", fresh, prev), True


def _slab(shape, index, value):
    """``[(start, stop)]`` per axis of a basic index of slices of step 1 (and
    ints not: None) whose region of an array of ``shape`` ``value`` fills
    exactly; None for anything else."""
    if type(index) is not tuple or len(index) > len(shape):
        return None
    spans = []
    for k, n in enumerate(shape):
        part = index[k] if k < len(index) else slice(None)
        if type(part) is not slice:
            return None
        start, stop, step = part.indices(n)
        if step != 1 or stop < start:
            return None
        spans.append((start, stop))
    if tuple(b - a for a, b in spans) != tuple(value.shape):
        return None
    return spans


def _tiled(shape, first, second):
    """The adjoint of two pieces ``(index, value)`` that tile an array of
    ``shape`` along one axis (the same full span on every other, the array's
    span covered once on that one): their concatenation; else None."""
    a, b = _slab(shape, *first), _slab(shape, *second)
    if a is None or b is None:
        return None
    differ = [k for k, (p, q) in enumerate(zip(a, b, strict=True)) if p != q]
    if len(differ) != 1 or any(a[k] != (0, shape[k]) for k in range(len(shape))
                                if k != differ[0]):
        return None
    k = differ[0]
    (lo, v_lo), (hi, v_hi) = sorted([(a[k], first[1]), (b[k], second[1])], key=lambda t: t[0])
    if lo[0] != 0 or lo[1] != hi[0] or hi[1] != shape[k]:
        return None
    return np.concatenate([v_lo, v_hi], axis=k)


def backward(trace, out, wrt, inplace=True, seed=None):
    """Append the reverse pass of ``out`` w.r.t. the ``wrt`` tracers to ``trace``.

    Parameters
    ----------
    trace : hybridad.core.trace.Trace
        The trace holding the forward graph; backward nodes are appended to it
        with ``phase="backward"``.
    out : Tracer
        Scalar (0-d) output to differentiate.
    wrt : list of Tracer
        Input tracers.
    inplace : bool, default True
        Accumulate adjoints in place (``iadd``, ``scatter_add``).  False emits
        a functional pass (each sum a new node), which :func:`jvp` can
        differentiate: no value it reads is overwritten.
    seed : Tracer, optional
        The cotangent of ``out`` (shaped like it); default 1 for a scalar
        ``out``.  A Jacobian's rows come from seeds that are inputs.

    Returns
    -------
    list of (Tracer or None)
        The gradient for each ``wrt`` entry; ``None`` where it is identically zero.
    """
    if seed is None:
        trace.phase = "backward"
        seed = Tracer(trace.const(out.dtype.type(1), True), trace)
    return backward_many(trace, [out], [seed], wrt, inplace)


def backward_many(trace, outs, seeds, wrt, inplace=True):
    """:func:`backward` of several outputs at once, each with its cotangent
    ``seeds[i]`` (shaped like ``outs[i]``): the vector-Jacobian product of a
    function of several results (a loop body's new carries and outputs,
    :mod:`hybridad.ops.loop`).  An output may be an input (returned unchanged)."""
    forward = list(trace.nodes)
    active = active_nodes(forward, {t.node.id for t in wrt}, {o.node.id for o in outs})
    trace.phase = "backward"
    adj = _Adjoints(inplace)
    for out, seed in zip(outs, seeds, strict=True):
        if out.node.id in active:
            adj.add(out.node, seed, False)
    for node in reversed(forward):
        g = adj.get(node.id)
        if g is None or node.op in ("input", "const"):
            continue
        flags = tuple(a.id in active for a in node.args)
        if not any(flags):
            continue
        start = len(trace.nodes)
        args = [Tracer(a, trace) for a in node.args]
        rule = REGISTRY[node.op].vjp
        if rule is None:
            raise NotImplementedError(
                f"{node.op!r} has no derivative rule: it is emitted by the reverse pass of "
                "another op, and differentiating that op twice (Hessians, Hessian-vector "
                "products) is not supported yet")
        contribs = rule(g, node, flags, *args, Tracer(node, trace), **node.attrs)
        if len(contribs) != len(node.args):
            raise AssertionError(f"vjp of {node.op} returned {len(contribs)} cotangents for "
                                 f"{len(node.args)} operands")
        fitted = [None if c is None or not f or isinstance(c, Scatter) else _fit(c, a)
                  for c, f, a in zip(contribs, flags, node.args, strict=True)]
        fresh = {n.id for n in trace.nodes[start:]}
        roots = [None if c is None else storage_root(c.node).id for c in fitted]
        for a, f, c, s, root in zip(node.args, flags, fitted, contribs, roots, strict=True):
            if not f:
                continue
            if isinstance(s, Scatter):
                adj.add_scatter(a, s)
            elif c is not None:
                exclusive = root in fresh and roots.count(root) == 1 and \
                    _writable(c.node, fresh)
                adj.add(a, c, exclusive)
        del adj.value[node.id]
    return [adj.get(t.node.id) for t in wrt]


def jvp(trace, nodes, tangents):
    """Append the tangent pass of ``nodes`` to ``trace`` (forward mode).

    Parameters
    ----------
    trace : hybridad.core.trace.Trace
    nodes : list of Node
        The graph to push tangents through, in execution order (forward nodes,
        and for second order a functional backward pass after them).
    tangents : dict
        Node id -> tangent :class:`~hybridad.core.tracer.Tracer` (shaped like the
        node) for the seeds; extended in place with the tangent of every
        floating-point node that depends on them (absent: identically zero).

    Returns
    -------
    dict
        ``tangents``.
    """
    trace.phase = "tangent"
    for node in nodes:
        if node.id in tangents or node.op in ("input", "const") or node.dtype.kind not in "fc":
            continue
        ts = tuple(tangents.get(a.id) for a in node.args)
        if all(t is None for t in ts):
            continue
        rule = REGISTRY[node.op].jvp
        if rule is None:
            raise NotImplementedError(
                f"{node.op!r} has no forward-mode rule yet (Jacobians, Hessians, "
                "Hessian-vector products); please report the function")
        args = [Tracer(a, trace) for a in node.args]
        t = rule(ts, node, *args, Tracer(node, trace), **node.attrs)
        if t is None:
            continue
        if t.shape != node.shape:
            t = np.broadcast_to(t, node.shape)
        if t.dtype != node.dtype:
            t = t.astype(node.dtype)
        tangents[node.id] = t
    return tangents


def _flat_writable(node):
    """Whether an owned adjoint is C-contiguous storage (not a view), so that
    flat positions can be added into it."""
    while node.op in REGISTRY and REGISTRY[node.op].kind == "inplace":
        node = node.args[0]
    return node.op in REGISTRY and REGISTRY[node.op].kind != "view"


def _writable(node, fresh):
    """A fresh buffer, or a writable view chain over one."""
    while node.op in REGISTRY and REGISTRY[node.op].kind == "view":
        if node.op not in _WRITABLE_VIEWS or node.id not in fresh:
            return False
        node = node.args[0]
    return node.id in fresh and node.op not in ("input", "const")


# the loop primitive's rules differentiate its body with these (hybridad.ops.loop)
_loop.TRANSFORMS.update(backward=backward_many, jvp=jvp)
