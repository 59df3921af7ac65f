"""Transforms stage: partition -- the hybrid.

Maximal connected groups of elementwise ops become one *region*: a fused
kernel that evaluates the group per element.  A reduction (sum, max, min)
that is the sole consumer of the group's output joins the region as its last
step.  Everything else (matmul, shape ops, reductions across regions) stays a
*reverse node* with its VJP rule.

A region has exactly one output: a node joins the region of its consumer only
if *all* of its users are inside that region.  That keeps regions convex (no
path leaves a region and comes back) and lets a node with uses outside the
region become a region output of its own.

:func:`find_regions` only analyses a graph; :class:`Region` records the
members in execution order with their external inputs.  The scalar body of a
region -- its value and, by forward-mode dual numbers seeded per region
input, its local partials -- is rendered by :mod:`hybridad.backends.scalar`.
"""

from __future__ import annotations

from ..ir.graph import Node, users_of
from ..ir.registry import InPlaceWrites
from ..ops import REGISTRY, storage_root

__all__ = ["Region", "absorb_producers", "evaluate_inside", "find_regions", "fuse_regions",
           "fold_accumulations", "pass_tables", "stored_partials", "share_reduced_values",
           "FUSABLE_REDUCTIONS", "PRE_REDUCTION", "VJP_SUMS"]

FUSABLE_REDUCTIONS = ("sum", "max", "min")

#: the ``wrt`` of a ``region_partial`` that is not a partial but the region's
#: elementwise value before its fused reduction (:func:`share_reduced_values`)
PRE_REDUCTION = -1

#: the ``mode`` of a ``region`` node computing, in one loop, the full sums of ``g *
#: d(output)/d(input k)`` for each ``k`` of its ``wrt`` tuple, in order
#: (:func:`hybridad.transforms.region_sums.sum_vjp_regions`)
VJP_SUMS = "vjp_sums"


class Region:
    """One fused group.

    Attributes
    ----------
    nodes : list of Node
        Elementwise members in execution order (the last one is the
        elementwise output).
    reduction : Node or None
        A reduction consuming the last member, fused as the final step.
    inputs : list of Node
        External operands of the members, in first-use order.
    partials_reason : str
        Why the region's VJP stores or recomputes its partials (the cost
        model's figures, :func:`hybridad.transforms.costs.partials_strategy`);
        empty until it is differentiated.
    """

    __slots__ = ("nodes", "reduction", "inputs", "partials_reason")

    def __init__(self, nodes, reduction, inputs):
        self.nodes = nodes
        self.reduction = reduction
        self.inputs = inputs
        self.partials_reason = ""

    @property
    def output(self):
        return self.reduction if self.reduction is not None else self.nodes[-1]

    @property
    def shape(self):
        """The loop shape: the elementwise output's shape."""
        return self.nodes[-1].shape

    def __repr__(self):
        ops = "+".join(n.op for n in self.nodes)
        red = f" -> {self.reduction.op}" if self.reduction is not None else ""
        return f"Region[{ops}{red}] inputs={[f'%{n.id}' for n in self.inputs]}"


def _fusable(node):
    return node.op in REGISTRY and REGISTRY[node.op].kind == "elementwise"


def _external_inputs(members):
    """The operands of ``members`` (a region's elementwise nodes, in order)
    made outside them, in first-use order: the region's inputs."""
    inside = {m.id for m in members}
    inputs, seen = [], set()
    for m in members:
        for a in m.args:
            if a.id not in inside and a.id not in seen:
                seen.add(a.id)
                inputs.append(a)
    return inputs


#: the most nodes one region fuses: an unrolled elementwise recurrence (a
#: time loop a decision on its result keeps unrolled) fused whole into one
#: loop body of 1200 ops, whose compile grew faster than its size (300 steps:
#: over 10 minutes); past this a chain is cut into regions of this size, each
#: storing its value (one array per cut)
MAX_REGION_NODES = 96


