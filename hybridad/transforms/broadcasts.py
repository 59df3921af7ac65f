"""Transforms stage: an elementwise op of broadcast scalars, computed once.

The reverse sweep of a sum broadcasts its one-element cotangent over the
summed operand's shape (``broadcast_to(ct, x.shape)``).  An elementwise op
of such broadcasts and other one-element values -- the cotangent times a
literal -- is one value repeated over the whole shape; computed as written,
a compiled plan writes an array of that one value and reads it back (a
Rosenbrock Hessian's tangent program read ``100 * ones(n)`` from memory,
8 MB at n = 10^6, and its primal program wrote it).
:func:`sink_scalar_broadcasts` computes such an op on the one-element
operands and broadcasts its result instead (a view), so the broadcast sinks
through chains of them; the region that finally reads it beside arrays of
the whole shape reads it at index 0.  Each element is the same operation on
the same values: the bits do not change.
"""

from __future__ import annotations

from ..ir.graph import Node, named_by_region, new_node, redirect, users_of
from ..ir.registry import REGISTRY, InPlaceWrites

__all__ = ["sink_product_broadcasts", "sink_scalar_broadcasts"]


def _scalar_source(a):
    """The one-element value ``a`` is (``a`` itself, or what a broadcast of one
    element repeats), or None."""
    if a.op == "broadcast_to" and a.args[0].size == 1:
        return a.args[0]
    return a if a.size == 1 else None


def sink_scalar_broadcasts(nodes, outputs=()):
    """Each elementwise node (not a graph output, of more than one element)
    whose operands are one-element values, one of them broadcast, becomes
    ``broadcast_to(op(the one-element values), shape)``.

    Returns
    -------
    list of Node
        The new node list (the replaced nodes are left for dead code
        elimination).
    """
    external = {n.id for n in outputs if n is not None}
    external |= InPlaceWrites(nodes).roots  # (written in place later: a buffer, not a view)
    users = users_of(nodes)
    next_id = max((n.id for n in nodes), default=-1) + 1
    replaced, out = {}, []
    for n in nodes:
        redirect((n,), replaced)
        op = REGISTRY.get(n.op)
        sources = [_scalar_source(a) for a in n.args]
        if op is None or op.kind != "elementwise" or n.id in external or n.size <= 1 or \
                not n.args or None in sources or \
                not any(a.op == "broadcast_to" for a in n.args) or \
                named_by_region(n, users[n.id]):
            out.append(n)
            continue
        try:
            shape, dtype = op.abstract(*sources, **n.attrs)
        except Exception:  # noqa: BLE001 -- (an op that insists on its shapes: left as is)
            out.append(n)
            continue
        if dtype != n.dtype or len(shape) > len(n.shape):
            out.append(n)
            continue
        small = Node(next_id, n.op, sources, n.attrs, shape, dtype, n.phase)
        wide = Node(next_id + 1, "broadcast_to", (small,), {"shape": n.shape}, n.shape,
                    n.dtype, n.phase)
        next_id += 2
        out += [small, wide]
        replaced[n.id] = wide
    return out


def _repeats(x):
    """``(source, axes)``: ``x`` is ``broadcast_to(source)`` -- or the swap of
    its last two axes -- and repeats ``source``'s one element along ``axes``
    (of ``x``); None for anything else."""
    swapped = x.op == "transpose" and len(x.shape) >= 2 and \
        tuple(x.attrs["axes"]) == (*range(len(x.shape) - 2), len(x.shape) - 1, len(x.shape) - 2)
    c = x.args[0] if swapped else x
    if c.op != "broadcast_to":
        return None
    src, nd = c.args[0], len(c.shape)
    padded = (1,) * (nd - len(src.shape)) + src.shape
    axes = {i for i in range(nd) if padded[i] == 1 and c.shape[i] > 1}
    if swapped:
        axes = {(nd - 1 if i == nd - 2 else nd - 2 if i == nd - 1 else i) for i in axes}
    return (c, swapped, src), axes


