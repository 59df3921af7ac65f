"""Reductions in generated loops, as accurate as numpy's (pure text, numba dialect).

numpy sums pairwise (blocks of 128 with 8 accumulators, then halves): its
error grows like ``log2(n)`` units of the last place, where a running sum's
grows like ``n``.  Every sum a generated kernel computes -- a fused region's
reduction, a standalone ``sum`` node (the backward pass's unbroadcast sums,
bias gradients), the sums ``mean``, ``var``, ``norm`` and inner products are
made of -- is at least as accurate, on any loop order and thread count:

* **float32** (complex64) sums and products accumulate in float64
  (complex128): ``n`` float64 roundings stay far below one float32 unit of
  the result for any ``n`` a computer holds, so the result is float32's
  correct rounding of the float64 sum (numpy's pairwise float32 sum of 1e7
  values ~1 is off by ~1e-7 relative; a running float32 sum by ~1e-3).
* **float64** (complex128) sums are *compensated*: each running sum carries
  the rounding error of its additions in a second variable (Knuth's TwoSum,
  error-free and branch-free: ``t = s + v; z = t - s; c += (s - (t - z)) +
  (v - z)``).  Its dependency chain is still one addition per element (the
  correction runs beside it), so a serial loop costs what a running sum
  costs; the error is ``2 eps |sum| + O(n eps^2) sum|x|``.
* A large fused full reduction keeps its fast two-phase form (values into an
  L1 block, then a vectorized pairwise fold, :func:`blocked_full_reduction`);
  the blocks' sums are then added compensated, in a fixed order: a
  ``prange`` writes one sum per block and they are added after the loop, so
  the result does not depend on the number of threads.
* Products of float64 (numpy multiplies serially too), ``max``, ``min`` and
  integer reductions are exact or order-independent: unchanged.

Loop order: a reduction over trailing axes (row sums, a full reduction) runs
one output element at a time, its accumulator in locals (fewer than 8 terms
are added in order, as numpy does; 32 or more in blocks); any other (column
sums: numpy's order, rows outer) accumulates into the output array, with
its compensation (float64) or its float64 accumulator (float32) in a scratch
array of the output's shape (:func:`reduction_scratch`).
"""

from __future__ import annotations

import numpy as np

from ...transforms.partition import VJP_SUMS
from .accumulators import (INIT, Accumulator, acc_dtype, accumulate, compensated, init_text,
                           two_sum, two_sum_result)
from .threshold import OPAQUE_MIN, PARALLEL_MIN, parallel_min

__all__ = ["accumulates_across", "blocked_full_reduction", "blocked_full_sums", "combine_chunks",
           "hidden_extent", "leading_chunks", "reduction_nest", "reduction_scratch",
           "region_reduction", "region_runs_parallel"]

def _here(ndim):
    return "[" + ", ".join(f"i{d}" for d in range(ndim)) + "]" if ndim else "[()]"


def _target(axis, keepdims, ndim):
    """Index text of the output element a loop iteration adds into."""
    idx = [("0" if keepdims else None) if d in axis else f"i{d}" for d in range(ndim)]
    kept = [i for i in idx if i is not None]
    return "[" + ", ".join(kept) + "]" if kept else "[()]"


def _trailing(axis, ndim):
    """Whether ``axis`` are the last axes of the loop (a full reduction too)."""
    return set(axis) == set(range(ndim - len(axis), ndim))


def _array_scratch(kind, dtype):
    """Whether an array-order reduction needs a scratch array of the output's
    shape (the float64 accumulator of a float32 sum, a float64 sum's
    compensation)."""
    return kind in ("sum", "prod") and (acc_dtype(kind, dtype) != np.dtype(dtype) or
                                        compensated(kind, dtype))


