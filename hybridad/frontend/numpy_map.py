"""Python functions mapped over traced arrays: ``np.vectorize`` and
``np.apply_along_axis``.

The function is traced ONCE, on tracers standing for one element (one row,
one core of a gufunc signature), in a body trace of its own
(:class:`~.loops.BodyTrace`: what it reads from the enclosing trace becomes
an input), and that body is then emitted batched over all of them
(:func:`~hybridad.transforms.batching.vmap`, as JAX's ``jnp.vectorize``
does): the plan computes the map as array operations, fused like any other,
whatever the number of elements.  A function that branches on a value (a
Python ``if`` on an element -- the reason code is often written with
``np.vectorize``) cannot be traced without values: it is called once per
element instead, each call traced with its element (its decisions recorded
and checked on every call, as for any Python ``if`` on a traced value), and
the results stacked; so is a body that holds an op without a batch rule.
Both forms give the values numpy's loop gives.

``np.vectorize`` is a class, not a function numpy dispatches to tracers:
its ``__call__`` is wrapped once, when hybridad is imported, and hands a call
with a traced argument, inside a trace, to :func:`vectorized`; every other
call is numpy's own (:data:`_NUMPY_CALL`).
"""

from __future__ import annotations

import functools
import re
import types
import weakref

import numpy as np

from ..core.tracer import Tracer
from ..errors import ConversionError, TracingError
from ..ir.graph import Graph
from ..ops.loop import TRANSFORMS, replay
from .scalar_functions import elementwise
from .loops import BodyTrace, _as_tracer, _tracing, _tree, _unflatten
from .numpy_api import _tracer, broadcast_to, implements, moveaxis, reshape, stack, transpose

__all__ = ["map_rows", "vectorized"]


def _body(fn, xs):
    """``fn`` traced once on one row of each of ``xs``: ``(graph, lifted,
    structure)`` -- the body graph (its inputs the rows, then what it read of
    the enclosing trace: ``lifted``, tracers there) and its result's pytree
    structure."""
    body = BodyTrace(_tracing(), len(xs))
    with body:
        rows = [body.input(k, x.shape[1:], x.dtype) for k, x in enumerate(xs)]
        leaves, structure = _tree(fn(*rows))
        if not leaves:
            raise TypeError("the mapped function returned no array")
        outs = [_as_tracer(y, body, "the mapped function's result") for y in leaves]
    inputs = [t.node for t in rows] + [body._lifted[t.node.id] for t in body.lifted]
    return Graph(body.nodes, inputs, [t.node for t in outs]), list(body.lifted), structure


def _batched(graph, lifted, xs, length):
    """The body ``graph`` emitted into the enclosing trace on stand-ins for
    one row of each of ``xs``, then batched over the ``length`` rows: the
    batched results (a result that reads no row: broadcast), or None where an
    op of the body has no batch rule (the trace as it was)."""
    trace = _tracing()
    mark, memo = trace.mark(), trace._seen
    trace._seen = {}  # (no node of the body merged with one from before: all batched)
    try:
        rows = [x[0] for x in xs]
        start = len(trace.nodes)
        outs = replay(graph, trace, rows + lifted)
        seeds = {r.node.id: x for r, x in zip(rows, xs, strict=True)}
        batched = TRANSFORMS["vmap"](trace, trace.nodes[start:], seeds, length)
    except NotImplementedError:  # (an op without a batch rule: one call per row)
        trace._seen = memo
        trace.rollback(mark)
        return None
    trace._seen = memo
    ys = []
    for o in outs:
        y = batched.get(o.node.id)
        ys.append(broadcast_to(o, (length, *o.shape)) if y is None else y)
    return ys


def _unrolled(fn, xs, length):
    """``fn`` called on each row (its decisions recorded per row), stacked."""
    results = [_tree(fn(*(x[i] for x in xs))) for i in range(length)]
    structure = results[0][1]
    if any(s != structure for _, s in results):
        raise TypeError("the mapped function returned results of different structures")
    leaves = [stack([_tracer(r[0][j]) for r in results]) for j in range(len(results[0][0]))]
    return leaves, structure


def _scalar_kernel(fn, xs):
    """``fn`` of scalars as one elementwise primitive over ``xs`` (1-D), by
    :func:`~.scalar_functions.elementwise` (numba on dual numbers: branches
    on values, ``math``), or None where numba cannot compile it (the trace as
    it was)."""
    kernel = _KERNELS.get(fn)
    trace = _tracing()
    mark = trace.mark()
    try:
        if kernel is None:
            kernel = _KERNELS[fn] = elementwise(fn)
        y = kernel(*xs)
    except Exception:  # noqa: BLE001 -- anything numba cannot compile: one trace per row
        trace.rollback(mark)
        return None
    return [y]


