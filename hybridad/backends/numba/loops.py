"""Loop-nest source generation shared by compiled backends.

Everything a kernel needs to turn array ops into scalar loops: loop nests over
a shape, broadcast reads (a size-1 or missing axis reads index 0), the index
map of a basic-indexing view, and the body of a fused region (value, dual
partials, fused reduction).  Pure text: no compiler is imported here.
"""

from __future__ import annotations

import re

import numpy as np

from ...transforms.partition import PRE_REDUCTION, VJP_SUMS
from ..scalar import Constants, ScalarBody, inline_vector_calls, render_region, safe_product
from .accumulators import INIT, accumulate, init_text
from .reduce import (
    blocked_full_reduction,
    blocked_full_sums,
    reduction_nest,
    region_runs_parallel,
    single_block,
)
from .gather import gather_lines, gather_starts
from .leading import leading_blocks, summed_rows
from .rowblocks import row_blocks, rows_in_blocks
from .tiles import emit_tiles, tile_rows
from .threshold import OPAQUE_MIN, PARALLEL_MIN, parallel_min

__all__ = ["LoopWriter", "broadcast_index", "region_lines", "INIT", "init_text"]

def broadcast_index(shape, loop_ndim, prefix="i"):
    """Index text reading an array of ``shape`` inside a loop nest of ``loop_ndim``."""
    off = loop_ndim - len(shape)
    if not shape:
        return "[()]"
    return "[" + ", ".join("0" if s == 1 else f"{prefix}{off + d}"
                           for d, s in enumerate(shape)) + "]"


def getitem_map(index, src_shape, loop_var="i"):
    """Index text into the source for an output loop over ``index``'s view."""
    parts, d_out, d_src = [], 0, 0
    for k in index:
        if k is None:
            d_out += 1
            continue
        if isinstance(k, int):
            parts.append(str(k))
        else:
            start, _, step = k.indices(src_shape[d_src])
            parts.append(f"{start} + {step} * {loop_var}{d_out}" if step != 1 or start
                         else f"{loop_var}{d_out}")
            d_out += 1
        d_src += 1
    for _ in range(d_src, len(src_shape)):
        parts.append(f"{loop_var}{d_out}")
        d_out += 1
    return "[" + ", ".join(parts) + "]" if parts else "[()]"


def here(ndim, prefix="i"):
    return "[" + ", ".join(f"{prefix}{d}" for d in range(ndim)) + "]" if ndim else "[()]"


