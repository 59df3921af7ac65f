"""Backends stage (backends/numba): the whole plan -- forward and backward -- as ONE
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
import warnings

import numpy as np

from ...errors import CompileBudgetError
from ...ir.graph import format_node, users_of
from ...ops.lapack_names import KERNEL_MODULES, LAPACK_OPS
from ...transforms.costs import costs
from ...transforms.memory import poison_schedule
from .. import loops as _loops
from ..scalar import uses_special, vector_imports
from . import simd
from .emit import _emit_gemm, blas_accumulations, emit_node, region_acc_groups, runs_own_loops
from .split import _drop_unused_views, split_body
from .layouts import numba_layouts, view_statement
from .gather import scatter_chains, scatter_gather_lines
from .link import bind, link, loop_driver
from .prelude import inline_check
from .loops import (
    Constants,
    LoopWriter,
    fill,
    here,
    region_acc_lines,
)
from .runner import NumbaProgram, _Checks, _literal, strided_hull, view_at
from .threads import start_pool
from .threshold import PARALLEL_MIN, blas_may_thread, serial_loops, work_estimate

__all__ = ["compile_numba_program", "work_estimate"]


# ----------------------------------------------------------------------------
# which views numba can express
# ----------------------------------------------------------------------------


# ----------------------------------------------------------------------------
# per-op code
# ----------------------------------------------------------------------------


# ----------------------------------------------------------------------------
# the program
# ----------------------------------------------------------------------------


# no fast-math: every product and sum rounded as written.  (With "contract",
# LLVM fused a product into an add where it chose, differently in a loop's
# vectorized body and its remainder: an element's bits depended on where it
# fell -- a parallel plan's thread boundaries, the serial plan's tail, the
# CPU's vector width -- 1 ulp apart on AVX-512 machines)
_FLAGS = 'cache=True, error_model="numpy"'
_GUARDS_END = "    # (the argument checks end here)"
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

    def __init__(self, write, addresses, after=None):
        self._write = write
        self._addresses = addresses  # name -> (address, shape, dtype, order), filled as written
        self.chunks = []  # (lines at indent 0, parallel)
        self._after = after  # after(w, node, lines, parallel): profiled plans' timers

    def emit(self, w, node, write=None):
        """Write ``node``'s code (by ``write(writer)`` when given)."""
        sub = LoopWriter(indent=0)
        sub.addresses = self._addresses
        if write is None:
            self._write(sub, node)
        else:
            write(sub)
        w.emit(f"{self._MARK}{len(self.chunks)}")
        self.chunks.append((sub.lines, sub.parallel))
        w.threaded = w.threaded or sub.threaded
        if self._after is not None:
            self._after(w, node, sub.lines, sub.parallel or sub.threaded)

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
                          name="plan", poison=False, given=(), profile=False, trusted=False,
                          raise_if_set=False, prelude=None, optional_outputs=()):
    """Generate, cache and compile the whole-plan function.

    ``in_specs`` / ``out_specs``: ``(shape, dtype)`` of each input and output
    buffer.  ``given``: ids of nodes an earlier program of the plan computed
    (their buffers are read, not written; see :mod:`hybridad.plans.staged`).
    ``profile``: True (or ``"wall"``, ``"cpu"``: the clock) times every node
    (:mod:`.profiling`; the program's ``timers`` array and ``timed`` slots,
    see :mod:`hybridad.plans.profile`) -- never in a normal plan, whose source
    is unchanged by this option.  ``trusted``: the caller makes every argument
    as the specs say (a loop body, called by :mod:`hybridad.backends.loops`
    on views it made once): the arguments are not checked per call.
    ``raise_if_set``: the program ends by raising
    :class:`hybridad.errors.DecisionsChanged` when its first output (a 0-d
    number) is not zero -- a plan's compiled decision check
    (:mod:`hybridad.plans.decided`), whose answer no other thread's call can
    overwrite before it is read.  ``prelude``: that check (a
    :class:`NumbaProgram` of the plan's first inputs), run inside this program
    where it inlines (:mod:`.prelude`; the program's ``checked_parts``).
    ``optional_outputs``: positions of outputs an earlier program computed,
    whose copies the program's ``lean_parts`` skip (the caller passes buffers
    of theirs that are not written: a linearized plan's tangent pass).
    Returns a :class:`NumbaProgram`.
    """
    users = users_of(nodes)
    optional_outputs = () if profile else optional_outputs  # (a profile copies them all)
    # the nodes this program computes (``given`` ones an earlier program did)
    computed = [n for n in nodes if n.id not in given] if given else nodes
    from . import abi as rt
    from .layouts import check_pool_size

    check_pool_size()  # the per-thread scratch fits numba's pool

    objects = rt.ABI is not None  # arrays passed as id(array), see NumbaProgram
    consts = Constants()
    names, params, const_args = {}, [], []  # const_args: (array, passed as object)
    arenas = sorted({dt for dt, *_ in memplan.slots.values()} |
                    {dt for dt, *_ in memplan.scratch.values()}, key=lambda d: d.str)
    params += [f"ar_{dt.name}p" for dt in arenas] + ["_tabp", "_ndt"] + \
        (["_wout"] if optional_outputs else [])
    timers = None
    if profile:
        from .profiling import Timers
        timers = Timers("wall" if profile is True else profile)
        params.append(timers.PARAM)
    checks = _Checks(objects, trusted)
    for i, (shape, dtype) in enumerate(in_specs):
        checks.add(f"a{i}", shape, dtype, written=False)
    for k, (shape, dtype) in enumerate(out_specs):
        checks.add(f"o{k}", shape, dtype, written=True)
    w = LoopWriter()
    layouts = numba_layouts(nodes, memplan)
    input_pos = {n.id: i for i, n in enumerate(inputs)}
    output_ids = {n.id for n in outputs if n is not None}
    # (outputs reach the compiled function C-contiguous and of the plan's dtype,
    # see NumbaProgram)
    direct = memplan.direct_positions(nodes, outputs)
    # variable -> (data address, shape, dtype, order) of contiguous arrays, for cheap views
    addresses = checks.addresses()
    accumulate = {m: add for m, add in blas_accumulations(nodes, outputs, layouts).items()
                  if m not in given}
    w.addresses = addresses
    kernels = _Kernels(lambda sub, n: emit_node(sub, n, names, users, consts, layouts),
                       addresses, timers.after if timers is not None else None)
    folded = {n.id for n in accumulate.values()}  # iadds done by their gemm
    acc_groups = region_acc_groups(computed)  # first node id -> the region_accs of one loop
    chains = scatter_chains(computed)  # first node id -> a scatter and its scatter_adds
    in_group = {m.id for ms in (*acc_groups.values(), *chains.values()) for m in ms[1:]}
    # a zeros buffer that only a group of adds reads: filled by the group (a gather
    # writes it once instead of filling, then reading and writing it)
    fills = {ms[0].args[0].id for ms in acc_groups.values()
             if ms[0].args[0].op == "zeros" and len(users[ms[0].args[0].id]) == 1 and
             memplan.storage[ms[0].id] == "alias" and
             memplan.storage[ms[0].args[0].id] == "buffer" and
             ms[0].args[0].id not in given and ms[0].args[0].id not in output_ids}
    _arena_views(w, nodes, memplan, direct, names, addresses)
    if timers is not None:
        timers.stamp(w, "entry")
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
            _const_param(n, users, output_ids, objects, params, const_args, checks, addresses)
        elif n.id in memplan.in_place:  # its readers' loops index its source: not made
            m = memplan.in_place[n.id]
            names[n.id] = f"v{n.id}"  # (never bound: no code reads it by name)
            names[("shifts", n.id)] = (names[m.source.id], m)
            w.emit(f"# {format_node(n)}: read in place (%{m.source.id} at shifted indices)")
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
                    sub, members, names, consts, members[0].args[0].id in fills))
            elif n.id not in folded and n.id not in in_group:
                kernels.emit(w, n)
        elif n.id in accumulate:
            names[n.id] = f"b{n.id}"  # never written: the product goes into the adjoint
            w.emit(f"# {format_node(n)}")
            acc = accumulate[n.id].args[0]
            kernels.emit(w, n, lambda sub, n=n, acc=acc: _emit_gemm(
                sub, n, [names[x.id] for x in n.args], names[acc.id] + (
                    f".reshape({n.shape!r})" if acc.shape != n.shape else ""), 1, layouts,
                names.get(("scratch", n.id))))
        elif storage == "view":
            names[n.id] = f"v{n.id}"
            w.emit(view_statement(n, names[n.args[0].id], f"v{n.id}", addresses))
        else:
            w.emit(f"# {format_node(n)}")
            if n.id in fills:  # (filled by the adds that read it)
                pass
            elif n.id in chains:  # the chain's adds, gathered into this loop
                kernels.emit(w, n, lambda sub, members=chains[n.id]: scatter_gather_lines(
                    sub, members, names, consts.add(n.dtype.type(0))))
            else:
                kernels.emit(w, n)
        if poison and n.id not in given:  # (an earlier program's node ran there: what
            poison_lines(dying.get(n.id, ()))  # died after it may share a slot read here)
    params += [f"o{k}p" if objects else f"o{k}" for k in range(len(outputs))]
    w.emit("# outputs")
    for k, n in enumerate(outputs):
        if n is None:
            fill(w, f"o{k}", "0")
        elif names[n.id] != f"o{k}":
            nd = len(n.shape)
            w.emit(*(["if _wout != 0:"] if k in optional_outputs else []))
            w.indent += k in optional_outputs
            w.nest(n.shape, [f"o{k}{here(nd)} = {names[n.id]}{here(nd)}"],  # (a long copy:
                   parallel=True)  # the threads' bandwidth, as the regions that made it)
            w.indent -= k in optional_outputs
    header = _header(consts, objects)
    if raise_if_set:
        header.append("from hybridad.errors import DecisionsChanged as _DecisionsChanged")
        w.emit("if o0[()] != 0:")
        w.emit("    raise _DecisionsChanged('a decision on values changed')")
    table = checks.table()
    guards = ["    " + line for line in checks.lines(table.size)]
    if timers is not None:  # the first clock read opens the function, the last closes it
        timers.stamp(w, "outputs")
        header.append(timers.header)
        guards, w.lines = timers.prologue() + guards, w.lines + timers.epilogue()
    # numba's disk cache rebuilds the environment of every function the plan
    # calls from its module: a user function defined where no module can be
    # imported from (exec'd code) makes the plan uncacheable
    cacheable = all(k.cacheable for k in consts.kernels.values())
    base_flags = _FLAGS if cacheable else _FLAGS.replace("cache=True, ", "")
    body, kernel_defs, parallel = kernels.finish(guards + [_GUARDS_END] + w.lines, header,
                                                 params, base_flags)
    n_guards = body.index(_GUARDS_END)  # (finish drops the views of unread inputs)
    del body[n_guards]
    inlined = None if prelude is None or timers is not None or trusted else \
        inline_check(prelude, len(prelude._in_specs), header + body)
    if inlined is not None:  # the decision check, after the argument checks
        header += inlined.header
        kernel_defs = kernel_defs + inlined.defs
        params[params.index("_ndt") + 1:params.index("_ndt") + 1] = inlined.params
        body[n_guards:n_guards] = inlined.block
        n_guards += len(inlined.block)
    if uses_special(kernel_defs + body):  # scipy.special's functions (and their digest)
        header[2] = vector_imports(special=True)
    # the LAPACK kernels' modules the plan calls, only (importing one imports
    # scipy.linalg and binds its symbols: a quarter second a plan without
    # linear algebra does not pay)
    calls = "\n".join(kernel_defs + body)
    header = [h for h in header if not h.startswith(_LAPACK_IMPORT)]
    at = 1 + next(k for k, h in enumerate(header) if h.startswith(_FOLDS_IMPORT))
    header[at:at] = _lapack_imports([op for op in LAPACK_OPS
                                     if re.search(rf"\b_la_{op}\(", calls)])
    parallel = parallel or w.parallel  # (a prange here: numba's parallel flags)
    threaded = parallel or w.threaded  # numba's threads run part of it
    # (a call that switches to Python -- a host call, a loop's runner -- lets
    # other threads run in between, into the same workspace: it takes the lock)
    blas = blas_may_thread(nodes, lambda n: runs_own_loops(n, layouts))  # (BLAS on 1 thread)
    heavy = threaded or blas or work_estimate(nodes) >= PARALLEL_MIN or "with _objmode(" in calls
    fn_name = "plan_fn"
    flags = base_flags + (", nogil=True" if heavy else "") + (_PARALLEL if parallel else "")
    signature = f"def {fn_name}({', '.join(params)}):"

    wide = costs().simd_bits == 512  # LLVM asked for 512-bit vectors (see .simd)
    if wide:
        header.insert(3, simd.IMPORT)

    def module(body, defs):
        lines = header + defs + ["", "", f"@njit({flags})", signature] + body
        if wide:  # (header entries may hold several lines)
            lines = simd.widen("\n".join(lines).split("\n"))
        return "\n".join(lines) + "\n"

    whole = module(body, kernel_defs)
    source = whole
    if timers is None:  # a long body: parts of bounded size
        parts_body, part_defs, nparts = split_body(
            body, n_guards, params, base_flags + (", nogil=True" if heavy else ""), _PARALLEL)
        if nparts:
            source = module(parts_body, kernel_defs + part_defs)
    extra = [timers.array()] if timers is not None else \
        (inlined.values if inlined is not None else []) + ([1] if optional_outputs else [])
    if threaded:
        start_pool()  # (before its machine code is loaded: see start_pool)
    try:
        call, own, fixed, bound = link(source, fn_name, memplan, arenas, table, in_specs,
                                        out_specs, const_args, objects, cacheable, extra, name)
    except Exception as exc:  # noqa: BLE001 -- the parts do not compile: one function, as before
        if source is whole or isinstance(exc, CompileBudgetError):
            raise
        warnings.warn(f"hybridad: {name}: its generated function split into parts did not "
                      f"compile ({type(exc).__name__}); compiled as one function (please "
                      "report this)", RuntimeWarning, stacklevel=2)
        source = whole
        call, own, fixed, bound = link(source, fn_name, memplan, arenas, table, in_specs,
                                        out_specs, const_args, objects, cacheable, extra, name)
    keep = [memplan.arenas[dt] for dt in arenas] + [v for v, _ in const_args] + [table] + extra
    # (what the source names but does not hold: its loops' runners, see backends.loops)
    keep += [k.keep for k in consts.kernels.values() if getattr(k, "keep", None) is not None]
    checked = None
    if inlined is not None:  # (every caller but the plan's fast path: no check, slot 0)
        at = len(fixed) - len(extra) + len(inlined.values) - 1  # (the check's slot)
        checked, checked_call, fixed = (own, fixed, bound), call, [*fixed[:at], 0,
                                                                    *fixed[at + 1:]]
        call = bind(own, fixed, bound, len(in_specs), len(out_specs))
        keep += inlined.keep
    program = NumbaProgram(call, source, heavy,
                           in_specs, out_specs, keep, objects)
    if timers is not None:
        program.timers, program.timed = extra[0], timers.slots
    program.parts, program.checked_parts = (own, fixed, bound), checked
    program.arena_dtypes = arenas  # (the first entries of ``fixed``: their addresses)
    if optional_outputs:  # (the last leading argument: 0 skips their copies)
        program.lean_parts = (own, [*fixed[:-1], 0], bound)
        program.lean_call = bind(own, program.lean_parts[1], bound, len(in_specs),
                                 len(out_specs))
    if checked is not None:  # (explain() says what the check holds in it)
        program.checked_call, program.check_bytes = checked_call, inlined.nbytes
    from .. import jit

    program.compiler = jit.compiler_of(own, source)
    program.direct = direct
    program.set_parallel(bool(threaded))
    program.blas_limited = blas
    return program


