"""One factorization for the solves with one matrix (IR -> IR).

``np.linalg.solve(A, b)``'s reverse rule solves with ``A^T`` (the cotangent
of ``b``), and a Hessian's tangent sweeps solve with ``A`` again, once per
seed: each ``solve`` node is LAPACK's gesv, an LU factorization of its
matrix (``n^3 / 3`` multiply-adds) and then the triangular solves (``n^2``
per right-hand side).  :func:`share_factorizations` factors each such matrix
once: the first of its solves becomes ``solve_lu`` -- the same gesv, so its
result is numpy's bit for bit, which also keeps the LU factors and pivots
gesv leaves, packed after ``x`` -- read back by a view of its ``x``
columns; every later solve with the matrix or its transpose becomes
``lu_solve`` (getrs, ``trans`` 0 or 1) on those factors, as JAX's ``solve``
keeps its LU factors for the transposed solve.  A Gaussian process's
gradient at n = 1000 spent half its time in the two factorizations of its
kernel matrix.  Where the function also Cholesky-factors the matrix (that
Gaussian process: ``cholesky(K)`` for its log-determinant), its solves use
that factor instead, where the matrix is exactly symmetric (``cho_solve``,
below): no LU at all.

It runs after every derivative is taken (a lowering pass): ``solve_lu``,
``lu_factors``, ``lu_solve``, ``symmetric`` and ``cho_solve`` have no
derivative rules.  The factors are kept from the
first solve to the last (an ``n^2`` buffer, what the memory plan then
holds, as JAX keeps them).  A singular matrix raises from the first solve,
as before; a later solve with the transpose, from the factors, fails only
where the first did (gesv on ``A^T`` can meet an exact zero pivot that
``A``'s factorization does not).  Such a later solve differs from gesv on
its own matrix by rounding.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import Node
from ..ir.registry import REGISTRY

__all__ = ["factor_loop_constants", "share_factorizations"]


def _swaps_last_two(node):
    axes = tuple(node.attrs.get("axes", ()))
    k = len(node.shape)
    return node.op == "transpose" and k >= 2 and \
        axes == tuple(range(k - 2)) + (k - 1, k - 2)


def _matrix(solve):
    """``(matrix node, trans)``: the matrix a ``solve`` (or ``cholesky``) node
    factors, seen through transposes of the last two axes and the frontend's
    reshape of a matrix into a stack of one (``np.linalg.solve(A.T, b)`` and
    the reverse sweep's ``A^T`` are the factors of ``A``, transposed)."""
    a, trans = solve.args[0], 0
    while True:
        if _swaps_last_two(a):
            a, trans = a.args[0], 1 - trans
        elif a.op == "reshape" and len(a.args[0].shape) == 2 and \
                tuple(a.shape) == (1, *a.args[0].shape):
            a = a.args[0]
        else:
            return a, trans


def factor_loop_constants(nodes):
    """Each ``loop`` node whose body solves with a matrix that is one of the
    loop's constants (or its transpose: the reverse sweep's) -- an implicit
    time step, ``u = np.linalg.solve(M, u)`` at every iteration -- gets the
    matrix's LU factors computed once, before it (``lu_factors``), as a
    constant more, and those solves become ``lu_solve`` on them (getrs,
    ``trans`` 0 or 1): one factorization per loop instead of one per
    iteration, as loop-invariant code motion would give.  The body is a new
    one (a body is shared by every loop traced alike).  getrf then getrs is
    gesv's own computation, so a solve with the matrix itself is numpy's bit
    for bit; one with its transpose differs from gesv on the transpose by
    rounding (as :func:`share_factorizations`' are).  A singular matrix
    raises before the first iteration instead of in it.

    Returns
    -------
    list of Node
        ``nodes`` with each loop's factorizations before it (the loops
        rewritten in place: their bodies and operands)."""
    if not any(n.op == "loop" for n in nodes):
        return nodes
    from ..ir.graph import copy_graph
    from ..ops.loop import LoopBody

    next_id = max(n.id for n in nodes) + 1
    factors, out = {}, []  # outer matrix id -> its lu_factors node
    for n in nodes:
        body = n.attrs.get("body") if n.op == "loop" else None
        if body is not None and "solve" in {m.op for m in body.graph.nodes}:
            g = body.graph
            first = len(g.inputs) - body.n_const
            outer = dict(zip((i.id for i in g.inputs[first:]), n.args[len(n.args) - body.n_const:],
                             strict=True))
            found = [(m, _matrix(m)) for m in g.nodes if m.op == "solve"]
            found = [(m, a, t) for m, (a, t) in found if a.id in outer and
                     len(a.shape) in (2, 3) and a.shape[-1] == a.shape[-2] and
                     outer[a.id].dtype == m.dtype and m.args[1].dtype == m.dtype]
            if found:
                g = copy_graph(g)
                at = {m.id: m for m in g.nodes}
                # (the body's own numbering: an id of the outer graph's may be one of its nodes')
                body_id = max(m.id for m in (*g.nodes, *g.inputs)) + 1
                fed = {}  # outer matrix id -> the body's input of its factors
                for m, a, trans in found:
                    mat = outer[a.id]
                    f = factors.get(mat.id)
                    if f is None:
                        stack = mat  # (a stack of matrices: the solve's own operand)
                        if len(mat.shape) == 2:
                            k = mat.shape[0]
                            stack = Node(next_id, "reshape", (mat,), {"shape": (1, k, k)},
                                         (1, k, k), mat.dtype, n.phase)
                            next_id += 1
                            out.append(stack)
                        shape, dtype = REGISTRY["lu_factors"].abstract(stack)
                        f = factors[mat.id] = Node(next_id, "lu_factors", (stack,), {},
                                                   shape, dtype, n.phase)
                        next_id += 1
                        out.append(f)
                    inp = fed.get(mat.id)
                    if inp is None:
                        inp = fed[mat.id] = Node(body_id, "input", (), {"index": len(g.inputs)},
                                                 f.shape, f.dtype, g.inputs[-1].phase)
                        body_id += 1
                        g.inputs.append(inp)
                        g.nodes.insert(0, inp)
                        n.args = (*n.args, f)
                    solve = at[m.id]
                    solve.op, solve.args = "lu_solve", (inp, solve.args[1])
                    solve.attrs = {"trans": trans, "at": 0}
                n.attrs = {**n.attrs, "body": LoopBody(g, body.index, body.n_carry, body.n_xs)}
        out.append(n)
    return out


def share_factorizations(nodes, outputs=(), staged=False, cholesky=True):
    """Every group of two or more ``solve`` nodes with one matrix (or its
    transpose): the first a view of a ``solve_lu``, the others ``lu_solve``
    nodes on its factors, in place.  ``staged`` (the graph of a Hessian or
    Jacobian plan, whose programs are the nodes that depend on a seed, apart
    from those that do not) whose first solve is not a forward one: the
    factors are ``lu_factors`` of the matrix alone, computed where the matrix
    is, and every solve is an ``lu_solve`` (a solve with a seed's tangent
    must not make the factors depend on it).

    First, every solve with a matrix the function Cholesky-factors (a
    ``cholesky`` node of it, or of its transpose, earlier in the graph)
    becomes ``cho_solve`` on that factor: potrs where the matrix is exactly
    symmetric -- ``symmetric``, checked once a call, right after the
    factorization: cholesky reads one triangle, so the factor is the
    matrix's only then -- and numpy's gesv on the matrix where it is not.
    A Gaussian process's ``solve(K, y)`` and its reverse sweep's ``solve(K^T,
    g)`` then need no LU factorization at all (``n^3 / 3`` multiply-adds
    for a check of ``n^2 / 2`` comparisons).

    Parameters
    ----------
    nodes : list of Node
        The graph's nodes in order.
    outputs : sequence of Node
        Its outputs (unchanged: the solves keep their ids and users).
    staged : bool
    cholesky : bool
        Solve by a Cholesky factor where there is one (False: LU factors only;
        benchmarks/bench_factors.py compares).

    Returns
    -------
    list of Node
        ``nodes`` with each ``solve_lu`` inserted before the solve it
        computes (``staged``: each ``lu_factors`` right after its matrix).
    """
    nodes = factor_loop_constants(nodes)
    groups, factored = {}, {}  # matrix id -> [(solve, trans)] in node order; -> cholesky
    order = {n.id: i for i, n in enumerate(nodes)}
    for n in nodes:
        if n.op == "solve":
            a, trans = _matrix(n)
            groups.setdefault(a.id, []).append((n, trans))
        elif n.op == "cholesky" and n.dtype == np.float64 and cholesky:
            factored.setdefault(_matrix(n)[0].id, n)
    next_id = max(n.id for n in nodes) + 1
    before, after = {}, {}  # node id -> the nodes to insert before / after it
    for key, chol in factored.items():
        members, flags = groups.get(key, []), None
        for solve, trans in list(members):
            if order[solve.id] < order[chol.id] or solve.args[0].shape != chol.shape or \
                    solve.dtype != chol.dtype:
                continue
            if flags is None:  # (whether the factored matrix is symmetric, once a call)
                m = chol.args[0]
                flags = Node(next_id, "symmetric", (m,), {}, (m.shape[0],),
                             np.dtype(np.float64), chol.phase)
                next_id += 1
                after.setdefault(chol.id, []).append(flags)
            solve.op, solve.args = "cho_solve", (chol, flags, *solve.args)
            solve.attrs = {"upper": bool(chol.attrs.get("upper", False))}
            members.remove((solve, trans))
    for members in (m for m in groups.values() if len(m) > 1):
        first, t0 = members[0]
        if staged and first.phase != "forward":  # (a forward solve depends on no seed)
            # the factors of the first solve's own matrix, right after it
            m = first.args[0]
            shape, dtype = REGISTRY["lu_factors"].abstract(m)
            packed = Node(next_id, "lu_factors", (m,), {}, shape, dtype, m.phase)
            after.setdefault(m.id, []).append(packed)
            at, rest = 0, members
        else:
            k = first.shape[-1]
            shape, dtype = REGISTRY["solve_lu"].abstract(*first.args)
            packed = Node(next_id, "solve_lu", first.args, {}, shape, dtype, first.phase)
            before[first.id] = [packed]
            # (in place: its users and the outputs keep it) x, a view of the packed result
            first.op, first.args = "getitem", (packed,)
            first.attrs = {"index": (slice(None), slice(None), slice(0, k))}
            at, rest = k, members[1:]
        next_id += 1
        for solve, trans in rest:
            solve.op, solve.args = "lu_solve", (packed, solve.args[1])
            solve.attrs = {"trans": trans ^ t0, "at": at}
    out = []
    for n in nodes:
        out.extend(before.get(n.id, ()))
        out.append(n)
        out.extend(after.get(n.id, ()))
    return out