def find_regions(nodes, outputs=(), reductions=FUSABLE_REDUCTIONS):
    """Partition ``nodes`` (topologically ordered) into regions.

    Parameters
    ----------
    nodes : list of Node
    outputs : iterable of Node
        Graph outputs: they count as users outside every region.
    reductions : tuple of str
        Reductions that may be fused as a region's last step.

    Returns
    -------
    list of Region
        In execution order of their outputs.  Nodes in no region are reverse nodes.
    """
    users = users_of(nodes)
    external = {n.id for n in outputs}
    owner = {}  # node id -> region index
    found = []
    for sink in reversed(nodes):
        if not _fusable(sink) or sink.id in owner:
            continue
        rid = len(found)
        members = {sink.id: sink}
        owner[sink.id] = rid
        frontier = [sink]
        while frontier:
            node = frontier.pop()
            for a in node.args:
                if a.id in owner or not _fusable(a) or a.shape != sink.shape or \
                        a.id in external or len(members) >= MAX_REGION_NODES:
                    continue
                if all(owner.get(u.id) == rid for u in users[a.id]):
                    owner[a.id] = rid
                    members[a.id] = a
                    frontier.append(a)
        found.append(members)
    regions = []
    position = {n.id: i for i, n in enumerate(nodes)}
    for members in found:
        ordered = sorted(members.values(), key=lambda n: position[n.id])
        sink = ordered[-1]
        red = None
        us = users[sink.id]
        if len(us) == 1 and us[0].op in reductions and sink.id not in external:
            red = us[0]
        regions.append(Region(ordered, red, _external_inputs(ordered)))
    order = {n.id: i for i, n in enumerate(nodes)}
    regions.sort(key=lambda r: order[r.output.id])
    return regions


def fuse_regions(nodes, outputs=(), reductions=FUSABLE_REDUCTIONS):
    """Replace every region of ``nodes`` by one ``region`` node (IR -> IR).

    The region's output node becomes the ``region`` node in place (its users
    keep pointing at it); the other members leave the list and live on as the
    region's body (cloned, so the body is self-contained).

    Returns
    -------
    list of Node
        The new node list, still topologically ordered.
    """
    dropped = set()
    for region in find_regions(nodes, outputs, reductions):
        members = region.nodes + ([region.reduction] if region.reduction is not None else [])
        clones = {}
        for n in members:
            args = tuple(clones.get(a.id, a) for a in n.args)
            clones[n.id] = Node(n.id, n.op, args, n.attrs, n.shape, n.dtype, n.phase)
        body = Region([clones[n.id] for n in region.nodes],
                      clones[region.reduction.id] if region.reduction is not None else None,
                      list(region.inputs))
        out = region.output
        out.op, out.args, out.attrs = "region", tuple(region.inputs), {"body": body,
                                                                        "mode": "value"}
        dropped.update(n.id for n in members if n is not out)
    return [n for n in nodes if n.id not in dropped]


def fold_accumulations(nodes, outputs=()):
    """Fold elementwise regions into the adjoint they are added to (IR -> IR).

    The reverse pass adds each contribution into its adjoint as it arrives
    (``iadd``, ``scatter_add``; the first one through a slice is a
    ``scatter`` into zeros).  When the contribution is an elementwise region
    used by nothing else, the region's loop adds straight into the adjoint
    -- ``acc[index] += g * d(out)/d(x)`` -- instead of writing a temporary
    that a second loop adds: the ``iadd`` / ``scatter_add`` node becomes a
    ``region_acc`` node, and a ``scatter`` becomes ``zeros`` followed by one.
    Neighbouring ``region_acc`` nodes of the same region share one loop in
    the backend (a stencil's three slices of ``x`` are one pass over the
    loop, three ``+=``).

    Not folded: a region whose result is also read elsewhere or is a graph
    output, one with a fused reduction, one reading the adjoint it would add
    into other than at the element it adds to (``m += c * (g - m)`` is
    folded: each iteration reads ``m[i]`` before adding to it), dtype or
    shape mismatches (broadcast contributions).

    Returns
    -------
    list of Node
        The new node list, still topologically ordered (every ``zeros``
        moved ahead of the run of ``region_acc`` nodes it starts).
    """
    users = users_of(nodes)
    external = {n.id for n in outputs if n is not None}
    next_id = max((n.id for n in nodes), default=-1) + 1
    dropped, zeros = set(), {}
    for n in nodes:
        if n.op in ("iadd", "scatter_add"):
            acc, v = n.args
            index = n.attrs.get("index")
        elif n.op == "scatter":
            acc, (v,), index = None, n.args, n.attrs["index"]
        else:
            continue
        if not _foldable(v, n, users, external):
            continue
        if index is None and acc.shape != v.shape:
            continue  # a broadcast contribution
        if acc is not None and any(storage_root(a).id == storage_root(acc).id and
                                   (a is not acc or index is not None) for a in v.args):
            continue  # the region reads the adjoint it would add into, elsewhere than
            # at the element it adds to (``m += c * (g - m)`` reads m[i]: folded)
        if acc is None:
            acc = Node(next_id, "zeros", (), {"shape": n.shape, "dtype": n.dtype}, n.shape,
                       n.dtype, n.phase)
            next_id += 1
            zeros[n.id] = acc
        attrs = dict(v.attrs)
        attrs["index"] = index
        n.op, n.args, n.attrs = "region_acc", (acc, *v.args), attrs
        dropped.add(v.id)
    out = []
    run_start = None  # position in ``out`` where the current run of region_acc began
    for n in nodes:
        if n.id in dropped:
            continue
        if n.op == "region_acc":
            run_start = len(out) if run_start is None else run_start
            if n.id in zeros:
                out.insert(run_start, zeros[n.id])
        else:
            run_start = None
        out.append(n)
    return out


