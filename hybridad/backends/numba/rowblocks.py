"""A region reduced over short rows, in blocks of rows (pure text, numba dialect).

``logsumexp(Z, axis=1)`` over 10 classes, a row norm over 10 features: a
region ending in a reduction over its last axis of fewer than
:data:`ROWS_BELOW` (and at least :data:`ROWS_FROM`) elements ran one row at a time, the row's values
accumulated as they were made (:func:`.reduce.reduction_nest`).  With a
constant inner count that short LLVM unrolls the row and vectorizes nothing:
``sum(exp(Z - m[:, None]), axis=1)`` over (10^5, 10) took 8 ns an element,
``exp`` scalar.

Here the rows run in blocks (a ``prange`` of blocks when large): the block's
values into an L1 block of scratch by ONE loop over its elements -- collapsed
(:func:`.loops.collapse`), operands constant along the rows read from tiles
(:mod:`.tiles`) and operands constant along each row (the row's maximum,
``m[:, None]``) from the block's *expansion*, the operand repeated along each
row, written per block into the thread's scratch -- then each row's values
accumulated in order, as before: the same bits.
"""

from __future__ import annotations

import numpy as np

from ...ops import REGISTRY
from .accumulators import Accumulator, acc_dtype
from .reduce import BLOCK, region_reduction
from .runner import view_at
from .threshold import parallel_min

__all__ = ["ROWS_BELOW", "ROWS_FROM", "ROWS_MIN_WORK", "expanded_operands", "row_blocks",
           "row_rows", "row_scratch", "rows_in_blocks"]

#: rows shorter than this run in blocks (from 32 a row runs in blocks of its
#: own: :func:`.reduce._blocked_rows`) -- those shorter than ROWS_FROM only
#: when the region computes a transcendental function of an operand constant
#: along each row (a softmax's ``exp(Z - m)``): elsewhere a row is summed
#: plainly, not compensated, and the row loop of cheap arithmetic is the
#: faster (one thread, 10^6 elements: sum(log(sum(exp(Z), axis=1))), K = 5
#: 2.9 ms in blocks against 2.6 a row at a time, K = 8 4.5 against 10.3,
#: K = 20 2.3 against 8.6; a softmax cross-entropy at K = 5, whose row sum
#: reads the row's max, 5.6 against 10.1)
ROWS_BELOW = 32
ROWS_FROM = 8
#: fewest loop elements for which blocks pay
ROWS_MIN_WORK = 4096


