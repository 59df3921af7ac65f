"""Backends stage (backends/numpy, the reference): the graph as one generated Python function
that calls numpy with ``out=`` into the preallocated arena.

The numpy backend is the correctness oracle for every other backend.  The
generated source reads top to bottom like the graph: each statement is
preceded by its IR node as a comment, and the source is kept on the program
(``Program.source``) and shown by ``plan.explain()``.

Nothing allocates per call: buffers, constants and views of buffers are bound
once into the function's namespace; only views of the per-call inputs are
rebuilt each call (view objects, no data).
"""

from __future__ import annotations

import functools

import numpy as np

from ..._forksafe import call_ends, call_starts
from ...ir.graph import format_node
from ...ops import REGISTRY
from ...transforms.memory import poison_schedule
from .. import loops as _loops
from ..numba.threads import SingleThreadedBlas
from ..numba.threshold import blas_may_thread

__all__ = ["Program", "compile_program"]


class Program:
    """A compiled straight-line program.

    Call as ``program(*input_leaves, *output_buffers)``.

    Attributes
    ----------
    source : str
        The generated Python source.
    """

    def __init__(self, fn, source):
        self.fn = fn  # (:func:`_gated`: what every caller calls)
        self.source = source

    def __call__(self, *args):
        return self.fn(*args)


class _Stager:
    """Contiguous copies of inputs that arrive non-contiguous (allocated once)."""

    def __init__(self, xp=np):
        self.buffers = {}
        self.xp = xp

    def __call__(self, index, a):
        buf = self.buffers.get(index)
        if buf is None:
            buf = self.buffers[index] = self.xp.empty(a.shape, a.dtype)
        self.xp.copyto(buf, a)
        return buf

    def output(self, index, a, dtype):
        """A C-contiguous buffer of ``dtype`` (allocated once) standing in for
        output ``a`` of another layout: the program writes it, then copies it
        into ``a`` at its end."""
        key = ("out", index)
        buf = self.buffers.get(key)
        if buf is None or buf.shape != a.shape:
            buf = self.buffers[key] = self.xp.empty(a.shape, dtype)
        return buf


