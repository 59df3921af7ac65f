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

import functools
import os

import numpy as np

from ..core.trace import Trace, bind
from ..core.tracer import Tracer
from ..ir.graph import Graph, Node
from ..ir.registry import REGISTRY
from ..frontend.loops import c_operands
from ..ops.loop import LoopBody, layout, part
from .rolling_inputs import _differs, _distinct_slots, _initial, _outer_xs
from .rolling_maps import _map, _rotation, replace_run, replayed, running_sums
from .row_writes import forward_row_writes, row_read, spliced, without_dead
from .rolling_runs import (MIN_NODES, MIN_TRIPS, _at_ints, _attrs_key, _attrs_key_of,
                           _best_run, _Matcher, primitive_count)

__all__ = ["MIN_NODES", "MIN_TRIPS", "enabled", "roll_loops"]

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
    outs, rejected, light = forward_row_writes(trace, list(outs), fixed), set(), []
    original, keys = trace.nodes, {}
    matcher, undo = None, []
    if len(original) >= MIN_NODES or primitive_count(original) >= MIN_NODES:  # (first:
        # a copy of each number computed from elements for each of its readers, then
        # the constants that every iteration reads and the reads of elements in front)
        trace.nodes, undo = _unshared(trace, original, fixed)
        matcher = _Matcher(trace.nodes, keys, fixed, trace.steps, trace.rows)
        trace.nodes = matcher.hoist_constants_and_reads()
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
                # (the rows of its values that a concatenation joins: one view now,
                # before the next search would find their copies a run of their own)
                outs, rolled, matcher = _unstack(trace, new_outs), True, None
    if not rolled:
        for reader, args in undo:
            reader.args = args
        trace.nodes = original
    trace.drop_forgotten()  # (once, after every roll: the runs' nodes freed now)
    return outs


def _unshared(trace, nodes, fixed):
    """``(nodes, undo)``: ``nodes`` with a copy of each number computed from
    elements (a 0-d elementwise op of reads at ints ``x[j]``, constants and
    such numbers, a few ops deep) made right before each of the numbers that
    read it but the first, which reads the copy; ``undo``: ``(reader, its
    operands before)`` pairs.  The trace merges equal numbers: in ``out[i] =
    -x[i - 2] + 16 x[i - 1] - 30 x[i] + 16 x[i + 1] - x[i + 2]`` step ``i``
    makes ``16 x[i + 1]`` and reads ``16 x[i - 1]`` from the step two before,
    which no loop carries; with a copy each, every step computes its own from
    its elements, a map."""
    pure, read, out, undo = {}, set(), [], []  # (pure: id -> ops deep, 0 for leaves)
    few = _few_reader_literals(nodes)
    for n in nodes:
        if n.op == "const" or n.op == "getitem" and n.shape == () and _at_ints(n):
            pure[n.id] = 0  # (an element or a constant: made once, read as is)
        elif n.shape == () and n.op in _ELEMENTWISE and n.args and n.id not in fixed and \
                all(a.id in pure for a in n.args):
            deep = 1 + max(pure[a.id] for a in n.args)
            if deep <= _UNSHARED_DEPTH:  # (a number of a few ops, not a running sum's chain)
                pure[n.id] = deep
        copies = {}
        for a in n.args if pure.get(n.id) else ():  # (numbers read by numbers: a
            # running state's first values, also written into a row, stay one)
            if (pure.get(a.id) or a.id in few) and a.id not in copies:
                if a.id in read:
                    copies[a.id] = _copy(trace, a, pure, out, few)
                read.add(a.id)
        if copies:
            undo.append((n, n.args))
            n.args = tuple(copies.get(a.id, a) for a in n.args)
        out.append(n)
    return (out, undo) if undo else (nodes, undo)


