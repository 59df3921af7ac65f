"""Stage 6 (compiled backend): the whole plan -- forward and backward -- as ONE
numba function over the preallocated arena, so a call pays one dispatch.

Every node becomes scalar loops: fused regions (value and dual-number
partials per element, a fused reduction accumulated in place), reductions,
matmul, copies, scatters and in-place accumulations.  Buffers are slices of
one arena per dtype, cut inside the function; nothing is allocated per call.

The generated module is written to the disk cache under a content hash of its
source (:mod:`hybridad.backends.cache`) and compiled with ``cache=True``, so a
new process reuses the machine code.  ``HYBRIDAD_DEBUG=3`` prints the source.
"""

from __future__ import annotations

import numpy as np

from ..ir import format_node
from ..ops import REGISTRY
from . import cache
from .loops import Constants, LoopWriter, broadcast_index, fill, here, region_lines
from .loops import reduction_lines as _reduction_lines

__all__ = ["materialize_for_numba", "compile_numba_program"]


# ----------------------------------------------------------------------------
# which views numba can express
# ----------------------------------------------------------------------------


def materialize_for_numba(nodes):
    """Ids of view nodes to copy into buffers: indexing views, and reshapes of
    operands numba does not type as C-contiguous."""
    layout, out = {}, set()
    for n in nodes:
        if n.op == "input":
            layout[n.id] = "C"
        elif n.op == "const":
            layout[n.id] = "C" if n.attrs["value"].flags.c_contiguous else "A"
        elif REGISTRY[n.op].kind == "inplace":
            layout[n.id] = layout[n.args[0].id]
        elif n.op == "reshape" and layout[n.args[0].id] == "C":
            layout[n.id] = "C"
        elif n.op in ("transpose", "broadcast_to"):
            layout[n.id] = "A"
        else:
            if REGISTRY[n.op].kind == "view":
                out.add(n.id)
            layout[n.id] = "C"
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
            out[n.id] = out[n.args[0].id]
        elif n.op == "reshape":
            out[n.id] = "C"  # a reshape view is only made of a C operand
        elif n.op == "transpose" and len(n.shape) == 2 and n.attrs["axes"] == (1, 0):
            out[n.id] = {"C": "F", "F": "C"}.get(out[n.args[0].id], "A")
        else:
            out[n.id] = "A"
    return out


# ----------------------------------------------------------------------------
# per-op code
# ----------------------------------------------------------------------------


def _getitem_map(index, src_shape, loop_var="i"):
    """Index text into the source for an output loop over ``index``'s view."""
    parts, d_out, d_src = [], 0, 0
    for k in index:
        if k is None:
            d_out += 1
            continue
        if isinstance(k, int):
            parts.append(str(k))
        else:
            start, _, step = k.indices(src_shape[d_src])
            parts.append(f"{start} + {step} * {loop_var}{d_out}" if step != 1 or start
                         else f"{loop_var}{d_out}")
            d_out += 1
        d_src += 1
    for _ in range(d_src, len(src_shape)):
        parts.append(f"{loop_var}{d_out}")
        d_out += 1
    return "[" + ", ".join(parts) + "]" if parts else "[()]"


def _emit_node(w, node, names, users, consts, layouts):
    op = node.op
    a = [names[x.id] for x in node.args]
    out = names[node.id]
    nd = len(node.shape)
    if op == "region":
        partials = {u.attrs["wrt"]: names[u.id] for u in users[node.id]
                    if u.op == "region_partial"}
        region_lines(w, node, names, partials, consts)
    elif op == "region_partial":
        pass  # written by its region's kernel
    elif op in ("sum", "max", "min", "prod"):
        x = node.args[0]
        _reduction_lines(w, op, node.dtype, node.attrs["axis"], node.attrs["keepdims"],
                         x.shape, [], f"{a[0]}{here(len(x.shape))}", out)
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
        idx = _getitem_map(node.attrs["index"], node.args[0].shape)
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
        idx = _getitem_map(node.attrs["index"], node.shape)
        gnd = len(g.shape)
        stmt = "+=" if op == "scatter_add" else "="
        w.nest(g.shape, [f"{out}{idx} {stmt} {gname}{here(gnd)}"])
    elif op == "iadd":
        w.nest(node.shape, [f"{out}{here(nd)} += {a[1]}{broadcast_index(node.args[1].shape, nd)}"])
    elif op == "cumprod_exclusive":
        _emit_cumprod(w, node, a[0], out, consts.add(node.dtype.type(1)))
    else:
        raise NotImplementedError(f"numba backend: no code for op {op!r}")


def _emit_matmul(w, node, a, out, layouts):
    A, B = node.args
    M, N, K = node.shape[-2], node.shape[-1], A.shape[-1]
    batch = node.shape[:-2]
    if not batch and node.dtype.kind == "f" and A.dtype == B.dtype == node.dtype and \
            layouts[A.id] in "CF" and layouts[B.id] in "CF":
        w.emit(f"np.dot({a[0]}, {a[1]}, {out})")  # BLAS gemm/gemv, straight into the buffer
        return
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


