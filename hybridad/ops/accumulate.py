"""The accumulation ops the reverse pass emits: ``scatter``, ``scatter_flat``
(zeros with a cotangent written or added in), and the in-place ``scatter_add``,
``scatter_add_flat`` and ``iadd``."""

from __future__ import annotations

import numpy as np

from ..ir.registry import REGISTRY, Op, register
from .common import bind as _bind
from .common import expand as _expand
from .common import lift as _lift
from .common import same_as_first as _same_as_first
from .indexing import gather_positions


def _scatter_run(out, g, index):
    out.fill(0)
    out[index + (...,)] = g


def _region_rank(shape, index):
    """The number of axes of ``zeros(shape)[index]``."""
    proxy = np.lib.stride_tricks.as_strided(np.zeros(1), shape, (0,) * len(shape))
    return proxy[index + (...,)].ndim


def _scatter_batch(node, batched, g, index, shape):
    return _bind("scatter", _lift(g, _region_rank(shape, index)), index=(slice(None), *index),
                 shape=(g.shape[0], *shape))


def _batched_acc(acc, batched, k):
    """An accumulator of a batched sum: itself when batched, else a batched copy."""
    return acc if batched else _bind("copy", _expand(acc, k))


def _scatter_add_batch(node, batched, acc, g, index):
    k = (acc if batched[0] else g).shape[0]
    acc = _batched_acc(acc, batched[0], k)
    if batched[1]:
        g = _lift(g, _region_rank(node.shape, index))
    return _bind("scatter_add", acc, g, index=(slice(None), *index))


def _iadd_batch(node, batched, acc, g):
    k = (acc if batched[0] else g).shape[0]
    acc = _batched_acc(acc, batched[0], k)
    return _bind("iadd", acc, _lift(g, len(node.shape)) if batched[1] else g)


def _flat_batch(node, batched, *args, shape=None):
    """scatter_flat / scatter_add_flat: positions offset per batch entry --
    one set for every entry, or (batched positions: a sort's, of a batch of
    points) a row of them each."""
    from .batch_helpers import batched_positions, expand

    *data, flat = args
    own = batched[-1]
    k = next(a.shape[0] for a, b in zip(args, batched, strict=True) if b)
    pos = batched_positions(flat, k, node.size, own)
    rank = flat.ndim - own  # (the positions' own axes)
    g = data[-1]
    g = (g if rank + 1 == g.ndim else _lift(g, rank)) if batched[len(data) - 1] else \
        (expand(g, k) if own else g)
    if node.op == "scatter_flat":
        return _bind("scatter_flat", g, pos, shape=(k, *shape))
    return _bind("scatter_add_flat", _batched_acc(data[0], batched[0], k), g, pos)


def _in_place_jvp(ts, node, *operands, **attrs):
    raise NotImplementedError(
        f"forward mode through the in-place {node.op!r}: differentiate a functional "
        "backward pass (autodiff.backward(..., inplace=False))")


register(Op("scatter", "compute", lambda g, index, shape: (shape, g.dtype),
            run=lambda out, g, index, shape: _scatter_run(out, g, index),
            vjp=lambda gg, node, active, g, ans, index, shape: (gg[index],),
            jvp=lambda ts, node, g, ans, index, shape: _bind("scatter", ts[0], index=index,
                                                             shape=shape),
            batch=_scatter_batch, doc="zeros of shape with g written at index"))


def _scatter_add_run(acc, g, index):
    view = acc[index + (...,)]  # a view even when every index is an int
    np.add(view, g, out=view)


register(Op("scatter_add", "inplace", lambda acc, g, index: (acc.shape, acc.dtype),
            run=lambda out, acc, g, index: _scatter_add_run(acc, g, index),
            jvp=_in_place_jvp, batch=_scatter_add_batch, doc="acc[index] += g, in place"))

def _scatter_flat_vjp(gg, node, active, g, flat, ans, shape):
    from ..core.trace import bind

    if flat.node.is_const:  # positions known at trace time: through any view of gg
        return (gather_positions(gg, lambda pos: pos.reshape(-1)[flat.node.attrs["value"]]),
                None)
    # positions computed at run time (sort's): gather from C-contiguous storage
    storage = gg.node
    while storage.op in REGISTRY and REGISTRY[storage.op].kind == "inplace":
        storage = storage.args[0]
    if storage.op in REGISTRY and REGISTRY[storage.op].kind == "view" or \
            storage.is_const and not storage.attrs["value"].flags.c_contiguous:
        gg = bind("copy", gg)
    return (bind("gather", gg, flat), None)


def _add_at(flat_out, flat, g):
    """``np.add.at(flat_out, flat, g)``; one position (0-d ``flat``, ``x[i]``
    at an integer computed from values) as 1-d views: numpy's 0-d call
    allocates an element's buffer every time."""
    if flat.ndim == 0:
        flat, g = flat.reshape(1), np.reshape(g, 1)
    np.add.at(flat_out, flat, g)


def _scatter_flat_run(out, g, flat, shape):
    out.fill(0)
    _add_at(out.reshape(-1), flat, g)  # out is a C-contiguous buffer: a view


register(Op("scatter_flat", "compute", lambda g, flat, shape: (shape, g.dtype),
            run=_scatter_flat_run, vjp=_scatter_flat_vjp, batch=_flat_batch,
            jvp=lambda ts, node, g, flat, ans, shape: _bind("scatter_flat", ts[0], flat,
                                                            shape=shape),
            doc="zeros of shape with g added at the flat positions flat (repeats add up)"))

register(Op("scatter_add_flat", "inplace", lambda acc, g, flat: (acc.shape, acc.dtype),
            run=lambda out, acc, g, flat: _add_at(acc.reshape(-1), flat, g),
            jvp=_in_place_jvp, batch=_flat_batch,
            doc="acc.flat[flat] += g, in place, repeats adding up (acc C-contiguous)"))

register(Op("iadd", "inplace", _same_as_first,
            run=lambda out, acc, g: np.add(acc, g, out=acc), jvp=_in_place_jvp,
            batch=_iadd_batch,
            doc="acc += g, in place (g broadcasts)"))
