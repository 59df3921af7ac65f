"""The generated source of each non-region node of a plan: copies, scatters,
in-place accumulations (grouped into one loop where they can be), matmul as
gemm or loops, scans, sort."""

from __future__ import annotations

import math

from ...ir.graph import users_of
from ...ir.registry import storage_roots
from ...ops import storage_root
from ...ops.lapack_names import LAPACK_OPS, kernel_args, kind_of
from .gather import gather_starts
from .leading import leading_blocks, summed_rows
from .loops import (broadcast_index, fill, getitem_map, here, region_acc_lines, region_lines,
                    whole_array)
from .loops import reduction_lines as _reduction_lines
from .emit_pairs import emit_matvec, matvec_call, matvec_pair, matvec_two
from .fourier import fourier
from .host_kernels import host_call, host_run, host_ufunc
from .machine import machine
from .simd import SERIAL


def region_acc_groups(nodes):
    """first node id -> list of ``region_acc`` nodes that run as one loop:
    consecutive ones over the same loop shape, none reading what another adds
    into, none adding into it at other positions (``g[:-1] += a``, ``g[1:] +=
    b`` in one loop over the body: a dependence between iterations,
    unvectorized, 2.6x slower at 10^4; in parallel, two threads on one
    element) -- unless all of them add into one 1-D buffer through shifted
    slices, which run as one loop over the buffer, each element gathering
    its adds (:func:`.gather.gather_starts`)."""
    groups, current, written = {}, None, {}
    roots = storage_roots(nodes)  # (one sweep: an accumulation chain is long)
    for n in nodes:
        if n.op != "region_acc":
            if n.op != "zeros":  # fold_accumulations put a run's zeros ahead of it
                current = None
            continue
        reads = {roots.get(a.id) or storage_root(a).id for a in n.args[1:]}
        root, index = roots[n.id], n.attrs.get("index")
        if current is not None and current[0] == n.attrs["body"].shape and \
                not reads & written.keys() and (written.get(root, index) == index or
                                                gather_starts(current[1] + [n]) is not None):
            current[1].append(n)
        else:
            current, written = (n.attrs["body"].shape, [n]), {}
            groups[n.id] = current[1]
        written[root] = index
    return groups


class Emit:
    """What an emitter of :data:`EMITTERS` gets: the writer ``w``, the node,
    its operands' names ``a``, its buffer's name ``out`` and the program's
    tables (``names``, ``users``, ``consts``, ``layouts``)."""

    __slots__ = ("w", "node", "a", "out", "nd", "names", "users", "consts", "layouts")

    def __init__(self, w, node, names, users, consts, layouts):
        self.w, self.node, self.names = w, node, names
        self.users, self.consts, self.layouts = users, consts, layouts
        self.a = [names[x.id] for x in node.args]
        self.out = names[node.id]
        self.nd = len(node.shape)

    def const(self, value):
        """The name of ``value`` in the result's dtype, a module-level constant."""
        return self.consts.add(self.node.dtype.type(value))


def _region(e):
    stored = [u for u in e.users[e.node.id] if u.op == "region_partial"]
    partials = {u.attrs["wrt"]: e.names[u.id] for u in stored if not u.attrs.get("summed")}
    sums = {u.attrs["wrt"]: e.names[u.id] for u in stored if u.attrs.get("summed")}
    region_lines(e.w, e.node, e.names, partials, e.consts,
                 scratch=e.names.get(("scratch", e.node.id)), sum_outs=sums)


def _reduction(e):
    x = e.node.args[0]
    scratch = e.names.get(("scratch", e.node.id))
    if scratch is not None and leading_blocks(e.node) is not None:  # a bias gradient's sum
        e.w.pending.append(f"{e.a[0]}_blk = {e.a[0]}[r0:r0 + nr]")
        summed_rows(e.w, e.node, e.out, [], f"{e.a[0]}_blk{here(len(x.shape))}", scratch,
                    {f"{e.a[0]}_blk"} if whole_array(e.w, e.a[0], x.shape) else None, None)
        return
    _reduction_lines(e.w, e.node.op, e.node.dtype, e.node.attrs["axis"],
                     e.node.attrs["keepdims"], x.shape, f"{e.a[0]}{here(len(x.shape))}", e.out,
                     scratch=scratch)