def reduction_nest(w, kind, dtype, axis, keepdims, shape, body, value, out, stores=(),
                   scratch=None, parallel=False):
    """Emit the reduction of ``value`` over ``axis`` of loop ``shape`` into ``out``.

    Parameters
    ----------
    w : LoopWriter
    kind : {"sum", "prod", "max", "min"}
    dtype : dtype
        The result's dtype.
    axis : tuple of int
    keepdims : bool
    shape : tuple of int
        The loop shape (the reduced operand's).
    body : list of str
        Lines computing ``value`` in the loop (a fused region's statements).
    value : str
        Expression of the element reduced.
    out : str
        The result array (shape of the reduction's output).
    stores : list of str
        Lines after the accumulation (a region's stored partials).
    scratch : str, optional
        A flat array of :func:`reduction_scratch` elements (needed by a
        reduction over leading or middle axes); without it such a sum
        accumulates naively in ``out`` (kernels built for inspection).
    parallel : bool
        Whether a large loop over kept axis 0 may run as a ``prange`` (each
        iteration owns its output elements).
    """
    nd = len(shape)
    stores = list(stores)
    work = int(np.prod(shape, dtype=np.int64))
    par = parallel and 0 not in axis
    if _trailing(axis, nd) and scratch is not None and _row_blocked(kind, shape, axis):
        return _blocked_rows(w, kind, dtype, axis, keepdims, shape, body, value, out, stores,
                             scratch, parallel)
    if _trailing(axis, nd):  # one output element at a time, accumulated in locals
        k = nd - len(axis)
        # fewer than 8 terms numpy adds in order too (its pairwise sum's base case)
        acc = Accumulator(kind, dtype, compensate=work >= 8 * int(np.prod(shape[:k])))
        inner = [f"for i{d} in range({shape[d]}):" for d in range(k, nd)]
        pad = "    " * (nd - k)
        lines = acc.init() + ["    " * j + x for j, x in enumerate(inner)] + \
            [pad + x for x in body + acc.add(value) + stores] + \
            [f"{out}{_target(axis, keepdims, nd)} = {acc.result()}"]
        w.nest(shape[:k], lines, parallel=par, work=work)
        return
    tgt = _target(axis, keepdims, nd)
    long = work >= PARALLEL_MIN  # (what nest reads off a shape of numbers)
    if scratch is None or not _array_scratch(kind, dtype):
        w.emit(f"{out}[...] = {init_text(kind, dtype)}")
        w.nest(hidden_extent(w, shape, axis, out, kind), body +
               accumulate(kind, f"{out}{tgt}", value) + stores, parallel=par, work=work,
               long=long)
        return
    chunks = leading_chunks(kind, dtype, shape, axis)
    if chunks > 1:
        return _chunked_leading(w, kind, dtype, axis, keepdims, shape, body, value, out,
                                stores, scratch, parallel, chunks)
    # leading or middle axes reduced: output elements accumulate side by side
    size = int(np.prod(_reduced_shape(shape, axis, keepdims), dtype=np.int64))
    oshape = _reduced_shape(shape, axis, keepdims)
    side = f"{out}_x"
    w.emit(f"{side} = {scratch}[:{size}].reshape({oshape!r})")
    ond = len(oshape)
    if compensated(kind, dtype):  # out holds the sums, the side array their errors
        w.emit(f"{out}[...] = 0", f"{side}[...] = 0")
        w.nest(shape, body + two_sum(f"{out}{tgt}", f"{side}{tgt}", value) + stores,
               parallel=par)
        w.nest(oshape, [f"_s = {out}{_here(ond)}",
                        f"{out}{_here(ond)} = {two_sum_result('_s', side + _here(ond))}"],
               parallel=par)
        return
    w.emit(f"{side}[...] = {INIT[kind]}")  # the side array accumulates (float64)
    w.nest(hidden_extent(w, shape, axis, side, kind), body +
           accumulate(kind, f"{side}{tgt}", value) + stores, parallel=par, work=work, long=long)
    w.nest(oshape, [f"{out}{_here(ond)} = {side}{_here(ond)}"], parallel=par)


def accumulates_across(shape, axis, how="sum"):
    """Whether a reduction over ``axis`` of ``shape`` adds (``how == "sum"``: a
    plain ``+=``, not compensated) into a row of accumulators along its
    innermost loop, of :data:`~.threshold.OPAQUE_MIN` or more elements (a
    float32 bias gradient: ``acc[i1] += v[i0, i1]``, ``acc`` float64), and so
    runs that loop to a count LLVM cannot see: with the constant, LLVM unrolls
    it into scalar code (numba leaves the SLP vectorizer off).  Measured: a
    float32 sum over the batch of 100000 x 16, 1043 -> 278 us on 2 threads, the
    same bits; the MLP 1-16-16-1's float32 gradient 0.76-0.89x.  Extents from
    64 vectorize either way; float64's compensated sums vectorize with the
    constant count, not a hidden one (605 against 922 us): they keep it."""
    nd = len(shape)
    return how == "sum" and nd >= 2 and (nd - 1) not in axis and shape[-1] >= OPAQUE_MIN