#: pyfunc -> its elementwise primitive (made once: its kernels are compiled once)
_KERNELS = weakref.WeakKeyDictionary()


def map_rows(fn, xs, length, scalar=None):
    """``fn(*rows)`` for each of the ``length`` rows of the tracers ``xs``
    (leading axis ``length``), each result leaf stacked along a new leading
    axis: a pytree like ``fn``'s result.  Traced once and batched, or (a
    decision on values, an op without a batch rule) once per row.
    ``scalar``: a plain Python function of the rows' elements (``fn`` itself,
    rows of scalars): where its trace needs values, first tried as one
    elementwise kernel (:func:`_scalar_kernel`)."""
    if length == 0:
        raise ValueError("cannot map a function over zero elements while tracing (numpy "
                         "calls it on none and cannot tell its result's shape)")
    try:
        graph, lifted, structure = _body(fn, xs)
    except TracingError:  # (a decision on a value: one trace per row, with its value)
        leaves = None if scalar is None else _scalar_kernel(scalar, xs)
        if leaves is not None:
            return leaves[0], leaves
        leaves, structure = _unrolled(fn, xs, length)
    else:
        leaves = _batched(graph, lifted, xs, length)
        if leaves is None:
            leaves, structure = _unrolled(fn, xs, length)
    return _unflatten(structure, iter(leaves)), leaves


# --------------------------------------------------------------------------
# np.apply_along_axis
# --------------------------------------------------------------------------
@implements(np.apply_along_axis)
def apply_along_axis(func1d, axis, arr, *args, **kwargs):
    """``np.apply_along_axis``: ``func1d(row, *args, **kwargs)`` for each 1-D
    slice of ``arr`` along ``axis`` (traced once and batched where it can be,
    see the module), its result's axes in place of ``axis``."""
    a = _tracer(arr)
    nd = a.ndim
    if not isinstance(axis, (int, np.integer)) or not -nd <= axis < nd:
        raise np.exceptions.AxisError(f"axis {axis} is out of bounds for array of "
                                      f"dimension {nd}")
    axis = int(axis) % nd
    moved = moveaxis(a, axis, -1)
    lead = moved.shape[:-1]
    count = int(np.prod(lead, dtype=np.int64))
    rows = reshape(moved, (count, a.shape[axis]))
    _, leaves = map_rows(lambda row: func1d(row, *args, **kwargs), [rows], count)
    if len(leaves) != 1:
        raise TypeError("apply_along_axis: func1d must return one array (numpy stacks "
                        "one result per slice)")
    y = leaves[0]
    core = y.shape[1:]
    y = reshape(y, (*lead, *core))
    k = len(core)  # numpy: arr.shape[:axis] + the result's shape + arr.shape[axis + 1:]
    order = list(range(axis)) + list(range(nd - 1, nd - 1 + k)) + list(range(axis, nd - 1))
    return transpose(y, order)


# --------------------------------------------------------------------------
# np.vectorize
# --------------------------------------------------------------------------
_ARG = r"\((?:\w+(?:,\w+)*)?\)"
_SIDE = re.compile(rf"{_ARG}(?:,{_ARG})*")
_DIMS = re.compile(r"\(([^()]*)\)")


def _signature(signature):
    """numpy's gufunc signature ``"(m,n),(n)->(m)"`` as ``(inputs, outputs)``:
    a tuple of core dimension names per argument."""
    sides = str(signature).replace(" ", "").split("->")
    if len(sides) != 2 or not all(_SIDE.fullmatch(s) for s in sides):
        raise ValueError(f"not a valid gufunc signature: {signature!r}")
    return tuple(tuple(tuple(d for d in g.split(",") if d) for g in _DIMS.findall(s))
                 for s in sides)


def _core_sizes(args, cores, signature):
    sizes = {}
    for a, dims in zip(args, cores, strict=True):
        if a.ndim < len(dims):
            raise ValueError(f"input with {a.ndim} dimensions has fewer than the "
                             f"{len(dims)} core dimensions of signature {signature!r}")
        for d, s in zip(dims, a.shape[a.ndim - len(dims):], strict=True):
            if sizes.setdefault(d, s) != s:
                raise ValueError(f"inconsistent size for core dimension {d!r}: {s} vs "
                                 f"{sizes[d]}")
    return sizes