def _arena_views(w, nodes, memplan, direct, names, addresses):
    """Name every buffer and scratch slot and cut its view of the arena once, at
    the top (an output computed in place is named as the caller's array)."""
    for n in nodes:
        if n.id in direct:
            names[n.id] = f"o{direct[n.id]}"  # computed straight into the caller's buffer
        elif memplan.storage[n.id] == "buffer":
            dt, off, nbytes, shape = memplan.slots[n.id]
            names[n.id] = f"b{n.id}"
            if n.op == "sort_pack":  # (value, index) pairs as two reals: no complex scalar
                w.emit(f"b{n.id} = " + view_at(f"ar_{dt.name}p + {off}", (*shape, 2),
                                               np.empty((), dt).real.dtype))
                continue
            addresses[f"b{n.id}"] = (f"ar_{dt.name}p + {off}", shape, dt, "C")
            w.emit(f"b{n.id} = " + view_at(*addresses[f"b{n.id}"]))
    for nid, (dt, off, count) in memplan.scratch.items():
        names[("scratch", nid)] = f"sc{nid}"
        addresses[f"sc{nid}"] = (f"ar_{dt.name}p + {off}", (count,), dt, "C")
        w.emit(f"sc{nid} = " + view_at(*addresses[f"sc{nid}"]))


