"""Loops rolled from the trace: a Python ``for`` loop that the trace unrolled
becomes one ``loop`` node again (:mod:`hybridad.ops.loop`).

Tracing unrolls a Python loop: ``T`` iterations leave ``T`` copies of one
node sequence in the trace, each reading the values the one before it made.
:func:`roll_loops` finds such runs in the traced forward graph -- consecutive
repeats of one sequence of ops (with the same attributes, shapes and dtypes)
whose operands are, copy after copy, the same outer value (*invariant*) or
the value one period earlier (an operand of the same iteration, or of the
previous one: a *carry*) -- as LLVM's loop rerolling does for machine code.
The run becomes one ``loop`` node whose body is one iteration, so
differentiating and compiling the plan cost what one iteration costs.

* A node with no operand that varies between copies only in its attributes
  or value -- a literal ``t = k * dt``, a row ``forcing[k]`` of a captured
  array -- is evaluated outside the loop and its copies stacked into a
  per-iteration input (the loop's ``xs``): literals by value; captured
  arrays by reference where they are equally spaced views of one array (one
  strided view of its memory), by value where a plan compares them by
  content anyway (:data:`~hybridad.frontend.guards.SMALL_BYTES`), and
  otherwise stacked when the plan runs.  One that is the same every time is
  evaluated once and read as a constant.
* Values of the run that code after it reads become the loop's outputs: the
  last iteration's carried values as the final carries, any other as the
  stacked per-iteration outputs, read at their row.
* What does not repeat exactly (a first iteration that differs, a branch
  taken at iteration ``k``, a carried value whose shape changes) stays
  unrolled, as traced: a roll is only made when the one iteration replayed as
  a body gives every node its traced shape and dtype.

The rolled plan runs the same operations in the same order per element; only
what the compiled body fuses can round differently from the unrolled plan.
``HYBRIDAD_ROLL=0`` (read when a plan is built) keeps every loop unrolled.
The runs are found by :mod:`.rolling_runs`.
"""

from __future__ import annotations

import os
from operator import attrgetter, itemgetter

import numpy as np

from ..frontend.guards import SMALL_BYTES
from ..frontend.signature import attr_signature
from ..core.trace import Trace, bind
from ..core.tracer import Tracer
from ..ir.graph import Graph, redirect
from ..ir.registry import REGISTRY
from ..ops.loop import LoopBody, layout, part
from .row_writes import forward_row_writes, row_read, spliced, without_dead
from .rolling_runs import (_ARGS, MIN_NODES, MIN_TRIPS, _attrs_key, _attrs_key_of, _best_run,
                           _Matcher, primitive_count)

__all__ = ["MIN_NODES", "MIN_TRIPS", "enabled", "roll_loops"]

_OP, _ATTRS, _FIRST, _INDEX = attrgetter("op"), attrgetter("attrs"), itemgetter(0), \
    itemgetter("index")

#: a run is rolled when one iteration does at least this much work (elements
#: computed; a matrix product counts its multiply-adds), so that calling the
#: body once per iteration (~0.2-0.5 us) costs little beside it -- or when
#: LLVM would take long to compile it unrolled: the run is long (traced
#: nodes), or its iterations hold :data:`ROLL_BREAKS` nodes in all that end a
#: fused region (a product, a reduction, a slice of a value the step made:
#: unrolled, each is a loop nest of its own in the forward and the backward
#: program, 15-45 ms of LLVM; a 100-step explicit Euler with a 50 x 50
#: product took 4.7 s to build unrolled, 0.65 s rolled, and called in 85 us
#: either way).  Runs of elementwise steps fuse into one kernel unrolled; on
#: few elements it runs up to a third faster so (a Verlet step on 20 states:
#: 13.6 us for 40 steps, 16.7 us rolled), but it compiles in 20-30 ms a step
#: (1.56 s, 0.46 s rolled), and on 100 elements or more the rolled loop runs
#: as fast or faster (40 steps of x + 0.05 tanh(x * c) on 300 elements: 32.9
#: us unrolled, 18.1 us rolled).  So they roll from 1000 elements a step, or
#: at :data:`LONG_RUN` nodes.
HEAVY_STEP = 1_000
LONG_RUN = 300
ROLL_BREAKS = 32
#: arguments of f a loop reads one a step (``for W in Ws``) are fed to it stacked,
#: a copy each call: where the copy would be larger than the carries the loop
#: stores and than this many bytes (a hundred layers of 10^3 x 10^3: 800 MB more
#: than the unrolled plan, which reads each in place), the loop stays unrolled
FED_BYTES = 1 << 20
#: the most loops rolled per trace
_MAX_ROLLS = 32
_LIGHT = object()  # _roll's answer for a run too light to roll


