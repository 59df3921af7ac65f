"""Transforms stage: the memory plan -- where every node's value lives.

Storage kinds:

* ``input``   -- the caller's array, bound per call (copied into a staging
  buffer only when it is not C-contiguous);
* ``const``   -- the constant array itself (captured arrays by reference);
* ``view``    -- a view of its first operand (reshape, transpose, slicing,
  broadcast_to); a reshape that cannot be a view gets a buffer and a copy;
* ``alias``   -- the same storage as an operand (:attr:`MemoryPlan.alias_of`):
  an in-place op's first operand, or -- when the backend asks for reuse -- an
  elementwise region writing over an operand buffer of its shape and dtype
  that nothing reads afterwards (the region reads each element before it
  writes it: same index, same loop);
* ``buffer``  -- a slot in the workspace arena: one allocation per dtype,
  made once per plan, 64-byte aligned slots.

Buffers share the arena by *liveness*: the schedule is the graph's node
order (the forward sweep, then the backward sweep), and each buffer lives from
the node that writes it to the last node that reads its storage (through
views and in-place updates; a graph output to the end).  A forward value the
backward does not read dies at its last forward use; one it reads lives until
then; an adjoint dies once consumed.  Intervals are inclusive, so an op's
result never shares memory with an operand it reads (in-place writes are
explicit ``alias`` storage instead).  Buffers are packed greedily, largest
first, each at the lowest offset free of every buffer whose lifetime overlaps
its own (the heap simulation of XLA and TFLite).  :attr:`MemoryPlan.lower_bound`
is the most bytes live at any point of the schedule -- no arena can be
smaller -- and :attr:`MemoryPlan.naive_bytes` what one slot per buffer would
take.  Gradient outputs a backend writes straight into the caller's result
buffers (``direct``) take no arena space -- unless a node that can fail at
run time (:attr:`hybridad.ops.Op.raises`) comes after their first write: a
failed call writes nothing.

Everything is allocated when the plan is built, so calls allocate nothing.
"""

from __future__ import annotations

import gc

import numpy as np

from ..ir.registry import storage_roots
from ..ops import REGISTRY, may_raise, storage_root
from ..ops import loop as _loop

__all__ = ["MemoryPlan", "MemoryProfile", "held_bytes", "layout_proto", "op_workspaces",
           "plan_memory", "poison_schedule"]

ALIGN = 64


