"""Stage 6 (compiled backend): the whole plan -- forward and backward -- as ONE
numba function over the preallocated arena, so a call pays one dispatch.

Every node becomes scalar loops: fused regions (value and dual-number
partials per element, a fused reduction accumulated in place), reductions,
matmul, copies, scatters and in-place accumulations.  Buffers are slices of
one arena per dtype, cut inside the function; nothing is allocated per call.

The generated module is written to the disk cache under a content hash of its
source (:mod:`hybridad.backends.numba.cache`) and compiled with ``cache=True``, so a
new process reuses the machine code.  ``HYBRIDAD_DEBUG=3`` prints the source.
"""

from __future__ import annotations

import re
import threading

import numpy as np

from ...ir.graph import format_node
from ...transforms.memory import layout_proto, poison_schedule
from ...ops import REGISTRY, storage_root
from . import cache
from ...ops.lapack import LAPACK_OPS, kernel_args, kind_of
from .threads import SingleThreadedBlas
from .loops import (PARALLEL_MIN, Constants, LoopWriter, broadcast_index, fill,
                    getitem_map, here, region_acc_lines, region_lines)
from .loops import reduction_lines as _reduction_lines
from .reduce import reduction_scratch
from ..scalar import vector_imports

__all__ = ["materialize_for_numba", "compile_numba_program", "work_estimate"]


# ----------------------------------------------------------------------------
# which views numba can express
# ----------------------------------------------------------------------------


def materialize_for_numba(nodes):
    """Ids of view nodes to copy into buffers: indexing views that are not one
    contiguous piece of a C array, and reshapes of operands numba does not
    type as C-contiguous.

    A contiguous slice (``x[1:]``, ``A[2:5]``, ``A[i]``) of a C array whose
    data address the generated code knows (an argument, a buffer, a captured
    constant passed by object, or such a view of one) stays a view: the
    address plus an offset, typed C-contiguous -- no copy.  So does a strided
    slice of a C array (``A[:, 1:]``, ``x[::2]``) that only fused regions read:
    their loops index it in place (a numba array view, typed ``"A"``)."""
    from . import rt

    objects = rt.ABI is not None  # arrays arrive by object: their addresses are known
    layout, addressed, out = {}, {}, set()
    readers = {}
    for n in nodes:
        for i, a in enumerate(n.args):
            readers.setdefault(a.id, []).append((n, i))
    for n in nodes:
        if n.op == "input":
            layout[n.id], addressed[n.id] = "C", objects
        elif n.op == "const":
            v = n.attrs["value"]
            layout[n.id] = "C" if v.flags.c_contiguous else "A"
            addressed[n.id] = objects and v.flags.c_contiguous and v.flags.aligned and \
                v.dtype.isnative and not (n.is_literal and n.size == 1)
        elif REGISTRY[n.op].kind == "inplace":
            layout[n.id], addressed[n.id] = layout[n.args[0].id], addressed[n.args[0].id]
        elif n.op == "reshape" and layout[n.args[0].id] == "C":
            layout[n.id], addressed[n.id] = "C", addressed[n.args[0].id]
        elif n.op == "getitem" and addressed[n.args[0].id] and \
                contiguous_getitem_offset(n) is not None:
            layout[n.id], addressed[n.id] = "C", True
        elif n.op == "getitem" and strided_in_place(n, layout, readers):
            layout[n.id], addressed[n.id] = "A", False
        elif n.op in ("transpose", "broadcast_to"):
            layout[n.id], addressed[n.id] = "A", False
        else:
            if REGISTRY[n.op].kind == "view":
                out.add(n.id)
            layout[n.id], addressed[n.id] = "C", True
    return out


def strided_in_place(node, layout, readers):
    """Whether getitem ``node`` (slices and ints of a C array) can stay a numba
    view that regions index in place: every reader is a fused region reading it
    as an operand (not a ``region_acc`` target)."""
    index = node.attrs["index"]
    if layout.get(node.args[0].id) != "C" or not node.shape or \
            not all(isinstance(i, (slice, int)) for i in index):
        return False
    users = readers.get(node.id, [])
    return bool(users) and all(u.op == "region" or u.op == "region_acc" and i > 0
                               for u, i in users)


def index_source(index):
    """Python source of a basic index of slices and ints (``1:, ::2, 3``)."""
    def one(i):
        if isinstance(i, slice):
            parts = ["" if v is None else str(v) for v in (i.start, i.stop, i.step)]
            return ":".join(parts[:2]) + (f":{parts[2]}" if i.step is not None else "")
        return str(i)
    return ", ".join(one(i) for i in index)


def contiguous_getitem_offset(node):
    """Byte offset of ``getitem`` node's view into its C-contiguous operand
    when that view is itself C-contiguous, else None."""
    proto = layout_proto(node.args[0])  # C strides, no memory
    view = REGISTRY["getitem"].view(proto, **node.attrs)
    if not view.flags.c_contiguous or view.size == 0:
        return None
    return int(view.__array_interface__["data"][0] - proto.__array_interface__["data"][0])


def scratch_for_numba(nodes):
    """node id -> (dtype, elements) of scratch the generated code needs: a
    block per thread for two-phase full reductions, the float64 accumulator
    or the compensation of a reduction over leading axes (:mod:`.reduce`)."""
    import numba

    out = {}
    for n in nodes:
        need = reduction_scratch(n, numba.config.NUMBA_NUM_THREADS)
        if need is not None:
            out[n.id] = need
    return out


def numba_layouts(nodes, memplan):
    """node id -> the layout numba types its array with: ``"C"``, ``"F"`` or ``"A"``.

    Inputs arrive C-contiguous (the trampoline stages others), buffers are C,
    a 2-D transpose swaps C and F; other views are ``"A"``.  BLAS calls need
    ``"C"`` or ``"F"`` operands.
    """
    out = {}
    for n in nodes:
        storage = memplan.storage[n.id]
        if storage in ("input", "buffer"):
            out[n.id] = "C"
        elif storage == "const":
            v = n.attrs["value"]
            out[n.id] = "C" if v.flags.c_contiguous else "F" if v.flags.f_contiguous else "A"
        elif storage == "alias":
            out[n.id] = out[memplan.alias_of[n.id].id]
        elif n.op == "reshape":
            out[n.id] = "C"  # a reshape view is only made of a C operand
        elif n.op == "getitem":  # a contiguous piece of a C array, or a strided view
            out[n.id] = "C" if contiguous_getitem_offset(n) is not None else "A"
        elif n.op == "transpose" and len(n.shape) == 2 and n.attrs["axes"] == (1, 0):
            out[n.id] = {"C": "F", "F": "C"}.get(out[n.args[0].id], "A")
        else:
            out[n.id] = "A"
    return out


