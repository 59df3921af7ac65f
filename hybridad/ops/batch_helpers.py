"""Helpers the ops' batch rules share (how an op applies to a chunk of K
tangents or cotangents stacked on a leading axis; :mod:`hybridad.transforms.batching`
runs the rules)."""

from __future__ import annotations

import numpy as np

from ..core.trace import bind
from ..ir.registry import REGISTRY

__all__ = ["batched_positions", "contiguous", "expand", "lift"]


def lift(t, rank):
    """A batched ``t`` (shape ``(K, *s)``) reshaped to ``(K, 1, ..., 1, *s)`` with
    ``rank`` axes after the batch axis, so that it broadcasts against unbatched
    operands of up to ``rank`` axes (numpy aligns trailing axes)."""
    missing = rank - (t.ndim - 1)
    if missing <= 0:
        return t
    return np.reshape(t, t.shape[:1] + (1,) * missing + t.shape[1:])


def expand(x, k):
    """An unbatched ``x`` as a batched value: a read-only broadcast view ``(k, *x.shape)``."""
    return np.broadcast_to(x, (k, *x.shape))


def contiguous(t):
    """``t`` itself when it is a buffer of its own, else a copy: ops that read
    flat positions (gather) need C-contiguous storage."""
    node = t.node
    while node.op in REGISTRY and REGISTRY[node.op].kind == "inplace":
        node = node.args[0]
    if node.op in REGISTRY and REGISTRY[node.op].kind != "view":
        return t
    if node.op == "input" or node.is_const and node.attrs["value"].flags.c_contiguous:
        return t
    return bind("copy", t)


def batched_positions(flat, k, size, own=False):
    """Flat positions ``flat`` into one array of ``size`` elements, repeated for
    ``k`` stacked arrays: ``(k, *flat.shape)`` positions into the stack.
    ``own``: ``flat`` holds ``k`` rows of positions, row ``b`` into array
    ``b`` of the stack (``flat.shape`` then)."""
    offsets = (np.arange(k, dtype=np.intp) * size).reshape((k,) + (1,) * (flat.ndim - own))
    if flat.node.is_const:
        return offsets + flat.node.attrs["value"]
    return flat + offsets
