"""The intermediate representation: a flat, topologically ordered list of nodes.

One node type (:class:`Node`) that is both the operation and the value it
produces, like a jaxpr equation with a single out-variable.  A :class:`Graph`
is the ordered node list plus the designated inputs and outputs.  Every stage
after tracing (autodiff, memory plan, backends) consumes and produces graphs.

Node kinds:

* ``input``  -- a per-call argument leaf (``attrs['index']`` into the flat leaves)
* ``const``  -- an array known at trace time (``attrs['value']``); ``literal``
  constants (Python scalars, folded expressions) may be folded again, while
  ``captured`` arrays (closed over by ``f``) are held by reference and never
  folded, so in-place changes of the caller's array are seen on the next call.
* everything else names a primitive from :mod:`hybridad.ops`.
"""

from __future__ import annotations

import bisect
import math

import numpy as np

__all__ = ["Graph", "Node", "check", "check_writes", "clone_node", "computed_from", "copy_graph",
           "fed_by", "format_node", "named_by_region", "new_node", "redirect", "users_of",
           "write_hazards"]


class Node:
    """One operation and the array value it produces.

    Parameters
    ----------
    id : int
        Position-independent identifier, unique within a graph, and
        increasing in creation order while a trace records.  A graph's order
        is its node list's: a pass that inserts nodes gives them new ids (and
        so does the lowering of a composite, before the node it feeds).
    op : str
        Primitive name (``"input"``, ``"const"`` or a key of the op registry).
    args : tuple of Node
        Operands.
    attrs : dict
        Static attributes (axis, index, shape, ...).  Treated as immutable.
    shape : tuple of int
    dtype : numpy.dtype
    """

    __slots__ = ("args", "attrs", "dtype", "id", "op", "phase", "shape")

    def __init__(self, id, op, args, attrs, shape, dtype, phase="forward"):
        self.id = id
        self.op = op
        self.args = tuple(args)
        self.attrs = attrs
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.phase = phase

    @classmethod
    def normalized(cls, id, op, args, attrs, shape, dtype, phase):
        """A node from operands already in the node's own types (``args`` a
        tuple, ``shape`` a tuple of ints, ``dtype`` a numpy dtype): another
        node's, as a trace's replayed calls give them."""
        node = cls.__new__(cls)
        node.id, node.op, node.args, node.attrs = id, op, args, attrs
        node.shape, node.dtype, node.phase = shape, dtype, phase
        return node

    @property
    def size(self):
        return math.prod(self.shape)

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    @property
    def is_const(self):
        return self.op == "const"

    @property
    def is_literal(self):
        return self.op == "const" and self.attrs.get("literal", False)

    def __repr__(self):
        return format_node(self)


def _fmt_type(node):
    dims = ",".join(str(s) for s in node.shape)
    return f"{node.dtype.name}[{dims}]"


def _fmt_attr(key, val):
    if isinstance(val, np.ndarray):
        if val.size <= 4:
            return f"{key}={np.array2string(val, precision=6)}"
        return f"{key}=<array {val.dtype.name}{list(val.shape)}>"
    return f"{key}={val!r}"


def format_node(node):
    """One line: ``%7 = exp(%3) : float64[100]``."""
    args = ", ".join(f"%{a.id}" for a in node.args)
    attrs = [_fmt_attr(k, v) for k, v in sorted(node.attrs.items()) if k != "literal"]
    inner = ", ".join(x for x in (args, *attrs) if x)
    return f"%{node.id} = {node.op}({inner}) : {_fmt_type(node)}"


class Graph:
    """Topologically ordered nodes with designated inputs and outputs.

    Attributes
    ----------
    nodes : list of Node
        Every node, in a valid execution order.
    inputs : list of Node
        The ``input`` nodes, one per flat argument leaf.
    outputs : list of Node
        Nodes whose values the plan returns (value first, then derivatives).
    """

    __slots__ = ("inputs", "nodes", "outputs")

    def __init__(self, nodes, inputs, outputs):
        self.nodes = list(nodes)
        self.inputs = list(inputs)
        self.outputs = list(outputs)

    def __str__(self):
        lines = [f"inputs: {', '.join('%' + str(n.id) for n in self.inputs)}"]
        phase = None
        for node in self.nodes:
            if node.phase != phase:
                phase = node.phase
                lines.append(f"-- {phase} --")
            lines.append("  " + format_node(node))
        lines.append(f"outputs: {', '.join('%' + str(n.id) for n in self.outputs)}")
        return "\n".join(lines)

    def users(self):
        """Map node id -> list of nodes that read it."""
        return users_of(self.nodes)


def users_of(nodes):
    """Map node id -> list of the nodes of ``nodes`` that read it (once per operand)."""
    out = {n.id: [] for n in nodes}
    for n in nodes:
        for a in n.args:
            out[a.id].append(n)
    return out


