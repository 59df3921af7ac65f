"""Transforms stage: an elementwise op of broadcast scalars, computed once.

The reverse sweep of a sum broadcasts its one-element cotangent over the
summed operand's shape (``broadcast_to(ct, x.shape)``).  An elementwise op
of such broadcasts and other one-element values -- the cotangent times a
literal -- is one value repeated over the whole shape; computed as written,
a compiled plan writes an array of that one value and reads it back (a
Rosenbrock Hessian's tangent program read ``100 * ones(n)`` from memory,
8 MB at n = 10^6, and its primal program wrote it).
:func:`sink_scalar_broadcasts` computes such an op on the one-element
operands and broadcasts its result instead (a view), so the broadcast sinks
through chains of them; the region that finally reads it beside arrays of
the whole shape reads it at index 0.  Each element is the same operation on
the same values: the bits do not change.
"""

from __future__ import annotations

from ..ir.graph import Node, named_by_region, redirect, users_of
from ..ir.registry import REGISTRY

__all__ = ["sink_scalar_broadcasts"]


def _scalar_source(a):
    """The one-element value ``a`` is (``a`` itself, or what a broadcast of one
    element repeats), or None."""
    if a.op == "broadcast_to" and a.args[0].size == 1:
        return a.args[0]
    return a if a.size == 1 else None


def sink_scalar_broadcasts(nodes, outputs=()):
    """Each elementwise node (not a graph output, of more than one element)
    whose operands are one-element values, one of them broadcast, becomes
    ``broadcast_to(op(the one-element values), shape)``.

    Returns
    -------
    list of Node
        The new node list (the replaced nodes are left for dead code
        elimination).
    """
    external = {n.id for n in outputs if n is not None}
    users = users_of(nodes)
    next_id = max((n.id for n in nodes), default=-1) + 1
    replaced, out = {}, []
    for n in nodes:
        redirect((n,), replaced)
        op = REGISTRY.get(n.op)
        sources = [_scalar_source(a) for a in n.args]
        if op is None or op.kind != "elementwise" or n.id in external or n.size <= 1 or \
                not n.args or None in sources or \
                not any(a.op == "broadcast_to" for a in n.args) or \
                named_by_region(n, users[n.id]):
            out.append(n)
            continue
        try:
            shape, dtype = op.abstract(*sources, **n.attrs)
        except Exception:  # noqa: BLE001 -- (an op that insists on its shapes: left as is)
            out.append(n)
            continue
        if dtype != n.dtype or len(shape) > len(n.shape):
            out.append(n)
            continue
        small = Node(next_id, n.op, sources, n.attrs, shape, dtype, n.phase)
        wide = Node(next_id + 1, "broadcast_to", (small,), {"shape": n.shape}, n.shape,
                    n.dtype, n.phase)
        next_id += 2
        out += [small, wide]
        replaced[n.id] = wide
    return out
