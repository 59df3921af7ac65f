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

A second read from the cache still costs what the first did when the matrix
is larger than the core's own cache (a 1000 x 1000 float64 matrix read from
L3: ~165 us a product, on two threads).  :func:`pair_matvecs` makes two
matrix-vector products of one matrix -- ``A u`` and ``A^T v``, both operands
ready when the first runs -- one ``matvec_pair``, whose kernel reads each row
of ``A`` once for both (:func:`hybridad.backends.numba.rt.matvec_pair`), and
two products of one form -- an HVP's ``A u`` and ``A du``, its ``A^T w`` of
the backward and of the tangent sweep -- one ``matvec_two``
(:mod:`hybridad.backends.numba.matvecs`).
"""

from __future__ import annotations

from ..ir.graph import named_by_region, new_node, redirect, users_of
from ..ir.registry import REGISTRY, InPlaceWrites
from .costs import CACHE_BYTES, pair_choice, two_choice
from .machine import matvec_matrix

__all__ = ["hoist_transposed_products", "mark_seed_products", "pair_matvecs"]


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
    return v.args[1 - v.attrs["wrt"]], c  # (the operand as it is now: partition._rebound)


def _pairs(A, machine, forms=("dot", "axpy")):
    """Whether :func:`pair_matvecs` pairs two matrix-vector products of ``A``
    of ``forms``: a float input or computed value (a buffer a compiled backend
    holds C-contiguous, not a view or a constant) for which the cost model
    (:func:`~hybridad.transforms.costs.pair_choice` for a ``dot`` and an
    ``axpy``, :func:`~hybridad.transforms.costs.two_choice` for two of one
    form) prefers one read."""
    held = A.op == "input" or (A.op != "const" and REGISTRY[A.op].kind != "view")
    if not (held and A.dtype.kind == "f" and len(A.shape) == 2):
        return False
    if forms[0] != forms[1]:
        return pair_choice(*A.shape, A.dtype, machine)[0]
    return two_choice(*A.shape, A.dtype, forms[0], machine)[0]


def hoist_transposed_products(nodes, outputs=(), *, machine):
    """``A^T (c w)`` in the backward sweep becomes ``c (A^T w)``, ``A^T w``
    computed in the forward sweep beside a product that reads ``A`` there.

    Conditions: a backward ``matmul`` of ``transpose(A)`` (2-D) and a vector
    (a 1-D vjp region, or its one-column or one-row reshape) that is ``c * w``
    (:func:`_scaled_operand`: ``c`` of one element -- a cotangent --, ``w`` a
    forward value); ``A`` a forward value that a forward ``matmul`` reads,
    larger than the cache (:data:`~hybridad.transforms.costs.CACHE_BYTES`:
    below it a second read costs little) or read there by a matrix-vector
    product that :func:`pair_matvecs` will pair ``A^T w`` with (one read of
    ``A`` for both, faster at every size measured).  ``A^T w`` goes right
    after that product (or after ``w``, if later); the backward product
    becomes ``safe_multiply(A^T w, c)``.  Rounding differs from the original by
    the order of one multiply.  ``machine``: the backend's facts the pairing
    choice reads (:class:`~hybridad.transforms.machine.Machine`).

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
    forward_forms = {}  # matrix id -> the forms of its forward matrix-vector products
    for n in nodes:
        if n.op == "matmul" and n.phase == "forward":
            for a in n.args:
                m = a.args[0] if a.op == "transpose" else a
                forward_reads[m.id] = pos[n.id]
            found = _matvec_form(n)
            if found is not None:
                forward_forms.setdefault(found[0].id, set()).add(found[1])
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
                A.id not in forward_reads or A.dtype != n.dtype:
            continue
        # (A^T v is a row loop over A's columns; v^T A^T = (A v)^T a dot per row)
        paired = ("dot" if k == 0 else "axpy") in forward_forms.get(A.id, ()) and _pairs(A, machine)
        if A.nbytes <= CACHE_BYTES and not paired:
            continue
        scaled = _scaled_operand(v)
        if scaled is None or scaled[0].phase != "forward":
            continue
        w, c = scaled
        t = new_node(next_id, "transpose", (A,), {"axes": (1, 0)}, "forward")
        wv = w if vec is v else new_node(next_id + 1, "reshape", (w,), {"shape": vec.shape},
                                     "forward")
        s = new_node(next_id + 2, "matmul", (t, wv) if k == 0 else (wv, t), {}, "forward")
        # (the chain rule's product: a zero cotangent gives zeros, whatever A^T w holds)
        scaled_s = new_node(next_id + 3, "safe_multiply", (s, c), {}, n.phase)
        next_id += 4
        if scaled_s.shape != n.shape:
            continue  # (a cotangent of another shape: leave the product)
        if named_by_region(n, users[n.id]):
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
            redirect((n,), replaced)
            out.append(n)
        out.extend(after.get(i, ()))
    return out


