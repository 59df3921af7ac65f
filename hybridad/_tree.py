"""Minimal pytrees: tuples (namedtuples too), lists, dicts and dataclasses of arrays.

``flatten(obj)`` returns the array leaves and a hashable *treedef* that also
records every non-array leaf by value (ints, floats, strings, None ... are
*static*: part of a plan's cache key, baked into the trace).  ``unflatten``
rebuilds the structure from a treedef and new leaves.
"""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np

from ._xp import is_array
from .core.supported import check_dtype, refuse_subclass
from .core.tracer import Tracer

__all__ = ["LEAF", "MISMATCH", "dataclass_fields", "flatten", "flatten_as", "is_namedtuple",
           "make_dataclass", "namedtuple_class", "reordered", "unflatten"]

LEAF = "*"


def flatten(obj):
    """Return ``(leaves, treedef)``; leaves are the ndarrays in ``obj`` in order."""
    leaves = []
    treedef = _flatten(obj, leaves)
    return leaves, treedef


def _no_tracer(obj):
    if type(obj) is Tracer:
        raise NotImplementedError(
            "a traced array was passed to hybridad as an argument: differentiating inside a "
            "function hybridad is tracing (nested differentiation) is not supported")


def _flatten(obj, leaves):
    _no_tracer(obj)
    if is_array(obj):  # numpy, or cupy on the GPU backend
        leaves.append(obj)
        return LEAF
    if type(obj) in (tuple, list):
        return (type(obj).__name__, tuple(_flatten(o, leaves) for o in obj))
    if is_namedtuple(obj):  # (its class, then its fields in order)
        return ("namedtuple", type(obj), tuple(_flatten(o, leaves) for o in obj))
    if type(obj) is dict:
        keys = tuple(obj)
        return ("dict", keys, tuple(_flatten(obj[k], leaves) for k in keys))
    names = dataclass_fields(obj)
    if names is not None:  # (its class, then its fields in order)
        return ("dataclass", type(obj), names,
                tuple(_flatten(getattr(obj, k), leaves) for k in names))
    try:
        hash(obj)
    except TypeError:
        raise TypeError(
            f"an argument of type {type(obj).__name__} is neither an array, a tuple/list/dict "
            "of arrays, nor hashable; pass it through a closure instead") from None
    return ("static", type(obj), obj)


def unflatten(treedef, leaves):
    """Inverse of :func:`flatten` (``leaves`` may be any objects, e.g. tracers)."""
    it = iter(leaves)
    out = _unflatten(treedef, it)
    if next(it, None) is not None:
        raise ValueError("too many leaves for treedef")
    return out


def _unflatten(td, it):
    if td == LEAF:
        return next(it)
    kind = td[0]
    if kind == "static":
        return td[2]
    if kind == "dict":
        return {k: _unflatten(sub, it) for k, sub in zip(td[1], td[2], strict=True)}
    items = [_unflatten(sub, it) for sub in td[-1]]
    if kind == "dataclass":
        return make_dataclass(td[1], td[2], items)
    if kind == "namedtuple":
        return td[1](*items)
    return tuple(items) if kind == "tuple" else items


#: what :func:`reordered` returns for a structure that differs otherwise
MISMATCH = object()


def reordered(obj, treedef):
    """``obj`` with the keys of each of its dicts in ``treedef``'s order, where
    the two differ in that order alone (a dict is one structure whatever the
    order of its keys, as in JAX: ``{k: p[k] - g[k] for k in sorted(p)}``);
    :data:`MISMATCH` where they differ otherwise.  Leaves are not looked at."""
    if treedef == LEAF or treedef[0] == "static":
        return obj
    kind, subs = treedef[0], treedef[-1]
    if kind == "dict":
        if type(obj) is not dict or len(obj) != len(subs) or \
                any(k not in obj for k in treedef[1]):
            return MISMATCH
        items = [reordered(obj[k], sub) for k, sub in zip(treedef[1], subs, strict=True)]
        if any(v is MISMATCH for v in items):
            return MISMATCH
        return dict(zip(treedef[1], items, strict=True))
    if kind == "dataclass":
        if type(obj) is not treedef[1]:
            return MISMATCH
        items = [reordered(getattr(obj, k), sub) for k, sub in zip(treedef[2], subs,
                                                                    strict=True)]
        return MISMATCH if any(v is MISMATCH for v in items) else \
            make_dataclass(type(obj), treedef[2], items)
    if kind == "namedtuple" and type(obj) is not treedef[1] or \
            kind != "namedtuple" and type(obj).__name__ != kind or len(obj) != len(subs):
        return MISMATCH
    items = [reordered(o, sub) for o, sub in zip(obj, subs, strict=True)]
    if any(v is MISMATCH for v in items):
        return MISMATCH
    return type(obj)(*items) if kind == "namedtuple" else type(obj)(items)


def flatten_as(obj, treedef):
    """:func:`flatten` of ``obj``, its dicts' keys first put in ``treedef``'s
    order where that is all that differs (:func:`reordered`)."""
    leaves, td = flatten(obj)
    if td != treedef:
        again = reordered(obj, treedef)
        if again is not MISMATCH:
            leaves, td = flatten(again)
    return leaves, td


def dataclass_fields(obj):
    """The field names of dataclass instance ``obj`` (its class's fields, in
    order), or None for anything else."""
    if isinstance(obj, type) or not dataclasses.is_dataclass(obj):
        return None
    return tuple(f.name for f in dataclasses.fields(obj))