# ----------------------------------------------------------------------------
# per-op code
# ----------------------------------------------------------------------------


def region_acc_groups(nodes):
    """first node id -> list of ``region_acc`` nodes that run as one loop:
    consecutive ones over the same loop shape, none reading what another
    adds into (an adjoint completed by one and read by the next stays two
    loops)."""
    groups, current, written = {}, None, set()
    for n in nodes:
        if n.op != "region_acc":
            if n.op != "zeros":  # fold_accumulations put a run's zeros ahead of it
                current = None
            continue
        reads = {storage_root(a).id for a in n.args[1:]}
        if current is not None and current[0] == n.attrs["body"].shape and \
                not reads & written:
            current[1].append(n)
        else:
            current, written = (n.attrs["body"].shape, [n]), set()
            groups[n.id] = current[1]
        written.add(storage_root(n).id)
    return groups


def _emit_node(w, node, names, users, consts, layouts):
    op = node.op
    a = [names[x.id] for x in node.args]
    out = names[node.id]
    nd = len(node.shape)
    if op == "region":
        partials = {u.attrs["wrt"]: names[u.id] for u in users[node.id]
                    if u.op == "region_partial"}
        region_lines(w, node, names, partials, consts, scratch=names.get(("scratch", node.id)))
    elif op == "region_partial":
        pass  # written by its region's kernel
    elif op == "region_acc":
        region_acc_lines(w, [node], names, consts)
    elif op == "zeros":
        fill(w, out, "0")
    elif op in ("sum", "max", "min", "prod"):
        x = node.args[0]
        _reduction_lines(w, op, node.dtype, node.attrs["axis"], node.attrs["keepdims"],
                         x.shape, f"{a[0]}{here(len(x.shape))}", out,
                         scratch=names.get(("scratch", node.id)))
    elif op == "matmul":
        _emit_matmul(w, node, a, out, layouts)
    elif op == "reshape":  # materialized: copy through a source-shaped view of the buffer
        src = node.args[0]
        w.emit(f"_r = {out}.reshape({src.shape!r})")
        w.nest(src.shape, [f"_r{here(len(src.shape))} = {a[0]}{here(len(src.shape))}"])
    elif op == "transpose":
        inv = {ax: j for j, ax in enumerate(node.attrs["axes"])}
        idx = "[" + ", ".join(f"i{inv[d]}" for d in range(nd)) + "]" if nd else "[()]"
        w.nest(node.shape, [f"{out}{here(nd)} = {a[0]}{idx}"])
    elif op == "broadcast_to":
        w.nest(node.shape, [f"{out}{here(nd)} = {a[0]}"
                            f"{broadcast_index(node.args[0].shape, nd)}"])
    elif op == "getitem":
        idx = getitem_map(node.attrs["index"], node.args[0].shape)
        w.nest(node.shape, [f"{out}{here(nd)} = {a[0]}{idx}"])
    elif op == "copy":
        w.nest(node.shape, [f"{out}{here(nd)} = {a[0]}{broadcast_index(node.args[0].shape, nd)}"])
    elif op == "concatenate":
        axis, off = node.attrs["axis"], 0
        for x, name in zip(node.args, a, strict=True):
            idx = [f"i{d}" if d != axis else f"{off} + i{d}" for d in range(nd)]
            w.nest(x.shape, [f"{out}[{', '.join(idx)}] = {name}{here(nd)}"])
            off += x.shape[axis]
    elif op in ("scatter", "scatter_add"):
        g = node.args[1] if op == "scatter_add" else node.args[0]
        gname = a[1] if op == "scatter_add" else a[0]
        if op == "scatter":
            fill(w, out, "0")
        idx = getitem_map(node.attrs["index"], node.shape)
        gnd = len(g.shape)
        stmt = "+=" if op == "scatter_add" else "="
        w.nest(g.shape, [f"{out}{idx} {stmt} {gname}{here(gnd)}"])
    elif op == "gather":  # x is C-contiguous storage: read it through a flat view
        w.emit(f"_flat = {a[0]}.reshape(({node.args[0].size},))")
        w.nest(node.shape, [f"{out}{here(nd)} = _flat[{a[1]}{here(nd)}]"])
    elif op in ("scatter_flat", "scatter_add_flat"):
        g, gname, flat = (node.args[0], a[0], a[1]) if op == "scatter_flat" else \
            (node.args[1], a[1], a[2])
        if op == "scatter_flat":
            fill(w, out, "0")
        gnd = len(g.shape)
        w.emit(f"_flat = {out}.reshape(({node.size},))")
        w.nest(g.shape, [f"_flat[{flat}{here(gnd)}] += {gname}{here(gnd)}"])
    elif op == "iadd":
        w.nest(node.shape, [f"{out}{here(nd)} += {a[1]}{broadcast_index(node.args[1].shape, nd)}"])
    elif op == "cumprod_exclusive":
        _emit_scan(w, node, a[0], out, consts.add(node.dtype.type(1)), "*=", inclusive=False)
    elif op == "cumsum":
        _emit_scan(w, node, a[0], out, consts.add(node.dtype.type(0)), "+=", inclusive=True)
    elif op == "cumprod":
        _emit_scan(w, node, a[0], out, consts.add(node.dtype.type(1)), "*=", inclusive=True)
    elif op in LAPACK_OPS:  # the shared LAPACK kernels, workspace from the arena
        work = [names[("scratch", node.id)]] if ("scratch", node.id) in names else []
        extra = [kind_of(node.dtype), *kernel_args(op, node.attrs)]
        w.emit(f"_la_{op}({', '.join(a + [out] + work + [str(x) for x in extra])})")
    elif op == "cumprod_adjoint":
        _emit_cumprod_adjoint(w, node, a, out, consts.add(node.dtype.type(0)))
    elif op == "sort_pack":
        _emit_sort_pack(w, node, a[0], out)
    elif op in ("sort_values", "sort_index"):
        _emit_sort_unpack(w, node, a[1] if op == "sort_values" else a[0], out,
                          "real" if op == "sort_values" else "imag")
    else:
        raise NotImplementedError(f"numba backend: no code for op {op!r}")