# data movement runs its long nests on the threads (a prange from PARALLEL_MIN
# elements, as the regions' loops): each element is written once, so the bits
# do not depend on the thread count -- a 10^6-point stencil's concatenation in
# a loop body was a serial copy of 8 MB per step beside parallel regions


def _reshape(e):  # materialized: copy through a source-shaped view of the buffer
    src = e.node.args[0]
    e.w.emit(f"_r = {e.out}.reshape({src.shape!r})")
    e.w.nest(src.shape, [f"_r{here(len(src.shape))} = {e.a[0]}{here(len(src.shape))}"],
             parallel=True)


def _transpose(e):
    inv = {ax: j for j, ax in enumerate(e.node.attrs["axes"])}
    idx = "[" + ", ".join(f"i{inv[d]}" for d in range(e.nd)) + "]" if e.nd else "[()]"
    e.w.nest(e.node.shape, [f"{e.out}{here(e.nd)} = {e.a[0]}{idx}"], parallel=True)


def _broadcast_copy(e):  # broadcast_to and copy: read the operand broadcast
    e.w.nest(e.node.shape, [f"{e.out}{here(e.nd)} = {e.a[0]}"
                            f"{broadcast_index(e.node.args[0].shape, e.nd)}"], parallel=True)


def _getitem(e):
    idx = getitem_map(e.node.attrs["index"], e.node.args[0].shape)
    e.w.nest(e.node.shape, [f"{e.out}{here(e.nd)} = {e.a[0]}{idx}"], parallel=True)


def _concatenate(e):
    axis, off = e.node.attrs["axis"], 0
    for x, name in zip(e.node.args, e.a, strict=True):
        idx = [f"i{d}" if d != axis else f"{off} + i{d}" for d in range(e.nd)]
        e.w.nest(x.shape, [f"{e.out}[{', '.join(idx)}] = {name}{here(e.nd)}"], parallel=True)
        off += x.shape[axis]


def _scatter(add):
    def emit(e):  # scatter(g): zeros with g at index; scatter_add(acc, g): acc[index] += g
        g, gname = (e.node.args[1], e.a[1]) if add else (e.node.args[0], e.a[0])
        if not add:
            fill(e.w, e.out, "0")
        idx = getitem_map(e.node.attrs["index"], e.node.shape)
        e.w.nest(g.shape, [f"{e.out}{idx} {'+=' if add else '='} {gname}{here(len(g.shape))}"],
                 parallel=True)
    return emit


def _gather(e):  # x is C-contiguous storage: read it through a flat view
    e.w.emit(f"_flat = {e.a[0]}.reshape(({e.node.args[0].size},))")
    e.w.nest(e.node.shape, [f"{e.out}{here(e.nd)} = _flat[{e.a[1]}{here(e.nd)}]"])


def _scatter_flat(add):
    def emit(e):  # (g, flat) or (acc, g, flat): add g at flat positions
        g, gname, flat = (e.node.args[1], e.a[1], e.a[2]) if add else \
            (e.node.args[0], e.a[0], e.a[1])
        if not add:
            fill(e.w, e.out, "0")
        gnd = len(g.shape)
        e.w.emit(f"_flat = {e.out}.reshape(({e.node.size},))")
        e.w.nest(g.shape, [f"_flat[{flat}{here(gnd)}] += {gname}{here(gnd)}"])
    return emit


def _iadd(e):
    e.w.nest(e.node.shape, [f"{e.out}{here(e.nd)} += {e.a[1]}"
                            f"{broadcast_index(e.node.args[1].shape, e.nd)}"])