class LoopWriter:
    """Accumulates indented source lines."""

    def __init__(self, indent=1):
        self.lines = []
        self.indent = indent
        self.parallel = False  # whether any loop was emitted as a prange
        #: whether the code calls a kernel that runs on numba's threads (its
        #: own prange: the program is parallel, its functions need not be)
        self.threaded = False
        self.pending = []  # lines a block loop emits at its top (block slices)
        self.in_prange = 0  # > 0 while writing inside a prange its caller opened
        #: name -> (data address, shape, dtype, order) of the program's contiguous
        #: arrays (set by the program writer; read by :func:`collapse`'s callers)
        self.addresses = None

    def emit(self, *lines):
        pad = "    " * self.indent
        self.lines.extend(pad + line for line in lines)

    def nest(self, shape, body, prefix="i", parallel=False, work=None, opaque=None,
             split=None, long=False, flat=None, tiles=None, tile_rows=None):
        """A loop nest over ``shape`` around ``body`` (list of lines).

        ``parallel``: the outermost loop is a ``prange`` when the nest has at
        least :data:`PARALLEL_MIN` iterations -- or ``work`` ones, when the
        body loops itself (the body must be race-free: elementwise stores and
        ``+=`` into a scalar) -- and is not written inside a ``prange`` its
        caller opened (no prange in a prange).

        ``opaque``: the name of an array the nest writes.  With it, an
        innermost axis of :data:`OPAQUE_MIN` or more elements starts at a
        zero LLVM cannot see through (the array's address shifted right by
        63 bits), so its trip count is unknown at compile time.  Every shape
        in a plan is a constant, and with a constant inner trip count LLVM
        unrolls the inner loop and vectorizes the *outer* one with gathers
        and scatters of stride ``shape[-1]``: a ``(100000, 16)`` region ran
        at 6 GB/s instead of 40 (benchmarks/profile_plan.py).  Unknown, the
        inner loop is the one vectorized, over contiguous elements.  Serial
        nests only: in a ``prange`` body (a function numba outlines, the outer
        loop its schedule's) the hidden count stops the inner loop from
        vectorizing -- a (100000, 16) region ran at 17 GB/s hidden, 63 not.
        The zero is ``(address >> 63) & 1``: an arithmetic shift alone gives
        0 or -1, so the index could be negative, the wraparound of a negative
        index stayed in every load and a ``tanh`` loop ran scalar (the MLP's
        serial gradient at B = 10^4: 5.3 ms, 2.3 ms non-negative).

        ``long``: the nest is one of many that together make a long loop (the
        blocks of a full reduction): inline vmath's functions as in a nest of
        :data:`PARALLEL_MIN` elements.

        ``split``: ``(rows, names)`` of :func:`shifted_split` -- the
        innermost loop runs over each row's ``lo:hi`` in turn, the row's
        offsets bound to ``names`` (a loop over a literal tuple, just outside
        the innermost loop; reads in place of ``np.roll``'s concatenations).

        ``flat``: names of C-contiguous arrays of the nest's whole shape.  When
        the body reads and writes arrays only at the nest's own index
        (``x[i0, i1]``), each of them one of ``flat``, and uses the indices
        nowhere else, the nest is ONE loop over its elements, through flat
        views (:func:`collapse`): the same elements in the same order, but an
        inner axis of a few elements no longer runs scalar (LLVM unrolls a
        constant inner loop of 8 and then vectorizes neither: a (125000, 8)
        tanh gradient took 3x the time of a (10^6,) one).

        ``tiles``: ``{read text: tile}`` (:func:`.tiles.emit_tiles`): each such
        read of an operand constant along axis 0 is the tile's element at the
        flat index, so the nest collapses with it too.  ``tile_rows``: the
        rows a tile holds, when the nest has more: the collapsed loop then
        runs in blocks of that many rows (a ``prange`` of blocks), the flat
        index restarting at each block.
        """
        pad = self.indent
        par = parallel and shape and not self.in_prange and \
            (int(np.prod(shape)) if work is None else work) >= parallel_min()
        self.parallel = self.parallel or bool(par)
        if par:
            body = self._hoist_scalars(body)
        inside = par or self.in_prange
        # vmath's functions inlined by numba: a prange body is a function of its
        # own, where LLVM does not inline them; and in a large plan function
        # LLVM's inliner stops inlining them after a few call sites (a GP
        # plan's fourth exp loop called vexp per element: 11 ms, 1.9 inlined),
        # so a nest long enough to run in parallel (were the plan parallel)
        # inlines them too: numba re-types them per call site, a cost worth
        # paying only where the loop is long
        long = long or all(isinstance(s, (int, np.integer)) for s in shape) and \
            int(np.prod(shape)) >= PARALLEL_MIN
        if inside or long:
            body = inline_vector_calls(body)
        if flat and split is None and len(shape) >= 2:
            blocks = tile_rows is not None and tiles and shape[0] > tile_rows
            collapsed = collapse(shape, body, flat, prefix, tiles,
                                 "_tb0 + " if blocks else "")
            if collapsed is not None and blocks:
                return self._tile_blocks(shape, collapsed, tile_rows, par, prefix)
            if collapsed is not None:
                shape, body, views = collapsed
                self.lines.extend("    " * pad + line for line in views)
        hide = not inside and opaque is not None and len(shape) >= 2 and \
            shape[-1] >= OPAQUE_MIN
        if hide:
            self.lines.append("    " * pad + f"_lz = ({opaque}.ctypes.data >> 63) & 1  # 0")
        last = len(shape) - 1
        for d, s in enumerate(shape):
            loop = "prange" if par and d == 0 else "range"
            bounds = f"_lz, {s}" if hide and d == last else f"{s}"
            if split is not None and d == last:
                rows, names = split
                self.lines.append("    " * (pad + d) + f"for _sl, _sh, "
                                  f"{', '.join(names.values())} in {tuple(rows)!r}:")
                bounds = "_lz + _sl, _sh" if hide else "_sl, _sh"
                pad += 1
            self.lines.append("    " * (pad + d) + f"for {prefix}{d} in {loop}({bounds}):")
        inner = "    " * (pad + len(shape))
        self.lines.extend(inner + line for line in body)


    def _tile_blocks(self, shape, collapsed, rows, par, prefix):
        """The collapsed nest over ``shape`` as blocks of ``rows`` rows, the
        flat index ``_tb0 + i0`` (:meth:`nest`'s ``tile_rows``)."""
        (size,), body, views = collapsed
        step = rows * int(np.prod(shape[1:], dtype=np.int64))
        pad = "    " * self.indent
        self.lines.extend(pad + line for line in views)
        loop = "prange" if par else "range"
        self.lines.extend([pad + f"for _tb in {loop}({-(-shape[0] // rows)}):",
                           pad + f"    _tb0 = _tb * {step}",
                           pad + f"    for {prefix}0 in range(min({step}, {size} - _tb0)):"])
        self.lines.extend(pad + "        " + line for line in body)

    _ZERO_D = re.compile(r"\b([A-Za-z_]\w*)\[\(\)\]")

    def _hoist_scalars(self, body):
        """``body`` with each 0-d array read (``b5[()]``) taken once before the
        loop into a local: numba's parfor lowering fails on a 0-d array
        written before a ``prange`` and read inside it (and the load is loop
        invariant anyway).  A prange body never writes a 0-d array."""
        names = sorted({m.group(1) for line in body for m in self._ZERO_D.finditer(line)})
        if not names:
            return body
        self.emit(*(f"_h_{n} = {n}[()]" for n in names))
        return [self._ZERO_D.sub(lambda m: f"_h_{m.group(1)}", line) for line in body]



