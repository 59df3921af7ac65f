"""Cheap regions recomputed where they are read (rematerialization).

The partitioner keeps an elementwise group out of its readers' regions when
it has more than one reader: it becomes a region of its own, written to an
array that every reader reads back.  On memory-bound loops that array costs
more than the arithmetic it saves.  A second-order program is full of them:
the functional reverse pass of a Hessian-vector product computes ``2 x``,
``-g``, ``100 * 1`` once and reads each from the gradient's accumulation and
from the tangent sweep.

:func:`rematerialize` evaluates such a region ``P`` inside the loop of each
reader, as XLA duplicates cheap producers into their consumers' fusions:
``P`` is a value region without a reduction, of a few ops none of which is
expensive (no transcendental), not an output, with no stored partials; each
reader ``R`` it joins is a value region over the same loop shape, without
stored partials, with no in-place write to what ``P`` reads between the two.
It happens only where ``P`` then goes away -- no reader left but, at most,
one accumulation (``iadd``, ``scatter``, ``scatter_add``), which
:func:`~hybridad.transforms.partition.fold_accumulations` then folds into
``P``'s loop.  Each reader gets a new body (``P``'s members, then its own):
the same operations on the same values, in one loop instead of two.
"""

from __future__ import annotations

from ..ir.graph import users_of
from ..ops import REGISTRY
from .partition import evaluate_inside, pass_tables, stored_partials

__all__ = ["merge_accumulations", "recompute_in_stages", "rematerialize"]

#: the most elementwise ops of a region recomputed in each of its readers
MAX_OPS = 8
#: the most readers a region is recomputed in
MAX_READERS = 4

_ACCUMULATIONS = ("iadd", "scatter", "scatter_add")


def _cheap(p, users, external):
    """Whether node ``p`` is a region its readers may evaluate themselves: a
    value region without a reduction, of at most :data:`MAX_OPS` ops none of
    which is expensive, not an output (ids ``external``), with no stored
    partials."""
    if p.op != "region" or p.attrs["mode"] != "value" or p.id in external or \
            stored_partials(p, users):
        return False
    body = p.attrs["body"]
    return body.reduction is None and len(body.nodes) <= MAX_OPS and \
        not any(REGISTRY[m.op].expensive for m in body.nodes)


def _join(r, p, users):
    """Region ``r`` evaluating region ``p`` in its own loop
    (:func:`~.partition.evaluate_inside`), ``users`` kept up to date: ``r``
    reads ``p``'s operands now, not ``p``."""
    evaluate_inside(r, [p])
    users[p.id] = [u for u in users[p.id] if u.id != r.id]
    for a in p.args:
        users[a.id].append(r)


def rematerialize(nodes, outputs=()):
    """``nodes`` with cheap regions evaluated inside their readers' loops
    (see the module docstring); readers get new bodies, the regions that no
    one reads any more are dropped.

    Returns
    -------
    list of Node
    """
    external, users, writes = pass_tables(nodes, outputs)

    def reader(r, p):
        return r.op == "region" and r.attrs["mode"] == "value" and \
            not stored_partials(r, users) and r.attrs["body"].shape == p.shape and \
            not writes.between(p, r)

    dropped = set()
    for p in nodes:
        if not _cheap(p, users, external):
            continue
        readers = {u.id: u for u in users[p.id]}
        joins = [r for r in readers.values() if reader(r, p)]
        rest = [r for r in readers.values() if r.id not in {j.id for j in joins}]
        if not joins or len(joins) > MAX_READERS or len(rest) > 1 or rest and not (
                rest[0].op in _ACCUMULATIONS and rest[0].args[-1] is p and
                all(a is not p for a in rest[0].args[:-1])):
            continue
        for r in joins:
            _join(r, p, users)
        if not rest:
            dropped.add(p.id)
    return [n for n in nodes if n.id not in dropped] if dropped else nodes


