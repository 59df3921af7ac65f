"""numpy's object semantics for traced values: scalars, copies, views and
in-place updates.

:func:`settle` gives a traced result what numpy would return (a new array, a
numpy scalar, or a view sharing its input's memory); :func:`link_view`
records which tracers share memory; :func:`assign` is numpy's in-place write
of a whole array (``y += 1``, ``y.sort()``), refused where numpy would write
into memory the trace does not follow (an argument of ``f``, a view of a
live array).  Installs :func:`assign` in :data:`hybridad.frontend.tracer.SURFACE`
for the in-place operators of :class:`~hybridad.frontend.tracer.Tracer`.
"""

from __future__ import annotations

import weakref

import numpy as np

from ..errors import TracingError, user_location
from ..ir.registry import REGISTRY
from .trace import as_node, bind
from .tracer import ARG, READONLY, SCALAR, SURFACE, Tracer

__all__ = ["assign", "link_view", "settle", "tracers_in"]


def _in_place_refused(t, what, instead):
    if t._flags & READONLY:
        raise ValueError("assignment destination is read-only")
    why = ("it is an argument of the traced function: numpy would write into the caller's "
           "array, and hybridad never modifies its arguments" if t._flags & ARG else
           "it shares memory with another array (a view: slice, reshape, transpose, ...); "
           "numpy would change that array too, which tracing does not follow")
    raise TracingError(f"{what} on a traced array at {user_location()}: {why}. Instead, "
                       f"{instead}.")


def _others_sharing(t):
    """The live tracers other than ``t`` that share its memory."""
    if t._shares is None:
        return []
    return [o for o in (r() for r in t._shares) if o is not None and o is not t]


def _is_view_node(node):
    op = REGISTRY.get(node.op)
    return op is not None and op.kind == "view"


def link_view(view, base):
    """Record that tracer ``view`` shares memory with tracer ``base`` (numpy
    returned a view), so an in-place write to either is refused while the
    other is alive."""
    group = base._shares
    if group is None:
        group = base._shares = [weakref.ref(base)]
    if view._shares is not None and view._shares is not group:  # merge two families
        for r in view._shares:
            o = r()
            if o is not None and o is not base:
                o._shares = group
                group.append(r)
    view._shares = group
    group.append(weakref.ref(view))


def assign(target, value, what, casting="same_kind", ufunc=None):
    """numpy's in-place write of the whole of ``target`` (``target += ...``,
    ``target.sort()``, ``target.fill(v)``): the tracer object takes ``value``
    (cast under ``casting``; its shape must be ``target``'s).  Refused where
    numpy's write would reach memory the trace does not follow."""
    if target._flags & (ARG | READONLY) or _others_sharing(target):
        _in_place_refused(target, what, "write `y = y + ...` (a new array), or take a "
                          "copy first (`y = y.copy()`)")
    if not isinstance(value, Tracer):
        value = Tracer(as_node(value, target._trace), target._trace)
    if value.shape != target.shape:
        raise ValueError(f"non-broadcastable output operand with shape {target.shape} doesn't "
                         f"match the broadcast shape {value.shape}")
    if value.dtype != target.dtype:
        if not np.can_cast(value.dtype, target.dtype, casting):
            src = f"ufunc '{ufunc.__name__}' output" if ufunc is not None else "array"
            raise TypeError(f"Cannot cast {src} from {value.dtype!r} to {target.dtype!r} "
                            f"with casting rule '{casting}'")
        value = bind("cast", value, dtype=target.dtype)
    target.node = value.node
    return target


def settle(result, inputs, kind):
    """Give a traced result numpy's object semantics.

    ``kind`` says what numpy returns: ``"new"`` (a new array; a 0-d one is a
    numpy scalar: ufuncs, reductions, most functions), ``"array"`` (a new
    array, 0-d included: np.copy, np.where, astype) or ``"view"`` (a view of
    its first input, or that input itself).  A result that is one of the
    ``inputs`` objects is replaced by a fresh tracer unless ``kind`` is
    ``"view"`` (a copy must not alias its source: ``y = x.copy(); y += 1``);
    a result that is a view of an input shares its memory family."""
    if isinstance(result, (tuple, list)):
        items = [settle(r, inputs, kind) for r in result]
        return type(result)(*items) if hasattr(result, "_fields") else type(result)(items)
    if not isinstance(result, Tracer):
        return result
    if any(result is t for t in inputs):
        if kind == "view":
            return result
        result = Tracer(result.node, result._trace)
    elif kind == "view" and _is_view_node(result.node):
        chain, node = set(), result.node
        while _is_view_node(node):
            chain.add(node.id)
            node = node.args[0]
        chain.add(node.id)
        for t in inputs:
            if t.node.id in chain and t.node.id != result.node.id:
                link_view(result, t)
        if result.node.op == "broadcast_to":
            result._flags |= READONLY
        return result
    if result.shape == () and kind == "new":
        result._flags |= SCALAR
    else:
        result._flags &= ~SCALAR
    return result


def tracers_in(args, kwargs=None):
    """The tracers among ``args`` (and ``kwargs`` values), looking into lists and tuples."""
    out = []
    stack = list(args) + (list(kwargs.values()) if kwargs else [])
    while stack:
        a = stack.pop()
        if isinstance(a, Tracer):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            stack.extend(a)
    return out


SURFACE.assign = assign