def collapse(shape, body, flat, prefix="i", tiles=None, start=""):
    """``(shape, body, views)``: the nest over ``shape`` around ``body`` as one
    loop over its elements -- each ``name[i0, ..., ik]`` read as
    ``name_fl[i0]``, ``views`` the lines cutting those flat views -- or None
    when ``body`` reads an array otherwise (broadcast, shifted, transposed),
    uses an index elsewhere, or indexes an array not in ``flat`` (the names of
    C-contiguous arrays of the nest's whole shape: :meth:`LoopWriter.nest`).
    (A row broadcast along the leading axes, a bias, read as
    ``name_fl[i0 % size]``, made every such loop 3x slower: a modulo index
    does not vectorize.)  ``tiles``: ``{read text: tile}``, reads replaced by
    the tile's element ``tile[i0]`` (:meth:`LoopWriter.nest`); ``start``: text
    before the flat index of the other arrays (``"_tb0 + "``: a block's)."""
    nd = len(shape)
    full = re.compile(r"\b([A-Za-z_]\w*)" + re.escape(here(nd, prefix)))
    seen = []

    def flatten(m):
        if m.group(1) not in seen:
            seen.append(m.group(1))
        return f"{m.group(1)}_fl[{start}{prefix}0]"
    if tiles:
        pattern = re.compile("|".join(r"(?<![\w.])" + re.escape(t) for t in tiles))
        body = [pattern.sub(lambda m: f"{tiles[m.group(0)]}[{prefix}0]", line)
                for line in body]
    out = [full.sub(flatten, line) for line in body]
    index = re.compile(rf"\b{re.escape(prefix)}\d+\b")
    if not seen or any(name not in flat for name in seen) or \
            any(index.search(line.replace(f"_fl[{start}{prefix}0]", "_fl[]")
                             .replace(f"_fl[{prefix}0]", "_fl[]")) for line in out):
        return None
    if all(isinstance(d, (int, np.integer)) for d in shape):
        size = str(int(np.prod(shape, dtype=np.int64)))
    else:
        size = " * ".join(f"({d})" if not isinstance(d, (int, np.integer)) else str(int(d))
                          for d in shape)
    return (size,), out, [f"{name}_fl = {name}.reshape({name}.size)" for name in seen]


