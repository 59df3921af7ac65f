"""Operands broadcast along a region's rows, read from tiles (pure text, numba dialect).

A region over ``(B, K)`` with a small innermost extent ``K`` (a bias, a
scale or a mean per feature: ``tanh(X + b)``, ``(X - mu) * s``) reads such an
operand as ``b[i1]``.  That read keeps the nest two loops (:func:`.loops.collapse`
makes one loop of a nest only when every array is read at its own flat
index), and with a constant inner trip count below 16 LLVM unrolls the inner
loop and vectorizes neither: measured on a (10^6 / K, K) ``tanh(X + b)``, K = 5
to 15 ran 4-5x slower than K = 16 (6.5 against 1.3 ms; 2.5 GB/s).

Such an operand does not change along axis 0, so along the flat index it
repeats with period ``prod(shape[1:])``.  Its *tile* -- the operand repeated
over as many rows as a block of the loop holds, written once per call into
the region's scratch (:func:`with_tiles`) -- is read at the block's own flat
index, and the nest becomes one loop per block of rows (a ``prange`` of
blocks when large): every read contiguous, the loop vectorized
(:meth:`.loops.LoopWriter.nest`'s ``tiles``).  The same values in the same
order: the same bits.
"""

from __future__ import annotations

import numpy as np

from ...transforms.partition import VJP_SUMS
from .leading import leading_blocks
from .reduce import reduction_block
from .rowblocks import _line, row_rows, rows_in_blocks
from .runner import view_at

__all__ = ["TILE_BELOW", "TILE_ELEMS", "TILE_MIN_WORK", "emit_tiles", "tile_rows",
           "tiled_operands", "with_tiles"]

#: innermost extents below which a region's row operands are tiled (from 16,
#: a constant inner loop vectorizes)
TILE_BELOW = 16
#: elements per block of a tiled elementwise loop (each tile's length: the
#: tile is written once per call, ~0.1 ns an element)
TILE_ELEMS = 512
#: fewest loop elements for which tiles are worth writing
TILE_MIN_WORK = 4096


def _blocked(node):
    """Whether region ``node`` runs as a full reduction's blocks (its rows per
    block are :func:`.reduce.reduction_block`'s)."""
    body, mode = node.attrs["body"], node.attrs["mode"]
    red = body.reduction
    return mode == VJP_SUMS or mode == "value" and red is not None and \
        len(red.attrs["axis"]) == len(body.shape)


def _plain(node):
    body, mode = node.attrs["body"], node.attrs["mode"]
    return mode == "value" and body.reduction is None or mode == "vjp" and "axis" not in node.attrs


def tiled_operands(node):
    """The operands of region ``node`` its loop reads from tiles: arrays of more
    than one element that do not change along axis 0 of a loop of two or more
    axes whose innermost extent is below :data:`TILE_BELOW` -- or () ."""
    if node.op != "region" or not (_plain(node) or _blocked(node) or
                                   leading_blocks(node) is not None or rows_in_blocks(node)):
        return ()
    shape = tuple(node.attrs["body"].shape)
    nd = len(shape)
    if nd < 2 or shape[0] < 2 or shape[-1] >= TILE_BELOW or \
            int(np.prod(shape, dtype=np.int64)) < TILE_MIN_WORK:
        return ()
    body = node.attrs["body"]
    read = list(node.args[:len(body.inputs)])
    if node.attrs["mode"] != "value":
        read.append(node.args[-1])  # the cotangent
    out, seen = [], set()
    for a in read:
        if a.id in seen or a.size <= 1 or len(a.shape) > nd or \
                (len(a.shape) == nd and a.shape[0] != 1):
            continue
        seen.add(a.id)
        out.append(a)
    return tuple(out)


def tile_rows(node):
    """Rows of the loop each tile of region ``node`` holds: a full reduction's
    block, else :data:`TILE_ELEMS` elements' worth (at most the loop's)."""
    shape = node.attrs["body"].shape
    if _blocked(node) or leading_blocks(node) is not None:
        return reduction_block(shape)[0]
    if rows_in_blocks(node):
        return row_rows(node)
    inner = int(np.prod(shape[1:], dtype=np.int64))
    return max(1, min(shape[0], -(-TILE_ELEMS // inner)))


def _layout(node):
    """``[(operand, byte offset from the tiles' start, elements)]`` of region
    ``node``'s tiles (each a whole number of 64-byte lines) and their bytes."""
    ops = tiled_operands(node)
    n = tile_rows(node) * int(np.prod(node.attrs["body"].shape[1:], dtype=np.int64)) \
        if ops else 0
    out, at = [], 0
    for a in ops:
        out.append((a, at, n))
        at += _line(n * a.dtype.itemsize)
    return out, at


def with_tiles(node, need):
    """``need`` (the ``(dtype, elements)`` of scratch region ``node``'s code
    needs otherwise, or None) grown by its tiles', which come last, from a
    64-byte boundary (:func:`emit_tiles` finds them from the end)."""
    layout, size = _layout(node)
    if not layout:
        return need
    dtype, count = need if need is not None else (np.dtype(np.float64), 0)
    item = np.dtype(dtype).itemsize
    return dtype, (_line(count * item) + size) // item


def emit_tiles(w, node, read, scratch, nd):
    """Write region ``node``'s tiles into ``scratch`` (its name; ``read``: an
    operand's read text in the loop) and return ``{read text: tile name}`` for
    :meth:`.loops.LoopWriter.nest`, or None (no tiles, or no known address)."""
    where = (w.addresses or {}).get(scratch) if scratch is not None else None
    if where is None:
        return None
    layout, size = _layout(node)
    if not layout:
        return None
    first = where[1][0] * np.dtype(where[2]).itemsize - size  # (with_tiles: they come last)
    rows = tile_rows(node)
    shape = (rows, *node.attrs["body"].shape[1:])
    tiles = {}
    for j, (a, at, n) in enumerate(layout):
        text = read(a)
        if text in tiles or "[" not in text:  # (an inlined constant: nothing to tile)
            continue
        name = f"_tl{node.id}_{j}"
        w.emit(f"{name}_fl = " + view_at(f"{where[0]} + {first + at}", (n,), a.dtype),
               f"{name}_v = {name}_fl.reshape({shape!r})")
        w.nest(shape, [f"{name}_v[{', '.join(f'i{d}' for d in range(nd))}] = {text}"])
        tiles[text] = f"{name}_fl"
    return tiles or None