def enabled():
    """Whether plans roll loops (the ``HYBRIDAD_ROLL`` environment variable,
    on unless ``0``)."""
    return os.environ.get("HYBRIDAD_ROLL", "1").strip() not in ("0", "false", "no", "off")


def roll_loops(trace, outs, fixed=frozenset()):
    """Roll the repeated runs of ``trace.nodes`` (a forward trace) into loop
    nodes, in place; returns ``outs`` (nodes) with any rolled node replaced
    by the loop's part that holds its value.  ``fixed``: ids of nodes that
    stay as traced, in no loop (what a Python decision on a value read:
    its check recomputes them from the arguments); nothing they read can be
    in a loop either, so no node that reads a loop's value changes for them."""
    return _rolled(trace, outs, fixed)


def _rolled(trace, outs, fixed=frozenset()):
    """:func:`roll_loops` (and of each loop body it makes, in turn)."""
    outs, rejected, light = forward_row_writes(trace, list(outs)), set(), []
    original, keys = trace.nodes, {}
    matcher = None
    if len(original) >= MIN_NODES or primitive_count(original) >= MIN_NODES:  # (first:
        # the constants that every iteration reads)
        matcher = _Matcher(original, keys, fixed, trace.steps, trace.rows)
        trace.nodes = matcher.hoist_shared_constants()
    rolled = False
    with trace:
        for _ in range(_MAX_ROLLS):
            run, matcher = _best_run(trace.nodes, rejected, light, keys, fixed, trace.steps,
                                     trace.rows, matcher)
            if run is None:
                break
            s, p, trips = run
            new_outs = _roll(trace, outs, s, p, trips, matcher)
            if new_outs is _LIGHT:  # nor as a body of several steps: faster unrolled
                light.append((trace.nodes[s].id, trace.nodes[s + p * trips - 1].id, p))
            elif new_outs is None:  # the body did not replay as traced: left unrolled
                rejected.add((trace.nodes[s].id, p))
            else:  # (a run left as is leaves the nodes, and the matcher, as they were)
                outs, rolled, matcher = new_outs, True, None
    if not rolled:
        trace.nodes = original
    else:
        outs = _unstack(trace, outs)
    trace.drop_forgotten()  # (once, after every roll: the runs' nodes freed now)
    return outs


def _unstack(trace, outs):
    """A stack, or concatenation, of a rolled loop's per-step values in their
    order -- rows ``k0, k0 + d, ...`` of the loop's stacked output, as
    ``np.stack(xs)`` of the states a loop appended to ``xs`` reads them after
    the roll -- is those rows of it: one view (each run of :data:`MIN_TRIPS`
    or more such items of a concatenation along its first axis).  (The copy
    per step and its adjoint made a program of a loop nest per step: 14 s
    of LLVM at 300 steps.)  Rewrites ``trace.nodes`` in place; returns
    ``outs`` with a rewritten node replaced."""
    replace, kept, joined_rows = {}, [], set()
    nodes = trace.nodes
    for n in nodes:
        if replace and any(a.id in replace for a in n.args):
            n.args = tuple(replace.get(a.id, a) for a in n.args)
        kept.append(n)
        if n.op != "concatenate" or len(n.args) < MIN_TRIPS or n.attrs.get("axis") != 0:
            continue
        runs = _runs(n.args)
        if not runs:
            continue
        def joined(n=n, runs=runs):
            parts, done = [], 0
            for first, count, source, start, step in runs:
                parts += [Tracer(a, trace) for a in n.args[done:first]]
                stop = start + step * count
                view = Tracer(source, trace)[start:stop if stop >= 0 else None:step]
                item = n.args[first].shape
                shape = (count * item[0], *item[1:])
                parts.append(view if view.shape == shape else view.reshape(shape))
                done = first + count
            parts += [Tracer(a, trace) for a in n.args[done:]]
            return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
        made = spliced(trace, kept, joined)
        if made is not n and made.shape == n.shape and made.dtype == n.dtype:
            replace[n.id] = made
            joined_rows.update(a.id for a in n.args)
            joined_rows.add(n.id)
    outs = [replace.get(o.id, o) for o in outs]
    # the concatenations replaced, and the rows only they read, leave the trace (the
    # graph's signature holds no row per step)
    trace.nodes = without_dead(kept, outs, joined_rows, trace)
    return outs