def compile_program(nodes, inputs, outputs, memplan, buffers, name="program", poison=False,
                    given=(), xp=np, regions=None):
    """Generate and compile the straight-line function.

    Parameters
    ----------
    nodes : list of Node
        Nodes to execute, in order (a subset of the planned graph).
    inputs : list of Node
        ``input`` nodes; the function takes one argument per entry, in order.
    outputs : list of (Node or None)
        One output buffer argument per entry; ``None`` writes zeros.
    memplan : MemoryPlan
    buffers : dict
        node id -> ndarray, from ``memplan.allocate()``.
    poison : bool
        Instrumented run: fill every slot with NaN before it is written and
        after its last read (:func:`hybridad.transforms.memory.poison_schedule`).
    given : set of int
        Ids of nodes an earlier program of the plan computed: their buffers
        are read, not written (see :mod:`hybridad.plans.staged`).
    xp : module
        The array module of the buffers and arguments (numpy; cupy for the
        GPU backend, whose constants are copied to the device here, once).
    regions : RegionCalls, optional
        Emits fused ``region`` nodes (the GPU backend's kernels, see
        :mod:`hybridad.backends.cuda.program`); the numpy backend has none.
    """
    if regions is not None:  # the GPU backend's (the numpy backend imports no CUDA source)
        from ..cuda.program import region_protos
    ns = {"_copyto": xp.copyto, "_stage": _Stager(xp)}
    # the GPU program computes gradient outputs straight into the caller's
    # buffers (the memory plan's direct roots, which have no arena slot; the
    # numba program does the same); a buffer of another layout is staged
    direct = {} if regions is None else {
        rid: k for rid, k in memplan.direct_positions(nodes, outputs).items() if rid not in given}
    protos = {}  # node id -> an array with its strides (region kernels read views in place)
    names, static = {}, {}
    params = [f"a{i}" for i in range(len(inputs))] + [f"o{i}" for i in range(len(outputs))]
    lines = [f"def {name}({', '.join(params)}):"]
    input_pos = {n.id: i for i, n in enumerate(inputs)}
    dying = poison_schedule(memplan) if poison else {}

    def poison_lines(keys):
        out = []
        for key in keys:
            if isinstance(key, tuple):
                ns[f"_sc{key[1]}"] = memplan.scratch_view(key[1])
                out.append(f"    _sc{key[1]}.fill(_nan)")
            elif key in buffers:
                ns[f"b{key}"] = buffers[key]
                out.append(f"    b{key}.fill(_nan)")
        return out
    ns["_nan"] = np.nan
    if not given:  # (a later program's slots hold what the earlier one left)
        lines += poison_lines(dying.get("start", ()))
    for rid, k in direct.items():  # (named first: a region kernel writes partials there)
        names[rid] = f"o{k}"
    for k in sorted(direct.values()):
        ns[f"_dt{k}"] = outputs[k].dtype
        lines += [f"    r{k} = o{k}",
                  f"    if not (o{k}.flags.c_contiguous and o{k}.dtype == _dt{k}):",
                  f"        o{k} = _stage.output({k}, o{k}, _dt{k})"]

    for node in nodes:
        storage = memplan.storage[node.id]
        body = []
        if storage == "input":
            v = names[node.id] = f"v{node.id}"
            i = input_pos[node.id]
            body.append(f"{v} = a{i} if a{i}.flags.c_contiguous else _stage({i}, a{i})")
            static[node.id] = False
        elif storage == "const":
            names[node.id] = f"c{node.id}"
            ns[names[node.id]] = node.attrs["value"] if xp is np else \
                xp.asarray(node.attrs["value"])
            static[node.id] = True
        elif storage == "alias":
            target = memplan.alias_of[node.id]
            names[node.id] = names[target.id]
            static[node.id] = static[target.id]
            if node.id not in given:
                body += _call(node, names, ns, names[node.id], xp, regions, protos, nodes)
        elif storage == "view":
            v = names[node.id] = f"v{node.id}"
            fn = functools.partial(REGISTRY[node.op].view, **node.attrs)
            static[node.id] = static[node.args[0].id]
            if static[node.id]:
                ns[v] = fn(ns[names[node.args[0].id]])
            else:
                ns[f"_view{node.id}"] = fn
                body.append(f"{v} = _view{node.id}({names[node.args[0].id]})")
        else:  # buffer
            if node.id in direct:  # the caller's (or its stand-in), named above
                b = names[node.id]
                static[node.id] = False
            else:
                b = names[node.id] = f"b{node.id}"
                ns[b] = buffers[node.id]
                static[node.id] = True
            if node.id in given:
                pass
            elif node.id in memplan.materialized:
                src = node.args[0]
                ns[f"r{node.id}"] = ns[b].reshape(src.shape)
                body.append(f"_copyto(r{node.id}, {names[src.id]})")
            elif node.op != "region_partial":  # (its region's kernel writes it)
                work = memplan.scratch_view(node.id) \
                    if node.id in memplan.scratch and node.op != "region" else None
                body += _call(node, names, ns, b, xp, regions, protos, nodes, work=work)
        if regions is not None:
            static_array = ns.get(names[node.id]) if static.get(node.id) else None
            region_protos(node, protos, static_array)
        if body:
            lines.append(f"    # {format_node(node)}")
            lines.extend("    " + s for s in body)
        if node.id not in given:  # (an earlier program's node: poisoned there)
            lines += poison_lines(dying.get(node.id, ()))

    lines.append("    # outputs")
    for k, node in enumerate(outputs):
        if node is None:
            lines.append(f"    o{k}.fill(0)")
        elif names[node.id] == f"o{k}":  # computed in place: copied only when staged
            lines.append(f"    if o{k} is not r{k}: _copyto(r{k}, o{k})")
        else:
            lines.append(f"    _copyto(o{k}, {names[node.id]})")
    if len(lines) == 1:
        lines.append("    pass")
    if regions is not None:
        regions.finish(ns)
    source = "\n".join(lines) + "\n"
    exec(compile(source, f"<hybridad {name}>", "exec"), ns)  # noqa: S102 - generated code
    return Program(_gated(ns[name], xp is np and blas_may_thread(nodes)), source)


