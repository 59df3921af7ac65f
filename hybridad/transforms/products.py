"""Matrix products the backward sweep can take from the forward (IR -> IR).

A quadratic form ``x @ (A @ x)`` -- a Gaussian log-density, a Mahalanobis
distance, an energy -- reads its matrix twice: ``A x`` in the forward sweep
and ``A^T (c x)`` in the backward, ``c`` the form's scalar cotangent.  When
``A`` is larger than the cache the two reads both come from memory (ten
1000 x 1000 float64 matrices: 160 MB per gradient).  Since the product is
linear, ``A^T (c x) = c (A^T x)``, and ``A^T x`` needs nothing from the
backward sweep: :func:`hoist_transposed_products` computes it in the forward
sweep right after the product that reads ``A`` there (the second read from
cache) and leaves the backward a scaling by ``c``.
"""

from __future__ import annotations

from ..ir.graph import Node, users_of
from ..ir.registry import REGISTRY
from .costs import CACHE_BYTES

__all__ = ["hoist_transposed_products"]


def _scaled_operand(v):
    """``(w, c)`` when ``v`` is ``c * w``, ``c`` of one element and ``w`` of
    ``v``'s shape: a product (``multiply``, or the chain rule's
    ``safe_multiply``; ``c`` perhaps broadcast to the vector), or a vjp
    region -- the cotangent ``c`` of ``sum(w * u)`` (one multiply summed
    whole, two distinct operands of ``v``'s shape) with respect to ``u``;
    else None."""
    if v.op in ("multiply", "safe_multiply") and len(v.args) == 2:
        for c, w in (v.args, v.args[::-1]):
            if c.op == "broadcast_to" and c.args[0].size == 1:
                c = c.args[0]  # (the scalar, spread over the vector)
            if c.size == 1 and c.dtype == v.dtype and w.shape == v.shape and \
                    w.dtype == v.dtype and w is not c:
                return w, c
        return None
    if v.op != "region" or v.attrs.get("mode") != "vjp" or not isinstance(v.attrs.get("wrt"),
                                                                           int):
        return None
    body = v.attrs["body"]
    red = body.reduction
    if len(body.nodes) != 1 or body.nodes[0].op != "multiply" or red is None or \
            red.op != "sum" or sorted(red.attrs.get("axis", ())) != list(range(len(v.shape))) or \
            len(body.inputs) != 2 or len(v.args) != 3:
        return None
    mul = body.nodes[0]
    if {a.id for a in mul.args} != {a.id for a in body.inputs} or \
            any(a.shape != v.shape or a.dtype != v.dtype for a in body.inputs):
        return None
    c = v.args[2]
    if c.size != 1 or c.dtype != v.dtype:
        return None
    return body.inputs[1 - v.attrs["wrt"]], c


def _new(next_id, op, args, attrs, phase):
    shape, dtype = REGISTRY[op].abstract(*args, **attrs)
    return Node(next_id, op, args, attrs, shape, dtype, phase)


def hoist_transposed_products(nodes, outputs=()):
    """``A^T (c w)`` in the backward sweep becomes ``c (A^T w)``, ``A^T w``
    computed in the forward sweep beside a product that reads ``A`` there.

    Conditions: a backward ``matmul`` of ``transpose(A)`` (2-D) and a vector
    (a 1-D vjp region, or its one-column or one-row reshape) that is ``c * w``
    (:func:`_scaled_operand`: ``c`` of one element -- a cotangent --, ``w`` a
    forward value); ``A`` a forward value larger than the cache
    (:data:`~hybridad.transforms.costs.CACHE_BYTES`: below it a second read
    costs little) that a forward ``matmul`` reads.  ``A^T w`` goes right
    after that product (or after ``w``, if later); the backward product
    becomes ``safe_multiply(A^T w, c)``.  Rounding differs from the original by
    the order of one multiply.

    Returns
    -------
    list of Node
        The new node list (the replaced products' operands are left for dead
        code elimination).
    """
    users = users_of(nodes)
    pos = {n.id: i for i, n in enumerate(nodes)}
    external = {n.id for n in outputs if n is not None}
    forward_reads = {}  # matrix id -> position of the last forward matmul reading it
    for n in nodes:
        if n.op == "matmul" and n.phase == "forward":
            for a in n.args:
                m = a.args[0] if a.op == "transpose" else a
                forward_reads[m.id] = pos[n.id]
    next_id = max((n.id for n in nodes), default=-1) + 1
    after = {}  # position -> nodes to insert after it
    replaced = {}  # backward product id -> its replacement
    for n in nodes:
        if n.op != "matmul" or n.phase != "backward" or n.id in external or \
                n.dtype.kind != "f" or len(n.shape) != 2:
            continue
        k = next((i for i, a in enumerate(n.args) if a.op == "transpose" and
                  len(a.shape) == 2 and tuple(a.attrs.get("axes", ())) == (1, 0)), None)
        if k is None:
            continue
        A, vec = n.args[k].args[0], n.args[1 - k]
        v = vec.args[0] if vec.op == "reshape" else vec
        if len(v.shape) != 1 or len(vec.shape) not in (1, 2) or A.phase != "forward" or \
                A.id not in forward_reads or A.nbytes <= CACHE_BYTES or A.dtype != n.dtype:
            continue
        scaled = _scaled_operand(v)
        if scaled is None or scaled[0].phase != "forward":
            continue
        w, c = scaled
        t = _new(next_id, "transpose", (A,), {"axes": (1, 0)}, "forward")
        wv = w if vec is v else _new(next_id + 1, "reshape", (w,), {"shape": vec.shape},
                                     "forward")
        s = _new(next_id + 2, "matmul", (t, wv) if k == 0 else (wv, t), {}, "forward")
        # (the chain rule's product: a zero cotangent gives zeros, whatever A^T w holds)
        scaled_s = _new(next_id + 3, "safe_multiply", (s, c), {}, n.phase)
        next_id += 4
        if scaled_s.shape != n.shape:
            continue  # (a cotangent of another shape: leave the product)
        if any(u.op == "region" and n in u.attrs["body"].inputs for u in users[n.id]):
            continue  # (a region reading it as a loop input: its body names the node)
        at = max(forward_reads[A.id], pos[w.id], pos[A.id])
        after.setdefault(at, []).extend([t] + ([wv] if wv is not w else []) + [s])
        replaced[n.id] = scaled_s
    if not replaced:
        return nodes
    out = []
    for i, n in enumerate(nodes):
        if n.id in replaced:
            out.append(replaced[n.id])
        else:
            if any(a.id in replaced for a in n.args):
                n.args = tuple(replaced.get(a.id, a) for a in n.args)
            out.append(n)
        out.extend(after.get(i, ()))
    return out
