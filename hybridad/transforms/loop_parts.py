"""Loops keep what is read: the dead-code elimination of a loop's parts.

A ``loop`` node (:mod:`hybridad.ops.loop`) packs its final carries and its
stacked per-iteration outputs into one buffer, and reads per-iteration rows
of its xs.  Differentiation adds to both generically: the forward loop stores
every carry for the reverse pass (``length`` x the state) and the residuals
the reverse pass reads, and the reverse loop takes all of them as its xs.
Where the reverse body reads a residual instead of the carry it was computed
from (the Euler step ``x + dt tanh(W x)``: its reverse reads ``tanh(W x)``,
not ``x``), the stored carry is read by no one, yet stored at every call.

:func:`drop_unread_loop_parts` removes, to a fixed point,

* the xs and constants a loop's body does not read (operands of the loop no
  more), and then
* the per-iteration outputs that nothing reads (outputs of the body no more;
  the views that read the others are moved to the parts' new offsets),

as JAX's dead-code elimination prunes a ``scan``'s unused inputs and
outputs.  A loop whose value is read otherwise than by 1-d slices, or that is
an output itself, is left as it is.  What runs is the same arithmetic on the
same values: results are bitwise those of the loop unpruned.
"""

from __future__ import annotations

import numpy as np

from ..core.trace import Trace
from ..ir.graph import Graph, dead_code_elimination
from ..ops.indexing import clean_slice
from ..ops.loop import LoopBody, layout, replay

__all__ = ["drop_unread_loop_parts"]


def drop_unread_loop_parts(nodes, inputs, outputs):
    """``nodes`` (a plan's graph, with ``inputs`` and ``outputs``) with its
    loops' unread xs, constants and per-iteration outputs dropped, and the
    dead code that leaves; loop nodes and their readers are changed in place."""
    graph = dead_code_elimination(Graph(nodes, inputs, outputs))
    if not any(n.op == "loop" for n in graph.nodes):
        return graph.nodes
    out_ids = {o.id for o in outputs}
    while True:
        readers = {}
        for n in graph.nodes:
            for a in n.args:
                readers.setdefault(a.id, []).append(n)
        changed = False
        for n in graph.nodes:
            if n.op == "loop":
                changed |= _drop_operands(n)
                if n.id not in out_ids:
                    changed |= _drop_outputs(n, readers.get(n.id, ()))
        if not changed:
            return graph.nodes
        graph = dead_code_elimination(Graph(graph.nodes, inputs, outputs))


def _drop_operands(node):
    """Drop the xs and constants the body does not read; whether any was."""
    body = node.attrs["body"]
    g = body.graph
    idx, nc = int(body.index), body.n_carry
    read = {a.id for m in g.nodes for a in m.args} | {o.id for o in g.outputs}
    unread = [p for p in range(idx + nc, len(g.inputs)) if g.inputs[p].id not in read]
    if not unread:
        return False
    keep = [p for p in range(len(g.inputs)) if p not in unread]
    # the body again, its inputs numbered anew (a body's graph is shared:
    # a recomputation in another body reads it too; nothing is changed in it)
    trace = Trace()
    with trace:
        ins = {p: trace.input(j, g.inputs[p].shape, g.inputs[p].dtype)
               for j, p in enumerate(keep)}
        # (an unread input: a stand-in that the body's graph does not list)
        ins.update({p: trace.input(len(g.inputs) + p, g.inputs[p].shape, g.inputs[p].dtype)
                    for p in unread})
        outs = replay(g, trace, [ins[p] for p in range(len(g.inputs))])
    n_xs = body.n_xs - sum(p < idx + nc + body.n_xs for p in unread)
    new = LoopBody(Graph(trace.nodes, [ins[p].node for p in keep], [t.node for t in outs]),
                   body.index, nc, n_xs)
    gone = {p - idx for p in unread}  # (the loop's operands: no index)
    node.args = tuple(a for k, a in enumerate(node.args) if k not in gone)
    node.attrs = dict(node.attrs, body=new)
    return True


def _drop_outputs(node, readers):
    """Drop the per-iteration outputs no reader's slice overlaps; whether any was."""
    a = node.attrs
    body, order = a["body"], a["order"]
    spans = []
    for r in readers:
        span = clean_slice(r.attrs["index"], node.shape[0]) \
            if r.op == "getitem" and len(r.args) == 1 else None
        if span is None:
            return False  # read whole, or otherwise than by slices
        spans.append((r, span))
    parts = layout(body, a["length"], order)
    ends = {k: (off, off + int(np.prod(shape, dtype=np.int64))) for k, off, shape in parts}
    unread = [k for k, _, _ in parts if k >= body.n_carry and
              not any(s < ends[k][1] and ends[k][0] < e for _, (s, e) in spans)]
    if not unread:
        return False
    # every reader moves left by the size of the dropped parts before it
    for r, (s, e) in spans:
        shift = sum(ends[k][1] - ends[k][0] for k in unread if ends[k][1] <= s)
        r.attrs = dict(r.attrs, index=(slice(s - shift, e - shift, None),))

    def pos(k):
        return k - sum(u < k for u in unread)
    g = body.graph
    outs = [o for k, o in enumerate(g.outputs) if k not in unread]
    new = LoopBody(Graph(g.nodes, g.inputs, outs), body.index, body.n_carry, body.n_xs)
    saved = None if a["saved"] is None else tuple(pos(k) for k in a["saved"] if k not in unread)
    node.attrs = dict(a, body=new, order=tuple(pos(k) for k in order if k not in unread),
                      saved=saved)
    node.shape = (node.shape[0] - sum(ends[k][1] - ends[k][0] for k in unread),)
    return True