def accumulate_scatters(nodes, outputs=()):
    """A functional sum of scatters becomes an in-place accumulation (IR -> IR).

    A functional reverse pass -- a loop body's, or one a tangent sweep then
    reads -- adds each contribution through a slice as a new array:
    ``add(acc, scatter(v, index))``, every scatter a zeroed copy of the
    whole array (a stencil's step of 10^6 points: five 8 MB arrays zeroed,
    written and summed).  Lowered, nothing differentiates the graph again,
    so where ``acc`` is a buffer of its own that only this sum reads, the
    sum is ``scatter_add(acc, v, index)``: the contribution added in place,
    as the in-place reverse pass adds it (:func:`fold_accumulations` then
    folds a region's contribution into the adjoint's loop).  Not rewritten:
    a scatter or an ``acc`` read elsewhere or returned, broadcasting or
    casting sums, and ``acc`` a view, an input, a constant or another
    buffer's in-place update (unless this pass made it)."""
    users = users_of(nodes)
    external = {n.id for n in outputs if n is not None}
    made, dropped = set(), set()

    def alone(a, n):
        return a.id not in external and [u.id for u in users[a.id]] == [n.id]

    def fresh(a):
        op = REGISTRY.get(a.op)
        return a.id in made or op is not None and op.kind not in ("view", "inplace") and \
            a.op not in ("input", "const")

    for n in nodes:
        if n.op != "add" or len(n.args) != 2 or n.args[0] is n.args[1]:
            continue
        for s, acc in (n.args[::-1], n.args):
            if s.op == "scatter" and alone(s, n) and alone(acc, n) and fresh(acc) and \
                    s.shape == acc.shape == n.shape and s.dtype == acc.dtype == n.dtype == \
                    s.args[0].dtype:
                n.op, n.args, n.attrs = "scatter_add", (acc, s.args[0]), {
                    "index": s.attrs["index"]}
                made.add(n.id)
                dropped.add(s.id)
                break
    return [n for n in nodes if n.id not in dropped]


def _foldable(v, user, users, external):
    if v.op != "region" or v.id in external or [u.id for u in users[v.id]] != [user.id]:
        return False
    body = v.attrs["body"]  # a vjp region's result is per element, reduction or not
    return (v.attrs["mode"] == "vjp" or body.reduction is None) and v.dtype == user.dtype


def _body_signature(body):
    """A region body's elementwise members as a comparable structure: each
    member's op, attributes and operands (an input position or an earlier
    member), and the output's shape and dtype; None where an attribute does
    not compare."""
    where = {a.id: ("in", k) for k, a in enumerate(body.inputs)}
    out = []
    for j, m in enumerate(body.nodes):
        refs = tuple(where.get(a.id, ("?", a.id)) for a in m.args)
        try:
            attrs = tuple(sorted((k, repr(v)) for k, v in m.attrs.items()))
        except TypeError:
            return None
        out.append((m.op, attrs, refs, m.shape, str(m.dtype)))
        where[m.id] = ("m", j)
    return tuple(out)


