"""The generated source of matrix-vector products as the numba backend's own
loops (:func:`matvec_call`, :func:`emit_matvec`: :mod:`.rt`'s row and column
loops, :mod:`.matvecs`' column loops in parts of the rows) and of the products
:func:`hybridad.transforms.products.pair_matvecs` makes: ``matvec_pair``
(``A u`` and ``A^T v``) and ``matvec_two`` (two products of one form), each
one read of its matrix."""

from __future__ import annotations

from typing import NamedTuple

from .machine import machine

__all__ = ["MatvecCall", "emit_matvec", "matvec_call", "matvec_pair", "matvec_two", "pair_call",
           "two_call"]


def matvec_call(node, layouts):
    """How matmul ``node`` (:func:`.emit.blas_ready`) runs when it is a
    matrix-vector product: a :class:`MatvecCall`, or None for any other
    product.

    ``form``: ``"dot"`` (the result is the C matrix ``matrix`` times
    ``vector``: a row loop) or ``"axpy"`` (``matrix.T @ vector``: a column
    loop); ``matrix``/``vector``: ``(operand index, transposed, shape)`` of
    the C matrix (the operand, or the transpose of an F one) and of the
    vector (a 1-D operand, or a 2-D one with one row or column);
    ``how``: ``"loop"`` or ``"blas"`` (:func:`hybridad.transforms.costs.matvec_choice`);
    ``threads``: more than one when the loop runs on numba's threads (the
    plan's loops are parallel and the product long enough); ``reason``: the
    choice's figures."""
    from ...transforms.costs import matvec_choice
    from ...transforms.machine import matvec_matrix

    found = matvec_matrix(*(x.shape for x in node.args))
    if found is None:
        return None
    mat, shape = found
    vec = 1 - mat
    flip = layouts[node.args[mat].id] == "F"
    shape = shape[::-1] if flip else shape
    # A x (A C), x^T B = B^T x (B F): rows of a C matrix; the others its columns
    form = "dot" if (mat == 0) != flip else "axpy"
    size = shape[0] * shape[1]
    facts = machine()
    threads = facts.threads if size >= facts.parallel_min else 1
    how, reason, threads = matvec_choice(shape[0], shape[1], node.dtype, form, facts, threads)
    V = node.args[vec]
    return MatvecCall(how, form, (mat, flip, shape),
                      (vec, len(V.shape) == 2 and layouts[V.id] == "F", V.size), threads, reason)


class MatvecCall(NamedTuple):
    """:func:`matvec_call`'s answer."""

    how: str
    form: str
    matrix: tuple  # (operand index, transposed, C shape)
    vector: tuple  # (operand index, transposed, length)
    threads: int
    reason: str


def emit_matvec(w, node, a, acc, beta, call, work=None):
    """``acc = A @ B + beta * acc`` by :mod:`.rt`'s row or column loop
    (:func:`matvec_call`): C views of the matrix and 1-D views of the vector
    and the result (reshapes of contiguous arrays: no copies).  A column loop
    over few columns of many rows runs in parts of its rows, into the node's
    scratch ``work`` (:meth:`~hybridad.transforms.machine.Machine.axpy_parts`,
    :func:`.matvecs.matvec_axpy_parts`)."""
    form, (mat, mflip, shape), (vec, vflip, k) = call.form, call.matrix, call.vector
    matrix = a[mat] + (".T" if mflip else "")
    vector = a[vec] if len(node.args[vec].shape) == 1 else \
        f"{a[vec]}{'.T' if vflip else ''}.reshape(({k},))"
    n = shape[0] if form == "dot" else shape[1]
    out = acc if len(node.shape) == 1 else f"{acc}.reshape(({n},))"
    par = "_par" if call.threads > 1 else ""
    w.threaded = w.threaded or bool(par)
    parts = machine().axpy_parts(*shape) if form == "axpy" else 1
    if parts > 1:
        if work is None:
            raise NotImplementedError(f"node {node.id}: a column loop in {parts} parts "
                                      "without its scratch")
        w.emit(f"_mv_axpy_parts{par}({matrix}, {vector}, {out}, {float(beta)!r}, "
               f"{work}[:{parts * n}].reshape(({parts}, {n})))  # {call.reason}; "
               f"{parts} parts of the rows, summed in order")
        return
    w.emit(f"_mv_{form}{par}({matrix}, {vector}, {out}, {float(beta)!r})  # {call.reason}")