def hidden_extent(w, shape, axis, array, how="sum"):
    """``shape``, its innermost extent as ``_ln`` (emitted: the extent plus
    ``array``'s address >> 63, a zero LLVM cannot see) where
    :func:`accumulates_across`; a hidden count, not a hidden start (with
    ``range(_lz, 16)`` numba's index wrapping kept the loop scalar)."""
    if not accumulates_across(shape, axis, how):
        return tuple(shape)
    w.emit(f"_ln = {shape[-1]} + ({array}.ctypes.data >> 63)  # {shape[-1]}, "
           "hidden: the loop over it vectorizes (reduce.accumulates_across)")
    return (*shape[:-1], "_ln")


#: rows of axis 0 each chunk of a chunked leading-axis sum holds at least,
#: and the most chunks it runs in (:func:`leading_chunks`)
CHUNK_ROWS = 512
MAX_CHUNKS = 16
#: the most partial sums (chunks x outputs) a chunked sum keeps: wide outputs
#: have their parallelism in the kept axes, and scratch is memory
MAX_PARTIALS = 1 << 14


def leading_chunks(kind, dtype, shape, axis):
    """Chunks of axis 0 a float sum over leading or middle axes (axis 0 among
    them: a bias gradient over the batch) runs in, or 1 for one pass.  Each
    chunk sums its rows into its own partial array (compensated, or in
    float64 for float32), the chunks a ``prange`` when the plan is parallel;
    the partials are then added in chunk order.  A function of the shape
    alone: serial and parallel plans add in the same order, to the bit."""
    if kind != "sum" or not _array_scratch(kind, dtype) or 0 not in axis or \
            _trailing(axis, len(shape)) or int(np.prod(shape, dtype=np.int64)) < PARALLEL_MIN:
        return 1
    outputs = int(np.prod([s for d, s in enumerate(shape) if d not in axis], dtype=np.int64))
    chunks = min(MAX_CHUNKS, shape[0] // CHUNK_ROWS, MAX_PARTIALS // max(outputs, 1))
    return chunks if chunks > 1 else 1


def _chunked_leading(w, kind, dtype, axis, keepdims, shape, body, value, out, stores,
                     scratch, parallel, chunks):
    """:func:`reduction_nest` of a sum over leading axes in ``chunks`` chunks
    of axis 0 (:func:`leading_chunks`)."""
    nd = len(shape)
    oshape = _reduced_shape(shape, axis, keepdims)
    size = int(np.prod(oshape, dtype=np.int64))
    rows = -(-shape[0] // chunks)
    comp = compensated(kind, dtype)
    inner = _target(axis, keepdims, nd)[1:-1]
    part, partc = f"{out}_p", f"{out}_pc"
    w.emit(f"{part} = {scratch}[:{chunks * size}].reshape({(chunks, *oshape)!r})")
    if comp:
        w.emit(f"{partc} = {scratch}[{chunks * size}:{2 * chunks * size}]"
               f".reshape({(chunks, *oshape)!r})")
    at = f"[k0, {inner}]"
    lines = [f"{part}[k0] = 0.0"] + ([f"{partc}[k0] = 0.0"] if comp else [])
    loop = hidden_extent(w, shape, axis, part, "compensated" if comp else kind)
    loops = [f"for i0 in range(k0 * {rows}, min(k0 * {rows} + {rows}, {shape[0]})):"] + \
        [f"for i{d} in range({loop[d]}):" for d in range(1, nd)]
    lines += ["    " * j + x for j, x in enumerate(loops)]
    add = two_sum(part + at, partc + at, value) if comp else accumulate(kind, part + at, value)
    lines += ["    " * len(loops) + x for x in body + add + stores]
    w.nest((chunks,), lines, prefix="k", parallel=parallel,
           work=int(np.prod(shape, dtype=np.int64)))
    combine_chunks(w, out, part, partc if comp else None, chunks, oshape)


def combine_chunks(w, out, part, partc, chunks, oshape):
    """``out`` (of ``oshape``) = the sum of the ``chunks`` partial sums
    ``part[k]`` in order, each with its compensation ``partc[k]`` (None:
    float64 sums of float32, not compensated)."""
    ond = len(oshape)
    idx = ", ".join(f"i{d}" for d in range(ond))
    comb = ["_cs = np.float64(0)", "_cc = np.float64(0)", f"for k in range({chunks}):"]
    if partc is not None:
        comb += ["    " + x for x in two_sum("_cs", "_cc", f"{part}[k, {idx}]")]
        comb += [f"    _cc += {partc}[k, {idx}]",
                 f"{out}{_here(ond)} = {two_sum_result('_cs', '_cc')}"]
    else:
        comb += [f"    _cs += {part}[k, {idx}]", f"{out}{_here(ond)} = _cs"]
    w.nest(oshape, comb)


#: fewest elements per output for which a sum over trailing axes runs in
#: blocks (values into an L1 block, then a vectorized pairwise fold); with
#: fewer, the block's fold costs more than the loop saves (measured on 2^20
#: float64, blocked against the compensated loop: rows of 8 elements 1.7x
#: slower, of 32 on par to 1.5x faster, of 128 2-3x faster)
ROW_BLOCK_MIN = 32


def _row_blocked(kind, shape, axis):
    """Whether a sum over trailing ``axis`` of ``shape`` runs in blocks."""
    reduced = int(np.prod([shape[d] for d in axis], dtype=np.int64))
    return kind == "sum" and reduced >= ROW_BLOCK_MIN


def _rows_parallel(shape, axis, parallel=True):
    """Whether the kept axes of a blocked trailing sum run as a ``prange``."""

    return parallel and len(axis) < len(shape) and \
        int(np.prod(shape, dtype=np.int64)) >= parallel_min()


def _blocked_rows(w, kind, dtype, axis, keepdims, shape, body, value, out, stores, scratch,
                  parallel):
    """A sum over the trailing ``axis`` as :func:`blocked_full_reduction` does
    it, one output element at a time: per block of the reduced axes' rows,
    the values into an L1 block (a loop with no carried dependency: the
    region's functions vectorize), then the block's pairwise fold; the
    blocks' sums added compensated.  Kept axes run as a ``prange`` when
    large, each thread on its own scratch block."""
    nd = len(shape)
    k = nd - len(axis)
    rows, per_block = reduction_block(shape[k:])
    width, inner = _pow2_at_least(per_block), per_block // rows
    nblocks = -(-shape[k] // rows)
    par = _rows_parallel(shape, axis, parallel)
    base = f"get_thread_id() * {width}" if par else "0"
    view = _narrow_view(w, scratch, kind, dtype)
    lines = _block_lines("", f"{scratch}[{base}:{base} + {width}]", view, base, width, per_block,
                         (rows,) + tuple(shape[k + 1:]))
    first = f"i{k} - r0" if nblocks > 1 else f"i{k}"
    at = "[" + ", ".join([first] + [f"i{d}" for d in range(k + 1, nd)]) + "]"
    loops = [f"for i{d} in range({shape[d]}):" for d in range(k + 1, nd)]
    if nblocks > 1:
        acc = Accumulator(kind, dtype, "acc")
        lines += acc.init() + [f"for blk in range({nblocks}):", f"    r0 = blk * {rows}",
                               f"    nr = min({rows}, {shape[k]} - r0)"]
        loops.insert(0, f"for i{k} in range(r0, r0 + nr):")
        pad = "    "
    else:
        loops.insert(0, f"for i{k} in range({shape[k]}):")
        pad = ""
    lines += [pad + "    " * j + x for j, x in enumerate(loops)]
    lines += [pad + "    " * len(loops) + x for x in body + [f"sc{at} = {value}"] + stores]
    if nblocks > 1:
        lines += [f"    bv = {_fold(kind, '', f'nr * {inner}', width, view)}"] + \
            ["    " + x for x in acc.add("bv")]
        result = acc.result()
    else:
        result = _fold(kind, "", str(per_block), width, view)
    lines.append(f"{out}{_target(axis, keepdims, nd)} = {result}")
    w.nest(shape[:k], lines, parallel=par, work=int(np.prod(shape, dtype=np.int64)))


def _reduced_shape(shape, axis, keepdims):
    return tuple(1 if d in axis else s for d, s in enumerate(shape) if keepdims or d not in axis)


# ----------------------------------------------------------------------------
# scratch
# ----------------------------------------------------------------------------

#: elements per block of a two-phase full reduction (its scratch stays in L1)
BLOCK = 1024


def reduction_block(shape):
    """Rows of axis 0 per block, and elements per block, for the two-phase
    full reduction over ``shape``."""
    inner = int(np.prod(shape[1:], dtype=np.int64))
    rows = max(1, min(BLOCK // max(inner, 1), shape[0]))
    return rows, rows * inner


def _blocks(shape):
    rows, _ = reduction_block(shape)
    return -(-shape[0] // rows)


def region_reduction(node):
    """``(kind, dtype, axis, keepdims)`` of the reduction region ``node``'s loop
    makes: a ``value`` region's fused one, or a ``vjp`` region's sum over
    ``attrs['axis']`` (:func:`hybridad.transforms.region_sums.sum_into_vjp_regions`)
    -- else None (``vjp_sums`` regions are :func:`blocked_full_sums`')."""
    if node.op != "region":
        return None
    if node.attrs["mode"] == "vjp" and "axis" in node.attrs:
        return "sum", node.dtype, tuple(node.attrs["axis"]), bool(node.attrs["keepdims"])
    red = node.attrs["body"].reduction
    if node.attrs["mode"] != "value" or red is None:
        return None
    return red.op, red.dtype, tuple(red.attrs["axis"]), bool(red.attrs.get("keepdims", False))


def reduction_scratch(node, threads):
    """``(dtype, elements)`` of the scratch a reduction node's code needs, or None.

    A value region with a full reduction: one block per thread that may run
    it (in the accumulation dtype for sums and products), and for a
    ``prange`` one element per block (the blocks' sums); as much again for
    each partial it sums (``attrs['sums']``), and for each sum of a
    ``vjp_sums`` region.  A reduction over
    leading or middle axes (a region's or a ``sum``/``prod`` node's): an
    array of the output's shape (:func:`reduction_nest`)."""
    if node.op == "region":
        body = node.attrs["body"]
        if node.attrs["mode"] == VJP_SUMS:  # a block per thread for each of its sums
            count = _pow2_at_least(reduction_block(body.shape)[1])
            if _parallel_elems(body.shape):
                count = count * threads + _sums_size(body.shape)
            return acc_dtype("sum", node.dtype), count * len(node.attrs["wrt"])
        made = region_reduction(node)
        if made is None or not body.shape:
            return None
        (kind, made_dtype, axis, _), shape = made, body.shape
        if len(axis) == len(shape) and node.attrs["mode"] == "value":
            count = _pow2_at_least(reduction_block(shape)[1])
            if _parallel_sum(body):
                count = count * threads + _sums_size(shape)
            return acc_dtype(kind, made_dtype), count * (1 + len(node.attrs.get("sums", ())))
    elif node.op in ("sum", "prod", "max", "min"):
        kind, shape, axis = node.op, node.args[0].shape, node.attrs["axis"]
    else:
        return None
    if _trailing(axis, len(shape)):
        if not _row_blocked(kind, shape, axis):
            return None
        k = len(shape) - len(axis)
        width = _pow2_at_least(reduction_block(shape[k:])[1])
        return acc_dtype(kind, node.dtype), width * (threads if _rows_parallel(shape, axis)
                                                    else 1)
    if not _array_scratch(kind, node.dtype):
        return None
    chunks = leading_chunks(kind, node.dtype, shape, axis)
    if chunks > 1:  # the chunks' partial sums (and their errors)
        return acc_dtype(kind, node.dtype), \
            chunks * max(node.size, 1) * (2 if compensated(kind, node.dtype) else 1)
    return acc_dtype(kind, node.dtype), max(node.size, 1)


def _pow2_at_least(n):
    return 1 << max(int(n) - 1, 0).bit_length()


def _parallel_elems(shape):
    return int(np.prod(shape)) >= parallel_min()


def _parallel_sum(body):
    return body.reduction.op == "sum" and _parallel_elems(body.shape)


# ----------------------------------------------------------------------------
# the two-phase full reduction of a fused region
# ----------------------------------------------------------------------------


def _runs_parallel(node):
    """Whether a full reduction of region ``node`` runs its blocks as a prange."""
    body = node.attrs["body"]
    return _parallel_elems(body.shape) if node.attrs["mode"] == VJP_SUMS else \
        _parallel_sum(body)


def single_block(node):
    """Whether region ``node``'s full reduction over its loop is one block (run serially)."""
    return _blocks(node.attrs["body"].shape) == 1 and not _runs_parallel(node)


def blocked_full_reduction(w, node, out, sb, stores, scratch, sums=(), flat=None, tiles=None):
    """A full reduction in two phases per block of rows: the elementwise values
    (and stored partials) into an L1-sized scratch block -- a loop with no
    carried dependency, which LLVM vectorizes -- then the block's reduction as
    a pairwise tree (each level one dependency-free loop: vectorizable under
    strict IEEE order, as accurate as numpy's pairwise sum; for float32 in
    float64).  Fused in one loop with a running accumulator, the dependency
    chain made the same kernel ~5x slower (measured: 12.5 vs 2.6 ns per exp
    element).  The fold is a shared compiled helper (:func:`.folds.fold_sum` and
    kin); a one-block reduction has no block loop.  The blocks' sums are added
    compensated (:class:`Accumulator`).  A large sum runs its blocks as a
    ``prange``, each thread on its own scratch block, each block's sum into
    its element at the scratch's start; they are added after the loop, in
    order (:func:`.folds.sum_compensated`), so the result does not depend on the
    number of threads.  Operands along axis 0 are read through the block
    slices the caller put in ``w.pending``.  ``sums``: ``(target, value)``
    pairs summed in the same loop (stored partials summed whole), each as
    :func:`blocked_full_sums` sums its values."""
    red = node.attrs["body"].reduction
    _blocked(w, node, red.op, red.dtype, [f"{out}[()]"] + [f"{t}[()]" for t, _ in sums],
             sb.lines, [sb.value] + [v for _, v in sums], stores, scratch, flat, tiles)


def blocked_full_sums(w, node, out, lines, values, scratch, flat=None, tiles=None):
    """The sums of ``values`` over a ``vjp_sums`` region's loop into ``out[0]``,
    ``out[1]``, ...: one loop writing each value into its own scratch block,
    each block folded and the blocks' sums added as
    :func:`blocked_full_reduction` does for one (the scratch holds the blocks'
    sums of each value in turn, then each thread's blocks, one per value)."""
    _blocked(w, node, "sum", node.dtype, [f"{out}[{k}]" for k in range(len(values))], lines,
             values, (), scratch, flat, tiles)


def _blocked(w, node, kind, dtype, targets, lines, values, stores, scratch, flat=None,
             tiles=None):
    shape = node.attrs["body"].shape
    nd = len(shape)
    rows, per_block = reduction_block(shape)
    width = _pow2_at_least(per_block)
    inner = per_block // rows
    par = _runs_parallel(node)
    w.parallel = w.parallel or par
    many = not single_block(node)
    nblocks = _blocks(shape)
    nv = len(values)
    sfx = [""] if nv == 1 else [str(k) for k in range(nv)]
    accs = [Accumulator(kind, dtype, "acc" + x) for x in sfx]
    sums = _sums_size(shape) if par else 0  # the blocks' sums of each value come first
    base = f"{nv * sums} + get_thread_id() * {nv * width}" if par else "0"
    if many and not par:
        for acc in accs:
            w.emit(*acc.init())
    view = _narrow_view(w, scratch, kind, dtype)
    if many:
        w.emit(f"for blk in {'prange' if par else 'range'}({nblocks}):")
        w.indent += 1
        w.emit(f"r0 = blk * {rows}",
               f"nr = min({rows}, {shape[0]} - r0)")
    else:
        w.emit(f"nr = {shape[0]}")
    for k, x in enumerate(sfx):
        lo = base if k == 0 else f"{base} + {k * width}"
        # (always the block's own slice: the fold pads and halves exactly ``width``
        # elements, and a scratch planned for more values -- a value program
        # run on the gradient's memory plan, its summed partials dropped --
        # is longer: folded whole, its 24 elements summed 4 of 5 values)
        w.emit(*_block_lines(x, f"{scratch}[{lo}:{base} + {(k + 1) * width}]", view, lo,
                             width, per_block, (rows,) + tuple(shape[1:])))
    w.emit(*w.pending)
    w.pending.clear()
    block_shape = ("nr",) + tuple(str(s) for s in shape[1:])
    w.in_prange += bool(many and par)
    w.nest(block_shape, lines + [f"sc{x}{_here(nd)} = {v}" for x, v in zip(sfx, values,
                                                                             strict=True)]
           + list(stores), long=int(np.prod(shape)) >= PARALLEL_MIN,
           flat=None if flat is None else flat | {f"sc{x}" for x in sfx}, tiles=tiles)
    w.in_prange -= bool(many and par)
    # pad to the power-of-two width with the identity, then fold halves
    pad = f", {init_text(kind, dtype)}" if kind in ("max", "min") else ""
    folds = [_fold(kind, x, f"nr * {inner}{pad}", width, view) for x in sfx]
    if not many:
        w.emit(*(f"{t} = {f}" for t, f in zip(targets, folds, strict=True)))
    elif par:  # this block's sums; all are added after the loop, in order
        w.emit(*(f"{scratch}[{k * sums} + blk] = {f}" if k else f"{scratch}[blk] = {f}"
                 for k, f in enumerate(folds)))
        w.indent -= 1
        w.emit(*(f"{t} = _sum_compensated({scratch}[{k * sums}:{k * sums + nblocks}])"
                 if k else f"{t} = _sum_compensated({scratch}[:{nblocks}])"
                 for k, t in enumerate(targets)))
    else:
        for acc, f in zip(accs, folds, strict=True):
            w.emit("bv = " + f, *acc.add("bv"))
        w.indent -= 1
        w.emit(*(f"{t} = {acc.result()}" for t, acc in zip(targets, accs, strict=True)))


def _narrow(kind, dtype):
    """Whether a blocked sum stores its values as float32 (a float32 sum: its
    loop then vectorizes twice as wide; folded in float64, the same bits)."""
    return kind == "sum" and np.dtype(dtype) == np.float32


def _narrow_view(w, scratch, kind, dtype):
    """Where :func:`_narrow`: emit (outside any ``prange``: numba's parfor alias
    analysis takes views only there) the float32 view of the whole float64
    ``scratch`` and return its name; else None."""
    if not _narrow(kind, dtype):
        return None
    w.emit(f"{scratch}_n = _view({scratch}.ctypes.data, 2 * {scratch}.size, np.float32)")
    return f"{scratch}_n"


def _block_lines(x, scf, view, lo, width, per_block, shape):
    """Lines naming a thread's scratch block ``scf{x}`` (the slice ``scf``,
    starting at element ``lo``), over a narrow ``view`` its float32 first half
    ``scn{x}``, and the block's values ``sc{x}`` (``shape``, rows first)."""
    lines, blk = [f"scf{x} = {scf}"], f"scf{x}"
    if view is not None:
        lines.append(f"scn{x} = {view}[2 * ({lo}):2 * ({lo}) + {width}]")
        blk = f"scn{x}"
    return lines + [f"sc{x} = {blk}[:{per_block}]" if len(shape) == 1 else
                    f"sc{x} = {blk}[:{per_block}].reshape({tuple(shape)!r})"]


def _fold(kind, x, count, width, view):
    """The fold of ``count`` values of block ``x`` (:func:`_block_lines`): a
    narrow one's float32 half into its float64 second half
    (:func:`.folds.fold_sum_wide`)."""
    if view is not None:
        return f"_fold_sum_wide(scn{x}, {count}, scf{x}[{width // 2}:])"
    return f"_fold_{kind}(scf{x}, {count})"


def _sums_size(shape):
    """Elements a ``prange`` full reduction keeps its blocks' sums in (a whole
    number of cache lines, so the thread blocks after them stay aligned)."""
    return -(-_blocks(shape) // 8) * 8


def region_runs_parallel(node):
    """Whether a region ``node``'s loop runs as a ``prange`` (a full
    reduction given its scratch, as the numba backend does): elementwise and
    vjp regions and reductions that keep axis 0, of at least
    :data:`.loops.PARALLEL_MIN` iterations, and large full sums; other
    reductions run serially."""

    body = node.attrs["body"]
    shape = body.shape
    if node.attrs["mode"] == VJP_SUMS:
        return bool(shape) and _parallel_elems(shape)
    large = bool(shape) and int(np.prod(shape)) >= parallel_min()
    made = region_reduction(node)
    if made is None:
        return large
    kind, dtype, axis, _ = made
    if len(axis) == len(shape):
        return bool(shape) and kind == "sum" and _parallel_elems(shape)
    # kept axis 0: its rows a prange; else chunks of axis 0 (leading_chunks)
    return large and 0 not in axis or large and leading_chunks(kind, dtype, shape, axis) > 1
