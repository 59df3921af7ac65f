"""Core stage: tracing plain numpy code into an IR graph.

While ``f`` runs once on :class:`~hybridad.core.tracer.Tracer` objects,
every operation becomes a :class:`~hybridad.ir.graph.Node` appended to the
current :class:`Trace` through :func:`bind`; Python loops unroll.  This
module holds the trace itself, :func:`bind` (apply a primitive: operands cast
to the ufunc loop's dtypes, algebraic identities, folding of constants) and
:func:`as_node` (an operand as a node).

Shapes and dtypes are computed abstractly by each op's shape rule (no data is
computed while tracing).  Python scalars are *weak* (numpy 2's NEP 50): they
take the dtype of the array they meet, so float32 code stays float32.

Constants: a Python scalar, or any expression of constants only, is a
*literal* and is folded.  An ndarray that ``f`` reads from its closure or
globals is *captured by reference*: the plan keeps the array object, so an
in-place change (``A[...] = ...``) is seen by the next call.  Everything
else ``f`` reads besides its arguments (a rebound name, a changed
attribute, ...) is checked before every call by the plan's guards
(:mod:`hybridad.frontend.guards`).
"""

from __future__ import annotations

import gc
import itertools
import numbers
import operator
import threading

import numpy as np

from .._forksafe import Lock
from ..errors import TracingError, user_location
from .escapes import escaped
from ..ir.graph import Node
from ..ir.registry import REGISTRY, may_raise
from .decisions import decide_raises
from .observe import paused
from .supported import SUPPORTED_DTYPES, check_dtype, refuse_subclass
from .tracer import ARG, SCALAR, SURFACE, Tracer

__all__ = ["Trace", "as_node", "bind", "current_trace", "loop_dtypes", "static_attrs",
           "tracing"]

_ID = operator.attrgetter("id")
_new_node = Node.__new__

_state = threading.local()


def tracing():
    """Whether a trace is active on this thread."""
    return bool(getattr(_state, "stack", None))


def current_trace():
    stack = getattr(_state, "stack", None)
    if not stack:
        raise TracingError("no active trace: hybridad operations only work inside a traced "
                           "function")
    return stack[-1]


#: called when an outermost trace begins on a thread (the scipy surface installs its
#: wrappers for scipy modules imported since: :mod:`.scipy_special`; numpy's
#: constructors are wrapped: :mod:`.numpy_construct`)
ON_ENTER = []
#: called when the outermost trace of a thread ends (after every ON_ENTER of it:
#: :mod:`.numpy_construct` restores numpy's constructors when no trace is left)
ON_EXIT = []


