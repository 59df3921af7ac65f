"""A plan's compiled decision check run inside its program.

A plan that decided on values checks every call's decisions before its
program runs (:mod:`hybridad.plans.decided` compiles the check as a program
of its own, see :func:`.program.compile_numba_program`'s ``raise_if_set``).
Called on its own, the check costs a native call and a second pass over the
arguments' checks: as much as a small plan's whole run.  So the gradient
program carries the check's statements too, right after its own argument
checks and before anything is written: its function takes the check's
workspace and result slot as two more leading arguments, and runs the check
when the slot's address is not 0.  The plan's fast path passes the slot (the
decisions are then checked at the cost of their comparisons, inside the one
compiled call); every other caller passes 0 and runs the program as it was.

The check's statements are taken from its generated source (one small
function): its argument checks dropped (the plan's check the same arrays),
its names renamed apart from the plan's, its arguments mapped onto the
plan's; its outlined kernels and module constants come along, renamed too.
Source this cannot map (``prange`` loops, kernels numba's cache cannot
rebuild, a name the plan already uses) or object-mode blocks (a loop's
runner: numba's lowering of one inside the guard's branch is broken,
numba/numba#9574) is not inlined: the check then runs as its own call.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import numpy as np

__all__ = ["Inlined", "inline_check"]

_FLAG = "_dflagp"


@dataclass
class Inlined:
    """What :func:`inline_check` gives the program's generator."""

    header: list  # imports and module constants to add
    defs: list  # the check's kernels (lines of module-level functions)
    params: list  # leading parameters to add after the plan's ``_ndt``
    values: list  # what the call passes them: addresses and ids (the slot's last)
    keep: list  # what those values point into (the workspace, the slot, the check)
    block: list  # the statements, after the plan's argument checks

    @property
    def nbytes(self):
        """The workspace and slot the program holds for the check."""
        return sum(a.nbytes for a in self.keep if isinstance(a, np.ndarray))


class _Rename(ast.NodeTransformer):
    def __init__(self, names):
        self.names = names

    def visit_Name(self, node):
        new = self.names.get(node.id)
        return node if new is None else ast.copy_location(ast.Name(new, node.ctx), node)