def _matvec_form(n):
    """``(B, form, vector)`` when ``n`` is a matrix-vector ``matmul`` of 2-D
    operands: ``form`` ``"dot"`` (``n`` is ``B @ vector``, a dot product per
    row of ``B``) or ``"axpy"`` (``B^T @ vector``, rows of ``B`` added up),
    ``B`` the matrix with its transposes (if any) taken off; else None."""
    if n.op != "matmul" or len(n.shape) != 2 or any(len(a.shape) != 2 for a in n.args):
        return None
    found = matvec_matrix(n.args[0].shape, n.args[1].shape)
    if found is None:
        return None
    mat = found[0]
    B, vec, flip = n.args[mat], n.args[1 - mat], False
    while B.op == "transpose" and tuple(B.attrs.get("axes", ())) == (1, 0):
        B, flip = B.args[0], not flip  # (the backward's transpose of a transpose)
    return B, "dot" if (mat == 0) != flip else "axpy", vec


def _flat(vec):
    """The 1-D node a one-row or one-column vector is a reshape of, or None."""
    return vec.args[0] if vec.op == "reshape" and len(vec.args[0].shape) == 1 else None


def pair_matvecs(nodes, outputs=(), *, machine):
    """Two matrix-vector products of one matrix ``B`` become one product that
    reads ``B`` once, where the first of them runs, the two products views of
    its parts (nodes kept, changed in place: their readers, regions included,
    read them as before): ``B u`` and ``B^T v`` one ``matvec_pair(B, u, v)``;
    two of one form -- ``B x`` and ``B y`` (an HVP's forward ``A u`` and
    tangent ``A du``), or ``B^T x`` and ``B^T y`` (its backward and tangent
    ``A^T w``) -- one ``matvec_two``.

    Conditions: float products of one dtype, neither a graph output; ``B``
    computed or an input (a buffer the backend holds C-contiguous, not a
    view or a constant) and one read cheaper than two by the cost model
    (:func:`~hybridad.transforms.costs.pair_choice`,
    :func:`~hybridad.transforms.costs.two_choice`); the second product's
    vector made before the first product, or made there: an argument of the
    plan always is, and a vector made from arguments and values made before
    by pure elementwise ops, fused regions and views (an HVP's ``s v``, traced
    in the tangent sweep) has that computation moved ahead of the pair.  Each
    product pairs once, with the earliest unpaired product it can.  The sweep
    runs again while it pairs: a pair's results are ready earlier than the
    products were, so the vectors made from them can join a later pair (an
    HVP's two ``A^T w`` once its two ``A u`` are one read).  Rounding: each
    kernel sums in a fixed order (see the kernels); the same bits on any
    thread count.  ``machine``: the backend's facts the choice reads
    (:class:`~hybridad.transforms.machine.Machine`).

    Returns
    -------
    list of Node
        The new node list (the products' old operands are left for dead code
        elimination).
    """
    for _ in range(8):  # (each sweep pairs at least two products, or stops)
        nodes, paired = _pair_sweep(nodes, outputs, machine)
        if not paired:
            break
    return nodes


def _pair_sweep(nodes, outputs, machine):
    pos = {n.id: i for i, n in enumerate(nodes)}
    external = {n.id for n in outputs if n is not None}
    next_id = max((n.id for n in nodes), default=-1) + 1
    before = {}  # position -> nodes to insert before it
    moved = set()  # nodes moved ahead, to where a pair needs them
    waiting = {}  # B id -> [(product, form, vector)] not paired yet
    ready = _ready(nodes, pos)
    for n in nodes:
        found = _matvec_form(n) if n.id not in external else None
        if found is None:
            continue
        B, form, vec = found
        if n.dtype.kind != "f" or not (B.dtype == vec.dtype == n.dtype):
            continue
        src = _flat(vec) or vec
        # (an argument is there from the start, wherever the trace made its node:
        # a Hessian-vector product's v, made after the backward pass; and what is
        # made from such values alone can be made there too)
        where = ready[src.id]
        queue = waiting.setdefault(B.id, [])
        partner = next((q for q in queue if where < pos[q[0].id] and
                        _pairs(B, machine, (form, q[1]))), None)
        cone = [] if partner is None else _cone(src, pos[partner[0].id], pos)
        if partner is None or any(m.id in moved for m in cone):
            queue.append((n, form, vec))
            continue
        queue.remove(partner)
        first = partner[0]
        new = []

        def flat_of(vec):
            nonlocal next_id
            if _flat(vec) is not None:
                return _flat(vec)
            new.append(new_node(next_id, "reshape", (vec,), {"shape": (vec.size,)}, first.phase))
            next_id += 1
            return new[-1]

        moved.update(m.id for m in cone)
        new.extend(cone)  # (what the vector is made of, ahead of the pair)
        m, k = B.shape
        if partner[1] == form:  # two of one form: the rows of one result
            x = (flat_of(partner[2]), flat_of(vec))
            p = new_node(next_id, "matvec_two", (B, *x), {"form": form}, first.phase)
            parts = {id(first): (0,), id(n): (1,)}
        else:
            x = {form: flat_of(vec), partner[1]: flat_of(partner[2])}
            p = new_node(next_id, "matvec_pair", (B, x["dot"], x["axpy"]), {}, first.phase)
            halves = {"dot": (slice(0, m),), "axpy": (slice(m, m + k),)}
            parts = {id(first): halves[partner[1]], id(n): halves[form]}
        next_id += 1
        new.append(p)
        for node in (first, n):
            half = new_node(next_id, "getitem", (p,), {"index": parts[id(node)]}, first.phase)
            next_id += 1
            new.append(half)
            node.op, node.args, node.attrs = "reshape", (half,), {"shape": node.shape}
        before.setdefault(pos[first.id], []).extend(new)
    if not before:
        return nodes, False
    out = [n for n in nodes if n.op == "input"]  # (an argument read by an earlier pair)
    for i, n in enumerate(nodes):
        out.extend(before.get(i, ()))
        if n.op != "input" and n.id not in moved:
            out.append(n)
    return out, True


