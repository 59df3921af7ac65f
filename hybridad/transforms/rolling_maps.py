"""Runs whose iterations carry nothing to the next (for :mod:`.rolling`):
batched into one iteration (:func:`_map`), and where in its period a run is
best started (:func:`_rotation`)."""

from __future__ import annotations

import numpy as np

from ..core.trace import bind
from ..core.tracer import Tracer
from ..ir.graph import redirect
from .rolling_inputs import _outer_xs

__all__ = ["replace_run", "replayed", "running_sums"]


def _rotation(reads, p, nbytes):
    """Where in its period a run is best started: the offset ``r`` whose
    iterations carry the fewest bytes to the next (0: where it starts now).
    A run found from the middle of its iterations carries what the middle
    holds -- a time step's elements read one by one, where the step's state
    is one array; a map (``y = f(x[j]); out[j] = y`` seen from the write)
    carries something where it carries nothing.  ``reads``: ``(offset, offset
    read, 1 for the iteration before or 0 for its own)``; ``nbytes`` per
    offset.  Started at ``r``, a read of the iteration before stays one where
    it is not from a node before ``r`` of one at ``r`` or after (it is within
    one iteration then; from one at or after ``r`` by one before it, it would
    be two iterations back: not a start), and a read within an iteration
    becomes one where ``r`` falls between its two nodes.  Each read carries
    its source over ranges of ``r``: summed over the sources by difference
    arrays, in time linear in the reads and the period."""
    bad, spans = [0] * (p + 1), {}
    for o, c, lag in reads:
        if not lag:  # (c < o: carried where r falls between them)
            ranges = ((c + 1, o + 1),)
        elif o < c:
            ranges = ((0, o + 1), (c + 1, p))
        elif c < o:  # (two iterations back where c < r <= o)
            bad[c + 1] += 1
            bad[o + 1] -= 1
            ranges = ((0, c + 1), (o + 1, p))
        else:
            ranges = ((0, p),)
        spans.setdefault(c, []).extend(r for r in ranges if r[0] < r[1])
    cost = [0] * (p + 1)
    for c, ranges in spans.items():  # (each source once over the union of its ranges)
        ranges.sort()
        lo, hi = ranges[0]
        for a, b in ranges[1:]:
            if a > hi:
                cost[lo] += nbytes[c]
                cost[hi] -= nbytes[c]
                lo, hi = a, b
            else:
                hi = max(hi, b)
        cost[lo] += nbytes[c]
        cost[hi] -= nbytes[c]
    best, at, total, invalid = None, 0, 0, 0
    for r in range(p):
        total, invalid = total + cost[r], invalid + bad[r]
        if not invalid and (best is None or total < best):
            best, at = total, r
        if r == 0:
            first = total
    return at if best is not None and best < first else 0


def replayed(nodes, pos, s, p, leaf, alias, fed, env, prev, outside):
    """The run's iteration 1 (from position ``s + p``) replayed in the current
    trace, each node bound on its operands as the one iteration sees them:
    a per-iteration input's stand-in (``fed``, by the operand slot's
    ``alias``), a value of the same iteration (``env``, by offset: filled
    here), of the iteration before (``prev``), or ``outside(node)`` for a
    value made before the run.  False where a node does not come out with
    its traced shape and dtype."""
    t0 = s + p
    for o in range(p):
        if leaf[o]:
            continue
        node, args = nodes[t0 + o], []
        for j, a in enumerate(node.args):
            q = pos[a.id]
            args.append(fed[alias[o, j]] if (o, j) in alias else env[q - t0] if q >= t0 else
                        prev[q - s] if q >= s else outside(a))
        env[o] = t = bind(node.op, *args, **node.attrs)
        if t.shape != node.shape or t.dtype != node.dtype:
            return False
    return True


def _total(trace, nodes, pos, s, p, trips, c, j, start, alias, fed, env, batched, seeds):
    """The running sum at offset ``c`` (its addend operand ``j``) after the
    run: its ``start`` and the addends of every iteration, added in order."""
    t0 = s + p
    n = nodes[t0 + c]
    a = n.args[j]
    if (c, j) in alias:  # (the addend a per-iteration input: its stack)
        y = seeds[fed[alias[c, j]].node.id]
    elif pos[a.id] >= t0:
        t = env[pos[a.id] - t0]
        y = batched.get(t.node.id)
        y = np.broadcast_to(t, (trips, *t.shape)) if y is None else y
    else:
        y = np.broadcast_to(Tracer(a, trace), (trips, *a.shape))
    if n.op == "subtract":
        y = -y
    first = np.reshape(Tracer(start, trace), (1, *n.shape)).astype(n.dtype)
    return np.cumsum(np.concatenate([first, y.astype(n.dtype)]), axis=0)[-1]