def make_dataclass(cls, names, values):
    """An instance of dataclass ``cls`` with fields ``names`` set to
    ``values``: made by its ``__init__`` (its ``__post_init__`` runs, as
    ``dataclasses.replace`` runs it) where every field is an init field;
    fields that are not are set afterwards, frozen or not."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    init = {k: v for k, v in zip(names, values, strict=True) if fields[k].init}
    obj = cls(**init)
    for k, v in zip(names, values, strict=True):
        if not fields[k].init:
            object.__setattr__(obj, k, v)
    return obj


def is_namedtuple(obj):
    """Whether ``obj`` is a namedtuple (a tuple subclass with ``_fields``)."""
    return namedtuple_class(type(obj))


def namedtuple_class(cls):
    """Whether class ``cls`` makes namedtuples (a tuple subclass with ``_fields``)."""
    return issubclass(cls, tuple) and cls is not tuple and \
        isinstance(getattr(cls, "_fields", None), tuple)


def leaf_paths(treedef):
    """Each leaf's place in ``treedef``, as Python indexes it: ``"['W']"``,
    ``"[0][1]"``, ``""`` for an array argument itself (in :func:`flatten`'s order)."""
    if treedef == LEAF:
        return [""]
    if treedef[0] == "static":
        return []
    if treedef[0] == "dataclass":
        return [f".{k}{rest}" for k, sub in zip(treedef[2], treedef[3], strict=True)
                for rest in leaf_paths(sub)]
    keys = treedef[1] if treedef[0] == "dict" else range(len(treedef[-1]))
    return [f"[{k!r}]{rest}" for k, sub in zip(keys, treedef[-1], strict=True)
            for rest in leaf_paths(sub)]


def count_leaves(treedef):
    if treedef == LEAF:
        return 1
    if treedef[0] == "static":
        return 0
    return sum(count_leaves(t) for t in treedef[-1])


def _numbers_only(obj):
    """Whether ``obj`` is a number, or a (nested) list or tuple of numbers only."""
    if type(obj) in (list, tuple):
        return all(_numbers_only(o) for o in obj)
    return issubclass(type(obj), (numbers.Number, np.generic))  # type(): not a tracer's class


def number_array(obj):
    """A list or tuple of numbers only (nested, rectangular) as numpy converts
    it (``np.asarray``); None for anything else (arrays inside, ragged)."""
    if type(obj) not in (list, tuple) or not _numbers_only(obj):
        return None
    try:
        return np.asarray(obj)
    except ValueError:  # ragged
        return None


def as_array_tree(obj, name):
    """A differentiated argument as float arrays: numbers and (nested,
    rectangular) lists or tuples of numbers only become one array, as numpy
    converts them (integers and booleans to float64); lists, tuples and dicts
    holding arrays (or ragged ones) are containers whose items follow the same
    rule.

    Raises ``TypeError`` naming ``name`` for anything else, and for dtypes
    hybridad does not differentiate (only float32 and float64).
    """
    _no_tracer(obj)
    if is_array(obj):
        arr = obj
    elif type(obj) in (tuple, list):
        arr = number_array(obj)
        if arr is None:
            return type(obj)(as_array_tree(o, f"{name}[{i}]") for i, o in enumerate(obj))
    elif type(obj) is dict:
        return {k: as_array_tree(v, f"{name}[{k!r}]") for k, v in obj.items()}
    elif is_namedtuple(obj):
        return type(obj)(*(as_array_tree(o, f"{name}.{field}")
                           for field, o in zip(type(obj)._fields, obj, strict=True)))
    elif dataclass_fields(obj) is not None:
        names = dataclass_fields(obj)
        return make_dataclass(type(obj), names, [as_array_tree(getattr(obj, k), f"{name}.{k}")
                                                 for k in names])
    elif _numbers_only(obj):
        arr = np.asarray(obj)
    else:
        raise TypeError(f"argument {name} must be a floating-point array (or a tuple, "
                        f"namedtuple, list, dict or dataclass of them); got "
                        f"{type(obj).__name__}")
    if arr.dtype.kind in "biu" and not is_array(obj):
        arr = arr.astype(np.float64)
    if arr.dtype not in (np.float32, np.float64):
        hint = "convert with .astype(float)" if arr.dtype.kind in "biuf" else \
            "complex arrays are not supported yet" if arr.dtype.kind == "c" else \
            "only numbers can be differentiated"
        error = NotImplementedError if arr.dtype.kind == "c" else TypeError
        raise error(f"argument {name} must have a floating-point dtype (float32 or float64) "
                    f"to be differentiated; got {arr.dtype} ({hint})")
    return arr


def plain_leaf(leaf, name):
    """An array argument as hybridad traces it: an ndarray (a view of a memmap or
    another plain-data subclass, :func:`hybridad.core.supported.plain_subclass`).  Other
    ndarray subclasses and dtypes hybridad does not trace raise a TypeError
    naming the argument."""
    refuse_subclass(leaf, f"argument {name}")
    if issubclass(type(leaf), np.ndarray) and type(leaf) is not np.ndarray:
        leaf = leaf.view(np.ndarray)  # a memmap or another plain-data subclass
    check_dtype(leaf.dtype, f"argument {name}")
    return leaf