def share_reduced_values(nodes, outputs=()):
    """One loop for a region and its reduced twin (IR -> IR).

    The reverse pass of ``x @ W + b`` needs ``g * d`` (the cotangent times
    the stored partial) twice: whole, for the matmuls, and summed over the
    batch axis, for ``b``.  Partitioning gives two regions with the same
    operands and the same elementwise body, the second with the sum fused:
    two passes over the same operands.  Here the reducing one also stores
    its elementwise value (``region_partial`` with ``wrt=`` :data:`PRE_REDUCTION`),
    which replaces the other: one pass reading the operands once, writing the
    value and the sum.  The reducing region runs where the first of the two
    was (their operands are the same, so they are ready there).

    Returns
    -------
    list of Node
    """
    external = {n.id for n in outputs if n is not None}

    def operands(n):  # literal scalars by value (each rule's ``1`` is a node of its own)
        return tuple(("lit", a.dtype.str, a.attrs["value"].tobytes())
                     if a.is_literal and a.size == 1 else a.id for a in n.args)

    taken = set()
    plain = {}  # (operand ids, signature) -> the first value region without a reduction
    for n in nodes:
        if n.op != "region" or n.attrs["mode"] != "value" or n.id in external:
            continue
        body = n.attrs["body"]
        if body.reduction is None:
            sig = _body_signature(body)
            if sig is not None:
                plain.setdefault((operands(n), sig), n)
    if not plain:
        return nodes
    moves = {}  # the plain region's id -> the reducing region placed before it
    for n in nodes:
        if n.op != "region" or n.attrs["mode"] != "value":
            continue
        body = n.attrs["body"]
        if body.reduction is None:
            continue
        twin = plain.get((operands(n), _body_signature(body)))
        if twin is None or twin.id in taken:
            continue
        taken.add(twin.id)
        moves[twin.id] = n
    if not moves:
        return nodes
    # the reducing region runs at the first of the two positions (both have
    # the same operands; its own users may come before the other's)
    # (its literal scalars, equal to the other's but nodes of their own, with it)
    moved, placed, out = {r.id for r in moves.values()}, set(), []
    moved |= {a.id for r in moves.values() for a in r.args if a.is_literal and a.size == 1}
    for n in nodes:
        if n.id in moved:
            if n.id not in placed:
                placed.add(n.id)
                out.append(n)
            continue
        if n.id in moves:
            red = moves[n.id]
            if red.id not in placed:
                for a in red.args:
                    if a.id in moved and a.id not in placed:
                        placed.add(a.id)
                        out.append(a)
                placed.add(red.id)
                out.append(red)
            n.op, n.args, n.attrs = "region_partial", (red,), {"wrt": PRE_REDUCTION}
        out.append(n)
    return out


def absorb_producers(nodes, outputs=()):
    """Fuse into a value region the value regions only it reads (IR -> IR).

    Partitioning keeps a node out of its consumer's region when it has users
    elsewhere; later passes can leave it with one.  The reverse pass of
    ``h @ w`` with ``w`` one column (a scalar output per sample) gives the
    cotangent ``g * w^T`` of ``h``, which two chain products read -- the
    product for ``h``'s matmul and its twin summed for ``b`` -- so it is a
    region of its own; once :func:`share_reduced_values` made the two one
    loop, that loop is its only reader.  A value region ``P`` without a
    reduction, over the same loop shape as its only reader ``R`` (a value
    region, ``P`` not an output, neither with stored partials other than
    ``R``'s value before its reduction), is evaluated inside ``R``'s loop:
    no array for ``P``, one pass fewer over it -- unless a node between the
    two writes in place to what ``P`` reads (a fused optimizer's update of a
    weight ``P`` reads, :mod:`.updates`): ``P`` then reads the old value
    only where it stands.  ``R`` gets a new body
    (``P``'s members, then its own), so vjp regions sharing its old body
    are untouched.

    Returns
    -------
    list of Node
    """
    external, users, writes = pass_tables(nodes, outputs)
    dropped = set()
    for n in nodes:
        if n.op != "region" or n.attrs["mode"] != "value" or stored_partials(n, users):
            continue
        body = n.attrs["body"]
        absorbed = [a for a in n.args  # (its operands as they are now: _rebound)
                    if a.op == "region" and a.attrs["mode"] == "value" and a.id not in external
                    and a.attrs["body"].reduction is None and a.shape == body.shape
                    and {u.id for u in users[a.id]} == {n.id} and not writes.between(a, n)]
        if absorbed:
            evaluate_inside(n, absorbed)
            dropped.update(a.id for a in absorbed)
    return [n for n in nodes if n.id not in dropped] if dropped else nodes