def _few_reader_literals(nodes):
    """Ids of the number literals (0-d) that fewer than :data:`MIN_TRIPS` nodes
    read: a step's own constants (``A cos(0.7 t)`` of a time ``t = k h``).  The
    trace merges equal literals, and the numbers made of them: where step
    ``k``'s ``t + h`` comes out equal to step ``k + 1``'s ``t`` (most steps,
    but not all, by rounding), step ``k + 1`` read ``A cos(0.7 t)`` from the
    step before and made neither, the others made both: the run broke at each
    of those.  :func:`_unshared` gives each reader of such a number or
    literal but the first its own copy, with the literal copied too."""
    readers = {}
    for n in nodes:
        for a in n.args:
            if a.op == "const" and a.shape == () and a.attrs.get("literal"):
                readers[a.id] = readers.get(a.id, 0) + 1
    return {k for k, count in readers.items() if count < MIN_TRIPS}


def _copy(trace, node, pure, out, few):
    """A copy of number ``node`` (:func:`_unshared`) and of the numbers it is
    computed from (the literals of :func:`_few_reader_literals` too), appended
    to ``out``."""
    args = tuple(_copy(trace, a, pure, out, few) if pure.get(a.id) or a.id in few else a
                 for a in node.args)
    copy = Node(next(trace.ids), node.op, args, node.attrs, node.shape, node.dtype, node.phase)
    out.append(copy)
    return copy


_ELEMENTWISE = frozenset(name for name, op in REGISTRY.items() if op.kind == "elementwise")
#: the most ops deep a number :func:`_unshared` copies is computed
_UNSHARED_DEPTH = 8


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
        runs = sorted(_runs(n.args) + _gathered_runs(n.args), key=lambda r: r[0])
        if not runs:
            continue
        def joined(n=n, runs=runs):
            parts, done = [], 0
            for first, count, view in runs:
                parts += [Tracer(a, trace) for a in n.args[done:first]]
                view = view(trace)
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
    """``(source, k, 1)`` when ``a`` is the row ``source[k]`` (``getitem(source,
    (k,))``), ``(source, k, m)`` when it is the block of rows ``source[k:k + m]``
    (a map's rows of ``m`` steps each: a kernel matrix's rows from a map over
    its elements), either with its leading axes reshaped (a unit axis added,
    a block's rows flattened), else None."""
    if a.op == "reshape" and a.args[0].op == "getitem" and a.args[0].size == a.size:
        a = a.args[0]
    if row_read(a):
        return a.args[0], a.attrs["index"][0], 1
    index = a.attrs.get("index") if a.op == "getitem" else None
    if type(index) is tuple and len(index) == 1 and type(index[0]) is slice:
        k, stop, step = index[0].start, index[0].stop, index[0].step
        if type(k) is int and type(stop) is int and step in (None, 1) and 0 <= k < stop:
            return a.args[0], k, stop - k
    return None


def _runs(items):
    """The runs of :data:`MIN_TRIPS` or more consecutive ``items`` that are
    rows ``k0, k0 + d, ...`` of one source (or blocks of ``m`` rows, ``d =
    m``: consecutive), alike (the same op and shape): ``(first item, count,
    view)`` each, ``view(trace)`` making them one view."""
    rows = [_row_of(a) for a in items]
    return _consecutive(items, rows, _step, _at, lambda i, count, step:
                        functools.partial(_rows_view, count=count, step=step, row=rows[i]))


def _consecutive(items, rows, step_of, at, view):
    """The runs of :data:`MIN_TRIPS` or more consecutive ``items`` alike (the
    same op and shape) whose descriptions ``rows`` go on by one step: the
    step ``step_of(rows[i], rows[i + 1])`` (None: no run starts there) and
    ``at(rows[i], rows[j], step, j - i)`` for each item after.  ``(first
    item, count, view(first item, count, step))`` each."""
    runs, i = [], 0
    while i + 1 < len(items):
        step = step_of(rows[i], rows[i + 1])
        if step is None:
            i += 1
            continue
        j = i + 1
        while j < len(items) and items[j].shape == items[i].shape and \
                items[j].op == items[i].op and at(rows[i], rows[j], step, j - i):
            j += 1
        if j - i >= MIN_TRIPS:
            runs.append((i, j - i, view(i, j - i, step)))
            i = j
        else:
            i += 1
    return runs