def _row_of(a):
    """``(source, k)`` when ``a`` is the row ``source[k]`` (``getitem(source,
    (k,))``) or that row with a leading unit axis (a ``reshape`` to ``(1,
    *row)``), else None."""
    if a.op == "reshape" and a.shape[:1] == (1,) and a.args[0].shape == a.shape[1:]:
        a = a.args[0]
    return (a.args[0], a.attrs["index"][0]) if row_read(a) else None


def _runs(items):
    """The runs of :data:`MIN_TRIPS` or more consecutive ``items`` that are
    rows ``k0, k0 + d, ...`` of one source, alike (all with or all without the
    unit axis): ``(first item, count, source, k0, d)`` each."""
    rows = [_row_of(a) for a in items]
    runs, i = [], 0
    while i < len(items):
        if rows[i] is None or i + 1 == len(items) or rows[i + 1] is None:
            i += 1
            continue
        source, k0 = rows[i]
        step = rows[i + 1][1] - k0
        j = i + 1
        while j < len(items) and rows[j] is not None and rows[j][0] is source and \
                rows[j][1] == k0 + step * (j - i) and items[j].shape == items[i].shape and \
                items[j].op == items[i].op:
            j += 1
        if step != 0 and j - i >= MIN_TRIPS:
            runs.append((i, j - i, source, k0, step))
            i = j
        else:
            i += 1
    return runs


# -- rolling one run -------------------------------------------------------------

def _kinds(nodes, s, p, trips, m):
    """Per offset of the period: whether its node is a *leaf* (every operand
    the same outer value in every copy; a constant, or attributes that differ
    between copies: evaluated outside the loop) and whether its copies differ
    (*varying*: stacked into a per-iteration input).  ``m``: the matcher of
    ``nodes``, whose tables answer for nodes of few operands all at once
    (constants and nodes of many operands are looked at one by one)."""
    args, const, keys, wide = m._tables()
    slow = set(wide.tolist())
    copies_at = p * np.arange(trips)
    leaf, varying = [], []
    for o in range(p):
        if s + o not in slow and not const[s + o]:
            rows = s + o + copies_at  # (the operands by position: equal, the same node)
            invariant = bool((args[rows] == args[s + o]).all())
            differ = bool((keys[rows] != keys[s + o]).any())
            leaf.append(invariant and differ)
            varying.append(leaf[-1])
            continue
        first = nodes[s + o]
        copies = [nodes[s + k * p + o] for k in range(1, trips)]
        invariant = all(all(x is y for x, y in zip(first.args, c.args, strict=True))
                        for c in copies)
        seen = {id(first.attrs): _attrs_key(first)}  # (replayed copies share the dict)
        differ = any(_attrs_key_of(c, seen) != seen[id(first.attrs)] for c in copies)
        leaf.append(invariant and (first.op == "const" or differ))
        varying.append(leaf[-1] and differ)
    return leaf, varying