def _ready(nodes, pos):
    """node id -> the position after which it could be computed: -1 for
    arguments and constants; for a pure elementwise op, a fused region or a
    view (of storage no in-place op writes) its operands' latest; elsewhere
    its own."""
    writes = InPlaceWrites(nodes)
    written, roots = writes.roots, writes.root
    ready = {}
    for n in nodes:
        if n.op in ("input", "const"):
            ready[n.id] = -1
        elif (n.op == "region" or n.op in REGISTRY and
              REGISTRY[n.op].kind in ("elementwise", "view")) and \
                roots[n.id] not in written and n.args:
            ready[n.id] = max(ready[a.id] for a in n.args)
        else:
            ready[n.id] = pos[n.id]
    return ready


def _cone(src, at, pos):
    """The nodes ``src`` is made of that come after position ``at`` (``src``
    included), in their order: moved ahead of ``at`` (all of them pure
    elementwise ops or views on values made before, by :func:`_ready`).
    A constant is ready from the start too, but its node may come later in
    the list (a backward's seed of ones): it moves with the cone."""
    cone, todo = {}, [src]
    while todo:
        m = todo.pop()
        if m.id in cone or m.op == "input" or pos[m.id] <= at:
            continue
        cone[m.id] = m
        todo.extend(m.args)
    return sorted(cone.values(), key=lambda m: pos[m.id])


#: elementwise ops that keep a zero of their first (or, for products, any)
#: operand zero: a seed row's single nonzero stays single through them
_ZERO_KEEPING = {"multiply": (0, 1), "safe_multiply": (0, 1), "divide": (0,), "negative": (0,)}


def mark_seed_products(nodes, seed):
    """Mark ``onehot_rows`` (:mod:`hybridad.ops.matmul`) the products of
    ``nodes`` whose left operand is the 2-D block of seeds ``seed`` (a chunk
    of a dense Hessian's or Jacobian's, one seed a row) -- or what keeps its
    rows' zeros: a reshape of it, its product with (or quotient by) values
    that do not depend on it (a reverse Jacobian's cotangent seeds times the
    partials ``1 - tanh^2``).  Each row of such an operand holds at most one
    nonzero when the seeds are unit vectors, and its product is then rows of
    the right operand (:func:`hybridad.backends.numba.onehot.onehot_rows`,
    which checks).  In place (the attributes replaced); returns how many were
    marked."""
    rows, marked = {seed.id}, 0
    derived = {seed.id}  # (everything computed from the seeds)
    for n in nodes:
        if not any(a.id in derived for a in n.args):
            continue
        derived.add(n.id)
        if n.op == "reshape" and n.args[0].id in rows:
            rows.add(n.id)
        elif n.op in _ZERO_KEEPING:
            seeded = [j for j, a in enumerate(n.args) if a.id in derived]
            if len(seeded) == 1 and seeded[0] in _ZERO_KEEPING[n.op] and \
                    n.args[seeded[0]].id in rows and n.shape == n.args[seeded[0]].shape:
                rows.add(n.id)
        elif n.op == "matmul" and n.args[0].id in rows and n.args[1].id not in derived and \
                len(n.shape) == len(n.args[0].shape) == len(n.args[1].shape) == 2 and \
                n.dtype.kind == "f":
            n.attrs = {**n.attrs, "onehot_rows": True}
            marked += 1
    return marked
