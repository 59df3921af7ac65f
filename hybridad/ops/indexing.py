"""Indexing: ``getitem`` (a view; its index *basic* -- slices, ints, ``None``,
``Ellipsis`` -- normalized to a tuple), ``gather`` (reads at constant flat
positions) with :func:`gather_positions`, which turns any value-independent
selection into one ``gather``, and :class:`Scatter`, the sparse cotangent
their reverse rules return."""

from __future__ import annotations

import numbers

import numpy as np

from ..ir.registry import REGISTRY, Op, register
from .common import bind as _bind


def _proxy(node):
    """A zero-strided stand-in of ``node``'s shape (no data is allocated)."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, node.dtype), node.shape,
                                           (0,) * len(node.shape))


class Scatter:
    """A cotangent that is nonzero only on ``x[index]`` (a basic index) or, with
    ``flat``, on the flat positions ``flat`` of ``x`` (repeats add up); the
    autodiff pass adds it into the adjoint in place (no full-size temporary)."""

    __slots__ = ("flat", "index", "value")

    def __init__(self, index, value, flat=None):
        self.index = index
        self.value = value
        self.flat = flat


def _getitem_abstract(x, index):
    return _proxy(x)[index + (...,)].shape, x.dtype


def _getitem_shifts(x, index):
    """Basic indexing by slices of step 1, integers and new axes: the
    result's index plus the slice's start, or the integer."""
    lo, hi, where, d, j = [], [], [], 0, 0
    for k in index:
        if k is None:  # a new axis of length 1
            lo.append(0)
            hi.append(1)
            d += 1
            continue
        if j == len(x.shape):
            return None
        if type(k) is slice:
            start, stop, step = k.indices(x.shape[j])
            if step != 1:
                return None
            lo.append(0)
            hi.append(max(stop - start, 0))
            where.append((d, start))
            d += 1
        elif isinstance(k, numbers.Integral) and not isinstance(k, bool):
            where.append(int(k) % x.shape[j])
        else:
            return None
        j += 1
    for n in x.shape[j:]:
        lo.append(0)
        hi.append(n)
        where.append((d, 0))
        d += 1
    return [(0, tuple(lo), tuple(hi), tuple(where))]


register(Op("getitem", "view", _getitem_abstract, view=lambda x, index: x[index + (...,)],
            shifts=_getitem_shifts,
            vjp=lambda g, node, active, x, ans, index: (Scatter(index, g),),
            jvp=lambda ts, node, x, ans, index: _bind("getitem", ts[0], index=index),
            batch=lambda node, batched, x, index: _bind("getitem", x,
                                                        index=(slice(None), *index))))


def _gather_run(out, x, flat):
    # x is C-contiguous (numpy_api.gather_positions sees to it); indices are
    # in range by construction, and mode="wrap" keeps numpy's take unbuffered.
    # cupy's take has no mode (it wraps): a device buffer gets the plain call
    if type(out) is np.ndarray:
        np.take(x, flat, out=out, mode="wrap")
    else:
        np.take(x, flat, out=out)


def _gather_vjp(g, node, active, x, flat, ans):
    return (Scatter(None, g, flat=flat), None)


def _gather_batch(node, batched, x, flat):
    if batched[1]:
        raise NotImplementedError("gather at batched positions")
    from .batch_helpers import batched_positions, contiguous

    return _bind("gather", contiguous(x), batched_positions(flat, x.shape[0], x.size // x.shape[0]))


def _gather_jvp(ts, node, x, flat, ans):
    from .batch_helpers import contiguous

    return _bind("gather", contiguous(ts[0]), flat)


register(Op("gather", "compute", lambda x, flat: (flat.shape, x.dtype), run=_gather_run,
            vjp=_gather_vjp, jvp=_gather_jvp, batch=_gather_batch,
            doc="x.flat[flat] for a constant integer array flat (C-contiguous x): "
                "fancy and boolean indexing, take, compress, repeat, diagonal"))


def gather_positions(x, select):
    """The elements of ``x`` that ``select`` picks, for any selection that moves
    elements without looking at their values (fancy and boolean indexing,
    ``take``, ``compress``, ``repeat``, ``diagonal``, ...).

    ``select`` is applied, at trace time, to an integer array of ``x``'s shape
    holding each element's flat position in the storage ``x`` is a view of;
    numpy therefore checks the selection and gives its exact semantics (and its
    errors).  The result is one ``gather`` primitive reading that storage.
    """
    from ..core.trace import bind
    from ..core.tracer import Tracer

    chain, node = [], x.node
    while node.op in REGISTRY and REGISTRY[node.op].kind == "view":
        chain.append(node)
        node = node.args[0]
    pos = np.arange(node.size, dtype=np.intp).reshape(node.shape)
    for v in reversed(chain):
        pos = REGISTRY[v.op].view(pos, **v.attrs)
    flat = np.ascontiguousarray(select(pos), dtype=np.intp)
    if node.is_literal:  # a constant in, a constant out
        value = np.ascontiguousarray(node.attrs["value"]).reshape(-1)[flat]
        return Tracer(x._trace.const(value, True), x._trace)
    base = Tracer(node, x._trace)
    if node.is_const and not node.attrs["value"].flags.c_contiguous:
        base = bind("copy", base)  # gather reads C-contiguous storage
    return bind("gather", base, Tracer(x._trace.const(flat, True), x._trace))
