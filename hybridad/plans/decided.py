"""A plan's decisions on values checked by compiled code.

A plan whose trace took Python decisions on values (``if x[0] > 0:``, see
:mod:`hybridad.core.decisions`) must check, before every call, that the
call's arguments decide the same way.  :class:`~hybridad.core.decisions.DecisionCheck`
does it with the ops' numpy references, in generated Python: a few
microseconds a call, several times a small plan's own run.

On the numba backend the same check is also compiled: the nodes the
decisions read, copied from the trace, and per decision one comparison
with its recorded outcome, summed into one number, go through the numba
lowering (fused into one or two loops) and become a program of their own
with its own small workspace.  Its last statement raises
:class:`~hybridad.errors.DecisionsChanged` when the sum is not zero, so the
answer leaves the compiled call with it (no other thread's call can
overwrite it before it is read).  The gradient program carries the same
statements (:func:`carried_check`, :mod:`hybridad.backends.numba.prelude`),
and so do an ``hvp=True`` plan's program and a staged plan's whole program
(a one-chunk Hessian or reverse Jacobian): the plan's plain path runs them
inside the program's one native call, after its argument checks and before
anything is written, at the cost of the comparisons.  The other paths (the
general path, staged plans' other programs) call the check as a program of
its own before theirs.

The compiled values may differ from the numpy references' in the last bit
(fused multiply-adds, vectorized ``exp``), so a value at a rounding distance
of a threshold could be decided differently by the two.  The rule is then
the same on every path, so a call's results stay a function of its
arguments: the decisions hold when the compiled check passes, or else when
the reference check passes (:meth:`DecisionCheck.first_failing`); where
this plan's compiled check fails, a specialization whose compiled check
passes runs before any reference check is made (a call alternating between
two outcomes pays compiled checks only); a call that fails them all runs
another specialization, traced for it.  A specialization traced for a call
holds for it by the reference check, so a call never loops.
"""

from __future__ import annotations

import logging

import numpy as np

from ..backends.numba.machine import lowering_machine
from ..backends.numba.threshold import serial_loops
from ..core.trace import Trace
from ..core.tracer import Tracer
from ..errors import DecisionsChanged
from ..transforms import pipeline

__all__ = ["attach", "carried_check", "compile_decisions"]

_LOG = logging.getLogger("hybridad")


def _mismatch(t, decision):
    """A 0-d float64 tracer: 1 where ``t`` converts otherwise than
    ``decision`` recorded, else 0 (as :func:`hybridad.core.decisions._convert`
    and ``_same`` compare)."""
    kind, outcome = decision.kind, decision.outcome
    if kind == "raises":  # (whether an op fails: the reference check's try)
        raise TypeError("a decision on whether an op raises")
    if kind == "array":
        miss = np.any(t != np.asarray(outcome))
    else:
        v = t.reshape(())
        if v.dtype.kind == "c":
            raise TypeError("a decision on a complex value")
        if kind == "bool":
            miss = (v if v.dtype == np.bool_ else v != 0) != bool(outcome)
        elif kind == "float":  # float() of a traced bool or integer: exact
            miss = v.astype(np.float64) != float(outcome)
        elif kind == "int" and v.dtype.kind == "f":  # int() truncates (NaN, inf: never equal)
            miss = np.trunc(v) != float(outcome)
        else:  # int() or operator.index() of an integer
            miss = v != outcome
    return miss.astype(np.float64)


def compile_decisions(check, specs, parallel=True, budget=None):
    """The compiled form of ``check`` (a
    :class:`~hybridad.core.decisions.DecisionCheck`) for arguments of
    ``specs`` (``(shape, dtype)`` of every leaf): a
    :class:`~hybridad.backends.numba.runner.NumbaProgram` of the leaves
    with one 0-d float64 output, raising
    :class:`~hybridad.errors.DecisionsChanged` when a decision changed.
    ``budget``: the most bytes its workspace may take.  None where it cannot
    be made (an op without a numba rule, a complex decision, a decision on
    whether an op raises, over the budget): the reference check then serves
    alone."""
    from ..backends.numba import build_program
    from ..backends.numba.layouts import plan_numba_memory

    if not check.eager:
        return None
    try:
        trace = Trace()
        with trace:
            inputs = [trace.input(i, tuple(shape), np.dtype(dtype))
                      for i, (shape, dtype) in enumerate(specs)]
            made = {}
            for n in check.frozen:
                if n.op == "input":
                    made[n.id] = inputs[n.attrs["index"]].node
                else:
                    made[n.id] = trace.add(n.op, [made[a] for a in n.arg_ids], dict(n.attrs),
                                           n.shape, n.dtype)
            flag = None
            for d in check.eager:  # (the lazy ones: the program's own raise)
                miss = _mismatch(Tracer(made[d.node.id], trace), d)
                flag = miss if flag is None else flag + miss
        outputs = [flag.node]
        graph = pipeline.lower(trace.nodes, [t.node for t in inputs], outputs, "numba",
                               machine=lowering_machine("numba"))
        memory = plan_numba_memory(graph)
        if budget is not None and memory.total_bytes > budget:
            return None
        buffers = memory.allocate(np)
        with serial_loops(not parallel):
            program = build_program(graph.nodes, graph.inputs, outputs, memory, buffers,
                                    list(specs), [((), np.float64)], name="decisions_program",
                                    raise_if_set=True, label="the compiled decision check")
    except Exception as exc:  # noqa: BLE001 - the reference check serves alone
        _LOG.debug("hybridad: the decisions were not compiled (%s: %s); the reference "
                   "check serves alone", type(exc).__name__, exc)
        return None
    program.memory = memory
    program.flag = np.zeros((), np.float64)
    return program


def holds(program):
    """``holds(leaves) -> bool``: whether ``program`` (of :func:`compile_decisions`)
    passes on the leaf arrays ``leaves`` (any layout: staged as a plan's are)."""
    flag = [program.flag]
    own, fixed, bound = program.parts
    fid = id(program.flag)
    direct = program.objects and not program.heavy  # (a heavy one: its lock, run's)

    def holds(leaves):
        try:
            if direct:  # the leaves as they are (the program checks each one)
                try:
                    own(*fixed, *[id(a) for a in leaves], *bound, fid)
                    return True
                except (TypeError, ValueError):
                    pass  # (another layout or type: staged by run)
            program.run(leaves, flag)
        except DecisionsChanged:
            return False
        return True

    return holds


def attach(check, program):
    """Put ``program`` (of :func:`compile_decisions`, or None: nothing) in
    place as ``check``'s compiled form (its
    :attr:`~hybridad.core.decisions.DecisionCheck.program` and ``compiled``)."""
    if program is not None:
        check.program, check.compiled = program, holds(program)


def carried_check(plan, name):
    """The compiled check (of :func:`compile_decisions`) that ``plan``'s
    program ``name`` carries inside it (:mod:`hybridad.backends.numba.prelude`):
    the gradient or HVP program's, or a staged plan's whole program (its
    primal and one chunk: a dense Hessian's or reverse Jacobian's one-chunk
    entry) -- the ones a plain path calls -- where the check's workspace fits
    ``memory_budget`` twice (the program holds a copy); else None."""
    check = getattr(plan, "_check_program", None)
    if check is None or not (name in ("gradient_program", "hvp_program") or
                             name.endswith("_whole")):
        return None
    budget = getattr(plan, "memory_budget", None)
    if budget is not None and plan.memory.total_bytes + 2 * check.memory.total_bytes > budget:
        return None
    return check