def _is_flag_load(node, out_param):
    """``_ld64(o0p + _ABI[1])``: the data address of the check's result."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
        node.func.id == "_ld64" and len(node.args) == 1 and \
        isinstance(node.args[0], ast.BinOp) and isinstance(node.args[0].left, ast.Name) and \
        node.args[0].left.id == out_param


def inline_check(check, n_inputs, plan_lines):
    """An :class:`Inlined` of ``check`` (the compiled decision check, a
    :class:`~.runner.NumbaProgram` of :func:`hybridad.plans.decided.compile_decisions`)
    for a plan program whose first inputs are the check's ``n_inputs`` leaves
    in order; ``plan_lines``: the plan module's header and body lines.  None
    where its source cannot be mapped (see the module's docstring)."""
    if check is None or not check.objects:  # (its own workspace: see the end)
        return None
    tree = ast.parse(check.source)
    if any(isinstance(n, ast.Name) and n.id == "prange" for n in ast.walk(tree)):
        return None
    fn, imports, consts, kernels = None, [], [], []
    for st in tree.body:
        if isinstance(st, (ast.Import, ast.ImportFrom)):
            imports.append(ast.unparse(st))
        elif isinstance(st, ast.Assign) and len(st.targets) == 1 and \
                isinstance(st.targets[0], ast.Name):
            consts.append(st)
        elif isinstance(st, ast.FunctionDef):
            if st.name == "plan_fn":
                fn = st
            else:
                kernels.append(st)
        else:
            return None
    if any("cache=True" not in ast.unparse(d) for f in kernels + [fn] if f is not None
           for d in f.decorator_list):
        return None  # (its kernels call functions numba's cache cannot rebuild)
    bound = check.parts[2]  # (its constants, by id)
    params = [a.arg for a in fn.args.args] if fn is not None else []
    arenas = [p for p in params if p.startswith("ar_")]
    ins = [f"a{i}p" for i in range(n_inputs)]
    cparams = params[len(arenas) + 2 + n_inputs:-1]
    if params != arenas + ["_tabp", "_ndt"] + ins + cparams + ["o0p"] or \
            len(cparams) != len(bound) or not all(type(b) is int for b in bound):
        return None
    ends = [k for k, st in enumerate(fn.body) if isinstance(st, ast.If) and
            ast.unparse(st.test) == "_e >= 0"]
    if len(ends) != 1:
        return None
    body = fn.body[ends[0] + 1:]
    if any(isinstance(n, ast.With) for st in body for n in ast.walk(st)):
        # (object mode -- a loop's runner -- inside the guard's ``if``: numba's
        # lowering of an objmode block in a branch followed by another breaks
        # LLVM's dominance, numba/numba#9574, where numba compiles the plan)
        return None
    module_names = {st.targets[0].id for st in consts} | {k.name for k in kernels}
    if "_ABI" in module_names:  # the same ABI table as the plan's (one process)
        abi = next(st for st in consts if st.targets[0].id == "_ABI")
        if ast.unparse(abi) not in {ast.unparse(ast.parse(h)) for h in plan_lines
                                    if h.startswith("_ABI =")}:
            return None
        consts.remove(abi)
        module_names.discard("_ABI")
    globals_ = {k: f"_dc{k}" for k in module_names}
    names = {p: f"_dar{j}p" for j, p in enumerate(arenas)}
    names.update({p: f"_dcp{j}" for j, p in enumerate(cparams)})
    names.update(globals_)
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.setdefault(node.id, f"_d_{node.id}")
    for st in body:  # the result's data address: the slot's address
        for node in ast.walk(st):
            for field, value in ast.iter_fields(node):
                if _is_flag_load(value, "o0p"):
                    setattr(node, field, ast.Name(_FLAG, ast.Load()))
    block = [_Rename(names).visit(st) for st in body]
    used = {n.id for st in block for n in ast.walk(st) if isinstance(n, ast.Name)}
    if used & {"o0p", "_tabp", "_ndt", "_t", "_e"}:
        return None
    plan_text = "\n".join(plan_lines)
    if any(new in plan_text for new in names.values()):
        return None  # (a name the plan uses: not renamed apart)
    by_name = {f"ar_{a.dtype.name}p": a for a in check.memory.arenas.values()}
    if not all(p in by_name for p in arenas):
        return None
    guarded = ast.If(ast.Compare(ast.Name(_FLAG, ast.Load()), [ast.NotEq()],
                                 [ast.Constant(0)]), block, [])
    header = [h for h in imports if h not in plan_lines]
    header += [ast.unparse(_Rename(globals_).visit(st)) for st in consts]
    defs = []
    for k in kernels:  # (their locals are their own: only module names renamed)
        k.name = globals_[k.name]
        k.body = [st for st in k.body if ast.unparse(st) != "_simd_wide()"] or [ast.Pass()]
        # (the plan's module is widened as a whole, .simd.widen: the mark put back there)
        defs += ["", "", ast.unparse(_Rename(globals_).visit(k))]
    lines = ast.unparse(ast.fix_missing_locations(guarded)).split("\n")
    # a workspace and slot of its own (the check's program may run beside it); its
    # constants as the check's program passes them (by id: made by the trace, kept here)
    arrays = [np.zeros_like(by_name[p]) for p in arenas] + [np.zeros_like(check.flag)]
    values = [a.ctypes.data for a in arrays[:-1]] + list(bound) + [arrays[-1].ctypes.data]
    return Inlined(header, defs, [names[p] for p in arenas + cparams] + [_FLAG], values,
                   arrays + [check], ["    " + line for line in lines])