def _emit_cumprod(w, node, x, out, one):
    axis, rev = node.attrs["axis"], node.attrs["reverse"]
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
    w.nest(other, [f"p = {one}",
                   f"for t in range({n}):",
                   f"    {out}{idx} = p",
                   f"    p *= {x}{idx}"])


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
    """A compiled whole-plan function and the Python call that feeds it."""

    def __init__(self, fn, source, jitted):
        self.fn = fn
        self.source = source
        self.jitted = jitted

    def __call__(self, *args):
        return self.fn(*args)


def compile_numba_program(nodes, inputs, outputs, memplan, buffers, name="plan"):
    """Generate, cache and compile the whole-plan function.

    Returns a :class:`NumbaProgram` callable as ``program(*inputs, *outputs)``.
    """
    users = {n.id: [] for n in nodes}
    for n in nodes:
        for x in n.args:
            users[x.id].append(n)
    consts = Constants()
    names, params, const_args = {}, [], []
    arenas = sorted({dt for dt, *_ in memplan.slots.values()}, key=lambda d: d.str)
    params += [f"ar_{dt.name}" for dt in arenas]
    w = LoopWriter()
    layouts = numba_layouts(nodes, memplan)
    input_pos = {n.id: i for i, n in enumerate(inputs)}
    output_ids = {n.id for n in outputs if n is not None}
    for n in nodes:  # buffer views, cut once at the top
        if memplan.storage[n.id] == "buffer":
            dt, off, nbytes, shape = memplan.slots[n.id]
            start = off // dt.itemsize
            names[n.id] = f"b{n.id}"
            w.emit(f"b{n.id} = ar_{dt.name}[{start}:{start + max(n.size, 1)}]"
                   f".reshape({shape!r})")
    params += [f"a{i}" for i in range(len(inputs))]
    for n in nodes:
        storage = memplan.storage[n.id]
        if storage == "input":
            names[n.id] = f"a{input_pos[n.id]}"
        elif storage == "const":
            names[n.id] = f"c{n.id}"
            only_inlined = n.is_literal and n.size == 1 and n.id not in output_ids and all(
                u.op == "region" for u in users[n.id])
            if not only_inlined:
                params.append(f"c{n.id}")
                const_args.append(n.attrs["value"])
        elif storage == "alias":
            names[n.id] = names[n.args[0].id]
            w.emit(f"# {format_node(n)}")
            _emit_node(w, n, names, users, consts, layouts)
        elif storage == "view":
            names[n.id] = f"v{n.id}"
            src = names[n.args[0].id]
            if n.op == "reshape":
                w.emit(f"v{n.id} = {src}.reshape({n.attrs['shape']!r})")
            elif n.op == "transpose" and n.attrs["axes"] == (1, 0):
                w.emit(f"v{n.id} = {src}.T")  # typed F-contiguous (BLAS-ready) by numba
            elif n.op == "transpose":
                w.emit(f"v{n.id} = np.transpose({src}, {n.attrs['axes']!r})")
            elif n.op == "broadcast_to":
                w.emit(f"v{n.id} = np.broadcast_to({src}, {n.attrs['shape']!r})")
            else:
                raise AssertionError(f"view {n.op} should have been materialized")
        else:
            w.emit(f"# {format_node(n)}")
            _emit_node(w, n, names, users, consts, layouts)
    params += [f"o{k}" for k in range(len(outputs))]
    w.emit("# outputs")
    for k, n in enumerate(outputs):
        if n is None:
            fill(w, f"o{k}", "0")
        else:
            nd = len(n.shape)
            w.nest(n.shape, [f"o{k}{here(nd)} = {names[n.id]}{here(nd)}"])
    header = ["import numpy as np", "from numba import njit, prange", ""]
    header += [f"{k} = {_literal(v)}" for k, v in consts.namespace().items()]
    fn_name = "plan_fn"
    source = "\n".join(header + ["", "", "@njit(cache=True, nogil=True, error_model=\"numpy\"" +
                                 (", parallel=True)" if w.parallel else ")"),
                                 f"def {fn_name}({', '.join(params)}):"] + w.lines) + "\n"
    jitted = cache.load_function(source, fn_name)
    fn = _trampoline(jitted, [memplan.arenas[dt] for dt in arenas], const_args, len(inputs),
                     len(outputs))
    return NumbaProgram(fn, source, jitted)


def _trampoline(jitted, arenas, consts, n_in, n_out):
    """A small Python function binding arenas and constants, staging
    non-contiguous inputs, and calling the compiled plan."""
    from .numpy_backend import _Stager

    ns = {"_j": jitted, "_stage": _Stager()}
    args = []
    for k, arr in enumerate(arenas):
        ns[f"_ar{k}"] = arr
        args.append(f"_ar{k}")
    ins = [f"a{i}" for i in range(n_in)]
    lines = [f"def call({', '.join(ins + [f'o{k}' for k in range(n_out)])}):"]
    for i in range(n_in):
        lines.append(f"    a{i} = a{i} if a{i}.flags.c_contiguous else _stage({i}, a{i})")
    args += ins
    for k, c in enumerate(consts):
        ns[f"_c{k}"] = c
        args.append(f"_c{k}")
    args += [f"o{k}" for k in range(n_out)]
    lines.append(f"    _j({', '.join(args)})")
    exec(compile("\n".join(lines) + "\n", "<hybridad numba call>", "exec"), ns)  # noqa: S102
    return ns["call"]