def vectorized(vec, args, kwargs):
    """``vec(*args, **kwargs)`` for an ``np.vectorize`` object ``vec`` called
    with traced arguments: its ``pyfunc`` mapped over the broadcast elements
    (or, with a ``signature``, the broadcast loop dimensions' cores), the
    arguments ``excluded`` names passed as they are; each output cast to its
    ``otypes`` entry when given."""
    excluded = vec.excluded or set()
    names = [k for k in kwargs if k not in excluded]
    pos = [i for i in range(len(args)) if i not in excluded]
    mapped = [_tracer(args[i]) for i in pos] + [_tracer(kwargs[k]) for k in names]
    fixed = dict(kwargs)

    def call(*values):
        full = list(args)
        for i, v in zip(pos, values, strict=False):
            full[i] = v
        kw = dict(fixed)
        kw.update(zip(names, values[len(pos):], strict=True))
        return vec.pyfunc(*full, **kw)

    if vec.signature is None:
        cores, out_cores = [()] * len(mapped), None
    else:
        cores, out_cores = _signature(vec.signature)
        if len(cores) != len(mapped):
            raise TypeError(f"wrong number of positional arguments: expected {len(cores)}, "
                            f"got {len(mapped)}")
        _core_sizes(mapped, cores, vec.signature)
    loops = [a.shape[:a.ndim - len(c)] for a, c in zip(mapped, cores, strict=True)]
    shape = np.broadcast_shapes(*loops)
    count = int(np.prod(shape, dtype=np.int64))
    xs = [reshape(broadcast_to(a, shape + a.shape[a.ndim - len(c):]),
                  (count, *a.shape[a.ndim - len(c):]))
          for a, c in zip(mapped, cores, strict=True)]
    if not xs:
        raise TypeError("np.vectorize: every argument is excluded")
    plain = isinstance(vec.pyfunc, types.FunctionType) and vec.signature is None and \
        not kwargs and not excluded
    result, leaves = map_rows(call, xs, count, vec.pyfunc if plain else None)
    single = not isinstance(result, tuple)
    if out_cores is not None and len(out_cores) != len(leaves):
        raise ValueError(f"wrong number of outputs from pyfunc: expected {len(out_cores)}, "
                         f"got {len(leaves)}")
    otypes = vec.otypes
    outs = []
    for j, y in enumerate(leaves):
        y = reshape(y, shape + y.shape[1:])
        if otypes:
            y = y.astype(np.dtype(otypes[j]))
        outs.append(y)
    return outs[0] if single and len(outs) == 1 else tuple(outs)


def _retried(numpy_call, ours, args, kwargs):
    """Inside a trace, a call with no traced argument: numpy's own
    ``numpy_call``, unless the function it maps reads a traced value of its
    own (a parameter it closes over), whose result numpy cannot write into
    its array (:class:`~hybridad.errors.ConversionError`): then, with what the
    attempt traced rolled back, ``ours``."""
    trace = _tracing()
    mark = trace.mark()
    try:
        return numpy_call(*args, **kwargs)
    except ConversionError:
        trace.rollback(mark)
        return ours(*args, **kwargs)


_NUMPY_CALL = np.vectorize.__call__
_NO_VALUE = getattr(np, "_NoValue", object())


def _call(self, *args, **kwargs):
    if self.pyfunc is _NO_VALUE or _tracing() is None:
        return _NUMPY_CALL(self, *args, **kwargs)
    if any(isinstance(v, Tracer) for v in (*args, *kwargs.values())):
        return vectorized(self, args, kwargs)
    return _retried(functools.partial(_NUMPY_CALL, self),
                    lambda *a, **k: vectorized(self, a, k), args, kwargs)


_NUMPY_APPLY = np.apply_along_axis


@functools.wraps(_NUMPY_APPLY)
def _apply(func1d, axis, arr, *args, **kwargs):
    if _tracing() is None or isinstance(arr, Tracer):  # (a traced arr: numpy dispatches)
        return _NUMPY_APPLY(func1d, axis, arr, *args, **kwargs)
    return _retried(_NUMPY_APPLY, apply_along_axis, (func1d, axis, arr, *args), kwargs)


for _wrapper, _original in ((_call, _NUMPY_CALL), (_apply, _NUMPY_APPLY)):
    _wrapper.__hybridad_original__ = _original
_call.__doc__ = _NUMPY_CALL.__doc__
np.vectorize.__call__ = _call
np.apply_along_axis = _apply