class MemoryPlan:
    """Result of :func:`plan_memory`.

    Attributes
    ----------
    storage : dict
        node id -> ``"input" | "const" | "view" | "alias" | "buffer"``.
    slots : dict
        node id -> ``(dtype, offset_bytes, nbytes, shape)`` for ``buffer`` nodes.
    arena_bytes : dict
        dtype -> bytes of that dtype's arena.
    materialized : set
        ids of view nodes that get a buffer and a copy instead (a reshape whose
        operand's layout forbids a view, or what a backend asked for).
    in_place : dict
        node id -> the backend's description of how its readers index the
        node's operands: nodes the backend does not make at all (a
        concatenation read in place, see :func:`plan_memory`).
    """

    def __init__(self, storage, slots, arena_bytes, materialized, scratch=None, alias_of=None,
                 lifetimes=None, direct=None, order=(), naive_bytes=None, live_bytes=(),
                 in_place=None, held_bytes=0, direct_first=1):
        self.in_place = in_place or {}
        #: bytes ops keep beside the arenas (:attr:`hybridad.ops.Op.held`: a
        #: loop's carries and its body's workspace)
        self.held_bytes = held_bytes
        self.scratch = scratch or {}  # node id -> (dtype, offset_bytes, count)
        self.alias_of = alias_of or {}  # alias node id -> the operand node it overwrites
        self.arenas = {}  # dtype -> the flat arena (typed view), set by allocate()
        self.storage = storage
        self.slots = slots
        self.arena_bytes = arena_bytes
        self.materialized = materialized
        #: buffer node id, or ("scratch", node id) -> (first, last) schedule
        #: positions, inclusive
        self.lifetimes = lifetimes or {}
        #: root buffer node id -> graph output position: written straight into
        #: the caller's result buffer, no arena slot
        self.direct = direct or {}
        #: the first output position that can be direct (1: not a plan's value;
        #: 0: a loop body's, whose every output is a carry or a row)
        self.direct_first = direct_first
        #: node ids in schedule order
        self.order = list(order)
        #: dtype -> bytes one slot per buffer would take
        self.naive_bytes = naive_bytes or dict(arena_bytes)
        #: bytes of arena live after each schedule position
        self.live_bytes = np.asarray(live_bytes, dtype=np.int64)

    @property
    def total_bytes(self):
        """Bytes of all arenas and of what ops keep beside them (what the plan holds)."""
        return sum(self.arena_bytes.values()) + self.held_bytes

    @property
    def lower_bound(self):
        """The most bytes live at one point of the schedule (no arena is smaller)."""
        return int(self.live_bytes.max()) if self.live_bytes.size else 0

    @property
    def naive_total(self):
        """Bytes with one slot per buffer (no reuse)."""
        return sum(self.naive_bytes.values())

    def scratch_view(self, nid):
        """The allocated scratch slot of node ``nid`` (after :meth:`allocate`)."""
        dt, off, count = self.scratch[nid]
        return self.arenas[dt][off // dt.itemsize:off // dt.itemsize + count]

    def direct_positions(self, nodes, outputs):
        """buffer node id -> output position, for the gradient outputs one
        program of the plan computes straight into the caller's buffer (no
        copy at the end): the ``direct`` roots (they have no arena slot) among
        ``nodes``, placed at that program's ``outputs`` positions."""
        by_id = {n.id: n for n in nodes}
        direct = {}
        for k, n in enumerate(outputs):
            if k < self.direct_first or n is None or n.id not in by_id:
                continue
            root = by_id[n.id]
            while self.storage[root.id] == "alias":
                root = self.alias_of[root.id]
            if root.id in self.direct:
                direct.setdefault(root.id, k)
        return direct

    def allocate(self, xp=np):
        """Allocate the arenas (one allocation per dtype, with array module
        ``xp``: numpy, or cupy on the GPU); return node id -> view for buffer
        nodes.

        Arenas of :data:`COLLECT_ABOVE` bytes or more run Python's collector
        first.  A plan is a reference cycle (its fast paths call back into
        it), so a plan the program dropped keeps its arenas until the
        collector runs -- and a plan built lives long enough to reach its
        oldest generation, collected rarely: a program rebuilding a 120 MB
        plan in a loop held two to three of them.  The dropped plans' arenas
        go before the new one is allocated."""
        if self.total_bytes >= COLLECT_ABOVE:
            gc.collect()
        arenas = {dt: xp.zeros(max(n, 1), np.uint8) for dt, n in self.arena_bytes.items()}
        self.arenas = {dt: a[:a.size - a.size % dt.itemsize].view(dt) for dt, a in arenas.items()}
        return {nid: _slot_view(arenas[dt], off, shape, dt)
                for nid, (dt, off, nbytes, shape) in self.slots.items()}


class MemoryProfile:
    """Live workspace bytes over a plan's schedule (:meth:`Plan.memory_profile`).

    Attributes
    ----------
    live_bytes : ndarray of int64
        Bytes live at each schedule step.
    labels, phases : list of str
        The node run at each step (``"%12 region"``) and its sweep.
    arena_bytes, lower_bound, naive_bytes : int
        The arena's size, the largest ``live_bytes``, and one slot per buffer.
    name : str
        The function's name.
    """

    def __init__(self, live_bytes, labels, phases, arena_bytes, lower_bound, naive_bytes,
                 name=""):
        self.live_bytes = live_bytes
        self.labels = labels
        self.phases = phases
        self.arena_bytes = arena_bytes
        self.lower_bound = lower_bound
        self.naive_bytes = naive_bytes
        self.name = name

    def __repr__(self):
        return (f"<MemoryProfile {self.name}: {len(self.live_bytes)} steps, peak live "
                f"{self.lower_bound} B, arena {self.arena_bytes} B, one slot per buffer "
                f"{self.naive_bytes} B>")

    def table(self):
        """The curve as text: one line per step."""
        return "\n".join(f"{i:>5} {p:<8} {lab:<28} {b:>14}" for i, (p, lab, b) in
                         enumerate(zip(self.phases, self.labels, self.live_bytes, strict=True)))

    def plot(self, path):
        """Save the curve (live bytes per step, the arena and the naive sum) as an image."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 4))
        steps = np.arange(len(self.live_bytes))
        ax.step(steps, self.live_bytes / 2**20, where="mid", label="live")
        ax.axhline(self.arena_bytes / 2**20, color="C1", ls="--", label="arena (packed)")
        ax.axhline(self.naive_bytes / 2**20, color="C2", ls=":", label="one slot per buffer")
        back = [i for i, p in enumerate(self.phases) if p == "backward"]
        if back:
            ax.axvline(back[0] - 0.5, color="grey", lw=0.8)
            ax.text(back[0], ax.get_ylim()[1] * 0.95, " backward", color="grey", va="top")
        ax.set_xlabel("schedule step (graph node)")
        ax.set_ylabel("MiB")
        ax.set_title(f"workspace of {self.name}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return path


def _slot_view(arena, offset, shape, dtype):
    count = int(np.prod(shape, dtype=np.int64))
    return arena[offset:offset + count * dtype.itemsize].view(dtype).reshape(shape)


def layout_proto(node, protos=None):
    """An array with the node's strides (zero memory for C-contiguous storage):
    ``protos[node.id]`` when given there, else C-contiguous strides."""
    protos = protos or {}
    if node.id in protos:
        return protos[node.id]
    strides, step = [], node.dtype.itemsize
    for s in reversed(node.shape):
        strides.insert(0, step)
        step *= max(s, 1)
    return np.lib.stride_tricks.as_strided(np.zeros(1, node.dtype), node.shape, strides)


def op_workspaces(nodes):
    """node id -> (dtype, elements) of the working memory ops declare
    (:attr:`hybridad.ops.Op.workspace`), for :func:`plan_memory`'s ``scratch``."""
    out = {}
    for n in nodes:
        op = REGISTRY.get(n.op)
        if op is not None and op.workspace is not None:
            out[n.id] = (n.dtype, op.work_elements(*n.args, **n.attrs))
    return out


def plan_memory(graph, materialize=(), scratch=None, reuse=False, direct_outputs=False,
                pack=True, pinned=(), in_place=None):
    """Assign storage to every node of ``graph`` (see module docstring).

    ``materialize``: ids of view nodes the backend wants copied into a buffer.
    ``scratch``: node id -> (dtype, element count) of working space the
    backend's code for that node needs (an arena slot live during that node).
    ``reuse``: let elementwise regions write over a dying operand buffer.
    ``direct_outputs``: the backend writes gradient outputs (all but the
    first; ``"all"``: every output, as a loop body's carries) straight into
    the caller's buffers: their storage takes no slot.
    ``pack``: share slots between buffers whose lifetimes do not overlap
    (False: one slot per buffer, the naive sum -- for comparison).
    ``pinned``: ids of nodes that live to the end of the schedule like the
    outputs (values a later program of the plan reads, see
    :mod:`hybridad.plans.staged`).
    ``in_place``: node id -> the backend's description, for nodes the
    backend reads in place through their operands instead of making them
    (:func:`hybridad.backends.numba.layouts.read_in_place`: a concatenation
    of slices of one array, whose readers index that array): they take the
    storage ``view`` of their first operand -- no slot, and the array they
    read lives as long as they are read.
    """
    in_place = in_place or {}
    storage, copies, protos, alias_of = {}, set(), {}, {}
    users = graph.users()
    outputs = {n.id for n in graph.outputs if n is not None} | set(pinned)
    buffers = []
    for node in graph.nodes:
        if node.op in ("input", "const"):
            storage[node.id] = node.op
            if node.op == "const":
                protos[node.id] = node.attrs["value"]
            continue
        kind = REGISTRY[node.op].kind
        if kind == "inplace":
            storage[node.id] = "alias"
            alias_of[node.id] = node.args[0]
            protos[node.id] = layout_proto(node.args[0], protos)
            continue
        target = _reusable_operand(node, storage, users, outputs) if reuse else None
        if target is not None:
            storage[node.id] = "alias"
            alias_of[node.id] = target
            protos[node.id] = layout_proto(target, protos)
            continue
        if node.id in in_place and kind != "view":  # read in place: no storage of its own
            storage[node.id] = "view"
            continue
        if kind == "view" and node.id in materialize:
            copies.add(node.id)
        elif kind == "view":
            base = layout_proto(node.args[0], protos)
            try:
                if node.op == "reshape":
                    view = np.reshape(base, node.attrs["shape"], copy=False)
                else:
                    view = REGISTRY[node.op].view(base, **node.attrs)
                storage[node.id] = "view"
                protos[node.id] = view
                continue
            except ValueError:
                copies.add(node.id)  # falls through: gets a buffer, then a copy
        storage[node.id] = "buffer"
        buffers.append(node)

    roots = {}  # node id -> its root, for every node a walk passed (chains are walked once:
    # a gradient accumulated in place over T steps is a chain of T aliases)

    def root_of(node):
        path = []
        while storage[node.id] in ("alias", "view"):
            known = roots.get(node.id)
            if known is not None:
                node = known
                break
            path.append(node.id)
            node = alias_of[node.id] if storage[node.id] == "alias" else node.args[0]
        for nid in path:
            roots[nid] = node
        return node

    direct_first = 0 if direct_outputs == "all" else 1
    direct = _direct(graph.outputs, storage, alias_of, direct_first) if direct_outputs else {}
    if pinned:  # read by a later program: kept in the arena, not in a caller's buffer
        kept = {root_of(n).id for n in graph.nodes if n.id in pinned}
        direct = {rid: k for rid, k in direct.items() if rid not in kept}
    pos = {n.id: i for i, n in enumerate(graph.nodes)}
    end_of_schedule = len(graph.nodes)
    first, last = {}, {}
    for node in buffers:
        first[node.id] = last[node.id] = pos[node.id]
        if node.op == "region_partial":  # written by its region's kernel
            first[node.id] = pos[node.args[0].id]
    for node in graph.nodes:
        if storage[node.id] in ("input", "const"):
            continue
        root = root_of(node)
        if root.id not in first:
            continue
        reads = [pos[u.id] for u in users[node.id]] + [pos[node.id]]
        if node.id in outputs:
            reads.append(end_of_schedule)
        last[root.id] = max(last[root.id], *reads)
    direct = _direct_after_failures(graph.nodes, direct, first, pos)
    items = [(nid, node.dtype, node.nbytes, first[nid], last[nid]) for node in buffers
             if (nid := node.id) not in direct]
    for nid, (dt, count) in (scratch or {}).items():
        dt = np.dtype(dt)
        items.append((("scratch", nid), dt, count * dt.itemsize, pos[nid], pos[nid]))
    offsets, arena = _pack(items, pack)
    slots, scratch_slots = {}, {}
    by_id = {n.id: n for n in buffers}
    for key, dt, nbytes, _, _ in items:
        if isinstance(key, tuple):
            scratch_slots[key[1]] = (dt, offsets[key], nbytes // dt.itemsize)
        else:
            slots[key] = (dt, offsets[key], nbytes, by_id[key].shape)
    naive = {}
    live = np.zeros(end_of_schedule + 1, dtype=np.int64)
    for _, dt, nbytes, a, b in items:
        naive[dt] = naive.get(dt, 0) + _aligned(nbytes)
        live[a:b + 1] += nbytes
    lifetimes = {key: (a, b) for key, _, _, a, b in items}
    return MemoryPlan(storage, slots, arena, copies, scratch_slots, alias_of,
                      lifetimes=lifetimes, direct=direct, order=[n.id for n in graph.nodes],
                      naive_bytes=naive, live_bytes=live[:end_of_schedule],
                      in_place=in_place,
                      held_bytes=held_bytes(n for n in graph.nodes if n.id not in (scratch or {})),
                      direct_first=direct_first)


#: the arena size from which :meth:`MemoryPlan.allocate` collects first (a
#: full collection takes milliseconds; a plan this large takes far longer to build)
COLLECT_ABOVE = 32 << 20


def _body_memory(graph):
    """A loop body's workspace (for :attr:`hybridad.ops.Op.held` of ``loop``)."""
    return plan_memory(graph, (), op_workspaces(graph.nodes), reuse=True)


def held_bytes(nodes):
    """Bytes the ops of ``nodes`` keep beside the arena (:attr:`hybridad.ops.Op.held`).
    :func:`plan_memory` counts the nodes without scratch only: a backend that
    gives an op its held memory in the arena (a numba plan's loop whose body
    runs natively: :func:`hybridad.backends.numba.layouts.loop_workspace`)
    asks for it as the node's scratch."""
    total = 0
    for n in nodes:
        op = REGISTRY.get(n.op)
        if op is not None and op.held is not None:
            total += int(op.held(n))
    return total


def poison_schedule(memplan):
    """For instrumented runs: ``"start"`` -> every floating-point slot, and
    node id -> the floating-point slots whose lifetime ends at that node
    (buffer ids, ``("scratch", id)``).  A backend that fills these with NaN
    at those points proves that no value is read outside its lifetime: any
    such read would turn the results into NaN."""
    out = {"start": []}
    for key, (_, b) in memplan.lifetimes.items():
        dt = (memplan.scratch[key[1]][0] if isinstance(key, tuple) else memplan.slots[key][0])
        if dt.kind not in "fc":
            continue
        out["start"].append(key)
        if b < len(memplan.order):  # graph outputs live to the end
            out.setdefault(memplan.order[b], []).append(key)
    return out


def _aligned(nbytes):
    return -(-max(nbytes, 1) // ALIGN) * ALIGN


def _direct(outputs, storage, alias_of, first=1):
    """root buffer id -> output position, for the outputs from position
    ``first`` on (1: the gradients, not the 0-d value; 0: every output, a
    loop body's carries) stored in a buffer (through in-place updates, not
    views: a transposed output cannot be its own buffer) no other output
    shares."""
    roots = {}
    for k, n in enumerate(outputs):
        if k < first or n is None:
            continue
        root = n
        while storage[root.id] == "alias":
            root = alias_of[root.id]
        if storage[root.id] == "buffer":
            roots.setdefault(root.id, []).append(k)
    return {rid: ks[0] for rid, ks in roots.items() if len(ks) == 1}


def _direct_after_failures(nodes, direct, first, pos):
    """``direct`` without the outputs first written before the last node that
    can fail at run time (a singular matrix in LAPACK): a call that raises
    must leave the caller's buffers untouched, so those are computed in the
    arena and copied at the end.  A plan with no such node keeps them all.
    In-place writes into an argument (an optimizer step's) must come after
    that node too (:func:`hybridad.transforms.updates.schedule_updates` orders them)."""
    fails = [pos[n.id] for n in nodes if may_raise(n)]
    if not fails:
        return direct
    last = max(fails)
    roots = storage_roots(nodes)  # (one sweep: an accumulation chain is long)
    ops = {n.id: n.op for n in nodes}
    for n in nodes:
        if n.op in REGISTRY and REGISTRY[n.op].kind == "inplace" and pos[n.id] < last and \
                ops.get(roots[n.id], storage_root(n).op) == "input":
            raise AssertionError(f"%{n.id} {n.op} writes into an argument before %{nodes[last].id} "
                                 f"{nodes[last].op}, which can fail")
    return {rid: k for rid, k in direct.items() if first[rid] > last}


#: items of one dtype up to which :func:`_pack` places greedily by size (its
#: cost grows with the square of the items); beyond, in schedule order
GREEDY_MAX = 4096


def _pack(items, pack):
    """key -> byte offset, and dtype -> arena bytes, for ``items`` of
    ``(key, dtype, nbytes, first, last)`` (lifetimes inclusive, in schedule
    positions); items of one dtype whose lifetimes overlap never share bytes.

    Up to :data:`GREEDY_MAX` items of a dtype: greedy by size, largest first,
    each at the lowest 64-byte aligned offset where it overlaps no placed
    item whose lifetime overlaps its own (tight, quadratic).  More (a long
    unrolled loop): :func:`_pack_in_order`, in n log n.  Either is a
    function of the items alone."""
    offsets, arena = {}, {}
    if not pack:
        for key, dt, nbytes, _, _ in items:
            offsets[key] = arena.get(dt, 0)
            arena[dt] = offsets[key] + _aligned(nbytes)
        return offsets, arena
    by_dtype = {}
    for item in items:
        by_dtype.setdefault(item[1], []).append(item)
    for dt, group in by_dtype.items():
        place = _pack_greedy if len(group) <= GREEDY_MAX else _pack_in_order
        arena[dt] = place(group, offsets)
    return offsets, arena


def _pack_greedy(items, offsets):
    """Greedy by size (see :func:`_pack`); returns the arena's bytes."""
    n = len(items)
    firsts, lasts = np.empty(n, np.int64), np.empty(n, np.int64)
    starts, ends = np.empty(n, np.int64), np.empty(n, np.int64)
    top = 0
    order = sorted(range(n), key=lambda i: (-items[i][2], items[i][3], i))
    for count, i in enumerate(order):
        key, _, nbytes, a, b = items[i]
        size = _aligned(nbytes)
        offset = 0
        if count:
            busy = (firsts[:count] <= b) & (lasts[:count] >= a)
            if busy.any():
                lo, hi = starts[:count][busy], ends[:count][busy]
                ranks = np.argsort(lo, kind="stable")
                for s, e in zip(lo[ranks].tolist(), hi[ranks].tolist(), strict=True):
                    if s - offset >= size:
                        break
                    offset = max(offset, e)
        offsets[key] = offset
        firsts[count], lasts[count], starts[count], ends[count] = a, b, offset, offset + size
        top = max(top, offset + size)
    return top


def _pack_in_order(items, offsets):
    """Place ``items`` as an allocator would while the schedule runs: at each
    item's first position the ones dead before it are freed (merged with
    free neighbours) and it takes the smallest free block that holds it
    (the lowest such), else the arena grows.  n log n in the items, plus the
    free list's length per placement (short: neighbours merge).  Returns
    the arena's bytes."""
    import bisect
    import heapq

    free = []         # sorted (size, offset) of free blocks
    free_at = {}      # offset -> size of a free block
    free_end = {}     # end offset -> offset of a free block
    dying = []        # heap of (last, offset, size) of live items
    top = peak = 0    # the arena's current end and its largest

    def release(offset, size):
        nonlocal top
        end = offset + size
        after = free_at.pop(end, None)
        if after is not None:  # merge with the free block after it
            free.pop(bisect.bisect_left(free, (after, end)))
            del free_end[end + after]
            size += after
            end += after
        before = free_end.pop(offset, None)
        if before is not None:  # and with the one before
            free.pop(bisect.bisect_left(free, (offset - before, before)))
            del free_at[before]
            size += offset - before
            offset = before
        if end == top:  # the arena's tail: give it back
            top = offset
            return
        free_at[offset], free_end[end] = size, offset
        bisect.insort(free, (size, offset))

    order = sorted(range(len(items)), key=lambda i: (items[i][3], -items[i][2], i))
    for i in order:
        key, _, nbytes, a, b = items[i]
        while dying and dying[0][0] < a:
            _, off, sz = heapq.heappop(dying)
            release(off, sz)
        size = _aligned(nbytes)
        k = bisect.bisect_left(free, (size, -1))
        if k < len(free):
            have, offset = free.pop(k)
            del free_at[offset], free_end[offset + have]
            if have > size:  # the rest stays free
                rest = offset + size
                free_at[rest], free_end[offset + have] = have - size, rest
                bisect.insort(free, (have - size, rest))
        else:
            offset = top
            top += size
            peak = max(peak, top)
        offsets[key] = offset
        heapq.heappush(dying, (b, offset, size))
    return peak


def _reusable_operand(node, storage, users, outputs):
    """An operand buffer an elementwise ``region`` may overwrite, or None."""
    if node.op != "region" or node.attrs["mode"] != "value" or \
            node.attrs["body"].reduction is not None:
        return None
    for a in node.args:
        if a.shape == node.shape and a.dtype == node.dtype and a.id not in outputs and \
                storage.get(a.id) == "buffer" and all(u is node for u in users[a.id]):
            return a
    return None


_loop.TRANSFORMS.update(plan_memory=_body_memory)