def _scan(init, update, inclusive):
    def emit(e):
        _emit_scan(e.w, e.node, e.a[0], e.out, e.const(init), update, inclusive=inclusive)
    return emit


def _lapack(e):  # the shared LAPACK kernels, workspace from the arena
    key = ("scratch", e.node.id)
    work = [e.names[key]] if key in e.names else []
    extra = [kind_of(e.node.dtype), *kernel_args(e.node.op, e.node.attrs)]
    e.w.emit(f"_la_{e.node.op}({', '.join(e.a + [e.out] + work + [str(x) for x in extra])})")


def _sort_unpack(part):
    def emit(e):  # sort_values reads (x, packed), sort_index (packed,)
        _emit_sort_unpack(e.w, e.node, e.a[1] if part == "real" else e.a[0], e.out, part)
    return emit


def _loop(e):  # the body compiled once, run per iteration (hybridad.backends.loops)
    from ..loops import emit_numba
    emit_numba(e)


#: op -> the emitter of its generated source: the numba backend's whole
#: knowledge of the ops that are not fused into regions (an elementwise op is
#: rendered inside a region by :mod:`hybridad.backends.scalar`)
EMITTERS = {
    "region": _region,
    "region_partial": lambda e: None,  # written by its region's kernel
    "region_acc": lambda e: region_acc_lines(e.w, [e.node], e.names, e.consts),
    "zeros": lambda e: fill(e.w, e.out, "0"),
    **dict.fromkeys(("sum", "max", "min", "prod"), _reduction),
    "matmul": lambda e: _emit_matmul(e.w, e.node, e.a, e.out, e.layouts, e.names),
    "matvec_pair": matvec_pair,
    "matvec_two": matvec_two,
    "reshape": _reshape,
    "transpose": _transpose,
    "broadcast_to": _broadcast_copy,
    "copy": _broadcast_copy,
    "getitem": _getitem,
    "concatenate": _concatenate,
    "scatter": _scatter(add=False),
    "scatter_add": _scatter(add=True),
    "gather": _gather,
    "scatter_flat": _scatter_flat(add=False),
    "scatter_add_flat": _scatter_flat(add=True),
    "iadd": _iadd,
    "cumsum": _scan(0, "+=", inclusive=True),
    "cumprod": _scan(1, "*=", inclusive=True),
    "cumprod_exclusive": _scan(1, "*=", inclusive=False),
    "cumprod_adjoint": lambda e: _emit_cumprod_adjoint(e.w, e.node, e.a, e.out, e.const(0)),
    **dict.fromkeys(LAPACK_OPS, _lapack),
    "sort_pack": lambda e: _emit_sort_pack(e.w, e.node, e.a[0], e.out),
    "sort_values": _sort_unpack("real"),
    "sort_index": _sort_unpack("imag"),
    "host_ufunc": host_ufunc,
    "host_call": host_call,
    "ode": host_run,
    "ode_adjoint": host_run,
    "quad": host_run,
    "root": host_run,
    **dict.fromkeys(("fft", "rfft", "irfft"), fourier),
    "loop": _loop,
}


def emit_node(w, node, names, users, consts, layouts):
    """Write the source computing ``node`` (not fused into a region) with ``w``."""
    emitter = EMITTERS.get(node.op)
    if emitter is None:
        raise NotImplementedError(f"numba backend: no code for op {node.op!r}")
    emitter(Emit(w, node, names, users, consts, layouts))


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
    users = users_of(nodes)
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


def _loop_call(node, layouts):
    """The :class:`.emit_pairs.MatvecCall` of matmul ``node`` where the cost
    model gives it to this backend's own loops, else None (BLAS, or no
    layouts to decide on): :func:`_gemm_lines` and :func:`runs_own_loops`."""
    call = None if layouts is None else matvec_call(node, layouts)
    return call if call is not None and call.how == "loop" else None


