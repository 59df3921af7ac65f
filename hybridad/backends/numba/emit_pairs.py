"""The generated source of the products :func:`hybridad.transforms.products.pair_matvecs`
makes: ``matvec_pair`` (``A u`` and ``A^T v``) and ``matvec_two`` (two products of
one form), each one read of its matrix."""

from __future__ import annotations

from .machine import machine

__all__ = ["matvec_pair", "matvec_two", "pair_call", "two_call"]


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