def pair_call(node):
    """``(parts, threads, reason)`` of ``matvec_pair`` ``node``: its rows' parts
    (:meth:`~hybridad.transforms.machine.Machine.pair_parts`), their threads
    (several when the plan's loops are parallel and the matrix long enough)
    and the cost model's figures (:func:`hybridad.transforms.costs.pair_choice`)."""
    from ...transforms.costs import pair_choice

    A, facts = node.args[0], machine()
    parts = facts.pair_parts(A.shape[0])
    threads = min(parts, facts.threads) if A.size >= facts.parallel_min else 1
    return parts, threads, pair_choice(*A.shape, A.dtype, facts)[1]


def matvec_pair(e):
    """``[A u, A^T v]`` by :func:`.rt.matvec_pair` (one read of ``A``, a C
    matrix: an input or a buffer, see
    :func:`hybridad.transforms.products.pair_matvecs`), into the halves of
    the node's buffer; the parts of ``A^T v`` in its scratch."""
    A = e.node.args[0]
    if e.layouts[A.id] != "C":
        raise NotImplementedError(f"matvec_pair of a {e.layouts[A.id]} matrix")
    (m, k), (parts, threads, why) = A.shape, pair_call(e.node)
    par = "_par" if threads > 1 else ""
    e.w.threaded = e.w.threaded or bool(par)
    work = e.names[("scratch", e.node.id)]
    e.w.emit(f"_mv_pair{par}({e.a[0]}, {e.a[1]}, {e.a[2]}, {e.out}[:{m}], {e.out}[{m}:], "
             f"{work}[:{parts * k}].reshape(({parts}, {k})))  # A u and A^T v: {why}; "
             f"{parts} parts of the rows" + (" on numba's threads" if par else ""))


def two_call(node):
    """``(threads, reason)`` of ``matvec_two`` ``node``: the threads its loop
    takes (rows for ``dot``, blocks of columns for ``axpy``; several when the
    plan's loops are parallel and the matrix long enough) and the cost
    model's figures (:func:`hybridad.transforms.costs.two_choice`)."""
    from ...transforms.costs import two_choice

    A, facts, form = node.args[0], machine(), node.attrs["form"]
    tasks = facts.matvec_tasks(*A.shape, form)
    threads = min(tasks, facts.threads) if A.size >= facts.parallel_min else 1
    return threads, two_choice(*A.shape, A.dtype, form, facts)[1]


def matvec_two(e):
    """``[A x, A y]`` or ``[A^T x, A^T y]`` by :mod:`.matvecs`' ``dot2`` or
    ``axpy2`` (one read of ``A``, a C matrix: an input or a buffer), into the
    rows of the node's buffer."""
    A = e.node.args[0]
    if e.layouts[A.id] != "C":
        raise NotImplementedError(f"matvec_two of a {e.layouts[A.id]} matrix")
    form = e.node.attrs["form"]
    threads, why = two_call(e.node)
    par = "_par" if threads > 1 else ""
    e.w.threaded = e.w.threaded or bool(par)
    what = "A x and A y" if form == "dot" else "A^T x and A^T y"
    parts = machine().axpy_parts(*A.shape) if form == "axpy" else 1
    if parts > 1:  # (few columns of many rows: parts of the rows, .matvecs.matvec_axpy2_parts)
        k = A.shape[1]
        work = e.names[("scratch", e.node.id)]
        e.w.emit(f"_mv_axpy2_parts{par}({e.a[0]}, {e.a[1]}, {e.a[2]}, {e.out}[0], {e.out}[1], "
                 f"{work}[:{2 * parts * k}].reshape(({2 * parts}, {k})))  # {what}: {why}; "
                 f"{parts} parts of the rows, summed in order"
                 + (" on numba's threads" if par else ""))
        return
    e.w.emit(f"_mv_{form}2{par}({e.a[0]}, {e.a[1]}, {e.a[2]}, {e.out}[0], {e.out}[1])  "
             f"# {what}: {why}" + (" on numba's threads" if par else ""))
