"""Generated functions of bounded size: a long plan body runs as several
``@njit`` functions called in turn.

LLVM's time and memory grow faster than the size of one function: the
Hessian of an unrolled 5-step RK4 loss (one function of ~3200 lines) took
70-95 s and 1.6 GB to compile, 10 steps 489 s and 6.3 GB, 50 steps did not
finish in 16 GB.  :func:`split_body` cuts the plan function's body, after
its argument checks, at statement boundaries into *parts* of at most
:data:`MAX_LINES` lines.  Each part is an ``@njit`` function taking the plan
function's own parameters, so it reaches every buffer the way the plan
does; the plan function checks its arguments, then calls the parts in
order.  Compile time and memory then grow with the number of parts, not
with the square of one function.

What may cross a cut: the nodes talk through arrays (arena slots, inputs,
outputs), whose views a part cuts again for itself from the same
addresses -- a *view definition* (``name = _view(...)``, an address load,
``.T``, ``.reshape(...)``, a slice) is pure and can be repeated.  A local
value one statement sets and a later one reads (an accumulator, a scalar
read out of an array) cannot: no cut falls between the two.  A body with no
cut to make stays one function.

:func:`check_budget` refuses, before numba starts, a program whose generated
code would take longer than ``HYBRIDAD_COMPILE_BUDGET`` seconds to compile
(the plans then run their numpy reference program).
"""

from __future__ import annotations

import ast
import os
import re
import textwrap

__all__ = ["COMPILE_S_PER_LINE", "MAX_LINES", "check_budget", "compile_budget", "split_body"]

#: seconds numba takes per line of generated code, split into parts (measured
#: on the 2-core reference machine under load: the 5- and 10-step RK4 Hessians,
#: 4600 and 9000 lines, 55 s and 97 s: 10-12 ms a line)
COMPILE_S_PER_LINE = 0.012


def compile_budget():
    """Most seconds a program may be estimated to compile in
    (``HYBRIDAD_COMPILE_BUDGET``, default 600; ``0`` or ``inf``: no limit)."""
    raw = os.environ.get("HYBRIDAD_COMPILE_BUDGET", "").strip() or "600"
    try:
        budget = float(raw)
    except ValueError:
        raise ValueError(f"HYBRIDAD_COMPILE_BUDGET must be a number of seconds; got "
                         f"{raw!r}") from None
    return float("inf") if budget <= 0 else budget


def check_budget(source, name, per_line=COMPILE_S_PER_LINE, warm=None):
    """Raise :class:`hybridad.CompileBudgetError` when compiling ``source``
    would take longer than :func:`compile_budget` (estimated from its lines
    of code at ``per_line`` seconds each -- numba's by default -- before the
    compiler starts).  ``warm()``: whether the compiled code is in the disk
    cache already (default: numba's), which exempts it."""
    from ...errors import CompileBudgetError

    if warm is None:
        from .cache import warm as numba_warm

        def warm():
            return numba_warm(source)
    lines = sum(1 for line in source.splitlines() if line.strip())
    estimate, budget = lines * per_line, compile_budget()
    if estimate > budget and not warm():  # (a warm disk cache loads in milliseconds)
        raise CompileBudgetError(
            f"{name}: compiling its program ({lines} lines of generated code) would "
            f"take about {estimate:.0f} s, over the budget of {budget:g} s "
            "(HYBRIDAD_COMPILE_BUDGET; 0 for no limit)")

#: most lines of one generated function (``HYBRIDAD_MAX_FUNCTION_LINES``)
MAX_LINES = int(os.environ.get("HYBRIDAD_MAX_FUNCTION_LINES", "") or 400)

_DEF = re.compile(r"^    (\w+) = (.+)$")
_PURE = re.compile(r"^(?:_view\(|_ld64\(|\w+$|\w+\.T$|\w+\.reshape\(|\w+\[[^\]]*:[^\]]*\]$)")


_VIEW_LINE = re.compile(r"^    (\w+) = (?:_view\(|\w+\.T$|\w+\.reshape\(|\w+\[[^\]]*\]$)")
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


def _statements(lines):
    """The top-level statements of a function body (lines at indent 4 with
    the deeper lines that follow them)."""
    out = []
    for line in lines:
        if line.startswith("    ") and not line.startswith("     ") and line.strip():
            out.append([line])
        elif out:
            out[-1].append(line)
        else:
            out.append([line])
    return out


