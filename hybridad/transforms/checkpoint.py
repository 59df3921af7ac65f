"""Checkpointed loops: a loop split into nested loops, so that its reverse
sweep keeps a few carries and recomputes the rest.

A ``loop`` node's reverse rule (:mod:`hybridad.ops.loop`) reads the carry
stored at the start of every iteration: ``T`` x the carry's size.
:func:`checkpoint_loops` rewrites a forward loop of ``T`` iterations as an
outer loop of ``C = T // S`` iterations whose body is the same loop of ``S``
iterations (and a tail loop of the ``T - C S`` left).  The outer loop stores
its carry once per segment -- the checkpoints -- and its reverse rule,
differentiating its body, runs the inner loop forward again from a
checkpoint, storing that segment's ``S`` carries only while the segment is
reversed.  Memory: ``(C + S)`` carries instead of ``T``, for one more
forward sweep.  ``levels`` > 2 splits the outer loop again (``levels``
sweeps in all, ``levels`` x ``T^(1/levels)`` carries): the recursive
checkpointing whose optimal schedule is Griewank and Walther's binomial
*revolve*; these segments are equal, which is within a small factor of
it.  The iterations run in the same order on the same values: results are
bitwise those of the loop unsplit.

Plans use it under ``memory_budget`` (:class:`hybridad.plans.plan.Plan`),
when storing every carry does not fit.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.trace import Trace, bind
from ..core.tracer import Tracer
from ..ir.graph import Graph, redirect
from ..ops.indexing import clean_slice
from ..ops.loop import LoopBody, layout, part

__all__ = ["checkpoint_loops", "outer_counts", "segments"]


def segments(length, levels, outer=None):
    """The segment length of a loop of ``length`` iterations split over
    ``levels`` levels (``levels`` >= 2): ``length ** (1 / levels)``, or
    longer, for at most ``outer`` outer segments."""
    seg = max(2, math.ceil(length ** (1.0 / levels)))
    return seg if outer is None else max(seg, math.ceil(length / outer))


def outer_counts(levels, longest):
    """The outer segment counts a budget's build tries on ``levels`` levels,
    fewest first, for loops of at most ``longest`` iterations: on 2 levels
    2, 4, 8, ... below the square root of ``longest``, then None (the
    classic square root); else None."""
    counts = []
    while levels == 2 and 4 << 2 * len(counts) < longest:
        counts.append(2 << len(counts))
    return counts + [None]


def checkpoint_loops(trace, outs, levels, min_length=8, outer=None):
    """Split every forward loop of ``trace`` of at least ``min_length``
    iterations into ``levels`` nested levels, in place (on 2 levels, in at
    most ``outer`` outer segments when given); returns ``outs`` remapped."""
    outs = list(outs)
    with trace:
        for node in [n for n in trace.nodes if _splittable(n, min_length)]:
            outs = _split_levels(trace, outs, node, levels, outer) or outs
    return outs


def _splittable(node, min_length):
    a = node.attrs
    return node.op == "loop" and a["saved"] is not None and not a["reverse"] and \
        a["length"] >= min_length


def _split_levels(trace, outs, node, levels, outer=None):
    done = _split(trace, outs, node, segments(node.attrs["length"], levels, outer))
    if done is None:
        return None
    outs, outer = done
    if levels > 2 and outer.attrs["length"] >= 4:
        split = _split_levels(trace, outs, outer, levels - 1)
        outs = split if split is not None else outs
    return outs


def _flat_body(body, start, length, trace):
    """``body`` with its iteration index as its first xs (so an inner loop can
    start anywhere), and that xs' values; or the body itself and None."""
    if not body.index:
        return body, None
    g, nc = body.graph, body.n_carry
    ins = g.inputs
    flat = LoopBody(Graph(g.nodes, [*ins[1:1 + nc], ins[0], *ins[1 + nc:]], g.outputs),
                    False, nc, body.n_xs + 1)
    index = np.arange(start, start + length, dtype=np.int64)
    return flat, Tracer(trace.const(index, True), trace)


