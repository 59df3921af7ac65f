"""How buffers look to the generated numba code: which views become copies
(:func:`materialize_for_numba`), which concatenations are read in place
instead of copied (:func:`read_in_place`), scratch buffers, and each
buffer's layout (:func:`numba_layouts`)."""

from __future__ import annotations

import itertools
import os
import sys

from ...ir.registry import storage_roots
from ...ops import REGISTRY, storage_root
from ...transforms.machine import matvec_matrix
from ...transforms.memory import layout_proto, op_workspaces, plan_memory
from .reduce import reduction_scratch
from .runner import view_at
from .machine import machine
from .threshold import (BODY_PARALLEL_MIN, design_threads, environment_threads, loops_serial,
                        numba_config_threads, serial_loops, work_estimate)
from .leading import leading_blocks, leading_scratch
from .rowblocks import row_scratch, rows_in_blocks
from .tiles import with_tiles

__all__ = ["ShiftMap", "materialize_for_numba", "numba_layouts", "read_in_place",
           "scratch_for_numba", "view_statement"]


def materialize_for_numba(nodes, in_place=()):
    """Ids of view nodes to copy into buffers: indexing views that are not one
    contiguous piece of a C array, and reshapes of operands numba does not
    type as C-contiguous.

    A contiguous slice (``x[1:]``, ``A[2:5]``, ``A[i]``) of a C array whose
    data address the generated code knows (an argument, a buffer, a captured
    constant passed by object, or such a view of one) stays a view: the
    address plus an offset, typed C-contiguous -- no copy.  So does a strided
    slice of a C array (``A[:, 1:]``, ``x[::2]``) that only fused regions and
    concatenations (``np.roll``) read: their loops index it in place (a numba
    array view, typed ``"A"``).  Nodes of ``in_place`` (:func:`read_in_place`)
    are not made at all: their readers index the source."""
    from .abi import ABI

    objects = ABI is not None  # arrays arrive by object: their addresses are known
    layout, addressed, out = {}, {}, set()
    readers = {}
    for n in nodes:
        for i, a in enumerate(n.args):
            readers.setdefault(a.id, []).append((n, i))
    for n in nodes:
        if n.id in in_place:
            layout[n.id], addressed[n.id] = "A", False
        elif n.op == "input":
            layout[n.id], addressed[n.id] = "C", objects
        elif n.op == "const":
            v = n.attrs["value"]
            layout[n.id] = "C" if v.flags.c_contiguous else "A"
            addressed[n.id] = objects and v.flags.c_contiguous and v.flags.aligned and \
                v.dtype.isnative and not (n.is_literal and n.size == 1)
        elif REGISTRY[n.op].kind == "inplace":
            layout[n.id], addressed[n.id] = layout[n.args[0].id], addressed[n.args[0].id]
        elif n.op == "reshape" and layout[n.args[0].id] == "C":
            layout[n.id], addressed[n.id] = "C", addressed[n.args[0].id]
        elif n.op == "getitem" and addressed[n.args[0].id] and \
                contiguous_getitem_offset(n) is not None:
            layout[n.id], addressed[n.id] = "C", True
        elif n.op == "getitem" and strided_in_place(n, layout, readers):
            layout[n.id], addressed[n.id] = "A", False
        elif n.op in ("transpose", "broadcast_to") and not _loop_reads_in_place(n, layout, readers):
            # (a loop reads its operands C-contiguous -- an xs its rows: copied once by
            # the plan, not staged by its runner at each call, and the plan's code runs
            # it in place)
            out.add(n.id)
            layout[n.id], addressed[n.id] = "C", True
        elif n.op in ("transpose", "broadcast_to"):
            layout[n.id], addressed[n.id] = "A", False
        else:
            if REGISTRY[n.op].kind == "view":
                out.add(n.id)
            layout[n.id], addressed[n.id] = "C", True
    return out


def _loop_reads_in_place(n, layout, readers):
    """Whether every loop reading view ``n`` (a transpose or a broadcast) finds
    it C-contiguous where it reads it: a carry or constant whole, an xs from
    its rows on (a broadcast along the steps only: step 0 between C rows)."""
    for r, i in readers.get(n.id, ()):
        if r.op != "loop":
            continue
        body = r.attrs["body"]
        rows = 1 if body.n_carry <= i < body.n_carry + body.n_xs else 0
        if n.op == "transpose" or layout[n.args[0].id] != "C":
            return False
        src, shape = n.args[0].shape, n.shape
        lead = len(shape) - len(src)
        if any(shape[d] > 1 and (d < lead or src[d - lead] != shape[d])
               for d in range(rows, len(shape))):
            return False
    return True


