"""The ir stage: a flat, topologically ordered graph of typed nodes
(:mod:`.graph`), and the vocabulary its nodes are made of -- the registry of
primitive ops and their rules (:mod:`.registry`; the ops themselves are
declared in :mod:`hybridad.ops`)."""

from .graph import Graph, Node, check, dead_code_elimination, format_node

__all__ = ["Graph", "Node", "check", "dead_code_elimination", "format_node"]
