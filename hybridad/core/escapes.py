"""A tracer used in a trace it does not belong to.

A value of an earlier trace (stored in a global or a closure), of a loop
body set aside, or of an *enclosing* trace: a function hybridad traces
inside another one's trace (a plan's build called from the outer function's
code) that closes over the outer function's values.  The last is
:class:`~hybridad.errors.OuterTracerError`, which
:func:`hybridad.plans.nested.plan_or_nested` answers by differentiating the
inner function inside the outer trace.
"""

from __future__ import annotations

import threading

from ..errors import OuterTracerError, TracingError

__all__ = ["escaped", "outer_uses"]

_counts = threading.local()


def escaped(x, stack):
    """Raise the error for tracer ``x`` used in a trace not its own; ``stack``:
    the traces active on this thread, outermost first."""
    if getattr(x._trace, "abandoned", False):
        raise TracingError(
            "a value made while hybridad traced a fori_loop body once, stored outside the "
            "body (a list's append, an attribute), is used after it: the body needed its "
            "index's value, or its carries are not of one float dtype, so the loop was traced "
            "again as the Python loop and that first trace set aside. Return such values from "
            "the body (the carry), or write the loop as a Python for loop")
    if any(t is x._trace for t in stack):  # a closure over an enclosing function's value
        _counts.n = outer_uses() + 1
        raise OuterTracerError(
            "a traced value of an enclosing function was used while hybridad traced another "
            "function inside it: hybridad.gradient, hvp, hessian and jacobian differentiate "
            "such a function inside the enclosing trace, but a plan compiled or called there "
            "(hybridad.compile, plan.gradient) cannot close over the enclosing function's "
            "traced values -- pass them as arguments")
    raise TracingError("a traced value escaped its trace (was it stored in a global or "
                       "closure during an earlier trace?)")


def outer_uses():
    """How many times this thread's traces met a value of an enclosing trace
    (:class:`~hybridad.errors.OuterTracerError`, counted even where code on the
    way swallows the error): :func:`hybridad.plans.nested.plan_or_nested`
    compares it around a plan's build."""
    return getattr(_counts, "n", 0)
