"""Transforms stage: common subexpressions, one node each.

A trace gives one node per distinct call (:class:`hybridad.core.trace.Trace`
keys them), but the reverse and tangent sweeps emit their partials op by
op, each literal a node of its own: a Rosenbrock Hessian computed
``2 * x[:-1]`` twice (two literals ``2``), and its primal program stored
both for the tangent program to read.  :func:`eliminate_common` makes equal
nodes one: small literal constants by value, then elementwise ops and views
by op, operands, attributes, shape and dtype, in order (an operand already
merged makes its readers equal).  A node that reads or is storage an
in-place op writes (an accumulator) is left alone: its value depends on
where it is read.  The same operations on the same values: the bits do not
change.

Run in the staged lowering (Hessian and Jacobian plans) and in the numba and
GPU backends' lowering of a graph with a tangent sweep (``cse_tangents``, before
its regions are fused: an HVP's tangent sweep recomputed ``cos(x)``, which
the forward had made, and ``sin(x)``, the backward's partial --
transcendental work twice, 0.68-0.77x the time a call once shared; a
first-order graph is left alone: there it only joined literals, and one
merge took a bias sum out of its producer's loop), and not on a graph where
a node reads storage an in-place op writes later: in a gradient plan with an
optimizer's fused update (:mod:`.updates`), the node order the merges left
had ``fuse_regions`` place a region reading a parameter after that
parameter's in-place update.
"""

from __future__ import annotations

from ..frontend.signature import attr_signature
from ..ir.graph import named_by_region, redirect, users_of
from ..ir.registry import REGISTRY, InPlaceWrites

__all__ = ["eliminate_common"]

#: literal constants of at most this many elements are compared by value
_SMALL = 64


def _key(n):
    """What makes two nodes equal, or None (never merged)."""
    if n.op == "const":
        v = n.attrs["value"]
        if not n.is_literal or v.size > _SMALL or v.dtype.hasobject:
            return None
        return ("const", v.dtype.str, v.shape, v.tobytes())
    op = REGISTRY.get(n.op)
    if op is None or op.kind not in ("elementwise", "view"):
        return None
    try:
        attrs = tuple((k, attr_signature(v)) for k, v in sorted(n.attrs.items()))
    except TypeError:  # (attributes that do not sort: left alone)
        return None
    return (n.op, tuple(a.id for a in n.args), attrs, n.shape, n.dtype.str)


def _old_values_read(nodes, writes):
    """Whether a node reads storage an in-place op writes later (a parameter
    an update overwrites, an array ``f`` adds into after reading it): merges
    change the order later passes fuse in, and a fused region runs where its
    last member did -- so none is made (a reverse sweep's accumulators are
    read only after their last write)."""
    last = writes.last_writes()
    if not last:
        return False
    for i, n in enumerate(nodes):
        op = REGISTRY.get(n.op)
        if op is not None and op.kind in ("inplace", "view"):
            continue
        for a in n.args:
            r = writes.root.get(a.id, a.id)
            if r in last and i < last[r]:
                return True
    return False


def eliminate_common(nodes, outputs=(), updates=()):
    """Equal nodes (see the module docstring) replaced by the first of them;
    ``outputs`` and the optimizer ``updates`` (node ids) stay as they are.

    Returns
    -------
    list of Node
        The new node list (the replaced nodes are left for dead code
        elimination).
    """
    writes = InPlaceWrites(nodes)
    written = writes.roots
    root = writes.root
    if _old_values_read(nodes, writes):
        return nodes
    external = {n.id for n in outputs if n is not None} | set(updates)
    users = users_of(nodes)
    seen, replaced = {}, {}
    for n in nodes:
        redirect((n,), replaced)
        if n.id in external or root.get(n.id, n.id) in written or \
                any(root.get(a.id, a.id) in written for a in n.args):
            continue
        key = _key(n)
        if key is None:
            continue
        first = seen.setdefault(key, n)
        # (equal operands: a stage of a Hessian plan that computes one computes the
        # other; not a node a region's body names as its input)
        if first is not n and not named_by_region(n, users[n.id]):
            replaced[n.id] = first
    return nodes if not replaced else list(nodes)