def blas_accumulations(nodes, outputs, layouts):
    """matmul node id -> the ``iadd`` that adds it into an adjoint, where
    ``acc += A @ B`` can run as ONE BLAS gemm with beta = 1 into ``acc``
    (:func:`.rt.gemm`) -- no product temporary, no separate add.

    Conditions: the product's only user is ``iadd(acc, product)`` (or a
    reshape of it, whose only user that is); the product
    runs on BLAS (:func:`blas_ready`), with a non-empty inner dimension, into a
    C ``acc`` of its shape (1-D or 2-D); ``acc`` is computed before the product
    and nothing else reads ``acc`` after the product is computed."""
    pos = {n.id: i for i, n in enumerate(nodes)}
    users = {n.id: [] for n in nodes}
    for n in nodes:
        for x in n.args:
            users[x.id].append(n)
    out_ids = {n.id for n in outputs if n is not None}
    found = {}
    for n in nodes:
        if n.op != "iadd":
            continue
        acc, m = n.args
        if m.op == "reshape" and [u.id for u in users[m.id]] == [n.id] and \
                m.args[0].op == "matmul" and m.id not in out_ids:
            m = m.args[0]  # a product reshaped (a vector product made 2-D and back)
            user = n.args[1]
        else:
            user = n
        if m.op != "matmul" or m.id in out_ids or [u.id for u in users[m.id]] != [user.id]:
            continue
        if not (blas_ready(m, layouts) and acc.dtype == m.dtype and acc.size == m.size and
                m.shape and m.args[0].shape[-1] > 0 and layouts[acc.id] == "C"):
            continue
        if pos[acc.id] > pos[m.id] or any(pos[u.id] > pos[m.id] for u in users[acc.id]
                                          if u is not n):
            continue
        found[m.id] = n
    return found


def blas_ready(node, layouts):
    """Whether matmul ``node`` runs as one BLAS gemm (:func:`.rt.gemm`): float,
    one dtype, 1-D or 2-D operands, 2-D ones C or F, 1-D ones C."""
    A, B = node.args
    return node.dtype.kind == "f" and A.dtype == B.dtype == node.dtype and \
        len(node.shape) <= 2 and len(A.shape) <= 2 and len(B.shape) <= 2 and \
        0 < len(A.shape) and 0 < len(B.shape) and \
        all(layouts[x.id] in ("C" if len(x.shape) == 1 else "CF") for x in (A, B))


def _emit_gemm(w, node, a, acc, beta):
    """``acc = A @ B + beta * acc`` by BLAS gemm, 1-D operands and result as
    2-D views (``acc`` C-contiguous)."""
    A, B = node.args
    av = a[0] if len(A.shape) == 2 else f"{a[0]}.reshape((1, {A.shape[0]}))"
    bv = a[1] if len(B.shape) == 2 else f"{a[1]}.reshape(({B.shape[0]}, 1))"
    rows = A.shape[0] if len(A.shape) == 2 else 1
    cols = B.shape[1] if len(B.shape) == 2 else 1
    ov = acc if len(node.shape) == 2 else f"{acc}.reshape(({rows}, {cols}))"
    note = "  # BLAS gemm, beta = 1: accumulates in place" if beta else "  # BLAS gemm"
    w.emit(f"_gemm({av}, {bv}, {ov}, {float(beta)!r}){note}")


def _emit_matmul(w, node, a, out, layouts):
    A, B = node.args
    if blas_ready(node, layouts):
        if A.shape[-1] == 0:
            fill(w, out, "0")
        else:
            _emit_gemm(w, node, a, out, 0)  # straight into the buffer
        return
    M, N, K = node.shape[-2], node.shape[-1], A.shape[-1]
    batch = node.shape[:-2]
    nb = len(batch)

    def bidx(shape):
        return [("0" if s == 1 else f"i{nb - len(shape[:-2]) + d}")
                for d, s in enumerate(shape[:-2])]

    ai, bi, oi = bidx(A.shape), bidx(B.shape), [f"i{d}" for d in range(nb)]
    lines = [f"for m in range({M}):",
             f"    for j in range({N}):",
             f"        {out}[{', '.join(oi + ['m', 'j'])}] = 0",
             f"    for k in range({K}):",
             f"        aik = {a[0]}[{', '.join(ai + ['m', 'k'])}]",
             f"        for j in range({N}):",
             f"            {out}[{', '.join(oi + ['m', 'j'])}] += aik * "
             f"{a[1]}[{', '.join(bi + ['k', 'j'])}]"]
    w.nest(batch, lines)


def _emit_scan(w, node, x, out, init, update, inclusive):
    """A running ``p {update} x`` along ``axis`` (from the end when
    ``reverse``), stored after the update (``inclusive``) or before it."""
    axis, rev = node.attrs["axis"], node.attrs.get("reverse", False)
    nd = len(node.shape)
    n = node.shape[axis]
    other = [s for d, s in enumerate(node.shape) if d != axis]
    names = []
    j = 0
    for d in range(nd):
        if d == axis:
            names.append("t" if not rev else f"{n - 1} - t")
        else:
            names.append(f"i{j}")
            j += 1
    idx = "[" + ", ".join(names) + "]"
    store, step = f"{out}{idx} = p", f"p {update} {x}{idx}"
    w.nest(other, [f"p = {init}", f"for t in range({n}):",
                   f"    {step if inclusive else store}", f"    {store if inclusive else step}"])


def _emit_cumprod_adjoint(w, node, a, out, zero):
    """``S_t = g_t + x_{t+1} S_{t+1}`` along ``axis``, from the end."""
    axis, nd = node.attrs["axis"], len(node.shape)
    n = node.shape[axis]
    other = [s for d, s in enumerate(node.shape) if d != axis]
    names = [f"i{d - (d > axis)}" if d != axis else "{t}" for d in range(nd)]
    at = "[" + ", ".join(names) + "]"
    assert node.args[0].shape == node.shape, "a cotangent has its value's shape"
    w.nest(other, [f"p = {zero}", f"for t in range({n} - 1, -1, -1):",
                   f"    if t < {n - 1}:",
                   f"        p *= {a[1]}{at.format(t='t + 1')}",
                   f"    p += {a[0]}{at.format(t='t')}",
                   f"    {out}{at.format(t='t')} = p"])


def _sort_less(a, b):
    """Source of ``a < b`` for complex scalars ordered like numpy sorts them:
    by real part, NaN last, then by imaginary part (never NaN here)."""
    return (f"({a}.real < {b}.real or ({a}.real == {b}.real and {a}.imag < {b}.imag) or "
            f"({b}.real != {b}.real and ({a}.real == {a}.real or {a}.imag < {b}.imag)))")


