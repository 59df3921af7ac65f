"""Sorting: ``sort_pack``, ``sort_index`` (argsort) and ``sort_values``.

Each row is packed as complex (value, index along the axis) and sorted in
place -- complex numbers sort lexicographically, NaN real parts last, so ties
keep their order (a stable sort) whatever algorithm sorts, and no numpy call
allocates.  The packed array is laid out with the sorted axis last, where
ndarray.sort works without a row buffer.
"""

from __future__ import annotations

import numpy as np

from ..ir.registry import Op, register
from .common import bind as _bind
from .indexing import Scatter


def sort_pack_dtype(dtype, n):
    """complex64 holds a float32 (or narrower) value and an index below 2**24
    exactly; anything else packs into complex128."""
    small = np.dtype(dtype).itemsize <= 4 and n <= 1 << 24
    return np.dtype(np.complex64 if small else np.complex128)


def _sort_pack_abstract(x, axis):
    shape = x.shape[:axis] + x.shape[axis + 1:] + (x.shape[axis],)
    return shape, sort_pack_dtype(x.dtype, x.shape[axis])


def _sort_pack_run(out, x, axis):
    index = out.imag  # 0, 1, 2, ... along the last axis, by an in-place running sum
    index[..., :1].fill(0)
    index[..., 1:].fill(1)
    np.add.accumulate(index, axis=-1, out=index)
    np.copyto(out.real, np.moveaxis(x, axis, -1))
    out.sort(axis=-1)  # the keys are distinct: any algorithm gives the stable order


def _axis_batch(node, batched, *args, axis):
    """A batch on a new leading axis (gradient_batch's points): every operand
    batched (the sort's pack comes from the batched values), the axis one on."""
    from .batch_helpers import expand

    k = next(a.shape[0] for a, b in zip(args, batched, strict=True) if b)
    args = [a if b else expand(a, k) for a, b in zip(args, batched, strict=True)]
    return _bind(node.op, *args, axis=axis + 1)


register(Op("sort_pack", "compute", _sort_pack_abstract, run=_sort_pack_run,
            vjp=lambda g, node, active, x, ans, axis: (None,),
            jvp=lambda ts, node, x, ans, axis: None, batch=_axis_batch,
            doc="rows of x along axis as (value, index) complex pairs, sorted, the axis "
                "moved last (not differentiable; see sort_values)"))


def _sort_unpacked_shape(p, axis):
    return p.shape[:axis] + p.shape[-1:] + p.shape[axis:-1]


register(Op("sort_index", "compute",
            lambda p, axis: (_sort_unpacked_shape(p, axis), np.dtype(np.intp)),
            run=lambda out, p, axis: np.copyto(out, np.moveaxis(p.imag, -1, axis),
                                               casting="unsafe"),
            vjp=lambda g, node, active, p, ans, axis: (None,), batch=_axis_batch,
            doc="where each sorted element came from along the axis (argsort, stable)"))


def _sort_positions(x, p, axis):
    """Flat position in x of each sorted element: (index along the axis) *
    stride + the row's start."""
    k = _bind("sort_index", p, axis=axis)
    stride = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    start = np.take(np.arange(x.size, dtype=np.intp).reshape(x.shape), [0], axis=axis)
    return k * stride + start


def _sort_values_jvp(ts, node, x, p, ans, axis):
    from .batch_helpers import contiguous

    if x.size == 0 or ts[0] is None:
        return None
    return _bind("gather", contiguous(ts[0]), _sort_positions(x, p, axis))


def _sort_values_vjp(g, node, active, x, p, ans, axis):
    # the cotangent of sorted[j] goes to the element it came from: its flat
    # position in x is (index along the axis) * stride + the row's start

    if x.size == 0:
        return (None, None)
    return (Scatter(None, g, flat=_sort_positions(x, p, axis)), None)


register(Op("sort_values", "compute", lambda x, p, axis: (x.shape, x.dtype),
            run=lambda out, x, p, axis: np.copyto(out, np.moveaxis(p.real, -1, axis)),
            vjp=_sort_values_vjp, jvp=_sort_values_jvp, batch=_axis_batch,
            doc="x sorted along axis, read from its sort_pack p (the cotangent goes back "
                "to where each element came from)"))