def _const_param(n, users, output_ids, objects, params, const_args, checks, addresses):
    """How captured constant ``n`` reaches the compiled function: inlined (a
    scalar only regions read), by object with its address known (like the
    inputs), or as an array argument."""
    only_inlined = n.is_literal and n.size == 1 and n.id not in output_ids and all(
        u.op == "region" for u in users[n.id])
    v = n.attrs["value"]
    order = "C" if v.flags.c_contiguous else "F" if v.flags.f_contiguous else None
    if only_inlined:
        return
    hull = None if order or not objects else strided_hull(v)
    if objects and (order or hull) and v.flags.aligned and v.dtype.isnative:
        params.append(f"c{n.id}p")  # by object, like the inputs
        const_args.append((v, True))
        if hull is not None:  # a strided view (W[:, :k]): read through its hull
            checks.add_strided(f"c{n.id}", *hull, v.dtype)
            return
        checks.add(f"c{n.id}", v.shape, v.dtype, written=False, order=order)
        if order == "C":
            addresses[f"c{n.id}"] = (f"c{n.id}d", v.shape, v.dtype, "C")
    else:  # (as an array argument: numba compiles the plan, not hybridad's compiler)
        params.append(f"c{n.id}")
        const_args.append((v, False))


_FOLDS_IMPORT = "from hybridad.backends.numba.folds import "
_LAPACK_IMPORT = "from hybridad.ops.lapack"