def _emit_sort_pack(w, node, x, out):
    """Each row of ``x`` along ``axis`` into ``out`` (the axis last) as
    complex (value, index) pairs, then sorted in place: insertion sort for
    short rows, heapsort otherwise (the keys are distinct, so any sort gives
    the stable order; neither needs memory of its own)."""
    axis = node.attrs["axis"]
    xshape = node.args[0].shape
    n, other = xshape[axis], node.shape[:-1]
    xi = "[" + ", ".join("_sk" if d == axis else f"i{d - (d > axis)}"
                         for d in range(len(xshape))) + "]"
    pre = "".join(f"i{d}, " for d in range(len(other)))

    def at(e):
        return f"{out}[{pre}{e}]"

    lines = [f"for _sk in range({n}):", f"    {at('_sk')} = complex({x}{xi}, _sk)"]
    if n <= 16:
        lines += [f"for _st in range(1, {n}):",
                  f"    _sv = {at('_st')}",
                  "    _sj = _st",
                  "    while _sj > 0:",
                  f"        _su = {at('_sj - 1')}",
                  f"        if not {_sort_less('_sv', '_su')}:",
                  "            break",
                  f"        {at('_sj')} = _su",
                  "        _sj -= 1",
                  f"    {at('_sj')} = _sv"]
    else:  # n // 2 sifts build the heap, then n - 1 take its top to the end
        h = n // 2
        lines += [f"for _sq in range({h + n - 1}):",
                  f"    if _sq < {h}:",
                  f"        _sr = {h - 1} - _sq",
                  f"        _se = {n}",
                  "    else:",
                  f"        _se = {n + h - 1} - _sq",
                  f"        _sv = {at('_se')}",
                  f"        {at('_se')} = {at('0')}",
                  f"        {at('0')} = _sv",
                  "        _sr = 0",
                  f"    _sv = {at('_sr')}",
                  "    while True:",
                  "        _sc = 2 * _sr + 1",
                  "        if _sc >= _se:",
                  "            break",
                  f"        _su = {at('_sc')}",
                  "        if _sc + 1 < _se:",
                  f"            _sw = {at('_sc + 1')}",
                  f"            if {_sort_less('_su', '_sw')}:",
                  "                _sc += 1",
                  "                _su = _sw",
                  f"        if not {_sort_less('_sv', '_su')}:",
                  "            break",
                  f"        {at('_sr')} = _su",
                  "        _sr = _sc",
                  f"    {at('_sr')} = _sv"]
    w.nest(other, lines)


def _emit_sort_unpack(w, node, packed, out, part):
    """``out`` (the unsorted layout) from a sort_pack's ``part`` (``real``:
    the values, ``imag``: the indices)."""
    axis, nd = node.attrs["axis"], len(node.shape)
    pi = "[" + ", ".join([f"i{d}" for d in range(nd) if d != axis] + [f"i{axis}"]) + "]"
    value = f"{packed}{pi}.{part}"
    w.nest(node.shape, [f"{out}{here(nd)} = " + (value if part == "real" else f"int({value})")])


# ----------------------------------------------------------------------------
# the program
# ----------------------------------------------------------------------------


def _literal(value):
    """Exact source text of a numpy scalar."""
    v = value.item()
    if isinstance(v, float):
        text = f"float.fromhex({v.hex()!r})" if np.isfinite(v) else f"float({str(v)!r})"
    else:
        text = repr(v)
    return f"np.{value.dtype.name}({text})"


class NumbaProgram:
    """A compiled whole-plan function and the Python calls that feed it.

    The function is compiled for ONE signature by a dispatcher of its own that
    then refuses to compile more, so an unusual argument never triggers a
    compilation mid-loop.  It takes every array as an *object* -- the integer
    ``id(array)`` -- and reads numpy's array struct itself (:mod:`.rt`): no
    argument is unboxed, so a call makes no numba runtime allocation.  Before
    writing anything it checks that each argument is an exact ndarray of the
    plan's shape and dtype, native byte order, aligned and C-contiguous (and
    writeable for outputs), and that no two of them overlap, and raises
    ``ValueError`` otherwise.  :meth:`run` stages anything else (non-contiguous
    arrays, another float dtype, subclasses) through buffers made once.

    Where :data:`.rt.ABI` could not be established the function takes the
    arrays themselves (numba unboxes each: one NRT allocation per array per
    call) and ``objects`` is False; the checks are the same.

    Attributes
    ----------
    direct : dict
        buffer node id -> output position, for buffers computed straight
        into the caller's result (set by :func:`compile_numba_program`).
    parts : tuple
        ``(dispatcher, leading, constants)``: ``fn(*ins, *outs)`` is
        ``dispatcher(*leading, *ins, *constants, *outs)`` (for callers that
        generate their own call, like the plan's fast path).
    fn : callable
        ``fn(*inputs, *outputs)`` for canonical arguments, given as
        ``id(array)`` when :attr:`objects` (raises ``TypeError`` for other
        argument types, ``ValueError`` when a check fails).
    objects : bool
        Whether arrays are passed as ``id(array)``.
    source : str
        The generated module.
    heavy : bool
        Whether the plan is large enough to release the GIL (``nogil``,
        ``prange``); calls on one program are then serialized by :attr:`lock`.
    lock : lock
        Serializes what shares this program's workspace: every :meth:`run`
        (its staging buffers, the call and the copies back) and, for a heavy
        program, every :meth:`call`.  A plan gives all its programs its own
        (re-entrant) lock, since they share one arena.  A light program's
        :meth:`call` takes no lock: it holds the GIL from its checks to its
        last write, which makes it atomic.
    blas_limited : bool
        Whether the plan has ``prange`` loops and calls BLAS: it then runs with
        BLAS single-threaded (:mod:`.threads`; one thread pool at a time).
        A small plan holds the GIL while it runs, which serializes it at no
        cost (a lock costs ~0.3 us, as much as the whole n = 100 kernel).
    """

    def __init__(self, fn, source, heavy, in_specs, out_specs, keep, objects):
        self.fn = fn
        self.source = source
        self.heavy = heavy
        self.objects = objects
        self.lock = threading.RLock()
        self._in_specs = [(tuple(s), np.dtype(d)) for s, d in in_specs]
        self._out_specs = [(tuple(s), np.dtype(d)) for s, d in out_specs]
        self._staged = {}
        self._keep = keep  # arrays whose addresses the compiled call holds
        self.blas_limited = False

    def _stage(self, key, shape, dtype):
        buf = self._staged.get(key)
        if buf is None:
            buf = self._staged[key] = np.empty(shape, dtype)
        return buf

    def run(self, inputs, outputs):
        """Run on any arrays of the plan's shapes (validated by the caller):
        the staging, the call and the copies back, under :attr:`lock`."""
        with self.lock:
            ins, outs, copies = [], [], []
            for i, a in enumerate(inputs):
                shape, dtype = self._in_specs[i]
                if not (type(a) is np.ndarray and a.dtype == dtype and a.flags.c_contiguous
                        and a.flags.aligned and (self.objects or a.flags.writeable)):
                    buf = self._stage(("in", i), shape, dtype)
                    np.copyto(buf, a, casting="unsafe")
                    a = buf
                ins.append(a)
            for k, o in enumerate(outputs):
                shape, dtype = self._out_specs[k]
                if not (type(o) is np.ndarray and o.dtype == dtype and o.flags.c_contiguous
                        and o.flags.aligned and o.flags.writeable):
                    buf = self._stage(("out", k), shape, dtype)
                    copies.append((o, buf))
                    o = buf
                outs.append(o)
            self.call(ins, outs)
            for o, buf in copies:
                np.copyto(o, buf, casting="unsafe")

    def call(self, ins, outs):
        """The compiled function on canonical arrays (the caller keeps them alive)."""
        args = [id(a) for a in ins + outs] if self.objects else ins + outs
        if not self.heavy:
            return self.fn(*args)  # holds the GIL throughout: atomic
        with self.lock:
            if self.blas_limited:
                with SingleThreadedBlas():
                    return self.fn(*args)
            return self.fn(*args)