def fill(w, name, value):
    """Set every element of ``name`` to ``value`` (numba's ``ndarray.fill``
    rejects 0-d arrays; ``[...]`` assignment takes every rank and layout)."""
    w.emit(f"{name}[...] = {value}")


def reduction_lines(w, kind, dtype, axis, keepdims, loop_shape, value, out, scratch=None):
    """Emit a reduction of ``value`` (an operand's element) over ``axis`` of
    ``loop_shape`` into ``out`` (:func:`.reduce.reduction_nest`)."""
    reduction_nest(w, kind, dtype, axis, keepdims, loop_shape, [], value, out, scratch=scratch,
                   parallel=True)


def operand_read(operand, names, consts, ndim, split=None):
    """Scalar expression reading ``operand`` inside a region's loop nest of
    ``ndim`` axes: a literal scalar inlined as a typed constant, any other
    operand indexed with broadcasting -- one read in place
    (``names[("shifts", id)]``: its source's name and ShiftMap,
    :func:`hybridad.backends.numba.layouts.read_in_place`) as its source at
    shifted indices: a constant offset, the innermost axis's from ``split``
    (:func:`shifted_split`), another axis's chosen by its index (invariant
    in the inner loop)."""
    if operand.is_literal and operand.size == 1:
        return consts.add(operand.dtype.type(operand.attrs["value"].reshape(-1)[0]))
    shifted = names.get(("shifts", operand.id))
    if shifted is None:
        return names[operand.id] + broadcast_index(operand.shape, ndim)
    source, m = shifted  # (a ShiftMap)
    lead, at = ndim - len(operand.shape), []
    for d, (n, ivs) in enumerate(zip(operand.shape, m.axes, strict=True)):
        i = f"i{lead + d}"
        if n == 1 or len(ivs) == 1:
            o = ivs[0][2]
            at.append(str(o) if n == 1 else i if o == 0 else f"{i} + {o}" if o > 0
                      else f"{i} - {-o}")
        elif lead + d == ndim - 1:
            at.append(f"{i} + {split[1][operand.id]}")
        else:
            choice = str(ivs[-1][2])
            for _, hi, o in reversed(ivs[:-1]):
                choice = f"({o} if {i} < {hi} else {choice})"
            at.append(f"{i} + {choice}")
    parts = [str(c) if d is None else at[d] for d, c in zip(m.drive, m.const, strict=True)]
    return f"{source}[{', '.join(parts)}]" if parts else f"{source}[()]"


def shifted_split(operands, names):
    """Where the innermost axis of a loop nest reading ``operands`` is cut:
    ``(rows, operand id -> name)`` -- rows ``(lo, hi, offset, ...)`` in which
    each read in place whose offset along its last axis changes has one
    offset (named ``_s0, _s1, ...`` in that order) -- or None when none
    does (:meth:`LoopWriter.nest`, :func:`operand_read`)."""
    cut, ids = set(), []
    for a in operands:
        shifted = names.get(("shifts", a.id))
        if shifted is None or a.id in ids or not a.shape or a.shape[-1] == 1 or \
                len(shifted[1].axes[-1]) == 1:
            continue
        ids.append(a.id)
        cut.update(x for lo, hi, _ in shifted[1].axes[-1] for x in (lo, hi))
    if not ids:
        return None
    cut = sorted(cut)
    rows = [(lo, hi, *(next(o for a, b, o in names[("shifts", k)][1].axes[-1] if a <= lo < b)
                       for k in ids)) for lo, hi in zip(cut, cut[1:], strict=False)]
    return rows, {k: f"_s{j}" for j, k in enumerate(ids)}


