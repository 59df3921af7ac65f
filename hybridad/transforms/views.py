"""Views read through: the algebraic simplification of data movement.

Transforms write data movement generically, one rule at a time, and chains
of it arise that move values back where they were.  The batching rule of a
loop packs its stacked outputs batch-first (a transpose, a reshape -- a copy,
for a transposed operand -- and a concatenation of the parts) and the batched
rules of its readers cut the parts out again and transpose them back into
the xs of the next loop: a dense Hessian through a loop copied its tangent
carries three times.  :func:`simplify_views` rewrites, in one sweep over the
graph in order (as XLA's algebraic simplifier does):

* ``x[a][b]`` -> ``x[c]`` for slices of step 1 (``c`` composes ``a`` and ``b``);
* ``concatenate(x0, x1, ..., axis)[..., start:stop]`` -> ``x_k`` where the
  slice is exactly operand ``k``'s (every other axis whole);
* ``reshape(reshape(x))`` -> ``reshape(x)``, and a reshape or transpose to
  what its operand already is -> the operand;
* ``reshape(transpose(reshape(x)))`` where the reshapes only insert or drop
  axes of length 1 -> ``transpose(x)`` (a strided view, not a copy);
* ``transpose(transpose(x, a), b)`` -> ``transpose(x, a[b])``.

Each rewrite reads the same elements: results are bitwise the same.  Nothing
is rewritten whose storage an in-place op writes.  The copies and
concatenations no one reads any more are left to dead-code elimination.
"""

from __future__ import annotations

from ..ir.registry import REGISTRY, InPlaceWrites, storage_root

__all__ = ["simplify_views"]


def simplify_views(nodes, outputs):
    """``nodes`` with chains of data movement read through (see the module
    docstring); rewritten nodes are changed in place, replaced ones left to
    dead-code elimination (an output is kept: rewritten, not replaced)."""
    written = InPlaceWrites(nodes).roots
    replace, out_ids = {}, {o.id for o in outputs}
    roots = {}  # node id -> storage root id, kept as the sweep rewrites operands

    def root(node):
        r = roots.get(node.id)
        return r if r is not None else storage_root(node).id

    for n in nodes:
        if any(a.id in replace for a in n.args):
            n.args = tuple(replace.get(a.id, a) for a in n.args)
        viewing = n.op in REGISTRY and REGISTRY[n.op].kind in ("view", "inplace")
        if n.op in _RULES and root(n.args[0]) not in written:
            new = _RULES[n.op](n)  # (may read n through an earlier view: same storage)
            if new is not None and new.shape == n.shape and new.dtype == n.dtype and \
                    n.id not in out_ids and root(new) not in written:
                replace[n.id] = new
        roots[n.id] = root(n.args[0]) if viewing else n.id
    return nodes


def _plain(index, shape):
    """``[(start, stop)]`` per axis of a basic index of slices of step 1 (the
    axes it does not name whole), else None."""
    if len(index) > len(shape) or any(type(k) is not slice for k in index):
        return None
    spans = []
    for k, n in zip(index, shape, strict=False):
        start, stop, step = k.indices(n)
        if step != 1:
            return None
        spans.append((start, max(stop, start)))
    return spans + [(0, n) for n in shape[len(index):]]


def _getitem(n):
    (x,) = n.args
    outer = _plain(n.attrs["index"], x.shape)
    if outer is None:
        return None
    if x.op == "getitem":  # x[a][b]: one slice of x's operand, in place
        inner = _plain(x.attrs["index"], x.args[0].shape)
        if inner is None or len(inner) != len(outer):
            return None
        outer = [(a + c, a + d) for (a, _), (c, d) in zip(inner, outer, strict=True)]
        n.args = x.args
        n.attrs = dict(n.attrs, index=tuple(slice(s, e) for s, e in outer))
        x = n.args[0]
    if x.op == "concatenate":
        axis = x.attrs["axis"] % len(x.shape)
        if not _whole([o for d, o in enumerate(outer) if d != axis],
                      [m for d, m in enumerate(x.shape) if d != axis]):
            return None
        start = 0
        for part in x.args:
            stop = start + part.shape[axis]
            if (start, stop) == outer[axis]:
                return part
            start = stop
        return None
    return x if _whole(outer, x.shape) else None


def _whole(spans, shape):
    return all((s, e) == (0, m) for (s, e), m in zip(spans, shape, strict=True))


def _reshape(n):
    (x,) = n.args
    if x.op == "reshape":  # reshape(reshape(y)): one reshape of y
        n.args = x.args
        x = n.args[0]
    if tuple(x.shape) == tuple(n.shape):
        return x
    if x.op == "transpose" and x.args[0].op == "reshape":
        _unit_transpose(n, x)
    return None


def _unit_transpose(n, t):
    """``reshape(transpose(reshape(y)))`` where both reshapes only insert or
    drop axes of length 1 (what batching rules make of a stack of vectors:
    ``(K, n)`` made ``(K, n, 1)``, transposed, made ``(n, K)``; the Hessians of
    LAPACK-based functions have them) becomes ``transpose(y)`` -- a
    strided view, where the reshape of a transposed operand was a copy.  ``n``
    is rewritten in place."""
    r = t.args[0]
    y = r.args[0]
    if 1 in y.shape or 1 in n.shape or \
            tuple(d for d in r.shape if d != 1) != tuple(y.shape) or \
            tuple(d for d in t.shape if d != 1) != tuple(n.shape):
        return
    of_r = {}  # r's axes of length > 1 -> y's axes
    for axis, d in enumerate(r.shape):
        if d != 1:
            of_r[axis] = len(of_r)
    axes = tuple(of_r[a] for i, a in enumerate(t.attrs["axes"]) if t.shape[i] != 1)
    n.op, n.args, n.attrs = "transpose", (y,), {"axes": axes}


def _transpose(n):
    (x,) = n.args
    axes = tuple(n.attrs["axes"])
    if x.op == "transpose":  # transpose(transpose(y, a), b) = transpose(y, a[b])
        inner = tuple(x.attrs["axes"])
        axes = tuple(inner[b] for b in axes)
        n.args = x.args
        n.attrs = dict(n.attrs, axes=axes)
        x = n.args[0]
    return x if axes == tuple(range(len(axes))) else None


_RULES = {"getitem": _getitem, "reshape": _reshape, "transpose": _transpose}