def _type_nums(dtype):
    """numpy's type numbers of every dtype equal to ``dtype`` (int64 is both
    ``long`` and ``longlong`` on some platforms)."""
    nums = set()
    for code in np.typecodes["All"]:
        try:
            d = np.dtype(code)
        except TypeError:
            continue
        if d == dtype:
            nums.add(d.num)
    return sorted(nums | {np.dtype(dtype).num})


def view_at(address, shape, dtype, order="C"):
    """Source of the array of ``shape`` at ``address`` (an expression), by the
    intrinsic :func:`.rt.view_at`: sizes given as ``np.int64`` (not literals,
    which numba would type one by one), a 1-D size as a number, others as a
    tuple.  A view costs numba ~10 ms to compile: a plan cuts dozens, so views
    nothing reads are not emitted (:func:`_drop_unused_views`)."""
    shape = tuple(int(d) for d in shape)
    shape = shape if order == "C" else shape[::-1]
    dt = f"np.{np.dtype(dtype).name}"
    if len(shape) == 1:
        src = f"_view({address}, np.int64({shape[0]}), {dt})"
    else:  # 0-d or >= 2-d: a tuple literal of np.int64 sizes
        dims = ", ".join(f"np.int64({d})" for d in shape)
        src = f"_view({address}, ({dims}), {dt})"
    return src + (".T" if order == "F" else "")


class _Checks:
    """The checks opening a generated plan (before any write), driven by a
    table the plan owns (:func:`.rt.check_arrays`): one line per array in the
    generated source, so the checks cost almost nothing to compile."""

    def __init__(self, objects):
        self.objects = objects
        self.records = []  # (name, shape, dtype, flags, written, order)

    def add(self, name, shape, dtype, written, order="C"):
        from . import rt

        flags = rt.ALIGNED | (rt.C_CONTIGUOUS if order == "C" else rt.F_CONTIGUOUS) | \
            (rt.WRITEABLE if written else 0)
        self.records.append((name, tuple(int(d) for d in shape), np.dtype(dtype), flags,
                             written, order))

    def table(self):
        """The int64 check table (object fields filled per call)."""
        from . import rt

        n = len(self.records)
        dims = [d for _, shape, *_ in self.records for d in shape]
        t = np.zeros(n * rt.RECORD + len(dims) + 1, np.int64)
        at = n * rt.RECORD
        for j, (_, shape, dtype, flags, written, _) in enumerate(self.records):
            nums = _type_nums(dtype)
            r = j * rt.RECORD
            t[r + rt.NDIM], t[r + rt.FLAGS] = len(shape), flags
            t[r + rt.TYPE1], t[r + rt.TYPE2] = nums[0], nums[-1]
            t[r + rt.NBYTES], t[r + rt.WRITTEN] = _nbytes(shape, dtype), int(written)
            t[r + rt.DIMS] = at
            t[at:at + len(shape)] = shape
            at += len(shape)
        return t

    def lines(self, size):
        from . import rt

        out = []
        if not self.objects:  # numba typed the arrays; their shapes remain
            for name, shape, *_ in self.records:
                out += [f"if {name}.shape != {shape!r}:",
                        f"    raise ValueError('{name} does not have shape {shape}')"]
        out.append(f"_t = _view(_tabp, np.int64({size}), np.int64)")
        for j, (name, *_) in enumerate(self.records):
            src = f"{name}p" if self.objects else f"{name}.ctypes.data"
            out.append(f"_t[{j * rt.RECORD + rt.OBJ}] = {src}")
        out += [f"_e = _check(_ndt, _tabp, {len(self.records)}, {size}, "
                f"{int(self.objects)}, _ABI)",
                "if _e >= 0:",
                f"    if _e % 4 == {rt.OVERLAP}:",
                "        raise ValueError('out buffers must not share memory with each other "
                "or with the arguments')",
                "    raise ValueError('an argument or result buffer is not an aligned, "
                "contiguous array of the plan\\'s dtype and shape')"]
        if self.objects:
            for name, shape, dtype, _, _, order in self.records:
                out.append(f"{name}d = _ld64({name}p + _ABI[1])")
                out.append(f"{name} = " + view_at(f"{name}d", shape, dtype, order))
        return out

    def addresses(self):
        """name -> (data address expression, shape, dtype, "C") of the C-contiguous arrays."""
        if not self.objects:
            return {}
        return {name: (f"{name}d", shape, dtype, order)
                for name, shape, dtype, *_, order in self.records if order == "C"}


def _nbytes(shape, dtype):
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def work_estimate(nodes):
    """Rough count of element operations of a plan (decides ``heavy``)."""
    total = 0
    for n in nodes:
        if n.op == "matmul":
            total += n.size * n.args[0].shape[-1]
        elif n.op == "region":
            total += int(np.prod(n.attrs["body"].shape))
        else:
            total += n.size
    return total


# fastmath "contract" only: fused multiply-adds, no reassociation (rounding
# stays that of the written order, NaN and inf semantics unchanged)
_FLAGS = 'cache=True, error_model="numpy", fastmath={"contract"}'
# our own prange loops, and nothing numba would parallelize or merge on its own:
# its loop fusion merges neighbouring prange loops, and cannot see that two of
# them use one arena slot in turn (a buffer that dies in the first, another
# born in the second), so the merged loop overwrote values still to be read
_PARALLEL = (', parallel={"prange": True, "fusion": False, "comprehension": False, '
             '"setitem": False, "numpy": False, "stencil": False, "inplace_binop": False}')


