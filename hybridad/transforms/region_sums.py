"""Transforms stage: sums folded into regions (after :mod:`.partition`).

A reduction that only sums what a region computes is done by that region's
loop as it computes it, so no temporary of the loop's shape is written and
read back: a ``vjp`` region that only a float ``sum`` reads becomes that sum
(:func:`sum_into_vjp_regions`, the GPU program's), the recomputed gradients of
a region's broadcast inputs, each summed whole, one loop with a sum per input
(:func:`sum_vjp_regions`), and the stored partials a gradient only sums whole
summed in the loss's own loop (:func:`sum_stored_partials`).
"""

from __future__ import annotations

from ..ir.graph import Node, users_of
from .partition import VJP_SUMS, Region

__all__ = ["sum_into_vjp_regions", "sum_stored_partials", "sum_vjp_regions"]


def _summed_vjp(n, users, external, sum_out=False):
    """The ``vjp`` region (of a loop with axes) that ``sum`` node ``n`` alone
    reads, in its dtype, neither an output (``external``: ids; ``sum_out``:
    the sum may be one) -- else None."""
    v = n.args[0] if n.op == "sum" and (sum_out or n.id not in external) else None
    if v is None or v.op != "region" or v.attrs["mode"] != "vjp" or v.id in external or \
            len(users[v.id]) != 1 or not v.shape or n.dtype != v.dtype:
        return None
    return v


def sum_into_vjp_regions(nodes, outputs=(), sum_out=False):
    """A ``vjp`` region read only by a float ``sum`` becomes that sum (IR -> IR;
    the GPU program's lowering, whose sums compute the values they add).

    A region's input broadcast over part of its loop -- a kernel matrix's
    ``sq[:, None]`` and ``sq[None, :]``, a bias -- gets its gradient as the
    sum of ``g * d(output)/d(input)`` over the broadcast axes.  Recomputed,
    that is a ``vjp`` region writing a temporary of the loop's shape and a
    ``sum`` reading it back; here the sum node becomes the ``vjp`` region
    with ``axis`` and ``keepdims`` (its result the sum's): the sum's first
    level evaluates the body as it adds (:func:`hybridad.backends.cuda.reduce.sum_levels`'
    ``fused``), no temporary.  A Gaussian process's six n x n temporaries
    live at once in its backward sweep otherwise.  The sum keeps its place
    in the schedule (its operands, the region's, live until then)."""
    users = users_of(nodes)
    external = {n.id for n in outputs if n is not None}
    dropped = set()
    for n in nodes:
        v = _summed_vjp(n, users, external, sum_out)
        if v is None or "axis" in v.attrs or n.dtype.name not in ("float32", "float64"):
            continue
        n.op, n.args = "region", v.args
        n.attrs = {"body": v.attrs["body"], "mode": "vjp", "wrt": v.attrs["wrt"],
                   "axis": tuple(sorted(n.attrs["axis"])),
                   "keepdims": bool(n.attrs.get("keepdims", False))}
        dropped.add(v.id)
    return [n for n in nodes if n.id not in dropped] if dropped else nodes


def sum_vjp_regions(nodes, outputs=()):
    """One loop for the vjp regions whose results are summed whole (IR -> IR).

    A region's input broadcast over its loop -- a scalar parameter, a
    lengthscale, a bias added to everything -- gets its gradient as the sum
    of ``g * d(output)/d(input)`` over the loop.  When the region recomputes
    its partials (the *recompute* strategy), each such input is a ``vjp``
    region evaluating the body again, writing a temporary of the loop's
    shape, and a ``sum`` reading it back: a Gaussian process's three
    hyperparameters are three passes of ``exp`` over the n x n kernel and
    three n x n temporaries.  Here every ``vjp`` region used only by a sum
    over all of its axes, grouped with the others of the same region and
    cotangent, becomes one ``region`` of mode :data:`VJP_SUMS` (``wrt`` the
    tuple of their inputs): one evaluation of the body with a dual seed per
    input, each product summed as it is made (the backend's two-phase block
    reduction), no temporary.  Each ``sum`` becomes a view of its element.

    Returns
    -------
    list of Node
        The new node list: each fused node where the first region of its
        group was (all of the group read the same operands).
    """
    users = users_of(nodes)
    external = {n.id for n in outputs if n is not None}
    groups = {}  # (body, operands) -> [(vjp region, its sum)]
    for n in nodes:
        v = _summed_vjp(n, users, external)
        if v is None or sorted(n.attrs["axis"]) != list(range(len(v.shape))):
            continue
        key = (id(v.attrs["body"]), tuple(a.id for a in v.args))
        groups.setdefault(key, []).append((v, n))
    if not groups:
        return nodes
    next_id = max(n.id for n in nodes) + 1
    order = {n.id: i for i, n in enumerate(nodes)}
    first, views, dropped = {}, {}, set()  # first region's id -> fused node; sum id -> view
    for members in groups.values():
        v0 = members[0][0]
        wrt = tuple(v.attrs["wrt"] for v, _ in members)
        fused = Node(next_id, "region", v0.args,
                     {"body": v0.attrs["body"], "mode": VJP_SUMS, "wrt": wrt},
                     (len(wrt),), v0.dtype, v0.phase)
        next_id += 1
        first[min((v for v, _ in members), key=lambda v: order[v.id]).id] = fused
        for j, (v, s) in enumerate(members):
            dropped.add(v.id)
            item = Node(next_id, "getitem", (fused,), {"index": (j,)}, (), v.dtype, s.phase)
            next_id += 1
            views[s.id] = item
            s.op, s.args, s.attrs = "reshape", (item,), {"shape": s.shape}
    out = []
    for n in nodes:
        if n.id in first:
            out.append(first[n.id])
        if n.id in views:
            out.append(views[n.id])
        if n.id not in dropped:
            out.append(n)
    return out