class Trace:
    """The graph under construction: nodes in creation (= topological) order."""

    def __init__(self):
        self.nodes = []
        self.ids = itertools.count()
        self.phase = "forward"
        self._captured = {}  # id(array) -> (array, node): one node per captured array
        self._seen = {}  # common subexpressions: key -> node (forward phase only)
        self._statics = {}  # (op, static attributes) -> a number (:meth:`static_id`)
        self._gone = None  # what passes took out (:meth:`forget`)
        #: the traced call's leaf arrays by input index, when the trace has them:
        #: Python decisions on traced values then take their values
        #: (:mod:`hybridad.core.decisions`); None: shapes and dtypes only
        self.concrete = None
        #: the input indices a plan differentiates (None: every input); a value none
        #: of them reaches may be taken as a number (:func:`.decisions.decide_constant`)
        self.differentiated = None
        self.decisions = []  # the Decision of each value taken, in order
        self.decision_cache = {}  # node id -> value, for those evaluations
        #: the frontend's memo of what a call added (:mod:`hybridad.frontend.replay`)
        self.recipes = {}
        #: node id -> the replayed step that made it (an int; nodes of one step have
        #: the same op, attrs dict, shape, dtype and operand shapes and dtypes: what
        #: :mod:`hybridad.transforms.rolling` compares), for nodes a replay made;
        #: also for the rows ``x[i]`` a loop over an array's rows took, numbered by
        #: the array's shape and dtype: their attributes differ, and ``rows`` holds
        #: each one's ``i`` (node id -> int)
        self.steps = {}
        self.rows = {}
        #: integer nodes known to lie in ``[0, n)`` -- node id -> ``n`` (``argmax``,
        #: ``argmin``, ``argsort`` and views of them): an index by one into an axis of
        #: length ``n`` or more needs no range check
        #: (:func:`hybridad.frontend.numpy_masked.in_range_positions`)
        self.bounded = {}
        #: writes of one slab into an array (``out[k] = v``, ``U[:, k] = v``): the new
        #: array's node id -> ``(array node, k, the slab node (a unit axis at axis), the
        #: slices of the array the write read, axis)``
        #: (:mod:`hybridad.transforms.row_writes` forwards them)
        self.row_writes = {}
        #: a view of a literal constant, folded into a constant of its own (:func:`bind`):
        #: its node id -> ``(the literal's node, view op, attributes)``, for
        #: :func:`hybridad.frontend.objects.settle` to link the two tracers as numpy's
        #: view and its base (a write through ``row = A[0]`` reaches ``A``)
        self.folded_views = {}
        #: whether the frontend may record composite ops (:attr:`Op.lower`) into this
        #: trace: a plan's trace, which :meth:`lower_composites` lowers once rolled
        self.composites = False

    def __enter__(self):
        if not hasattr(_state, "stack"):
            _state.stack = []
        if not _state.stack:
            _collector_paused(True)
            for hook in ON_ENTER:
                hook()
        _state.stack.append(self)
        return self

    def __exit__(self, *exc):
        _state.stack.pop()
        if not _state.stack:
            try:
                for hook in ON_EXIT:
                    hook()
            finally:
                _collector_paused(False)

    def add(self, op, args, attrs, shape, dtype, static=None):
        """Append a node -- or return the identical one traced before.

        Common subexpressions (``x[:-1]`` written twice) are merged while
        the *forward* graph is traced: every forward op is pure.  The reverse
        pass is never merged, because it accumulates adjoints in place into
        buffers it created (see :mod:`hybridad.transforms.autodiff`).
        ``static``: :meth:`static_id` of ``op`` and its :func:`static_attrs`,
        when the caller has it (it is computed otherwise; a row ``x[i]`` of a
        loop over ``x``'s rows passes ``~i``, a number no static_id is) -- and
        then ``shape`` and ``dtype`` are a node's own (a tuple of ints, a numpy
        dtype)."""
        if self.phase != "forward":
            key = None
        elif static is None:
            number = self.static_id(op, static_attrs(op, attrs))
            key = None if number is False else (number, *[a.id for a in args])
        else:
            args = tuple(args)
            if static is False:
                key = None
            elif len(args) == 1:
                key = (static, args[0].id)
            elif len(args) == 2:
                key = (static, args[0].id, args[1].id)
            else:
                key = (static, *[a.id for a in args])
        if key is not None:
            hit = self._seen.get(key)
            if hit is not None and (self._gone is None or not self._was_forgotten(hit)):
                return hit
        if static is None:
            node = Node(next(self.ids), op, args, attrs, shape, dtype, self.phase)
        else:  # (a replayed call's: the shape and dtype of a node, operands a tuple --
            # Node.normalized, inlined: a call fewer per node of a loop's 10^5)
            node = _new_node(Node)
            node.id, node.op, node.args, node.attrs = next(self.ids), op, args, attrs
            node.shape, node.dtype, node.phase = shape, dtype, self.phase
        self.nodes.append(node)
        if key is not None:
            self._seen[key] = node
        return node

    def known_as(self, static, args, node):
        """Find ``node`` -- made under another key -- as a common subexpression
        of ``args`` under ``static`` too (a replayed read keys its nodes its own
        way: the first, made by the numpy surface, is found by it)."""
        if self.phase == "forward":
            self._seen.setdefault((static, *[a.id for a in args]), node)

    def static_id(self, op, static):
        """This trace's number for ``op`` with the attributes ``static``
        (:func:`static_attrs`; False, never merged, stays False): the part of a
        common-subexpression key that is not the operands (a small int, which
        a key hashes without going through the attributes again)."""
        if static is False:
            return False
        k = (op, static)
        number = self._statics.get(k)
        if number is None:
            number = self._statics[k] = len(self._statics) + 1
        return number

    def add_steps(self, steps, operands):
        """The nodes of a replayed call (:mod:`hybridad.frontend.replay`) in the
        forward phase, each added as :meth:`add` adds it given ``static`` (a
        :meth:`static_id`) -- or found, the identical node traced before:
        ``steps`` ``(op, refs, attrs, shape, dtype, static, number)``, where a
        ref is an index into ``operands`` (an int >= 0), an earlier step
        (``~j``) or a node.  Each node this call makes (or one it made
        before) gets ``number`` in :attr:`steps`.  Returns the nodes, one per
        step.  (One loop here, not a call of :meth:`add` per node: a loop of
        10^4 steps replays 10^5.)"""
        made = []
        seen, numbered, nodes, ids, gone = self._seen, self.steps, self.nodes, self.ids, \
            self._gone
        for op, refs, attrs, shape, dtype, static, number in steps:
            if len(refs) == 1:
                r = refs[0]
                args = (r if type(r) is not int else operands[r] if r >= 0 else made[~r],)
                key = None if static is False else (static, args[0].id)
            elif len(refs) == 2:
                r, q = refs
                args = (r if type(r) is not int else operands[r] if r >= 0 else made[~r],
                        q if type(q) is not int else operands[q] if q >= 0 else made[~q])
                key = None if static is False else (static, args[0].id, args[1].id)
            else:
                args = tuple([r if type(r) is not int else operands[r] if r >= 0 else made[~r]
                              for r in refs])
                key = None if static is False else (static, *[a.id for a in args])
            if key is not None:
                hit = seen.get(key)
                if hit is not None and (gone is None or not self._was_forgotten(hit)):
                    if hit.attrs is attrs:  # (made by this step before)
                        numbered[hit.id] = number
                    made.append(hit)
                    continue
            node = _new_node(Node)
            node.id, node.op, node.args, node.attrs = next(ids), op, args, attrs
            node.shape, node.dtype, node.phase = shape, dtype, "forward"
            nodes.append(node)
            if key is not None:
                seen[key] = node
            numbered[node.id] = number
            made.append(node)
        return made

    def lower_composites(self):
        """Replace each composite node by the primitives it stands for, in
        place (:func:`hybridad.core.composites.lower`); no more composites are
        recorded into this trace after it."""
        from .composites import lower

        self.composites = False
        self.recipes.clear()  # (a recipe may hold one)
        lower(self)

    def forget(self, nodes, kept=()):
        """The nodes of ``nodes`` other than those of ``kept`` left the trace (a
        pass replaced them): never found again as common subexpressions.
        (The lists are kept, and made a set of ids on the first hit that
        asks: a rolled loop takes 10^5 nodes out, which the memo holds, and
        most traces meet no common subexpression after it.)"""
        if self._gone is None:
            self._gone = [[], set()]
        self._gone[0].append((nodes, kept))

    def drop_forgotten(self):
        """Take what :meth:`forget` listed out of the memo at once (after a pass
        that forgot much: the nodes are freed, and no later garbage collection
        walks them)."""
        if self._gone is None:
            return
        nodes, seen = self.nodes, self._seen
        if 8 * len(nodes) < len(seen):  # (most of the memo gone: a rolled loop's 10^5
            kept = {}  # nodes -- what the live nodes' own keys find, looked up)
            for n in nodes:
                if n.phase != "forward":
                    continue
                if n.op == "const":  # (small literals: by value, as const() keys them)
                    key = _const_key(n.attrs["value"]) if n.attrs.get("literal") else None
                else:  # (a node whose operands a pass rewrote: found no more)
                    number = self.static_id(n.op, static_attrs(n.op, n.attrs))
                    key = None if number is False else (number, *[a.id for a in n.args])
                if key is not None and seen.get(key) is n:
                    kept[key] = n
            self._seen = kept
        else:
            live = set(map(_ID, nodes))
            self._seen = {k: v for k, v in seen.items() if v.id in live}
        self._gone = None

    def _forgotten_ids(self):
        pending, ids = self._gone
        while pending:
            nodes, kept = pending.pop()
            ids.update(set(map(_ID, nodes)).difference(map(_ID, kept)))
        return ids

    def _was_forgotten(self, node):
        return node.id in self._forgotten_ids()

    def mark(self):
        """Where the trace is now, for :meth:`rollback`."""
        return len(self.nodes), len(self.decisions)

    def rollback(self, mark):
        """Drop what was traced since :meth:`mark` gave ``mark`` (an attempt
        at tracing ``f`` that is made again): its nodes, decisions and the
        memos that hold them; node ids go on from the first one dropped."""
        n, d = mark
        if len(self.nodes) > n:
            first = self.nodes[n].id
            dropped = {id(node) for node in self.nodes[n:]}
            del self.nodes[n:]
            self.ids = itertools.count(first)
            self._seen = {k: v for k, v in self._seen.items() if id(v) not in dropped}
            self._captured = {k: v for k, v in self._captured.items()
                              if id(v[1]) not in dropped}
            self.decision_cache = {k: v for k, v in self.decision_cache.items() if k < first}
            self.folded_views = {k: v for k, v in self.folded_views.items() if k < first}
            self.row_writes = {k: v for k, v in self.row_writes.items() if k < first}
            self.steps = {k: v for k, v in self.steps.items() if k < first}  # (ids reused)
            if self._gone is not None:
                self._gone = [[], {k for k in self._forgotten_ids() if k < first}]
            self.rows = {k: v for k, v in self.rows.items() if k < first}
            self.bounded = {k: v for k, v in self.bounded.items() if k < first}
        del self.decisions[d:]
        self.recipes.clear()

    def captured(self):
        """The arrays the trace captured by reference (its non-literal
        constants), in the order it met them -- without a pass over the
        nodes (a loop's trace has 10^5)."""
        return [value for value, _ in self._captured.values()]

    def input(self, index, shape, dtype):
        return Tracer(self.add("input", (), {"index": index}, shape, dtype), self, ARG)

    def const(self, value, literal, unique=False):
        """The constant node of ``value``: ``literal`` (a value the plan holds, folded
        with other literals, a small one merged with an equal one) or by reference (an
        array f reads; a broadcast view as its compact part and a view node: compiled
        code reads a constant at its address).  ``unique``: a literal never merged."""
        if not literal:
            hit = self._captured.get(id(value))
            if hit is not None and hit[0] is value:
                return hit[1]
            spread = [st == 0 < n - 1 for st, n in zip(value.strides, value.shape, strict=True)]
            if any(spread):
                at = tuple(slice(0, 1) if s else slice(None) for s in spread)
                return self.add("broadcast_to", (self.const(value[at], False),),
                                {"shape": value.shape}, value.shape, value.dtype)
        value = np.asarray(value)
        if value.dtype not in SUPPORTED_DTYPES:
            check_dtype(value.dtype, "an array captured by the traced function (a global, "
                        "closure or constant operand)" if not literal else "a constant",
                        where=user_location)
        key = _const_key(value) if literal and not unique and value.size <= 16 and \
            self.phase == "forward" else None
        hit = self._seen.get(key) if key is not None else None
        if hit is not None and (self._gone is None or not self._was_forgotten(hit)):
            return hit
        node = self.add("const", (), {"value": value, "literal": literal}, value.shape,
                        value.dtype)
        if key is not None:
            self._seen[key] = node
        if not literal:
            self._captured[id(value)] = (value, node)
        return node