class ShiftMap:
    """A node's elements as those of ``source`` at shifted positions.

    ``axes[d]``: ``(lo, hi, offset)`` intervals tiling the node's axis ``d``;
    ``drive[j]``: the node axis whose index, plus the offset of its interval
    there, is the source's index along source axis ``j`` -- or None: the
    source's index there is ``const[j]`` (an axis of length 1 dropped, an
    integer index).  A node axis driving no source axis has length 1.  Each
    offset depends on one axis's index only: ``np.roll`` along any axes and
    slices of it, broadcast against higher ranks."""

    __slots__ = ("source", "axes", "drive", "const")

    def __init__(self, source, axes, drive, const):
        self.source, self.axes, self.drive, self.const = source, axes, drive, const

    @classmethod
    def identity(cls, node):
        nd = len(node.shape)
        return cls(node, tuple(((0, s, 0),) for s in node.shape), tuple(range(nd)), (0,) * nd)

    def __repr__(self):
        return f"ShiftMap(%{self.source.id}, {self.axes}, drive={self.drive}, const={self.const})"


def _shift_map(node, maps):
    """``node``'s :class:`ShiftMap` from its op's ``shifts`` rule composed with
    its operands' maps (``maps``; an operand without one is the source
    itself), or None: not of that kind, pieces of several sources, or an
    offset along an axis that depends on another axis's index."""
    rule = REGISTRY[node.op].shifts
    pieces = rule(*node.args, **node.attrs) if rule is not None and node.size else None
    if pieces is None:
        return None
    boxes, found = [], None
    for k, lo, hi, index in pieces:
        a = node.args[k]
        m = maps.get(a.id) or ShiftMap.identity(a)
        per_axis = [[(0, 1, 0)] if top - bottom == 1 else None
                    for bottom, top in zip(lo, hi, strict=True)]
        drive, const = list(m.drive), list(m.const)
        for j, where in enumerate(index):  # operand axis j: a node axis's index + off, or c
            if isinstance(where, tuple):
                d, off = where
                per_axis[d] = [(max(lo[d], l1 - off), min(hi[d], h1 - off), off + o1)
                               for l1, h1, o1 in m.axes[j]
                               if max(lo[d], l1 - off) < min(hi[d], h1 - off)]
            else:
                at = [o1 for l1, h1, o1 in m.axes[j] if l1 <= where < h1]
            for t, dj in enumerate(m.drive):
                if dj == j:
                    drive[t], const[t] = (d, 0) if isinstance(where, tuple) else \
                        (None, where + at[0])
        if any(ivs is None for ivs in per_axis) or found is not None and \
                found != (m.source, drive, const):
            return None  # (a node axis longer than 1 driving nothing: not a shift)
        found = (m.source, drive, const)
        boxes += itertools.product(*per_axis)
    if found is None or found[0].is_literal and found[0].size == 1:
        return None
    source, drive, const = found
    axes, count = [], 1
    for d, n in enumerate(node.shape):
        ivs, at = sorted({b[d] for b in boxes}), 0
        for lo, hi, _ in ivs:  # the intervals tile the axis, one offset each
            if lo != at:
                return None
            at = hi
        if at != n:
            return None
        count *= len(ivs)
        merged = [ivs[0]]
        for lo, hi, o in ivs[1:]:
            if o == merged[-1][2]:
                merged[-1] = (merged[-1][0], hi, o)
            else:
                merged.append((lo, hi, o))
        axes.append(tuple(merged))
    if count != len(boxes):  # not every combination of the axes' intervals is a box
        return None
    return ShiftMap(source, tuple(axes), tuple(drive), tuple(const))