def _lapack_imports(ops):
    """Import lines giving generated source the kernels of LAPACK primitives
    ``ops`` as ``_la_<op>``, one line per kernel module."""
    return [f"from {mod} import " + ", ".join(f"{op} as _la_{op}" for op in ops
                                              if KERNEL_MODULES[op] == mod)
            for mod in sorted({KERNEL_MODULES[op] for op in ops})]


def _header(consts, objects):
    """The generated module's imports and constants."""
    from . import abi as rt

    header = ["import numpy as np", "from numba import get_thread_id, njit, prange",
              vector_imports(),
              "from hybridad.backends.numba.rt import check_arrays as _check, gemm as _gemm, "
              "load_i64 as _ld64, view_at as _view",
              "from hybridad.backends.numba.kparts import gemm_kparts as _gemm_kparts",
              "from hybridad.backends.numba.onehot import onehot_rows as _onehot_rows",
              "from hybridad.backends.numba.rt import gemm_threads as _gemm_threads, "
              "matvec_axpy as _mv_axpy, "
              "matvec_axpy_par as _mv_axpy_par, matvec_dot as _mv_dot, "
              "matvec_dot_par as _mv_dot_par, matvec_pair as _mv_pair, "
              "matvec_pair_par as _mv_pair_par",
              "from hybridad.backends.numba.matvecs import matvec_dot2 as _mv_dot2, "
              "matvec_dot2_par as _mv_dot2_par, matvec_axpy2 as _mv_axpy2, "
              "matvec_axpy2_par as _mv_axpy2_par, matvec_axpy_parts as _mv_axpy_parts, "
              "matvec_axpy_parts_par as _mv_axpy_parts_par, "
              "matvec_axpy2_parts as _mv_axpy2_parts, "
              "matvec_axpy2_parts_par as _mv_axpy2_parts_par",
              _FOLDS_IMPORT + "fold_max as _fold_max, "
              "fold_min as _fold_min, "
              "fold_prod as _fold_prod, fold_sum as _fold_sum, "
              "fold_sum_wide as _fold_sum_wide, sum_compensated as _sum_compensated",
              simd.SERIAL_IMPORT, *_lapack_imports(LAPACK_OPS), ""]
    abi = tuple(rt.ABI[k] for k in rt.ABI_FIELDS) if objects else (0,) * 9
    header.append(f"_ABI = {abi!r}  # see rt.ABI")
    header += [f"{k} = {_literal(v)}" for k, v in consts.namespace().items()]
    return header + consts.kernel_header()