def _gated(fn, one_blas_thread):
    """``fn`` as its callers call it (the plan, its stages, a loop's runner):
    a fork waits for the call (numpy's products run without the GIL:
    :func:`hybridad._forksafe.call_starts`), and with ``one_blas_thread``
    every BLAS library of the process is on one thread while it runs (its
    products call numpy's own BLAS, its factorizations numpy's or scipy's).
    BLAS's own threads split a gemv's, a gemm's or a factorization's sums by
    their count: a numpy plan's logistic-regression gradient differed
    between ``OMP_NUM_THREADS=1`` and 3 (:func:`.numba.threshold.blas_may_thread`
    says which programs).  Another thread of the program calling numpy's BLAS
    meanwhile gets one thread too."""
    limit = SingleThreadedBlas(every=True) if one_blas_thread else None

    def call(*args):
        call_starts()
        try:
            if limit is None:
                return fn(*args)
            with limit:
                return fn(*args)
        finally:
            call_ends()
    return call


def _call(node, names, ns, target, xp, regions, protos, nodes, work=None):
    """Statements computing ``node`` into ``target``."""
    if node.op == "region" and regions is None:
        raise NotImplementedError("fused regions run on compiled backends only")
    if regions is not None and regions.handles(node):  # GPU kernels: regions, float sums
        return regions.statement(node, names, ns, target, protos, nodes)
    op = REGISTRY[node.op]
    args = ", ".join(names[a.id] for a in node.args)
    if node.op == "loop":  # the body compiled once, run per iteration (..loops)
        ns[f"_f{node.id}"] = _loops.runner(node, "numpy") if regions is None else \
            _loops.runner(node, "cupy", (xp, regions.launcher, regions.products))
        return [f"_f{node.id}({target}, {args})"]
    if op.ufunc is not None:  # the array module's own ufunc (cupy's on the GPU)
        ns[f"_uf{node.id}"] = op.ufunc if xp is np else getattr(xp, op.ufunc.__name__)
        return [f"_uf{node.id}({args}, out={target})"]
    attrs = dict(node.attrs, work=work) if work is not None else node.attrs
    run = (regions is not None and regions.run_of(node)) or op.run  # (the GPU's own)
    fn = functools.partial(run, **attrs) if attrs else run
    ns[f"_f{node.id}"] = fn
    if regions is not None and regions.library_call(node):  # (a CUDA graph records it)
        ns["_lib"] = regions.run_library_call
        return [f"_lib(_f{node.id}, {target}, {args})"]
    return [f"_f{node.id}({target}, {args})"]


def compile_loop_body(graph, device=None):
    """A loop body (:mod:`hybridad.backends.loops`) as a numpy program; with
    ``device`` (the GPU program's ``(array module, launcher, own products)``) as the GPU
    backend's program of it: its fused regions as CUDA kernels, its arena on
    the device (the host runs the iterations, each launching the body)."""
    from ...transforms.memory import op_workspaces, plan_memory
    from ..loops import lower_body

    if device is None:
        g = lower_body(graph, "numpy")
        memplan = plan_memory(g, (), op_workspaces(g.nodes))
        prog = compile_program(g.nodes, g.inputs, g.outputs, memplan, memplan.allocate(np),
                               name="loop_body")
    else:
        from ..cuda.program import RegionCalls, check_supported, device_scratch

        xp, launcher, products = device  # (products: as the plan's own, cuda/products.py)
        g = lower_body(graph, "cupy")
        check_supported(g.nodes)
        scratch = device_scratch(g.nodes, products)
        # (each carry straight into the runner's buffer of the next iteration: no copy)
        memplan = plan_memory(g, (), scratch, reuse=True, direct_outputs="all")
        buffers = memplan.allocate(xp)
        prog = compile_program(g.nodes, g.inputs, g.outputs, memplan, buffers,
                               name="loop_body", xp=xp,
                               regions=RegionCalls(launcher, memplan, buffers, xp, products))
    prog.memory = memplan
    return (lambda ins, outs: prog.fn(*ins, *outs)), prog, None, None


_loops.COMPILERS["numpy"] = compile_loop_body
_loops.COMPILERS["cupy"] = compile_loop_body  # (with the device: the GPU backend's body)
