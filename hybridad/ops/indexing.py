"""Indexing: ``getitem`` (a view; its index *basic* -- slices, ints, ``None``,
``Ellipsis`` -- normalized to a tuple), ``gather`` (reads at constant flat
positions) with :func:`gather_positions`, which turns any value-independent
selection into one ``gather``, :class:`Scatter`, the sparse cotangent
their reverse rules return, and :class:`Pieces`, the cotangent of a packed
value (:attr:`~hybridad.ir.registry.Op.packed`) kept as the slices its parts
received."""

from __future__ import annotations

import numbers

import numpy as np

from ..ir.registry import REGISTRY, Op, register
from .common import bind as _bind


#: zero-strided stand-ins by (shape, dtype): a Python loop over an array's rows
#: asks for the same one at every row
_PROXIES = {}


def _proxy(node):
    """A zero-strided, read-only stand-in of ``node``'s shape (no data is
    allocated)."""
    key = (node.shape, node.dtype)
    hit = _PROXIES.get(key)
    if hit is None:
        hit = np.lib.stride_tricks.as_strided(np.zeros(1, node.dtype), node.shape,
                                              (0,) * len(node.shape), writeable=False)
        if len(_PROXIES) >= 256:
            _PROXIES.clear()
        _PROXIES[key] = hit
    return hit


class Scatter:
    """A cotangent that is nonzero only on ``x[index]`` (a basic index) or, with
    ``flat``, on the flat positions ``flat`` of ``x`` (repeats add up); the
    autodiff pass adds it into the adjoint in place (no full-size temporary)."""

    __slots__ = ("flat", "index", "value")

    def __init__(self, index, value, flat=None):
        self.index = index
        self.value = value
        self.flat = flat


def clean_slice(index, size):
    """``(start, stop)`` when ``index`` (a getitem's) is one slice of step 1
    over a 1-d value of ``size`` elements, else None."""
    if len(index) != 1 or type(index[0]) is not slice:
        return None
    start, stop, step = index[0].indices(size)
    return (start, stop) if step == 1 and stop >= start else None


class Pieces:
    """The cotangent of a packed value (a loop's: its final carries and stacked
    outputs, one flat buffer), kept as the 1-d pieces ``[start, stop)`` that
    its parts received, so that no buffer of the whole value -- ``length`` x
    the state, for the stored carries no one differentiates -- is zeroed and
    written.  Reading ``g[start:stop]`` gives that piece, or zeros where none
    arrived; any other read builds the whole cotangent (:meth:`dense`)."""

    __slots__ = ("dtype", "parts", "shape")

    def __init__(self, shape, dtype):
        self.shape, self.dtype, self.parts = tuple(shape), np.dtype(dtype), {}

    def add(self, span, value):
        prev = self.parts.get(span)
        self.parts[span] = value if prev is None else prev + value

    def __getitem__(self, key):
        span = clean_slice(key if type(key) is tuple else (key,), self.shape[0])
        if span is not None and len(self.shape) == 1:
            if span in self.parts:
                return self.parts[span]
            if not any(a < span[1] and span[0] < b for a, b in self.parts):
                return _bind("zeros", shape=(span[1] - span[0],), dtype=self.dtype)
        return self.dense()[key]

    def dense(self):
        """The whole cotangent (a new value: zeros where no piece arrived)."""
        out = _bind("zeros", shape=self.shape, dtype=self.dtype)
        for (a, b), v in sorted(self.parts.items()):
            out = out + _bind("scatter", v, index=(slice(a, b, None),), shape=self.shape)
        return out


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
    from .batch_helpers import batched_positions, contiguous

    if batched[1] and not batched[0]:  # positions a row each (a rolled map's), into one array
        return _bind("gather", contiguous(x), flat)
    # (batched positions: each row of them into its own array of the stack)
    return _bind("gather", contiguous(x), batched_positions(flat, x.shape[0],
                                                             x.size // x.shape[0], batched[1]))


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
    # (a copy, packed: a selection of one element may keep its view's stride
    # -- C-contiguous by numpy's flags -- and numpy's take then copies such
    # indices on every call)
    flat = np.array(select(pos), dtype=np.intp, order="C", copy=True)
    if node.is_literal:  # a constant in, a constant out
        value = np.ascontiguousarray(node.attrs["value"]).reshape(-1)[flat]
        return Tracer(x._trace.const(value, True), x._trace)
    base = Tracer(node, x._trace)
    if node.is_const and not node.attrs["value"].flags.c_contiguous:
        base = bind("copy", base)  # gather reads C-contiguous storage
    return bind("gather", base, Tracer(x._trace.const(flat, True), x._trace))