def _step(first, second):
    """The step from row ``first`` to row ``second`` (:func:`_row_of`) of
    one source, when they may start a run (not 0; a block's size for
    blocks), else None."""
    if first is None or second is None or second[0] is not first[0] or \
            second[2] != first[2]:
        return None
    step = second[1] - first[1]
    return step if step != 0 and (first[2] == 1 or step == first[2]) else None


def _at(first, row, step, k):
    """Whether ``row`` is the ``k``-th row after ``first`` at ``step``."""
    return row is not None and row[0] is first[0] and row[2] == first[2] and \
        row[1] == first[1] + step * k


def _rows_view(trace, count, step, row):
    """``count`` rows of ``row``'s source from its own at ``step`` (:func:`_row_of`)
    as one view (blocks of rows: consecutive)."""
    source, start, m = row
    stop = start + step * count
    if m == 1:
        return Tracer(source, trace)[start:stop if stop >= 0 else None:step]
    return Tracer(source, trace)[start:stop]


def _gathered_row(a):
    """``(parts, positions, the parts' nodes)`` when ``a`` is one gather of
    the concatenation of rows or blocks of rows (:func:`_row_of`) -- an
    array's row written at some of its elements, its other elements read from
    the row of the array the writes began from (:func:`.row_writes._stacked`)
    -- else None."""
    if a.op != "gather":
        return None
    c, q = a.args
    if q.op != "const" or c.op != "concatenate" or c.attrs.get("axis") != 0:
        return None
    parts = [_row_of(x) for x in c.args]
    return None if any(r is None for r in parts) else (parts, q, c.args)


def _gathered_runs(items):
    """The runs of :data:`MIN_TRIPS` or more consecutive ``items`` that are
    gathers (:func:`_gathered_row`) at equal positions whose parts are, each,
    a run of rows of one source (the rows of a matrix that a nested loop over
    its elements wrote inside a boundary: one gather of the whole, not one a
    row): ``(first item, count, view)`` each."""
    def steps_of(first, second):  # (each part's step, or None)
        if first is None or second is None or len(first[0]) != len(second[0]):
            return None
        steps = [_step(a, b) for a, b in zip(first[0], second[0], strict=True)]
        return None if None in steps else steps

    def at(first, row, steps, k):
        return row is not None and len(row[0]) == len(first[0]) and \
            _same_positions(row[1], first[1]) and \
            all(_at(a, b, d, k) and pa.shape == pb.shape for a, b, d, pa, pb in
                zip(first[0], row[0], steps, first[2], row[2], strict=True))

    return _consecutive(items, [_gathered_row(a) for a in items], steps_of, at,
                        lambda i, count, steps: functools.partial(
                            _gathered_view, count=count, first=items[i], steps=steps))


def _same_positions(a, b):
    """Whether constants ``a`` and ``b`` hold equal positions."""
    return a is b or a.shape == b.shape and np.array_equal(a.attrs["value"], b.attrs["value"])