def _split(trace, outs, node, seg):
    a = node.attrs
    body, T = a["body"], a["length"]
    C, R = T // seg, T - (T // seg) * seg
    if C < 2:
        return None
    nodes = trace.nodes
    where = {off: (k, shape) for k, off, shape in layout(body, T, a["order"])}
    readers = [n for n in nodes if any(x is node for x in n.args)]
    spans = {r.id: clean_slice(r.attrs["index"], node.shape[0]) if r.op == "getitem" else None
             for r in readers}
    if any(len(r.args) != 1 or spans[r.id] is None or spans[r.id][0] not in where
           for r in readers):
        return None  # read otherwise than by its parts
    saved = set(a["saved"])
    dead = _dead_views(nodes, outs, [r for r in readers if where[spans[r.id][0]][0] in saved])
    if dead is None:
        return None  # the stored carries are read: nothing to save
    readers = [r for r in readers if r.id not in dead]
    head = len(nodes)
    nc = body.n_carry
    inner, index = _flat_body(body, a["start"], T, trace)
    args = [Tracer(x, trace) for x in node.args]
    carries = args[:nc]
    xs = ([index] if index is not None else []) + args[nc:nc + body.n_xs]
    consts = args[nc + body.n_xs:]
    ys = [k for k in range(nc, len(body.graph.outputs)) if k not in saved]

    # the outer body: the inner loop over one segment
    ob = Trace()
    with ob:
        specs = [(c.shape, c.dtype) for c in carries] + \
            [((seg, *x.shape[1:]), x.dtype) for x in xs] + [(k.shape, k.dtype) for k in consts]
        ins = [ob.input(j, s, d) for j, (s, d) in enumerate(specs)]
        packed = bind("loop", *ins, body=inner, length=seg, start=0, reverse=False,
                      order=a["order"], saved=a["saved"])
        got = {k: part(packed, off, shape) for k, off, shape in layout(inner, seg, a["order"])}
        outputs = [got[k] for k in range(nc)] + [got[k] for k in ys] + ins[:nc]
    obody = LoopBody(Graph(ob.nodes, [t.node for t in ins], [t.node for t in outputs]),
                     False, nc, len(xs))
    ny = len(ys)
    heads = [np.reshape(x[:C * seg], (C, seg, *x.shape[1:])) for x in xs]
    order = tuple(range(2 * nc + ny))
    opacked = bind("loop", *carries, *heads, *consts, body=obody, length=C, start=0,
                   reverse=False, order=order, saved=tuple(range(nc + ny, 2 * nc + ny)))
    oparts = [part(opacked, off, shape) for _, off, shape in layout(obody, C, order)]
    finals = oparts[:nc]
    ys_out = [np.reshape(y, (C * seg, *y.shape[2:])) for y in oparts[nc:nc + ny]]
    if R:
        tail = bind("loop", *finals, *[x[C * seg:] for x in xs], *consts, body=inner,
                    length=R, start=0, reverse=False, order=a["order"], saved=a["saved"])
        tparts = {k: part(tail, off, shape) for k, off, shape in layout(inner, R, a["order"])}
        finals = [tparts[k] for k in range(nc)]
        ys_out = [np.concatenate([y, tparts[k]]) for y, k in zip(ys_out, ys, strict=True)]
    value = dict(zip(range(nc), finals, strict=True))
    value.update(zip(ys, ys_out, strict=True))
    replace = {}
    for r in readers:
        off, stop = spans[r.id]
        k, _ = where[off]
        if k not in value:
            return _undo(trace, head)
        replace[r.id] = np.reshape(value[k], (stop - off,)).node
    new = nodes[head:]
    i = next(j for j, n in enumerate(nodes) if n is node)
    rest = [n for n in nodes[i + 1:head] if n.id not in replace and n.id not in dead]
    redirect(rest, replace)
    trace.nodes = nodes[:i] + new + rest
    return [replace.get(o.id, o) for o in outs], opacked.node


def _dead_views(nodes, outs, roots):
    """The ids of ``roots`` and the views of them, when nothing else reads
    them (the stored carries' part, which tracing makes and nothing uses);
    None when something does."""
    dead = {r.id for r in roots}
    out_ids = {o.id for o in outs}
    for n in nodes:
        if any(x.id in dead for x in n.args):
            if n.op not in ("reshape", "getitem"):
                return None
            dead.add(n.id)
    return None if dead & out_ids else dead


def _undo(trace, head):
    del trace.nodes[head:]
    return None