def pass_tables(nodes, outputs):
    """``(external, users, writes)`` of a pass that moves regions into their
    readers: the outputs' ids, :func:`users_of` and the in-place writes
    (:class:`~hybridad.ir.registry.InPlaceWrites`)."""
    return {n.id for n in outputs if n is not None}, users_of(nodes), InPlaceWrites(nodes)


def stored_partials(n, users):
    """Whether region ``n`` has stored partials (a ``region_partial`` reader
    other than its value before its reduction); ``users``: :func:`users_of`."""
    return any(u.op == "region_partial" and u.attrs["wrt"] != PRE_REDUCTION
               for u in users[n.id])


def _rebound(region):
    """``(members, reduction)`` of ``region``'s body reading the region's
    operands as they are now: a pass that substitutes a node (``views``: a
    slice of a concatenation that is one of its operands) rewires the
    region's operands, which its body's inputs stand for position by
    position, and not the members that read them."""
    body = region.attrs["body"]
    subst = {old.id: new for old, new in zip(body.inputs, _operands(region), strict=True)
             if old is not new}
    if not subst:
        return body.nodes, body.reduction
    for m in [*body.nodes, *([] if body.reduction is None else [body.reduction])]:
        args = tuple(subst.get(x.id, x) for x in m.args)
        if any(x is not y for x, y in zip(args, m.args, strict=True)):
            subst[m.id] = Node(m.id, m.op, args, m.attrs, m.shape, m.dtype, m.phase)
    return [subst.get(m.id, m) for m in body.nodes], \
        None if body.reduction is None else subst.get(body.reduction.id, body.reduction)


def _operands(region):
    """What ``region``'s body inputs stand for, position by position: its
    operands (a ``region_acc``'s after the buffer it adds into)."""
    return region.args[1:] if region.op == "region_acc" else region.args


def evaluate_inside(r, producers):
    """Region ``r`` (or ``region_acc``) evaluating the value regions
    ``producers`` (operands of it, without reductions, over its loop shape)
    in its own loop: a new body, their members then its own (vjp regions
    sharing its old body are left as they are).  ``r`` is changed in place."""
    producers = [(p, *_rebound(p)) for p in producers]
    remap = {p.id: nodes[-1] for p, nodes, _ in producers}

    def rewired(m):  # m reading the producers' members instead of the regions
        args = tuple(remap.get(x.id, x) for x in m.args)
        if all(x is y for x, y in zip(args, m.args, strict=True)):
            return m
        remap[m.id] = Node(m.id, m.op, args, m.attrs, m.shape, m.dtype, m.phase)
        return remap[m.id]

    body = r.attrs["body"]
    own, reduction = _rebound(r)
    members = [m for _, nodes, _ in producers for m in nodes]
    members += [rewired(m) for m in own]
    seen = set()  # (one member per node: producers that each evaluate one cheap region
    # inside hold its members alike -- computed twice; a CUDA kernel declared them twice)
    members = _in_order([m for m in members if m.id not in seen and not seen.add(m.id)])
    reduction = None if reduction is None else rewired(reduction)
    inputs = _external_inputs(members)  # (the reduction reads the last member)
    merged = Region(members, reduction, inputs)
    merged.partials_reason = body.partials_reason
    lead = r.args[:1] if r.op == "region_acc" else ()  # (the buffer it adds into)
    r.args, r.attrs = (*lead, *inputs), {**r.attrs, "body": merged}


def _in_order(members):
    """``members`` with each after the members it reads (stable): a producer
    evaluated inside may read what an earlier join put in the body (a
    scalar region both read), which its members then follow."""
    by_id = {m.id: m for m in members}
    placed, out = set(), []

    def place(m):
        if m.id in placed:
            return
        placed.add(m.id)
        for a in m.args:
            if a.id in by_id:
                place(by_id[a.id])
        out.append(m)
    for m in members:
        place(m)
    return out