def read_in_place(nodes, outputs=()):
    """node id -> :class:`ShiftMap`: the concatenations (``np.roll``'s) and
    slices of them that the plan does not make at all, whose readers -- fused
    regions' loops (``region``: no fused reduction, or a ``vjp`` one;
    ``region_acc`` operands) -- index their source at shifted positions
    instead (:func:`hybridad.backends.numba.loops.operand_read`; a loop's
    innermost axis is cut where an offset along it changes).

    A node qualifies when its op declares ``shifts``
    (:attr:`hybridad.ir.registry.Op.shifts`) and the composition with its
    operands' maps is one source at offsets that per axis depend on that
    axis's index only (:func:`_shift_map`); when every reader is such a
    region or another node of the result; when it is no graph output; and
    when nothing writes in place into the source's storage from the node to
    its readers.  Views (slices, reshapes) are included only where they lead
    to, or are cut from, such a concatenation (a plain slice stays a view,
    :func:`materialize_for_numba`).  The memory plan gives the
    concatenations view storage of their first operand, so the source lives
    while they are read (:func:`hybridad.transforms.memory.plan_memory`)."""
    readers, pos = {}, {}
    for k, n in enumerate(nodes):
        pos[n.id] = k
        for i, a in enumerate(n.args):
            readers.setdefault(a.id, []).append((n, i))
    external = {n.id for n in outputs if n is not None}
    roots = storage_roots(nodes)  # (one sweep: an accumulation chain is long)
    writes = [(pos[n.id], roots[n.id]) for n in nodes
              if n.op in REGISTRY and REGISTRY[n.op].kind == "inplace"]
    shifts = {n.id for n in nodes if REGISTRY.get(n.op) is not None and
              REGISTRY[n.op].shifts is not None}
    cand = {n.id for n in nodes if n.id in shifts and REGISTRY[n.op].kind != "view"}
    for n in reversed(nodes):  # and the views (slices, reshapes) leading to them ...
        if n.id in shifts and any(u.id in cand for u, _ in readers.get(n.id, ())):
            cand.add(n.id)
    for n in nodes:  # ... or cut from them
        if n.id in shifts and n.args and n.args[0].id in cand:
            cand.add(n.id)

    def reader_ok(m, u, i):
        if u.id in cand:
            return True
        if u.op == "region":
            ok = u.attrs["mode"] == "vjp" and "axis" not in u.attrs or \
                u.attrs["mode"] == "value" and u.attrs["body"].reduction is None
        else:
            ok = u.op == "region_acc" and i > 0
        root = roots.get(m.source.id)  # not written in place before u reads it
        if root is None:
            root = storage_root(m.source).id
        return ok and not any(pos[m.source.id] < p <= pos[u.id] and r == root
                              for p, r in writes)

    while True:
        maps = {}
        for n in nodes:
            if n.id in cand and (m := _shift_map(n, maps)) is not None:
                maps[n.id] = m
        cand &= set(maps)
        for n in reversed(nodes):
            if n.id in cand and (n.id in external or not readers.get(n.id) or not all(
                    reader_ok(maps[n.id], u, i) for u, i in readers[n.id])):
                cand.discard(n.id)
        if cand == set(maps):
            return maps


def strided_in_place(node, layout, readers):
    """Whether getitem ``node`` (slices and ints of a C array) can stay a numba
    view that regions index in place: every reader is a fused region reading it
    as an operand (not a ``region_acc`` target) or a ``concatenate`` (whose
    loops index each operand element by element)."""
    index = node.attrs["index"]
    if layout.get(node.args[0].id) != "C" or not node.shape or \
            not all(isinstance(i, (slice, int)) for i in index):
        return False
    users = readers.get(node.id, [])
    return bool(users) and all(u.op in ("region", "concatenate") or
                               u.op == "region_acc" and i > 0 for u, i in users)


def index_source(index):
    """Python source of a basic index of slices and ints (``1:, ::2, 3``)."""
    def one(i):
        if isinstance(i, slice):
            parts = ["" if v is None else str(v) for v in (i.start, i.stop, i.step)]
            return ":".join(parts[:2]) + (f":{parts[2]}" if i.step is not None else "")
        return str(i)
    return ", ".join(one(i) for i in index)


def contiguous_getitem_offset(node):
    """Byte offset of ``getitem`` node's view into its C-contiguous operand
    when that view is itself C-contiguous, else None."""
    proto = layout_proto(node.args[0])  # C strides, no memory
    view = REGISTRY["getitem"].view(proto, **node.attrs)
    if not view.flags.c_contiguous or view.size == 0:
        return None
    return int(view.__array_interface__["data"][0] - proto.__array_interface__["data"][0])


_ASSUMED = set()  # pool sizes read before numba was loaded (checked when it compiles)


def numba_pool_size():
    """``numba.config.NUMBA_NUM_THREADS`` (the ids ``get_thread_id()`` returns
    are below it), without importing numba where its rule can be read here:
    ``$NUMBA_NUM_THREADS``, else the CPUs this process may run on.  numba's
    own value once numba is loaded, or where a ``.numba_config.yaml`` might
    set it (then numba is imported); :func:`check_pool_size` holds the
    numba program to the value read here."""
    if "numba" not in sys.modules and os.path.isfile(".numba_config.yaml"):
        import numba  # noqa: F401 -- its configuration file may set the count
    n = numba_config_threads()
    if n is not None:
        return n
    n = environment_threads()
    _ASSUMED.add(n)
    return n


