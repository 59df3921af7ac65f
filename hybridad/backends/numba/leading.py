"""A sum over axis 0 of a short-rowed loop, in blocks (pure text, numba dialect).

The gradient of a per-column parameter -- a mean, a scale, a bias inside a
nonlinearity -- is ``g * d(region)/d(param)`` summed over the batch axis, made
as the region is evaluated (:func:`hybridad.transforms.region_sums.sum_into_vjp_regions`);
a value region may end in such a sum, and a float64 bias gradient is one.
:func:`.reduce.reduction_nest` adds each element into its column's
compensated accumulator (TwoSum through the accumulator arrays); with an
innermost extent below 16 LLVM unrolls that loop and vectorizes nothing:
for a (10^5, 10) diagonal Gaussian each such sum took 2.5 ns an element,
where the forward's full sum, in blocks, took 1.

There (:data:`LEADING_BELOW`) the rows run in chunks
(:func:`.reduce.leading_chunks`, a ``prange`` in a parallel plan), each chunk in blocks of rows
as a full reduction's (:func:`.reduce.reduction_block`): the block's values
into an L1 block of scratch (one loop with no carried dependency, collapsed,
its row operands read from tiles: :mod:`.tiles`), the block's rows folded
pairwise (each level one loop over contiguous elements), the block's row of
sums added compensated into its chunk's (in float64 for float32), the
chunks' added in order.  A function of the shape: the same bits on any
number of threads; as accurate as numpy's pairwise sum, more than its
row-by-row sum over axis 0.
"""

from __future__ import annotations

import numpy as np

from .accumulators import accumulate, acc_dtype, compensated, two_sum
from .reduce import (_pow2_at_least, combine_chunks, leading_chunks, reduction_block,
                     region_reduction)
from .threshold import parallel_min

__all__ = ["LEADING_BELOW", "leading_blocks", "leading_scratch", "summed_rows"]

#: innermost extents below which the sum runs in blocks: from 16 the
#: accumulator arrays' loop over a row vectorizes and is the faster (a
#: diagonal Gaussian's gradient over 10^6 / K x K, one thread: K = 10 in
#: blocks 1.8 ms, 5.4 accumulated; K = 16 1.7 against 1.1, K = 64 float32
#: 1.4 against 0.7)
LEADING_BELOW = 16


def _facts(node):
    """``(loop shape, dtype, keepdims)`` of a float sum over axis 0 alone that
    ``node`` makes -- a region's (:func:`.reduce.region_reduction`: a ``vjp``
    region summed as it is made, a ``value`` region ending in such a sum) or
    a float64 ``sum`` node's -- else None."""
    if node.op == "sum":  # (float32 into float64: its loop vectorizes, reduce.hidden_extent)
        if not compensated("sum", node.dtype):
            return None
        made = "sum", node.dtype, tuple(node.attrs["axis"]), node.attrs.get("keepdims", False)
        shape = node.args[0].shape
    else:
        made = region_reduction(node)
        shape = node.attrs["body"].shape if made is not None else ()
    if made is None or made[0] != "sum" or made[2] != (0,) or len(shape) < 2 or \
            np.dtype(made[1]).kind != "f":
        return None
    return tuple(shape), made[1], bool(made[3])


def leading_blocks(node):
    """``(chunks, rows per block)`` for a node making a float sum over axis 0
    alone (:func:`_facts`), when it runs in blocks -- else None."""
    facts = _facts(node)
    if facts is None:
        return None
    shape, dtype, _ = facts
    chunks = leading_chunks("sum", dtype, shape, (0,))
    if chunks < 2 or shape[-1] >= LEADING_BELOW:
        return None
    rows = reduction_block(shape)[0]
    return (chunks, rows) if rows >= 8 else None  # (a block's fold pays from 8 rows)


def leading_scratch(node, threads):
    """``(dtype, elements)`` of the scratch of :func:`summed_rows`: the chunks'
    sums (and their compensations), then a block per thread."""
    chunks, rows = leading_blocks(node)
    shape, dtype, _ = _facts(node)
    size = int(np.prod(shape[1:], dtype=np.int64))
    parts = chunks * size * (2 if compensated("sum", dtype) else 1)
    parts = -(-parts // 8) * 8  # (the blocks from a cache line)
    return acc_dtype("sum", dtype), parts + threads * _pow2_at_least(rows * size)


def summed_rows(w, node, out, lines, value, scratch, flat, tiles, stores=()):
    """Emit ``node``'s sum over axis 0 into ``out``: of ``value`` after
    ``lines`` (``stores`` after it: a region's stored partials), over the
    block's rows ``r0:r0 + nr`` (operands along axis 0 read through the block
    slices in ``w.pending``)."""
    chunks, rows = leading_blocks(node)
    shape, dtype, keepdims = _facts(node)
    nd = len(shape)
    size = int(np.prod(shape[1:], dtype=np.int64))
    per_chunk = -(-shape[0] // chunks)
    comp = compensated("sum", dtype)
    width = _pow2_at_least(rows * size)
    parts = -(-chunks * size * (2 if comp else 1) // 8) * 8
    oshape = tuple(1 if d == 0 else s for d, s in enumerate(shape) if d or keepdims)
    part, partc = f"{out}_p", f"{out}_pc"
    at = [f"{scratch}[:{chunks * size}]", f"{scratch}[{chunks * size}:{2 * chunks * size}]"]
    for name, where in zip((part, partc) if comp else (part,), at, strict=False):  # and flat
        w.emit(f"{name} = {where}.reshape({(chunks, *oshape)!r})",
               f"{name}f = {where}.reshape(({chunks}, {size}))")
    par = int(np.prod(shape, dtype=np.int64)) >= parallel_min()  # (not in a serial plan)
    w.parallel = w.parallel or par
    tid = "get_thread_id()" if par else "0"
    w.emit(f"for k0 in {'prange' if par else 'range'}({chunks}):")
    w.indent += 1
    w.emit(f"{part}f[k0] = 0.0", *([f"{partc}f[k0] = 0.0"] if comp else []),
           f"scf = {scratch}[{parts} + {tid} * {width}:{parts} + {tid} * {width} + {width}]",
           f"sc = scf[:{rows * size}].reshape({(rows, *shape[1:])!r})",
           f"for blk in range({-(-per_chunk // rows)}):")
    w.indent += 1
    w.emit(f"r0 = k0 * {per_chunk} + blk * {rows}",
           f"nr = max(0, min({rows}, min(k0 * {per_chunk} + {per_chunk}, {shape[0]}) - r0))")
    w.emit(*w.pending)
    w.pending.clear()
    here = "[" + ", ".join(f"i{d}" for d in range(nd)) + "]"
    w.in_prange += par
    w.nest(("nr", *shape[1:]), [*lines, f"sc{here} = {value}", *stores], long=True,
           flat=None if flat is None else flat | {"sc"}, tiles=tiles)
    w.in_prange -= par
    w.emit("h = nr", "while h > 1:",
           "    half = (h + 1) // 2",
           f"    for j in range((h - half) * {size}):",
           f"        scf[j] += scf[half * {size} + j]",
           "    h = half",
           "if nr > 0:",
           f"    for j in range({size}):")
    add = two_sum(f"{part}f[k0, j]", f"{partc}f[k0, j]", "scf[j]") if comp else \
        accumulate("sum", f"{part}f[k0, j]", "scf[j]")
    w.emit(*("        " + x for x in add))
    w.indent -= 2
    combine_chunks(w, out, part, partc if comp else None, chunks, oshape)
