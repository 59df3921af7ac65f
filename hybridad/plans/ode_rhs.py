"""The right-hand side of an ODE compiled: the ``"numba"`` evaluator of
:data:`hybridad.ops.ode.EVALUATORS`, which a numba plan's ``ode`` nodes use
(registered when the plans are imported: it lowers and compiles a graph as a
plan does).

scipy's solver calls the right-hand side a few hundred to a few thousand
times a solve, and the adjoint sweep as many again: each call of the
reference evaluator is one numpy call per node of the body (tens of
microseconds), each call of this one a compiled program of the body's
graph, lowered (fused) like a plan's, serial, into its own preallocated
workspace (a microsecond or two).  The body is replayed into a trace of its
own first: lowering rewrites nodes in place, and the body's graph stays as
traced (the reference evaluator, the node's pickle and its digest read it).
"""

from __future__ import annotations

import numpy as np

from ..core.trace import Trace
from ..ops.loop import replay
from ..ops.ode import EVALUATORS
from ..transforms import pipeline
from ..backends.numba.machine import lowering_machine
from ..backends.numba.threshold import serial_loops

__all__ = ["compiled_rhs"]


def compiled_rhs(body):
    """``bound(consts) -> call(*variables) -> output`` of ``body``'s graph, compiled
    (the array returned is a buffer of that ``call``'s own, overwritten by its
    next call; the program's workspace is shared: the caller locks)."""
    from ..backends.numba import build_program
    from ..backends.numba.layouts import plan_numba_memory

    g = body.graph
    trace = Trace()
    with trace:
        inputs = [trace.input(i, n.shape, n.dtype) for i, n in enumerate(g.inputs)]
        outs = replay(g, trace, inputs)
    graph = pipeline.lower(trace.nodes, [t.node for t in inputs], [t.node for t in outs],
                           "numba", machine=lowering_machine("numba"))
    memory = plan_numba_memory(graph)
    buffers = memory.allocate(np)
    in_specs = [(n.shape, n.dtype) for n in g.inputs]
    out_specs = [(n.shape, n.dtype) for n in g.outputs]
    with serial_loops(True):
        program = build_program(graph.nodes, graph.inputs, graph.outputs, memory, buffers,
                                in_specs, out_specs, name="ode_rhs_program",
                                label="an ODE's right-hand side")
    fn, objects = program.fn, program.objects

    def bound(consts):
        result = np.empty(*out_specs[0])  # (this solve's own: threads solve apart)
        tail = [*consts, result]
        ids = [id(a) for a in tail]  # (kept alive by tail)

        def call(*variables):
            if not program.heavy:  # (as they are: the program checks each argument)
                try:
                    if objects:
                        fn(*[id(v) for v in variables], *ids)
                    else:
                        fn(*variables, *tail)
                    return result
                except (TypeError, ValueError):
                    pass  # (another layout or dtype: staged by run)
            program.run([*variables, *consts], [result])
            return result
        call.keep, call.owned = tail, True
        return call

    bound.program = program  # (kept alive with its workspace)
    return bound


EVALUATORS["numba"] = compiled_rhs