def _gathered_view(trace, count, first, steps):
    """The run of ``count`` gathers from ``first`` (:func:`_gathered_runs`) as
    one: the parts' runs of rows side by side, a row of them per item, and
    one gather at their positions in that."""
    c, q = first.args
    blocks = [_rows_view(trace, count, step, _row_of(x)).reshape(count, x.size)
              for x, step in zip(c.args, steps, strict=True)]
    both = np.concatenate(blocks, axis=1)
    at = np.asarray(q.attrs["value"], np.int64)
    return both.reshape(-1)[(at[None, :] + both.shape[1] * np.arange(count)[:, None]).reshape(-1)]


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
    # per-iteration inputs: a varying leaf of this iteration, a leaf of the one before
    # (x[i] after x[i + 1] the step before made it: the trace merged the two), or a value
    # made before the run, another each iteration (an argument of f, x[j], a constant)
    xs = [("now", o) for o in range(p) if varying[o]] + [("before", o) for o in lagged] + \
        [("arg", slot) for slot in fed]
    once = [o for o in range(p) if leaf[o] and not varying[o]]
    init = _initial(nodes, s, p, leaf, pos)  # (and whether every start is known)
    known = init is not None and \
        all(o in init for o in carries + [o for when, o in xs if when == "before"])
    fed_bytes = trips * sum(nodes[s + o].args[j].nbytes for o, j in fed)
    sums = running_sums(nodes, pos, s, p, trips, carries, reads, after)
    if sums is not None and (ys or sums):  # (a map: no iteration reads another's values,
        # but for the running sums it adds to)
        if fed_bytes > FED_BYTES or not known:
            return None
        return _map(trace, outs, s, p, trips, m, leaf, xs, once, init, alias, after, sums)
    work = sum(_work(nodes[t0 + o]) for o in range(p) if not leaf[o])
    # (the reads of elements each step takes, moved in front of the run for the search,
    # are the steps' own in the unrolled program: counted with them, as their
    # nodes are in m.primitives)
    reads = sum(1 for o, j in fed if _breaks(nodes[s + o].args[j]))
    breaks = reads + sum(1 for o in range(p) if not leaf[o] and _breaks(nodes[t0 + o]))
    if work < HEAVY_STEP and trips * m.primitives(s, p) < LONG_RUN and \
            trips * breaks < ROLL_BREAKS:
        return _LIGHT  # faster unrolled, and quick enough to compile
    if fed_bytes > max(FED_BYTES, trips * sum(nodes[s + o].nbytes for o in carries)):
        return None
    dtypes = {nodes[s + o].dtype for o in carries + ys}
    if not carries or len(dtypes) != 1 or next(iter(dtypes)).kind != "f":
        return None
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
        def outside(a):  # (a small literal: folded into the body, as traced)
            return outer[a.id] if a.id in outer else \
                Tracer(body.const(a.attrs["value"], True), body)
        try:
            if not replayed(nodes, pos, s, p, leaf, alias, args_fed, env, prev, outside):
                return None
        except Exception:  # noqa: BLE001 -- the body does not replay: stay unrolled
            return None
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
    if not known:
        return None
    x_outer = _outer_xs(trace, s, p, trips, xs, init, keep, kept, pos)
    keep.extend(nodes[s + o] for o in once if nodes[s + o].id not in kept)
    inits = [Tracer(init[o], trace) for o in carries]
    nc, ny = len(carries), len(ys)
    operands = [*inits, *x_outer, *[Tracer(nodes[s + o], trace) for o in once],
                *[Tracer(a, trace) for a in lifted]]
    packed = bind("loop", *c_operands(operands, nc, len(x_outer)), body=lbody,
                  length=int(trips), start=0, reverse=False, order=order,
                  saved=tuple(range(nc + ny, 2 * nc + ny)))
    parts = [part(packed, off, shape) for _, off, shape in layout(lbody, trips, order)]
    replace = {}
    for q in sorted(after):
        k, o = divmod(q - s, p)
        if leaf[o]:
            continue
        replace[nodes[q].id] = parts[carries.index(o)].node if k == trips - 1 and \
            o in carries and o not in ys else parts[nc + ys.index(o)][k].node  # (the
        # last of a stacked value: its row too, so that np.stack(xs) finds all of them)
    return replace_run(trace, outs, s, end, head, keep, nodes[head:], replace, pos)


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


def _inline(node):
    """Whether an outer operand is copied into the body: a small literal (its
    folding and the ops' literal forms stay as traced)."""
    return node.is_literal and node.size <= 16