_gc_lock = Lock()
_gc_paused = [0, False]  # traces running on any thread; whether gc was enabled before


def _collector_paused(pause):
    """Python's cyclic garbage collector is paused while any thread traces
    (and resumed, if it ran before, when the last trace ends): a trace makes
    tens of thousands of nodes and tracers that live until it ends, and each
    collection of the oldest generation walked all of them again -- a
    tenth of a Python loop's tracing time at 10^4 steps.  Memory freed by
    reference counting is freed as always; cycles wait for the trace's end."""
    with _gc_lock:
        if pause:
            if _gc_paused[0] == 0:
                _gc_paused[1] = gc.isenabled()
                gc.disable()
            _gc_paused[0] += 1
        else:
            _gc_paused[0] -= 1
            if _gc_paused[0] == 0 and _gc_paused[1]:
                gc.enable()


def _const_key(value):
    """The common-subexpression key of a small literal constant: its value."""
    return ("const", value.dtype.str, value.shape, value.tobytes())


def static_attrs(op, attrs):
    """The attributes part of an application's common-subexpression key, or
    False where it is never merged (inputs, constants, in-place ops,
    attributes that are arrays or objects)."""
    if op in ("input", "const") or REGISTRY[op].kind == "inplace":
        return False
    items = []
    for name in sorted(attrs):
        value = _static(attrs[name])
        if value is None and attrs[name] is not None:
            return False
        items.append((name, value))
    return tuple(items)