def runs_own_loops(node, layouts):
    """Whether matmul ``node`` makes no BLAS call: a matrix-vector product the
    cost model gives to this backend's own loops (:func:`_gemm_lines`; a
    product of unit seeds may fall back to a gemm: it counts as BLAS)."""
    return blas_ready(node, layouts) and not node.attrs.get("onehot_rows") and \
        _loop_call(node, layouts) is not None


def _emit_gemm(w, node, a, acc, beta, layouts=None, work=None):
    """``acc = A @ B + beta * acc`` by BLAS gemm, 1-D operands and result as
    2-D views (``acc`` C-contiguous) -- or, for a matrix-vector product the
    cost model gives to the backend's own loops, by them (:func:`.emit_pairs.matvec_call`).
    ``work``: the node's scratch (:func:`.layouts.scratch_for_numba`), where a
    small result over a long contracted axis runs in parts of that axis on
    the threads (:func:`.kparts.gemm_kparts`).  A product marked
    ``onehot_rows`` (a chunk of unit seeds times ``B``) first tries rows of
    ``B`` (:func:`.onehot.onehot_rows`), the gemm where it declines."""
    if node.attrs.get("onehot_rows") and len(node.shape) == 2 and node.args[0].shape[-1] > 0:
        w.emit(f"if not _onehot_rows({a[0]}, {a[1]}, {acc}, {float(beta)!r}):"
               "  # unit seeds: rows of B")
        w.indent += 1
        try:
            _gemm_lines(w, node, a, acc, beta, layouts, work)
        finally:
            w.indent -= 1
        return
    _gemm_lines(w, node, a, acc, beta, layouts, work)


def _gemm_lines(w, node, a, acc, beta, layouts, work):
    call = _loop_call(node, layouts)
    if call is not None:
        emit_matvec(w, node, a, acc, beta, call, work)
        return
    A, B = node.args
    av = a[0] if len(A.shape) == 2 else f"{a[0]}.reshape((1, {A.shape[0]}))"
    bv = a[1] if len(B.shape) == 2 else f"{a[1]}.reshape(({B.shape[0]}, 1))"
    rows = A.shape[0] if len(A.shape) == 2 else 1
    cols = B.shape[1] if len(B.shape) == 2 else 1
    ov = acc if len(node.shape) == 2 else f"{acc}.reshape(({rows}, {cols}))"
    note = "  # BLAS gemm, beta = 1: accumulates in place" if beta else "  # BLAS gemm"
    facts = machine()
    parts = facts.gemm_k_parts(rows, A.shape[-1], cols)
    if parts:
        if work is None:  # (no scratch: one call, chunked along k)
            w.emit(f"_gemm({av}, {bv}, {ov}, {float(beta)!r}){note}")
            return
        w.threaded = True
        w.emit(f"_gemm_kparts({av}, {bv}, {ov}, {float(beta)!r}, "
               f"{work}[:{parts * rows * cols}].reshape(({parts * rows}, {cols}))){note}, "
               f"{parts} parts of the contracted axis on the threads, summed in order")
        return
    if facts.gemm_on_threads(rows, A.shape[-1], cols):
        w.threaded = True
        w.emit(f"_gemm_threads({av}, {bv}, {ov}, {float(beta)!r}){note}, a panel per thread "
               "(rows, or columns of a wide result)")
        return
    w.emit(f"_gemm({av}, {bv}, {ov}, {float(beta)!r}){note}")


#: fewest multiply-adds per matrix for which a batched matmul calls BLAS per
#: matrix rather than running its own loops (measured on 2 cores: a gemm call
#: costs 25-70 ns, the loops ~0.3 ns per multiply-add -- 7x a gemm's at
#: 16 x 16 x 16; at 4 x 4 x 4 the two are equal)
BATCHED_GEMM_MIN = 64