def region_lines(w, node, names, partial_outs, consts, scratch=None, sum_outs=None):
    """Emit one fused region (``node.op == 'region'``).

    Parameters
    ----------
    w : LoopWriter
    node : Node
        The region node; ``attrs['mode']`` is ``value``, ``vjp`` or ``vjp_sums``
        (the sums of the products for each input of ``attrs['wrt']``, into
        ``out[0]``, ``out[1]``, ..., as a full reduction's blocks).
    names : dict
        node id -> variable name, for the node's operands and itself.
    partial_outs : dict
        input position -> variable name, for partials stored by a value region.
    consts : Constants
    scratch : str, optional
        A flat array of :func:`.reduce.reduction_scratch` elements; given, a
        full reduction runs in two phases per block
        (:func:`.reduce.blocked_full_reduction`), a reduction over leading or
        middle axes keeps its float64 accumulator or compensation there.
    sum_outs : dict, optional
        input position -> variable name (0-d), for partials a value region
        ending in a full sum sums in its loop (``region_partial`` with
        ``summed=True``).
    """
    body, mode = node.attrs["body"], node.attrs["mode"]
    shape = body.shape
    nd = len(shape)
    red = body.reduction
    blocked = (mode == "value" and red is not None and nd > 0 and scratch is not None
               and len(red.attrs["axis"]) == nd) or mode == VJP_SUMS
    lead = scratch is not None and leading_blocks(node) is not None  # (summed over rows)
    rowb = scratch is not None and rows_in_blocks(node)  # (short rows reduced)
    flat = _flat_names(w, node, names, partial_outs, sum_outs, blocked or lead or rowb) \
        if nd >= 2 else None
    if blocked and not single_block(node) or lead or rowb:
        # the loop runs over one block of rows: operands along axis 0 are sliced
        names = dict(names)
        for operand in node.args[:len(body.inputs) + (mode == VJP_SUMS or mode == "vjp")]:
            if len(operand.shape) == nd and operand.shape[0] != 1 and \
                    not (operand.is_literal and operand.size == 1):
                names[operand.id] = _block_slice(w, names[operand.id])
        partial_outs = {k: _block_slice(w, v) for k, v in partial_outs.items()}

    split = shifted_split(node.args, names)  # (reads in place: no fused reduction)

    def read(operand):
        return operand_read(operand, names, consts, nd, split)

    reads = [read(a) for a in node.args[:len(body.inputs)]]
    out = names[node.id]
    tiles = emit_tiles(w, node, read, scratch, nd) if split is None else None
    rows = tile_rows(node) if tiles else None
    if mode == VJP_SUMS:  # the products for each input, each summed in the loop
        wrt = node.attrs["wrt"]
        sb = render_region(body, reads, tuple(sorted(set(wrt))), consts, need_value=False)
        g = read(node.args[-1])
        values = [safe_product(g, sb.partials[k], body.nodes[-1].dtype, consts) for k in wrt]
        k = len(sb.lines)
        hoisted = w._hoist_scalars([*sb.lines, *values])
        return blocked_full_sums(w, node, out, hoisted[:k], hoisted[k:], scratch, flat=flat,
                                 tiles=tiles)
    if mode == "vjp":
        k = node.attrs["wrt"]
        sb = render_region(body, reads, (k,), consts, need_value=False)
        value = safe_product(read(node.args[-1]), sb.partials[k], body.nodes[-1].dtype, consts)
        if "axis" in node.attrs:  # summed over axis as it is made (sum_into_vjp_regions)
            hoisted = w._hoist_scalars([*sb.lines, value])
            if lead:
                return summed_rows(w, node, out, hoisted[:-1], hoisted[-1], scratch, flat,
                                   tiles)
            if rowb:
                return row_blocks(w, node, out, hoisted[:-1], hoisted[-1], (), scratch, flat,
                                  tiles, read)
            reduction_nest(w, "sum", node.dtype, node.attrs["axis"], node.attrs["keepdims"],
                           shape, hoisted[:-1], hoisted[-1], out, scratch=scratch,
                           parallel=True)
            return
        line = f"{out}{here(nd)} = " + value
        w.nest(shape, sb.lines + [line], parallel=True, opaque=out, split=split, flat=flat,
               tiles=tiles, tile_rows=rows)
        return
    sum_outs = sum_outs or {}
    seeds = tuple(sorted(k for k in partial_outs if k != PRE_REDUCTION))
    sb = render_region(body, reads, tuple(sorted(set(seeds) | set(sum_outs))), consts)
    stores = [f"{partial_outs[k]}{here(nd)} = {sb.partials[k]}" for k in seeds]
    if PRE_REDUCTION in partial_outs:  # the value before the reduction, too
        stores.append(f"{partial_outs[PRE_REDUCTION]}{here(nd)} = {sb.value}")
    if red is None:
        w.nest(shape, sb.lines + [f"{out}{here(nd)} = {sb.value}"] + stores, parallel=True,
               opaque=out, split=split, flat=flat, tiles=tiles, tile_rows=rows)
        return
    # a fused reduction's loops may be a prange (over blocks, chunks or rows):
    # 0-d operands are read once before them, as a parallel nest's are
    # (numba's parfor lowering cannot type a 0-d array read inside one)
    summed = [sb.partials[k] for k in sorted(sum_outs)]
    if nd:
        k, m = len(sb.lines), len(summed)
        hoisted = w._hoist_scalars([*sb.lines, sb.value, *summed, *stores])
        sb = ScalarBody(hoisted[:k], hoisted[k], sb.partials, sb.consts)
        summed, stores = hoisted[k + 1:k + 1 + m], hoisted[k + 1 + m:]
    if blocked:
        return blocked_full_reduction(w, node, out, sb, stores, scratch, list(zip(
            [sum_outs[k] for k in sorted(sum_outs)], summed, strict=True)), flat=flat,
            tiles=tiles)
    assert not sum_outs, "partials are summed in blocked full reductions only"
    if lead:  # a sum over axis 0 alone: in blocks of rows
        return summed_rows(w, node, out, sb.lines, sb.value, scratch, flat, tiles, stores)
    if rowb:  # short rows reduced: in blocks of rows
        return row_blocks(w, node, out, sb.lines, sb.value, stores, scratch, flat, tiles, read)
    # a reduction that keeps axis 0 (a batch of rows, each summed on its own)
    # runs its outer loop as a prange: every iteration has its own target
    reduction_nest(w, red.op, red.dtype, red.attrs["axis"], red.attrs["keepdims"], shape,
                   sb.lines, sb.value, out, stores, scratch=scratch, parallel=True)


