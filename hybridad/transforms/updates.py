"""Update scheduling: where each fused optimizer update runs in the backward
sweep (a plan built with ``update=``, :mod:`hybridad.optim`)."""

from __future__ import annotations

from ..ir.graph import fed_by, write_hazards
from ..ops import REGISTRY, may_raise, storage_root

__all__ = ["order_writes", "schedule_updates"]


def schedule_updates(nodes, updates):
    """Move the update nodes as early as they can run (IR -> IR).

    ``updates``: ids of the nodes the rules emitted (they are at the end of
    ``nodes``).  Each is placed after its operands and -- for an in-place
    write -- after every other node that reads the written storage's old
    value (through views too), so a gradient is consumed, and its buffer
    freed, as soon as the parameter may change -- and after every node that
    can fail at run time (:attr:`hybridad.ops.Op.raises`): a failed step
    changes nothing.
    """

    updates = set(updates)
    # inputs first: the rule's state and per-step inputs were traced after the
    # backward pass, but nothing orders them
    order = [n for n in nodes if n.op == "input"] + \
        [n for n in nodes if n.id not in updates and n.op != "input"]
    pending = [n for n in nodes if n.id in updates]
    descendants = {}  # update node id -> ids computed from it (the new value's readers)
    for u in pending:
        seen = {u.id}
        for n in pending:
            if any(a.id in seen for a in n.args):
                seen.add(n.id)
        descendants[u.id] = seen
    # a step that fails (a singular matrix in LAPACK) must leave parameters and
    # state untouched: no in-place write before the last node that can fail
    failing = {n.id for n in nodes if may_raise(n)}
    hazards = {}
    for u in pending:
        if u.op not in REGISTRY or REGISTRY[u.op].kind != "inplace":
            continue  # (constants, pure ops: only their operands order them)
        root = storage_root(u.args[0]).id
        hazards[u.id] = failing | {n.id for n in nodes if n.id not in descendants[u.id]
                                   and n.id != u.id and any(storage_root(a).id == root
                                                            for a in n.args)}
    out, done = [], set()

    def ready(u):
        return all(a.id in done for a in u.args) and hazards.get(u.id, set()) <= done

    def flush():
        progress = True
        while progress:
            progress = False
            for u in list(pending):
                if ready(u):
                    out.append(u)
                    done.add(u.id)
                    pending.remove(u)
                    progress = True

    flush()
    for n in order:
        out.append(n)
        done.add(n.id)
        flush()
    assert not pending, "an update could not be scheduled"
    return out


def order_writes(nodes):
    """Every in-place write after each node that reads the old value of what
    it writes (IR -> IR): a write with such a reader after it moves, with the
    nodes computed from it that precede that reader, to just after the reader.

    :func:`schedule_updates` places an optimizer's in-place update of a
    parameter after every reader of the parameter's old value; later passes
    may move a read past it -- folding a vjp region that reads the parameter
    into the accumulation of another's gradient, placed after the update --
    and the step then read the parameter it had already changed.  This pass,
    the last, restores the order whatever the passes did
    (:func:`hybridad.ir.graph.check_writes` asserts it).
    """
    nodes = list(nodes)
    while True:
        hazards = write_hazards(nodes)
        if not hazards:
            return nodes
        w = hazards[0][0]
        last = max(r for k, r in hazards if k == w)  # (the write's last stale reader)
        after = fed_by(nodes, w, last)  # the write and what it feeds before that reader
        block = [n for n in nodes[w:last] if n.id in after]
        rest = [n for n in nodes[w:last + 1] if n.id not in after]
        nodes = nodes[:w] + rest + block + nodes[last + 1:]