def recompute_in_stages(nodes, stage, outputs=()):
    """A staged plan's cheap primal regions of its arguments recomputed in
    the loops of the stage programs that read them, instead of stored by
    the primal program and read back (IR -> IR; :mod:`hybridad.plans.staged`).

    A Hessian plan's tangent program runs many times at one point
    (``linearize``, then ``hvp(v=)`` per inner iteration of Newton-CG): every
    primal value it reads is kept from the primal run and read from memory
    each time.  Where such a value is a region as :func:`rematerialize`
    recomputes (no reduction, at most :data:`MAX_OPS` ops, none expensive, no
    stored partials, not an output) of the arguments, constants and
    computed scalars alone (through views), reading the arguments costs less
    than reading it:
    Rosenbrock's ``2 x[:-1]`` and its residual's partial are two arrays of n
    read per ``H v``, where ``x`` is one that the program reads anyway.  Each
    reader of it in ``stage`` (ids of the stage programs' nodes) that is a
    value region or ``region_acc`` over its shape, without stored partials,
    evaluates it in its own loop: the same operations on the same values, so
    the same bits.  A region no one reads any more is dropped.

    Returns
    -------
    list of Node
    """
    external, users, writes = pass_tables(nodes, outputs)

    def argument(a):  # an argument, a constant or a scalar, through views (no array read)
        while a.op not in ("input", "const"):
            if REGISTRY[a.op].kind != "view":
                return a.size == 1  # (a broadcast of a computed scalar: kept, 8 bytes)
            a = a.args[0]
        return True

    dropped = set()
    for p in nodes:
        if p.id in stage or not _cheap(p, users, external) or \
                not all(argument(a) for a in p.args):
            continue
        joins = [r for r in {u.id: u for u in users[p.id]}.values()
                 if r.id in stage and r.op in ("region", "region_acc") and
                 r.attrs["mode"] == "value" and r.attrs["body"].shape == p.shape and
                 not stored_partials(r, users) and not writes.between(p, r) and
                 not (r.op == "region_acc" and r.args[0] is p)]
        for r in joins:
            _join(r, p, users)
        if joins and not users[p.id]:
            dropped.add(p.id)
    return [n for n in nodes if n.id not in dropped] if dropped else nodes


def merge_accumulations(nodes, outputs=()):
    """``a + b`` of two accumulations into fresh zeros as one accumulation
    (IR -> IR): the reverse pass of a Hessian-vector product is functional,
    so a gradient that two slices reach (``x[1:]`` and ``x[:-1]``) is two
    ``region_acc`` into zeros of their own and an ``add`` region; instead the
    second adds straight into the first's buffer (no second zeros, no pass of
    the ``add``).  ``b`` is one ``region_acc`` into a ``zeros``; ``a`` any
    accumulation into a ``zeros``; each read only by the ``add``.  The ``add``
    node becomes ``b``'s accumulation (it keeps its identity: it may be an
    output).  The same sums in the same order per element: ``a[i] + b[i]``
    where ``b[i]`` was ``0 + g(i)`` -- bitwise equal."""
    users = users_of(nodes)
    dropped = set()
    for n in nodes:
        if n.op != "region" or n.attrs["mode"] != "value":
            continue
        body = n.attrs["body"]
        if body.reduction is not None or len(body.nodes) != 1 or body.nodes[0].op != "add" or \
                len(n.args) != 2:
            continue
        a, b = n.args
        if not (_fresh_sum(a, users) and b.op == "region_acc" and b.args[0].op == "zeros" and
                [u.id for u in users[b.args[0].id]] == [b.id] and
                [u.id for u in users[b.id]] == [n.id] and
                a.shape == b.shape == n.shape and a.dtype == b.dtype == n.dtype and
                body.nodes[0].args[0] is body.inputs[0]):
            continue
        # n := b's accumulation into a (a + b's value, as the add computed)
        n.op, n.args, n.attrs = "region_acc", (a, *b.args[1:]), dict(b.attrs)
        dropped.update((b.id, b.args[0].id))
    return [n for n in nodes if n.id not in dropped] if dropped else nodes


def _fresh_sum(a, users):
    """Whether ``a`` is a chain of accumulations into a ``zeros`` of its own,
    each link read only by the next (the last by one reader)."""
    node = a
    while node.op == "region_acc":
        if len(users[node.id]) != 1:
            return False
        node = node.args[0]
    return node is not a and node.op == "zeros" and len(users[node.id]) == 1