def _line(n):
    return -(-n // 64) * 64


def _reduced(node):
    """``(kind, dtype, keepdims)`` of a sum, max or min over the last axis that
    region ``node``'s loop makes (:func:`.reduce.region_reduction`) -- else None."""
    made = region_reduction(node)
    if made is None or made[0] not in ("sum", "max", "min") or \
            made[2] != (len(node.attrs["body"].shape) - 1,):
        return None
    return made[0], made[1], made[3]


def rows_in_blocks(node):
    """Whether region ``node`` -- over two axes, reduced over the last
    (:func:`_reduced`), rows of :data:`ROWS_FROM` to :data:`ROWS_BELOW` - 1
    elements -- runs in blocks of rows."""
    shape = tuple(node.attrs["body"].shape) if node.op == "region" else ()
    red = _reduced(node) if len(shape) == 2 else None
    if red is None or np.dtype(red[1]).kind != "f" or not 2 <= shape[1] < ROWS_BELOW or \
            shape[0] * shape[1] < ROWS_MIN_WORK:
        return False
    return shape[1] >= ROWS_FROM or bool(expanded_operands(node)) and any(
        REGISTRY[n.op].expensive for n in node.attrs["body"].nodes if n.op in REGISTRY)


def row_rows(node):
    """Rows per block (an L1 block of values)."""
    return max(1, BLOCK // node.attrs["body"].shape[1])


def expanded_operands(node):
    """The operands of region ``node`` constant along each row and changing
    along the rows (``m[:, None]``): expanded per block."""
    body = node.attrs["body"]
    B = body.shape[0]
    read = node.args[:len(body.inputs) + (node.attrs["mode"] == "vjp")]  # (and g)
    return [a for a in dict.fromkeys(read)
            if len(a.shape) == 2 and a.shape[0] == B and a.shape[1] == 1 and B > 1]


def _per_thread(node):
    """``(the rows' accumulators' byte offset, [(operand, byte offset)],
    bytes)`` of a thread's block: its values, the accumulators (a running
    value and its compensation per row), the expansions."""
    rows = row_rows(node)
    n = rows * node.attrs["body"].shape[1]
    kind, dtype, _ = _reduced(node)
    item = acc_dtype(kind, dtype).itemsize
    accs = _line(n * item)
    at, out = accs + 2 * _line(rows * item), []
    for a in expanded_operands(node):
        out.append((a, at))
        at += _line(n * a.dtype.itemsize)
    return accs, out, at


def row_scratch(node, threads):
    """``(dtype, elements)`` of the scratch of :func:`row_blocks`: a block per thread."""
    kind, dtype, _ = _reduced(node)
    dtype = acc_dtype(kind, dtype)
    return dtype, -(-threads * _per_thread(node)[2] // dtype.itemsize)


def row_blocks(w, node, out, lines, value, stores, scratch, flat, tiles, read):
    """Emit region ``node`` (:func:`rows_in_blocks`): ``lines`` then ``value``
    (and ``stores``) over the block's rows ``r0:r0 + nr`` (operands along
    axis 0 read through the block slices in ``w.pending``), each row's
    reduction into ``out``; ``read(operand)``: an operand's read text."""
    body = node.attrs["body"]
    kind, dtype, keepdims = _reduced(node)
    B, K = body.shape
    rows = row_rows(node)
    where = (w.addresses or {})[scratch]
    accs, expansions, per = _per_thread(node)
    acc = acc_dtype(kind, dtype)
    par = B * K >= parallel_min()
    w.parallel = w.parallel or par
    w.emit(f"for blk in {'prange' if par else 'range'}({-(-B // rows)}):")
    w.indent += 1
    base = f"{where[0]} + get_thread_id() * {per}" if par else where[0]
    w.emit(f"r0 = blk * {rows}", f"nr = min({rows}, {B} - r0)",
           f"scb = {view_at(base, (rows * K,), acc)}", f"sc = scb.reshape(({rows}, {K}))")
    w.emit(*w.pending)
    w.pending.clear()
    tiles = dict(tiles or {})
    w.in_prange += bool(par)
    for j, (a, at) in enumerate(expansions):
        if not any(read(a) in line for line in (*lines, value, *stores)):
            continue  # (not read by this loop: a vjp's partial without it)
        name = f"_ex{j}"
        w.emit(f"{name}_fl = {view_at(f'{base} + {at}', (rows * K,), a.dtype)}",
               f"{name}_v = {name}_fl.reshape(({rows}, {K}))")
        w.nest(("nr", K), [f"{name}_v[i0, i1] = {read(a)}"])
        tiles[read(a)] = f"{name}_fl"
    w.nest(("nr", K), [*lines, f"sc[i0, i1] = {value}", *stores], long=True,
           flat=None if flat is None else flat | {"sc"}, tiles=tiles)
    w.in_prange -= bool(par)
    # each row's values accumulated in order, rows side by side (the loop over
    # the rows vectorizes; a row at a time, the short constant one did not)
    a = Accumulator(kind, dtype, "_ar[r]", compensate=K >= 8)
    a.c = "_arc[r]"
    rows_view = f"{base} + {accs}"
    w.emit(f"_ar = {view_at(rows_view, (rows,), acc)}",
           f"_arc = {view_at(f'{rows_view} + {_line(rows * acc.itemsize)}', (rows,), acc)}",
           "for r in range(nr):", *("    " + x for x in a.init()),
           f"for k in range({K}):", "    for r in range(nr):",
           *("        " + x for x in a.add("sc[r, k]")),
           "for r in range(nr):",
           f"    {f'{out}[r0 + r, 0]' if keepdims else f'{out}[r0 + r]'} = {a.result()}")
    w.indent -= 1