def _flat_names(w, node, names, partial_outs, sum_outs, blocked):
    """The arrays region ``node``'s loop may read and write through flat views
    (:func:`collapse`'s ``flat``): its operands and results that are
    C-contiguous arrays (:attr:`LoopWriter.addresses`) of the loop's whole
    shape, and their block slices (``_blk``); None when the loop is not one
    over every element (a reduction over some axes)."""
    body = node.attrs["body"]
    shape = tuple(body.shape)
    if not blocked and (body.reduction is not None or "axis" in node.attrs):
        return None
    flat = {names[a.id] for a in node.args if a.shape == shape and
            isinstance(names.get(a.id), str) and ("shifts", a.id) not in names and
            whole_array(w, names[a.id], shape)}
    targets = list(partial_outs.values()) + list((sum_outs or {}).values())
    if body.reduction is None:
        targets.append(names[node.id])
    flat.update(t for t in targets if whole_array(w, t, shape))
    return flat | {f"{n}_blk" for n in flat}


def whole_array(w, name, shape):
    """Whether ``name`` is one of the program's C-contiguous arrays
    (:attr:`LoopWriter.addresses`) of exactly ``shape``."""
    got = (w.addresses or {}).get(name)
    return got is not None and got[3] == "C" and tuple(got[1]) == tuple(shape)