def _full_sum(node, shape):
    return node.op == "sum" and sorted(node.attrs["axis"]) == list(range(len(shape)))


def _summable_partial(p, user, users, external):
    """Whether ``p`` is a stored partial that ``user`` alone reads, of a value
    region whose loop ends in a sum over all of its axes (a loss)."""
    if p.op != "region_partial" or p.attrs["wrt"] < 0 or p.attrs.get("summed") or \
            p.id in external or [u.id for u in users[p.id]] != [user.id]:
        return False
    r = p.args[0]
    body = r.attrs["body"]
    red = body.reduction
    return r.op == "region" and r.attrs["mode"] == "value" and red is not None and \
        red.op == "sum" and bool(body.shape) and len(red.attrs["axis"]) == len(body.shape) \
        and p.shape == body.shape


def sum_stored_partials(nodes, outputs=()):
    """Stored partials a gradient only sums whole are summed in the forward
    loop (IR -> IR).

    A loss ``sum(h(x, a, b))`` with scalar parameters ``a``, ``b`` stores
    ``dh/da`` and ``dh/db`` per element (the *store* strategy) for the
    backward sweep, which sums each (times the loss's scalar cotangent ``g``:
    ``sum(dh/da)`` or ``sum(g * dh/da)``).  Here such a partial becomes a
    summed one (``region_partial`` with ``summed=True``, 0-d): the region's
    loop sums it beside its value (the same two-phase block reduction), and
    the backward's ``sum`` becomes a view of it, ``sum(g * p)`` the product
    ``g * sum(p)``.  No array per parameter, no second pass over it.

    Returns
    -------
    list of Node
        The same nodes, some rewritten in place (the region ``n`` keeps the
        summed inputs in ``attrs['sums']``).
    """
    users = users_of(nodes)
    external = {n.id for n in outputs if n is not None}
    next_id = max((n.id for n in nodes), default=-1) + 1
    for n in nodes:
        if n.id in external:
            continue
        if n.op == "sum":
            p = n.args[0]
            if not (_full_sum(n, p.shape) and n.dtype == p.dtype and
                    _summable_partial(p, n, users, external)):
                continue
        elif n.op == "region" and n.attrs["mode"] == "value":
            body = n.attrs["body"]  # g * p, summed whole, g one element
            red = body.reduction
            if len(body.nodes) != 1 or body.nodes[0].op != "safe_multiply" or red is None or \
                    red.op != "sum" or len(red.attrs["axis"]) != len(body.shape) or \
                    len(body.inputs) != 2 or any(u.op == "region_partial" for u in users[n.id]):
                continue  # (a region_partial user: g * p is read whole too, share_reduced_values)
            ps = [a for a in n.args if a.op == "region_partial"]  # (its operands as they
            if len(ps) != 1 or [a.size for a in n.args if a is not ps[0]] != [1]:  # are now)
                continue
            p = ps[0]
            if not (p.dtype == n.dtype and _summable_partial(p, n, users, external)):
                continue
        else:
            continue
        r = p.args[0]
        p.shape, p.attrs = (), {"wrt": p.attrs["wrt"], "summed": True}
        r.attrs = {**r.attrs, "sums": r.attrs.get("sums", ()) + (p.attrs["wrt"],)}
        if n.op == "sum":
            n.op, n.args, n.attrs = "reshape", (p,), {"shape": n.shape}
        else:  # g * sum(p), over the loop of one element the sum had kept
            mul = body.nodes[0]
            prod = Node(next_id, "safe_multiply", mul.args, mul.attrs, n.shape, n.dtype, n.phase)
            next_id += 1
            n.attrs = {"body": Region([prod], None, list(body.inputs)), "mode": "value"}
    return nodes
