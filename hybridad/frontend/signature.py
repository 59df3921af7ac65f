"""The graph a trace gave, as a comparable value: is a new trace the same?

:func:`signature` summarizes a traced forward graph (ops, structure, shapes,
dtypes, attributes, constants); a plan whose guards failed re-traces and
keeps running when the signature came out the same.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..ops.loop import LoopBody
from .guard_walk import _SCALARS

__all__ = ["attr_signature", "attrs_signature", "signature"]


def signature(nodes, outputs, captured):
    """A comparable summary of a traced forward graph: ops, structure, shapes,
    dtypes, attributes and constants -- literal constants and arrays ``f``
    made while tracing by value, arrays captured from its state (``captured``:
    their ids) by identity.  Two traces with equal signatures give the same
    plan."""
    # (operands and outputs by node id: a trace numbers its nodes in the order
    # it makes them, so two traces of one graph number them alike)
    out = []
    attrs_seen = {}  # id(attrs) -> signature: nodes a call replayed share their attrs dict
    for n in nodes:
        if n.op == "const":
            v = n.attrs["value"]
            owner = _captured_owner(v, captured) if not n.is_literal else None
            if owner is not None:  # (one of f's arrays, or a view of one: a loop's rows)
                c = ("ref", id(owner), _offset(v, owner), v.shape, v.dtype.str, v.strides)
            else:
                c = ("val", v.dtype.str, v.shape, _value(v))
            out.append(("const", n.id, c))
            continue
        attrs = attrs_seen.get(id(n.attrs))
        if attrs is None:  # (the nodes hold their attrs: ids are not reused meanwhile)
            attrs = attrs_seen[id(n.attrs)] = attrs_signature(n.attrs)
        out.append((n.op, n.id, tuple([a.id for a in n.args]), n.shape, n.dtype, attrs))
    out.append(("outputs", tuple(o.id for o in outputs)))
    return tuple(out)


def _captured_owner(v, captured):
    """``v`` or the array it views (through its bases) when that is one of
    the arrays the guards found in ``f``'s state (``captured``: ids), else
    None."""
    while v is not None:
        if id(v) in captured and isinstance(v, np.ndarray):
            return v
        v = getattr(v, "base", None)  # (as_strided's views hold their array one level down)
    return None


def _offset(v, owner):
    """Where ``v``'s first element is in ``owner``'s memory (bytes)."""
    return v.__array_interface__["data"][0] - owner.__array_interface__["data"][0]


#: constants of at most this many bytes are signed by their bytes; larger ones
#: by a digest of them (a plan keeps its signature: not a copy of its data)
BYTES_BY_VALUE = 4096


def _value(v):
    """A constant's value as a comparable value."""
    if v.dtype.hasobject:
        return id(v)
    if v.nbytes <= BYTES_BY_VALUE:
        return v.tobytes()
    return ("blake2b", hashlib.blake2b(np.ascontiguousarray(v), digest_size=32).digest())


def attrs_signature(attrs):
    """A node's attributes (a dict) as a comparable value: ``(key, value's
    :func:`attr_signature`)`` pairs in key order."""
    if len(attrs) == 1:  # (a row's index: no sort)
        (k, v), = attrs.items()
        return ((k, attr_signature(v)),)
    return tuple((k, attr_signature(v)) for k, v in sorted(attrs.items()))


def attr_signature(v):
    """An attribute value as a comparable value: scalars, dtypes, slices and
    containers by value, arrays by their bytes, other objects by identity."""
    if type(v) is tuple and all(type(x) is int for x in v):  # (an index of ints: a row's,
        return ("tuple", *[("int", x) for x in v])  # 10^4 of them in a Python loop's trace)
    if isinstance(v, _SCALARS):
        return (type(v).__name__, v)
    if isinstance(v, np.generic):
        return (v.dtype.str, v.item())
    if isinstance(v, np.dtype):
        return ("dtype", v.str)
    if isinstance(v, slice):
        return ("slice", attr_signature(v.start), attr_signature(v.stop),
                attr_signature(v.step))
    if isinstance(v, (tuple, list)):
        return (type(v).__name__,) + tuple(attr_signature(x) for x in v)
    if isinstance(v, dict):
        return ("dict",) + tuple((k, attr_signature(x)) for k, x in sorted(v.items()))
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.shape, v.tobytes() if not v.dtype.hasobject else id(v))
    if isinstance(v, LoopBody):  # by its content: each trace of a loop makes its own
        return ("body", v.key)
    return ("object", id(v))  # compared by identity: a new one means a new plan