def _names(stmt):
    """(names the statement sets, names it reads before setting them, names it
    reads) -- Python names at any depth, ``reads first`` in execution order (a
    ``for`` target and an assignment's target are set before the body or the
    next statement reads them; ``x += v`` reads ``x`` first)."""
    tree = ast.parse(textwrap.dedent("\n".join(stmt)))
    stores, first, loads = set(), set(), set()

    def load(name):
        loads.add(name)
        if name not in stores:
            first.add(name)

    def visit(node):
        if isinstance(node, ast.Assign):
            visit(node.value)
            for t in node.targets:
                visit(t)
        elif isinstance(node, ast.AugAssign):
            if isinstance(node.target, ast.Name):
                load(node.target.id)
                visit(node.value)
                stores.add(node.target.id)
            else:
                visit(node.target)
                visit(node.value)
        elif isinstance(node, ast.For):
            visit(node.iter)
            visit(node.target)
            for b in node.body + node.orelse:
                visit(b)
        elif isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Store):
                stores.add(node.id)
            else:
                load(node.id)
        else:
            for child in ast.iter_child_nodes(node):
                visit(child)

    visit(tree)
    return stores, first, loads


def _view_def(stmt):
    """The name a pure view definition defines, else None."""
    if len(stmt) != 1:
        return None
    m = _DEF.match(stmt[0])
    return m.group(1) if m and _PURE.match(m.group(2).split("  #")[0].strip()) else None


def split_body(body, n_guards, params, flags, parallel_flags, max_lines=None):
    """``(body, part definitions, parts)``: ``body`` (the plan function's lines,
    its first ``n_guards`` the argument checks) as the checks then calls of
    parts of at most ``max_lines`` lines (:data:`MAX_LINES`), and the parts'
    ``@njit`` definitions (``flags``; ``parallel_flags`` added to a part with a
    ``prange``).  Unchanged (no parts) when it is short or cannot be cut."""
    limit = MAX_LINES if max_lines is None else max_lines
    guards, rest = body[:n_guards], body[n_guards:]
    if len(rest) <= limit:
        return body, [], 0
    head = _statements(guards)  # (their view definitions, the inputs', may be repeated)
    stmts = head + _statements(rest)
    info = [_names(s) for s in stmts]
    defs = [_view_def(s) for s in stmts]
    # cuts a local value would cross: from the statement that sets it to the one reading it
    blocked = [False] * (len(stmts) + 1)  # blocked[k]: no cut before statement k
    last_set = {}
    for k, (stores, first, _) in enumerate(info):
        for name in first:
            j = last_set.get(name)
            if j is not None and defs[j] is None:
                defs[k] = None  # a view of a local value: no more repeatable than it
                for b in range(j + 1, k + 1):
                    blocked[b] = True
        for name in stores:
            last_set[name] = k
    parts, start, size = [], len(head), 0
    for k in range(len(head), len(stmts)):
        s = stmts[k]
        if size + len(s) > limit and k > start and not blocked[k]:
            parts.append((start, k))
            start, size = k, 0
        size += len(s)
    parts.append((start, len(stmts)))
    if len(parts) == 1:
        return body, [], 0
    signature = ", ".join(params)
    definitions, calls = [], []
    for a, b in parts:
        own = [line for s in stmts[a:b] for line in s]
        need, set_here = set(), set()  # what the part reads before it sets it
        for k in range(a, b):
            need |= info[k][1] - set_here
            set_here |= info[k][0]
        prologue = set()  # the view definitions those names had, and what those read

        def resolve(name, before):
            for k in range(before - 1, -1, -1):
                if name in info[k][0]:  # its last definition before `before`
                    if defs[k] == name and k not in prologue:
                        prologue.add(k)
                        for dep in info[k][1]:
                            resolve(dep, k)
                    return

        for name in need:
            resolve(name, a)
        lines = _drop_unused_views([stmts[k][0] for k in sorted(prologue)] + own)
        if not any(_view_def([line]) is None for line in lines if line.strip()):
            continue  # view definitions only, which nothing in the part reads
        name = f"_part{len(calls)}"
        par = parallel_flags if "prange(" in "\n".join(lines) else ""
        definitions += ["", "", f"@njit({flags}{par})", f"def {name}({signature}):", *lines]
        calls.append(f"    {name}({signature})")
    if len(calls) < 2:
        return body, [], 0
    return guards + calls, definitions, len(calls)