class _Kernels:
    """Node code that occurs more than once, compiled once as a kernel.

    numba's compile time grows with the size of the function: a plan of K
    identical blocks (quadratic forms, layers of one shape) would lower and
    optimize the same loops K times.  Each node's code is written apart
    (``emit`` leaves a marker in the plan's lines); :meth:`finish` renames its
    free variables (the arrays it touches) to parameters and its locals to
    canonical names, and code that then reads the same as another node's
    becomes one ``@njit`` kernel the plan calls at each place -- a direct
    native call, no dispatch (LLVM may still inline it).  Code that occurs
    once stays inline: a separate numba function costs ~0.15 s to compile
    however small, more than inlining it."""

    _MARK = "#\x00chunk "

    def __init__(self, write, addresses):
        self._write = write
        self._addresses = addresses  # name -> (address, shape, dtype, order), filled as written
        self.chunks = []  # (lines at indent 0, parallel)

    def emit(self, w, node, write=None):
        """Write ``node``'s code (by ``write(writer)`` when given)."""
        sub = LoopWriter(indent=0)
        if write is None:
            self._write(sub, node)
        else:
            write(sub)
        w.emit(f"{self._MARK}{len(self.chunks)}")
        self.chunks.append((sub.lines, sub.parallel))

    def _call(self, text, free, parallel):
        """``(kernel key, call arguments)`` of canonical code ``text`` whose
        free variables are ``free``.  A C- or F-contiguous array whose data
        address the plan knows goes as that address, its view cut in the
        kernel (a view costs numba ~10 ms to compile: once per kernel, not
        once per use); anything else goes as itself."""
        prologue, params, args = [], [], []
        for j, v in enumerate(free):
            if v in self._addresses:
                address, shape, dtype, order = self._addresses[v]
                prologue.append(f"_p{j} = " + view_at(f"_a{j}", shape, dtype, order))
                params.append(f"_a{j}")
                args.append(address)
            else:
                params.append(f"_p{j}")
                args.append(v)
        return (tuple(params), tuple(prologue + text.splitlines()), parallel), args

    def finish(self, lines, header, params, flags=_FLAGS):
        """(plan body lines, kernel definition lines, whether inlined code has
        a prange).  ``lines``: the plan's body with markers; ``header``: the
        module's lines before it (its global names); ``params``: the plan's."""
        import ast
        import builtins
        import textwrap

        module_names = set(dir(builtins))
        for t in ast.walk(ast.parse("\n".join(header))):
            if isinstance(t, ast.alias):
                module_names.add((t.asname or t.name).split(".")[0])
            elif isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store):
                module_names.add(t.id)
        # names the plan itself defines (a kernel may read them)
        plain = textwrap.dedent("\n".join("    pass" if x.lstrip().startswith(self._MARK)
                                          else x for x in lines))
        plan_names = [t for t in ast.walk(ast.parse(plain)) if isinstance(t, ast.Name)]
        defined = set(params) | {t.id for t in plan_names if isinstance(t.ctx, ast.Store)}
        plan_reads = {t.id for t in plan_names if isinstance(t.ctx, ast.Load)}
        canon = [_canonical(chunk_lines, module_names) for chunk_lines, _ in self.chunks]
        read_anywhere = set().union(*(c[1] for c in canon)) if canon else set()
        calls, counts = {}, {}
        for k, (text, free, stored) in enumerate(canon):
            # outline only code that talks to the plan through what the plan
            # defines: it reads nothing another chunk's code assigns, and
            # assigns nothing the plan or other code reads
            if text and set(free) <= defined and \
                    not stored & (defined | plan_reads | read_anywhere):
                calls[k] = self._call(text, free, self.chunks[k][1])
                counts[calls[k][0]] = counts.get(calls[k][0], 0) + 1
        kernels, defs, body, inline_parallel = {}, [], [], False
        for line in lines:
            if not line.lstrip().startswith(self._MARK):
                body.append(line)
                continue
            pad = line[:len(line) - len(line.lstrip())]
            k = int(line.lstrip()[len(self._MARK):])
            chunk_lines, parallel = self.chunks[k]
            if k not in calls or counts[calls[k][0]] < 2:  # occurs once: inline
                body.extend(pad + x for x in chunk_lines)
                inline_parallel = inline_parallel or parallel
                continue
            key, args = calls[k]
            name = kernels.get(key)
            if name is None:
                name = kernels[key] = f"_kernel{len(kernels)}"
                params, code, _ = key
                defs += ["", "", f"@njit({flags}" + (_PARALLEL if parallel else "") + ")",
                         f"def {name}({', '.join(params)}):"] + ["    " + x for x in code]
            body.append(f"{pad}{name}({', '.join(args)})")
        return _drop_unused_views(body), defs, inline_parallel


_VIEW_LINE = re.compile(r"^    (\w+) = (?:_view\(|\w+\.T$|\w+\.reshape\()")
_WORD = re.compile(r"\w+")


def _drop_unused_views(lines):
    """The plan's lines without the views (top-level ``name = <view>`` lines)
    nothing reads: numba types and lowers every line, used or not."""
    lines = list(lines)
    while True:
        uses = {}
        for line in lines:
            m = _VIEW_LINE.match(line)
            code = line.split("#", 1)[0]
            for word in _WORD.findall(code[m.end(1):] if m else code):
                uses[word] = uses.get(word, 0) + 1
        keep = [x for x in lines
                if not ((m := _VIEW_LINE.match(x)) and uses.get(m.group(1), 0) == 0)]
        if len(keep) == len(lines):
            return keep
        lines = keep


def _canonical(lines, module_names):
    """``(text, free variables, assigned names)`` of a chunk of code, the text
    with its free variables renamed ``_p0, _p1, ...`` and the names it assigns
    ``_l0, _l1, ...`` in order of first appearance (so two nodes' code that
    differs only in names reads the same)."""
    import ast

    tree = ast.parse("\n".join(lines))
    names = sorted((t for t in ast.walk(tree) if isinstance(t, ast.Name)),
                   key=lambda t: (t.lineno, t.col_offset))
    stored = {t.id for t in names if isinstance(t.ctx, ast.Store)}
    order = []
    for t in names:
        if t.id not in order and t.id not in module_names:
            order.append(t.id)
    free = [v for v in order if v not in stored]
    rename = {v: f"_p{j}" for j, v in enumerate(free)}
    rename.update({v: f"_l{j}" for j, v in enumerate(v for v in order if v in stored)})

    if not rename:
        return "\n".join(lines), free, stored
    # rename in the text (comments kept), never an attribute (``x.T``)
    word = re.compile(r"(?<![.\w])(" + "|".join(map(re.escape, rename)) + r")(?!\w)")
    text = []
    for line in lines:
        code, hash_, comment = line.partition("#")
        text.append(word.sub(lambda m: rename[m.group(1)], code) + hash_ + comment)
    return "\n".join(text), free, stored


