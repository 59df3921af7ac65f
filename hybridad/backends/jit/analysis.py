"""What a block of statements assigns and reads before assigning, from its
syntax tree: a loop carries from one iteration to the next only the names
its body may read before assigning them."""

from __future__ import annotations

import ast

__all__ = ["assigned_names", "loop_names", "upward_exposed", "reads"]


def loop_names(node, target):
    """``(assigned, exposed)`` of loop ``node`` (a ``for`` over ``target``, or
    a ``while``): the names its body assigns, and those it may read before
    assigning them (a ``while``'s test's too).  Kept on the node: the
    translator asks again at every translation of the loop -- each argument
    types, call site and retry -- and a nested loop's walk is its outer
    loop's too."""
    got = getattr(node, "_hybridad_loop_names", None)
    if got is not None and got[0] == target:
        return got[1], got[2]
    assigned = frozenset(assigned_names(node.body))
    exposed = upward_exposed(node.body, {target} if target is not None else set())
    if isinstance(node, ast.While):
        exposed |= reads(node.test)
    exposed = frozenset(exposed)
    node._hybridad_loop_names = (target, assigned, exposed)
    return assigned, exposed


def assigned_names(stmts):
    """Names a list of statements assigns anywhere (loops, branches, targets)."""
    names = set()
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                names.add(n.id)
    return names


def upward_exposed(stmts, defined=frozenset()):
    """Names the statements may read before assigning them (``defined``: names
    already assigned on every path): a loop's body carries only those from
    one iteration to the next."""
    exposed, defined = set(), set(defined)
    for s in stmts:
        if isinstance(s, (ast.For, ast.While, ast.If, ast.With)):
            for field in ("iter", "test"):
                e = getattr(s, field, None)
                if e is not None:
                    exposed |= reads(e) - defined
            inner = set(defined)
            if isinstance(s, ast.For):
                inner |= {n.id for n in ast.walk(s.target) if isinstance(n, ast.Name)}
            for block in (s.body, getattr(s, "orelse", [])):
                exposed |= upward_exposed(block, inner)
            if isinstance(s, ast.If):  # both branches assign: assigned after it
                defined |= _always(s.body) & _always(s.orelse)
            continue
        if isinstance(s, ast.AugAssign):
            exposed |= (reads(s.value) | reads(s.target, load_only=False)) - defined
        else:
            exposed |= reads(s) - defined
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                defined.add(n.id)
    return exposed


def reads(node, load_only=True):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and
            (isinstance(n.ctx, ast.Load) or not load_only)}


def _always(stmts):
    """Names assigned at the top level of ``stmts`` (on every path through them)."""
    return {n.id for s in stmts if isinstance(s, (ast.Assign, ast.AugAssign))
            for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