def check(graph, rules=False):
    """Validate graph invariants; raise ``AssertionError`` on violation.

    Every operand is defined before use, ids are unique, inputs and outputs
    belong to the graph, and no in-place op writes into a constant's storage
    (a constant is the plan's, the same for every call).  With ``rules``
    (tests, ``HYBRIDAD_DEBUG``; see :mod:`hybridad.transforms.pipeline`)
    every node's shape and dtype are also
    computed again by its op's shape rule from its operands, as JAX's
    ``check_jaxpr`` does: a pass that rewires a node to operands of another
    shape or dtype is caught where it happens.
    """
    from .registry import REGISTRY

    seen = set()
    root = {}  # node id -> the node whose storage it is (through views, in-place ops)
    for node in graph.nodes:
        assert node.id not in seen, f"duplicate node id %{node.id}"
        for a in node.args:
            assert a.id in seen, f"%{node.id} uses %{a.id} before it is defined"
        seen.add(node.id)
        op = REGISTRY.get(node.op)
        kind = op.kind if op is not None else None
        if kind in ("view", "inplace") and node.args:
            root[node.id] = base = root.get(node.args[0].id, node.args[0])
            assert kind != "inplace" or base.op != "const", (
                f"%{node.id} = {node.op}(...) writes in place into the constant %{base.id}")
        if rules and op is not None:
            shape, dtype = op.abstract(*node.args, **node.attrs)
            assert tuple(shape) == tuple(node.shape) and np.dtype(dtype) == node.dtype, (
                f"%{node.id} = {node.op}(...) is {list(node.shape)} {node.dtype}, but its shape "
                f"rule gives {list(shape)} {np.dtype(dtype)} from its operands")
    for n in graph.inputs:
        assert n.op == "input" and n.id in seen, f"bad input %{n.id}"
    for n in graph.outputs:
        assert n.id in seen, f"output %{n.id} not in graph"
    return True


def check_writes(graph):
    """Raise ``AssertionError`` where a node reads a storage's old value after
    an in-place write into it (:func:`write_hazards`).  Checked on a lowered
    graph (tests, ``HYBRIDAD_DEBUG``): passes may move a read past a write --
    folding a region into an accumulation placed after an optimizer's in-place
    update of a parameter the region reads -- and the last one puts the writes
    back after their reads (:func:`hybridad.transforms.updates.order_writes`)."""
    hazards = write_hazards(graph.nodes)
    if hazards:
        w, r = (graph.nodes[k] for k in hazards[0])
        raise AssertionError(f"%{r.id} = {r.op}(...) reads the old value of what %{w.id} = "
                             f"{w.op}(...) wrote in place before it")


def write_hazards(nodes):
    """``[(w, r)]``: positions in ``nodes`` of an in-place write and of a later
    node that reads the value it overwrote -- the written storage through a
    name made before the write, without being computed from the write -- in
    the order of ``r``.  Linear in the nodes: each name's storage and the last
    write it sees are followed as the nodes come, and only a reader of a name
    that a later write made stale is checked further (a scan from that write
    to it: is it computed from the write?)."""
    from .registry import REGISTRY

    root, sees = {}, {}  # node id -> its storage's node; -> the position of the write it sees
    writes = {}  # storage node id -> positions of the in-place writes into it, in order
    parent = {}  # view or in-place node id -> the node it is a view of (or writes into)
    spans = {}  # node id -> the positions of its storage's elements it covers (or None)
    found = []
    for r, n in enumerate(nodes):
        for a in n.args:
            s = root.get(a.id, a)
            ws = writes.get(s.id)
            if not ws or sees.get(a.id, -1) >= ws[-1]:
                continue
            # the first write it misses into elements it reads (a write into other
            # elements of the storage -- another element of a packed result -- is none)
            missed = ws[bisect.bisect_right(ws, sees.get(a.id, -1)):bisect.bisect_left(ws, r)]
            w = next((w for w in missed if _overlap(_span(a, s, parent, spans),
                                                    _span(nodes[w], s, parent, spans))), None)
            if w is not None and nodes[r].id not in fed_by(nodes, w, r + 1):
                found.append((w, r))
                break
        op = REGISTRY.get(n.op)
        kind = op.kind if op is not None else None
        if kind in ("view", "inplace") and n.args:
            parent[n.id] = n.args[0]
            root[n.id] = root.get(n.args[0].id, n.args[0])
            sees[n.id] = r if kind == "inplace" else sees.get(n.args[0].id, -1)
            if kind == "inplace":
                writes.setdefault(root[n.id].id, []).append(r)
    return found