def _roll(trace, outs, s, p, trips, m):
    """Replace the run by a loop node; the new ``outs``, or None (left as is).
    ``m``: the matcher that found the run in ``trace.nodes`` (its positions
    and tables)."""
    nodes = trace.nodes
    end = s + trips * p
    pos = m.pos
    leaf, varying = _kinds(nodes, s, p, trips, m)
    if all(leaf):  # (nothing computed: reads of an array's rows, one an iteration)
        return None
    after = set()  # positions in the run that nodes after it (or the outputs) read
    for n in nodes[end:]:
        after.update(q for q in (pos[a.id] for a in n.args) if s <= q < end)
    after.update(q for q in (pos.get(o.id, -1) for o in outs) if s <= q < end)
    t0 = s + p  # the template: iteration 1 (its carries come from iteration 0)
    carries, lagged, consts = set(), set(), {}
    reads = []  # (offset, the offset it reads, 1: of the iteration before, 0: its own)
    fed = []  # (offset, operand): an argument of f, one an iteration (``for W in Ws``)
    table, wide = m._tables()[0], set(m._tables()[3].tolist())
    copies_at = s + p * np.arange(trips)
    for i in range(t0, t0 + p):
        if leaf[i - t0]:
            continue
        for j, a in enumerate(nodes[i].args):
            q = pos[a.id]
            if q >= t0:
                if not leaf[q - t0]:
                    reads.append((i - t0, q - t0, 0))
            elif s <= q:  # made by the iteration before
                (lagged if leaf[q - s] else carries).add(q - s)
                if not leaf[q - s]:
                    reads.append((i - t0, q - s, 1))
            elif q < s:
                if _differs(nodes, table, wide, copies_at + (i - t0), j, q):
                    fed.append((i - t0, j))  # (the matcher let only arguments differ)
                else:
                    consts.setdefault(a.id, a)
    carries, lagged = sorted(carries), sorted(lagged)
    fed, alias = _distinct_slots(nodes, table, wide, fed, s, p, trips)
    if carries and trips > MIN_TRIPS:
        r = _rotation(reads, p, [nodes[s + o].nbytes for o in range(p)])
        if r:
            return _roll(trace, outs, s + r, p, trips - 1, m)
    ys = sorted({(q - s) % p for q in after if not leaf[(q - s) % p] and
                 not ((q - s) // p == trips - 1 and (q - s) % p in carries)})
    if not carries and ys:  # (a map: no iteration reads another's values)
        if trips * sum(nodes[s + o].args[j].nbytes for o, j in fed) > FED_BYTES:
            return None
        return _map(trace, outs, s, p, trips, m, leaf, varying, lagged, fed, alias, ys,
                    after)
    work = sum(_work(nodes[t0 + o]) for o in range(p) if not leaf[o])
    breaks = sum(1 for o in range(p) if not leaf[o] and _breaks(nodes[t0 + o]))
    if work < HEAVY_STEP and trips * m.primitives(s, p) < LONG_RUN and \
            trips * breaks < ROLL_BREAKS:
        return _LIGHT  # faster unrolled, and quick enough to compile
    fed_bytes = trips * sum(nodes[s + o].args[j].nbytes for o, j in fed)
    if fed_bytes > max(FED_BYTES, trips * sum(nodes[s + o].nbytes for o in carries)):
        return None
    dtypes = {nodes[s + o].dtype for o in carries + ys}
    if not carries or len(dtypes) != 1 or next(iter(dtypes)).kind != "f":
        return None
    # per-iteration inputs: a varying leaf of this iteration, or a leaf of the one
    # before (x[i] after x[i + 1] the step before made it: the trace merged the two)
    xs = [("now", o) for o in range(p) if varying[o]] + [("before", o) for o in lagged] + \
        [("arg", slot) for slot in fed]
    once = [o for o in range(p) if leaf[o] and not varying[o]]
    lifted = [a for a in consts.values() if not _inline(a)]

    # the body: iteration 1 replayed on the body's inputs
    body = Trace()
    with body:
        specs = [nodes[s + o] for o in carries] + \
            [nodes[s + o[0]].args[o[1]] if when == "arg" else nodes[s + o] for when, o in xs] + \
            [nodes[s + o] for o in once] + lifted
        ins = [body.input(j, n.shape, n.dtype) for j, n in enumerate(specs)]
        c_in = ins[:len(carries)]
        x_in = dict(zip(xs, ins[len(carries):len(carries) + len(xs)], strict=True))
        prev = dict(zip(carries, c_in, strict=True))
        prev.update({o: t for (when, o), t in x_in.items() if when == "before"})
        env = {o: t for (when, o), t in x_in.items() if when == "now"}
        args_fed = {o: t for (when, o), t in x_in.items() if when == "arg"}
        env.update(zip(once, ins[len(carries) + len(xs):len(carries) + len(xs) + len(once)],
                       strict=True))
        outer = {a.id: t for a, t in zip(lifted, ins[len(specs) - len(lifted):], strict=True)}
        for o in range(p):
            if leaf[o]:
                continue
            node, args = nodes[t0 + o], []
            for j, a in enumerate(node.args):
                q = pos[a.id]
                if (o, j) in alias:  # (its row of the stacked arguments)
                    args.append(args_fed[alias[o, j]])
                elif q >= t0:
                    args.append(env[q - t0])
                elif q >= s:
                    args.append(prev[q - s])
                elif a.id in outer:
                    args.append(outer[a.id])
                else:  # a small literal: folded into the body, as traced
                    args.append(Tracer(body.const(a.attrs["value"], True), body))
            try:
                t = bind(node.op, *args, **node.attrs)
            except Exception:  # noqa: BLE001 -- the body does not replay: stay unrolled
                return None
            if t.shape != node.shape or t.dtype != node.dtype:
                return None
            env[o] = t
    # (the body's own runs: a loop over elements inside a time step -- a map batched,
    # a loop rolled -- as the outer trace's)
    outputs = _rolled(body, [env[o].node for o in carries + ys] + [t.node for t in c_in])
    body.lower_composites()  # (the outputs' nodes stay: lowered in place)
    lbody = LoopBody(Graph(body.nodes, [t.node for t in ins], outputs), False, len(carries),
                     len(xs))
    order = tuple(range(len(outputs)))

    # the loop, spliced into the outer trace where the run was
    head = len(nodes)
    keep = [nodes[q] for q in sorted(after) if leaf[(q - s) % p]]  # leaves read later
    kept = {n.id for n in keep}
    init = _initial(nodes, s, p, leaf, pos)
    if init is None or \
            any(o not in init for o in carries + [o for when, o in xs if when == "before"]):
        return None
    x_outer = _outer_xs(trace, s, p, trips, xs, init, keep, kept, pos)
    keep.extend(nodes[s + o] for o in once if nodes[s + o].id not in kept)
    inits = [Tracer(init[o], trace) for o in carries]
    nc, ny = len(carries), len(ys)
    packed = bind("loop", *inits, *x_outer, *[Tracer(nodes[s + o], trace) for o in once],
                  *[Tracer(a, trace) for a in lifted], body=lbody, length=int(trips), start=0,
                  reverse=False, order=order, saved=tuple(range(nc + ny, 2 * nc + ny)))
    parts = [part(packed, off, shape) for _, off, shape in layout(lbody, trips, order)]
    replace = {}
    for q in sorted(after):
        k, o = divmod(q - s, p)
        if leaf[o]:
            continue
        replace[nodes[q].id] = parts[carries.index(o)].node if k == trips - 1 and \
            o in carries and o not in ys else parts[nc + ys.index(o)][k].node  # (the
        # last of a stacked value: its row too, so that np.stack(xs) finds all of them)
    new, rest = nodes[head:], nodes[end:head]
    redirect(rest, replace)
    keep.sort(key=lambda n: pos[n.id])
    trace.nodes = nodes[:s] + keep + new + rest
    trace.forget(nodes[s:end], keep)
    return [replace.get(o.id, o) for o in outs]


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
    becomes one where ``r`` falls between its two nodes."""
    def carried(r):
        out = set()
        for o, c, lag in reads:
            if lag and c < r <= o:
                return None
            if (c >= r or o < r) if lag else c < r <= o:
                out.add(c)
        return sum(nbytes[c] for c in out)

    costs = [carried(r) for r in range(p)]
    best = min(range(p), key=lambda r: (costs[r] is None, costs[r] or 0, r))
    return best if costs[best] is not None and costs[best] < costs[0] else 0


def _distinct_slots(nodes, table, wide, fed, s, p, trips):
    """``(slots, alias)``: the operand slots of ``fed`` (``(offset, operand)``,
    each reading another value made before the run at every iteration) that
    read distinct values -- one per-iteration input each -- and each slot's
    one among them (many nodes of a step read its constant ``t + 1``: one
    input, not one per reader)."""
    distinct, alias, seen = [], {}, {}
    copies_at = s + p * np.arange(trips)
    for o, j in fed:
        rows = copies_at + o
        if int(rows[0]) in wide:
            column = tuple(nodes[r].args[j].id for r in rows.tolist())
        else:
            column = ("at", table[rows, j].tobytes())
        first = seen.setdefault(column, (o, j))
        if first == (o, j):
            distinct.append(first)
        alias[o, j] = first
    return distinct, alias


def _initial(nodes, s, p, leaf, pos):
    """Offset in the period -> the value the run's first iteration reads for
    what later ones read from the iteration before (a carry's initial value);
    None where two reads disagree."""
    init = {}
    for i in range(s, s + p):
        if leaf[i - s]:
            continue
        for x, y in zip(nodes[i].args, nodes[i + p].args, strict=True):
            if x is not y and s <= pos[y.id] < s + p:
                if init.setdefault(pos[y.id] - s, x) is not x:
                    return None
    return init


def _outer_xs(trace, s, p, trips, xs, init, keep, kept, pos):
    """The per-iteration inputs ``xs`` stacked, one tracer each; the copies
    the stacks read, made in the run, added to ``keep`` (ids in ``kept``)."""
    nodes, x_outer = trace.nodes, []
    for when, o in xs:
        copies = [nodes[s + k * p + o[0]].args[o[1]] if when == "arg" else
                  nodes[s + k * p + o] for k in range(trips)]
        if when == "before":
            copies = [init[o]] + copies[:-1]
        stacked, outside = _stack(trace, copies)
        x_outer.append(stacked)
        outside = [c for c in outside if c.id not in kept and pos.get(c.id, s) >= s]  # (an
        keep.extend(outside)  # initial value before the run stays where it is)
        kept.update(c.id for c in outside)
    return x_outer


def _map(trace, outs, s, p, trips, m, leaf, varying, lagged, fed, alias, ys, after):
    """A run whose iterations carry nothing to the next (a map: ``K[i, j] =
    k(x[i], x[j])`` in a loop over ``j``, ``ys.append(g(x[k]))``) as ONE
    iteration over its stacked per-iteration inputs -- its nodes batched
    (:func:`~.batching.vmap`), numpy's vectorized form of the loop -- each
    iteration's value read as a row of the batched one.  Returns the new
    ``outs``, or None (left as is) where the body does not batch."""
    from .batching import vmap

    nodes, pos, end, t0 = trace.nodes, m.pos, s + trips * p, s + p
    xs = [("now", o) for o in range(p) if varying[o]] + [("before", o) for o in lagged] + \
        [("arg", slot) for slot in fed]
    once = [o for o in range(p) if leaf[o] and not varying[o]]
    init = _initial(nodes, s, p, leaf, pos)
    if init is None or any(o not in init for when, o in xs if when == "before"):
        return None
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
        for o in range(p):
            if leaf[o]:
                continue
            node, args = nodes[t0 + o], []
            for j, a in enumerate(node.args):
                q = pos[a.id]
                args.append(fed_in[alias[o, j]] if (o, j) in alias else env[q - t0] if q >= t0 else
                            prev[q - s] if q >= s else Tracer(a, trace))
            env[o] = t = bind(node.op, *args, **node.attrs)
            if t.shape != node.shape or t.dtype != node.dtype:
                raise TypeError("replayed otherwise")
        batched = vmap(trace, nodes[mark:], seeds, trips)
        for q in sorted(after):
            k, o = divmod(q - s, p)
            if not leaf[o]:
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
    rest = nodes[end:head]
    redirect(rest, replace)
    keep.sort(key=lambda n: pos[n.id])
    trace.nodes = nodes[:s] + keep + [n for n in new if n.id in live] + rest
    trace.forget(nodes[s:end], keep)
    trace.forget([n for n in new if n.id not in live])
    return [replace.get(o.id, o) for o in outs]


def _work(node):
    """About how many elements ``node`` computes (a product: its multiply-adds)."""
    if node.op in ("matmul", "matvec", "dot", "tensordot", "einsum") and node.args and \
            node.args[0].shape:
        return node.size * node.args[0].shape[-1]
    return node.size if REGISTRY[node.op].kind != "view" else 0


def _breaks(node):
    """Whether ``node`` ends a fused region of elementwise work (unrolled, it is
    a loop nest of its own to compile): any but an elementwise op or a view
    that keeps its elements where they are -- a slice or a transpose of a
    value the step computed (``u[2:]``, ``x[::-1]``) reads it at other
    positions, so the steps before must be done first."""
    op = REGISTRY.get(node.op)
    return op is not None and (op.kind not in ("elementwise", "view") or
                               node.op in ("getitem", "transpose"))


def _differs(nodes, table, wide, rows, j, q):
    """Whether operand ``j`` of the nodes at ``rows`` (a node's copies, one an
    iteration) is another node than position ``q`` in some copy (the matcher's
    operand table at once; a node of many operands one by one)."""
    if int(rows[0]) not in wide:
        return bool((table[rows, j] != q).any())
    first = nodes[int(rows[0])].args[j]
    return any(nodes[r].args[j] is not first for r in rows.tolist())


def _stack(trace, copies):
    """The values of ``copies`` (one per iteration) stacked along a new first
    axis, as a tracer, and the copies the outer graph must keep for it."""
    first = copies[0]
    if all(c.op == "const" for c in copies):
        values = [c.attrs["value"] for c in copies]
        if all(c.is_literal for c in copies):
            return Tracer(trace.const(np.stack(values), True), trace), []
        rows = _rows_of_one_array(values)
        if rows is not None:  # forcing[k]: one view of the captured array's memory
            return Tracer(trace.const(rows, False), trace), []
        if all(v.nbytes <= SMALL_BYTES for v in values):
            # small arrays a plan compares by content before every call (a change
            # rebuilds it), or arrays made while tracing: their values, stacked
            return Tracer(trace.const(np.stack(values), False), trace), []
    elif set(map(_OP, copies)) == {"getitem"} and \
            len(set(map(_FIRST, map(_ARGS, copies)))) == 1:  # (C loops)
        indices = list(map(_INDEX, map(_ATTRS, copies)))
        view = _strided_items(trace, first.args[0], indices)
        if view is not None:  # x[i] for i = a, a + b, ...: one view of x
            return view, []
        if all(type(i) is tuple and len(i) == len(indices[0]) and
               all(type(k) is int for k in i) for i in indices):  # (elements x[i, j]
            # read in any order: one gather)
            at = tuple(np.array(column, np.intp) for column in zip(*indices, strict=True))
            return Tracer(first.args[0], trace)[at], []
    return np.stack([Tracer(c, trace) for c in copies]), copies  # stacked when it runs


def _strided_items(trace, source, indices):
    """``source[index]`` for each index, stacked, as one basic-indexing view:
    when the indices differ in one integer position only, by a constant step."""
    first = indices[0]
    if set(map(len, indices)) != {len(first)}:
        return None
    differ = []
    for j, column in enumerate(zip(*indices, strict=True)):  # (C loops for Python ints)
        if set(map(type, column)) == {int}:
            if min(column) != max(column):
                differ.append(j)
        else:
            signed = attr_signature(first[j])
            if any(attr_signature(k) != signed for k in column):
                differ.append(j)
    if len(differ) != 1:
        return None
    j = differ[0]
    ks = list(map(itemgetter(j), indices))
    if not set(map(type, ks)) <= {int} and not all(
            isinstance(k, (int, np.integer)) and not isinstance(k, bool) for k in ks):
        return None
    ks = np.fromiter(map(int, ks), np.int64, len(ks))
    step = int(ks[1] - ks[0]) if len(ks) > 1 else 1
    if step == 0 or (np.diff(ks) != step).any() or (ks < 0).any():
        return None
    stop = int(ks[-1]) + step
    index = list(first)
    index[j] = slice(int(ks[0]), stop if stop >= 0 else None, step)
    view = Tracer(source, trace)[tuple(index)]
    axis = sum(1 for x in first[:j] if not isinstance(x, (int, np.integer)))
    return np.moveaxis(view, axis, 0) if axis else view


def _rows_of_one_array(values):
    """The arrays ``values`` (captured by reference: ``forcing[k]`` for each
    step ``k``) as ONE strided view of the memory they share -- so the loop
    reads the caller's array in place, as the unrolled plan did -- or None
    when they are not equally spaced views of one array."""
    first = values[0]
    base = first.base
    if base is None or any(v.base is not base or v.shape != first.shape or
                           v.strides != first.strides or v.dtype != first.dtype
                           for v in values):
        return None
    ptrs = [v.__array_interface__["data"][0] for v in values]
    step = ptrs[1] - ptrs[0] if len(ptrs) > 1 else 0
    if any(b - a != step for a, b in zip(ptrs, ptrs[1:], strict=False)):
        return None
    return np.lib.stride_tricks.as_strided(first, (len(values), *first.shape),
                                           (step, *first.strides), writeable=False)


def _inline(node):
    """Whether an outer operand is copied into the body: a small literal (its
    folding and the ops' literal forms stay as traced)."""
    return node.is_literal and node.size <= 16
