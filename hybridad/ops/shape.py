"""Shape ops: the views ``reshape``, ``transpose`` and ``broadcast_to``, and
``concatenate``."""

from __future__ import annotations

import numpy as np

from ..ir.registry import Op, register
from .common import bind as _bind
from .common import expand as _expand
from .common import lift as _lift


def _reshape_view(x, shape):
    return np.reshape(x, shape)


def _reshape_shifts(x, shape):
    """Only a reshape that inserts or drops axes of length 1 (a batched or
    broadcast operand's): each other axis of ``x`` is one of the result's."""
    kept = [j for j, n in enumerate(x.shape) if n != 1]
    new = [d for d, n in enumerate(shape) if n != 1]
    if [x.shape[j] for j in kept] != [shape[d] for d in new]:
        return None
    index = [0] * len(x.shape)
    for j, d in zip(kept, new, strict=True):
        index[j] = (d, 0)
    return [(0, (0,) * len(shape), tuple(shape), tuple(index))]


register(Op("reshape", "view", lambda x, shape: (shape, x.dtype), view=_reshape_view,
            shifts=_reshape_shifts,
            vjp=lambda g, node, active, x, ans, shape: (np.reshape(g, x.shape),),
            jvp=lambda ts, node, x, ans, shape: np.reshape(ts[0], shape),
            batch=lambda node, batched, x, shape: np.reshape(x, (x.shape[0], *shape))))


def _transpose_vjp(g, node, active, x, ans, axes):
    return (np.transpose(g, tuple(np.argsort(axes))),)


register(Op("transpose", "view",
            lambda x, axes: (tuple(x.shape[a] for a in axes), x.dtype),
            view=lambda x, axes: np.transpose(x, axes), vjp=_transpose_vjp,
            jvp=lambda ts, node, x, ans, axes: np.transpose(ts[0], axes),
            batch=lambda node, batched, x, axes: np.transpose(
                x, (0, *(a + 1 for a in axes)))))

register(Op("broadcast_to", "view", lambda x, shape: (shape, x.dtype),
            view=lambda x, shape: np.broadcast_to(x, shape),
            # the autodiff pass sums a too-large cotangent back to x's shape
            vjp=lambda g, node, active, x, ans, shape: (g,),
            jvp=lambda ts, node, x, ans, shape: np.broadcast_to(ts[0], shape),
            batch=lambda node, batched, x, shape: np.broadcast_to(
                _lift(x, len(shape)), (x.shape[0], *shape))))


def _concat_abstract(*xs, axis):
    shape = list(xs[0].shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    return tuple(shape), np.result_type(*(x.dtype for x in xs))


def _concat_run(out, *xs, axis):
    np.concatenate(xs, axis=axis, out=out)


def _concat_vjp(g, node, active, *operands, axis):
    *xs, ans = operands
    out, start = [], 0
    for x, act in zip(xs, active, strict=True):
        stop = start + x.shape[axis]
        index = (slice(None),) * axis + (slice(start, stop),)
        out.append(g[index] if act else None)
        start = stop
    return tuple(out)


def _concat_jvp(ts, node, *operands, axis):
    *xs, ans = operands
    parts = [np.zeros(x.shape, node.dtype) if t is None else t
             for x, t in zip(xs, ts, strict=True)]
    return _bind("concatenate", *parts, axis=axis)


def _concat_batch(node, batched, *xs, axis):
    k = next(x.shape[0] for x, b in zip(xs, batched, strict=True) if b)
    parts = [x if b else _expand(x, k) for x, b in zip(xs, batched, strict=True)]
    return _bind("concatenate", *parts, axis=axis + 1)


def _concat_shifts(*xs, axis):
    """Operand ``k`` is the box ``start_k <= i[axis] < start_k + n_k`` of the
    result, at ``i[axis] - start_k`` (a compiled backend may read the result in
    place: ``np.roll``'s two slices of one array)."""
    pieces, start = [], 0
    for k, x in enumerate(xs):
        n = x.shape[axis]
        lo = tuple(start if d == axis else 0 for d in range(len(x.shape)))
        hi = tuple(start + n if d == axis else s for d, s in enumerate(x.shape))
        pieces.append((k, lo, hi, tuple((d, -start if d == axis else 0)
                                        for d in range(len(x.shape)))))
        start += n
    return pieces


register(Op("concatenate", "compute", _concat_abstract, run=_concat_run, vjp=_concat_vjp,
            jvp=_concat_jvp, batch=_concat_batch, shifts=_concat_shifts))
