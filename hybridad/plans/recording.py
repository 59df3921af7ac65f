"""The traced graph of ``f``, kept for a second program of the same plan.

A plan may need a second program of another backend: the numpy reference
program of a tiered plan (:mod:`.tiered`), or the numpy twin that serves a
plan whose numba program is over the compile budget (:mod:`.staged`,
:meth:`Plan._serve_reference`).  That program must compute what the plan
computes, so it is built from the graph the plan traced -- never by calling
``f`` again, whose globals, closure or ``self`` may have changed since (a
second trace would then differentiate another function, unguarded).

:func:`record` copies the forward graph right after the trace (and rolling),
before the plan's backend passes rewrite its nodes in place (fusion makes
regions of them); :meth:`Recording.emit` puts a fresh copy of it into the
second plan's trace, on that trace's input nodes.  The second plan has no
guards of its own: the plan that owns it checks them before every call.
"""

from __future__ import annotations

from ..core.tracer import Tracer
from ..ir.graph import Graph, clone_node, copy_graph

__all__ = ["Recording", "record"]


class Recording:
    """A traced forward graph (see the module docstring).

    Attributes
    ----------
    graph : Graph
        The copied nodes; ``outputs`` holds the traced output of ``f``.
    guards, signature
        The owner's guards and graph signature at the trace (what
        :meth:`emit`'s plan reports; it never checks them itself).
    """

    __slots__ = ("graph", "guards", "signature")

    def __init__(self, graph, guards, signature):
        self.graph, self.guards, self.signature = graph, guards, signature

    def emit(self, trace):
        """The recorded nodes, copied into ``trace`` with ids of its own on its
        input nodes (made by the plan's ``_trace_args``, one per input index);
        returns the tracer of the output."""
        inputs = {n.attrs["index"]: n for n in trace.nodes if n.op == "input"}
        env = {}
        for n in self.graph.nodes:
            if n.op == "input":
                env[n.id] = inputs[n.attrs["index"]]
                continue
            node = clone_node(n, next(trace.ids), tuple(env[a.id] for a in n.args))
            trace.nodes.append(node)
            env[n.id] = node
        return Tracer(env[self.graph.outputs[0].id], trace)


def record(trace, out, guards, signature):
    """A :class:`Recording` of ``trace``'s nodes, ``out`` its output tracer."""
    nodes = list(trace.nodes)
    inputs = [n for n in nodes if n.op == "input"]
    return Recording(copy_graph(Graph(nodes, inputs, [out.node])), guards, signature)
