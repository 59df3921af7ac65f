"""The lowering of composite ops (:attr:`hybridad.ir.registry.Op.lower`): a
trace records one as a node while it is recorded and rolled (a loop's
matrix-vector product: one node a step, not three), and
:meth:`hybridad.core.trace.Trace.lower_composites` makes it the primitives it
stands for before any later pass."""

from __future__ import annotations

from ..ir.graph import Node
from ..ir.registry import REGISTRY

__all__ = ["lower"]

_new_node = Node.__new__


def lower(trace):
    """Replace each composite node of ``trace`` by the primitives it stands for,
    in place: the nodes its lowering makes go just before it, and the node
    itself becomes the last primitive (its id, and every reference to it,
    kept).  Nodes the lowering makes alike (one vector's column for two
    products) are made once, and equal attributes are one dict (as a replayed
    call's nodes share theirs: the graph's signature reads each dict once).
    ``lower`` gives operands as a tuple, shapes as tuples of ints and dtypes as
    numpy's (a node's own)."""
    composite = {name for name, op in REGISTRY.items() if op.kind == "composite"}
    if not any(n.op in composite for n in trace.nodes):
        return
    made, dicts, out, phase, ids = {}, {}, [], ["forward"], trace.ids

    def make(op, args, attrs, shape, dtype):
        key = (op, args, *attrs.values())  # (operands by identity; attributes of tuples)
        node = made.get(key)
        if node is None:
            node = made[key] = _new_node(Node)
            node.id, node.op, node.args = next(ids), op, args
            node.attrs = dicts.setdefault((op, *attrs.items()), attrs)
            node.shape, node.dtype, node.phase = shape, dtype, phase[0]
            out.append(node)
        return node

    for node in trace.nodes:
        if node.op in composite:
            phase[0] = node.phase
            op, args, attrs = REGISTRY[node.op].lower(node, make)
            node.op, node.args = op, args
            node.attrs = dicts.setdefault((op, *attrs.items()), attrs)
        out.append(node)
    trace.nodes = out