# -- loops (hybridad.backends.loops): the body compiled as a program of its own --------------
def compile_loop_body(graph):
    """A loop body as one numba function (:func:`.layouts.loop_body_memory`).
    Where it runs natively (:func:`.layouts.runs_natively`: what the runner's
    driver calls each iteration, under the runner's lock), its arena is not
    kept: each call's workspace in the calling plan's arena stands for it."""
    from .layouts import loop_body_memory, runs_natively

    g, serial, memplan = loop_body_memory(graph)
    with serial_loops(serial):
        prog = compile_numba_program(g.nodes, g.inputs, g.outputs, memplan,
                                     memplan.allocate(np), [(n.shape, n.dtype) for n in
                                                            graph.inputs],
                                     [(n.shape, n.dtype) for n in graph.outputs],
                                     name="loop_body", trusted=True)
    prog.memory = memplan
    from .. import jit

    # (object mode in a body hybridad's compiler made: inner loops it runs in place,
    # nesting, or calls taking the GIL from the driver's thread; numba's: Python)
    if not (runs_natively(g, serial) and prog.objects and not prog.parallel and
            ("with _objmode(" not in prog.source or jit.native(prog.parts[0]) is not None)):
        return prog.call, prog, None, loop_driver
    prog._keep = [k for k in prog._keep if all(k is not a for a in memplan.arenas.values())]
    memplan.arenas = {}  # (the addresses the program was linked with: never called there)
    return None, prog, prog.parts, loop_driver


_loops.COMPILERS["numba"] = compile_loop_body