def compile_numba_program(nodes, inputs, outputs, memplan, buffers, in_specs, out_specs,
                          name="plan", poison=False, given=()):
    """Generate, cache and compile the whole-plan function.

    ``in_specs`` / ``out_specs``: ``(shape, dtype)`` of each input and output
    buffer.  ``given``: ids of nodes an earlier program of the plan computed
    (their buffers are read, not written; see :mod:`hybridad.plans.higher`).
    Returns a :class:`NumbaProgram`.
    """
    users = {n.id: [] for n in nodes}
    for n in nodes:
        for x in n.args:
            users[x.id].append(n)
    # the nodes this program computes (``given`` ones an earlier program did)
    computed = [n for n in nodes if n.id not in given] if given else nodes
    from . import rt

    objects = rt.ABI is not None  # arrays passed as id(array), see NumbaProgram
    consts = Constants()
    names, params, const_args = {}, [], []  # const_args: (array, passed as object)
    arenas = sorted({dt for dt, *_ in memplan.slots.values()} |
                    {dt for dt, *_ in memplan.scratch.values()}, key=lambda d: d.str)
    params += [f"ar_{dt.name}p" for dt in arenas] + ["_tabp", "_ndt"]
    checks = _Checks(objects)
    for i, (shape, dtype) in enumerate(in_specs):
        checks.add(f"a{i}", shape, dtype, written=False)
    for k, (shape, dtype) in enumerate(out_specs):
        checks.add(f"o{k}", shape, dtype, written=True)
    w = LoopWriter()
    layouts = numba_layouts(nodes, memplan)
    input_pos = {n.id: i for i, n in enumerate(inputs)}
    output_ids = {n.id for n in outputs if n is not None}
    direct = _direct_outputs(nodes, outputs, memplan)
    # variable -> (data address, shape, dtype, order) of contiguous arrays, for cheap views
    addresses = checks.addresses()
    accumulate = {m: add for m, add in blas_accumulations(nodes, outputs, layouts).items()
                  if m not in given}
    kernels = _Kernels(lambda sub, n: _emit_node(sub, n, names, users, consts, layouts),
                       addresses)
    folded = {n.id for n in accumulate.values()}  # iadds done by their gemm
    acc_groups = region_acc_groups(computed)  # first node id -> the region_accs of one loop
    in_group = {m.id for ms in acc_groups.values() for m in ms[1:]}
    for n in nodes:  # buffer views, cut once at the top
        if n.id in direct:
            names[n.id] = f"o{direct[n.id]}"  # computed straight into the caller's buffer
        elif memplan.storage[n.id] == "buffer":
            dt, off, nbytes, shape = memplan.slots[n.id]
            names[n.id] = f"b{n.id}"
            addresses[f"b{n.id}"] = (f"ar_{dt.name}p + {off}", shape, dt, "C")
            w.emit(f"b{n.id} = " + view_at(*addresses[f"b{n.id}"]))
    for nid, (dt, off, count) in memplan.scratch.items():
        names[("scratch", nid)] = f"sc{nid}"
        addresses[f"sc{nid}"] = (f"ar_{dt.name}p + {off}", (count,), dt, "C")
        w.emit(f"sc{nid} = " + view_at(*addresses[f"sc{nid}"]))
    dying = poison_schedule(memplan) if poison else {}

    def poison_lines(keys):
        for key in keys:
            var = f"sc{key[1]}" if isinstance(key, tuple) else names.get(key)
            if var is not None and var.startswith(("b", "sc")):
                w.emit(f"{var}[...] = np.nan  # poison: dead")
    if poison and not given:  # every slot is dead before it is written
        poison_lines(list(dying.get("start", ())))
    params += [f"a{i}p" if objects else f"a{i}" for i in range(len(inputs))]
    for n in nodes:
        storage = memplan.storage[n.id]
        if storage == "input":
            names[n.id] = f"a{input_pos[n.id]}"
        elif storage == "const":
            names[n.id] = f"c{n.id}"
            only_inlined = n.is_literal and n.size == 1 and n.id not in output_ids and all(
                u.op == "region" for u in users[n.id])
            v = n.attrs["value"]
            order = "C" if v.flags.c_contiguous else "F" if v.flags.f_contiguous else None
            if only_inlined:
                pass
            elif objects and order and v.flags.aligned and v.dtype.isnative:
                params.append(f"c{n.id}p")  # by object, like the inputs
                const_args.append((v, True))
                checks.add(f"c{n.id}", v.shape, v.dtype, written=False, order=order)
                if order == "C":
                    addresses[f"c{n.id}"] = (f"c{n.id}d", v.shape, v.dtype, "C")
            else:
                params.append(f"c{n.id}")
                const_args.append((v, False))
        elif n.id in given and storage != "view":  # an earlier program's: in its buffer
            if storage == "alias":
                names[n.id] = names[memplan.alias_of[n.id].id]
        elif storage == "alias":
            names[n.id] = names[memplan.alias_of[n.id].id]
            w.emit(f"# {format_node(n)}" + (" (done by the gemm above)" if n.id in folded
                                            else " (in the loop above)" if n.id in in_group
                                            else ""))
            if n.id in acc_groups:
                members = acc_groups[n.id]
                for m in members[1:]:  # their targets, named before the loop is written
                    names[m.id] = names[memplan.alias_of[m.id].id]
                kernels.emit(w, n, lambda sub, members=members: region_acc_lines(
                    sub, members, names, consts))
            elif n.id not in folded and n.id not in in_group:
                kernels.emit(w, n)
        elif n.id in accumulate:
            names[n.id] = f"b{n.id}"  # never written: the product goes into the adjoint
            w.emit(f"# {format_node(n)}")
            acc = accumulate[n.id].args[0]
            kernels.emit(w, n, lambda sub, n=n, acc=acc: _emit_gemm(
                sub, n, [names[x.id] for x in n.args], names[acc.id] + (
                    f".reshape({n.shape!r})" if acc.shape != n.shape else ""), 1))
        elif storage == "view":
            names[n.id] = f"v{n.id}"
            src = names[n.args[0].id]
            c_source = src in addresses and addresses[src][3] == "C"
            if n.op == "reshape" and c_source:  # a C array's data, reshaped
                addresses[f"v{n.id}"] = (addresses[src][0], n.shape, n.dtype, "C")
                w.emit(f"v{n.id} = " + view_at(*addresses[f"v{n.id}"]))
            elif n.op == "getitem" and c_source and \
                    (off := contiguous_getitem_offset(n)) is not None:  # address + offset
                addresses[f"v{n.id}"] = (f"{addresses[src][0]} + {off}" if off else
                                         addresses[src][0], n.shape, n.dtype, "C")
                w.emit(f"v{n.id} = " + view_at(*addresses[f"v{n.id}"]))
            elif n.op == "transpose" and n.attrs["axes"] == (1, 0) and c_source:  # as F
                addresses[f"v{n.id}"] = (addresses[src][0], n.shape, n.dtype, "F")
                w.emit(f"v{n.id} = " + view_at(*addresses[f"v{n.id}"]))
            elif n.op == "reshape":
                w.emit(f"v{n.id} = {src}.reshape({n.attrs['shape']!r})")
            elif n.op == "transpose" and n.attrs["axes"] == (1, 0):
                w.emit(f"v{n.id} = {src}.T")  # typed F-contiguous (BLAS-ready) by numba
            elif n.op == "transpose":
                w.emit(f"v{n.id} = np.transpose({src}, {n.attrs['axes']!r})")
            elif n.op == "broadcast_to":
                w.emit(f"v{n.id} = np.broadcast_to({src}, {n.attrs['shape']!r})")
            elif n.op == "getitem":  # strided, read in place by regions (materialize_for_numba)
                w.emit(f"v{n.id} = {src}[{index_source(n.attrs['index'])}]")
            else:
                raise AssertionError(f"view {n.op} should have been materialized")
        else:
            w.emit(f"# {format_node(n)}")
            kernels.emit(w, n)
        if poison:
            poison_lines(dying.get(n.id, ()))
    params += [f"o{k}p" if objects else f"o{k}" for k in range(len(outputs))]
    w.emit("# outputs")
    for k, n in enumerate(outputs):
        if n is None:
            fill(w, f"o{k}", "0")
        elif names[n.id] != f"o{k}":
            nd = len(n.shape)
            w.nest(n.shape, [f"o{k}{here(nd)} = {names[n.id]}{here(nd)}"])
    header = ["import numpy as np", "from numba import get_thread_id, njit, prange",
              vector_imports(),
              "from hybridad.backends.numba.rt import check_arrays as _check, gemm as _gemm, "
              "load_i64 as _ld64, view_at as _view",
              "from hybridad.backends.numba.rt import fold_max as _fold_max, "
              "fold_min as _fold_min, "
              "fold_prod as _fold_prod, fold_sum as _fold_sum, "
              "sum_compensated as _sum_compensated",
              "from hybridad.ops.lapack import " +
              ", ".join(f"{op} as _la_{op}" for op in LAPACK_OPS), ""]
    abi = tuple(rt.ABI[k] for k in rt.ABI_FIELDS) if objects else (0,) * 9
    header.append(f"_ABI = {abi!r}  # see rt.ABI")
    header += [f"{k} = {_literal(v)}" for k, v in consts.namespace().items()]
    header += consts.kernel_header()
    table = checks.table()
    guards = ["    " + line for line in checks.lines(table.size)]
    # numba's disk cache rebuilds the environment of every function the plan
    # calls from its module: a user function defined where no module can be
    # imported from (exec'd code) makes the plan uncacheable
    cacheable = all(k.cacheable for k in consts.kernels.values())
    base_flags = _FLAGS if cacheable else _FLAGS.replace("cache=True, ", "")
    body, kernel_defs, parallel = kernels.finish(guards + w.lines, header, params, base_flags)
    parallel = parallel or w.parallel
    heavy = parallel or work_estimate(nodes) >= PARALLEL_MIN
    fn_name = "plan_fn"
    flags = base_flags + (", nogil=True" if heavy else "") + (_PARALLEL if parallel else "")
    signature = f"def {fn_name}({', '.join(params)}):"
    source = "\n".join(header + kernel_defs + ["", "", f"@njit({flags})", signature] + body) + "\n"
    arena_args = [memplan.arenas[dt].ctypes.data for dt in arenas]
    if objects:
        fixed = arena_args + [table.ctypes.data, id(np.ndarray)]
        protos = fixed + [0] * len(inputs) + [0 if obj else v for v, obj in const_args] + \
            [0] * len(outputs)
    else:
        fixed = arena_args + [table.ctypes.data, 0]
        protos = fixed + [np.empty(s, d) for s, d in in_specs] + [v for v, _ in const_args] + \
            [np.empty(s, d) for s, d in out_specs]
    bound = [id(v) if obj else v for v, obj in const_args]
    own = _own_dispatcher(source, fn_name, protos, cacheable)
    keep = [memplan.arenas[dt] for dt in arenas] + [v for v, _ in const_args] + [table]
    program = NumbaProgram(_bind(own, fixed, bound, len(inputs), len(outputs)), source, heavy,
                           in_specs, out_specs, keep, objects)
    program.parts = (own, fixed, bound)
    program.direct = direct
    program.blas_limited = bool(parallel) and re.search(r"_gemm\(|_la_\w+\(", source) is not None
    return program