def check_pool_size():
    """Raise if numba's thread pool is larger than a plan's scratch was sized
    for by :func:`numba_pool_size` before numba was loaded.  Nothing to check
    while numba is not loaded: its threads start only with it (a program of
    hybridad's own compiler starts them through
    :func:`hybridad.backends.jit.parallel.start_threads`, which checks)."""
    if "numba" not in sys.modules:
        return
    import numba

    low = [n for n in _ASSUMED if n < numba.config.NUMBA_NUM_THREADS]
    if low:
        raise RuntimeError(f"numba's thread pool has {numba.config.NUMBA_NUM_THREADS} threads; "
                           f"a plan's per-thread scratch was sized for {min(low)}")


def scratch_for_numba(nodes):
    """node id -> (dtype, elements) of scratch the generated code needs: a
    block per thread for two-phase full reductions, the float64 accumulator
    or the compensation of a reduction over leading axes (:mod:`.reduce`),
    the parts of a ``matvec_pair``'s ``A^T v`` (:func:`.rt.matvec_pair`) and of
    a column loop over few columns (:func:`.matvecs.matvec_axpy_parts`), a
    small gemm result's parts of its contracted axis (:func:`.kparts.gemm_kparts`)."""
    threads = numba_pool_size()
    out = {}
    for n in nodes:
        need = with_tiles(n, leading_scratch(n, threads) if leading_blocks(n) is not None
                          else row_scratch(n, threads) if rows_in_blocks(n)
                          else reduction_scratch(n, threads))
        if need is not None:
            out[n.id] = need
        elif n.op == "matvec_pair":  # a row of k per part of the rows
            m, k = n.args[0].shape
            out[n.id] = (n.dtype, machine().pair_parts(m) * k)
        elif n.op == "matvec_two" and n.attrs["form"] == "axpy":  # two rows of k per part
            m, k = n.args[0].shape
            parts = machine().axpy_parts(m, k)
            if parts > 1:
                out[n.id] = (n.dtype, 2 * parts * k)
        elif n.op == "matmul" and len(n.args) == 2 and \
                matvec_matrix(n.args[0].shape, n.args[1].shape) is not None:
            # a column loop's parts of the rows (matvecs.matvec_axpy_parts): the
            # contracted axis is its rows, the result its columns (as the column
            # loop, if the layouts make it one)
            parts = machine().axpy_parts(n.args[0].shape[-1], n.size)
            if parts > 1:
                out[n.id] = (n.dtype, parts * n.size)
        elif n.op == "matmul" and len(n.shape) == 2 and len(n.args[0].shape) == 2 and \
                len(n.args[1].shape) == 2:  # a small result's parts of k (kparts.gemm_kparts)
            (m, k), c = n.args[0].shape, n.shape[1]
            parts = machine().gemm_k_parts(m, k, c)
            if parts:
                out[n.id] = (n.dtype, parts * m * c)
        elif n.op == "loop" and (need := loop_workspace(n)) is not None:
            out[n.id] = (n.dtype, -(-need // n.dtype.itemsize))
    return out


def loop_body_memory(graph):
    """``(lowered body, serial, memory plan)`` of a loop body for a numba
    program (:func:`hybridad.backends.loops.lower_body`): serial loops (one
    iteration is small), unless one iteration is :data:`.threshold.BODY_PARALLEL_MIN`
    element operations or more and the plan may use threads."""
    from ..loops import lower_body

    g = lower_body(graph, "numba")
    serial = loops_serial() or design_threads() < 2 or \
        work_estimate(g.nodes) < BODY_PARALLEL_MIN
    with serial_loops(serial):  # (every output written in place: the carries too)
        return g, serial, plan_numba_memory(g, direct="all")


def runs_natively(g, serial):
    """Whether a loop body (lowered: :func:`loop_body_memory`) runs from its
    runner's compiled driver: arrays passed by address (:data:`.abi.ABI`), no
    threads of its own, nothing that switches to Python (a host call) -- a
    loop inside it only where its own body runs natively (hybridad's compiler
    then runs it in place: :mod:`hybridad.backends.nesting`; with
    ``HYBRIDAD_JIT=0`` numba compiles the body and calls the inner loop's
    runner in Python, from a Python loop over the body's own arena, so no
    workspace is given for it).  Such a body runs on a workspace its plan
    gives it (:func:`loop_workspace`)."""
    from ...ops.host import HOST_OPS
    from ..switches import jit_enabled
    from .abi import ABI

    return ABI is not None and serial and \
        not any(n.op in HOST_OPS or
                n.op == "loop" and (not jit_enabled() or loop_workspace(n) is None)
                for n in g.nodes)


def loop_workspace(node):
    """Bytes of loop ``node``'s workspace in its plan's arena -- its runner's
    two sets of carries and its body's arena
    (:func:`hybridad.backends.nesting.workspace_layout`) -- where its body runs
    natively (:func:`runs_natively`), else None (the runner keeps its own,
    counted beside the arena: :attr:`hybridad.ops.Op.held`)."""
    from ..nesting import workspace_layout

    body = node.attrs["body"]
    g, serial, memplan = loop_body_memory(body.graph)
    if not runs_natively(g, serial):
        return None
    return workspace_layout(body, memplan.arena_bytes)[0]


def plan_numba_memory(graph, pack=True, pinned=(), direct=True):
    """The memory plan of ``graph`` for a numba program: the ops' and the
    kernels' scratch, concatenations its loops read in place (never made),
    views copied where numba needs them, regions writing over dying operands,
    gradient outputs straight into the caller's buffers (``direct="all"``:
    every output, a loop body's carries; see
    :func:`hybridad.transforms.memory.plan_memory`)."""
    scratch = op_workspaces(graph.nodes)
    scratch.update(scratch_for_numba(graph.nodes))
    in_place = read_in_place(graph.nodes, graph.outputs)
    return plan_memory(graph, materialize_for_numba(graph.nodes, in_place), scratch,
                       reuse=True, direct_outputs=direct, pack=pack, pinned=pinned,
                       in_place=in_place)


def numba_layouts(nodes, memplan):
    """node id -> the layout numba types its array with: ``"C"``, ``"F"`` or ``"A"``.

    Inputs arrive C-contiguous (the trampoline stages others), buffers are C,
    a 2-D transpose swaps C and F; other views are ``"A"``.  BLAS calls need
    ``"C"`` or ``"F"`` operands.
    """
    out = {}
    for n in nodes:
        storage = memplan.storage[n.id]
        if storage in ("input", "buffer"):
            out[n.id] = "C"
        elif storage == "const":
            v = n.attrs["value"]
            out[n.id] = "C" if v.flags.c_contiguous else "F" if v.flags.f_contiguous else "A"
        elif storage == "alias":
            out[n.id] = out[memplan.alias_of[n.id].id]
        elif n.op == "reshape":
            out[n.id] = "C"  # a reshape view is only made of a C operand
        elif n.op == "getitem":  # a contiguous piece of a C array, or a strided view
            out[n.id] = "C" if contiguous_getitem_offset(n) is not None else "A"
        elif n.op == "transpose" and len(n.shape) == 2 and n.attrs["axes"] == (1, 0):
            out[n.id] = {"C": "F", "F": "C"}.get(out[n.args[0].id], "A")
        else:
            out[n.id] = "A"
    return out


def view_statement(node, src, var, addresses):
    """The source binding ``var`` to view ``node`` of ``src`` (a view that
    :func:`materialize_for_numba` kept): from the data address where ``src``'s
    is known (``addresses``: variable -> (address, shape, dtype, order); the
    view's is added) -- a C reshape, a contiguous slice, a 2-D transpose as F
    -- else a numba array view."""
    c_source = src in addresses and addresses[src][3] == "C"
    op, attrs = node.op, node.attrs
    if c_source and op == "reshape":  # a C array's data, reshaped
        addresses[var] = (addresses[src][0], node.shape, node.dtype, "C")
    elif c_source and op == "getitem" and (off := contiguous_getitem_offset(node)) is not None:
        addresses[var] = (f"{addresses[src][0]} + {off}" if off else addresses[src][0],
                          node.shape, node.dtype, "C")
    elif c_source and op == "transpose" and attrs["axes"] == (1, 0):  # as F
        addresses[var] = (addresses[src][0], node.shape, node.dtype, "F")
    if var in addresses:
        return f"{var} = " + view_at(*addresses[var])
    if op == "reshape":
        return f"{var} = {src}.reshape({attrs['shape']!r})"
    if op == "transpose" and attrs["axes"] == (1, 0):
        return f"{var} = {src}.T"  # typed F-contiguous (BLAS-ready) by numba
    if op == "transpose":
        return f"{var} = np.transpose({src}, {attrs['axes']!r})"
    if op == "broadcast_to":
        return f"{var} = np.broadcast_to({src}, {attrs['shape']!r})"
    if op == "getitem":  # strided, read in place by regions (materialize_for_numba)
        return f"{var} = {src}[{index_source(attrs['index'])}]"
    raise AssertionError(f"view {op} should have been materialized")