def _static(value):
    """``value`` as a hashable plain value (slices spelled out), or None."""
    if value is None or isinstance(value, (str, np.dtype, type(Ellipsis))):
        return value
    if isinstance(value, np.generic):
        return (value.dtype.str, value.item())
    if isinstance(value, (bool, int, float)):
        return (type(value).__name__, value)
    if isinstance(value, slice):
        return ("slice", value.start, value.stop, value.step)
    if isinstance(value, tuple):
        if all(type(v) is int for v in value):  # (shapes, axes: the common case)
            return ("ints",) + value
        out = tuple(_static(v) for v in value)
        lost = any(o is None and v is not None for o, v in zip(out, value, strict=True))
        return None if lost else ("tuple",) + out
    return None


# ----------------------------------------------------------------------------
# operand conversion and dtype rules
# ----------------------------------------------------------------------------

_PY_SCALARS = (bool, int, float, complex)


def _weak_type(x):
    """The dtype-or-Python-type numpy uses for promotion (Python scalars are weak)."""
    if isinstance(x, Tracer):
        return x.node.dtype
    if isinstance(x, Node):
        return x.dtype
    if type(x) is bool:  # not weak in numpy 2 (NEP 50): numpy's bool
        return np.dtype(np.bool_)
    if type(x) in _PY_SCALARS:
        return type(x)
    if isinstance(x, numbers.Number) and not isinstance(x, np.generic):
        return float
    return np.asarray(x).dtype