def _block_slice(w, name):
    """Emit (once per call site) the current block's rows of ``name``."""
    sliced = f"{name}_blk"
    w.pending.append(f"{sliced} = {name}[r0:r0 + nr]")
    return sliced


def region_acc_lines(w, members, names, consts, fill_first=False):
    """Emit ``region_acc`` nodes over one loop shape as one loop: each adds
    its region's value, or the cotangent times a dual partial, into its
    target through its index map (``acc[1 + i0] += ...``).  Members of the
    same region (body, mode, operands) share one rendering of the body with
    a seed per partial; contributions to the same target through the same
    map are summed first.

    A ``prange`` needs every target written through one map only (two maps
    into one array, ``x[1:]`` and ``x[:-1]``, touch the same element from
    different iterations); otherwise a large loop is split into one
    ``prange`` per (target, map), each computing only what it adds, and a
    small one runs serially.

    ``fill_first``: the target of the first member is a ``zeros`` buffer not
    yet filled (its fill deferred to here): a gather writes each element
    once, adding its slices' terms to nothing (zero where none adds), and
    any other form fills it first."""
    shape, nd = members[0].attrs["body"].shape, len(members[0].attrs["body"].shape)
    split = shifted_split([a for m in members for a in m.args[1:]], names)

    def read(operand):
        return operand_read(operand, names, consts, nd, split)

    # (target, index text) -> [(region key, wrt)]; region key -> its first member
    writes, regions = {}, {}
    for m in members:
        key = (id(m.attrs["body"]), m.attrs["mode"], tuple(a.id for a in m.args[1:]))
        regions.setdefault(key, m)
        index = m.attrs["index"]
        where = here(nd) if index is None else getitem_map(index, m.args[0].shape)
        writes.setdefault((names[m.id], where), []).append((key, m.attrs.get("wrt")))
    targets = [t for t, _ in writes]
    race_free = len(set(targets)) == len(targets)
    large = bool(shape) and int(np.prod(shape)) >= parallel_min()
    starts = None if race_free or split is not None else gather_starts(members)
    if starts is not None:  # one target through shifted slices: gathered, one loop
        at = {(here(nd) if m.attrs["index"] is None else  # where -> its slice's start
               getitem_map(m.attrs["index"], m.args[0].shape)): lo
              for m, lo in zip(members, starts, strict=True)}
        gather_lines(w, members[0].attrs["body"].shape[0], writes, regions, at, read, consts,
                     fresh=members[0].args[0].shape[0] if fill_first else None)
        return
    if fill_first:
        fill(w, names[members[0].args[0].id], "0")
    groups = [list(writes.items())] if race_free or not large else \
        [[item] for item in writes.items()]
    for group in groups:
        lines, terms = [], {}  # (target, where) -> [expression]
        for key, first in regions.items():
            wanted = [(tw, k) for tw, ks in group for rk, k in ks if rk == key]
            if not wanted:
                continue
            body, mode = first.attrs["body"], first.attrs["mode"]
            reads = [read(a) for a in first.args[1:1 + len(body.inputs)]]
            seeds = sorted({k for _, k in wanted}) if mode == "vjp" else []
            sb = render_region(body, reads, seeds, consts, need_value=mode != "vjp")
            lines += sb.lines
            for tw, k in wanted:
                if mode != "vjp":
                    terms.setdefault(tw, []).append(sb.value)
                elif sb.partials[k] != "0":  # a zero partial adds nothing
                    terms.setdefault(tw, []).append(safe_product(
                        read(first.args[-1]), sb.partials[k], body.nodes[-1].dtype, consts))
        stores = [f"{target}{where} += " + (ts[0] if len(ts) == 1 else f"({' + '.join(ts)})")
                  for (target, where), ts in terms.items()]
        if stores:
            w.nest(shape, lines + stores, parallel=race_free or len(group) == 1, split=split)


__all__ += ["accumulate", "fill", "reduction_lines", "here", "Constants",
            "region_runs_parallel", "region_acc_lines", "getitem_map"]