def _own_dispatcher(source, fn_name, protos, cacheable=True):
    """A dispatcher of the generated function compiled for the types of
    ``protos`` only (from numba's disk cache when warm); it compiles nothing
    else, so an argument of another type raises ``TypeError``.  Shared by
    every plan with the same source (:func:`.cache.compiled`): a rebuilt plan
    adds no machine code."""
    import numba

    return cache.compiled(source, fn_name, tuple(numba.typeof(p) for p in protos), cacheable)


def _bind(jitted, fixed, consts, n_in, n_out):
    """``call(*inputs, *outputs)``: the compiled function with the arenas'
    addresses, numpy's array type and the constants bound (a small generated
    Python function: no per-call packing)."""
    ns = {"_j": jitted}
    args = []
    for k, value in enumerate(fixed):
        ns[f"_f{k}"] = value
        args.append(f"_f{k}")
    ins = [f"a{i}" for i in range(n_in)]
    args += ins
    for k, c in enumerate(consts):
        ns[f"_c{k}"] = c
        args.append(f"_c{k}")
    outs = [f"o{k}" for k in range(n_out)]
    args += outs
    src = f"def call({', '.join(ins + outs)}):\n    return _j({', '.join(args)})\n"
    exec(compile(src, "<hybridad numba call>", "exec"), ns)  # noqa: S102
    return ns["call"]


def _direct_outputs(nodes, outputs, memplan):
    """buffer node id -> output position, for gradient outputs computed straight
    into the caller's buffer (no copy at the end; outputs reach the compiled
    function C-contiguous and of the plan's dtype, see :class:`NumbaProgram`):
    the memory plan's ``direct`` roots (they have no arena slot), placed at
    this program's output positions."""
    by_id = {n.id: n for n in nodes}
    direct = {}
    for k, n in enumerate(outputs):
        if k == 0 or n is None:
            continue
        root = by_id[n.id]
        while memplan.storage[root.id] == "alias":
            root = memplan.alias_of[root.id]
        if root.id in memplan.direct:
            direct.setdefault(root.id, k)
    return direct
