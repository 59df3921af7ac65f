"""Minimal pytrees: tuples, lists and dicts of arrays.

``flatten(obj)`` returns the array leaves and a hashable *treedef* that also
records every non-array leaf by value (ints, floats, strings, None ... are
*static*: part of a plan's cache key, baked into the trace).  ``unflatten``
rebuilds the structure from a treedef and new leaves.
"""

from __future__ import annotations

import numpy as np

from ._xp import is_array

__all__ = ["LEAF", "flatten", "unflatten"]

LEAF = "*"


def flatten(obj):
    """Return ``(leaves, treedef)``; leaves are the ndarrays in ``obj`` in order."""
    leaves = []
    treedef = _flatten(obj, leaves)
    return leaves, treedef


def _flatten(obj, leaves):
    if is_array(obj):  # numpy, or cupy on the GPU backend
        leaves.append(obj)
        return LEAF
    if type(obj) in (tuple, list):
        return (type(obj).__name__, tuple(_flatten(o, leaves) for o in obj))
    if type(obj) is dict:
        keys = tuple(obj)
        return ("dict", keys, tuple(_flatten(obj[k], leaves) for k in keys))
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
    items = [_unflatten(sub, it) for sub in td[1]]
    return tuple(items) if kind == "tuple" else items


def count_leaves(treedef):
    if treedef == LEAF:
        return 1
    if treedef[0] == "static":
        return 0
    return sum(count_leaves(t) for t in treedef[-1])


def leaf_structure(treedef):
    """The same structure with static leaves removed markers kept (for results)."""
    return treedef


def as_array_tree(obj, name):
    """Convert numeric leaves of a differentiated argument to float arrays.

    Raises ``TypeError`` naming ``name`` for non-numeric or non-float leaves.
    """
    if is_array(obj):
        arr = obj
    elif type(obj) in (tuple, list) and obj and all(
            is_array(o) or isinstance(o, (tuple, list, dict)) for o in obj):
        return type(obj)(as_array_tree(o, f"{name}[{i}]") for i, o in enumerate(obj))
    elif type(obj) is dict:
        return {k: as_array_tree(v, f"{name}[{k!r}]") for k, v in obj.items()}
    else:
        try:
            arr = np.asarray(obj)
        except Exception:  # noqa: BLE001 - any conversion failure is a bad argument
            arr = None
        if arr is None or arr.dtype.kind not in "biuf":
            raise TypeError(f"argument {name} must be a floating-point array (or a tuple, list "
                            f"or dict of them); got {type(obj).__name__}")
        if arr.dtype.kind != "f":
            arr = arr.astype(np.float64)
    if arr.dtype.kind != "f":
        raise TypeError(f"argument {name} must have a floating-point dtype to be "
                        f"differentiated; got {arr.dtype} (convert with .astype(float))")
    return arr