#: (ufunc, operand dtypes or weak Python types) -> numpy's loop dtypes (a trace
#: asks the same few questions thousands of times: one per op)
_LOOPS = {}


def loop_dtypes(ufunc, args):
    """The (inputs..., output) dtypes numpy's ufunc loop uses for these operands."""
    key = (ufunc, *(_weak_type(a) for a in args))
    hit = _LOOPS.get(key)
    if hit is not None:
        return hit
    try:
        dts = ufunc.resolve_dtypes(key[1:] + (None,) * ufunc.nout)
    except (TypeError, np._core._exceptions._UFuncNoLoopError) as err:  # type: ignore
        raise TypeError(f"np.{ufunc.__name__} does not support operands of dtypes "
                        f"{list(key[1:])}: {err}") from None
    if len(_LOOPS) < 4096:
        _LOOPS[key] = dts
    return dts


def _escaped(x):
    """Refuse a tracer of another trace (:func:`.escapes.escaped`)."""
    escaped(x, getattr(_state, "stack", None) or ())


def as_node(x, trace, dtype=None):
    """Turn an operand into a node: tracers pass through, scalars become literal
    constants (in ``dtype`` if given), arrays are captured by reference."""
    if isinstance(x, Tracer):
        if x._trace is trace:
            node = x.node
        elif getattr(trace, "lift", None) is not None:  # a loop body reads an outer value
            node = trace.lift(x)
        else:
            _escaped(x)
    elif isinstance(x, np.ndarray):
        if type(x) is not np.ndarray:  # (the location is a walk up the stack: only then)
            refuse_subclass(x, f"an array used in the traced function at {user_location()}")
        node = trace.const(x, literal=False)  # by reference, 0-d arrays included
    elif isinstance(x, (np.ndarray, np.generic, numbers.Number)):
        node = trace.const(np.asarray(x, dtype=dtype) if dtype is not None else x, True)
    elif isinstance(x, (list, tuple)):
        if any(isinstance(e, Tracer) for e in _flatten_seq(x)):
            if SURFACE.as_array is not None:  # (stacked as numpy lays the list out)
                return as_node(SURFACE.as_array(x), trace, dtype)
            raise TracingError(
                f"a list holding traced arrays was used as an array at {user_location()}; "
                "numpy cannot hand it to hybridad. Build it with np.stack(...) instead.")
        node = trace.const(np.asarray(x), literal=True)
    else:
        raise TypeError(f"cannot use an object of type {type(x).__name__} as an array")
    if dtype is not None and node.dtype != np.dtype(dtype):
        node = bind("cast", Tracer(node, trace), dtype=np.dtype(dtype)).node
    return node