def _emit_matmul(w, node, a, out, layouts, names=None):
    A, B = node.args
    if blas_ready(node, layouts):
        if A.shape[-1] == 0:
            fill(w, out, "0")
        else:  # straight into the buffer
            _emit_gemm(w, node, a, out, 0, layouts,
                       None if names is None else names.get(("scratch", node.id)))
        return
    M, N, K = node.shape[-2], node.shape[-1], A.shape[-1]
    batch = node.shape[:-2]
    nb = len(batch)

    def bidx(shape):
        return [("0" if s == 1 else f"i{nb - len(shape[:-2]) + d}")
                for d, s in enumerate(shape[:-2])]

    ai, bi, oi = bidx(A.shape), bidx(B.shape), [f"i{d}" for d in range(nb)]
    # the matrices on the threads, each whole on one (its own single-threaded
    # gemm or loops: the bits do not depend on the thread count)
    work = math.prod(batch) * M * N * K
    if names is not None and nb and M * N * K >= BATCHED_GEMM_MIN:
        ops = [_matrix_of(x, name, idx, layouts, names)
               for x, name, idx in ((A, a[0], ai), (B, a[1], bi))]
        if None not in ops and node.dtype.kind == "f" and A.dtype == B.dtype == node.dtype \
                and layouts.get(node.id, "C") == "C":  # one BLAS gemm per matrix
            w.nest(batch, [f"_gemm({ops[0]}, {ops[1]}, {out}[{', '.join(oi)}], 0.0)"
                           "  # BLAS gemm per matrix"], parallel=True, work=work)
            return
    lines = [f"for m in range({M}):",
             f"    for j in range({N}):",
             f"        {out}[{', '.join(oi + ['m', 'j'])}] = 0",
             f"    for k in range({K}):",
             f"        aik = {a[0]}[{', '.join(ai + ['m', 'k'])}]",
             f"        for j in range({N}):",
             f"            {out}[{', '.join(oi + ['m', 'j'])}] += aik * "
             f"{a[1]}[{', '.join(bi + ['k', 'j'])}]"]
    w.nest(batch, lines, parallel=bool(nb), work=work)


def _matrix_of(x, name, idx, layouts, names):
    """Source of one 2-D C or F matrix of batched matmul operand ``x`` at batch
    indices ``idx`` -- a slice of a C array, or the transposed slice of a C
    array ``x`` is the last-two-axes transpose of -- or None (the loops)."""
    if len(x.shape) < 2:
        return None
    at = f"[{', '.join(idx)}]" if idx else ""
    if layouts.get(x.id) == "C":
        return f"{name}{at}"
    nd = len(x.shape)
    if x.op == "transpose" and tuple(x.attrs.get("axes", ())) == \
            (*range(nd - 2), nd - 1, nd - 2) and layouts.get(x.args[0].id) == "C" and \
            x.args[0].id in names:
        return f"{names[x.args[0].id]}{at}.T"
    return None


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
    w.nest(other, [f"p = {init}", f"for t in range({n}):", f"    {SERIAL}",
                   f"    {step if inclusive else store}", f"    {store if inclusive else step}"])


def _emit_cumprod_adjoint(w, node, a, out, zero):
    """``S_t = g_t + x_{t+1} S_{t+1}`` along ``axis``, from the end."""
    axis, nd = node.attrs["axis"], len(node.shape)
    n = node.shape[axis]
    other = [s for d, s in enumerate(node.shape) if d != axis]
    names = [f"i{d - (d > axis)}" if d != axis else "{t}" for d in range(nd)]
    at = "[" + ", ".join(names) + "]"
    assert node.args[0].shape == node.shape, "a cotangent has its value's shape"
    w.nest(other, [f"p = {zero}", f"for t in range({n} - 1, -1, -1):", f"    {SERIAL}",
                   f"    if t < {n - 1}:",
                   f"        p *= {a[1]}{at.format(t='t + 1')}",
                   f"    p += {a[0]}{at.format(t='t')}",
                   f"    {out}{at.format(t='t')} = p"])


