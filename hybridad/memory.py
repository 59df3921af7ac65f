"""Stage 5: the memory plan -- where every node's value lives.

Storage kinds:

* ``input``   -- the caller's array, bound per call (copied into a staging
  buffer only when it is not C-contiguous);
* ``const``   -- the constant array itself (captured arrays by reference);
* ``view``    -- a view of its first operand (reshape, transpose, slicing,
  broadcast_to); a reshape that cannot be a view gets a buffer and a copy;
* ``alias``   -- the same storage as an operand (:attr:`MemoryPlan.alias_of`):
  an in-place op's first operand, or -- when the backend asks for reuse -- an
  elementwise region writing over an operand buffer of its shape and dtype
  that nothing reads afterwards (the region reads each element before it
  writes it: same index, same loop);
* ``buffer``  -- a slot in the workspace arena: one allocation per dtype,
  made once per plan, 64-byte aligned slots.

This first planner gives every buffer its own slot (no reuse); the arena is
the naive sum.  Everything is allocated when the plan is built, so calls
allocate nothing.
"""

from __future__ import annotations

import numpy as np

from .ops import REGISTRY

__all__ = ["MemoryPlan", "op_workspaces", "plan_memory"]

ALIGN = 64


class MemoryPlan:
    """Result of :func:`plan_memory`.

    Attributes
    ----------
    storage : dict
        node id -> ``"input" | "const" | "view" | "alias" | "buffer"``.
    slots : dict
        node id -> ``(dtype, offset_bytes, nbytes, shape)`` for ``buffer`` nodes.
    arena_bytes : dict
        dtype -> bytes of that dtype's arena.
    materialized : set
        ids of view nodes that get a buffer and a copy instead (a reshape whose
        operand's layout forbids a view, or what a backend asked for).
    """

    def __init__(self, storage, slots, arena_bytes, materialized, scratch=None, alias_of=None):
        self.scratch = scratch or {}  # node id -> (dtype, offset_bytes, count)
        self.alias_of = alias_of or {}  # alias node id -> the operand node it overwrites
        self.arenas = {}  # dtype -> the flat arena (typed view), set by allocate()
        self.storage = storage
        self.slots = slots
        self.arena_bytes = arena_bytes
        self.materialized = materialized

    @property
    def total_bytes(self):
        return sum(self.arena_bytes.values())

    def scratch_view(self, nid):
        """The allocated scratch slot of node ``nid`` (after :meth:`allocate`)."""
        dt, off, count = self.scratch[nid]
        return self.arenas[dt][off // dt.itemsize:off // dt.itemsize + count]

    def allocate(self):
        """Allocate the arenas; return node id -> ndarray view for buffer nodes."""
        arenas = {dt: np.zeros(max(n, 1), np.uint8) for dt, n in self.arena_bytes.items()}
        self.arenas = {dt: a[:a.size - a.size % dt.itemsize].view(dt) for dt, a in arenas.items()}
        return {nid: _slot_view(arenas[dt], off, shape, dt)
                for nid, (dt, off, nbytes, shape) in self.slots.items()}


def _slot_view(arena, offset, shape, dtype):
    count = int(np.prod(shape, dtype=np.int64))
    return arena[offset:offset + count * dtype.itemsize].view(dtype).reshape(shape)


def _layout_proto(node, protos):
    """An array with the node's strides (zero memory for C-contiguous storage)."""
    if node.id in protos:
        return protos[node.id]
    strides, step = [], node.dtype.itemsize
    for s in reversed(node.shape):
        strides.insert(0, step)
        step *= max(s, 1)
    return np.lib.stride_tricks.as_strided(np.zeros(1, node.dtype), node.shape, strides)


def op_workspaces(nodes):
    """node id -> (dtype, elements) of the working memory ops declare
    (:attr:`hybridad.ops.Op.workspace`), for :func:`plan_memory`'s ``scratch``."""
    out = {}
    for n in nodes:
        op = REGISTRY.get(n.op)
        if op is not None and op.workspace is not None:
            out[n.id] = (n.dtype, max(int(op.workspace(*n.args, **n.attrs)), 1))
    return out


def plan_memory(graph, materialize=(), scratch=None, reuse=False):
    """Assign storage to every node of ``graph`` (see module docstring).

    ``materialize``: ids of view nodes the backend wants copied into a buffer.
    ``scratch``: node id -> (dtype, element count) of working space the
    backend's code for that node needs (a slot of its own in the arena).
    ``reuse``: let elementwise regions write over a dying operand buffer.
    """
    storage, slots, arena, copies, protos, alias_of = {}, {}, {}, set(), {}, {}
    users = graph.users()
    outputs = {n.id for n in graph.outputs if n is not None}
    for node in graph.nodes:
        if node.op in ("input", "const"):
            storage[node.id] = node.op
            if node.op == "const":
                protos[node.id] = node.attrs["value"]
            continue
        kind = REGISTRY[node.op].kind
        if kind == "inplace":
            storage[node.id] = "alias"
            alias_of[node.id] = node.args[0]
            protos[node.id] = _layout_proto(node.args[0], protos)
            continue
        target = _reusable_operand(node, storage, users, outputs) if reuse else None
        if target is not None:
            storage[node.id] = "alias"
            alias_of[node.id] = target
            protos[node.id] = _layout_proto(target, protos)
            continue
        if kind == "view" and node.id in materialize:
            copies.add(node.id)
        elif kind == "view":
            base = _layout_proto(node.args[0], protos)
            try:
                if node.op == "reshape":
                    view = np.reshape(base, node.attrs["shape"], copy=False)
                else:
                    view = REGISTRY[node.op].view(base, **node.attrs)
                storage[node.id] = "view"
                protos[node.id] = view
                continue
            except ValueError:
                copies.add(node.id)  # falls through: gets a buffer, then a copy
        storage[node.id] = "buffer"
        dt = node.dtype
        off = arena.get(dt, 0)
        slots[node.id] = (dt, off, node.nbytes, node.shape)
        arena[dt] = off + -(-max(node.nbytes, 1) // ALIGN) * ALIGN
    scratch_slots = {}
    for nid, (dt, count) in (scratch or {}).items():
        dt = np.dtype(dt)
        off = arena.get(dt, 0)
        scratch_slots[nid] = (dt, off, count)
        arena[dt] = off + -(-max(count * dt.itemsize, 1) // ALIGN) * ALIGN
    return MemoryPlan(storage, slots, arena, copies, scratch_slots, alias_of)


def _reusable_operand(node, storage, users, outputs):
    """An operand buffer an elementwise ``region`` may overwrite, or None."""
    if node.op != "region" or node.attrs["mode"] != "value" or \
            node.attrs["body"].reduction is not None:
        return None
    for a in node.args:
        if a.shape == node.shape and a.dtype == node.dtype and a.id not in outputs and \
                storage.get(a.id) == "buffer" and all(u is node for u in users[a.id]):
            return a
    return None