#: storages up to this many elements are compared element by element
#: (:func:`_overlap`); larger ones by the range of positions their views cover
SPAN_ELEMENTS = 1 << 16


def _span(node, storage, parent, spans):
    """The positions (flat, in ``storage``'s elements) that ``node`` -- a view
    of ``storage``, a chain of views and in-place writes from it, or
    ``storage`` itself -- covers, as an int array; None where a view's
    positions cannot be followed (then it may cover any)."""
    from .registry import REGISTRY

    if node.id in spans:
        return spans[node.id]
    chain = []
    while node.id != storage.id and node.id in parent:
        chain.append(node)
        node = parent[node.id]
    out = None
    if node.id == storage.id:
        try:
            pos = spans.get(("storage", storage.id))
            if pos is None:
                pos = spans["storage", storage.id] = np.arange(
                    storage.size, dtype=np.int64).reshape(storage.shape)
            for v in reversed(chain):
                op = REGISTRY[v.op]
                if op.kind == "view":  # (an in-place node covers what it writes into)
                    pos = np.asarray(op.view(pos, **v.attrs))
            out = pos
        except Exception:  # noqa: BLE001 -- a view numpy positions cannot take: any element
            out = None
    if chain:
        spans[chain[0].id] = out
    return out


def _overlap(a, b):
    """Whether two spans (:func:`_span`) share an element (None: may share)."""
    if a is None or b is None:
        return True
    if a.size == 0 or b.size == 0:
        return False
    if max(a.size, b.size) <= SPAN_ELEMENTS:
        return bool(np.isin(a, b).any())
    return not (a.max() < b.min() or b.max() < a.min())


def fed_by(nodes, w, stop):
    """Ids of ``nodes[w]`` and of the nodes in ``nodes[w + 1:stop]`` computed
    from it."""
    after = {nodes[w].id}
    for n in nodes[w + 1:stop]:
        if any(a.id in after for a in n.args):
            after.add(n.id)
    return after


def dead_code_elimination(graph):
    """Return a graph keeping only nodes the outputs depend on (inputs always kept)."""
    live = {n.id for n in graph.outputs}
    for node in reversed(graph.nodes):
        if node.id in live:
            live.update(a.id for a in node.args)
    live.update(n.id for n in graph.inputs)
    return Graph([n for n in graph.nodes if n.id in live], graph.inputs, graph.outputs)


def named_by_region(node, users):
    """Whether a ``region`` among ``users`` (those reading ``node``) names it
    as an input of its body: a pass that replaces ``node`` must leave it (the
    redirected operand and the body's input would then differ)."""
    return any(u.op == "region" and node in u.attrs["body"].inputs for u in users)


def computed_from(node, source):
    """Whether ``node`` is computed from ``source`` (is it, or reads it
    through its arguments).  Node ids rise in the order a trace makes nodes:
    the walk stops at the nodes made before ``source``."""
    todo, seen = [node], set()
    while todo:
        n = todo.pop()
        if n is source:
            return True
        if n.id > source.id and n.id not in seen:
            seen.add(n.id)
            todo.extend(n.args)
    return False


def redirect(nodes, replace):
    """Point every operand of ``nodes`` that ``replace`` (node id -> node)
    names at its replacement, in place (a pass that substitutes nodes)."""
    for n in nodes:
        if any(a.id in replace for a in n.args):
            n.args = tuple(replace.get(a.id, a) for a in n.args)


def new_node(node_id, op, args, attrs, phase):
    """A new node of registered ``op`` on ``args``, its shape and dtype from the
    op's rule (a pass's replacement nodes)."""
    from .registry import REGISTRY

    shape, dtype = REGISTRY[op].abstract(*args, **attrs)
    return Node(node_id, op, args, attrs, shape, dtype, phase)


def clone_node(node, id, args):
    """A new node like ``node`` with ``id`` and operands ``args`` (a tuple),
    its attributes copied one level; shape and dtype taken as they are (no
    conversion: a copy costs about 1 us, a third of :class:`Node`'s)."""
    new = Node.__new__(Node)
    new.id, new.op, new.args, new.attrs = id, node.op, args, dict(node.attrs)
    new.shape, new.dtype, new.phase = node.shape, node.dtype, node.phase
    return new


def copy_graph(graph):
    """A copy of ``graph`` made of new nodes (same ids, operands remapped,
    attributes copied one level): for passes that rewrite nodes in place
    (fusion makes regions of them) run on a graph that must stay as traced
    (a loop body, which its rules replay and Python decisions evaluate)."""
    new = {}
    for n in graph.nodes:
        new[n.id] = clone_node(n, n.id, tuple(new[a.id] for a in n.args))
    return Graph([new[n.id] for n in graph.nodes], [new[n.id] for n in graph.inputs],
                 [new[n.id] for n in graph.outputs])