def running_sums(nodes, pos, s, p, trips, carries, reads, after):
    """Carry offset -> the operand position of its addend, for the carries of
    the run that are running sums (``acc = acc + y``, ``acc = acc - y``: read
    by their own sum alone, the last iteration's alone read after the run,
    the addend of the sum's shape) -- None where a carry is none."""
    t0, out = s + p, {}
    for c in carries:
        n = nodes[t0 + c]
        own = [j for j, a in enumerate(n.args) if pos[a.id] == s + c]
        if n.op not in ("add", "subtract") or len(n.args) != 2 or n.dtype.kind != "f" or \
                own != [0] and (n.op == "subtract" or own != [1]) or \
                n.args[1 - own[0]].shape != n.shape or \
                [(o, lag) for o, c2, lag in reads if c2 == c] != [(c, 1)]:
            return None
        out[c] = 1 - own[0]
    if any((q - s) % p in out and (q - s) // p != trips - 1 for q in after):
        return None
    return out


def _map(trace, outs, s, p, trips, m, leaf, xs, once, init, alias, after, sums):
    """A run whose iterations carry nothing to the next (a map: ``K[i, j] =
    k(x[i], x[j])`` in a loop over ``j``, ``ys.append(g(x[k]))``) as ONE
    iteration over its stacked per-iteration inputs -- its nodes batched
    (:func:`~.batching.vmap`), numpy's vectorized form of the loop -- each
    iteration's value read as a row of the batched one.  ``xs``, ``once``,
    ``init``: the run's per-iteration inputs, its leaves made once, the
    starts of what iterations read of the one before (as :func:`.rolling._roll`
    has them); ``sums``: carries that are running sums (:func:`running_sums`),
    each then the last of the cumulative sum of its start and its addends, in
    their order (the loop's own sums, bit for bit).  Returns the new
    ``outs``, or None (left as is) where the body does not batch."""
    from .batching import vmap

    nodes, pos, end = trace.nodes, m.pos, s + trips * p
    head = len(nodes)
    keep = [nodes[q] for q in sorted(after) if leaf[(q - s) % p]]  # leaves read later
    kept = {n.id for n in keep}
    replace, memo = {}, trace._seen
    trace._seen = {}  # (nothing merged with a node of the run, which leaves the trace)
    try:
        x_outer = _outer_xs(trace, s, p, trips, xs, init, keep, kept, pos)
        seeds, env, prev, fed_in = {}, {}, {}, {}
        for (when, o), stacked in zip(xs, x_outer, strict=True):
            row = stacked[0]  # (a stand-in for one iteration's: batched below)
            seeds[row.node.id] = stacked
            {"now": env, "before": prev, "arg": fed_in}[when][o] = row
        env.update((o, Tracer(nodes[s + o], trace)) for o in once)
        mark = len(nodes)
        if not replayed(nodes, pos, s, p, [x or o in sums for o, x in enumerate(leaf)], alias,
                        fed_in, env, prev, lambda a: Tracer(a, trace)):
            raise TypeError("replayed otherwise")
        batched = vmap(trace, nodes[mark:], seeds, trips)
        totals = {c: _total(trace, nodes, pos, s, p, trips, c, j, init[c], alias, fed_in, env,
                            batched, seeds) for c, j in sums.items()}
        for q in sorted(after):
            k, o = divmod(q - s, p)
            if o in totals:
                replace[nodes[q].id] = totals[o].node
            elif not leaf[o]:
                b = batched.get(env[o].node.id)
                replace[nodes[q].id] = env[o].node if b is None else b[k].node
    except Exception:  # noqa: BLE001 -- an op without a batch rule: stays unrolled
        replace = None
    finally:
        trace._seen = memo
    new = nodes[head:]
    if replace is None:
        del nodes[head:]
        trace.forget(new)
        return None
    live = {n.id for n in replace.values()}
    for n in reversed(new):  # (the stand-ins, and the one iteration they made, go)
        if n.id in live:
            live.update(a.id for a in n.args)
    keep.extend(nodes[s + o] for o in once if nodes[s + o].id not in kept)
    trace.forget([n for n in new if n.id not in live])
    return replace_run(trace, outs, s, end, head, keep, [n for n in new if n.id in live],
                       replace, pos)


def replace_run(trace, outs, s, end, head, keep, new, replace, pos):
    """The run at ``s:end`` of ``trace.nodes`` replaced: what of it is kept
    (``keep``: leaves read later, copies a stack reads, in their order), then
    the ``new`` nodes made for it (appended at ``head`` and after), then the
    nodes after it, which read ``replace`` (node id -> node) instead of the
    run's; returns ``outs`` so replaced."""
    nodes = trace.nodes
    rest = nodes[end:head]
    redirect(rest, replace)
    keep.sort(key=lambda n: pos[n.id])
    trace.nodes = nodes[:s] + keep + new + rest
    trace.forget(nodes[s:end], keep)
    return [replace.get(o.id, o) for o in outs]