def _flatten_seq(x):
    for e in x:
        if isinstance(e, (list, tuple)):
            yield from _flatten_seq(e)
        else:
            yield e


# ----------------------------------------------------------------------------
# bind: apply a primitive
# ----------------------------------------------------------------------------


def _is_literal_fill(node, value):
    """A literal constant (possibly seen through views) whose elements all equal ``value``."""
    while node.op in REGISTRY and REGISTRY[node.op].kind == "view":
        node = node.args[0]
    if not node.is_literal or node.size > 4096:
        return False
    held = node.attrs["value"]
    if held.size == 1:  # (the common case, a scalar literal: no reduction)
        return bool(held.reshape(()) == value)
    return bool(np.all(held == value))


def _simplify(opname, nodes, shape, dtype):
    """Algebraic identities that avoid work: x*1, 1*x, x+0, 0+x, x-0, x/1."""
    if len(nodes) != 2:
        return None
    a, b = nodes
    keep_a = opname in ("multiply", "safe_multiply", "true_divide") and _is_literal_fill(b, 1) \
        or opname in ("add", "subtract") and _is_literal_fill(b, 0)
    keep_b = opname in ("multiply", "safe_multiply") and _is_literal_fill(a, 1) or \
        opname == "add" and _is_literal_fill(a, 0)
    if keep_a and a.shape == shape and a.dtype == dtype:
        return a
    if keep_b and b.shape == shape and b.dtype == dtype:
        return b
    return None


def bind(opname, *args, **attrs):
    """Apply primitive ``opname`` to operands (tracers, arrays or scalars).

    Elementwise ufunc operands are cast to the ufunc's loop dtypes first, so
    every executed op runs without hidden casting buffers.  Ops on literal
    constants only are folded.  Returns a :class:`Tracer`.
    """
    with paused():  # hybridad's own work: not observed (see hybridad.core.observe)
        return _bind(opname, args, attrs)


def _bind(opname, args, attrs):
    trace = current_trace()
    op = REGISTRY[opname]
    if op.ufunc is not None:
        dts = loop_dtypes(op.ufunc, args)
        nodes = [as_node(a, trace, dt) for a, dt in zip(args, dts, strict=False)]
    else:
        nodes = [as_node(a, trace) for a in args]
    shape, dtype = op.abstract(*nodes, **attrs)
    # a 0-d result of a ufunc or a reduction is a numpy scalar (see settle)
    flags = SCALAR if shape == () and (op.ufunc is not None or op.kind == "reduce") else 0
    same = _simplify(opname, nodes, shape, np.dtype(dtype))
    if same is not None:
        return Tracer(same, trace, flags)
    if nodes and all(n.is_literal for n in nodes):
        if op.kind in ("elementwise", "reduce"):
            value = _evaluate(op, nodes, shape, dtype, attrs)
            return Tracer(trace.const(value, True), trace, flags)
        if op.kind == "view" and int(np.prod(shape)) <= 4096:
            value = np.array(op.view(nodes[0].attrs["value"], **attrs))
            node = trace.const(value, True, unique=True)
            trace.folded_views[node.id] = (nodes[0], opname, attrs)
            return Tracer(node, trace)
    node = trace.add(opname, nodes, attrs, shape, dtype)
    if op.raises and trace.concrete is not None and may_raise(node):
        decide_raises(node, trace)  # (inside a try of f: it fails here as numpy would)
    return Tracer(node, trace, flags)


def _evaluate(op, nodes, shape, dtype, attrs):
    out = np.empty(shape, dtype)
    with np.errstate(all="ignore"):
        op.run(out, *(n.attrs["value"] for n in nodes), **attrs)
    return out