def _sort_less(a, b):
    """Source of ``a < b`` for (value, index) pairs -- ``a`` and ``b`` name the
    pairs' scalars ``{a}r, {a}i`` -- ordered like numpy sorts complex numbers:
    by value, NaN last, then by index (never NaN here)."""
    return (f"({a}r < {b}r or ({a}r == {b}r and {a}i < {b}i) or "
            f"({b}r != {b}r and ({a}r == {a}r or {a}i < {b}i)))")


def _emit_sort_pack(w, node, x, out):
    """Each row of ``x`` along ``axis`` into ``out`` (the axis last) as
    (value, index) pairs -- ``out`` is the packed complex buffer seen as pairs
    of reals, a last axis of two (``program._arena_views``): no complex
    scalar, so hybridad's compiler builds the plan -- then sorted in place:
    insertion sort for short rows, heapsort otherwise (the keys are distinct,
    so any sort gives the stable order; neither needs memory of its own)."""
    axis = node.attrs["axis"]
    xshape = node.args[0].shape
    n, other = xshape[axis], node.shape[:-1]
    xi = "[" + ", ".join("_sk" if d == axis else f"i{d - (d > axis)}"
                         for d in range(len(xshape))) + "]"
    pre = "".join(f"i{d}, " for d in range(len(other)))

    def get(var, e, k):  # the pair at position e into {var}r, {var}i
        return ["    " * k + f"{var}r = {out}[{pre}{e}, 0]",
                "    " * k + f"{var}i = {out}[{pre}{e}, 1]"]

    def put(e, var, k):
        return ["    " * k + f"{out}[{pre}{e}, 0] = {var}r",
                "    " * k + f"{out}[{pre}{e}, 1] = {var}i"]

    lines = [f"for _sk in range({n}):", f"    {out}[{pre}_sk, 0] = {x}{xi}",
             f"    {out}[{pre}_sk, 1] = _sk"]
    if n <= 16:
        lines += [f"for _st in range(1, {n}):", *get("_sv", "_st", 1),
                  "    _sj = _st",
                  "    while _sj > 0:", *get("_su", "_sj - 1", 2),
                  f"        if not {_sort_less('_sv', '_su')}:",
                  "            break", *put("_sj", "_su", 2),
                  "        _sj -= 1", *put("_sj", "_sv", 1)]
    else:  # n // 2 sifts build the heap, then n - 1 take its top to the end
        h = n // 2
        lines += [f"for _sq in range({h + n - 1}):",
                  f"    if _sq < {h}:",
                  f"        _sr = {h - 1} - _sq",
                  f"        _se = {n}",
                  "    else:",
                  f"        _se = {n + h - 1} - _sq", *get("_sv", "_se", 2),
                  *get("_sz", "0", 2), *put("_se", "_sz", 2), *put("0", "_sv", 2),
                  "        _sr = 0", *get("_sv", "_sr", 1),
                  "    while True:",
                  "        _sc = 2 * _sr + 1",
                  "        if _sc >= _se:",
                  "            break", *get("_su", "_sc", 2),
                  "        if _sc + 1 < _se:", *get("_sw", "_sc + 1", 3),
                  f"            if {_sort_less('_su', '_sw')}:",
                  "                _sc += 1",
                  "                _sur = _swr",
                  "                _sui = _swi",
                  f"        if not {_sort_less('_sv', '_su')}:",
                  "            break", *put("_sr", "_su", 2),
                  "        _sr = _sc", *put("_sr", "_sv", 1)]
    w.nest(other, lines)


def _emit_sort_unpack(w, node, packed, out, part):
    """``out`` (the unsorted layout) from a sort_pack's pairs (``real``: the
    values, ``imag``: the indices; see :func:`_emit_sort_pack`)."""
    axis, nd = node.attrs["axis"], len(node.shape)
    pi = "[" + ", ".join([f"i{d}" for d in range(nd) if d != axis] + [f"i{axis}"] +
                         ["0" if part == "real" else "1"]) + "]"
    value = f"{packed}{pi}"
    w.nest(node.shape, [f"{out}{here(nd)} = " + (value if part == "real" else f"int({value})")])