def _one_along(made, axis, new):
    """The broadcast ``made[0]`` (as ``(broadcast, swapped, source)``) with
    one element along ``axis`` of the matmul operand it is (swapped back when
    the operand is its transpose)."""
    c, swapped, src = made
    nd = len(c.shape)
    at = (nd - 1 if axis == nd - 2 else nd - 2) if swapped else axis
    shape = tuple(1 if i == at else s for i, s in enumerate(c.shape))
    narrow = src if src.shape == shape else new("broadcast_to", (src,), {"shape": shape})
    if swapped:
        narrow = new("transpose", (narrow,), {"axes": (*range(nd - 2), nd - 1, nd - 2)})
    return narrow


def _product(A, B, mk, depth=0):
    """``A @ B`` computed on the one value an operand repeats along a matrix
    axis (:func:`sink_product_broadcasts`), again for what that leaves; None
    where neither repeats."""
    ra, rb = _repeats(A), _repeats(B)
    na, nb = len(A.shape), len(B.shape)
    if ra is not None and na - 2 in ra[1] and A.shape[-2] > 1:  # one row of A
        A = _one_along(ra[0], na - 2, mk)
    elif rb is not None and nb - 1 in rb[1] and B.shape[-1] > 1:  # one column of B
        B = _one_along(rb[0], nb - 1, mk)
    elif ra is not None and na - 1 in ra[1]:  # A repeats along the contracted axis
        A, B = _one_along(ra[0], na - 1, mk), mk("sum", (B,), {"axis": (nb - 2,),
                                                              "keepdims": True})
    elif rb is not None and nb - 2 in rb[1]:  # B repeats along the contracted axis
        A, B = mk("sum", (A,), {"axis": (na - 1,), "keepdims": True}), \
            _one_along(rb[0], nb - 2, mk)
    else:
        return None
    inner = _product(A, B, mk, depth + 1) if depth < 4 else None
    return inner if inner is not None else mk("matmul", (A, B), {})


def sink_product_broadcasts(nodes, outputs=()):
    """A batched or plain ``matmul`` with an operand that repeats one value
    along a matrix axis -- the tangent of ``x - mu[:, None, :]``, a mean
    broadcast over the points -- computed on the one value:

    * repeated along the left operand's rows (the right's columns): the
      product of one row (column), broadcast;
    * repeated along the contracted axis: the one column of the left operand
      times the right's sum over that axis (or the left's sum times the one
      row of the right).

    A mixture's HVP made two products of 25 x 1000 x 10 by 10 of such
    operands, the matrices' loops reading them strided (1.1 of its 3.1 ms).
    The repeated-row form computes each element as the same sum of the same
    products (a gemm of one row may order it otherwise: rounding); the
    contracted form sums first (rounding of the order of one sum).  A product
    the reverse sweep later adds into in place stays a buffer (a copy of the
    broadcast), not a view.

    Returns
    -------
    list of Node
        The new node list (the replaced products are left for dead code
        elimination).
    """
    external = {n.id for n in outputs if n is not None}
    written = InPlaceWrites(nodes).roots  # (accumulated into later: the sum iadds into it)
    next_id = [max((n.id for n in nodes), default=-1) + 1]
    replaced, out = {}, []

    def new(op, args, attrs, phase):
        node = new_node(next_id[0], op, args, attrs, phase)
        next_id[0] += 1
        out.append(node)
        return node

    for n in nodes:
        redirect((n,), replaced)
        if n.op != "matmul" or n.attrs.get("onehot_rows") or n.id in external or \
                n.dtype.kind != "f" or min(len(a.shape) for a in n.args) < 2:
            out.append(n)
            continue
        mk = lambda op, args, attrs: new(op, args, attrs, n.phase)  # noqa: E731
        product = _product(n.args[0], n.args[1], mk)
        if product is None:
            out.append(n)
            continue
        wide = product if product.shape == n.shape else \
            mk("broadcast_to", (product,), {"shape": n.shape})
        if wide is not product and n.id in written:  # (an adjoint the reverse sweep adds
            wide = mk("copy", (wide,), {})  # into in place: a buffer of its own, not a view)
        if wide.shape != n.shape or wide.dtype != n.dtype:
            raise AssertionError(f"sink_product_broadcasts: {n} became {wide}")
        wide.id = n.id  # (the product's id: a region reading it names it so in its body)
        replaced[n.id] = wide
    return out
